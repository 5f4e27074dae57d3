#!/usr/bin/env bash
# The CPU speed figures of the CPU-speed issue in one go: generates the ~317M-parameter tiny-dev
# checkpoint and the demo model into build/bench (not committed), then for each runs
# tools/bench_torch_eager.py, which measures PyTorch eager fp32 decode around one `hybridlens bench
# --json` run, and prints every figure and target ratio from that one run.
#
# usage: tools/bench_cpu.sh [BUILD_DIR] [TOKENS] [ROUNDS]   (defaults: build, 64, 3)
#        tools/bench_cpu.sh --against OLD [BUILD_DIR] [TOKENS] [ROUNDS]
#   --against OLD: instead, compare this build's CPU decode (instruments on and off) and prefill with
#   another build's (OLD: its build folder or its hybridlens binary) on the same two checkpoints,
#   the two binaries' `bench --rounds 1` runs interleaved ROUNDS times (order alternating), and
#   print new / old speed as the median and range of the per-pair ratios (a change's speed check).
# The demo model is resources/models/baseline when it exists, else a generated demo-random; it
# decodes 8 × TOKENS per round, so a round lasts long enough that preemptions by other processes
# average out (a demo token takes well under a millisecond).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=""
if [[ "${1:-}" == "--against" ]]; then
  OLD=${2:?"--against needs a build folder or a hybridlens binary"}
  shift 2
  [[ -d "$OLD" ]] && OLD="$OLD/hybridlens"
  [[ -x "$OLD" ]] || { echo "bench_cpu.sh: $OLD is not an executable hybridlens" >&2; exit 1; }
fi
BUILD=${1:-build}
TOKENS=${2:-64}
ROUNDS=${3:-3}
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
HL="$BUILD/hybridlens"
GEN="$BUILD/tools/hl-generate"
PY=/usr/bin/python3  # Debian's python3 has torch and numpy
OUT="$ROOT/build/bench"
for f in "$HL" "$GEN"; do
  [[ -x "$f" ]] || { echo "bench_cpu.sh: $f not found: build first (cmake --build $BUILD)" >&2; exit 1; }
done
mkdir -p "$OUT"

gen() {  # gen NAME PRESET: generate once, reuse afterwards
  [[ -f "$OUT/$1/config.json" ]] || "$GEN" --out "$OUT/$1" --preset "$2" >/dev/null
  echo "$OUT/$1"
}
BIG=$(gen tiny-dev tiny-dev)
if [[ -f "$ROOT/resources/models/baseline/config.json" ]]; then SMALL="$ROOT/resources/models/baseline"; else SMALL=$(gen demo-random demo-random); fi

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -n "$OLD" ]]; then
  for ck in "$BIG" "$SMALL"; do
    name=$(basename "$ck")
    n=$TOKENS
    [[ "$ck" == "$SMALL" ]] && n=$((8 * TOKENS))
    echo "== $name: new $HL vs old $OLD, bench --backend cpu --tokens $n --rounds 1, $ROUNDS pairs"
    : >"$OUT/$name.pairs"
    for ((r = 0; r < ROUNDS; r++)); do
      order=("$OLD" "$HL")
      ((r % 2)) && order=("$HL" "$OLD")
      for bin in "${order[@]}"; do
        tag=new
        [[ "$bin" == "$OLD" ]] && tag=old
        echo "$tag $("$bin" bench --checkpoint "$ck" --backend cpu --tokens "$n" --rounds 1 --json | tr -d '\n')" >>"$OUT/$name.pairs"
      done
    done
    "$PY" - "$OUT/$name.pairs" <<'EOF'
import json, statistics, sys
runs = {"old": [], "new": []}
for line in open(sys.argv[1]):
    tag, js = line.split(" ", 1)
    runs[tag].append(json.loads(js))
# Speed ratios new/old: old/new for step times, new/old for rates.
for key, what in (("decode_ms_p50_on", "decode, instruments on (median step)"),
                  ("decode_ms_p50_off", "decode, instruments off (median step)"),
                  ("prefill_tok_s", "prefill (tokens/s)")):
    r = [(o[key] / n[key]) if key.startswith("decode_ms") else (n[key] / o[key])
         for o, n in zip(runs["old"], runs["new"])]
    print("  %-40s new/old speed %.3f (range %.3f .. %.3f over %d pairs)" % (
        what, statistics.median(r), min(r), max(r), len(r)))
EOF
  done
  exit 0
fi
for ck in "$BIG" "$SMALL"; do
  name=$(basename "$ck")
  n=$TOKENS
  [[ "$ck" == "$SMALL" ]] && n=$((8 * TOKENS))
  echo "== $name: $PY tools/bench_torch_eager.py --checkpoint $ck --hybridlens $HL --tokens $n --rounds $ROUNDS --json"
  "$PY" "$ROOT/tools/bench_torch_eager.py" --checkpoint "$ck" --hybridlens "$HL" --tokens "$n" \
    --rounds "$ROUNDS" --json >"$OUT/$name.json"
done

"$PY" - "$OUT/$(basename "$BIG").json" "$OUT/$(basename "$SMALL").json" <<'EOF'
import json, sys
big, small = (json.load(open(p)) for p in sys.argv[1:3])
def show(r):
    h = r["hybridlens_bench"]
    print("%s (%.1f M parameters, %.1f MiB read per token, %s, %d threads)" % (
        h["checkpoint"], h["params"] / 1e6, h["weight_bytes_per_token"] / 2**20, h["cpu_isa"], h["threads"]))
    print("  decode on %.2f tok/s, off %.2f tok/s, prefill(%d) %.2f tok/s" % (
        h["decode_tok_s_on"], h["decode_tok_s_off"], h["prefill_tokens"], h["prefill_tok_s"]))
    print("  weights read at %.2f GB/s of %.2f GB/s measured; PyTorch eager fp32 %.2f tok/s (%d threads)" % (
        h["decode_gb_s"], h["memory_bandwidth_gb_s"], r["torch_decode_tok_s"], r["torch_threads"]))
    print("  median step: %.3f ms on, %.3f ms off, PyTorch %.3f ms; logits agree to %.1e" % (
        h["decode_ms_p50_on"], h["decode_ms_p50_off"], r["torch_decode_ms_p50"], r["logits_max_rel_diff"]))
    return h
hb, hs = show(big), show(small)
targets = [
    ("317M decode (on) / memory bandwidth", hb["bandwidth_fraction"], hb["bandwidth_fraction_p50"], 0.60),
    ("317M decode (on) / PyTorch eager fp32", big["speedup_on"], big["speedup_on_p50"], 4.0),
    ("demo decode (on) / PyTorch eager fp32", small["speedup_on"], small["speedup_on_p50"], 10.0),
    ("317M instruments on / off", hb["ratio_on_off"], hb["ratio_on_off_p50"], 0.90),
    ("demo instruments on / off", hs["ratio_on_off"], hs["ratio_on_off_p50"], 0.90),
    ("317M prefill(512) / decode", hb["prefill_over_decode"], hb["prefill_over_decode_p50"], 5.0),
]
print("targets (one run each; 'rates': tokens / total time as trace-format.md 4 defines them;")
print("         'p50': from median step times, robust to preemption by other processes):")
print("  %-40s %8s %8s" % ("", "rates", "p50"))
for name, v, m, t in targets:
    verdict = "ok" if v >= t else ("ok at p50" if m >= t else "MISSED")
    print("  %-40s %8.2f %8.2f  (target >= %.2f) %s" % (name, v, m, t, verdict))
EOF
