#pragma once
// The stack table the shim writes beside a log ("<log>.stacks"; its format is
// described in src/shim/observe/stack_table.hpp): the call stacks the log's Stack column
// refers to, and the loaded objects (modules) their addresses fall in.
//
// Read whole into memory: it holds one line per distinct stack, not per event.
// Damaged lines (a writer killed mid-line, a full disk) are reported as warnings
// and skipped; a stack whose module line is missing keeps its raw addresses.
//
// Thread safety: plain values after load().

#include "log_event.hpp"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpumem::tools {

struct stack_module {
  std::uint64_t start{}, end{};  ///< where it was mapped in the process
  std::uint64_t bias{};          ///< load bias: offset in the file = address - bias
  std::string build_id;          ///< GNU build id in hex; "" unknown
  std::string path;
};

struct stack_frame {
  std::uint64_t address{};  ///< return address in the process
  int module{-1};           ///< index into stack_table::modules; -1 none (generated code)
};

struct recorded_stack {
  std::uint64_t id{};
  std::uint32_t pid{};              ///< process that recorded it (perf maps are per pid)
  std::vector<stack_frame> frames;  ///< innermost first
};

struct stack_table {
  std::string path;
  bool present{};  ///< the file existed and could be read
  std::unordered_map<std::uint64_t, recorded_stack> stacks;
  std::unordered_map<int, stack_module> modules;
  std::vector<log_diagnostic> warnings;

  [[nodiscard]] recorded_stack const* find(std::uint64_t id) const noexcept {
    if (auto const it = stacks.find(id); it != stacks.end()) return &it->second;
    return nullptr;
  }
  [[nodiscard]] stack_module const* module(int index) const noexcept {
    if (auto const it = modules.find(index); it != modules.end()) return &it->second;
    return nullptr;
  }
};

/// Reads the table at `path` (a missing file gives an empty table, present = false).
[[nodiscard]] stack_table load_stack_table(std::string const& path);
/// Parses a table held in memory (tests).
[[nodiscard]] stack_table parse_stack_table(std::string_view text, std::string name);

/// "<log>.stacks".
[[nodiscard]] inline std::string stack_table_path(std::string const& log_path) { return log_path + ".stacks"; }

}  // namespace gpumem::tools
