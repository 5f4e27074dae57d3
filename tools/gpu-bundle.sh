#!/usr/bin/env bash
# tools/gpu-bundle.sh — packs the CUDA check's binaries, built here, for a GPU machine that has the
# CUDA driver and toolkit but not the Debian packages the build needs (Qt-free build: hybridlens,
# hl-generate, hl_cuda_tests, and the shared libraries they load that such a machine may lack:
# SentencePiece, ICU, PCRE2, xxHash, OpenBLAS, protobuf-lite; cuBLAS and the C/C++ runtimes are
# left to the machine). Then, on the GPU machine, from a checkout of the same commit:
#   tar xJf .gpu/bundle.tar.xz && export LD_LIBRARY_PATH=$PWD/.gpu/lib:$LD_LIBRARY_PATH &&
#   HL_GPU_SKIP_BUILD=1 HL_GPU_BUILD=$PWD/build/gpu tools/gpu-check.sh
# The test binary names the golden folder by its absolute path here (HL_GOLDEN_DIR): the checkout
# must be reachable at the same path there (a symbolic link will do).
# Usage: tools/gpu-bundle.sh [ARCH]   (default 90: Hopper; configures and builds build/gpu first)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ARCH=${1:-90}
BUILD=$ROOT/build/gpu
cd "$ROOT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHL_BUILD_GUI=OFF -DHL_ENABLE_VULKAN=OFF \
  -DHL_ENABLE_CUDA=ON -DHL_ENABLE_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >/dev/null
cmake --build "$BUILD" --target hybridlens hl-generate hl_cuda_tests
rm -rf .gpu/lib && mkdir -p .gpu/lib
BINS=(build/gpu/hybridlens build/gpu/tools/hl-generate build/gpu/tests/hl_cuda_tests)
# Every shared library the binaries load, except the C and C++ runtimes and the CUDA libraries.
ldd "${BINS[@]}" | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*|libcublas[^/]*|libcuda[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" .gpu/lib/; done
tar cJf .gpu/bundle.tar.xz "${BINS[@]}" .gpu/lib
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
ls -la .gpu/bundle.tar.xz
ls .gpu/lib
