#!/usr/bin/env bash
# Builds driftgate with CUDA (sm_90 + PTX) here and gathers what scripts/gpu-check.sh --prebuilt
# needs on a GPU machine that has the CUDA driver and runtime but none of driftgate's Debian
# libraries: DIR/bin (driftgate and the CUDA test binaries) and DIR/lib (the shared libraries they
# load, the CUDA runtime this build was linked against included, except the C library and the
# driver's libcuda, which must be the GPU machine's own). Default DIR: .gpu-bundle (ignored by git).
#
#   scripts/gpu-bundle.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu-bundle}
build=${DRIFTGATE_BUILD_DIR:-$root/build}
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" -DDRIFTGATE_CUDA=ON >/dev/null
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
cp "$build/driftgate" "$build/tests/cuda_device_test" "$build/tests/cuda_kda_test" "$build/tests/cuda_layer_ops_test" \
  "$build/tests/cuda_attention_decode_test" "$build/tests/cuda_mla_decode_test" "$dir/bin/"
# strace, where this machine has it: gpu-check.sh traces the sandbox's failed calls with it.
if [ -x /usr/bin/strace ]; then cp /usr/bin/strace "$dir/bin/"; fi
for b in "$dir"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcuda.so.*) ;;
    *) cp -L "$lib" "$dir/lib/" ;;
  esac
done
du -sh "$dir"
