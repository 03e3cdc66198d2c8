// --save-interval's schedule (mds/flags/save_schedule.h): where it saves, what it refuses and how
// the refusals read; the flag through mds-train's parser; --exit-iteration / --exit-samples checks.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mds/flags/save_schedule.h"
#include "mds/flags/train_args.h"
#include "mds/util/error.h"
#include "test_support.h"
#include "flag_parse.h"

using mds::test::contains;

using namespace mds::flags;
using mds::flags_test::parse;

namespace {

std::vector<std::int64_t> saves(const SaveSchedule& s, std::int64_t until) {
    std::vector<std::int64_t> out;
    for (std::int64_t i = 1; i <= until; ++i)
        if (s.due(i)) out.push_back(i);
    return out;
}

// The message of the UsageError that `text` raises ("" when it parses).
std::string error_of(const std::string& text) {
    try {
        (void)parse_save_schedule(text);
    } catch (const mds::UsageError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("save schedule: one integer is Megatron's iteration % N == 0") {
    const SaveSchedule s = parse_save_schedule("5");
    CHECK(s == SaveSchedule::every(5));
    CHECK(s.ranges().empty());
    CHECK(s.default_interval() == 5);
    CHECK(saves(s, 20) == std::vector<std::int64_t>{5, 10, 15, 20});
    for (std::int64_t i = 1; i < 1000; ++i) CHECK(parse_save_schedule("7").due(i) == (i % 7 == 0));
    CHECK(s.interval_at(123456789) == 5);
    CHECK(parse_save_schedule("1_500") == SaveSchedule::every(1500));  // Python's int() form, as the other flags
    CHECK(parse_save_schedule(" 5 ") == SaveSchedule::every(5));
    CHECK(s.to_string() == "5");
}

TEST_CASE("save schedule: ranges keep the multiple-of-N rule, the bare N covers the rest") {
    const SaveSchedule s = parse_save_schedule("2@1-6,3@7-12,5");
    CHECK(saves(s, 20) == std::vector<std::int64_t>{2, 4, 6, 9, 12, 15, 20});
    CHECK(s.interval_at(1) == 2);
    CHECK(s.interval_at(6) == 2);
    CHECK(s.interval_at(7) == 3);
    CHECK(s.interval_at(12) == 3);
    CHECK(s.interval_at(13) == 5);
    CHECK(s.to_string() == "2@1-6,3@7-12,5");
    // Order of the items does not matter; the bare N may come first.
    CHECK(parse_save_schedule("5, 3@7-12 ,2@1-6") == s);
    // tr1-13B's three rounds.
    const SaveSchedule tr1 = parse_save_schedule("10@1-100,18@101-1000,1500");
    const auto t = saves(tr1, 3000);
    CHECK(t.front() == 10);
    CHECK(t[9] == 100);
    CHECK(t[10] == 108);  // 18 * 6: the first multiple of 18 in 101..1000
    CHECK(tr1.due(990));
    CHECK_FALSE(tr1.due(1000));  // 1000 % 18 != 0
    CHECK(tr1.due(1500));
    CHECK(tr1.due(3000));
    CHECK_FALSE(tr1.due(1001));
}

TEST_CASE("save schedule: without a bare N, iterations outside every range do not save") {
    const SaveSchedule s = parse_save_schedule("2@3-6,4@20-40");
    CHECK(saves(s, 50) == std::vector<std::int64_t>{4, 6, 20, 24, 28, 32, 36, 40});
    CHECK_FALSE(s.default_interval());
    CHECK_FALSE(s.interval_at(1));
    CHECK_FALSE(s.interval_at(10));
    CHECK_FALSE(s.interval_at(41));
    CHECK(s.interval_at(20) == 4);
    // One-iteration ranges and adjacent ranges.
    const SaveSchedule one = parse_save_schedule("1@7-7,3@8-9");
    CHECK(saves(one, 20) == std::vector<std::int64_t>{7, 9});
    CHECK_FALSE(save_due(std::nullopt, 10));
    CHECK(save_due(one, 7));
}

TEST_CASE("save schedule: bad items are usage errors naming the item and what was expected") {
    struct Case {
        const char* text;
        const char* says;
    };
    const Case cases[] = {
        {"", "empty"},
        {"   ", "empty"},
        {",", "item 1 is empty"},
        {"5,", "item 2 is empty"},
        {"2@1-3,,5", "item 2 is empty"},
        {"10@", "the iteration range after '@' is missing"},
        {"2@1-3,10@", "item '10@': the iteration range"},
        {"10@5", "the iteration range '5': expected two whole numbers joined by one '-'"},
        {"@1-2", "the interval is missing"},
        {"10@-5", "the range start is missing"},
        {"10@5-", "the range end is missing"},
        {"10@5-1", "the range ends (1) before it starts (5)"},
        {"10@1-5,3@5-9", "the ranges 10@1-5 and 3@5-9 overlap (iteration 5 is in both)"},
        {"3@4-9,10@1-20", "overlap"},
        {"5,6", "a second bare interval (the first is 5)"},
        {"0", "must be at least 1"},
        {"0@1-5", "must be at least 1"},
        {"2@0-5", "the range start must be at least 1"},
        {"-5", "not a whole number"},
        {"abc", "'abc' is not a whole number"},
        {"1.5", "not a whole number"},
        {"2@1-5x", "the range end '5x'"},
        {"2 @1-5", "the interval '2 '"},
        {"2@1 - 5", "not a whole number"},
        {"10@1-2@3", "not a whole number"},
        {"1__0", "not a whole number"},
        {"_10", "not a whole number"},
        {"99999999999999999999", "too large"},
        {"2@1-99999999999999999999", "too large"},
        {"9223372036854775808", "too large"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.text);
        const std::string e = error_of(c.text);
        CHECK(contains(e, c.says));
        CHECK(contains(e, "--save-interval '" + std::string(c.text) + "'"));
    }
    // Every refusal of an item's form says which form is expected.
    CHECK(contains(error_of("10@"), "expected an integer N >= 1 or a comma list of N@A-B items"));
    CHECK(contains(error_of("10@5-1"), "1 <= A <= B"));
    // The largest numbers parse.
    CHECK(parse_save_schedule("9223372036854775807") == SaveSchedule::every(9223372036854775807LL));
    CHECK(parse_save_schedule("1@1-9223372036854775807").due(9223372036854775807LL));
    CHECK_THROWS_AS(SaveSchedule::every(0), mds::UsageError);
}

TEST_CASE("save schedule: every string of a small alphabet parses or fails with a UsageError, never otherwise") {
    const std::string alphabet = "12@-, _";
    std::vector<std::string> texts{""};
    for (int len = 1; len <= 5; ++len) {
        std::vector<std::string> next;
        for (const auto& t : texts)
            if (static_cast<int>(t.size()) == len - 1)
                for (char c : alphabet) next.push_back(t + c);
        texts.insert(texts.end(), next.begin(), next.end());
    }
    int parsed = 0;
    for (const auto& t : texts) {
        CAPTURE(t);
        try {
            const SaveSchedule s = parse_save_schedule(t);
            ++parsed;
            // What parses round-trips through its canonical text and has disjoint sorted ranges.
            CHECK(parse_save_schedule(s.to_string()) == s);
            for (std::size_t k = 1; k < s.ranges().size(); ++k) CHECK(s.ranges()[k - 1].last < s.ranges()[k].first);
        } catch (const mds::UsageError& e) {
            CHECK(contains(e.what(), "--save-interval"));
        }
    }
    CHECK(parsed > 10);
}

TEST_CASE("--save-interval through mds-train's parser: integer or schedule; a bad one fails the parse") {
    TrainArgs a;
    parse(a, {"--save-interval", "1500"});
    CHECK(a.checkpoint.save_interval == SaveSchedule::every(1500));
    TrainArgs b;
    parse(b, {"--save-interval", "10@1-100,18@101-1000,1500"});
    REQUIRE(b.checkpoint.save_interval);
    CHECK(b.checkpoint.save_interval->ranges().size() == 2);
    CHECK(b.checkpoint.save_interval->interval_at(500) == 18);
    TrainArgs c;
    parse(c, {"--save-interval", "3", "--save-interval", "2@1-4"});  // argparse keeps the last
    CHECK(c.checkpoint.save_interval == parse_save_schedule("2@1-4"));
    TrainArgs d;
    try {
        parse(d, {"--save-interval", "10@5-1"});
        FAIL("a bad schedule must fail the parse");
    } catch (const CLI::ParseError& e) {
        CHECK(contains(e.what(), "--save-interval '10@5-1'"));
        CHECK(contains(e.what(), "before it starts"));
    }
    TrainArgs e;
    parse(e, {"--exit-iteration", "7", "--exit-samples", "1_000"});
    CHECK(e.exit.exit_iteration == 7);
    CHECK(e.exit.exit_samples == 1000);
}
