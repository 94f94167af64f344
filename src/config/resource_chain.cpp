// build_chain: settings → the owned resources of one device (resource_chain.hpp).

#include <gpumem/config.hpp>

#include <gpumem/async_memory_resource.hpp>
#include <gpumem/binning_memory_resource.hpp>
#include <gpumem/csv_log_writer.hpp>
#include <gpumem/cuda_memory_resource.hpp>
#include <gpumem/detail/driver_api.hpp>
#include <gpumem/fixed_size_memory_resource.hpp>
#include <gpumem/limiting_resource_adaptor.hpp>
#include <gpumem/logging_resource_adaptor.hpp>
#include <gpumem/managed_memory_resource.hpp>
#include <gpumem/pool_memory_resource.hpp>
#include <gpumem/statistics_resource_adaptor.hpp>
#include <gpumem/tracking_resource_adaptor.hpp>
#include <gpumem/vmm_memory_resource.hpp>

#include "chain_rules.hpp"
#include "diagnostics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <type_traits>

namespace gpumem::config {
namespace {

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
// Needed by Clang (clang-tidy) before 17, which lacks C++20's aggregate deduction.
template <class... F>
overloaded(F...) -> overloaded<F...>;

bool uses_percent(resource_options const& options) {
  auto pct = [](std::optional<size_value> const& v) { return v && v->is_percent; };
  return std::visit(
      [&](auto const& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, pool_spec>) {
          return o.initial_size.is_percent || pct(o.maximum_size) || o.min_growth.is_percent;
        } else if constexpr (std::is_same_v<T, async_spec>) {
          return pct(o.release_threshold) || pct(o.initial_size);
        } else if constexpr (std::is_same_v<T, limiting_spec>) {
          return o.limit.is_percent;
        } else {
          return false;
        }
      },
      options);
}

/// Free bytes of the current context's device, once per build: every percentage of a
/// chain refers to the same moment, before the chain reserved anything.
std::size_t device_free_bytes(int device) {
  auto const& d = gpumem::detail::driver();
  if (d.init_result != CUDA_SUCCESS) {
    throw cuda_error{d.init_result,
                     fmt::format("gpumem: percent sizes need the CUDA driver to read device {}'s free memory: {}",
                                 device, result_name(d.init_result))};
  }
  std::size_t free = 0;
  std::size_t total = 0;
  GPUMEM_CU_TRY(d.cuMemGetInfo(&free, &total));
  return free;
}

/// "4 GiB" or "50% = 4 GiB".
std::string shown(size_value const& v, std::size_t resolved) {
  return v.is_percent ? fmt::format("{} = {}", v.to_string(), format_bytes(resolved)) : format_bytes(resolved);
}

std::string describe_bins(std::vector<std::size_t> const& bins) {
  bool consecutive = std::has_single_bit(bins.front());
  for (std::size_t i = 1; i < bins.size(); ++i) { consecutive = consecutive && bins[i] == bins[i - 1] * 2; }
  if (consecutive && bins.size() > 1) {
    return fmt::format("{}..{}", format_bytes(bins.front()), format_bytes(bins.back()));
  }
  std::string out;
  for (auto const b : bins) { out += fmt::format("{}{}", out.empty() ? "" : ", ", format_bytes(b)); }
  return out;
}

}  // namespace

// Builds innermost first, so every resource's upstream exists before it.
class chain_builder {
 public:
  chain_builder(resource_chain& chain, settings const& s, std::size_t free_bytes)
      : chain_{chain}, s_{s}, free_{free_bytes} {}

  device_memory_resource* add(std::unique_ptr<device_memory_resource> r, std::string type,
                              std::string description = {}) {
    chain_.owned_.push_back(std::move(r));
    chain_.types_.push_back(std::move(type));
    if (!description.empty()) { chain_.description_.push_back(std::move(description)); }
    return chain_.owned_.back().get();
  }

