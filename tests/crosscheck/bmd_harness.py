"""Runs BigScience's real Megatron-DeepSpeed `pretrain_gpt.py` (../shared/third_party/bigscience-megatron-deepspeed,
the fork tr1-13B, tr8-104B and BLOOM-176B trained with) on this CPU, beside mds-train, for the cross-checks of
issue 17.

    tree = BmdTree(workdir)                                  # copy + stand-ins + dataset helpers, once per test
    run = tree.run(megatron_flags, nproc=2, ds_config=ds_config(...), name="pp2")
    run.iterations   # [{'iteration': 1, 'lm loss': 10.9, 'grad norm': 3.1, 'learning rate': 1e-3, ...}, ...]
    run.checkpoint   # the --save folder (DeepSpeed layout: latest, global_stepN/...)
    mds = run_mds_train(build_bin + "/mds-train", megatron_flags, nproc=2, run_dir=..., ds_config=ds_config(...))
                     # mds-train launched the same way, its log parsed the same way (for cross-resume checks)

What it does:
  1. copies the Megatron-DeepSpeed tree to a temporary folder (the shared tree is never touched) and compiles
     Megatron's own dataset helpers (megatron/data/helpers.cpp, unchanged) there with the pybind11 headers that
     ship inside the torch wheel (Megatron's Makefile wants `python3 -m pybind11`, which the venv lacks); the
     shared object is cached under `cache_dir` by the hash of helpers.cpp and the Python ABI;
  2. puts OUR stand-ins beside it: a folder with `sitecustomize.py` and a copy of this file, first on PYTHONPATH;
     sitecustomize calls install_stand_ins() in every rank before Megatron is imported. Nothing in the copied
     tree is edited: every change is a stand-in module or a monkeypatch applied when a Megatron module has
     finished importing (an import hook), listed below;
  3. starts N ranks of `python pretrain_gpt.py <flags>` with the environment torch.distributed.run would give
     them (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT),
     DS_ACCELERATOR=cpu, Gloo on loopback (`--distributed-backend gloo` is the caller's flag), one thread
     per rank, under `nice`. Each rank is forked from a zygote (class Zygote): one process per tree that has the
     stand-ins installed and what pretrain_gpt.py imports (torch, DeepSpeed, Megatron) imported, then forks and
     runs the script as __main__ in the child with the rank's environment, folder and log, as `python -u
     pretrain_gpt.py` would; that start-up was more than half of a short launch's CPU. BMD_ZYGOTE=0 starts each
     rank as its own interpreter instead;
  4. returns the per-iteration log (the Megatron log line parsed, plus the same values at full precision
     from a hook on megatron.training.training_log), validation lines, each rank's output and the checkpoint
     folder.

Stand-ins and why each is numerically faithful (they matter only where the real program would use the CUDA
piece; they are our own code written from the documented behaviour, not copies):
  - apex.optimizers.FusedAdam: apex's multi_tensor_adam in adam_w_mode (the default, what Megatron builds),
    written with torch ops in fp32: m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; update = (m/bc1) /
    (sqrt(v/bc2) + eps) + wd*p; p -= lr*update, with bc_i = 1 - b_i^step; the step count lives in
    param_group['step'] and the state holds exp_avg / exp_avg_sq only, as apex keeps them (so optimizer files
    have apex's layout). adam_w_mode=False adds wd*p to the gradient instead (apex's L2 mode). It is a
    torch.optim.Optimizer registered as `apex.optimizers.FusedAdam`, so DeepSpeed's ZeRO accepts it exactly as
    it accepts apex's (deepspeed.runtime.zero.utils adds apex.optimizers.FusedAdam when apex imports).
    apex.optimizers.FusedSGD: torch.optim.SGD (apex's FusedSGD with wd_after_momentum=False is that update).
  - apex.multi_tensor_apply.multi_tensor_applier and amp_C.multi_tensor_l2norm / multi_tensor_scale: the same
    call signatures, computed per tensor with torch ops (l2norm: fp32 norms of the tensors, then the norm of
    the norms, and the per-tensor norms when asked; scale: dst = src * scale, setting the overflow flag on
    inf/nan). Used by Megatron's own (non-DeepSpeed) paths and --log-params-norm.
  - fused_mix_prec_layer_norm_cuda (MixedFusedLayerNorm, used for every LayerNorm since torch >= 1.11):
    forward_affine / backward_affine through torch.native_layer_norm and its backward, computed in fp32 and
    returned in the input's (weight's) dtype: the kernel's formula (biased variance, rsqrt(var + eps), fp32
    accumulation, mean and inverse std saved for the backward).
  - scaled_upper_triang_masked_softmax_cuda, scaled_masked_softmax_cuda, scaled_softmax_cuda (taken only for
    fp16/bf16 inputs): softmax(scale * x) in fp32 with masked (mask == 1, or above the diagonal) elements at
    -inf, a row with every element masked gives zeros as the kernel writes, result in the input dtype;
    backward scale * (g*y - y * sum(g*y)) in fp32; get_batch_per_block is the kernel's formula (warp size 32,
    128 threads per block), so Megatron picks the fused or the unfused path exactly as on a GPU.
  - megatron.fused_kernels.load: does nothing (the kernels above are importable; the CUDA sources are not
    compiled). megatron.data.dataset_utils.compile_helper: checks that the helpers compiled in step 1 import
    (instead of running `make`).
  - torch.cuda as Megatron's modules see it (their `torch` global is replaced by a view of torch whose `.cuda`
    is a CPU stand-in; DeepSpeed and torch itself keep the real torch.cuda): is_available() True,
    device_count() = LOCAL_WORLD_SIZE (so Megatron's `rank % device_count == local_rank` holds and it builds
    its model-parallel groups and seeds as on GPUs), set_device / synchronize / empty_cache do nothing,
    current_device() is 'cpu', FloatTensor / LongTensor / IntTensor / HalfTensor / BFloat16Tensor are the CPU
    legacy constructors, memory counters read 0. The "CUDA" RNG is a CPU generator of its own, apart from
    the CPU default generator as a GPU's is: get_rng_state / set_rng_state / manual_seed / default_generators
    act on it, megatron.mpu.random._set_cuda_rng_state sets it (so the tracker's fork swaps it), and every
    dropout of the model draws from it: torch.nn.Dropout.forward and transformer.bias_dropout_add(_fused_train)
    run with the CPU default generator holding its state (on_device_generator), as dropout on GPU tensors
    draws from the CUDA generator. What runs on the CPU in a GPU job (the DataLoader's base seed, ...) keeps
    drawing from the CPU generator, as there. Checkpoints therefore carry a CPU state (5056 bytes) under
    cuda_rng_state and in rng_tracker_states, where a GPU run writes the CUDA Philox state (16 bytes).
    Loading a 16-byte Philox state with offset 0 (torch.cuda.manual_seed(s)'s) sets the generator to
    manual_seed(s), the stand-in's equivalent (cpu_generator_state); one with draws behind it (offset > 0)
    is an error. (Initialization on "CUDA" tensors draws from the CPU generator: only resumes are compared.)
    torch.Tensor.cuda and torch.nn.Module.cuda return the object itself (on the CPU): Megatron calls
    `.cuda()` on batches and buffers.
  - torch._six (removed from torch): inf = math.inf, string_classes = (str, bytes), container_abcs =
    collections.abc, int_classes = int, as the old module defined them. numpy: np.float = float (the alias
    NumPy removed; Megatron's indexed_dataset maps dtype code 6 to it, i.e. float64).
  - deepspeed.initialize: Megatron passes the DeepSpeed config both as `args.deepspeed_config` and as
    `config=`; DeepSpeed >= 0.10 asserts on that. The wrapper hides args.deepspeed_config for that one call
    when `config` is given (the dict Megatron read from that same file), then restores it: the engine gets the
    same configuration the old DeepSpeed took from the file.
  - DeepSpeed's CPU accelerator reports fp16 as supported (it checks for mkldnn fp16 kernels, i.e. AVX512-FP16
    or AMX, and refuses `fp16.enabled` without them): torch's CPU kernels still compute fp16 tensors (with fp32
    accumulation in matmuls, as GPUs do), and DeepSpeed's fp16 optimizer and loss scaler are plain torch code.
  - deepspeed.comm.torch.build_shm_op returns None: DeepSpeed's CPU backend would JIT-compile a shared-memory
    all-reduce (C++, ~40 s, into ~/.cache/torch_extensions) used only by inference_all_reduce; training
    collectives go through torch.distributed (Gloo) either way.
  - Megatron's TensorBoard writer is closed at exit (it never closes it: a run of seconds loses its scalars).
  - `import mlflow` fails in the ranks: deepspeed.autotuning.autotuner tries it at import (for autotuning runs
    only; it then sets has_mlflow = False, as on a machine without mlflow), and mlflow, in the venv for mds's own
    MLflow tests, takes ~2 s of CPU per rank to import: a third of a short launch's start-up.
  - megatron/tokenizer/tokenizer.py's `from transformers import AutoTokenizer` (used by --tokenizer-type
    PretrainedFromHF only) gets a proxy that imports transformers at its first use: importing transformers (its
    import structure scanned file by file) took ~4 s of CPU per rank, more than the rest of Megatron's start-up.
    Only that module's import sees the proxy; any other `import transformers` gets the real package.
  - deepspeed.runtime.zero.muon.muon_optimizer.MuonWithAuxAdam: a class nothing is an instance of, and
    deepspeed.runtime.zero.muon.original_muon.muon_update: a function that raises. DeepSpeed's ZeRO code imports
    them every step (isinstance checks in average_tensor; muon_update before a loop that calls it only for
    parameters marked use_muon) and Megatron never builds Muon; the real modules compile Muon's kernels at import
    (torch._dynamo, ~2 s of CPU per rank).
  - torch.optim.Optimizer.state_dict / load_state_dict / zero_grad / add_param_group run as written: torch wraps
    them in torch._disable_dynamo, which imports torch._dynamo (~1.5 s of CPU per rank) at their first call only to
    keep them out of a torch.compile graph; nothing is compiled in these runs, so that is the function itself.
    With these three the ranks of a short launch start in about half the CPU time (12 s instead of 25 s for two).
  - DeepSpeedEngine.save_checkpoint / load_checkpoint of a bf16 engine at ZeRO stage 0 (the BF16_Optimizer): the
    DeepSpeed BigScience trained with treated its states as a ZeRO checkpoint (bf16_zero_pp_rank_* files and
    param_shapes, as BLOOM's checkpoints have them); DeepSpeed 0.19 writes those files but loads from another place
    and cannot resume them. During those two calls zero_optimization() answers True (_bf16_checkpoints_as_zero).

Needs ../shared/third_party (skip with exit 77 when absent: skip_unless_available) and torch, numpy, deepspeed in
the Python that runs the ranks (MDS_PYTHON or this interpreter).
"""
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE_NAME = "bigscience-megatron-deepspeed"

