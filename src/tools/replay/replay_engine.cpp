#include "replay_engine.hpp"

#include "builtin_configs.hpp"

#include <gpumem/call_context.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/error.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/stream.hpp>
#include "call_semantics.hpp"
#include "log_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>

namespace gpumem::tools {

// ---- one chain ---------------------------------------------------------------------

namespace {

/// The log's streams as replay streams: created on first use, destroyed at the end.
/// The reading thread creates them (add) ahead of the worker that replays the
/// events (get): so their handles, which a pool orders its free lists by, come in
/// the same order whether the chains replay on threads or not.
class stream_table {
 public:
  stream_table() = default;
  stream_table(stream_table const&) = delete;
  stream_table& operator=(stream_table const&) = delete;
  ~stream_table() {
    auto const& drv = detail::driver();
    for (auto const& [key, s] : created_) {
      if (drv.cuStreamDestroy != nullptr) static_cast<void>(drv.cuStreamDestroy(s));
    }
  }

  /// The replay stream of a log stream (created if need be, in the current
  /// context). Throws cuda_error if a stream cannot be created.
  stream_ref get(replay_stream const& key) {
    if (key.legacy()) return stream_ref{reinterpret_cast<CUstream>(key.handle)};
    std::lock_guard lock{mutex_};
    auto it = created_.find(key);
    if (it == created_.end()) {
      CUstream s = nullptr;
      GPUMEM_CU_TRY(detail::driver().cuStreamCreate(&s, CU_STREAM_DEFAULT));
      it = created_.emplace(key, s).first;
    }
    return stream_ref{it->second};
  }

 private:
  std::mutex mutex_;
  std::map<replay_stream, CUstream> created_;
};

struct live_block {
  void* p;
  std::size_t size;
  bool synchronous = false;  ///< allocated synchronously (safe mode): its free is synchronous too
};

using replay_clock = std::chrono::steady_clock;

}  // namespace

struct chain_replayer::impl {
  replay_result r;
  int device = 0;
  bool timed = false;
  bool safe = true;  ///< the configuration's sync_mode: the shim's calls carry synchronous semantics
  CUcontext ctx = nullptr;
  bool retained = false;
  // Declared before the chain, so destroyed after it: the chain's destructor may
  // still name the streams.
  std::unique_ptr<stream_table> streams;
  std::unique_ptr<config::resource_chain> chain;
  std::unordered_map<std::uint64_t, live_block> live;  // log pointer -> replay block
  std::uint64_t live_bytes = 0, peak_seen = 0;
  std::chrono::nanoseconds alloc_time{}, free_time{};

  replay_stream last_stream{};
  stream_ref last_ref{};
  bool have_last = false;

  [[nodiscard]] bool usable() const noexcept { return chain != nullptr && !r.error; }

  /// The replay stream of an event; the last one is remembered (consecutive events
  /// mostly share a stream), so the table's lock is taken only on a change.
  stream_ref stream_of(log_event const& ev) {
    replay_stream const key = replay_stream_of(ev);
    if (!have_last || key != last_stream) {
      last_ref = streams->get(key);
      last_stream = key;
      have_last = true;
    }
    return last_ref;
  }

  /// `synchronous`: synchronous_entry(entry), worked out once by apply().
  void* allocate(log_event const& ev, std::string_view entry, bool synchronous) {
    stream_ref const st = stream_of(ev);
    scoped_call_context const call{entry.empty() ? nullptr : entry.data(), device, safe && synchronous};
    auto const t0 = timed ? replay_clock::now() : replay_clock::time_point{};
    void* p = nullptr;
    try {
      p = chain->top().allocate(ev.size, st);
    } catch (gpumem::bad_alloc const&) { p = nullptr; }
    if (timed) alloc_time += replay_clock::now() - t0;
    if (p == nullptr) {
      ++r.failed;
    } else {
      ++r.allocations;
    }
    return p;
  }

  void deallocate(live_block const& b, log_event const& ev, std::string_view entry) {
    stream_ref const st = stream_of(ev);
    // As the shim: stream order only when both the allocation and the free were.
    scoped_call_context const call{entry.empty() ? nullptr : entry.data(), device,
                                   safe && (synchronous_entry(entry) || b.synchronous)};
    auto const t0 = timed ? replay_clock::now() : replay_clock::time_point{};
    chain->top().deallocate(b.p, b.size, st);
    if (timed) free_time += replay_clock::now() - t0;
    ++r.frees;
    live_bytes -= b.size;
  }