  template <class T, class... Args>
  // NOLINTNEXTLINE(performance-unnecessary-value-param): both are moved (clang-tidy 14 misreads a dependent call)
  T* make(std::string type, std::string description, Args&&... args) {
    auto owned = std::make_unique<T>(std::forward<Args>(args)...);
    T* raw = owned.get();
    add(std::move(owned), std::move(type), std::move(description));
    return raw;
  }

  /// The smallest limit of the limiting entries outside entry `index`, if any.
  std::optional<std::size_t> limit_above(std::size_t index) const {
    std::optional<std::size_t> out;
    for (std::size_t i = 0; i < index; ++i) {
      if (auto const* l = std::get_if<limiting_spec>(&s_.chain[i].options); l != nullptr) {
        std::size_t const limit = l->limit.resolve(free_);
        if (!out || limit < *out) out = limit;
      }
    }
    return out;
  }

  /// Builds entry `index` over `upstream`; returns the new top.
  device_memory_resource* entry(std::size_t index, device_memory_resource* upstream) {
    resource_spec const& spec = s_.chain[index];
    std::string const key = fmt::format("chain[{}]", index);
    return std::visit(
        overloaded{
            [&](pool_spec const& p) -> device_memory_resource* {
              std::size_t const initial = p.initial_size.resolve(free_);
              std::optional<std::size_t> maximum;
              std::string text = fmt::format("pool(initial {}", shown(p.initial_size, initial));
              if (p.maximum_size) {
                maximum = p.maximum_size->resolve(free_);
                detail::check_pool_bounds(spec, key + ".maximum_size", initial, *maximum, s_.on_config_error);
              }
              // A limit above the pool caps the device memory the pool holds, not only
              // what the program holds: free pages go back before the pool grows past it.
              if (auto const limit = limit_above(index);
                  limit && (!maximum || *limit < *maximum) && *limit >= initial) {
                maximum = *limit;
                text += fmt::format(", max {} (the limit)", format_bytes(*limit));
              } else if (p.maximum_size) {
                text += fmt::format(", max {}", shown(*p.maximum_size, *maximum));
              }
              std::size_t const growth = p.min_growth.resolve(free_);
              if (growth != pool_default_min_growth) {
                text += fmt::format(", min growth {}", shown(p.min_growth, growth));
              }
              text += ")";
              return make<pool_memory_resource>("pool", std::move(text), upstream,
                                                pool_options{initial, maximum, growth, chain_.device_});
            },
            [&](binning_spec const& b) -> device_memory_resource* {
              auto* r = make<binning_memory_resource>("binning", fmt::format("binning({})", describe_bins(b.bins)),
                                                      upstream);
              for (auto const size : b.bins) { r->add_bin(size); }
              return r;
            },
            [&](fixed_size_spec const& f) -> device_memory_resource* {
              auto const block = static_cast<std::size_t>(f.block_size.bytes);
              return make<fixed_size_memory_resource>(
                  "fixed_size", fmt::format("fixed_size(block {}, preallocate {})", format_bytes(block), f.preallocate),
                  upstream, block, f.preallocate);
            },
            [&](async_spec const& a) -> device_memory_resource* {
              std::optional<std::size_t> threshold;
              std::optional<std::size_t> initial;
              std::vector<std::string> parts;
              if (a.release_threshold) {
                threshold = a.release_threshold->resolve(free_);
                parts.push_back(fmt::format("release threshold {}", shown(*a.release_threshold, *threshold)));
              }
              if (a.initial_size) {
                initial = a.initial_size->resolve(free_);
                parts.push_back(fmt::format("initial {}", shown(*a.initial_size, *initial)));
              }
              std::string text = parts.empty() ? "async" : fmt::format("async({})", fmt::join(parts, ", "));
              return make<async_memory_resource>("async", std::move(text), threshold, initial);
            },
            [&](cuda_spec const&) -> device_memory_resource* { return make<cuda_memory_resource>("cuda", "cuda"); },
            [&](vmm_spec const&) -> device_memory_resource* { return make<vmm_memory_resource>("vmm", "vmm"); },
            [&](managed_spec const&) -> device_memory_resource* {
              return make<managed_memory_resource>("managed", "managed");
            },
            [&](limiting_spec const& l) -> device_memory_resource* {
              std::size_t const limit = l.limit.resolve(free_);
              auto* r = make<limiting_resource_adaptor>("limiting", fmt::format("limiting({})", shown(l.limit, limit)),
                                                        upstream, limit);
              chain_.limiter_ = r;  // built innermost first: the last one set is the outermost
              return r;
            },
            [&](statistics_spec const&) -> device_memory_resource* {
              return make<statistics_resource_adaptor>("statistics", "statistics", upstream);
            },
            [&](tracking_spec const& t) -> device_memory_resource* {
              auto* r = make<tracking_resource_adaptor>("tracking", t.capture_stacks ? "tracking(stacks)" : "tracking",
                                                        upstream, t.capture_stacks);
              chain_.tracker_ = r;
              return r;
            },
            [&](logging_spec const& l) -> device_memory_resource* {
              std::string const path = expand_template(l.file, chain_.device_);
              std::shared_ptr<csv_log_writer> sink;
              try {
                sink = std::make_shared<csv_log_writer>(path);
              } catch (gpumem::logic_error const& e) {
                detail::raise({spec.source, spec.line, spec.column}, key + ".file", e.what(),
                              "choose a writable path; %p pid, %r rank, %h host, %d device", s_.on_config_error);
              }
              return make<logging_resource_adaptor>("logging", fmt::format("logging({})", path), upstream,
                                                    std::move(sink));
            },
        },
        spec.options);
  }

