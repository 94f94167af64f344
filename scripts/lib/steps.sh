# Sourced by the CI check scripts: `step NAME COMMAND...` runs one check, prints
# PASS or FAIL (with the command's output on a failure) and counts it;
# `steps_summary LABEL` prints "LABEL: N passed, M failed" and returns non-zero on a
# failure. Needs $work (a scratch directory) to be set.
steps_passed=0
steps_failed=0

step() {
  local name=$1
  shift
  local log=$work/step.log
  if "$@" >"$log" 2>&1; then
    steps_passed=$((steps_passed + 1))
    echo "PASS  $name"
  else
    steps_failed=$((steps_failed + 1))
    echo "FAIL  $name"
    sed 's/^/      /' "$log"
  fi
}

steps_summary() {
  echo "$1: $steps_passed passed, $steps_failed failed"
  [ "$steps_failed" -eq 0 ]
}
