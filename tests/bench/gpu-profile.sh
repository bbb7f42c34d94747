#!/usr/bin/env bash
# Where a token's time goes on the GPU path: `mars generate --device wgpu` with each launch's time
# on the device logged, every kernel read by its label (what it computes, a product by its
# epilogue: `Shader::name` in mars-kernels), each forward pass cut at its embedding lookup, and
# the time per kernel summed for the prompt's pass and per decoded token, in the configuration
# the adapter's rules choose (on a card the norms folded into the products and RoPE into
# attention: their rows read 0 there; MARS_GPU_NORM=apart MARS_GPU_ROPE=apart shows them).
# PROFILE_WAY=direct (the default): the launches as a run makes them (`gpu::direct`, their
# pipelines wgpu's safe ones), timed by timestamps after each launch in the recorded passes
# (`MARS_GPU_PROFILE`; the host waits at each submit, so a launch's time is the device's, from
# the end of the launch before). PROFILE_WAY=cubecl: launched through CubeCL with its profiling
# log on (each kernel waited for and timed: slower than a normal run, so read the shares, not
# the sum), the kernels as CubeCL compiles them (their loops unbounded).
#   usage: bash tests/bench/bench.sh gpu-profile MODEL.gguf [PROMPT_TOKENS] [DECODE_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bench.sh gpu-profile MODEL.gguf [PROMPT_TOKENS] [DECODE_TOKENS]}
pp=${2:-64}
tg=${3:-8}
# MARS_BIN: a built mars (a machine with no toolchain); else cargo builds it.
if [ -z "${MARS_BIN:-}" ]; then
  . tests/bench/lib.sh
  MARS_BIN=$(mars_bin)
fi
log=$(mktemp)
json=$(mktemp)
trap 'rm -f "$log" "$json"' EXIT
prompt=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog.'] * 64))")
# PROMPT_TOKENS words of an ordinary sentence (about as many tokens; the count is printed).
way=${PROFILE_WAY:-direct}
case "$way" in
  direct) env=(MARS_GPU_PROFILE="$log") ;;
  cubecl) env=(MARS_GPU_LAUNCH=cubecl CUBECL_DEBUG_LOG="$log" CUBECL_DEBUG_OPTION=profile) ;;
  *) echo "gpu-profile: PROFILE_WAY is direct or cubecl, not $way" >&2; exit 2 ;;
esac
env "${env[@]}" "$MARS_BIN" \
  generate --model "$model" --device wgpu --prompt "$(echo "$prompt" | cut -d' ' -f1-"$pp")" \
  --max-tokens "$tg" --json >"$json" 2>/dev/null
python3 - "$log" "$model" "$json" "$way" <<'PY'
import importlib.util, json, sys
# Each product's weight bytes from the file's tensor table (gguf-skeleton.py's reader), so that a
# decoded token's time a product is also a rate: its weights read once a token.
spec = importlib.util.spec_from_file_location("skeleton", "tests/bench/gguf-skeleton.py")
skeleton = importlib.util.module_from_spec(spec)
spec.loader.exec_module(skeleton)
with open(sys.argv[2], "rb") as f:
    tensors = {name: size for name, _, size, _ in skeleton.layout(f)[1]}
def weights(*parts):
    return sum(b for n, b in tensors.items() if n.startswith("blk.") and n.split(".")[2] in parts)
