"""Cross-check: mds's TensorBoard event files (mds::observe::TensorBoardWriter, driven by
tests/tools/tensorboard_probe.cpp) read back by the `tensorboard` package's own readers:
  1. RawEventFileLoader: the TFRecord framing (its record reader verifies both masked CRC-32Cs) and, per record,
     byte equality with Python protobuf's serialization of the Event built from the same numbers.
  2. LegacyEventFileLoader: the first event is file_version "brain.Event:2"; then every scalar's tag, step,
     wall_time and simple_value (float32 of the written double; NaN, +-Inf, -0.0, subnormals, overflow to inf).
  3. EventFileLoader (with TensorBoard's data-compat migration to scalar tensors) gives the same values.
  4. EventAccumulator over the log directory (two files, as after a restart) lists the tags and every
     ScalarEvent(wall_time, step, value).
Exit 77 (skipped) without the tensorboard package.
"""
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing.event_file_loader import (
        EventFileLoader, LegacyEventFileLoader, RawEventFileLoader)
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    from tensorboard.util import tensor_util
except Exception as e:  # pragma: no cover
    print(f"SKIP: cannot import tensorboard: {e!r}")
    sys.exit(SKIP)


def f32(x):
    with np.errstate(over="ignore"):  # 1e39 -> inf is what a float32 simple_value holds
        return float(np.float32(x)) if not math.isnan(x) else float("nan")


def same_float(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return struct.pack("<f", a) == struct.pack("<f", b)


def build_script():
    """[(file index, tag, value, step, wall_time)] and the probe script that writes them."""
    rnd = random.Random(1234)
    tags = ["lm-loss-training/lm loss", "lm-loss-training/lm loss vs samples", "learning-rate/learning-rate",
            "grad-norm/grad-norm", "iteration-time/TFLOPs per gpu (estimated)", "ünïcödé/损失 ✓", "x"]
    special = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e-45, 1e-40, 3.5e38, 1e39, -1e39,
               1.0 / 3.0, 2.0 ** -126, 65504.0, 123456789.123]
    big_steps = [0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 5, 2 ** 40, 358092898304, 2 ** 62, 2 ** 63 - 1, -1, -(2 ** 63)]
    events, lines = [], []
    file_index = 0
    base = time.time() - 3600
    for i in range(4000):
        if i == 2500:
            lines.append("N")
            file_index += 1
        if i % 700 == 0:
            lines.append("F")
        tag = tags[i % len(tags)]
        if i < len(special):
            value = special[i]
        else:
            value = rnd.choice([rnd.uniform(-10, 10), rnd.lognormvariate(0, 5), rnd.random() * 1e-3])
        step = big_steps[i] if i < len(big_steps) else i * 10
        wall = base + i * 0.125 + rnd.random() * 1e-6
        if i == 20:
            wall = 0.0  # proto3 default: left out, read back as 0.0
        events.append((file_index, tag, value, step, wall))
        lines.append(f"S\t{tag}\t{value!r}\t{step}\t{wall!r}")
    return events, "\n".join(lines) + "\n"


def expected_event(tag, value, step, wall):
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]))


