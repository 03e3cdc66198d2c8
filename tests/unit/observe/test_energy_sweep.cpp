// mds-energy-sweep's logic without processes: the settings and their mds-train flags, the steady
// window measured from real iteration lines (format_training_log_line writes them), the energy
// source, emissions.csv totals, and the table / CSV / JSON / SVG made of the rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "mds/observe/emissions_csv.h"
#include "mds/observe/energy_sweep_measure.h"
#include "mds/observe/energy_sweep_plan.h"
#include "mds/observe/energy_sweep_report.h"
#include "mds/observe/log_line.h"
#include "mds/util/error.h"

using namespace mds::observe;

namespace {

// An iteration line as mds-train prints it with --codecarbon-dir.
std::string log_line(std::int64_t iteration, std::int64_t tokens, double tokens_per_second, double kwh, double kg) {
    TrainingLogLine l;
    l.iteration = iteration;
    l.train_iters = 10;
    l.consumed_samples = tokens / 32;
    l.consumed_tokens = tokens;
    l.seconds_per_iteration = 0.01;
    l.learning_rate = 1e-3;
    l.global_batch_size = 8;
    l.losses = {{"lm loss", 7.5}};
    l.samples_per_second = tokens_per_second / 32;
    l.tokens_per_second = tokens_per_second;
    l.energy_kwh = kwh;
    l.co2_kg = kg;
    return format_training_log_line(l);
}

SweepRow ok_row(std::int64_t mbs, std::int64_t gbs, double seconds, double kwh) {
    SweepRow r;
    r.setting = {.micro_batch_size = mbs, .global_batch_size = gbs, .recompute = std::nullopt, .skip_reason = {}};
    r.status = SweepStatus::ok;
    SweepMeasurement m;
    m.first_iteration = 1;
    m.last_iteration = 10;
    m.iterations = 9;
    m.tokens = 9 * gbs * 32;
    m.seconds = seconds;
    m.energy_kwh = kwh;
    m.co2_kg = kwh * 0.05;
    r.measurement = m;
    r.source = SweepEnergySource{.cpu = "power model (cpu_load)", .gpu_count = 0};
    r.log_path = "out/" + r.setting.slug() + "/train.log";
    return r;
}

// The cells of a Markdown table line: "| a | b |" -> {"a", "b"}.
std::vector<std::string> md_cells(const std::string& line) {
    std::vector<std::string> cells;
    std::size_t start = 1;
    while (true) {
        const std::size_t bar = line.find('|', start);
        if (bar == std::string::npos) break;
        std::string c = line.substr(start, bar - start);
        c.erase(0, c.find_first_not_of(' '));
        c.erase(c.find_last_not_of(' ') + 1);
        cells.push_back(c);
        start = bar + 1;
    }
    return cells;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t nl = text.find('\n', start);
        out.push_back(text.substr(start, nl - start));
        start = nl == std::string::npos ? text.size() : nl + 1;
    }
    return out;
}

}  // namespace

TEST_CASE("energy sweep: batch-size and recompute lists") {
    CHECK(parse_batch_size_list("--micro-batch-sizes", "1,2,4") == std::vector<std::int64_t>{1, 2, 4});
    CHECK(parse_batch_size_list("--micro-batch-sizes", " 8 , 16") == std::vector<std::int64_t>{8, 16});
    for (const char* bad : {"", "1,,2", "0", "-1", "2,x", "1.5", "2,2"})
        CHECK_THROWS_AS(parse_batch_size_list("--micro-batch-sizes", bad), mds::UsageError);
    try {
        parse_batch_size_list("--global-batch-sizes", "8,abc");
        FAIL("no error");
    } catch (const mds::UsageError& e) {
        CHECK(std::string(e.what()).find("--global-batch-sizes '8,abc': 'abc' is not a positive integer") != std::string::npos);
    }
    CHECK(parse_recompute_list("--recompute", "off,on") == std::vector<bool>{false, true});
    CHECK(parse_recompute_list("--recompute", "True") == std::vector<bool>{true});
    CHECK_THROWS_AS(parse_recompute_list("--recompute", "on,yes"), mds::UsageError);
    CHECK_THROWS_AS(parse_recompute_list("--recompute", "maybe"), mds::UsageError);
}

