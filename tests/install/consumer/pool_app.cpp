// Builds a stream-ordered pool over the cuda resource, allocates, writes and reads
// back device memory, and checks that freed memory is reused without new upstream
// allocations. Prints "pool_app: ok" on success.
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

[[noreturn]] void fail(char const* what) {
  std::fprintf(stderr, "pool_app: %s\n", what);
  std::exit(1);
}

bool fill_and_check(void* p, std::size_t bytes, unsigned char value) {
  auto const& d = gpumem::detail::driver();
  auto const dp = reinterpret_cast<CUdeviceptr>(p);
  std::vector<unsigned char> host(bytes);
  if (d.cuMemsetD8(dp, value, bytes) != CUDA_SUCCESS || d.cuCtxSynchronize() != CUDA_SUCCESS ||
      d.cuMemcpyDtoH(host.data(), dp, bytes) != CUDA_SUCCESS) {
    return false;
  }
  for (auto b : host) {
    if (b != value) return false;
  }
  return true;
}

}  // namespace

int main() try {
  gpumem::cuda_memory_resource cuda;
  gpumem::statistics_resource_adaptor upstream{&cuda};
  gpumem::pool_options opts;
  opts.initial_size = std::size_t{16} << 20;
  opts.maximum_size = std::size_t{64} << 20;
  gpumem::pool_memory_resource pool{&upstream, opts};

  std::vector<void*> blocks;
  for (std::size_t bytes : {std::size_t{256}, std::size_t{4096}, std::size_t{1} << 20}) {
    void* p = pool.allocate(bytes);
    if (p == nullptr) fail("allocate returned nullptr");
    if (!fill_and_check(p, bytes, static_cast<unsigned char>(bytes & 0xff) | 1)) fail("device memory check failed");
    pool.deallocate(p, bytes);
  }
  auto const upstream_calls = upstream.allocations().total;
  for (int i = 0; i < 100; ++i) blocks.push_back(pool.allocate(std::size_t{64} << 10));
  for (void* p : blocks) pool.deallocate(p, std::size_t{64} << 10);
  if (upstream.allocations().total != upstream_calls) fail("the pool went upstream for memory it held");
  bool refused = false;
  try {
    (void)pool.allocate(std::size_t{1} << 30);  // above maximum_size
  } catch (gpumem::out_of_memory const&) { refused = true; }
  if (!refused) fail("an allocation above the pool's maximum was not refused");
  auto const info = pool.info();
  std::printf("pool_app: ok (pool reserved %zu bytes, %lld upstream allocations)\n", info.reserved_bytes,
              static_cast<long long>(upstream.allocations().total));
  return 0;
} catch (std::exception const& e) {
  std::fprintf(stderr, "pool_app: %s\n", e.what());
  return 1;
}
