#!/usr/bin/env bash
# Builds llama.cpp's command-line tools (llama-bench, llama-speculative-simple, llama-speculative (trees), llama-completion,
# llama-lookup) from the source vendored in the llama-cpp-python 0.3.36 sdist, offline, for
# side-by-side benchmarks on the same GGUF file and the same cores. Cached: a second run only
# prints the directory.
# LLAMA_CPP_BIN (LLAMA_VK_BIN for the Vulkan flavour), where set, names a prebuilt bin directory
# to use instead (a machine that cannot build).
#   usage: tests/bench/llama-cpp.sh            -> prints the bin directory (builds if needed)
#          tests/bench/llama-cpp.sh vulkan     -> the same with the Vulkan backend (llama-bench
#                                                 only; run it with GGML_VK_VISIBLE_DEVICES=0 to
#                                                 use lavapipe, which llama.cpp skips otherwise)
#   e.g.   "$(bash tests/bench/llama-cpp.sh)/llama-bench" -m MODEL.gguf -t 2 -p 128 -n 64
set -euo pipefail
ver=0.3.36
flavour=${1:-cpu}
prebuilt=$([ "$flavour" = vulkan ] && echo "${LLAMA_VK_BIN:-}" || echo "${LLAMA_CPP_BIN:-}")
if [ -n "$prebuilt" ]; then
  [ -x "$prebuilt/llama-bench" ] || { echo "llama-cpp.sh: no llama-bench in $prebuilt" >&2; exit 1; }
  echo "$prebuilt"
  exit 0
fi
root="${LLAMA_CPP_DIR:-$HOME/.cache/mars/llama.cpp-$ver}"
# Not GGML_NATIVE: these VMs advertise AMX, which the guest kernel does not enable, and ggml's
# AMX path dies with SIGILL on prompt processing. AVX2/FMA/F16C everywhere; AVX-512 and VNNI
# only where the CPU reports them.
isa="-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
grep -qw avx512f /proc/cpuinfo && isa="$isa -DGGML_AVX512=ON"
grep -qw avx512_vnni /proc/cpuinfo && isa="$isa -DGGML_AVX512_VNNI=ON"
grep -qw avx_vnni /proc/cpuinfo && isa="$isa -DGGML_AVX_VNNI=ON"
case "$flavour" in
  cpu) build="$root/build"; src_dir="$root/src"; extra=""
       tools=(llama-bench llama-speculative-simple llama-speculative llama-completion llama-lookup) ;;
  vulkan) build="$root/build-vulkan"; src_dir="$root/src"; extra="-DGGML_VULKAN=ON"
          tools=(llama-bench) ;;
  *) echo "usage: llama-cpp.sh [cpu|vulkan]" >&2; exit 2 ;;
esac
bin="$build/bin"
# The CPU build's record stays where earlier versions of this script kept it.
if [ "$flavour" = cpu ]; then tag_file="$root/isa"; tag="$isa"; else tag_file="$build/isa"; tag="$isa $extra glslc-${GLSLC_SUITE:-sid}"; fi
have=1; for t in "${tools[@]}"; do [ -x "$bin/$t" ] || have=0; done
[ "$(cat "$tag_file" 2>/dev/null)" = "$tag" ] || have=0
if [ $have = 1 ]; then echo "$bin"; exit 0; fi
mkdir -p "$root"
command -v cmake >/dev/null || python3 -m pip install -q cmake >&2
if [ ! -d "$root/src" ]; then
  tmp=$(mktemp -d)
  # The sdist is the only source here; --no-deps and binary build tools keep it from building.
  python3 -m pip download -q --no-deps "llama-cpp-python==$ver" -d "$tmp" >&2
  tar xzf "$tmp"/llama_cpp_python-$ver.tar.gz -C "$tmp"
  mv "$tmp/llama_cpp_python-$ver/vendor/llama.cpp" "$root/src"
  rm -rf "$tmp"
fi
if [ "$flavour" = vulkan ]; then
  # The whole backend: a glslc that passes every shader feature test (Debian 12's passes none,
  # which leaves a peer without matrix-unit prefill or integer-dot mat-vec) and the Vulkan and
  # SPIR-V headers of the same suite; linked against the host's Vulkan loader.
  [ -e /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || { apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libvulkan1 >&2; }
  { read -r glslc; read -r include; } < <(bash "$(dirname "$0")/glslc.sh")
  extra="$extra -DVulkan_GLSLC_EXECUTABLE=$glslc -DVulkan_INCLUDE_DIR=$include \
    -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
    -DSPIRV-Headers_DIR=$include/../share/cmake/SPIRV-Headers"
  # A build dir of the reduced peer was configured from a patched copy of the source (and other
  # headers): cmake refuses another source for the same cache, so start it anew.
  rm -rf "$build" "$root/src-vulkan"
fi
# shellcheck disable=SC2086
cmake -S "$src_dir" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF $isa $extra \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >"$build.cmake.log" 2>&1 \
  || { echo "llama-cpp.sh: cmake failed, see $build.cmake.log" >&2; exit 1; }
cmake --build "$build" -j"$(nproc)" --target "${tools[@]}" >"$build.build.log" 2>&1 \
  || { echo "llama-cpp.sh: build failed, see $build.build.log" >&2; exit 1; }
echo "$tag" >"$tag_file"
echo "$bin"