TEST_CASE("energy sweep: combinations, global batch size outermost, invalid ones kept with a reason") {
    const auto s = plan_sweep({1, 2, 4}, {8, 6}, {});
    REQUIRE(s.size() == 6);
    CHECK(s[0].label() == "mbs 1 gbs 8");
    CHECK(s[1].label() == "mbs 2 gbs 8");
    CHECK(s[2].label() == "mbs 4 gbs 8");
    CHECK(s[3].label() == "mbs 1 gbs 6");
    CHECK(s[5].label() == "mbs 4 gbs 6");
    CHECK(s[5].skip_reason == "gbs 6 is not a multiple of mbs 4");
    for (int i = 0; i < 5; ++i) CHECK(s[static_cast<std::size_t>(i)].runnable());
    CHECK(s[1].slug() == "mbs2-gbs8");

    const auto r = plan_sweep({2}, {8}, {false, true});
    REQUIRE(r.size() == 2);
    CHECK(r[0].label() == "mbs 2 gbs 8 recompute off");
    CHECK(r[1].slug() == "mbs2-gbs8-recompute-on");

    // Data parallelism: gbs 8 with mbs 4 on 4 ranks needs 16 per step.
    const auto dp = plan_sweep({1, 4}, {8}, {}, 4);
    CHECK(dp[0].runnable());
    CHECK(dp[1].skip_reason == "gbs 8 is not a multiple of mbs 4 x data-parallel size 4");
    // mbs larger than gbs.
    CHECK_FALSE(plan_sweep({16}, {8}, {})[0].runnable());
}

TEST_CASE("energy sweep: the mds-train flags after --") {
    const std::vector<std::string> base{"--num-layers", "2", "--seq-length", "32", "--device", "cpu"};
    const auto info = inspect_sweep_train_flags(base, false);
    CHECK(info.seq_length == 32);
    CHECK_FALSE(info.has_log_interval);
    CHECK(inspect_sweep_train_flags({"--seq-length=64", "--log-interval", "5", "--eval-iters", "2"}, true).seq_length == 64);
    CHECK(inspect_sweep_train_flags({"--seq-length=64", "--log-interval", "5"}, true).has_log_interval);

    for (const char* swept : {"--micro-batch-size", "--global-batch-size=8", "--train-iters", "--train-samples",
                              "--codecarbon-dir", "--rampup-batch-size", "--load", "--save"}) {
        auto flags = base;
        flags.insert(flags.end(), {swept, "4"});
        CHECK_THROWS_AS(inspect_sweep_train_flags(flags, false), mds::UsageError);
    }
    auto with_ckpt = base;
    with_ckpt.push_back("--checkpoint-activations");
    CHECK_NOTHROW(inspect_sweep_train_flags(with_ckpt, false));
    CHECK_THROWS_AS(inspect_sweep_train_flags(with_ckpt, true), mds::UsageError);
    CHECK_THROWS_AS(inspect_sweep_train_flags({"--num-layers", "2"}, false), mds::UsageError);
    CHECK_THROWS_AS(inspect_sweep_train_flags({"--seq-length", "x"}, false), mds::UsageError);
    CHECK_THROWS_AS(inspect_sweep_train_flags({"--seq-length"}, false), mds::UsageError);

    const SweepSetting on{.micro_batch_size = 2, .global_batch_size = 8, .recompute = true, .skip_reason = {}};
    const auto argv = sweep_train_argv("/x/mds-train", base, info, on, 10, "out/mbs2-gbs8-recompute-on");
    const std::vector<std::string> want{"/x/mds-train", "--num-layers", "2", "--seq-length", "32", "--device", "cpu",
                                        "--micro-batch-size", "2", "--global-batch-size", "8",
                                        "--checkpoint-activations", "--train-iters", "10", "--codecarbon-dir",
                                        "out/mbs2-gbs8-recompute-on", "--log-interval", "1", "--eval-iters", "0"};
    CHECK(argv == want);
    const SweepSetting off{.micro_batch_size = 2, .global_batch_size = 8, .recompute = false, .skip_reason = {}};
    const auto user_log = inspect_sweep_train_flags({"--seq-length", "32", "--log-interval", "2", "--eval-iters", "1"}, true);
    const auto argv2 = sweep_train_argv("t", {"--seq-length", "32", "--log-interval", "2", "--eval-iters", "1"}, user_log,
                                        off, 10, "d");
    CHECK(std::count(argv2.begin(), argv2.end(), "--log-interval") == 1);
    CHECK(std::count(argv2.begin(), argv2.end(), "--eval-iters") == 1);
    CHECK(std::count(argv2.begin(), argv2.end(), "--checkpoint-activations") == 0);
}

