// Progress formatting helpers (the bar and the plain lines print these).
#include <doctest/doctest.h>

#include "mds/util/progress.h"

TEST_CASE("progress: format_bytes uses decimal units") {
    CHECK(mds::format_bytes(0) == "0 B");
    CHECK(mds::format_bytes(999) == "999 B");
    CHECK(mds::format_bytes(1000) == "1.00 kB");
    CHECK(mds::format_bytes(1536000) == "1.54 MB");
    CHECK(mds::format_bytes(529e9) == "529.00 GB");
    CHECK(mds::format_bytes(1.2e12) == "1.20 TB");
    CHECK(mds::format_bytes(3e18) == "3000.00 PB");  // no unit past PB
}

TEST_CASE("progress: format_duration rounds to seconds") {
    CHECK(mds::format_duration(-5) == "0s");
    CHECK(mds::format_duration(0) == "0s");
    CHECK(mds::format_duration(12.4) == "12s");
    CHECK(mds::format_duration(59.6) == "1m00s");
    CHECK(mds::format_duration(185) == "3m05s");
    CHECK(mds::format_duration(3599.5) == "1h00m");
    CHECK(mds::format_duration(3725) == "1h02m");
    CHECK(mds::format_duration(100 * 3600.0) == "100h00m");
}

TEST_CASE("progress: an Off progress never draws") {
    mds::Progress p("documents", 100, mds::Progress::Mode::Off, 0.0);
    p.update(10, 50, 50);
    p.update(20, 100, 100);
    p.finish();
    p.finish();
    CHECK(p.elapsed_s() >= 0.0);
}
