#pragma once
// The process's recorded call stacks, each stored once, and the loaded objects
// (modules) their addresses fall in.
//
// A stack's id is a 64-bit hash of its frames (nonzero, hex in the log's Stack
// column). Ids are a function of the addresses, so a forked child, which shares
// its parent's log and address space, gives a stack the id its parent gave it.
//
// The table lives in memory mapped once (MAP_NORESERVE: pages are touched as
// stacks arrive), max_stacks slots of `frames` addresses each: interning a stack
// allocates nothing and takes no lock. A slot is claimed by one compare-and-swap on
// its id; a thread that meets a slot being filled waits the few nanoseconds the
// copy takes. When the table is three-quarters full, new stacks are no longer
// recorded (their events get no id) and one warning says so.
//
// Modules: the first time a stack holds an address of an object not yet known,
// the object is found with _dl_find_object (no loader lock) and its path, address
// range, load bias and GNU build id (read from its own program headers in memory)
// are recorded. Addresses in no object (generated code) have no module.
//
// The stack file: each log has "<log>.stacks" beside it (stack_file.hpp). A stack
// is written there, after the modules it needs, the first time an event of that
// log refers to it — before the row, so a row never refers to a stack its log's
// file lacks, even when the process is killed between the two. Format (one line
// each, fields separated by ','; the path is last and may hold commas):
//   gpumem-stacks 1
//   module,<index>,<start hex>,<end hex>,<bias hex>,<build id hex or empty>,<path>
//   stack,<id hex>,<pid>,<address hex>[@<module index>] <address hex>[@...] ...
// Addresses are return addresses, innermost first (the caller of the CUDA entry
// point first). offset in the object file = address - bias.
//
// Live bytes per stack: add_live()/remove_live() keep what each stack's
// allocations hold now, for the out-of-memory snapshot's top call sites.
//
// Thread safety: everything may be called from any thread.

#include <cstddef>
#include <cstdint>

namespace gpumem::shim {

class stack_file;

inline constexpr std::uint32_t max_stacks = 1U << 16;
inline constexpr std::uint32_t max_modules = 4096;
inline constexpr std::uint32_t no_module = 0xffff;

/// A recorded stack: its id (0: none) and where it is in the table.
struct stack_ref {
  std::uint64_t id = 0;
  std::uint32_t slot = 0;
  explicit operator bool() const noexcept { return id != 0; }
};

/// Frames per stack (settings.stacks, read once); 0: stacks are off.
[[nodiscard]] int stack_depth() noexcept;

/// The recorded stack with these frames (recorded now if new); {} if the table is
/// full or n == 0.
[[nodiscard]] stack_ref intern_stack(std::uintptr_t const* frames, int n) noexcept;

/// Writes the stack (and its modules) to `file` unless already there.
/// `file_index` < 64 identifies the file among the process's stack files.
void write_stack_once(stack_ref s, stack_file& file, unsigned file_index) noexcept;
/// Forgets what was written to file `file_index` (the file was emptied).
void forget_written(unsigned file_index) noexcept;

/// Forked child: none of its parent's allocations is live in it.
void reset_live_after_fork() noexcept;

void add_live(std::uint32_t slot, std::size_t bytes) noexcept;
void remove_live(std::uint32_t slot, std::size_t bytes) noexcept;

/// One frame as the snapshot shows it.
struct frame_info {
  std::uintptr_t address = 0;
  std::uintptr_t bias = 0;            ///< module's load bias (0: no module)
  char const* module_path = nullptr;  ///< nullptr: in no module
};

struct live_site {
  std::uint64_t id = 0;
  std::uint32_t slot = 0;
  std::int64_t bytes = 0, count = 0;
};
/// The `k` stacks holding the most live bytes now, largest first; returns how many.
std::size_t top_live_sites(live_site* out, std::size_t k) noexcept;
/// Frames of a recorded stack: up to `max` into `out`; returns how many.
std::size_t stack_frames(std::uint32_t slot, frame_info* out, std::size_t max) noexcept;

/// Distinct stacks recorded so far.
[[nodiscard]] std::uint32_t stacks_recorded() noexcept;
/// Stacks not recorded because the table was full (each event that got none).
[[nodiscard]] std::uint64_t stacks_dropped() noexcept;

}  // namespace gpumem::shim
