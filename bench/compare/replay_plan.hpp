#pragma once
// An allocation log (gpumem's or RMM's CSV) turned into a list of operations any
// allocator can replay on a real device: the memory-efficiency measurement.
//
// Order and streams as gpumem-replay has them (src/tools/common/replay_sequencer.hpp,
// call_semantics.hpp): each log thread's events in file order, threads merged by time;
// everything is issued from one host thread. The log's null and legacy streams are
// the legacy stream (index 0); every other replay_stream (the per-thread default
// stream is one per log thread) becomes a stream of its own (index 1...), which the
// executor creates. Pointers become dense slot numbers.
//
// A free of a pointer the replay does not hold is skipped and counted; an allocation
// of a pointer still live (the log lost its free) frees the older block first; a
// logged "allocate failure" is attempted (freed at once if it now succeeds).
//
// Thread safety: a plan is a plain value.

#include <cstdint>
#include <string>
#include <vector>

namespace gpumem_compare {

struct replay_op {
  enum class kind : std::uint8_t {
    allocate,      ///< bytes into `slot`
    free,          ///< `slot` (bytes = its size)
    try_allocate,  ///< the log's failed allocation: attempt, free at once if it succeeds
  };
  kind what{};
  bool synchronous{};  ///< cudaMalloc/cudaFree family (else stream-ordered: cudaMallocAsync, RMM)
  std::uint32_t slot{};
  std::uint32_t stream{};  ///< index: 0 = legacy stream
  std::uint64_t bytes{};
};

struct replay_plan {
  std::string name;    ///< given by the caller ("mlp", "varlen")
  std::string source;  ///< file path
  std::vector<replay_op> ops;
  std::uint32_t slots = 0;          ///< size of the slot table an executor needs
  std::uint32_t streams = 1;        ///< stream indices 0..streams-1
  std::uint64_t peak_live = 0;      ///< most requested bytes live at once, in replay order
  std::uint64_t allocations = 0;    ///< allocate ops
  std::uint64_t skipped_frees = 0;  ///< frees of pointers not live in the replay
  std::uint64_t threads = 0;        ///< distinct log threads
  std::string dialect;              ///< "gpumem" or "rmm"
};

/// Reads and plans the log at `path`. Throws std::runtime_error naming the file if it
/// cannot be read or has no usable header; damaged lines are skipped (as the log tools do).
[[nodiscard]] replay_plan plan_replay(std::string const& path, std::string name);

/// Executes ops on behalf of an allocator; shared bookkeeping of the executors.
struct replay_tally {
  std::uint64_t failed = 0;         ///< allocations refused
  std::uint64_t calls = 0;          ///< allocate + free calls made
  double host_seconds = 0;          ///< time inside those calls
  std::uint64_t peak_reserved = 0;  ///< as the allocator reports it (0: unknown)
  bool reserved_known = false;
  std::uint64_t peak_device_used = 0;  ///< cudaMemGetInfo's used bytes above the start (0: not measured)
  bool device_used_known = false;
};

}  // namespace gpumem_compare
