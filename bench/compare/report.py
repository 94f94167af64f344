#!/usr/bin/env python3
"""Tables, raw data and a plot from the samples of the side-by-side comparison.

Reads the JSON lines written by gpumem_compare, gpumem_compare_shim and
scripts/bench-compare (one object per line: "meta", "sample" or "note"), and the
text lines of the PyTorch workloads (bench/frameworks/pytorch_mlp.py and
pytorch_varlen.py: "mlp label=... batch=... ms_per_step=..."), and writes into OUTDIR:

  comparison.md       one markdown table per measurement, medians over the rounds,
                      with the device, driver, date and commit of the run
  samples.csv         every sample, one per line
  samples.json        every record, and the medians
  latency-ratio.svg   pair latency of each contender over gpumem's pool, per size

Usage: report.py OUTDIR SAMPLES.jsonl... [--workloads FILE]...
Standard library only (runs with the GPU machine's Python as it is).
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

BASELINE = "gpumem pool"

# Row order of every table: gpumem first, then the alternatives, then the references.
FAMILY_ORDER = ["control", "gpumem", "rmm", "torch", "cuda", "shim", "other"]


# ---------------------------------------------------------------------------- reading

def read_records(paths):
    """All JSON records of the files, in order; lines that are not JSON are skipped."""
    records = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    print(f"report: {path}:{number}: not JSON, skipped", file=sys.stderr)
                    continue
                if isinstance(rec, dict) and "type" in rec:
                    rec["_source"] = os.path.basename(path)
                    records.append(rec)
    return records


WORKLOAD_LINE = re.compile(r"^(mlp|varlen)\s+(.*)$")


def read_workloads(paths):
    """Samples from the workloads' "mlp label=X batch=B ms_per_step=..." lines; each
    repetition of a (workload, label, batch) is one round."""
    samples = []
    seen = defaultdict(int)
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = WORKLOAD_LINE.match(line.strip())
                if not m:
                    continue
                fields = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
                if "label" not in fields or "batch" not in fields:
                    continue
                key = (m.group(1), fields["label"], fields["batch"])
                rep = seen[key]
                seen[key] += 1
                for metric in ("ms_per_step", "mean_ms_per_step", "max_reserved_mib", "max_allocated_mib", "final_loss"):
                    value = fields.get(metric)
                    try:
                        value = float(value)
                    except (TypeError, ValueError):
                        continue
                    samples.append({
                        "type": "sample", "measurement": "workload", "contender": fields["label"],
                        "params": {"workload": m.group(1), "batch": int(fields["batch"])},
                        "metric": metric, "value": value, "rep": rep, "_source": os.path.basename(path),
                    })
    return samples


def params_key(params):
    return tuple(sorted((k, json.dumps(v)) for k, v in (params or {}).items()))


class Summary:
    """Medians of the samples, by (measurement, contender, params, metric)."""

    def __init__(self, samples):
        groups = defaultdict(list)
        for s in samples:
            if s.get("value") is None:
                continue
            groups[(s["measurement"], s["contender"], params_key(s.get("params")), s["metric"])].append(s["value"])
        self.stats = {}
        for key, values in groups.items():
            self.stats[key] = {
                "median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            }

    def get(self, measurement, contender, params, metric):
        return self.stats.get((measurement, contender, params_key(params), metric))

    def median(self, measurement, contender, params, metric):
        s = self.get(measurement, contender, params, metric)
        return None if s is None else s["median"]

    def rounds(self, measurement, contender, params, metric):
        s = self.get(measurement, contender, params, metric)
        return 0 if s is None else s["n"]


# ---------------------------------------------------------------------------- formatting

def fmt_time_ns(ns):
    if ns is None:
        return "—"
    if ns < 1e3:
        return f"{ns:.0f} ns" if ns >= 10 else f"{ns:.1f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs" if ns < 1e4 else f"{ns / 1e3:.1f} µs"
    return f"{ns / 1e6:.2f} ms"


def fmt_us(us):
    return "—" if us is None else fmt_time_ns(us * 1e3)


def fmt_bytes(b):
    if b is None:
        return "—"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            v = b / scale
            return f"{v:.2f} {unit}" if v < 10 else f"{v:.1f} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{b:.0f} B"


def fmt_size(b):
    b = int(b)
    if b == 0:
        return "control"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def fmt_rate(r):
    if r is None:
        return "—"
    if r >= 1e6:
        return f"{r / 1e6:.1f} M/s" if r < 1e8 else f"{r / 1e6:.0f} M/s"
    if r >= 1e3:
        return f"{r / 1e3:.0f} k/s"
    return f"{r:.0f} /s"


def fmt_ratio(x, digits=2):
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:.0f}×"
    if x >= 10:
        return f"{x:.1f}×"
    return f"{x:.{digits}f}×"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------------------- contenders

LOG_SUFFIXES = (" log queued", " log")


def log_suffix(name):
    """" log" for a shim row measured with the allocation log on ("shim safe log: cudaMalloc"),
    " log queued" with its rows queued for a helper thread (GPUMEM_LOG_QUEUE=1), else None."""
    label = name.split(":")[0]
    return next((s for s in LOG_SUFFIXES if label.endswith(s)), None)


def is_log_row(name):
    return log_suffix(name) is not None


def family_of(name, contender_meta):
    info = contender_meta.get(name)
    if info and info.get("family") in FAMILY_ORDER:
        return info["family"]
    if name.startswith(("plain", "shim")) or ":" in name:
        return "shim"
    if name.startswith("("):
        return "control"
    return "other"


def ordered_contenders(names, contender_meta):
    """gpumem first, then RMM, PyTorch, the driver, the shim program; within a family,
    the order the program listed them (round 0), else by name."""
    def key(name):
        fam = family_of(name, contender_meta)
        order = contender_meta.get(name, {}).get("order", 1000)
        return (FAMILY_ORDER.index(fam), order if fam != "shim" else 0, name)
    return sorted(set(names), key=key)


# ---------------------------------------------------------------------------- tables

def contenders_in(samples, measurement, meta):
    return ordered_contenders([s["contender"] for s in samples if s["measurement"] == measurement], meta)


def values_of(samples, measurement, field):
    vals = {s["params"][field] for s in samples if s["measurement"] == measurement and field in s.get("params", {})}
    return sorted(vals, key=lambda v: (isinstance(v, str), v))


def rounds_note(summary, samples, measurement):
    ns = [st["n"] for (m, *_), st in summary.stats.items() if m == measurement]
    if not ns:
        return ""
    lo, hi = min(ns), max(ns)
    return f"median of {lo} rounds" if lo == hi else f"median of {lo}–{hi} rounds"


def section(measurement, keep=lambda name: True):
    """A table section of one measurement: the builder gets the contenders with samples
    of it (those keep() accepts) and returns the section's lines; it is not called
    when there are none."""
    def wrap(build):
        def run(summary, samples, meta, *more):
            names = [n for n in contenders_in(samples, measurement, meta) if keep(n)]
            return "\n".join(build(summary, samples, meta, measurement, names, *more)) if names else None
        return run
    return wrap


def contender_rows(names, configs, cells):
    """One table row per contender: its name, then cells(name, p) for each parameter set p."""
    return [[name] + [c for p in configs for c in cells(name, p)] for name in names]


def configs_of(samples, measurement, has=None):
    """The distinct parameter sets of a measurement's samples (those with key `has`)."""
    configs = OrderedDict()
    for s in samples:
        if s["measurement"] == measurement and (has is None or has in s["params"]):
            configs[params_key(s["params"])] = s["params"]
    return list(configs.values())


