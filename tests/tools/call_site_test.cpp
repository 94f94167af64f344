// Call sites in the tools: the analyzer's sums per stack (at the peak, at the end,
// failures), the reader's Stack column, the stack table beside a log, the
// symbolizer (this test binary's own functions; a perf map's Python frames; a
// rebuilt file never gets a wrong name), and what the renderings share to show
// call sites and out-of-memory snapshots.
#include "report.hpp"

#include "log_analysis.hpp"
#include "log_reader.hpp"
#include "stack_table.hpp"
#include "symbolizer.hpp"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace gpumem::tools {
namespace {

call_site_stats const* site(log_summary const& s, std::uint64_t stack) {
  for (auto const& c : s.call_sites) {
    if (c.stack == stack) return &c;
  }
  return nullptr;
}

TEST(CallSiteAnalysis, SumsPerStackAtThePeakAtTheEndAndFailures) {
  auto const s = analyze(
      "Action,Pointer,Size,TimeNs,Stack\n"
      "allocate,0x100,10,1,a\n"
      "allocate,0x200,20,2,b\n"
      "free,0x100,10,3,\n"
      "allocate,0x300,40,4,a\n"  // the peak: b 20 + a 40
      "free,0x300,40,5,\n"
      "allocate,0x400,5,6,\n"  // no stack (sampled out)
      "allocate,0x500,1,7,a\n"
      "allocate failure,(nil),1000,8,c\n",
      "t.csv");
  ASSERT_TRUE(s.columns.stack);
  EXPECT_EQ(s.peak_live_bytes, 60U);
  auto const* a = site(s, 0xa);
  auto const* b = site(s, 0xb);
  auto const* c = site(s, 0xc);
  auto const* none = site(s, 0);
  ASSERT_TRUE(a && b && c && none);
  EXPECT_EQ(a->allocations, 3U);
  EXPECT_EQ(a->bytes_allocated, 51U);
  EXPECT_EQ(a->live_at_peak_bytes, 40U);
  EXPECT_EQ(a->live_at_peak_count, 1U);
  EXPECT_EQ(a->live_at_end_bytes, 1U);
  EXPECT_EQ(b->live_at_peak_bytes, 20U);
  EXPECT_EQ(b->live_at_end_bytes, 20U);
  EXPECT_EQ(b->live_at_end_count, 1U);
  EXPECT_EQ(c->failures, 1U);
  EXPECT_EQ(c->failed_bytes, 1000U);
  EXPECT_EQ(none->live_at_peak_bytes, 0U);
  EXPECT_EQ(none->live_at_end_bytes, 5U);
  // The sites add up to the totals.
  std::uint64_t at_peak = 0, at_end = 0;
  for (auto const& x : s.call_sites) {
    at_peak += x.live_at_peak_bytes;
    at_end += x.live_at_end_bytes;
  }
  EXPECT_EQ(at_peak, s.peak_live_bytes);
  EXPECT_EQ(at_end, s.live_at_end_bytes);
  ASSERT_FALSE(s.live_at_end.empty());
  EXPECT_EQ(s.live_at_end[0].stack, 0xbU);
}

TEST(CallSiteAnalysis, APeakThatMovesLaterIsWhatCounts) {
  // The first peak (a: 100) is beaten later by b alone (150): a held 0 at the real peak.
  auto const s = analyze(
      "Action,Pointer,Size,TimeNs,Stack\n"
      "allocate,0x100,100,1,a\n"
      "free,0x100,100,2,\n"
      "allocate,0x200,150,3,b\n",
      "t.csv");
  EXPECT_EQ(s.peak_live_bytes, 150U);
  EXPECT_EQ(site(s, 0xa)->live_at_peak_bytes, 0U);
  EXPECT_EQ(site(s, 0xb)->live_at_peak_bytes, 150U);
}

TEST(CallSiteAnalysis, LogsWithoutAStackColumnHaveNoCallSites) {
  auto const s = analyze("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.000000,allocate,0x100,10,0\n", "rmm.csv");
  EXPECT_FALSE(s.columns.stack);
  EXPECT_TRUE(s.call_sites.empty());
  EXPECT_EQ(s.allocations, 1U);
}

TEST(CallSiteAnalysis, ABadStackIdIsAWarningAndTheRowIsSkipped) {
  auto const log = parse_log("Action,Pointer,Size,TimeNs,Stack\nallocate,0x100,10,1,xyz\nallocate,0x200,10,2,ff\n",
                             "t.csv");
  ASSERT_EQ(log.events.size(), 1U);
  EXPECT_EQ(log.events[0].stack, 0xffU);
  ASSERT_EQ(log.warnings.size(), 1U);
  EXPECT_NE(log.warnings[0].message.find("bad Stack"), std::string::npos);
}

TEST(StackTable, ReadsModulesAndStacksAndSkipsDamage) {
  auto const t = parse_stack_table(
      "gpumem-stacks 1\n"
      "module,0,1000,2000,1000,abcd,/opt/my lib,with comma.so\n"
      "stack,9c1e,42,1234@0 7f0000001050\n"
      "garbage\n"
      "stack,77,42,12",  // cut short: its writer was killed
      "t.stacks");
  EXPECT_TRUE(t.present);
  stack_module const* m = t.module(0);
  ASSERT_NE(m, nullptr);
  if (m == nullptr) return;
  EXPECT_EQ(m->path, "/opt/my lib,with comma.so");
  EXPECT_EQ(m->build_id, "abcd");
  EXPECT_EQ(m->bias, 0x1000U);
  auto const* s = t.find(0x9c1e);
  ASSERT_NE(s, nullptr);
  if (s == nullptr) return;
  EXPECT_EQ(s->pid, 42U);
  ASSERT_EQ(s->frames.size(), 2U);
  EXPECT_EQ(s->frames[0].address, 0x1234U);
  EXPECT_EQ(s->frames[0].module, 0);
  EXPECT_EQ(s->frames[1].module, -1);
  EXPECT_EQ(t.find(0x77), nullptr);
  EXPECT_EQ(t.warnings.size(), 2U);
}

TEST(StackTable, AMissingFileIsAnEmptyTable) {
  auto const t = load_stack_table("/nonexistent/gpumem.stacks");
  EXPECT_FALSE(t.present);
  EXPECT_TRUE(t.stacks.empty());
}

extern "C" __attribute__((noinline, used)) int gpumem_test_known_function(int x) {
  asm volatile("" ::: "memory");
  return x * 3 + 1;
}

// This binary as the shim's module line would describe it.
stack_module self_module() {
  stack_module m;
  Dl_info info{};
  void* lm = nullptr;
  EXPECT_NE(dladdr1(reinterpret_cast<void*>(&gpumem_test_known_function), &info, &lm, RTLD_DL_LINKMAP), 0);
  m.bias = static_cast<link_map*>(lm)->l_addr;
  char exe[4096] = {};
  ssize_t const n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  m.path = std::string{exe, n > 0 ? static_cast<std::size_t>(n) : 0};
  return m;
}

TEST(Symbolizer, NamesAFunctionOfThisBinary) {
  symbolizer sym;
  auto const m = self_module();
  // A return address just inside the function, as a call from it would leave.
  auto const address = reinterpret_cast<std::uint64_t>(&gpumem_test_known_function) + 2;
  auto const s = sym.resolve(address, &m, static_cast<std::uint32_t>(getpid()));
  EXPECT_EQ(s.what, symbol::kind::native);
  EXPECT_EQ(s.function, "gpumem_test_known_function");
  EXPECT_EQ(s.module, m.path);
  EXPECT_EQ(s.offset, address - m.bias);
  EXPECT_NE(s.text().find("gpumem_test_known_function"), std::string::npos) << s.text();
}

TEST(Symbolizer, AFileRebuiltSinceTheRunGetsNoName) {
  symbolizer sym;
  auto m = self_module();
  m.build_id = "0123456789abcdef0123456789abcdef01234567";  // not this file's
  auto const address = reinterpret_cast<std::uint64_t>(&gpumem_test_known_function) + 2;
  auto const s = sym.resolve(address, &m, 1);
  EXPECT_TRUE(s.function.empty());
  EXPECT_EQ(s.offset, address - m.bias);
}

TEST(Symbolizer, NamesPythonFramesFromThePerfMap) {
  std::string const dir = ::testing::TempDir();
  std::string const map = dir + "/perf-424242.map";
  {
    std::ofstream out{map};
    out << "7f0000001000 100 py::train_step:/work/train.py\n"
        << "7f0000002000 80 [jit] some_other_code\n";
  }
  symbolizer sym{dir};
  auto const py = sym.resolve(0x7f0000001050, nullptr, 424242);
  EXPECT_EQ(py.what, symbol::kind::python);
  EXPECT_EQ(py.function, "train_step");
  EXPECT_EQ(py.file, "/work/train.py");
  EXPECT_EQ(py.text(), "train_step (python, /work/train.py)");
  auto const jit = sym.resolve(0x7f0000002010, nullptr, 424242);
  EXPECT_EQ(jit.function, "[jit] some_other_code");
  auto const unknown = sym.resolve(0x7f0000009000, nullptr, 424242);
  EXPECT_EQ(unknown.what, symbol::kind::unknown);
  EXPECT_EQ(unknown.text(), "0x7f0000009000");
  EXPECT_TRUE(sym.used_perf_map());
  std::remove(map.c_str());
}

symbol frame(std::uint64_t address, symbol::kind what = symbol::kind::unknown) {
  symbol f;
  f.what = what;
  f.address = address;
  if (what == symbol::kind::python) f.function = "step_" + std::to_string(address);
  return f;
}

TEST(CallSiteRendering, ListsTheInnermostFramesThenTheInnermostPythonOnes) {
  std::vector<symbol> frames;
  for (std::uint64_t k = 0; k < 20; ++k) frames.push_back(frame(0x1000 + k));
  frames[3] = frame(3, symbol::kind::python);  // among the first 12: listed as any other
  for (std::size_t k : {13, 15, 17, 19}) frames[k] = frame(k, symbol::kind::python);
  std::string const text = frame_lines(frames, "  ");
  EXPECT_NE(text.find("  #0  0x1000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  #11 0x100b\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("#12 "), std::string::npos) << text;
  // The three innermost Python frames past the first 12, with their depth.
  EXPECT_NE(text.find("  #13 step_13 (python)\n  #15 step_15 (python)\n  #17 step_17 (python)\n"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("#19"), std::string::npos) << text;
  EXPECT_NE(text.find("  ... 5 more frames (--json has them all)\n"), std::string::npos) << text;
  EXPECT_EQ(frame_lines({frame(0x10), frame(0x20)}, ""), "#0  0x10\n#1  0x20\n");
}

TEST(CallSiteRendering, TheThreeListsInEveryRenderingsOrder) {
  log_summary s;
  s.allocations = 10;
  call_site_report c;
  c.leaks = {named_site{call_site_stats{.stack = 0xa, .live_at_end_bytes = 100, .live_at_end_count = 2}, false, {}}};
  c.leak_sites = 1;
  c.failures = {named_site{call_site_stats{.stack = 0xb, .failures = 3, .failed_bytes = 30}, false, {}}};
  c.failure_sites = 4;
  auto const lists = site_lists(s, c);
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(lists[0].key, "leaks");
  EXPECT_EQ(lists[0].title, "never freed");
  EXPECT_EQ(lists[0].bytes(c.leaks[0].stats), 100u);
  EXPECT_EQ(lists[0].count(c.leaks[0].stats), 2u);
  EXPECT_EQ(lists[1].key, "peak");
  EXPECT_TRUE(lists[1].sites->empty());
  EXPECT_EQ(lists[2].key, "failures");
  EXPECT_EQ(lists[2].total, 4u);
  EXPECT_EQ(lists[2].bytes(c.failures[0].stats), 30u);
  EXPECT_EQ(lists[2].count(c.failures[0].stats), 3u);
  EXPECT_EQ(lists[2].counted, "failures");
  // An incomplete log's live allocations are not called leaks.
  s.incomplete = incomplete_marker{};
  EXPECT_EQ(site_lists(s, c)[0].title, "still live at the end");

  EXPECT_EQ(unattributed_note(s, c), "");
  c.unattributed = call_site_stats{.allocations = 3, .live_at_end_bytes = 0, .live_at_peak_bytes = 1024};
  EXPECT_EQ(unattributed_note(s, c),
            "without a recorded stack (sampled out): 1.00 KiB at the peak, 0 B at the end, 3 of 10 allocations");
  c.table_path = "run.csv.stacks";
  EXPECT_EQ(stack_table_note(c), "no stack table (run.csv.stacks is missing): stack ids only");
  c.table_present = true;
  c.stacks_in_table = 12;
  EXPECT_EQ(stack_table_note(c), "12 stacks recorded in run.csv.stacks");
}

TEST(SnapshotRendering, TheTextIsMadeOnceWhenReadAndShownByTextAndHtml) {
  std::string frames;
  for (int k = 0; k < 14; ++k)
    frames += std::string{k ? "," : ""} + "{\"address\":\"0x" + std::to_string(1000 + k) +
              "\",\"module\":null,\"offset\":null}";
  std::string const path = ::testing::TempDir() + "/gpumem_render_" + std::to_string(getpid()) + ".oom-1.json";
  {
    std::ofstream out{path};
    out << R"({"gpumem_oom_snapshot":1,"pid":1,"device":0,"request":{"bytes":3145728,"entry":"cudaMalloc",)"
        << R"("stream":"0x0","thread":7,"frames":[)" << frames << R"(]},"live":{"bytes":1024,"count":1},)"
        << R"("pool":null,"limit_bytes":null,"device_memory":null,"chain":"pool -> cuda","log":null,)"
        << R"("stacks_recorded":true,"top_sites":[{"stack":"2a","live_bytes":1024,"live_count":1,"frames":[)" << frames
        << "]}]}";
  }
  symbolizer sym;
  oom_snapshot const snap = read_snapshot(path, sym);
  std::remove(path.c_str());
  EXPECT_NE(snap.text.find("  request        cudaMalloc(3.00 MiB) on device 0, stream 0x0, thread 7\n"),
            std::string::npos)
      << snap.text;
  // The request's frames and each site's, by the rule of every call-site list.
  EXPECT_NE(snap.text.find("\n    #11 0x1011\n    ... 2 more frames"), std::string::npos) << snap.text;
  EXPECT_NE(snap.text.find("\n      #11 0x1011\n      ... 2 more frames"), std::string::npos) << snap.text;
  report_data r;
  r.snapshots.push_back(snap);
  EXPECT_NE(text_report(r).find(snap.text), std::string::npos);
  EXPECT_NE(html_report(r).find("<pre>== out of memory: "), std::string::npos);
}

}  // namespace
}  // namespace gpumem::tools
