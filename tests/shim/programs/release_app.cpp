// Test program: giving cached device memory back when the program asks, the way
// CUDA programs ask (src/shim/serve/release.hpp): at synchronizations, by
// cudaMemPoolTrimTo and the default pool's attributes, and by gpumem_shim_trim.
// Linked against the toolkit's shared libcudart (the sim's at run time). argv[1]
// picks the scenario, argv[2] a variant; every scenario checks its own results.
// The device memory held is the simulated device's count (gpumemsim_live_bytes),
// so these scenarios need the sim; "sync-errors" runs on any device and prints what
// CUDA answered, for the driver to compare with and without the shim.

#include "app_support.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20U;
constexpr std::size_t working_set = 64 * MiB;
constexpr int pieces = 64;  // cudaMalloc calls of 1 MiB each
// What may stay when everything is to go back: less than the pool's 2 MiB page.
constexpr std::size_t near_zero = 2 * MiB;

std::size_t held() {
  auto const f = reinterpret_cast<std::size_t (*)(int)>(app_sim_symbol("gpumemsim_live_bytes"));
  return f != nullptr ? f(0) : 0;
}

#define HELD_AT_LEAST(n)                                                                               \
  do {                                                                                                 \
    std::size_t const h_ = held();                                                                     \
    if (h_ < (n)) {                                                                                    \
      fprintf(stderr, "CHECK FAILED %s:%d: held %zu < %zu\n", __FILE__, __LINE__, h_, std::size_t(n)); \
      ++app_failures;                                                                                  \
    }                                                                                                  \
  } while (0)
#define HELD_AT_MOST(n)                                                                                \
  do {                                                                                                 \
    std::size_t const h_ = held();                                                                     \
    if (h_ > (n)) {                                                                                    \
      fprintf(stderr, "CHECK FAILED %s:%d: held %zu > %zu\n", __FILE__, __LINE__, h_, std::size_t(n)); \
      ++app_failures;                                                                                  \
    }                                                                                                  \
  } while (0)

std::vector<void*> allocate_working_set() {
  std::vector<void*> ps(pieces);
  for (auto& p : ps) APP_CHECK_EQ(cudaMalloc(&p, MiB), cudaSuccess);
  return ps;
}

void free_all(std::vector<void*>& ps) {
  for (void* p : ps) APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  ps.clear();
}

// cudaStreamSynchronize_ptsz, what a program built with per-thread default streams
// calls (the header names it only in that build).
using stream_sync_fn = cudaError_t (*)(cudaStream_t);
stream_sync_fn stream_sync_ptsz() {
  return reinterpret_cast<stream_sync_fn>(dlsym(RTLD_DEFAULT, "cudaStreamSynchronize_ptsz"));
}

// One synchronization of the kind argv[2] names.
struct syncer {
  std::string kind;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  using cu_sync_fn = CUresult (*)();

  explicit syncer(std::string k) : kind{std::move(k)} {
    APP_CHECK_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    APP_CHECK_EQ(cudaEventCreate(&event), cudaSuccess);
  }
  ~syncer() {
    APP_CHECK_EQ(cudaEventDestroy(event), cudaSuccess);
    APP_CHECK_EQ(cudaStreamDestroy(stream), cudaSuccess);
  }
  syncer(syncer const&) = delete;
  syncer& operator=(syncer const&) = delete;

