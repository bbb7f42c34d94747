#!/usr/bin/env bash
# Fetches a glslc, the Vulkan headers and the SPIR-V headers recent enough for llama.cpp's whole
# Vulkan backend (cooperative matrices KHR and NV, integer dot products, bfloat16), for the GPU
# peer's build (tests/bench/llama-cpp.sh vulkan). Debian 12's glslc (shaderc 2023.2, glslang
# 11.13) fails every one of llama.cpp's shader feature tests, so a peer built with it has no
# matrix-unit prefill and no integer-dot mat-vec: a reduced peer.
# The packages come from Debian's $GLSLC_SUITE (default sid: its shaderc carries the newest
# glslang, the only one with every extension llama.cpp tests for) through tests/debian.py
# (checked against the suite's index), unpacked under ~/.cache/mars/tools/glslc-<suite> (or
# $MARS_TOOLS_DIR) with that suite's C and C++ runtimes, which glslc runs on through their own
# loader (the suite's glibc is newer than the host's).
# Prints two lines: the glslc wrapper's path, then the include directory (vulkan/, spirv/).
#   usage: tests/bench/glslc.sh
set -euo pipefail
[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || { echo "glslc.sh: x86-64 Linux only" >&2; exit 1; }
suite=${GLSLC_SUITE:-sid}
dir="${MARS_TOOLS_DIR:-$HOME/.cache/mars/tools}/glslc-$suite"
wrapper="$dir/bin/glslc"
if [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1 && [ -f "$dir/root/usr/include/vulkan/vulkan.hpp" ]; then
  printf '%s\n%s\n' "$wrapper" "$dir/root/usr/include"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# glslc, its library (glslang and SPIRV-Tools linked in), the runtimes they need, the headers.
python3 "$(dirname "$0")/../debian.py" "$suite" "$tmp/root" glslc libshaderc1 libc6 libstdc++6 \
  libgcc-s1 libvulkan-dev spirv-headers >&2
mkdir -p "$tmp/bin"
cat >"$tmp/bin/glslc" <<'SH'
#!/bin/sh
# glslc on its own suite's runtimes, through that suite's loader.
root="$(cd "$(dirname "$0")/../root" && pwd)"
lib="$root/usr/lib/x86_64-linux-gnu"
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$root/usr/bin/glslc" "$@"
SH
chmod +x "$tmp/bin/glslc"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
mkdir "$dir"
mv "$tmp/root" "$tmp/bin" "$dir/"
"$wrapper" --version >&2
printf '%s\n%s\n' "$wrapper" "$dir/root/usr/include"
