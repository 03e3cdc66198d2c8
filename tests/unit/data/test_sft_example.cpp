// Supervised fine-tuning examples (sft_example.h): the chat templates (ChatML default, zephyr),
// template text from the command line, the prompt / answer of a line in both modes, every malformed
// line's error and where it points, and the checks between the SFT flags.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "mds/data/sft_example.h"
#include "mds/util/error.h"

using namespace mds::data;

namespace {

std::string usage_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const mds::UsageError& e) {
        return e.what();
    }
    return "";
}

struct Parsed {
    std::string error;
    std::size_t offset = 0;
    SftExampleParser::Example ex;
};

Parsed parse(const SftOptions& o, std::string_view line, bool prepend_space = false) {
    SftExampleParser p(o, prepend_space);
    Parsed r;
    try {
        p.parse(line, r.ex);
    } catch (const mds::JsonError& e) {
        r.error = e.reason();
        r.offset = e.offset();
    }
    return r;
}

SftOptions chat_options() {
    SftOptions o;
    o.enabled = true;
    o.messages_key = "messages";
    return o;
}

}  // namespace

TEST_CASE("ChatML by default: the prompt ends with the generation prompt, the answer with <|im_end|>") {
    const auto r = parse(chat_options(), R"({"messages": [{"role": "system", "content": "Be brief."},)"
                                         R"( {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]})");
    REQUIRE(r.error.empty());
    CHECK(r.ex.prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    CHECK(r.ex.answer == "Hello!<|im_end|>");
    CHECK_FALSE(r.ex.answer_empty);
    // Earlier assistant turns are part of the prompt; the last assistant message is the answer.
    const auto multi = parse(chat_options(), R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant",)"
                                             R"( "content": "b"}, {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]})");
    CHECK(multi.ex.prompt ==
          "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n");
    CHECK(multi.ex.answer == "d<|im_end|>");
    // Only an answer: the prompt is the generation prompt alone.
    const auto alone = parse(chat_options(), R"({"messages": [{"role": "assistant", "content": "x"}]})");
    CHECK(alone.ex.prompt == "<|im_start|>assistant\n");
    // An empty answer is flagged (the caller skips or refuses the example); --prepend-space goes first.
    const auto empty = parse(chat_options(), R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]})", true);
    CHECK(empty.ex.answer_empty);
    CHECK(empty.ex.answer == " <|im_end|>");
}

TEST_CASE("zephyr preset and custom templates from the command line") {
    SftOptions o = chat_options();
    o.chat = chat_template_preset("zephyr");
    const auto r = parse(o, R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})");
    CHECK(r.ex.prompt == "<|user|>\nHi</s>\n<|assistant|>\n");
    CHECK(r.ex.answer == "Yo</s>");
    CHECK(usage_of([] { chat_template_preset("llama"); }).find("expected chatml or zephyr") != std::string::npos);

    CHECK(unescape_flag_text("A\\n{role}:\\t{content}\\\\", "--chat-message") == "A\n{role}:\t{content}\\");
    CHECK(usage_of([] { unescape_flag_text("a\\q", "--chat-message"); }).find("--chat-message 'a\\q': unknown escape at character 2") !=
          std::string::npos);
    ChatTemplate t;
    t.message = "{{{role}}} {content}\n";
    check_chat_template(t);
    std::string out;
    render_template(t.message, "user", "hi", out);
    CHECK(out == "{user} hi\n");
    t.message = "{rol}";
    CHECK(usage_of([&] { check_chat_template(t); }).find("'{rol}' is not a placeholder") != std::string::npos);
    t.message = "{role";
    CHECK(usage_of([&] { check_chat_template(t); }).find("is not closed") != std::string::npos);
    t.message = "a}b";
    CHECK(usage_of([&] { check_chat_template(t); }).find("a lone '}'") != std::string::npos);
    t = ChatTemplate{};
    t.answer_prefix = "<{role}>";
    CHECK(usage_of([&] { check_chat_template(t); }).find("--chat-answer-prefix '<{role}>'") != std::string::npos);
}

TEST_CASE("prompt / answer fields: BMD's names through the key flags, --prepend-space on the answer only") {
    SftOptions o;
    o.enabled = true;
    o.prompt_key = "inputs";
    o.answer_key = "targets";
    const auto r = parse(o, R"({"targets": "Paris", "inputs": "Capital of France?"})", true);
    REQUIRE(r.error.empty());
    CHECK(r.ex.prompt == "Capital of France?");
    CHECK(r.ex.answer == " Paris");
    CHECK(parse(o, R"({"inputs": "q", "targets": ""})").ex.answer_empty);
    const auto missing = parse(o, R"({"inputs": "q"})");
    CHECK(missing.error == "field 'targets' not found");
    const auto number = parse(o, R"({"inputs": 3, "targets": "a"})");
    CHECK(number.error == "field 'inputs' is a number, expected a string");
    CHECK(number.offset == 11);
}

TEST_CASE("malformed conversations: errors say what is wrong and point at the message") {
    const SftOptions o = chat_options();
    const std::string no_answer = R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})";
    CHECK(parse(o, no_answer).error == "field 'messages' has no assistant message (2 messages); the answer is the last assistant message");
    const std::string trailing = R"({"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]})";
    const auto t = parse(o, trailing);
    CHECK(t.error.find("message 2 (user) comes after the last assistant message") != std::string::npos);
    CHECK(trailing.substr(t.offset, 9) == R"({"role": )");
    const auto role = parse(o, R"({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "a"}]})");
    CHECK(role.error == "message 1 has role 'tool'; expected system, user or assistant");
    CHECK(role.offset == 14);
    CHECK(parse(o, R"({"messages": []})").error.find("has no assistant message (0 messages)") != std::string::npos);
    CHECK(parse(o, R"({"prompt": "x"})").error == "field 'messages' not found");
}

TEST_CASE("SFT flags: implied mode, conflicts and checks") {
    SftFlags f;
    CHECK_FALSE(resolve_sft_flags(f, false).enabled);
    CHECK(resolve_sft_flags(f, true).prompt_key == "prompt");  // plain mode: --json-keys is fine
    f.strict = true;
    CHECK(usage_of([&] { resolve_sft_flags(f, false); }).find("--strict applies to supervised") != std::string::npos);
    f = SftFlags{};
    f.answer_key = "targets";
    const SftOptions o = resolve_sft_flags(f, false);
    CHECK(o.enabled);
    CHECK(o.prompt_key == "prompt");
    CHECK(o.answer_key == "targets");
    CHECK(usage_of([&] { resolve_sft_flags(f, true); }).find("--json-keys cannot be used") != std::string::npos);
    f.messages_key = "messages";
    CHECK(usage_of([&] { resolve_sft_flags(f, false); }).find("--messages-key cannot be used with --prompt-key") !=
          std::string::npos);
    f = SftFlags{};
    f.chat_message = "{role}: {content}\\n";
    CHECK(usage_of([&] { resolve_sft_flags(f, false); }).find("need --messages-key") != std::string::npos);
    f.messages_key = "conversation";
    f.chat_template = "zephyr";
    const SftOptions c = resolve_sft_flags(f, false);
    CHECK(c.chat.message == "{role}: {content}\n");
    CHECK(c.chat.answer_suffix == "</s>");  // the preset, then the override
    f = SftFlags{};
    f.sft = true;
    f.prompt_key = "x";
    f.answer_key = "x";
    CHECK(usage_of([&] { resolve_sft_flags(f, false); }).find("both 'x'") != std::string::npos);
}