@section("latency", keep=lambda name: not is_log_row(name))
def latency_section(summary, samples, meta, m, names):
    one_stream = [s for s in samples if s["measurement"] == m and "streams" not in s["params"]]
    sizes = values_of(one_stream, m, "size")
    rows, ratio_rows = [], []
    for name in names:
        row, rrow = [name], [name]
        for size in sizes:
            v = summary.median(m, name, {"size": size}, "ns_per_pair")
            base = summary.median(m, BASELINE, {"size": size}, "ns_per_pair")
            row.append(fmt_time_ns(v))
            rrow.append(fmt_ratio(v / base) if v is not None and base else "—")
        rows.append(row)
        ratio_rows.append(rrow)
    header = ["contender"] + [fmt_size(s) for s in sizes]
    text = [
        "## 1. Pair latency",
        "",
        "Host time of one `allocate` + `free` pair on a warm allocator, one thread, one non-blocking "
        f"stream ({rounds_note(summary, samples, m)}). Rows `plain:`/`shim …:` are the same pairs made by a plain CUDA "
        "program through `cudaMalloc`+`cudaFree` or `cudaMallocAsync`+`cudaFreeAsync`, without gpumem and "
        "under `LD_PRELOAD=libgpumem_shim.so`.",
        "",
        table(header, rows),
        "",
        f"Relative to {BASELINE} (below 1× is faster than gpumem's pool); plotted in `latency-ratio.svg`:",
        "",
        table(header, ratio_rows),
    ]
    fast = [s for s in one_stream if s["metric"] == "fastest_window_ns_per_pair"]
    if fast:
        fast_rows = []
        for name in ordered_contenders([s["contender"] for s in fast if not is_log_row(s["contender"])], meta):
            row = [name]
            for size in sizes:
                v = summary.median(m, name, {"size": size}, "fastest_window_ns_per_pair")
                row.append(fmt_time_ns(v) if v is not None else "—")
            fast_rows.append(row)
        text += ["", "The fastest fifth of each timed loop (medians over the rounds): where the host's speed "
                 "changed while a loop ran, this shows its faster state; a host slow for a whole round shows "
                 "nothing faster:", "", table(header, fast_rows)]
    two = [s for s in samples if s["measurement"] == m and s["params"].get("streams") == 2]
    if two:
        two_sizes = values_of(two, m, "size")
        two_rows = []
        for name in ordered_contenders([s["contender"] for s in two if not is_log_row(s["contender"])], meta):
            row = [name]
            for size in two_sizes:
                v = summary.median(m, name, {"size": size, "streams": 2}, "ns_per_pair")
                one = summary.median(m, name, {"size": size}, "ns_per_pair")
                row.append("—" if v is None else fmt_time_ns(v) + (f" ({fmt_ratio(v / one)} one stream)" if one else ""))
            two_rows.append(row)
        text += ["", "One thread alternating its pairs between two streams (a compute and a copy stream, say); "
                 "in parentheses, against the same pairs on one stream:", "",
                 table(["contender"] + [fmt_size(s) for s in two_sizes], two_rows)]
    return text


