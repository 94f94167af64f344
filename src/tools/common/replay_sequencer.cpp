#include "replay_sequencer.hpp"

#include <algorithm>
#include <functional>

namespace gpumem::tools {

replay_sequencer::replay_sequencer(std::size_t window) : window_{std::max<std::size_t>(window, 1)} {}

void replay_sequencer::push(log_event const& ev) {
  std::uint32_t i = 0;
  if (!free_nodes_.empty()) {
    i = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[i] = node{ev, none};
  } else {
    i = static_cast<std::uint32_t>(nodes_.size());
    nodes_.push_back(node{ev, none});
  }
  queue& q = threads_[ev.thread_id];
  if (q.head == none) {
    q.head = q.tail = i;
    heads_.push_back({ev.time_ns, ev.index, ev.thread_id});
    std::push_heap(heads_.begin(), heads_.end(), std::greater<>{});
  } else {
    nodes_[q.tail].next = i;
    q.tail = i;
  }
  ++held_;
}

bool replay_sequencer::pop(log_event& out, bool draining) {
  if (held_ == 0 || (!draining && held_ <= window_)) return false;
  std::pop_heap(heads_.begin(), heads_.end(), std::greater<>{});
  std::uint64_t const thread = heads_.back().thread;
  heads_.pop_back();
  auto it = threads_.find(thread);
  if (it == threads_.end()) return false;  // cannot happen: every head has its queue
  std::uint32_t const i = it->second.head;
  out = nodes_[i].ev;
  it->second.head = nodes_[i].next;
  free_nodes_.push_back(i);
  --held_;
  if (it->second.head == none) {
    threads_.erase(it);
  } else {
    log_event const& next = nodes_[it->second.head].ev;
    heads_.push_back({next.time_ns, next.index, thread});
    std::push_heap(heads_.begin(), heads_.end(), std::greater<>{});
  }
  return true;
}

}  // namespace gpumem::tools
