"""What the integration tests share: collecting failures (check / finish), skipping (exit 77, which ctest
reports as skipped), finding a built binary, running a tool with its peak RSS measured (run_measured), a free
loopback port for a rendezvous or a server (free_port), and huggingface_hub set up to talk to a local Hub only (LFS
protocol rather than Xet, no telemetry, no progress bars, a throw-away HF_HOME: never the user's token
or cache), and a checkpoint folder pointed back at an earlier save (checkpoint_back_to)."""
import atexit
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def finish():
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("ok")


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def checkpoint_back_to(ckpt, iteration):
    """Points a checkpoint folder's `latest` (and Megatron's tracker file) back at its global_step<iteration>, as
    if the run that saved it had stopped there: a run that saves at `iteration` and trains on is then both the
    uninterrupted curve and the checkpoint to resume from. Raises FileNotFoundError without that folder, so the
    test fails whichever failure list it keeps."""
    if not os.path.isdir(f"{ckpt}/global_step{iteration}"):
        raise FileNotFoundError(f"{ckpt}: no global_step{iteration} saved")
    for name, text in (("latest", f"global_step{iteration}"), ("latest_checkpointed_iteration.txt", str(iteration))):
        with open(os.path.join(ckpt, name), "w") as f:
            f.write(text)


def run_measured(argv, limit_s, env=None, cwd=None, user=None):
    """Runs a tool and returns (exit status, stdout, stderr, seconds, peak RSS in KiB from wait4); it is killed
    after limit_s seconds. user: a uid to run it as (through setpriv), for unwritable-folder checks as root."""
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    t0 = time.time()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    out, err = [], []
    readers = [threading.Thread(target=lambda s=s, b=b: b.append(s.read()), daemon=True)
               for s, b in ((p.stdout, out), (p.stderr, err))]
    for r in readers:
        r.start()
    killer = threading.Timer(limit_s, p.kill)
    killer.start()
    _, status, usage = os.wait4(p.pid, 0)
    killer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join()
    return (p.returncode, b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace"),
            time.time() - t0, usage.ru_maxrss)


def binary(name):
    path = os.path.abspath(os.path.join(os.environ.get("MDS_BIN", "build/bin"), name))
    if not os.path.exists(path):
        skip(f"{path} not built")
    return path


def free_port():
    """A loopback port free now, below the kernel's ephemeral range. Outgoing connections take their local ports
    from that range (32768-60999 by default), so a port the kernel hands out for bind(0) may be taken by some other
    test's connection before the process it was meant for binds it; under ctest -j that happened."""
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
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # the range below is full: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def huggingface_hub_for_local_hub():
    """Imports huggingface_hub configured for a local Hub (or skips when it is missing)."""
    os.environ["HF_HUB_DISABLE_XET"] = "1"  # read at import
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ.pop("HF_TOKEN", None)
    home = tempfile.mkdtemp(prefix="hub-home-")
    atexit.register(shutil.rmtree, home, True)
    os.environ["HF_HOME"] = home
    try:
        import huggingface_hub
    except ImportError as err:
        skip(f"huggingface_hub not importable: {err}")
    return huggingface_hub