@section("scaling")
def scaling_section(summary, samples, meta, m, names):
    sizes = values_of(samples, m, "size")
    threads = values_of(samples, m, "threads")
    rows = []
    for size in sizes:
        for name in names:
            one = summary.median(m, name, {"size": size, "threads": 1}, "pairs_per_s")
            cells = []
            for t in threads:
                v = summary.median(m, name, {"size": size, "threads": t}, "pairs_per_s")
                if v is None:
                    cells.append("—")
                elif t == 1 or not one:
                    cells.append(fmt_rate(v))
                else:
                    cells.append(f"{fmt_rate(v)} ({fmt_ratio(v / one, 1)})")
            if any(c != "—" for c in cells):
                rows.append([fmt_size(size), name] + cells)
    header = ["size", "contender"] + [f"{t} thread{'s' if t > 1 else ''}" for t in threads]
    most = max(threads)
    diag = []
    for size in sizes:
        for name in names:
            p = {"size": size, "threads": most}
            user = summary.median(m, name, p, "pairs_per_s")
            gb = summary.median(m, name, p, "mean_thread_pairs_per_s")
            spread = summary.median(m, name, p, "slowest_over_fastest")
            cold = summary.median(m, name, p, "cold_pairs_per_s")
            if user is None:
                continue
            diag.append([fmt_size(size), name, fmt_rate(user), fmt_rate(gb),
                         fmt_ratio(gb / user) if gb and user else "—",
                         fmt_ratio(spread) if spread else "—", fmt_rate(cold)])
    return [
        "## 2. Scaling over threads",
        "",
        "Each thread on its own non-blocking stream, one shared allocator, `allocate` + `free` pairs of one "
        "size; every thread does the same number of pairs, and the rate is all pairs over the time from the "
        "first thread's start to the last thread's end (what a program with that much work per thread sees); "
        f"in parentheses, the ratio to one thread ({rounds_note(summary, samples, m)}). The *control* rows are the "
        "same harness with no allocator, touching no shared memory: one dependent chain of ~60 ns of arithmetic a "
        "\"pair\" (latency-bound: the most any allocator can reach on these cores, all-core clocks and vCPUs "
        "included), and eight independent chains (work that fills a core: where vCPUs share cores in pairs, it "
        "reaches about half as far). An allocator's pair lies between the two.",
        "",
        table(header, rows),
        "",
        f"### Why two harnesses disagree ({most} threads)",
        "",
        "The same runs, counted three more ways: *mean-thread rate* is what Google Benchmark reports for "
        "`Threads(n)` with `UseRealTime()` (all pairs over the MEAN of each thread's own loop time: threads "
        "that ran one after another look as fast as threads that ran together); *slowest/fastest* is the "
        "spread of the threads' loop times; *cold* is the first 64 pairs per thread on a fresh allocator, "
        "streams new to it.",
        "",
        table(["size", "contender", "pairs/s (makespan)", "mean-thread rate", "mean-thread / makespan",
               "slowest / fastest thread", "cold start"], diag),
    ]


