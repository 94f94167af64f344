/* dlopen'ed RTLD_LOCAL by dlsym_app: its dependency is in its own scope only. */
#include <dlfcn.h>
#include <stddef.h>

int dlsym_scope_finds_dep(void) { return dlsym(RTLD_DEFAULT, "dlsym_scope_only") != NULL; }
