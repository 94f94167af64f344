// gpumem-report as a user runs it: exit codes, messages, JSON numbers, output files.
#include "tools/tool_test_support.hpp"
#include "support/temp_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>

using gpumem::test::gpumem_log;
using gpumem::test::json_field;
using gpumem::test::read_file;
using gpumem::test::run_command;
using gpumem::test::temp_file;
using gpumem::test::write_file;

namespace {

std::string report(std::string const& args) { return std::string{GPUMEM_REPORT_BIN} + " " + args; }

std::string example(std::string const& name) { return std::string{GPUMEM_SOURCE_DIR} + "/examples/logs/" + name; }

}  // namespace

TEST(ReportCli, JsonHasTheExactNumbers) {
  temp_file tmp;
  gpumem_log l;
  l.alloc(0x1000, 1 << 20, 1'000)
      .alloc(0x200000, 3 << 20, 2'000)
      .free(0x1000, 1 << 20, 3'000)
      .fail(1ull << 40, 4'000)
      .free(0xdead00, 16, 5'000);
  write_file(tmp.path(), l.text());
  auto const r = run_command(report(tmp.path() + " --json"), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(json_field(r.out, "events"), "5");
  EXPECT_EQ(json_field(r.out, "allocations"), "2");
  EXPECT_EQ(json_field(r.out, "frees"), "2");
  EXPECT_EQ(json_field(r.out, "failures"), "1");
  EXPECT_EQ(json_field(r.out, "peak_live_bytes"), "4194304");
  EXPECT_EQ(json_field(r.out, "event_index", r.out.find("peak_live_at")), "1");
  EXPECT_EQ(json_field(r.out, "line", r.out.find("peak_live_at")), "3");
  EXPECT_EQ(json_field(r.out, "live_at_end_bytes"), "3145728");
  EXPECT_EQ(json_field(r.out, "peak_reserved_bytes"), "null");
  EXPECT_EQ(json_field(r.out, "pointer", r.out.find("\"leaks\"")), "\"0x200000\"");
  EXPECT_EQ(json_field(r.out, "size", r.out.find("\"failed\"")), "1099511627776");
  EXPECT_EQ(json_field(r.out, "result", r.out.find("\"failed\"")), "\"CUDA_ERROR_OUT_OF_MEMORY\"");
  EXPECT_EQ(json_field(r.out, "pointer", r.out.find("\"unknown_frees\"")), "\"0xdead00\"");
  EXPECT_EQ(json_field(r.out, "combined"), "null");
  EXPECT_EQ(r.out.back(), '\n');
}

TEST(ReportCli, TextReportOfTheRmmExample) {
  temp_file tmp;
  auto const r = run_command(report(example("rmm-format.csv")), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("(rmm log, 6 columns)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak live      49.0 MiB (51380224 B) at 00:00:00.012345 (+1.76 s), event #4, line 6"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("peak reserved  not in log"), std::string::npos);
  EXPECT_NE(r.out.find("live at end    32.0 MiB (33554432 B) in 1 allocation never freed"), std::string::npos);
}

TEST(ReportCli, TrainingExampleTellsItsStory) {
  temp_file tmp;
  auto const r = run_command(report(example("training.csv") + " --json --top 3"), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_field(r.out, "events"), "602");
  EXPECT_EQ(json_field(r.out, "peak_live_bytes"), "322437120");
  EXPECT_EQ(json_field(r.out, "live_at_end_bytes"), "2097152");
  EXPECT_EQ(json_field(r.out, "pointer", r.out.find("\"leaks\"")), "\"0x7f3a59200000\"");
  EXPECT_EQ(json_field(r.out, "failures"), "1");
  EXPECT_EQ(json_field(r.out, "size", r.out.find("\"failed\"")), "103079215104");
  EXPECT_EQ(json_field(r.out, "warning_count"), "0");
}

TEST(ReportCli, DamagedLogIsReportedWithWarningsAndExitsZero) {
  temp_file tmp;
  std::string text = gpumem_log{}.alloc(0x100, 64, 10).text();
  text += "1,14:00:00.000020,allocate,0x200,64,0x1,0,cudaMalloc,20,100,CUDA_SUCCESS,extra\n";
  text += "1,14:00:00.000030,allocate,0x300,6";
  text.append(64, '\0');
  write_file(tmp.path(), text);
  auto const r = run_command(report(tmp.path() + " --json"), tmp.path());
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.err, "warning: " + tmp.path() + ":3: expected 11 fields, found 12\n" + "warning: " + tmp.path() +
                       ":4: truncated last line (no newline at end of file): '1,14:00:00.000030,allocate,0x300,6'; "
                       "ignored\n");
  EXPECT_EQ(json_field(r.out, "events"), "1");
  EXPECT_EQ(json_field(r.out, "warning_count"), "2");
}

TEST(ReportCli, NoReadableLogExitsTwo) {
  temp_file tmp;
  write_file(tmp.path(), "a,b,c\n1,2,3\n");
  auto const r = run_command(report(tmp.path() + " " + tmp.dir() + "/missing.csv"), tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: " + tmp.path() + ":1: header lacks column 'Action' (not an allocation log? header: 'a,b,c')\n" +
                       "error: " + tmp.dir() + "/missing.csv: cannot read: No such file or directory\n" +
                       "gpumem-report: no log could be read\n");
}

TEST(ReportCli, BadCommandLinesExitTwoWithUsage) {
  temp_file tmp;
  auto const none = run_command(report(""), tmp.path());
  EXPECT_EQ(none.status, 2);
  EXPECT_EQ(none.err.rfind("gpumem-report: no log given\nusage: gpumem-report LOG...", 0), 0u) << none.err;
  auto const top = run_command(report("x.csv --top many"), tmp.path());
  EXPECT_EQ(top.status, 2);
  EXPECT_EQ(top.err.rfind("gpumem-report: --top needs a number, got 'many'\n", 0), 0u) << top.err;
  auto const opt = run_command(report("x.csv --frobnicate"), tmp.path());
  EXPECT_EQ(opt.status, 2);
  EXPECT_EQ(opt.err.rfind("gpumem-report: unknown option '--frobnicate'\n", 0), 0u) << opt.err;
}

TEST(ReportCli, SeveralLogsGetACombinedPeak) {
  temp_file a{"rank0.csv"}, b{"rank1.csv"};
  write_file(a.path(), gpumem_log{}.alloc(0x100, 100, 10).free(0x100, 100, 30).text());
  write_file(b.path(), gpumem_log{}.alloc(0x200, 200, 20).free(0x200, 200, 40).alloc(0x300, 7, 50).text());
  auto const json = run_command(report(a.path() + " " + b.path() + " --json"), a.path());
  ASSERT_EQ(json.status, 0) << json.err;
  auto const c = json.out.find("\"combined\":{");
  ASSERT_NE(c, std::string::npos) << json.out;
  EXPECT_EQ(json_field(json.out, "logs", c), "2");
  EXPECT_EQ(json_field(json.out, "events", c), "5");
  EXPECT_EQ(json_field(json.out, "peak_live_bytes", c), "300");
  EXPECT_EQ(json_field(json.out, "peak_time_ns", c), "20");
  EXPECT_EQ(json_field(json.out, "peak_log", c), "1");
  EXPECT_EQ(json_field(json.out, "live_at_end_bytes", c), "7");

  auto const text = run_command(report(a.path() + " " + b.path()), a.path());
  EXPECT_NE(text.out.find("== 2 logs side by side =="), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("rank0.csv"), std::string::npos);
  EXPECT_NE(text.out.find("combined peak live 300 B at +10 ns on the merged timeline (reached by " + b.path() +
                          " line 2)"),
            std::string::npos)
      << text.out;
}

TEST(ReportCli, WritesHtmlAndPng) {
  temp_file tmp;
  std::string const html = tmp.dir() + "/r.html", png = tmp.dir() + "/r.png";
  auto const r =
      run_command(report(example("training.csv") + " --html " + html + " --png " + png), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  std::string const page = read_file(html);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<svg class=\"plot\" id=\"timeline\""), std::string::npos);
  EXPECT_NE(page.find("<polyline"), std::string::npos);
  EXPECT_NE(page.find("<svg class=\"plot histogram\""), std::string::npos);
  EXPECT_NE(page.find("<td>0x7f3a59200000</td>"), std::string::npos);  // the leak's row
  EXPECT_NE(page.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos);
  // Self-contained: no scripts, no external resources.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("href="), std::string::npos);
  std::string const image = read_file(png);
  EXPECT_EQ(image.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(image.size(), 8 + 25 + (12 + 2 + 4 + ((1000 * 3 + 1) * 500 + 65534) / 65535 * 5 + (1000 * 3 + 1) * 500) + 12);

  auto const bad = run_command(report(example("training.csv") + " --png " + tmp.dir() + "/no/such/dir/x.png"),
                               tmp.path());
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "gpumem-report: cannot write " + tmp.dir() + "/no/such/dir/x.png: No such file or directory\n");
}
