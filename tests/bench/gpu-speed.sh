#!/usr/bin/env bash
# mars on wgpu: GGUF blocks in GPU buffers (the WGSL kernels) beside every weight as f32 (burn's
# matmuls), on the same model and adapter, one after the other in one run, then the ratios:
# decode, prefill, the rows-cost curve (a verification pass of k + 1 rows against one row),
# weights read per token and resident memory. Where the f32 path cannot load the model (a tensor
# over the adapter's largest binding) it says so and reports the blocks alone. A benchmark
# command, not a CI step: on lavapipe (no GPU) a 135M model decodes at ~1–2 tok/s.
#   usage: bash tests/bench/bench.sh gpu-speed MODEL.gguf [PROMPT_TOKENS] [DECODE_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bench.sh gpu-speed MODEL.gguf [PROMPT_TOKENS] [DECODE_TOKENS]}
pp=${2:-16}
tg=${3:-16}
[ -f "$model" ] || { echo "no such model file: $model" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. tests/bench/lib.sh
mars=$(mars_bin)
for k in packed f32; do
  "$mars" speed --model "$model" --device wgpu --kernels "$k" --prompt-tokens "$pp" \
    --decode-tokens "$tg" >"$out/$k.json" 2>"$out/$k.log" || {
    grep -v XDG_RUNTIME_DIR "$out/$k.log" | tail -3 >&2
    echo "{}" >"$out/$k.json"
  }
done
python3 - "$model" "$out" <<'PY'
import json, os, sys
model, out = sys.argv[1], sys.argv[2]
b, f = (json.load(open(f"{out}/{k}.json")) for k in ("packed", "f32"))
print(f"{os.path.basename(model)} on {b.get('adapter') or f.get('adapter')}")
def curve(m):
    rows = m["forward_ms_by_rows"]
    one = rows["1"]
    return ", ".join(f"{k}: {v / one:.2f}x" for k, v in sorted(rows.items(), key=lambda kv: int(kv[0])))
print(f"{'':28}{'blocks':>10}{'f32':>10}{'ratio':>8}")
def line(name, key, scale=1.0, fmt="{:10.2f}"):
    x, y = b.get(key), f.get(key)
    xs = fmt.format(x / scale) if x is not None else f"{'-':>10}"
    ys = fmt.format(y / scale) if y is not None else f"{'(no load)':>10}"
    r = f"{x / y:7.2f}x" if x and y else ""
    print(f"{name:28}{xs}{ys}{r}")
line("decode tok/s", "decode_tokens_per_second")
line("prefill tok/s", "prefill_tokens_per_second")
line("weights read per token (MB)", "matrix_bytes_per_forward", 1e6, "{:10.1f}")
line("weight GB/s at decode", "decode_weight_gb_per_second")
line("resident memory (MB)", "resident_bytes", 1e6, "{:10.1f}")
print("forward cost by rows (blocks): " + curve(b))
if f:
    print("forward cost by rows (f32):    " + curve(f))
PY
