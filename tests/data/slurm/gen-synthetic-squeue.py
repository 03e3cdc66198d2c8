#!/usr/bin/env python3
"""Writes the synthetic squeue --json fixtures squeue-23.02-*, squeue-23.02.3-*, squeue-23.11-*,
squeue-24.05-* and squeue-24.11-* next to this script: one job set, dumped in the shape of each SLURM
data_parser version (see README.md for the facts and their sources). Not part of the test
suite; rerun it after changing the job set:  python3 gen-synthetic-squeue.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
T0 = 1732713600  # 2024-11-27T13:20:00Z: the "mixed" snapshot
T1 = T0 + 3600   # the "finished" snapshot, one hour later

SIG = {1: "HUP", 9: "KILL", 15: "TERM"}


def node(n):
    return f"jz-node[{n}]" if "-" in n else f"jz-node{n}"


# Each job: the facts, independent of the output shape. Exit codes are raw wait statuses
# (256 = exit 1, 15 = killed by SIGTERM), as slurmctld stores them.
def job(job_id, name, base, reason, **kw):
    j = dict(job_id=job_id, name=name, base=base, flags=[], reason=reason, nodes="", node_count=1,
             cpus=4, array_job_id=0, array_task_id=NO_VAL, array_task_string="", array_max_tasks=0,
             submit=T0 - 4 * 3600, eligible=None, start=0, end=0, exit_code=0, time_limit=1200,
             dependency="", priority=18620, state_description="", job_flags=[])
    j.update(kw)
    if j["eligible"] is None:
        j["eligible"] = j["submit"] if reason not in ("JobHeldUser", "BeginTime", "Dependency") else 0
    return j


def mixed_jobs():
    return [
        job(4218801, "tr11-176B-ml", "RUNNING", "None", nodes="jz-node[010-013]", node_count=4, cpus=16,
            submit=T0 - 5 * 3600, start=T0 - 3 * 3600, end=T0 - 3 * 3600 + 1200 * 60,
            job_flags=["JOB_WAS_RUNNING"]),
        job(4218802, "tr11-176B-ml", "PENDING", "Dependency", node_count=4, cpus=16,
            dependency="singleton(unfulfilled)", job_flags=["DEPENDENT"]),
        # array 4218820 = tr11-176B-ml-eval --array=1-5%1: task 1 runs, 2-5 wait for the throttle
        job(4218822, "tr11-176B-ml-eval", "RUNNING", "None", nodes="jz-node014", array_job_id=4218820,
            array_task_id=1, array_max_tasks=1, submit=T0 - 900, start=T0 - 600, end=T0 - 600 + 120 * 60,
            time_limit=120, job_flags=["JOB_WAS_RUNNING"]),
        job(4218820, "tr11-176B-ml-eval", "PENDING", "JobArrayTaskLimit", array_job_id=4218820,
            array_task_string="2-5%1", array_max_tasks=1, submit=T0 - 900, time_limit=120),
        job(4218830, "tr11-176B-ml-ckpt-convert", "PENDING", "BeginTime", submit=T0 - 60,
            start=T0 + 7200, end=T0 + 7200 + 60 * 60, time_limit=60),
        job(4218831, "tr11-176B-ml-sync", "PENDING", "JobHeldUser", submit=T0 - 1800, priority=0,
            time_limit=INFINITE),
        # 60 characters; pending on priority with a backfill start estimate
        job(4218832, "tr11-176B-ml-bigscience-bloom-longname-run2-xxxxxxxxxxxxxxxx", "PENDING", "Priority",
            node_count=8, cpus=32, submit=T0 - 2 * 3600, start=T0 + 4 * 3600, end=T0 + 4 * 3600 + 1200 * 60),
        # nodes still booting: RUNNING with the CONFIGURING flag
        job(4218833, "tr11-176B-ml-warmup", "RUNNING", "None", flags=["CONFIGURING"],
            nodes="jz-node[020-021]", node_count=2, cpus=8, submit=T0 - 120, start=T0 - 30,
            end=T0 - 30 + 60 * 60, time_limit=60),
    ]


def finished_jobs():
    return [
        job(4218801, "tr11-176B-ml", "RUNNING", "None", nodes="jz-node[010-013]", node_count=4, cpus=16,
            submit=T0 - 5 * 3600, start=T0 - 3 * 3600, end=T0 - 3 * 3600 + 1200 * 60,
            job_flags=["JOB_WAS_RUNNING"]),
        job(4218802, "tr11-176B-ml", "PENDING", "Dependency", node_count=4, cpus=16,
            dependency="singleton(unfulfilled)", job_flags=["DEPENDENT"]),
        # the previous run of the same name: crashed with exit 1 on the first four nodes
        job(4218799, "tr11-176B-ml", "FAILED", "NonZeroExitCode", nodes="jz-node[001-004]", node_count=4,
            cpus=16, submit=T1 - 9 * 3600, start=T1 - 5000, end=T1 - 400, exit_code=256,
            job_flags=["JOB_WAS_RUNNING"]),
        # finished with exit 0 a moment ago, epilog still running: COMPLETED + COMPLETING
        job(4218795, "tr11-176B-ml-eval-full", "COMPLETED", "None", flags=["COMPLETING"],
            nodes="jz-node[005-008]", node_count=4, cpus=16, submit=T1 - 3 * 3600, start=T1 - 2 * 3600,
            end=T1 - 20, time_limit=180, job_flags=["JOB_WAS_RUNNING"]),
        job(4218822, "tr11-176B-ml-eval", "COMPLETED", "None", nodes="jz-node014", array_job_id=4218820,
            array_task_id=1, array_max_tasks=1, submit=T0 - 900, start=T0 - 600, end=T1 - 1500,
            time_limit=120, job_flags=["JOB_WAS_RUNNING"]),
        job(4218835, "tr11-176B-ml-eval", "RUNNING", "None", nodes="jz-node014", array_job_id=4218820,
            array_task_id=2, array_max_tasks=1, submit=T0 - 900, start=T1 - 1490, end=T1 - 1490 + 120 * 60,
            time_limit=120, job_flags=["JOB_WAS_RUNNING"]),
        job(4218820, "tr11-176B-ml-eval", "PENDING", "JobArrayTaskLimit", array_job_id=4218820,
            array_task_string="3-5%1", array_max_tasks=1, submit=T0 - 900, time_limit=120),
        job(4218830, "tr11-176B-ml-ckpt-convert", "PENDING", "BeginTime", submit=T0 - 60,
            start=T0 + 7200, end=T0 + 7200 + 60 * 60, time_limit=60),
        # the held job, cancelled by its user (scancel): keeps its old reason, start = end = cancel time
        job(4218831, "tr11-176B-ml-sync", "CANCELLED", "JobHeldUser", submit=T0 - 1800, priority=0,
            start=T1 - 300, end=T1 - 300, time_limit=INFINITE),
        job(4218832, "tr11-176B-ml-bigscience-bloom-longname-run2-xxxxxxxxxxxxxxxx", "PENDING", "Priority",
            node_count=8, cpus=32, submit=T0 - 2 * 3600, start=T1 + 3 * 3600, end=T1 + 3 * 3600 + 1200 * 60),
        # killed by SIGTERM (scancel of a running job): raw status 15
        job(4218833, "tr11-176B-ml-warmup", "CANCELLED", "None", nodes="jz-node[020-021]", node_count=2,
            cpus=8, submit=T0 - 120, start=T0 - 30, end=T0 + 1500, exit_code=15, time_limit=60,
            job_flags=["JOB_WAS_RUNNING"]),
    ]


# ---- field encoders per data_parser version -------------------------------------------------

def num(v, *, infinite=INFINITE, noval=NO_VAL):
    """UINT32_NO_VAL / UINT64_NO_VAL / TIMESTAMP_NO_VAL object (v0.0.39 and later)."""
    if v == infinite:
        return {"set": False, "infinite": True, "number": 0}
    if v == noval:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": v}


def exit_verbose(raw):
    """PROCESS_EXIT_CODE (v0.0.40 and later): the raw wait status split up."""
    unset = {"set": False, "infinite": False, "number": 0}
    if raw == NO_VAL:
        return {"status": ["PENDING"], "return_code": unset, "signal": {"id": unset, "name": ""}}
    if raw & 0x7F == 0:  # WIFEXITED
        rc = (raw >> 8) & 0xFF
        return {"status": ["ERROR" if rc else "SUCCESS"], "return_code": num(rc),
                "signal": {"id": unset, "name": ""}}
    sig = raw & 0x7F
    return {"status": ["SIGNALED"], "return_code": unset,
            "signal": {"id": num(sig), "name": SIG.get(sig, "")}}


FLAG_ORDER = ["REQUEUED", "RESIZING", "CONFIGURING", "COMPLETING"]  # order of the flag table


def state_string(j):
    """job_state_string(): one string, a state flag wins over the base state (22.05, 23.02)."""
    for f in ("COMPLETING", "CONFIGURING", "RESIZING", "REQUEUED"):
        if f in j["flags"]:
            return f
    return j["base"]


def state_list(j):
    """v0.0.40+: base state first, then the set flags in the flag table's order."""
    return [j["base"]] + [f for f in FLAG_ORDER if f in j["flags"]]


