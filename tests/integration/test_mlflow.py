#!/usr/bin/env python3
"""mds-train's MLflow tracking (docs/mlflow.md) against a real MLflow tracking server (the mlflow package, started
here on loopback with a SQLite store), read back with MLflow's own client (mlflow.tracking.MlflowClient):
  - a first job (--exit-interval, SLURM job 1111): one run in the experiment named by --mlflow-experiment-name,
    named by --mlflow-run-name, status KILLED (stopped before the end); its params hold the flags (Namespace keys
    and mds-only flags); every TensorBoard scalar of --tensorboard-dir is a metric under the documented key rule
    with the same steps, values (float32 tolerance) and wall times; the job's tags (mds.job.1.*) say its SLURM job, hosts,
    resumed iteration, last iteration and stop reason; the checkpoint keeps the run id;
  - a resubmitted job on 2 data-parallel processes that loads the checkpoint (SLURM job 2222) continues the same
    run (its id reaches the checkpoint rank 0 writes): FINISHED, mds.job.2.* tags,
    metrics continuing at the next steps, a flag whose value changed as the tag mds.job.2.param.<key>;
  - the server killed (SIGKILL of its process group) mid-run: the training goes on at its speed (time per iteration
    before / after printed and compared), ends with exit 0 within the flush timeout, and says so in a warning;
  - a tracking URI that is not an http(s) server, and one where nothing listens: a clear warning, the training runs.
Exits 77 without mds-train, or without mlflow / tensorboard in the venv."""
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile

SOURCE = os.environ.get("MDS_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "crosscheck"))
import testkit  # noqa: E402
from testkit import check, free_port  # noqa: E402
import tiny_dataset  # noqa: E402

TRAIN = testkit.binary("mds-train")
BIN = os.path.dirname(TRAIN)
try:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except Exception as e:  # noqa: BLE001
    testkit.skip(f"mlflow / tensorboard not importable: {e}")

ITERATION = re.compile(r"^ iteration +(\d+)/ +\d+ \| .*elapsed time per iteration \(s\): ([0-9.]+) \|", re.M)
EXPERIMENT = "mds-test"


def mlflow_key(tag):
    """docs/mlflow.md's rule, written again here: other characters become '_', no empty / dot-only path segments."""
    mapped = "".join(c if c.isascii() and (c.isalnum() or c in "_-. /") else "_" for c in tag)
    segs = [("_" * len(s) if set(s) == {"."} else s) for s in mapped.split("/") if s]
    return "/".join(segs)[:250] or "_"


def clean_env(job_id=None):
    launch = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "PMI_", "MLFLOW_")) and k not in launch}
    if job_id:
        env["SLURM_JOB_ID"] = job_id
    return env


def model_flags(data, iters, extra=()):
    return [*data, "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--train-iters", str(iters), "--lr", "1e-3", "--log-interval", "1", "--eval-interval", "1000",
            "--eval-iters", "1", "--seed", "7", "--threads", "1", "--device", "cpu", "--distributed-backend", "gloo",
            *extra]


def rank_env(rank, world, port, job_id):
    env = clean_env(job_id)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


class Server:
    def __init__(self, tmp):
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp + "/mlflow-server.log", "wb")
        # Its own process group: the kill below takes uvicorn's workers too.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{tmp}/mlflow.db", "--default-artifact-root", tmp + "/artifacts",
             "--workers", "1"], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.t0 = time.time()
        self.tmp = tmp

    def wait_ready(self):
        """The server takes seconds to import and migrate its store: the dataset is made meanwhile."""
        t0 = self.t0
        while time.time() - t0 < 90:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.uri + "/health", timeout=1) as r:
                    if r.status == 200:
                        print(f"mlflow server up on {self.uri} after {time.time() - t0:.1f} s")
                        return
            except OSError:
                time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"the mlflow server did not start (see {self.tmp}/mlflow-server.log)")

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def tensorboard_scalars(folder):
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value, round(e.wall_time * 1000)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def same_value(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=2e-7, abs_tol=1e-30)  # TensorBoard keeps float32


