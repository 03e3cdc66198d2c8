#!/usr/bin/env python3
"""mds-hub-sync with a file over 2 GiB (2^31 + 3 MiB + 12,345 bytes: 64-bit offsets everywhere) uploaded in
nine 256 MiB parts of a multipart LFS transfer to hub_server.py: the object the Hub assembles has the local
sha256 and size, each part was sent once, and the progress lines report bytes, rate and ETA. The content
repeats with a period (1,000,003 bytes) that no part boundary shares, so a part sent from a wrong offset
cannot go unnoticed. About 6.5 GB of temporary disk. Exits 77 without the binary."""
import hashlib
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_server import HubServer  # noqa: E402
from testkit import binary, check, finish, skip  # noqa: E402

TOOL = binary("mds-hub-sync")
MIB = 1 << 20
SIZE = (1 << 31) + 3 * MIB + 12_345
TOKEN = "hf_large_token"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        st = os.statvfs(tmp)
        if st.f_bavail * st.f_frsize < 8 * (1 << 30):
            skip(f"less than 8 GiB free in {tmp}")
        src = os.path.join(tmp, "run", "checkpoints")
        os.makedirs(src)
        path = os.path.join(src, "mp_rank_00_model_states.pt")
        block = os.urandom(1_000_003)
        digest = hashlib.sha256()
        with open(path, "wb") as f:
            left = SIZE
            while left:
                b = block[: min(left, len(block))]
                f.write(b)
                digest.update(b)
                left -= len(b)
        oid = digest.hexdigest()
        with HubServer(os.path.join(tmp, "hub"), token=TOKEN, lfs_threshold=MIB, multipart_threshold=64 * MIB,
                       chunk_size=256 * MIB) as hub:
            t0 = time.time()
            r = subprocess.run([TOOL, src, "test-user/tr11-176B-ml", "--endpoint", hub.url, "--create-repo",
                                "--progress", "lines", "--progress-interval", "1"],
                               env=dict(os.environ, HF_TOKEN=TOKEN), capture_output=True, text=True, timeout=900)
            took = time.time() - t0
            check(r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}")
            e = hub.entries("test-user/tr11-176B-ml").get("mp_rank_00_model_states.pt")
            check(e is not None and e["lfs"] and e["sha256"] == oid and e["size"] == SIZE,
                  f"the Hub's object has the local sha256 and size: {e}")
            stats = hub.stats()
            check(stats["lfs_puts"].get(oid) == 9 and stats["lfs_stored"].get(oid) == 1,
                  f"nine parts, each sent once, stored once: {stats['lfs_puts'].get(oid)}")
            progress = [line for line in r.stderr.splitlines() if "/s" in line]
            check(any("ETA" in line for line in progress), f"progress lines with rate and ETA: {r.stderr[-1500:]}")
            print(f"{SIZE / 1e9:.2f} GB uploaded in {took:.1f} s", file=sys.stderr)
    finish()


if __name__ == "__main__":
    main()