TEST_CASE("energy sweep: iteration lines of mds-train parsed back") {
    const auto p = parse_sweep_log_line(log_line(3, 768, 51234.5, 1.2345e-6, 6.789e-8));
    REQUIRE(p);
    CHECK(p->iteration == 3);
    CHECK(p->consumed_tokens == 768);
    CHECK(p->tokens_per_second == doctest::Approx(51234.5));
    REQUIRE(p->energy_kwh);
    CHECK(*p->energy_kwh == doctest::Approx(1.234e-6).epsilon(1e-9));  // printed with 4 digits
    CHECK(*p->co2_kg == doctest::Approx(6.789e-8).epsilon(1e-9));
    CHECK_FALSE(parse_sweep_log_line("mds-train: codecarbon: CPU power: cpu_load mode"));
    CHECK_FALSE(parse_sweep_log_line(""));
    CHECK_FALSE(parse_sweep_log_line(" validation loss at iteration 10 | lm loss value: 7.0 |"));
    CHECK_THROWS_AS(parse_sweep_log_line(" iteration        1/      10 | consumed samples: 8 | lm loss: 7 |"), mds::Error);

    TrainingLogLine plain;  // no codecarbon: no energy fields
    plain.iteration = 2;
    plain.consumed_tokens = 10;
    plain.tokens_per_second = 100;
    const auto q = parse_sweep_log_line(format_training_log_line(plain));
    REQUIRE(q);
    CHECK_FALSE(q->energy_kwh);
}

TEST_CASE("energy sweep: the steady window subtracts the first logged iteration") {
    const std::string log = "mds-train: codecarbon: CPU power: cpu_load mode, TDP 85.0 W\n" +
                            log_line(1, 256, 1000.0, 1.0e-6, 5.0e-8) + "\n" + "some other line\n" +
                            log_line(2, 512, 2560.0, 1.5e-6, 7.5e-8) + "\n" + log_line(4, 1024, 5120.0, 2.5e-6, 1.25e-7) +
                            "\n";
    const auto points = parse_sweep_log(log);
    REQUIRE(points.size() == 3);
    const SweepMeasurement m = measure_steady_window(points, "x.log");
    CHECK(m.first_iteration == 1);
    CHECK(m.last_iteration == 4);
    CHECK(m.iterations == 3);
    CHECK(m.tokens == 768);
    CHECK(m.seconds == doctest::Approx(256.0 / 2560.0 + 512.0 / 5120.0));  // 0.1 + 0.1
    CHECK(m.energy_kwh == doctest::Approx(1.5e-6));
    CHECK(m.co2_kg == doctest::Approx(7.5e-8));
    CHECK(m.ms_per_iteration() == doctest::Approx(200.0 / 3.0));
    CHECK(m.tokens_per_second() == doctest::Approx(768 / 0.2));
    CHECK(m.kwh_per_million_tokens() == doctest::Approx(1.5e-6 * 1e6 / 768));
    CHECK(m.kg_co2_per_million_tokens() == doctest::Approx(7.5e-8 * 1e6 / 768));

    CHECK_THROWS_AS(measure_steady_window({points[0]}, "x.log"), mds::Error);
    auto no_energy = points;
    no_energy[2].energy_kwh.reset();
    CHECK_THROWS_AS(measure_steady_window(no_energy, "x.log"), mds::Error);
    auto two_runs = points;
    two_runs[2].consumed_tokens = 100;
    CHECK_THROWS_AS(measure_steady_window(two_runs, "x.log"), mds::Error);
    auto zero_rate = points;
    zero_rate[1].tokens_per_second = 0;
    CHECK_THROWS_AS(measure_steady_window(zero_rate, "x.log"), mds::Error);
}

TEST_CASE("energy sweep: where the energy came from") {
    const auto model = parse_energy_source("mds-train: codecarbon: CPU power: cpu_load mode, TDP 85.0 W ...\n", 0);
    CHECK(model.cpu == "power model (cpu_load)");
    CHECK(model.follows_time_only());
    CHECK(model.describe() == "CPU from codecarbon's power model (cpu_load), RAM from codecarbon's power model");
    const auto rapl = parse_energy_source("mds-train: codecarbon: CPU energy: RAPL package-0\n", 0);
    CHECK(rapl.cpu == "RAPL");
    CHECK_FALSE(rapl.follows_time_only());
    const auto gpu = parse_energy_source("mds-train: codecarbon: CPU power: constant mode, 0.5 x TDP\n", 8);
    CHECK(gpu.cpu == "power model (constant)");
    CHECK_FALSE(gpu.follows_time_only());
    CHECK(gpu.describe().find("8 GPU(s) from NVML counters") != std::string::npos);
    CHECK(parse_energy_source("nothing", 0).cpu == "unknown");
}

TEST_CASE("energy sweep: emissions.csv totals from its last row") {
    EmissionsRecord a, b;
    a.duration = 1.5;
    a.energy_consumed = 1e-6;
    b.duration = 3.25;
    b.energy_consumed = 2.5e-6;
    b.emissions = 1.25e-7;
    b.gpu_count = 2;
    b.cpu_model = "Some CPU, 8 cores";  // quoted by the writer
    const std::string csv = emissions_csv_header_line() + emissions_csv_row(a) + emissions_csv_row(b);
    const auto t = read_emissions_totals(csv, "e.csv");
    CHECK(t.duration_s == 3.25);
    CHECK(t.energy_kwh == 2.5e-6);
    CHECK(t.emissions_kg == 1.25e-7);
    CHECK(t.gpu_count == 2);
    CHECK_THROWS_AS(read_emissions_totals(emissions_csv_header_line(), "e.csv"), mds::Error);
    CHECK_THROWS_AS(read_emissions_totals("a,b\n1,2\n", "e.csv"), mds::Error);
}

