#pragma once
// forwarding_resource_adaptor: the base of the adaptors (limiting, logging,
// statistics, tracking). It holds the upstream resource and forwards to it what an
// adaptor leaves as it is: release(), trim(), info(), owns(), stream_destroyed(),
// contiguous_granularity(), extends(), decommit(), commit(), begin_page_moves(),
// end_page_moves() and deallocate_calls_driver() (so an adaptor's
// own do_deallocate must not call the driver, or override that too). A
// derived adaptor implements do_allocate and do_deallocate (passing the calls on
// to get_upstream() itself) and may override the others.
//
// Thread safety and streams: the upstream's.

#include <gpumem/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem {

class forwarding_resource_adaptor : public device_memory_resource {
 public:
  [[nodiscard]] device_memory_resource* get_upstream() const noexcept { return upstream_; }

 protected:
  /// `upstream` must outlive the adaptor. Throws logic_error naming `adaptor` on null.
  forwarding_resource_adaptor(device_memory_resource* upstream, char const* adaptor);

 private:
  std::size_t do_release() override { return upstream_->release(); }
  std::size_t do_trim(std::size_t keep) override { return upstream_->trim(keep); }
  [[nodiscard]] resource_info do_info() const override { return upstream_->info(); }
  void do_stream_destroyed(stream_ref s) noexcept override { upstream_->stream_destroyed(s); }
  [[nodiscard]] bool do_owns(void const* p) const noexcept override { return upstream_->owns(p); }
  [[nodiscard]] std::size_t do_contiguous_granularity() const noexcept override {
    return upstream_->contiguous_granularity();
  }
  [[nodiscard]] bool do_extends(void const* earlier_end, void const* next) const noexcept override {
    return upstream_->extends(earlier_end, next);
  }
  bool do_decommit(void* p, std::size_t bytes) noexcept override { return upstream_->decommit(p, bytes); }
  void do_commit(void* p, std::size_t bytes) override { upstream_->commit(p, bytes); }
  void do_begin_page_moves() noexcept override { upstream_->begin_page_moves(); }
  void do_end_page_moves() noexcept override { upstream_->end_page_moves(); }
  [[nodiscard]] bool do_deallocate_calls_driver() const noexcept override {
    return upstream_->deallocate_calls_driver();
  }

  device_memory_resource* upstream_;
};

}  // namespace gpumem
