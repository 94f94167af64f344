int dlsym_scope_only(void) { return 7; }
