#pragma once
// Reads a gpumem CSV allocation log the way csv_log_writer.hpp tells readers to:
// NUL bytes are not data; lines starting with '#' are metadata (kept apart); a
// line counts only if it is complete ('\n'-terminated, NUL-free) and has the
// csv_log_columns columns.

#include <gpumem/csv_log_writer.hpp>

#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace gpumem::test {

struct csv_log_contents {
  std::string header;                          ///< first line, without '\n'
  std::vector<std::vector<std::string>> rows;  ///< complete rows, split on ','
  std::vector<std::string> metadata;           ///< complete '#' lines, without '\n'
  std::string last_line;                       ///< the last complete line (row or metadata)
  std::size_t bad_lines = 0;                   ///< incomplete / malformed lines
  std::size_t nul_bytes = 0;                   ///< NULs seen (trailing reservation)
  std::size_t file_bytes = 0;
};

inline std::vector<std::string> split_csv(std::string const& line) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in{line};
  while (std::getline(in, field, ',')) out.push_back(field);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

inline csv_log_contents read_csv_log(std::string const& path) {
  std::string bytes;
  if (std::FILE* f = std::fopen(path.c_str(), "rb"); f != nullptr) {
    char buf[1 << 16];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
    std::fclose(f);
  }
  csv_log_contents c;
  c.file_bytes = bytes.size();
  std::size_t pos = 0;
  bool first = true;
  while (pos < bytes.size()) {
    if (bytes[pos] == '\0') {
      ++c.nul_bytes;
      ++pos;
      continue;
    }
    auto const nl = bytes.find('\n', pos);
    std::string const line = bytes.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    bool const complete = nl != std::string::npos && line.find('\0') == std::string::npos;
    pos = nl == std::string::npos ? bytes.size() : nl + 1;
    if (first) {
      c.header = line;
      first = false;
      continue;
    }
    if (complete) c.last_line = line;
    if (complete && !line.empty() && line[0] == '#') {
      c.metadata.push_back(line);
      continue;
    }
    auto fields = split_csv(line);
    if (!complete || fields.size() != csv_log_columns) {
      ++c.bad_lines;
      continue;
    }
    c.rows.push_back(std::move(fields));
  }
  return c;
}

}  // namespace gpumem::test
