// gpumem-report LOG... [--html OUT.html] [--png OUT.png] [--top N] [--json]
//
// Summarises gpumem / RMM allocation logs. Damaged lines are reported on stderr as
// file:line: problem and skipped. Exit status: 0 when at least one log was reported
// (warnings or not), 2 when no log could be read or the command line is wrong,
// 1 when an output file could not be written.
#include "report.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int exit_ok = 0;
constexpr int exit_write_failed = 1;
constexpr int exit_no_log = 2;
constexpr std::size_t warnings_shown_per_log = 20;

constexpr char const* usage =
    "usage: gpumem-report LOG... [--html OUT.html] [--png OUT.png] [--top N] [--json]\n"
    "  LOG          CSV allocation log (gpumem or RMM columns); several logs = ranks of one job\n"
    "  --html FILE  write a self-contained HTML page (summary, timeline, histogram, leaks)\n"
    "  --png FILE   write the live-bytes timeline as a PNG image\n"
    "  --top N      rows in the leak / largest / failure tables (default 10)\n"
    "  --json       print JSON instead of text\n";

struct options {
  std::vector<std::string> logs;
  std::optional<std::string> html, png;
  std::size_t top_n = 10;
  bool json = false;
};

std::optional<options> parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    auto value = [&]() -> char const* {
      if (i + 1 >= argc) {
        fmt::print(stderr, "gpumem-report: {} needs a value\n", a);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      std::exit(exit_ok);
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--html" || a == "--png") {
      char const* v = value();
      if (!v) return std::nullopt;
      (a == "--html" ? o.html : o.png) = v;
    } else if (a == "--top") {
      char const* v = value();
      if (!v) return std::nullopt;
      std::string_view const sv = v;
      auto const [p, ec] = std::from_chars(sv.data(), sv.data() + sv.size(), o.top_n);
      if (ec != std::errc{} || p != sv.data() + sv.size()) {
        fmt::print(stderr, "gpumem-report: --top needs a number, got '{}'\n", sv);
        return std::nullopt;
      }
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      fmt::print(stderr, "gpumem-report: unknown option '{}'\n", a);
      return std::nullopt;
    } else {
      o.logs.emplace_back(a == "-" ? "/dev/stdin" : std::string{a});
    }
  }
  if (o.logs.empty()) {
    fmt::print(stderr, "gpumem-report: no log given\n");
    return std::nullopt;
  }
  return o;
}

bool write_file(std::string const& path, std::string const& data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    fmt::print(stderr, "gpumem-report: cannot write {}: {}\n", path, std::strerror(errno));
    return false;
  }
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) fmt::print(stderr, "gpumem-report: cannot write {}: {}\n", path, std::strerror(errno));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  auto const opts = parse_args(argc, argv);
  if (!opts) {
    std::fputs(usage, stderr);
    return exit_no_log;
  }
  auto const report = gpumem::tools::build_report(opts->logs, opts->top_n);

  for (auto const& a : report.logs) {
    auto const& w = a.log.warnings;
    for (std::size_t i = 0; i < std::min(w.size(), warnings_shown_per_log); ++i) {
      fmt::print(stderr, "warning: {}\n", w[i].text());
    }
    if (a.log.warning_count > warnings_shown_per_log) {
      fmt::print(stderr, "warning: {}: {} more warnings not shown\n", a.log.path,
                 a.log.warning_count - warnings_shown_per_log);
    }
  }
  for (auto const& u : report.unreadable) fmt::print(stderr, "error: {}\n", u.text());
  if (report.logs.empty()) {
    fmt::print(stderr, "gpumem-report: no log could be read\n");
    return exit_no_log;
  }

  std::string const body = opts->json ? gpumem::tools::json_report(report) : gpumem::tools::text_report(report);
  std::fwrite(body.data(), 1, body.size(), stdout);

  int status = exit_ok;
  if (opts->html && !write_file(*opts->html, gpumem::tools::html_report(report))) status = exit_write_failed;
  if (opts->png && !write_file(*opts->png, gpumem::tools::png_report(report))) status = exit_write_failed;
  return status;
}
