#include "samples.hpp"

#include "text_escape.hpp"

#include <cmath>
#include <ctime>
#include <stdexcept>

namespace gpumem_compare {

std::string size_label(std::uint64_t bytes) {
  static constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

void json_object::key(std::string_view k) {
  if (!body_.empty()) body_ += ',';
  body_ += gpumem::tools::json_string(k);
  body_ += ':';
}

json_object& json_object::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += gpumem::tools::json_string(value);
  return *this;
}

json_object& json_object::add(std::string_view k, double value) {
  key(k);
  if (!std::isfinite(value)) {
    body_ += "null";  // JSON has no NaN/Inf
  } else {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.12g", value);
    body_ += buf;
  }
  return *this;
}

json_object& json_object::add(std::string_view k, std::int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

json_object& json_object::add(std::string_view k, std::uint64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

json_object& json_object::add(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

json_object& json_object::add_object(std::string_view k, json_object const& value) {
  key(k);
  body_ += value.str();
  return *this;
}

sample_writer::sample_writer(std::string const& path) {
  if (path.empty() || path == "-") {
    f_ = stdout;
    return;
  }
  f_ = std::fopen(path.c_str(), "a");
  if (f_ == nullptr) throw std::runtime_error("cannot open '" + path + "' for appending samples");
  owned_ = true;
}

sample_writer::~sample_writer() {
  if (owned_)
    std::fclose(f_);
  else
    std::fflush(f_);
}

void sample_writer::line(std::string const& s) {
  std::fputs(s.c_str(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);  // a run cut short by its time limit keeps every sample written so far
}

void sample_writer::meta(json_object const& fields) {
  json_object o;
  o.add("type", "meta").add("time", utc_now());
  std::string s = o.str();
  if (!fields.empty()) s = s.substr(0, s.size() - 1) + "," + fields.str().substr(1);
  line(s);
}

void sample_writer::sample(std::string_view measurement, std::string_view contender, json_object const& params,
                           std::string_view metric, double value) {
  json_object o;
  o.add("type", "sample").add("measurement", measurement).add("contender", contender).add_object("params", params);
  o.add("metric", metric).add("value", value).add("rep", rep_);
  line(o.str());
}

void sample_writer::note(std::string_view measurement, std::string_view contender, std::string_view text) {
  json_object o;
  o.add("type", "note").add("measurement", measurement).add("contender", contender).add("text", text).add("rep", rep_);
  line(o.str());
}

std::string utc_now() {
  std::time_t const t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace gpumem_compare
