#!/usr/bin/env python3
"""mds::hub::HttpClient (the HTTP layer of mds-hub-sync) against hub_server.py, through hub_http_probe:
  - the bearer token goes where it should (whoami answers), a wrong one is 401 and not retried;
  - 503 twice then success: 3 attempts after 1x and 2x the base wait; 429 with Retry-After: 1 waits 2 s
    and 429 with an exhausted RateLimit t+1 s, as huggingface_hub's http_backoff; a request marked
    not-to-retry (a commit) is tried once; 503 forever gives up after 1 + 5 attempts;
  - a byte range of a file PUT to a presigned data-plane URL without the token, the connection
    dropped after 1000 bytes on the first try: re-sent from the start of the range, stored once with the
    right sha256;
  - connection refused: status 0 with the error, retried; plain http to a non-loopback host and URLs with
    credentials are refused before anything is sent; the token appears in no output.
Exits 77 without the probe."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_server import HubServer  # noqa: E402
from testkit import binary, check, finish, free_port  # noqa: E402

PROBE = binary("hub_http_probe")
TOKEN = "hf_secret_token_never_printed"


def probe(spec, expect_rc=0):
    r = subprocess.run([PROBE, json.dumps(spec)], capture_output=True, text=True, timeout=120)
    check(TOKEN not in r.stdout and TOKEN not in r.stderr, f"the token is in the probe's output: {r.stdout} {r.stderr}")
    check(r.returncode == expect_rc, f"probe exit {r.returncode}, expected {expect_rc}: {r.stderr}")
    return (json.loads(r.stdout) if r.returncode == 0 else None), r.stderr


def main():
    with tempfile.TemporaryDirectory() as tmp, HubServer(os.path.join(tmp, "hub"), token=TOKEN) as hub:
        whoami = hub.url + "/api/whoami-v2"
        base = {"url": whoami, "token": TOKEN, "base_wait": 0.05}

        out, _ = probe(base)
        check(out["status"] == 200 and out["attempts"] == 1 and json.loads(out["body"]).get("name"),
              f"whoami with the token: {out}")
        out, _ = probe(dict(base, token="hf_wrong"))
        check(out["status"] == 401 and out["attempts"] == 1, f"a wrong token: 401, not retried: {out}")

        hub.add_fault(method="GET", path="^/api/whoami", status=503, times=2)
        out, err = probe(base)
        check(out["status"] == 200 and out["attempts"] == 3 and out["waits"] == [0.05, 0.1],
              f"503, 503, 200: waits of 1x and 2x the base: {out} {err}")
        check("retry 1" in err and "HTTP 503" in err, f"the retries are reported: {err}")

        hub.add_fault(method="GET", path="^/api/whoami", status=429, retry_after=1)
        t0 = time.time()
        out, _ = probe(base)
        check(out["status"] == 200 and out["waits"] == [2.0] and time.time() - t0 >= 2,
              f"429 Retry-After: 1 waits 1 + 1 s: {out}")

        hub.add_fault(method="GET", path="^/api/whoami", status=429, ratelimit=(0, 0))
        out, _ = probe(base)
        check(out["status"] == 200 and out["waits"] == [1.0], f"429 with RateLimit r=0;t=0 waits 1 s: {out}")

        hub.add_fault(method="GET", path="^/api/whoami", status=500)
        out, _ = probe(dict(base, retry=False))
        check(out["status"] == 500 and out["attempts"] == 1, f"not to be retried: one attempt: {out}")
        hub.clear_faults()

        hub.add_fault(method="GET", path="^/api/whoami", status=503, times=100)
        out, _ = probe(base)
        check(out["status"] == 503 and out["attempts"] == 6 and len(out["waits"]) == 5,
              f"503 forever: 1 + 5 attempts: {out}")
        hub.clear_faults()

        # A byte range of a file to a presigned URL, without the token; dropped once mid-body.
        path = os.path.join(tmp, "model.pt")
        data = os.urandom(300_000)
        with open(path, "wb") as f:
            f.write(data)
        off, n = 12_345, 200_000
        part = data[off:off + n]
        oid = hashlib.sha256(part).hexdigest()
        url = hub.signed_url(hub.url, f"/_storage/objects/{oid}", {"size": str(n)})
        hub.add_fault(method="PUT", path="^/_storage/objects/", drop_after_read=1000)
        out, err = probe({"method": "PUT", "url": url, "token": TOKEN, "authorize": False, "body_file": path,
                          "offset": off, "length": n, "base_wait": 0.05})
        st = hub.stats()
        check(out["status"] == 200 and out["attempts"] == 2, f"dropped once, then stored: {out} {err}")
        check(st["lfs_stored"].get(oid) == 1 and st["lfs_puts"].get(oid) == 2, f"stored once after 2 PUTs: {st}")
        stored = os.path.join(tmp, "hub", "lfs", "objects", oid[:2], oid[2:4], oid)
        check(os.path.exists(stored) and open(stored, "rb").read() == part, "the stored object is the byte range")
        log = [e for e in hub.log() if e["path"].startswith("/_storage/objects/")]
        check(len(log) == 2, f"two PUTs in the log: {log}")

        # Connection refused: a port nothing listens on (below the ephemeral range, so no outgoing connection
        # of another test takes it meanwhile).
        closed = free_port()
        out, _ = probe({"url": f"http://127.0.0.1:{closed}/x", "token": TOKEN, "base_wait": 0.01})
        check(out["status"] == 0 and out["error"] and out["attempts"] == 6, f"connection refused: retried, then the error: {out}")

        # Refused URLs.
        _, err = probe({"url": "http://example.org/api/whoami-v2", "token": TOKEN}, expect_rc=2)
        check("plain http" in err, f"http to a remote host is refused: {err}")
        _, err = probe({"url": f"https://user:{TOKEN}@example.org/", "token": TOKEN}, expect_rc=2)
        check("credentials" in err, f"credentials in a URL are refused: {err}")
        _, err = probe({"url": "ftp://127.0.0.1/x"}, expect_rc=2)
        check("unsupported URL scheme" in err, f"other schemes are refused: {err}")
    finish()


if __name__ == "__main__":
    main()