  void operator()() const {
    if (kind == "device") {
      APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else if (kind == "stream") {
      APP_CHECK_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    } else if (kind == "stream-ptsz") {
      APP_CHECK_EQ(stream_sync_ptsz()(nullptr), cudaSuccess);
    } else if (kind == "event") {
      APP_CHECK_EQ(cudaEventRecord(event, stream), cudaSuccess);
      APP_CHECK_EQ(cudaEventSynchronize(event), cudaSuccess);
    } else if (kind == "driver") {
      // The driver's entry point, as a program with the static runtime reaches it.
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult q{};
      APP_CHECK_EQ(cudaGetDriverEntryPoint("cuCtxSynchronize", &fn, cudaEnableDefault, &q), cudaSuccess);
      APP_CHECK(fn != nullptr);
      if (fn != nullptr) APP_CHECK_EQ(reinterpret_cast<cu_sync_fn>(fn)(), CUDA_SUCCESS);
    } else {
      fprintf(stderr, "unknown synchronization %s\n", kind.c_str());
      ++app_failures;
    }
  }
};

// The auto rule: what the program needed since the previous synchronization stays;
// what it did not need goes back at the next one. A loop that needs the same
// working set every step keeps it, mapped once.
void sync_auto(std::string const& kind) {
  syncer const sync{kind};
  HELD_AT_MOST(near_zero);
  auto ps = allocate_working_set();
  free_all(ps);
  HELD_AT_LEAST(working_set);
  sync();  // the interval since the start needed 64 MiB: it stays
  HELD_AT_LEAST(working_set);
  sync();  // the interval since the last synchronization needed none of it
  HELD_AT_MOST(near_zero);
  // Steps that need the same working set: mapped in the first, then kept.
  long created = 0;
  for (int step = 0; step < 6; ++step) {
    ps = allocate_working_set();
    free_all(ps);
    sync();
    HELD_AT_LEAST(working_set);
    if (step == 1) created = app_sim_calls("cuMemCreate");
  }
  // Nothing was mapped again after the second step.
  APP_CHECK_EQ(app_sim_calls("cuMemCreate"), created);
  sync();  // the last interval needed nothing
  HELD_AT_MOST(near_zero);
}

// The auto rule's window (run with GPUMEM_RELEASE_THRESHOLD=auto:1): what an
// interval needed stays while the window holds it, a second at most, though later
// intervals need nothing; once the window has passed, the next synchronization
// gives it back.
void sync_window() {
  syncer const sync{"device"};
  auto ps = allocate_working_set();
  free_all(ps);
  sync();
  sync();  // this interval needed nothing, but the window still holds the first one's need
  HELD_AT_LEAST(working_set);
  std::this_thread::sleep_for(std::chrono::milliseconds{2100});
  sync();
  HELD_AT_MOST(near_zero);
}

// A numeric threshold keeps that many cached bytes; "unlimited" (or a program's
// UINT64_MAX) never gives back at synchronizations.
void sync_threshold(std::string const& how) {
  syncer const sync{"device"};
  cudaMemPool_t pool = nullptr;
  APP_CHECK_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  if (how == "program-16MiB" || how == "program-unlimited") {
    cuuint64_t t = how == "program-16MiB" ? 16 * MiB : ~cuuint64_t{0};
    APP_CHECK_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &t), cudaSuccess);
  }
  auto ps = allocate_working_set();
  free_all(ps);
  for (int i = 0; i < 3; ++i) sync();
  cuuint64_t reported = 0;
  APP_CHECK_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &reported), cudaSuccess);
  if (how == "16MiB" || how == "program-16MiB") {
    HELD_AT_LEAST(16 * MiB);
    HELD_AT_MOST(16 * MiB + near_zero);
    APP_CHECK_EQ(reported, 16 * MiB);
  } else {
    HELD_AT_LEAST(working_set);
    APP_CHECK(reported == ~cuuint64_t{0});
  }
}

// cudaMemPoolTrimTo on the default pool trims gpumem's pool too; at the driver
// level as well; other pools are CUDA's alone.
void trim_to(std::string const& level) {
  cudaMemPool_t pool = nullptr;
  APP_CHECK_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  auto ps = allocate_working_set();
  free_all(ps);
  HELD_AT_LEAST(working_set);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t own = nullptr;
  APP_CHECK_EQ(cudaMemPoolCreate(&own, &props), cudaSuccess);
  APP_CHECK_EQ(cudaMemPoolTrimTo(own, 0), cudaSuccess);
  HELD_AT_LEAST(working_set);  // not gpumem's pool
  APP_CHECK_EQ(cudaMemPoolDestroy(own), cudaSuccess);
  if (level == "driver") {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    APP_CHECK_EQ(cudaGetDriverEntryPoint("cuMemPoolTrimTo", &fn, cudaEnableDefault, &q), cudaSuccess);
    auto const trim = reinterpret_cast<CUresult (*)(CUmemoryPool, std::size_t)>(fn);
    APP_CHECK(trim != nullptr);
    if (trim == nullptr) return;
    APP_CHECK_EQ(trim(reinterpret_cast<CUmemoryPool>(pool), 16 * MiB), CUDA_SUCCESS);
    HELD_AT_LEAST(16 * MiB);
    HELD_AT_MOST(16 * MiB + near_zero);
    APP_CHECK_EQ(trim(reinterpret_cast<CUmemoryPool>(pool), 0), CUDA_SUCCESS);
  } else {
    APP_CHECK_EQ(cudaMemPoolTrimTo(pool, 16 * MiB), cudaSuccess);
    HELD_AT_LEAST(16 * MiB);
    HELD_AT_MOST(16 * MiB + near_zero);
    APP_CHECK_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  }
  HELD_AT_MOST(near_zero);
  // CUDA's own errors stay CUDA's.
  APP_CHECK_EQ(cudaMemPoolTrimTo(nullptr, 0), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// gpumem_shim_trim, the query API behind gpumem.trim(). `accounting`: the chain's
// count of the device memory it holds (reserved_bytes, the default pool's
// RESERVED_MEM_CURRENT) stays the device's own after a partial trim and a whole one.
void shim_trim(bool accounting) {
  using trim_fn = int (*)(int, unsigned long long, unsigned long long*);
  auto const trim = reinterpret_cast<trim_fn>(dlsym(RTLD_DEFAULT, "gpumem_shim_trim"));
  APP_CHECK(trim != nullptr);
  if (trim == nullptr) return;
  unsigned long long released = 1;
  APP_CHECK_EQ(trim(-1, 0, &released), 0);  // nothing built yet: nothing to do
  APP_CHECK_EQ(released, 0);
  auto ps = allocate_working_set();
  free_all(ps);
  HELD_AT_LEAST(working_set);
  APP_CHECK_EQ(trim(0, 16 * MiB, &released), 0);
  HELD_AT_LEAST(16 * MiB);
  HELD_AT_MOST(16 * MiB + near_zero);
  APP_CHECK(released >= working_set - 16 * MiB);
  if (accounting) APP_CHECK_EQ(app_stats().reserved_bytes, held());
  APP_CHECK_EQ(trim(-1, 0, &released), 0);
  APP_CHECK(released >= 16 * MiB - near_zero);
  HELD_AT_MOST(near_zero);
  if (accounting) APP_CHECK_EQ(app_stats().reserved_bytes, held());
  APP_CHECK_EQ(trim(1, 0, nullptr), 0);  // no chain on device 1
  APP_CHECK_EQ(trim(64, 0, &released), -1);
  APP_CHECK_EQ(trim(-2, 0, &released), -1);
  // Memory in use is never given back, and stays usable.
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, 8 * MiB), cudaSuccess);
  APP_CHECK_EQ(cudaMemset(p, 1, 8 * MiB), cudaSuccess);
  APP_CHECK_EQ(trim(0, 0, &released), 0);
  HELD_AT_LEAST(8 * MiB);
  APP_CHECK_EQ(cudaMemset(p, 2, 8 * MiB), cudaSuccess);
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
}