@section("random")
def random_section(summary, samples, meta, m, names):
    configs = sorted(configs_of(samples, m), key=lambda p: (p.get("max_size", 0), p.get("allocations", 0)))
    header = ["contender"]
    for p in configs:
        label = f"{p.get('allocations')} allocations ≤ {fmt_size(p.get('max_size', 0))}, {p.get('streams')} streams"
        header += [f"{label}: µs/call", "peak reserved / live", "failed"]

    def cells(name, p):
        t = summary.median(m, name, p, "us_per_call")
        reserved = summary.median(m, name, p, "peak_reserved")
        live = summary.median(m, name, p, "peak_live")
        failed = summary.median(m, name, p, "failed")
        return [fmt_us(t), fmt_ratio(reserved / live) if reserved and live else "—",
                "—" if failed is None else f"{failed:.0f}"]
    rows = contender_rows(names, configs, cells)
    return [
        "## 3a. Random allocations (RMM's shape, several streams)",
        "",
        "A fixed-seed sequence: allocate with probability 73% (size uniform in 1 B..max, on one of the "
        "streams at random) until N allocations were made, else free a random live allocation on its "
        "stream; the same sequence for every contender, timed as a whole (host time per call). RMM's own "
        f"benchmark runs this on one stream ({rounds_note(summary, samples, m)}).",
        "",
        table(header, rows),
    ]


@section("multistream", keep=lambda name: not name.startswith("("))
def multistream_section(summary, samples, meta, m, names):
    configs = sorted(configs_of(samples, m, has="streams"), key=lambda p: (p["streams"], p["prewarm"]))
    kernel = None
    for (mm, c, _, metric), st in summary.stats.items():
        if mm == m and metric == "kernel_us":
            kernel = st["median"]
    header = ["contender"] + [f"{p['streams']} stream{'s' if p['streams'] > 1 else ''}"
                              f"{', prewarmed' if p['prewarm'] else ''}" for p in configs]

    def cells(name, p):
        steady = summary.median(m, name, p, "us_per_iteration")
        over = summary.median(m, name, p, "over_ideal")
        first = summary.median(m, name, p, "first_iteration_us")
        return ["—" if steady is None else f"{fmt_us(steady)} ({fmt_ratio(over, 1)}); first {fmt_us(first)}"]
    rows = contender_rows(names, configs, cells)
    kernels = configs[0].get("kernels", 16) if configs else 16
    return [
        "## 3b. Multi-stream allocations (RMM's shape)",
        "",
        f"{kernels} kernels round-robin over S streams; before each launch an 8-byte buffer is allocated on "
        "the kernel's stream, the kernel writes it, and it is freed on that stream right after the launch; "
        "then the device is synchronized. Per iteration (after the first), with the ratio to the ideal "
        "ceil(K/S) kernel durations, and the first iteration (where memory moves between streams)"
        + (f"; one kernel alone takes {fmt_us(kernel)}" if kernel else "")
        + f" ({rounds_note(summary, samples, m)}).",
        "",
        table(header, rows),
    ]


