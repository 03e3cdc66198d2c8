// Supervised fine-tuning examples for mds-preprocess (docs/mds-preprocess.md, "Supervised
// fine-tuning data"): each jsonl line gives one (prompt, answer) pair, from two string fields or
// from a chat-style list of messages rendered with a ChatTemplate. mds-preprocess writes the pair as
// document i of {prefix}_inputs_document and of {prefix}_targets_document, the layout that
// Megatron-DeepSpeed's finetune_t0_non_causal_decoder.py reads (packed_sft_dataset.h).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mds/util/json_line.h"  // JsonChatMessage, JsonLineParser

namespace mds::data {

// How a chat-style list becomes a prompt and an answer. Template text holds "{role}" and "{content}"
// (message only) and "{{" / "}}" for literal braces; anything else in braces is refused.
//   prompt = message(m_1) + ... + message(m_{k-1}) + answer_prefix   (m_k: the last assistant message)
//   answer = content(m_k) + answer_suffix
// The default is ChatML, what the chat templates (tokenizer_config.json) of small instruction models
// such as Qwen2.5-0.5B-Instruct and SmolLM2-135M-Instruct render, without their default system
// prompts: the prompt ends with the generation prompt ("add_generation_prompt") and the answer with
// the end-of-turn marker the model must learn to emit.
struct ChatTemplate {
    std::string message = "<|im_start|>{role}\n{content}<|im_end|>\n";  // --chat-message
    std::string answer_prefix = "<|im_start|>assistant\n";                // --chat-answer-prefix
    std::string answer_suffix = "<|im_end|>";                             // --chat-answer-suffix
};

// --chat-template NAME: "chatml" (the default above) or "zephyr" (TinyLlama-1.1B-Chat, Zephyr:
// "<|{role}|>\n{content}</s>\n", prefix "<|assistant|>\n", suffix "</s>"). UsageError otherwise.
ChatTemplate chat_template_preset(std::string_view name);

// Text typed on a command line: "\n", "\t" and "\\" become a newline, a tab and a backslash; any
// other backslash escape is a UsageError naming `flag`.
std::string unescape_flag_text(std::string_view text, std::string_view flag);

// Checks the three template texts (placeholders, braces); UsageError naming the flag.
void check_chat_template(const ChatTemplate& t);

// Appends `tmpl` with {role} / {content} replaced and {{ }} unescaped (checked templates only).
void render_template(std::string_view tmpl, std::string_view role, std::string_view content, std::string& out);

// The prompt of a conversation whose answer is messages[answer]: the messages before it, then the
// answer prefix.
std::string render_chat_prompt(std::span<const JsonChatMessage> messages, std::size_t answer, const ChatTemplate& t);

struct SftOptions {
    bool enabled = false;               // --sft (implied by the other SFT flags)
    std::string prompt_key = "prompt";  // --prompt-key (xP3 / BMD: "inputs")
    std::string answer_key = "answer";  // --answer-key (xP3 / BMD: "targets")
    std::string messages_key;           // --messages-key: chat mode when not empty
    ChatTemplate chat;                  // --chat-template and its three overrides
    bool strict = false;                // --strict: an empty example stops the run instead of being skipped
};

// The SFT flags as typed, before checks (mds-preprocess's main fills it; resolve_sft_flags judges).
struct SftFlags {
    bool sft = false, strict = false;
    std::optional<std::string> prompt_key, answer_key, messages_key;
    std::optional<std::string> chat_template, chat_message, chat_answer_prefix, chat_answer_suffix;
};

// The options the flags ask for: SFT mode is on with --sft or any other SFT flag. UsageError for
// conflicts (--json-keys, given as `json_keys_given`, with SFT mode; --messages-key with
// --prompt-key/--answer-key; chat flags without --messages-key; --strict without SFT mode), empty
// or equal keys, bad template text.
SftOptions resolve_sft_flags(const SftFlags& f, bool json_keys_given);

// One line -> the prompt and answer texts (per thread: it keeps its parser's buffers).
class SftExampleParser {
public:
    SftExampleParser(const SftOptions& options, bool prepend_space);

    struct Example {
        std::string prompt, answer;
        bool answer_empty = false;  // the answer's own text ("answer" field, assistant content) is ""
    };
    // Throws JsonError (with the byte offset in the line) for a malformed line: bad JSON, a missing
    // field, a value that is not a string; in chat mode a bad message list, a role other than system,
    // user and assistant, no assistant message, or messages after the last assistant message.
    // With `prepend_space` the answer text starts with one space (xP3's --prepend-space).
    void parse(std::string_view line, Example& out);

private:
    const SftOptions& o_;
    bool prepend_space_;
    JsonLineParser pair_parser_;
    std::vector<std::string> values_;
    std::vector<JsonChatMessage> messages_;
};

}  // namespace mds::data