  void apply(log_event const& ev, std::string_view entry) {
    if (!ev.device_memory()) return;  // pinned host or managed memory: no device chain serves it
    switch (ev.action) {
      case log_action::allocate: {
        if (ev.size == 0) break;
        bool const synchronous = synchronous_entry(entry);
        void* p = allocate(ev, entry, synchronous);
        if (p == nullptr) break;
        live_block const block{p, ev.size, synchronous};
        auto const [it, inserted] = live.try_emplace(ev.pointer, block);
        if (!inserted) {  // the log lost a free: release the older block now
          deallocate(it->second, ev, entry);
          it->second = block;
        }
        live_bytes += ev.size;
        if (live_bytes > peak_seen) {
          peak_seen = live_bytes;
          r.fragmentation_at_peak = chain->info().fragmentation();
        }
        break;
      }
      case log_action::allocate_failure: {
        if (ev.size == 0) break;
        bool const synchronous = synchronous_entry(entry);
        if (void* p = allocate(ev, entry, synchronous)) {
          live_bytes += ev.size;
          deallocate(live_block{p, ev.size, synchronous}, ev, entry);
        }
        break;
      }
      case log_action::free: {
        if (ev.pointer == 0 || ev.refused) break;
        auto const it = live.find(ev.pointer);
        if (it == live.end()) {
          ++r.skipped_frees;
          break;
        }
        deallocate(it->second, ev, entry);
        live.erase(it);
        break;
      }
    }
  }
};

chain_replayer::chain_replayer(config::settings const& settings, std::string name, int device, bool timed)
    : impl_{std::make_unique<impl>()} {
  auto& m = *impl_;
  m.r.name = std::move(name);
  m.device = device;
  m.timed = timed;
  m.safe = settings.sync == config::sync_mode::safe;
  try {
    auto const& drv = detail::driver();
    if (drv.init_result != CUDA_SUCCESS) {
      m.r.error = fmt::format("no CUDA driver: {}", result_name(drv.init_result));
      return;
    }
    CUdevice dev{};
    GPUMEM_CU_TRY(drv.cuDeviceGet(&dev, device));
    GPUMEM_CU_TRY(drv.cuDevicePrimaryCtxRetain(&m.ctx, dev));
    m.retained = true;
    GPUMEM_CU_TRY(drv.cuCtxSetCurrent(m.ctx));
    m.streams = std::make_unique<stream_table>();
    m.chain = config::build_chain(settings, device);
    m.r.chain = m.chain->describe();
  } catch (std::exception const& e) { m.r.error = e.what(); }
}

chain_replayer::~chain_replayer() {
  auto& m = *impl_;
  activate();
  m.live.clear();
  m.chain.reset();
  m.streams.reset();
  auto const& drv = detail::driver();
  if (m.retained && drv.cuDevicePrimaryCtxRelease != nullptr) {
    CUdevice dev{};
    if (drv.cuDeviceGet(&dev, m.device) == CUDA_SUCCESS) static_cast<void>(drv.cuDevicePrimaryCtxRelease(dev));
  }
}

void chain_replayer::add_stream(log_event const& ev) {
  auto& m = *impl_;
  if (!m.usable()) return;
  activate();
  try {
    static_cast<void>(m.streams->get(replay_stream_of(ev)));
  } catch (std::exception const& e) { m.r.error = fmt::format("line {}: {}", ev.line, e.what()); }
}

void chain_replayer::activate() const noexcept {
  if (impl_->ctx != nullptr) static_cast<void>(detail::driver().cuCtxSetCurrent(impl_->ctx));
}

void chain_replayer::apply(log_event const& ev, char const* entry) {
  auto& m = *impl_;
  if (!m.usable()) return;
  try {
    m.apply(ev, entry != nullptr ? std::string_view{entry} : std::string_view{});
  } catch (std::exception const& e) { m.r.error = fmt::format("line {}: {}", ev.line, e.what()); }
}

replay_result chain_replayer::finish() {
  auto& m = *impl_;
  auto& r = m.r;
  if (m.chain != nullptr) {
    activate();
    try {
      // The log's leaks: give them back so the chain ends clean.
      for (auto const& [ptr, b] : m.live) m.chain->top().deallocate(b.p, b.size, stream_ref{});
      m.live.clear();
      if (auto const sync = detail::driver().cuCtxSynchronize) GPUMEM_CU_TRY(sync());
      auto const& dev = m.chain->device_stats();
      r.peak_reserved = static_cast<std::uint64_t>(dev.bytes().peak);
      r.upstream_calls = static_cast<std::uint64_t>(dev.allocations().total);
      r.peak_live = static_cast<std::uint64_t>(m.chain->live_stats().bytes().peak);
      auto const info = m.chain->info();
      r.pages_released = info.pages_released_total;
      r.pages_remapped = info.pages_recommitted_total;
    } catch (std::exception const& e) {
      if (!r.error) r.error = e.what();
    }
  }
  if (r.allocations + r.failed > 0) {
    r.mean_allocate_ns = static_cast<double>(m.alloc_time.count()) / static_cast<double>(r.allocations + r.failed);
  }
  if (r.frees > 0) r.mean_free_ns = static_cast<double>(m.free_time.count()) / static_cast<double>(r.frees);
  return r;
}

// ---- a pass --------------------------------------------------------------------------

namespace {

struct batch_item {
  log_event ev;
  char const* entry;  ///< the reader's interned text: stable for the reader's lifetime
};
using batch = std::vector<batch_item>;

constexpr std::size_t batch_size = 4096;

/// Batches in replay order handed from the reading thread to one worker per chain:
/// at most `slots` batches in flight, so memory stays bounded when a chain is slow.
class batch_ring {
 public:
  batch_ring(std::size_t workers, std::size_t slots) : slots_(slots), consumed_(workers, 0) {}