# The cross-check tests' verdicts: check() records a failed condition (and prints it at once); a test exits 1 at
# its end when `failures` is not empty.
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def finish(started, tmp):
    """A cross-check's last lines: its wall time, then exit 1 naming how many checks failed (the runs are kept in
    `tmp` for a look), or remove `tmp` and print "ok"."""
    print(f"total {time.time() - started:.1f} s")
    if failures:
        print(f"{len(failures)} failure(s); the runs are kept in {tmp}")
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


def mds_bin_dir(source_dir, tools=("mds-tokenizer-train", "mds-preprocess", "mds-train")):
    """The folder of mds's binaries (MDS_BIN, else <source>/build/bin) once the reference tree and the Python
    packages are there (skip_unless_available) and `tools` are built; else the test is skipped (exit 77)."""
    skip_unless_available(source_dir)
    bin_dir = os.environ.get("MDS_BIN", os.path.join(source_dir, "build", "bin"))
    for tool in tools:
        if not os.path.exists(os.path.join(bin_dir, tool)):
            print(f"SKIP: {os.path.join(bin_dir, tool)} not built")
            sys.exit(77)
    return bin_dir


# ----------------------------------------------------------------------------------------------------------------
# Locating the reference tree
# ----------------------------------------------------------------------------------------------------------------

def third_party_dir(source_dir=None):
    """../shared/third_party/bigscience-megatron-deepspeed next to the repository (or None)."""
    source_dir = os.path.abspath(source_dir or os.environ.get("MDS_SOURCE_DIR") or os.path.join(HERE, "..", ".."))
    candidates = [os.path.join(source_dir, "..", "shared", "third_party", TREE_NAME)]
    if os.environ.get("MDS_THIRD_PARTY"):
        candidates.insert(0, os.path.join(os.environ["MDS_THIRD_PARTY"], TREE_NAME))
    for c in candidates:
        if os.path.isfile(os.path.join(c, "pretrain_gpt.py")):
            return os.path.abspath(c)
    return None


def skip_unless_available(source_dir=None):
    """Returns the tree, or exits 77 (ctest: skipped) with a clear message when it or the Python packages are
    missing."""
    tree = third_party_dir(source_dir)
    if tree is None:
        print(f"SKIP: BigScience's Megatron-DeepSpeed is not here (../shared/third_party/{TREE_NAME} next to "
              f"the repository); the cross-check against the real program cannot run")
        sys.exit(77)
    missing = [m for m in ("torch", "numpy", "deepspeed", "regex", "six") if not _importable(m)]
    if missing:
        print(f"SKIP: Python packages for Megatron-DeepSpeed missing: {', '.join(missing)}")
        sys.exit(77)
    return tree


