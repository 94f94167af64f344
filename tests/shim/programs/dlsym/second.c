int dlsym_probe(void) { return 2; }
