#pragma once
// Replays an allocation log through configured resource chains, streaming: the log
// is read once, and memory is bounded by the allocations live in the replay (per
// chain) plus a fixed reordering window, never by the length of the log.
//
// Order: replay_sequencer's (each log thread's events in file order, threads merged
// by time, a bounded look-ahead). Each chain's calls are issued from ONE host
// thread — the simple approach: what matters for a memory resource is which stream
// an allocation is ordered on, and that is preserved: every replay_stream of the log
// (call_semantics.hpp: the per-thread default stream is one per log thread) gets a
// CUstream of its own, and the legacy ones (0 and 0x1) stay the legacy stream.
//
// Several chains replay side by side in one pass, each on a device of its own
// (the simulated device offers as many as asked), so none competes with another
// for memory, and each on a thread of its own fed batches of events in replay
// order (a bounded ring: the reading thread waits for the slowest chain).
//
// Pointers are remapped (log pointer -> replay pointer). A free whose pointer is not
// live in the replay (never allocated in the log, or already freed) is skipped and
// counted. A logged "allocate failure" is attempted too: under another chain it may
// succeed, and then it is freed at once (the program never used it). A logged free of
// cudaFree/cuMemFree is replayed as a synchronous free (call_context), so a chain in
// safe mode defers it as the shim would.
//
// Thread safety: call replay_log from one thread; it starts and joins its own
// workers. A chain_replayer is used by one thread at a time, after activate().

#include <gpumem/config.hpp>
#include "log_event.hpp"
#include "replay_sequencer.hpp"

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::tools {

class log_reader;
struct named_config;

struct replay_result {
  std::string name;                           ///< configuration name (file stem or built-in name)
  std::string chain;                          ///< resource_chain::describe()
  std::optional<std::string> error;           ///< the chain could not be built / replay aborted
  std::uint64_t peak_reserved{};              ///< peak bytes held from the device (device_stats peak)
  std::uint64_t peak_live{};                  ///< peak bytes handed to the program (live_stats peak)
  double fragmentation_at_peak{};             ///< top().info().fragmentation() when live bytes peaked
  std::uint64_t failed{};                     ///< allocations the chain refused
  std::uint64_t upstream_calls{};             ///< allocations made from the device
  std::uint64_t pages_released{};             ///< bytes of pool pages unmapped from free blocks
  std::uint64_t pages_remapped{};             ///< bytes of pool pages mapped again after that
  std::uint64_t skipped_frees{};              ///< frees of pointers not live in the replay
  std::uint64_t allocations{};                ///< successful allocate calls (logged failures that now succeed too)
  std::uint64_t frees{};                      ///< deallocate calls replayed
  double mean_allocate_ns{}, mean_free_ns{};  ///< host time per call (timed replays only)
};

/// One configuration's chain on one device, fed events in replay order.
class chain_replayer {
 public:
  /// Builds the chain on `device` (its primary context is retained and made
  /// current). Never throws: a chain that cannot be built reports it in finish().
  chain_replayer(config::settings const& settings, std::string name, int device, bool timed);
  ~chain_replayer();
  chain_replayer(chain_replayer const&) = delete;
  chain_replayer& operator=(chain_replayer const&) = delete;

  /// Creates the replay stream of `ev`'s log stream ahead of apply() (it makes this
  /// replayer's context current on the calling thread).
  void add_stream(log_event const& ev);
  /// Makes this replayer's device context current (before a batch of apply()).
  void activate() const noexcept;
  /// One event; `entry` is its Entry text (NUL-terminated). Ignored after an error.
  void apply(log_event const& ev, char const* entry);
  /// Gives back what is still live, synchronises, and returns the numbers.
  [[nodiscard]] replay_result finish();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// What a whole replay pass saw of the log.
struct replay_pass {
  std::vector<replay_result> results;  ///< one per configuration, same order
  std::uint64_t events{};
  std::uint64_t threads{}, streams{};  ///< distinct values (counted up to a bound)
  bool counts_capped{};                ///< more distinct threads/streams than counted
};

/// Reads `reader` to its end once, replaying every event through each configuration,
/// configuration i on device devices[i]. `timed` (a real device): host time per
/// call is measured, and the chains run one after another on this thread.
[[nodiscard]] replay_pass replay_log(log_reader& reader, std::vector<named_config> const& configs,
                                     std::vector<int> const& devices, bool timed = false);

}  // namespace gpumem::tools