def compare_metrics(name, client, run_id, tb):
    """Every TensorBoard scalar is an MLflow metric with the same (step, value, wall time in ms) points."""
    bad = []
    for tag, points in sorted(tb.items()):
        history = sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, mlflow_key(tag)))
        want = sorted(points)
        if len(history) != len(want) or any(s1 != s2 or not same_value(v1, v2) or abs(t1 - t2) > 1
                                            for (s1, v1, t1), (s2, v2, t2) in zip(history, want)):
            bad.append(f"{tag!r} -> {mlflow_key(tag)!r}: MLflow {history[:4]}... ({len(history)}), "
                       f"TensorBoard {want[:4]}... ({len(want)})")
    check(not bad, f"{name}: {len(bad)} of {len(tb)} TensorBoard tags differ in MLflow: {bad[:3]}")
    return len(tb), sum(len(p) for p in tb.values())


def checkpoint_run_id(folder, run_id):
    """The mp_rank file's pickle holds the key mds_mlflow_run_id and the id (read as bytes: unpickling BMD's
    Namespace needs Megatron's classes)."""
    with zipfile.ZipFile(folder + "/mp_rank_00_model_states.pt") as z:
        pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        data = z.read(pkl)
    return b"mds_mlflow_run_id" in data and run_id.encode() in data


