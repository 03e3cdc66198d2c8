#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "mds/ckpt/ds_layout.h"
#include "mds/util/error.h"
#include "mds/util/files.h"
#include "test_support.h"

using mds::test::error_of;

using namespace mds::ckpt;

TEST_CASE("DeepSpeed checkpoint names are built as DeepSpeed builds them") {
    CHECK(ds_tag(200) == "global_step200");
    CHECK(ds_layer_file(1, 0) == "layer_01-model_00-model_states.pt");
    CHECK(ds_layer_file(74, 3) == "layer_74-model_03-model_states.pt");
    CHECK(ds_layer_file(103, 0) == "layer_103-model_00-model_states.pt");  // {:02d} pads only
    CHECK(ds_mp_rank_file(47) == "mp_rank_47_model_states.pt");
    CHECK(ds_mp_rank_file(5) == "mp_rank_05_model_states.pt");
    CHECK(ds_optim_file(true, 7, 47) == "bf16_zero_pp_rank_7_mp_rank_47_optim_states.pt");
    CHECK(ds_optim_file(false, 12, 0) == "zero_pp_rank_12_mp_rank_00_optim_states.pt");
}

TEST_CASE("DeepSpeed checkpoint names parse back, and other names do not") {
    const auto l = parse_ds_layer_file("layer_103-model_02-model_states.pt");
    REQUIRE(l);
    CHECK(l->layer == 103);
    CHECK(l->tp_rank == 2);
    CHECK_FALSE(parse_ds_layer_file("layer_1-model_00-model_states.pt"));
    CHECK_FALSE(parse_ds_layer_file("layer_01-model_states.pt"));
    CHECK_FALSE(parse_ds_layer_file("layer_01-model_00-model_states.pt.tmp"));
    CHECK(parse_ds_mp_rank_file("mp_rank_03_model_states.pt") == 3);
    CHECK_FALSE(parse_ds_mp_rank_file("mp_rank_3_model_states.pt"));
    const auto o = parse_ds_optim_file("bf16_zero_pp_rank_3_mp_rank_11_optim_states.pt");
    REQUIRE(o);
    CHECK(o->bf16);
    CHECK(o->dp_rank == 3);
    CHECK(o->mp_rank == 11);
    const auto old = parse_ds_optim_file("zero_pp_rank_0_mp_rank_00optim_states.pt");
    REQUIRE(old);
    CHECK_FALSE(old->bf16);
    CHECK_FALSE(parse_ds_optim_file("bf16_zero_pp_rank__mp_rank_00_optim_states.pt"));
    CHECK(parse_ds_tag("global_step1000") == 1000);
    CHECK_FALSE(parse_ds_tag("global_step1000_universal"));
    CHECK_FALSE(parse_ds_tag("global_step"));
}

TEST_CASE("latest is written without a newline and read stripped") {
    const auto dir = std::filesystem::temp_directory_path() / ("mds_ds_layout_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    CHECK_FALSE(read_latest_tag(dir.string()));
    write_latest_tag(dir.string(), "global_step10");
    CHECK(mds::read_file((dir / "latest").string()) == "global_step10");
    mds::write_file_atomic((dir / "latest").string(), " global_step20\n");
    CHECK(read_latest_tag(dir.string()) == std::optional<std::string>("global_step20"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("a tag read from latest is a plain folder name, never a path (issue 24)") {
    const auto dir = std::filesystem::temp_directory_path() / ("mds_ds_layout_tag_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "global_step5");
    const std::string root = dir.string(), latest = (dir / "latest").string();
    const std::pair<std::string, std::string> bad[] = {
        {"../../tagdir", "contains '/'"}, {"/etc", "contains '/'"},  {"..", "folder above"},
        {"  \n", "empty"},                {"global\x1b[2Jstep", "control bytes"}, {std::string("a\0b", 3), "control bytes"},
        {std::string(300, 'x'), "at most 255"},
    };
    for (const auto& row : bad) {
        const std::string& text = row.first;
        const std::string& why = row.second;  // a plain reference: CAPTURE's lambda cannot take a structured binding in clang 14
        CAPTURE(why);
        mds::write_file_atomic(latest, text);
        const std::string err = error_of([&] { read_latest_tag(root); });
        CHECK(err.find(why) != std::string::npos);
        CHECK(err.find("latest") != std::string::npos);
        // Nothing of the file reaches the terminal raw: control bytes come back as \xNN.
        for (unsigned char c : err) CHECK((c >= 0x20 && c < 0x7f));
    }
    mds::write_file_atomic(latest, std::string(5000, 'g'));
    CHECK(error_of([&] { read_latest_tag(root); }).find("at most 4096") != std::string::npos);
    std::filesystem::remove(latest);
    std::filesystem::create_directories(latest);  // a folder named latest
    CHECK(error_of([&] { read_latest_tag(root); }).find("not a regular file") != std::string::npos);
    std::filesystem::remove_all(latest);

    CHECK(checked_tag_dir(root, "global_step5", "--tag") == (dir / "global_step5").string());
    CHECK(error_of([&] { checked_tag_dir(root, "global_step6", "--tag"); }).find("is not a folder") != std::string::npos);
    CHECK(error_of([&] { checked_tag_dir(root, "../x", "--tag"); }).find("--tag") != std::string::npos);
    mds::write_file_atomic((dir / "afile").string(), "x");
    CHECK(error_of([&] { checked_tag_dir(root, "afile", "--tag"); }).find("is not a folder") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("plain_folder_path: the folder's own name is the last part") {
    CHECK(plain_folder_path("ckpt/global_step5/").string() == "ckpt/global_step5");
    CHECK(plain_folder_path("ckpt/./global_step5//").string() == "ckpt/global_step5");
    CHECK(plain_folder_path("a/b/..").string() == "a");
    const auto cwd = std::filesystem::current_path();
    CHECK(plain_folder_path(".") == cwd);
    CHECK(plain_folder_path("./") == cwd);
    CHECK(plain_folder_path("..") == cwd.parent_path());
    CHECK(plain_folder_path("/").filename().empty());
}
