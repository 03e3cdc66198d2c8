"""Cross-check: mds's emissions.csv (mds::observe::EmissionsCsvWriter, driven by tests/tools/emissions_probe.cpp)
against codecarbon itself.
  1. Header: the 38 column names, in order, equal dataclasses.fields(codecarbon's EmissionsData); without
     codecarbon installed, equal the list of specs/ops.md §1.1 (codecarbon 3.2 / 3.3).
  2. With codecarbon: the same records written by codecarbon's FileOutput (on_csv_write="append", pandas'
     to_csv) and by mds give byte-identical files in each scenario: a new file with cumulative rows (floats of
     every magnitude, NaN, None, quoting), an existing empty file, a file with the same columns in another order,
     and a file with codecarbon 2.8's 32-column header next to an existing .bak (backed up under the same name).
  3. Read back with Python's csv module: values and units (kg, kWh, W, s) as written; run_id is a UUID v4;
     the timestamp has codecarbon's "%Y-%m-%dT%H:%M:%S" form and is the current local time.
Exit 77 (skipped) only if the probe cannot be run; codecarbon is optional.
"""
import csv
import dataclasses
import datetime
import filecmp
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

SPEC_COLUMNS = (
    "timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,"
    "cpu_power,gpu_power,ram_power,cpu_energy,gpu_energy,ram_energy,energy_consumed,water_consumed,"
    "country_name,country_iso_code,region,cloud_provider,cloud_region,os,python_version,codecarbon_version,"
    "cpu_count,cpu_model,gpu_count,gpu_model,longitude,latitude,ram_total_size,tracking_mode,"
    "cpu_utilization_percent,gpu_utilization_percent,ram_utilization_percent,ram_used_gb,on_cloud,pue,wue"
).split(",")
OLD_HEADER_28 = ("timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,cpu_power,gpu_power,"
                 "ram_power,cpu_energy,gpu_energy,ram_energy,energy_consumed,country_name,country_iso_code,region,"
                 "cloud_provider,cloud_region,os,python_version,codecarbon_version,cpu_count,cpu_model,gpu_count,"
                 "gpu_model,longitude,latitude,ram_total_size,tracking_mode,on_cloud,pue\n")

try:
    import warnings
    warnings.filterwarnings("ignore")
    from codecarbon.output_methods.emissions_data import EmissionsData
    from codecarbon.output_methods.file import FileOutput
    from codecarbon.external.logger import logger as _cc_logger
    _cc_logger.setLevel("ERROR")  # its "will be saved to" / "backing up" notes are expected here
    HAVE_CODECARBON = True
except Exception as e:  # pragma: no cover
    print(f"note: codecarbon not importable ({e!r}); checking the header against specs/ops.md §1.1 only")
    HAVE_CODECARBON = False


def make_records(n, seed):
    """Cumulative rows of one run, as a tracker flushing every checkpoint would write them."""
    rnd = random.Random(seed)
    run_id = str(uuid.uuid4())
    rows = []
    cpu_e = gpu_e = ram_e = emissions = 0.0
    for i in range(n):
        duration = 3600.0 * (i + 1) + rnd.random()
        cpu_e += rnd.uniform(0, 0.1)
        gpu_e += rnd.uniform(0, 3.0)
        ram_e += rnd.uniform(0, 0.05)
        energy = cpu_e + gpu_e + ram_e
        emissions = energy * 0.056039  # FRA, kg/kWh
        rows.append(dict(
            timestamp=f"2026-11-22T{10 + i % 10:02d}:11:12", project_name="tr11-176B-ml", run_id=run_id,
            experiment_id="5b0fa12a-3dd7-45bb-9766-cc326314d9f1", duration=duration, emissions=emissions,
            emissions_rate=emissions / duration, cpu_power=rnd.uniform(10, 300), gpu_power=rnd.choice([1600.0, 0.0, 1e-7]),
            ram_power=38.0, cpu_energy=cpu_e, gpu_energy=gpu_e, ram_energy=ram_e, energy_consumed=energy,
            water_consumed=energy * 1.8, country_name="France", country_iso_code="FRA", region="",
            cloud_provider="", cloud_region="", os="Linux-6.1.0-27-amd64-x86_64-with-glibc2.36", python_version="",
            codecarbon_version="mds-0.1.0", cpu_count=64 + i,
            cpu_model='AMD EPYC 7543 32-Core Processor, "engineering", sample' if i % 2 else "AMD EPYC 7543",
            gpu_count=8, gpu_model="8 x NVIDIA A100-SXM4-80GB",
            longitude=None if i % 3 else 2.3522, latitude=None if i % 3 else 48.8566 + i * 1e-17,
            ram_total_size=503.51234567, tracking_mode="machine",
            cpu_utilization_percent=rnd.choice([12.5, 100.0, float("nan")]), gpu_utilization_percent=99.9,
            ram_utilization_percent=rnd.uniform(0, 100), ram_used_gb=rnd.choice([1e16, 123456789.0, 1e-5, 0.0001]),
            on_cloud="N", pue=1.0 if i % 2 else 1.2, wue=0.0 if i % 2 else 1.8))
    return rows


def script_line(rec):
    vals = []
    for c in SPEC_COLUMNS:
        v = rec[c]
        vals.append("" if v is None else repr(v) if isinstance(v, float) else str(v))
    return "R\t" + "\t".join(vals)


