#!/usr/bin/env bash
# The benchmarks' one entry point: each subcommand runs one stage, beside its peer on the same
# files, threads and device where it has one. Commands, not CI steps (minutes to an hour each).
# A shell script rather than an xtask crate: every stage drives outside tools (llama.cpp's
# binaries, headless Chromium through node, vLLM in its venv, valgrind, gdb), so the glue is
# shell either way. The stages share tests/bench/lib.sh (the model cache, the mars binary,
# Spec-Bench's prompts) and tests/bench/rounds.py (rounds taken in turns, the median of
# per-round ratios). docs/performance.md gives each table's command.
#
#   bash tests/bench/bench.sh cpu MODEL.gguf [THREADS] [PROMPT] [DECODE]   mars speed beside llama-bench (CPU)
#   bash tests/bench/bench.sh pair [K] [MAX] [CATEGORY] [THREADS] [VOCAB]  the Qwen pair: mars bench beside llama-speculative-simple
#   bash tests/bench/bench.sh trees [CATEGORY] [PROMPTS] [T] [SEED] [THETA] [SHAPES…]  chains against token trees (LLAMA=1: llama-speculative too)
#   bash tests/bench/bench.sh browser ROUNDS TOKENS [--race] MODEL…         the page in headless Chromium beside wllama
#   bash tests/bench/bench.sh vllm smollm|pair|pair-ngram [options]          the vLLM plugin: plain, strict, MARS on vLLM's engine
#   bash tests/bench/bench.sh gpu [PROMPTS] [MAX]                            the GPU benchmark: peers table and speculation on the GPU
#   bash tests/bench/bench.sh gpu-peers MODEL.gguf [PROMPT] [DECODE]         one model on wgpu beside llama.cpp's Vulkan backend
#   bash tests/bench/bench.sh gpu-bundle DIR [MAX_MB]                        the GPU benchmark packed for a machine without a toolchain
#   bash tests/bench/bench.sh gpu-speed | gpu-profile | gpu-submits MODEL.gguf [..]  block kernels vs f32; per-kernel time; submits a token
#   bash tests/bench/bench.sh gpu-host MODEL.gguf [REPS] [LONG_PROMPT]       a card's passes on the host alone (wgpu's no-op backend; COUNT=1: instructions a launch)
#   bash tests/bench/bench.sh gpu-instructions [SHAPES] [ROWS] [N]           the WGSL matmul's instruction count on lavapipe (callgrind)
#   bash tests/bench/bench.sh gpu-isa [FILTER]                               each mat-vec form's machine code on a GPU compiler (RADV, no GPU) beside llama.cpp's
#   bash tests/bench/bench.sh gpu-price DIR DRAFT_NAME [K] [TAU…]             speculation priced from measured pass costs
#   bash tests/bench/bench.sh skeleton pack|unpack|shape …                   GGUF skeletons of real and larger Qwen2 shapes
#   bash tests/bench/bench.sh llama-cpp [cpu|vulkan]                         builds the peer's tools, prints their directory
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stage=${1:-}
[ $# -gt 0 ] && shift
case $stage in
  cpu) exec bash "$here/against-llama-cpp.sh" "$@" ;;
  pair | trees | gpu | gpu-peers | gpu-bundle | gpu-speed | gpu-profile | gpu-submits | gpu-host | gpu-instructions | gpu-isa | llama-cpp)
    exec bash "$here/$stage.sh" "$@" ;;
  browser) exec bash "$here/browser-cpu.sh" "$@" ;;
  vllm) exec bash "$here/../../integrations/vllm/bench.sh" "$@" ;;
  gpu-price) exec python3 "$here/gpu-price.py" "$@" ;;
  skeleton) exec python3 "$here/gguf-skeleton.py" "$@" ;;
  *)
    sed -n '/^#   bash/s/^#   //p' "$0" >&2
    [ -z "$stage" ] || echo "bench.sh: no stage '$stage'" >&2
    exit 2 ;;
esac
