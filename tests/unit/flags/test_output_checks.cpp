// mds-train's start-up check of its output folders (mds/flags/output_checks.h): which rank checks
// which flag's folder, and that a file in place of a folder, a folder under a file, or an
// unwritable folder fails with the flag named while nothing is created.
#include <doctest/doctest.h>

#include <sys/stat.h>  // chmod
#include <unistd.h>    // geteuid

#include <fstream>
#include <string>

#include "mds/flags/output_checks.h"
#include "mds/util/error.h"
#include "test_support.h"

using namespace mds::flags;

namespace {

std::string error_of(const TrainArgs& args, int rank = 0, int world = 1, int local_rank = 0) {
    try {
        check_output_folders(args, rank, world, local_rank);
    } catch (const mds::Error& e) {
        return e.what();
    }
    return "";
}

std::vector<std::string> flags_of(const std::vector<OutputFolder>& folders) {
    std::vector<std::string> out;
    for (const auto& f : folders) out.push_back(f.flag);
    return out;
}

}  // namespace

TEST_CASE("output checks: which rank writes which folder") {
    TrainArgs args;
    CHECK(output_folders(args, 0, 1, 0).empty());
    args.checkpoint.save = "ckpt";
    args.logging.tensorboard_dir = "tb";
    args.logging.codecarbon_dir = "carbon";
    CHECK(flags_of(output_folders(args, 0, 1, 0)) == std::vector<std::string>{"--save", "--tensorboard-dir", "--codecarbon-dir"});
    // 8 ranks on 2 nodes: every rank saves, the last writes TensorBoard, local rank 0 measures carbon.
    CHECK(flags_of(output_folders(args, 0, 8, 0)) == std::vector<std::string>{"--save", "--codecarbon-dir"});
    CHECK(flags_of(output_folders(args, 3, 8, 3)) == std::vector<std::string>{"--save"});
    CHECK(flags_of(output_folders(args, 4, 8, 0)) == std::vector<std::string>{"--save", "--codecarbon-dir"});
    CHECK(flags_of(output_folders(args, 7, 8, 3)) == std::vector<std::string>{"--save", "--tensorboard-dir"});
}

TEST_CASE("output checks: bad destinations fail with the flag named, nothing is created") {
    const auto dir = mds::test::scratch_dir("output-checks");
    const std::string file = (dir / "file").string();
    std::ofstream(file) << "x";
    TrainArgs args;
    args.checkpoint.save = (dir / "new" / "deeper" / "ckpt").string();  // missing folders: made at the first save
    args.logging.tensorboard_dir = (dir / "tb").string();
    args.logging.codecarbon_dir = dir.string();
    CHECK(error_of(args) == "");
    CHECK_FALSE(std::filesystem::exists(dir / "new"));
    CHECK_FALSE(std::filesystem::exists(dir / "tb"));

    args.checkpoint.save = file;
    CHECK(error_of(args) == "the --save folder '" + file + "' exists and is not a folder");
    args.checkpoint.save = dir.string();
    args.logging.tensorboard_dir = file + "/tb";
    CHECK(error_of(args).find("cannot create the --tensorboard-dir folder '" + file + "/tb'") == 0);
    CHECK(error_of(args, 0, 2, 0) == "");  // rank 0 of 2 writes no TensorBoard events
    args.logging.tensorboard_dir.clear();
    args.logging.codecarbon_dir = file;
    CHECK(error_of(args).find("--codecarbon-dir folder") != std::string::npos);

    if (::geteuid() != 0) {  // root writes into read-only folders; the integration test covers it with setpriv
        const auto ro = dir / "ro";
        std::filesystem::create_directory(ro);
        ::chmod(ro.c_str(), 0555);
        args.logging.codecarbon_dir.clear();
        args.checkpoint.save = ro.string();
        CHECK(error_of(args) == "cannot write into the --save folder: " + ro.string() + ": Permission denied");
        args.checkpoint.save = (ro / "sub").string();
        CHECK(error_of(args).find("cannot create the --save folder") == 0);
        ::chmod(ro.c_str(), 0755);
    }
    std::filesystem::remove_all(dir);
}
