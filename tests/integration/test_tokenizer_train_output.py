#!/usr/bin/env python3
"""mds-tokenizer-train's output folder appears complete or not at all:
  - --vocab-size 1073741824 (once "out of memory" with an empty folder left) is a usage error naming the flag and
    its bound, before anything is read or created;
  - a run that fails (a malformed line, a missing input) creates no folder, and leaves an existing folder of the
    user, and the files in it, as they were;
  - a file as --output-dir, a folder under a file, and an unwritable folder (as another user when root) fail at
    start-up naming --output-dir;
  - a successful run writes vocab.json, merges.txt and tokenizer.json (or the first two) into a new nested folder
    with no temporaries left, and removes a dead run's temporaries;
  - a write that fails on the last file (a file size limit standing in for a full disk) leaves no new folder,
    no temporaries, and the previous set of an existing folder as it was."""
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testkit import binary, check, finish  # noqa: E402

TOK = binary("mds-tokenizer-train")


def run(*args, prefix=()):
    return subprocess.run([*prefix, TOK, *[str(a) for a in args]], capture_output=True, text=True)


def listing(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else None


def main():
    with tempfile.TemporaryDirectory() as tmp:
        good = tmp + "/good.jsonl"
        with open(good, "w") as f:
            for i in range(100):
                f.write(json.dumps({"text": f"line {i}: the cat sat on the mat, and the dog sat too."}) + "\n")
        bad = tmp + "/bad.jsonl"
        with open(bad, "w") as f:
            f.write(open(good).read() + '{"text": "unterminated\n')

        # Bounds of --vocab-size, before any output.
        out = tmp + "/new/tok"
        r = run("--input", good, "--vocab-size", "1073741824", "--output-dir", out)
        check(r.returncode == 2 and "--vocab-size 1073741824 is too large: at most 2097152" in r.stderr
              and "out of memory" not in r.stderr, f"huge --vocab-size: {r.returncode}: {r.stderr[-300:]}")
        r = run("--input", good, "--vocab-size", "100", "--output-dir", out)
        check(r.returncode == 2 and "--vocab-size" in r.stderr, f"small --vocab-size: {r.returncode}: {r.stderr[-300:]}")
        check(not os.path.exists(tmp + "/new"), "a refused --vocab-size created the output folder")

        # Failures after the start create nothing and keep what the user had.
        for args, what in [(["--input", bad], "malformed line"), (["--input", tmp + "/missing.jsonl"], "missing input")]:
            r = run(*args, "--vocab-size", "300", "--output-dir", out)
            check(r.returncode == 1 and not os.path.exists(tmp + "/new"),
                  f"{what}: rc {r.returncode}, left {listing(tmp + '/new')}: {r.stderr[-300:]}")
        mine = tmp + "/mine"
        os.mkdir(mine)
        with open(mine + "/vocab.json", "w") as f:
            f.write("the user's")
        r = run("--input", bad, "--vocab-size", "300", "--output-dir", mine)
        check(r.returncode == 1 and listing(mine) == ["vocab.json"] and open(mine + "/vocab.json").read() == "the user's",
              f"failed run into an existing folder: rc {r.returncode}, {listing(mine)}")
        empty = tmp + "/empty"
        os.mkdir(empty)
        r = run("--input", bad, "--vocab-size", "300", "--output-dir", empty)
        check(r.returncode == 1 and listing(empty) == [], f"failed run removed or filled an existing empty folder: {listing(empty)}")

        # Destinations that cannot work fail at start-up, naming the flag.
        afile = tmp + "/afile"
        with open(afile, "w") as f:
            f.write("keep")
        for dest, needle in [(afile, f"the --output-dir '{afile}' exists and is not a folder"),
                             (afile + "/tok", "cannot create the --output-dir")]:
            r = run("--input", good, "--vocab-size", "300", "--output-dir", dest)
            check(r.returncode == 1 and needle in r.stderr and "internal error" not in r.stderr,
                  f"--output-dir {dest}: {r.returncode}: {r.stderr[-300:]}")
        check(open(afile).read() == "keep", "a file given as --output-dir was changed")
        if os.geteuid() == 0:
            pub = tempfile.mkdtemp(prefix="mds-tok-ro-")
            os.chmod(pub, 0o755)
            shutil.copy(good, pub + "/good.jsonl")
            os.chmod(pub + "/good.jsonl", 0o644)
            os.mkdir(pub + "/ro", 0o755)
            r = run("--input", pub + "/good.jsonl", "--vocab-size", "300", "--output-dir", pub + "/ro/tok",
                    prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
            check(r.returncode == 1 and "cannot create the --output-dir" in r.stderr and "Permission denied" in r.stderr
                  and listing(pub + "/ro") == [], f"unwritable --output-dir: {r.returncode}: {r.stderr[-300:]}")
            shutil.rmtree(pub, ignore_errors=True)
        else:
            os.mkdir(tmp + "/ro", 0o555)
            r = run("--input", good, "--vocab-size", "300", "--output-dir", tmp + "/ro")
            check(r.returncode == 1 and "cannot write into the --output-dir" in r.stderr, f"unwritable: {r.stderr[-300:]}")

        # Success: the whole set, no temporaries; a dead run's temporary is cleaned up.
        r = run("--input", good, "--vocab-size", "300", "--output-dir", out, "--quiet")
        check(r.returncode == 0 and listing(out) == ["merges.txt", "tokenizer.json", "vocab.json"],
              f"new nested folder: rc {r.returncode}, {listing(out)}: {r.stderr[-300:]}")
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = f"{out}/.vocab.json.tmp-{dead.pid}-{socket.gethostname()}"
        open(stale, "w").close()
        r = run("--input", good, "--vocab-size", "280", "--output-dir", out, "--no-tokenizer-json", "--quiet")
        vocab = json.load(open(out + "/vocab.json")) if r.returncode == 0 else {}
        check(r.returncode == 0 and len(vocab) == 280 and listing(out) == ["merges.txt", "tokenizer.json", "vocab.json"],
              f"second run: rc {r.returncode}, {len(vocab)} tokens, {listing(out)}: {r.stderr[-300:]}")

        # A full disk while writing: tokenizer.json (the largest, written last; it holds the vocabulary and
        # the merges of the 280-token model whose vocab.json and merges.txt are in `out`) does not fit.
        sizes = {n: os.path.getsize(f"{out}/{n}") for n in ["vocab.json", "merges.txt"]}
        limit = max(sizes.values()) + 1

        def small_files():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        before = {n: open(f"{out}/{n}", "rb").read() for n in listing(out)}
        for dest in [tmp + "/full/tok", out]:
            r = subprocess.run([TOK, "--input", good, "--vocab-size", "280", "--output-dir", dest, "--quiet"],
                               capture_output=True, text=True, preexec_fn=small_files)
            check(r.returncode == 1 and "File too large" in r.stderr and "tokenizer.json" in r.stderr,
                  f"full disk into {dest}: rc {r.returncode}: {r.stderr[-300:]}")
        check(not os.path.exists(tmp + "/full"), f"a failed write left {listing(tmp + '/full')}")
        check({n: open(f"{out}/{n}", "rb").read() for n in listing(out)} == before,
              f"a failed write changed the existing set: {listing(out)}")
        print("output folder: bounds checked first, nothing left by failed runs, complete sets only")
    finish()


if __name__ == "__main__":
    main()
