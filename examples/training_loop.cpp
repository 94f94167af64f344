// An unmodified CUDA program with the allocation pattern of a training loop:
// long-lived weights, per-step activations and gradients of mixed sizes freed in
// reverse order, a workspace on a second stream with cudaMallocAsync, and one
// deliberate leak. It verifies every buffer it wrote, so a shim that handed out
// overlapping memory would make it fail.
//
//   training_loop [steps [oom-step]]        (default 50 steps, no oom-step)
//
// With an oom-step, that step first asks for a workspace twice the device's
// memory, as a program probing for the largest workspace it can get does, and
// goes on without it when refused: an out-of-memory failure the program survives.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "training_loop: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}
#define CHECK(x)                   \
  do {                             \
    if (!check((x), #x)) return 1; \
  } while (0)

struct buffer {
  void* ptr;
  std::size_t bytes;
  unsigned char tag;
};

// Reads a buffer back and checks the tag byte at its start, middle and end.
bool verify(buffer const& b) {
  unsigned char probe[3] = {};
  std::size_t const at[3] = {0, b.bytes / 2, b.bytes - 1};
  for (int i = 0; i < 3; ++i) {
    if (cudaMemcpy(&probe[i], static_cast<char*>(b.ptr) + at[i], 1, cudaMemcpyDeviceToHost) != cudaSuccess)
      return false;
    if (probe[i] != b.tag) {
      std::fprintf(stderr, "training_loop: buffer %p (%zu B) byte %zu is %u, expected %u\n", b.ptr, b.bytes, at[i],
                   probe[i], b.tag);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int const steps = argc > 1 ? std::atoi(argv[1]) : 50;
  int const oom_step = argc > 2 ? std::atoi(argv[2]) : -1;
  cudaStream_t side{};
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));

  // Weights: allocated once.
  std::vector<buffer> weights;
  for (int l = 0; l < 8; ++l) {
    buffer w{nullptr, (4u << 20) + 4096u * static_cast<unsigned>(l), static_cast<unsigned char>(0x10 + l)};
    CHECK(cudaMalloc(&w.ptr, w.bytes));
    CHECK(cudaMemset(w.ptr, w.tag, w.bytes));
    weights.push_back(w);
  }

  std::uint64_t checked = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<buffer> acts;
    for (int l = 0; l < 8; ++l) {  // forward: activations of varied sizes
      buffer a{nullptr, (256u << 10) * static_cast<unsigned>(1 + (l + step) % 5) + 512u * static_cast<unsigned>(l),
               static_cast<unsigned char>(step * 8 + l)};
      CHECK(cudaMalloc(&a.ptr, a.bytes));
      CHECK(cudaMemset(a.ptr, a.tag, a.bytes));
      acts.push_back(a);
    }
    if (step == oom_step) {
      std::size_t free_bytes = 0;
      std::size_t total_bytes = 0;
      CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
      void* huge = nullptr;
      cudaError_t const e = cudaMalloc(&huge, 2 * total_bytes);
      if (e == cudaSuccess) {
        CHECK(cudaFree(huge));
      } else if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // not sticky: clear it and go on without the workspace
        std::printf("training_loop: step %d: a workspace of %zu bytes was refused (out of memory); going on\n", step,
                    2 * total_bytes);
      } else {
        check(e, "cudaMalloc(huge, 2 * total_bytes)");
        return 1;
      }
    }
    void* workspace = nullptr;  // stream-ordered scratch on the side stream
    CHECK(cudaMallocAsync(&workspace, 3u << 20, side));
    CHECK(cudaMemsetAsync(workspace, 0x5a, 3u << 20, side));
    CHECK(cudaFreeAsync(workspace, side));
    for (auto it = acts.rbegin(); it != acts.rend(); ++it) {  // backward: check, free in reverse
      if (!verify(*it)) return 2;
      ++checked;
      CHECK(cudaFree(it->ptr));
    }
  }
  CHECK(cudaStreamSynchronize(side));
  for (auto const& w : weights) {
    if (!verify(w)) return 2;
    ++checked;
  }
  for (std::size_t i = 1; i < weights.size(); ++i) CHECK(cudaFree(weights[i].ptr));  // weights[0] leaks on purpose
  CHECK(cudaStreamDestroy(side));
  std::printf("training_loop: %d steps, %llu buffers verified, 1 buffer (%zu bytes) left allocated on purpose\n", steps,
              static_cast<unsigned long long>(checked), weights[0].bytes);
  return 0;
}
