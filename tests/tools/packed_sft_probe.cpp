// packed_sft_probe CONFIG_JSON: builds mds::data::PackedSftDatasets from a JSON object of Megatron
// flags and prints, as one JSON object on stdout, every group of every split with its members and
// all its packed samples, for tests/crosscheck/test_packed_sft.py. Keys: data_path (list), split,
// train / valid / test (lists of --*-weighted-split-paths group strings), seq_length, seed, pad,
// train_samples or train_iters, global_batch_size, eval_interval, eval_iters, read_split_documents,
// verify, dump (false: no samples; a sample that cannot be read, a blended index past the end of its
// dataset as in BMD, is null). Errors: "error: ..." on stderr, exit 1.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "mds/data/packed_sft_datasets.h"
#include "mds/util/error.h"

int main(int argc, char** argv) {
    using nlohmann::json;
    if (argc != 2) {
        std::fprintf(stderr, "usage: packed_sft_probe CONFIG_JSON\n");
        return 2;
    }
    try {
        const json c = json::parse(argv[1]);
        mds::data::PackedSftDatasetsOptions o;
        if (c.contains("data_path")) o.data_path = c["data_path"].get<std::vector<std::string>>();
        if (c.contains("split")) o.split = c["split"].get<std::string>();
        const char* const splits[3] = {"train", "valid", "test"};
        for (int k = 0; k < 3; ++k)
            if (c.contains(splits[k]))
                o.groups[static_cast<std::size_t>(k)] = mds::data::parse_weighted_split_paths(
                    mds::data::weighted_split_flag(k), c[splits[k]].get<std::vector<std::string>>());
        o.seq_length = c.at("seq_length").get<std::int32_t>();
        o.seed = c.value("seed", std::int64_t{1234});
        o.pad_token = c.value("pad", std::int64_t{0});
        if (c.contains("train_samples")) o.num_samples.train_samples = c["train_samples"].get<std::int64_t>();
        if (c.contains("train_iters")) o.num_samples.train_iters = c["train_iters"].get<std::int64_t>();
        o.num_samples.global_batch_size = c.at("global_batch_size").get<std::int64_t>();
        o.num_samples.eval_interval = c.value("eval_interval", std::int64_t{1000});
        o.num_samples.eval_iters = c.value("eval_iters", std::int64_t{100});
        o.read_split_documents = c.value("read_split_documents", false);
        o.verify = c.value("verify", false);
        o.log = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
        const mds::data::PackedSftDatasets ds(o);

        json out = {{"num_samples", ds.num_samples()}, {"train_iters", ds.train_iters()},
                    {"warnings", ds.warnings()}, {"groups", json::array()}};
        for (int k = 0; k < 3; ++k)
            for (std::size_t g = 0; g < ds.groups(k).size(); ++g) {
                const auto& s = ds.groups(k)[g];
                json jg = {{"split", k}, {"name", s.name}, {"blended", s.blended}, {"size", s.size},
                           {"members", json::array()}};
                for (const auto& m : s.members)
                    jg["members"].push_back({{"prefix", m.prefix}, {"doc_begin", m.doc_begin}, {"doc_end", m.doc_end},
                                             {"first_example", m.first_example}, {"num_samples", m.num_samples},
                                             {"samples", m.samples}, {"epochs", m.epochs}, {"too_long", m.too_long},
                                             {"status", mds::data::packed_index_status_name(m.status)},
                                             {"sample_idx", m.files.sample_idx}, {"shuffle_idx", m.files.shuffle_idx}});
                if (c.value("dump", true)) {
                    json rows = json::array();
                    for (std::int64_t n = 0; n < s.size; ++n) {
                        try {
                            const auto p = ds.sample(k, g, n);
                            rows.push_back({p.tokens, p.segment_ids, p.is_input});
                        } catch (const mds::Error&) {  // a blended index past a dataset's end, as in BMD
                            rows.push_back(nullptr);
                        }
                    }
                    jg["rows"] = std::move(rows);
                }
                out["groups"].push_back(std::move(jg));
            }
        std::cout << out.dump() << "\n";
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
