// Shareable handles of virtual memory (cuMemExportToShareableHandle and
// cuMemImportFromShareableHandle, POSIX fds): a fork()ed child that receives the
// fd over a Unix socket (SCM_RIGHTS) maps the parent's very pages; exported
// memory outlives the exporter's handle, and the exporter itself, and is never
// reused by its heap.

#include "sim_driver.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace gpumem::test {
namespace {

constexpr std::size_t G = std::size_t{2} << 20;  // the sim's granularity
constexpr auto posix_fd = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

CUmemAllocationProp prop(bool exportable) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = exportable ? posix_fd : CU_MEM_HANDLE_TYPE_NONE;
  return p;
}

void* as_os_handle(int fd) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)); }

// Reserves, maps and opens `h` for device 0's reads and writes; 0 on failure.
CUdeviceptr map_rw(CUmemGenericAllocationHandle h, std::size_t bytes) {
  auto const& d = sim_driver::get();
  CUdeviceptr p = 0;
  if (d.cuMemAddressReserve(&p, bytes, 0, 0, 0) != CUDA_SUCCESS) return 0;
  CUmemAccessDesc a{};
  a.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (d.cuMemMap(p, bytes, 0, h, 0) != CUDA_SUCCESS || d.cuMemSetAccess(p, bytes, &a, 1) != CUDA_SUCCESS) return 0;
  return p;
}

bool unmap_and_free(CUdeviceptr p, std::size_t bytes) {
  auto const& d = sim_driver::get();
  return d.cuMemUnmap(p, bytes) == CUDA_SUCCESS && d.cuMemAddressFree(p, bytes) == CUDA_SUCCESS;
}

char* host(CUdeviceptr p) { return reinterpret_cast<char*>(p); }

bool send_fd(int sock, int fd) {
  char byte = 'f';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &msg, 0) == 1;
}

int receive_fd(int sock) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(sock, &msg, 0) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

bool send_byte(int sock, char b) { return write(sock, &b, 1) == 1; }
bool expect_byte(int sock, char b) {
  char got = 0;
  return read(sock, &got, 1) == 1 && got == b;
}

class VmmIpcTest : public SimDriverTest {
 protected:
  void TearDown() override {
    sim.set_posix_fd_handles(1);
    SimDriverTest::TearDown();
  }
  CUmemGenericAllocationHandle create(std::size_t bytes, bool exportable) const {
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp const p = prop(exportable);
    EXPECT_EQ(drv.cuMemCreate(&h, bytes, &p, 0), CUDA_SUCCESS);
    return h;
  }
  int export_fd(CUmemGenericAllocationHandle h) const {
    int fd = -1;
    EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, h, posix_fd, 0), CUDA_SUCCESS);
    return fd;
  }
  std::size_t free_bytes() const {
    std::size_t f = 0;
    EXPECT_EQ(drv.cuMemGetInfo(&f, nullptr), CUDA_SUCCESS);
    return f;
  }
};

// Child-side checks, reported through the exit status (no gtest in the child).
int child_main(int sock, CUdeviceptr parent_ptr) {
  auto const& d = sim_driver::get();
  int const fd = receive_fd(sock);
  if (fd < 0) return 10;
  CUmemGenericAllocationHandle h = 0;
  if (d.cuMemImportFromShareableHandle(&h, as_os_handle(fd), posix_fd) != CUDA_SUCCESS) return 11;
  close(fd);  // the import does not own it, and needs it no longer
  CUmemAllocationProp got{};
  if (d.cuMemGetAllocationPropertiesFromHandle(&got, h) != CUDA_SUCCESS) return 12;
  if (got.type != CU_MEM_ALLOCATION_TYPE_PINNED || got.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      got.location.id != 0 || got.requestedHandleTypes != posix_fd)
    return 13;
  CUdeviceptr p = map_rw(h, 2 * G);
  if (p == 0) return 14;
  if (p == parent_ptr) return 15;  // a mapping of its own, not the inherited one
  if (std::strcmp(host(p), "from parent") != 0 || std::strcmp(host(p + G), "second granule") != 0) return 16;
  std::strcpy(host(p + 100), "from child");
  CUmemGenericAllocationHandle again = 0;
  if (d.cuMemRetainAllocationHandle(&again, host(p + G + 8)) != CUDA_SUCCESS || again != h) return 17;
  if (d.cuMemRelease(again) != CUDA_SUCCESS) return 18;
  if (!send_byte(sock, 'w') || !expect_byte(sock, 'r')) return 19;
  // The parent unmapped and released everything: the child's mapping holds on.
  if (std::strcmp(host(p), "from parent") != 0 || std::strcmp(host(p + 100), "from child") != 0) return 20;
  if (d.cuMemRelease(h) != CUDA_SUCCESS) return 21;
  if (std::strcmp(host(p + G), "second granule") != 0) return 22;  // released, still mapped
  if (!unmap_and_free(p, 2 * G)) return 23;
  return 0;
}