def run_probe(probe, csv_path, lines, tmp):
    script = os.path.join(tmp, "script.tsv")
    with open(script, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    p = subprocess.run([probe, csv_path, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: emissions_probe exited {p.returncode}: {p.stderr}")
    return p.stdout


def codecarbon_write(csv_path, records):
    out = FileOutput(os.path.basename(csv_path), os.path.dirname(csv_path), on_csv_write="append")
    for r in records:
        out.out(EmissionsData(**r), None)


def dir_snapshot(d):
    return {name: open(os.path.join(d, name), "rb").read() for name in sorted(os.listdir(d))}


def main():
    src = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    bin_dir = os.environ.get("MDS_BIN") or os.path.join(src, "build", "bin")
    probe = os.path.join(bin_dir, "emissions_probe")
    if not os.path.exists(probe):
        raise SystemExit(f"FAIL: {probe} not found (set MDS_BIN to the directory of the built binaries)")
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mds-xcheck-emissions-")

    # 1. header
    header = run_probe(probe, os.path.join(tmp, "unused.csv"), ["H"], tmp).rstrip("\n").split(",")
    assert header == SPEC_COLUMNS, header
    against = "specs/ops.md §1.1"
    if HAVE_CODECARBON:
        import codecarbon
        fields = [f.name for f in dataclasses.fields(EmissionsData)]
        assert header == fields, f"mds header differs from codecarbon {codecarbon.__version__}:\n{header}\n{fields}"
        against = f"codecarbon {codecarbon.__version__} EmissionsData"

    # 2. scenarios, each written by mds and (when installed) by codecarbon, then compared file by file
    records = make_records(12, seed=7)
    scenarios = {
        "new": (None, records),
        "empty": ({"emissions.csv": ""}, records[:3]),
        "reordered": ({"emissions.csv": ",".join(SPEC_COLUMNS[::-1]) + "\n"}, records[:4]),
        "old-header": ({"emissions.csv": OLD_HEADER_28 + "2021-08-25T10:00:00,codecarbon,x,y,1.0,,,,,,,,,,,,,,,,,,,,,,,,,,N,1.0\n",
                        "emissions.csv.bak": "an earlier backup\n"}, records[:2]),
    }
    compared = 0
    for name, (initial, recs) in scenarios.items():
        results = {}
        for who in (["mds", "codecarbon"] if HAVE_CODECARBON else ["mds"]):
            d = os.path.join(tmp, name, who)
            os.makedirs(d)
            for fname, content in (initial or {}).items():
                with open(os.path.join(d, fname), "w") as f:
                    f.write(content)
            path = os.path.join(d, "emissions.csv")
            if who == "mds":
                out = run_probe(probe, path, [script_line(r) for r in recs], tmp)
                if name == "old-header":
                    assert out.split() == ["backup", os.path.join(d, "emissions.csv_0.bak")], out
            else:
                codecarbon_write(path, recs)
            results[who] = dir_snapshot(d)
        if HAVE_CODECARBON:
            if results["mds"] != results["codecarbon"]:
                for fname in sorted(set(results["mds"]) | set(results["codecarbon"])):
                    a, b = results["mds"].get(fname), results["codecarbon"].get(fname)
                    if a != b:
                        print(f"--- {name}/{fname} mds:\n{a.decode() if a else a}\n--- codecarbon:\n{b.decode() if b else b}")
                raise SystemExit(f"FAIL: scenario {name}: mds and codecarbon files differ")
            compared += 1

    # 3. read back with the csv module: values and units
    with open(os.path.join(tmp, "new", "mds", "emissions.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records)
    for row, rec in zip(rows, records):
        assert list(row.keys()) == SPEC_COLUMNS
        for c in SPEC_COLUMNS:
            want, got = rec[c], row[c]
            if want is None or (isinstance(want, float) and math.isnan(want)):
                assert got == "", (c, got)
            elif isinstance(want, float):
                assert float(got) == want and got == repr(want), (c, got, want)  # exact, Python repr
            else:
                assert got == str(want), (c, got, want)
        # units: kWh sum, kg = kWh x intensity, kg/s = kg / s
        assert math.isclose(float(row["energy_consumed"]),
                            float(row["cpu_energy"]) + float(row["gpu_energy"]) + float(row["ram_energy"]))
        assert math.isclose(float(row["emissions_rate"]), float(row["emissions"]) / float(row["duration"]))
    assert len({r["run_id"] for r in rows}) == 1  # one run: cumulative rows share the run_id
    assert [float(r["duration"]) for r in rows] == sorted(float(r["duration"]) for r in rows)

    out = run_probe(probe, os.path.join(tmp, "unused.csv"), ["U"] * 50 + ["T"], tmp).split()
    ids, stamp = out[:50], out[50]
    for s in ids:
        u = uuid.UUID(s)
        assert str(u) == s and u.version == 4 and u.variant == uuid.RFC_4122, s
    assert len(set(ids)) == 50
    parsed = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S")
    assert abs((datetime.datetime.now() - parsed).total_seconds()) < 60, stamp

    shutil.rmtree(tmp)
    cmp = (f"{compared} scenarios byte-identical to codecarbon's FileOutput (new / empty / reordered / old header + "
           f"backup names)") if HAVE_CODECARBON else "codecarbon not installed: file semantics not compared"
    print(f"OK: header = {against}; {cmp}; {len(rows)} rows read back by csv exactly; UUID v4 run_ids and "
          f"timestamps in codecarbon's form, in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
