"""What the hostile-input tests of the checkpoint tools share (test_ckpt_hostile*.py): tiny DeepSpeed checkpoints
made by tests/crosscheck/bmd_checkpoint.py (torch.save files, as BigScience's Megatron-DeepSpeed wrote them), a digest
of a folder tree that does not follow symbolic links, the zip layout of a .pt file (where each record's bytes are),
which tensors use which storage, and the names of temporaries the tools clean up."""
import collections
import hashlib
import os
import pickle
import shutil
import socket
import subprocess
import sys
import zipfile

from testkit import binary, check, skip

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "crosscheck"))

TOOLS = ("mds-ckpt-shrink", "mds-ckpt-reshape", "mds-ckpt-to-hf")


def import_bmd():
    """bmd_checkpoint (needs torch and numpy), or exit 77."""
    try:
        import bmd_checkpoint  # noqa: F401
    except Exception as e:  # noqa: BLE001
        skip(f"torch / numpy not importable: {e}")
    import bmd_checkpoint
    return bmd_checkpoint


def make_checkpoint(root, tp=1, pp=1, shape=None, extra_args=None, **kw):
    """A tiny bf16 checkpoint in `root` (tag global_step10, `latest`), GPT2-shaped so mds-ckpt-to-hf converts it.
    extra_args: attributes added to the Megatron args (e.g. vocab_file)."""
    bmd = import_bmd()
    shape = shape or bmd.ModelShape(num_layers=2, hidden=16, heads=2, ffn=64, padded_vocab=128, seq=32)
    saved = bmd.megatron_args
    if extra_args:
        def with_extra(*a, **k):
            ns = saved(*a, **k)
            for key, value in extra_args.items():
                setattr(ns, key, value)
            return ns
        bmd.megatron_args = with_extra
    try:
        bmd.make_checkpoint(root, shape, tp=tp, pp=pp, dp=1, iteration=10, **kw)
    finally:
        bmd.megatron_args = saved
    return root


def tools():
    return {name: binary(name) for name in TOOLS}


def run(tool, *args, cwd=None, as_nobody=False, timeout=120):
    cmd = [tool, *map(str, args)]
    if as_nobody:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    r = subprocess.run(cmd, capture_output=True, cwd=cwd, timeout=timeout)
    # Under ASan / UBSan a finding exits 1 like an ordinary error: it must not pass for one.
    check(b"Sanitizer" not in r.stderr and b"runtime error:" not in r.stderr,
          f"{os.path.basename(tool)} {' '.join(map(str, args))[:200]}: sanitizer report: {r.stderr[-2000:]!r}")
    return r


def tree_digest(path):
    """{relative path: ('dir',) | ('file', sha256) | ('link', target) | ('other',)} of everything under `path`
    (itself included as '.'), symbolic links recorded, not followed."""
    out = {}

    def visit(p, rel):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return
        import stat
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir",)
            for name in sorted(os.listdir(p)):
                visit(os.path.join(p, name), os.path.join(rel, name))
        elif stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                out[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
        else:
            out[rel] = ("other",)

    visit(path, ".")
    return out


def zip_records(path):
    """[(name, data offset, size)] of the stored entries of a torch.save file."""
    spans = []
    with open(path, "rb") as f:
        raw = f.read()
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            h = info.header_offset
            name_len = int.from_bytes(raw[h + 26:h + 28], "little")
            extra_len = int.from_bytes(raw[h + 28:h + 30], "little")
            spans.append((info.filename, h + 30 + name_len + extra_len, info.file_size))
    return spans


class _Anything:
    """Stands for any class a checkpoint's pickle names (argparse.Namespace, numpy arrays, enums...)."""
    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state

    def append(self, item):  # APPEND(S) on a deque or list subclass
        self.__dict__.setdefault("items", []).append(item)

    def extend(self, items):
        for item in items:
            self.append(item)

    def __setitem__(self, key, value):  # SETITEM(S) on a dict subclass
        self.__dict__.setdefault("mapping", {})[key] = value


class _TensorRef:
    def __init__(self, key):
        self.key = key


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, *rest: _TensorRef(storage)
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "builtins" and name in ("set", "frozenset", "dict", "list", "tuple", "getattr"):
            return _Anything
        return type(name, (_Anything,), {})

    def persistent_load(self, pid):
        return pid[2]


def tensors_by_storage(path):
    """{storage key: [names of the tensors on it, as their last dict key]} of a torch.save file."""
    with zipfile.ZipFile(path) as z:
        pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        root = _Unpickler(__import__("io").BytesIO(z.read(pkl))).load()
    found = collections.defaultdict(list)

    def walk(v, name, depth=0):
        if depth > 50:
            return
        if isinstance(v, _TensorRef):
            found[v.key].append(name)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, str(k), depth + 1)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x, name, depth + 1)
        elif isinstance(v, _Anything):
            for part in ("args", "state", "items", "mapping"):
                walk(getattr(v, part, None), name, depth + 1)

    walk(root, "")
    return dict(found)


def this_host():
    """The host part of the tools' temporary names (safe_paths.cpp this_host)."""
    h = socket.gethostname() or "localhost"
    return "".join("_" if c == "/" or ord(c) < 0x20 else c for c in h)


def dead_pid():
    """The id of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def stale_temp(folder, final_name, pid=None, host=None, size=4096):
    """Leaves an interrupted run's temporary folder `.<final_name>.tmp-<pid>-<host>` in `folder`; returns its path."""
    pid = dead_pid() if pid is None else pid
    host = this_host() if host is None else host
    path = os.path.join(folder, f".{final_name}.tmp-{pid}" + (f"-{host}" if host else ""))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "layer_01-model_00-model_states.pt"), "wb") as f:
        f.write(b"\0" * size)
    return path


def raw_control_bytes(data):
    """Bytes of `data` (stderr) that would act on a terminal: control bytes other than newline, and DEL."""
    return sorted({b for b in data if (b < 0x20 and b != 0x0a) or b == 0x7f})


def copy_tree(src, dst):
    shutil.copytree(src, dst, symlinks=True)
    return dst
