"""Peak device memory and step time of PyTorch training under several allocators,
measured from outside the process.

Runs footprint_transformer.py and footprint_decoder.py under each configuration:
  caching     PyTorch's caching allocator (python3 footprint_X.py)
  expandable  the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  gpumem      PYTORCH_NO_CUDA_MEMORY_CACHING=1 gpumem-run --report-file F -- python3 ...
  NAME=ARGS   gpumem again with extra gpumem-run options, e.g. 'gpumem-stream=--sync-mode stream';
              leading VAR=VALUE words set the run's environment, e.g. another build's
              shim: 'other=GPUMEM_SHIM=/path/libgpumem_shim.so'
interleaved (for each round: for each workload: for each configuration), so a drift
of the machine touches every configuration alike. For every run: GPU memory in use
just before it starts (the median of a few NVML readings), then a reading every 20 ms
on a background thread for the process's lifetime; the footprint is the peak minus
that idle reading, so it includes the CUDA context, the kernels' modules and whatever
the allocator holds but does not use. Beside it: the workload's JSON line (ms/step,
PyTorch's peaks), wall time, exit code, and under gpumem the peaks of its exit report
(peak live and reserved bytes, as the report prints them: two decimals of their unit),
and how busy the GPU was while the training steps ran (NVML's GPU-Util, median).

--limit-factor F then runs each workload once more under gpumem with --limit set to F
times the largest peak live bytes gpumem reported for it: does it still complete, and
in how much memory? --giveback runs footprint_giveback.py under each gpumem
configuration (does freed memory go back to the device?).

Writes OUT/footprint.jsonl (one record per run, appended as each ends), OUT/footprint.md
(the summary, also printed), and each run's stdout, stderr and gpumem report under
OUT/runs/. Standard library only. From the repository root on the GPU machine:
  python3 bench/frameworks/footprint_run.py --out footprint-out --limit-factor 1.1 --giveback
  python3 bench/frameworks/footprint_run.py --dry-run        # the commands, nothing run
  python3 bench/frameworks/footprint_run.py --out footprint-out --append --rounds 1   # one more round
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from footprint_nvml import Reader, Sampler, describe_gpu

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKLOADS = {"transformer": HERE / "footprint_transformer.py", "decoder": HERE / "footprint_decoder.py"}
GIVEBACK = HERE / "footprint_giveback.py"
DEFAULT_GPUMEM_RUN = (REPO / ".carry/build-gpu/bin/gpumem-run", REPO / "build/bin/gpumem-run")
NO_CACHE = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
BUILTIN = {
    "caching": ({}, None),
    "expandable": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, None),
    "gpumem": (NO_CACHE, []),
}
# Settings the runner's own environment may carry that would change what a
# configuration means (GPUMEM_* too, except where gpumem-run finds the shim).
INHERITED_SETTINGS = ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")
MIB = 2**20
TAIL_LINES = 20


@dataclass
class Config:
    name: str
    env: dict[str, str]
    gpumem_args: list[str] | None  # None: not under gpumem


def parse_configs(text: str) -> list[Config]:
    configs = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, extra = item.partition("=")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"configuration name {name!r}: letters, digits, '_', '.' and '-' only (it names files)")
        if eq:
            words = shlex.split(extra)
            env = dict(NO_CACHE)
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                key, _, value = words.pop(0).partition("=")
                env[key] = value
            configs.append(Config(name, env, words))
        elif name in BUILTIN:
            env, gpumem_args = BUILTIN[name]
            configs.append(Config(name, env, gpumem_args))
        else:
            raise ValueError(f"unknown configuration {name!r} "
                             f"(one of {', '.join(BUILTIN)}, or NAME=gpumem-run options)")
    names = [c.name for c in configs]
    if not configs or len(set(names)) != len(names):
        raise ValueError("need at least one configuration, each name once")
    return configs


# The exit report's first device block (the runs see one GPU): "peak live 1.5 GiB  peak
# reserved 2 GiB  now live 0 B  reserved 2 GiB" and "reached the device resource: N
# allocations, M frees" (src/shim/observe/report.cpp).
_SIZE = r"([\d.]+ (?:B|KiB|MiB|GiB|TiB))"
_PEAKS = re.compile(rf"peak live {_SIZE}\s+peak reserved {_SIZE}\s+now live {_SIZE}\s+reserved {_SIZE}")
_DEVICE_CALLS = re.compile(r"reached the device resource: (\d+) allocations, (\d+) frees")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _bytes(size: str) -> int:
    number, unit = size.split()
    return round(float(number) * _UNITS[unit])


def parse_report(text: str) -> dict:
    report = {"text": text}
    if m := _PEAKS.search(text):
        report.update(peak_live_bytes=_bytes(m[1]), peak_reserved_bytes=_bytes(m[2]),
                      live_at_exit_bytes=_bytes(m[3]), reserved_at_exit_bytes=_bytes(m[4]))
    if m := _DEVICE_CALLS.search(text):
        report.update(device_allocations=int(m[1]), device_frees=int(m[2]))
    return report


def last_json_line(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def gpumem_pythonpath(gpumem_run: Path, out: Path, dry_run: bool) -> Path | None:
    """A directory where `import gpumem` gives the repository's module. python/gpumem
    alone does not import: its field list (_stats_fields.py) is generated by the build,
    into <build>/python/. None when the build has none (the workloads then read the
    shim's counters through tests/frameworks/shim_stats.py)."""
    fields = gpumem_run.parent.parent / "python" / "_stats_fields.py"
    if not fields.is_file():
        return None
    pylib = out / "pylib"
    if not dry_run:
        package = pylib / "gpumem"
        package.mkdir(parents=True, exist_ok=True)
        for source in [*(REPO / "python" / "gpumem").glob("*.py"), fields]:
            shutil.copy2(source, package)
    return pylib


class Runner:
    def __init__(self, a: argparse.Namespace, gpumem_run: Path) -> None:
        self.a = a
        self.gpumem_run = gpumem_run
        self.runs_dir = a.out / "runs"
        self.results = a.out / "footprint.jsonl"
        self.reader = None if a.dry_run else Reader(a.gpu)
        pythonpath = gpumem_pythonpath(gpumem_run, a.out, a.dry_run)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in INHERITED_SETTINGS and not (k.startswith("GPUMEM_") and k != "GPUMEM_SHIM")}
        # The child sees only the GPU NVML reads, as its device 0.
        self.env.update(PYTHONUNBUFFERED="1", CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(a.gpu))
        if pythonpath is not None:
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), os.environ.get("PYTHONPATH")]))
        if a.dry_run:
            print(f"# gpumem-run: {gpumem_run}{'' if gpumem_run.exists() else ' (missing)'}")
            print(f"# PYTHONPATH: {self.env.get('PYTHONPATH', '(unchanged)')}"
                  + ("" if pythonpath else "  (no generated gpumem field list: counters via tests/frameworks)"))
            print(f"# every run also: CUDA_VISIBLE_DEVICES={a.gpu} CUDA_DEVICE_ORDER=PCI_BUS_ID PYTHONUNBUFFERED=1, "
                  f"without {', '.join(INHERITED_SETTINGS)} and GPUMEM_* (but GPUMEM_SHIM) from this environment")

    def command(self, config: Config, script: Path, script_args: list[str], report: Path) -> list[str]:
        python = [sys.executable, str(script), *script_args]
        if config.gpumem_args is None:
            return python
        return [str(self.gpumem_run), *config.gpumem_args, "--report-file", str(report), "--", *python]

    def run(self, kind: str, round_no: int, workload: str, config: Config, script: Path,
            script_args: list[str], **fields) -> dict | None:
        """Runs one process and appends its record; the record, or None in a dry run."""
        stem = f"{self.runs_dir}/{kind}-r{round_no}-{workload}-{config.name}"
        report = Path(stem + ".report.txt")
        cmd = self.command(config, script, script_args, report)
        if self.a.dry_run:
            print(f"# {kind} {round_no} {workload} {config.name}")
            print(shlex.join([f"{k}={v}" for k, v in config.env.items()] + cmd))
            return None
        time.sleep(self.a.settle_s)  # the previous run's memory is released after its exit
        idle = self.reader.idle()
        stdout, stderr = Path(stem + ".stdout"), Path(stem + ".stderr")
        report.unlink(missing_ok=True)
        timed_out = False
        with open(stdout, "w") as out, open(stderr, "w") as err, Sampler(self.reader) as sampler:
            t0 = time.monotonic()
            proc = subprocess.Popen(cmd, env={**self.env, **config.env}, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL)
            try:
                rc = proc.wait(timeout=self.a.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.kill()
                rc = proc.wait()
            finally:
                if proc.poll() is None:  # the runner itself was interrupted
                    proc.kill()
                    proc.wait()
            wall = time.monotonic() - t0
        record = {
            "kind": kind, "round": round_no, "workload": workload, "config": config.name, **fields,
            "command": shlex.join(cmd), "env": config.env, "exit_code": rc, "timed_out": timed_out,
            "wall_s": wall, "nvml_backend": self.reader.backend, "samples": sampler.count,
            "idle_mib": idle, "peak_mib": sampler.peak, "peak_minus_idle_mib": sampler.peak - idle,
            "result": last_json_line(stdout.read_text()),
            "gpumem_report": parse_report(report.read_text()) if report.exists() else None,
        }
        record["busy_pct"] = training_busy(sampler.busy, record["result"])
        if rc != 0:
            record["stderr_tail"] = stderr.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        self.append(record)
        ms = (record["result"] or {}).get("ms_per_step_median")
        print(f"[{kind} {round_no}] {workload}/{config.name}: exit {rc}{' (timed out)' if timed_out else ''}, "
              f"{wall:.1f} s, peak-idle {record['peak_minus_idle_mib']:.0f} MiB"
              + (f", {ms:.2f} ms/step" if ms is not None else "")
              + (f", GPU busy {record['busy_pct']:.0f}%" if record["busy_pct"] is not None else ""), flush=True)
        return record

    def append(self, record: dict) -> None:
        with open(self.results, "a") as f:
            f.write(json.dumps(record) + "\n")


def training_busy(busy: list[tuple[float, int]], result: dict | None) -> float | None:
    """The median of NVML's GPU-busy readings taken while the training steps ran (the
    workload's train_window), None without NVML or a window: near 100 the steps were
    GPU-bound, lower the GPU waited for the host."""
    window = (result or {}).get("train_window")
    if not window or not busy:
        return None
    inside = [pct for t, pct in busy if window[0] <= t <= window[1]]
    return statistics.median(inside) if inside else None


def completed(r: dict) -> bool:
    return r["exit_code"] == 0 and r["result"] is not None


def spread(values: list[float], digits: int = 0) -> str:
    """The median, and the range where there is more than one value."""
    if not values:
        return "–"
    mid = f"{statistics.median(values):.{digits}f}"
    return mid if len(values) == 1 else f"{mid} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def giveback_cell(points: dict, name: str) -> str:
    p = points.get(name)
    if p is None:
        return "–"
    held = f" ({p['gpumem']['reserved_bytes'] / MIB:.0f})" if p["gpumem"] else ""
    return f"{p['nvml_used_mib']:.0f}{held}"


def summarize(records: list[dict]) -> str:
    meta = [r for r in records if r["kind"] == "meta"]
    rounds = [r for r in records if r["kind"] == "round"]
    lines = ["# Device memory footprint of PyTorch training (NVML, from outside the process)", ""]
    if meta:
        m = meta[-1]
        lines += [f"GPU: {m['gpu'] or '?'} (NVML index {m['gpu_index']}, read via {m['nvml_backend']}); "
                  f"gpumem-run: {m['gpumem_run']}; started {m['started']}", ""]
    n_rounds = len({r["round"] for r in rounds})
    lines += [f"{n_rounds} rounds, interleaved. Cells: median over the rounds that completed (min–max). "
              "Peak − idle: the GPU's peak used memory during the run minus its reading just before "
              "(context and modules included). torch max reserved/allocated: PyTorch's own peaks, shown "
              "with its caching allocator on only. gpumem peak live/reserved: its exit report. GPU busy: "
              "NVML's share of time a kernel ran, median of the readings during the training steps "
              "(near 100: GPU-bound).", "",
              "| workload | config | completed | peak − idle MiB | vs caching | ms/step | GPU busy % "
              "| torch max reserved MiB | torch max allocated MiB | gpumem peak live MiB "
              "| gpumem peak reserved MiB | generate s | wall s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = {}
    for r in rounds:
        groups.setdefault((r["workload"], r["config"]), []).append(r)
    for (workload, config), runs in groups.items():
        ok = [r for r in runs if completed(r)]
        peak = [r["peak_minus_idle_mib"] for r in ok]
        base = [r["peak_minus_idle_mib"] for r in groups.get((workload, "caching"), []) if completed(r)]
        ratio = f"{statistics.median(peak) / statistics.median(base):.2f}x" if peak and base else "–"
        caching_on = "PYTORCH_NO_CUDA_MEMORY_CACHING" not in runs[0]["env"]
        reports = [r["gpumem_report"] for r in ok if r["gpumem_report"] and "peak_live_bytes" in r["gpumem_report"]]
        cells = [
            workload, config, f"{len(ok)}/{len(runs)}", spread(peak), ratio,
            spread([r["result"]["ms_per_step_median"] for r in ok], 2),
            spread([r["busy_pct"] for r in ok if r.get("busy_pct") is not None]),
            spread([r["result"]["torch_max_reserved"] / MIB for r in ok]) if caching_on else "–",
            spread([r["result"]["torch_max_allocated"] / MIB for r in ok]) if caching_on else "–",
            spread([x["peak_live_bytes"] / MIB for x in reports]),
            spread([x["peak_reserved_bytes"] / MIB for x in reports]),
            spread([r["result"]["generate_s"] for r in ok if "generate_s" in r["result"]], 2),
            spread([r["wall_s"] for r in ok], 1),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    idle = [r["idle_mib"] for r in records if "idle_mib" in r]
    if idle:
        lines += ["", f"Idle readings before the runs: {spread(idle)} MiB."]

    limits = [r for r in records if r["kind"] == "limit"]
    if limits:
        lines += ["", "## Under a limit: gpumem --limit = factor × its peak live bytes", "",
                  "| workload | factor | limit MiB | completed | exit | peak − idle MiB | ms/step |",
                  "|---|---|---|---|---|---|---|"]
        for r in limits:
            ms = f"{r['result']['ms_per_step_median']:.2f}" if completed(r) else "–"
            lines.append(f"| {r['workload']} | {r['limit_factor']} | {r['limit_bytes'] / MIB:.0f} | "
                         f"{'yes' if completed(r) else 'no'} | {r['exit_code']} | "
                         f"{r['peak_minus_idle_mib']:.0f} | {ms} |")

    givebacks = [r for r in records if r["kind"] == "giveback"]
    if givebacks:
        lines += ["", "## Give-back: ~8 GiB of tensors allocated, all freed (GPU used memory, MiB; "
                  "gpumem reserved in brackets)", "",
                  "| config | before | peak | after free + sync | a window later, sync | after gpumem.trim() |",
                  "|---|---|---|---|---|---|"]
        for r in givebacks:
            points = (r["result"] or {}).get("points", {})
            trimmed = giveback_cell(points, "after_trim") if "after_trim" in points else "no trim()"
            lines.append(f"| {r['config']} | {giveback_cell(points, 'before')} | {giveback_cell(points, 'peak')} | "
                         f"{giveback_cell(points, 'after_free')} | {giveback_cell(points, 'after_window')} | "
                         f"{trimmed} |")
    failed = [r for r in records if r["kind"] != "meta" and not completed(r) and r["kind"] != "limit"]
    if failed:
        lines += ["", "Runs that did not complete: " + ", ".join(
            f"{r['kind']} {r['round']} {r['workload']}/{r['config']} (exit {r['exit_code']})" for r in failed)]
    return "\n".join(lines) + "\n"


def find_gpumem_run(given: Path | None) -> Path:
    if given is not None:
        return given.resolve()
    return next((p for p in DEFAULT_GPUMEM_RUN if p.exists()), DEFAULT_GPUMEM_RUN[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--gpumem-run", type=Path,
                    help="gpumem-run to use (default: .carry/build-gpu/bin/gpumem-run, else build/bin/gpumem-run)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default %(default)s; 0: none)")
    ap.add_argument("--workloads", default="transformer,decoder")
    ap.add_argument("--configs", default="caching,expandable,gpumem",
                    help="caching, expandable, gpumem, or NAME=gpumem-run options (shell words); comma-separated")
    ap.add_argument("--workload-args", action="append", default=[], metavar="WORKLOAD=ARGS",
                    help="extra arguments for a workload, e.g. 'decoder=--steps 10' (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("footprint-out"), help="results directory (default %(default)s)")
    ap.add_argument("--append", action="store_true",
                    help="add to OUT/footprint.jsonl (rounds numbered on) and summarize everything in it")
    ap.add_argument("--limit-factor", type=float,
                    help="then run each workload under gpumem --limit F x its peak live bytes (needs gpumem)")
    ap.add_argument("--giveback", action="store_true", help="then run footprint_giveback.py under each gpumem config")
    ap.add_argument("--gpu", type=int, default=0, help="the GPU, as NVML and nvidia-smi number it (default 0)")
    ap.add_argument("--settle-s", type=float, default=2.0, help="wait before each idle reading (default %(default)s)")
    ap.add_argument("--timeout-s", type=float, default=900, help="a run is killed after this (default %(default)s)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args()
    try:
        configs = parse_configs(a.configs)
    except ValueError as e:
        ap.error(str(e))
    workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    if not workloads or any(w not in WORKLOADS for w in workloads):
        ap.error(f"--workloads: from {', '.join(WORKLOADS)}")
    workload_args = {}
    for item in a.workload_args:
        name, eq, extra = item.partition("=")
        if not eq or name not in WORKLOADS:
            ap.error(f"--workload-args {item!r}: WORKLOAD=ARGS with WORKLOAD one of {', '.join(WORKLOADS)}")
        workload_args[name] = shlex.split(extra)
    base_gpumem = next((c for c in configs if c.name == "gpumem"), None)
    under_gpumem = [c for c in configs if c.gpumem_args is not None]
    if a.limit_factor is not None and (base_gpumem is None or a.limit_factor <= 0):
        ap.error("--limit-factor needs a factor > 0 and the gpumem configuration")
    if a.giveback and not under_gpumem:
        ap.error("--giveback needs a gpumem configuration")
    if a.rounds < 0:
        ap.error("--rounds: 0 or more")
    gpumem_run = find_gpumem_run(a.gpumem_run)
    if under_gpumem and not a.dry_run and not os.access(gpumem_run, os.X_OK):
        ap.error(f"{gpumem_run}: no gpumem-run there (build it, or pass --gpumem-run)")

    a.out = a.out.resolve()
    records = []
    if not a.dry_run:
        (a.out / "runs").mkdir(parents=True, exist_ok=True)
        results = a.out / "footprint.jsonl"
        if a.append and results.exists():
            records = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
        else:
            results.write_text("")
    runner = Runner(a, gpumem_run)
    if not a.dry_run:
        meta = {"kind": "meta", "gpu": describe_gpu(a.gpu), "gpu_index": a.gpu, "nvml_backend": runner.reader.backend,
                "gpumem_run": str(gpumem_run), "started": datetime.datetime.now().isoformat(timespec="seconds"),
                "argv": sys.argv}
        runner.append(meta)
        records.append(meta)

    first = 1 + max((r["round"] for r in records if r["kind"] == "round"), default=0)
    for round_no in range(first, first + a.rounds):
        for workload in workloads:
            for config in configs:
                record = runner.run("round", round_no, workload, config, WORKLOADS[workload],
                                    workload_args.get(workload, []))
                if record is not None:
                    records.append(record)

    if a.limit_factor is not None:
        for workload in workloads:
            peaks = [r["gpumem_report"]["peak_live_bytes"] for r in records
                     if r["kind"] == "round" and r["workload"] == workload and r["config"] == "gpumem"
                     and completed(r) and r["gpumem_report"] and "peak_live_bytes" in r["gpumem_report"]]
            if not peaks and not a.dry_run:
                print(f"[limit] {workload}: no gpumem peak to scale (no completed gpumem run), skipped")
                continue
            limit = str(round(a.limit_factor * max(peaks))) if peaks else f"<{a.limit_factor} x peak live>"
            limited = Config("gpumem-limit", NO_CACHE, [*base_gpumem.gpumem_args, "--limit", limit])
            record = runner.run("limit", 0, workload, limited, WORKLOADS[workload], workload_args.get(workload, []),
                                limit_factor=a.limit_factor, limit_bytes=int(limit) if peaks else None)
            if record is not None:
                records.append(record)

    if a.giveback:
        for config in under_gpumem:
            record = runner.run("giveback", 0, "giveback", config, GIVEBACK, ["--nvml-index", str(a.gpu)])
            if record is not None:
                records.append(record)

    if a.dry_run:
        return
    summary = summarize(records)
    (a.out / "footprint.md").write_text(summary)
    print()
    print(summary, end="")


if __name__ == "__main__":
    main()