cuuint64_t attribute(cudaMemPool_t pool, cudaMemPoolAttr a) {
  cuuint64_t v = 0;
  APP_CHECK_EQ(cudaMemPoolGetAttribute(pool, a, &v), cudaSuccess);
  return v;
}

// cudaMemPoolGetAttribute on the default pool reports gpumem's pool; the highs
// reset as CUDA resets them; resetting the used high keeps the auto rule's interval.
void attributes() {
  cudaMemPool_t pool = nullptr;
  APP_CHECK_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  auto ps = allocate_working_set();
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrUsedMemCurrent), working_set);
  APP_CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) >= working_set);
  APP_CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == held());
  free_all(ps);
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrUsedMemCurrent), 0);
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrUsedMemHigh), working_set);
  // Auto: the next synchronization would keep what the interval needed, and a
  // quarter more for the pool's fragmentation.
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrReleaseThreshold), working_set + working_set / 4);
  // Only 0 resets a high (CUDA refuses anything else, and nothing changes).
  cuuint64_t bad = 5;
  APP_CHECK_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &bad), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrUsedMemHigh), working_set);
  cuuint64_t zero = 0;
  APP_CHECK_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), cudaSuccess);
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrUsedMemHigh), 0);
  // The reset did not end the auto rule's interval: 64 MiB were needed in it.
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HELD_AT_LEAST(working_set);
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrUsedMemHigh), 0);  // and a synchronization did not raise it
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HELD_AT_MOST(near_zero);
  APP_CHECK(attribute(pool, cudaMemPoolAttrReservedMemHigh) >= working_set);
  APP_CHECK_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero), cudaSuccess);
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrReservedMemHigh), attribute(pool, cudaMemPoolAttrReservedMemCurrent));
  APP_CHECK(attribute(pool, cudaMemPoolAttrReservedMemHigh) <= near_zero);
  void* p = nullptr;
  APP_CHECK_EQ(cudaMalloc(&p, 8 * MiB), cudaSuccess);
  APP_CHECK_EQ(cudaFree(p), cudaSuccess);
  APP_CHECK_EQ(attribute(pool, cudaMemPoolAttrUsedMemHigh), 8 * MiB);
  APP_CHECK(attribute(pool, cudaMemPoolAttrReservedMemHigh) >= 8 * MiB);
  // The driver's entry point answers the same.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  APP_CHECK_EQ(cudaGetDriverEntryPoint("cuMemPoolGetAttribute", &fn, cudaEnableDefault, &q), cudaSuccess);
  auto const get = reinterpret_cast<CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*)>(fn);
  APP_CHECK(get != nullptr);
  cuuint64_t v = 0;
  if (get != nullptr) {
    APP_CHECK_EQ(get(reinterpret_cast<CUmemoryPool>(pool), CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v), CUDA_SUCCESS);
  }
  APP_CHECK_EQ(v, 8 * MiB);
  // A pool the program made is CUDA's alone.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t own = nullptr;
  APP_CHECK_EQ(cudaMemPoolCreate(&own, &props), cudaSuccess);
  ps = allocate_working_set();
  APP_CHECK_EQ(attribute(own, cudaMemPoolAttrUsedMemCurrent), 0);
  APP_CHECK_EQ(attribute(own, cudaMemPoolAttrReservedMemCurrent), 0);
  free_all(ps);
  APP_CHECK_EQ(cudaMemPoolDestroy(own), cudaSuccess);
  // CUDA's errors stay CUDA's.
  APP_CHECK_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, nullptr), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// Never during a stream capture: a release waits for the GPU. The capture stays
