#!/usr/bin/env python3
"""mds-preprocess streams: its peak memory stays bounded whatever the input size. 384 MB of jsonl
made of random words (so the per-worker piece caches fill up and must recycle) are piped through
stdin with --workers 2; the peak RSS must stay far below the input size."""
import os
import resource
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
BIN = os.environ.get("MDS_BIN", "build/bin")


def main():
    if os.environ.get("MDS_SANITIZE"):
        print("skipped: sanitizer builds keep freed memory in quarantine, so RSS says nothing here")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        # A small tokenizer trained by mds itself keeps this test independent of ../shared.
        corpus = os.path.join(SOURCE, "data", "sample", "corpus.jsonl.zst")
        subprocess.run([os.path.join(BIN, "mds-tokenizer-train"), "--input", corpus, "--vocab-size", "2000",
                        "--output-dir", tmp + "/tok", "--quiet"], check=True)
        proc = subprocess.Popen([os.path.join(BIN, "mds-preprocess"), "--input", "-", "--output-prefix", tmp + "/out",
                                 "--vocab-file", tmp + "/tok/vocab.json", "--merge-file", tmp + "/tok/merges.txt",
                                 "--workers", "2", "--append-eod", "--json", "--quiet"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        letters = bytes(range(ord("a"), ord("a") + 26)) * 10  # 260 entries: byte % 256 picks a letter
        table = bytes(letters[b] if b % 7 else ord(" ") for b in range(256))
        target, sent, n = 384 << 20, 0, 0
        while sent < target:
            chunk = []
            for _ in range(256):
                words = os.urandom(1500).translate(table).decode("ascii")
                chunk.append('{"id": %d, "text": "%s"}\n' % (n, words))
                n += 1
            data = "".join(chunk).encode()
            proc.stdin.write(data)
            sent += len(data)
        proc.stdin.close()
        out = proc.stdout.read()
        if proc.wait() != 0:
            sys.exit("FAIL: mds-preprocess exited %d" % proc.returncode)
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print("input %.0f MB, %d documents; peak RSS of the children %.0f MB" % (sent / 2**20, n, peak_mb))
        if '"lines":%d' % n not in out.decode().replace(" ", ""):
            sys.exit("FAIL: summary does not count %d documents: %s" % (n, out[:300]))
        # Bound: the tokenizer, two workers' piece caches (<= ~80 MB each) and a few batches in
        # flight; the output index adds 12 bytes per document (3 MB here).
        if peak_mb > 320:
            sys.exit("FAIL: peak RSS %.0f MB for a %.0f MB input: not streaming" % (peak_mb, sent / 2**20))
        print("OK")


if __name__ == "__main__":
    main()
