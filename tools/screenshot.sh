#!/usr/bin/env bash
# Regenerates resources/screenshot.png, the README's picture of the app: under Xvfb, the app opens
# the demo model (the trained baseline, else demo-random), steps 24 tokens of its default prompt,
# re-runs them with softmax-1 as run B, scrubs to token 16 and saves the window (QWidget::grab).
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
HL_SCREENSHOT_SIZE="$SIZE" xvfb-run -a -s "-screen 0 ${SIZE}x24" "$APP" "$MODEL" --theme light --steps 24 --compare-normalizer softmax1 \
  --screenshot "$OUT"
