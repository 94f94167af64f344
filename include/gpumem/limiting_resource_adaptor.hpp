#pragma once
// limiting_resource_adaptor: caps the bytes outstanding through it.
//
// Each allocation is charged its requested size rounded up to 256 bytes (what the
// device really hands out at minimum). The charge is reserved atomically *before*
// the upstream call (a CAS loop, so two threads can never both squeeze under the
// cap) and rolled back if the upstream throws. Over the cap: out_of_memory whose
// message gives the limit, the bytes in use and the request.
// Thread safety: lock-free (one CAS loop per allocate, one fetch_sub per free).
// Streams: passed through unchanged.

#include <gpumem/forwarding_resource_adaptor.hpp>

#include <atomic>
#include <cstddef>

namespace gpumem {

class limiting_resource_adaptor final : public forwarding_resource_adaptor {
 public:
  /// `upstream` must outlive the adaptor. Throws logic_error on null.
  limiting_resource_adaptor(device_memory_resource* upstream, std::size_t limit);

  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  /// Bytes charged now (requests rounded to 256).
  [[nodiscard]] std::size_t used_bytes() const noexcept { return used_.load(std::memory_order_relaxed); }
  /// limit() - used_bytes().
  [[nodiscard]] std::size_t available_bytes() const noexcept {
    auto const u = used_bytes();
    return u >= limit_ ? 0 : limit_ - u;
  }

  /// Charges `bytes` of device memory that did not come through the adaptor (memory
  /// the program maps itself) against the same limit: false, and nothing charged,
  /// if it does not fit. discharge() gives the charge back.
  [[nodiscard]] bool try_charge(std::size_t bytes) noexcept;
  void discharge(std::size_t bytes) noexcept;

  /// The charge for a request of `bytes`.
  [[nodiscard]] static constexpr std::size_t charge(std::size_t bytes) noexcept {
    return align_up(bytes, allocation_alignment);
  }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  /// Adds `need` to the bytes in use unless that passes the limit; `used`: the bytes
  /// in use it last saw.
  bool reserve(std::size_t need, std::size_t& used) noexcept;

  std::size_t limit_;
  alignas(64) std::atomic<std::size_t> used_{0};
};

}  // namespace gpumem
