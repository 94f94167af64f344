"""Tests of report.py on made-up samples: medians, the tables' rows and ratios, the
workload lines, the CSV and the SVG. Run: python3 -m unittest discover -s bench/compare"""
import csv
import json
import os
import tempfile
import unittest
import xml.etree.ElementTree as ET

import report


def sample(measurement, contender, params, metric, value, rep):
    return {"type": "sample", "measurement": measurement, "contender": contender, "params": params,
            "metric": metric, "value": value, "rep": rep}


def fake_run():
    meta = {"type": "meta", "program": "gpumem_compare", "device": "Fake GPU", "driver_version": 13000,
            "device_memory": 80 << 30, "simulated": False,
            "contender:gpumem pool": {"family": "gpumem", "description": "pool", "order": 0},
            "contender:rmm pool": {"family": "rmm", "description": "rmm pool", "order": 1},
            "contender:cudaMallocAsync": {"family": "cuda", "description": "driver pool", "order": 2},
            "log:mlp": {"source": "/tmp/x/mlp.csv", "dialect": "gpumem", "ops": 700, "threads": 2, "streams": 1,
                        "peak_live": 800 << 20}}
    run = {"type": "meta", "program": "bench-compare", "gpu": "Fake GPU (80 GiB)", "driver": "580.1",
           "date": "2026-11-22T10:00Z", "commit": "abc123", "mode": "full", "rounds": 3,
           "log_origin:mlp": "docs/worked-example/allocation-log.csv.gz"}
    recs = [run, meta]
    for rep, (pool, rmm, drv) in enumerate([(60, 400, 700), (70, 420, 650), (65, 500, 900)]):
        for size in (256, 1 << 30):
            recs.append(sample("latency", "gpumem pool", {"size": size}, "ns_per_pair", pool, rep))
            recs.append(sample("latency", "rmm pool", {"size": size}, "ns_per_pair", rmm, rep))
            recs.append(sample("latency", "cudaMallocAsync", {"size": size}, "ns_per_pair", drv, rep))
            recs.append(sample("latency", "shim stream: cudaMalloc", {"size": size}, "ns_per_pair", 2 * pool, rep))
            recs.append(sample("latency", "shim safe: cudaMalloc", {"size": size}, "ns_per_pair", 3 * pool, rep))
            recs.append(sample("latency", "gpumem pool", {"size": size}, "fastest_window_ns_per_pair", pool - 5, rep))
            recs.append(sample("latency", "shim safe: cudaMalloc", {"size": size}, "fastest_window_ns_per_pair",
                               2 * pool, rep))
            recs.append(sample("latency", "shim safe log: cudaMalloc", {"size": size}, "ns_per_pair", 3 * pool + 200,
                               rep))
            recs.append(sample("latency", "shim safe log queued: cudaMalloc", {"size": size}, "ns_per_pair",
                               3 * pool + 100, rep))
        recs.append(sample("latency", "gpumem pool", {"size": 256, "streams": 2}, "ns_per_pair", 3000, rep))
        for threads, rate in ((1, 15e6), (16, 150e6)):
            p = {"size": 256, "threads": threads}
            recs.append(sample("scaling", "gpumem pool", p, "pairs_per_s", rate, rep))
            recs.append(sample("scaling", "gpumem pool", p, "mean_thread_pairs_per_s", rate * 2, rep))
            recs.append(sample("scaling", "gpumem pool", p, "slowest_over_fastest", 1.5, rep))
            recs.append(sample("scaling", "gpumem pool", p, "cold_pairs_per_s", rate / 10, rep))
        p = {"log": "mlp", "events": 700}
        recs.append(sample("replay", "gpumem pool", p, "peak_live", 800 << 20, rep))
        recs.append(sample("replay", "gpumem pool", p, "peak_reserved", 1 << 30, rep))
        recs.append(sample("replay", "gpumem pool", p, "failed", 0, rep))
        recs.append(sample("replay", "cudaMallocAsync", p, "peak_live", 800 << 20, rep))
        recs.append(sample("replay", "cudaMallocAsync", p, "peak_device_used", 900 << 20, rep))
        recs.append(sample("replay", "cudaMallocAsync", p, "failed", 1, rep))
        mp = {"streams": 16, "kernels": 16, "prewarm": False}
        recs.append(sample("multistream", "gpumem pool", mp, "us_per_iteration", 250, rep))
        recs.append(sample("multistream", "gpumem pool", mp, "over_ideal", 1.25, rep))
        recs.append(sample("multistream", "gpumem pool", mp, "first_iteration_us", 3000, rep))
        rp = {"allocations": 10000, "max_size": 1 << 20, "streams": 4}
        recs.append(sample("random", "rmm pool", rp, "us_per_call", 0.5, rep))
        recs.append(sample("random", "rmm pool", rp, "peak_reserved", 300, rep))
        recs.append(sample("random", "rmm pool", rp, "peak_live", 200, rep))
        recs.append(sample("random", "rmm pool", rp, "failed", 0, rep))
    recs.append({"type": "note", "measurement": "latency", "contender": "rmm arena", "text": "could not be made"})
    recs.append({"type": "note", "measurement": "latency", "contender": "rmm arena", "text": "could not be made"})
    return recs


