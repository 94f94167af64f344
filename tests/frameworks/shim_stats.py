"""Read libgpumem_shim.so's counters from inside a Python process (ctypes).

The shim is already loaded (LD_PRELOAD); looking its query function up in the
global namespace finds it without loading a second copy. Absent shim: None.
"""
import ctypes

_FIELDS = ["chain_allocations", "runtime_allocations", "chain_frees", "passthrough_allocations",
           "passthrough_frees", "double_frees", "failed_allocations", "live_allocations", "live_bytes",
           "reserved_bytes", "pending_free_bytes", "reclaim_barriers", "captured_passthroughs",
           "active_captures", "ipc_refused", "device_syncs", "ipc_parked_bytes"]


class Stats(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("chains", ctypes.c_int)] + [(f, ctypes.c_ulonglong) for f in _FIELDS]


def read():
    try:
        fn = ctypes.CDLL(None).gpumem_shim_get_stats
    except AttributeError:
        return None
    s = Stats()
    if fn(ctypes.byref(s)) != 0:
        return None
    return {name: getattr(s, name) for name, _ in Stats._fields_}


def require_served(label, before, after, at_least):
    """Fail unless the chain served at least `at_least` allocations between the two reads."""
    if before is None or after is None:
        raise SystemExit(f"{label}: libgpumem_shim.so is not loaded (run under gpumem-run or LD_PRELOAD)")
    if after["mode"] != 1:
        raise SystemExit(f"{label}: shim mode {after['mode']}, expected 1 (active)")
    served = after["chain_allocations"] - before["chain_allocations"]
    freed = after["chain_frees"] - before["chain_frees"]
    print(f"{label}: chain served {served} allocations, freed {freed}; "
          f"pass-through {after['passthrough_allocations'] - before['passthrough_allocations']}; "
          f"reserved {after['reserved_bytes'] / 2**20:.1f} MiB; double frees {after['double_frees']}")
    if served < at_least:
        raise SystemExit(f"{label}: only {served} allocations served by the chain, expected >= {at_least}")
    if after["double_frees"]:
        raise SystemExit(f"{label}: {after['double_frees']} double frees")
