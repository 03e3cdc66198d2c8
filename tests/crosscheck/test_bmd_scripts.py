#!/usr/bin/env python3
"""BigScience's four real training scripts (../shared/third_party/bigscience-train/: tr1-13B-round1, tr1-13B-short,
tr8-104B, tr11-176B-ml), run unedited with bash, train with mds-train (issue 17, "Shown by").

For each script:
  1. the script runs with bash in a fake Jean Zay tree: $six_ALL_CCFRWORK and $six_ALL_CCFRSCRATCH in a temporary
     folder laid out as on Jean Zay (/gpfswork/rech/six/commun: code/<run>/bigscience is the real bigscience
     repository, code/<run>/Megatron-DeepSpeed* a folder with the tokenizer files, datasets-custom/, the tr11 data
     catalogue's datasets under bigscience-training/, envs/.bash-git-prompt/gitprompt.sh; the checkpoint folder
     absent, the logs folder of tr1 present as the `tee -a` needs it) and stubs first on PATH: srun (runs its
     command once, as job step task 0: SLURM_PROCID=0, SLURM_LOCALID=0, SLURM_NODEID=0, ...), scontrol (`show
     hostnames` prints the first node), module, conda, clear, and `python`, which captures the launcher line
     (`python -u -m torch.distributed.launch|run ... pretrain_gpt.py <args>`: its arguments, environment and
     folder) and runs every other python command for real: tr11's load_ratios_meg_ds_format.py, from the
     bigscience repository, writes its train/valid split files from data/catalogue. The start-* files are sourced
     unedited, with errexit suspended while they run (BASH_ENV wraps `source`): their conda hook is an absolute
     Jean Zay path (/gpfslocalsup/...) that cannot be stubbed, and under the scripts' `set -e` its failed command
     substitution would end the script before it reaches the training line;
  2. from the captured arguments only the sizes change: --num-layers, --hidden-size, --num-attention-heads,
     --ffn-hidden-size, --seq-length, --max-position-embeddings, --micro-batch-size, --global-batch-size,
     --rampup-batch-size, --train-samples, --save-interval, --tensor/--pipeline-model-parallel-size (1-2 ranks),
     tr11's --pad-vocab-size-to (250880 rows of embedding: to the tiny tokenizer's 512);
     the ds_config the script wrote gets the scaled train_batch_size / train_micro_batch_size_per_gpu (written
     beside it, the flag pointing there). Paths stay as the script has them: the tiny datasets (mds-preprocess
     of data/sample with a 512-token byte-level BPE) and the tokenizer files are put where the script looks,
     and the tr11 split files (paths of the catalogue, /gpfswork/rech/six/commun/...) are relocated into the fake
     $six_ALL_CCFRWORK. tr11's tokenizer is found by its Hub name in a fake Hugging Face cache under HF_HOME
     (hub/models--ORG--NAME/{refs/main,snapshots/<hash>/tokenizer.json});
  3. mds-train runs the job (bmd_harness.run_mds_train: torchrun's environment, plus the environment the script
     exported to the launcher) to the end of its scaled --train-samples, saving every --save-interval iterations,
     from no checkpoint folder: it must accept every flag (no "unrecognized"), warn about the missing checkpoint
     and start from scratch. The job is then taken as killed after its first save (the later global_step folders
     removed, `latest` back at the first: what a node failure or the time limit between two saves leaves), and
     the same command (the resubmission) must resume from that iteration and continue the first launch's
     iterations, consumed samples, batch sizes and losses (read from the scripts' own --tensorboard-dir: their
     --log-interval 10 prints few lines); tr11 must also validate on each of its 29 groups (valid and one
     valid_<language> per catalogue entry) at the end of training;
  4. tr1-13B-round1's resubmission runs on 4x the data-parallel ranks (DP 1 -> 4) while the batch-size ramp-up is
     still under way, as BigScience resumed tr1-13B on more nodes: its ramp-up (scaled "2 2 14" to 16) reaches
     only multiples of 4 after the first iteration, so the resume is accepted; a first launch on 4 ranks is
     refused at once (batch size 2 of the ramp-up does not divide by 4), naming the consumed samples from
     which it would work.
Exits 77 without ../shared/third_party, the Python packages, or the mds binaries.
Runs: `MDS_BIN=build/bin .venv/bin/python tests/crosscheck/test_bmd_scripts.py [tr1-13B-round1 tr8-104B ...]`."""
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bmd_harness  # noqa: E402

