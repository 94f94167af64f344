# Sourced by scripts/setup and scripts/test-sanitizers: `build_tree DIR` builds a
# configured tree on every core. A failed build is run once more on one job: a
# compiler that was killed or crashed (a transient of a loaded machine) then gets
# its second chance, and a real error fails again, printed last and alone instead
# of interleaved with the other jobs' output.
build_tree() {
  local dir=$1
  if cmake --build "$dir" -j "$(nproc)"; then return 0; fi
  echo "build of $dir failed; once more on one job (the first error follows, if it is one)" >&2
  cmake --build "$dir" -j 1
}
