#!/usr/bin/env python3
"""mds-hub-sync against a hostile HTTP server (loopback, a raw socket server in this file, each answer
chosen by the repository or bucket name):
  - an endless `[[[[...` body (chunked), an endless body without length, a Content-Length of 10^15 with
    10 bytes sent, headers flooding without end: stopped at the cap of the request kind (named with the
    URL), at once and without retries;
  - junk bytes, nesting 100,000 levels deep: refused as not JSON / nested too deep;
  - a body dripping a byte every 0.2 s, headers never finished: given up after --timeout (retried
    --retries times);
  - a redirect to itself: not followed, named; a tree listing whose next page is itself: a loop;
  - S3: an endless listing, a listing nested 100 levels deep;
  for each, the exit status is 1, the error says what happened, the run ends within a bounded time, and
  the peak RSS of the process (wait4's ru_maxrss) stays under 200 MB (ASan: 600 MB).
Also: every numeric flag refuses nan, inf, out-of-range values (exit 2, the flag named); a bare
--state-file name works (the current folder); a read-only LOCAL_DIR (run as another user) fails before
any request with the folder, the errno text and --state-file named.
Exits 77 without the binary."""
import os
import select
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hub_server import HubServer  # noqa: E402
from testkit import binary, check, finish, run_measured  # noqa: E402

TOOL = binary("mds-hub-sync")
TOKEN = "hf_hostile_token_never_printed"
SANITIZED = bool(os.environ.get("MDS_SANITIZE"))
RSS_LIMIT_KB = (600 if SANITIZED else 200) * 1024
HANDLER_LIMIT_S = 40  # no answer streams longer than this, whatever the client does
SERVER_LIMIT_S = 300  # the server shuts itself down after this