def _importable(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


# ----------------------------------------------------------------------------------------------------------------
# The copy, the helpers, the stand-in folder; running ranks
# ----------------------------------------------------------------------------------------------------------------

def ds_config(micro_batch_size, global_batch_size, zero_stage=1, clip=1.0, fp16=False, bf16=False,
              initial_scale_power=12, **extra):
    """A DeepSpeed config shaped like the ones BigScience's slurm scripts write."""
    cfg = {"train_micro_batch_size_per_gpu": micro_batch_size, "train_batch_size": global_batch_size,
           "gradient_clipping": clip, "zero_optimization": {"stage": zero_stage},
           "steps_per_print": 2000, "wall_clock_breakdown": False}
    if fp16:
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "loss_scale_window": 500, "hysteresis": 2,
                       "min_loss_scale": 1, "initial_scale_power": initial_scale_power}
    if bf16:
        cfg["bf16"] = {"enabled": True}
    cfg.update(extra)
    return cfg


class RunResult:
    """What one launch of pretrain_gpt.py left: returncode, seconds, iterations (list of dicts: the log line's
    fields, with 'lm loss', 'grad norm', 'learning rate', 'loss scale' replaced by the full-precision values of
    the training_log hook where it ran), validations (list of dicts), logs (one text per rank), checkpoint."""

    def __init__(self, name, run_dir, returncode, seconds, logs, checkpoint, metrics, command):
        self.name, self.run_dir, self.returncode, self.seconds = name, run_dir, returncode, seconds
        self.logs, self.checkpoint, self.command = logs, checkpoint, command
        self.iterations = parse_iteration_lines("\n".join(logs))
        self.validations = parse_validation_lines("\n".join(logs))
        exact = {m["iteration"]: m for m in metrics}
        for it in self.iterations:
            m = exact.get(it["iteration"])
            if m:
                it.update({k: v for k, v in m.items() if v is not None})
                it["exact"] = True

    @property
    def ok(self):
        return self.returncode == 0

    def tail(self, n=40):
        """The last lines of every rank, for failure messages."""
        out = []
        for r, text in enumerate(self.logs):
            lines = text.rstrip().splitlines()[-n:]
            out.append(f"--- rank {r} ({self.name}) ---\n" + "\n".join(lines))
        return "\n".join(out)

    def losses(self):
        return [it["lm loss"] for it in self.iterations]


_ITER_RE = re.compile(r"^\s*iteration\s+(\d+)/\s*(\d+)\s*\|(.*)$")


def parse_iteration_lines(text):
    """Megatron-DeepSpeed's training_log lines -> [{'iteration', 'train iters', field: value...}]."""
    rows = []
    for line in text.splitlines():
        m = _ITER_RE.match(line)
        if not m:
            continue
        row = {"iteration": int(m.group(1)), "train iters": int(m.group(2))}
        for field in m.group(3).split("|"):
            if ":" not in field:
                continue
            key, value = field.rsplit(":", 1)
            try:
                row[key.strip()] = float(value)
            except ValueError:
                row[key.strip()] = value.strip()
        rows.append(row)
    return rows


_VALID_RE = re.compile(r"(?:validation|\S+) loss at (.*?) \| (.*)$")


def parse_validation_lines(text):
    rows = []
    for line in text.splitlines():
        m = _VALID_RE.search(line)
        if not m:
            continue
        row = {"at": m.group(1).strip()}
        for field in m.group(2).split("|"):
            if ":" in field:
                key, value = field.rsplit(":", 1)
                try:
                    row[key.strip()] = float(value)
                except ValueError:
                    pass
        rows.append(row)
    return rows


