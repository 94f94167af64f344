#pragma once
// The virtual memory management state (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess): reservations are PROT_NONE host address ranges;
// a physical allocation is a page-aligned block of its device's heap, so it
// counts against the device's memory like cuMemAlloc; a mapping maps that
// block's memfd pages into a reservation (MAP_SHARED | MAP_FIXED), and access
// flags become the mapping's host protection.
//
// The entry points (vmm_api.cpp) check their arguments; this class checks what
// depends on the state and counts violations where a caller broke the rules.
//
// Shareable handles (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR only): a physical
// allocation created with that request can be exported. The exported fd is a
// fresh open of the memfd that holds the allocation (the device heap's), whose
// file position points at a record written past the heap's end: {magic, device,
// offset, size, properties}. Passed to another process (SCM_RIGHTS), it maps the
// very same pages, so both see each other's writes; the importer keeps a dup of
// it until its handle and mappings are gone.
//
// Lifetimes: on a GPU the physical memory lives while any process holds a
// handle or mapping of it. The sim cannot count across processes, so it is
// conservative: once exported, an allocation's block is never reused by the
// exporter's heap; after its last local handle and mapping go, it stays counted
// as used on its device until the process exits. An importer's mapping stays
// valid after the exporter released its handle or exited (the fd and mmap keep
// the memfd pages alive), and an fd can be imported even after the exporter
// exited.
//
// Thread safety: one mutex guards everything; it is taken before a device
// heap's (never the other way round) and never held while stream work runs.

#include "memory.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace gpumemsim {

class vmm_state {
 public:
  /// Granularity of sizes, offsets and addresses (minimum and recommended).
  static constexpr std::size_t granularity = std::size_t{2} << 20;

  static vmm_state& get();

  /// Whether the VMM API is simulated: false when GPUMEM_SIM_NO_VMM=1 (read once).
  static bool supported() noexcept;

  CUresult reserve(std::size_t size, std::size_t align, std::uintptr_t hint, std::uintptr_t* out);
  CUresult free_reservation(std::uintptr_t ptr, std::size_t size);
  CUresult create(int device, std::size_t size, CUmemAllocationProp const& prop, CUmemGenericAllocationHandle* out);
  CUresult release(CUmemGenericAllocationHandle handle);
  CUresult map(std::uintptr_t ptr, std::size_t size, CUmemGenericAllocationHandle handle);
  CUresult unmap(std::uintptr_t ptr, std::size_t size);
  /// Descriptors already checked (device locations of existing devices, known flags).
  CUresult set_access(std::uintptr_t ptr, std::size_t size, CUmemAccessDesc const* desc, std::size_t count);
  CUresult get_access(std::uintptr_t ptr, int device, unsigned long long* flags);
  CUresult properties(CUmemGenericAllocationHandle handle, CUmemAllocationProp* out);
  CUresult retain(std::uintptr_t ptr, CUmemGenericAllocationHandle* out);
  /// A new POSIX fd naming the allocation (the caller owns it).
  CUresult export_fd(CUmemGenericAllocationHandle handle, int* out);
  /// A new handle for the allocation an exported fd names (the fd stays the caller's).
  CUresult import_fd(int fd, CUmemGenericAllocationHandle* out);

  /// How POSIX fd shareable handles are offered (gpumemsim_set_posix_fd_handles).
  enum class fd_handles : int { unsupported = 0, supported = 1, refused = 2 };
  static fd_handles posix_fd_handles() noexcept;
  static void set_posix_fd_handles(fd_handles mode) noexcept;

  /// The mapping holding `ptr` (accessible or not).
  bool lookup(std::uintptr_t ptr, pointer_info* out);
  /// Whether `ptr` lies in a reservation (mapped or not).
  bool reserved(std::uintptr_t ptr);
  enum class range_status { outside, ok, inaccessible };
  /// outside: [ptr, ptr+bytes) starts in no reservation; ok: every byte is mapped
  /// with the access `how` needs for some device; inaccessible otherwise.
  range_status check_range(std::uintptr_t ptr, std::size_t bytes, access_kind how);

 private:
  vmm_state() = default;

  // Access of one granule of a mapping: bit d set when device d may read / write.
  struct granule_access {
    std::uint64_t read = 0;
    std::uint64_t write = 0;
  };
  struct physical {
    int device = 0;
    std::uintptr_t block = 0;  // in the device heap (not for an imported one)
    std::size_t size = 0;
    CUmemAllocationProp prop{};
    int refs = 1;              // cuMemCreate and cuMemRetainAllocationHandle, less cuMemRelease
    int mappings = 0;          // live cuMemMap mappings of it
    bool exported = false;     // its block must never be reused
    int imported_fd = -1;      // imported: owned dup of the exporter's memfd; -1 for the heap's
    std::uint64_t offset = 0;  // imported: of the allocation in that memfd
  };
  struct mapping {
    std::size_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    std::uint64_t buffer_id = 0;
    std::vector<granule_access> access;  // one per granule
  };

  std::map<std::uintptr_t, std::size_t>::iterator reservation_of(std::uintptr_t ptr);
  std::map<std::uintptr_t, mapping>::iterator mapping_of(std::uintptr_t ptr);
  /// Frees the physical memory once no handle reference and no mapping remain.
  void drop_if_unused(std::map<CUmemGenericAllocationHandle, physical>::iterator it);
  static int host_protection(granule_access a) noexcept;
  /// The memfd holding a physical allocation, and the allocation's offset in it.
  static std::pair<int, std::uint64_t> backing(physical const& ph);

  std::mutex mutex_;
  std::atomic<std::size_t> reservation_count_{0};       // lets host-pointer checks skip the lock
  std::map<std::uintptr_t, std::size_t> reservations_;  // base -> size
  std::map<std::uintptr_t, mapping> mappings_;          // base -> mapping
  std::map<CUmemGenericAllocationHandle, physical> handles_;
  CUmemGenericAllocationHandle next_handle_ = 1;  // never reused: tells a double release from garbage
};

}  // namespace gpumemsim
