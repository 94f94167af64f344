/* Loaded before second.c's library: RTLD_NEXT from here must find second's probe. */
#include <dlfcn.h>
#include <stddef.h>

int dlsym_probe(void) { return 1; }

int dlsym_probe_after_first(void) {
  int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, "dlsym_probe");
  return f != NULL ? f() : 0;
}

/* A CUDA name looked up from a library with RTLD_NEXT (the real libcuda follows). */
void* dlsym_cuda_after_first(const char* name) { return dlsym(RTLD_NEXT, name); }