@section("replay")
def replay_section(summary, samples, meta, m, names, log_meta):
    logs = values_of(samples, m, "log")
    rows = []
    for log in logs:
        events = None
        for s in samples:
            if s["measurement"] == m and s["params"].get("log") == log:
                events = s["params"].get("events")
                break
        for name in names:
            p = {"log": log, "events": events}
            live = summary.median(m, name, p, "peak_live")
            if live is None:
                continue
            reserved = summary.median(m, name, p, "peak_reserved")
            used = summary.median(m, name, p, "peak_device_used")
            shown = reserved if reserved is not None else used
            failed = summary.median(m, name, p, "failed")
            per_call = summary.median(m, name, p, "ns_per_call")
            syncs = summary.median(m, name, p, "device_syncs")
            rows.append([log, name, fmt_bytes(shown) + ("" if reserved is not None else " ¹"), fmt_bytes(live),
                         fmt_ratio(shown / live) if shown and live else "—", fmt_bytes(used),
                         "—" if failed is None else f"{failed:.0f}", fmt_time_ns(per_call),
                         "—" if syncs is None else f"{syncs:.0f}"])
    logs_text = []
    for log in logs:
        info = log_meta.get(log, {})
        if info:
            logs_text.append(f"- `{log}`: {info.get('origin') or info.get('source', '?')} ({info.get('dialect', '?')} log, "
                             f"{info.get('ops', '?')} operations, {info.get('threads', '?')} threads, "
                             f"{info.get('streams', '?')} streams, peak live {fmt_bytes(info.get('peak_live'))})")
    text = [
        "## 4. Memory efficiency: real allocation logs replayed",
        "",
        "Each log replayed on the device through every contender, in log order (each thread's calls in "
        "order, threads merged by time), its streams mapped to real streams. *Peak reserved* is what the "
        "allocator holds from the device at its peak, as it reports it; *device used* is cudaMemGetInfo's "
        "used memory above the level before the allocator was made (a cross-check; under the shim it "
        "shows pooled memory as free, so the shim's own count is used). The `plain`/`shim` rows replay "
        "through the log's own entry points (cudaMalloc/cudaFree ...), each log in a process of its own, so "
        "the shim's pool starts empty as every contender does "
        f"({rounds_note(summary, samples, m)}).",
        "",
        *logs_text,
        "",
        table(["log", "contender", "peak reserved", "peak live", "reserved / live", "device used",
               "failed", "host time per call", "device syncs"], rows),
        "",
        "¹ the allocator cannot tell; device used shown instead.",
    ]
    return text


def workload_section(summary, samples):
    m = "workload"
    ws = [s for s in samples if s["measurement"] == m]
    if not ws:
        return None
    columns = sorted({(s["params"]["workload"], s["params"]["batch"]) for s in ws})
    labels = list(OrderedDict((s["contender"], None) for s in ws))
    rows = []
    for label in labels:
        row = [label]
        for w, b in columns:
            p = {"workload": w, "batch": b}
            v = summary.median(m, label, p, "ms_per_step")
            reserved = summary.median(m, label, p, "max_reserved_mib")
            cell = "—" if v is None else f"{v:.3f}"
            if reserved:
                cell += f" (reserved {reserved:.0f} MiB)"
            row.append(cell)
        rows.append(row)
    text = [
        "## 5. PyTorch workloads",
        "",
        "ms per step (median over the steps after warm-up, then over the rounds); configurations "
        f"interleaved in each round ({rounds_note(summary, samples, m)}).",
        "",
        table(["configuration"] + [f"{w} batch {b}" for w, b in columns], rows),
    ]
    return "\n".join(text)


