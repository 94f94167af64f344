#pragma once
// stream_entry<List>: one stream's free memory in stream_free_lists, and the
// protocol that lets the stream's owning thread free into it without its lock.
//
// Deferred frees. The common case is one thread per stream, freeing a block and
// asking for one of the same size next. The entry's owner (the first thread to
// free on the stream, until it exits; then the next thread to free there claims
// it) may leave its latest stream-ordered free in the entry's one-block slot
// without taking the lock (entry::defer()): a release store, no atomic
// read-modify-write. Every holder of the entry's lock files it first (locking an
// entry settles it, with the double-free check any free gets), except the
// resource's allocation path, which may hand it out again at once if it fits
// exactly and overlaps no free block. So an allocate+free pair takes one lock
// instead of two, and since every lock holder settles before anything else, no
// observer (info, release, reclaim, gathers, a destroyed stream, the last looks
// before out of memory, growth decisions) can tell a deferred block from one filed
// when it was freed. The slot lives in the entry: it goes wherever the stream's
// list goes (a destroyed stream's batch, under the event recorded there) and never
// serves a later stream with the same handle.
// The protocol: only the owner writes the block, and only after reading `deferred`
// false (acquire: a reader that emptied the slot is done with it), then stores
// true (release); a holder of the lock reads the block only after reading it true
// (acquire), and stores false (release) when done. Ownership moves only from an
// exited thread (owned_entries), never from a live one: a live owner may be between
// its check and its store, so two writers could meet in the slot.
//

#include <gpumem/detail/assert.hpp>
#include <gpumem/detail/spin_mutex.hpp>
#include <gpumem/detail/stream_ordering.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace gpumem::detail {

#ifndef NDEBUG
/// Debug builds: the calling thread's borrow epoch, advanced by every lookup and
/// every call that may re-enter a resource (end_borrows()).
inline std::uint64_t& borrow_epoch() noexcept {
  thread_local std::uint64_t epoch = 0;
  return epoch;
}
#endif

/// The calling thread's tag as an owner of free-list entries (entry::owner):
/// owner_tag_none until it claims one, owner_tag_exited once it exits. Neither
/// is ever an entry's owner (0, or a thread tag: small), so a thread in either
/// state defers nothing.
inline constexpr std::uint64_t owner_tag_none = ~std::uint64_t{0};
inline constexpr std::uint64_t owner_tag_exited = ~std::uint64_t{0} - 1;
inline thread_local std::uint64_t tl_owner_tag = owner_tag_none;

/// The entries the calling thread owns, given up as it exits so that the next
/// thread to free on their streams can claim them. Holds each entry's owner word
/// through a weak pointer: the entry may be gone first.
class owned_entries {
 public:
  using owner_word = std::atomic<std::uint64_t>;
  owned_entries() = default;
  owned_entries(owned_entries const&) = delete;
  owned_entries& operator=(owned_entries const&) = delete;
  ~owned_entries() {
    std::uint64_t const me = tl_owner_tag;
    tl_owner_tag = owner_tag_exited;  // frees from later thread-exit destructors take the lock
    for (auto& w : words_) {
      if (auto word = w.lock()) {
        auto expected = me;
        // release: this thread's deferred frees happen before the next owner's
        word->compare_exchange_strong(expected, 0, std::memory_order_release, std::memory_order_relaxed);
      }
    }
  }
  /// Records an owner word (before the claim); throws bad_alloc without host memory.
  void add(std::weak_ptr<owner_word> w) {
    if (words_.size() == words_.capacity()) std::erase_if(words_, [](auto const& x) { return x.expired(); });
    words_.push_back(std::move(w));
  }

 private:
  std::vector<std::weak_ptr<owner_word>> words_;
};
inline thread_local owned_entries tl_owned_entries;

/// Ends the validity of every entry this thread borrowed (borrowed_entry): call it
/// before anything that may re-enter a resource (an upstream call). Free in
/// release builds.
inline void end_borrows() noexcept {
#ifndef NDEBUG
  ++borrow_epoch();
#endif
}

/// An entry obtained with stream_free_lists::borrow(): a plain pointer in release
/// builds; debug builds check at each use that no lookup or upstream call came
/// between the borrow and the use (the rule borrow() documents).
template <class Entry>
class borrowed_entry {
 public:
  explicit borrowed_entry(Entry& e) noexcept : e_{&e} {}
  Entry& operator*() const noexcept {
    check();
    return *e_;
  }
  Entry* operator->() const noexcept {
    check();
    return e_;
  }

 private:
  void check() const noexcept {
    GPUMEM_ASSERT(epoch_ == borrow_epoch(),
                  "a borrowed free-list entry was used after a lookup or an upstream call (take get() instead)");
  }
  Entry* e_;
#ifndef NDEBUG
  std::uint64_t epoch_ = borrow_epoch();
#endif
};

/// One stream's free memory. Lockable: locking the entry itself (std::lock_guard
/// on it) also settles its deferred free (see "Deferred frees"), so every holder
/// sees all of it. Only an allocation path that may hand the deferred block out
/// directly locks `mutex` alone (has_deferred(), take_deferred()); a resource
/// that never defers may too.
template <class List>
struct stream_entry {
  using block_type = typename List::block_type;

  explicit stream_entry(stream_identity i, bool is_clean = false) : id{i}, clean{is_clean} {}
  stream_identity const id;
  bool const clean;  ///< the clean list: never recorded on, never waits
  spin_mutex mutex;
  std::atomic<bool> deferred{false};    ///< deferred_block holds a free (the protocol above)
  std::atomic<std::uint64_t> owner{0};  ///< the thread that may defer (its tl_owner_tag); 0: none
  block_type deferred_block{};
  List list;        ///< guarded by mutex
  CUevent event{};  ///< guarded by mutex
  /// The entry whose list this one took last (gather_into; compared, never
  /// dereferenced: it may be gone). Guarded by mutex.
  stream_entry const* took_from{};

  void lock() noexcept {
    mutex.lock();
    settle();
  }
  [[nodiscard]] bool try_lock() noexcept {
    if (!mutex.try_lock()) return false;
    settle();
    return true;
  }
  void unlock() noexcept { mutex.unlock(); }

  /// The owner's free without the lock (stream_free_lists::owns() first): `b`
  /// waits in the slot for the next holder of the lock. False if the slot is
  /// taken: file `b` under the lock instead.
  [[nodiscard]] bool defer(block_type const& b) noexcept {
    if (deferred.load(std::memory_order_acquire)) return false;
    deferred_block = b;  // no one reads it while `deferred` is false
    deferred.store(true, std::memory_order_release);
    return true;
  }
  /// Under mutex: whether a deferred free waits (deferred_block is then stable
  /// until take_deferred()).
  [[nodiscard]] bool has_deferred() const noexcept { return deferred.load(std::memory_order_acquire); }
  /// Under mutex, after has_deferred(): empties the slot, its block read and
  /// handed out or filed by the caller.
  void take_deferred() noexcept { deferred.store(false, std::memory_order_release); }
  /// Under mutex: files the deferred free, if any (dropped if it overlaps a free
  /// block: a double free).
  void settle() noexcept {
    if (!has_deferred()) return;
    block_type const b = deferred_block;
    take_deferred();
    try {
      if constexpr (requires(List & l) { l.insert(b); }) {
        static_cast<void>(list.insert(b));  // as a free under the lock would have been
      } else {
        list.add(b);
      }
    } catch (...) {
      // No host memory for the bookkeeping: the block is lost to reuse (never corrupts).
    }
  }
};

}  // namespace gpumem::detail