def free_port():
    """A loopback port free now, below the kernel's ephemeral range (outgoing connections take their ports from
    that range, 32768-60999 by default: a port the kernel hands out for bind(0) may be taken by some other test's
    connection before rank 0 binds it)."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200):
        port = random.randrange(10000, max(10001, low))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Where the ranks' Python keeps its headers, extension suffix and torch's bundled pybind11 (without importing torch).
_PROBE = """import importlib.metadata, importlib.util, json, os, sysconfig
torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
print(json.dumps({"suffix": sysconfig.get_config_var("EXT_SUFFIX"), "include": sysconfig.get_paths()["include"],
                  "torch": os.path.join(torch_dir, "include"), "version": importlib.metadata.version("torch")}))"""


class BmdTree:
    """A private copy of Megatron-DeepSpeed with our stand-ins, ready to run."""

    def __init__(self, workdir, source_dir=None, python=None, cache_dir=None, nice=None):
        src = third_party_dir(source_dir)
        if src is None:
            raise FileNotFoundError(f"../shared/third_party/{TREE_NAME} not found")
        self.source = src
        self.workdir = os.path.abspath(workdir)
        self.python = python or os.environ.get("MDS_PYTHON") or sys.executable
        self.nice = int(os.environ.get("BMD_NICE", "10")) if nice is None else nice
        self.tree = os.path.join(self.workdir, TREE_NAME)
        self.shim = os.path.join(self.workdir, "bmd-stand-ins")
        self._zygote = None  # started at the first run (Zygote)
        shutil.copytree(src, self.tree, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.so", "build"))
        os.makedirs(self.shim)
        shutil.copy(os.path.abspath(__file__), os.path.join(self.shim, "bmd_harness.py"))
        with open(os.path.join(self.shim, "sitecustomize.py"), "w") as f:
            f.write(_SITECUSTOMIZE)
        self._compile_helpers(cache_dir)

    def _compile_helpers(self, cache_dir):
        data_dir = os.path.join(self.tree, "megatron", "data")
        source = os.path.join(data_dir, "helpers.cpp")
        info = json.loads(subprocess.run([self.python, "-c", _PROBE], check=True, capture_output=True, text=True,
                                         env=_quiet_env()).stdout.strip().splitlines()[-1])
        target = os.path.join(data_dir, "helpers" + info["suffix"])
        with open(source, "rb") as f:
            key = hashlib.sha256(f.read() + json.dumps(info, sort_keys=True).encode()).hexdigest()[:16]
        cached = os.path.join(cache_dir, f"bmd-helpers-{key}{info['suffix']}") if cache_dir else None
        if cached and os.path.exists(cached):
            shutil.copy(cached, target)
            return
        cmd = ([os.environ.get("CXX", "c++"), "-O3", "-shared", "-std=c++17", "-fPIC", "-I", info["torch"],
                "-I", info["include"], source, "-o", target])
        proc = subprocess.run(["nice", "-n", str(self.nice)] + cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"compiling Megatron's dataset helpers failed: {' '.join(cmd)}\n{proc.stderr}")
        if cached:
            os.makedirs(cache_dir, exist_ok=True)
            tmp = f"{cached}.tmp-{os.getpid()}"
            shutil.copy(target, tmp)
            os.replace(tmp, cached)

    def run(self, flags, nproc=1, ds_config=None, name="run", timeout=600, env=None, script="pretrain_gpt.py"):
        """Runs `python <script> flags` on nproc ranks (with --deepspeed --deepspeed_config when ds_config is a
        dict) and waits. Returns a RunResult; never raises for a failing run (check .ok)."""
        run_dir = os.path.join(self.workdir, "runs", name)
        extra = {"PYTHONPATH": os.pathsep.join([self.shim, self.tree]), "BMD_STAND_INS": "1",
                 "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        extra.update(env or {})
        spawn = None
        if os.environ.get("BMD_ZYGOTE", "1") != "0" and not any(k.startswith("PYTHON") for k in env or {}):
            if self._zygote is None:
                self._zygote = Zygote(self.python, _quiet_env() | _RANK_ENV | extra, self.workdir)
            spawn = self._zygote.spawn
        result = launch([self.python, "-u", os.path.join(self.tree, script)], flags, nproc, run_dir, name=name,
                        ds_config=ds_config, timeout=timeout, env=extra, nice=self.nice, spawn=spawn)
        if result.returncode == -signal.SIGABRT and teardown_abort(result.logs):
            print(f"{name}: Megatron-DeepSpeed aborted at interpreter exit (std::terminate in a C++ thread, no Python "
                  f"frame left in any thread): its run had finished; counted as rc 0")
            result.returncode = 0
        return result


def teardown_abort(logs):
    """Whether a SIGABRT of the reference program came after its Python code had ended: a C++ thread's
    std::terminate ("terminate called without an active exception", e.g. a Gloo or DeepSpeed thread still
    joinable at interpreter exit), and faulthandler's dump after "Fatal Python error: Aborted" shows no Python
    frame in any thread. Seen under load with pretrain_gpt.py at TP 2; mds is not involved in such a run.
    A rank that died of an uncaught Python exception (its traceback in the log) aborts the same way on its way
    out: that run failed, and is not counted as finished."""
    if any("Traceback (most recent call last)" in text for text in logs):
        return False
    seen = False
    for text in logs:
        if "Fatal Python error: Aborted" not in text:
            continue
        if "terminate called without an active exception" not in text:
            return False
        dump = text.split("Fatal Python error: Aborted", 1)[1]
        if 'File "' in dump or "<no Python frame>" not in dump:
            return False
        seen = True
    return seen


def run_mds_train(binary, flags, nproc, run_dir, name="mds-train", ds_config=None, timeout=600, env=None,
                  nice=None):
    """mds-train on nproc ranks with the same launch environment as BmdTree.run (what torchrun sets), for the
    cross-resume checks. Returns a RunResult (iteration lines parsed from its stdout; no full-precision hook)."""
    nice = int(os.environ.get("BMD_NICE", "10")) if nice is None else nice
    return launch([binary], flags, nproc, run_dir, name=name, ds_config=ds_config, timeout=timeout, env=env,
                  nice=nice)


def launch(cmd, flags, nproc, run_dir, name="run", ds_config=None, timeout=600, env=None, nice=10, spawn=None):
    """Starts cmd + flags as ranks 0..nproc-1 of one job (torchrun's environment, Gloo on loopback, one thread
    per rank, under nice), each rank's stdout+stderr in run_dir/rank<R>.log; waits (stopping the others when one
    fails, or all at the timeout: rc 124). With ds_config (a dict) adds --deepspeed --deepspeed_config.
    A job whose rendezvous port was taken meanwhile (EADDRINUSE: it failed before any work) starts again on
    another port, up to 3 times. spawn(argv, env, cwd, log_path, nice), when given, starts each rank instead of
    subprocess.Popen and returns an object with Popen's pid, poll(), returncode and wait() (Zygote.spawn)."""
    for attempt in range(3):
        result = _launch_once(cmd, flags, nproc, run_dir, name, ds_config, timeout, env, nice, spawn)
        port_taken = any("EADDRINUSE" in log or "address already in use" in log.lower() for log in result.logs)
        if result.returncode == 0 or not port_taken or attempt == 2:
            return result
        print(f"{name}: the rendezvous port was taken meanwhile (EADDRINUSE); starting the job again", flush=True)
    return result


