#include <gpumem/detail/peak_gauge.hpp>

#include <algorithm>

namespace gpumem::detail {
namespace {

constexpr auto relaxed = std::memory_order_relaxed;

std::int64_t as_signed(std::uint64_t v) noexcept { return static_cast<std::int64_t>(v); }
std::uint64_t as_unsigned(std::int64_t v) noexcept { return static_cast<std::uint64_t>(v); }

}  // namespace

void peak_gauge::publish(std::atomic<std::uint64_t>* own_published, std::int64_t mine,
                         std::int64_t mine_published) noexcept {
  published_.fetch_add(mine - mine_published, relaxed);
  own_published->store(as_unsigned(mine), relaxed);
}

void peak_gauge::add_shared(std::int64_t v) noexcept {
  // No slot of its own (an exiting thread, or none left in the process): a shared
  // add, and this thread has no part outside the retired totals.
  slots_.add(value, as_unsigned(v));
  if (v > 0) raise_peak(estimate_with(0, 0));
}

namespace {

/// Raises `a` to `to` unless another thread already raised it further.
void raise(std::atomic<std::int64_t>& a, std::int64_t to) noexcept {
  auto seen = a.load(relaxed);
  while (to > seen && !a.compare_exchange_weak(seen, to, relaxed)) {}
}

}  // namespace

void peak_gauge::raise_peak_from(std::int64_t to) const noexcept {
  // The mark first, then the peak: a thread that finds the mark raised and skips
  // the peak was at most `to`, which this thread raises the peak to.
  raise(mark_, to);
  raise(peak_, to);
}

std::int64_t peak_gauge::reset_mark() noexcept {
  auto const now = estimate();
  raise(peak_, now);  // the new mark may not stand above the peak
  return mark_.exchange(now, relaxed);
}

std::int64_t peak_gauge::current() const noexcept { return as_signed(slots_.get(value)); }

peak_gauge::reading peak_gauge::read() const noexcept {
  // The exact value may be above the peak the threads' estimates raised (each is
  // off by up to a step): raised to it, not merely reported, so that the peak
  // never goes down from one read to the next.
  auto const now = current();
  raise_peak(now);
  return {now, peak_.load(relaxed)};
}

std::int64_t peak_gauge::estimate() const noexcept {
  auto* own_published = slots_.own_slot(published);
  if (own_published == nullptr) return estimate_with(0, 0);
  auto* own = own_published + (value - published);
  return estimate_with(as_signed(own->load(relaxed)), as_signed(own_published->load(relaxed)));
}

}  // namespace gpumem::detail
