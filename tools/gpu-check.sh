#!/usr/bin/env bash
# tools/gpu-check.sh — the CUDA backend's check on a machine with an NVIDIA GPU (issue 8), in one run
# of under 5 minutes from a bare checkout (no build folder carried):
#   1. configure + build release (-j16): hybridlens, hl-generate, hl_cuda_tests only
#   2. generate the ~317M (tiny-dev) and ~3B (3b) bf16 checkpoints with the project's own generator
#   3. the CUDA tests: every golden case against the CPU backend and the reference traces, the
#      failure paths, graphs vs plain launches
#   4. CUDA vs CPU traces on the two generated checkpoints and the Bamba, Nemotron-H (+MoE), Granite 4.0-H
#      presets (decode and prefill, Vulkan tolerances)
#   5. `hybridlens bench --backend cuda --json` on both: decode/prefill tok/s, instruments on/off,
#      GB/s against the device bandwidth (copy kernel), kernels per token, graph launch cost
#   and prints the two targets: 3B decode ≥ 60% of the measured bandwidth; 317M time per token
#   ≤ 2 × (kernels per token × launch cost in a CUDA graph).
# Usage: tools/gpu-check.sh   (env: JOBS=16, HL_GPU_BUILD=build/release, HL_CUDA_ARCH=the device's
# compute capability, else "80;90"; KEEP=1 keeps the generated checkpoints and logs; HL_CUDA_PDL=0,
# HL_CUDA_FUSE=0 and HL_CUDA_GRAPHS=0 turn the decode step's programmatic launches, fused norms and
# CUDA graph off; HL_GPU_SKIP_BUILD=1 uses the binaries already in HL_GPU_BUILD (built elsewhere,
# e.g. by tools/gpu-bundle.sh, for a GPU machine without the Debian packages); HL_GPU_LOGS=DIR copies
# every log and figure there at the end; HL_GPU_SANITIZE=1 adds a compute-sanitizer memcheck of short
# CUDA traces). Exit status: 0 when every phase and both targets pass.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${HL_GPU_BUILD:-$ROOT/build/release}
JOBS=${JOBS:-16}
CC_CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
ARCH=${HL_CUDA_ARCH:-${CC_CAP:-80;90}}
T_START=$(date +%s.%N)
STATUS=0
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt 12000000 ]; then
  TMP=$(mktemp -d /dev/shm/hl-gpu-check.XXXXXX)   # 7 GB of checkpoints: keep them in memory
else
  TMP=$(mktemp -d /tmp/hl-gpu-check.XXXXXX)
