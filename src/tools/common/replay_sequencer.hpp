#pragma once
// The order in which a replay issues a log's calls: each log thread's events keep
// their file order (the order that thread made its calls); across threads, events
// are merged by time (TimeNs, else Time), ties by file position. The merge looks
// ahead at most `window` events: a thread whose row was written more than that many
// rows after rows of other threads with later times is replayed after them (no log
// written by gpumem or RMM comes close). Memory: the events held, at most `window`
// plus one.
//
// Thread safety: a sequencer is used by one thread at a time.

#include "log_event.hpp"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace gpumem::tools {

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

}  // namespace gpumem::tools
