/* dlsym under the shim answers as glibc's would: RTLD_NEXT from the caller's object,
 * RTLD_DEFAULT in the caller's scope, and CUDA entry points as the shim's hooks
 * whichever way they are looked up.
 *   dlsym_app <dir of libdlsym_scope.so>
 * Prints "PASS dlsym", or what differed and exits 1. */
#include <dlfcn.h>
#include <stdio.h>

int dlsym_probe_after_first(void);
void* dlsym_cuda_after_first(const char* name);

static int failures = 0;
static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAIL %s\n", what);
    ++failures;
  }
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int (*own_next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "dlsym_probe");
  check(own_next != NULL && own_next() == 1, "RTLD_NEXT from the program finds the first library's probe");
  check(dlsym_probe_after_first() == 2, "RTLD_NEXT from the first library finds the second library's probe");

  char path[4096];
  snprintf(path, sizeof path, "%s/libdlsym_scope.so", argv[1]);
  void* scope = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  check(scope != NULL, "dlopen libdlsym_scope.so");
  if (scope != NULL) {
    int (*finds)(void) = (int (*)(void))dlsym(scope, "dlsym_scope_finds_dep");
    check(finds != NULL && finds() == 1, "RTLD_DEFAULT from an RTLD_LOCAL library sees its own dependencies");
    check(dlsym(RTLD_DEFAULT, "dlsym_scope_only") == NULL, "RTLD_DEFAULT from the program does not see them");
  }

  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  check(cuda != NULL, "dlopen libcuda.so.1");
  if (cuda != NULL) {
    void* by_handle = dlsym(cuda, "cuMemAlloc_v2");
    check(by_handle != NULL, "cuMemAlloc_v2 by libcuda's handle");
    check(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == by_handle, "cuMemAlloc_v2 by RTLD_DEFAULT: the same function");
    check(dlsym_cuda_after_first("cuMemAlloc_v2") == by_handle, "cuMemAlloc_v2 by RTLD_NEXT: the same function");
    check(dlsym(cuda, "cuGetErrorString") != NULL, "a CUDA name the shim does not hook");
  }
  if (failures != 0) return 1;
  printf("PASS dlsym\n");
  return 0;
}
