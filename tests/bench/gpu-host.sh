#!/usr/bin/env bash
# The host's side of a GPU card's passes, measured without a GPU: the model's passes (1, 5 and
# 16 rows, each followed by its summaries' read, as decoding and verification run them) on
# wgpu's no-op backend dressed as a card (`WGPU_NOOP_BACKEND=1`, `mars_model::open_wgpu`): the
# card's configuration is recorded and submitted through CubeCL and wgpu-core and nothing runs,
# so a pass's time is what the host spends on its launches (no driver: a card's driver adds its
# own). After a short prompt and after a long one (split attention's extra launches). A card is
# host-bound where this time reaches its decode time; `gpu_cost launch` on the card says the
# same from the other side. With PERF=1 a perf profile follows.
#   usage: bash tests/bench/bench.sh gpu-host MODEL.gguf [REPS] [LONG_PROMPT]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bench.sh gpu-host MODEL.gguf [REPS] [LONG_PROMPT]}
reps=${2:-1000}
long=${3:-1024}
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p mars-model --features wgpu --example step_cost
bin=$target/release/examples/step_cost
for depth in 64 "$long"; do
  echo "after $depth tokens (host only: wgpu's no-op backend as a card, $reps passes each):"
  STEP_DEVICE=wgpu WGPU_NOOP_BACKEND=1 STEP_PROMPT=$depth STEP_REPS=$reps "$bin" "$model" 1 5 16
done
if [ "${PERF:-0}" = 1 ]; then
  data=$(mktemp)
  trap 'rm -f "$data"' EXIT
  # Past load and warm-up (-D), the functions with what they call (both threads: the caller mostly waits on CubeCL's runtime thread).
  STEP_DEVICE=wgpu WGPU_NOOP_BACKEND=1 STEP_REPS=$((reps * 4)) \
    perf record -q -D 2000 --call-graph dwarf,16384 -F 1000 -o "$data" "$bin" "$model" 1 >/dev/null
  perf report -i "$data" --children --sort symbol -g none 2>/dev/null | grep '%' | head -40
fi
