"""Cross-check: mds's zip container of torch.save files (mds::ckpt::ZipArchive / ZipWriter /
TorchZipWriter, driven by tests/tools/zip_probe.cpp) against Python's zipfile and torch itself:
  a. files written by torch.save (by path and by file object, several dtypes incl. bfloat16, an
     OrderedDict, a 50 MB tensor, shared storages, an empty tensor) are listed by the probe with the
     names, header offsets, data offsets, sizes, methods and CRC-32s zipfile reports, the prefix torch
     uses, and data/<key> holds the storage bytes;
  b. the probe re-packs each file with TorchZipWriter (streamed in odd-sized chunks, with and without
     forced ZIP64); torch.load gives equal tensors (also mmap=True, map_location="meta" and
     TORCH_SERIALIZATION_DEBUG=1, which checks torch's storage-offset calculation against our layout),
     zipfile's CRC check passes and every record's data is 64-byte aligned;
  c. ZIP64: a file with a record of 2**32 + 4096 bytes streamed by the probe (when the disk has room;
     deleted right after) and a small forced-ZIP64 file are read by zipfile, CRC verified, and by the probe.
Exit 77 (skipped) without torch or the probe.
"""
import collections
import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

SKIP = 77
try:
    import torch
except Exception as e:  # pragma: no cover
    print(f"SKIP: cannot import torch: {e!r}")
    sys.exit(SKIP)

