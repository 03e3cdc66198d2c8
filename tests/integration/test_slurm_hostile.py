#!/usr/bin/env python3
"""mds-slurm-status with a hanging and a junk squeue (stand-in programs given with --squeue; no SLURM
needed):
  - every --timeout value class: nan, inf, -inf, -1, 0, 1e300, a day and a second, non-numeric, empty:
    exit 2 with --timeout named; tiny (1e-9), 0.5 and 1 against a squeue that hangs (also one that
    ignores SIGTERM and has a child in its group): UNKNOWN, exit 4, within the timeout + 5 s, and its
    whole process group is gone afterwards;
  - junk output (binary bytes, nesting 1,000,000 levels deep, a line of 50 MB without newline) and
    endless output on stdout or stderr: never a crash (exit 4, UNKNOWN), ends within a bounded time, peak
    RSS under 200 MB (ASan: 600 MB);
  - every other numeric flag refuses nan, inf, negatives and absurd values (exit 2, the flag named);
  - SIGINT / SIGTERM while squeue hangs: the watchdog ends by that signal and squeue's process group
    (out of reach of a Ctrl-C) is killed with it;
  - a bare --state-file name is a file of the current folder; a 20 MB file given as --state-file is
    refused without being read whole; a --log-file of 50 MB without a newline is read in bounded memory.
Exits 77 without the binary."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testkit import binary, check, finish, run_measured  # noqa: E402

TOOL = binary("mds-slurm-status")
SANITIZED = bool(os.environ.get("MDS_SANITIZE"))
RSS_LIMIT_KB = (600 if SANITIZED else 200) * 1024


def script(d, name, body):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def run(argv, limit_s, cwd=None):
    return run_measured(argv, limit_s, cwd=cwd)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def status(squeue, *args, limit_s=60, cwd=None):
    argv = [TOOL, "--job-name", "tr11-176B-ml", "--squeue", squeue, "--no-sacct", *args]
    if "--state-file" not in args:
        argv.append("--no-state")
    return run(argv, limit_s, cwd=cwd)


def test_timeout_values(d):
    hang = script(d, "squeue-hang", "exec sleep 300")
    # A squeue that ignores SIGTERM and leaves a child in its group: the group must get SIGKILL.
    stubborn = script(d, "squeue-stubborn", f"trap '' TERM\nsleep 300 &\necho $! > {d}/stubborn-child.pid\n"
                                            "while :; do sleep 1; done")
    for v in ["nan", "NaN", "inf", "-inf", "-1", "0", "1e300", "86401", "abc", "", "1s"]:
        rc, out, err, secs, _ = status(hang, f"--timeout={v}")
        check(rc == 2 and "--timeout" in err, f"--timeout '{v}': exit 2 naming --timeout, got {rc}: {err}")
        check(secs < 10, f"--timeout '{v}': refused at once, took {secs:.1f} s")
    for v, limit in [("1e-9", 5), ("0.5", 6), ("1", 6)]:
        rc, out, err, secs, _ = status(hang, "--timeout", v)
        check(rc == 4, f"hanging squeue, --timeout {v}: exit 4, got {rc}: {out} {err}")
        check("UNKNOWN" in out and "did not answer within" in out, f"--timeout {v}: UNKNOWN said: {out}")
        check("ALERT" not in out, f"--timeout {v}: never a job ALERT when nothing is known: {out}")
        check(secs < limit, f"--timeout {v}: returns within {limit} s, took {secs:.1f} s")
    rc, out, err, secs, _ = status(stubborn, "--timeout", "0.5", limit_s=60)
    check(rc == 4 and "UNKNOWN" in out, f"squeue ignoring SIGTERM: exit 4, got {rc}: {out} {err}")
    check(secs < 8, f"squeue ignoring SIGTERM: SIGKILL 2 s after SIGTERM, took {secs:.1f} s")
    try:
        with open(os.path.join(d, "stubborn-child.pid")) as f:
            child = int(f.read())
        deadline = time.time() + 3
        while alive(child) and time.time() < deadline:
            time.sleep(0.05)
        check(not alive(child), "the stubborn squeue's child (same process group) was killed too")
        if alive(child):
            os.kill(child, signal.SIGKILL)
    except (OSError, ValueError) as e:
        check(False, f"the stubborn squeue wrote its child's pid: {e}")


def test_signals(d):
    """SIGINT / SIGTERM to the watchdog while squeue hangs: it ends by that signal (the shell sees
    128 + N) and takes the squeue's process group with it, which a Ctrl-C would not reach."""
    pidfile = os.path.join(d, "hang.pid")
    hang = script(d, "squeue-hang-pid", f"echo $$ > {pidfile}\nsleep 300 &\necho $! >> {pidfile}\nwait")
    for sig in (signal.SIGTERM, signal.SIGINT):
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        p = subprocess.Popen([TOOL, "--job-name", "x", "--squeue", hang, "--no-sacct", "--no-state", "--timeout", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 10
        pids = []
        while time.time() < deadline:
            try:
                with open(pidfile) as f:
                    pids = [int(x) for x in f.read().split()]
                if len(pids) == 2:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        check(len(pids) == 2, f"{sig.name}: the stand-in squeue started")
        p.send_signal(sig)
        try:
            p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
        check(p.returncode == -sig, f"{sig.name}: ended by the signal (exit {128 + sig} in a shell), got {p.returncode}")
        end = time.time() + 3
        while any(alive(x) for x in pids) and time.time() < end:
            time.sleep(0.05)
        check(not any(alive(x) for x in pids), f"{sig.name}: squeue and its child are gone with the watchdog")
        for x in pids:
            if alive(x):
                os.kill(x, signal.SIGKILL)


def test_junk_output(d):
    junk = script(d, "squeue-junk", "head -c 300000 /dev/urandom; exit 0")
    deep = script(d, "squeue-deep", "head -c 1000000 /dev/zero | tr '\\0' '['; exit 0")
    longline = script(d, "squeue-longline", "head -c 50000000 /dev/zero | tr '\\0' 'x'; exit 0")
    endless = script(d, "squeue-endless", "exec yes '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[['")
    endless_err = script(d, "squeue-endless-stderr", "yes 'squeue: error: junk' >&2")
    for prog, what in [(junk, "binary junk"), (deep, "nesting 1,000,000 deep"), (longline, "a 50 MB line"),
                       (endless, "endless stdout"), (endless_err, "endless stderr")]:
        for fmt in ("auto", "json", "text"):
            rc, out, err, secs, rss = status(prog, "--timeout", "20", "--squeue-format", fmt, limit_s=90)
            label = f"{what} ({fmt})"
            check(rc == 4, f"{label}: exit 4 (UNKNOWN), got {rc}: {out[-1000:]} {err[-1000:]}")
            check("UNKNOWN" in out, f"{label}: UNKNOWN said: {out[-1000:]}")
            check(rc not in (-signal.SIGSEGV, -signal.SIGABRT, 134, 139), f"{label}: no crash")
            check("internal error" not in err, f"{label}: {err[-1000:]}")
            check(secs < 25, f"{label}: ends within 25 s, took {secs:.1f} s")
            check(rss < RSS_LIMIT_KB, f"{label}: peak RSS {rss // 1024} MB, limit {RSS_LIMIT_KB // 1024} MB")
            check(len(out) < 100000, f"{label}: the report does not echo the junk ({len(out)} bytes)")
            print(f"{label}: exit {rc} in {secs:.1f} s, peak RSS {rss // 1024} MB")


def test_other_flags(d):
    ok = script(d, "squeue-empty", 'echo \'{"jobs": []}\'')
    log = os.path.join(d, "main_log.txt")
    open(log, "w").close()
    bad = {
        "--stall-minutes": ["nan", "inf", "-1", "0", "1e300", "x"],
        "--max-pending-hours": ["nan", "inf", "-1", "1e300"],
        "--renotify-hours": ["nan", "inf", "-1", "1e300"],
        "--unreachable-after": ["nan", "inf", "0", "-1", "1e300"],
    }
    for flag, values in bad.items():
        for v in values:
            extra = ["--log-file", log] if flag == "--stall-minutes" else []
            rc, out, err, _, _ = status(ok, f"{flag}={v}", *extra)
            check(rc == 2 and flag in err, f"{flag} {v}: exit 2 naming the flag, got {rc}: {err}")
            check("internal error" not in err, f"{flag} {v}: {err}")
    for spec in ["/tmp:nan", "/tmp:inf", "/tmp:-5", "/tmp:101", "/tmp:1e300", "/tmp:90:nan"]:
        rc, out, err, _, _ = status(ok, "--watch-disk", spec)
        check(rc == 2 and "--watch-disk" in err, f"--watch-disk {spec}: exit 2, got {rc}: {err}")


def test_files(d):
    ok = script(d, "squeue-none", 'echo \'{"jobs": []}\'')
    work = os.path.join(d, "cwd")
    os.makedirs(work)
    rc, out, err, _, _ = status(ok, "--state-file", "state.json", cwd=work)
    check(rc == 3, f"no job: ALERT, exit 3, got {rc}: {out} {err}")
    check(os.path.isfile(os.path.join(work, "state.json")), f"a bare --state-file is kept in the current folder: {err}")
    check("warning" not in err, f"no warning about the state: {err}")
    big = os.path.join(d, "big.json")
    with open(big, "wb") as f:
        f.write(b"[" * (20 << 20))
    rc, out, err, secs, rss = status(ok, "--state-file", big)
    check(rc == 1 and big in err and "at most" in err, f"a 20 MB --state-file is refused: {rc}: {err}")
    check(rss < RSS_LIMIT_KB, f"big state file: peak RSS {rss // 1024} MB")
    deep = os.path.join(d, "deep.json")
    with open(deep, "wb") as f:
        f.write(b"[" * 100000)
    rc, out, err, secs, rss = status(ok, "--state-file", deep)
    check(rc == 1 and "nested deeper than 64" in err, f"a deeply nested state file: exit 1, got {rc}: {err}")
    # A log of 50 MB without a newline: read backwards in bounded memory.
    running = script(d, "squeue-running", "echo '1|1|N/A|N/A|RUNNING|None|2026-01-01T00:00:00|2026-01-01T00:00:00|"
                                          "N/A|1:00|u|p|n1|tr11-176B-ml'")
    log = os.path.join(d, "oneline.log")
    with open(log, "wb") as f:
        f.write(b"x" * (50 << 20))
    rc, out, err, secs, rss = status(running, "--squeue-format", "text", "--log-file", log, "--stall-minutes", "1")
    check(rc in (0, 3), f"a 50 MB line in the log: no error, got {rc}: {out} {err}")
    check(rss < RSS_LIMIT_KB, f"a 50 MB line in the log: peak RSS {rss // 1024} MB")


def main():
    d = tempfile.mkdtemp(prefix="slurm-hostile-")
    try:
        test_timeout_values(d)
        test_signals(d)
        test_junk_output(d)
        test_other_flags(d)
        test_files(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