def client_gone(sock):
    """True when the peer closed the connection (readable with nothing to read)."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def hold(sock, seconds):
    end = time.time() + seconds
    while time.time() < end and not client_gone(sock):
        time.sleep(0.05)


class Handler(socketserver.BaseRequestHandler):
    def read_request(self):
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 20:
            chunk = self.request.recv(65536)
            if not chunk:
                return None, {}
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        method, target, _ = head[0].split(" ", 2)
        return (method, target), {}

    def send(self, data):
        self.request.sendall(data)

    def handle(self):
        self.request.settimeout(HANDLER_LIMIT_S)
        try:
            req, _ = self.read_request()
            if req is None:
                return
            method, target = req
            self.server.log.append((method, target))
            self.answer(method, target)
        except OSError:
            pass  # the client hung up: what the limits are for

    def answer(self, method, target):
        path = target.split("?")[0]
        parts = path.split("/")
        start = time.time()
        if path.startswith("/api/models/hostile/"):
            mode, what = parts[4], parts[5] if len(parts) > 5 else ""
        else:  # S3, path style: /BUCKET[/KEY]
            mode, what = parts[1], "s3"
        if what == "s3":
            if method == "HEAD":
                self.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                return
            if mode == "s3-endless":
                self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nConnection: close\r\n\r\n"
                          b"<ListBucketResult>")
                chunk = b"<Contents><Key>k</Key><Size>1</Size></Contents>" * 1000
                while time.time() - start < HANDLER_LIMIT_S:
                    self.send(chunk)
            elif mode == "s3-deep":
                body = b"<a>" * 100 + b"</a>" * 100
                self.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return
        if what == "tree" and mode == "tree-loop":
            link = f"<http://127.0.0.1:{self.server.server_address[1]}{target}>; rel=\"next\""
            self.send(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLink: {link}\r\nContent-Length: 2\r\n\r\n[]"
                      .encode())
            return
        if what != "revision":
            self.send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        ok_json = b'{"sha": "0123456789abcdef0123456789abcdef01234567"}'
        if mode == "tree-loop":
            self.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ok_json) + ok_json)
        elif mode == "brackets":
            self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"[" * 65536
            frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
            while time.time() - start < HANDLER_LIMIT_S:
                self.send(frame)
        elif mode == "endless":
            self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
            chunk = b'{"sha": "' + b"a" * 65536
            while time.time() - start < HANDLER_LIMIT_S:
                self.send(chunk)
        elif mode == "huge-length":
            self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000000000000\r\n\r\n"
                      b'{"sha": "01')
            hold(self.request, HANDLER_LIMIT_S)
        elif mode == "junk":
            body = bytes(range(256)) * 4 + b"\x1b[2J not json"
            self.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif mode == "deep":
            body = b"[" * 100000 + b"]" * 100000
            self.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif mode == "drip":
            self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            while time.time() - start < HANDLER_LIMIT_S:
                self.send(b"1\r\n[\r\n")
                time.sleep(0.2)
        elif mode == "slow-headers":
            self.send(b"HTTP/1.1 200 OK\r\n")
            n = 0
            while time.time() - start < HANDLER_LIMIT_S:
                self.send(b"X-Pad-%d: x\r\n" % n)
                n += 1
                time.sleep(0.2)
        elif mode == "header-flood":
            self.send(b"HTTP/1.1 200 OK\r\n")
            n = 0
            while time.time() - start < HANDLER_LIMIT_S:
                self.send(b"".join(b"X-Flood-%d: %s\r\n" % (n + i, b"y" * 100) for i in range(1000)))
                n += 1000
        elif mode == "redirect":
            self.send(f"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{self.server.server_address[1]}{target}\r\n"
                      "Content-Length: 0\r\n\r\n".encode())
        else:
            self.send(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")


class HostileServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.log = []
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.timer = threading.Timer(SERVER_LIMIT_S, self.shutdown)
        self.timer.daemon = True

    def __enter__(self):
        self.thread.start()
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()
        self.shutdown()
        self.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


def run(argv, env, limit_s, cwd=None, user=None):
    return run_measured(argv, limit_s, env=env, cwd=cwd, user=user)


def hub_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "AWS_"))}
    env["HF_TOKEN"] = TOKEN
    env.update(extra or {})
    return env


def test_hostile_answers(tmp):
    local = os.path.join(tmp, "local")
    os.makedirs(local)
    with open(os.path.join(local, "log.txt"), "w") as f:
        f.write("iteration 1/ 10 |\n")
    # (repository or bucket, extra flags, what the error must say, seconds allowed)
    cases = [
        ("hostile/brackets", [], ["larger than 16 MiB", "/api/models/hostile/brackets/revision/main"], 30),
        ("hostile/endless", [], ["larger than 16 MiB"], 30),
        ("hostile/huge-length", [], ["announces 1000000000000000 bytes", "at most 16 MiB"], 30),
        ("hostile/header-flood", [], ["headers of the answer", "256 KiB"], 30),
        ("hostile/junk", [], ["not JSON"], 30),
        ("hostile/deep", [], ["nested deeper than 64 levels"], 30),
        ("hostile/drip", ["--timeout", "2", "--retries", "1"], ["no complete answer", "within 2 s", "after 2 attempts"], 30),
        # curl's stall check (body bytes only) and the answer timeout both end it at 2 s; either may say so.
        ("hostile/slow-headers", ["--timeout", "2", "--retries", "0"],
         [("no complete answer", "Operation too slow"), "/api/models/hostile/slow-headers/revision/main"], 30),
        ("hostile/redirect", [], ["HTTP 302", "redirect to", "not followed"], 30),
        ("hostile/tree-loop", [], ["pages loop"], 30),
        ("s3://s3-endless", [], ["larger than 16 MiB"], 30),
        ("s3://s3-deep", [], ["nesting deeper than 64 levels"], 30),
    ]
    s3_env = {"AWS_ACCESS_KEY_ID": "AKIDHOSTILE", "AWS_SECRET_ACCESS_KEY": "hostile-secret", "AWS_REGION": "us-east-1"}
    with HostileServer() as server:
        for repo, flags, want, limit in cases:
            env = hub_env(s3_env if repo.startswith("s3://") else None)
            argv = [TOOL, local, repo, "--endpoint", server.url, "--progress", "off", *flags]
            n_before = len(server.log)
            rc, out, err, secs, rss_kb = run(argv, env, limit_s=limit + 30)
            check(rc == 1, f"{repo}: exit 1, got {rc}: {err[-2000:]}")
            for w in want:
                alternatives = w if isinstance(w, tuple) else (w,)
                check(any(a in err for a in alternatives), f"{repo}: the error says '{w}': {err[-2000:]}")
            check("internal error" not in err, f"{repo}: no internal error: {err[-2000:]}")
            check(secs < limit, f"{repo}: ends within {limit} s, took {secs:.1f} s")
            check(rss_kb < RSS_LIMIT_KB, f"{repo}: peak RSS {rss_kb // 1024} MB, limit {RSS_LIMIT_KB // 1024} MB")
            check(TOKEN not in out + err, f"{repo}: the token is printed")
            print(f"{repo}: exit {rc} in {secs:.1f} s, peak RSS {rss_kb // 1024} MB, "
                  f"{len(server.log) - n_before} request(s): {err.strip().splitlines()[-1] if err.strip() else ''}")
            if any(w in str(want[0]) for w in ("larger than", "announces", "headers of")):
                requests = [m for m, t in server.log[n_before:] if m == "GET"]
                check(len(requests) == 1, f"{repo}: an answer over its cap is not asked for again: {server.log[n_before:]}")


def test_numeric_flags(tmp):
    local = os.path.join(tmp, "flags")
    os.makedirs(local, exist_ok=True)
    bad = {
        "--jobs": ["nan", "inf", "0", "-1", "65", "1e300", "x"],
        "--part-size-mib": ["nan", "inf", "4", "-5", "1e300", "x"],
        "--timeout": ["nan", "inf", "-inf", "0", "-1", "1e300", "86401", "x"],
        "--retries": ["nan", "inf", "-1", "101", "1e300"],
        "--progress-interval": ["nan", "inf", "0", "-1", "x"],
    }
    for flag, values in bad.items():
        for v in values:
            repo = "s3://bucket-x" if flag == "--part-size-mib" else "user/repo"
            rc, out, err, secs, _ = run([TOOL, local, repo, f"{flag}={v}"], hub_env(), limit_s=30)
            check(rc == 2 and flag in err, f"{flag} {v}: exit 2 naming the flag, got {rc}: {err}")
            check("internal error" not in err, f"{flag} {v}: {err}")


def test_state_location(tmp):
    """A bare --state-file name is a file of the current folder; an unwritable state folder fails up front."""
    with HubServer(os.path.join(tmp, "hub"), token=TOKEN) as hub:
        work = os.path.join(tmp, "cwd")
        local = os.path.join(tmp, "bare-local")
        os.makedirs(work)
        os.makedirs(local)
        with open(os.path.join(local, "a.txt"), "w") as f:
            f.write("hello\n")
        rc, out, err, _, _ = run([TOOL, local, "user/bare", "--endpoint", hub.url, "--create-repo", "--progress", "off",
                                  "--state-file", "state.json"], hub_env(), limit_s=120, cwd=work)
        check(rc == 0, f"a bare --state-file name: exit 0, got {rc}: {err}")
        check(os.path.isfile(os.path.join(work, "state.json")), f"the state is in the current folder: {os.listdir(work)}")
        check(hub.files("user/bare").get("a.txt") == b"hello\n", "the file was uploaded")

        # A state path that is a folder.
        rc, out, err, _, _ = run([TOOL, local, "user/bare", "--endpoint", hub.url, "--progress", "off",
                                  "--state-file", work], hub_env(), limit_s=60)
        check(rc == 2 and "not a regular file" in err and work in err, f"a folder as --state-file: exit 2, got {rc}: {err}")

        # A read-only LOCAL_DIR (default state folder inside it), run as another user: root writes anywhere.
        if os.geteuid() == 0 and shutil.which("setpriv"):
            ro_base = tempfile.mkdtemp(prefix="hub-ro-")
            os.chmod(ro_base, 0o755)
            ro = os.path.join(ro_base, "run")
            os.makedirs(ro)
            with open(os.path.join(ro, "b.txt"), "w") as f:
                f.write("b\n")
            os.chmod(ro, 0o555)
            hub.clear_log()
            rc, out, err, _, _ = run([TOOL, ro, "user/bare", "--endpoint", hub.url, "--progress", "off"], hub_env(),
                                     limit_s=60, user=65534)
            check(rc == 1, f"read-only LOCAL_DIR: exit 1, got {rc}: {err}")
            check("state folder" in err and ro in err and "Permission denied" in err and "--state-file" in err,
                  f"read-only LOCAL_DIR: the error names the folder, the errno text and --state-file: {err}")
            check("internal error" not in err and "filesystem error" not in err, f"worded for the user: {err}")
            check(hub.log() == [], f"nothing was sent before the state check failed: {hub.log()}")
            # A dry run changes nothing: it runs without the state folder.
            rc, out, err, _, _ = run([TOOL, ro, "user/bare", "--endpoint", hub.url, "--progress", "off", "--dry-run"],
                                     hub_env(), limit_s=60, user=65534)
            check(rc == 0, f"read-only LOCAL_DIR --dry-run: exit 0, got {rc}: {err}")
            shutil.rmtree(ro_base, ignore_errors=True)
        else:
            print("SKIP (one check): read-only LOCAL_DIR needs root and setpriv to run as another user")


def main():
    tmp = tempfile.mkdtemp(prefix="hub-hostile-")
    try:
        test_hostile_answers(tmp)
        test_numeric_flags(tmp)
        test_state_location(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