 private:
  resource_chain& chain_;
  settings const& s_;
  std::size_t free_;
};

resource_chain::~resource_chain() {
  // Outermost first: an adaptor may still hand memory back to its upstream while it
  // is destroyed (pool slabs, pending blocks).
  while (!owned_.empty()) { owned_.pop_back(); }
}

device_memory_resource& resource_chain::top() noexcept { return *top_; }
statistics_resource_adaptor& resource_chain::live_stats() noexcept { return *live_stats_; }
tracking_resource_adaptor* resource_chain::tracker() noexcept { return tracker_; }
limiting_resource_adaptor* resource_chain::limiter() noexcept { return limiter_; }
resource_info resource_chain::info() const { return top_->info(); }

void resource_chain::device_reset() noexcept {
  for (auto& r : owned_) {
    if (auto* v = dynamic_cast<vmm_memory_resource*>(r.get())) v->reset_device(device_);
  }
}

std::string resource_chain::describe() const {
  std::string out;
  for (auto const& d : description_) { out += out.empty() ? d : fmt::format(" \u2192 {}", d); }
  return out;
}

std::unique_ptr<resource_chain> build_chain(settings const& s, int const device) {
  detail::validate_chain(s.chain, s.source, s.on_config_error);
  bool const need_free = std::ranges::any_of(s.chain, [](resource_spec const& e) { return uses_percent(e.options); });
  std::size_t const free_bytes = need_free ? device_free_bytes(device) : 0;

  std::unique_ptr<resource_chain> chain{new resource_chain{}};
  chain->device_ = device;
  chain_builder b{*chain, s, free_bytes};

  std::size_t const device_index = s.chain.size() - 1;  // validate_chain: the last entry
  // The device resource's description goes last in describe(); collect innermost first
  // and reverse at the end.
  device_memory_resource* top = b.entry(device_index, nullptr);
  // Below the pool it sees only growth and release: every change shared, so the
  // reserved bytes and their peak are exact whichever thread grew the pool.
  chain->device_stats_ = b.make<statistics_resource_adaptor>("statistics", {}, top,
                                                             statistics_resource_adaptor::sharing::every_change);
  top = chain->device_stats_;
  for (std::size_t i = device_index; i-- > 0;) { top = b.entry(i, top); }
  chain->live_stats_ = b.make<statistics_resource_adaptor>("statistics", {}, top);
  chain->top_ = chain->live_stats_;
  std::ranges::reverse(chain->types_);
  std::ranges::reverse(chain->description_);
  return chain;
}

}  // namespace gpumem::config
