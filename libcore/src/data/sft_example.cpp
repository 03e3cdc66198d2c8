#include "mds/data/sft_example.h"

#include "mds/util/error.h"

namespace mds::data {

ChatTemplate chat_template_preset(std::string_view name) {
    if (name == "chatml") return ChatTemplate{};
    if (name == "zephyr") return ChatTemplate{"<|{role}|>\n{content}</s>\n", "<|assistant|>\n", "</s>"};
    throw UsageError("--chat-template " + std::string(name) + ": unknown template; expected chatml or zephyr");
}

std::string unescape_flag_text(std::string_view text, std::string_view flag) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '\\') {
            out += text[i];
            continue;
        }
        const char e = i + 1 < text.size() ? text[i + 1] : '\0';
        if (e == 'n') out += '\n';
        else if (e == 't') out += '\t';
        else if (e == '\\') out += '\\';
        else
            throw UsageError(std::string(flag) + " '" + std::string(text) + "': unknown escape at character " +
                             std::to_string(i + 1) + "; use \\n, \\t or \\\\ (a backslash)");
        ++i;
    }
    return out;
}

namespace {

// Walks a template: calls literal(text) and field(name) in order. `flag` names it in errors;
// `fields` are the placeholders it may hold.
template <class Literal, class Field>
void walk_template(std::string_view t, std::string_view flag, std::span<const std::string_view> fields, Literal literal,
                   Field field) {
    std::size_t i = 0, run = 0;
    auto flush = [&](std::size_t end) {
        if (end > run) literal(t.substr(run, end - run));
    };
    while (i < t.size()) {
        const char c = t[i];
        if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {  // "{{" or "}}": one brace
            flush(i);
            literal(t.substr(i, 1));
            i += 2;
            run = i;
            continue;
        }
        if (c == '}')
            throw UsageError(std::string(flag) + " '" + std::string(t) + "': a lone '}' at character " + std::to_string(i + 1) +
                             " (write }} for a brace)");
        if (c != '{') {
            ++i;
            continue;
        }
        const std::size_t close = t.find('}', i);
        const std::string_view name = close == std::string_view::npos ? t.substr(i + 1) : t.substr(i + 1, close - i - 1);
        bool known = false;
        for (auto f : fields) known = known || (close != std::string_view::npos && name == f);
        if (!known) {
            std::string allowed = fields.empty() ? std::string("it takes no placeholders") : std::string("placeholders are");
            for (std::size_t k = 0; k < fields.size(); ++k) allowed += (k ? ", {" : " {") + std::string(fields[k]) + "}";
            throw UsageError(std::string(flag) + " '" + std::string(t) + "': '{" + std::string(name) +
                             (close == std::string_view::npos ? "' is not closed" : "}' is not a placeholder") + "; " +
                             allowed + " (write {{ for a brace)");
        }
        flush(i);
        field(name);
        i = close + 1;
        run = i;
    }
    flush(t.size());
}

constexpr std::string_view kMessageFields[] = {"role", "content"};

}  // namespace

void check_chat_template(const ChatTemplate& t) {
    auto nothing = [](std::string_view) {};
    walk_template(t.message, "--chat-message", kMessageFields, nothing, nothing);
    walk_template(t.answer_prefix, "--chat-answer-prefix", {}, nothing, nothing);
    walk_template(t.answer_suffix, "--chat-answer-suffix", {}, nothing, nothing);
}

void render_template(std::string_view tmpl, std::string_view role, std::string_view content, std::string& out) {
    walk_template(
        tmpl, "template", kMessageFields, [&](std::string_view s) { out += s; },
        [&](std::string_view f) { out += f == "role" ? role : content; });
}

std::string render_chat_prompt(std::span<const JsonChatMessage> messages, std::size_t answer, const ChatTemplate& t) {
    std::string out;
    for (std::size_t i = 0; i < answer && i < messages.size(); ++i)
        render_template(t.message, messages[i].role, messages[i].content, out);
    render_template(t.answer_prefix, "", "", out);
    return out;
}

