#!/usr/bin/env bash
# Regenerates resources/screenshot.png, the README's picture of the app: under Xvfb, the app plays the
# guided tour's first-token-sink stop on the trained baseline (resources/models/tour.json: its prompt
# as run A, softmax-1 as run B, the attention view on layer 6, head 0, and the stop's sentence) and
# saves the window (QWidget::grab). Without the trained models: demo-random, 24 tokens of its default
# prompt, softmax-1 as run B, scrubbed to token 16.
# usage: tools/screenshot.sh [path/to/hybridlens] [out.png] [WIDTHxHEIGHT, default 1920x1200]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APP="${1:-$ROOT/build/release/hybridlens}"
OUT="${2:-$ROOT/resources/screenshot.png}"
SIZE="${3:-1920x1200}"
MODEL="$ROOT/resources/models/baseline"
[[ -f "$MODEL/config.json" ]] || MODEL="$ROOT/resources/demo-random"
[[ -x "$APP" ]] || { echo "screenshot.sh: $APP was not built (tools/setup.sh --build)" >&2; exit 1; }
command -v xvfb-run >/dev/null || { echo "screenshot.sh: xvfb-run is missing (apt-get install xvfb xauth)" >&2; exit 1; }
if [[ -f "$ROOT/resources/models/tour.json" && -f "$ROOT/resources/models/baseline/config.json" ]]; then
  ARGS=(--tour baseline-sink)
else
  ARGS=("$MODEL" --steps 24 --compare-normalizer softmax1)
fi
HL_SCREENSHOT_SIZE="$SIZE" xvfb-run -a -s "-screen 0 ${SIZE}x24" "$APP" "${ARGS[@]}" --theme light --screenshot "$OUT"
