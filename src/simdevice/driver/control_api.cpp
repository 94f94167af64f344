// The gpumemsim_* control API (gpumemsim.h): exported by the sim only.

#include "state.hpp"
#include "stream.hpp"
#include "vmm.hpp"

#include <cstdio>

using namespace gpumemsim;

int gpumemsim_present(void) { return 1; }

long gpumemsim_violations(void) { return violation_count(); }

void gpumemsim_reset_violations(void) { reset_violations(); }

size_t gpumemsim_live_allocations(int ordinal) {
  device* d = device_at(ordinal);
  return d != nullptr ? d->heap->live_count() : 0;
}

size_t gpumemsim_live_bytes(int ordinal) {
  device* d = device_at(ordinal);
  return d != nullptr ? d->heap->used() : 0;
}

void gpumemsim_run_all(void) { run_everything(); }

long gpumemsim_call_count(const char* entry) { return entry != nullptr ? call_count(entry) : 0; }

void gpumemsim_set_device_memory(int ordinal, size_t bytes) {
  device* d = device_at(ordinal);
  if (d == nullptr || bytes == 0) {
    std::fprintf(stderr, "gpumemsim: set_device_memory(%d, %zu): no such device or zero size\n", ordinal, bytes);
    return;
  }
  if (!d->heap->resize(bytes)) {
    std::fprintf(stderr, "gpumemsim: set_device_memory(%d, %zu) ignored: allocations are live\n", ordinal, bytes);
  }
}

void gpumemsim_set_posix_fd_handles(int mode) {
  if (mode < 0 || mode > 2) {
    std::fprintf(stderr, "gpumemsim: set_posix_fd_handles(%d): not 0, 1 or 2\n", mode);
    return;
  }
  vmm_state::set_posix_fd_handles(static_cast<vmm_state::fd_handles>(mode));
}
