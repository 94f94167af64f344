#include "trace_writer.hpp"

#include "units.hpp"

#include "log_messages.hpp"
#include "log_reader.hpp"
#include "text_escape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

namespace gpumem::tools {

namespace {

constexpr std::size_t flush_at = std::size_t{1} << 20;

std::string counter_name(int device, char const* what) {
  return device < 0 ? std::string{what} : fmt::format("device {} {}", device, what);
}

}  // namespace

trace_writer::trace_writer(std::FILE* out) : out_{out} {
  buf_.reserve(flush_at + 4096);
  buf_ += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
}

void trace_writer::flush() {
  if (buf_.empty() || error_ != 0) {
    buf_.clear();
    return;
  }
  if (std::fwrite(buf_.data(), 1, buf_.size(), out_) != buf_.size()) error_ = errno != 0 ? errno : EIO;
  buf_.clear();
}

void trace_writer::item(std::string const& json) {
  if (!first_) buf_ += ",\n";
  first_ = false;
  buf_ += json;
  if (buf_.size() >= flush_at) flush();
}

std::string trace_writer::ts(std::int64_t ns) const {
  auto const rel = static_cast<std::uint64_t>(ns - origin_);  // never negative: see event()
  return fmt::format("{}.{:03}", rel / 1000, rel % 1000);
}

void trace_writer::begin(std::vector<log_reader*> const& logs, std::int64_t origin_ns) {
  origin_ = last_ns_ = origin_ns;
  logs_.resize(logs.size());
  for (std::size_t l = 0; l < logs.size(); ++l) {
    logs_[l].reader = logs[l];
    logs_[l].last_ns = origin_ns;
    item(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":{}}}}})", l + 1,
                     json_string(base_name(logs[l]->path()))));
    item(fmt::format(R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})", l + 1,
                     l + 1));
  }
}

std::uint32_t trace_writer::tid_of(std::size_t log, std::uint64_t stream) {
  auto& tids = logs_[log].tids;
  if (auto it = tids.find(stream); it != tids.end()) return it->second;
  if (tids.size() >= max_streams_named) return 0;
  auto const tid = static_cast<std::uint32_t>(tids.size() + 1);
  tids.emplace(stream, tid);
  item(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"stream {}"}}}})", log + 1, tid,
                   hex(stream)));
  return tid;
}

void trace_writer::counter(std::size_t log, std::int64_t t, int device, char const* what, std::int64_t bytes) {
  item(fmt::format(R"({{"ph":"C","name":"{}","pid":{},"ts":{},"args":{{"bytes":{}}}}})", counter_name(device, what),
                   log + 1, ts(t), bytes));
}

