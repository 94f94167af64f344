#pragma once
// Replays an allocation log through configured resource chains, streaming: the log
// is read once, and memory is bounded by the allocations live in the replay (per
// chain) plus a fixed reordering window, never by the length of the log.
//
// Order: each log thread's events keep their file order (the order that thread
// made its calls); across threads, events are merged by time (TimeNs, else Time).
// The merge looks ahead at most `window` events: a thread whose row was written
// more than that many rows after rows of other threads with later times is replayed
// after them (no log written by gpumem or RMM comes close).
// Each chain's calls are issued from ONE host thread — the simple approach: what matters
// for a memory resource is which stream an allocation is ordered on, and that is
// preserved: every log stream other than the legacy ones gets its own CUstream, and
// the per-thread default stream (0x2) of each log thread gets a CUstream of its own
// (it is a different stream on every thread). 0 and 0x1 stay the legacy stream.
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
#include <gpumem/tools/log_event.hpp>

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
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
  std::uint64_t skipped_frees{};              ///< frees of pointers not live in the replay
  std::uint64_t allocations{};                ///< successful allocate calls (logged failures that now succeed too)
  std::uint64_t frees{};                      ///< deallocate calls replayed
  double mean_allocate_ns{}, mean_free_ns{};  ///< host time per call (timed replays only)
};

/// Puts a log's events in replay order (see the file comment), holding at most
/// `window` of them.
class replay_sequencer {
 public:
  explicit replay_sequencer(std::size_t window = std::size_t{1} << 16);
  /// The next event in file order.
  void push(log_event const& ev);
  /// The next event in replay order, if it is decided: when more than `window`
  /// events are held, or always once `draining` (the log has ended).
  bool pop(log_event& out, bool draining);
  [[nodiscard]] std::size_t held() const noexcept { return held_; }

 private:
  static constexpr std::uint32_t none = ~std::uint32_t{0};
  struct node {
    log_event ev;
    std::uint32_t next = none;
  };
  struct queue {
    std::uint32_t head = none, tail = none;
  };
  struct head_entry {
    std::int64_t time;
    std::uint64_t index;
    std::uint64_t thread;
    bool operator>(head_entry const& o) const noexcept { return time != o.time ? time > o.time : index > o.index; }
  };

  std::size_t window_;
  std::size_t held_ = 0;
  std::vector<node> nodes_;
  std::vector<std::uint32_t> free_nodes_;
  std::unordered_map<std::uint64_t, queue> threads_;  ///< only threads with events held
  std::vector<head_entry> heads_;                     ///< min-heap: one entry per held thread
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
