// What mapping and unmapping device memory page by page costs on a real GPU: the
// driver calls behind vmm_memory_resource's allocations (one physical allocation per
// 2 MiB granule) and the pool's page release (decommit: cuMemUnmap of a run of
// pages; commit: cuMemCreate + cuMemMap per page, one cuMemSetAccess).
//
// Build and run on the GPU machine (driver API only):
//   g++ -O2 -std=c++20 -I/usr/local/cuda/include bench/vmm_page_cost.cpp -o vmm_page_cost -lcuda
//   ./vmm_page_cost              # prints one table, medians of 5 repetitions
//   ./vmm_page_cost --exportable # the pages created exportable as POSIX fds (what
//                                # gpumem's pool asks for, for CUDA IPC), and what
//                                # exporting and importing one page costs
#include <cuda.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

void check(CUresult r, char const* what) {
  if (r != CUDA_SUCCESS) {
    char const* name = nullptr;
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "%s failed: %s\n", what, name != nullptr ? name : "?");
    std::exit(1);
  }
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool const exportable = argc > 1 && std::strcmp(argv[1], "--exportable") == 0;
  check(cuInit(0), "cuInit");
  CUdevice dev{};
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx{};
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  std::size_t page = 0;
  check(cuMemGetAllocationGranularity(&page, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity");
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  constexpr std::size_t reserve = std::size_t{64} << 30;
  CUdeviceptr base{};
  check(cuMemAddressReserve(&base, reserve, 0, 0, 0), "cuMemAddressReserve");
  // Maps `pages` pages at `at` as vmm_memory_resource does: a physical allocation
  // each, then one cuMemSetAccess for the range.
  auto const map_page_by_page = [&](CUdeviceptr at, std::size_t pages) {
    for (std::size_t i = 0; i < pages; ++i) {
      CUmemGenericAllocationHandle h{};
      check(cuMemCreate(&h, page, &prop, 0), "cuMemCreate");
      check(cuMemMap(at + i * page, page, 0, h, 0), "cuMemMap");
      check(cuMemRelease(h), "cuMemRelease");
    }
    check(cuMemSetAccess(at, pages * page, &access, 1), "cuMemSetAccess");
  };

  std::printf("page %zu KiB%s; microseconds, median of 5\n", page >> 10, exportable ? ", exportable (POSIX fd)" : "");
  std::printf(
      "| bytes | pages | map per page (create+map, one setAccess) | unmap (one call) | map as one allocation | "
      "unmap one allocation |\n| --- | --- | --- | --- | --- | --- |\n");
  for (std::size_t mib : {2, 8, 64, 512, 4096}) {
    std::size_t const bytes = mib << 20;
    std::size_t const pages = bytes / page;
    std::vector<double> map_pages, unmap_pages, map_one, unmap_one;
    for (int rep = 0; rep < 5; ++rep) {
      double t0 = now_us();
      map_page_by_page(base, pages);
      check(cuMemsetD8(base, 1, bytes), "cuMemsetD8");  // touch it, as a program would
      check(cuCtxSynchronize(), "cuCtxSynchronize");
      double t1 = now_us();
      check(cuMemUnmap(base, bytes), "cuMemUnmap");
      double t2 = now_us();
      map_pages.push_back(t1 - t0);
      unmap_pages.push_back(t2 - t1);

      t0 = now_us();
      CUmemGenericAllocationHandle h{};
      check(cuMemCreate(&h, bytes, &prop, 0), "cuMemCreate");
      check(cuMemMap(base, bytes, 0, h, 0), "cuMemMap");
      check(cuMemRelease(h), "cuMemRelease");
      check(cuMemSetAccess(base, bytes, &access, 1), "cuMemSetAccess");
      check(cuMemsetD8(base, 1, bytes), "cuMemsetD8");
      check(cuCtxSynchronize(), "cuCtxSynchronize");
      t1 = now_us();
      check(cuMemUnmap(base, bytes), "cuMemUnmap");
      t2 = now_us();
      map_one.push_back(t1 - t0);
      unmap_one.push_back(t2 - t1);
    }
    std::printf("| %zu MiB | %zu | %.0f | %.0f | %.0f | %.0f |\n", mib, pages, median(map_pages), median(unmap_pages),
                median(map_one), median(unmap_one));
  }
  // Where the time of a page-by-page map goes: 256 pages (512 MiB), each step timed
  // on its own; then the same pages unmapped one call each, and mapped again from
  // handles kept (what a cache of physical allocations would save).
  {
    constexpr std::size_t n = 256;
    std::vector<CUmemGenericAllocationHandle> h(n);
    double t0 = now_us();
    for (auto& x : h) check(cuMemCreate(&x, page, &prop, 0), "cuMemCreate");
    double t1 = now_us();
    for (std::size_t i = 0; i < n; ++i) check(cuMemMap(base + i * page, page, 0, h[i], 0), "cuMemMap");
    double t2 = now_us();
    check(cuMemSetAccess(base, n * page, &access, 1), "cuMemSetAccess");
    double t3 = now_us();
    for (std::size_t i = 0; i < n; ++i) check(cuMemUnmap(base + i * page, page), "cuMemUnmap");
    double t4 = now_us();
    for (std::size_t i = 0; i < n; ++i) check(cuMemMap(base + i * page, page, 0, h[i], 0), "cuMemMap");
    check(cuMemSetAccess(base, n * page, &access, 1), "cuMemSetAccess");
    double t5 = now_us();
    check(cuMemUnmap(base, n * page), "cuMemUnmap");
    double t6 = now_us();
    for (auto x : h) check(cuMemRelease(x), "cuMemRelease");
    double t7 = now_us();
    std::printf(
        "\nper page, 256 pages: create %.1f, map %.1f, setAccess (one call) %.1f, unmap one by one %.1f, "
        "map+setAccess from kept handles %.1f, unmap in one call (handles kept) %.1f, release %.1f\n",
        (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n, (t4 - t3) / n, (t5 - t4) / n, (t6 - t5) / n, (t7 - t6) / n);
  }
  // A page moved as a pool moves it (its memory unmapped from free addresses and
  // mapped where a request needs it), 256 pages at a time: unmapping frees the memory
  // and the new addresses get new memory, against keeping the memory for them
  // (cuMemRetainAllocationHandle before the unmap, the same handle mapped again).
  {
    constexpr std::size_t n = 256;
    CUdeviceptr const from = base;
    CUdeviceptr const to = base + (std::size_t{8} << 30);
    std::vector<double> fresh, kept;
    std::vector<CUmemGenericAllocationHandle> h(n);
    for (int rep = 0; rep < 5; ++rep) {
      map_page_by_page(from, n);
      double t0 = now_us();
      check(cuMemUnmap(from, n * page), "cuMemUnmap");
      map_page_by_page(to, n);
      double t1 = now_us();
      check(cuMemUnmap(to, n * page), "cuMemUnmap");
      fresh.push_back((t1 - t0) / n);

      map_page_by_page(from, n);
      t0 = now_us();
      for (std::size_t i = 0; i < n; ++i) {
        check(cuMemRetainAllocationHandle(&h[i], reinterpret_cast<void*>(from + i * page)), "retain");
      }
      check(cuMemUnmap(from, n * page), "cuMemUnmap");
      for (std::size_t i = 0; i < n; ++i) {
        check(cuMemMap(to + i * page, page, 0, h[i], 0), "cuMemMap");
        check(cuMemRelease(h[i]), "cuMemRelease");
      }
      check(cuMemSetAccess(to, n * page, &access, 1), "cuMemSetAccess");
      t1 = now_us();
      check(cuMemUnmap(to, n * page), "cuMemUnmap");
      kept.push_back((t1 - t0) / n);
    }
    std::printf("per page moved, 256 pages, median of 5: new memory %.1f, the memory kept %.1f\n", median(fresh),
                median(kept));
  }
  if (exportable) {  // what sharing a page costs: export as an fd, import it back
    constexpr int n = 256;
    std::vector<double> out, in;
    for (int i = 0; i < n; ++i) {
      CUmemGenericAllocationHandle h{};
      check(cuMemCreate(&h, page, &prop, 0), "cuMemCreate");
      int fd = -1;
      double const t0 = now_us();
      check(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "export");
      double const t1 = now_us();
      CUmemGenericAllocationHandle back{};
      check(cuMemImportFromShareableHandle(&back, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            "import");
      double const t2 = now_us();
      close(fd);
      check(cuMemRelease(back), "cuMemRelease");
      check(cuMemRelease(h), "cuMemRelease");
      out.push_back(t1 - t0);
      in.push_back(t2 - t1);
    }
    std::printf("per page, 256 pages: export as an fd %.1f, import the fd %.1f (medians)\n", median(out), median(in));
  }
  check(cuMemAddressFree(base, reserve), "cuMemAddressFree");
  return 0;
}
