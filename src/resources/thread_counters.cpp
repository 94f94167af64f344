#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/thread_counters.hpp>

#include <pthread.h>

#include <bitset>
#include <mutex>
#include <new>

namespace gpumem::detail {
namespace {

using slot = std::atomic<std::uint64_t>;
constexpr std::size_t slots = thread_counters::slots_per_thread;

struct alignas(64) block {
  slot v[slots]{};
  block* next = nullptr;  ///< every block ever made (never freed)
  bool in_use = false;    ///< guarded by registry::mtx
};

// Never destroyed: threads may count while the process exits.
struct registry {
  std::mutex mtx;
  block* blocks = nullptr;   ///< guarded by mtx
  std::bitset<slots> owned;  ///< slot numbers held by a thread_counters; guarded by mtx
  slot retired[slots]{};     ///< exited threads' values, and adds made without a block
};

void after_fork_in_child() noexcept { thread_counters::reset_after_fork(); }

registry& reg() noexcept {
  alignas(registry) static unsigned char storage[sizeof(registry)];
  static auto* const r = [] {
    auto* made = new (storage) registry{};
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    return made;
  }();
  return *r;
}

/// Moves a block's values into the retired totals and frees it. Caller holds mtx.
/// Ascending order, release: a lock-free reader that sees slot i's new total sees
/// every lower slot's (thread_counters::retired).
void retire(block& b) noexcept {
  for (std::size_t i = 0; i < slots; ++i) {
    reg().retired[i].fetch_add(b.v[i].load(std::memory_order_relaxed), std::memory_order_release);
    b.v[i].store(0, std::memory_order_relaxed);
  }
  b.in_use = false;
}

// Retires the thread's block when the thread exits; later adds of that thread go
// to the retired totals (tl_counter_slots stays null: attach() sees tl_exited).
thread_local bool tl_exited = false;
struct detacher {
  block* b = nullptr;
  ~detacher() {
    tl_exited = true;
    tl_counter_slots = nullptr;
    if (b == nullptr) return;
    std::lock_guard lock{reg().mtx};
    retire(*b);
    b = nullptr;
  }
};
thread_local detacher tl_detacher;

}  // namespace

std::atomic<std::uint64_t>* thread_counters::attach() noexcept {
  if (tl_exited) return nullptr;
  auto& d = tl_detacher;  // constructed here, on the thread's first add
  if (d.b != nullptr) return nullptr;
  auto& r = reg();
  std::lock_guard lock{r.mtx};
  block* b = r.blocks;
  while (b != nullptr && b->in_use) b = b->next;
  if (b == nullptr) {
    b = new (std::nothrow) block{};
    if (b == nullptr) return nullptr;  // no host memory: this add is a shared one
    b->next = r.blocks;
    r.blocks = b;
  }
  b->in_use = true;
  d.b = b;
  tl_counter_slots = b->v;
  return b->v;
}

thread_counters::thread_counters(std::size_t n) noexcept : n_{n} {
  auto& r = reg();
  {
    std::lock_guard lock{r.mtx};
    for (std::size_t first = 0; n > 0 && first + n <= slots; ++first) {
      std::size_t k = 0;
      while (k < n && !r.owned[first + k]) ++k;
      if (k < n) {
        first += k;  // the run is broken at first + k
        continue;
      }
      for (k = 0; k < n; ++k) r.owned.set(first + k);
      first_ = first;
      break;
    }
  }
  if (first_ == no_slots && n > 0) shared_ = new (std::nothrow) slot[n]{};
}

thread_counters::~thread_counters() {
  if (first_ == no_slots) {
    delete[] shared_;
    return;
  }
  // The next owner of these slot numbers starts at 0 in every block.
  reset();
  std::lock_guard lock{reg().mtx};
  for (std::size_t k = 0; k < n_; ++k) reg().owned.reset(first_ + k);
}

void thread_counters::add_shared(std::size_t i, std::uint64_t v) noexcept {
  GPUMEM_ASSERT(i < n_, "thread_counters: counter index out of range");
  if (first_ != no_slots) {
    reg().retired[first_ + i].fetch_add(v, std::memory_order_relaxed);
  } else if (shared_ != nullptr) {
    shared_[i].fetch_add(v, std::memory_order_relaxed);
  }
}

std::atomic<std::uint64_t> const* thread_counters::retired(std::size_t i) const noexcept {
  GPUMEM_ASSERT(i < n_, "thread_counters: counter index out of range");
  if (first_ == no_slots) {
    static slot const zero{0};  // no slots and no host memory: nothing is ever counted
    return shared_ != nullptr ? &shared_[i] : &zero;
  }
  return &reg().retired[first_ + i];
}

std::uint64_t thread_counters::get(std::size_t i) const noexcept {
  GPUMEM_ASSERT(i < n_, "thread_counters: counter index out of range");
  if (first_ == no_slots) return shared_ != nullptr ? shared_[i].load(std::memory_order_relaxed) : 0;
  auto& r = reg();
  std::size_t const s = first_ + i;
  std::lock_guard lock{r.mtx};
  std::uint64_t sum = r.retired[s].load(std::memory_order_relaxed);
  for (block* b = r.blocks; b != nullptr; b = b->next) {
    if (b->in_use) sum += b->v[s].load(std::memory_order_relaxed);
  }
  return sum;
}

void thread_counters::reset() noexcept {
  if (first_ == no_slots) {
    for (std::size_t i = 0; shared_ != nullptr && i < n_; ++i) shared_[i].store(0, std::memory_order_relaxed);
    return;
  }
  auto& r = reg();
  std::lock_guard lock{r.mtx};
  for (std::size_t k = first_; k < first_ + n_; ++k) {
    r.retired[k].store(0, std::memory_order_relaxed);
    for (block* b = r.blocks; b != nullptr; b = b->next) b->v[k].store(0, std::memory_order_relaxed);
  }
}

void thread_counters::reset_after_fork() noexcept {
  auto& r = reg();
  new (&r.mtx) std::mutex{};
  for (block* b = r.blocks; b != nullptr; b = b->next) {
    if (b->in_use && b != tl_detacher.b) retire(*b);
  }
}

}  // namespace gpumem::detail