SftOptions resolve_sft_flags(const SftFlags& f, bool json_keys_given) {
    SftOptions o;
    const bool chat_flags = f.chat_template || f.chat_message || f.chat_answer_prefix || f.chat_answer_suffix;
    o.enabled = f.sft || f.prompt_key || f.answer_key || f.messages_key || chat_flags;
    if (!o.enabled) {
        if (f.strict) throw UsageError("--strict applies to supervised fine-tuning data only (--sft, --messages-key)");
        return o;
    }
    if (json_keys_given)
        throw UsageError("--json-keys cannot be used with supervised fine-tuning data: the fields are --prompt-key and "
                         "--answer-key (or --messages-key), the outputs {prefix}_inputs_document and {prefix}_targets_document");
    if (f.messages_key && (f.prompt_key || f.answer_key))
        throw UsageError("--messages-key cannot be used with --prompt-key / --answer-key: a line holds either a message "
                         "list or a prompt and an answer");
    if (chat_flags && !f.messages_key)
        throw UsageError("--chat-template, --chat-message, --chat-answer-prefix and --chat-answer-suffix need "
                         "--messages-key (they render message lists)");
    o.strict = f.strict;
    if (f.prompt_key) o.prompt_key = *f.prompt_key;
    if (f.answer_key) o.answer_key = *f.answer_key;
    if (f.messages_key) o.messages_key = *f.messages_key;
    if (f.messages_key && o.messages_key.empty()) throw UsageError("--messages-key must not be empty");
    if (o.prompt_key.empty() || o.answer_key.empty()) throw UsageError("--prompt-key and --answer-key must not be empty");
    if (o.prompt_key == o.answer_key)
        throw UsageError("--prompt-key and --answer-key are both '" + o.prompt_key + "'; they must name two fields");
    if (f.chat_template) o.chat = chat_template_preset(*f.chat_template);
    if (f.chat_message) o.chat.message = unescape_flag_text(*f.chat_message, "--chat-message");
    if (f.chat_answer_prefix) o.chat.answer_prefix = unescape_flag_text(*f.chat_answer_prefix, "--chat-answer-prefix");
    if (f.chat_answer_suffix) o.chat.answer_suffix = unescape_flag_text(*f.chat_answer_suffix, "--chat-answer-suffix");
    check_chat_template(o.chat);
    return o;
}

SftExampleParser::SftExampleParser(const SftOptions& options, bool prepend_space)
    : o_(options), prepend_space_(prepend_space), pair_parser_({options.prompt_key, options.answer_key}) {}

void SftExampleParser::parse(std::string_view line, Example& out) {
    out.prompt.clear();
    out.answer.clear();
    if (prepend_space_) out.answer = " ";
    if (o_.messages_key.empty()) {
        pair_parser_.parse(line, values_);
        out.prompt.swap(values_[0]);
        out.answer_empty = values_[1].empty();
        out.answer += values_[1];
        return;
    }
    parse_chat_messages(line, o_.messages_key, messages_);
    std::size_t answer = messages_.size();
    for (std::size_t i = 0; i < messages_.size(); ++i) {
        const auto& r = messages_[i].role;
        if (r != "system" && r != "user" && r != "assistant")
            throw JsonError(messages_[i].offset, "message " + std::to_string(i + 1) + " has role '" + r +
                                                     "'; expected system, user or assistant");
        if (r == "assistant") answer = i;
    }
    if (answer == messages_.size())
        throw JsonError(0, "field '" + o_.messages_key + "' has no assistant message (" + std::to_string(messages_.size()) +
                               " messages); the answer is the last assistant message");
    if (answer + 1 != messages_.size())
        throw JsonError(messages_[answer + 1].offset,
                        "message " + std::to_string(answer + 2) + " (" + messages_[answer + 1].role +
                            ") comes after the last assistant message; a conversation must end with the answer");
    out.prompt = render_chat_prompt(messages_, answer, o_.chat);
    out.answer_empty = messages_[answer].content.empty();
    out.answer += messages_[answer].content;
    render_template(o_.chat.answer_suffix, "", "", out.answer);
}

}  // namespace mds::data