  /// The slot to fill next; blocks while the slowest worker still needs it.
  batch& acquire() {
    std::unique_lock lock{mutex_};
    space_.wait(lock,
                [&] { return produced_ - *std::min_element(consumed_.begin(), consumed_.end()) < slots_.size(); });
    return slots_[produced_ % slots_.size()];
  }
  void publish() {
    {
      std::lock_guard lock{mutex_};
      ++produced_;
    }
    ready_.notify_all();
  }
  void close() {
    {
      std::lock_guard lock{mutex_};
      closed_ = true;
    }
    ready_.notify_all();
  }
  /// Worker `w`'s next batch, or nullptr once the ring is closed and drained.
  batch const* next(std::size_t w) {
    std::unique_lock lock{mutex_};
    ready_.wait(lock, [&] { return consumed_[w] < produced_ || closed_; });
    return consumed_[w] < produced_ ? &slots_[consumed_[w] % slots_.size()] : nullptr;
  }
  void done(std::size_t w) {
    {
      std::lock_guard lock{mutex_};
      ++consumed_[w];
    }
    space_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::vector<batch> slots_;
  std::vector<std::uint64_t> consumed_;
  std::uint64_t produced_ = 0;
  bool closed_ = false;
};

}  // namespace

replay_pass replay_log(log_reader& reader, std::vector<named_config> const& configs, std::vector<int> const& devices,
                       bool timed) {
  constexpr std::size_t max_counted = std::size_t{1} << 16;
  replay_pass pass;
  std::vector<std::unique_ptr<chain_replayer>> replayers;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    replayers.push_back(std::make_unique<chain_replayer>(configs[i].settings, configs[i].name, devices.at(i), timed));
  }
  // Several chains replay on threads of their own (each keeps its device's context
  // current); one chain, or a timed replay, on this thread.
  bool const threaded = replayers.size() > 1 && !timed && std::thread::hardware_concurrency() > 1;
  batch_ring ring{replayers.size(), 8};
  std::vector<std::thread> workers;
  if (threaded) {
    for (std::size_t w = 0; w < replayers.size(); ++w) {
      workers.emplace_back([&ring, &r = *replayers[w], w] {
        r.activate();
        while (batch const* b = ring.next(w)) {
          for (auto const& item : *b) r.apply(item.ev, item.entry);
          ring.done(w);
        }
      });
    }
  }
  batch own;
  batch* filling = nullptr;
  auto flush = [&] {
    if (filling == nullptr) return;
    if (threaded) {
      ring.publish();
    } else {
      for (auto& r : replayers) {
        r->activate();
        for (auto const& item : own) r->apply(item.ev, item.entry);
      }
    }
    filling = nullptr;
  };
  std::set<replay_stream> streams_made;
  auto take = [&](log_event const& ev) {
    if (streams_made.insert(replay_stream_of(ev)).second) {
      for (auto& r : replayers) r->add_stream(ev);
    }
    if (filling == nullptr) {
      filling = threaded ? &ring.acquire() : &own;
      filling->clear();
    }
    filling->push_back({ev, reader.string(ev.entry_id).data()});
    if (filling->size() == batch_size) flush();
  };

  std::unordered_set<std::uint64_t> threads, streams;
  replay_sequencer order;
  log_event ev, out;
  while (reader.next(ev)) {
    ++pass.events;
    if (threads.size() < max_counted) threads.insert(ev.thread_id);
    if (streams.size() < max_counted) streams.insert(ev.stream);
    order.push(ev);
    while (order.pop(out, false)) take(out);
  }
  while (order.pop(out, true)) take(out);
  flush();
  if (threaded) {
    ring.close();
    for (auto& t : workers) t.join();
  }
  pass.threads = threads.size();
  pass.streams = streams.size();
  pass.counts_capped = threads.size() >= max_counted || streams.size() >= max_counted;
  for (auto& r : replayers) pass.results.push_back(r->finish());
  return pass;
}

}  // namespace gpumem::tools
