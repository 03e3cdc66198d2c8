// Tag folders of a checkpoint root in step order (mds/ckpt/ds_checkpoint.h list_ds_tags), as
// mds-ckpt-shrink --all and mds-ckpt-to-hf --all list them.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "mds/ckpt/ds_checkpoint.h"
#include "mds/util/files.h"
#include "test_support.h"

using namespace mds::ckpt;
namespace fs = std::filesystem;

TEST_CASE("ds_tag_before: step numbers, not names, order the tags") {
    CHECK(ds_tag_before("global_step200", "global_step1000"));  // name order would swap these two
    CHECK_FALSE(ds_tag_before("global_step1000", "global_step200"));
    CHECK(ds_tag_before("global_step9", "global_step10"));
    CHECK_FALSE(ds_tag_before("global_step10", "global_step10"));
    // Equal numbers by name; then the names without a number, by name.
    CHECK(ds_tag_before("global_step1000", "global_step1000_universal"));
    CHECK(ds_tag_before("global_step1000_universal", "global_step2000"));
    CHECK(ds_tag_before("global_step99999", "global_step_best"));
    CHECK(ds_tag_before("global_step", "global_step_best"));
    CHECK_FALSE(ds_tag_before("global_step_best", "global_step5"));
    // Leading zeros count as numbers; the name breaks the tie.
    CHECK(ds_tag_before("global_step007", "global_step7"));
    CHECK(ds_tag_before("global_step7", "global_step08"));
    // Numbers past what a long long holds still order by value.
    CHECK(ds_tag_before("global_step999999999999999999", "global_step1000000000000000000000"));
    CHECK(ds_tag_before("global_step99999999999999999999998", "global_step99999999999999999999999"));
    CHECK_FALSE(ds_tag_before("global_step100000000000000000000000", "global_step99999999999999999999999"));
}

TEST_CASE("list_ds_tags: the global_step* folders in step order, bad names skipped with a reason") {
    const fs::path root = mds::test::scratch_dir("ds-tags");
    for (const char* t : {"global_step1000", "global_step200", "global_step30", "global_step1000_universal", "global_step_best"})
        fs::create_directories(root / t);
    fs::create_directories(root / "other");                         // not a tag
    mds::write_file_atomic((root / "global_step5").string(), "x");  // a file, not a folder
    fs::create_directories(root / "global_step7\x1b[2J");         // a control byte in the name
    fs::create_directory_symlink(root / "global_step30", root / "global_step40");  // a link to a folder counts

    std::vector<std::string> skipped;
    const auto tags = list_ds_tags(root.string(), [&](const std::string& why) { skipped.push_back(why); });
    CHECK(tags == std::vector<std::string>{"global_step30", "global_step40", "global_step200", "global_step1000",
                                           "global_step1000_universal", "global_step_best"});
    REQUIRE(skipped.size() == 1);
    CHECK(skipped[0].find("--all") != std::string::npos);
    CHECK(skipped[0].find("\\x1b") != std::string::npos);  // shown escaped, never raw
    CHECK(list_ds_tags(root.string()).size() == tags.size());  // no callback: skipped silently
    fs::remove_all(root);
}