fi
finish() {
  [ -n "${HL_GPU_LOGS:-}" ] && mkdir -p "$HL_GPU_LOGS" && cp "$TMP"/*.log "$TMP"/*.json "$TMP"/*.err "$HL_GPU_LOGS"/ 2>/dev/null
  [ "${KEEP:-0}" = 1 ] || rm -rf "$TMP"
}
trap finish EXIT

now() { date +%s.%N; }
PHASE_T=$(now)
phase() {  # phase NAME: prints the previous phase's time and starts the next
  local t; t=$(now)
  printf '\n=== [%6.1f s total] %s\n' "$(awk -v a="$t" -v b="$T_START" 'BEGIN {print a - b}')" "$1"
  PHASE_T=$t
}
done_phase() {
  printf '    (%s: %.1f s)\n' "$1" "$(awk -v a="$(now)" -v b="$PHASE_T" 'BEGIN {print a - b}')"
}
fail() { echo "FAIL: $*"; STATUS=1; }

phase "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader || fail "nvidia-smi"

if [ "${HL_GPU_SKIP_BUILD:-0}" = 1 ]; then
  phase "prebuilt binaries in $BUILD"
  for b in hybridlens tools/hl-generate tests/hl_cuda_tests; do
    [ -x "$BUILD/$b" ] || { echo "FAIL: no $BUILD/$b"; exit 1; }
    if ldd "$BUILD/$b" | grep "not found"; then echo "FAIL: $b lacks the libraries above"; exit 1; fi
  done
else
  phase "configure + build ($JOBS jobs, CUDA architectures $ARCH)"
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DHL_BUILD_GUI=OFF -DHL_ENABLE_VULKAN=OFF \
    -DHL_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >"$TMP/configure.log" 2>&1 ||
    { tail -30 "$TMP/configure.log"; echo "FAIL: configure"; exit 1; }
  grep -E "CUDA backend" "$TMP/configure.log"
  cmake --build "$BUILD" -j "$JOBS" --target hybridlens hl-generate hl_cuda_tests >"$TMP/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$TMP/build.log" | head -30; echo "FAIL: build"; exit 1; }
  grep -c "warning" "$TMP/build.log" | sed 's/^/    compiler warnings: /'
  done_phase "build"
fi
HL="$BUILD/hybridlens"

phase "generate checkpoints (bf16) in $TMP"
"$BUILD/tools/hl-generate" --out "$TMP/tiny-dev" --preset tiny-dev --dtype bf16 --seed 1 &
P1=$!
"$BUILD/tools/hl-generate" --out "$TMP/3b" --preset 3b --dtype bf16 --seed 2 &
P2=$!
FAMILIES=""
for f in bamba-tiny nemotron-h-tiny nemotron-h-moe-tiny granite-h-tiny; do  # the Mamba-2 families
  "$BUILD/tools/hl-generate" --out "$TMP/$f" --preset "$f" --dtype bf16 --seed 3 >/dev/null || fail "generating $f"
  FAMILIES="$FAMILIES${FAMILIES:+:}$TMP/$f"
done
wait $P1 || fail "generating tiny-dev"
wait $P2 || fail "generating 3b"
du -sh "$TMP/tiny-dev" "$TMP/3b"
done_phase "generate"

phase "CUDA tests (golden cases vs CPU and reference traces, failure paths, graphs)"
if ! timeout 120 "$BUILD/tests/hl_cuda_tests" --gtest_brief=1 --gtest_filter='-*GeneratedCheckpoints*' \
  >"$TMP/tests.log" 2>&1; then
  fail "hl_cuda_tests"
  grep -E "^\[  FAILED|Failure|differs" "$TMP/tests.log" | head -20
  # Which of the decode step's speed features is at fault: rerun the failed tests with each of them off.
  FAILED_TESTS=$(grep -E "^\[  FAILED  \] [A-Za-z]" "$TMP/tests.log" | awk '{print $4}' | sort -u | paste -sd: -)
  for off in HL_CUDA_PDL HL_CUDA_FUSE HL_CUDA_GRAPHS; do
    env "$off=0" timeout 60 "$BUILD/tests/hl_cuda_tests" --gtest_brief=1 --gtest_filter="${FAILED_TESTS:-*}" \
      >"$TMP/tests-$off.log" 2>&1 && r=pass || r=FAIL
    echo "    with $off=0: $r ($(grep -c "^\[  FAILED  \] [A-Za-z]" "$TMP/tests-$off.log") failed)"
  done
fi
tail -3 "$TMP/tests.log"
grep -cE "^\[  SKIPPED \]" "$TMP/tests.log" | sed 's/^/    skipped: /'
done_phase "tests"

phase "CUDA vs CPU traces on the generated checkpoints"
HL_CUDA_CHECK_MODELS="$TMP/tiny-dev" HL_CUDA_CHECK_TOKENS=24 timeout 90 "$BUILD/tests/hl_cuda_tests" \
  --gtest_filter='*GeneratedCheckpoints*' >"$TMP/cmp1.log" 2>&1 || fail "tiny-dev: cuda vs cpu"
grep -E "cuda-vs-cpu|Failure|differs|OK \]|FAILED \]" "$TMP/cmp1.log" | head -30
HL_CUDA_CHECK_MODELS="$TMP/3b" HL_CUDA_CHECK_TOKENS=6 timeout 120 "$BUILD/tests/hl_cuda_tests" \
  --gtest_filter='*GeneratedCheckpoints*' >"$TMP/cmp2.log" 2>&1 || fail "3b: cuda vs cpu"
grep -E "cuda-vs-cpu|Failure|differs|OK \]|FAILED \]" "$TMP/cmp2.log" | head -30
HL_CUDA_CHECK_MODELS="$FAMILIES" HL_CUDA_CHECK_TOKENS=40 timeout 90 "$BUILD/tests/hl_cuda_tests" \
  --gtest_filter='*GeneratedCheckpoints*' >"$TMP/cmp3.log" 2>&1 || fail "families: cuda vs cpu"
grep -E "cuda-vs-cpu \] [a-z]|Failure|differs|OK \]|FAILED \]" "$TMP/cmp3.log" | head -30
# The command line end to end: a CUDA trace file of the 317M model.
timeout 60 "$HL" trace --checkpoint "$TMP/tiny-dev" --ids 1,2,3,4,5,6,7,8 --backend cuda --out "$TMP/t.safetensors" \
  >/dev/null 2>"$TMP/trace.err" && echo "    hybridlens trace --backend cuda: ok" || { cat "$TMP/trace.err"; fail "trace --backend cuda"; }
# One pipeline stage holding the whole model (--pipeline without mpirun) writes the same file.
timeout 60 "$HL" trace --checkpoint "$TMP/tiny-dev" --ids 1,2,3,4,5,6,7,8 --backend cuda --pipeline \
  --out "$TMP/tp.safetensors" >/dev/null 2>"$TMP/tracep.err" && cmp -s "$TMP/t.safetensors" "$TMP/tp.safetensors" &&
  echo "    hybridlens trace --backend cuda --pipeline: byte-equal" || { cat "$TMP/tracep.err"; fail "trace --pipeline --backend cuda"; }
done_phase "compare"

phase "bench: ~317M (tiny-dev)"
timeout 90 "$HL" bench --checkpoint "$TMP/tiny-dev" --backend cuda --json --tokens 128 --rounds 3 --prefill 512 \
  >"$TMP/bench-small.json" 2>"$TMP/bench-small.err" || { cat "$TMP/bench-small.err"; fail "bench tiny-dev"; }
done_phase "bench 317M"
phase "bench: ~3B (3b)"
timeout 120 "$HL" bench --checkpoint "$TMP/3b" --backend cuda --json --tokens 64 --rounds 3 --prefill 512 \
  >"$TMP/bench-3b.json" 2>"$TMP/bench-3b.err" || { cat "$TMP/bench-3b.err"; fail "bench 3b"; }
done_phase "bench 3B"

if [ "${HL_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  phase "compute-sanitizer memcheck: every golden case's prefill and decode on CUDA, the pipeline stages"
  timeout 100 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 "$BUILD/tests/hl_cuda_tests" \
    --gtest_brief=1 --gtest_filter='*BackendGolden.PrefillMatchesCpuAndDecode*:CudaPipeline.*' >"$TMP/memcheck.log" 2>&1
  r=$?
  echo "    exit $r; $(grep -c "^========= Invalid\|^========= Program hit" "$TMP/memcheck.log") memcheck reports"
  grep -m8 -E "^========= (Invalid|Program hit|    at )" "$TMP/memcheck.log"
  tail -3 "$TMP/memcheck.log"
  [ $r = 0 ] || fail "memcheck"
  done_phase "memcheck"
fi

phase "figures against the targets"
python3 - "$TMP/bench-small.json" "$TMP/bench-3b.json" <<'EOF' || STATUS=1
import json, sys
ok = True
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        print(f"  (no figures in {p}: {e})")
        return None
small, big = load(sys.argv[1]), load(sys.argv[2])
for name, j in (("~317M tiny-dev", small), ("~3B", big)):
    if not j:
        ok = False
        continue
    print(f"  {name}: {j['params']/1e6:.0f} M params ({j['active_params']/1e6:.0f} M active), "
          f"{j['weight_bytes_per_token']/2**20:.1f} MiB read per token, device {j.get('cuda_device')}")
    print(f"    decode {j['decode_tok_s_on']:.1f} tok/s instruments on, {j['decode_tok_s_off']:.1f} off "
          f"(on/off {j['ratio_on_off']:.3f}); p50 {j['decode_ms_p50_on']:.3f} / {j['decode_ms_p50_off']:.3f} ms")
    print(f"    prefill {j['prefill_tok_s']:.0f} tok/s ({j['prefill_tokens']} tokens)")
    print(f"    {j['decode_gb_s_p50']:.0f} GB/s of weights (p50) vs device copy bandwidth "
          f"{j['device_bandwidth_gb_s']:.0f} GB/s: {100*j['device_bandwidth_fraction_p50']:.1f}%")
    print(f"    {j['kernels_per_token']} kernels per token (graph: {j['cuda_graph']}, programmatic launch: "
          f"{j.get('cuda_programmatic_launch')}), launch "
          f"{j['launch_us_graph']:.2f} us in a graph / {j['launch_us_stream']:.2f} us on a stream: "
          f"floor {j['launch_floor_ms']:.3f} ms, p50 step {j['decode_ms_p50_on']:.3f} ms = "
          f"{j['decode_over_launch_floor_p50']:.2f} x floor")
if big:
    f = big["device_bandwidth_fraction_p50"]
    good = f >= 0.60
    ok &= good
    print(f"  TARGET 3B decode >= 60% of measured bandwidth: {100*f:.1f}%  {'PASS' if good else 'FAIL'}")
if small:
    r = small["decode_over_launch_floor_p50"]
    good = r <= 2.0
    ok &= good
    print(f"  TARGET 317M time per token <= 2 x launch floor: {r:.2f} x  {'PASS' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF

phase "done"
[ $STATUS = 0 ] && echo "gpu-check: PASS" || echo "gpu-check: FAIL (see above; logs in $TMP with KEEP=1)"
exit $STATUS
