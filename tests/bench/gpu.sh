#!/usr/bin/env bash
# The GPU benchmark in one command, for the day a machine with a GPU runs it (it runs on
# lavapipe too, Mesa's Vulkan on the CPU, where every figure is the emulator's):
#   1. SmolLM2-135M, Qwen2.5-Coder-0.5B and -1.5B: `mars speed --device wgpu` beside llama.cpp's
#      Vulkan backend, alternating rounds (tests/bench/gpu-peers.sh): decode, prefill, passes of
#      1 / 5 / 16 rows, peak memory, and mars's counted launches, uploads and reads;
#   2. speculative decoding on the GPU: the Qwen pair (0.5B draft model, k = 3, greedy; the
#      tree preset at T = 1) and prompt lookup on SmolLM2 (greedy and T = 1, whose rows are
#      drawn on the GPU), Spec-Bench coding prompts: target-only, strict and MARS tok/s,
#      speedups, τ, and what a step costs the GPU (launches, reads, bytes read back);
#   3. with BROWSER=1, the page on the machine's WebGPU adapter beside wllama in the same headless
#      Chromium (tests/bench/browser-cpu.sh with BACKEND=webgpu).
# Writes the tables to OUT (default gpu-bench.md) and prints them.
#   usage: bash tests/bench/bench.sh gpu [PROMPTS] [MAX_TOKENS]
#   env:   ROUNDS (2), OUT, BROWSER, MARS_MODEL_DIR, PEERS=0 (skip part 1), PEERS_PP and PEERS_TG (the prompt and decode
#          tokens of part 1: 64 and 32; fewer make a run on lavapipe take minutes, not an hour),
#          PEER_MODELS (part 1's model files; default the three), SPEC ("pair smol": part 2's
#          groups), SPEC_BENCH (the prompt file; tests/fetch-spec-bench.sh fetches it), and for a
#          machine with no toolchain (a lent GPU): MARS_BIN (a built mars; else cargo builds it)
#          and LLAMA_VK_BIN (llama.cpp's Vulkan bin directory, for gpu-peers.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
prompts=${1:-6}
max=${2:-64}
export ROUNDS=${ROUNDS:-2}
out=${OUT:-gpu-bench.md}
. tests/bench/lib.sh
smol=$BENCH_SMOL draft=$BENCH_PAIR_DRAFT target=$BENCH_PAIR_TARGET
MARS_BIN=$(mars_bin)
export MARS_BIN
mars=$MARS_BIN
prompt_file=$(spec_bench)
spec=${SPEC-pair smol}
# Fetch only what the chosen parts read.
uses=" $spec "
if [ "${PEERS:-1}" = 1 ]; then uses=" ${PEER_MODELS:-$smol $draft $target}$uses"; fi
if [[ $uses == *" $smol "* || $uses == *" smol "* ]]; then need_smol; fi
if [[ $uses == *" $draft "* || $uses == *" $target "* || $uses == *" pair "* ]]; then need_pair; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "# mars on the GPU: $(date -u +%F), $(uname -m), $(nproc) cores"
  echo
  echo "## 1. One model at a time, beside llama.cpp's Vulkan backend"
  for m in $([ "${PEERS:-1}" = 1 ] && echo "${PEER_MODELS:-$smol $draft $target}"); do
    echo
    bash tests/bench/gpu-peers.sh "$m" "${PEERS_PP:-64}" "${PEERS_TG:-32}"
  done
  echo
  echo "## 2. Speculative decoding on the GPU (greedy unless T = 1 is named, Spec-Bench coding, $prompts prompts, $max tokens)"
  echo
  echo "| model | drafter | method | tok/s | vs target-only | τ | launches / step | reads / step | bytes read / step |"
  echo "|---|---|---|---|---|---|---|---|---|"
} | tee "$out"
run() { # MODEL DRAFTER LABEL [args…]: one compare, its totals as table rows
  local model=$1 drafter=$2 label=$3
  shift 3
  "$mars" compare --device wgpu --model "$model" --draft "$drafter" --chat --category coding \
    --limit "$prompts" --max-tokens "$max" --prompts "$prompt_file" --json "$@" \
    >"$tmp/c.json" 2>"$tmp/c.log" || { tail -3 "$tmp/c.log" >&2; return 1; }
  python3 - "$tmp/c.json" "$(basename "$model")" "$label" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["total"]
for name in ("target", "strict", "mars"):
    s = t[name]; steps = max(s["target_forwards"], 1); g = s["gpu"]
    tau = f"{s['tau']:.2f}" if name != "target" else "1.00"
    print(f"| {sys.argv[2]} | {sys.argv[3]} | {name} | {s['tokens_per_second']:.2f} | {s['speedup']:.2f}x | "
          f"{tau} | {g['launches'] / steps:.0f} | {g['reads'] / steps:.2f} | {g['read_bytes'] / steps:.0f} |")
PY
}
{
  if [[ " $spec " == *" pair "* ]]; then
    run "$target" "model:$draft" "Qwen2.5-Coder-0.5B, k = 3" --k 3 --draft-vocab 32768
    run "$target" "model:$draft" "0.5B tree (16 nodes, depth 8, branch 4, floor 0.3), T = 1" \
      --tree 16 --k 8 --branch 4 --tree-min-p 0.3 --draft-vocab 32768 --temperature 1
  fi
  if [[ " $spec " == *" smol "* ]]; then
    run "$smol" ngram "prompt lookup, k = 4" --k 4
    run "$smol" ngram "prompt lookup, k = 4, T = 1" --k 4 --temperature 1
    # Layer skip: a draft pass per token (a chain), and a tree's pass per depth.
    run "$smol" layers:first:4 "layer skip first:4, k = 3, T = 1" --k 3 --temperature 1
    run "$smol" layers:first:4 "layer-skip tree (8 nodes, depth 4, branch 2), T = 1" \
      --tree 8 --k 4 --branch 2 --temperature 1
  fi
} | tee -a "$out"
if [ "${BROWSER:-0}" = 1 ]; then
  {
    echo
    echo "## 3. The page on this machine's WebGPU adapter beside wllama (headless Chromium)"
    echo
    BACKEND=webgpu bash tests/bench/bench.sh browser "$ROUNDS" "$max" --race \
      "$(basename "$smol")" "$(basename "$target")" | tail -n 20
  } | tee -a "$out"
fi
echo "wrote $out"
