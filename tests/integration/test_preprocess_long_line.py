#!/usr/bin/env python3
"""One huge JSON line (100 MB: a book, or a file that lost its newlines) through mds-preprocess and
mds-tokenizer-train, with the peak RSS of each run read from wait4():
  - over --max-document-bytes (default 64 MiB) it is an error naming file:line and the flag, found while
    reading: the line is never held whole, so memory stays near the limit, not the line; nothing is written;
  - with --skip-bad-lines it is counted as a malformed line and the documents around it are written;
  - with a higher --max-document-bytes it is tokenized, with the ids one pass gives (here 4 GPT-2-style
    tokens per 4 words, checked through the .idx sizes), and the peak RSS stays a small multiple of the line
    (the line, its decoded text and its ids), where it was 870 MB before mds chunked long texts;
  - mds-tokenizer-train refuses or counts the same line the same way.
Without sanitizers the line is 100 MB; under ASan/UBSan (MDS_SANITIZE) it is 8 MB and RSS is not checked
(the sanitizers keep freed memory in quarantine)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testkit import binary, check, finish  # noqa: E402

PRE = binary("mds-preprocess")
TOK = binary("mds-tokenizer-train")
SANITIZE = bool(os.environ.get("MDS_SANITIZE"))
MB = 1 << 20
WORDS = " alpha beta gamma delta"  # 4 words, each one token of the tokenizer trained below


def run_measured(args):
    """Runs args; returns (exit status, stdout, stderr, peak RSS in MB) of that child alone."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([str(a) for a in args], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read().decode(), err.read().decode(errors="replace"), usage.ru_maxrss / 1024


def idx_sizes(prefix):
    """Sequence lengths from a Megatron .idx (specs/data.md §1)."""
    with open(prefix + ".idx", "rb") as f:
        head = f.read(9 + 8 + 1 + 8 + 8)
        n = struct.unpack("<Q", head[18:26])[0]
        return list(struct.unpack(f"<{n}i", f.read(4 * n)))


def main():
    line_mb = 8 if SANITIZE else 100
    repeats = line_mb * MB // len(WORDS)
    with tempfile.TemporaryDirectory() as tmp:
        # A tokenizer that knows the four words (trained by mds on a small corpus of them).
        small = tmp + "/small.jsonl"
        with open(small, "w") as f:
            for _ in range(200):
                f.write(json.dumps({"text": "alpha beta gamma delta" + WORDS * 20}) + "\n")
        r = subprocess.run([TOK, "--input", small, "--vocab-size", "300", "--output-dir", tmp + "/tok", "--quiet"])
        check(r.returncode == 0, "tokenizer-train on the small corpus")
        tok_files = ["--vocab-file", tmp + "/tok/vocab.json", "--merge-file", tmp + "/tok/merges.txt"]

        big = tmp + "/big.jsonl"
        with open(big, "w") as f:
            f.write('{"text": "first"}\n')
            f.write('{"id": 1, "text": "alpha beta gamma delta')
            chunk = WORDS * 4096
            for _ in range(repeats // 4096):
                f.write(chunk)
            f.write(WORDS * (repeats % 4096) + '"}\n')
            f.write('{"text": "last"}\n')
        line_bytes = os.path.getsize(big) - len('{"text": "first"}\n') - len('{"text": "last"}\n') - 1
        limit = ["--max-document-bytes", f"{line_mb // 2}M"] if SANITIZE else []  # default 64M otherwise

        # Over the limit: an error naming the line and the flag; memory near the limit, nothing written.
        out = tmp + "/out"
        rc, _, err, rss = run_measured([PRE, "--input", big, "--output-prefix", out, *tok_files, "--quiet", *limit])
        check(rc == 1 and f"big.jsonl:2: line of {line_bytes} bytes is longer than --max-document-bytes" in err
              and "--skip-bad-lines" in err, f"over the limit: rc {rc}: {err[-400:]}")
        check(not os.path.exists(out + "_text_document.bin") and not [n for n in os.listdir(tmp) if ".tmp-" in n],
              "a refused run left outputs")
        print(f"{line_mb} MB line over the limit: exit {rc}, peak RSS {rss:.0f} MB")
        if not SANITIZE:
            check(rss < 64 + 80, f"reading through a line over the 64 MiB limit took {rss:.0f} MB")

        # --skip-bad-lines: counted as malformed, the other two documents written.
        rc, stdout, err, rss = run_measured([PRE, "--input", big, "--output-prefix", out, *tok_files, "--json",
                                             "--skip-bad-lines", *limit])
        s = json.loads(stdout) if rc == 0 else {}
        check(rc == 0 and s.get("bad_lines") == 1 and s.get("lines") == 2 and s["outputs"][0]["documents"] == 2,
              f"--skip-bad-lines: rc {rc} {stdout[:300]} {err[-300:]}")
        check("skipping" in err and "big.jsonl:2:" in err, f"--skip-bad-lines does not name the line: {err[-300:]}")

        # A higher limit: tokenized, 4 tokens per 4 words, in a small multiple of the line's memory.
        for workers in ["1", "2"]:
            rc, stdout, err, rss = run_measured([PRE, "--input", big, "--output-prefix", out, *tok_files, "--json",
                                                 "--max-document-bytes", f"{2 * line_mb}M", "--workers", workers])
            sizes = idx_sizes(out + "_text_document") if rc == 0 else []
            check(rc == 0 and len(sizes) == 3 and sizes[1] == 4 + 4 * repeats,
                  f"--workers {workers}: rc {rc}, sizes {sizes[:3]}, expected {4 + 4 * repeats} in the middle: {err[-300:]}")
            print(f"{line_mb} MB line tokenized with --workers {workers}: peak RSS {rss:.0f} MB")
            if not SANITIZE:
                # The line, its decoded text and its 4-byte ids (0.8 of the line here), plus the tool itself.
                check(rss < 3.5 * line_mb + 60, f"--workers {workers}: peak RSS {rss:.0f} MB for a {line_mb} MB line")

        # mds-tokenizer-train: the same refusal, and the same line counted with a higher limit.
        rc, _, err, rss = run_measured([TOK, "--input", big, "--vocab-size", "300", "--output-dir", tmp + "/tok-big",
                                        "--quiet", *limit])
        check(rc == 1 and "big.jsonl:2: line of" in err and "--max-document-bytes" in err
              and not os.path.exists(tmp + "/tok-big"), f"tokenizer-train over the limit: rc {rc}: {err[-300:]}")
        rc, stdout, err, rss = run_measured([TOK, "--input", big, "--vocab-size", "300", "--output-dir", tmp + "/tok-big",
                                             "--json", "--max-document-bytes", f"{2 * line_mb}M"])
        s = json.loads(stdout) if rc == 0 else {}
        check(rc == 0 and s.get("lines") == 3 and s.get("pieces") == 4 * repeats + 6,
              f"tokenizer-train with a higher limit: rc {rc} {stdout[:200]} {err[-300:]}")
        print(f"tokenizer-train on the {line_mb} MB line: peak RSS {rss:.0f} MB")
        if not SANITIZE:
            check(rss < 2.5 * line_mb + 60, f"tokenizer-train: peak RSS {rss:.0f} MB for a {line_mb} MB line")
    finish()


if __name__ == "__main__":
    main()