SOURCE = os.path.abspath(os.environ.get("MDS_SOURCE_DIR", os.path.join(HERE, "..", "..")))
BIN = bmd_harness.mds_bin_dir(SOURCE)  # or exit 77
BIGSCIENCE = os.path.abspath(os.path.join(SOURCE, "..", "shared", "third_party", "bigscience-train"))
if not os.path.isdir(os.path.join(BIGSCIENCE, "train")):
    print(f"SKIP: {BIGSCIENCE} (BigScience's training scripts) is absent")
    sys.exit(77)

import tiny_dataset  # noqa: E402

try:
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
except ImportError as e:
    print(f"SKIP: cannot import tensorboard: {e!r}")
    sys.exit(77)

MDS = os.path.join(BIN, "mds-train")
JZ_WORK = "/gpfswork/rech/six/commun"  # $six_ALL_CCFRWORK on Jean Zay (the tr11 catalogue's absolute paths)
JZ_SCRATCH = "/gpfsscratch/rech/six/commun"
from bmd_harness import check, failures  # noqa: E402  (one list of failures per test process)


# ----------------------------------------------------------------------------------------------------------------
# The scripts and how each is shrunk
# ----------------------------------------------------------------------------------------------------------------

TINY_MODEL = {"--num-layers": ["2"], "--hidden-size": ["32"], "--num-attention-heads": ["4"],
              "--ffn-hidden-size": ["128"], "--seq-length": ["32"], "--max-position-embeddings": ["32"]}

# name: script, the run folder under code/, the Megatron-DeepSpeed folder, the sizes, ranks of the first launch
# and of the resubmission. Batch sizes: each ramp-up keeps the script's shape (start, increment, samples) at a
# scale where 5 iterations cover it.
SCRIPTS = {
    "tr1-13B-round1": dict(
        script="train/tr1-13B-base/tr1-13B-round1.slurm", run="tr1-13B", repo="Megatron-DeepSpeed-tr1-13B",
        # 2 2 14 -> 16: batch sizes 2, 4, 8, 16, 16 (the ramp steps faster than the batches: 7 increments of 2
        # samples), so from iteration 2 on every batch size divides by 4 data-parallel ranks.
        sizes={"--micro-batch-size": ["1"], "--global-batch-size": ["16"], "--rampup-batch-size": ["2", "2", "14"],
               "--train-samples": ["46"], "--save-interval": ["1"],
               "--tensor-model-parallel-size": ["1"], "--pipeline-model-parallel-size": ["1"]},
        nproc=1, resume_nproc=4, iterations=5, batches=[2, 4, 8, 16, 16]),
    "tr1-13B-short": dict(
        script="train/tr1-13B-base/tr1-13B-short.slurm", run="tr1-13B", repo="Megatron-DeepSpeed-tr1-13B",
        # 2 2 6 -> 8: 2, 4, 8, 8, 8 at PP 2 (the script's PP 2; TP 1).
        sizes={"--micro-batch-size": ["1"], "--global-batch-size": ["8"], "--rampup-batch-size": ["2", "2", "6"],
               "--train-samples": ["30"], "--save-interval": ["2"],
               "--tensor-model-parallel-size": ["1"], "--pipeline-model-parallel-size": ["2"]},
        nproc=2, resume_nproc=2, iterations=5, batches=[2, 4, 8, 8, 8]),
    "tr8-104B": dict(
        script="train/tr8-104B-wide/tr8-104B.slurm", run="tr8-104B", repo="Megatron-DeepSpeed-tr8-104B",
        # 2 2 6 -> 8 at TP 2 (the script's TP 4 halved twice; PP 1).
        sizes={"--micro-batch-size": ["1"], "--global-batch-size": ["8"], "--rampup-batch-size": ["2", "2", "6"],
               "--train-samples": ["30"], "--save-interval": ["2"],
               "--tensor-model-parallel-size": ["2"], "--pipeline-model-parallel-size": ["1"]},
        nproc=2, resume_nproc=2, iterations=5, batches=[2, 4, 8, 8, 8]),
    "tr11-176B-ml": dict(
        script="train/tr11-176B-ml/tr11-176B-ml.slurm", run="tr11-176B-ml", repo="Megatron-DeepSpeed",
        # micro batch 2 as the script, DP 2 (bf16 at ZeRO 0: BF16_Optimizer's partitions): 4 4 8 -> 12:
        # 4, 8, 12, 12, 12.
        # --pad-vocab-size-to 250880 (the embedding's rows) shrinks with the model: to the tiny tokenizer's 512.
        sizes={"--micro-batch-size": ["2"], "--global-batch-size": ["12"], "--rampup-batch-size": ["4", "4", "8"],
               "--train-samples": ["48"], "--save-interval": ["2"], "--pad-vocab-size-to": ["512"],
               "--tensor-model-parallel-size": ["1"], "--pipeline-model-parallel-size": ["1"]},
        nproc=2, resume_nproc=2, iterations=5, batches=[4, 8, 12, 12, 12]),
}

