// Cost of the CSV allocation log (target: at most 100 ns more per
// allocate+free pair, i.e. per two rows, than running without a log).
//
//   format_row     one row formatted into a buffer (no I/O)
//   write          csv_log_writer::write on a fresh file, 1 and 8 threads: the
//                  row queued in the log's journal (a helper thread formats it)
//   clock          one CLOCK_REALTIME read (what a row used to take twice)
//   ticks          one detail::log_ticks() read (cycle counter; a row takes two)
//   row_time       detail::log_row_time(): the end read and the conversion of
//                  both ends to TimeNs and DurationNs
//   event_row      what the shim pays per row: the start and end ticks, the
//                  thread id, the local offset, then write()
//   event_row_queued  the row pushed into the log's journal directly, as the
//                  shim queues it (the start and end
//                  ticks, converted by the formatter): what the calling thread
//                  pays while the helper thread formats the rows beside it
//   event_row_queued_no_helper  the same with no helper thread: the calling
//                  thread's own cost alone, no core reading its records
//
// items_per_second is rows/s over all threads. The file goes to $TMPDIR (or /tmp)
// and is removed after each run. The shim-level cost (cudaMalloc+cudaFree with
// and without GPUMEM_LOG_FILE) is measured by log_shim_pair.
//
//   log_bench [--benchmark_min_time=0.5s]
#include <gpumem/csv_log_writer.hpp>
#include <gpumem/detail/log_clock.hpp>
#include <gpumem/detail/os_thread.hpp>
#include <gpumem/row_journal.hpp>

#include <benchmark/benchmark.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

// With --benchmark_repetitions=N: the least disturbed repetition (shared machines).
double min_of(std::vector<double> const& v) { return *std::min_element(v.begin(), v.end()); }

std::string log_path() {
  char const* dir = std::getenv("TMPDIR");
  return std::string{dir != nullptr && *dir != '\0' ? dir : "/tmp"} + "/gpumem_log_bench.csv";
}

// A typical row: a 1 MiB allocation on the legacy stream, as the shim logs it.
gpumem::log_row sample_row(std::uint64_t i) {
  auto const now = gpumem::detail::realtime_ns();
  return gpumem::log_row{.thread_id = gpumem::detail::os_thread_id(),
                         .time_ns = now,
                         .utc_offset_s = gpumem::detail::local_utc_offset(now),
                         .action = (i & 1) != 0 ? gpumem::log_action::free : gpumem::log_action::allocate,
                         .pointer = std::uintptr_t{0x7f3a40000000} + (i % 4096) * 256,
                         .size = 1 << 20,
                         .stream = 0x1,
                         .device = 0,
                         .entry = "cudaMalloc",
                         .duration_ns = 412 + i % 100,
                         .result = nullptr,
                         .reserved = std::int64_t{3} << 30};
}

void format_row(benchmark::State& state) {
  char buf[gpumem::max_row_bytes];
  auto row = sample_row(0);
  std::uint64_t i = 0;
  for (auto _ : state) {
    row.time_ns += 997;  // a new fraction every row, the same second most rows
    row.duration_ns = 400 + (++i & 63);
    benchmark::DoNotOptimize(gpumem::format_row(buf, row));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(format_row)->ComputeStatistics("min", min_of);

std::unique_ptr<gpumem::csv_log_writer> shared_writer;

void write(benchmark::State& state) {
  if (state.thread_index() == 0) shared_writer = std::make_unique<gpumem::csv_log_writer>(log_path());
  auto row = sample_row(static_cast<std::uint64_t>(state.thread_index()));
  std::uint64_t i = 0;
  for (auto _ : state) {
    row.time_ns += 997;
    row.duration_ns = 400 + (++i & 63);
    shared_writer->write(row);
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    struct stat st {};
    if (::stat(log_path().c_str(), &st) == 0) state.counters["MB"] = static_cast<double>(st.st_size) / 1e6;
    state.counters["dropped"] = static_cast<double>(shared_writer->dropped_rows());
    shared_writer.reset();
    std::remove(log_path().c_str());
  }
}
BENCHMARK(write)->Threads(1)->Threads(8)->UseRealTime()->ComputeStatistics("min", min_of);

void clock(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(gpumem::detail::realtime_ns());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(clock);

void ticks(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(gpumem::detail::log_ticks());
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(gpumem::detail::log_tick_source() == gpumem::detail::tick_source::cycle_counter ? "cycle counter"
                                                                                                 : "CLOCK_MONOTONIC");
}
BENCHMARK(ticks);

void row_time(benchmark::State& state) {
  for (auto _ : state) {
    auto const start = gpumem::detail::log_ticks();
    benchmark::DoNotOptimize(gpumem::detail::log_row_time(start, gpumem::detail::log_ticks()));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(row_time);

/// One row as the shim makes it: the start and end ticks, the thread id, the local
/// offset, then write().
void write_event_row(gpumem::log_row& row) {
  auto const start = gpumem::detail::log_ticks();
  auto const when = gpumem::detail::log_row_time(start, gpumem::detail::log_ticks());
  row.thread_id = gpumem::detail::os_thread_id();
  row.time_ns = when.start_ns;
  row.utc_offset_s = gpumem::detail::local_utc_offset(when.start_ns);
  row.duration_ns = when.duration_ns;
  shared_writer->write(row);
}

void event_row(benchmark::State& state) {
  if (state.thread_index() == 0) shared_writer = std::make_unique<gpumem::csv_log_writer>(log_path());
  auto row = sample_row(static_cast<std::uint64_t>(state.thread_index()));
  for (auto _ : state) write_event_row(row);
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    shared_writer.reset();
    std::remove(log_path().c_str());
  }
}
BENCHMARK(event_row)->Threads(1)->Threads(8)->UseRealTime()->ComputeStatistics("min", min_of);

// Queued rows: fewer rows than the ring holds, so the calling thread never
// formats one itself; what is left queued is formatted after the clock stops.
void queued_rows(benchmark::State& state, bool with_helper) {
  gpumem::row_journal::hold_rows_for_testing(!with_helper);
  shared_writer = std::make_unique<gpumem::csv_log_writer>(log_path());
  gpumem::row_journal::hold_rows_for_testing(false);
  gpumem::row_journal* const journal = shared_writer->journal();
  auto row = sample_row(0);
  usleep(10000);
  for (auto _ : state) {  // as the shim queues a row: the two counter values, no conversion
    auto const start = gpumem::detail::log_ticks();
    row.thread_id = gpumem::detail::os_thread_id();
    if (!journal->push(row, start, gpumem::detail::log_ticks())) shared_writer->write(row);
  }
  state.SetItemsProcessed(state.iterations());
  shared_writer.reset();
  std::remove(log_path().c_str());
}

constexpr auto queued_iterations = static_cast<benchmark::IterationCount>(gpumem::row_journal::ring_slots * 7 / 8);

void event_row_queued(benchmark::State& state) { queued_rows(state, true); }
BENCHMARK(event_row_queued)->Iterations(queued_iterations)->ComputeStatistics("min", min_of);

void event_row_queued_no_helper(benchmark::State& state) { queued_rows(state, false); }
BENCHMARK(event_row_queued_no_helper)->Iterations(queued_iterations)->ComputeStatistics("min", min_of);

}  // namespace

BENCHMARK_MAIN();
