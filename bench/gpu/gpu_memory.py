"""Peak device memory of a child process, read from nvidia-smi while it runs: memory.used of the GPU sampled every
quarter second, minus what was in use before the child started. One process on the GPU at a time (bench/gpu runs
the implementations one after another), so the difference is that process's: its CUDA context, its allocator's
reserved pool and its libraries' workspaces (more than torch.cuda.max_memory_allocated counts)."""
import shutil
import subprocess
import threading


def used_mib(index=0):
    try:
        r = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.split() else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


class Sampler:
    """with Sampler() as s: ...run...; s.peak_bytes is None when nvidia-smi gave no reading."""

    def __init__(self, interval=0.25):
        self.interval = interval
        self.available = shutil.which("nvidia-smi") is not None
        self.baseline = None
        self.peak = None
        self._stop = threading.Event()
        self._thread = None

    def _run(self):
        while not self._stop.wait(self.interval):
            v = used_mib()
            if v is not None and (self.peak is None or v > self.peak):
                self.peak = v

    def __enter__(self):
        if self.available:
            self.baseline = used_mib()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()

    @property
    def peak_bytes(self):
        if self.peak is None or self.baseline is None:
            return None
        return max(0, self.peak - self.baseline) * 2**20
