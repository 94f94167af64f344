#include "stack_table.hpp"

#include "number_parse.hpp"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace gpumem::tools {
namespace {

/// Splits off the next field up to ','; false when there is none.
bool next_field(std::string_view& rest, std::string_view& field) noexcept {
  if (rest.data() == nullptr) return false;
  auto const comma = rest.find(',');
  field = rest.substr(0, comma);
  rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  return true;
}

bool parse_module(std::string_view rest, stack_table& t) {
  std::string_view index, start, end, bias, build_id;
  int idx = 0;
  stack_module m;
  if (!next_field(rest, index) || !next_field(rest, start) || !next_field(rest, end) || !next_field(rest, bias) ||
      !next_field(rest, build_id) || rest.data() == nullptr || !parse_decimal(index, idx) ||
      !parse_hex(start, m.start) || !parse_hex(end, m.end) || !parse_hex(bias, m.bias)) {
    return false;
  }
  m.build_id = std::string{build_id};
  m.path = std::string{rest};  // the rest of the line: a path may hold commas
  t.modules[idx] = std::move(m);
  return true;
}

bool parse_stack(std::string_view rest, stack_table& t) {
  std::string_view id, pid;
  recorded_stack s;
  if (!next_field(rest, id) || !next_field(rest, pid) || rest.data() == nullptr || !parse_hex(id, s.id) || s.id == 0 ||
      !parse_decimal(pid, s.pid)) {
    return false;
  }
  while (!rest.empty()) {
    auto const space = rest.find(' ');
    std::string_view f = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
    if (f.empty()) continue;
    stack_frame fr;
    auto const at = f.find('@');
    if (!parse_hex(f.substr(0, at), fr.address)) return false;
    if (at != std::string_view::npos && !parse_decimal(f.substr(at + 1), fr.module)) return false;
    s.frames.push_back(fr);
  }
  if (s.frames.empty()) return false;
  t.stacks[s.id] = std::move(s);
  return true;
}

}  // namespace

stack_table parse_stack_table(std::string_view text, std::string name) {
  stack_table t;
  t.path = std::move(name);
  t.present = true;
  std::size_t line_no = 0;
  while (!text.empty()) {
    auto const nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    bool const complete = nl != std::string_view::npos;
    text = complete ? text.substr(nl + 1) : std::string_view{};
    ++line_no;
    // NULs are never data (a page the kernel had not written back when the machine
    // died); a last line without its newline was cut short by its writer.
    if (auto const z = line.find('\0'); z != std::string_view::npos) line = line.substr(0, z);
    if (line.empty()) continue;
    bool ok = false;
    if (!complete) {
      t.warnings.push_back({t.path, line_no, "truncated last line (its writer was killed?); ignored"});
      continue;
    }
    if (line.starts_with("gpumem-stacks ")) {
      ok = line == "gpumem-stacks 1";
      if (!ok) t.warnings.push_back({t.path, line_no, fmt::format("unknown stack table version '{}'", line)});
      continue;
    }
    if (line.starts_with("module,")) {
      ok = parse_module(line.substr(7), t);
    } else if (line.starts_with("stack,")) {
      ok = parse_stack(line.substr(6), t);
    }
    if (!ok) t.warnings.push_back({t.path, line_no, "not a module or stack line; ignored"});
  }
  return t;
}

stack_table load_stack_table(std::string const& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in) {
    stack_table t;
    t.path = path;
    return t;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return parse_stack_table(buf.str(), path);
}

}  // namespace gpumem::tools