TR11_TOKENIZER = ("bigscience-catalogue-data-dev/"
                  "byte-level-bpe-tokenizer-no-norm-250k-whitespace-and-eos-regex-alpha-v3-dedup-lines-articles")

# ----------------------------------------------------------------------------------------------------------------
# Stubs
# ----------------------------------------------------------------------------------------------------------------

SRUN = r"""#!/bin/bash
# srun: one job step with one task (this node), its command run once with the task's SLURM_* variables.
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in
        --jobid|-j|--nodes|-N|--ntasks|-n|--cpus-per-task|-c|--output|-o) shift 2 ;;
        *) shift ;;
    esac
done
export SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_STEP_ID=0 SLURM_STEPID=0 SLURM_NTASKS=1 \
       SLURM_STEP_NUM_TASKS=1 SLURM_STEP_NUM_NODES=1 SLURM_STEP_NODELIST="$SLURMD_NODENAME"
exec "$@"
"""

SCONTROL = r"""#!/bin/bash
# scontrol show hostnames LIST: the nodes one a line (the fake job has one).
if [[ $1 == show && $2 == hostnames ]]; then echo "$SLURMD_NODENAME"; exit 0; fi
echo "scontrol stub: unsupported: $*" >&2; exit 1
"""

NOOP = "#!/bin/bash\nexit 0\n"  # module, conda, clear

PYTHON = r"""#!/bin/bash
# python: the launcher line is captured (arguments NUL-separated, environment, folder), any other command runs.
for a in "$@"; do
    if [[ $a == torch.distributed.launch || $a == torch.distributed.run ]]; then
        printf '%s\0' "$@" > "$BMD_SCRIPTS_CAPTURE.args"
        env -0 > "$BMD_SCRIPTS_CAPTURE.env"
        pwd > "$BMD_SCRIPTS_CAPTURE.cwd"
        exit 0
    fi
done
exec "$BMD_SCRIPTS_REAL_PYTHON" "$@"
"""

# Sourced by bash before the script (BASH_ENV): the start-* files run unedited with errexit suspended.
BASH_ENV = r"""source() {
    if [[ $1 == */start-tr* ]]; then
        local had_e=0
        [[ $- == *e* ]] && had_e=1
        set +e
        builtin source "$@"
        [[ $had_e == 1 ]] && set -e
        return 0
    fi
    builtin source "$@"
}
"""


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


# ----------------------------------------------------------------------------------------------------------------
# The fake Jean Zay tree
# ----------------------------------------------------------------------------------------------------------------

