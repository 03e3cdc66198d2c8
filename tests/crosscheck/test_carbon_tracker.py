"""Cross-check: mds's carbon tracker (mds::observe::CarbonTracker and its parts, driven by
tests/tools/carbon_probe.cpp) against codecarbon itself (3.3.2 in .venv), each part fed the same inputs:
  1. Country carbon intensity: every code of codecarbon's global_energy_mix.json and unknown codes, against
     Emissions.get_country_emissions (g/kWh and the country_name an OfflineEmissionsTracker writes).
  2. RAM power: RAM._estimate_dimm_count / _calculate_ram_power for RAM sizes from 0.5 GB to 8 TB, x86 and ARM.
  3. CPU power: CPU._get_power_from_cpu_load (cpu_load mode, machine) and constant mode for several TDPs and loads.
  4. Host readers: total / used RAM and its percent against psutil.virtual_memory(), CPU load between two
     /proc/stat against codecarbon's SystemCPULoadMeter (psutil reading the same fake procfs through
     psutil.PROCFS_PATH), and the os column against platform.platform().
  5. End to end: scenarios on a fake machine (powercap tree, procfs, NVML state read by a fake libnvidia-ml
     that mds dlopen()s), replayed step by step through codecarbon's OfflineEmissionsTracker with its own RAM,
     CPU (intel_rapl reading the same powercap files / cpu_load / constant) and GPU classes (its GPUDevice
     delta logic over the same NVML state), its measurement loop (_measure_power_and_energy under a patched
     time.perf_counter), emissions and FileOutput. The emissions.csv files must agree column by column
     (floats to 1e-12 relative) except the columns mds documents as its own (carbon_tracker.h): python_version,
     codecarbon_version, cpu_count / cpu_model (codecarbon reads the real host), the utilization columns
     (codecarbon samples them every second in a thread), and gpu_count / gpu_model when a subset of GPUs is
     covered. codecarbon's start() sample (a near-zero interval counted in the mean powers) is left out on
     both sides: mds's start only takes baselines.
Exit 77 (skipped) when codecarbon is not importable; FAIL when the probe is missing.
"""
import contextlib
import csv
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import types
from unittest import mock

try:
    import warnings
    warnings.filterwarnings("ignore")
    import psutil
    import codecarbon
    from codecarbon.core import resource_tracker as cc_resource_tracker
    from codecarbon.core.emissions import Emissions
    from codecarbon.core.gpu_device import GPUDevice
    from codecarbon.core.units import Energy
    from codecarbon.emissions_tracker import OfflineEmissionsTracker
    from codecarbon.external import ram as cc_ram
    from codecarbon.external.geography import GeoMetadata
    from codecarbon.external.hardware import CPU, GPU, SystemCPULoadMeter
    from codecarbon.external.logger import logger as cc_logger
    from codecarbon.external.ram import RAM
    from codecarbon.input import DataSource
    cc_logger.setLevel("CRITICAL")  # its warnings on fake hardware are expected here
except Exception as e:  # pragma: no cover
    print(f"SKIP: codecarbon not importable ({e!r})")
    sys.exit(77)

REL = 1e-12


