// DeepSpeed's curriculum scheduler (mds/flags/curriculum.h) against DeepSpeed itself: the change
// tables below are the output of deepspeed/runtime/data_pipeline/curriculum_scheduler.py, both the
// version BigScience ran (microsoft/DeepSpeed fbea7b49, PR #1440 "CL for big science") and the
// one in deepspeed 0.19.8 from PyPI, which agree on every step here. They were produced by loading
// that file alone (deepspeed.utils.logger stubbed, the package's constants.py) and calling
//     s = CurriculumScheduler(config)
//     for it in range(0, 40001): v = s.update_difficulty(it + 1)   # Megatron-DeepSpeed's call
// recording (it + 1, v) each time v changed. Every step up to 40001 is compared, not a sample.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mds/flags/curriculum.h"
#include "mds/flags/deepspeed_config.h"
#include "mds/util/error.h"

using namespace mds::flags;

namespace {

using Change = std::pair<std::int64_t, std::int64_t>;  // (first global step, difficulty from then on)

const std::vector<Change> kTr8bChanges = {
    {1, 64}, {146, 72}, {291, 80}, {436, 88}, {581, 96}, {726, 104}, {871, 112}, {1017, 120}, {1162, 128},
    {1307, 136}, {1452, 144}, {1597, 152}, {1742, 160}, {1888, 168}, {2033, 176}, {2178, 184}, {2323, 192},
    {2468, 200}, {2613, 208}, {2759, 216}, {2904, 224}, {3049, 232}, {3194, 240}, {3339, 248}, {3484, 256},
    {3630, 264}, {3775, 272}, {3920, 280}, {4065, 288}, {4210, 296}, {4355, 304}, {4500, 312}, {4646, 320},
    {4791, 328}, {4936, 336}, {5081, 344}, {5226, 352}, {5371, 360}, {5517, 368}, {5662, 376}, {5807, 384},
    {5952, 392}, {6097, 400}, {6242, 408}, {6388, 416}, {6533, 424}, {6678, 432}, {6823, 440}, {6968, 448},
    {7113, 456}, {7259, 464}, {7404, 472}, {7549, 480}, {7694, 488}, {7839, 496}, {7984, 504}, {8130, 512},
    {8275, 520}, {8420, 528}, {8565, 536}, {8710, 544}, {8855, 552}, {9000, 560}, {9146, 568}, {9291, 576},
    {9436, 584}, {9581, 592}, {9726, 600}, {9871, 608}, {10017, 616}, {10162, 624}, {10307, 632}, {10452, 640},
    {10597, 648}, {10742, 656}, {10888, 664}, {11033, 672}, {11178, 680}, {11323, 688}, {11468, 696}, {11613, 704},
    {11759, 712}, {11904, 720}, {12049, 728}, {12194, 736}, {12339, 744}, {12484, 752}, {12630, 760}, {12775, 768},
    {12920, 776}, {13065, 784}, {13210, 792}, {13355, 800}, {13500, 808}, {13646, 816}, {13791, 824}, {13936, 832},
    {14081, 840}, {14226, 848}, {14371, 856}, {14517, 864}, {14662, 872}, {14807, 880}, {14952, 888}, {15097, 896},
    {15242, 904}, {15388, 912}, {15533, 920}, {15678, 928}, {15823, 936}, {15968, 944}, {16113, 952}, {16259, 960},
    {16404, 968}, {16549, 976}, {16694, 984}, {16839, 992}, {16984, 1000}, {17130, 1008}, {17275, 1016},
    {17420, 1024}, {17565, 1032}, {17710, 1040}, {17855, 1048}, {18000, 1056}, {18146, 1064}, {18291, 1072},
    {18436, 1080}, {18581, 1088}, {18726, 1096}, {18871, 1104}, {19017, 1112}, {19162, 1120}, {19307, 1128},
    {19452, 1136}, {19597, 1144}, {19742, 1152}, {19888, 1160}, {20033, 1168}, {20178, 1176}, {20323, 1184},
    {20468, 1192}, {20613, 1200}, {20759, 1208}, {20904, 1216}, {21049, 1224}, {21194, 1232}, {21339, 1240},
    {21484, 1248}, {21630, 1256}, {21775, 1264}, {21920, 1272}, {22065, 1280}, {22210, 1288}, {22355, 1296},
    {22500, 1304}, {22646, 1312}, {22791, 1320}, {22936, 1328}, {23081, 1336}, {23226, 1344}, {23371, 1352},
    {23517, 1360}, {23662, 1368}, {23807, 1376}, {23952, 1384}, {24097, 1392}, {24242, 1400}, {24388, 1408},
    {24533, 1416}, {24678, 1424}, {24823, 1432}, {24968, 1440}, {25113, 1448}, {25259, 1456}, {25404, 1464},
    {25549, 1472}, {25694, 1480}, {25839, 1488}, {25984, 1496}, {26130, 1504}, {26275, 1512}, {26420, 1520},
    {26565, 1528}, {26710, 1536}, {26855, 1544}, {27000, 1552}, {27146, 1560}, {27291, 1568}, {27436, 1576},
    {27581, 1584}, {27726, 1592}, {27871, 1600}, {28017, 1608}, {28162, 1616}, {28307, 1624}, {28452, 1632},
    {28597, 1640}, {28742, 1648}, {28888, 1656}, {29033, 1664}, {29178, 1672}, {29323, 1680}, {29468, 1688},
    {29613, 1696}, {29759, 1704}, {29904, 1712}, {30049, 1720}, {30194, 1728}, {30339, 1736}, {30484, 1744},
    {30630, 1752}, {30775, 1760}, {30920, 1768}, {31065, 1776}, {31210, 1784}, {31355, 1792}, {31500, 1800},
    {31646, 1808}, {31791, 1816}, {31936, 1824}, {32081, 1832}, {32226, 1840}, {32371, 1848}, {32517, 1856},
    {32662, 1864}, {32807, 1872}, {32952, 1880}, {33097, 1888}, {33242, 1896}, {33388, 1904}, {33533, 1912},
    {33678, 1920}, {33823, 1928}, {33968, 1936}, {34113, 1944}, {34259, 1952}, {34404, 1960}, {34549, 1968},
    {34694, 1976}, {34839, 1984}, {34984, 1992}, {35130, 2000}, {35275, 2008}, {35420, 2016}, {35565, 2024},
    {35710, 2032}, {35855, 2040}, {36000, 2048},
};

const std::vector<Change> kRootChanges = {
    {1, 72}, {3, 80}, {7, 88}, {12, 96}, {18, 104}, {25, 112}, {35, 120}, {45, 128}, {57, 136}, {70, 144}, {85, 152},
    {100, 160}, {118, 168}, {137, 176}, {157, 184}, {178, 192}, {201, 200}, {225, 208}, {251, 216}, {278, 224},
    {307, 232}, {337, 240}, {368, 248}, {400, 256}, {435, 264}, {470, 272}, {507, 280}, {545, 288}, {585, 296},
    {625, 304}, {668, 312}, {712, 320}, {757, 328}, {803, 336}, {851, 344}, {900, 352}, {951, 360}, {1003, 368},
    {1057, 376}, {1112, 384}, {1168, 392}, {1225, 400}, {1285, 408}, {1345, 416}, {1407, 424}, {1470, 432},
    {1535, 440}, {1600, 448}, {1668, 456}, {1737, 464}, {1807, 472}, {1878, 480}, {1951, 488}, {2025, 496},
    {2101, 504}, {2178, 512}, {2257, 520}, {2337, 528}, {2418, 536}, {2500, 544}, {2585, 552}, {2670, 560},
    {2757, 568}, {2845, 576}, {2935, 584}, {3025, 592}, {3118, 600}, {3212, 608}, {3307, 616}, {3403, 624},
    {3501, 632}, {3600, 640}, {3701, 648}, {3803, 656}, {3907, 664}, {4012, 672}, {4118, 680}, {4225, 688},
    {4335, 696}, {4445, 704}, {4557, 712}, {4670, 720}, {4785, 728}, {4900, 736}, {5018, 744}, {5137, 752},
    {5257, 760}, {5378, 768}, {5501, 776}, {5625, 784}, {5751, 792}, {5878, 800}, {6007, 808}, {6137, 816},
    {6268, 824}, {6400, 832}, {6535, 840}, {6670, 848}, {6807, 856}, {6945, 864}, {7085, 872}, {7225, 880},
    {7368, 888}, {7512, 896}, {7657, 904}, {7803, 912}, {7951, 920}, {8100, 928}, {8251, 936}, {8403, 944},
    {8557, 952}, {8712, 960}, {8868, 968}, {9025, 976}, {9185, 984}, {9345, 992}, {9507, 1000}, {9670, 1008},
    {9835, 1016}, {10000, 1024},
};

const std::vector<Change> kDiscreteChanges = {
    {1, 128}, {101, 512}, {301, 1024},
};

const std::vector<Change> kEdgeChanges = {
    {1, 16}, {5, 24}, {10, 32}, {15, 40}, {20, 48}, {24, 56}, {29, 64}, {34, 72}, {39, 80}, {43, 88}, {48, 96},
    {53, 100},
};

CurriculumLearningConfig linear(std::int64_t min, std::int64_t max, std::int64_t total, std::int64_t step) {
    CurriculumLearningConfig c;
    c.enabled = true;
    c.min_difficulty = min;
    c.max_difficulty = max;
    c.schedule_type = "fixed_linear";
    c.total_curriculum_step = total;
    c.difficulty_step = step;
    return c;
}

// tr8b-104B-cl.slurm (bigscience-workshop/bigscience train/tr8b-104B/): min 64, max $SEQ_LEN 2048,
// fixed_linear, total_curriculum_step 36000, difficulty_step 8.
CurriculumLearningConfig tr8b() { return linear(64, 2048, 36000, 8); }

// Runs Megatron-DeepSpeed's sequence of update_difficulty(iteration + 1) calls and compares each
// step with the value DeepSpeed gave.
void check_against(CurriculumLearningConfig config, const std::vector<Change>& changes) {
    CurriculumScheduler s(std::move(config));
    std::size_t next = 0;
    std::int64_t expect = 0;
    for (std::int64_t it = 0; it <= 40000; ++it) {
        while (next < changes.size() && changes[next].first == it + 1) expect = changes[next++].second;
        const std::int64_t got = s.update_difficulty(it + 1);
        if (got != expect) {
            FAIL("step " << it + 1 << ": mds " << got << ", DeepSpeed " << expect);
        }
    }
    CHECK(next == changes.size());
}

}  // namespace

