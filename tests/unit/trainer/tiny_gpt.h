// The small GPT the trainer's unit tests build on the CPU: 2 layers, hidden 64, 4 heads, sequence
// 64, a padded vocabulary of 512 (optionally with BLOOM's embedding LayerNorm).
#pragma once

#include "mds/model/gpt_config.h"

inline mds::model::GptConfig tiny_gpt(bool embed_layernorm = false) {
    mds::model::GptConfig c;
    c.num_layers = 2;
    c.hidden_size = 64;
    c.ffn_hidden_size = 256;
    c.num_attention_heads = 4;
    c.seq_length = 64;
    c.max_position_embeddings = 64;
    c.padded_vocab_size = 512;
    c.embed_layernorm = embed_layernorm;
    return c;
}