BIN = os.environ.get("MDS_BIN", os.path.join(os.environ.get("MDS_BUILD_DIR", "build"), "bin"))
PROBE = os.path.join(BIN, "zip_probe")
if not os.access(PROBE, os.X_OK):
    print(f"SKIP: {PROBE} not built")
    sys.exit(SKIP)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def probe(*args):
    r = subprocess.run([PROBE, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"zip_probe {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}")
    return r.stdout


def probe_list(path):
    """(prefix, zip64, [(name, header_offset, data_offset, size, compressed_size, method, crc)])"""
    prefix, zip64, entries = None, None, []
    for line in probe("list", path, "--verify").splitlines():
        f = line.split("\t")
        if f[0] == "prefix":
            prefix = f[1]
        elif f[0] == "zip64":
            zip64 = f[1] == "1"
        else:
            entries.append((f[1], *map(int, f[2:])))
    return prefix, zip64, entries


def zipfile_list(path):
    """The same list from Python's zipfile, data offsets from the local headers."""
    out = []
    with open(path, "rb") as raw, zipfile.ZipFile(path) as z:
        for i in z.infolist():
            raw.seek(i.header_offset)
            sig, name_len, extra_len = struct.unpack("<I22xHH", raw.read(30))
            assert sig == 0x04034B50
            out.append((i.filename, i.header_offset, i.header_offset + 30 + name_len + extra_len, i.file_size,
                        i.compress_size, i.compress_type, i.CRC))
    return out


def storage_bytes(t):
    """The bytes of a tensor that owns its whole storage from offset 0."""
    s = t.untyped_storage()
    return bytes(torch.empty(0, dtype=torch.uint8).set_(s).numpy()) if s.nbytes() else b""


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() \
            and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def objects():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 4, generator=g)
    return {
        "dtypes": {
            "f32": torch.randn(3, 5, generator=g),
            "f16": torch.randn(7, generator=g).half(),
            "bf16": torch.randn(4, 3, generator=g).bfloat16(),
            "f64": torch.randn(2, 2, generator=g).double(),
            "i64": torch.arange(-5, 6),
            "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
            "u8": torch.arange(256, dtype=torch.uint8),
            "bool": torch.tensor([True, False, True]),
            "scalar": torch.tensor(3.5),
            "step": 12345,
            "name": "mp_rank_00",
        },
        "ordered": collections.OrderedDict((f"layer.{i}.weight", torch.full((i + 1, 3), float(i)).bfloat16())
                                           for i in range(12)),
        "large": {"w": torch.randn(50 * 1024 * 1024 // 4, generator=g)},  # 50 MB
        "shared": {"base": base, "view": base[2:4], "t": base.t(), "empty": torch.empty(0, 3), "after": torch.ones(2)},
    }


def unique_storages(obj, dedupe=True):
    """Tensors in pickling order, one per storage (the order torch.save numbers data/<key>)."""
    seen, out = set(), []

    def walk(o):
        if isinstance(o, torch.Tensor):
            key = o.untyped_storage().data_ptr(), o.untyped_storage().nbytes()
            if not dedupe or key not in seen:
                seen.add(key)
                out.append(o)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)
    walk(obj)
    return out


def load_checks(path, obj, label):
    check(same(torch.load(path, weights_only=False), obj), f"{label}: torch.load gives equal objects")
    check(same(torch.load(path, weights_only=False, mmap=True), obj), f"{label}: torch.load(mmap=True) gives equal objects")
    meta = torch.load(path, weights_only=False, map_location="meta")
    pairs = list(zip(unique_storages(obj, dedupe=False), unique_storages(meta, dedupe=False)))
    check(len(pairs) == len(unique_storages(obj, dedupe=False)), f"{label}: meta load has every tensor")
    for a, b in pairs:
        check(a.shape == b.shape and a.dtype == b.dtype and b.is_meta, f"{label}: meta load shape/dtype")
    os.environ["TORCH_SERIALIZATION_DEBUG"] = "1"  # checks torch's calculated storage offsets against ours
    try:
        check(same(torch.load(path, weights_only=False), obj), f"{label}: torch.load with TORCH_SERIALIZATION_DEBUG=1")
    finally:
        del os.environ["TORCH_SERIALIZATION_DEBUG"]


def part_a_b(tmp):
    for label, obj in objects().items():
        by_path = os.path.join(tmp, f"{label}_states.pt")
        torch.save(obj, by_path)
        buf = io.BytesIO()
        torch.save(obj, buf)
        by_file = os.path.join(tmp, f"{label}_fileobj.bin")
        with open(by_file, "wb") as f:
            f.write(buf.getvalue())
        for path, prefix in [(by_path, f"{label}_states"), (by_file, "archive")]:
            name = f"{label} ({os.path.basename(path)})"
            got_prefix, _, entries = probe_list(path)
            check(got_prefix == prefix, f"{name}: prefix {got_prefix!r} == {prefix!r}")
            check(entries == zipfile_list(path), f"{name}: probe listing == zipfile listing")
            names = [e[0] for e in entries]
            for rec in ["data.pkl", "version", "byteorder"]:
                check(f"{prefix}/{rec}" in names, f"{name}: has {rec}")
            for key, t in enumerate(unique_storages(obj)):
                out = os.path.join(tmp, "record.bin")
                probe("record", path, f"data/{key}", out)
                with open(out, "rb") as f:
                    check(f.read() == storage_bytes(t), f"{name}: data/{key} == storage bytes of {t.dtype} {tuple(t.shape)}")
                os.remove(out)
            with zipfile.ZipFile(path) as z:
                raw = z.read(f"{prefix}/data.pkl")
            out = os.path.join(tmp, "record.bin")
            probe("record", path, "data.pkl", out)
            with open(out, "rb") as f:
                check(f.read() == raw, f"{name}: data.pkl bytes")
            os.remove(out)

            # b. re-pack with TorchZipWriter and load with torch
            for force in [False, True]:
                packed = os.path.join(tmp, f"repacked_{label}{'_z64' if force else ''}.pt")
                probe("repack", path, packed, "--chunk", 4099, *(["--force-zip64"] if force else []))
                rname = f"{name} repacked{' (forced ZIP64)' if force else ''}"
                load_checks(packed, obj, rname)
                with zipfile.ZipFile(packed) as z:
                    check(z.testzip() is None, f"{rname}: zipfile CRC check")
                    p = os.path.splitext(os.path.basename(packed))[0]
                    check(all(n.startswith(p + "/") for n in z.namelist()), f"{rname}: every record under {p}/")
                    check(z.read(f"{p}/version") == b"3\n" and z.read(f"{p}/byteorder") == b"little",
                          f"{rname}: version and byteorder records")
                    with zipfile.ZipFile(path) as orig:
                        for rec in orig.namelist():
                            sub = rec.split("/", 1)[1]
                            if sub != ".data/serialization_id":
                                check(z.read(f"{p}/{sub}") == orig.read(rec), f"{rname}: record {sub} copied")
                lst = zipfile_list(packed)
                check(all(e[2] % 64 == 0 for e in lst), f"{rname}: data 64-byte aligned")
                check(all(e[5] == 0 for e in lst), f"{rname}: all stored")
                pl = probe_list(packed)
                check(pl[2] == lst and pl[1] == force, f"{rname}: probe listing == zipfile listing, zip64 {force}")
                os.remove(packed)
        print(f"ok: {label}")


BLOCK = bytes(((i * 131 + (i >> 11)) & 0xFF) for i in range(1 << 20))


def part_c(tmp, size, force):
    path = os.path.join(tmp, "big.zip")
    try:
        crc = int(probe("big", path, size, *(["--force-zip64"] if force else [])))
        expected_crc = 0
        for done in range(0, size, len(BLOCK)):
            expected_crc = zlib.crc32(BLOCK[:min(len(BLOCK), size - done)], expected_crc)
        label = f"record of {size} bytes{' (forced ZIP64)' if force else ''}"
        check(crc == expected_crc, f"{label}: probe CRC == zlib CRC")
        with zipfile.ZipFile(path) as z:
            info = {i.filename: i for i in z.infolist()}
            check(list(info) == ["big/head", "big/data", "big/tail"], f"{label}: names")
            check(info["big/data"].file_size == size and info["big/data"].CRC == expected_crc, f"{label}: size and CRC")
            check(z.read("big/head") == b"head" and z.read("big/tail") == b"tail", f"{label}: small records")
            ok = True
            with z.open("big/data") as f:  # zipfile checks the CRC-32 when the entry is read to its end
                for done in range(0, size, len(BLOCK)):
                    n = min(len(BLOCK), size - done)
                    ok = ok and f.read(n) == BLOCK[:n]
                check(f.read(1) == b"", f"{label}: no bytes past the end")
            check(ok, f"{label}: data bytes")
        _, zip64, entries = probe_list(path)
        check(zip64 == (force or size >= 2 ** 32), f"{label}: probe sees ZIP64 end records exactly when needed")
        check(entries == zipfile_list(path), f"{label}: probe listing == zipfile listing")
        if size >= 2 ** 32:
            check(info["big/tail"].header_offset >= 2 ** 32, f"{label}: tail header beyond 4 GiB")
        print(f"ok: {label}")
    finally:
        if os.path.exists(path):
            os.remove(path)


def main():
    tmp = tempfile.mkdtemp(prefix="mds-zip-")
    try:
        part_a_b(tmp)
        part_c(tmp, 1_000_003, force=True)
        part_c(tmp, 3 * 1024 * 1024 + 5, force=False)
        big = 2 ** 32 + 4096
        free = shutil.disk_usage(tmp).free
        if free > big + 2 * 1024 ** 3 and os.environ.get("MDS_ZIP_SKIP_4GB") != "1":
            part_c(tmp, big, force=False)
        else:
            print(f"note: {free} bytes free in {tmp}: the > 4 GiB ZIP64 check was not run (forced ZIP64 was)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all zip checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
