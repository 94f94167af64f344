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

# `build_quietly DIR LOG TARGET... -- CMAKE-ARG...` configures DIR and builds the
# named targets with their output in LOG, showing one line: what is built, the log,
# the progress while it runs (on a terminal) and the time it took. On failure it
# prints the end of the log.
build_quietly() {
  local dir=$1 log=$2
  shift 2
  local targets=()
  while (($#)) && [ "$1" != -- ]; do targets+=("$1"); shift; done
  (($#)) && shift
  local here start status=0 pid pct
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  start=$SECONDS
  local tty=0
  [ -t 1 ] && tty=1
  printf 'building gpumem (log: %s)...' "$log"
  {
    cmake -S "$here" -B "$dir" "$@" &&
      { cmake --build "$dir" -j "$(nproc)" --target "${targets[@]}" ||
        { echo "build failed; once more on one job (the first error follows, if it is one)"
          cmake --build "$dir" -j 1 --target "${targets[@]}"; }; }
  } >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if ((tty)); then
      pct=$(grep -o '^\[ *[0-9]*%\]' "$log" 2>/dev/null | tail -n 1 | tr -d '[] ' || true)
      printf '\r\033[Kbuilding gpumem (log: %s)... %s' "$log" "$pct"
    fi
    sleep 1
  done
  wait "$pid" || status=$?
  if ((tty)); then printf '\r\033[Kbuilding gpumem (log: %s)...' "$log"; fi
  if ((status)); then
    printf ' failed after %d s; the end of the log:\n' $((SECONDS - start))
    tail -n 40 "$log" >&2
    return "$status"
  fi
  printf ' done in %d s\n' $((SECONDS - start))
}
