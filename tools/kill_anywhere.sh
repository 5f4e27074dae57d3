#!/usr/bin/env bash
# The "kill anything anywhere" fault test (issue 18): SIGKILLs `hybridlens record`, `hybridlens
# export` and the app (offscreen, stepping with --steps, autosaving every HL_AUTOSAVE_MS) at random
# points, N times each, and checks that every output is whole or absent (sessions: read back by the
# C++ reader; figures and CSV: byte-identical to an unkilled export, old or new; the app's screenshot:
# a PNG whose chunks and pixel data check out) and that nothing is left behind: no temporary survives
# the next write to its folder; the app's autosave, when present, is a whole, readable session.
# Not a fuzzer and not a benchmark. CTest runs it with a small N (label slow); by hand:
#   tools/kill_anywhere.sh --iterations 100
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build/release"
N=10
SEED="${RANDOM}"
CHECKPOINT=""
KEEP=0
usage() {
  cat <<EOF
usage: tools/kill_anywhere.sh [--build DIR] [--iterations N] [--seed S] [--checkpoint DIR] [--keep]
  --build DIR       build folder with hybridlens (default build/release)
  --iterations N    kills per program (default 10)
  --seed S          random seed of the kill times (default: random; printed)
  --checkpoint DIR  checkpoint to run (default resources/demo-random, generated when missing)
  --keep            keep the scratch folder
EOF
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$(cd "$2" && pwd)"; shift 2 ;;
    --iterations) N="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --checkpoint) CHECKPOINT="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[[ "$N" =~ ^[0-9]+$ && "$N" -ge 1 ]] || { echo "kill_anywhere: --iterations: expected a positive number" >&2; exit 2; }
HL="$BUILD/hybridlens"
[[ -x "$HL" ]] || { echo "kill_anywhere: $HL not built" >&2; exit 2; }
PY=/usr/bin/python3
[[ -x "$PY" ]] || PY=python3

W="$(mktemp -d "${TMPDIR:-/tmp}/hl_kill_XXXXXX")"
cleanup() { [[ $KEEP -eq 1 ]] && echo "kept $W" || rm -rf "$W"; }
trap cleanup EXIT
if [[ -z "$CHECKPOINT" ]]; then
  CHECKPOINT="$ROOT/resources/demo-random"
  if [[ ! -f "$CHECKPOINT/config.json" ]]; then
    CHECKPOINT="$W/demo-random"
    "$BUILD/tools/hl-generate" --preset demo-random --seed 0 --out "$CHECKPOINT" >/dev/null
  fi
fi
RANDOM="$SEED"
umask 077  # every file the programs write must then be private (issue 18 item 6)
echo "kill_anywhere: $N kills per program, seed $SEED, checkpoint $CHECKPOINT, umask 077"

FAILS=0
fail() {
  echo "kill_anywhere: FAILED: $*" >&2
  FAILS=$((FAILS + 1))
}

# now_ms: milliseconds since the epoch.
now_ms() { date +%s%3N; }

# run_killed DELAY_MS CMD...: starts CMD, SIGKILLs it after DELAY_MS (unless it ended before);
# sets KILLED=1 when the kill landed.
run_killed() {
  local delay="$1"
  shift
  "$@" >/dev/null 2>"$W/last.err" &
  local pid=$!
  local secs
  secs="$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  sleep "$secs"
  KILLED=0
  if kill -KILL "$pid" 2>/dev/null; then KILLED=1; fi
  wait "$pid" 2>/dev/null || true
}

# private DIR...: fails for any file readable or writable by group or others (umask 077 is set).
private() {
  local open
  open="$(find "$@" -type f -perm /077 | head -5)"
  [[ -z "$open" ]] || fail "not private under umask 077: $open"
}

# The names in a folder (one level), sorted.
names() { (cd "$1" && find . -mindepth 1 -maxdepth 1 -printf '%f\n' | LC_ALL=C sort); }

