#!/usr/bin/env bash
# Runs the libFuzzer targets built by `cmake --preset fuzz` (tests/fuzz/CMakeLists.txt), each for a
# fixed time from its seed corpus, and prints the executions per target. Not the build: see the
# README ("Reliability") or .ci/run's fuzz lane. New inputs go to a scratch corpus, never into the
# seed folders; a crash leaves its input in $OUT_DIR/artifacts and fails the run.
# usage: tests/fuzz/run.sh [--build DIR] [--seconds N] [TARGET...]   (default: every built target, 60 s)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build/fuzz"
SECONDS_PER_TARGET=60
TARGETS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$(cd "$2" && pwd)"; shift ;;
    --seconds) SECONDS_PER_TARGET="$2"; shift ;;
    -h | --help) sed -n '2,6p' "$0"; exit 0 ;;
    *) TARGETS+=("$1") ;;
  esac
  shift
done
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  for f in "$BUILD"/tests/fuzz/fuzz_*; do
    [[ -x "$f" && -f "$f" ]] && TARGETS+=("${f##*/fuzz_}")
  done
fi
[[ ${#TARGETS[@]} -gt 0 ]] || { echo "run.sh: no fuzz targets in $BUILD/tests/fuzz (build: cmake --preset fuzz && cmake --build --preset fuzz)" >&2; exit 2; }

OUT_DIR="$BUILD/fuzz-runs"
mkdir -p "$OUT_DIR/artifacts"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

FAILED=0
RESULTS=()
for t in "${TARGETS[@]}"; do
  bin="$BUILD/tests/fuzz/fuzz_$t"
  seeds="$ROOT/tests/fuzz/corpus/$t"
  [[ -x "$bin" ]] || { echo "run.sh: $bin not built" >&2; FAILED=1; RESULTS+=("$(printf '%-12s not built' "$t")"); continue; }
  work="$OUT_DIR/corpus-$t"
  mkdir -p "$work"
  log="$OUT_DIR/$t.log"
  echo "::: fuzz_$t: ${SECONDS_PER_TARGET} s from $seeds"
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: unbounded allocation is a finding.
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$OUT_DIR/artifacts/$t-" \
    "$work" "$seeds" >"$log" 2>&1
  rc=$?
  runs="$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | tail -1 | awk '{print $2}')"
  cov="$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')"
  if [[ $rc -ne 0 ]]; then
    FAILED=1
    echo "::: fuzz_$t FAILED (exit $rc); last lines of $log:"
    tail -40 "$log"
    RESULTS+=("$(printf '%-12s %10s executions  %5s edges  FAILED (exit %d, see %s)' "$t" "${runs:-?}" "${cov:-?}" "$rc" "$OUT_DIR/artifacts")")
  else
    RESULTS+=("$(printf '%-12s %10s executions  %5s edges  %4d s  ok' "$t" "${runs:-?}" "${cov:-?}" "$SECONDS_PER_TARGET")")
  fi
done

echo "::: fuzz executions per target"
printf '    %s\n' "${RESULTS[@]}"
exit $FAILED
