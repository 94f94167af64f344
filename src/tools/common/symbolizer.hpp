#pragma once
// Names the frames of recorded stacks offline, after the program ended.
//
// Native frames: elfutils' libdwfl opens the module file named in the stack table
// (its path as the process saw it) and finds the function from the symbol table
// (demangled) and the file and line from DWARF where debug information exists —
// in the file itself, or separate (/usr/lib/debug, .gnu_debuglink, build id). A
// file whose GNU build id differs from the one recorded was replaced since the run:
// its frames show module+offset only, never a wrong name.
//
// Generated code (frames in no module): named from the perf map of the process
// that recorded the stack, /tmp/perf-<pid>.map, when it exists. CPython writes one
// under `python -X perf` (or PYTHONPERFSUPPORT=1), naming the trampoline of each
// Python function "py::<function>:<file>"; such frames come out as Python frames.
//
// Every address is a return address: it is looked up one byte earlier, inside
// the call instruction, so the line is the call's, not the next statement's.
//
// Thread safety: one symbolizer per thread; it caches modules and maps.

#include "stack_table.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace gpumem::tools {

struct symbol {
  enum class kind : std::uint8_t { native, python, unknown };
  kind what = kind::unknown;
  std::uint64_t address{};
  std::string function;    ///< "" when unknown
  std::string file;        ///< source file ("" unknown)
  int line{};              ///< 0 unknown
  std::string module;      ///< module path ("" none)
  std::uint64_t offset{};  ///< address - bias, in the module file
  /// "layer_beta_leak at app.cpp:42 (app+0x1234)", "train_step (python, train.py)",
  /// "libfoo.so+0x1234", "0x7f..."
  [[nodiscard]] std::string text() const;
};

class symbolizer {
 public:
  /// `perf_map_dir`: where perf-<pid>.map files are looked for.
  explicit symbolizer(std::string perf_map_dir = "/tmp");
  ~symbolizer();
  symbolizer(symbolizer const&) = delete;
  symbolizer& operator=(symbolizer const&) = delete;

  /// One frame of a stack recorded by process `pid`; `module` null: in no module.
  [[nodiscard]] symbol resolve(std::uint64_t address, stack_module const* module, std::uint32_t pid);

  /// Whether any frame so far was named from a perf map.
  [[nodiscard]] bool used_perf_map() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace gpumem::tools
