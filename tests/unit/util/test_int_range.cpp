// Whole numbers and A-B ranges as flags spell them (mds/util/int_range.h).
#include <doctest/doctest.h>

#include <limits>

#include "mds/util/int_range.h"

TEST_CASE("int_range: whole numbers are decimal digits, Python's underscores only when asked") {
    CHECK(mds::parse_whole_number("0") == 0);
    CHECK(mds::parse_whole_number("1200") == 1200);
    CHECK(mds::parse_whole_number("9223372036854775807") == INT64_MAX);
    CHECK_FALSE(mds::parse_whole_number("9223372036854775808"));
    CHECK_FALSE(mds::parse_whole_number(""));
    CHECK_FALSE(mds::parse_whole_number("-1"));
    CHECK_FALSE(mds::parse_whole_number("+1"));
    CHECK_FALSE(mds::parse_whole_number(" 1"));
    CHECK_FALSE(mds::parse_whole_number("1.5"));
    CHECK_FALSE(mds::parse_whole_number("1_000"));
    CHECK(mds::parse_whole_number("1_000", true) == 1000);
    CHECK_FALSE(mds::parse_whole_number("1__0", true));
    CHECK_FALSE(mds::parse_whole_number("_1", true));
    CHECK_FALSE(mds::parse_whole_number("1_", true));
    CHECK(mds::whole_number_problem("") == "is missing");
    CHECK(mds::whole_number_problem("x1") == "'x1' is not a whole number");
    CHECK(mds::whole_number_problem("99999999999999999999") ==
          "'99999999999999999999' is too large (at most 9223372036854775807)");
}

TEST_CASE("int_range: A-B ranges, a bare A where allowed, and what is wrong with a bad one") {
    auto ok = [](std::string_view text, bool single = false) {
        const auto p = mds::parse_int_range(text, single);
        CHECK(p.problem.empty());
        return std::pair{p.range.first, p.range.last};
    };
    auto problem = [](std::string_view text, bool single = false) { return mds::parse_int_range(text, single).problem; };
    CHECK(ok("1001-1200") == std::pair<std::int64_t, std::int64_t>{1001, 1200});
    CHECK(ok("5-5") == std::pair<std::int64_t, std::int64_t>{5, 5});
    CHECK(ok("7", true) == std::pair<std::int64_t, std::int64_t>{7, 7});
    CHECK(problem("7") == "expected two whole numbers joined by one '-'");
    CHECK(problem("1-2-3") == "expected two whole numbers joined by one '-'");
    CHECK(problem("7-3") == "the range ends (3) before it starts (7)");
    CHECK(problem("a-3") == "the range start 'a' is not a whole number");
    CHECK(problem("3-") == "the range end is missing");
    CHECK(problem("-3") == "the range start is missing");
    CHECK(problem("", true) == "a number is missing");
    CHECK(problem("x", true) == "'x' is not a whole number");
    CHECK(problem("1-99999999999999999999").find("the range end '99999999999999999999' is too large") == 0);
    CHECK(mds::parse_int_range("1_0-2_0", false, true).range.last == 20);
}

TEST_CASE("int_range: doubles from files become int64 only within int64's range") {
    CHECK(mds::truncate_to_int64(5.0) == 5);
    CHECK(mds::truncate_to_int64(-5.9) == -5);
    CHECK(mds::truncate_to_int64(-9223372036854775808.0) == INT64_MIN);
    CHECK(mds::truncate_to_int64(9223372036854774784.0) == 9223372036854774784);  // the largest double below 2^63
    CHECK_FALSE(mds::truncate_to_int64(9223372036854775808.0));
    CHECK_FALSE(mds::truncate_to_int64(1e50));
    CHECK_FALSE(mds::truncate_to_int64(-1e19));
    CHECK_FALSE(mds::truncate_to_int64(std::numeric_limits<double>::quiet_NaN()));
    CHECK_FALSE(mds::truncate_to_int64(std::numeric_limits<double>::infinity()));
    CHECK(mds::exact_int64(4096.0) == 4096);
    CHECK_FALSE(mds::exact_int64(5.5));
    CHECK_FALSE(mds::exact_int64(1e50));
}
