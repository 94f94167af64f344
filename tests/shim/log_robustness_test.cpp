// The allocation log never harms the program it records: several processes on one
// log path, the log truncated while the program runs, a full disk (RLIMIT_FSIZE),
// unusable log paths, an unwritable report file, the Reserved and DurationNs columns. Each
// case runs a real program under the shim on the simulated device.
#include "shim_process.hpp"
#include "support/csv_log_reader.hpp"
#include "support/temp_file.hpp"

#include <gpumem/csv_log_writer.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gpumem::test {
namespace {

std::size_t count(std::string const& text, std::string const& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/// "dropped_rows=N" of an incompleteness marker; -1 if `line` is none.
long long marker_dropped(std::string const& line) {
  if (!line.starts_with(csv_log_incomplete_prefix)) return -1;
  auto const at = line.find("dropped_rows=");
  return at == std::string::npos ? -1 : std::stoll(line.substr(at + 13));
}

std::map<std::string, std::string> shim_env(std::string const& log) {
  return {{"LD_PRELOAD", shim_path()}, {"GPUMEM_LOG_FILE", log}};
}

// Starts `processes` copies of "shim_log_app sync <pairs>" on one log path, lets
// them open the log together and keeps them all running until every one has
// logged (ranks of one job overlap). Returns each one's exit code and output.
std::vector<process_result> run_overlapping(int processes, long pairs, std::string const& log) {
  int go[2];
  int logged[2];
  int done[2];
  if (pipe(go) != 0 || pipe(logged) != 0 || pipe(done) != 0) return {};
  auto env = shim_env(log);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string const kv{*e};
    if (!env.contains(kv.substr(0, kv.find('=')))) env_strings.push_back(kv);
  }
  for (auto const& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string prog = program("shim_log_app");
  std::string mode = "sync";
  std::string count_arg = std::to_string(pairs);
  char* argv[] = {prog.data(), mode.data(), count_arg.data(), nullptr};

  // Output to files, not pipes: nobody reads until all have finished.
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < processes; ++p) {
    FILE* out_file = std::tmpfile();
    if (out_file == nullptr) break;
    int const out = dup(fileno(out_file));
    std::fclose(out_file);
    pid_t const pid = fork();
    if (pid == 0) {
      // Out of the way first (a pipe may sit on 3..5), then into place.
      int const moved[4] = {fcntl(out, F_DUPFD, 20), fcntl(go[0], F_DUPFD, 20), fcntl(logged[1], F_DUPFD, 20),
                            fcntl(done[0], F_DUPFD, 20)};
      for (int fd : {out, go[0], go[1], logged[0], logged[1], done[0], done[1]}) close(fd);
      dup2(moved[0], 1);
      dup2(moved[0], 2);
      dup2(moved[1], 3);
      dup2(moved[2], 4);
      dup2(moved[3], 5);
      for (int fd : moved) close(fd);
      execve(argv[0], argv, envp.data());
      _exit(127);
    }
    children.emplace_back(pid, out);
  }
  close(go[0]);
  close(logged[1]);
  close(done[0]);
  for (std::size_t i = 0; i < children.size(); ++i) (void)!write(go[1], "g", 1);
  close(go[1]);
  // Wait until every child has logged or died (a dead one never writes; the
  // others keep the pipe open, so EOF would never come).
  std::map<pid_t, int> statuses;
  std::size_t logged_count = 0;
  while (logged_count + statuses.size() < children.size()) {
    pollfd p{logged[0], POLLIN, 0};
    if (poll(&p, 1, 100) == 1) {
      char c = 0;
      if (read(logged[0], &c, 1) == 1) ++logged_count;
    }
    for (auto [pid, fd] : children) {
      int status = 0;
      if (!statuses.contains(pid) && waitpid(pid, &status, WNOHANG) == pid) statuses[pid] = status;
    }
  }
  close(logged[0]);
  close(done[1]);  // EOF on fd 5: all exit
  std::vector<process_result> results;
  for (auto [pid, fd] : children) {
    process_result r;
    int status = 0;
    if (auto const it = statuses.find(pid); it != statuses.end()) {
      status = it->second;
    } else {
      waitpid(pid, &status, 0);
    }
    char buf[4096];
    for (ssize_t n, at = 0; (n = pread(fd, buf, sizeof buf, at)) > 0; at += n) {
      r.output.append(buf, static_cast<std::size_t>(n));
    }
    close(fd);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    results.push_back(std::move(r));
  }
  return results;
}

// torchrun with one --log for four ranks, or two jobs given the same name, three
// times: nobody dies; each process's rows are complete in a well-formed file of
// its own, and each process that moved says where.
TEST(ShimLog, ProcessesSharingOneLogPathNeverDieAndEachKeepsItsRows) {
  constexpr int processes = 4;
  constexpr long pairs = 1500;
  for (int run = 0; run < 3; ++run) {
    temp_file tmp{"alloc.csv"};
    auto const results = run_overlapping(processes, pairs, tmp.path());
    ASSERT_EQ(results.size(), static_cast<std::size_t>(processes));
    int moved = 0;
    std::set<std::string> named_files{tmp.path()};
    for (auto const& r : results) {
      EXPECT_EQ(r.exit_code, 0) << "run " << run << ":\n" << r.output;
      EXPECT_NE(r.output.find("PASS sync"), std::string::npos) << r.output;
      auto const at = r.output.find("is in use by another process; this process (pid ");
      if (at == std::string::npos) continue;
      ++moved;
      EXPECT_NE(r.output.find("gpumem: the allocation log '" + tmp.path() + "' is in use"), std::string::npos)
          << r.output;
      auto const to = r.output.find("logs to '", at);
      ASSERT_NE(to, std::string::npos) << r.output;
      named_files.insert(r.output.substr(to + 9, r.output.find('\'', to + 9) - to - 9));
    }
    EXPECT_EQ(moved, processes - 1) << "run " << run;
    std::set<std::string> files;
    std::set<std::string> writers;
    for (auto const& e : std::filesystem::directory_iterator{tmp.dir()}) {
      files.insert(e.path().string());
      auto const log = read_csv_log(e.path().string());
      EXPECT_EQ(log.header + "\n", csv_log_header) << e.path();
      EXPECT_EQ(log.nul_bytes, 0U) << e.path();
      EXPECT_EQ(log.bad_lines, 0U) << e.path();
      EXPECT_TRUE(log.metadata.empty()) << e.path();
      ASSERT_EQ(log.rows.size(), static_cast<std::size_t>(2 * pairs)) << e.path();
      std::set<std::string> threads;
      for (std::size_t i = 0; i < log.rows.size(); ++i) {
        threads.insert(log.rows[i][0]);
        EXPECT_EQ(log.rows[i][2], i % 2 == 0 ? "allocate" : "free") << e.path() << " row " << i;
      }
      EXPECT_EQ(threads.size(), 1U) << e.path();  // one process per file (its main thread)
      writers.insert(threads.begin(), threads.end());
    }
    EXPECT_EQ(files, named_files);  // every file is one the warnings named (no journal is left)
    EXPECT_EQ(writers.size(), static_cast<std::size_t>(processes));
  }
}

// ": > alloc.csv" (or logrotate's copytruncate) while the program runs: it goes
// on, the log starts again with its header, and every later row is there.
TEST(ShimLog, TruncatedWhileRunningTheProgramGoesOnAndLaterRowsAreKept) {
  temp_file tmp{"alloc.csv"};
  constexpr long pairs = 4000;
  auto const r = run_process({program("shim_log_app"), "truncate", std::to_string(pairs), tmp.path()},
                             shim_env(tmp.path()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS truncate"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "gpumem: the allocation log '" + tmp.path() +
                                "' was truncated by another program while in use (to 0 bytes): its earlier rows "
                                "are gone"),
            1U)
      << r.output;
  EXPECT_EQ(count(r.output, "gpumem: the allocation log '" + tmp.path() +
                                "' is incomplete (truncated by another program while in use): 0 rows dropped"),
            1U)
      << r.output;
  auto const log = read_csv_log(tmp.path());
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(log.nul_bytes, 0U);
  EXPECT_EQ(log.bad_lines, 0U);
  // The second half's rows, all of them; rows of the first half still queued when
  // the file was cut reach the file after it, and are kept too.
  auto const after = static_cast<std::size_t>(2 * (pairs - pairs / 2));
  EXPECT_GE(log.rows.size(), after);
  EXPECT_LE(log.rows.size(), static_cast<std::size_t>(2 * pairs));
  ASSERT_FALSE(log.metadata.empty());
  EXPECT_EQ(log.last_line, log.metadata.back());
  EXPECT_EQ(marker_dropped(log.last_line), 0) << log.last_line;
  EXPECT_NE(log.last_line.find("reason=truncated by another program while in use"), std::string::npos);
}

// The log's folder deleted while the program runs: the rows written from then on
// reach no file anyone can read. Said once when it is found, and their count at exit.
TEST(ShimLog, DeletedWithItsFolderIsSaidOnceAndTheLostRowsCountedAtExit) {
  std::string const dir = ::testing::TempDir() + "gpumem-gone-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  std::string const log = dir + "/alloc.csv";
  constexpr long pairs = 4000;
  auto const r = run_process({program("shim_log_app"), "gone", std::to_string(pairs), log}, shim_env(log));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS gone"), std::string::npos) << r.output;
  std::string const said = "gpumem: the allocation log '" + log + "' was deleted while in use";
  EXPECT_EQ(count(r.output, said + ": rows are lost from now on"), 1U) << r.output;
  auto const at = r.output.find(said + ": ", r.output.find(said) + said.size());
  ASSERT_NE(at, std::string::npos) << r.output;
  long long const lost = std::stoll(r.output.substr(at + said.size() + 2));
  EXPECT_GE(lost, 2 * (pairs - pairs / 2)) << r.output;  // every row of the second half
  EXPECT_LE(lost, 2 * pairs) << r.output;
  EXPECT_NE(r.output.find(std::to_string(lost) + " rows lost"), std::string::npos) << r.output;
}

/// `key`'s number in gpumem-report's JSON (its first occurrence); -1 if absent.
long long json_number(std::string const& json, std::string const& key) {
  auto const at = json.find("\"" + key + "\":");
  return at == std::string::npos ? -1 : std::stoll(json.substr(at + key.size() + 3));
}

/// The value of column `name` in the first data row of gpumem-replay's --csv output.
std::string replay_column(std::string const& csv, std::string const& name) {
  std::istringstream in{csv};
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  std::istringstream h{header}, v{row};
  std::string col, val;
  while (std::getline(h, col, ',') && std::getline(v, val, ',')) {
    if (col == name) return val;
  }
  return "";
}

/// shim_log_app `scenario` under the shim with a log, then gpumem-report --json and
/// gpumem-replay --csv on that log: {app, report, replay}.
std::array<process_result, 3> run_and_read_back(std::string const& scenario, temp_file const& tmp) {
  auto app = run_process({program("shim_log_app"), scenario}, shim_env(tmp.path()));
  auto report = run_process({build_dir() + "/bin/gpumem-report", "--json", tmp.path()}, {});
  auto replay = run_process({build_dir() + "/bin/gpumem-replay", "--csv", tmp.path()}, {});
  return {app, report, replay};
}

// cudaDeviceReset releases what the program still holds: the log has a free row
// for each, so the tools end with what the shim ends with (nothing live) and see
// the program's real peak (5 MiB), not the 5 MiB added to what came after.
TEST(ShimLog, ADeviceResetLogsAFreeForEverythingItReleased) {
  temp_file tmp{"reset.csv"};
  auto const [app, report, replay] = run_and_read_back("reset", tmp);
  ASSERT_EQ(app.exit_code, 0) << app.output;
  EXPECT_NE(app.output.find("PASS reset"), std::string::npos) << app.output;
  auto stats = parse_stats(app.output);
  EXPECT_EQ(stats["live"], 0);
  auto const log = read_csv_log(tmp.path());
  std::size_t reset_rows = 0;
  for (auto const& row : log.rows) {
    reset_rows += row.at(column_index(log_column::action)) == "free" &&
                  row.at(column_index(log_column::entry)) == "cudaDeviceReset";
  }
  EXPECT_EQ(reset_rows, 5U);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_EQ(json_number(report.output, "live_at_end_bytes"), 0) << report.output;
  EXPECT_EQ(json_number(report.output, "peak_live_bytes"), 5 << 20) << report.output;
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  EXPECT_EQ(replay_column(replay.output, "peak_live_bytes"), std::to_string(5 << 20)) << replay.output;
  EXPECT_EQ(replay_column(replay.output, "skipped_frees"), "0") << replay.output;
}

// A cudaFree CUDA refuses (during a stream capture) is logged with its result and
// frees nothing: the tools keep the block live, and its later real free is no
// free of an unknown pointer.
TEST(ShimLog, AFreeCudaRefusedLeavesTheBlockLiveForTheTools) {
  temp_file tmp{"refused.csv"};
  auto const [app, report, replay] = run_and_read_back("refused-free", tmp);
  ASSERT_EQ(app.exit_code, 0) << app.output;
  EXPECT_NE(app.output.find("PASS refused-free"), std::string::npos) << app.output;
  auto const log = read_csv_log(tmp.path());
  std::size_t refused_rows = 0;
  for (auto const& row : log.rows) {
    refused_rows += row.at(column_index(log_column::action)) == "free" &&
                    row.at(column_index(log_column::result)) == "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
  }
  EXPECT_EQ(refused_rows, 1U);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_EQ(json_number(report.output, "unknown_free_count"), 0) << report.output;
  EXPECT_EQ(json_number(report.output, "live_at_end_bytes"), 0) << report.output;
  EXPECT_EQ(json_number(report.output, "peak_live_bytes"), 2 << 20) << report.output;
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  EXPECT_EQ(replay_column(replay.output, "peak_live_bytes"), std::to_string(2 << 20)) << replay.output;
  EXPECT_EQ(replay_column(replay.output, "skipped_frees"), "0") << replay.output;
}

// A full disk, as RLIMIT_FSIZE (the same failure, no mount needed). The 4 MiB
// journal does not fit under the limit: it is refused (never SIGXFSZ), the rows
// are written directly, and the log stops at the limit, its lost rows counted.
TEST(ShimLog, DiskFullIsReportedOnceCountedAtExitAndMarkedInTheLog) {
  temp_file tmp{"alloc.csv"};
  constexpr long limit = 64 << 10;
  constexpr long pairs = 3000;  // ~700 KB of rows
  auto const r = run_process({program("shim_log_app"), "fsize", std::to_string(limit), std::to_string(pairs)},
                             shim_env(tmp.path()));
  EXPECT_EQ(count(r.output, "gpumem: cannot allocate the log's journal '" + tmp.path() +
                                ".journal': File too large; rows are written directly"),
            1U)
      << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS fsize"), std::string::npos) << r.output;
  struct stat st {};
  ASSERT_EQ(stat(tmp.path().c_str(), &st), 0);
  EXPECT_LE(st.st_size, limit);
  auto const log = read_csv_log(tmp.path());
  EXPECT_EQ(log.nul_bytes, 0U);
  EXPECT_EQ(log.bad_lines, 0U);
  EXPECT_GT(log.rows.size(), 300U);
  auto const dropped = static_cast<std::size_t>(2 * pairs) - log.rows.size();
  EXPECT_EQ(log.last_line, "#gpumem incomplete,dropped_rows=" + std::to_string(dropped) + ",reason=File too large");
  EXPECT_EQ(count(r.output, "gpumem: the allocation log '" + tmp.path() +
                                "' cannot grow (File too large): rows are dropped from now on"),
            1U)
      << r.output;
  EXPECT_EQ(count(r.output, "gpumem: the allocation log '" + tmp.path() + "' is incomplete (File too large): " +
                                std::to_string(dropped) + " rows dropped; its last line says so"),
            1U)
      << r.output;
}

// Rows of a run whose log was emptied half way: the second half's rows are there.
void expect_rows_kept_across_a_cut(std::string const& path, long pairs) {
  auto const log = read_csv_log(path);
  EXPECT_EQ(log.header + "\n", csv_log_header);
  EXPECT_EQ(marker_dropped(log.last_line), 0) << log.last_line;
  EXPECT_GE(log.rows.size(), static_cast<std::size_t>(2 * (pairs - pairs / 2))) << log.last_line;
  EXPECT_LE(log.rows.size(), static_cast<std::size_t>(2 * pairs));
}

// The line "SIGNALS ..." a scenario prints: every signal's action and flags and
// the thread's mask, as the program reads them back at its end.
std::string signals_line(std::string const& output) {
  auto const at = output.find("SIGNALS ");
  return at == std::string::npos ? std::string{} : output.substr(at, output.find('\n', at) - at);
}

// Programs that handle or block SIGBUS (Python's faulthandler, a server's worker
// threads), each emptying the log half way and raising a fault of its own where
// it has a handler: under gpumem every check passes as it does without it, and
// every signal reads back the same. The shim installs no handler and interposes no
// signal call; the log is never mapped, so a truncation faults nowhere.
TEST(ShimLog, SignalsBehaveExactlyAsWithoutGpumem) {
  constexpr long pairs = 2000;
  for (std::string const name : {"own-handler", "blocked"}) {
    auto args = [&](std::string const& cut) {
      return std::vector<std::string>{program("shim_log_app"), name, std::to_string(pairs), cut};
    };
    temp_file plain{"plain.csv"};
    { std::ofstream{plain.path()} << "not a log\n"; }
    auto const without = run_process(args(plain.path()), {});
    ASSERT_EQ(without.exit_code, 0) << name << "\n" << without.output;
    ASSERT_NE(without.output.find("PASS " + name), std::string::npos) << name << "\n" << without.output;

    temp_file tmp{"alloc.csv"};
    auto const with = run_process(args(tmp.path()), shim_env(tmp.path()));
    ASSERT_EQ(with.exit_code, 0) << name << "\n" << with.output;
    EXPECT_NE(with.output.find("PASS " + name), std::string::npos) << name << "\n" << with.output;
    EXPECT_FALSE(signals_line(with.output).empty()) << name << "\n" << with.output;
    EXPECT_EQ(signals_line(with.output), signals_line(without.output)) << name;
    EXPECT_EQ(count(with.output, "was truncated by another program while in use"), 1U) << name << "\n" << with.output;
    expect_rows_kept_across_a_cut(tmp.path(), pairs);
  }
}

// One rule for every log path that cannot be written: a configuration error at
// start naming the key, the path and the reason (exit 1), unless pass-through on
// error was asked for.
TEST(ShimLog, UnusableLogPathsStopTheProgramAtStartNamingKeyPathAndReason) {
  temp_file tmp{"alloc.csv"};
  std::string const long_name(300, 'n');
  std::string const deep = tmp.dir() + "/" + std::string(200, 'd') + "/" + std::string(3000, 'p') + ".csv";
  std::vector<std::pair<std::string, std::string>> const cases = {
      {tmp.dir(), "it is a directory"},
      {"/dev/full", "it is a character device, not a regular file"},
      {tmp.dir() + "/missing/alloc.csv", "folder '" + tmp.dir() + "/missing': No such file or directory"},
      {tmp.dir() + "/" + long_name, "File name too long"},
      {deep, "File name too long"},
  };
  for (auto const& [path, reason] : cases) {
    auto env = shim_env(path);
    auto const r = run_process({program("shim_log_app"), "pairs", "3"}, env);
    EXPECT_EQ(r.exit_code, 1) << path << "\n" << r.output;
    EXPECT_EQ(r.output.find("PASS"), std::string::npos) << r.output;
    std::string const message =
        "gpumem: config error: environment: GPUMEM_LOG_FILE: cannot write the allocation log '" + path + "': " + reason;
    EXPECT_NE(r.output.find(message + "\n"), std::string::npos) << r.output;

    env["GPUMEM_ON_ERROR"] = "passthrough";
    auto const pass = run_process({program("shim_log_app"), "pairs", "3"}, env);
    EXPECT_EQ(pass.exit_code, 0) << pass.output;
    EXPECT_NE(pass.output.find(message + "\n"), std::string::npos) << pass.output;
    EXPECT_NE(pass.output.find("PASS pairs"), std::string::npos) << pass.output;
  }
  // From a file, the key is the file's.
  std::string const config = tmp.dir() + "/gpumem.toml";
  { std::ofstream{config} << "[gpumem]\nlog_file = \"" << tmp.dir() << "\"\n"; }
  auto const r = run_process({program("shim_log_app"), "pairs", "3"},
                             {{"LD_PRELOAD", shim_path()}, {"GPUMEM_CONFIG", config}});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gpumem: config error: " + config + ": log_file: cannot write the allocation log '" +
                          tmp.dir() + "': it is a directory"),
            std::string::npos)
      << r.output;
}

