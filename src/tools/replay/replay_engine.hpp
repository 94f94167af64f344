#pragma once
// Replays an allocation log through one configured resource chain.
//
// Order: each log thread's events keep their file order (the order that thread
// made its calls); across threads, events are merged by time (TimeNs, else Time).
// Everything is issued from ONE host thread — the simple approach: what matters
// for a memory resource is which stream an allocation is ordered on, and that is
// preserved: every log stream other than the legacy ones gets its own CUstream, and
// the per-thread default stream (0x2) of each log thread gets a CUstream of its own
// (it is a different stream on every thread). 0 and 0x1 stay the legacy stream.
//
// Pointers are remapped (log pointer -> replay pointer). A free whose pointer is not
// live in the replay (never allocated in the log, or already freed) is skipped and
// counted. A logged "allocate failure" is attempted too: under another chain it may
// succeed, and then it is freed at once (the program never used it). A logged free of
// cudaFree/cuMemFree is replayed as a synchronous free (call_context), so a chain in
// safe mode defers it as the shim would.
//
// Thread safety: replay() uses the calling thread's CUDA context; call it from one
// thread at a time.

#include <gpumem/config.hpp>
#include <gpumem/tools/alloc_log.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::tools {

struct replay_result {
  std::string name;                 ///< configuration name (file stem or built-in name)
  std::string chain;                ///< resource_chain::describe()
  std::optional<std::string> error; ///< the chain could not be built / replay aborted
  std::uint64_t peak_reserved{};    ///< peak bytes held from the device (device_stats peak)
  std::uint64_t peak_live{};        ///< peak bytes handed to the program (live_stats peak)
  double fragmentation_at_peak{};   ///< top().info().fragmentation() when live bytes peaked
  std::uint64_t failed{};           ///< allocations the chain refused
  std::uint64_t upstream_calls{};   ///< allocations made from the device
  std::uint64_t skipped_frees{};    ///< frees of pointers not live in the replay
  std::uint64_t allocations{};              ///< successful allocate calls (logged failures that now succeed too)
  std::uint64_t frees{};                    ///< deallocate calls replayed
  double mean_allocate_ns{}, mean_free_ns{};  ///< host time per call (meaningful on a real GPU only)
};

/// Event indices of `log` in replay order (see the file comment).
[[nodiscard]] std::vector<std::uint32_t> replay_order(parsed_log const& log);

/// Replays `log` (in `order`) through build_chain(s, device). Never throws: failures
/// to build the chain or to create streams come back in `error`.
[[nodiscard]] replay_result replay(parsed_log const& log, std::vector<std::uint32_t> const& order,
                                   config::settings const& s, std::string name, int device = 0);

}  // namespace gpumem::tools
