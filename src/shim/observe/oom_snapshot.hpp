#pragma once
// Out of memory, explained when it happens.
//
// When an allocation fails with out-of-memory after the chain was trimmed and the
// allocation retried, the shim says once on stderr (warn level) what the device's
// memory was doing — the request, live bytes and allocations, what the pool holds,
// its largest free block and fragmentation, bytes waiting for reclamation, the
// limit, the device's own free memory — and, when a log or report file is
// configured, writes the same as JSON beside it: "<log>.oom-<n>.json" (else
// "<report file>.oom-<n>.json"), with the top call sites by live bytes when stacks
// are recorded (raw addresses, modules and offsets; gpumem-report names them).
//
// Once per burst: failures less than a second after the previous one belong to the
// same burst and say nothing more (a program retrying in a loop gets one message;
// the next message counts the failures in between). At most max_snapshots files
// per process.
//
// Under a limit, allocations of other threads that the limit admitted but that
// have not returned yet (a pool growing for them) are waited for, up to 200 ms, so
// that "the program holds" counts them; any still on their way are named apart.
//
// The failing path stays safe: it runs on the allocating thread with no chain lock
// held; the JSON is built in a fixed buffer (one snapshot at a time; a thread that
// finds one being written skips its own), the only locks taken are the chain's own
// (info()), and nothing is allocated beyond a few short strings (the chain's
// description, the file name), whose failure only drops them.
//
// Thread safety: any thread.

#include <cuda.h>

#include <cstddef>

namespace gpumem::shim {

struct device_chain;

inline constexpr int max_snapshots = 16;

/// Reports a failed allocation of `bytes` on chain `c` (see the file comment).
void explain_out_of_memory(device_chain& c, std::size_t bytes, CUstream stream, const char* entry) noexcept;

}  // namespace gpumem::shim
