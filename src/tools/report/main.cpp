// gpumem-report LOG|SNAPSHOT.json... [--json] [--html FILE] [--trace FILE] [--top N]
//
// Summarises gpumem / RMM allocation logs, reading them in one pass with memory
// bounded by the allocations live at a time. Damaged lines are reported on stderr
// as file:line: problem and skipped. Exit status: 0 when at least one log was
// reported (warnings or not), 1 when an output could not be written, 2 when no log
// could be read or the command line is wrong.
#include "report.hpp"
#include "trace_writer.hpp"

#include "command_line.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace gpumem::tools;

constexpr int exit_ok = 0;
constexpr int exit_write_failed = 1;

struct options {
  std::vector<std::string> logs;
  std::string html, trace;
  std::string perf_map_dir = "/tmp";
  std::size_t top_n = 10;
  bool json = false;
};

options parse_args(int argc, char** argv) {
  options o;
  CLI::App app{
      "Summarises GPU allocation logs written by the gpumem shim or by RMM's logging_resource_adaptor: "
      "peak live and reserved bytes, allocations never freed, failures, sizes, threads and streams.",
      "gpumem-report"};
  app.add_option("LOG", o.logs,
                 "CSV allocation log ('-': standard input); several logs = ranks of one job. A log's stack table "
                 "(LOG.stacks, --stacks) names its call sites; its out-of-memory snapshots (LOG.oom-N.json) are "
                 "printed too, and a .json file given here is read as such a snapshot")
      ->required();
  app.add_option("--perf-map-dir", o.perf_map_dir,
                 "where the perf-<pid>.map files that name Python and other generated code are (default /tmp; "
                 "python -X perf writes them)")
      ->type_name("DIR");
  app.add_flag("--json", o.json, "print JSON instead of text");
  app.add_option("--html", o.html, "also write a self-contained HTML page (summary, timeline, histogram, tables)")
      ->type_name("FILE");
  // The PNG timeline is no more: a clear error rather than "unknown option" for the
  // scripts that still pass it. Hidden from --help.
  std::string png;
  app.add_option("--png", png)->type_name("FILE")->group("");
  app.add_option("--trace", o.trace,
                 "also write a Chrome trace-event file (JSON) for Perfetto or chrome://tracing: live and reserved "
                 "bytes as counters, each allocation as a slice on its stream, failures as instants")
      ->type_name("FILE");
  app.add_option("--top", o.top_n,
                 "rows in the never-freed, largest, failure and unknown-free tables (0 to 100000; default 10)")
      ->type_name("N")
      ->check(CLI::Range(std::size_t{0}, std::size_t{100000}).description(""));
  app.footer(
      "Exit status: 0 reported, 1 an output could not be written, 2 no log could be read or a bad command "
      "line.");
  parse_command_line(app, argc, argv);
  if (app.count("--png") != 0) {
    fmt::print(stderr,
               "gpumem-report: --png was removed: the timeline is in the --html FILE page (SVG) and in the "
               "--trace FILE (Perfetto)\n");
    std::exit(exit_usage);
  }
  return o;
}

/// An output file opened before the (possibly long) pass, so an unwritable path
/// is reported at once; removed again if no report is made.
class output_file {
 public:
  explicit output_file(std::string path) : path_{std::move(path)} {
    if (path_.empty()) return;
    f_ = std::fopen(path_.c_str(), "wb");
    if (f_ == nullptr) error_ = errno;
  }
  ~output_file() {
    if (f_ != nullptr) std::fclose(f_);
  }
  output_file(output_file const&) = delete;
  output_file& operator=(output_file const&) = delete;

  [[nodiscard]] bool wanted() const noexcept { return !path_.empty(); }
  [[nodiscard]] bool open_failed() const noexcept { return wanted() && f_ == nullptr; }
  [[nodiscard]] std::FILE* get() const noexcept { return f_; }

  /// Writes `data` (if any) and closes; false (with a message naming the file) on failure.
  bool finish(std::string const& data, int earlier_error = 0) {
    if (f_ == nullptr) return report(error_);
    if (earlier_error == 0 && !data.empty() && std::fwrite(data.data(), 1, data.size(), f_) != data.size()) {
      earlier_error = errno;
    }
    if (earlier_error == 0 && std::fflush(f_) != 0) earlier_error = errno;
    if (std::fclose(f_) != 0 && earlier_error == 0) earlier_error = errno;
    f_ = nullptr;
    return earlier_error == 0 || report(earlier_error);
  }
  void remove() {
    if (f_ == nullptr) return;
    std::fclose(f_);
    f_ = nullptr;
    ::unlink(path_.c_str());
  }
  bool report(int error) const {
    fmt::print(stderr, "gpumem-report: cannot write {}: {}\n", escape_text(path_),
               std::strerror(error != 0 ? error : EIO));
    return false;
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  int error_ = 0;
};

/// Standard output, checked: a full disk or closed pipe is an error, not a lost report.
bool write_stdout(std::string const& body) {
  errno = 0;
  bool ok = std::fwrite(body.data(), 1, body.size(), stdout) == body.size();
  ok = std::fflush(stdout) == 0 && ok && !std::ferror(stdout);
  if (!ok) {
    fmt::print(stderr, "gpumem-report: cannot write the report to standard output: {}\n",
               std::strerror(errno != 0 ? errno : EIO));
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) try {
  options const opts = parse_args(argc, argv);

  output_file html{opts.html}, trace{opts.trace};
  bool outputs_ok = true;
  for (output_file* f : {&html, &trace}) {
    if (f->open_failed()) outputs_ok = f->finish({}) && outputs_ok;
  }
  if (!outputs_ok) return exit_write_failed;

  std::optional<trace_writer> tracer;
  if (trace.wanted()) tracer.emplace(trace.get());
  auto const report = analyse_logs(opts.logs, opts.top_n, tracer ? &*tracer : nullptr, opts.perf_map_dir);

  for (auto const& s : report.logs) {
    print_warnings(s);
    if (!s.complete()) {
      fmt::print(stderr, "warning: {} is incomplete: {}; no allocation in it is called a leak\n", escape_text(s.path),
                 escape_text(incomplete_reason(*s.incomplete)));
    }
  }
  for (std::size_t i = 0; i < report.sites.size(); ++i) {
    if (!report.sites[i]) continue;
    for (auto const& w : report.sites[i]->warnings) fmt::print(stderr, "warning: {}\n", escape_text(w.text()));
  }
  for (auto const& u : report.unreadable) fmt::print(stderr, "error: {}\n", escape_text(u.text()));
  for (auto const& u : report.snapshot_errors) fmt::print(stderr, "error: {}\n", escape_text(u.text()));
  if (report.logs.empty() && report.snapshots.empty()) {
    fmt::print(stderr, "gpumem-report: no log could be read\n");
    for (output_file* f : {&html, &trace}) f->remove();
    return exit_usage;
  }

  int status = exit_ok;
  if (!write_stdout(opts.json ? json_report(report) : text_report(report))) status = exit_write_failed;
  if (html.wanted() && !html.finish(html_report(report))) status = exit_write_failed;
  if (trace.wanted() && !trace.finish({}, tracer->error())) status = exit_write_failed;
  return status;
} catch (std::exception const& e) {
  // Unexpected (out of memory, say): a message and a failure status, not std::terminate.
  std::fprintf(stderr, "gpumem-report: %s\n", e.what());
  return exit_write_failed;
}
