"""What the integration tests share: collecting failures (check / finish), skipping (exit 77, which ctest
reports as skipped), finding a built binary, and huggingface_hub set up to talk to a local Hub only (LFS
protocol rather than Xet, no telemetry, no progress bars, a throw-away HF_HOME: never the user's token
or cache)."""
import atexit
import os
import shutil
import sys
import tempfile

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


def binary(name):
    path = os.path.abspath(os.path.join(os.environ.get("MDS_BIN", "build/bin"), name))
    if not os.path.exists(path):
        skip(f"{path} not built")
    return path


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
