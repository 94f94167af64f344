"""gpumem from Python: where the installed shim is, and what it does in this process.

Run a program under gpumem with the ``gpumem-run`` command this package installs::

    gpumem-run --pool-size 8GiB -- python train.py

and, inside that program::

    import gpumem
    gpumem.active()   # True once the shim serves this process's allocations
    gpumem.stats()    # its counters as a dict (None when the shim is not loaded)
    gpumem.host_stats()  # pinned host memory's (cudaHostAlloc, cudaMallocHost)
    gpumem.managed_stats()  # managed memory's (cudaMallocManaged)
    gpumem.trim()     # give the memory its pools cache back to the device now

Nothing here loads the shim. Its query functions are looked up among the libraries
the process already has (the shim arrives through ``LD_PRELOAD``), so importing
gpumem never changes how a program allocates, and a program that uses it runs
unchanged without gpumem.
"""

import ctypes
import os

from ._stats_fields import FIELDS as _FIELDS
from ._stats_fields import HOST_FIELDS as _HOST_FIELDS

__all__ = ["active", "chain", "config_dir", "host_stats", "loaded", "managed_stats", "mode", "shim_path",
           "simdevice_dir", "stats", "trim"]

_PREFIX = os.path.dirname(os.path.abspath(__file__))
_C_TYPES = {"int": ctypes.c_int, "unsigned long long": ctypes.c_ulonglong}
# Values of gpumem_shim_stats.mode (enum gpumem_shim_mode in gpumem_shim.h).
_MODES = {0: "uninitialized", 1: "active", 2: "disabled", 3: "config error"}


class _Stats(ctypes.Structure):
    # struct gpumem_shim_stats, field for field (generated from gpumem_shim.h).
    _fields_ = [(name, _C_TYPES[ctype]) for name, ctype in _FIELDS]


class _HostStats(ctypes.Structure):
    # struct gpumem_shim_host_stats, field for field (generated from gpumem_shim.h).
    _fields_ = [(name, _C_TYPES[ctype]) for name, ctype in _HOST_FIELDS]


_query = None


def _functions():
    """The shim's query functions if this process has the shim, else None."""
    global _query
    if _query is None:
        try:
            # dlopen(NULL): the libraries already loaded, nothing new.
            process = ctypes.CDLL(None)
            get_stats = process.gpumem_shim_get_stats
            describe = process.gpumem_shim_describe_chain
        except AttributeError:
            _query = ()
        else:
            get_stats.argtypes = [ctypes.POINTER(_Stats)]
            get_stats.restype = ctypes.c_int
            describe.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_ulong]
            describe.restype = ctypes.c_int
            # Newer than the other two: a shim without it still answers them.
            trim = getattr(process, "gpumem_shim_trim", None)
            if trim is not None:
                trim.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_ulonglong)]
                trim.restype = ctypes.c_int
            host = getattr(process, "gpumem_shim_get_host_stats", None)
            managed = getattr(process, "gpumem_shim_get_managed_stats", None)
            for f in (host, managed):
                if f is not None:
                    f.argtypes = [ctypes.POINTER(_HostStats)]
                    f.restype = ctypes.c_int
            _query = (get_stats, describe, trim, host, managed)
    return _query or None


def loaded():
    """Whether libgpumem_shim.so is loaded in this process."""
    return _functions() is not None


def stats():
    """The shim's counters as a dict (gpumem_shim_stats in gpumem_shim.h, plus "mode"
    as a word), or None when the shim is not loaded."""
    query = _functions()
    if query is None:
        return None
    raw = _Stats()
    if query[0](ctypes.byref(raw)) != 0:
        raise RuntimeError("gpumem: gpumem_shim_get_stats failed")
    result = {name: getattr(raw, name) for name, _ in _FIELDS}
    result["mode"] = _MODES.get(raw.mode, "unknown ({})".format(raw.mode))
    return result


def host_stats():
    """Pinned host memory's counters as a dict (gpumem_shim_host_stats in gpumem_shim.h:
    allocations, frees, live, reserved and waiting bytes, fences), or None when the shim
    is not loaded or predates them. "built" is False until the first pinned call."""
    return _process_chain_stats(3, "gpumem_shim_get_host_stats")


def managed_stats():
    """Managed memory's counters (cudaMallocManaged), the same fields as host_stats(),
    or None when the shim is not loaded or predates them. "built" is False until the
    first managed allocation."""
    return _process_chain_stats(4, "gpumem_shim_get_managed_stats")


def _process_chain_stats(index, function):
    query = _functions()
    if query is None or query[index] is None:
        return None
    raw = _HostStats()
    if query[index](ctypes.byref(raw)) != 0:
        raise RuntimeError("gpumem: {} failed".format(function))
    result = {name: getattr(raw, name) for name, _ in _HOST_FIELDS}
    result["built"] = bool(raw.built)
    result["pooled"] = bool(raw.pooled)
    return result


def mode():
    """"not loaded", "uninitialized" (no CUDA call yet: the configuration is read at
    the first one), "active", "disabled" (GPUMEM_DISABLE=1) or "config error"."""
    current = stats()
    return "not loaded" if current is None else current["mode"]


def active():
    """Whether the shim is loaded and serves allocations through its resource chains.
    False until the process's first CUDA call, when the shim reads its configuration
    (mode() is "uninitialized" then)."""
    return mode() == "active"


def chain(device=0):
    """The resource chain of `device` as text ("pool(...) -> cuda"); "" while none is
    built; None when the shim is not loaded."""
    query = _functions()
    if query is None:
        return None
    buf = ctypes.create_string_buffer(4096)
    n = query[1](device, buf, len(buf))
    if n < 0:
        raise RuntimeError("gpumem: gpumem_shim_describe_chain failed")
    return buf.value.decode("utf-8", "replace")


def trim(device=None, keep=0):
    """Gives what gpumem's pools cache (device memory they hold that the program
    does not) back to the device now, until at most `keep` cached bytes stay in each:
    the pool of `device`, or of every device when None. Waits for the device's queued
    work first, like torch.cuda.synchronize(); allocating again afterwards maps
    memory anew. Returns the bytes given back, or None when the shim is not loaded
    (or is too old to trim). Raises RuntimeError while a CUDA graph is being
    captured (giving memory back would break the capture), or when it failed."""
    query = _functions()
    if query is None or query[2] is None:
        return None
    if keep < 0:
        raise ValueError("gpumem.trim: keep must be 0 or more bytes, not {}".format(keep))
    released = ctypes.c_ulonglong(0)
    if query[2](-1 if device is None else int(device), int(keep), ctypes.byref(released)) != 0:
        raise RuntimeError(
            "gpumem: gpumem_shim_trim failed (a stream capture is active, device {} is not one of 0..63, "
            "or the pool could not give memory back; {} bytes were given back)".format(device, released.value))
    return released.value


def _installed(*parts):
    path = os.path.join(_PREFIX, *parts)
    if not os.path.exists(path):
        raise FileNotFoundError("gpumem: {} is missing from this installation".format(path))
    return path


def shim_path():
    """The libgpumem_shim.so installed with this package (what gpumem-run preloads)."""
    return _installed("lib", "libgpumem_shim.so")


def simdevice_dir():
    """The directory of gpumem's simulated device (libcuda.so.1 and libcudart.so.13 that
    run on host memory, for gpumem-replay and for trying gpumem without a GPU)."""
    return _installed("lib", "gpumem", "simdevice")


def config_dir():
    """The example configurations (default.toml documents every key)."""
    return _installed("share", "gpumem", "config")