TEST_CASE("curriculum: tr8b-104B fixed_linear matches DeepSpeed at every step") {
    check_against(tr8b(), kTr8bChanges);
    // By hand: step 145 → 145/36000 × 1984 + 64 = 71.99 → 71 → rounded down to 64; step 146 → 72.05 → 72.
    CurriculumScheduler s(tr8b());
    CHECK(s.difficulty_at(0) == 64);
    CHECK(s.difficulty_at(145) == 64);
    CHECK(s.difficulty_at(146) == 72);
    CHECK(s.difficulty_at(18000) == 1056);  // half way: 992 + 64
    CHECK(s.difficulty_at(35999) == 2040);
    CHECK(s.difficulty_at(36000) == 2048);
    CHECK(s.difficulty_at(1'000'000'000'000) == 2048);  // far past the end: clamped, no overflow
}

TEST_CASE("curriculum: fixed_root, fixed_discrete and a max that is not a multiple of the step match DeepSpeed") {
    CurriculumLearningConfig root = linear(64, 1024, 10000, 8);
    root.schedule_type = "fixed_root";
    root.root_degree = 2;
    check_against(root, kRootChanges);

    CurriculumLearningConfig discrete;
    discrete.enabled = true;
    discrete.min_difficulty = 128;
    discrete.max_difficulty = 1024;
    discrete.schedule_type = "fixed_discrete";
    discrete.difficulties = {128, 512, 1024};
    discrete.max_steps = {100, 300};
    check_against(discrete, kDiscreteChanges);

    // max 100 with step 8: 96 from step 48 until the unrounded value passes 104 (step 53), then
    // the clamp gives 100.
    check_against(linear(16, 100, 50, 8), kEdgeChanges);
}

