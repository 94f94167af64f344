// gpumem-report --trace: the file parses as JSON (strictly), is in the trace-event
// format Perfetto and chrome://tracing read, every allocation slice closes after it
// opens, and counters never go back in time on their track.
#include "support/temp_file.hpp"
#include "tools/json_value.hpp"
#include "tools/synthetic_log.hpp"
#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

using gpumem::test::json_value;
using gpumem::test::parse_json;
using gpumem::test::read_file;
using gpumem::test::run_command;
using gpumem::test::temp_file;
using gpumem::test::write_file;

namespace {

using kind = json_value::kind;

std::string report(std::string const& args) { return std::string{GPUMEM_REPORT_BIN} + " " + args; }

struct slice {
  json_value const* begin = nullptr;
  json_value const* end = nullptr;
};

/// What the checks found, for the tests to look at further.
struct trace_facts {
  std::map<std::string, slice> slices;  ///< by id
  std::map<std::pair<std::int64_t, std::string>, std::vector<std::pair<double, std::int64_t>>> counters;
  std::vector<json_value const*> instants;
  std::set<std::pair<std::int64_t, std::int64_t>> named_threads;  ///< (pid, tid) with a thread_name
  std::set<std::int64_t> named_processes;
  double last_ts = 0;
};

/// The format's rules, checked on every event; failures are reported with the event.
trace_facts check_trace(json_value const& root) {
  trace_facts f;
  EXPECT_TRUE(root.is(kind::object));
  EXPECT_EQ(root["displayTimeUnit"].text, "ns");
  auto const& events = root["traceEvents"];
  EXPECT_TRUE(events.is(kind::array));
  for (auto const& e : events.items) {
    std::string const ph = e["ph"].text;
    auto const pid = static_cast<std::int64_t>(e["pid"].number);
    if (ph == "M") {
      if (e["name"].text == "thread_name") f.named_threads.emplace(pid, static_cast<std::int64_t>(e["tid"].number));
      if (e["name"].text == "process_name") f.named_processes.insert(pid);
      continue;
    }
    double const ts = e["ts"].number;
    EXPECT_GE(ts, 0.0);
    f.last_ts = std::max(f.last_ts, ts);
    if (ph == "b" || ph == "e") {
      EXPECT_EQ(e["cat"].text, "allocation");
      auto& s = f.slices[e["id"].text];
      if (ph == "b") {
        EXPECT_EQ(s.begin, nullptr) << "id reused: " << e["id"].text;
        s.begin = &e;
      } else {
        EXPECT_NE(s.begin, nullptr) << "end before begin: " << e["id"].text;
        EXPECT_EQ(s.end, nullptr) << "closed twice: " << e["id"].text;
        s.end = &e;
      }
    } else if (ph == "C") {
      EXPECT_TRUE(e["args"]["bytes"].is(kind::number));
      f.counters[{pid, e["name"].text}].emplace_back(ts, std::stoll(e["args"]["bytes"].text));
    } else if (ph == "i") {
      f.instants.push_back(&e);
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  for (auto const& [id, s] : f.slices) {
    EXPECT_NE(s.begin, nullptr) << id;
    EXPECT_NE(s.end, nullptr) << "slice " << id << " never closes";
    if (s.begin == nullptr || s.end == nullptr) continue;
    EXPECT_LE((*s.begin)["ts"].number, (*s.end)["ts"].number) << id;
    EXPECT_EQ((*s.begin)["pid"].number, (*s.end)["pid"].number) << id;
    EXPECT_EQ((*s.begin)["tid"].number, (*s.end)["tid"].number) << id;
    EXPECT_EQ((*s.begin)["name"].text, (*s.end)["name"].text) << id;
    auto const track = std::pair{static_cast<std::int64_t>((*s.begin)["pid"].number),
                                 static_cast<std::int64_t>((*s.begin)["tid"].number)};
    EXPECT_EQ(f.named_threads.count(track), 1u) << "unnamed track for " << id;
  }
  for (auto const& [track, points] : f.counters) {
    for (std::size_t i = 1; i < points.size(); ++i) {
      EXPECT_LE(points[i - 1].first, points[i].first)
          << "counter " << track.second << " of pid " << track.first << " goes back in time at point " << i;
    }
    EXPECT_EQ(f.named_processes.count(track.first), 1u);
  }
  return f;
}

json_value run_trace(std::string const& logs, temp_file const& tmp, std::string* stdout_text = nullptr) {
  std::string const out = tmp.dir() + "/trace.json";
  auto const r = run_command(report(logs + " --trace " + out), tmp.path());
  EXPECT_EQ(r.status, 0) << r.err;
  if (stdout_text != nullptr) *stdout_text = r.out;
  return parse_json(read_file(out));
}

}  // namespace

TEST(Trace, TwoRanksWithKnownEvents) {
  temp_file a{"rank0.csv"}, b{"rank1.csv"};
  // rank0: A on the legacy stream, B on 0x5000 (never freed), A freed by a row
  // carrying an OLDER time than B's (a racing thread), a failure, an unknown free.
  write_file(a.path(),
             "Thread,Action,Pointer,Size,Stream,Device,Entry,TimeNs,Result,Reserved\n"
             "7,allocate,0xa000,1048576,0x1,0,cudaMalloc,1000,CUDA_SUCCESS,2097152\n"
             "8,allocate,0xb000,4096,0x5000,0,cudaMallocAsync,3000,CUDA_SUCCESS,2097152\n"
             "7,free,0xa000,1048576,0x1,0,cudaFree,2000,CUDA_SUCCESS,4194304\n"
             "7,allocate failure,(nil),1099511627776,0x1,0,cudaMalloc,4000,CUDA_ERROR_OUT_OF_MEMORY,4194304\n"
             "7,free,0xdead,16,0x1,0,cudaFree,5000,CUDA_SUCCESS,4194304\n");
  // rank1: no Reserved column, two devices, C freed.
  write_file(b.path(),
             "Thread,Action,Pointer,Size,Stream,Device,Entry,TimeNs,Result\n"
             "9,allocate,0xc000,100,0x1,1,cudaMalloc,1500,CUDA_SUCCESS\n"
             "9,allocate,0xd000,200,0x1,0,cudaMalloc,1600,CUDA_SUCCESS\n"
             "9,free,0xc000,100,0x1,1,cudaFree,6000,CUDA_SUCCESS\n"
             "9,free,0xd000,200,0x1,0,cudaFree,6500,CUDA_SUCCESS\n");
  json_value const root = run_trace(a.path() + " " + b.path(), a);
  trace_facts const f = check_trace(root);
  EXPECT_EQ(root["otherData"]["origin_ns"].text, "1000");
  EXPECT_EQ(f.named_processes, (std::set<std::int64_t>{1, 2}));
  ASSERT_EQ(f.slices.size(), 4u);  // A, B, C, D

  // B is still live: closed at the last timestamp (6500 ns - 1000 = 5.5 us), marked.
  int still_live = 0;
  for (auto const& [id, s] : f.slices) {
    auto const& args = (*s.end)["args"];
    if (!args.has("still_live_at_end")) continue;
    ++still_live;
    EXPECT_EQ((*s.begin)["args"]["pointer"].text, "0xb000");
    EXPECT_EQ((*s.begin)["args"]["size"].text, "4096");
    EXPECT_EQ((*s.end)["ts"].text, "5.500");
    EXPECT_FALSE(args.has("log_incomplete"));
  }
  EXPECT_EQ(still_live, 1);

  // Counters: live per device, reserved only for the log that has it.
  auto const live0 = f.counters.at({1, "device 0 live"});
  ASSERT_EQ(live0.size(), 3u);  // A, B, free A
  EXPECT_EQ(live0.back().second, 4096);
  EXPECT_EQ(live0[2].first, 2.0);  // the free's older time (1 us) held at B's (2 us)
  auto const res0 = f.counters.at({1, "device 0 reserved"});
  ASSERT_EQ(res0.size(), 2u);  // changes only: 2 MiB, then 4 MiB
  EXPECT_EQ(res0.back().second, 4194304);
  EXPECT_EQ(f.counters.count({2, "device 0 reserved"}), 0u);
  EXPECT_EQ(f.counters.at({2, "device 1 live"}).back().second, 0);
  EXPECT_EQ(f.counters.at({2, "device 0 live"}).size(), 2u);

  // Instants: the failure and the unknown free, on rank0's legacy-stream track.
  ASSERT_EQ(f.instants.size(), 2u);
  EXPECT_EQ((*f.instants[0])["name"].text, "allocation failed");
  EXPECT_EQ((*f.instants[0])["args"]["size"].text, "1099511627776");
  EXPECT_EQ((*f.instants[0])["args"]["result"].text, "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ((*f.instants[1])["name"].text, "free of unknown pointer");
  EXPECT_EQ((*f.instants[1])["pid"].number, 1.0);
}

// The trace shows device memory: managed rows, their cudaFree included (known by its
// pointer), make no slice, counter point or "free of unknown pointer".
TEST(Trace, ManagedMemoryIsNotInTheTrace) {
  temp_file tmp;
  write_file(tmp.path(), gpumem::test::gpumem_log{}
                             .alloc(0xa000, 64, 1000)
                             .managed_alloc(0x7000, 4096, 2000)
                             .free(0x7000, 4096, 3000)
                             .free(0xa000, 64, 4000)
                             .text());
  json_value const root = run_trace(tmp.path(), tmp);  // the facts point into it
  trace_facts const f = check_trace(root);
  ASSERT_EQ(f.slices.size(), 1u);
  EXPECT_EQ((*f.slices.begin()->second.begin)["args"]["pointer"].text, "0xa000");
  EXPECT_TRUE(f.instants.empty());
  auto const live = f.counters.at({1, "device 0 live"});
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].second, 64);
  EXPECT_EQ(live[1].second, 0);
}

TEST(Trace, StillLiveSlicesOfAnIncompleteLogAreMarked) {
  temp_file tmp;
  write_file(tmp.path(),
             "Action,Pointer,Size,TimeNs\nallocate,0x100,64,10\n"
             "#gpumem incomplete,dropped_rows=2,reason=disk full\n");
  json_value const root = run_trace(tmp.path(), tmp);
  trace_facts const f = check_trace(root);
  ASSERT_EQ(f.slices.size(), 1u);
  auto const& args = (*f.slices.begin()->second.end)["args"];
  EXPECT_TRUE(args["still_live_at_end"].boolean);
  EXPECT_TRUE(args["log_incomplete"].boolean);
}

TEST(Trace, ASyntheticLogOfManyRowsGivesOneClosedSlicePerAllocation) {
  temp_file tmp;
  gpumem::test::synthetic_log_shape shape;
  shape.rows = 40'000;
  gpumem::test::synthetic_log_facts facts;
  {
    std::FILE* f = std::fopen(tmp.path().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(gpumem::test::synthetic_log_writer::write(f, shape, &facts));
    ASSERT_EQ(std::fclose(f), 0);
  }
  json_value const root = run_trace(tmp.path(), tmp);
  trace_facts const f = check_trace(root);
  EXPECT_EQ(f.slices.size(), facts.allocations);
  EXPECT_EQ(f.instants.size(), facts.failures);
  std::size_t still_live = 0;
  for (auto const& [id, s] : f.slices) still_live += s.end != nullptr && (*s.end)["args"].has("still_live_at_end");
  EXPECT_EQ(still_live, facts.leaked);
  EXPECT_EQ(f.counters.at({1, "device 0 live"}).back().second, static_cast<std::int64_t>(facts.live_at_end));
  EXPECT_EQ(f.counters.at({1, "device 0 reserved"}).back().second, static_cast<std::int64_t>(facts.peak_reserved));
}

TEST(Trace, AnUnwritableTraceIsAnErrorNamingTheFile) {
  temp_file tmp;
  write_file(tmp.path(), "Action,Pointer,Size,TimeNs\nallocate,0x100,64,10\n");
  auto const full = run_command(report(tmp.path() + " --trace /dev/full"), tmp.path());
  EXPECT_EQ(full.status, 1);
  EXPECT_EQ(full.err, "gpumem-report: cannot write /dev/full: No space left on device\n");
  auto const dir = run_command(report(tmp.path() + " --trace " + tmp.dir() + "/no/such/dir/t.json"), tmp.path());
  EXPECT_EQ(dir.status, 1);
  EXPECT_EQ(dir.err, "gpumem-report: cannot write " + tmp.dir() + "/no/such/dir/t.json: No such file or directory\n");
  EXPECT_EQ(dir.out, "");  // refused before reading the logs
}