# A whole PNG: signature, every chunk's CRC, IHDR first, IEND last, IDAT inflating to the image.
check_png() {
  "$PY" - "$1" <<'EOF'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "signature"
i, chunks, idat = 8, [], b""
while i < len(b):
    n, = struct.unpack(">I", b[i:i + 4]); t = b[i + 4:i + 8]; d = b[i + 8:i + 8 + n]
    assert len(d) == n and i + 12 + n <= len(b), "truncated chunk"
    assert struct.unpack(">I", b[i + 8 + n:i + 12 + n])[0] == zlib.crc32(t + d), "CRC"
    chunks.append(t); idat += d if t == b"IDAT" else b""; i += 12 + n
assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", "chunk order"
w, h, depth, ctype = struct.unpack(">IIBB", b[16:26])
bpp = {2: 3, 6: 4, 0: 1, 4: 2}[ctype] * depth // 8
assert len(zlib.decompress(idat)) == h * (1 + w * bpp), "pixel data"
EOF
}

# A whole session: the C++ reader loads it completely (compare of the file with itself).
check_session() { "$HL" compare "$1" "$1" >/dev/null 2>"$W/check.err"; }

IDS="1,17,230,5,99,1000,42,7"

# --- record -------------------------------------------------------------------------------------
mkdir -p "$W/rec"
RECORD=("$HL" record --checkpoint "$CHECKPOINT" --backend cpu --ids "$IDS" --generate 120 --ignore-eos
  --out "$W/rec/s.hlsession")
t0=$(now_ms)
"${RECORD[@]}" >/dev/null 2>&1 || { fail "record did not run unkilled: $(cat "$W/last.err" 2>/dev/null)"; exit 1; }
T_REC=$(($(now_ms) - t0))
check_session "$W/rec/s.hlsession" || fail "the unkilled session does not read back"
cp "$W/rec/s.hlsession" "$W/ref.hlsession"
landed=0 leftovers=0
for ((i = 0; i < N; i++)); do
  ((RANDOM % 2)) && rm -f "$W/rec/s.hlsession"  # half the runs replace a file, half create one
  run_killed $((RANDOM * T_REC * 11 / 10 / 32768)) "${RECORD[@]}"
  landed=$((landed + KILLED))
  if [[ -e "$W/rec/s.hlsession" ]] && ! check_session "$W/rec/s.hlsession"; then
    fail "record kill $i: a torn session: $(head -c 300 "$W/check.err")"
  fi
  while read -r n; do
    [[ "$n" == s.hlsession ]] && continue
    if [[ "$n" == s.hlsession.tmp.hl* ]]; then leftovers=$((leftovers + 1)); else fail "record kill $i: left $n"; fi
  done < <(names "$W/rec")
done
"${RECORD[@]}" >/dev/null 2>&1 || fail "record after the kills: $(cat "$W/last.err")"
private "$W/rec"
[[ "$(names "$W/rec")" == s.hlsession ]] || fail "record: left behind after the next write: $(names "$W/rec" | tr '\n' ' ')"
echo "record: $N runs of ${T_REC} ms killed at random ($landed before the end), temporaries right after a kill: $leftovers, after the next write: $(($(names "$W/rec" | wc -l) - 1))"

