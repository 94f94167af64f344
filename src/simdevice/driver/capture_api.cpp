// Stream capture and the graphs it produces (never launched: the sim has no
// graph execution, only the capture rules and the graph-owned memory).

#include "memory.hpp"
#include "stream.hpp"

#include <unordered_set>

using namespace gpumemsim;

namespace {

struct graph_registry {
  std::mutex mutex;
  std::unordered_set<void const*> live;
};
graph_registry& graphs() {
  static auto* r = new graph_registry;
  return *r;
}

}  // namespace

void gpumemsim::discard_graph(graph* g) {
  std::vector<std::uintptr_t> allocations;
  std::vector<std::uintptr_t> frees;
  {
    std::lock_guard lock(capture_mutex());
    allocations.swap(g->allocations);
    frees.swap(g->frees);
    g->nodes.clear();
    g->destroyed = true;
  }
  dispose_graph_memory(g->device, allocations, frees);
}

namespace {

CUresult begin(CUstream h, CUstreamCaptureMode mode, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  return begin_capture(s, mode);
}

CUresult end(CUstream h, CUgraph* out, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  graph* g = nullptr;
  CUresult const r = end_capture(s, &g);
  if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
    discard_graph(g);
    *out = nullptr;
    return r;
  }
  if (r != CUDA_SUCCESS) return r;
  {
    auto& reg = graphs();
    std::lock_guard lock(reg.mutex);
    reg.live.insert(g);
  }
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream h, CUstreamCaptureStatus* status, bool ptsz, char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *status = capture_status(s).status;
  return CUDA_SUCCESS;
}

CUresult capture_info_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* g,
                         const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* num_deps, bool ptsz,
                         char const* entry) {
  stream* s = nullptr;
  if (CUresult r = resolve_stream(h, ptsz, entry, &s); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  capture_info const info = capture_status(s);
  *status = info.status;
  if (info.status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  if (id != nullptr) *id = info.id;
  if (g != nullptr) *g = reinterpret_cast<CUgraph>(info.g);
  // The sim keeps no node dependency sets.
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (num_deps != nullptr) *num_deps = 0;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  SIM_ENTRY("cuStreamBeginCapture_v2");
  return begin(h, mode, false, "cuStreamBeginCapture_v2");
}
SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) {
  SIM_ENTRY("cuStreamBeginCapture_v2_ptsz");
  return begin(h, mode, true, "cuStreamBeginCapture_v2_ptsz");
}

CUresult cuStreamEndCapture(CUstream h, CUgraph* out) {
  SIM_ENTRY("cuStreamEndCapture");
  return end(h, out, false, "cuStreamEndCapture");
}
SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph* out) {
  SIM_ENTRY("cuStreamEndCapture_ptsz");
  return end(h, out, true, "cuStreamEndCapture_ptsz");
}

CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  SIM_ENTRY("cuStreamIsCapturing");
  return is_capturing(h, status, false, "cuStreamIsCapturing");
}
SIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* status) {
  SIM_ENTRY("cuStreamIsCapturing_ptsz");
  return is_capturing(h, status, true, "cuStreamIsCapturing_ptsz");
}

CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* g,
                                   const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* num_deps) {
  SIM_ENTRY("cuStreamGetCaptureInfo_v3");
  return capture_info_v3(h, status, id, g, deps, edges, num_deps, false, "cuStreamGetCaptureInfo_v3");
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                                   CUgraph* g, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                                                   size_t* num_deps) {
  SIM_ENTRY("cuStreamGetCaptureInfo_v3_ptsz");
  return capture_info_v3(h, status, id, g, deps, edges, num_deps, true, "cuStreamGetCaptureInfo_v3_ptsz");
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  SIM_ENTRY("cuThreadExchangeStreamCaptureMode");
  SIM_REQUIRE_INIT();
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, thread_capture_mode());
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph h) {
  SIM_ENTRY("cuGraphDestroy");
  SIM_REQUIRE_INIT();
  {
    auto& reg = graphs();
    std::lock_guard lock(reg.mutex);
    if (reg.live.erase(h) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  discard_graph(reinterpret_cast<graph*>(h));
  return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph h, CUgraphNode* nodes, size_t* count) {
  SIM_ENTRY("cuGraphGetNodes");
  SIM_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  {
    auto& reg = graphs();
    std::lock_guard lock(reg.mutex);
    if (reg.live.count(h) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  auto* g = reinterpret_cast<graph*>(h);
  std::lock_guard lock(capture_mutex());
  std::size_t const n = g->nodes.size() + g->allocations.size() + g->frees.size();
  // Only the count is modelled; node handles are not.
  if (nodes != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  *count = n;
  return CUDA_SUCCESS;
}
