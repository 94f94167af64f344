#pragma once
// live_list: the objects of one class that are open now, for an exit hook or a
// fork handler to visit. Usable during exit whatever the order of static
// destructors: constant-initialized, trivially destructible, a pthread mutex.
//
// Intrusive: T carries `T* next_live_` and `T* prev_live_` (null when not on a
// list) and befriends live_list<T>. No allocation, O(1) add and remove.
//
// Thread safety: add, remove and for_each from any thread; for_each holds the
// list's lock while it visits (the visitor must not add or remove).
// for_each_unlocked is for a forked child, whose only thread is the caller.

#include <pthread.h>

namespace gpumem::detail {

template <class T>
class live_list {
 public:
  constexpr live_list() noexcept = default;

  void add(T* x) noexcept {
    pthread_mutex_lock(&mutex_);
    x->prev_live_ = nullptr;
    x->next_live_ = head_;
    if (head_ != nullptr) head_->prev_live_ = x;
    head_ = x;
    pthread_mutex_unlock(&mutex_);
  }

  /// Takes `x` off the list; nothing when it is not on it.
  void remove(T* x) noexcept {
    pthread_mutex_lock(&mutex_);
    if (x->prev_live_ != nullptr) {
      x->prev_live_->next_live_ = x->next_live_;
    } else if (head_ == x) {
      head_ = x->next_live_;
    }
    if (x->next_live_ != nullptr) x->next_live_->prev_live_ = x->prev_live_;
    x->next_live_ = x->prev_live_ = nullptr;
    pthread_mutex_unlock(&mutex_);
  }

  template <class F>
  void for_each(F&& visit) noexcept {
    pthread_mutex_lock(&mutex_);
    for_each_unlocked(visit);
    pthread_mutex_unlock(&mutex_);
  }

  template <class F>
  void for_each_unlocked(F&& visit) noexcept {
    for (T* x = head_; x != nullptr; x = x->next_live_) visit(x);
  }

 private:
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
  T* head_ = nullptr;
};

}  // namespace gpumem::detail