// Reserved: what the device's chain holds from the device after each event.
TEST(ShimLog, ReservedColumnIsWhatTheChainHoldsFromTheDevice) {
  temp_file tmp{"alloc.csv"};
  auto env = shim_env(tmp.path());
  env["GPUMEM_RESOURCE"] = "cuda";  // nothing cached: 4 KiB held while allocated, none after the free
  auto const r = run_process({program("shim_log_app"), "pairs", "5"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto const log = read_csv_log(tmp.path());
  ASSERT_EQ(log.rows.size(), 10U);
  for (std::size_t i = 0; i < log.rows.size(); ++i) {
    EXPECT_EQ(log.rows[i][11], i % 2 == 0 ? "4096" : "0") << "row " << i;
  }
  // The default chain (a pool): what the pool took from the device, at least the
  // allocation, and it stays after the free.
  temp_file pooled{"alloc.csv"};
  auto const p = run_process({program("shim_log_app"), "pairs", "5"}, shim_env(pooled.path()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  auto const plog = read_csv_log(pooled.path());
  ASSERT_EQ(plog.rows.size(), 10U);
  for (auto const& row : plog.rows) {
    ASSERT_FALSE(row[11].empty());
    EXPECT_GE(std::stoull(row[11]), 4096U);
    EXPECT_EQ(row[11], plog.rows[0][11]);
  }
}

// DurationNs: measured (a second clock read) for a call that reached the driver or
// waited, empty for one the pool served from its free lists.
TEST(ShimLog, DurationIsMeasuredOnlyForCallsThatReachedTheDriver) {
  // Every call a driver call: every row timed.
  temp_file tmp{"alloc.csv"};
  auto env = shim_env(tmp.path());
  env["GPUMEM_RESOURCE"] = "cuda";
  auto const r = run_process({program("shim_log_app"), "pairs", "5"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto const log = read_csv_log(tmp.path());
  ASSERT_EQ(log.rows.size(), 10U);
  for (std::size_t i = 0; i < log.rows.size(); ++i) {
    EXPECT_FALSE(log.rows[i][9].empty()) << "row " << i;
    EXPECT_EQ(log.rows[i][9].find_first_not_of("0123456789"), std::string::npos) << "row " << i;
  }
  // The default chain: the first allocation grows the pool (timed); the frees only
  // file the block (safe mode: it waits for a barrier) and the later allocations
  // take fresh memory from the pool, no driver call: not timed.
  temp_file pooled{"alloc.csv"};
  auto const p = run_process({program("shim_log_app"), "pairs", "5"}, shim_env(pooled.path()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  auto const plog = read_csv_log(pooled.path());
  ASSERT_EQ(plog.rows.size(), 10U);
  EXPECT_FALSE(plog.rows[0][9].empty()) << "the growth";
  for (std::size_t i = 1; i < plog.rows.size(); ++i) EXPECT_EQ(plog.rows[i][9], "") << "row " << i;
  // Untimed rows keep their place in time: TimeNs never goes backwards.
  for (std::size_t i = 1; i < plog.rows.size(); ++i) {
    EXPECT_GE(std::stoll(plog.rows[i][8]), std::stoll(plog.rows[i - 1][8])) << "row " << i;
  }
}

// The report at exit: a file that cannot be written is named, with the error,
// and the report is printed here instead of being lost.
TEST(ShimReport, UnwritableReportFileIsNamedWithTheErrorAndPrintedHere) {
  temp_file tmp{"report.txt"};
  std::string const deep = tmp.dir() + "/missing/" + std::string(3000, 'r') + ".txt";
  for (auto const& [path, reason] : {std::pair<std::string, std::string>{"/dev/full", "No space left on device"},
                                     {deep, "No such file or directory"}}) {
    auto const r = run_process({program("shim_log_app"), "pairs", "3"},
                               {{"LD_PRELOAD", shim_path()}, {"GPUMEM_REPORT", "1"}, {"GPUMEM_REPORT_FILE", path}});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(
        r.output.find("gpumem: cannot write the report to '" + path + "': " + reason + "; printing it here instead\n"),
        std::string::npos)
        << r.output.substr(0, 400);
    EXPECT_NE(r.output.find("gpumem report (pid "), std::string::npos) << r.output.substr(0, 400);
  }
}

// Runs "shim_log_app pairs 3" under the shim with `env`, stdout and stderr to
// `out_fd`, or stderr to a pipe whose reader is gone when `stderr_closed_pipe`.
// Killed after 20 s (a hang shows as 128 + SIGKILL). Returns the exit code.
int run_with_streams(std::map<std::string, std::string> const& env, int out_fd, bool stderr_closed_pipe) {
  int gone[2];
  if (pipe(gone) != 0) return -1;
  close(gone[0]);  // no reader: a write raises SIGPIPE (or fails with EPIPE)
  pid_t const pid = fork();
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);
    dup2(out_fd, 1);
    dup2(stderr_closed_pipe ? gone[1] : out_fd, 2);
    for (auto const& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::string prog = program("shim_log_app");
    execl(prog.c_str(), prog.c_str(), "pairs", "3", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(gone[1]);
  int status = 0;
  for (int waited = 0; waitpid(pid, &status, WNOHANG) == 0; ++waited) {
    if (waited == 2000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(10'000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  for (ssize_t n, at = 0; (n = pread(fd, buf, sizeof buf, at)) > 0; at += n)
    text.append(buf, static_cast<std::size_t>(n));
  return text;
}

// `prog 2>&1 | head -1` or a closed log collector: the program itself never
// writes to stderr, so what the shim writes there must not kill it with SIGPIPE
// (nor change its exit status under `set -o pipefail`).
TEST(ShimReport, StderrWithoutAReaderNeverKillsTheProgram) {
  temp_file tmp{"out.txt"};
  int const out = ::open(tmp.path().c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(out, 0);
  int const code = run_with_streams({{"LD_PRELOAD", shim_path()}, {"GPUMEM_REPORT", "1"}}, out, true);
  std::string const text = read_all(out);
  ::close(out);
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("PASS pairs"), std::string::npos) << text;
}

// A FIFO nobody reads yet (mkfifo, or a reader that has not started): opening it
// for writing would wait for a reader forever, at exit. The report is printed
// here instead, with the reason.
TEST(ShimReport, ReportFileAFifoWithoutAReaderNeverHangsTheProgram) {
  temp_file tmp{"out.txt"};
  std::string const fifo = tmp.dir() + "/report.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int const out = ::open(tmp.path().c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(out, 0);
  int const code = run_with_streams({{"LD_PRELOAD", shim_path()}, {"GPUMEM_REPORT", "1"}, {"GPUMEM_REPORT_FILE", fifo}},
                                    out, false);
  std::string const text = read_all(out);
  ::close(out);
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("gpumem: cannot write the report to '" + fifo + "': "), std::string::npos) << text;
  EXPECT_NE(text.find("gpumem report (pid "), std::string::npos) << text;
}

// The stack table beside the log ("<log>.stacks") a FIFO without a reader: the
// program runs on, its stacks are missing (and it says so).
TEST(ShimLog, StackTableAFifoWithoutAReaderNeverHangsTheProgram) {
  temp_file tmp{"alloc.csv"};
  ASSERT_EQ(mkfifo((tmp.path() + ".stacks").c_str(), 0600), 0);
  int const out = ::open((tmp.dir() + "/out.txt").c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(out, 0);
  auto env = shim_env(tmp.path());
  env["GPUMEM_STACKS"] = "1";
  int const code = run_with_streams(env, out, false);
  std::string const text = read_all(out);
  ::close(out);
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("gpumem: cannot write the stack table '" + tmp.path() + ".stacks': "), std::string::npos) << text;
}

}  // namespace
}  // namespace gpumem::test
