#!/usr/bin/env bash
# Queue submissions per decoded token on the GPU path, counted in wgpu itself: `mars generate
# --device wgpu` under gdb with a counting breakpoint on wgpu-core's queue_submit, for two token
# budgets, so the difference is per token (prompt and start-up cancel out). CubeCL submits its
# recorded work every `tasks_max` launches and before every read back; mars sets 512 on a CPU
# adapter (a forward in one submit) and 32 on a GPU (`mars_model::submit_every`) unless
# CUBECL_WGPU_MAX_TASKS is set: run with CUBECL_WGPU_MAX_TASKS=32 to see the difference.
#   usage: bash tests/bench/bench.sh gpu-submits MODEL.gguf [TOKENS_A] [TOKENS_B]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bench.sh gpu-submits MODEL.gguf [TOKENS_A] [TOKENS_B]}
a=${2:-4}
b=${3:-12}
. tests/bench/lib.sh
mars=$(mars_bin)
out=$(mktemp)
script=$(mktemp)
trap 'rm -f "$out" "$script"' EXIT
count() { # TOKENS -> "SUBMITS GENERATED"
  {
    echo 'set pagination off'
    echo 'set $n = 0'
    # The symbol as the release build carries it (no debug info: its hash suffix is matched).
    echo 'rbreak ^wgpu_core::device::queue::<impl wgpu_core::global::Global>::queue_submit::h'
    echo 'commands 1'
    echo 'silent'
    echo 'set $n = $n + 1'
    echo 'continue'
    echo 'end'
    echo "run generate --model $model --device wgpu --prompt 'The quick brown fox' --max-tokens $1 --json > $out"
    echo 'printf "submits %d\n", $n'
  } >"$script"
  local n
  n=$(gdb -q -batch -nx -x "$script" "$mars" 2>/dev/null | awk '/^submits/ { print $2 }')
  echo "$n $(python3 -c "import json; print(len(json.load(open('$out'))['tokens']))")"
}
read -r na ta < <(count "$a")
read -r nb tb < <(count "$b")
echo "submits: $na for $ta tokens, $nb for $tb tokens: $(python3 -c "print(f'{($nb - $na) / ($tb - $ta):.2f}')") per token" \
  "(tasks_max ${CUBECL_WGPU_MAX_TASKS:-512})"
