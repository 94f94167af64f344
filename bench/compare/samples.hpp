#pragma once
// Raw samples of the comparison as JSON lines, one object per line, appended to a file
// (or stdout) so several processes and rounds can write one stream that
// bench/compare/report.py turns into tables:
//   {"type":"meta", "program":..., "device":..., ...}
//   {"type":"sample", "measurement":"latency", "contender":"gpumem pool",
//    "params":{"size":256,"threads":1}, "metric":"ns_per_pair", "value":61.2, "rep":0}
//   {"type":"note", "measurement":..., "contender":..., "text":"..."}
// Thread safety: none; the programs write from their main thread only.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem_compare {

/// "256 B", "64 KiB", "1 GiB": a size as the notes name it.
[[nodiscard]] std::string size_label(std::uint64_t bytes);

/// A JSON object built field by field (keys and strings escaped).
class json_object {
 public:
  json_object& add(std::string_view key, std::string_view value);
  json_object& add(std::string_view key, char const* value) { return add(key, std::string_view{value}); }
  json_object& add(std::string_view key, double value);
  json_object& add(std::string_view key, std::int64_t value);
  json_object& add(std::string_view key, std::uint64_t value);
  json_object& add(std::string_view key, int value) { return add(key, static_cast<std::int64_t>(value)); }
  json_object& add(std::string_view key, bool value);
  json_object& add_object(std::string_view key, json_object const& value);
  [[nodiscard]] std::string str() const { return "{" + body_ + "}"; }
  [[nodiscard]] bool empty() const noexcept { return body_.empty(); }

 private:
  void key(std::string_view k);
  std::string body_;
};

class sample_writer {
 public:
  /// path "" or "-": stdout. Appends. Throws std::runtime_error if it cannot open.
  explicit sample_writer(std::string const& path);
  ~sample_writer();
  sample_writer(sample_writer const&) = delete;
  sample_writer& operator=(sample_writer const&) = delete;

  void set_rep(int rep) noexcept { rep_ = rep; }
  [[nodiscard]] int rep() const noexcept { return rep_; }

  void meta(json_object const& fields);
  void sample(std::string_view measurement, std::string_view contender, json_object const& params,
              std::string_view metric, double value);
  void note(std::string_view measurement, std::string_view contender, std::string_view text);

 private:
  void line(std::string const& s);
  std::FILE* f_ = nullptr;
  bool owned_ = false;
  int rep_ = 0;
};

/// "2026-11-22T14:30:05Z"
[[nodiscard]] std::string utc_now();

}  // namespace gpumem_compare
