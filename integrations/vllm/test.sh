#!/usr/bin/env bash
# The plugin's checks: ruff, the conformance tests against mars-verify's fixtures, and vLLM's CPU
# engine end to end on SmolLM2-135M. Creates or reuses the venv (venv.sh) and the converted model.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=$(bash "$here/venv.sh")

"$venv/bin/ruff" check "$here"
"$venv/bin/ruff" format --check "$here"

gguf=$(bash "$root/tests/fetch-model.sh" | sed -n 's/^model: \([^ ]*\).*/\1/p' | tail -n 1)
models=${MARS_VLLM_MODELS:-$HOME/.cache/mars/vllm-models}
smollm="$models/SmolLM2-135M-Instruct-f32"
"$venv/bin/python" "$here/convert.py" "$gguf" "$smollm" >/dev/null

# A release the plugin claims but that cannot run here (vllm 0.33.0 is CUDA only; PyPI has no CPU
# build of it): its wheel's Python source, unpacked without installing, for test_compat.py's
# check of the hooked functions.
releases=${MARS_VLLM_RELEASES:-$HOME/.cache/mars/vllm-releases}
for version in 0.33.0; do
  if [ ! -f "$releases/$version/vllm/__init__.py" ]; then
    tmp=$(mktemp -d)
    "$venv/bin/pip" download -q --no-deps "vllm==$version" -d "$tmp" >&2
    rm -rf "$releases/$version.partial"
    mkdir -p "$releases/$version.partial"
    unzip -q "$tmp"/vllm-*.whl 'vllm/*.py' -d "$releases/$version.partial"
    mv "$releases/$version.partial" "$releases/$version"
    rm -rf "$tmp"
  fi
done
export MARS_VLLM_RELEASES="$releases"

# vLLM's CPU backend wants Intel's OpenMP preloaded (it ships in the venv): without it speculative
# decoding ran ~12x slower here.
export LD_PRELOAD="$venv/lib/libiomp5.so${LD_PRELOAD:+:$LD_PRELOAD}"
export MARS_VLLM_SMOLLM="$smollm"
cd "$here"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