def expand(nodes):
    if not nodes:
        return []
    if "[" not in nodes:
        return [nodes]
    pre, rng = nodes.split("[")
    a, b = rng.rstrip("]").split("-")
    return [f"{pre}{i:0{len(a)}d}" for i in range(int(a), int(b) + 1)]


def job_res_old(j):
    """v0.0.39 / v0.0.40 job_resources (nodes is a string here); {} when none allocated."""
    names = expand(j["nodes"])
    if not names:
        return {}
    return {"nodes": j["nodes"], "allocated_cores": j["cpus"], "allocated_cpus": 0,
            "allocated_hosts": len(names),
            "allocated_nodes": [{"sockets": {"0": {"cores": {"0": "allocated", "1": "allocated"}},
                                             "1": {"cores": {"0": "allocated", "1": "allocated"}}},
                                 "nodename": n, "cpus_used": 0, "memory_used": 0,
                                 "memory_allocated": 16384} for n in names]}


def job_res_new(j):
    """v0.0.41+ job_resources: job_resources.nodes became an object; null when none allocated."""
    names = expand(j["nodes"])
    if not names:
        return None
    return {"select_type": ["CORE"],
            "nodes": {"count": len(names), "select_type": ["ONE_ROW"], "list": j["nodes"], "whole": True,
                      "allocation": [{"index": i, "name": n, "cpus": {"count": 4, "used": 0},
                                      "memory": {"used": 0, "allocated": 16384},
                                      "sockets": [{"index": s, "cores": [{"index": c, "status": ["ALLOCATED"]}
                                                                         for c in range(2)]}
                                                  for s in range(2)]}
                                     for i, n in enumerate(names)]},
            "cpus": 4 * len(names), "threads_per_core": {"set": True, "infinite": False, "number": 1}}