def run_probe(probe, lines, tmp, env=None):
    script = os.path.join(tmp, "probe-script.tsv")
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = subprocess.run([probe, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise SystemExit(f"FAIL: carbon_probe exited {p.returncode}: {p.stderr}")
    return [line.split("\t") for line in p.stdout.splitlines()]


def close(a, b, rel=REL):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-18)


@contextlib.contextmanager
def procfs(path):
    old = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = path
    try:
        yield
    finally:
        psutil.PROCFS_PATH = old


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# ----------------------------------------------------------------------------------------------------------
# 1-4: the parts


def check_intensity(probe, tmp):
    mix = DataSource().get_global_energy_mix_data()
    codes = sorted(mix) + ["XYZ", "ZZZ", "EUR"]
    out = run_probe(probe, [f"intensity\t{c}" for c in codes], tmp)
    emissions = Emissions(DataSource())
    for (_, code, found, name, g), want_code in zip(out, codes):
        assert code == want_code
        geo = GeoMetadata(country_iso_code=code, country_name=mix.get(code, {}).get("country_name"))
        for kwh in (1.0, 12.345, 4.5e5):
            cc_kg = emissions.get_country_emissions(Energy.from_energy(kwh), geo)
            ours_kg = float(g) * 0.001 * kwh
            assert ours_kg == cc_kg, (code, kwh, ours_kg, cc_kg)
        if code in mix:
            assert found == "1" and name == mix[code]["country_name"], (code, name)
        else:
            assert found == "0" and name == "", code
    return len(mix)


RAM_SIZES = [0.5, 1, 2, 2.5, 3.9, 4, 7.6, 8, 15.5, 16, 17, 31.3, 32, 33, 62.7, 64, 65, 125.7, 128, 129, 200, 251.5,
             256, 257, 503.5, 512, 768, 1007.4, 1024, 1536, 2015.6, 2048, 3000, 4096, 6144, 8192]


def check_ram(probe, tmp):
    lines = [f"ram\t{gb!r}\t{arm}" for arm in (0, 1) for gb in RAM_SIZES]
    out = run_probe(probe, lines, tmp)
    ram = RAM(tracking_mode="machine")
    i = 0
    for arm in (False, True):
        ram.is_arm_cpu = arm
        for gb in RAM_SIZES:
            _, dimms, watts = out[i]
            i += 1
            assert int(dimms) == ram._estimate_dimm_count(gb), (gb, arm, dimms)
            assert float(watts) == ram._calculate_ram_power(gb), (gb, arm, watts, ram._calculate_ram_power(gb))
    return i


def check_cpu(probe, tmp):
    tdps = [85.0, 150.0, 225.0, 280.0, 0.0, 12.5]
    loads = [0.0, 0.1, 5.0, 12.5, 33.3, 50.0, 75.25, 99.9, 100.0]
    lines = [f"cpuload\t{t!r}\t{p!r}" for t in tdps for p in loads] + [f"cpuconst\t{t!r}" for t in tdps]
    out = iter(run_probe(probe, lines, tmp))
    n = 0
    for tdp in tdps:
        cpu = CPU(output_dir=tmp, mode="cpu_load", model="Test CPU", tdp=tdp)
        for pct in loads:
            cpu._cpu_load_meter.percent = lambda *a, _p=pct, **k: _p
            want = cpu._get_power_from_cpu_load().W
            got = float(next(out)[1])
            assert close(got, want, 1e-15), (tdp, pct, got, want)
            n += 1
    for tdp in tdps:
        cpu = CPU(output_dir=tmp, mode="constant", model="Test CPU", tdp=tdp)
        want = cpu._get_power_from_cpus().W
        got = float(next(out)[1])
        assert close(got, want, 1e-15), (tdp, got, want)
        n += 1
    return n


MEMINFO = ("MemTotal:       {total} kB\nMemFree:        {free} kB\nMemAvailable:   {avail} kB\nBuffers:            2012 kB\n"
           "Cached:          1232112 kB\nSwapCached:            0 kB\nActive:           802956 kB\n"
           "Inactive:         437260 kB\nShmem:              8872 kB\nSlab:             338868 kB\n"
           "SReclaimable:     306696 kB\nSUnreclaim:        32172 kB\n")


def check_host(probe, tmp):
    cases = [(24684084, 22684652, 23895864), (527994880, 1000000, 395996160), (2113511424, 5000, 12345678),
             (1048576, 1000, 1048576), (16384000, 100, 4096000)]
    lines, dirs = [], []
    for i, (total, free, avail) in enumerate(cases):
        d = os.path.join(tmp, f"proc-mem{i}")
        write(os.path.join(d, "meminfo"), MEMINFO.format(total=total, free=free, avail=avail))
        lines.append(f"meminfo\t{d}/meminfo")
        dirs.append(d)
    stats = [("cpu  1000 0 1000 8000 0 0 0 0 0 0", "cpu  1500 10 1600 8300 50 5 5 3 0 0"),
             ("cpu  1 2 3 4 5 6 7 8 9 10", "cpu  301 2 3 904 5 6 7 8 209 10"),
             ("cpu  100 0 100 700 100 0 0 0 0 0", "cpu  100 0 100 700 100 0 0 0 0 0"),
             ("cpu  123456 789 45678 9876543 1234 0 567 0 0 0", "cpu  133456 789 46678 9877543 1334 0 667 0 0 0")]
    for i, (a, b) in enumerate(stats):
        for name, text in (("a", a), ("b", b)):
            write(os.path.join(tmp, f"proc-stat{i}{name}", "stat"), text + "\ncpu0 1 1 1 1\n")
        lines.append(f"load\t{tmp}/proc-stat{i}a/stat\t{tmp}/proc-stat{i}b/stat")
    lines.append("platform")
    out = run_probe(probe, lines, tmp)
    for (_, total_gb, used_gb, percent), d in zip(out, dirs):
        with procfs(d):
            vm = psutil.virtual_memory()
        assert float(total_gb) == vm.total / 1024 ** 3, (d, total_gb, vm.total)
        assert close(float(used_gb), vm.used / 1024 ** 3, 1e-15), (d, used_gb, vm.used)
        assert float(percent) == vm.percent, (d, percent, vm.percent)
    for i, row in enumerate(out[len(dirs):len(dirs) + len(stats)]):
        meter = SystemCPULoadMeter()
        with procfs(f"{tmp}/proc-stat{i}a"):
            meter.reset()
        with procfs(f"{tmp}/proc-stat{i}b"):
            want = meter.percent()
        assert close(float(row[1]), want, 1e-12), (i, row, want)
    assert out[-1][1] == platform.platform(), (out[-1], platform.platform())
    return len(dirs) + len(stats) + 1


# ----------------------------------------------------------------------------------------------------------
# 5: end to end


class StateFileGPU(GPUDevice):
    """codecarbon's GPUDevice (its delta() logic) over the NVML state file that mds's fake libnvidia-ml reads."""
    state_path = None

    def _line(self):
        with open(self.state_path) as f:
            lines = [ln for ln in f.read().splitlines() if ln and not ln.startswith("init_error")]
        return lines[self.gpu_index].split("\t")

    def _get_total_energy_consumption(self):
        value = self._line()[1]
        return None if value == "err" else int(value)

    def _get_gpu_name(self):
        return self._line()[0]

    def _get_uuid(self):
        return f"GPU-fake-{self.gpu_index}"

    def _get_power_limit(self):
        return None

    def _get_memory_info(self):
        return types.SimpleNamespace(total=0, free=0, used=0)

    def _get_power_usage(self):
        raise RuntimeError("mds reads no instantaneous power: no power fallback on either side")

    def _get_temperature(self):
        return 0


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def nvml_text(gpus):
    return "".join(f"{name}\t{mj}\n" for name, mj in gpus)


def powercap_files(zones):
    """zones: {zone: (name, energy_uj, max_uj)} → {relative path: text}; sysfs-like: the control-type dir
    intel-rapl/ holds the zones, class/powercap/intel-rapl:N are links to them (made by make_tree)."""
    files = {}
    for zone, (name, uj, max_uj) in zones.items():
        parent = zone.rsplit(":", 1)[0] if zone.count(":") == 2 else "intel-rapl"
        base = f"sys/devices/virtual/powercap/intel-rapl/{parent + '/' if parent != 'intel-rapl' else ''}{zone}"
        files[f"{base}/name"] = name + "\n"
        files[f"{base}/energy_uj"] = f"{uj}\n"
        files[f"{base}/max_energy_range_uj"] = f"{max_uj}\n"
    return files


def make_tree(root, zones):
    pc = os.path.join(root, "sys/class/powercap")
    os.makedirs(pc, exist_ok=True)
    ctl = os.path.join(root, "sys/devices/virtual/powercap/intel-rapl")
    os.makedirs(ctl, exist_ok=True)
    for rel, text in powercap_files(zones).items():
        write(os.path.join(root, rel), text)
    if zones:
        os.symlink(os.path.relpath(ctl, pc), os.path.join(pc, "intel-rapl"))
        os.symlink(os.path.relpath(pc, ctl), os.path.join(ctl, "subsystem"))
        for zone in zones:
            if zone.count(":") == 1:
                os.symlink(os.path.relpath(os.path.join(ctl, zone), pc), os.path.join(pc, zone))


def stat_line(busy, idle):
    return f"cpu  {busy // 2} 0 {busy - busy // 2} {idle} 0 0 0 0 0 0\ncpu0 1 1 1 1\n"


SCENARIOS = [
    dict(
        name="rapl-2-packages-2-gpus", country="DEU", pue=1.2, wue=1.8, cpu="rapl", gpu_ids=None,
        meminfo=(527994880, 1000000, 395996160),
        zones={"intel-rapl:0": ("package-0", 10_000_000_000, 262_143_328_850),
               "intel-rapl:0:0": ("core", 5_000_000_000, 262_143_328_850),
               "intel-rapl:1": ("package-1", 200_000_000_000, 262_143_328_850),
               "intel-rapl:1:0": ("dram", 7_000_000_000, 262_143_328_850)},
        gpus=[("NVIDIA A100-SXM4-80GB", 123_456_789), ("NVIDIA A100-SXM4-80GB", 987_654_321)],
        steps=[
            (15.0, {"intel-rapl:0": 10_750_000_000, "intel-rapl:1": 200_810_000_000, "gpus": [123_456_789 + 6_000_123, 987_654_321 + 5_500_000]}, "measure"),
            (30.0, {"intel-rapl:0": 11_500_100_000, "intel-rapl:1": 201_620_000_000, "gpus": [123_456_789 + 12_100_000, "err"]}, "measure"),
            (45.5, {"intel-rapl:0": 12_300_000_000, "intel-rapl:1": 262_000_000_000 - 262_143_328_850 + 3_000_000_000, "gpus": [123_456_789 + 18_000_000, "err"]}, "measure"),
            (60.0, {"intel-rapl:0": 13_000_000_000, "intel-rapl:1": 3_700_000_000, "gpus": [123_456_789 + 24_500_000, 987_654_321 + 27_000_000]}, "flush"),
            (75.0, {"intel-rapl:0": 13_700_000_000, "intel-rapl:1": 4_400_000_000, "gpus": [123_456_789 + 30_000_000, 987_654_321 + 33_000_000]}, "measure"),
            (90.25, {"intel-rapl:0": 14_400_000_000, "intel-rapl:1": 5_100_000_000, "gpus": [123_456_789 + 36_000_000, 987_654_321 + 39_600_000]}, "flush"),
            (120.0, {"intel-rapl:0": 15_800_000_000, "intel-rapl:1": 6_500_000_000, "gpus": [123_456_789 + 48_000_000, 987_654_321 + 51_000_000]}, "flush"),
        ]),
    dict(
        name="cpu-load-no-gpu", country="FRA", pue=1.0, wue=0.0, cpu="load", gpu_ids=None, nvml=False,
        meminfo=(24684084, 22684652, 23895864), zones={}, gpus=[],
        steps=[
            (15.0, {"stat": (5000, 10000)}, "measure"),
            (30.0, {"stat": (12000, 13000)}, "measure"),
            (45.0, {"stat": (12100, 20000)}, "flush"),
            (60.0, {"stat": (19000, 20100)}, "measure"),
            (75.0, {"stat": (21000, 26000)}, "flush"),
        ]),
    dict(
        name="mirrored-dies-gpu-subset", country="USA", pue=1.1, wue=0.0, cpu="rapl", gpu_ids=[1, 3],
        force_ram_power=40.0, meminfo=(2113511424, 5000, 12345678),
        zones={"intel-rapl:0": ("package-0", 50_000_000_000, 65_532_610_987),
               "intel-rapl:1": ("package-1", 50_000_000_200, 65_532_610_987)},
        gpus=[("NVIDIA H100 80GB HBM3", 1_000), ("NVIDIA H100 80GB HBM3", 2_000_000),
              ("NVIDIA H100 80GB HBM3", 3_000), ("NVIDIA H100 80GB HBM3", 4_000_000)],
        steps=[
            (20.0, {"intel-rapl:0": 52_000_000_000, "intel-rapl:1": 52_000_000_300, "gpus": [5_000, 2_000_000 + 14_000_000, 9_000, 4_000_000 + 13_500_000]}, "measure"),
            (40.0, {"intel-rapl:0": 54_500_000_000, "intel-rapl:1": 54_500_000_300, "gpus": [9_000, 2_000_000 + 28_000_000, 19_000, 4_000_000 + 27_000_000]}, "flush"),
            (60.0, {"intel-rapl:0": 57_000_000_000, "intel-rapl:1": 57_000_000_300, "gpus": [9_500, 2_000_000 + 42_000_000, 29_000, 4_000_000 + 40_000_000]}, "flush"),
        ]),
    dict(
        name="constant-forced-tdp", country="GBR", pue=1.4, wue=0.5, cpu="constant", force_cpu_power=150.0,
        gpu_ids=None, meminfo=(16384000, 100, 4096000), zones={"intel-rapl:0": ("package-0", 1, 1000)},
        gpus=[("Tesla V100-SXM2-16GB", 0)],
        steps=[
            (60.0, {"gpus": [18_000_000]}, "measure"),
            (60.01, {"gpus": [18_003_000]}, "flush"),  # under 50 ms: codecarbon's flush does not measure again
            (3600.0, {"gpus": [1_000_000_000]}, "flush"),
        ]),
]


def scenario_files(sc, state, root):
    """The fake machine's files at one step: {absolute path: text}."""
    files = {}
    total, free, avail = sc["meminfo"]
    files[f"{root}/proc/meminfo"] = MEMINFO.format(total=total, free=free, avail=avail)
    files[f"{root}/proc/stat"] = stat_line(*state.get("stat", (1000, 9000)))
    files[f"{root}/proc/cpuinfo"] = "processor\t: 0\nmodel name\t: Fake CPU\n"
    for zone, (name, _, max_uj) in sc["zones"].items():
        if zone in state:
            for rel, text in powercap_files({zone: (name, state[zone], max_uj)}).items():
                if rel.endswith("energy_uj") and not rel.endswith("max_energy_range_uj"):
                    files[f"{root}/{rel}"] = text
    if sc["gpus"]:
        files[f"{root}/nvml-state"] = nvml_text((name, mj) for (name, _), mj in zip(sc["gpus"], state["gpus"]))
    return files


def run_mds(probe, sc, root, out_dir, fake_nvml):
    state = {"stat": (1000, 9000), "gpus": [mj for _, mj in sc["gpus"]]}
    state.update({z: uj for z, (_, uj, _) in sc["zones"].items()})
    lines = [f"config\toutput_dir\t{out_dir}", f"config\tcountry\t{sc['country']}", f"config\tpue\t{sc['pue']!r}",
             f"config\twue\t{sc['wue']!r}", f"config\tsysfs_root\t{root}/sys", f"config\tprocfs_root\t{root}/proc",
             f"config\tnvml_library\t{fake_nvml if sc.get('nvml', True) else root + '/no-nvml/libnvidia-ml.so.1'}",
             f"config\tcpu_mode\t{sc['cpu']}", f"config\tarm\t{int(RAM()._detect_arm_cpu())}",
             "config\tproject_name\tmds-xcheck"]
    if sc["gpu_ids"] is not None:
        lines.append("config\tgpu_indices\t" + ",".join(map(str, sc["gpu_ids"])))
    if sc.get("force_ram_power") is not None:
        lines.append(f"config\tforce_ram_power_w\t{sc['force_ram_power']!r}")
    if sc.get("force_cpu_power") is not None:
        lines.append(f"config\tforce_cpu_power_w\t{sc['force_cpu_power']!r}")
    for path, text in scenario_files(sc, state, root).items():
        write(path, text)
    lines.append("start\t0.0")
    for t, changes, action in sc["steps"]:
        state.update(changes)
        for path, text in scenario_files(sc, state, root).items():
            lines.append(f"write\t{path}\t" + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t"))
        lines.append(f"{action}\t{t!r}")
    lines.append("totals")
    return run_probe(probe, lines, root, env={"MDS_FAKE_NVML_STATE": f"{root}/nvml-state"})


def run_codecarbon(sc, root, out_dir):
    state = {"stat": (1000, 9000), "gpus": [mj for _, mj in sc["gpus"]]}
    state.update({z: uj for z, (_, uj, _) in sc["zones"].items()})

    def apply():
        for path, text in scenario_files(sc, state, root).items():
            write(path, text)

    apply()
    os.makedirs(out_dir, exist_ok=True)  # codecarbon wants it to exist
    clock = Clock()
    StateFileGPU.state_path = f"{root}/nvml-state"
    with mock.patch("time.perf_counter", clock), mock.patch.object(cc_ram, "SLURM_JOB_ID", None), \
            mock.patch.dict(os.environ, {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}, clear=True):
        tracker = OfflineEmissionsTracker(
            country_iso_code=sc["country"], output_dir=out_dir, output_file="emissions.csv", save_to_file=True,
            log_level="critical", measure_power_secs=1e9, pue=sc["pue"], wue=sc["wue"], project_name="mds-xcheck",
            force_ram_power=sc.get("force_ram_power"), gpu_ids=sc["gpu_ids"], allow_multiple_runs=True)
        # Its __init__ swallows exceptions (@suppress): make sure it got to the end.
        assert hasattr(tracker, "_emissions") and hasattr(tracker, "_force_ram_power"), "OfflineEmissionsTracker() failed"
        tracker._populate_system_metadata()
        rt = cc_resource_tracker.ResourceTracker(tracker)
        with procfs(f"{root}/proc"):
            rt.set_RAM_tracking()  # RAM() sized by psutil over the fake meminfo
        if sc["cpu"] == "rapl":
            cpu = CPU(output_dir=out_dir, mode="intel_rapl", model="Fake CPU", tdp=None,
                      rapl_dir=f"{root}/sys/class/powercap/intel-rapl/subsystem")
        elif sc["cpu"] == "load":
            cpu = CPU.from_utils(out_dir, "cpu_load", "Fake CPU", sc.get("force_cpu_power"))
        else:
            cpu = CPU.from_utils(out_dir, "constant", "Fake CPU", sc.get("force_cpu_power"))
        tracker._hardware.append(cpu)
        if sc["gpus"] and sc.get("nvml", True):
            devices = [StateFileGPU(handle=None, gpu_index=i) for i in range(len(sc["gpus"]))]

            def from_utils(gpu_ids=None):
                g = GPU(gpu_ids=gpu_ids)
                g.devices.devices = devices
                g.devices.device_count = len(devices)
                g.num_gpus = len(devices)
                g._gpu_ids_resolved = False
                return g

            with mock.patch.object(cc_resource_tracker.gpu, "is_nvidia_system", lambda: True), \
                    mock.patch.object(cc_resource_tracker.GPU, "from_utils", staticmethod(from_utils)):
                rt.set_GPU_tracking()
        else:
            tracker._conf["gpu_count"] = 0
            tracker._conf["gpu_model"] = ""
        tracker._hardware_initialized = True
        # start() without its first measurement (see the module docstring).
        with procfs(f"{root}/proc"):
            clock.t = 0.0
            tracker._last_measured_time = tracker._start_time = time.perf_counter()
            for hw in tracker._hardware:
                hw.start()
            for t, changes, action in sc["steps"]:
                state.update(changes)
                apply()
                clock.t = t
                if action == "measure":
                    tracker._measure_power_and_energy()
                else:
                    tracker.flush()
    return tracker


SKIP_COLUMNS = {"timestamp", "run_id", "python_version", "codecarbon_version", "cpu_count", "cpu_model",
                "cpu_utilization_percent", "gpu_utilization_percent", "ram_utilization_percent", "ram_used_gb"}
FLOAT_COLUMNS = {"duration", "emissions", "emissions_rate", "cpu_power", "gpu_power", "ram_power", "cpu_energy",
                 "gpu_energy", "ram_energy", "energy_consumed", "water_consumed", "ram_total_size", "pue", "wue",
                 "longitude", "latitude"}


def read_rows(path):
    with open(path, newline="") as f:
        text = f.read()
    with open(path, newline="") as f:
        return text.splitlines()[0], list(csv.DictReader(f))


def check_end_to_end(probe, fake_nvml, tmp):
    compared, worst = 0, 0.0
    for sc in SCENARIOS:
        root = os.path.join(tmp, sc["name"])
        make_tree(root, sc["zones"])
        out_mds, out_cc = os.path.join(tmp, sc["name"] + "-mds"), os.path.join(tmp, sc["name"] + "-codecarbon")
        mds_out = run_mds(probe, sc, root, out_mds, fake_nvml)
        started = next(r for r in mds_out if r[0] == "started")
        want_mode = {"rapl": "rapl", "load": "cpu_load", "constant": "constant"}[sc["cpu"]]
        assert started[1] == want_mode, (sc["name"], started, [r for r in mds_out if r[0] == "note"])
        # Fresh files for codecarbon: the same tree at its initial state.
        shutil.rmtree(root)
        make_tree(root, sc["zones"])
        tracker = run_codecarbon(sc, root, out_cc)
        h_mds, rows_mds = read_rows(os.path.join(out_mds, "emissions.csv"))
        h_cc, rows_cc = read_rows(os.path.join(out_cc, "emissions.csv"))
        assert h_mds == h_cc, (h_mds, h_cc)
        assert len(rows_mds) == len(rows_cc) == sum(a != "measure" for _, _, a in sc["steps"]), sc["name"]
        for i, (a, b) in enumerate(zip(rows_mds, rows_cc)):
            for col in a:
                if col in SKIP_COLUMNS:
                    continue
                if col in ("gpu_count", "gpu_model") and sc["gpu_ids"] is not None:
                    continue  # codecarbon describes every GPU it sees, mds the ones it covers
                if col in FLOAT_COLUMNS and a[col] and b[col]:
                    x, y = float(a[col]), float(b[col])
                    ok = close(x, y)
                    if y != 0:
                        worst = max(worst, abs(x - y) / abs(y))
                else:
                    ok = a[col] == b[col]
                if not ok:
                    for c in a:
                        print(f"  {c}: mds {a[c]!r} codecarbon {b[c]!r}")
                    raise SystemExit(f"FAIL: {sc['name']} row {i} column {col}: mds {a[col]!r}, codecarbon {b[col]!r}")
                compared += 1
            assert a["run_id"] == rows_mds[0]["run_id"]
        if sc["gpu_ids"] is not None:
            assert rows_mds[0]["gpu_count"] == str(len(sc["gpu_ids"]))
            assert rows_mds[0]["gpu_model"] == f"{len(sc['gpu_ids'])} x {sc['gpus'][0][0]}"
        totals = next(r for r in mds_out if r[0] == "totals")
        assert close(float(totals[1]), tracker._total_energy.kWh) and close(float(totals[2]), tracker._total_emissions)
        # The scenarios must exercise what they are named after.
        notes = " | ".join(r[1] for r in mds_out if r[0] == "note")
        if "mirrored" in sc["name"]:
            assert "mirror" in notes and len(tracker._hardware[1]._intel_interface._rapl_files) == 1, notes
        if "rapl-2" in sc["name"]:
            assert "unreadable" in notes and "readable again" in notes, notes  # the GPU 1 outage
        last = rows_mds[-1]
        assert float(last["cpu_energy"]) > 0 and float(last["ram_energy"]) > 0, sc["name"]
        assert (float(last["gpu_energy"]) > 0) == bool(sc["gpus"] and sc.get("nvml", True)), sc["name"]
    return compared, worst


def main():
    src = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    bin_dir = os.environ.get("MDS_BIN") or os.path.join(src, "build", "bin")
    probe = os.path.join(bin_dir, "carbon_probe")
    fake_nvml = os.path.join(bin_dir, "libfake_nvml.so")
    for path in (probe, fake_nvml):
        if not os.path.exists(path):
            raise SystemExit(f"FAIL: {path} not found (set MDS_BIN to the directory of the built binaries)")
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mds-xcheck-carbon-")
    n_countries = check_intensity(probe, tmp)
    n_ram = check_ram(probe, tmp)
    n_cpu = check_cpu(probe, tmp)
    n_host = check_host(probe, tmp)
    n_e2e, worst = check_end_to_end(probe, fake_nvml, tmp)
    shutil.rmtree(tmp)
    print(f"OK: codecarbon {codecarbon.__version__}: {n_countries} country intensities (+3 unknown → world average) "
          f"equal; {n_ram} RAM power estimates equal; {n_cpu} CPU load/constant powers equal; {n_host} host readings "
          f"equal to psutil / SystemCPULoadMeter / platform; {len(SCENARIOS)} end-to-end scenarios, {n_e2e} CSV values "
          f"equal to codecarbon's tracker (floats within {REL:g}, worst {worst:.1e}), in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