class Tree:
    def __init__(self, tmp):
        self.tmp = tmp
        self.work = tmp + JZ_WORK
        self.scratch = tmp + JZ_SCRATCH
        self.stubs = os.path.join(tmp, "stubs")
        os.makedirs(self.stubs)
        write_exe(os.path.join(self.stubs, "srun"), SRUN)
        write_exe(os.path.join(self.stubs, "scontrol"), SCONTROL)
        for name in ("module", "conda", "clear"):
            write_exe(os.path.join(self.stubs, name), NOOP)
        write_exe(os.path.join(self.stubs, "python"), PYTHON)
        self.bash_env = os.path.join(tmp, "bash_env.sh")
        with open(self.bash_env, "w") as f:
            f.write(BASH_ENV)
        os.makedirs(os.path.join(self.work, "envs", ".bash-git-prompt"))
        open(os.path.join(self.work, "envs", ".bash-git-prompt", "gitprompt.sh"), "w").close()
        # The tiny tokenizer and dataset.
        self.data, self.vocab, self.merges = tiny_dataset.make(os.path.join(tmp, "tiny"), BIN, SOURCE, 512)
        # tr1-13B / tr8-104B: --data-path $six_ALL_CCFRWORK/datasets-custom/oscar-en/meg-gpt2_text_document.
        self.place_dataset(os.path.join(self.work, "datasets-custom", "oscar-en", "meg-gpt2_text_document"))
        # tr11 blends 28 datasets and validates on 29 sets: each a smaller one (the first 300 documents), so that
        # the 57 sample indexes Megatron's scheme builds (at least one epoch each) stay small.
        small = os.path.join(tmp, "small")
        os.makedirs(small)
        corpus = os.path.join(SOURCE, "data", "sample", "corpus.jsonl.zst")
        lines = subprocess.run(["zstd", "-dc", corpus], check=True, stdout=subprocess.PIPE).stdout.splitlines()
        with open(os.path.join(small, "corpus.jsonl"), "wb") as f:
            f.write(b"\n".join(lines[:300]) + b"\n")
        subprocess.run([os.path.join(BIN, "mds-preprocess"), "--input", os.path.join(small, "corpus.jsonl"),
                        "--output-prefix", os.path.join(small, "data"), "--vocab-file", self.vocab, "--merge-file",
                        self.merges, "--append-eod", "--workers", "1", "--quiet"], check=True)
        self.small = os.path.join(small, "data_text_document")
        # tr11: the tokenizer by Hub name in the Hugging Face cache.
        self.hf_home = os.path.join(tmp, "hf_home")
        org, name = TR11_TOKENIZER.split("/")
        repo = os.path.join(self.hf_home, "hub", f"models--{org}--{name}")
        commit = "0123456789abcdef0123456789abcdef01234567"
        os.makedirs(os.path.join(repo, "refs"))
        os.makedirs(os.path.join(repo, "snapshots", commit))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write(commit)
        shutil.copy(os.path.join(os.path.dirname(self.vocab), "tokenizer.json"),
                    os.path.join(repo, "snapshots", commit, "tokenizer.json"))

    def place_dataset(self, prefix, data=None):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        for ext in (".bin", ".idx"):
            if not os.path.exists(prefix + ext):
                os.symlink((data or self.data) + ext, prefix + ext)

    def code(self, run, repo):
        """code/<run>/bigscience (the real repository) and code/<run>/<repo> (writable: the script writes its
        ds_config there; data/ holds the tokenizer files)."""
        base = os.path.join(self.work, "code", run)
        os.makedirs(base, exist_ok=True)
        if not os.path.exists(os.path.join(base, "bigscience")):
            os.symlink(BIGSCIENCE, os.path.join(base, "bigscience"))
        mds_repo = os.path.join(base, repo)
        os.makedirs(os.path.join(mds_repo, "data"), exist_ok=True)
        shutil.copy(self.vocab, os.path.join(mds_repo, "data", "gpt2-vocab.json"))
        shutil.copy(self.merges, os.path.join(mds_repo, "data", "gpt2-merges.txt"))
        return mds_repo

    def run_script(self, name, spec, capture):
        """bash <script> as sbatch would start it; returns (args after pretrain_gpt.py, launcher args, env, cwd,
        script output)."""
        self.code(spec["run"], spec["repo"])
        # tr1's `tee -a $LOGS_PATH/main_log.txt` needs the logs folder (tr8 and tr11 make theirs).
        if name == "tr1-13B-round1":
            os.makedirs(os.path.join(self.scratch, "checkpoints", "tr1-13B", "logs"), exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("TERM", "BASH_ENV")}
        env.update({
            "PATH": self.stubs + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
            "BASH_ENV": self.bash_env,
            "six_ALL_CCFRWORK": self.work, "six_ALL_CCFRSCRATCH": self.scratch,
            "SLURM_JOBID": "424242", "SLURM_JOB_ID": "424242", "SLURM_JOB_NAME": name,
            "SLURM_JOB_NODELIST": "jean-zay-iam01", "SLURMD_NODENAME": "jean-zay-iam01",
            "SLURM_NNODES": "24" if name == "tr11-176B-ml" else "128", "SLURM_JOB_NUM_NODES": "1",
            "BMD_SCRIPTS_CAPTURE": capture, "BMD_SCRIPTS_REAL_PYTHON": sys.executable,
        })
        workdir = os.path.join(self.tmp, "sbatch-" + name)
        os.makedirs(workdir)
        script = os.path.join(BIGSCIENCE, spec["script"])
        p = subprocess.run(["bash", script], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        out = p.stdout
        if not check(p.returncode == 0 and os.path.exists(capture + ".args"),
                     f"{name}: the script did not reach its launcher line (rc {p.returncode}):\n{out[-3000:]}"):
            return None
        with open(capture + ".args") as f:
            argv = f.read().split("\0")[:-1]
        with open(capture + ".env") as f:
            launch_env = dict(kv.split("=", 1) for kv in f.read().split("\0") if "=" in kv)
        with open(capture + ".cwd") as f:
            cwd = f.read().strip()
        script_at = next(i for i, a in enumerate(argv) if a.endswith("/pretrain_gpt.py"))
        return argv[script_at + 1:], argv[:script_at], launch_env, cwd, out


# ----------------------------------------------------------------------------------------------------------------
# Shrinking the captured command
# ----------------------------------------------------------------------------------------------------------------

def flag_values(args, flag):
    """The values after `flag` (up to the next --flag), or None."""
    if flag not in args:
        return None
    i = args.index(flag) + 1
    j = i
    while j < len(args) and not args[j].startswith("--"):
        j += 1
    return args[i:j]


def shrink(args, sizes):
    """args with the values of each flag in `sizes` replaced (flags the script lacks are not added, except the
    parallel sizes, which every script gives)."""
    out = list(args)
    for flag, values in sizes.items():
        if flag not in out:
            continue
        i = out.index(flag) + 1
        j = i
        while j < len(out) and not out[j].startswith("--"):
            j += 1
        out[i:j] = values
    return out


def scaled_ds_config(args, cwd, run_dir, sizes):
    """The ds_config the script wrote, with the scaled batch sizes, beside the original; returns its path."""
    path = flag_values(args, "--deepspeed_config")[0]
    path = path if os.path.isabs(path) else os.path.join(cwd, path)
    with open(path) as f:
        cfg = json.load(f)
    cfg["train_micro_batch_size_per_gpu"] = int(sizes["--micro-batch-size"][0])
    cfg["train_batch_size"] = int(sizes["--global-batch-size"][0])
    out = os.path.join(run_dir, os.path.basename(path))
    with open(out, "w") as f:
        json.dump(cfg, f, indent=2)
    return path, cfg, out


def relocate_split_files(tree, args):
    """tr11: the split files name the catalogue's datasets at their Jean Zay paths; moved into the fake tree (where
    the tiny dataset is put under each name)."""
    for flag in ("--train-weighted-split-paths-path", "--valid-weighted-split-paths-path"):
        values = flag_values(args, flag)
        if not values:
            continue
        with open(values[0]) as f:
            text = f.read()
        for prefix in sorted(set(w.strip('",') for w in text.split() if w.strip('",').startswith(JZ_WORK + "/"))):
            tree.place_dataset(tree.tmp + prefix, tree.small)
        with open(values[0], "w") as f:
            f.write(text.replace(JZ_WORK + "/", tree.work + "/"))


# ----------------------------------------------------------------------------------------------------------------
# One script
# ----------------------------------------------------------------------------------------------------------------

def simulate_kill_after_first_save(ckpt):
    """What a job killed between its first and second save leaves: only the first global_step folder, `latest`
    naming it. Returns that iteration."""
    steps = sorted(int(os.path.basename(d)[len("global_step"):]) for d in glob.glob(os.path.join(ckpt, "global_step*")))
    first = steps[0]
    for s in steps[1:]:
        shutil.rmtree(os.path.join(ckpt, f"global_step{s}"))
    with open(os.path.join(ckpt, "latest"), "w") as f:
        f.write(f"global_step{first}")
    if os.path.exists(os.path.join(ckpt, "latest_checkpointed_iteration.txt")):
        with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(first))
    return first