def two_jobs(tmp, data, server):
    client = MlflowClient(tracking_uri=server.uri)
    ckpt = tmp + "/ckpt"
    ml = ["--mlflow-tracking-uri", server.uri, "--mlflow-experiment-name", EXPERIMENT]
    args1 = model_flags(data, 8, ["--save", ckpt, "--save-interval", "2", "--exit-interval", "4",
                                  "--tensorboard-dir", tmp + "/tb1", "--mlflow-run-name", "first", *ml])
    r = subprocess.run([TRAIN, *args1], capture_output=True, text=True, env=clean_env("1111"), timeout=300)
    if not check(r.returncode == 0, f"first job exited {r.returncode}: {r.stderr[-2000:]}"):
        return
    check("MLflow: cannot" not in r.stderr and "MLflow: not everything" not in r.stderr,
          f"first job warned about MLflow: {r.stderr[-1000:]}")
    exp = client.get_experiment_by_name(EXPERIMENT)
    if not check(exp is not None, f"no experiment {EXPERIMENT!r} on the server"):
        return
    runs = client.search_runs([exp.experiment_id])
    if not check(len(runs) == 1, f"{len(runs)} runs after the first job, expected 1"):
        return
    run = runs[0]
    run_id = run.info.run_id
    check(run.info.run_name == "first", f"run name {run.info.run_name!r}")
    check(run.info.status == "KILLED", f"first job: run status {run.info.status}, expected KILLED (--exit-interval)")
    p = run.data.params
    want = {"num_layers": "2", "hidden_size": "64", "seq_length": "32", "micro_batch_size": "2",
            "global_batch_size": "4", "train_iters": "8", "lr": "0.001", "seed": "7", "exit_interval": "4",
            "save": ckpt, "load": "None", "fp16": "False", "mlflow_tracking_uri": server.uri,
            "mlflow_experiment_name": EXPERIMENT}
    wrong = {k: (p.get(k), v) for k, v in want.items() if p.get(k) != v}
    check(not wrong, f"first job: params (got, expected) {wrong}")
    check(len(p) > 150, f"first job: only {len(p)} params")
    t = run.data.tags
    job1 = {"mds.job.1.slurm_job_id": "1111", "mds.job.1.resumed_iteration": "0", "mds.job.1.iteration": "4",
            "mds.job.1.stop": "exit interval", "mds.job.1.hosts": socket.gethostname(),
            "mlflow.source.name": "mds-train"}
    wrong = {k: (t.get(k), v) for k, v in job1.items() if t.get(k) != v}
    check(not wrong, f"first job: tags (got, expected) {wrong}")
    check(all(k in t for k in ("mds.job.1.start_time", "mds.job.1.end_time", "mds.job.1.command_line")),
          f"first job: tags {sorted(k for k in t if k.startswith('mds.'))}")
    tb1 = tensorboard_scalars(tmp + "/tb1")
    check("steps-vs-samples/y=steps,x=samples" in tb1, f"TensorBoard tags {sorted(tb1)[:5]}")
    ntags, npoints = compare_metrics("first job", client, run_id, tb1)
    check(checkpoint_run_id(ckpt + "/global_step4", run_id), f"global_step4 does not keep the run id {run_id}")
    print(f"first job: run {run_id} KILLED, {len(p)} params, {ntags} TensorBoard tags / {npoints} points equal in "
          f"MLflow, job 1 tags, the id in the checkpoint")

    # The resubmitted job, on 2 data-parallel processes: loads the checkpoint, continues the same run. Rank 1
    # talks to MLflow; rank 0 writes mp_rank_00 and must get the run id from it.
    args2 = model_flags(data, 8, ["--load", ckpt, "--save", ckpt, "--save-interval", "2",
                                  "--tensorboard-dir", tmp + "/tb2", *ml])
    port = free_port()
    procs = [subprocess.Popen([TRAIN, *args2], env=rank_env(rk, 2, port, "2222"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rk in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    if not check(all(p.returncode == 0 for p in procs),
                 f"second job exited {[p.returncode for p in procs]}: {outs[0][1][-1500:]} {outs[1][1][-1500:]}"):
        return
    runs = client.search_runs([exp.experiment_id])
    check([x.info.run_id for x in runs] == [run_id], f"after the resume: runs {[x.info.run_id for x in runs]}, "
                                                     f"expected only {run_id}")
    run = client.get_run(run_id)
    check(run.info.status == "FINISHED", f"second job: run status {run.info.status}")
    t = run.data.tags
    job2 = {"mds.job.2.slurm_job_id": "2222", "mds.job.2.resumed_iteration": "4", "mds.job.2.iteration": "8",
            "mds.job.2.stop": "finished", "mds.job.2.loaded": ckpt + "/global_step4",
            "mds.job.2.layout": "TP 1 x PP 1 x DP 2 = 2 processes", "mds.job.1.layout": "TP 1 x PP 1 x DP 1 = 1 process",
            "mds.job.2.param.load": ckpt, "mds.job.2.param.exit_interval": "None",
            "mds.job.1.stop": "exit interval"}
    wrong = {k: (t.get(k), v) for k, v in job2.items() if t.get(k) != v}
    check(not wrong, f"second job: tags (got, expected) {wrong}")
    check(run.data.params.get("load") == "None", f"the first job's param load changed: {run.data.params.get('load')}")
    tb2 = tensorboard_scalars(tmp + "/tb2")
    both = {tag: tb1.get(tag, []) + tb2.get(tag, []) for tag in set(tb1) | set(tb2)}
    compare_metrics("both jobs", client, run_id, both)
    loss = [m.step for m in client.get_metric_history(run_id, mlflow_key("lm-loss-training/lm loss"))]
    check(sorted(loss) == list(range(1, 9)), f"lm loss steps over both jobs: {sorted(loss)}")
    check(checkpoint_run_id(ckpt + "/global_step8", run_id), "global_step8 does not keep the run id")
    print(f"second job: same run {run_id}, FINISHED, mds.job.2 tags, changed flags as job tags, lm loss at steps "
          f"{min(loss)}..{max(loss)}")


def server_killed(tmp, data, server):
    """SIGKILL of the server's process group mid-run: the training neither fails nor slows down."""
    flush = 3
    args = model_flags(data, 400, ["--mlflow-tracking-uri", server.uri, "--mlflow-experiment-name", "killed",
                                   "--mlflow-flush-timeout", str(flush)])
    t0 = time.time()
    p = subprocess.Popen([TRAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    errs = []
    reader = threading.Thread(target=lambda: errs.append(p.stderr.read()), daemon=True)
    reader.start()
    lines, killed_at, kill_iter = [], None, None
    last_line_at = None
    seen_at = {}  # iteration -> when its line arrived (the log's elapsed times round to 10 ms)
    for line in p.stdout:
        lines.append(line)
        m = ITERATION.match(line)
        if m:
            last_line_at = time.time()
            seen_at[int(m.group(1))] = last_line_at
        if m and killed_at is None and int(m.group(1)) >= 40:
            server.kill()
            killed_at, kill_iter = time.time(), int(m.group(1))
    p.wait()
    reader.join()
    err = errs[0] if errs else ""
    end = time.time()
    if not check(p.returncode == 0, f"server killed mid-run: exit {p.returncode}: {err[-2000:]}"):
        return
    if not check(killed_at is not None, "the run ended before iteration 40"):
        return
    its = [(int(m.group(1)), float(m.group(2))) for m in ITERATION.finditer("".join(lines))]
    before = statistics.median(s for i, s in its if 5 <= i <= kill_iter)
    after = statistics.median(s for i, s in its if i > kill_iter + 2)
    worst_after = max(s for i, s in its if i > kill_iter)
    # The pace before the kill as the lines arrived (this machine's load included), for the iterations after it.
    pace = (seen_at[kill_iter] - seen_at[5]) / (kill_iter - 5)
    expected_rest = pace * (its[-1][0] - kill_iter)
    print(f"server killed at iteration {kill_iter}: {before * 1000:.1f} ms/iteration before, {after * 1000:.1f} after "
          f"(slowest {worst_after * 1000:.1f}); {last_line_at - killed_at:.2f} s for the {its[-1][0] - kill_iter} "
          f"iterations left (expected ~{expected_rest:.2f}); exit {end - last_line_at:.2f} s after the last iteration "
          f"(flush timeout {flush} s); total {end - t0:.1f} s")
    check(after <= 2 * before + 0.02, f"iterations slowed down after the kill: {before:.4f} -> {after:.4f} s")
    check(worst_after <= before + 3.0, f"an iteration stalled after the kill: {worst_after:.3f} s")
    # Waiting on the dead server would add its timeouts (seconds) per request: far above this bound.
    check(last_line_at - killed_at <= 3 * expected_rest + 3, "the iterations after the kill took too long")
    check(end - last_line_at <= flush + 5, f"the end waited {end - last_line_at:.1f} s for MLflow (flush {flush} s)")
    check("MLflow: cannot" in err or "MLflow: not everything" in err,
          f"no MLflow warning after the server was killed: {err[-1500:]}")


def bad_uris(tmp, data):
    r = subprocess.run([TRAIN, *model_flags(data, 3, ["--mlflow-tracking-uri", tmp + "/mlruns"])], capture_output=True,
                       text=True, env=clean_env(), timeout=300)
    check(r.returncode == 0 and len(ITERATION.findall(r.stdout)) == 3,
          f"a file path as tracking URI: exit {r.returncode}, {len(ITERATION.findall(r.stdout))} iterations")
    check("MLflow is off" in r.stderr and "http://" in r.stderr, f"no clear warning for a file path: {r.stderr[-800:]}")
    port = free_port()
    t0 = time.time()
    env = clean_env()
    env["MLFLOW_TRACKING_URI"] = f"http://127.0.0.1:{port}"  # MLflow's variable, nothing listening there
    r = subprocess.run([TRAIN, *model_flags(data, 3, ["--mlflow-flush-timeout", "2"])], capture_output=True, text=True,
                       env=env, timeout=300)
    took = time.time() - t0
    check(r.returncode == 0 and len(ITERATION.findall(r.stdout)) == 3,
          f"nothing listening: exit {r.returncode}: {r.stderr[-800:]}")
    check(f"127.0.0.1:{port}" in r.stderr and "MLflow: cannot reach" in r.stderr,
          f"no warning naming the unreachable server: {r.stderr[-800:]}")
    check(took < 30, f"nothing listening: the run took {took:.1f} s")
    print(f"bad URIs: a file path -> 'MLflow is off' warning; nothing listening -> warnings, exit 0 in {took:.1f} s")


def main():
    tmp = tempfile.mkdtemp(prefix="mds-mlflow-")
    server = None
    try:
        server = Server(tmp)
        prefix, vocab, merges = tiny_dataset.make(tmp, BIN, SOURCE, 1000)
        data = ["--data-path", prefix, "--vocab-file", vocab, "--merge-file", merges, "--split", "90,8,2"]
        server.wait_ready()
        two_jobs(tmp, data, server)
        server_killed(tmp, data, server)
        bad_uris(tmp, data)
    finally:
        if server:
            server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    testkit.finish()


if __name__ == "__main__":
    main()