# --- export -------------------------------------------------------------------------------------
EXPORT=("$HL" export --session "$W/ref.hlsession" --format png,svg --width 640 --height 400)
"${EXPORT[@]}" --out "$W/exp_light" >/dev/null 2>&1 || { fail "export did not run unkilled"; exit 1; }
"${EXPORT[@]}" --out "$W/exp_dark" --dark >/dev/null 2>&1 || { fail "export --dark did not run"; exit 1; }
t0=$(now_ms)
"${EXPORT[@]}" --out "$W/exp" >/dev/null 2>&1
T_EXP=$(($(now_ms) - t0))
landed=0 leftovers=0
for ((i = 0; i < N; i++)); do
  rm -rf "$W/exp"
  ((RANDOM % 2)) && cp -r "$W/exp_dark" "$W/exp"  # old figures (dark) to be replaced by light ones
  run_killed $((RANDOM * T_EXP * 11 / 10 / 32768)) "${EXPORT[@]}" --out "$W/exp"
  landed=$((landed + KILLED))
  [[ -d "$W/exp" ]] || continue
  while read -r n; do
    if [[ -f "$W/exp_light/$n" ]]; then
      cmp -s "$W/exp/$n" "$W/exp_light/$n" || cmp -s "$W/exp/$n" "$W/exp_dark/$n" ||
        fail "export kill $i: $n is neither the old nor the new file ($(stat -c %s "$W/exp/$n") bytes)"
    elif [[ "$n" == *.tmp.hl* ]]; then
      leftovers=$((leftovers + 1))
    else
      fail "export kill $i: left $n"
    fi
  done < <(names "$W/exp")
done
"${EXPORT[@]}" --out "$W/exp" >/dev/null 2>&1 || fail "export after the kills"
private "$W/exp"
[[ "$(names "$W/exp")" == "$(names "$W/exp_light")" ]] || fail "export: left behind after the next write"
echo "export: $N runs of ${T_EXP} ms killed at random ($landed before the end), temporaries right after a kill: $leftovers, after the next write: 0"

# --- the app ------------------------------------------------------------------------------------
mkdir -p "$W/app" "$W/home"
APP=(env -u DISPLAY -u WAYLAND_DISPLAY -u XDG_DATA_HOME -u XDG_CONFIG_HOME -u XDG_CACHE_HOME QT_QPA_PLATFORM=offscreen
  HOME="$W/home" HL_AUTOSAVE_MS=100 "$HL" --checkpoint "$CHECKPOINT" --steps 100 --screenshot "$W/app/shot.png")
t0=$(now_ms)
"${APP[@]}" >/dev/null 2>"$W/last.err" || { fail "the app did not run unkilled: $(tail -3 "$W/last.err")"; exit 1; }
T_APP=$(($(now_ms) - t0))
check_png "$W/app/shot.png" || fail "the unkilled screenshot is not a whole PNG"
landed=0 autosaves=0 leftovers=0
for ((i = 0; i < N; i++)); do
  ((RANDOM % 2)) && rm -f "$W/app/shot.png"
  run_killed $((RANDOM * T_APP * 11 / 10 / 32768)) "${APP[@]}"
  landed=$((landed + KILLED))
  if [[ -e "$W/app/shot.png" ]] && ! check_png "$W/app/shot.png" 2>/dev/null; then fail "app kill $i: a torn screenshot"; fi
  while read -r f; do
    case "$f" in
      */autosave*.hlsession)
        autosaves=$((autosaves + 1))
        check_session "$f" || fail "app kill $i: the autosave does not read back: $(head -c 300 "$W/check.err")" ;;
      *.tmp.hl*) leftovers=$((leftovers + 1)) ;;
      */shot.png | *.conf | *.lock) ;;  # the screenshot; QSettings' file and its QLockFile
      *) fail "app kill $i: left $f" ;;
    esac
  done < <(find "$W/app" "$W/home" -type f)
done
"${APP[@]}" >/dev/null 2>&1 || fail "the app after the kills: $(tail -3 "$W/last.err")"
private "$W/app" "$W/home"
left="$(find "$W/app" "$W/home" -type f -name '*.tmp.hl*' | wc -l)"
[[ "$left" -eq 0 ]] || fail "app: $left temporaries left after the next run"
echo "app: $N runs of ${T_APP} ms killed at random ($landed before the end), autosaves found and read back: $autosaves, temporaries right after a kill: $leftovers, after the next run: $left"

if [[ $FAILS -ne 0 ]]; then
  echo "kill_anywhere: $FAILS failure(s) (seed $SEED)"
  exit 1
fi
echo "kill_anywhere: ok ($((3 * N)) kills, seed $SEED)"
