#!/usr/bin/env bash
# The page's wasm CPU path beside wllama 3.8.1 (llama.cpp in WebAssembly) in the same headless
# Chromium, on the same GGUF files: decode tok/s of each model (mars on its one thread, wllama on
# 1 and 2), then with --race the Qwen2.5-Coder pair's race (plain / strict / MARS) on the page.
# Not a CI step: minutes per model. Run it on a quiet machine (RECIPES.md: wllama's 2-thread
# decode drops 10–15x beside another busy process).
#   bash tests/bench/bench.sh browser ROUNDS TOKENS [--race] MODEL_FILE…
# e.g. bash tests/bench/bench.sh browser 3 64 --race SmolLM2-135M-Instruct.Q4_1.gguf
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="$1" tokens="$2"
shift 2
bash web/build.sh > /dev/null
wl="$HOME/.cache/mars/wllama"
if [ ! -d "$wl/node_modules/@wllama/wllama/esm" ]; then
  mkdir -p "$wl" && (cd "$wl" && npm install --no-save @wllama/wllama@3.8.1 > /dev/null)
fi
. tests/bench/lib.sh
results=$(mktemp)
trap 'rm -f "$results"' EXIT
node tests/bench/browser-cpu.mjs dist "$BENCH_MODELS" "$wl/node_modules/@wllama/wllama/esm" "$rounds" "$tokens" "$results" "$@"
echo
python3 tests/bench/rounds.py medians "$results"  # tok/s
