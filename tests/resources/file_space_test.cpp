// detail::populate_for_writing: every page of a shared file mapping ends up
// mapped writable and dirty (as /proc/self/smaps counts it), by either method,
// and the file's content is what it was.
#include <gpumem/detail/file_space.hpp>

#include <support/temp_file.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace gpumem::test {
namespace {

constexpr std::size_t mapping_bytes = std::size_t{1} << 20;

// Dirty kB of the mapping that starts at `p` (shared and private: smaps counts a
// page mapped by one process as private).
std::size_t dirty_kb(void const* p) {
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(p)));
  std::ifstream smaps{"/proc/self/smaps"};
  std::string line;
  bool in_mapping = false;
  std::size_t kb = 0;
  while (std::getline(smaps, line)) {
    bool const header = line.find('-') != std::string::npos && line.find(':') > line.find(' ');
    if (header) {
      if (in_mapping) break;
      in_mapping = line.rfind(start, 0) == 0;
      continue;
    }
    unsigned long v = 0;
    if (in_mapping && (std::sscanf(line.c_str(), "Shared_Dirty: %lu kB", &v) == 1 ||
                       std::sscanf(line.c_str(), "Private_Dirty: %lu kB", &v) == 1)) {
      kb += v;
    }
  }
  return kb;
}

class PopulateForWriting : public ::testing::TestWithParam<detail::populate_with> {};
INSTANTIATE_TEST_SUITE_P(FileSpace, PopulateForWriting,
                         ::testing::Values(detail::populate_with::best, detail::populate_with::stores),
                         [](auto const& test_info) {
                           return test_info.param == detail::populate_with::best ? "best" : "stores";
                         });

TEST_P(PopulateForWriting, EveryPageIsDirtyAndTheContentUnchanged) {
  temp_file f{"ring"};
  int const fd = ::open(f.path().c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(detail::allocate_file(fd, 0, mapping_bytes), 0);
  std::string const mark = "written before the mapping";
  ASSERT_TRUE(detail::pwrite_all(fd, mark.data(), mark.size(), 4096 * 7 + 100));
  void* const p = ::mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_LT(dirty_kb(p), mapping_bytes / 1024 / 2) << "a fresh mapping is not dirty yet: the check below can fail";

  detail::populate_for_writing(p, mapping_bytes, GetParam());
  EXPECT_GE(dirty_kb(p), mapping_bytes / 1024) << "every page mapped writable and dirty";

  auto const* bytes = static_cast<char const*>(p);
  EXPECT_EQ(std::string(bytes + 4096 * 7 + 100, mark.size()), mark);
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < mapping_bytes; ++i) nonzero += bytes[i] != 0 ? 1 : 0;
  EXPECT_EQ(nonzero, mark.size() - static_cast<std::size_t>(std::count(mark.begin(), mark.end(), '\0')));
  ::munmap(p, mapping_bytes);
  ::close(fd);
}

}  // namespace
}  // namespace gpumem::test
