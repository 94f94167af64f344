// Out-of-memory snapshots ("<log>.oom-<n>.json", written by the shim when an
// allocation fails): read, their call sites named, and printed.
#include "report.hpp"

#include "units.hpp"

#include "text_escape.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gpumem::tools {

namespace {

std::uint64_t hex_of(std::string const& s) {
  std::string_view v{s};
  if (v.starts_with("0x")) v.remove_prefix(2);
  return std::stoull(std::string{v}, nullptr, 16);
}

bool has(json_value const& v, std::string_view key) { return v.is(json_value::kind::object) && v.has(key); }

std::uint64_t number(json_value const& v, std::string_view key) {
  if (!has(v, key) || !v[key].is(json_value::kind::number)) return 0;
  return static_cast<std::uint64_t>(std::stoll(v[key].text));
}

std::vector<symbol> name_frames(json_value const& frames, std::uint32_t pid, symbolizer& sym) {
  std::vector<symbol> out;
  if (!frames.is(json_value::kind::array)) return out;
  for (auto const& f : frames.items) {
    std::uint64_t const address = hex_of(f["address"].text);
    if (f["module"].is(json_value::kind::string)) {
      stack_module m;
      m.path = f["module"].text;
      m.bias = address - hex_of(f["offset"].text);
      out.push_back(sym.resolve(address, &m, pid));
    } else {
      out.push_back(sym.resolve(address, nullptr, pid));
    }
  }
  return out;
}

/// The snapshot as text; throws when a field it shows is missing or malformed.
std::string snapshot_text(oom_snapshot const& snap) {
  std::string s;
  auto out = std::back_inserter(s);
  auto const& d = snap.doc;
  auto const& req = d["request"];
  fmt::format_to(out, "== out of memory: {} ==\n", escape_text(snap.path));
  fmt::format_to(out, "  request        {}({}) on device {}, stream {}, thread {}\n",
                 req["entry"].is(json_value::kind::string) ? escape_text(req["entry"].text) : "allocate",
                 human_bytes(number(req, "bytes")), number(d, "device"), escape_text(req["stream"].text),
                 number(req, "thread"));
  fmt::format_to(out, "  live           {} in {} allocations\n", human_bytes(number(d["live"], "bytes")),
                 number(d["live"], "count"));
  if (d["pool"].is(json_value::kind::object)) {
    auto const& p = d["pool"];
    fmt::format_to(out,
                   "  pool           holds {}: {} in use, {} cached; largest free block {}; fragmentation {:.0f}%\n",
                   human_bytes(number(p, "reserved_bytes")), human_bytes(number(p, "used_bytes")),
                   human_bytes(number(p, "free_bytes")), human_bytes(number(p, "largest_free_block")),
                   100.0 * p["fragmentation"].number);
    fmt::format_to(out, "  reclamation    {} freed, waiting for a barrier before reuse\n",
                   human_bytes(number(p, "pending_bytes")));
  }
  fmt::format_to(out, "  limit          {}\n",
                 d["limit_bytes"].is(json_value::kind::number) ? human_bytes(number(d, "limit_bytes")) : "none");
  if (d["device_memory"].is(json_value::kind::object)) {
    fmt::format_to(out, "  device         {} free of {}\n", human_bytes(number(d["device_memory"], "free_bytes")),
                   human_bytes(number(d["device_memory"], "total_bytes")));
  }
  if (d["chain"].is(json_value::kind::string))
    fmt::format_to(out, "  chain          {}\n", escape_text(d["chain"].text));
  if (number(d, "earlier_unreported_failures") > 0) {
    fmt::format_to(out, "  before it      {} failures not reported separately (same burst)\n",
                   number(d, "earlier_unreported_failures"));
  }
  fmt::format_to(out, "  log            {}\n",
                 d["log"].is(json_value::kind::string) ? escape_text(d["log"].text) : "none");
  if (!snap.request_frames.empty()) {
    fmt::format_to(out, "\n  the failed request came from:\n{}", frame_lines(snap.request_frames, "    "));
  }
  if (d["top_sites"].is(json_value::kind::array) && !d["top_sites"].items.empty()) {
    fmt::format_to(out, "\n  call sites holding the most memory:\n");
    auto const& sites = d["top_sites"].items;
    for (std::size_t i = 0; i < sites.size(); ++i) {
      std::uint64_t const n = number(sites[i], "live_count");
      fmt::format_to(out, "    {} in {} allocation{} (stack {})\n", human_bytes(number(sites[i], "live_bytes")), n,
                     n == 1 ? "" : "s", escape_text(sites[i]["stack"].text));
      fmt::format_to(out, "{}", frame_lines(snap.site_frames[i], "      "));
    }
  } else if (d["stacks_recorded"].is(json_value::kind::boolean) && !d["stacks_recorded"].boolean) {
    fmt::format_to(out, "\n  (no call sites: run with --stacks N to record them)\n");
  }
  fmt::format_to(out, "\n");
  return s;
}

}  // namespace

oom_snapshot read_snapshot(std::string const& path, symbolizer& sym) {
  std::ifstream in{path, std::ios::binary};
  if (!in) throw std::runtime_error{"cannot read it"};
  std::ostringstream buf;
  buf << in.rdbuf();
  oom_snapshot snap;
  snap.path = path;
  snap.raw = buf.str();
  snap.doc = parse_json(snap.raw);
  if (!has(snap.doc, "gpumem_oom_snapshot")) throw std::runtime_error{"not a gpumem out-of-memory snapshot"};
  auto const pid = static_cast<std::uint32_t>(number(snap.doc, "pid"));
  if (has(snap.doc, "request") && has(snap.doc["request"], "frames")) {
    snap.request_frames = name_frames(snap.doc["request"]["frames"], pid, sym);
  }
  if (has(snap.doc, "top_sites") && snap.doc["top_sites"].is(json_value::kind::array)) {
    for (auto const& site : snap.doc["top_sites"].items)
      snap.site_frames.push_back(name_frames(site["frames"], pid, sym));
  }
  try {
    snap.text = snapshot_text(snap);  // every field it shows is there
  } catch (std::exception const& e) { throw std::runtime_error{std::string{"malformed snapshot: "} + e.what()}; }
  return snap;
}

}  // namespace gpumem::tools
