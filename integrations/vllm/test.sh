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

# vLLM's CPU backend wants Intel's OpenMP preloaded (it ships in the venv): without it speculative
# decoding ran ~12x slower here.
export LD_PRELOAD="$venv/lib/libiomp5.so${LD_PRELOAD:+:$LD_PRELOAD}"
export MARS_VLLM_SMOLLM="$smollm"
cd "$here"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