void trace_writer::close_slice(std::size_t log, std::int64_t t, std::uint64_t pointer, slice const& s,
                               std::string const& args) {
  item(fmt::format(R"({{"ph":"e","cat":"allocation","name":"stream","id":"{:#x}","pid":{},"tid":{},"ts":{},)"
                   R"("args":{{"pointer":"{:#x}"{}}}}})",
                   s.id, log + 1, s.tid, ts(t), pointer, args));
}

void trace_writer::event(std::size_t log, log_event const& ev) {
  if (!ev.device_memory()) return;  // pinned host or managed memory: the trace's counters are device memory
  auto& st = logs_[log];
  std::int64_t const t = std::max(ev.time_ns, st.last_ns);
  st.last_ns = t;
  last_ns_ = std::max(last_ns_, t);
  std::uint32_t const tid = tid_of(log, ev.stream);
  log_reader const& r = *st.reader;
  bool const has_device = r.columns().device;
  int const device = has_device ? ev.device : -1;
  switch (ev.action) {
    case log_action::allocate: {
      if (ev.pointer == 0) break;                                     // a zero-byte allocation owns nothing
      if (auto it = st.live.find(ev.pointer); it != st.live.end()) {  // the log lost a free
        close_slice(log, t, ev.pointer, it->second, R"(,"replaced_by_reuse":true)");
        st.devices[it->second.device].live -= it->second.size;
        counter(log, t, it->second.device, "live", static_cast<std::int64_t>(st.devices[it->second.device].live));
        st.live.erase(it);
      }
      slice const s{next_id_++, tid, static_cast<std::int16_t>(device), ev.size};
      st.live.emplace(ev.pointer, s);
      item(fmt::format(R"({{"ph":"b","cat":"allocation","name":"stream","id":"{:#x}","pid":{},"tid":{},"ts":{},)"
                       R"("args":{{"size":{},"size_text":"{}","pointer":"{:#x}","thread":{},"entry":{},"line":{}}}}})",
                       s.id, log + 1, tid, ts(t), ev.size, human_bytes(ev.size), ev.pointer, ev.thread_id,
                       json_string(r.string(ev.entry_id)), ev.line));
      auto& d = st.devices[device];
      d.live += ev.size;
      counter(log, t, device, "live", static_cast<std::int64_t>(std::min<std::uint64_t>(d.live, INT64_MAX)));
      break;
    }
    case log_action::free: {
      if (ev.pointer == 0 || ev.refused) break;
      auto it = st.live.find(ev.pointer);
      if (it == st.live.end()) {
        item(fmt::format(R"({{"ph":"i","s":"t","name":"free of unknown pointer","pid":{},"tid":{},"ts":{},)"
                         R"("args":{{"pointer":"{:#x}","size":{},"thread":{},"line":{}}}}})",
                         log + 1, tid, ts(t), ev.pointer, ev.size, ev.thread_id, ev.line));
        break;
      }
      slice const s = it->second;
      st.live.erase(it);
      close_slice(log, t, ev.pointer, s,
                  fmt::format(R"(,"freed_by":{},"line":{})", json_string(r.string(ev.entry_id)), ev.line));
      auto& d = st.devices[s.device];
      d.live -= s.size;
      counter(log, t, s.device, "live", static_cast<std::int64_t>(std::min<std::uint64_t>(d.live, INT64_MAX)));
      break;
    }
    case log_action::allocate_failure:
      item(fmt::format(R"({{"ph":"i","s":"t","name":"allocation failed","pid":{},"tid":{},"ts":{},)"
                       R"("args":{{"size":{},"size_text":"{}","result":{},"entry":{},"thread":{},"line":{}}}}})",
                       log + 1, tid, ts(t), ev.size, human_bytes(ev.size), json_string(r.string(ev.result_id)),
                       json_string(r.string(ev.entry_id)), ev.thread_id, ev.line));
      break;
  }
  if (ev.reserved >= 0) {
    auto& d = st.devices[device];
    if (d.reserved != ev.reserved) {
      d.reserved = ev.reserved;
      counter(log, t, device, "reserved", ev.reserved);
    }
  }
}

void trace_writer::end(std::vector<log_summary> const& summaries) {
  for (std::size_t l = 0; l < logs_.size(); ++l) {
    bool const complete = l < summaries.size() && summaries[l].complete();
    std::string const args = complete ? R"(,"still_live_at_end":true)"
                                      : R"(,"still_live_at_end":true,"log_incomplete":true)";
    // In allocation order, so the file does not depend on the hash map's order.
    std::vector<std::pair<std::uint64_t, slice>> open{logs_[l].live.begin(), logs_[l].live.end()};
    std::sort(open.begin(), open.end(), [](auto const& a, auto const& b) { return a.second.id < b.second.id; });
    for (auto const& [pointer, s] : open) close_slice(l, last_ns_, pointer, s, args);
    logs_[l].live.clear();
  }
  if (!first_) buf_ += "\n";
  buf_ += fmt::format("],\"otherData\":{{\"producer\":\"gpumem-report\",\"origin_ns\":{}}}}}\n", origin_);
  flush();
  if (error_ == 0 && std::fflush(out_) != 0) error_ = errno != 0 ? errno : EIO;
}

}  // namespace gpumem::tools
