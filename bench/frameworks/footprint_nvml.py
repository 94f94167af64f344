"""Device memory in use on one GPU, read the way a process outside the workload sees
it: NVML through ctypes (libnvidia-ml.so.1, so no pynvml is needed), or nvidia-smi
where NVML cannot be loaded. Standard library only.

Used by footprint_run.py (samples every 20 ms for a workload's whole lifetime, with
how busy the GPU was: the share of time a kernel ran, as nvidia-smi's GPU-Util) and
footprint_giveback.py (single readings). Not a program of its own.
"""
import ctypes
import statistics
import subprocess
import threading
import time

MIB = 2**20


class _Utilization(ctypes.Structure):
    # nvmlUtilization_t: percent of the last sample period (1/6 s to 1 s, by product) in
    # which a kernel ran, and in which device memory was read or written.
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    # nvmlMemory_t (v1). Its "used" is total - free and so includes the driver's own
    # reservation, which nvidia-smi leaves out; every footprint here is a difference
    # from an idle reading taken by the same reader, where that cancels.
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _smi_query(index: int, fields: str) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(index)]


def describe_gpu(index: int) -> str:
    """Name, driver and total memory of the GPU, as nvidia-smi gives them ("" if it cannot)."""
    try:
        done = subprocess.run(_smi_query(index, "name,driver_version,memory.total"), capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


class Reader:
    """Used memory of GPU `index` (NVML's index, the order nvidia-smi shows) in MiB."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._lib = None
        self._handle = ctypes.c_void_p()
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            lib = None
        if (lib is not None and lib.nvmlInit_v2() == 0
                and lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(self._handle)) == 0):
            self._lib = lib
        self.backend = "nvml" if self._lib is not None else "nvidia-smi"

    def read(self) -> float:
        if self._lib is not None:
            mem = _Memory()
            rc = self._lib.nvmlDeviceGetMemoryInfo(self._handle, ctypes.byref(mem))
            if rc != 0:
                raise RuntimeError(f"nvmlDeviceGetMemoryInfo failed (NVML error {rc})")
            return mem.used / MIB
        done = subprocess.run(_smi_query(self.index, "memory.used"), capture_output=True, text=True, check=True)
        return float(done.stdout.split()[0])

    def busy(self) -> int | None:
        """Percent of NVML's last sample period in which a kernel ran (None without NVML)."""
        if self._lib is None:
            return None
        util = _Utilization()
        if self._lib.nvmlDeviceGetUtilizationRates(self._handle, ctypes.byref(util)) != 0:
            return None
        return util.gpu

    def idle(self, samples: int = 5, interval_s: float = 0.05) -> float:
        """The median of a few readings: one reading may catch another process's blip."""
        values = []
        for _ in range(samples):
            values.append(self.read())
            time.sleep(interval_s)
        return statistics.median(values)


class Sampler:
    """Reads used memory every `period_s` on a background thread while in a `with`
    block; afterwards `peak` is the largest reading (MiB) and `count` their number.
    With NVML the thread polls, and also keeps (time.time(), percent busy) in `busy`;
    without, one `nvidia-smi -lms` process streams memory readings."""

    def __init__(self, reader: Reader, period_s: float = 0.02) -> None:
        self.reader = reader
        self.period_s = period_s
        self.peak = float("-inf")
        self.count = 0
        self.busy: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._smi = None
        self._thread = None

    def _note(self, value: float) -> None:
        self.peak = max(self.peak, value)
        self.count += 1

    def _poll(self) -> None:
        while True:
            self._note(self.reader.read())
            if (pct := self.reader.busy()) is not None:
                self.busy.append((time.time(), pct))
            if self._stop.wait(self.period_s):
                return

    def _stream(self) -> None:
        for line in self._smi.stdout:
            try:
                self._note(float(line))
            except ValueError:
                continue  # a notice, not a reading

    def __enter__(self) -> "Sampler":
        self._note(self.reader.read())  # at least one reading, however short the run
        if self.reader.backend == "nvml":
            self._thread = threading.Thread(target=self._poll, daemon=True)
        else:
            command = _smi_query(self.reader.index, "memory.used") + ["-lms", str(max(1, round(self.period_s * 1e3)))]
            self._smi = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._stream, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._smi is not None:
            self._smi.terminate()
            self._smi.wait()
        self._thread.join()