def main():
    src = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    bin_dir = os.environ.get("MDS_BIN") or os.path.join(src, "build", "bin")
    probe = os.path.join(bin_dir, "tensorboard_probe")
    if not os.path.exists(probe):
        raise SystemExit(f"FAIL: {probe} not found (set MDS_BIN to the directory of the built binaries)")
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="mds-xcheck-tb-")
    events, script = build_script()
    script_path = os.path.join(tmp, "script.tsv")
    with open(script_path, "w", encoding="utf-8") as f:
        f.write(script)
    logdir = os.path.join(tmp, "tb")
    t_start = time.time()
    p = subprocess.run([probe, logdir, script_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: tensorboard_probe exited {p.returncode}: {p.stderr}")
    paths = p.stdout.split()
    assert len(paths) == 2, paths
    host, pid = os.uname().nodename, None
    for n, path in enumerate(paths):
        name = os.path.basename(path).split(".")
        # events.out.tfevents.<10-digit seconds>.<hostname>.<pid>.<n>, hostname may hold dots
        assert name[:3] == ["events", "out", "tfevents"], path
        assert len(name[3]) == 10 and abs(int(name[3]) - t_start) < 60, path
        assert ".".join(name[4:-2]) == host, (path, host)
        pid = pid or name[-2]
        assert name[-2] == pid and name[-1] == str(n), path

    checked = 0
    for n, path in enumerate(paths):
        # 0. framing walked by hand with tensorboard's masked_crc32c, and a corrupted copy refused by its reader
        data = open(path, "rb").read()
        at, records = 0, 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            assert struct.unpack_from("<I", data, at + 8)[0] == masked_crc32c(data[at:at + 8]), (path, at)
            body = data[at + 12:at + 12 + length]
            assert struct.unpack_from("<I", data, at + 12 + length)[0] == masked_crc32c(body), (path, at)
            at += 12 + length + 4
            records += 1
        assert at == len(data) and records == sum(1 for e in events if e[0] == n) + 1, (at, len(data), records)
        # The reader stops at a record whose CRC fails (DataLossError, swallowed): flip one bit in the 3rd record.
        third = 0
        for _ in range(2):
            third += 12 + struct.unpack_from("<Q", data, third)[0] + 4
        bad = os.path.join(tmp, "corrupt.tfevents")
        with open(bad, "wb") as f:
            f.write(data[:third + 14] + bytes([data[third + 14] ^ 1]) + data[third + 15:])
        got = len(list(RawEventFileLoader(bad).Load()))
        assert got == 2, f"tensorboard's reader read {got} records of a file corrupted in the 3rd (CRC not checked?)"
        os.remove(bad)
        want = [e for e in events if e[0] == n]
        # 1. raw records: CRCs verified by the reader; bytes equal Python's serialization.
        raw = list(RawEventFileLoader(path).Load())
        assert len(raw) == len(want) + 1, (len(raw), len(want))
        first = event_pb2.Event.FromString(raw[0])
        assert first.file_version == "brain.Event:2", first
        assert abs(first.wall_time - t_start) < 60 and first.step == 0, first
        for rec, (_, tag, value, step, wall) in zip(raw[1:], want):
            exp = expected_event(tag, value, step, wall).SerializeToString()
            assert rec == exp, f"record differs for {(tag, value, step, wall)}:\n  mds    {rec.hex()}\n  python {exp.hex()}"
        # 2. parsed events
        legacy = list(LegacyEventFileLoader(path).Load())
        for ev, (_, tag, value, step, wall) in zip(legacy[1:], want):
            (v,) = ev.summary.value
            assert v.tag == tag and ev.step == step and ev.wall_time == wall, (ev, tag, step, wall)
            assert same_float(v.simple_value, f32(value)), (tag, value, v.simple_value)
            checked += 1
        # 3. migrated to tensors, as TensorBoard's scalar plugin sees them
        migrated = list(EventFileLoader(path).Load())
        for ev, (_, tag, value, step, wall) in zip(migrated[1:], want):
            (v,) = ev.summary.value
            assert v.metadata.plugin_data.plugin_name == "scalars", v
            got = float(tensor_util.make_ndarray(v.tensor))
            assert same_float(got, f32(value)) and ev.step == step and ev.wall_time == wall, (tag, value, got)

    # 4. EventAccumulator over the directory (both files), keeping every scalar.
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = sorted({e[1] for e in events})
    assert sorted(acc.Tags()["scalars"]) == tags, acc.Tags()["scalars"]
    for tag in tags:
        got = acc.Scalars(tag)
        want = [e for e in events if e[1] == tag]
        assert len(got) == len(want), (tag, len(got), len(want))
        for g, (_, _, value, step, wall) in zip(got, want):
            assert g.step == step and g.wall_time == wall and same_float(g.value, f32(value)), (tag, g, value, step)

    print(f"OK: {len(paths)} event files, {checked} scalars ({len(tags)} tags, NaN/Inf/-0/subnormal/overflow values, "
          f"steps up to 2^63-1 and negative) read back identically by tensorboard's RawEventFileLoader (CRCs, bytes "
          f"= Python protobuf), LegacyEventFileLoader, EventFileLoader and EventAccumulator in {time.time() - t0:.1f}s")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
