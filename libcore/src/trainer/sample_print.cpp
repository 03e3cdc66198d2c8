#include "mds/trainer/sample_print.h"

#include <nlohmann/json.hpp>

namespace mds::trainer {
namespace {

// "doc 12 tokens [0, 40) + doc 13 [0, 25)"
std::string pieces_text(const data::SampleOrigin& o) {
    std::string s;
    for (std::size_t i = 0; i < o.source.pieces.size(); ++i) {
        const auto& p = o.source.pieces[i];
        s += (i ? " + doc " : "doc ") + std::to_string(p.document) + (i ? " [" : " tokens [") + std::to_string(p.begin) +
             ", " + std::to_string(p.end) + ")";
    }
    return s;
}

}  // namespace

std::string SamplePrinter::text_of(const std::vector<std::int64_t>& ids) const {
    std::vector<std::int32_t> ids32(ids.begin(), ids.end());
    std::string t = tokenizer_.decode(ids32);
    if (options_.max_chars >= 0 && static_cast<std::int64_t>(t.size()) > options_.max_chars) {
        auto cut = static_cast<std::size_t>(options_.max_chars);
        while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
        t.resize(cut);
        t += " [...]";
    }
    return t;
}

std::string SamplePrinter::sample(std::int64_t id, const MappedSample* where, std::int64_t seqlen) const {
    const auto origin = map_.origin(id);
    const auto ids = map_.tokens(id);
    const std::string text = text_of(ids);
    if (options_.jsonl) {
        nlohmann::json j;
        if (where) {
            j["iteration"] = where->iteration;
            j["micro_batch"] = where->micro_batch;
            j["dp_rank"] = where->dp_rank;
            j["index"] = where->index;
            j["consumed"] = where->consumed;
            j["position"] = where->position;
            j["seqlen"] = seqlen;
        }
        j["sample"] = id;
        j["dataset"] = origin.dataset;
        j["prefix"] = origin.prefix;
        j["dataset_sample"] = origin.dataset_sample;
        j["shuffled"] = origin.source.shuffled;
        nlohmann::json pieces = nlohmann::json::array();
        for (const auto& p : origin.source.pieces) pieces.push_back({{"doc", p.document}, {"begin", p.begin}, {"end", p.end}});
        j["pieces"] = std::move(pieces);
        if (options_.tokens) j["tokens"] = ids;
        j["text"] = text;
        return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    std::string out;
    if (where)
        out = "iteration " + std::to_string(where->iteration) + " micro-batch " + std::to_string(where->micro_batch) +
              " dp-rank " + std::to_string(where->dp_rank) + " ";
    out += "sample " + std::to_string(id) + " | dataset " + std::to_string(origin.dataset) + " " + origin.prefix +
           " sample " + std::to_string(origin.dataset_sample) + " | " + pieces_text(origin);
    if (where && seqlen != map_.seq_length()) out += " | seqlen " + std::to_string(seqlen);
    out += "\n";
    if (options_.tokens) {
        out += "tokens:";
        for (auto t : ids) out += " " + std::to_string(t);
        out += "\n";
    }
    return out + text + "\n\n";
}

std::string SamplePrinter::iteration_header(const MappedIteration& it, std::int64_t dp, std::int64_t mbs) const {
    if (options_.jsonl) return "";
    std::string s = "=== iteration " + std::to_string(it.iteration) + ": global batch " + std::to_string(it.batch_size) +
                    " (" + std::to_string(it.micro_batches) + " micro batches x " + std::to_string(dp) + " ranks x " +
                    std::to_string(mbs) + "), consumed samples " + std::to_string(it.consumed_before) +
                    ", data position " + std::to_string(it.position) + ", seqlen " + std::to_string(it.seqlen);
    for (const auto& r : it.skipped)
        s += "; iterations " + std::to_string(r[0]) + "-" + std::to_string(r[1]) +
             " skipped before it (--skip-train-iteration-range)";
    return s + "\n\n";
}

}  // namespace mds::trainer
