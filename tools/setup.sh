#!/usr/bin/env bash
# HybridLens set-up: installs the Debian 12 packages the build, tests and tools need (idempotent:
# only missing ones, `apt-get update` only then), and optionally builds, tests or launches the app.
# Not a packager: `cmake --install` and `cpack -G DEB` do that (README). CUDA is optional and
# detected, so nvidia-cuda-toolkit is never installed here.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PRESET=release
BUILD_DIR="$ROOT/build/$PRESET"
DEMO_DIR="$ROOT/resources/demo-random"
# The model `--run` opens: the trained baseline when it is bundled, else the random demo.
RUN_DIR="$ROOT/resources/models/baseline"
[[ -f "$RUN_DIR/config.json" ]] || RUN_DIR="$DEMO_DIR"

# Everything the build, the tests (GUI offscreen, Vulkan on lavapipe, fuzzers with clang 14, sweep
# under mpirun) and the Python reference implementation use.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  qt6-base-dev qt6-svg-dev libqcustomplot-dev
  libvulkan-dev glslc mesa-vulkan-drivers xvfb xauth
  libsentencepiece-dev sentencepiece nlohmann-json3-dev libxxhash-dev libpcre2-dev libicu-dev
  libopenblas-dev libopenblas0-pthread
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  openmpi-bin libopenmpi-dev
  python3-numpy python3-torch
  clang-14 libclang-rt-14-dev
)

usage() {
  cat <<EOF
usage: tools/setup.sh [--build] [--test] [--run] [--jobs N]

Installs the Debian packages HybridLens needs (only the missing ones; uses sudo when not root).
  --build    also configure and build the '$PRESET' preset and generate the demo checkpoint
  --test     also build and run every test (ctest --preset $PRESET)
  --run      also build and launch the app on the demo model ($RUN_DIR)
  --jobs N   parallel build and test jobs (default: the number of CPUs)
  -h, --help this text
EOF
}

DO_BUILD=0 DO_TEST=0 DO_RUN=0
JOBS="$(nproc 2>/dev/null || echo 2)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) DO_BUILD=1 ;;
    --test) DO_BUILD=1 DO_TEST=1 ;;
    --run) DO_BUILD=1 DO_RUN=1 ;;
    --jobs)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || { echo "setup.sh: --jobs needs a positive integer" >&2; exit 2; }
      JOBS="$2"
      shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "setup.sh: unknown option '$1' (see tools/setup.sh --help)" >&2; exit 2 ;;
  esac
  shift
done

# Timing of each step, printed at the end (CI reads it).
TIMINGS=()
step() {
  local name="$1"
  shift
  local t0=$SECONDS rc=0
  echo "==> $name"
  "$@" || rc=$?
  TIMINGS+=("$(printf '%-28s %5d s%s' "$name" $((SECONDS - t0)) "$([[ $rc -eq 0 ]] || echo "  FAILED (exit $rc)")")")
  if [[ $rc -ne 0 ]]; then
    echo "setup.sh: step '$name' failed (exit $rc)" >&2
    exit "$rc"
  fi
}
print_timings() {
  [[ ${#TIMINGS[@]} -gt 0 ]] || return 0
  echo "==> setup.sh timings"
  printf '    %s\n' "${TIMINGS[@]}"
}
trap print_timings EXIT

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != "installed" ]]; then
      missing+=("$p")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "all ${#PACKAGES[@]} packages present"
    return 0
  fi
  echo "installing: ${missing[*]}"
  local sudo=()
  if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup.sh: not root and no sudo: install ${missing[*]}" >&2; return 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update || return 1
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" || return 1
}

configure() { cmake --preset "$PRESET"; }
build() { cmake --build --preset "$PRESET" -j "$JOBS"; }

# The bundled demo checkpoint is generated (random weights, a few MB), never committed. It is
# regenerated when the generator is newer than it.
make_demo() {
  local gen="$BUILD_DIR/tools/hl-generate"
  [[ -x "$gen" ]] || { echo "setup.sh: $gen was not built" >&2; return 1; }
  if [[ -f "$DEMO_DIR/config.json" && "$DEMO_DIR/config.json" -nt "$gen" ]]; then
    echo "demo checkpoint up to date: $DEMO_DIR"
    return 0
  fi
  "$gen" --preset demo-random --seed 0 --out "$DEMO_DIR" && touch "$DEMO_DIR/config.json"
}

run_tests() { ctest --preset "$PRESET" -j "$JOBS"; }

launch() {
  local app="$BUILD_DIR/hybridlens"
  if [[ -z "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" && -z "${QT_QPA_PLATFORM:-}" ]]; then
    echo "setup.sh: no display (DISPLAY is not set), so the app cannot open a window here." >&2
    echo "  In a desktop session run: $app $RUN_DIR" >&2
    echo "  Under Xvfb:               xvfb-run -a $app $RUN_DIR" >&2
    echo "  Headless:                 $app info --checkpoint $RUN_DIR" >&2
    return 1
  fi
  echo "launching: $app $RUN_DIR"
  "$app" "$RUN_DIR"
}

cd "$ROOT"
step "packages" install_packages
if [[ $DO_BUILD -eq 1 ]]; then
  step "configure ($PRESET)" configure
  step "build ($PRESET, -j $JOBS)" build
  step "demo checkpoint" make_demo
fi
[[ $DO_TEST -eq 1 ]] && step "tests (ctest, -j $JOBS)" run_tests
[[ $DO_RUN -eq 1 ]] && step "launch app" launch
exit 0
