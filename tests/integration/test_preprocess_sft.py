#!/usr/bin/env python3
"""mds-preprocess's supervised fine-tuning mode end to end (docs/mds-preprocess.md, "Supervised fine-tuning data"):
  - token ids: a prompt / answer pair and a chat whose template leaves the texts bare give the ids of specs/data.md
    section 1.8 ("Hello world", "Megatron-LM!"), the EOD after the answer only; ChatML chats give, document for
    document, the ids plain mode writes for the prompt and answer texts rendered here in Python;
  - the pair stays aligned: empty prompts or answers skip the whole example (counted in the summary) or, with
    --strict, stop the run naming file:line; --skip-bad-lines skips malformed lines in both outputs;
  - hostile lines (missing field, wrong type, no assistant turn, unknown role, a turn after the answer, a message
    that is not an object, messages that are not a list) stop the run with exit 1 and file:line:column, leaving no
    output under its final name and an earlier pair untouched;
  - usage errors (exit 2): --json-keys with --sft, --messages-key with --prompt-key, chat flags without
    --messages-key, --strict alone, a template placeholder that does not exist, an unknown escape;
  - the output does not depend on --workers.
Needs the GPT-2 files (../shared/data/gpt2); skipped (77) without them."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testkit import binary, check, finish, skip  # noqa: E402

PRE = binary("mds-preprocess")
SRC = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GPT2 = os.environ.get("MDS_GPT2_DIR") or os.path.join(SRC, "..", "shared", "data", "gpt2")
if not os.path.exists(os.path.join(GPT2, "encoder.json")):
    skip(f"GPT-2 files not found in {GPT2}")
TOK = ["--vocab-file", os.path.join(GPT2, "encoder.json"), "--merge-file", os.path.join(GPT2, "vocab.bpe")]
EOD = 50256


def run(*args):
    return subprocess.run([PRE, "--progress", "off", *map(str, args)], capture_output=True, text=True)


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def read_docs(prefix):
    """Sequences of a uint16 dataset, read with the layout of specs/data.md section 1.3."""
    import struct
    idx = open(prefix + ".idx", "rb").read()
    _, code, n, _ = struct.unpack_from("<QBQQ", idx, 9)
    assert code == 8, code
    sizes = struct.unpack_from(f"<{n}i", idx, 34)
    data = open(prefix + ".bin", "rb").read()
    ids = struct.unpack(f"<{len(data) // 2}H", data)
    out, at = [], 0
    for s in sizes:
        out.append(list(ids[at:at + s]))
        at += s
    return out


def pair(prefix):
    return read_docs(prefix + "_inputs_document"), read_docs(prefix + "_targets_document")


def outputs_exist(prefix):
    return [p for p in (f"{prefix}_{k}_document.{e}" for k in ("inputs", "targets") for e in ("bin", "idx"))
            if os.path.exists(p)]


def render_chatml(messages):
    prompt = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages[:-1])
    return prompt + "<|im_start|>assistant\n", messages[-1]["content"] + "<|im_end|>"


def token_ids(tmp):
    # specs/data.md 1.8: "Hello world" -> [15496, 995]; "Megatron-LM!" -> [42672, 23484, 12, 31288, 0].
    src = write(f"{tmp}/ids.jsonl", [{"prompt": "Hello world", "answer": "Megatron-LM!"}])
    r = run("--sft", "--input", src, "--output-prefix", f"{tmp}/ids", *TOK, "--append-eod")
    check(r.returncode == 0, f"ids: exit {r.returncode}: {r.stderr}")
    inputs, targets = pair(f"{tmp}/ids")
    check(inputs == [[15496, 995]], f"ids: prompt {inputs}")
    check(targets == [[42672, 23484, 12, 31288, 0, EOD]], f"ids: answer {targets} (EOD after the answer only)")
    chat = write(f"{tmp}/bare.jsonl", [{"messages": [{"role": "user", "content": "Hello"},
                                                     {"role": "assistant", "content": "Megatron-LM!"}]}])
    r = run("--messages-key", "messages", "--chat-message", "{content}", "--chat-answer-prefix", " world",
            "--chat-answer-suffix", "", "--input", chat, "--output-prefix", f"{tmp}/bare", *TOK)
    check(r.returncode == 0, f"bare chat: exit {r.returncode}: {r.stderr}")
    check(pair(f"{tmp}/bare") == ([[15496, 995]], [[42672, 23484, 12, 31288, 0]]), f"bare chat: {pair(f'{tmp}/bare')}")
    # --prepend-space: " Megatron" starts with the space-prefixed token.
    r = run("--sft", "--prepend-space", "--input", src, "--output-prefix", f"{tmp}/sp", *TOK)
    check(r.returncode == 0 and pair(f"{tmp}/sp")[1][0][0] != 42672 and pair(f"{tmp}/sp")[0] == [[15496, 995]],
          f"--prepend-space: {pair(f'{tmp}/sp')}")
    print("ids: prompt [15496, 995], answer [42672, 23484, 12, 31288, 0, 50256] (pair and bare chat)")


def chatml_against_plain(tmp):
    chats = []
    for i in range(60):
        msgs = [{"role": "system", "content": f"You are helper {i}."}] if i % 3 == 0 else []
        for t in range(i % 4):
            msgs += [{"role": "user", "content": f"question {t} of {i}: caf\u00e9 \U0001F600?"},
                     {"role": "assistant", "content": f"answer {t}\n\twith  spaces "}]
        msgs += [{"role": "user", "content": f"last question {i}"}, {"role": "assistant", "content": f"final {i}."}]
        chats.append({"id": i, "messages": msgs})
    src = write(f"{tmp}/chats.jsonl", chats)
    rendered = [render_chatml(c["messages"]) for c in chats]
    texts = write(f"{tmp}/texts.jsonl", [{"p": p, "a": a} for p, a in rendered])
    r = run("--messages-key", "messages", "--input", src, "--output-prefix", f"{tmp}/chat", *TOK, "--append-eod",
            "--workers", 3)
    check(r.returncode == 0, f"chatml: exit {r.returncode}: {r.stderr}")
    r = run("--json-keys", "p", "a", "--input", texts, "--output-prefix", f"{tmp}/plain", *TOK)
    check(r.returncode == 0, f"plain: exit {r.returncode}: {r.stderr}")
    inputs, targets = pair(f"{tmp}/chat")
    check(inputs == read_docs(f"{tmp}/plain_p_document"), "chatml: prompts differ from plain mode on the rendered text")
    check(targets == [d + [EOD] for d in read_docs(f"{tmp}/plain_a_document")],
          "chatml: answers differ from plain mode on the rendered text + EOD")
    print(f"chatml: {len(chats)} chats == plain mode on the Python-rendered prompts and answers")


def alignment(tmp):
    lines = [{"prompt": "p0", "answer": "a0"}, {"prompt": "", "answer": "a1"}, {"prompt": "p2", "answer": ""},
             "not json", {"prompt": "p4", "answer": "a4"}, "", {"prompt": "p6", "answer": "a6", "extra": [1, 2]}]
    src = write(f"{tmp}/align.jsonl", lines)
    r = run("--sft", "--input", src, "--output-prefix", f"{tmp}/al", *TOK, "--skip-bad-lines", "--json")
    check(r.returncode == 0, f"align: exit {r.returncode}: {r.stderr}")
    s = json.loads(r.stdout) if r.returncode == 0 else {}
    check(s.get("empty_examples") == 2 and s.get("bad_lines") == 1 and s.get("blank_lines") == 1,
          f"align: summary {s}")
    check(all(o["documents"] == 3 and o["empty_documents"] == 0 for o in s.get("outputs", [])), f"align: {s}")
    check("align.jsonl:2: the prompt is empty" in r.stderr and "align.jsonl:3: the answer is empty" in r.stderr,
          f"align: skipped examples not named: {r.stderr}")
    want = write(f"{tmp}/want.jsonl", [{"p": f"p{i}", "a": f"a{i}"} for i in (0, 4, 6)])
    run("--json-keys", "p", "a", "--input", want, "--output-prefix", f"{tmp}/want", *TOK)
    check(pair(f"{tmp}/al") == (read_docs(f"{tmp}/want_p_document"), read_docs(f"{tmp}/want_a_document")),
          "align: the pair is not lines 1, 5 and 7 in order")
    r = run("--sft", "--strict", "--input", src, "--output-prefix", f"{tmp}/strict", *TOK, "--skip-bad-lines")
    check(r.returncode == 1 and "align.jsonl:2: the prompt is empty (--strict" in r.stderr, f"--strict: {r.stderr}")
    check(not outputs_exist(f"{tmp}/strict"), "--strict: outputs left behind")
    print("alignment: 2 empty examples skipped and counted, 1 malformed and 1 blank line skipped, pair aligned; "
          "--strict stops at line 2")


HOSTILE = [
    ("missing answer", "--sft", {"prompt": "x"}, ":1:1: field 'answer' not found"),
    ("answer a number", "--sft", '{"prompt": "x", "answer": 5}', ":1:27: field 'answer' is a number, expected a string"),
    ("prompt null", "--sft", '{"prompt": null, "answer": "a"}', ":1:12: field 'prompt' is null, expected a string"),
    ("no assistant", "--messages-key", {"messages": [{"role": "user", "content": "u"}]},
     ":1:1: field 'messages' has no assistant message (1 messages)"),
    ("unknown role", "--messages-key", '{"messages": [{"role": "bot", "content": "u"}]}',
     ":1:15: message 1 has role 'bot'; expected system, user or assistant"),
    ("turn after the answer", "--messages-key",
     '{"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]}',
     ":1:54: message 2 (user) comes after the last assistant message"),
    ("message not an object", "--messages-key", '{"messages": ["hello"]}', ":1:15: message 1 is a string"),
    ("messages an object", "--messages-key", '{"messages": {"role": "user"}}',
     ":1:14: field 'messages' is an object, expected a list of messages"),
    ("content a list", "--messages-key", '{"messages": [{"role": "assistant", "content": [{"text": "a"}]}]}',
     ":1:48: message 1: \"content\" is an array, expected a string"),
]


def hostile(tmp):
    good = write(f"{tmp}/good.jsonl", [{"prompt": "p", "answer": "a"}])
    prefix = f"{tmp}/kept"
    check(run("--sft", "--input", good, "--output-prefix", prefix, *TOK).returncode == 0, "hostile: first run")
    before = {p: open(p, "rb").read() for p in outputs_exist(prefix)}
    for name, mode, line, message in HOSTILE:
        src = write(f"{tmp}/h.jsonl", [{"prompt": "ok", "answer": "ok"}, line] if mode == "--sft" else
                    [{"messages": [{"role": "assistant", "content": "ok"}]}, line])
        message = message.replace(":1:", ":2:", 1)
        flags = ["--sft"] if mode == "--sft" else ["--messages-key", "messages"]
        r = run(*flags, "--input", src, "--output-prefix", prefix, *TOK)
        check(r.returncode == 1 and f"h.jsonl{message}" in r.stderr,
              f"hostile {name}: exit {r.returncode}, stderr {r.stderr.strip()!r}, expected 'h.jsonl{message}'")
        check({p: open(p, "rb").read() for p in outputs_exist(prefix)} == before, f"hostile {name}: pair changed")
        check(not [f for f in os.listdir(tmp) if ".tmp-" in f], f"hostile {name}: temporaries left")
        r = run(*flags, "--input", src, "--output-prefix", f"{tmp}/skipped", *TOK, "--skip-bad-lines", "--json")
        s = json.loads(r.stdout) if r.returncode == 0 else {}
        check(s.get("bad_lines") == 1 and [o["documents"] for o in s.get("outputs", [])] == [1, 1],
              f"hostile {name} with --skip-bad-lines: exit {r.returncode}, {s or r.stderr}")
    print(f"hostile lines: {len(HOSTILE)} kinds, each exit 1 with file:line:column, the earlier pair untouched; "
          "each skipped and counted with --skip-bad-lines")


def usage(tmp):
    src = write(f"{tmp}/u.jsonl", [{"prompt": "p", "answer": "a"}])
    cases = [
        (["--sft", "--json-keys", "a"], "--json-keys cannot be used"),
        (["--messages-key", "m", "--prompt-key", "q"], "--messages-key cannot be used with --prompt-key"),
        (["--chat-template", "zephyr"], "need --messages-key"),
        (["--strict"], "--strict applies to supervised fine-tuning data only"),
        (["--messages-key", "m", "--chat-message", "{name}"], "'{name}' is not a placeholder"),
        (["--messages-key", "m", "--chat-answer-suffix", "\\x"], "unknown escape"),
        (["--messages-key", "m", "--chat-template", "alpaca"], "expected chatml or zephyr"),
        (["--sft", "--prompt-key", "k", "--answer-key", "k"], "both 'k'"),
    ]
    for flags, message in cases:
        r = run(*flags, "--input", src, "--output-prefix", f"{tmp}/usage", *TOK)
        check(r.returncode == 2 and message in r.stderr, f"usage {flags}: exit {r.returncode}, {r.stderr.strip()!r}")
        check(not outputs_exist(f"{tmp}/usage"), f"usage {flags}: outputs written")
    print(f"usage errors: {len(cases)} combinations refused with exit 2")


def workers(tmp):
    lines = [{"prompt": f"prompt {i} " * (i % 7 + 1), "answer": "" if i % 13 == 0 else f"answer {i}"} for i in range(3000)]
    src = write(f"{tmp}/w.jsonl", lines)
    for w in (1, 4):
        r = run("--sft", "--input", src, "--output-prefix", f"{tmp}/w{w}", *TOK, "--workers", w, "--append-eod")
        check(r.returncode == 0, f"workers {w}: {r.stderr}")
    same = all(open(f"{tmp}/w1_{k}_document.{e}", "rb").read() == open(f"{tmp}/w4_{k}_document.{e}", "rb").read()
               for k in ("inputs", "targets") for e in ("bin", "idx"))
    check(same, "--workers 1 and 4 differ")
    check(len(pair(f"{tmp}/w1")[0]) == 3000 - len(range(0, 3000, 13)), "workers: examples written")
    print("workers: --workers 1 and 4 write the same pair")


def main():
    with tempfile.TemporaryDirectory(prefix="mds-preprocess-sft-") as tmp:
        token_ids(tmp)
        chatml_against_plain(tmp)
        alignment(tmp)
        hostile(tmp)
        usage(tmp)
        workers(tmp)
    finish()


if __name__ == "__main__":
    main()