@section("latency", keep=is_log_row)
def log_section(summary, samples, meta, m, names):
    sizes = values_of([s for s in samples if s["measurement"] == m and s["contender"] in names], m, "size")
    rows = []
    for name in names:
        label, _, family = name.partition(":")
        suffix = log_suffix(name)
        base = label[: -len(suffix)] + ":" + family
        row = [base + (" (rows queued)" if suffix == " log queued" else "")]
        for size in sizes:
            with_log = summary.median(m, name, {"size": size}, "ns_per_pair")
            without = summary.median(m, base, {"size": size}, "ns_per_pair")
            if with_log is None or without is None:
                row.append("—")
            else:
                diff = with_log - without
                added = ("+" if diff >= 0 else "−") + fmt_time_ns(abs(diff))
                row.append(f"{fmt_time_ns(without)} → {fmt_time_ns(with_log)} ({added})")
        rows.append(row)
    return [
        "## 6. What the allocation log adds",
        "",
        "The same pairs as the `shim …:` rows of §1, without and with the CSV allocation log "
        "(`GPUMEM_LOG_FILE`: one row per allocation and per free, each in the page cache before the call "
        f"returns, so it survives SIGKILL); in parentheses, the difference ({rounds_note(summary, samples, m)}). "
        "The log's helper thread prepares the file's pages off the program's thread: where it must share "
        "the program's only CPU (a process pinned to one core) the log costs more. \"rows queued\": with "
        "`GPUMEM_LOG_QUEUE=1`, a helper thread formats the rows; these pairs come back to back, faster "
        "than one helper formats rows, so the saving here is smaller than in a program that does "
        "anything between allocations.",
        "",
        table(["pairs"] + [fmt_size(x) for x in sizes], rows),
    ]


# ---------------------------------------------------------------------------- plot

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]