def _launch_once(cmd, flags, nproc, run_dir, name, ds_config, timeout, env, nice, spawn=None):
    os.makedirs(run_dir, exist_ok=True)
    flags = [str(f) for f in flags]
    if ds_config is not None:
        cfg_path = os.path.join(run_dir, "ds_config.json")
        with open(cfg_path, "w") as f:
            json.dump(ds_config, f, indent=2)
        flags += ["--deepspeed", "--deepspeed_config", cfg_path]
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(metrics_path):
        os.remove(metrics_path)
    base = _quiet_env()
    base.update(_RANK_ENV)
    base.update({"BMD_METRICS": metrics_path, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                 "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "NODE_RANK": "0"})
    base.update(env or {})
    prefix = ["nice", "-n", str(nice)] if nice else []
    full = prefix + list(cmd) + flags
    procs, files = [], []
    start = time.time()
    for rank in range(nproc):
        e = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        if spawn is not None:
            procs.append(spawn(list(cmd) + flags, e, run_dir, os.path.join(run_dir, f"rank{rank}.log"), nice))
            continue
        log = open(os.path.join(run_dir, f"rank{rank}.log"), "w")
        files.append(log)
        procs.append(subprocess.Popen(full, cwd=run_dir, env=e, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))
    returncode = _wait_all(procs, timeout)
    seconds = time.time() - start
    for f in files:
        f.close()
    logs = []
    for rank in range(nproc):
        with open(os.path.join(run_dir, f"rank{rank}.log"), errors="replace") as f:
            logs.append(f.read())
    metrics = []
    if os.path.exists(metrics_path):
        with open(metrics_path) as f:
            metrics = [json.loads(line) for line in f if line.strip()]
    checkpoint = flags[flags.index("--save") + 1] if "--save" in flags else None
    return RunResult(name, run_dir, returncode, seconds, logs, checkpoint, metrics, full)


# What every rank's environment has besides torchrun's rank variables (the zygote starts with it too).
_RANK_ENV = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
             "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

# What pretrain_gpt.py imports, imported once by the zygote before it forks the ranks.
_ZYGOTE_PRELOAD = ("deepspeed", "deepspeed.runtime.utils", "megatron", "megatron.data.gpt_dataset", "megatron.enums",
                   "megatron.model", "megatron.training", "megatron.utils", "megatron.initialize", "megatron.arguments")


class Zygote:
    """One Python process per BmdTree that has the stand-ins installed and Megatron-DeepSpeed's modules imported
    (torch, DeepSpeed and Megatron: ~4 s of CPU per rank, more than half of a short launch), and forks a rank for
    each request: the child takes the rank's environment, working directory, log file (stdout and stderr), nice
    level and argv, starts a session of its own (as start_new_session does) and runs the script as __main__ with
    runpy, exiting as `python -u script` would (SystemExit's code, 1 after an uncaught exception, atexit handlers
    run). Each child is forked from the same untouched process, so no run sees another's state. BMD_ZYGOTE=0 in
    the environment starts every rank as its own `python -u script` instead."""

    def __init__(self, python, env, workdir):
        import socket
        self.path = os.path.join(workdir, f"zygote-{os.getpid()}.sock")
        if os.path.exists(self.path):
            os.remove(self.path)
        code = "import sys, bmd_harness; bmd_harness.zygote_main(sys.argv[1])"
        log_path = os.path.join(workdir, "zygote.log")
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen([python, "-u", "-c", code, self.path], env=env, cwd=workdir, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.time() + 300
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                with open(log_path, errors="replace") as f:
                    raise RuntimeError(f"bmd_harness: the zygote did not start (log {log_path}):\n{f.read()[-3000:]}")
            time.sleep(0.05)
        self._socket = socket
        import atexit
        atexit.register(self.close)

    def spawn(self, argv, env, cwd, log, nice):
        """argv: `python -u script args...` as BmdTree.run builds it; the zygote is that python, run with -u."""
        if argv[1:2] != ["-u"]:
            raise ValueError(f"bmd_harness: the zygote runs `python -u script ...`, not {argv[:3]}")
        return _ZygoteRank(self._socket, self.path, {"argv": [str(a) for a in argv[2:]], "env": env, "cwd": cwd,
                                                     "log": log, "nice": nice})

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if os.path.exists(self.path):
            os.remove(self.path)


class _ZygoteRank:
    """A rank forked by the zygote, with what _wait_all uses of subprocess.Popen: pid, poll(), returncode, wait()."""

    def __init__(self, socket, path, request):
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(path)
        self._conn.sendall((json.dumps(request) + "\n").encode())
        self._buf = b""
        self.returncode = None
        self.pid = int(self._line(block=True))

    def _line(self, block):
        while b"\n" not in self._buf:
            self._conn.setblocking(block)
            try:
                data = self._conn.recv(4096)
            except BlockingIOError:
                return None
            if not data:  # the zygote died: the rank is lost with it
                return "exit 125"
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def poll(self):
        if self.returncode is None:
            line = self._line(block=False)
            if line is not None:
                self.returncode = int(line.split()[1])
                self._conn.close()
        return self.returncode

    def wait(self):
        while self.poll() is None:
            time.sleep(0.05)
        return self.returncode


def zygote_main(path):
    """The zygote's loop (see Zygote): runs in a rank's Python with the stand-ins installed by sitecustomize."""
    import ctypes
    import importlib
    import select
    import socket

    try:  # PR_SET_PDEATHSIG: gone with the test process that started it
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    for name in _ZYGOTE_PRELOAD:
        importlib.import_module(name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    server.listen(64)
    os.rename(path + ".tmp", path)  # the socket appears under its name when it accepts: the parent waits for it
    print("zygote ready", flush=True)
    children = {}  # pid: the connection to report its exit on
    while True:
        ready, _, _ = select.select([server], [], [], 0.05)
        if ready:
            conn, _ = server.accept()
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            request = json.loads(data)
            pid = os.fork()
            if pid == 0:
                server.close()
                for c in children.values():
                    c.close()
                conn.close()
                _zygote_child(request)  # never returns: the interpreter exits with the script's code
            conn.sendall(f"{pid}\n".encode())
            children[pid] = conn
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()


def _zygote_child(request):
    import runpy
    import traceback

    try:
        os.setsid()
        if request["nice"]:
            os.nice(int(request["nice"]))
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    except BaseException:
        traceback.print_exc()
        os._exit(3)
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.exit(code)


def _quiet_env():
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_", "TORCHELASTIC", "BMD_")):
            del e[k]
    e.setdefault("DS_ACCELERATOR", "cpu")
    return e


def _wait_all(procs, timeout):
    """Waits for every rank; when one fails, or at the timeout, stops the others (their own process groups).
    Returns 0, the first non-zero code, or 124 at the timeout."""
    deadline = time.time() + timeout
    code = 0
    while True:
        running = [p for p in procs if p.poll() is None]
        failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
        if failed and not code:
            code = failed[0]
        if not running:
            return code
        if code or time.time() > deadline:
            if not code:
                code = 124
            # give the rest a moment to print their own error, then stop them
            grace = time.time() + 10
            while time.time() < grace and any(p.poll() is None for p in procs):
                time.sleep(0.2)
            for p in procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            for p in procs:
                p.wait()
            return code
        time.sleep(0.05)


# ----------------------------------------------------------------------------------------------------------------
# Checkpoint layout helpers
# ----------------------------------------------------------------------------------------------------------------

def checkpoint_files(root):
    """(tag from `latest`, sorted file names in that tag's folder), or (None, []) without `latest`."""
    latest = os.path.join(root, "latest")
    if not os.path.exists(latest):
        return None, []
    with open(latest) as f:
        tag = f.read().strip()
    return tag, sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, tag, "*")))


# ----------------------------------------------------------------------------------------------------------------
# The stand-ins, installed in every rank by sitecustomize (nothing below runs in the test process)
# ----------------------------------------------------------------------------------------------------------------

_SITECUSTOMIZE = '''\
# Written by tests/crosscheck/bmd_harness.py: installs the CPU stand-ins before Megatron-DeepSpeed is imported.
import os
if os.environ.get("BMD_STAND_INS") == "1":
    try:
        import bmd_harness
        bmd_harness.install_stand_ins()
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(3)
'''


def _deferred_auto_tokenizer(exec_module):
    """Runs exec_module (megatron.tokenizer.tokenizer's) with a `transformers` in sys.modules whose AutoTokenizer
    imports the real package at its first use (the module docstring says why)."""
    import importlib
    import types

    class AutoTokenizer:
        def __getattr__(self, attr):
            return getattr(importlib.import_module("transformers").AutoTokenizer, attr)

    def run(module):
        if "transformers" in sys.modules:
            return exec_module(module)
        stand_in = types.ModuleType("transformers")
        stand_in.AutoTokenizer = AutoTokenizer()
        sys.modules["transformers"] = stand_in
        try:
            exec_module(module)
        finally:
            if sys.modules.get("transformers") is stand_in:
                del sys.modules["transformers"]
    return run


def install_stand_ins():
    import collections.abc
    import importlib.abc
    import importlib.machinery
    import math
    import types

    import numpy as np
    import torch

    # numpy: the alias Megatron's indexed_dataset uses
    if "float" not in np.__dict__:
        np.float = float

    # mlflow: only DeepSpeed's autotuner imports it (try/except at import); None here makes that import fail at once.
    sys.modules["mlflow"] = None

    # Muon: only isinstance checks reach it (Megatron builds Adam or SGD); see the module docstring.
    class MuonWithAuxAdam(torch.optim.Optimizer):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("bmd_harness: DeepSpeed's Muon is a stand-in here (Megatron never builds it)")

    def muon_update(*args, **kwargs):
        raise RuntimeError("bmd_harness: DeepSpeed's Muon is a stand-in here (Megatron never builds it)")

    for name, attrs in (("muon_optimizer", {"MuonWithAuxAdam": MuonWithAuxAdam}),
                        ("original_muon", {"muon_update": muon_update})):
        muon = types.ModuleType("deepspeed.runtime.zero.muon." + name)
        muon.__dict__.update(attrs, __bmd_stand_in__=True)
        sys.modules[muon.__name__] = muon

    # torch.optim.Optimizer's state_dict / load_state_dict / zero_grad / add_param_group run as written: torch wraps
    # them in torch._disable_dynamo, which imports torch._dynamo (~1.5 s of CPU per rank) at the first call to say
    # "do not compile this"; nothing is compiled here (eager mode), so the answer is the function itself.
    for name in ("state_dict", "load_state_dict", "zero_grad", "add_param_group"):
        fn = getattr(torch.optim.Optimizer.__dict__.get(name), "__wrapped__", None)
        if fn is not None and not hasattr(fn, "__dynamo_disable"):
            fn.__dynamo_disable = fn

    # torch._six
    six = types.ModuleType("torch._six")
    six.inf = math.inf
    six.nan = math.nan
    six.string_classes = (str, bytes)
    six.int_classes = int
    six.container_abcs = collections.abc
    sys.modules["torch._six"] = six
    torch._six = six

    # .cuda() on tensors and modules stays on the CPU
    torch.Tensor.cuda = lambda self, device=None, non_blocking=False, **kw: self
    torch.nn.Module.cuda = lambda self, device=None: self

    for name, module in _stand_in_modules(torch).items():
        sys.modules[name] = module
    sys.modules["apex"].optimizers = sys.modules["apex.optimizers"]
    sys.modules["apex"].multi_tensor_apply = sys.modules["apex.multi_tensor_apply"]

    torch_view = _torch_with_cpu_cuda(torch)
    # Every dropout module (Megatron's embedding and attention dropout) draws from the "CUDA" generator.
    torch.nn.Dropout.forward = on_device_generator(torch.nn.Dropout.forward, torch, torch_view.cuda.generator)

    class MegatronPatcher(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != "megatron" and not fullname.startswith("megatron.") and fullname not in _PATCHED_OTHERS:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            exec_module = spec.loader.exec_module
            if fullname == "megatron.tokenizer.tokenizer":
                exec_module = _deferred_auto_tokenizer(exec_module)

            def exec_and_patch(module):
                exec_module(module)
                _patch_megatron_module(module, torch, torch_view)
            spec.loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, MegatronPatcher())

    # Megatron never closes its SummaryWriter, which writes its file every 2 minutes (flush_secs): a run of seconds
    # would leave its scalars unwritten. Closed at exit; the values written are untouched.
    import atexit

    def close_tensorboard():
        global_vars = sys.modules.get("megatron.global_vars")
        writer = getattr(global_vars, "_GLOBAL_TENSORBOARD_WRITER", None) if global_vars else None
        if writer is not None:
            writer.close()
    atexit.register(close_tensorboard)


def _torch_with_cpu_cuda(torch):
    """A view of the torch module whose `.cuda` is the CPU stand-in (given to Megatron's modules only)."""
    import types

    real_cuda = torch.cuda
    device_generator = torch.Generator()  # the GPU's default generator: apart from the CPU's, as on a GPU

    class CpuCuda(types.ModuleType):
        generator = device_generator
        FloatTensor = torch.FloatTensor
        DoubleTensor = torch.DoubleTensor
        HalfTensor = torch.HalfTensor
        BFloat16Tensor = torch.BFloat16Tensor
        LongTensor = torch.LongTensor
        IntTensor = torch.IntTensor
        ByteTensor = torch.ByteTensor
        BoolTensor = torch.BoolTensor

        def __getattr__(self, name):
            return getattr(real_cuda, name)

        @staticmethod
        def is_available():
            return True

        @staticmethod
        def device_count():
            return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))

        @staticmethod
        def current_device():
            return "cpu"

        @staticmethod
        def set_device(device):
            pass

        @staticmethod
        def synchronize(device=None):
            pass

        @staticmethod
        def empty_cache():
            pass

        @staticmethod
        def memory_allocated(device=None):
            return 0

        max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated

        @staticmethod
        def get_rng_state(device="cuda"):
            return device_generator.get_state()

        @staticmethod
        def set_rng_state(new_state, device="cuda"):
            device_generator.set_state(cpu_generator_state(torch, new_state))

        @staticmethod
        def manual_seed(seed):
            device_generator.manual_seed(int(seed))

        manual_seed_all = manual_seed

        @staticmethod
        def initial_seed():
            return device_generator.initial_seed()

        @property
        def default_generators(self):
            return (device_generator,) * self.device_count()

        @staticmethod
        def _lazy_call(callable, **kwargs):
            callable()

        @staticmethod
        def device(device):
            import contextlib
            return contextlib.nullcontext()

    class TorchView(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    view = TorchView("torch")
    view.cuda = CpuCuda("torch.cuda")
    return view


_PATCHED_OTHERS = ("deepspeed.comm.torch", "deepspeed.accelerator.cpu_accelerator", "deepspeed.runtime.engine")


def cpu_generator_state(torch, state):
    """The CPU generator state standing in for a saved "CUDA" RNG state: a CPU state as it is; a 16-byte CUDA
    Philox state (seed, offset) with offset 0 -- what torch.cuda.manual_seed(seed) leaves, and what mds-train's
    CPU runs save -- as the CPU generator after manual_seed(seed), the stand-in's torch.cuda.manual_seed. A
    Philox state with draws behind it has no CPU equivalent: an error."""
    if state.numel() == 16 and state.dtype == torch.uint8:
        raw = bytes(state.tolist())
        seed, offset = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
        if offset != 0:
            raise RuntimeError(f"a CUDA Philox RNG state (seed {seed}, offset {offset}) cannot be replayed by the "
                               f"CPU stand-in of torch.cuda")
        g = torch.Generator()
        g.manual_seed(seed)
        return g.get_state()
    return state


def _patch_megatron_module(module, torch, torch_view):
    name = module.__name__
    if name == "deepspeed.comm.torch":
        # DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce (a C++ build of ~40 s into
        # ~/.cache/torch_extensions) that only inference_all_reduce uses; training never calls it.
        module.build_shm_op = lambda: None
        return
    if name == "deepspeed.runtime.engine":
        _bf16_checkpoints_as_zero(module.DeepSpeedEngine)
        return
    if name == "deepspeed.accelerator.cpu_accelerator":
        # fp16 runs: DeepSpeed refuses fp16 on a CPU without mkldnn fp16 kernels (AVX512-FP16 / AMX); torch's
        # CPU kernels compute fp16 anyway (in fp32 accumulators), which is all a tiny model needs.
        module.CPU_Accelerator.is_fp16_supported = lambda self: True
        return
    if module.__dict__.get("torch") is torch:
        module.torch = torch_view
    if name == "megatron.fused_kernels":
        module.load = lambda args: None
    elif name == "megatron.data.dataset_utils":
        def compile_helper():
            import importlib
            importlib.import_module("megatron.data.helpers")  # compiled by BmdTree
        module.compile_helper = compile_helper
    elif name == "megatron.mpu.random":
        def _set_cuda_rng_state(new_state, device=-1):
            torch_view.cuda.generator.set_state(cpu_generator_state(torch, new_state))
        module._set_cuda_rng_state = _set_cuda_rng_state
    elif name == "megatron.model.transformer":
        # bias_dropout_add_fused_train is TorchScript: its dropout draws from the CPU default generator.
        for f in ("bias_dropout_add", "bias_dropout_add_fused_train"):
            setattr(module, f, on_device_generator(getattr(module, f), torch, torch_view.cuda.generator))
    elif name == "megatron.training":
        module.training_log = _recording_training_log(module.training_log, torch)
        _fix_deepspeed_initialize(module.deepspeed)


def on_device_generator(fn, torch, device_generator):
    """fn with the CPU default generator standing for the GPU's: random ops inside (dropout) draw from the
    stand-in "CUDA" generator, as dropout on GPU tensors draws from the CUDA generator; the CPU generator is
    left as it was."""
    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        cpu = torch.default_generator.get_state()
        torch.default_generator.set_state(device_generator.get_state())
        try:
            return fn(*args, **kwargs)
        finally:
            device_generator.set_state(torch.default_generator.get_state())
            torch.default_generator.set_state(cpu)
    return call


def _bf16_checkpoints_as_zero(engine_class):
    """bf16 at ZeRO stage 0 (DeepSpeed's BF16_Optimizer, tr11-176B's setting): the DeepSpeed BigScience trained with
    (0.6/0.7) saved and loaded its states as a ZeRO checkpoint (`zero_optimizer_state = self.zero_optimization() or
    self.bfloat16_enabled()`: bf16_zero_pp_rank_* files, param_shapes in mp_rank_*), which is what BLOOM's
    checkpoints hold. DeepSpeed 0.19 still writes those files but then loads the optimizer from mp_rank_*'s
    `optimizer` entry, which its BF16_Optimizer cannot read (KeyError: 0), so it cannot resume its own bf16 ZeRO-0
    checkpoints. During save_checkpoint / load_checkpoint of a bf16 engine, zero_optimization() answers True again,
    as it did for these checkpoint paths then."""
    import functools

    def as_zero(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            if not (self.bfloat16_enabled() and not self.zero_optimization()):
                return method(self, *args, **kwargs)
            self.zero_optimization = lambda: True
            try:
                return method(self, *args, **kwargs)
            finally:
                del self.zero_optimization
        return call

    engine_class.save_checkpoint = as_zero(engine_class.save_checkpoint)
    engine_class.load_checkpoint = as_zero(engine_class.load_checkpoint)


def _fix_deepspeed_initialize(deepspeed):
    real = deepspeed.initialize
    if getattr(real, "_bmd_wrapped", False):
        return

    def initialize(*a, **kw):
        args = kw.get("args")
        if kw.get("config") is not None and getattr(args, "deepspeed_config", None) is not None:
            saved = args.deepspeed_config
            args.deepspeed_config = None
            try:
                return real(*a, **kw)
            finally:
                args.deepspeed_config = saved
        return real(*a, **kw)
    initialize._bmd_wrapped = True
    deepspeed.initialize = initialize


def _recording_training_log(real, torch):
    """Appends {iteration, lm loss, grad norm, learning rate, loss scale} at full precision to $BMD_METRICS
    (from the rank that prints the log line: the last one) before the real training_log runs. The path is read at
    each call: a zygote (BmdTree) imports megatron.training before any run's environment exists."""

    def number(x):
        if x is None:
            return None
        if hasattr(x, "item"):
            x = x.float().mean().item() if x.numel() != 1 else x.item()
        return float(x)

    def training_log(loss_dict, total_loss_dict, learning_rate, iteration, loss_scale, report_memory_flag,
                     skipped_iter, grad_norm, params_norm, num_zeros_in_grad, model=None):
        path = os.environ.get("BMD_METRICS")
        if path and torch.distributed.get_rank() == torch.distributed.get_world_size() - 1:
            row = {"iteration": int(iteration), "learning rate": number(learning_rate),
                   "grad norm": number(grad_norm), "loss scale": number(loss_scale),
                   "params norm": number(params_norm)}
            for key, value in loss_dict.items():
                row[key] = number(value)
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
        return real(loss_dict, total_loss_dict, learning_rate, iteration, loss_scale, report_memory_flag,
                    skipped_iter, grad_norm, params_norm, num_zeros_in_grad, model)
    return training_log


def _stand_in_modules(torch):
    """apex, amp_C and Megatron's fused CUDA extensions, written with torch ops (see the module docstring)."""
    import types

    mods = {}

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__bmd_stand_in__ = True
        mods[name] = m
        return m

    # --- apex.optimizers -----------------------------------------------------------------------------------
    class FusedAdam(torch.optim.Optimizer):
        def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                     adam_w_mode=True, weight_decay=0., amsgrad=False, set_grad_none=True):
            if amsgrad:
                raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
            defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                            weight_decay=weight_decay)
            super().__init__(params, defaults)
            self.adam_w_mode = 1 if adam_w_mode else 0
            self.set_grad_none = set_grad_none

        def zero_grad(self, set_to_none=None):
            if set_to_none is None:
                set_to_none = self.set_grad_none
            super().zero_grad(set_to_none=set_to_none)

        @torch.no_grad()
        def step(self, closure=None, grads=None, output_params=None, scale=None, grad_norms=None,
                 grad_scaler=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                group["step"] = group.get("step", 0) + 1
                if group["bias_correction"]:
                    bc1 = 1 - beta1 ** group["step"]
                    bc2 = 1 - beta2 ** group["step"]
                else:
                    bc1 = bc2 = 1.0
                lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.is_sparse:
                        raise RuntimeError("FusedAdam does not support sparse gradients")
                    state = self.state[p]
                    if len(state) == 0:
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                    m, v = state["exp_avg"], state["exp_avg_sq"]
                    p32 = p if p.dtype == torch.float32 else p.float()
                    g = p.grad.float()
                    m32 = m if m.dtype == torch.float32 else m.float()
                    v32 = v if v.dtype == torch.float32 else v.float()
                    if self.adam_w_mode == 0 and wd != 0:
                        g = g + wd * p32
                    m32.mul_(beta1).add_(g, alpha=1 - beta1)
                    v32.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    denom = (v32 / bc2).sqrt_().add_(eps)
                    update = (m32 / bc1).div_(denom)
                    if self.adam_w_mode == 1 and wd != 0:
                        update.add_(p32, alpha=wd)
                    p32.add_(update, alpha=-lr)
                    for dst, src in ((p, p32), (m, m32), (v, v32)):
                        if dst is not src:
                            dst.copy_(src)
            return loss

    class FusedSGD(torch.optim.SGD):
        def __init__(self, params, lr=0.1, momentum=0., dampening=0., weight_decay=0., nesterov=False,
                     wd_after_momentum=False, materialize_master_grads=True, set_grad_none=False):
            if wd_after_momentum:
                raise RuntimeError("the FusedSGD stand-in implements wd_after_momentum=False only")
            super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                             nesterov=nesterov)

    FusedAdam.__module__ = FusedSGD.__module__ = "apex.optimizers"
    FusedAdam.__qualname__, FusedSGD.__qualname__ = "FusedAdam", "FusedSGD"
    module("apex")
    module("apex.optimizers", FusedAdam=FusedAdam, FusedSGD=FusedSGD)

    # --- apex.multi_tensor_apply, amp_C ----------------------------------------------------------------------
    class MultiTensorApply:
        available = True
        warned = False

        def __init__(self, chunk_size):
            self.chunk_size = chunk_size

        def __call__(self, op, noop_flag_buffer, tensor_lists, *args):
            return op(self.chunk_size, noop_flag_buffer, tensor_lists, *args)

    module("apex.multi_tensor_apply", MultiTensorApply=MultiTensorApply,
           multi_tensor_applier=MultiTensorApply(2048 * 32))

    def multi_tensor_l2norm(chunk_size, noop_flag, tensor_lists, per_tensor=False, *rest):
        tensors = tensor_lists[0]
        if not tensors:
            return torch.zeros(1), torch.zeros(0)
        norms = torch.stack([torch.linalg.vector_norm(t.float()) for t in tensors])
        if not torch.isfinite(norms).all():
            noop_flag.fill_(1)
        total = torch.linalg.vector_norm(norms).reshape(1)
        return total, (norms if per_tensor else torch.zeros(0))

    def multi_tensor_scale(chunk_size, noop_flag, tensor_lists, scale):
        for src, dst in zip(tensor_lists[0], tensor_lists[1]):
            if not torch.isfinite(src).all():
                noop_flag.fill_(1)
            dst.copy_(src.float() * float(scale))

    module("amp_C", multi_tensor_l2norm=multi_tensor_l2norm, multi_tensor_scale=multi_tensor_scale)

    # --- fused_mix_prec_layer_norm_cuda ------------------------------------------------------------------------
    def forward_affine(input, normalized_shape, weight, bias, eps):
        out, mean, invvar = torch.native_layer_norm(input.float(), list(normalized_shape), weight.float(),
                                                    bias.float(), eps)
        return out.to(weight.dtype), mean, invvar  # the kernel writes gamma's dtype (fp32 input, bf16 weights: bf16)

    def backward_affine(dout, mean, invvar, input, normalized_shape, weight, bias, eps):
        gi, gw, gb = torch.ops.aten.native_layer_norm_backward(
            dout.float(), input.float(), list(normalized_shape), mean, invvar, weight.float(), bias.float(),
            [True, True, True])
        return gi.to(input.dtype), gw.to(weight.dtype), gb.to(bias.dtype)

    def forward(input, normalized_shape, eps):
        out, mean, invvar = torch.native_layer_norm(input.float(), list(normalized_shape), None, None, eps)
        return out.to(input.dtype), mean, invvar

    def backward(dout, mean, invvar, input, normalized_shape, eps):
        gi, _, _ = torch.ops.aten.native_layer_norm_backward(
            dout.float(), input.float(), list(normalized_shape), mean, invvar, None, None, [True, False, False])
        return gi.to(input.dtype)

    module("fused_mix_prec_layer_norm_cuda", forward_affine=forward_affine, backward_affine=backward_affine,
           forward_affine_mixed_dtypes=forward_affine, forward=forward, backward=backward)

    # --- scaled (masked) softmax kernels --------------------------------------------------------------------
    def softmax_fwd(x, scale, masked):
        s = x.float() * float(scale)
        if masked is not None:
            s = s.masked_fill(masked, float("-inf"))
        mx = s.amax(dim=-1, keepdim=True)
        e = torch.exp(s - mx)
        if masked is not None:
            e = e.masked_fill(masked, 0.0)
        total = e.sum(dim=-1, keepdim=True)
        y = torch.where(total == 0, torch.zeros_like(e), e / total)
        return y.to(x.dtype)

    def softmax_bwd(output_grads, softmax_results, scale):
        g = output_grads.float()
        y = softmax_results.float()
        gy = g * y
        return (float(scale) * (gy - y * gy.sum(dim=-1, keepdim=True))).to(output_grads.dtype)

    def upper_triang_fwd(inputs, scale):
        sq, sk = inputs.shape[-2], inputs.shape[-1]
        masked = torch.ones(sq, sk, dtype=torch.bool).triu(diagonal=1)
        return softmax_fwd(inputs, scale, masked)

    def masked_fwd(inputs, mask, scale):
        return softmax_fwd(inputs, scale, mask.to(torch.uint8) == 1)

    def scaled_fwd(inputs, scale):
        return softmax_fwd(inputs, scale, None)

    def get_batch_per_block(query_seq_len, key_seq_len, batches, attn_heads):
        log2_elements = 0
        while (1 << log2_elements) < key_seq_len:
            log2_elements += 1
        next_power_of_two = 1 << log2_elements
        warp_size = next_power_of_two if next_power_of_two < 32 else 32
        batches_per_warp = 2 if next_power_of_two <= 128 else 1
        return (128 // warp_size) * batches_per_warp

    module("scaled_upper_triang_masked_softmax_cuda", forward=upper_triang_fwd, backward=softmax_bwd)
    module("scaled_masked_softmax_cuda", forward=masked_fwd, backward=softmax_bwd,
           get_batch_per_block=get_batch_per_block)
    module("scaled_softmax_cuda", forward=scaled_fwd, backward=softmax_bwd)
    return mods
