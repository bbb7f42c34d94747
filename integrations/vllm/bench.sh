#!/usr/bin/env bash
# The plugin's benchmark on this machine's CPU (a command, not a CI step): vLLM plain decoding,
# then speculation verified strict and with MARS, same prompts, engine and threads.
#   usage: bash tests/bench/bench.sh vllm smollm|pair|pair-ngram [bench.py options...]
# smollm: SmolLM2-135M with prompt lookup; pair: Qwen2.5-Coder-1.5B with the 0.5B draft model;
# pair-ngram: the 1.5B with prompt lookup. Models are converted to float32 folders once (cached).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
which=${1:?usage: bench.sh smollm|pair|pair-ngram [options]}
shift
command="bash tests/bench/bench.sh vllm $which $*"
venv=$(bash "$here/venv.sh")
models=${MARS_VLLM_MODELS:-$HOME/.cache/mars/vllm-models}
# shellcheck source=../../tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
gguf_dir=$BENCH_MODELS
convert() { "$venv/bin/python" "$here/convert.py" "$gguf_dir/$1" "$models/$2" >/dev/null; echo "$models/$2"; }
case "$which" in
  smollm)
    bash "$root/tests/fetch-model.sh" >/dev/null
    set -- --target "$(convert SmolLM2-135M-Instruct.Q4_1.gguf SmolLM2-135M-Instruct-f32)" "$@" ;;
  pair|pair-ngram)
    bash "$root/tests/fetch-pair.sh" >/dev/null
    target=$(convert Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf Qwen2.5-Coder-1.5B-Instruct-f32)
    if [ "$which" = pair ]; then
      draft=$(convert Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf Qwen2.5-Coder-0.5B-Instruct-f32)
      set -- --target "$target" --draft "$draft" "$@"
    else
      set -- --target "$target" "$@"
    fi ;;
  *) echo "unknown model set: $which" >&2; exit 2 ;;
esac
# Every core, each of vLLM's OpenMP threads bound to one (vLLM's CPU default is one thread).
n=$(nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$n}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0-$((n - 1))}
# Intel's OpenMP from the venv: vLLM's CPU backend asks for it (speculation ~12x slower without).
export LD_PRELOAD="$venv/lib/libiomp5.so${LD_PRELOAD:+:$LD_PRELOAD}"
echo "\$ $command  ($(date -u +%F), $(nproc) cores)"
prompts=$(bash "$root/tests/fetch-spec-bench.sh" | tail -n1)
"$venv/bin/python" "$here/bench.py" --prompts "$prompts" "$@"
