"""A real single-node SLURM cluster for tests (specs/ops.md §3.1): munged, slurmctld and slurmd from
Debian's packages, started in the foreground as root on loopback with their own munge socket and
key, ports and state directory, and stopped by their PIDs (never by name). Needs root and the
packages slurmctld, slurmd, slurm-client and munge; `SlurmCluster.unavailable()` says why not.

    with SlurmCluster() as c:
        c.sbatch("--job-name=x", "--wrap", "sleep 60")
        c.run(["squeue"])            # any client, with SLURM_CONF set
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from testkit import free_port  # noqa: F401 (test_slurm_status takes it from here)

DAEMONS = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd"}
CLIENTS = ["sbatch", "squeue", "scancel", "sinfo", "mungekey"]


class SlurmCluster:
    @staticmethod
    def unavailable():
        if os.geteuid() != 0:
            return "not root (slurmd and munged of the test cluster run as root)"
        for name, path in DAEMONS.items():
            if not os.access(path, os.X_OK):
                return f"{path} missing (Debian packages slurmctld slurmd munge)"
        for c in CLIENTS:
            if not shutil.which(c):
                return f"{c} missing (Debian packages slurm-client munge)"
        return None

    def __init__(self, cpus=8):
        self.cpus = cpus
        self.base = tempfile.mkdtemp(prefix="mds-slurm-")
        os.chmod(self.base, 0o755)  # munged wants the socket's directory reachable
        self.host = socket.gethostname().split(".")[0]
        self.ctld_port, self.slurmd_port = free_port(), free_port()
        self.procs = {}
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.base, "slurm.conf"))

    # -- set-up ---------------------------------------------------------------------------------
    def _write_conf(self):
        b = self.base
        for d in ("state", "spool", "munge", "jobs"):
            os.makedirs(os.path.join(b, d), exist_ok=True)
        conf = f"""ClusterName=mdstest
SlurmctldHost={self.host}(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket={b}/munge/munge.sock
SlurmUser=root
SlurmdUser=root
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd.pid
SlurmctldLogFile={b}/slurmctld.log
SlurmdLogFile={b}/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={b}/jobcomp.txt
MpiDefault=none
ReturnToService=2
MinJobAge=600
SlurmdParameters=config_overrides
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        with open(os.path.join(b, "slurm.conf"), "w") as f:
            f.write(conf)

    def _spawn(self, name, argv):
        log = open(os.path.join(self.base, f"{name}.out"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            start_new_session=True)
        log.close()

    def start_munge(self):
        m = os.path.join(self.base, "munge")
        key = os.path.join(m, "key")
        subprocess.run(["mungekey", "--create", f"--keyfile={key}", "--force"], check=True, capture_output=True)
        os.chmod(key, 0o600)
        os.chmod(m, 0o711)
        self._spawn("munged", [DAEMONS["munged"], "--foreground", "--force", f"--socket={m}/munge.sock",
                               f"--key-file={key}", f"--log-file={m}/log", f"--pid-file={m}/pid",
                               f"--seed-file={m}/seed"])
        for _ in range(100):
            if os.path.exists(os.path.join(m, "munge.sock")):
                return
            if self.procs["munged"].poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("munged did not start: " + self.daemon_output("munged"))

    def start_slurmctld(self):
        self._spawn("slurmctld", [DAEMONS["slurmctld"], "-D", "-f", self.env["SLURM_CONF"]])

    def start_slurmd(self):
        self._spawn("slurmd", [DAEMONS["slurmd"], "-D", "-f", self.env["SLURM_CONF"], "-N", self.host])

    def wait_idle(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.run(["sinfo", "-h", "-o", "%T"], timeout=15)
            if r.returncode == 0 and any(s in r.stdout for s in ("idle", "mixed", "allocated")):
                return
            for name in ("slurmctld", "slurmd"):
                p = self.procs.get(name)
                if p and p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode}: " + self.daemon_output(name))
            time.sleep(0.25)
        raise RuntimeError("the test cluster did not become idle: " + self.daemon_output("slurmctld"))

    def __enter__(self):
        try:
            self._write_conf()
            self.start_munge()
            self.start_slurmctld()
            self.start_slurmd()
            self.wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- use ------------------------------------------------------------------------------------
    def run(self, argv, timeout=60, env=None, **kw):
        return subprocess.run(argv, env=dict(self.env, **(env or {})), capture_output=True, text=True,
                              timeout=timeout, **kw)

    def sbatch(self, *args):
        r = self.run(["sbatch", "--parsable", f"--chdir={self.base}/jobs", "-o", f"{self.base}/jobs/%j.out", *args])
        if r.returncode != 0:
            raise RuntimeError(f"sbatch {args}: {r.stderr}")
        return r.stdout.strip().split(";")[0]

    def states(self):
        """{job id as squeue prints it: (state, reason, name)} of every job, finished ones too."""
        r = self.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r|%j"], timeout=30)
        out = {}
        for line in r.stdout.splitlines():
            i, t, reason, name = line.split("|", 3)
            out[i] = (t, reason, name)
        return out

    def wait_state(self, job_id, states, timeout=30):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = self.states().get(job_id)
            if last and last[0] in states:
                return last
            time.sleep(0.25)
        raise RuntimeError(f"job {job_id} not in {states} after {timeout} s (last: {last})")

    def daemon_output(self, name):
        try:
            with open(os.path.join(self.base, f"{name}.out")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop_daemon(self, name, timeout=15):
        p = self.procs.pop(name, None)
        if not p or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def stop(self):
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run(["scancel", "--user=root"], timeout=20)
            deadline = time.time() + 15
            while time.time() < deadline:
                if not any(s[0] in ("RUNNING", "COMPLETING", "CONFIGURING") for s in self.states().values()):
                    break
                time.sleep(0.25)
        for name in ("slurmd", "slurmctld", "munged"):
            self.stop_daemon(name)
        shutil.rmtree(self.base, ignore_errors=True)