WORKLOAD_TEXT = """\
some python warning
mlp label=caching batch=64 ms_per_step=2.500 final_loss=2.1
mlp label=gpumem-safe batch=64 ms_per_step=2.700 final_loss=2.1
varlen label=caching batch=8 ms_per_step=10.000 mean_ms_per_step=11.0 final_loss=9.0 max_reserved_mib=3000 max_allocated_mib=2500 steps=40
mlp label=caching batch=64 ms_per_step=2.300 final_loss=2.1
mlp label=caching batch=64 ms_per_step=9.900 final_loss=2.1
"""


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.samples = os.path.join(self.dir.name, "samples.jsonl")
        with open(self.samples, "w") as f:
            for r in fake_run():
                f.write(json.dumps(r) + "\n")
            f.write("[rmm logger] not json, skipped\n")
        self.workloads = os.path.join(self.dir.name, "workloads.txt")
        with open(self.workloads, "w") as f:
            f.write(WORKLOAD_TEXT)
        self.out = os.path.join(self.dir.name, "out")
        self.assertEqual(report.main([self.out, self.samples, "--workloads", self.workloads]), 0)
        with open(os.path.join(self.out, "comparison.md")) as f:
            self.md = f.read()

    def tearDown(self):
        self.dir.cleanup()

    def row(self, first_cells):
        """The markdown row starting with these cells."""
        prefix = "| " + " | ".join(first_cells) + " |"
        rows = [line for line in self.md.splitlines() if line.startswith(prefix)]
        self.assertTrue(rows, f"no row {prefix!r} in:\n{self.md}")
        return [c.strip() for c in rows[0].strip("|").split("|")]

    def test_latency_medians_and_ratios(self):
        self.assertEqual(self.row(["gpumem pool"])[1:], ["65 ns", "65 ns"])
        self.assertEqual(self.row(["rmm pool"])[1:], ["420 ns", "420 ns"])
        # ratio table: the second row starting with "rmm pool"
        rows = [l for l in self.md.splitlines() if l.startswith("| rmm pool |")]
        self.assertIn("6.46×", rows[1])  # 420 / 65
        self.assertIn("| cudaMallocAsync | 700 ns | 700 ns |", self.md)

    def test_fastest_window_table_after_the_ratios(self):
        lat = self.md.split("## 1.")[1].split("\n## ")[0]
        fast = lat.split("The fastest fifth of each timed loop")[1]
        self.assertIn("| gpumem pool | 60 ns | 60 ns |", fast)  # median of 55, 65, 60
        self.assertIn("| shim safe: cudaMalloc | 130 ns | 130 ns |", fast)
        self.assertNotIn("rmm pool", fast)  # no such samples: no row

    def test_log_rows_have_their_own_table(self):
        lat = self.md.split("## 1.")[1].split("\n## ")[0]
        self.assertNotIn("log:", lat)
        self.assertNotIn("log queued:", lat)
        log = self.md.split("## 6. What the allocation log adds")[1]
        self.assertIn("| shim safe: cudaMalloc | 195 ns → 395 ns (+200 ns) | 195 ns → 395 ns (+200 ns) |", log)
        self.assertIn("| shim safe: cudaMalloc (rows queued) | 195 ns → 295 ns (+100 ns) | 195 ns → 295 ns (+100 ns) |",
                      log)
        with open(os.path.join(self.out, "latency-ratio.svg")) as f:
            self.assertNotIn("log:", f.read())

    def test_two_streams_table_apart_from_the_sizes(self):
        self.assertIn("| gpumem pool | 3.00 µs (46.2× one stream) |", self.md)
        self.assertEqual(self.row(["gpumem pool"])[1:], ["65 ns", "65 ns"])  # not mixed into the one-stream row

    def test_row_order_gpumem_first_shim_last(self):
        lat = self.md.split("## 1.")[1].split("##")[0]
        names = [l.split("|")[1].strip() for l in lat.splitlines() if l.startswith("| ") and "---" not in l]
        self.assertEqual(names[:6], ["contender", "gpumem pool", "rmm pool", "cudaMallocAsync", "shim safe: cudaMalloc",
                                     "shim stream: cudaMalloc"])

    def test_scaling_ratio_to_one_thread_and_diagnosis(self):
        self.assertEqual(self.row(["256 B", "gpumem pool"])[2:], ["15.0 M/s", "150 M/s (10.0×)"])
        diag = self.md.split("Why two harnesses disagree")[1]
        self.assertIn("| 256 B | gpumem pool | 150 M/s | 300 M/s | 2.00× | 1.50× | 15.0 M/s |", diag)

    def test_replay_uses_device_used_when_reserved_unknown(self):
        self.assertIn("| mlp | gpumem pool | 1.00 GiB | 800 MiB | 1.28× |", self.md)
        self.assertIn("| mlp | cudaMallocAsync | 900 MiB ¹ | 800 MiB | 1.12× | 900 MiB | 1 |", self.md)
        self.assertIn("docs/worked-example/allocation-log.csv.gz (gpumem log, 700 operations", self.md)

    def test_random_and_multistream(self):
        self.assertIn("| rmm pool | 500 ns | 1.50× | 0 |", self.md)
        self.assertIn("| gpumem pool | 250.0 µs (1.2×); first 3.00 ms |", self.md)

    def test_environment_and_notes(self):
        for text in ("Fake GPU (80 GiB)", "580.1", "2026-11-22T10:00Z", "abc123"):
            self.assertIn(text, self.md)
        self.assertIn("- latency rmm arena: could not be made (2 rounds)", self.md)

    def test_workloads_parsed_as_rounds(self):
        # caching at batch 64: rounds 2.5, 2.3, 9.9 -> median 2.5
        self.assertIn("| caching | 2.500 |", self.md)
        self.assertIn("(reserved 3000 MiB)", self.md)

    def test_csv_has_every_sample(self):
        with open(os.path.join(self.out, "samples.csv")) as f:
            rows = list(csv.reader(f))
        # 4 mlp lines x (ms_per_step, final_loss) + 1 varlen line x 5 metrics
        n = sum(1 for r in fake_run() if r["type"] == "sample") + 4 * 2 + 5
        self.assertEqual(rows[0][:3], ["measurement", "contender", "params"])
        self.assertEqual(len(rows) - 1, n)
        self.assertEqual(sum(1 for r in rows[1:] if r[0] == "workload"), 13)

    def test_svg_is_well_formed_with_one_line_per_contender(self):
        tree = ET.parse(os.path.join(self.out, "latency-ratio.svg"))
        ns = "{http://www.w3.org/2000/svg}"
        lines = tree.getroot().findall(f"{ns}polyline")
        titles = sorted(l.find(f"{ns}title").text for l in lines)
        self.assertEqual(titles, ["cudaMallocAsync", "rmm pool", "shim safe: cudaMalloc", "shim stream: cudaMalloc"])

    def test_json_has_medians(self):
        with open(os.path.join(self.out, "samples.json")) as f:
            data = json.load(f)
        med = [m for m in data["medians"] if m["contender"] == "cudaMallocAsync" and m["metric"] == "ns_per_pair"]
        self.assertEqual({m["median"] for m in med}, {700})
        self.assertEqual({m["n"] for m in med}, {3})

    def test_no_samples_is_an_error(self):
        empty = os.path.join(self.dir.name, "empty.jsonl")
        open(empty, "w").close()
        self.assertEqual(report.main([os.path.join(self.dir.name, "o2"), empty]), 1)


if __name__ == "__main__":
    unittest.main()