COMMON = dict(account="bigsci", cluster="jz", partition="gpu_p5", qos="qos_gpu-t3", user_id=21042,
              user_name="tr11user", group_name="bigsci", cwd="/gpfswork/bigsci/tr11-176B-ml")


def dump_job(j, v):
    """One job: a subset of the keys, in the order of the version's JOB_INFO parser table."""
    old = v in ("v0.0.39i", "v0.0.39")            # v0.0.39i: 23.02.0-23.02.3, exit codes as integers
    t = (lambda x: x) if old else (lambda x: num(x, infinite=-1, noval=-2))
    if v == "v0.0.39i":
        ec = lambda x: x
    elif v == "v0.0.39":
        ec = num
    else:
        ec = exit_verbose
    d = {}
    d["account"] = COMMON["account"]
    d["accrue_time"] = t(j["eligible"])
    d["array_job_id"] = num(j["array_job_id"])
    d["array_task_id"] = num(j["array_task_id"])
    d["array_max_tasks"] = num(j["array_max_tasks"])
    d["array_task_string"] = j["array_task_string"]
    d["batch_host"] = expand(j["nodes"])[0] if j["nodes"] else ""
    d["flags"] = j["job_flags"]
    d["cluster"] = COMMON["cluster"]
    d["command"] = COMMON["cwd"] + "/train.slurm"
    d["dependency"] = j["dependency"]
    d["derived_exit_code"] = ec(0)
    d["eligible_time"] = t(j["eligible"])
    d["end_time"] = t(j["end"])
    d["exit_code"] = ec(j["exit_code"])
    d["group_name"] = COMMON["group_name"]
    d["job_id"] = j["job_id"]
    d["job_resources"] = job_res_new(j) if v in ("v0.0.41", "v0.0.42") else job_res_old(j)
    d["job_state"] = state_string(j) if old else state_list(j)
    d["last_sched_evaluation"] = t(T0 - 25)
    d["name"] = j["name"]
    d["nodes"] = j["nodes"]
    d["cpus"] = num(j["cpus"])
    d["node_count"] = num(j["node_count"])
    d["partition"] = COMMON["partition"]
    d["priority"] = num(j["priority"])
    d["qos"] = COMMON["qos"]
    d["start_time"] = t(j["start"])
    d["state_description"] = j["state_description"]
    d["state_reason"] = j["reason"]
    d["submit_time"] = t(j["submit"])
    d["time_limit"] = num(j["time_limit"])
    d["user_id"] = COMMON["user_id"]
    d["user_name"] = COMMON["user_name"]
    d["current_working_directory"] = COMMON["cwd"]
    return d


