#!/usr/bin/env bash
# Fetches a lavapipe that has cooperative matrices, so that the matrix-unit tiles
# (`TileForm::Units`) run somewhere without a GPU: Debian 12's Mesa (22.3) has no
# VK_KHR_cooperative_matrix, trixie's (25.0) does not expose it, sid's (26.x) does, in
# 8 × 8 × 8 blocks of f16 into f32 on subgroups of 8 (the 8 × 8 tiles' shape). Mesa's Vulkan
# drivers and everything they load come from Debian's $MESA_SUITE (default sid) through
# tests/debian.py, unpacked under ~/.cache/mars/tools/mesa-<suite> (or $MARS_TOOLS_DIR).
# Prints a runner: `RUNNER PROGRAM ARGS…` runs a program (a test binary built here) on that
# Mesa's lavapipe, through the suite's own loader (its glibc is newer than the host's).
# The tree also holds Mesa's DRM shims (mesa-drm-shim): drivers for cards that are not there,
# whose compilers `bench.sh gpu-isa` asks (ISA_DRIVER=nak: NVK for an NVIDIA card).
#   usage: runner=$(bash tests/fetch-mesa.sh); "$runner" target/release/deps/gpu-… FILTER
set -euo pipefail
[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || { echo "fetch-mesa.sh: x86-64 Linux only" >&2; exit 1; }
suite=${MESA_SUITE:-sid}
dir="${MARS_TOOLS_DIR:-$HOME/.cache/mars/tools}/mesa-$suite"
runner="$dir/run"
lib="$dir/root/usr/lib/x86_64-linux-gnu"
if [ -x "$runner" ] && [ -f "$lib/libvulkan_lvp.so" ] && [ -f "$lib/libnouveau_noop_drm_shim.so" ]; then
  echo "$runner"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$(dirname "$0")/debian.py" "$suite" "$tmp/root" --closure mesa-vulkan-drivers libvulkan1 mesa-drm-shim \
  | grep -E '^(mesa-vulkan-drivers|mesa-drm-shim|libvulkan1|libc6|libllvm[0-9]+) ' >&2
cat >"$tmp/run" <<'SH'
#!/bin/sh
# A program on this tree's lavapipe, through this tree's loader and libraries.
here="$(cd "$(dirname "$0")" && pwd)"
lib="$here/root/usr/lib/x86_64-linux-gnu"
export VK_DRIVER_FILES="$here/lvp_icd.json" VK_ICD_FILENAMES="$here/lvp_icd.json"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$@"
SH
chmod +x "$tmp/run"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
mkdir "$dir"
mv "$tmp/root" "$tmp/run" "$dir/"
# The driver by its full path: the manifest's bare name would also match the host's lavapipe.
sed "s|\"libvulkan_lvp.so\"|\"$dir/root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so\"|" \
  "$dir/root/usr/share/vulkan/icd.d/lvp_icd.json" >"$dir/lvp_icd.json"
echo "$runner"