def xml_escape(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def latency_svg(summary, samples, meta, title):
    """Log-scale lines of latency(contender) / latency(gpumem pool), one per contender."""
    m = "latency"
    samples = [s for s in samples if s["measurement"] == m and "streams" not in s["params"]]
    sizes = values_of(samples, m, "size")
    names = [n for n in contenders_in(samples, m, meta) if n != BASELINE and not is_log_row(n)]
    series = []
    for name in names:
        pts = []
        for i, size in enumerate(sizes):
            v = summary.median(m, name, {"size": size}, "ns_per_pair")
            base = summary.median(m, BASELINE, {"size": size}, "ns_per_pair")
            if v and base:
                pts.append((i, v / base))
        if pts:
            series.append((name, pts))
    width, height = 960, 560
    left, right, top, bottom = 70, 250, 50, 60
    pw, ph = width - left - right, height - top - bottom
    ratios = [r for _, pts in series for _, r in pts] or [1.0]
    lo = 10 ** math.floor(math.log10(min(min(ratios), 1.0)))
    hi = 10 ** math.ceil(math.log10(max(max(ratios), 1.0) * 1.0001))
    if hi <= lo:
        hi = lo * 10

    def x(i):
        return left + (pw * i / max(1, len(sizes) - 1) if len(sizes) > 1 else pw / 2)

    def y(r):
        return top + ph * (1 - (math.log10(r) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="24" font-size="15" font-weight="bold">{xml_escape(title)}</text>']
    decade = lo
    while decade <= hi * 1.0001:
        yy = y(decade)
        out.append(f'<line x1="{left}" y1="{yy:.1f}" x2="{left + pw}" y2="{yy:.1f}" stroke="#ddd"/>')
        label = f"{decade:g}×"
        out.append(f'<text x="{left - 8}" y="{yy + 4:.1f}" text-anchor="end">{xml_escape(label)}</text>')
        decade *= 10
    out.append(f'<line x1="{left}" y1="{y(1):.1f}" x2="{left + pw}" y2="{y(1):.1f}" stroke="#000" '
               f'stroke-dasharray="4 3"/>')
    out.append(f'<text x="{left + pw - 4}" y="{y(1) - 5:.1f}" text-anchor="end">{xml_escape(BASELINE)} = 1×</text>')
    for i, size in enumerate(sizes):
        out.append(f'<text x="{x(i):.1f}" y="{top + ph + 18}" text-anchor="middle">{xml_escape(fmt_size(size))}</text>')
    out.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#000"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#000"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 18}" text-anchor="middle">allocation size</text>')
    out.append(f'<text x="18" y="{top + ph / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 18 {top + ph / 2:.1f})">pair latency / {xml_escape(BASELINE)} (log scale)</text>')
    for k, (name, pts) in enumerate(series):
        color = PALETTE[k % len(PALETTE)]
        dash = ' stroke-dasharray="6 3"' if family_of(name, meta) == "shim" else ""
        path = " ".join(f"{x(i):.1f},{y(r):.1f}" for i, r in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}>'
                   f'<title>{xml_escape(name)}</title></polyline>')
        for i, r in pts:
            out.append(f'<circle cx="{x(i):.1f}" cy="{y(r):.1f}" r="3" fill="{color}">'
                       f'<title>{xml_escape(name)} at {xml_escape(fmt_size(sizes[i]))}: {r:.2f}×</title></circle>')
        ly = top + 10 + 18 * k
        out.append(f'<line x1="{left + pw + 16}" y1="{ly}" x2="{left + pw + 40}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + pw + 46}" y="{ly + 4}">{xml_escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- main

def environment_section(metas):
    run = next((m for m in metas if m.get("program") == "bench-compare"), {})
    prog = next((m for m in metas if m.get("program") == "gpumem_compare"), {})
    lines = ["## The run", ""]
    if run:
        for key, label in (("gpu", "Device (nvidia-smi)"), ("driver", "Driver"), ("cuda", "CUDA (nvcc)"),
                           ("date", "Date (UTC)"), ("commit", "gpumem commit"), ("host", "Host"),
                           ("mode", "Mode"), ("rounds", "Rounds"), ("torch", "PyTorch contender"),
                           ("rmm", "RMM contender"), ("machine_note", "Note")):
            if run.get(key) not in (None, ""):
                lines.append(f"- {label}: {run[key]}")
    if prog:
        drv = prog.get("driver_version", 0)
        lines.append(f"- Device (CUDA runtime): {prog.get('device', '?')}, {fmt_bytes(prog.get('device_memory'))}, "
                     f"driver API {drv // 1000}.{drv % 1000 // 10}"
                     + (" — **simulated device: timings mean nothing**" if prog.get("simulated") else ""))
    contenders = {}
    for m in metas:
        for k, v in m.items():
            if k.startswith("contender:") and isinstance(v, dict):
                contenders.setdefault(k[len("contender:"):], v)
    if contenders:
        lines += ["", "Contenders:", ""]
        for name in ordered_contenders(list(contenders), contenders):
            lines.append(f"- **{name}** ({contenders[name].get('family')}): {contenders[name].get('description')}")
    shim = [m for m in metas if m.get("program") == "gpumem_compare_shim" and m.get("shim_loaded")]
    seen = set()
    for m in shim:
        if m.get("label") in seen:
            continue
        seen.add(m.get("label"))
        lines.append(f"- **{m.get('label')}**: libgpumem_shim.so preloaded, sync mode {m.get('sync_mode')}, "
                     f"chain {m.get('shim_chain')}")
    errors = sorted({m.get("plugin_errors") for m in metas if m.get("plugin_errors")})
    for e in errors:
        lines.append(f"- Plugin not loaded: {e}")
    return "\n".join(lines), contenders


def main(argv=None):
    ap = argparse.ArgumentParser(description="Tables and a plot from gpumem comparison samples.")
    ap.add_argument("outdir")
    ap.add_argument("samples", nargs="+", help="JSON-lines files written by the comparison programs")
    ap.add_argument("--workloads", action="append", default=[], help="output of the PyTorch workloads")
    ap.add_argument("--title", default="gpumem side by side")
    a = ap.parse_args(argv)

    records = read_records(a.samples)
    samples = [r for r in records if r["type"] == "sample"] + read_workloads(a.workloads)
    notes = [r for r in records if r["type"] == "note"]
    metas = [r for r in records if r["type"] == "meta"]
    if not samples:
        print("report: no samples found in " + ", ".join(a.samples), file=sys.stderr)
        return 1
    os.makedirs(a.outdir, exist_ok=True)
    summary = Summary(samples)
    env_text, contender_meta = environment_section(metas)
    log_meta = {}
    for m in metas:
        for k, v in m.items():
            if k.startswith("log:") and isinstance(v, dict):
                log_meta.setdefault(k[len("log:"):], dict(v))
    for m in metas:  # where each log came from, as the run script tells it
        for k, v in m.items():
            if k.startswith("log_origin:"):
                log_meta.setdefault(k[len("log_origin:"):], {})["origin"] = v

    sections = [f"# {a.title}", "",
                "Written by `bench/compare/report.py` from the samples in `samples.csv` / `samples.json`. "
                "Every figure is a median over interleaved rounds of one run on one device.", "", env_text]
    for build in (lambda: latency_section(summary, samples, contender_meta),
                  lambda: scaling_section(summary, samples, contender_meta),
                  lambda: random_section(summary, samples, contender_meta),
                  lambda: multistream_section(summary, samples, contender_meta),
                  lambda: replay_section(summary, samples, contender_meta, log_meta),
                  lambda: workload_section(summary, samples),
                  lambda: log_section(summary, samples, contender_meta)):
        text = build()
        if text:
            sections += ["", text]
    distinct = OrderedDict()
    for n in notes:
        distinct.setdefault((n.get("measurement"), n.get("contender"), n.get("text")), 0)
        distinct[(n.get("measurement"), n.get("contender"), n.get("text"))] += 1
    if distinct:
        sections += ["", "## Notes from the run", ""]
        for (meas, who, text), count in distinct.items():
            who = f" {who}" if who else ""
            times = f" ({count} rounds)" if count > 1 else ""
            sections.append(f"- {meas}{who}: {text}{times}")
    with open(os.path.join(a.outdir, "comparison.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(sections) + "\n")

    with open(os.path.join(a.outdir, "samples.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["measurement", "contender", "params", "metric", "value", "rep", "source"])
        for s in samples:
            params = ";".join(f"{k}={v}" for k, v in sorted(s.get("params", {}).items()))
            w.writerow([s["measurement"], s["contender"], params, s["metric"], s["value"], s.get("rep", ""),
                        s.get("_source", "")])

    summary_rows = []
    for (meas, who, pkey, metric), st in sorted(summary.stats.items()):
        summary_rows.append({"measurement": meas, "contender": who,
                             "params": {k: json.loads(v) for k, v in pkey}, "metric": metric, **st})
    with open(os.path.join(a.outdir, "samples.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": metas, "notes": notes, "samples": samples, "medians": summary_rows}, f, indent=1)

    if any(s["measurement"] == "latency" for s in samples):
        run = next((m for m in metas if m.get("program") == "bench-compare"), {})
        title = "Pair latency relative to gpumem's pool"
        if run.get("gpu"):
            title += f" — {run['gpu']}, {run.get('date', '')}"
        with open(os.path.join(a.outdir, "latency-ratio.svg"), "w", encoding="utf-8") as f:
            f.write(latency_svg(summary, samples, contender_meta, title))
    print(f"report: {len(samples)} samples, {len(summary.stats)} medians -> {a.outdir}/comparison.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
