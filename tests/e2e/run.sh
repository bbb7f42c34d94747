#!/usr/bin/env bash
# Browser end-to-end tests: builds the page, writes the tiny model next to the default model,
# and drives headless Chromium (real WebGPU on SwiftShader) through tests/e2e/e2e.mjs.
set -euo pipefail
cd "$(dirname "$0")/../.."
target="${CARGO_TARGET_DIR:-target}"
bash web/build.sh
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
"$target/release/mars" tiny-model --out "$models/tiny.gguf"
dir="${MARS_MODEL_DIR:-$HOME/.cache/mars/models}"
# The default model and the Qwen2.5-Coder pair, where fetched (tests/setup.sh fetches them).
for f in SmolLM2-135M-Instruct.Q4_1.gguf Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf; do
  if [ -s "$dir/$f" ]; then ln -s "$dir/$f" "$models/"; fi
done
node tests/e2e/e2e.mjs dist "$models" "$target/release/mars" "${E2E_OUT:-assets/screenshots}"
