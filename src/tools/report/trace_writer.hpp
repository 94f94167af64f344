#pragma once
// gpumem-report --trace: the Chrome trace-event format (JSON object form) that
// Perfetto and chrome://tracing open, written while the logs are read, so memory
// stays bounded by the live allocations whatever the length of the logs.
//
// Per log one process (pid = 1, 2, ... in command-line order, named after the file):
//   - counter tracks "device D live" and "device D reserved" (bytes; reserved only
//     where the log has a Reserved column; "live"/"reserved" without a Device column);
//   - one thread per stream (tid = 1, 2, ... in order of first use, named "stream 0x...")
//     on which each allocation is an async slice ("b" at the allocate, "e" at its free,
//     id unique in the file, name = the stream); an allocation still live at the end is
//     closed at the last timestamp of the trace with args.still_live_at_end = true;
//   - instant events for failed allocations and frees of unknown pointers.
// Timestamps are microseconds since the earliest event (args.origin_ns in otherData),
// made non-decreasing per log, as a thread racing to its log can write an older time
// after a newer one.
//
// Thread safety: one thread (the merged pass calls it).

#include "log_merge.hpp"

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpumem::tools {

class trace_writer final : public merged_event_observer {
 public:
  /// Writes to `out`, which stays the caller's to close (and check).
  explicit trace_writer(std::FILE* out);

  void begin(std::vector<log_reader*> const& logs, std::int64_t origin_ns) override;
  void event(std::size_t log, log_event const& ev) override;
  void end(std::vector<log_summary> const& summaries) override;

  /// 0 when every write so far succeeded, else the errno of the first failure.
  [[nodiscard]] int error() const noexcept { return error_; }

 private:
  struct slice {
    std::uint64_t id;
    std::uint32_t tid;
    std::int16_t device;
    std::uint64_t size;
  };
  struct device_bytes {
    std::uint64_t live{};
    std::int64_t reserved{-1};
  };
  struct log_state {
    log_reader* reader{};
    std::int64_t last_ns{};
    std::unordered_map<std::uint64_t, slice> live;          ///< pointer -> open slice
    std::unordered_map<std::uint64_t, std::uint32_t> tids;  ///< stream -> tid
    std::map<int, device_bytes> devices;
  };
  static constexpr std::size_t max_streams_named = 4096;  ///< further streams share tid 0

  std::uint32_t tid_of(std::size_t log, std::uint64_t stream);
  void counter(std::size_t log, std::int64_t ts, int device, char const* what, std::int64_t bytes);
  void close_slice(std::size_t log, std::int64_t ts, std::uint64_t pointer, slice const& s, std::string const& args);
  void item(std::string const& json);
  [[nodiscard]] std::string ts(std::int64_t ns) const;
  void flush();

  std::FILE* out_;
  int error_ = 0;
  std::string buf_;
  bool first_ = true;
  std::int64_t origin_ = 0, last_ns_ = 0;
  std::uint64_t next_id_ = 1;
  std::vector<log_state> logs_;
};

}  // namespace gpumem::tools