TEST_CASE("energy sweep: best setting, table, CSV, JSON and SVG agree") {
    SweepResult result;
    result.train_iters = 10;
    result.seq_length = 32;
    result.rows.push_back(ok_row(1, 8, 2.0, 4e-6));
    result.rows.push_back(ok_row(2, 8, 1.0, 2e-6));  // least energy per token
    SweepRow skipped;
    skipped.setting = plan_sweep({4}, {6}, {})[0];
    skipped.status = SweepStatus::skipped;
    skipped.note = skipped.setting.skip_reason;
    result.rows.push_back(skipped);
    SweepRow failed;
    failed.setting = plan_sweep({1}, {6}, {})[0];
    failed.status = SweepStatus::failed;
    failed.note = "mds-train exit status 1: boom, with a comma (log: x)";
    result.rows.push_back(failed);
    result.rows.push_back(ok_row(4, 8, 0.9, 2e-6));  // a tie: the first one stays the best

    REQUIRE(most_energy_efficient(result.rows) == std::optional<std::size_t>(1));
    CHECK_FALSE(most_energy_efficient({skipped, failed}));

    const std::string table = format_sweep_table(result);
    const auto lines = lines_of(table);
    REQUIRE(lines.size() >= 2 + 5 + 3);
    CHECK(md_cells(lines[0]) ==
          std::vector<std::string>{"setting", "ms/iteration", "tokens/s", "kWh per Mtok", "kg CO2 per Mtok", "note"});
    const auto best = md_cells(lines[3]);
    CHECK(best[0] == "mbs 2 gbs 8");
    CHECK(best[1] == "111.11");  // 1 s / 9 iterations
    CHECK(best[2] == "2304");    // 9 x 8 x 32 tokens / 1 s
    CHECK(best[3] == format_per_million_tokens(2e-6 * 1e6 / 2304));
    CHECK(best[5] == "most energy-efficient");
    CHECK(md_cells(lines[4])[5] == "skipped: gbs 6 is not a multiple of mbs 4");
    CHECK(md_cells(lines[5])[5].starts_with("failed: mds-train exit status 1"));
    CHECK(table.find("energy: CPU from codecarbon's power model (cpu_load)") != std::string::npos);
    CHECK(table.find("energy follows time only") != std::string::npos);
    CHECK(lines.back() == "most energy-efficient: mbs 2 gbs 8 (" + format_per_million_tokens(2e-6 * 1e6 / 2304) +
                              " kWh per million tokens)");

    // sweep.csv: the table's cells, row for row.
    const auto csv = lines_of(sweep_csv(result));
    REQUIRE(csv.size() == 6);
    CHECK(csv[0].starts_with("setting,micro_batch_size,global_batch_size,recompute,status,ms_per_iteration"));
    CHECK(csv[2] == "mbs 2 gbs 8,2,8,,ok,111.11,2304," + best[3] + "," + best[4] + ",yes,most energy-efficient," +
                        "out/mbs2-gbs8/train.log");
    CHECK(csv[4].find(",failed,,,,,no,\"failed: mds-train exit status 1: boom, with a comma (log: x)\",") !=
          std::string::npos);

    // A '|' quoted from mds-train's output is escaped in the Markdown table, kept in the CSV.
    SweepResult piped;
    piped.rows.push_back(failed);
    piped.rows.back().note = "exit status 1: a | b";
    CHECK(format_sweep_table(piped).find("| failed: exit status 1: a \\| b |") != std::string::npos);
    CHECK(sweep_csv(piped).find(",failed: exit status 1: a | b,") != std::string::npos);

    const std::string json = sweep_json(result);
    CHECK(json.find("\"best\": \"mbs 2 gbs 8\"") != std::string::npos);
    CHECK(json.find("\"energy_follows_time_only\": true") != std::string::npos);
    CHECK(json.find("\"kwh_per_million_tokens\": ") != std::string::npos);

    const std::string svg = sweep_svg(result);
    CHECK(svg.starts_with("<?xml"));
    std::size_t bars = 0;
    for (std::size_t at = 0; (at = svg.find("<rect class=\"bar", at)) != std::string::npos; ++at) ++bars;
    CHECK(bars == 3);
    CHECK(svg.find("class=\"bar best\"") != std::string::npos);
    CHECK(svg.find(">skipped</text>") != std::string::npos);
    CHECK(svg.find(">failed</text>") != std::string::npos);
}
