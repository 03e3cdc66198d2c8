#!/usr/bin/env python3
"""mds-slurm-status against a real single-node SLURM (slurm_cluster.py: munged, slurmctld, slurmd from
Debian's packages, on loopback):
  - a RUNNING job with a 64-character name (the original script's `%.40j` cut it and raised a false
    alert), reported with its node, in the JSON and the text form;
  - PENDING jobs: a dependency, a `--array=1-3%1` chain (task 1 running, the rest JobArrayTaskLimit),
    a --begin start in the future; held and impossible (--nodes=5) jobs are NOT scheduled;
  - no job at all: ALERT, exit 3; a FAILED last job: its node named for `sbatch --exclude`;
  - a stalled log (no new iteration line for --stall-minutes, also while other lines are appended);
  - a full disk (a tiny tmpfs where mounting is allowed, else a threshold), space and inodes;
  - the controller stopped: UNKNOWN and exit 4, never the job alert; squeue hanging: --timeout;
    after a restart, the RECOVERED message;
  - examples/slurm/slurm-status-cron.slurm run as a job: it queues its next run an hour later and
    appends the watchdog's lines to the training's main log;
  - delivery: e-mail to an SMTP server (aiosmtpd, an independent implementation) and
    --alert-command, once per change with the state file; --append-to.
Exits 77 without root or without the SLURM packages."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_cluster import SlurmCluster  # noqa: E402
from testkit import check, finish, skip  # noqa: E402

BIN = os.path.abspath(os.environ.get("MDS_BIN", "build/bin"))
SOURCE = os.environ.get("MDS_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TOOL = os.path.join(BIN, "mds-slurm-status")
why = SlurmCluster.unavailable()
if why:
    skip(why)
if not os.path.exists(TOOL):
    skip(f"{TOOL} not built")



def status(cluster, *args, timeout=120):
    argv = [TOOL, *args]
    if "--state-file" not in args:
        argv.append("--no-state")
    r = cluster.run(argv, timeout=timeout)
    return r


def lines(r, label):
    return [line for line in r.stdout.splitlines() if f"] {label}: " in line]


LONG = "tr11-176B-ml-" + "x" * 44 + "-round3"  # 64 characters
assert len(LONG) == 64


def test_queue(c):
    # Running, with a name longer than the 40 columns the original script read.
    run_id = c.sbatch(f"--job-name={LONG}", "--wrap", "sleep 300")
    c.wait_state(run_id, {"RUNNING"})
    truncated = c.run(["squeue", "-h", "-o", "%.40j"]).stdout
    check(LONG not in truncated and LONG[:40] in truncated, "squeue's %.40j cuts the long name (the original bug)")
    for fmt in ("auto", "json", "text"):
        r = status(c, "--job-name", LONG, "--squeue-format", fmt)
        check(r.returncode == 0, f"{fmt}: running job: exit 0, got {r.returncode}: {r.stdout} {r.stderr}")
        pulse = lines(r, "PULSE")
        check(any(f"{LONG} is running for" in p and f"job {run_id}" in p and c.host in p for p in pulse),
              f"{fmt}: a PULSE line names the job, its id and node: {r.stdout}")
        check(not lines(r, "ALERT"), f"{fmt}: no alert for a running job: {r.stdout}")
    # A prefix of the name is another job.
    r = status(c, "--job-name", LONG[:40])
    check(r.returncode == 3, f"a 40-character prefix is not the job: exit 3, got {r.returncode}")

    # A chain: the next job waits for this one (singleton dependency).
    dep_id = c.sbatch(f"--job-name={LONG}", "--dependency=singleton", "--wrap", "sleep 5")
    c.wait_state(dep_id, {"PENDING"})
    r = status(c, "--job-name", LONG)
    check(r.returncode == 0 and any("waiting for the job it depends on" in p and f"job {dep_id}" in p
                                    for p in lines(r, "PULSE")), f"dependency pending is reported: {r.stdout}")

    # Pending only, on a dependency (on a held job).
    hold_id = c.sbatch("--job-name=blocker", "--hold", "--wrap", "sleep 5")
    only_dep = c.sbatch("--job-name=waits-on-dep", f"--dependency=afterok:{hold_id}", "--wrap", "sleep 5")
    c.wait_state(only_dep, {"PENDING"})
    r = status(c, "--job-name", "waits-on-dep", "--squeue-format", "text")
    check(r.returncode == 0 and "reason Dependency" in r.stdout, f"a pending dependency is SCHEDULED: {r.stdout}")

    # The %1 array: task 1 runs, the rest waits on JobArrayTaskLimit.
    arr = c.sbatch("--job-name=tr1-13B-round3", "--array=1-3%1", "--wrap", "sleep 300")
    c.wait_state(f"{arr}_1", {"RUNNING"})
    for fmt in ("json", "text"):
        r = status(c, "--job-name", "tr1-13B-round3", "--squeue-format", fmt)
        check(r.returncode == 0, f"{fmt}: array chain exit 0: {r.stdout}")
        check(any(f"job {arr}_1 " in p and "is running" in p for p in lines(r, "PULSE")), f"{fmt}: task 1 running: {r.stdout}")
        check(any(f"job {arr}_[2-3%1]" in p and "previous job of its array" in p and "JobArrayTaskLimit" in p
                  for p in lines(r, "PULSE")), f"{fmt}: tasks 2-3 wait on the array limit: {r.stdout}")

    # A start in the future.
    later = c.sbatch("--job-name=starts-later", "--begin=now+1hour", "--wrap", "sleep 5")
    c.wait_state(later, {"PENDING"})
    r = status(c, "--job-name", "starts-later")
    check(r.returncode == 0 and "is scheduled to start in 59m" in r.stdout or "is scheduled to start in 1h" in r.stdout,
          f"BeginTime: scheduled to start in about an hour: {r.stdout}")

    # Held, and a request the partition can never grant: in the queue but NOT scheduled.
    held = c.sbatch("--job-name=held-job", "--hold", "--wrap", "sleep 5")
    big = c.sbatch("--job-name=too-big", "--nodes=5", "--wrap", "sleep 5")
    c.wait_state(held, {"PENDING"})
    c.wait_state(big, {"PENDING"})
    # (SLURM 22.05 first says PartitionConfig for --nodes=5 on one node, PartitionNodeLimit later.)
    for name, reasons in (("held-job", ("JobHeldUser",)), ("too-big", ("PartitionConfig", "PartitionNodeLimit"))):
        r = status(c, "--job-name", name)
        check(r.returncode == 3, f"{name}: exit 3, got {r.returncode}")
        check(any(any(x in n for x in reasons) and "never start by itself" in n for n in lines(r, "NOTE")),
              f"{name}: NOTE names {reasons}: {r.stdout}")
        check(any("neither RUNNING nor SCHEDULED" in a for a in lines(r, "ALERT")), f"{name}: ALERT: {r.stdout}")
        check("ALERT" in r.stderr, f"{name}: the alert is on stderr too")

    # No job of that name.
    r = status(c, "--job-name", "tr8-104B-wide")
    check(r.returncode == 3, f"no job: exit 3, got {r.returncode}")
    check(any("tr8-104B-wide is neither RUNNING nor SCHEDULED: no job of that name is in the queue" in a
              for a in lines(r, "ALERT")), f"no job: the ALERT line: {r.stdout}")

    # The chain's last job failed: name its node.
    failed = c.sbatch("--job-name=crashes", "--wrap", "exit 3")
    c.wait_state(failed, {"FAILED"})
    for fmt in ("json", "text"):
        r = status(c, "--job-name", "crashes", "--squeue-format", fmt)
        check(r.returncode == 3, f"{fmt}: failed chain: exit 3 (nothing running), got {r.returncode}")
        notes = lines(r, "NOTE")
        check(any(f"job {failed}" in n and "FAILED" in n and f"sbatch --exclude={c.host}" in n for n in notes),
              f"{fmt}: NOTE names the node to exclude: {r.stdout}")
    r = status(c, "--job-name", "crashes", "--squeue-format", "json")
    check("exit code 3:0" in r.stdout, f"the JSON form gives the exit code: {r.stdout}")


def test_stall(c, tmp):
    log = os.path.join(tmp, "main_log.txt")
    job = c.sbatch("--job-name=stall-test", "--wrap", "sleep 300")
    c.wait_state(job, {"RUNNING"})
    time.sleep(1)  # the job's start second is behind us
    with open(log, "w") as f:
        f.write("building GPT model ...\n")
        f.write(" iteration      120/  292968 | consumed samples: 245760 | elapsed time per iteration (s): 1.2 |\n")
    state = os.path.join(tmp, "stall-state.json")
    args = ["--job-name", "stall-test", "--log-file", log, "--stall-minutes", "0.05", "--state-file", state]
    r = status(c, *args)
    check(r.returncode == 0 and "last iteration 120/292968" in r.stdout, f"fresh log: progresses: {r.stdout}")
    # The watchdog's own pulses land in the same log (tee -a): the file's time moves, the iteration does not.
    time.sleep(4)
    with open(log, "a") as f:
        f.write("[pulse] stall-test is running\n")
    r = status(c, *args)
    check(r.returncode == 3 and any("stall-test is RUNNING but" in a and "no new iteration line" in a and
                                    "last iteration 120/292968" in a for a in lines(r, "ALERT")),
          f"stalled although other lines were appended: {r.stdout}")
    # Without the state only the file's time is known: a quiet file is a stall too.
    time.sleep(4)
    r = status(c, "--job-name", "stall-test", "--log-file", log, "--stall-minutes", "0.05")
    check(r.returncode == 3 and "no new iteration line" in r.stdout, f"quiet file: stalled: {r.stdout}")
    with open(log, "a") as f:
        f.write(" iteration      121/  292968 | consumed samples: 247808 | elapsed time per iteration (s): 1.2 |\n")
    r = status(c, *args)
    check(r.returncode == 0 and "last iteration 121/292968" in r.stdout and not lines(r, "ALERT"),
          f"a new iteration line: well again: {r.stdout}")
    check(any("RECOVERED" in p for p in lines(r, "PULSE")), f"the stall's end is reported: {r.stdout}")
    r = status(c, "--job-name", "stall-test", "--log-file", os.path.join(tmp, "missing.txt"), "--stall-minutes", "0.01")
    check(r.returncode == 4 and "missing.txt" in r.stdout, f"an unreadable log is UNKNOWN (exit 4): {r.stdout}")


def test_disk(c, tmp):
    small = os.path.join(tmp, "small")
    os.makedirs(small)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=32", "tmpfs", small],
                             capture_output=True).returncode == 0
    job = c.sbatch("--job-name=disk-test", "--wrap", "sleep 300")
    c.wait_state(job, {"RUNNING"})
    try:
        if mounted:
            r = status(c, "--job-name", "disk-test", "--watch-disk", f"{small}:90")
            check(r.returncode == 0 and any(f"disk {small}: " in p for p in lines(r, "PULSE")), f"empty tmpfs: fine: {r.stdout}")
            with open(os.path.join(small, "checkpoint.pt"), "wb") as f:
                f.write(b"\0" * (960 * 1024))
            r = status(c, "--job-name", "disk-test", "--watch-disk", f"{small}:90")
            check(r.returncode == 3 and any(f"disk {small} is 9" in a and "% threshold" in a for a in lines(r, "ALERT")),
                  f"full tmpfs: ALERT: {r.stdout}")
            os.remove(os.path.join(small, "checkpoint.pt"))
            for i in range(30):
                open(os.path.join(small, f"f{i}"), "w").close()
            r = status(c, "--job-name", "disk-test", "--watch-disk", f"{small}:90:80")
            check(r.returncode == 3 and any("inodes" in a for a in lines(r, "ALERT")), f"inodes: ALERT: {r.stdout}")
        else:
            print("note: tmpfs cannot be mounted here; the disk test uses a threshold", file=sys.stderr)
            st = os.statvfs(tmp)
            used = 100.0 * (st.f_blocks - st.f_bfree) / max(1, (st.f_blocks - st.f_bfree + st.f_bavail))
            if used > 0.2:
                r = status(c, "--job-name", "disk-test", "--watch-disk", f"{tmp}:{used / 2:.2f}")
                check(r.returncode == 3 and any(f"disk {tmp} is" in a for a in lines(r, "ALERT")), f"threshold: ALERT: {r.stdout}")
        r = status(c, "--job-name", "disk-test", "--watch-disk", f"{tmp}/no/such/dir:90")
        check(r.returncode == 4 and "no/such/dir" in r.stdout, f"a missing path is UNKNOWN: {r.stdout}")
        r = status(c, "--job-name", "disk-test", "--watch-disk", f"{tmp}:120")
        check(r.returncode == 2 and "--watch-disk" in r.stderr, f"bad threshold: usage error: {r.stderr}")
    finally:
        if mounted:
            subprocess.run(["umount", small])


class Smtp:
    """aiosmtpd on loopback, collecting messages."""

    def __init__(self):
        from aiosmtpd.controller import Controller
        from slurm_cluster import free_port
        self.messages = []

        class Handler:
            async def handle_DATA(inner, server, session, envelope):  # noqa: N805
                self.messages.append(envelope)
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self):
        self.controller.start()
        return self

    def __exit__(self, *exc):
        self.controller.stop()


def test_delivery_and_unreachable(c, tmp):
    import email
    from email import policy
    try:
        smtp = Smtp()
    except ImportError as e:
        check(False, f"aiosmtpd not importable: {e}")
        return
    with smtp:
        state = os.path.join(tmp, "state.json")
        calls = os.path.join(tmp, "calls.txt")
        append = os.path.join(tmp, "log-of-logs.txt")
        cmd = f'printf "%s|%s|%s\\n" "$MDS_ALERT_LEVEL" "$1" "$(wc -l)" >> {calls}'
        base = ["--job-name", "tr11-deliver", "--state-file", state, "--mail-to", "oncall@example.org",
                "--mail-to", "eng-wg@example.org", "--mail-from", "bot@example.org",
                "--smtp", f"smtp://127.0.0.1:{smtp.port}", "--alert-command", cmd, "--append-to", append,
                "--unreachable-after", "2", "--timeout", "30"]
        r = status(c, *base)
        check(r.returncode == 3, f"no job: alert: {r.stdout} {r.stderr}")
        check(len(smtp.messages) == 1, f"one e-mail, got {len(smtp.messages)}")
        if smtp.messages:
            env = smtp.messages[0]
            msg = email.message_from_bytes(env.original_content, policy=policy.default)
            check(sorted(env.rcpt_tos) == ["eng-wg@example.org", "oncall@example.org"], f"recipients: {env.rcpt_tos}")
            check(env.mail_from == "bot@example.org", f"sender: {env.mail_from}")
            check(msg["Subject"] == "[ALERT] tr11-deliver is neither running nor scheduled to run", f"subject: {msg['Subject']}")
            body = msg.get_content()
            check("tr11-deliver is neither RUNNING nor SCHEDULED" in body and "The whole report" in body, f"body: {body}")
        r = status(c, *base)
        check(r.returncode == 3 and len(smtp.messages) == 1, f"the same alert is not mailed again: {len(smtp.messages)}")
        with open(calls) as f:
            got = f.read().splitlines()
        check(len(got) == 1 and got[0].startswith("ALERT|***ALERT: tr11-deliver is neither"), f"--alert-command once: {got}")
        with open(append) as f:
            appended = f.read()
        check(appended.count("ALERT: tr11-deliver is neither") == 2, f"--append-to has both runs: {appended}")

        # The controller goes away: UNKNOWN, exit 4, never the job alert; sent on the 2nd run in a row.
        job = c.sbatch("--job-name=tr11-deliver", "--wrap", "sleep 300")
        c.wait_state(job, {"RUNNING"})
        c.stop_daemon("slurmctld")
        for fmt in ("auto", "text"):
            t0 = time.time()
            r = status(c, *base, "--squeue-format", fmt)
            check(r.returncode == 4, f"{fmt}: controller down: exit 4, got {r.returncode}: {r.stdout}")
            # The text form relays squeue's message; the JSON form the errors[] it answers with.
            said = "Unable to contact" if fmt == "text" else "slurm_load_jobs"
            check(any("cannot query the SLURM scheduler" in u and said in u for u in lines(r, "UNKNOWN")),
                  f"{fmt}: UNKNOWN line says why: {r.stdout}")
            check("neither RUNNING nor SCHEDULED" not in r.stdout, f"{fmt}: no job alert while unreachable: {r.stdout}")
            print(f"controller down, {fmt}: {time.time() - t0:.1f} s", file=sys.stderr)
        subjects = [email.message_from_bytes(m.original_content, policy=policy.default)["Subject"] for m in smtp.messages]
        check(len(subjects) == 2 and subjects[1].startswith("[UNKNOWN] cannot reach SLURM"),
              f"'cannot reach' mailed once, on the second run: {subjects}")

        # squeue that hangs: --timeout.
        hang = os.path.join(tmp, "squeue-hangs")
        with open(hang, "w") as f:
            f.write("#!/bin/sh\nsleep 60\n")
        os.chmod(hang, 0o755)
        t0 = time.time()
        r = status(c, "--job-name", "tr11-deliver", "--squeue", hang, "--timeout", "2")
        check(r.returncode == 4 and "did not answer within 2 s" in r.stdout and time.time() - t0 < 15,
              f"a hanging squeue: UNKNOWN after the timeout: {r.stdout}")

        # Back: the job is running; both earlier problems are RECOVERED, each said once.
        c.start_slurmctld()
        c.wait_idle()
        c.wait_state(job, {"RUNNING"})
        r = status(c, *base)
        check(r.returncode == 0, f"after the restart: exit 0: {r.stdout}")
        subjects = [email.message_from_bytes(m.original_content, policy=policy.default)["Subject"] for m in smtp.messages]
        check(sum(s.startswith("[RECOVERED]") for s in subjects) == 2, f"two RECOVERED mails: {subjects}")
        r = status(c, *base)
        check(len(smtp.messages) == 4, f"nothing more to say: {len(smtp.messages)} mails")
        with open(calls) as f:
            levels = [line.split("|")[0] for line in f.read().splitlines()]
        check(levels == ["ALERT", "UNKNOWN", "RECOVERED", "RECOVERED"], f"--alert-command calls: {levels}")


def test_cron_example(c, tmp):
    script = os.path.join(SOURCE, "examples", "slurm", "slurm-status-cron.slurm")
    run_dir = os.path.join(tmp, "cron-run")
    os.makedirs(os.path.join(run_dir, "logs"))
    main_log = os.path.join(run_dir, "logs", "main_log.txt")
    with open(main_log, "w") as f:
        f.write(" iteration       10/  292968 | consumed samples: 20480 |\n")
    training = c.sbatch("--job-name=tr11-cron-watched", "--wrap", "sleep 300")
    c.wait_state(training, {"RUNNING"})
    env = {"MDS_BIN": BIN, "TRAINING_JOB_NAME": "tr11-cron-watched", "RUN_DIR": run_dir, "WATCH_GROUP": "",
           "WATCH_DISKS": f"{tmp}:99.9", "SBATCH_PARTITION": "debug", "HOME": tmp}
    r = c.run(["sbatch", "--parsable", f"--chdir={tmp}", "-o", f"{tmp}/cron-%j.out", script], env=env)
    if not check(r.returncode == 0, f"the cron example is accepted by sbatch: {r.stderr}"):
        return
    first = r.stdout.strip()
    c.wait_state(first, {"COMPLETED", "FAILED"}, timeout=60)
    check(c.states()[first][0] == "COMPLETED", f"the cron job completes: {c.states()[first]}")
    with open(os.path.join(tmp, f"cron-{first}.out")) as f:
        out = f.read()
    with open(main_log) as f:
        log = f.read()
    check("PULSE: tr11-cron-watched is running for" in log and "last iteration 10/292968" in log,
          f"the watchdog's lines are appended to the main log: {log} / job output: {out}")
    nxt = [i for i, s in c.states().items() if s[2] == "tr11-176B-ml-slurm-status" and s[0] == "PENDING"]
    check(len(nxt) == 1 and c.states()[nxt[0]][1] == "BeginTime", f"the next run is queued for later: {c.states()}")
    c.run(["scancel", "--name=tr11-176B-ml-slurm-status"])
    c.run(["scancel", training])


def main():
    with tempfile.TemporaryDirectory() as tmp, SlurmCluster() as c:
        t0 = time.time()
        test_queue(c)
        test_stall(c, tmp)
        test_disk(c, tmp)
        test_cron_example(c, tmp)
        test_delivery_and_unreachable(c, tmp)
        print(f"slurm tests: {time.time() - t0:.1f} s", file=sys.stderr)
    finish()


if __name__ == "__main__":
    main()