// valid, and memory goes back at the first synchronization after it.
void capture() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaStream_t other = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  cudaMemPool_t pool = nullptr;
  APP_CHECK_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  auto ps = allocate_working_set();
  free_all(ps);
  APP_CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the interval needed it all: kept
  HELD_AT_LEAST(working_set);
  APP_CHECK_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  // Relaxed mode: another stream may be synchronized during the capture.
  APP_CHECK_EQ(cudaStreamSynchronize(other), cudaSuccess);
  APP_CHECK_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  using trim_fn = int (*)(int, unsigned long long, unsigned long long*);
  auto const trim = reinterpret_cast<trim_fn>(dlsym(RTLD_DEFAULT, "gpumem_shim_trim"));
  unsigned long long released = 1;
  APP_CHECK(trim != nullptr);
  if (trim != nullptr) APP_CHECK_EQ(trim(-1, 0, &released), -1);
  APP_CHECK_EQ(released, 0);
  HELD_AT_LEAST(working_set);
  cudaGraph_t g = nullptr;
  APP_CHECK_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  APP_CHECK(g != nullptr);
  if (g != nullptr) APP_CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
  APP_CHECK_EQ(cudaStreamSynchronize(other), cudaSuccess);
  HELD_AT_MOST(near_zero);
  APP_CHECK_EQ(cudaStreamDestroy(other), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  APP_CHECK_EQ(app_sim_violations(), 0);
}

// What the synchronization entry points answer for bad handles: printed, so the
// driver can compare a run with the shim against one without.
void sync_errors() {
  cudaStream_t s = nullptr;
  APP_CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  APP_CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  cudaEvent_t e = nullptr;
  APP_CHECK_EQ(cudaEventCreate(&e), cudaSuccess);
  APP_CHECK_EQ(cudaEventDestroy(e), cudaSuccess);
  auto* const made_up = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x5eed0});
  int const destroyed_stream = cudaStreamSynchronize(s);
  int const last1 = cudaGetLastError();
  int const made_up_stream = cudaStreamSynchronize(made_up);
  int const last2 = cudaGetLastError();
  int const destroyed_ptsz = stream_sync_ptsz()(s);
  int const last3 = cudaGetLastError();
  int const destroyed_event = cudaEventSynchronize(e);
  int const last4 = cudaGetLastError();
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  APP_CHECK_EQ(cudaGetDriverEntryPoint("cuStreamSynchronize", &fn, cudaEnableDefault, &q), cudaSuccess);
  int driver_stream = -1;
  if (fn != nullptr) driver_stream = reinterpret_cast<CUresult (*)(CUstream)>(fn)(reinterpret_cast<CUstream>(s));
  int const device = cudaDeviceSynchronize();
  app_sim_reset_violations();  // the destroyed handles above were on purpose
  printf("CODES %d %d %d %d %d %d %d %d %d %d\n", destroyed_stream, last1, made_up_stream, last2, destroyed_ptsz, last3,
         destroyed_event, last4, driver_stream, device);
  APP_CHECK(destroyed_stream != cudaSuccess && made_up_stream != cudaSuccess && destroyed_event != cudaSuccess);
  APP_CHECK_EQ(device, cudaSuccess);
}

}  // namespace

int main(int argc, char** argv) {
  std::string const scenario = argc > 1 ? argv[1] : "sync-auto";
  std::string const variant = argc > 2 ? argv[2] : "";
  if (scenario == "sync-auto")
    sync_auto(variant.empty() ? "device" : variant);
  else if (scenario == "sync-window")
    sync_window();
  else if (scenario == "sync-threshold")
    sync_threshold(variant);
  else if (scenario == "trim-to")
    trim_to(variant);
  else if (scenario == "shim-trim")
    shim_trim(variant == "accounting");
  else if (scenario == "attributes")
    attributes();
  else if (scenario == "capture")
    capture();
  else if (scenario == "sync-errors")
    sync_errors();
  else {
    fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  return app_finish(scenario.c_str());
}
