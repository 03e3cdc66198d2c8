// cli.h: the one numeric check of every tool (nan, inf, signs, readable bounds) and last-wins for
// repeated single-value flags (as argparse, so Megatron command lines keep working).
#include <doctest/doctest.h>

#include <cfloat>
#include <limits>
#include <string>
#include <vector>

#include "mds/util/cli.h"

namespace {

// Runs `check` on `value`; returns the error text ("" when accepted).
std::string run_check(const CLI::Validator& check, std::string value) { return check(value); }

int parse(CLI::App& app, std::vector<std::string> args) {
    std::vector<char*> argv{const_cast<char*>("tool")};
    for (auto& a : args) argv.push_back(a.data());
    const auto rc = mds::parse_cli(app, static_cast<int>(argv.size()), argv.data());
    return rc ? *rc : -1;
}

}  // namespace

TEST_CASE("positive_number refuses nan, infinities, zero, negatives and junk") {
    const auto v = mds::positive_number();
    CHECK(run_check(v, "30").empty());
    CHECK(run_check(v, "0.5").empty());
    CHECK(run_check(v, "1e-3").empty());
    for (const char* bad : {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "0", "-1", "", "abc", "1x", "1e999"}) {
        CAPTURE(bad);
        CHECK_FALSE(run_check(v, bad).empty());
    }
    CHECK(run_check(v, "nan").find("not finite") != std::string::npos);
    CHECK(run_check(v, "0").find("greater than 0") != std::string::npos);
    CHECK(run_check(mds::non_negative_number(), "0").empty());
    CHECK_FALSE(run_check(mds::non_negative_number(), "-0.1").empty());
}

TEST_CASE("number_in prints its bounds readably") {
    const auto msg = run_check(mds::number_in(1, 1024), "2000");
    CHECK(msg.find("between 1 and 1024") != std::string::npos);
    const auto huge = run_check(mds::number_in(-DBL_MAX, DBL_MAX), "inf");
    CHECK(huge.size() < 200);
    CHECK(run_check(mds::number_in(2, std::numeric_limits<double>::infinity()), "1").find("at least 2") != std::string::npos);
    CHECK(mds::format_number(DBL_MAX) == "1.79769e+308");
    CHECK(mds::format_number(4294967295.0) == "4294967295");
    CHECK(mds::format_number(0.95) == "0.95");
    CHECK(mds::format_number(-3) == "-3");
}

TEST_CASE("a repeated single-value flag keeps the last value; repeatable ones keep all") {
    CLI::App app{"t"};
    double x = 0;
    std::vector<std::string> tags;
    app.add_option("--x", x)->check(mds::positive_number());
    app.add_option("--tag", tags);
    CHECK(parse(app, {"--x", "1", "--x", "2", "--tag", "a", "--tag", "b"}) == -1);
    CHECK(x == 2);
    CHECK(tags == std::vector<std::string>{"a", "b"});
    CLI::App bad{"t"};
    bad.add_option("--x", x)->check(mds::positive_number());
    CHECK(parse(bad, {"--x", "nan"}) == 2);
}
