// gpumem-report as a user runs it: exit codes, messages, JSON numbers, output files.
#include "support/temp_file.hpp"
#include "tools/json_value.hpp"
#include "tools/tool_test_support.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <utility>

using gpumem::test::gpumem_log;
using gpumem::test::json_field;
using gpumem::test::json_value;
using gpumem::test::parse_json;
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
  // RMM's columns say nothing of how long a call took.
  EXPECT_EQ(r.out.find("time in calls"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("slowest calls"), std::string::npos) << r.out;
}

TEST(ReportCli, TrainingExampleTellsItsStory) {
  temp_file tmp;
  auto const r = run_command(report(example("training.csv") + " --json --top 3"), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_field(r.out, "events"), "232");
  EXPECT_EQ(json_field(r.out, "peak_live_bytes"), "43907072");
  EXPECT_EQ(json_field(r.out, "peak_reserved_bytes"), "44040192");  // today's log has the Reserved column
  EXPECT_EQ(json_field(r.out, "live_at_end_bytes"), "4194304");
  EXPECT_EQ(json_field(r.out, "pointer", r.out.find("\"leaks\"")), "\"0x7f1a5ec00000\"");
  EXPECT_EQ(json_field(r.out, "failures"), "1");
  EXPECT_EQ(json_field(r.out, "size", r.out.find("\"failed\"")), "2147483648");
  EXPECT_EQ(json_field(r.out, "warning_count"), "0");
  // ... and the Stack column, with its table beside it: the leak's and the failure's call sites.
  EXPECT_EQ(json_field(r.out, "stacks_in_table"), "4");
  EXPECT_EQ(json_field(r.out, "leak_sites"), "1");
  EXPECT_EQ(json_field(r.out, "failure_sites"), "1");
  // The time its calls took: the failed 2 GiB request (its retry after the cache was
  // given back included) is the slowest.
  EXPECT_EQ(json_field(r.out, "timed_calls"), "26");
  EXPECT_EQ(json_field(r.out, "timed_ns"), "14345844");
  EXPECT_EQ(json_field(r.out, "duration_ns", r.out.find("\"slowest\"")), "13803989");
  EXPECT_EQ(json_field(r.out, "action", r.out.find("\"slowest\"")), "\"allocate failure\"");
  auto const text = run_command(report(example("training.csv") + " --top 3"), tmp.path());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("time in calls  14.3 ms in the 26 calls timed"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("slowest calls (top 3):"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("    ... 23 more (--top)"), std::string::npos) << text.out;
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
  EXPECT_EQ(r.err, "error: " + tmp.path() +
                       ":1: header lacks column 'Action' (not an allocation log? header: 'a,b,c')\n" +
                       "error: " + tmp.dir() + "/missing.csv: cannot read: No such file or directory\n" +
                       "gpumem-report: no log could be read\n");
}

// NUL bytes and no newline, for ever: refused at the line bound, at once. Under
// `timeout`, so that a reader that reads on fails (124) instead of hanging.
TEST(ReportCli, AnEndlessFileOfNulsIsRefusedAtTheLineBound) {
  temp_file tmp;
  std::string const problem =
      ":1: more than 64 KiB of NUL bytes where the header should be (not an allocation log); reading stopped\n";
  for (auto const& [args, name] : {std::pair{"/dev/zero", "/dev/zero"}, {"- < /dev/zero", "(standard input)"}}) {
    auto const start = std::chrono::steady_clock::now();
    auto const r = run_command("timeout 10 " + report(args), tmp.path());
    auto const took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "error: " + std::string{name} + problem + "gpumem-report: no log could be read\n");
    EXPECT_LT(took, std::chrono::seconds{1}) << args;
  }
}