TEST_CASE("curriculum: the current difficulty only moves while below max") {
    // DeepSpeed's update_difficulty keeps a difficulty once it reached max_difficulty, so a
    // discrete schedule that goes down again stays at max.
    CurriculumLearningConfig c;
    c.enabled = true;
    c.min_difficulty = 128;
    c.max_difficulty = 512;
    c.schedule_type = "fixed_discrete";
    c.difficulties = {256, 128, 512};
    c.max_steps = {100, 200};
    CurriculumScheduler s(c);
    CHECK(s.current_difficulty() == 128);  // min_difficulty before the first update
    CHECK(s.update_difficulty(1) == 256);
    CHECK(s.update_difficulty(150) == 128);  // down again: below max, so recomputed
    CHECK(s.update_difficulty(201) == 512);
    CHECK(s.difficulty_at(1) == 256);
    CHECK(s.update_difficulty(1) == 512);  // at max: kept

    // State round trip.
    CurriculumScheduler t(tr8b());
    t.update_difficulty(20000);
    CurriculumScheduler u(tr8b());
    u.load_state(t.state());
    CHECK(u.current_difficulty() == t.current_difficulty());
    CHECK(u.current_difficulty() == 1160);  // 20000/36000 × 1984 + 64 = 1166.2 → 1160
}

