#pragma once
// A synthetic gpumem allocation log of any length, generated fast (tens of
// millions of rows a minute) and deterministically from a seed, for the tools'
// scale tests and benchmarks. Nothing of it is committed: tests make it on demand.
//
// Shape: `threads` threads, each keeping about `live_per_thread` allocations live
// (sizes 256 B .. 4 MiB, log-uniform), allocating and freeing at random; half of
// the threads use cudaMalloc/cudaFree on the legacy stream, half
// cudaMallocAsync/cudaFreeAsync on a stream of their own. Times step 200..2200 ns
// per row with a racing thread writing a slightly older time now and then. Every
// `failure_every` rows an allocation of 96 GiB fails. A Reserved column follows a
// pool that grows in 2 MiB steps and never shrinks. At the end everything is freed
// except `leaks` allocations.
//
// Thread safety: a generator is a plain value; one writer.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::test {

struct synthetic_log_shape {
  std::uint64_t rows = 1'000'000;
  unsigned threads = 4;
  std::size_t live_per_thread = 500;
  std::uint64_t failure_every = 100'000;
  std::size_t leaks = 7;
  std::uint64_t seed = 42;
};

/// What the generator wrote, for checking the tools' answers.
struct synthetic_log_facts {
  std::uint64_t rows = 0, allocations = 0, frees = 0, failures = 0;
  std::uint64_t peak_live = 0, live_at_end = 0, leaked = 0, peak_reserved = 0;
};

class synthetic_log_writer {
 public:
  /// Writes the log to `out` (header included); false if a write failed.
  static bool write(std::FILE* out, synthetic_log_shape const& shape, synthetic_log_facts* facts = nullptr) {
    synthetic_log_writer w{out, shape};
    w.run();
    if (facts != nullptr) *facts = w.facts_;
    return w.ok_;
  }

  static constexpr std::string_view header =
      "Thread,Time,Action,Pointer,Size,Stream,Device,Entry,TimeNs,DurationNs,Result,Reserved\n";

 private:
  struct live_block {
    std::uint64_t ptr, size;
  };
  struct thread_state {
    std::uint64_t id;
    std::uint64_t stream;  // 1: legacy (cudaMalloc/cudaFree), else a stream of its own (async calls)
    std::vector<live_block> live;
  };

  synthetic_log_writer(std::FILE* out, synthetic_log_shape const& shape) : out_{out}, shape_{shape} {
    rng_ = shape.seed * 0x9E3779B97F4A7C15ull + 1;
    for (unsigned i = 0; i < std::max(shape.threads, 1u); ++i) {
      threads_.push_back({140245u + i, i % 2 == 0 ? 1u : 0x5603a0c0u + i * 0x100u, {}});
    }
    buf_.reserve(buf_size + 512);
  }