def document(jobs, v, release, command):
    major, minor, micro = release.split(".")
    if v.startswith("v0.0.39"):
        # 23.02: data_parser_dump_cli_stdout(): meta, <key>, errors, warnings
        return {
            "meta": {
                "plugins": {"data_parser": "data_parser/v0.0.39",
                            "accounting_storage": "accounting_storage/slurmdbd"},
                "command": command,
                "Slurm": {"version": {"major": int(major), "micro": int(micro), "minor": int(minor)},
                          "release": release},
            },
            "jobs": [dump_job(j, v) for j in jobs],
            "errors": [],
            "warnings": [],
        }
    # 23.11+: OPENAPI_JOB_INFO_RESP: jobs, last_backfill, last_update, meta, errors, warnings;
    # meta.command loses the last argument (argv copied with argc - 1)
    return {
        "jobs": [dump_job(j, v) for j in jobs],
        "last_backfill": num(T0 - 40),
        "last_update": num(T0 - 3),
        "meta": {
            "plugin": {"type": "", "name": "", "data_parser": "data_parser/" + v,
                       "accounting_storage": "accounting_storage/slurmdbd"},
            "client": {"source": "", "user": "tr11user", "group": "bigsci"},
            "command": command[:-1],
            "slurm": {"version": {"major": major, "micro": micro, "minor": minor},
                      "release": release, "cluster": "jz"},
        },
        "errors": [],
        "warnings": [],
    }


def write(name, doc):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def main():
    cmd = ["squeue", "--json", "--user=tr11user", "-t", "all"]
    for v, release in (("v0.0.39", "23.02.7"), ("v0.0.40", "23.11.10"), ("v0.0.41", "24.05.8"),
                       ("v0.0.42", "24.11.5")):
        for label, jobs in (("mixed", mixed_jobs()), ("finished", finished_jobs())):
            short = ".".join(release.split(".")[:2])
            write(f"squeue-{short}-{label}.json", document(jobs, v, release, cmd))
    # 23.02.0-23.02.3: exit_code / derived_exit_code still plain integers
    write("squeue-23.02.3-finished.json", document(finished_jobs(), "v0.0.39i", "23.02.3", cmd))


if __name__ == "__main__":
    main()