TEST(ReportCli, BadCommandLinesNameTheOptionAndExitTwo) {
  temp_file tmp;
  std::string const hint = "run 'gpumem-report --help' for the options\n";
  auto const none = run_command(report(""), tmp.path());
  EXPECT_EQ(none.status, 2);
  EXPECT_EQ(none.err, "gpumem-report: LOG is required\n" + hint);
  auto const top = run_command(report("x.csv --top many"), tmp.path());
  EXPECT_EQ(top.status, 2);
  EXPECT_EQ(top.err, "gpumem-report: --top: Value many not in range 0 to 100000\n" + hint);
  auto const negative = run_command(report("x.csv --top -3"), tmp.path());
  EXPECT_EQ(negative.status, 2);
  EXPECT_EQ(negative.err, "gpumem-report: --top: Value -3 not in range 0 to 100000\n" + hint);
  auto const opt = run_command(report("x.csv --frobnicate"), tmp.path());
  EXPECT_EQ(opt.status, 2);
  EXPECT_EQ(opt.err, "gpumem-report: The following argument was not expected: --frobnicate\n" + hint);
  auto const value = run_command(report("x.csv --html"), tmp.path());
  EXPECT_EQ(value.status, 2);
  EXPECT_EQ(value.err, "gpumem-report: --html: 1 required FILE missing\n" + hint);
  EXPECT_EQ(value.out, "");
}

TEST(ReportCli, HelpIsGeneratedFromTheOptions) {
  temp_file tmp;
  auto const help = run_command(report("--help"), tmp.path());
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.err, "");
  for (char const* option : {"--json", "--html FILE", "--trace FILE", "--top N", "LOG"}) {
    EXPECT_NE(help.out.find(option), std::string::npos) << option << " missing in\n" << help.out;
  }
  EXPECT_EQ(help.out.find("--png"), std::string::npos) << "a removed option in\n" << help.out;
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
  EXPECT_NE(
      text.out.find("combined peak live 300 B at +10 ns on the merged timeline (reached by " + b.path() + " line 2)"),
      std::string::npos)
      << text.out;
}

TEST(ReportCli, WritesHtml) {
  temp_file tmp;
  std::string const html = tmp.dir() + "/r.html";
  auto const r = run_command(report(example("training.csv") + " --html " + html), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  std::string const page = read_file(html);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<svg class=\"plot\" id=\"timeline\""), std::string::npos);
  EXPECT_NE(page.find("<polyline"), std::string::npos);
  EXPECT_NE(page.find("<svg class=\"plot histogram\""), std::string::npos);
  EXPECT_NE(page.find("<td>0x7f1a5ec00000</td>"), std::string::npos);  // the leak's row
  EXPECT_NE(page.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos);
  // Self-contained: no scripts, no external resources.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("href="), std::string::npos);

  auto const bad = run_command(report(example("training.csv") + " --html " + tmp.dir() + "/no/such/dir/x.html"),
                               tmp.path());
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "gpumem-report: cannot write " + tmp.dir() + "/no/such/dir/x.html: No such file or directory\n");
}

// --png is gone: a command line that still passes it is told what to use instead,
// and nothing is written.
TEST(ReportCli, PngIsRemovedWithAPointerToHtmlAndTrace) {
  temp_file tmp;
  std::string const png = tmp.dir() + "/t.png";
  auto const r = run_command(report(example("training.csv") + " --png " + png), tmp.path());
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "gpumem-report: --png was removed: the timeline is in the --html FILE page (SVG) and in the --trace "
            "FILE (Perfetto)\n");
  EXPECT_FALSE(std::filesystem::exists(png));
}

TEST(ReportCli, OutputThatCannotBeWrittenIsAnErrorNamingIt) {
  temp_file tmp;
  write_file(tmp.path(), gpumem_log{}.alloc(0x1000, 64, 10).text());
  for (char const* format : {"", " --json"}) {
    auto const r = run_command(report(tmp.path() + format + " > /dev/full"), tmp.path());
    EXPECT_EQ(r.status, 1) << format;
    EXPECT_EQ(r.err, "gpumem-report: cannot write the report to standard output: No space left on device\n");
  }
  for (char const* option : {"--html", "--trace"}) {
    auto const r = run_command(report(tmp.path() + " " + option + " /dev/full"), tmp.path());
    EXPECT_EQ(r.status, 1) << option;
    EXPECT_EQ(r.err, "gpumem-report: cannot write /dev/full: No space left on device\n") << option;
  }
}