TEST_CASE("curriculum: Megatron-DeepSpeed's step — seqlen of step iteration + 1, batch cut to it") {
    CurriculumScheduler s(tr8b());
    auto first = curriculum_step(s, 0, 2048);
    CHECK(first.curriculum_seqlen == 64);
    CHECK(first.batch_seq_length == 64);
    auto later = curriculum_step(s, 145, 2048);  // step 146
    CHECK(later.curriculum_seqlen == 72);
    auto done = curriculum_step(s, 50000, 2048);
    CHECK(done.curriculum_seqlen == 2048);
    CHECK(done.batch_seq_length == 2048);
    // A difficulty longer than the samples leaves them whole (Megatron cuts only when shorter).
    CurriculumScheduler w(linear(64, 4096, 10, 8));
    auto wide = curriculum_step(w, 100, 2048);
    CHECK(wide.curriculum_seqlen == 4096);
    CHECK(wide.batch_seq_length == 2048);
}

TEST_CASE("curriculum: config problems name the field") {
    auto problem = [](const CurriculumLearningConfig& c) {
        auto p = find_curriculum_config_problem(c);
        return p ? p->field + ": " + p->what : std::string();
    };
    CHECK(problem(tr8b()).empty());
    CHECK(problem(linear(100, 2048, 36000, 8)) ==
          "min_difficulty: min_difficulty 100 is not a multiple of difficulty_step 8 (DeepSpeed versions start at 96 or "
          "104); use one of those");
    CHECK(problem(linear(0, 2048, 36000, 8)) ==
          "min_difficulty: expected 0 < min_difficulty <= max_difficulty, found 0 and 2048");
    CHECK(problem(linear(64, 2048, 0, 8)) == "schedule_config.total_curriculum_step: expected a positive number of steps");
    CHECK(problem(linear(64, 2048, 100, 0)) == "schedule_config.difficulty_step: expected a positive step");
    auto root = tr8b();
    root.schedule_type = "fixed_root";
    CHECK(problem(root) == "schedule_config.root_degree: expected a positive root degree (2: square root)");
    auto discrete = tr8b();
    discrete.schedule_type = "fixed_discrete";
    discrete.difficulties = {64, 2048};
    discrete.max_steps = {10, 20};
    CHECK(problem(discrete) ==
          "schedule_config.difficulty: expected one more difficulty than schedule_config.max_step has steps (2), found 2");
    discrete.difficulties = {64, 128, 4096};
    CHECK(problem(discrete) ==
          "schedule_config.difficulty: expected difficulties between min_difficulty 64 and max_difficulty 2048, found 4096");
    auto custom = tr8b();
    custom.schedule_type = "custom";
    CHECK(problem(custom) == "schedule_type: \"custom\" is not supported (fixed_linear, fixed_root or fixed_discrete)");
    CHECK_THROWS_WITH_AS(CurriculumScheduler(linear(64, 2048, 36000, 0)),
                         "curriculum_learning.schedule_config.difficulty_step: expected a positive step", mds::Error);
}

