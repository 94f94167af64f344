#include "serve/capture_guard.hpp"

#include "serve/device_chains.hpp"
#include "shim_state.hpp"

#include <gpumem/detail/driver_api.hpp>
#include <gpumem/detail/stream_ordering.hpp>
#include <gpumem/stream_tracker.hpp>

#include <mutex>
#include <new>
#include <vector>

namespace gpumem::shim {
namespace {

struct parked_block {
  void* p;
  std::size_t bytes;
  device_chain* chain;
  CUevent after;  ///< the legacy stream waits on it first (null: nothing to wait for)
};

struct parking {
  std::mutex mtx;
  std::vector<parked_block> blocks;
};

parking& parked() noexcept {
  // NOLINTNEXTLINE(bugprone-unhandled-exception-at-new): running out of memory here ends the process
  static auto* const p = new parking{};
  return *p;
}

}  // namespace

bool stream_capturing(CUstream stream) noexcept {
  if (!stream_tracker::capture_active()) return false;
  return detail::stream_capture_state(stream) != detail::capture_state::none;
}

bool thread_capture_mode_not_relaxed() noexcept {
  scoped_relaxed_capture const look;  // reads the mode, and puts it back at once
  return !look.was_relaxed();
}

CUresult unsafe_call_verdict() noexcept {
  auto const& d = detail::driver();
  if (d.cuMemAlloc == nullptr || d.cuMemFree == nullptr) return CUDA_SUCCESS;
  CUdeviceptr probe = 0;
  CUresult const r = d.cuMemAlloc(&probe, 1);
  if (r == CUDA_SUCCESS) (void)d.cuMemFree(probe);
  return r;
}

void scoped_relaxed_capture::relax() noexcept {
  auto const& d = detail::driver();
  saved_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  exchanged_ = d.cuThreadExchangeStreamCaptureMode != nullptr &&
               d.cuThreadExchangeStreamCaptureMode(&saved_) == CUDA_SUCCESS;
}

void scoped_relaxed_capture::restore() noexcept { (void)detail::driver().cuThreadExchangeStreamCaptureMode(&saved_); }

void park_until_captures_end(void* p, std::size_t bytes, device_chain* chain, CUevent after) noexcept {
  auto& k = parked();
  std::lock_guard lock{k.mtx};
  try {
    k.blocks.push_back(parked_block{p, bytes, chain, after});
  } catch (...) {
    // No host memory to remember it: leaking the block is safe, reusing it is not.
    message(level::warn, "cannot park a block freed during capture; %zu bytes stay reserved", bytes);
    detail::destroy_event(after);
  }
}

void note_capture_ended() noexcept {
  stream_tracker::capture_ended();
  if (stream_tracker::capture_active()) return;
  std::vector<parked_block> blocks;
  {
    auto& k = parked();
    std::lock_guard lock{k.mtx};
    blocks.swap(k.blocks);
  }
  for (auto const& b : blocks) {
    // Free with cudaFree semantics: the graph that used it may still run (in
    // stream mode, stream order on the legacy stream is all that is promised).
    scoped_chain_context ctx{*b.chain};
    if (CUevent after = b.after; after != nullptr) {
      bool const waited = detail::wait_event(CU_STREAM_LEGACY, after) == CUDA_SUCCESS;
      detail::destroy_event(after);
      if (!waited) {
        message(level::warn, "cannot order a block freed on another device's stream; %zu bytes stay reserved", b.bytes);
        continue;  // leaking it is safe, reusing it is not
      }
    }
    free_as_cuda_free(*b.chain, b.p, b.bytes, "capture-end");
  }
}

void reset_parked_blocks_after_fork() noexcept {
  auto& k = parked();
  new (&k.mtx) std::mutex{};
  k.blocks.clear();
}

}  // namespace gpumem::shim