TEST(ReportCli, AnIncompleteLogNeverCallsAnAllocationALeak) {
  temp_file a{"rank0.csv"}, b{"rank1.csv"};
  write_file(a.path(), gpumem_log{}.alloc(0x1000, 1 << 20, 10).alloc(0x2000, 64, 20).free(0x2000, 64, 30).text() +
                           "#gpumem incomplete,dropped_rows=8006,reason=No space left on device\n");
  write_file(b.path(), gpumem_log{}.alloc(0x3000, 128, 15).text());

  auto const text = run_command(report(a.path()), a.path());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("!! INCOMPLETE LOG: 8006 rows were dropped (No space left on device) (marker at line 5)."),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("live at end    1.00 MiB (1048576 B) in 1 allocation still live when the log ends "
                          "(possibly freed in the lost rows)"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(text.out.find("never freed"), std::string::npos) << text.out;
  EXPECT_EQ(text.err, "warning: " + a.path() +
                          " is incomplete: 8006 rows were dropped (No space left on device); no allocation in it is "
                          "called a leak\n");

  auto const json = run_command(report(a.path() + " " + b.path() + " --json"), a.path());
  ASSERT_EQ(json.status, 0) << json.err;
  auto const root = parse_json(json.out);
  auto const& rank0 = root["logs"][0];
  EXPECT_FALSE(rank0["complete"].boolean);
  EXPECT_EQ(rank0["incomplete"]["dropped_rows"].text, "8006");
  EXPECT_EQ(rank0["incomplete"]["reason"].text, "No space left on device");
  EXPECT_TRUE(rank0["leaks"].is(json_value::kind::null));
  EXPECT_EQ(rank0["live_at_end_count"].text, "1");
  ASSERT_EQ(rank0["live_at_end"].items.size(), 1u);
  EXPECT_EQ(rank0["live_at_end"][0]["pointer"].text, "0x1000");
  auto const& rank1 = root["logs"][1];
  EXPECT_TRUE(rank1["complete"].boolean);
  EXPECT_EQ(rank1["leaks"].items.size(), 1u);  // a complete log still has leaks
  EXPECT_FALSE(root["combined"]["complete"].boolean);
  EXPECT_TRUE(root["combined"]["leaked_allocations"].is(json_value::kind::null));
  EXPECT_EQ(root["combined"]["live_at_end_count"].text, "2");

  std::string const html_path = a.dir() + "/r.html";
  auto const html = run_command(report(a.path() + " --html " + html_path), a.path());
  ASSERT_EQ(html.status, 0) << html.err;
  std::string const page = read_file(html_path);
  EXPECT_NE(page.find("<p class=\"incomplete\"><b>" + a.path() +
                      " is incomplete:</b> 8006 rows were dropped (No "
                      "space left on device). No allocation in it is called a leak.</p>"),
            std::string::npos);
  EXPECT_NE(page.find("<h3>Still live when the log ends (possibly freed in the lost rows) (1)</h3>"),
            std::string::npos);
  EXPECT_EQ(page.find("ever freed"), std::string::npos);
}

TEST(ReportCli, ControlCharactersAndNulsFromTheLogAreEscapedInEveryOutput) {
  temp_file tmp{"we\x01ird.csv"};
  std::string text =
      "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result\n"
      "1,14:00:00.000001,allocate,0x1000,64,0x1,0,cuda\x1b[2JMalloc\x07,1000,10,BAD\x7fRESULT\n"
      "1,14:00:00.000002,allocate failure,(nil),64,0x1,0,x,2000,10,ERR\x01\n"
      "1,14:00:00.000003,allo";
  text.append(5, '\0');  // a torn row: NULs, then the next row
  text += "1,14:00:00.000004,free,0x1000,64,0x1,0,cudaFree,4000,10,CUDA_SUCCESS\n";
  write_file(tmp.path(), text);
  auto const clean = [](std::string const& s, std::string const& what) {
    for (char c : s) {
      auto const u = static_cast<unsigned char>(c);
      ASSERT_TRUE(u >= 0x20 || c == '\n') << what << " holds the raw byte " << static_cast<int>(u) << ":\n" << s;
      ASSERT_NE(u, 0x7f) << what;
    }
  };
  std::string const html_path = tmp.dir() + "/r.html";
  auto const t = run_command(report("'" + tmp.path() + "' --top 5 --html " + html_path), tmp.path());
  ASSERT_EQ(t.status, 0) << t.err;
  clean(t.out, "text");
  clean(t.err, "stderr");
  EXPECT_NE(t.out.find("we\\x01ird.csv"), std::string::npos);
  EXPECT_NE(t.out.find("cuda\\x1b[2JMalloc\\x07"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("ERR\\x01"), std::string::npos) << t.out;
  EXPECT_NE(t.err.find("torn row (cut short by 5 NUL bytes"), std::string::npos) << t.err;
  std::string const page = read_file(html_path);
  std::string body = page;
  for (std::size_t at; (at = body.find('\t')) != std::string::npos;) body.erase(at, 1);
  clean(body, "HTML");
  EXPECT_NE(page.find("cuda\\x1b[2JMalloc\\x07"), std::string::npos);

  auto const j = run_command(report("'" + tmp.path() + "' --json"), tmp.path());
  ASSERT_EQ(j.status, 0) << j.err;
  clean(j.out, "JSON");
  auto const root = parse_json(j.out);  // strict: a raw control character would not parse
  auto const& log = root["logs"][0];
  EXPECT_EQ(log["path"].text, tmp.path());  // the escapes decode to the original bytes
  EXPECT_EQ(log["largest"][0]["entry"].text, "cuda\x1b[2JMalloc\x07");
  EXPECT_EQ(log["failed"][0]["result"].text, "ERR\x01");
  EXPECT_EQ(log["warning_count"].text, "1");
}

TEST(ReportCli, SizesNear2To64GetCorrectHistogramLabels) {
  temp_file tmp;
  write_file(tmp.path(), gpumem_log{}.alloc(0x1000, ~std::uint64_t{0}, 10).alloc(0x2000, 1024, 20).text());
  auto const t = run_command(report(tmp.path()), tmp.path());
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("    8.00 EiB - <16.0 EiB"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("    1.00 KiB - <2.00 KiB"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("<0 B"), std::string::npos) << t.out;
  auto const j = parse_json(run_command(report(tmp.path() + " --json"), tmp.path()).out);
  auto const& top = j["logs"][0]["histogram"][1];
  EXPECT_EQ(top["min"].text, "9223372036854775808");
  EXPECT_EQ(top["max"].text, "18446744073709551615");
  EXPECT_EQ(j["logs"][0]["peak_live_bytes"].text, "18446744073709551615");  // saturated, not wrapped
}

TEST(ReportCli, ReservedIsShownBesideLiveWhenTheLogHasIt) {
  temp_file tmp;
  write_file(tmp.path(),
             "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result,Reserved\n"
             "1,14:00:00.000001,allocate,0x1000,1048576,0x1,0,cudaMalloc,1000,10,CUDA_SUCCESS,2097152\n"
             "1,14:00:00.000002,allocate,0x2000,3145728,0x1,0,cudaMalloc,2000,10,CUDA_SUCCESS,6291456\n"
             "1,14:00:00.000003,free,0x2000,3145728,0x1,0,cudaFree,3000,10,CUDA_SUCCESS,6291456\n");
  std::string const html_path = tmp.dir() + "/r.html";
  auto const t = run_command(report(tmp.path() + " --html " + html_path), tmp.path());
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("peak live      4.00 MiB (4194304 B) at 14:00:00.000002 (+1.00 us), event #1, line 3"),
            std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("peak reserved  6.00 MiB (6291456 B) at 14:00:00.000002 (+1.00 us), line 3"), std::string::npos)
      << t.out;
  auto const j = parse_json(run_command(report(tmp.path() + " --json"), tmp.path()).out);
  auto const& log = j["logs"][0];
  EXPECT_EQ(log["peak_reserved_bytes"].text, "6291456");
  EXPECT_EQ(log["peak_reserved_at"]["line"].text, "3");
  EXPECT_EQ(log["timeline"][2][2].text, "6291456");  // [time, live, reserved] after the free
  EXPECT_EQ(log["timeline"][2][1].text, "1048576");
  std::string const page = read_file(html_path);
  EXPECT_NE(page.find("<tr><th>peak reserved</th><td>6.00 MiB (6291456 B) at 14:00:00.000002 (+1.00 us), line 3"),
            std::string::npos);
  EXPECT_NE(page.find("<title>reserved</title></polyline>"), std::string::npos);
  EXPECT_NE(page.find("<title>live</title></polyline>"), std::string::npos);
}

// Managed memory (its cudaFree known by the pointer) has a line of its own in each
// output, and no device figure counts it; a log without managed rows has no line.
TEST(ReportCli, ManagedMemoryIsReportedApartFromDeviceMemory) {
  temp_file tmp;
  gpumem_log l;
  l.alloc(0x1000, 1 << 20, 1'000)
      .managed_alloc(0x7000000, 4 << 20, 2'000)
      .free(0x1000, 1 << 20, 3'000)
      .managed_alloc(0x8000000, 1 << 20, 4'000, "cuMemAllocManaged")  // managed peak, line 5
      .free(0x7000000, 4 << 20, 5'000);
  write_file(tmp.path(), l.text());
  std::string const html_path = tmp.dir() + "/m.html";
  auto const t = run_command(report(tmp.path() + " --html " + html_path), tmp.path());
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("  managed        2 allocations (5.00 MiB), 1 free, 0 failures; peak live 5.00 MiB (line 5), "
                       "live at end 1.00 MiB in 1 allocation\n"),
            std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("  peak live      1.00 MiB (1048576 B)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("  live at end    0 B in 0 allocations"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("pinned host"), std::string::npos) << t.out;
  EXPECT_NE(read_file(html_path).find("<tr><th>managed memory</th><td>2 allocations (5.00 MiB), 1 free, 0 failures; "
                                      "peak live 5.00 MiB, live at end 1.00 MiB in 1 allocation</td></tr>"),
            std::string::npos);

  auto const j = parse_json(run_command(report(tmp.path() + " --json"), tmp.path()).out);
  auto const& log = j["logs"][0];
  EXPECT_EQ(log["allocations"].text, "1");
  EXPECT_EQ(log["peak_live_bytes"].text, "1048576");
  EXPECT_EQ(log["live_at_end_count"].text, "0");
  EXPECT_EQ(log["unknown_free_count"].text, "0");
  auto const& m = log["managed"];
  EXPECT_EQ(m["allocations"].text, "2");
  EXPECT_EQ(m["frees"].text, "1");
  EXPECT_EQ(m["failures"].text, "0");
  EXPECT_EQ(m["bytes_allocated"].text, "5242880");
  EXPECT_EQ(m["peak_live_bytes"].text, "5242880");
  EXPECT_EQ(m["peak_live_at"]["line"].text, "5");
  EXPECT_EQ(m["live_at_end_bytes"].text, "1048576");
  EXPECT_EQ(m["live_at_end_count"].text, "1");
  EXPECT_EQ(log["pinned_host"]["allocations"].text, "0");

  write_file(tmp.path(), gpumem_log{}.alloc(0x1000, 64, 10).text());
  auto const plain = run_command(report(tmp.path()), tmp.path());
  EXPECT_EQ(plain.out.find("managed"), std::string::npos) << plain.out;
}

TEST(ReportCli, ReadsALogFromStandardInput) {
  temp_file tmp;
  write_file(tmp.path(), gpumem_log{}.alloc(0x1000, 64, 10).text());
  auto const r = run_command(report("- --json < " + tmp.path()), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  auto const j = parse_json(r.out);
  EXPECT_EQ(j["logs"][0]["path"].text, "(standard input)");
  EXPECT_EQ(j["logs"][0]["events"].text, "1");
}

TEST(ReportCli, ALogEndingInNulPaddingIsReportedAsNotClosed) {
  temp_file tmp;
  std::string text = gpumem_log{}.alloc(0x1000, 64, 10).text();
  text.append(4096, '\0');
  write_file(tmp.path(), text);
  auto const r = run_command(report(tmp.path()), tmp.path());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("note           the log ends in NUL padding or a torn row: its writer did not close it"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("never freed"), std::string::npos);  // complete: no rows are known to be lost
}