TEST_CASE("curriculum: DeepSpeed config sections of each schedule type") {
    auto ds = parse_deepspeed_config(std::string(R"({"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen",
        "min_difficulty": 64, "max_difficulty": 1024, "schedule_type": "fixed_root",
        "schedule_config": {"total_curriculum_step": 10000, "difficulty_step": 8, "root_degree": 2}}})"),
                                     "ds.json");
    REQUIRE(ds.curriculum_learning);
    CHECK(ds.curriculum_learning->root_degree == 2.0);
    CHECK(CurriculumScheduler(*ds.curriculum_learning).difficulty_at(100) == 160);

    ds = parse_deepspeed_config(std::string(R"({"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen",
        "min_difficulty": 128, "max_difficulty": 1024, "schedule_type": "fixed_discrete",
        "schedule_config": {"difficulty": [128, 512, 1024], "max_step": [100, 300]}}})"),
                                "ds.json");
    REQUIRE(ds.curriculum_learning);
    CHECK(ds.curriculum_learning->difficulties == std::vector<std::int64_t>{128, 512, 1024});
    CHECK(ds.curriculum_learning->max_steps == std::vector<std::int64_t>{100, 300});
    CHECK(ds.unknown_keys.empty());

    CHECK_THROWS_WITH_AS(
        parse_deepspeed_config(std::string(R"({"curriculum_learning": {"enabled": true, "min_difficulty": 100,
            "max_difficulty": 2048, "schedule_config": {"total_curriculum_step": 36000, "difficulty_step": 8}}})"),
                               "ds.json"),
        doctest::Contains("ds.json: curriculum_learning.min_difficulty: min_difficulty 100 is not a multiple"), mds::Error);
    CHECK_THROWS_WITH_AS(
        parse_deepspeed_config(std::string(R"({"curriculum_learning": {"enabled": true, "min_difficulty": 64,
            "max_difficulty": 2048, "schedule_type": "fixed_discrete", "schedule_config": {"difficulty": [64, "x"],
            "max_step": [5]}}})"),
                               "ds.json"),
        "ds.json: curriculum_learning.schedule_config.difficulty: expected a list of integers, found [64,\"x\"]",
        mds::Error);
    CHECK_THROWS_WITH_AS(
        parse_deepspeed_config(std::string(R"({"curriculum_learning": {"enabled": true, "min_difficulty": 64,
            "max_difficulty": 2048, "schedule_type": "custom"}})"),
                               "ds.json"),
        doctest::Contains("ds.json: curriculum_learning.schedule_type: \"custom\" is not supported"), mds::Error);
    // A disabled section is read but not checked, as DeepSpeed ignores it.
    ds = parse_deepspeed_config(std::string(R"({"curriculum_learning": {"enabled": false, "min_difficulty": 100}})"),
                                "ds.json");
    CHECK_FALSE(ds.curriculum_learning->enabled);
}