matrix_bytes = {
    "q|k|v": weights("attn_q", "attn_k", "attn_v"),
    "o + residual": weights("attn_output"),
    "gate|up + SiLU": weights("ffn_gate", "ffn_up"),
    "down + residual": weights("ffn_down"),
    "head": tensors.get("output.weight", tensors.get("token_embd.weight", 0)),
}
lines = [l for l in open(sys.argv[1]) if l.startswith("| ")]
def ms(t):
    t = t.strip()
    for unit, f in (("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6), ("s", 1e3)):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * f
    return 0.0
LABELS = ("embed", "norm", "quantize", "matmul_store", "matmul_add", "matmul_swiglu", "tile_store",
          "tile_add", "tile_swiglu", "tile_sum_store", "tile_sum_add", "tile_sum_swiglu", "rope",
          "attention", "attention_roped", "attention_merge", "summary", "top")
runs = []
# A tile launch split along its inputs is two: its splits' partials (tile_part), then their sum
# with the epilogue (tile_sum_*), which names the product; the first's time goes to the second.
part = 0.0
for l in lines:
    t, name = l.split("|")[1], l.split("|")[2].strip()
    label = name.rsplit("_", 1)[0]
    if label == "tile_part":
        part += ms(t)
    elif label in LABELS:
        runs.append((ms(t) + part, label.replace("tile_sum_", "matmul_").replace("tile_", "matmul_")))
        part = 0.0
def split(fw):
    # Within a forward: q|k|v is the product that stores before a layer's attention, o the one
    # that adds after it, gate|up the SwiGLU, down the add after it; the last layer ends with
    # the last down, after which come the final norm, the head (a store) and the summary.
    last_down = max(i for i, (_, n) in enumerate(fw) if n == "matmul_add")
    out, layers, prev = {}, 0, None
    def add(k, t):
        out[k] = out.get(k, 0.0) + t
    for i, (t, n) in enumerate(fw):
        tail = i > last_down
        if n == "embed":
            add("embedding", t)
        elif n == "norm":
            add("final norm" if tail else "norm", t)
        elif n == "quantize":
            add("quantize (8-bit activations)", t)
        elif n == "matmul_store":
            add("head" if tail else "q|k|v", t)
        elif n == "rope":
            add("rope", t)
        elif n.startswith("attention"):
            add("attention (+ rope)" if n == "attention_roped" else "attention", t)
        elif n == "matmul_add":
            if prev == "matmul_swiglu":
                add("down + residual", t)
                layers += 1
            else:
                add("o + residual", t)
        elif n == "matmul_swiglu":
            add("gate|up + SiLU", t)
        else:
            add("summary", t)
        if n.startswith("matmul"):
            prev = n
    return out, layers
starts = [i for i, r in enumerate(runs) if r[1] == "embed" and (i == 0 or runs[i - 1][1] != "embed")]
forwards = [runs[a:b] for a, b in zip(starts, starts[1:] + [len(runs)])]
prefill, layers = split(forwards[0])
decode = [split(f)[0] for f in forwards[1:]]
keys = ["embedding", "norm", "quantize (8-bit activations)", "q|k|v", "rope", "attention",
        "attention (+ rope)", "o + residual", "gate|up + SiLU", "down + residual", "final norm",
        "head", "summary"]
prompt = json.load(open(sys.argv[3]))["prompt_tokens"]
launches = sum(len(f) for f in forwards[1:]) / max(len(forwards) - 1, 1)
print(f"{sys.argv[2].split('/')[-1]}: {layers} layers, a prompt of {prompt} tokens (its pass runs "
      f"{prompt - 1}), " + ("timestamps after each direct launch" if sys.argv[4] == "direct"
      else "CubeCL's per-kernel timings (profiling on)") + f", {launches:.0f} launches a "
      f"decoded token")
print("| kernel | prompt pass (ms) | share | per decoded token (ms) | share | weights read a token (GB/s) |")
print("|---|---|---|---|---|---|")
tp = sum(prefill.values())
td = [sum(d.values()) for d in decode]
n = max(len(decode), 1)
tdm = sum(td) / n
for k in keys:
    p = prefill.get(k, 0.0)
    d = sum(x.get(k, 0.0) for x in decode) / n
    if p == 0.0 and d == 0.0:
        continue
    rate = f"{matrix_bytes[k] / 1e6 / d:.3g}" if k in matrix_bytes and d > 0 else ""
    print(f"| {k} | {p:.1f} | {100 * p / tp:.0f} % | {d:.1f} | {100 * d / max(tdm, 1e-9):.0f} % | {rate} |")
every = sum(matrix_bytes.values())
print(f"| all | {tp:.1f} | | {tdm:.1f} | | {every / 1e6 / max(tdm, 1e-9):.3g} (the products' weights over the token) |")
PY