def tensorboard_steps(files):
    """Per iteration, from the scripts' own --tensorboard-dir (their --log-interval 10 prints few log lines): the
    training loss, the batch size (--log-batch-size-to-tensorboard) and the consumed samples."""
    tags = {"lm-loss-training/lm loss": "lm loss", "batch-size/batch-size": "global batch size",
            "steps-vs-samples/y=samples,x=steps": "consumed samples"}
    steps = {}
    for path in sorted(files):
        for event in LegacyEventFileLoader(path).Load():
            for v in event.summary.value:
                if v.tag in tags:
                    steps.setdefault(event.step, {"iteration": event.step})[tags[v.tag]] = v.simple_value
    return [steps[k] for k in sorted(steps)]


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def run_one(tree, name, spec):
    t0 = time.time()
    captured = tree.run_script(name, spec, os.path.join(tree.tmp, "capture-" + name))
    if captured is None:
        return
    args, launcher, launch_env, cwd, script_out = captured
    check(launcher[:3] == ["-u", "-m", "torch.distributed.launch"] or launcher[:3] == ["-u", "-m", "torch.distributed.run"],
          f"{name}: launcher line {launcher[:3]}")
    check("--node_rank" in launcher and launcher[launcher.index("--node_rank") + 1] == "0",
          f"{name}: srun's task did not give --node_rank 0: {launcher}")
    ckpt = flag_values(args, "--load")[0]
    check(flag_values(args, "--save")[0] == ckpt, f"{name}: --save and --load differ")
    check(not os.path.exists(ckpt), f"{name}: the checkpoint folder {ckpt} exists before the first launch")
    relocate_split_files(tree, args)
    run_dir = os.path.join(tree.tmp, "run-" + name)
    os.makedirs(run_dir)
    original_cfg, cfg, cfg_path = scaled_ds_config(args, cwd, run_dir, spec["sizes"])
    flags = shrink(args, dict(TINY_MODEL, **spec["sizes"]))
    flags[flags.index("--deepspeed_config") + 1] = cfg_path
    with open(os.path.join(run_dir, "flags.txt"), "w") as f:
        f.write(shlex.join(args) + "\n\n" + shlex.join(flags) + "\n")
    # What changed: sizes and the ds_config path only.
    changed = sorted({f for f in args if f.startswith("--") and flag_values(args, f) != flag_values(flags, f)})
    check(set(changed) <= set(TINY_MODEL) | set(spec["sizes"]) | {"--deepspeed_config"},
          f"{name}: flags changed: {changed}")
    check(len(flags) == len(args) and [f for f in args if f.startswith("--")] == [f for f in flags if f.startswith("--")],
          f"{name}: the flags are not the script's")
    # The environment the script exported to the launcher (TRANSFORMERS_OFFLINE, CUDA_LAUNCH_BLOCKING, ...),
    # less what would pin this machine's threads or devices, plus the Hugging Face cache of this test.
    env = {k: v for k, v in launch_env.items()
           if k not in ("PATH", "BASH_ENV", "PWD", "OLDPWD", "SHLVL", "_", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
           and not k.startswith("BMD_SCRIPTS_")}
    env["HF_HOME"] = tree.hf_home
    for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        env.pop(k, None)

    # The first launch: no checkpoint folder.
    first = bmd_harness.run_mds_train(MDS, flags, nproc=spec["nproc"], run_dir=os.path.join(run_dir, "first"),
                                      name=name + "-first", env=env)
    text = "\n".join(first.logs)
    if not check(first.ok, f"{name}: the first launch failed (rc {first.returncode}):\n{first.tail()}"):
        return
    check("unrecognized" not in text.lower() and "unknown option" not in text.lower(),
          f"{name}: a flag of the script was not accepted:\n{first.tail()}")
    check("will not load any checkpoints and will start from random" in text,
          f"{name}: the first launch did not warn about the missing checkpoint folder:\n{first.tail()}")
    tb_dir = flag_values(args, "--tensorboard-dir")[0]
    first_events = set(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*")))
    its = tensorboard_steps(first_events)
    check([it["iteration"] for it in its] == list(range(1, spec["iterations"] + 1)),
          f"{name}: first launch iterations {[it['iteration'] for it in its]}")
    check([int(it.get("global batch size", -1)) for it in its] == spec["batches"],
          f"{name}: batch sizes {[it.get('global batch size') for it in its]}, expected the ramp-up's {spec['batches']}")
    check(os.path.exists(os.path.join(ckpt, "latest")), f"{name}: no checkpoint saved in {ckpt}")
    if flag_values(args, "--valid-weighted-split-paths-path"):
        # tr11: the ratios script wrote BigScience's groups (train; valid and one valid_<language> per catalogue
        # entry), and mds-train validated on every one of them at the end of training.
        with open(flag_values(args, "--train-weighted-split-paths-path")[0]) as f:
            train_text = f.read()
        with open(flag_values(args, "--valid-weighted-split-paths-path")[0]) as f:
            groups = [g.split(":")[0] for g in f.read().split('"')[1::2]]
        check(train_text.startswith('"train: ') and train_text.count("0:0.950") == 28 and len(groups) == 29,
              f"{name}: split files: train {train_text[:80]!r}..., valid groups {groups}")
        missing = [g for g in groups if not any(line.startswith(g + " loss at the end of training")
                                                for line in text.splitlines())]
        check(not missing, f"{name}: no end-of-training validation line for {missing}")

    # The job killed after its first save; the resubmission, same command (tr1: on 4x the ranks).
    saved = simulate_kill_after_first_save(ckpt)
    resumed = bmd_harness.run_mds_train(MDS, flags, nproc=spec["resume_nproc"],
                                        run_dir=os.path.join(run_dir, "resume"), name=name + "-resume", env=env)
    rtext = "\n".join(resumed.logs)
    if not check(resumed.ok, f"{name}: the resubmission failed (rc {resumed.returncode}):\n{resumed.tail()}"):
        return
    check(f"loading checkpoint from {ckpt} at iteration {saved}" in rtext,
          f"{name}: the resubmission did not load iteration {saved}:\n{resumed.tail()}")
    rits = tensorboard_steps(set(glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))) - first_events)
    check([it["iteration"] for it in rits] == list(range(saved + 1, spec["iterations"] + 1)),
          f"{name}: resumed iterations {[it['iteration'] for it in rits]}, expected {saved + 1}..{spec['iterations']}")
    # The same ranks: the same curve (the RNG states travel: dropout is on, as in the scripts). On 4x the ranks
    # each rank draws the dropout masks of its own micro batches from the restored generator (as Megatron's do),
    # not the masks one rank drew for all of them: the same samples, losses within dropout's spread.
    rel = 1e-5 if spec["resume_nproc"] == spec["nproc"] else 1e-2
    for a, b in zip(its[saved:], rits):
        for key in ("consumed samples", "global batch size"):
            check(a.get(key) == b.get(key), f"{name}: iteration {b['iteration']} {key} {b.get(key)} != {a.get(key)}")
        check(close(a["lm loss"], b["lm loss"], rel),
              f"{name}: iteration {b['iteration']} loss {b['lm loss']} after the resume, {a['lm loss']} in the "
              f"first launch (relative {rel})")
    print(f"{name}: sizes changed {changed}; saved at {saved}, resumed "
          f"{[(it['iteration'], it['lm loss']) for it in rits]} on {spec['resume_nproc']} rank(s); "
          f"{time.time() - t0:.1f} s")

    if name == "tr1-13B-round1":
        # From scratch on 4x the ranks the ramp-up's first batch (2) does not divide: refused before training.
        fresh = bmd_harness.run_mds_train(MDS, shrink(flags, {"--save": [ckpt + "-fresh"], "--load": [ckpt + "-fresh"]}),
                                          nproc=4, run_dir=os.path.join(run_dir, "fresh4"), name=name + "-fresh4",
                                          env=env)
        ftext = "\n".join(fresh.logs)
        check(fresh.returncode == 2 and not fresh.iterations,
              f"{name}: a first launch on 4 ranks should be refused (exit 2) before training:\n{fresh.tail()}")
        check("global batch size 2, reached at 0 consumed samples (iteration 1), is not divisible by micro batch "
              "size 1 × data parallel size 4 = 4" in ftext and "resume on these from 2 consumed samples on" in ftext,
              f"{name}: the refusal does not name the batch size and where a resume works:\n{fresh.tail()}")


def main():
    names = sys.argv[1:] or list(SCRIPTS)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="mds-bmd-scripts-") as tmp:
        tree = Tree(tmp)
        for name in names:
            run_one(tree, name, SCRIPTS[name])
        if os.environ.get("BMD_KEEP"):
            shutil.copytree(tmp, os.environ["BMD_KEEP"], symlinks=True, dirs_exist_ok=True)
    print(f"{len(names)} script(s) in {time.time() - start:.1f} s")
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
