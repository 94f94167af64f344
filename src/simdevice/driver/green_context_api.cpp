// Green contexts (CUDA 12.4+): SM resources, their split and descriptors,
// cuGreenCtxCreate/Destroy, cuCtxFromGreenCtx, green streams, context-wide
// event records and waits.
//
// The sim has no SMs to partition: resources only carry counts. A green context
// is a context of its own (state.hpp, green_context) with its own legacy stream
// and streams on its primary context's device, so all stream semantics (implicit
// waits, captures, lazy running) apply per green context unchanged.

#include "stream.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_set>

using namespace gpumemsim;

namespace {

/// SMs of a simulated device, as CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT (an H100).
constexpr unsigned device_sm_count = 132;
/// The smallest group cuDevSmResourceSplitByCount makes (minCount 0; guessed).
constexpr unsigned min_group_sms = 2;

/// A resource descriptor (cuDevResourceGenerateDesc); never deleted.
struct resource_desc {
  unsigned sm_count = 0;
};

struct desc_registry {
  std::mutex mutex;
  std::unordered_set<void const*> all;
};
desc_registry& descriptors() {
  static auto* r = new desc_registry;
  return *r;
}

// The descriptor behind `h`, or nullptr.
resource_desc* resolve_desc(CUdevResourceDesc h) {
  auto& r = descriptors();
  std::lock_guard lock(r.mutex);
  return r.all.count(h) != 0 ? reinterpret_cast<resource_desc*>(h) : nullptr;
}

// An SM resource of `count` SMs (partition size and alignment guessed).
void sm_resource(CUdevResource* out, unsigned count) {
  std::memset(out, 0, sizeof *out);
  out->type = CU_DEV_RESOURCE_TYPE_SM;
  out->sm.smCount = count;
  out->sm.minSmPartitionSize = min_group_sms;
  out->sm.smCoscheduledAlignment = min_group_sms;
}

// The SM resource `type` of something holding `count` SMs.
CUresult get_resource(CUdevResource* out, CUdevResourceType type, unsigned count) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  sm_resource(out, count);
  return CUDA_SUCCESS;
}

}  // namespace

// ---- resources --------------------------------------------------------------

CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource* resource, CUdevResourceType type) {
  SIM_ENTRY("cuDeviceGetDevResource");
  SIM_REQUIRE_INIT();
  if (device_at(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return get_resource(resource, type, device_sm_count);
}

CUresult cuCtxGetDevResource(CUcontext h, CUdevResource* resource, CUdevResourceType type) {
  SIM_ENTRY("cuCtxGetDevResource");
  SIM_REQUIRE_INIT();
  context* c = context_from_handle(h);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return get_resource(resource, type, c->green != nullptr ? c->green->sm_count : device_sm_count);
}

CUresult cuGreenCtxGetDevResource(CUgreenCtx h, CUdevResource* resource, CUdevResourceType type) {
  SIM_ENTRY("cuGreenCtxGetDevResource");
  green_context* g = nullptr;
  if (CUresult r = resolve_green(h, "cuGreenCtxGetDevResource", &g); r != CUDA_SUCCESS) return r;
  return get_resource(resource, type, g->sm_count);
}

// Groups of minCount SMs (0: 2), as many as fit and *nbGroups allows; the rest
// goes to `remaining`. A NULL `result` only counts the groups that would fit.
CUresult cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nbGroups, const CUdevResource* input,
                                     CUdevResource* remaining, unsigned int useFlags, unsigned int minCount) {
  SIM_ENTRY("cuDevSmResourceSplitByCount");
  SIM_REQUIRE_INIT();
  if (nbGroups == nullptr || input == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  unsigned const known = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                         CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;
  if ((useFlags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;  // guessed
  unsigned const per_group = minCount == 0 ? min_group_sms : minCount;
  unsigned const fit = input->sm.smCount / per_group;
  unsigned const made = result == nullptr ? fit : std::min(*nbGroups, fit);
  for (unsigned i = 0; result != nullptr && i < made; ++i) sm_resource(&result[i], per_group);
  if (remaining != nullptr) sm_resource(remaining, input->sm.smCount - made * per_group);
  *nbGroups = made;
  return CUDA_SUCCESS;
}

CUresult cuDevResourceGenerateDesc(CUdevResourceDesc* phDesc, CUdevResource* resources, unsigned int nbResources) {
  SIM_ENTRY("cuDevResourceGenerateDesc");
  SIM_REQUIRE_INIT();
  if (phDesc == nullptr || resources == nullptr || nbResources == 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned total = 0;
  for (unsigned i = 0; i < nbResources; ++i) {
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    total += resources[i].sm.smCount;
  }
  // No SMs, or more than a device has (guessed).
  if (total == 0 || total > device_sm_count) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  auto* d = new resource_desc;
  d->sm_count = total;
  auto& r = descriptors();
  std::lock_guard lock(r.mutex);
  r.all.insert(d);
  *phDesc = reinterpret_cast<CUdevResourceDesc>(d);
  return CUDA_SUCCESS;
}

// ---- green contexts ---------------------------------------------------------

CUresult cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  SIM_ENTRY("cuGreenCtxCreate");
  SIM_REQUIRE_INIT();
  if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device_at(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  // Documented: CU_GREEN_CTX_DEFAULT_STREAM is required (and the only flag).
  if (flags != static_cast<unsigned>(CU_GREEN_CTX_DEFAULT_STREAM)) return CUDA_ERROR_INVALID_VALUE;
  resource_desc const* d = resolve_desc(desc);
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;  // guessed
  // Documented: it retains the primary context, released by cuGreenCtxDestroy;
  // not made current.
  retain_primary(dev);
  *phCtx = to_handle(create_green_context(dev, d->sm_count));
  return CUDA_SUCCESS;
}

// Streams of the green context stay (documented); their queued work still runs,
// as on a GPU, whenever something synchronizes it.
CUresult cuGreenCtxDestroy(CUgreenCtx h) {
  SIM_ENTRY("cuGreenCtxDestroy");
  green_context* g = nullptr;
  if (CUresult r = resolve_green(h, "cuGreenCtxDestroy", &g); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard lock(g->ctx->mutex);
    if (g->ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;  // lost a race with another destroy
    g->ctx->destroyed = true;
    g->ctx->refcount = 0;
  }
  return release_primary(g->ctx->device);
}

CUresult cuCtxFromGreenCtx(CUcontext* pContext, CUgreenCtx h) {
  SIM_ENTRY("cuCtxFromGreenCtx");
  green_context* g = nullptr;
  if (CUresult r = resolve_green(h, "cuCtxFromGreenCtx", &g); r != CUDA_SUCCESS) return r;
  if (pContext == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pContext = to_handle(g->ctx);
  return CUDA_SUCCESS;
}

CUresult cuGreenCtxGetId(CUgreenCtx h, unsigned long long* greenCtxId) {
  SIM_ENTRY("cuGreenCtxGetId");
  SIM_REQUIRE_INIT();
  if (greenCtxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (h == nullptr) {
    // Documented: NULL means the current context's green context.
    context* c = current_context();
    if (c == nullptr || c->green == nullptr) return CUDA_ERROR_INVALID_CONTEXT;  // guessed
    h = to_handle(c->green);
  }
  green_context* g = nullptr;
  if (CUresult r = resolve_green(h, "cuGreenCtxGetId", &g); r != CUDA_SUCCESS) return r;
  *greenCtxId = g->id;
  return CUDA_SUCCESS;
}

// ---- streams and events -----------------------------------------------------

CUresult cuGreenCtxStreamCreate(CUstream* phStream, CUgreenCtx h, unsigned int flags, int priority) {
  SIM_ENTRY("cuGreenCtxStreamCreate");
  green_context* g = nullptr;
  if (CUresult r = resolve_green(h, "cuGreenCtxStreamCreate", &g); r != CUDA_SUCCESS) return r;
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Documented: CU_STREAM_NON_BLOCKING must be given.
  if (flags != static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  priority = std::clamp(priority, -5, 0);  // as cuStreamCreateWithPriority
  *phStream = reinterpret_cast<CUstream>(new_stream(g->ctx, stream_kind::user, flags, priority));
  return CUDA_SUCCESS;
}

CUresult cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx* phCtx) {
  SIM_ENTRY("cuStreamGetGreenCtx");
  stream* s = nullptr;
  if (CUresult r = resolve_stream(hStream, false, "cuStreamGetGreenCtx", &s); r != CUDA_SUCCESS) return r;
  if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phCtx = s->ctx->green != nullptr ? to_handle(s->ctx->green) : nullptr;
  return CUDA_SUCCESS;
}

// Captures everything queued so far on every stream of the green context: its
// recorder stream waits for all of them, then the event is recorded there.
CUresult cuGreenCtxRecordEvent(CUgreenCtx h, CUevent hEvent) {
  SIM_ENTRY("cuGreenCtxRecordEvent");
  green_context* g = nullptr;
  if (CUresult r = resolve_green(h, "cuGreenCtxRecordEvent", &g); r != CUDA_SUCCESS) return r;
  event* e = nullptr;
  if (CUresult r = resolve_event(hEvent, "cuGreenCtxRecordEvent", &e); r != CUDA_SUCCESS) return r;
  // Documented: the event must come from the same primary context (it, or one of
  // its green contexts).
  if (base_context(e->ctx) != g->primary) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = refuse_context_capture(g->ctx, "cuGreenCtxRecordEvent while a stream of the context captures");
      r != CUDA_SUCCESS)
    return r;
  if (CUresult r = enqueue_wait_context(g->ctx->recorder, g->ctx); r != CUDA_SUCCESS) return r;
  return record_event(e, g->ctx->recorder);
}

// All later work of the green context, on any of its streams (streams made later
// included), waits for what the event captured. `hEvent` may come from any context.
CUresult cuGreenCtxWaitEvent(CUgreenCtx h, CUevent hEvent) {
  SIM_ENTRY("cuGreenCtxWaitEvent");
  green_context* g = nullptr;
  if (CUresult r = resolve_green(h, "cuGreenCtxWaitEvent", &g); r != CUDA_SUCCESS) return r;
  event* e = nullptr;
  if (CUresult r = resolve_event(hEvent, "cuGreenCtxWaitEvent", &e); r != CUDA_SUCCESS) return r;
  stream* on = nullptr;
  std::uint64_t seq = 0;
  capture* cap = nullptr;
  {
    std::lock_guard lock(e->mutex);
    on = e->on;
    seq = e->seq;
    cap = e->cap;
  }
  // Documented: refused, invalidating the capture, when the event was recorded in
  // an ongoing capture or a stream of the green context captures.
  bool const captured_event = cap != nullptr && invalidate_if_active(cap, "cuGreenCtxWaitEvent on a captured event");
  bool const capturing = refuse_context_capture(g->ctx, "cuGreenCtxWaitEvent while a stream of the context captures") !=
                         CUDA_SUCCESS;
  if (captured_event || capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (on == nullptr) return CUDA_SUCCESS;  // never recorded (or recorded in an ended capture): nothing to wait for
  return context_wait(g->ctx, on, seq);
}
