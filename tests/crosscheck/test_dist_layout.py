#!/usr/bin/env python3
"""mds's 3D rank layout and SLURM host lists against independent implementations:
  - every (world, TP, PP) up to 64 ranks: tensor-, data- and pipeline-parallel groups in creation order and each
    rank's coordinates equal DeepSpeed's PipeModelDataParallelTopology (what BigScience's Megatron-DeepSpeed used)
    and megatron-core's RankGenerator (order tp-cp-ep-dp-pp); model-parallel groups equal megatron-core's tp-pp
    groups, embedding groups its first and last pipeline stages;
  - a world that TP x PP does not divide is refused naming the sizes;
  - 300 random SLURM host lists (zero padding, several ranges, several bracket groups per name) expand as
    `scontrol show hostnames` expands them (those it accepts); malformed lists are errors, not guesses.
Exits 77 when deepspeed or megatron-core is missing; the host-list part is skipped without scontrol."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("MDS_SOURCE_DIR", "."), "tests", "integration"))
import testkit  # noqa: E402
from testkit import check  # noqa: E402

PROBE = testkit.binary("dist_probe")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
try:
    import warnings
    warnings.filterwarnings("ignore")
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
    from megatron.core.parallel_state import RankGenerator
except Exception as e:  # noqa: BLE001
    testkit.skip(f"deepspeed / megatron-core not importable: {e}")


def probe(*args):
    return subprocess.run([PROBE, *map(str, args)], capture_output=True, text=True)


def layouts():
    cases = 0
    for world in range(1, 65):
        for tp in (d for d in range(1, world + 1) if world % d == 0):
            for pp in (d for d in range(1, world // tp + 1) if (world // tp) % d == 0):
                dp = world // (tp * pp)
                r = probe("layout", world, tp, pp)
                if not check(r.returncode == 0, f"layout {world} {tp} {pp}: {r.stderr}"):
                    continue
                ours = json.loads(r.stdout)
                ds = PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)
                mc = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=1, order="tp-cp-ep-dp-pp")
                name = f"world {world} TP {tp} PP {pp}"
                check(ours["tensor"] == ds.get_axis_comm_lists("model") == mc.get_ranks("tp"), f"{name}: tensor groups")
                check(ours["data"] == ds.get_axis_comm_lists("data") == mc.get_ranks("dp"), f"{name}: data groups")
                check(ours["pipeline"] == ds.get_axis_comm_lists("pipe") == mc.get_ranks("pp"), f"{name}: pipeline groups")
                coords = [[c.model, c.data, c.pipe] for c in map(ds.get_coord, range(world))]
                check(ours["coordinates"] == coords, f"{name}: coordinates differ from DeepSpeed's")
                model_groups = mc.get_ranks("tp-pp")
                check(all(ours["model"][r] in model_groups and r in ours["model"][r] for r in range(world)),
                      f"{name}: model-parallel groups differ from megatron-core's tp-pp")
                embedding = [[g[0], g[-1]] if len(g) > 1 else g for g in mc.get_ranks("pp")]
                check(ours["embedding"] == embedding, f"{name}: embedding groups")
                cases += 1
    for world, tp, pp in ((6, 4, 1), (8, 3, 1), (16, 2, 3), (0, 1, 1), (4, 0, 1)):
        r = probe("layout", world, tp, pp)
        check(r.returncode == 1 and r.stderr.startswith("error:"), f"layout {world} {tp} {pp} accepted: {r.stdout}")
    print(f"layouts: {cases} (world, TP, PP) shapes equal DeepSpeed's and megatron-core's groups")


def random_hostlist(rng):
    names = []
    for _ in range(rng.randint(1, 4)):
        name = rng.choice(["jz", "r", "node", "gpu-a", "x1"])
        for _ in range(rng.randint(1, 2)):
            width = rng.choice([0, 0, 2, 3, 4])
            parts = []
            for _ in range(rng.randint(1, 3)):
                lo = rng.randint(0, 120)
                hi = lo + rng.randint(0, 6)
                fmt = f"{{:0{width}d}}" if width else "{}"
                parts.append(fmt.format(lo) if lo == hi or rng.random() < 0.2 else f"{fmt.format(lo)}-{fmt.format(hi)}")
            name += "[" + ",".join(parts) + "]"
            if rng.random() < 0.1:
                name += rng.choice(["n", "-ib", "s"])
        names.append(name)
    if rng.random() < 0.3:
        names.append(rng.choice(["login1", "r7i2n3"]))
    return ",".join(names)


def hostlists():
    scontrol = shutil.which("scontrol")
    if not scontrol:
        print("note: scontrol missing, host lists not cross-checked")
        return
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("ClusterName=t\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n")
    conf.close()
    env = dict(os.environ, SLURM_CONF=conf.name)
    rng = random.Random(20261124)
    lists = ["jz[001-003,007],r2i1n[4-5]", "a[1-2]b[3-4],c[08-11],d", "r6i[0-1]n[7-8]", "n[9-11]", "single"]
    lists += [random_hostlist(rng) for _ in range(300)]
    compared = 0
    try:
        for hl in lists:
            want = subprocess.run([scontrol, "show", "hostnames", hl], capture_output=True, text=True, env=env)
            got = probe("hostlist", hl)
            if want.returncode != 0 or not want.stdout.strip():
                continue  # scontrol rejects it ("Invalid hostlist": e.g. a suffix after a bracket); mds may accept more
            if check(got.returncode == 0 and got.stdout.split() == want.stdout.split(),
                     f"host list {hl!r}: mds {got.stdout.split()[:8]}... {got.stderr.strip()}, scontrol "
                     f"{want.stdout.split()[:8]}..."):
                compared += 1
    finally:
        os.unlink(conf.name)
    check(compared >= 200, f"only {compared} host lists compared")
    for bad in ("jz[001-003", "jz001-003]", "jz[3-1]", "jz[a-b]", "jz[]", "jz[1-2,]"):
        r = probe("hostlist", bad)
        check(r.returncode == 1 and "error:" in r.stderr, f"malformed host list {bad!r} accepted: {r.stdout.split()}")
    for spec, want in (("4(x2),2", "4 4 2"), ("8", "8"), ("1(x3)", "1 1 1")):
        r = probe("tasks", spec)
        check(r.stdout.strip() == want, f"tasks per node {spec!r}: {r.stdout.strip()!r}, expected {want!r}")
    print(f"host lists: {compared} expand as scontrol show hostnames does")


layouts()
hostlists()
testkit.finish()
