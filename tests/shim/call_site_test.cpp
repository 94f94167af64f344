// Call sites and out-of-memory snapshots, end to end: shim_stack_app's distinct
// never-inlined functions allocate distinct sizes under the shim with stacks on,
// and gpumem-report must name each function behind its bytes (leaks, peak,
// failures); the stack table must survive SIGKILL like the log's rows; an
// allocation failing under a limit must leave one message and one snapshot whose
// numbers are the program's.
#include "shim_process.hpp"
#include "support/csv_log_reader.hpp"
#include "tools/json_value.hpp"

#include <gpumem/row_journal.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace gpumem::test {
namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

std::string report_bin() { return build_dir() + "/bin/gpumem-report"; }

std::string slurp(std::string const& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct run_paths {
  std::string log, stacks;
  explicit run_paths(std::string const& name) {
    log = ::testing::TempDir() + "gpumem-callsite-" + name + ".csv";
    stacks = log + ".stacks";
    for (auto const& p : {log, stacks, log + ".oom-1.json", log + ".oom-2.json"}) std::remove(p.c_str());
  }
};

process_result run_app(std::vector<std::string> args, std::map<std::string, std::string> env) {
  args.insert(args.begin(), program("shim_stack_app"));
  env.emplace("LD_PRELOAD", shim_path());
  return run_process(args, env);
}

/// shim_stack_app's "jit" scenario (`depth` native frames under its generated code)
/// with its log at p.log, and a perf map naming that code py::train_step, written into
/// `dir` as CPython's would be. Returns the map's path ("" if the run failed).
std::string run_jit_with_perf_map(run_paths const& p, std::string const& depth, std::string const& stacks,
                                  std::string const& dir) {
  auto const r = run_app({"jit", depth}, {{"GPUMEM_LOG_FILE", p.log}, {"GPUMEM_STACKS", stacks}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto const at = r.output.find("JIT ");
  EXPECT_NE(at, std::string::npos) << r.output;
  if (r.exit_code != 0 || at == std::string::npos) return {};
  std::istringstream line{r.output.substr(at + 4)};
  std::string address, size, pid_word;
  long pid = 0;
  line >> address >> size >> pid_word >> pid;
  EXPECT_EQ(run_process({"/bin/mkdir", "-p", dir}, {}).exit_code, 0);
  std::string const map = dir + "/perf-" + std::to_string(pid) + ".map";
  std::ofstream out{map};
  out << address << " " << size << " py::train_step:/work/train.py\n";
  return map;
}

json_value report_json(std::string const& path) {
  auto const r = run_process({report_bin(), "--json", path}, {});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto const start = r.output.find('{');  // warnings (stderr) may come first
  return parse_json(r.output.substr(start == std::string::npos ? 0 : start));
}

/// Function names of a site's frames.
std::vector<std::string> functions(json_value const& site) {
  std::vector<std::string> out;
  for (auto const& f : site["frames"].items)
    out.push_back(f["function"].is(json_value::kind::string) ? f["function"].text : "");
  return out;
}

std::uint64_t num(json_value const& v) { return std::stoull(v.text); }

/// "<what> DEVICE d FREE f TOTAL t" in a program's output (rt_app's print_device_memory).
struct device_memory {
  std::uint64_t device = 0;
  std::uint64_t free = 0;
  std::uint64_t total = 0;
};
device_memory device_memory_at(std::string const& output, std::string const& what) {
  device_memory m;
  auto const at = output.find(what + " DEVICE ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no '" << what << " DEVICE' line in:\n" << output;
    return m;
  }
  std::istringstream in{output.substr(at + what.size())};
  std::string word;
  in >> word >> m.device >> word >> m.free >> word >> m.total;
  return m;
}

/// The Stack ids the log's rows refer to, and those the stack table holds.
std::set<std::string> row_stacks(csv_log_contents const& log) {
  std::set<std::string> ids;
  for (auto const& row : log.rows) {
    if (!row.back().empty()) ids.insert(row.back());
  }
  return ids;
}
std::set<std::string> table_stacks(std::string const& path) {
  std::set<std::string> ids;
  std::istringstream in{slurp(path)};
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("stack,", 0) == 0) ids.insert(line.substr(6, line.find(',', 6) - 6));
  }
  return ids;
}

TEST(CallSites, ReportNamesTheFunctionBehindLeaksPeakAndFailures) {
  run_paths const p{"sites"};
  auto const r = run_app({"sites"}, {{"GPUMEM_LOG_FILE", p.log}, {"GPUMEM_STACKS", "16"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("SITES DONE"), std::string::npos) << r.output;

  // RMM's six columns stay first; Stack is last, filled for every allocation.
  auto const log = read_csv_log(p.log);
  EXPECT_EQ(log.header.rfind("Thread,Time,Action,Pointer,Size,Stream,", 0), 0U) << log.header;
  EXPECT_TRUE(log.header.ends_with(",Reserved,Stack")) << log.header;
  EXPECT_EQ(log.bad_lines, 0U);
  for (auto const& row : log.rows) {
    if (row[2] == "allocate" || row[2] == "allocate failure") {
      EXPECT_FALSE(row.back().empty()) << row[2] << " " << row[4];
    } else {
      EXPECT_TRUE(row.back().empty());
    }
  }
  EXPECT_EQ(row_stacks(log), table_stacks(p.stacks));
  EXPECT_EQ(row_stacks(log).size(), 4U);  // four functions, one stack each

  auto const doc = report_json(p.log);
  auto const& sites = doc["logs"][0]["call_sites"];
  ASSERT_TRUE(sites.is(json_value::kind::object));
  EXPECT_TRUE(sites["table_present"].boolean);

  ASSERT_EQ(sites["leaks"].items.size(), 1U);
  auto const& leak = sites["leaks"][0];
  EXPECT_EQ(num(leak["live_at_end_bytes"]), 6 * MiB);
  EXPECT_EQ(num(leak["live_at_end_count"]), 2U);
  ASSERT_FALSE(leak["frames"].items.empty());
  EXPECT_EQ(functions(leak)[0], "layer_beta_leak");
  // file:line from the program's debug information.
  EXPECT_TRUE(leak["frames"][0]["file"].text.ends_with("stack_app.cpp")) << leak["frames"][0]["file"].text;
  EXPECT_GT(num(leak["frames"][0]["line"]), 0U);
  // The caller is named too: main's helper that looped over it.
  auto const leak_fns = functions(leak);
  EXPECT_NE(std::find(leak_fns.begin(), leak_fns.end(), "main"), leak_fns.end());

  // The peak: 6 MiB leaked + 8 MiB of layer_delta_peak live at once.
  EXPECT_EQ(num(doc["logs"][0]["peak_live_bytes"]), 14 * MiB);
  ASSERT_GE(sites["peak"].items.size(), 2U);
  EXPECT_EQ(functions(sites["peak"][0])[0], "layer_delta_peak");
  EXPECT_EQ(num(sites["peak"][0]["live_at_peak_bytes"]), 8 * MiB);
  EXPECT_EQ(functions(sites["peak"][1])[0], "layer_beta_leak");
  EXPECT_EQ(num(sites["peak"][1]["live_at_peak_bytes"]), 6 * MiB);

  ASSERT_EQ(sites["failures"].items.size(), 1U);
  EXPECT_EQ(functions(sites["failures"][0])[0], "layer_gamma_fails");
  EXPECT_EQ(num(sites["failures"][0]["failed_bytes"]), std::uint64_t{1} << 40);

  // The transient allocations are nowhere in the lists: freed, and never at the peak.
  for (auto const* list : {"leaks", "peak", "failures"}) {
    for (auto const& site : sites[list].items) EXPECT_NE(functions(site)[0], "layer_alpha_transient") << list;
  }

  // The Chrome trace of a log with a Stack column is still a valid trace: every
  // allocation's slice closes.
  std::string const trace = p.log + ".trace.json";
  auto const t = run_process({report_bin(), p.log, "--trace", trace}, {});
  ASSERT_EQ(t.exit_code, 0) << t.output;
  auto const events = parse_json(slurp(trace))["traceEvents"];
  std::map<std::string, int> open;
  std::size_t begins = 0;
  for (auto const& e : events.items) {
    if (e["ph"].text == "b") {
      ++open[e["id"].text];
      ++begins;
    } else if (e["ph"].text == "e") {
      --open[e["id"].text];
    }
  }
  EXPECT_EQ(begins, 6U);  // 3 transient, 2 leaked, 1 peak
  for (auto const& [id, n] : open) EXPECT_EQ(n, 0) << id;
  std::remove(trace.c_str());

  // The text report says the same in words.
  auto const text = run_process({report_bin(), p.log}, {});
  EXPECT_NE(text.output.find("layer_beta_leak at stack_app.cpp:"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("never freed, by bytes (1 call site)"), std::string::npos) << text.output;
}

/// The numbers of the report's "call stacks:" line: recorded, not recorded, lines
/// not written ({} when the line is missing).
std::vector<std::uint64_t> stack_counts(std::string const& output) {
  auto const at = output.find("call stacks: ");
  if (at == std::string::npos) return {};
  unsigned long long recorded = 0, dropped = 0, lost = 0;
  if (std::sscanf(output.c_str() + at,
                  "call stacks: %llu recorded, %llu not recorded (the stack table was full), %llu lines not "
                  "written to the stack files",
                  &recorded, &dropped, &lost) != 3) {
    return {};
  }
  return {recorded, dropped, lost};
}

// The report at exit says how many stacks the table could not hold and how many
// lines its stack file could not take.
TEST(CallSites, TheReportCountsStacksNotRecordedAndLinesNotWritten) {
  // Every allocation from its own stack, more than the table holds (three quarters
  // of its 65536 slots): each one is either recorded or counted.
  auto const full = run_app({"distinct", "50000"}, {{"GPUMEM_STACKS", "40"}, {"GPUMEM_REPORT", "1"}});
  ASSERT_EQ(full.exit_code, 0) << full.output.substr(0, 2000);
  ASSERT_NE(full.output.find("DISTINCT 50000"), std::string::npos) << full.output.substr(0, 2000);
  auto const counts = stack_counts(full.output);
  ASSERT_EQ(counts.size(), 3U) << full.output.substr(0, 2000);
  EXPECT_LE(counts[0], 65536U / 4 * 3);
  EXPECT_GT(counts[1], 0U);
  EXPECT_EQ(counts[0] + counts[1], 50000U);
  EXPECT_EQ(counts[2], 0U);  // no log, no stack file

  // A stack file that takes nothing (/dev/full): its version line and every
  // stack's line are counted.
  run_paths const p{"lines-lost"};
  ASSERT_EQ(::symlink("/dev/full", p.stacks.c_str()), 0);
  auto const r = run_app({"sites"}, {{"GPUMEM_LOG_FILE", p.log}, {"GPUMEM_STACKS", "16"}, {"GPUMEM_REPORT", "1"}});
  std::remove(p.stacks.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto const lost = stack_counts(r.output);
  ASSERT_EQ(lost.size(), 3U) << r.output;
  EXPECT_GE(lost[0], 4U);  // the four layer_* functions
  EXPECT_EQ(lost[1], 0U);
  EXPECT_GE(lost[2], lost[0] + 1);
}

TEST(CallSites, OffByDefault) {
  run_paths const p{"off"};
  auto const r = run_app({"sites"}, {{"GPUMEM_LOG_FILE", p.log}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto const log = read_csv_log(p.log);
  EXPECT_TRUE(row_stacks(log).empty());
  std::ifstream stacks{p.stacks};
  EXPECT_FALSE(stacks.good()) << "no stack table without --stacks";
}

TEST(CallSites, SamplingKeepsLargeAllocationsAndFailures) {
  run_paths const p{"sampled"};
  auto const r = run_app({"sites"}, {{"GPUMEM_LOG_FILE", p.log},
                                     {"GPUMEM_STACKS", "8"},
                                     {"GPUMEM_STACK_SAMPLE", "1000"},
                                     {"GPUMEM_STACK_MIN_SIZE", "4MiB"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto const log = read_csv_log(p.log);
  for (auto const& row : log.rows) {
    std::uint64_t const size = std::stoull(row[4]);
    bool const expected = (row[2] == "allocate" && size >= 4 * MiB) || row[2] == "allocate failure";
    EXPECT_EQ(!row.back().empty(), expected) << row[2] << " " << size;
  }
  auto const doc = report_json(p.log);
  auto const& sites = doc["logs"][0]["call_sites"];
  EXPECT_EQ(functions(sites["peak"][0])[0], "layer_delta_peak");
  // The leak was sampled out: it is counted, without a name.
  EXPECT_TRUE(sites["leaks"].items.empty());
  EXPECT_EQ(num(sites["unattributed"]["live_at_end_bytes"]), 6 * MiB);
}

// Threads interning the same stack at once: one id per stack, one line each in the
// table. (A thread's first allocation has no current context yet, so it goes through
// the real runtime, whose frame makes it a second stack.)
TEST(CallSites, ThreadsRecordingOneStackAtOnceGetOneIdAndOneLine) {
  run_paths const p{"threads"};
  auto const r = run_app({"threads", "8"}, {{"GPUMEM_LOG_FILE", p.log}, {"GPUMEM_STACKS", "16"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto const log = read_csv_log(p.log);
  std::size_t allocations = 0;
  for (auto const& row : log.rows) allocations += row[2] == "allocate" ? 1 : 0;
  EXPECT_EQ(allocations, 1600U);
  auto const ids = row_stacks(log);
  EXPECT_EQ(ids.size(), 2U);
  EXPECT_EQ(ids, table_stacks(p.stacks));
  std::size_t lines = 0;
  std::istringstream in{slurp(p.stacks)};
  for (std::string line; std::getline(in, line);) lines += line.rfind("stack,", 0) == 0 ? 1 : 0;
  EXPECT_EQ(lines, ids.size());
}

TEST(CallSites, StackTableSurvivesSigkillLikeTheRows) {
  run_paths const p{"kill"};
  auto const r = run_app({"kill"}, {{"GPUMEM_LOG_FILE", p.log}, {"GPUMEM_STACKS", "16"}});
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  // The last rows may still be in the log's journal: recovered, as the tools do.
  EXPECT_TRUE(recover_journal(p.log).error.empty());
  auto const log = read_csv_log(p.log);
  EXPECT_EQ(log.bad_lines, 0U);
  auto const rows = row_stacks(log);
  EXPECT_EQ(rows.size(), 4U);
  EXPECT_EQ(rows, table_stacks(p.stacks));  // every stack a row refers to is in the table
  auto const doc = report_json(p.log);
  auto const& leaks = doc["logs"][0]["call_sites"]["leaks"];
  ASSERT_EQ(leaks.items.size(), 1U);
  EXPECT_EQ(functions(leaks[0])[0], "layer_beta_leak");
}

// CPython under `python -X perf` calls each Python function through generated code
// that has no unwind information and that /tmp/perf-<pid>.map names. The stack
// must go on past such code (by frame pointers), and the report must name it from
// the map as a Python frame.
TEST(CallSites, GeneratedCodeIsWalkedThroughAndNamedFromThePerfMap) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "frame-pointer walk past generated code: x86-64 only";
#endif
  run_paths const p{"jit"};
  std::string const dir = ::testing::TempDir() + "gpumem-perfmap";
  std::string const map = run_jit_with_perf_map(p, "0", "16", dir);
  ASSERT_FALSE(map.empty());
  auto const rep = run_process({report_bin(), "--json", "--perf-map-dir", dir, p.log}, {});
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  auto const doc = parse_json(rep.output.substr(rep.output.find('{')));
  auto const& leaks = doc["logs"][0]["call_sites"]["leaks"];
  ASSERT_EQ(leaks.items.size(), 1U);
  auto const& frames = leaks[0]["frames"];
  ASSERT_GE(frames.items.size(), 3U) << rep.output;
  EXPECT_EQ(frames[0]["function"].text, "layer_jit_callee");
  EXPECT_EQ(frames[1]["kind"].text, "python");
  EXPECT_EQ(frames[1]["function"].text, "train_step");
  EXPECT_EQ(frames[1]["file"].text, "/work/train.py");
  EXPECT_EQ(frames[2]["function"].text, "jit()");  // the walk went on past the generated code
  EXPECT_TRUE(doc["logs"][0]["call_sites"]["perf_map_used"].boolean);
  std::remove(map.c_str());
}

// The text report shows the first frames of each site; the program's own code (a
// Python function under `python -X perf`) may sit deeper, below a framework's
// native frames. Those Python frames are shown anyway, with their depth.
TEST(CallSites, TheTextReportShowsPythonFramesBelowTheFramesItShows) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "frame-pointer walk past generated code: x86-64 only";
#endif
  run_paths const p{"jit-deep"};
  std::string const dir = ::testing::TempDir() + "gpumem-perfmap-deep";
  std::string const map = run_jit_with_perf_map(p, "16", "32", dir);
  ASSERT_FALSE(map.empty());
  auto const rep = run_process({report_bin(), "--perf-map-dir", dir, p.log}, {});
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  // 17 native frames (layer_native_depth x 16, layer_jit_callee), then the Python one.
  EXPECT_NE(rep.output.find("#17 train_step (python, /work/train.py)"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("more frames (--json has them all)"), std::string::npos) << rep.output;
  std::remove(map.c_str());
}

TEST(OutOfMemory, OneMessageAndOneSnapshotPerBurst) {
  run_paths const p{"oom"};
  auto const r = run_app({"oom", "50"},
                         {{"GPUMEM_LOG_FILE", p.log}, {"GPUMEM_STACKS", "16"}, {"GPUMEM_LIMIT", "32MiB"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("OOM 51 HELD 10"), std::string::npos) << r.output;
  // 51 failures in a loop: one message.
  std::size_t messages = 0;
  for (std::size_t at = r.output.find("out of memory on device 0"); at != std::string::npos;
       at = r.output.find("out of memory on device 0", at + 1)) {
    ++messages;
  }
  EXPECT_EQ(messages, 1U) << r.output;
  std::string const snap_path = p.log + ".oom-1.json";
  EXPECT_NE(r.output.find("snapshot: " + snap_path), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the program holds 30.00 MiB in 10 allocations"), std::string::npos) << r.output;
  std::ifstream second{p.log + ".oom-2.json"};
  EXPECT_FALSE(second.good());

  auto const snap = parse_json(slurp(snap_path));
  EXPECT_EQ(num(snap["request"]["bytes"]), 3 * MiB);
  EXPECT_EQ(snap["request"]["entry"].text, "cudaMalloc");
  EXPECT_EQ(num(snap["device"]), 0U);
  EXPECT_EQ(num(snap["live"]["bytes"]), 30 * MiB);
  EXPECT_EQ(num(snap["live"]["count"]), 10U);
  EXPECT_EQ(num(snap["limit_bytes"]), 32 * MiB);
  auto const& pool = snap["pool"];
  EXPECT_GE(num(pool["reserved_bytes"]), 30 * MiB);
  EXPECT_LE(num(pool["reserved_bytes"]), 32 * MiB);
  EXPECT_EQ(num(pool["used_bytes"]), 30 * MiB);
  EXPECT_LT(num(pool["largest_free_block"]), 3 * MiB);
  EXPECT_TRUE(pool.has("pending_bytes"));
  EXPECT_TRUE(pool.has("fragmentation"));
  EXPECT_EQ(snap["log"].text, p.log);
  EXPECT_EQ(snap["stacks_file"].text, p.stacks);
  ASSERT_EQ(snap["top_sites"].items.size(), 1U);
  EXPECT_EQ(num(snap["top_sites"][0]["live_bytes"]), 30 * MiB);
  EXPECT_EQ(num(snap["top_sites"][0]["live_count"]), 10U);

  // gpumem-report names the site holding the memory and the failed request's caller,
  // from the snapshot alone and beside the log.
  auto const alone = run_process({report_bin(), snap_path}, {});
  EXPECT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_NE(alone.output.find("call sites holding the most memory"), std::string::npos) << alone.output;
  EXPECT_NE(alone.output.find("#0  layer_beta_leak at stack_app.cpp:"), std::string::npos) << alone.output;
  EXPECT_NE(alone.output.find("limit          32.0 MiB"), std::string::npos) << alone.output;
  auto const doc = report_json(p.log);
  ASSERT_EQ(doc["snapshots"].items.size(), 1U);
  EXPECT_EQ(doc["snapshots"][0]["top_site_frames"][0][0]["function"].text, "layer_beta_leak");
  EXPECT_EQ(doc["snapshots"][0]["request_frames"][0]["function"].text, "layer_beta_leak");
}

// Each allocation's stack rides on its registry entry: frees take the bytes off
// it, for chain memory and for managed memory (whose free the runtime hook takes
// and CUDA makes), so the snapshot's call sites hold only what is still live.
TEST(OutOfMemory, CallSitesHoldOnlyWhatIsStillLive) {
  run_paths const p{"oom-after-frees"};
  auto const r = run_app({"oom_after_frees", "1"},
                         {{"GPUMEM_LOG_FILE", p.log}, {"GPUMEM_STACKS", "16"}, {"GPUMEM_LIMIT", "32MiB"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("HELD 10"), std::string::npos) << r.output;
  auto const snap = parse_json(slurp(p.log + ".oom-1.json"));
  ASSERT_EQ(snap["top_sites"].items.size(), 1U) << slurp(p.log + ".oom-1.json");
  EXPECT_EQ(num(snap["top_sites"][0]["live_bytes"]), 30 * MiB);
  EXPECT_EQ(num(snap["top_sites"][0]["live_count"]), 10U);
}

TEST(OutOfMemory, MessageWithoutALogAndNoFile) {
  auto const r = run_app({"oom", "3"}, {{"GPUMEM_LIMIT", "32MiB"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("out of memory on device 0: cudaMalloc(3.00 MiB) failed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("snapshot:"), std::string::npos) << r.output;
}

// 64 threads allocate at once under a limit: when the first fails, most of the
// others' allocations may still be on their way (admitted by the limit, a pool
// growing for them). The message counts what the program holds once they returned,
// not the one or two that had: within one allocation of what it held at most (it
// frees nothing until every thread failed).
TEST(OutOfMemory, ManyThreadsTheMessageCountsWhatTheProgramHolds) {
  constexpr std::uint64_t bytes = 2162688;  // 2.06 MiB
  std::string const holds = "the program holds ";
  for (int run = 0; run < 5; ++run) {
    auto const r = run_process({program("shim_rt_app"), "oom-threads", std::to_string(bytes)},
                               {{"LD_PRELOAD", shim_path()}, {"GPUMEM_LIMIT", "64MiB"}});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto const most_at = r.output.find("MOST_HELD ");
    ASSERT_NE(most_at, std::string::npos) << r.output;
    auto const most = std::stoull(r.output.substr(most_at + 10));
    EXPECT_GE(most, 48 * MiB) << r.output;  // the limit, less what the pool's pages leave over
    auto const at = r.output.find(holds);
    ASSERT_NE(at, std::string::npos) << r.output;
    auto const in = r.output.find(" in ", at);
    ASSERT_NE(in, std::string::npos) << r.output;
    auto const count = std::stoull(r.output.substr(in + 4));
    EXPECT_GE(count * bytes + bytes, most) << r.output;
    EXPECT_LE(count * bytes, most) << r.output;
    // The device never gave the process more than the limit (the pool's cached and
    // waiting memory included), and cudaMemGetInfo agrees with what it holds.
    auto const m = device_memory_at(r.output, "AT_OOM");
    EXPECT_LE(m.device, 64 * MiB) << r.output;
    EXPECT_EQ(m.total, 64 * MiB) << r.output;
    EXPECT_LE(m.free + most, 64 * MiB) << r.output;
  }
}

// A fragmented pool under a limit (a program holding 63 MiB under 64 MiB once left
// the pool holding 94 MiB): every other 2 MiB block freed, then 6 MiB requests no
// hole fits. The holes' device memory moves to where the requests go: all five that
// the limit holds are served, and the device never gives more than the limit.
TEST(OutOfMemory, AFragmentedPoolUnderALimitMovesItsMemoryRatherThanHoldMore) {
  auto const r = run_process({program("shim_rt_app"), "oom-fragmented"},
                             {{"LD_PRELOAD", shim_path()}, {"GPUMEM_LIMIT", "64MiB"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SMALL 32 BIG 5 HELD 65011712"), std::string::npos) << r.output;  // 62 MiB
  auto const m = device_memory_at(r.output, "AT_OOM");
  EXPECT_LE(m.device, 64 * MiB) << r.output;
  EXPECT_EQ(m.total, 64 * MiB) << r.output;
  EXPECT_EQ(m.free, 2 * MiB) << r.output;
}

}  // namespace
}  // namespace gpumem::test
