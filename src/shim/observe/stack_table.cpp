#include "observe/stack_table.hpp"

#include "observe/stack_file.hpp"
#include "shim_state.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <new>

namespace gpumem::shim {
namespace {

// Past this many stacks, new ones are not recorded: probes stay short.
constexpr std::uint32_t stack_limit = max_stacks / 4 * 3;
constexpr std::uint32_t max_probes = 64;
constexpr std::size_t module_line_bytes = 128 + PATH_MAX;

struct module_entry {
  std::atomic<std::uint32_t> ready{0};
  std::uint16_t line_len = 0;
  std::uint16_t path_at = 0;  // offset of the path in `line`
  std::uintptr_t start = 0, end = 0, bias = 0;
  std::atomic<std::uint64_t> claimed{0}, written{0};  // one bit per stack file
  char line[module_line_bytes];
};

struct stack_slot {
  std::atomic<std::uint64_t> id{0};
  std::atomic<std::uint32_t> ready{0};
  std::uint32_t depth = 0;
  std::uint32_t pid = 0;
  std::atomic<std::uint64_t> claimed{0}, written{0};
  std::atomic<std::int64_t> live_bytes{0}, live_count{0};
};

struct table {
  int depth = 0;  // frames per slot
  stack_slot* slots = nullptr;
  std::uintptr_t* frames = nullptr;
  std::uint16_t* modules_of = nullptr;  // module index per frame
  module_entry* modules = nullptr;
  std::atomic<std::uint32_t> module_count{0};
  std::atomic<std::uint32_t> count{0};
  std::atomic<std::uint64_t> dropped{0};
  char exe[PATH_MAX] = {};
};

void* map_zeroed(std::size_t bytes) noexcept {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

table* make_table() noexcept {
  int const depth = std::clamp(state().settings.stacks, 0, config::max_stack_frames);
  if (depth == 0) return nullptr;
  auto* t = static_cast<table*>(map_zeroed(sizeof(table)));
  if (t == nullptr) return nullptr;
  new (t) table{};
  t->depth = depth;
  auto const n = static_cast<std::size_t>(max_stacks);
  auto const d = static_cast<std::size_t>(depth);
  t->slots = static_cast<stack_slot*>(map_zeroed(n * sizeof(stack_slot)));
  t->frames = static_cast<std::uintptr_t*>(map_zeroed(n * d * sizeof(std::uintptr_t)));
  t->modules_of = static_cast<std::uint16_t*>(map_zeroed(n * d * sizeof(std::uint16_t)));
  t->modules = static_cast<module_entry*>(map_zeroed(max_modules * sizeof(module_entry)));
  if (t->slots == nullptr || t->frames == nullptr || t->modules_of == nullptr || t->modules == nullptr) {
    message(level::warn, "no memory for the stack table: call stacks are not recorded");
    return nullptr;
  }
  // Zeroed memory is what default-constructed slots and modules hold (atomics of 0).
  ssize_t const len = ::readlink("/proc/self/exe", t->exe, sizeof t->exe - 1);
  t->exe[len > 0 ? len : 0] = '\0';
  return t;
}

table* the_table() noexcept {
  static table* const t = make_table();
  return t;
}

std::uint64_t mix(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

std::uint64_t hash_frames(std::uintptr_t const* f, int n) noexcept {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ static_cast<std::uint64_t>(n);
  for (int i = 0; i < n; ++i) h = mix(h ^ f[i]) + 0x9e3779b97f4a7c15ULL;
  h = mix(h);
  return h == 0 ? 1 : h;
}

char* put_hex(char* o, std::uint64_t v) noexcept {
  int digits = v == 0 ? 1 : (64 - __builtin_clzll(v) + 3) / 4;
  for (int i = digits - 1; i >= 0; --i) *o++ = "0123456789abcdef"[(v >> (4 * i)) & 0xf];
  return o;
}

char* put_dec(char* o, std::uint64_t v) noexcept {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *o++ = tmp[--n];
  return o;
}

// The GNU build id from the object's own program headers, as hex into `o`.
char* put_build_id(char* o, char const* limit, dl_find_object const& f) noexcept {
  auto const start = reinterpret_cast<std::uintptr_t>(f.dlfo_map_start);
  auto const end = reinterpret_cast<std::uintptr_t>(f.dlfo_map_end);
  auto const* eh = reinterpret_cast<ElfW(Ehdr) const*>(start);
  if (end - start < sizeof(ElfW(Ehdr)) || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
      eh->e_phentsize != sizeof(ElfW(Phdr))) {
    return o;
  }
  std::uintptr_t const ph_at = start + eh->e_phoff;
  if (eh->e_phoff > end - start || eh->e_phnum * sizeof(ElfW(Phdr)) > end - ph_at) return o;
  auto const* ph = reinterpret_cast<ElfW(Phdr) const*>(ph_at);
  auto const bias = reinterpret_cast<std::uintptr_t>(f.dlfo_link_map->l_addr);
  // A note is read only where a readable loaded segment holds it.
  auto readable = [&](std::uintptr_t a, std::size_t n) {
    for (int i = 0; i < eh->e_phnum; ++i) {
      if (ph[i].p_type != PT_LOAD || (ph[i].p_flags & PF_R) == 0) continue;
      std::uintptr_t const lo = bias + ph[i].p_vaddr;
      if (a >= lo && n <= ph[i].p_filesz && a - lo <= ph[i].p_filesz - n) return true;
    }
    return false;
  };
  for (int i = 0; i < eh->e_phnum; ++i) {
    if (ph[i].p_type != PT_NOTE) continue;
    std::uintptr_t at = bias + ph[i].p_vaddr;
    std::size_t left = ph[i].p_filesz;
    if (!readable(at, left)) continue;
    while (left >= sizeof(ElfW(Nhdr))) {
      auto const* nh = reinterpret_cast<ElfW(Nhdr) const*>(at);
      std::size_t const name_size = (nh->n_namesz + 3U) & ~3U;
      std::size_t const desc_size = (nh->n_descsz + 3U) & ~3U;
      std::size_t const total = sizeof(ElfW(Nhdr)) + name_size + desc_size;
      if (total > left) break;
      auto const* name = reinterpret_cast<char const*>(at + sizeof(ElfW(Nhdr)));
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          nh->n_descsz <= 64 && o + 2 * std::size_t{nh->n_descsz} < limit) {
        auto const* d = reinterpret_cast<unsigned char const*>(name + name_size);
        for (std::size_t k = 0; k < nh->n_descsz; ++k) {
          *o++ = "0123456789abcdef"[d[k] >> 4];
          *o++ = "0123456789abcdef"[d[k] & 0xf];
        }
        return o;
      }
      at += total;
      left -= total;
    }
  }
  return o;
}

std::uint16_t register_module(table& t, dl_find_object const& f) noexcept {
  std::uint32_t const idx = t.module_count.fetch_add(1, std::memory_order_acq_rel);
  if (idx >= max_modules) return static_cast<std::uint16_t>(no_module);
  module_entry& m = t.modules[idx];
  m.start = reinterpret_cast<std::uintptr_t>(f.dlfo_map_start);
  m.end = reinterpret_cast<std::uintptr_t>(f.dlfo_map_end);
  m.bias = static_cast<std::uintptr_t>(f.dlfo_link_map->l_addr);
  char const* path = f.dlfo_link_map->l_name;
  if (path == nullptr || *path == '\0') path = t.exe;  // the main program
  char* const begin = m.line;
  char* const limit = m.line + sizeof m.line - 2;
  char* o = begin;
  std::memcpy(o, "module,", 7);
  o = put_dec(o + 7, idx);
  *o++ = ',';
  o = put_hex(o, m.start);
  *o++ = ',';
  o = put_hex(o, m.end);
  *o++ = ',';
  o = put_hex(o, m.bias);
  *o++ = ',';
  o = put_build_id(o, limit - 64, f);
  *o++ = ',';
  m.path_at = static_cast<std::uint16_t>(o - begin);
  for (char const* p = path; *p != '\0' && o < limit; ++p) *o++ = (*p == '\n' || *p == '\r') ? '?' : *p;
  *o = '\0';  // module_path() reads the path up to here
  m.line_len = static_cast<std::uint16_t>(o - begin);
  m.ready.store(1, std::memory_order_release);
  return static_cast<std::uint16_t>(idx);
}

std::uint16_t module_of(table& t, std::uintptr_t address) noexcept {
  // A return address may sit just past a function that never returns: look up
  // the call instruction's byte.
  std::uintptr_t const at = address - 1;
  std::uint32_t const n = std::min(t.module_count.load(std::memory_order_acquire), max_modules);
  for (std::uint32_t i = n; i-- > 0;) {  // newest first: an object loaded over an unloaded one wins
    module_entry const& m = t.modules[i];
    if (m.ready.load(std::memory_order_acquire) != 0 && at >= m.start && at < m.end) {
      return static_cast<std::uint16_t>(i);
    }
  }
  dl_find_object f{};
  if (_dl_find_object(reinterpret_cast<void*>(at), &f) != 0 || f.dlfo_link_map == nullptr) {
    return static_cast<std::uint16_t>(no_module);
  }
  return register_module(t, f);
}

bool same_frames(table const& t, std::uint32_t slot, std::uintptr_t const* f, int n) noexcept {
  stack_slot const& s = t.slots[slot];
  return s.depth == static_cast<std::uint32_t>(n) &&
         std::memcmp(t.frames + static_cast<std::size_t>(slot) * static_cast<std::size_t>(t.depth), f,
                     static_cast<std::size_t>(n) * sizeof *f) == 0;
}

void wait_ready(std::atomic<std::uint32_t> const& flag) noexcept {
  for (int spins = 0; flag.load(std::memory_order_acquire) == 0; ++spins) {
    if (spins > 64) ::sched_yield();
  }
}

// Claim-then-write of one line per file: whoever sets the claimed bit writes; the
// others wait (bounded) until it is written, so a row never precedes its stack.
template <typename Write>
void once_per_file(std::atomic<std::uint64_t>& claimed, std::atomic<std::uint64_t>& written, std::uint64_t bit,
                   Write&& write) noexcept {
  if ((written.load(std::memory_order_acquire) & bit) != 0) return;
  if ((claimed.fetch_or(bit, std::memory_order_acq_rel) & bit) == 0) {
    write();
    written.fetch_or(bit, std::memory_order_release);
    return;
  }
  for (int spins = 0; (written.load(std::memory_order_acquire) & bit) == 0 && spins < 100000; ++spins) {
    if (spins > 64) ::sched_yield();
  }
}

}  // namespace

int stack_depth() noexcept {
  table const* t = the_table();
  return t == nullptr ? 0 : t->depth;
}

stack_ref intern_stack(std::uintptr_t const* frames, int n) noexcept {
  table* const t = the_table();
  if (t == nullptr || frames == nullptr || n <= 0) return {};
  n = std::min(n, t->depth);
  std::uint64_t h = hash_frames(frames, n);
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::uint32_t idx = static_cast<std::uint32_t>(h) & (max_stacks - 1);
    bool collided = false;
    for (std::uint32_t probe = 0; probe < max_probes && !collided; ++probe, idx = (idx + 1) & (max_stacks - 1)) {
      stack_slot& s = t->slots[idx];
      std::uint64_t cur = s.id.load(std::memory_order_acquire);
      if (cur == 0) {
        if (t->count.load(std::memory_order_relaxed) >= stack_limit) break;
        if (s.id.compare_exchange_strong(cur, h, std::memory_order_acq_rel)) {
          auto const base = static_cast<std::size_t>(idx) * static_cast<std::size_t>(t->depth);
          std::memcpy(t->frames + base, frames, static_cast<std::size_t>(n) * sizeof *frames);
          for (int i = 0; i < n; ++i) t->modules_of[base + static_cast<std::size_t>(i)] = module_of(*t, frames[i]);
          s.depth = static_cast<std::uint32_t>(n);
          s.pid = static_cast<std::uint32_t>(::getpid());
          t->count.fetch_add(1, std::memory_order_relaxed);
          s.ready.store(1, std::memory_order_release);
          return {h, idx};
        }
        // Lost the race: `cur` is the winner's id.
      }
      if (cur == h) {
        wait_ready(s.ready);
        if (same_frames(*t, idx, frames, n)) return {h, idx};
        collided = true;  // another stack has this hash: derive another id
      }
    }
    if (!collided) break;
    h = mix(h + 0x9e3779b97f4a7c15ULL);
    if (h == 0) h = 1;
  }
  if (t->dropped.fetch_add(1, std::memory_order_relaxed) == 0) {
    message(level::warn, "the stack table is full (%u distinct stacks): new call stacks are not recorded",
            t->count.load(std::memory_order_relaxed));
  }
  return {};
}

void write_stack_once(stack_ref ref, stack_file& file, unsigned file_index) noexcept {
  table* const t = the_table();
  if (t == nullptr || !ref || file_index >= 64 || !file.usable()) return;
  stack_slot& s = t->slots[ref.slot];
  std::uint64_t const bit = std::uint64_t{1} << file_index;
  if ((s.written.load(std::memory_order_acquire) & bit) != 0) return;
  auto const base = static_cast<std::size_t>(ref.slot) * static_cast<std::size_t>(t->depth);
  // The modules first: a reader meets a stack's modules before (or with) it.
  for (std::uint32_t i = 0; i < s.depth; ++i) {
    std::uint16_t const m = t->modules_of[base + i];
    if (m == no_module) continue;
    module_entry& e = t->modules[m];
    once_per_file(e.claimed, e.written, bit, [&] {
      char line[module_line_bytes + 1];
      std::memcpy(line, e.line, e.line_len);
      line[e.line_len] = '\n';
      (void)file.write_line(line, e.line_len + 1U);
    });
  }
  once_per_file(s.claimed, s.written, bit, [&] {
    char line[64 + 40 * config::max_stack_frames];
    char* o = line;
    std::memcpy(o, "stack,", 6);
    o = put_hex(o + 6, ref.id);
    *o++ = ',';
    o = put_dec(o, s.pid);
    *o++ = ',';
    for (std::uint32_t i = 0; i < s.depth; ++i) {
      if (i > 0) *o++ = ' ';
      o = put_hex(o, t->frames[base + i]);
      if (std::uint16_t const m = t->modules_of[base + i]; m != no_module) {
        *o++ = '@';
        o = put_dec(o, m);
      }
    }
    *o++ = '\n';
    (void)file.write_line(line, static_cast<std::size_t>(o - line));
  });
}

void forget_written(unsigned file_index) noexcept {
  table* const t = the_table();
  if (t == nullptr || file_index >= 64) return;
  std::uint64_t const keep = ~(std::uint64_t{1} << file_index);
  for (std::uint32_t i = 0; i < max_stacks; ++i) {
    stack_slot& s = t->slots[i];
    if (s.id.load(std::memory_order_relaxed) == 0) continue;
    s.written.fetch_and(keep, std::memory_order_acq_rel);
    s.claimed.fetch_and(keep, std::memory_order_acq_rel);
  }
  std::uint32_t const n = std::min(t->module_count.load(std::memory_order_acquire), max_modules);
  for (std::uint32_t i = 0; i < n; ++i) {
    t->modules[i].written.fetch_and(keep, std::memory_order_acq_rel);
    t->modules[i].claimed.fetch_and(keep, std::memory_order_acq_rel);
  }
}

void reset_live_after_fork() noexcept {
  table* const t = the_table();
  if (t == nullptr) return;
  // Written only where set: untouched pages of the table stay unallocated in the child.
  for (std::uint32_t i = 0; i < max_stacks; ++i) {
    stack_slot& s = t->slots[i];
    if (s.live_bytes.load(std::memory_order_relaxed) != 0) s.live_bytes.store(0, std::memory_order_relaxed);
    if (s.live_count.load(std::memory_order_relaxed) != 0) s.live_count.store(0, std::memory_order_relaxed);
  }
}

void add_live(std::uint32_t slot, std::size_t bytes) noexcept {
  table* const t = the_table();
  if (t == nullptr || slot >= max_stacks) return;
  t->slots[slot].live_bytes.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  t->slots[slot].live_count.fetch_add(1, std::memory_order_relaxed);
}

void remove_live(std::uint32_t slot, std::size_t bytes) noexcept {
  table* const t = the_table();
  if (t == nullptr || slot >= max_stacks) return;
  t->slots[slot].live_bytes.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  t->slots[slot].live_count.fetch_sub(1, std::memory_order_relaxed);
}

std::size_t top_live_sites(live_site* out, std::size_t k) noexcept {
  table* const t = the_table();
  if (t == nullptr || out == nullptr || k == 0) return 0;
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < max_stacks; ++i) {
    stack_slot const& s = t->slots[i];
    if (s.ready.load(std::memory_order_acquire) == 0) continue;
    std::int64_t const bytes = s.live_bytes.load(std::memory_order_relaxed);
    if (bytes <= 0) continue;
    if (n == k && bytes <= out[k - 1].bytes) continue;
    std::size_t at = n < k ? n++ : k - 1;
    while (at > 0 && out[at - 1].bytes < bytes) {
      out[at] = out[at - 1];
      --at;
    }
    out[at] = live_site{s.id.load(std::memory_order_relaxed), i, bytes, s.live_count.load(std::memory_order_relaxed)};
  }
  return n;
}

std::size_t stack_frames(std::uint32_t slot, frame_info* out, std::size_t max) noexcept {
  table* const t = the_table();
  if (t == nullptr || slot >= max_stacks || t->slots[slot].ready.load(std::memory_order_acquire) == 0) return 0;
  auto const base = static_cast<std::size_t>(slot) * static_cast<std::size_t>(t->depth);
  std::size_t const n = std::min<std::size_t>(t->slots[slot].depth, max);
  for (std::size_t i = 0; i < n; ++i) {
    frame_info f{t->frames[base + i], 0, nullptr};
    if (std::uint16_t const m = t->modules_of[base + i]; m != no_module) {
      f.bias = t->modules[m].bias;
      f.module_path = t->modules[m].line + t->modules[m].path_at;
    }
    out[i] = f;
  }
  return n;
}

std::uint32_t stacks_recorded() noexcept {
  table const* t = the_table();
  return t == nullptr ? 0 : t->count.load(std::memory_order_relaxed);
}

std::uint64_t stacks_dropped() noexcept {
  table const* t = the_table();
  return t == nullptr ? 0 : t->dropped.load(std::memory_order_relaxed);
}

}  // namespace gpumem::shim
