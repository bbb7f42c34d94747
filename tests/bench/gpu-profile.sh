#!/usr/bin/env bash
# Where a token's time goes on the GPU path: `mars generate --device wgpu` with CubeCL's
# profiling log on (each kernel waited for and timed: slower than a normal run, so read the
# shares, not the sum), then every forward pass split by the launch order the GPU path uses
# (embedding; per layer norm, q|k|v, RoPE, attention, o, norm, gate|up, down; final norm, head;
# the summary) and the time per kernel summed for the prompt's pass and per decoded token.
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
# MARS_GPU_NORM=apart MARS_GPU_ROPE=apart: the norms and RoPE in launches of their own, as the
# split below reads a forward (a decode on a card otherwise folds the norms into q|k|v and
# gate|up and RoPE into attention: what this profile shows they cost).
MARS_GPU_NORM=apart MARS_GPU_ROPE=apart CUBECL_DEBUG_LOG="$log" CUBECL_DEBUG_OPTION=profile "$MARS_BIN" \
  generate --model "$model" --device wgpu --prompt "$(echo "$prompt" | cut -d' ' -f1-"$pp")" \
  --max-tokens "$tg" --json >"$json" 2>/dev/null
python3 - "$log" "$model" "$json" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("| ")]
def ms(t):
    t = t.strip()
    for unit, f in (("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6), ("s", 1e3)):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * f
    return 0.0
runs = [(ms(l.split("|")[1]), l.split("|")[2].strip()) for l in lines]
runs = [r for r in runs if r[1].startswith("Shader_")]
# A forward starts with the embedding lookup: the first kernel the model launches (two or more
# launches in a row where the table is split over bindings, as the Qwen embeddings are).
embed = runs[0][1]
starts = [i for i, r in enumerate(runs) if r[1] == embed and (i == 0 or runs[i - 1][1] != embed)]
def split(fw):
    # RMSNorm is the kernel launched most (twice a layer and once at the end); the launches
    # between norms are, after the attention norm: q|k|v (one launch, more where the group's
    # types differ), RoPE, attention, o; after the FFN norm: gate|up, down; after the last:
    # the head (one launch per part of a split matrix) and the summary.
    names = [n for _, n in fw]
    norm = max(set(names), key=names.count)
    cuts = [i for i, n in enumerate(names) if n == norm]
    out = {"embedding": sum(t for t, _ in fw[: cuts[0]])}
    def add(k, xs):
        out[k] = out.get(k, 0.0) + sum(t for t, _ in xs)
    for j, c in enumerate(cuts):
        seg = fw[c + 1 : cuts[j + 1] if j + 1 < len(cuts) else len(fw)]
        add("final norm" if j == len(cuts) - 1 else "norm", [fw[c]])
        if j == len(cuts) - 1:
            add("head", seg[:-1])
            add("summary", seg[-1:])
        elif j % 2 == 0:
            add("q|k|v", seg[:-3])
            add("rope", seg[-3:-2])
            add("attention", seg[-2:-1])
            add("o + residual", seg[-1:])
        else:
            add("gate|up + SiLU", seg[:-1])
            add("down + residual", seg[-1:])
    return out, (len(cuts) - 1) // 2
order = ["norm", "q|k|v", "rope", "attention", "o + residual", "gate|up + SiLU", "down + residual"]
forwards = [runs[a:b] for a, b in zip(starts, starts[1:] + [len(runs)])]
prefill, layers = split(forwards[0])
decode = [split(f)[0] for f in forwards[1:]]
keys = ["embedding"] + list(dict.fromkeys(order)) + ["final norm", "head", "summary"]
prompt = json.load(open(sys.argv[3]))["prompt_tokens"]
print(f"{sys.argv[2].split('/')[-1]}: {layers} layers, a prompt of {prompt} tokens (its pass runs "
      f"{prompt - 1}), CubeCL's per-kernel timings (profiling on)")
print("| kernel | prompt pass (ms) | share | per decoded token (ms) | share |")
print("|---|---|---|---|---|")
tp = sum(prefill.values())
td = [sum(d.values()) for d in decode]
n = max(len(decode), 1)
tdm = sum(td) / n
for k in keys:
    p = prefill.get(k, 0.0)
    d = sum(x.get(k, 0.0) for x in decode) / n
    print(f"| {k} | {p:.1f} | {100 * p / tp:.0f} % | {d:.1f} | {100 * d / max(tdm, 1e-9):.0f} % |")
print(f"| all | {tp:.1f} | | {tdm:.1f} | |")
PY