  std::uint64_t next() noexcept {  // splitmix64
    std::uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  void run() {
    buf_.append(header);
    std::uint64_t const body = shape_.rows;
    // Rows left for the final frees: everything live then, less the leaks.
    auto live_total = [&] {
      std::size_t n = 0;
      for (auto const& t : threads_) n += t.live.size();
      return n;
    };
    while (facts_.rows < body) {
      std::size_t const live_now = live_total();
      std::uint64_t const left = body - facts_.rows;
      if (left <= live_now - std::min(live_now, shape_.leaks)) break;  // time to wind down
      thread_state& t = threads_[next() % threads_.size()];
      bool const fail = shape_.failure_every > 0 && (facts_.rows + 1) % shape_.failure_every == 0;
      if (fail) {
        row(t, "allocate failure", 0, std::uint64_t{96} << 30, "CUDA_ERROR_OUT_OF_MEMORY");
        ++facts_.failures;
        continue;
      }
      bool const grow = t.live.size() < shape_.live_per_thread / 2 ||
                        (t.live.size() < shape_.live_per_thread * 3 / 2 && next() % 2 == 0);
      if (grow) {
        allocate(t);
      } else {
        free_one(t, next() % t.live.size());
      }
    }
    // Wind down: free all but `leaks` allocations, oldest threads first.
    std::size_t keep = shape_.leaks;
    for (auto& t : threads_) {
      while (!t.live.empty()) {
        if (keep > 0) {
          --keep;
          facts_.leaked++;
          t.live.pop_back();  // stays live in the log
          continue;
        }
        free_one(t, t.live.size() - 1);
      }
    }
    facts_.live_at_end = live_;
    flush();
  }

  void allocate(thread_state& t) {
    unsigned const log2 = 8 + static_cast<unsigned>(next() % 15);  // 256 B .. 4 MiB
    std::uint64_t const size = (std::uint64_t{1} << log2) + next() % (std::uint64_t{1} << log2);
    std::uint64_t const ptr = 0x7f0000000000ull + (++pointers_ << 12);
    t.live.push_back({ptr, size});
    live_ += size;
    facts_.peak_live = std::max(facts_.peak_live, live_);
    std::uint64_t const need = (live_ + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    reserved_ = std::max(reserved_, need);
    facts_.peak_reserved = std::max(facts_.peak_reserved, reserved_);
    ++facts_.allocations;
    row(t, "allocate", ptr, size, "CUDA_SUCCESS");
  }

  void free_one(thread_state& t, std::size_t i) {
    live_block const b = t.live[i];
    t.live[i] = t.live.back();
    t.live.pop_back();
    live_ -= b.size;
    ++facts_.frees;
    row(t, "free", b.ptr, b.size, "CUDA_SUCCESS");
  }

  template <typename T>
  void num(T v, int base = 10) {
    char tmp[24];
    auto const r = std::to_chars(tmp, tmp + sizeof tmp, v, base);
    buf_.append(tmp, r.ptr);
  }

  void two(std::uint64_t v) {
    buf_ += static_cast<char>('0' + v / 10);
    buf_ += static_cast<char>('0' + v % 10);
  }

  void row(thread_state const& t, std::string_view action, std::uint64_t ptr, std::uint64_t size,
           std::string_view result) {
    ++facts_.rows;
    now_ += 200 + next() % 2000;
    std::uint64_t const r = next();
    // A racing thread: now and then a row carries a time up to 1 us older.
    std::uint64_t const t_ns = (r & 63) == 0 ? now_ - (r >> 8) % 1000 : now_;
    std::uint64_t const tod_us = (t_ns / 1000) % 86'400'000'000ull;
    bool const async = t.stream != 1;

    num(t.id);
    buf_ += ',';
    two(tod_us / 3'600'000'000ull);
    buf_ += ':';
    two(tod_us / 60'000'000 % 60);
    buf_ += ':';
    two(tod_us / 1'000'000 % 60);
    buf_ += '.';
    char frac[8];
    std::snprintf(frac, sizeof frac, "%06u", static_cast<unsigned>(tod_us % 1'000'000));
    buf_.append(frac, 6);
    buf_ += ',';
    buf_ += action;
    buf_ += ',';
    if (ptr == 0) {
      buf_ += "(nil)";
    } else {
      buf_ += "0x";
      num(ptr, 16);
    }
    buf_ += ',';
    num(size);
    buf_ += ",0x";
    num(t.stream, 16);
    buf_ += ",0,";
    buf_ += action == "free" ? (async ? "cudaFreeAsync" : "cudaFree") : (async ? "cudaMallocAsync" : "cudaMalloc");
    buf_ += ',';
    num(t_ns);
    buf_ += ',';
    num(100 + r % 1900);
    buf_ += ',';
    buf_ += result;
    buf_ += ',';
    num(reserved_);
    buf_ += '\n';
    if (buf_.size() >= buf_size) flush();
  }

  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), out_) != buf_.size()) ok_ = false;
    buf_.clear();
  }

  static constexpr std::size_t buf_size = std::size_t{1} << 22;

  std::FILE* out_;
  synthetic_log_shape shape_;
  std::uint64_t rng_;
  std::vector<thread_state> threads_;
  std::string buf_;
  std::uint64_t pointers_ = 0, live_ = 0, reserved_ = 0;
  std::uint64_t now_ = 1'763'733'727'000'000'000ull;  // 2025-11-21 14:02:07 UTC
  synthetic_log_facts facts_;
  bool ok_ = true;
};

}  // namespace gpumem::test
