// gpumem-report and gpumem-replay on a 5-million-row log (about 600 MB) with
// memory bounded by the allocations live at a time, not by the rows: each tool's
// peak resident memory must stay under 300 MB (the whole log in memory took
// 1.34 GB). The log is generated on the fly into a pipe that is the tool's
// standard input, so nothing is written to disk and the tools must stream it.
// Nothing here is timed: docs/benchmarks.md has the times.
#include "support/temp_file.hpp"
#include "tools/json_value.hpp"
#include "tools/synthetic_log.hpp"
#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>
#include <string>
#include <vector>

using gpumem::test::parse_json;
using gpumem::test::read_file;
using gpumem::test::temp_file;

namespace {

constexpr long max_rss_kib = 300 * 1024;
constexpr std::uint64_t rows = 5'000'000;

struct child_result {
  int status = -1;
  long max_rss_kib = 0;
  bool input_complete = false;
  std::string out, err;
};

/// Runs `argv` with what `write` writes into its standard input, and its own peak
/// resident memory (wait4's ru_maxrss: across its exec() too). `write` returns
/// false if the tool stopped reading.
child_result run_with_input(std::vector<std::string> const& argv, std::function<bool(std::FILE*)> const& write,
                            temp_file const& tmp) {
  child_result r;
  std::string const out_path = tmp.dir() + "/out", err_path = tmp.dir() + "/err";
  int fds[2];
  if (::pipe(fds) != 0) return r;
  pid_t const pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[0], STDIN_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    int const out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int const err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    std::vector<char*> args;
    for (auto const& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[0]);
  std::signal(SIGPIPE, SIG_IGN);  // a tool that quits early must fail the test, not kill it
  std::FILE* in = ::fdopen(fds[1], "wb");
  r.input_complete = write(in);
  r.input_complete = std::fclose(in) == 0 && r.input_complete;
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.max_rss_kib = usage.ru_maxrss;
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

/// run_with_input with a synthetic log of `shape`, which the tool must read whole.
child_result run_on_generated_log(std::vector<std::string> const& argv, gpumem::test::synthetic_log_shape const& shape,
                                  gpumem::test::synthetic_log_facts& facts, temp_file const& tmp) {
  auto r = run_with_input(
      argv, [&](std::FILE* f) { return gpumem::test::synthetic_log_writer::write(f, shape, &facts); }, tmp);
  EXPECT_TRUE(r.input_complete) << "the tool stopped reading its input";
  return r;
}

gpumem::test::synthetic_log_shape five_million_rows() {
  gpumem::test::synthetic_log_shape shape;
  shape.rows = rows;
  return shape;
}

}  // namespace

TEST(Scale, ReportStreamsFiveMillionRowsInBoundedMemory) {
  temp_file tmp;
  gpumem::test::synthetic_log_facts facts;
  auto const r = run_on_generated_log({GPUMEM_REPORT_BIN, "-", "--json"}, five_million_rows(), facts, tmp);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_LT(r.max_rss_kib, max_rss_kib) << "gpumem-report peaked at " << r.max_rss_kib / 1024 << " MiB";
  RecordProperty("report_max_rss_kib", static_cast<int>(r.max_rss_kib));
  auto const json = parse_json(r.out);
  auto const& log = json["logs"][0];
  EXPECT_EQ(log["events"].text, std::to_string(facts.rows));
  EXPECT_EQ(log["allocations"].text, std::to_string(facts.allocations));
  EXPECT_EQ(log["frees"].text, std::to_string(facts.frees));
  EXPECT_EQ(log["failures"].text, std::to_string(facts.failures));
  EXPECT_EQ(log["peak_live_bytes"].text, std::to_string(facts.peak_live));
  EXPECT_EQ(log["peak_reserved_bytes"].text, std::to_string(facts.peak_reserved));
  EXPECT_EQ(log["live_at_end_bytes"].text, std::to_string(facts.live_at_end));
  EXPECT_EQ(log["live_at_end_count"].text, std::to_string(facts.leaked));
  EXPECT_LE(log["timeline"].items.size(), 6u * 1024u);
}

TEST(Scale, ReplayStreamsFiveMillionRowsInBoundedMemory) {
  // The four built-in chains side by side; --device-memory, as a pipe cannot be
  // read twice (a first pass would size the device from the log's peak).
  temp_file tmp;
  gpumem::test::synthetic_log_facts facts;
  auto const r = run_on_generated_log({GPUMEM_REPLAY_BIN, "-", "--device-memory", "4GiB", "--csv"}, five_million_rows(),
                                      facts, tmp);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_LT(r.max_rss_kib, max_rss_kib) << "gpumem-replay peaked at " << r.max_rss_kib / 1024 << " MiB";
  RecordProperty("replay_max_rss_kib", static_cast<int>(r.max_rss_kib));
  // Every chain sees the log's own peak live; only the 96 GiB requests fail.
  std::size_t rows_seen = 0;
  for (char const* name : {"\ndefault,", "\npool,", "\nbinning,", "\ncuda,"}) {
    auto const at = r.out.find(name);
    ASSERT_NE(at, std::string::npos) << name << " missing in\n" << r.out;
    std::string const row = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
    EXPECT_NE(row.find("," + std::to_string(facts.peak_live) + ","), std::string::npos) << row;
    EXPECT_NE(row.find("," + std::to_string(facts.failures) + ","), std::string::npos) << row;
    EXPECT_EQ(row.back(), ',') << "error column set: " << row;
    ++rows_seen;
  }
  EXPECT_EQ(rows_seen, 4u);
}

TEST(Scale, BinaryGarbageIsRefusedWithoutBeingHeld) {
  // 256 MiB of pseudo-random bytes (NULs and newlines included) on standard input:
  // an unusable header ends the reading at once, with nothing held.
  temp_file tmp;
  auto const r = run_with_input(
      {GPUMEM_REPORT_BIN, "-"},
      [](std::FILE* f) {
        std::vector<std::uint64_t> block(1 << 16);
        std::uint64_t x = 0x9E3779B97F4A7C15ull;
        for (int i = 0; i < 512; ++i) {
          for (auto& w : block) w = (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 7;
          if (std::fwrite(block.data(), sizeof(std::uint64_t), block.size(), f) != block.size()) return false;
        }
        return true;
      },
      tmp);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("(standard input):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpumem-report: no log could be read"), std::string::npos) << r.err;
  EXPECT_LT(r.max_rss_kib, 50 * 1024) << "gpumem-report peaked at " << r.max_rss_kib / 1024 << " MiB";
}
