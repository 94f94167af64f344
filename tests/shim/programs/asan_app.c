/* Built with -fsanitize=address and run with the sanitizer runtime preloaded before
 * the shim: the runtime resolves its interceptors through dlsym(RTLD_NEXT) before any
 * library is initialised, and the shim's dlsym must answer those as glibc does. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  char* p = malloc(64);
  if (p == NULL) return 1;
  p[63] = 1;
  free(p);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (cuda == NULL || dlsym(cuda, "cuMemAlloc_v2") == NULL) return 1;
  printf("PASS asan\n");
  return 0;
}