TEST_F(VmmIpcTest, AttributeAndPropertiesSayPosixFd) {
  int v = -1;
  ASSERT_EQ(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
  std::size_t const used = sim.live_bytes(0);
  CUmemGenericAllocationHandle h = create(G, true);
  CUmemAllocationProp got{};
  ASSERT_EQ(drv.cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.requestedHandleTypes, posix_fd);
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(sim.live_allocations(0), 0U) << "never exported: freed as usual";
  EXPECT_EQ(sim.live_bytes(0), used);
}

TEST_F(VmmIpcTest, ChildImportsTheParentsPagesAndKeepsThemAfterTheParentLetGo) {
  CUmemGenericAllocationHandle filler = create(G, false);  // so the shared block does not start the heap
  CUmemGenericAllocationHandle h = create(2 * G, true);
  CUdeviceptr p = map_rw(h, 2 * G);
  ASSERT_NE(p, 0U);
  std::strcpy(host(p), "from parent");
  std::strcpy(host(p + G), "second granule");
  int const fd = export_fd(h);
  ASSERT_GE(fd, 0);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  pid_t const pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(sv[0]);
    _exit(child_main(sv[1], p));
  }
  close(sv[1]);
  EXPECT_TRUE(send_fd(sv[0], fd));
  EXPECT_EQ(close(fd), 0) << "the caller owns the exported fd";
  EXPECT_TRUE(expect_byte(sv[0], 'w'));
  EXPECT_STREQ(host(p + 100), "from child");
  EXPECT_TRUE(unmap_and_free(p, 2 * G));
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_TRUE(send_byte(sv[0], 'r'));
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  close(sv[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(drv.cuMemRelease(filler), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(VmmIpcTest, ImportInTheExportingProcessMapsTheSameBytes) {
  CUmemGenericAllocationHandle h = create(G, true);
  CUdeviceptr a = map_rw(h, G);
  ASSERT_NE(a, 0U);
  int const fd = export_fd(h);
  ASSERT_GE(fd, 0);
  CUmemGenericAllocationHandle imported = 0;
  ASSERT_EQ(drv.cuMemImportFromShareableHandle(&imported, as_os_handle(fd), posix_fd), CUDA_SUCCESS);
  EXPECT_NE(imported, h);
  CUmemAllocationProp got{};
  ASSERT_EQ(drv.cuMemGetAllocationPropertiesFromHandle(&got, imported), CUDA_SUCCESS);
  EXPECT_EQ(got.location.id, 0);
  EXPECT_EQ(got.requestedHandleTypes, posix_fd);
  CUdeviceptr b = map_rw(imported, G);
  ASSERT_NE(b, 0U);
  EXPECT_EQ(drv.cuMemsetD32(a + 4096, 0xfeedf00dU, 16), CUDA_SUCCESS);
  unsigned word = 0;
  ASSERT_EQ(drv.cuMemcpyDtoH(&word, b + 4096 + 60, sizeof word), CUDA_SUCCESS);
  EXPECT_EQ(word, 0xfeedf00dU);
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(drv.cuMemRetainAllocationHandle(&again, host(b + 12)), CUDA_SUCCESS);
  EXPECT_EQ(again, imported);
  EXPECT_EQ(drv.cuMemRelease(again), CUDA_SUCCESS);
  // A second import of the same fd, and an export of the imported handle, work too.
  CUmemGenericAllocationHandle second = 0;
  ASSERT_EQ(drv.cuMemImportFromShareableHandle(&second, as_os_handle(fd), posix_fd), CUDA_SUCCESS);
  int const refd = export_fd(imported);
  ASSERT_GE(refd, 0);
  CUmemGenericAllocationHandle third = 0;
  ASSERT_EQ(drv.cuMemImportFromShareableHandle(&third, as_os_handle(refd), posix_fd), CUDA_SUCCESS);
  CUdeviceptr c = map_rw(third, G);
  ASSERT_NE(c, 0U);
  EXPECT_EQ(reinterpret_cast<unsigned const*>(host(c + 4096))[3], 0xfeedf00dU);
  EXPECT_TRUE(unmap_and_free(c, G));
  EXPECT_EQ(close(refd), 0);
  EXPECT_EQ(close(fd), 0);
  for (auto handle : {h, imported, second, third}) EXPECT_EQ(drv.cuMemRelease(handle), CUDA_SUCCESS);
  // Released, still mapped: both views still share the bytes.
  std::strcpy(host(b + 8), "after release");
  EXPECT_STREQ(host(a + 8), "after release");
  EXPECT_TRUE(unmap_and_free(a, G));
  EXPECT_TRUE(unmap_and_free(b, G));
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(VmmIpcTest, ExportedBytesStayUsedAndAreNeverReused) {
  std::size_t const before = free_bytes();
  std::size_t const used = sim.live_bytes(0);  // earlier tests' exports, if they ran in this process
  CUmemGenericAllocationHandle h = create(G, true);
  CUdeviceptr p = map_rw(h, G);
  ASSERT_NE(p, 0U);
  ASSERT_EQ(drv.cuMemsetD32(p, 0xabcdef01U, G / 4), CUDA_SUCCESS);
  int const fd = export_fd(h);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(unmap_and_free(p, G));
  ASSERT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  // Another process may still map it: counted as used, no longer a live allocation here.
  EXPECT_EQ(free_bytes(), before - G);
  EXPECT_EQ(sim.live_bytes(0), used + G);
  EXPECT_EQ(sim.live_allocations(0), 0U);
  // Later memory of the exporter goes elsewhere, and the exported bytes stay.
  CUmemGenericAllocationHandle fresh = create(G, false);
  CUdeviceptr q = map_rw(fresh, G);
  ASSERT_NE(q, 0U);
  ASSERT_EQ(drv.cuMemsetD32(q, 0x0badcafeU, G / 4), CUDA_SUCCESS);
  CUmemGenericAllocationHandle imported = 0;
  ASSERT_EQ(drv.cuMemImportFromShareableHandle(&imported, as_os_handle(fd), posix_fd), CUDA_SUCCESS);
  CUdeviceptr r = map_rw(imported, G);
  ASSERT_NE(r, 0U);
  auto const* words = reinterpret_cast<unsigned const*>(host(r));
  EXPECT_EQ(words[0], 0xabcdef01U);
  EXPECT_EQ(words[G / 4 - 1], 0xabcdef01U);
  EXPECT_TRUE(unmap_and_free(r, G));
  EXPECT_TRUE(unmap_and_free(q, G));
  EXPECT_EQ(drv.cuMemRelease(imported), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemRelease(fresh), CUDA_SUCCESS);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(free_bytes(), before - G) << "exported: used until the process exits";
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(VmmIpcTest, ExportAndImportCheckTheirArguments) {
  std::size_t const used = sim.live_bytes(0);  // earlier tests' exports, if they ran in this process
  CUmemGenericAllocationHandle plain = create(G, false);
  CUmemGenericAllocationHandle h = create(G, true);
  int fd = -1;
  // A handle created without the POSIX fd request, an unknown one, another type, flags.
  EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, plain, posix_fd, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, 0xdeadbeefULL << 20, posix_fd, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_NONE, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, h, posix_fd, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemExportToShareableHandle(nullptr, h, posix_fd, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(drv.cuMemRelease(plain), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemExportToShareableHandle(&fd, plain, posix_fd, 0), CUDA_ERROR_INVALID_VALUE) << "released";
  EXPECT_EQ(sim.live_bytes(0), used + G) << "a failed export leaves the handle unexported";
  fd = export_fd(h);
  ASSERT_GE(fd, 0);
  CUmemGenericAllocationHandle out = 0;
  EXPECT_EQ(drv.cuMemImportFromShareableHandle(nullptr, as_os_handle(fd), posix_fd), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemImportFromShareableHandle(&out, as_os_handle(fd), CU_MEM_HANDLE_TYPE_FABRIC),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(drv.cuMemImportFromShareableHandle(&out, reinterpret_cast<void*>(~std::uintptr_t{0}), posix_fd),
            CUDA_ERROR_INVALID_VALUE);
  // Descriptors that name no exported allocation.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(drv.cuMemImportFromShareableHandle(&out, as_os_handle(pipe_fds[0]), posix_fd), CUDA_ERROR_INVALID_VALUE);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  int const other = memfd_create("not-a-handle", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  char junk[256];
  std::memset(junk, 0x5a, sizeof junk);
  ASSERT_EQ(write(other, junk, sizeof junk), static_cast<ssize_t>(sizeof junk));
  ASSERT_EQ(lseek(other, 0, SEEK_SET), 0);
  EXPECT_EQ(drv.cuMemImportFromShareableHandle(&out, as_os_handle(other), posix_fd), CUDA_ERROR_INVALID_VALUE);
  close(other);
  EXPECT_EQ(out, 0U);
  EXPECT_EQ(close(fd), 0);
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

// The exporter of ImportWorksAfterTheExporterExited: this executable run again
// (a fork()ed child has no heap of its own to export from), handed its end of a
// socket in GPUMEM_TEST_EXPORT_SOCKET. It exports, sends the fd, lets go of
// everything and exits.
TEST_F(VmmIpcTest, ExporterThatExits) {
  char const* socket_text = std::getenv("GPUMEM_TEST_EXPORT_SOCKET");
  if (socket_text == nullptr) GTEST_SKIP() << "run by ImportWorksAfterTheExporterExited";
  CUmemGenericAllocationHandle h = create(G, true);
  CUdeviceptr p = map_rw(h, G);
  ASSERT_NE(p, 0U);
  std::strcpy(host(p + 64), "from a process now gone");
  int const fd = export_fd(h);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(send_fd(std::atoi(socket_text), fd));
  EXPECT_EQ(close(fd), 0);
  EXPECT_TRUE(unmap_and_free(p, G));
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(VmmIpcTest, ImportWorksAfterTheExporterExited) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_EQ(fcntl(sv[1], F_SETFD, 0), 0);  // the exporter's end survives its exec
  std::vector<std::string> env_text{"GPUMEM_TEST_EXPORT_SOCKET=" + std::to_string(sv[1])};
  for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
  std::vector<char*> env;
  for (auto& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=VmmIpcTest.ExporterThatExits";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, env.data()), 0);
  close(sv[1]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  // The exporter is gone; the fd it sent is still in the socket.
  int const fd = receive_fd(sv[0]);
  close(sv[0]);
  ASSERT_GE(fd, 0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(drv.cuMemImportFromShareableHandle(&h, as_os_handle(fd), posix_fd), CUDA_SUCCESS);
  EXPECT_EQ(close(fd), 0);
  CUdeviceptr p = map_rw(h, G);
  ASSERT_NE(p, 0U);
  EXPECT_STREQ(host(p + 64), "from a process now gone");
  EXPECT_TRUE(unmap_and_free(p, G));
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(sim.violations(), 0);
}

TEST_F(VmmIpcTest, ControlKnobTurnsTheRequestDown) {
  CUmemAllocationProp const p = prop(true);
  CUmemGenericAllocationHandle h = 0;
  int v = -1;
  sim.set_posix_fd_handles(0);
  ASSERT_EQ(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(drv.cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  sim.set_posix_fd_handles(2);  // the attribute says yes, the request still fails
  ASSERT_EQ(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(drv.cuMemCreate(&h, G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  sim.set_posix_fd_handles(1);
  ASSERT_EQ(drv.cuMemCreate(&h, G, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(drv.cuMemRelease(h), CUDA_SUCCESS);
}

}  // namespace
}  // namespace gpumem::test
