#!/usr/bin/env bash
# mars on wgpu beside llama.cpp's Vulkan backend on the same GGUF file and the same adapter, in
# one run, taking turns for ROUNDS rounds (default 3; medians by tests/bench/rounds.py): decode, prefill, and the cost of a pass of 1, 5 and 16 rows (a
# verification pass of k + 1 rows) against llama.cpp's batches of 1, 5 and 16 tokens; mars's
# GPU counts (launches per layer and per token, pipelines compiled after warm-up, uploads and
# reads per token) and peak memory beside them. On a machine without a GPU the adapter is
# lavapipe (Mesa's Vulkan on the CPU; llama.cpp skips CPU devices unless told, hence
# GGML_VK_VISIBLE_DEVICES=0); on a real GPU the same command measures it. A benchmark command,
# not a CI step (minutes per model on lavapipe).
#   usage: bash tests/bench/bench.sh gpu-peers MODEL.gguf [PROMPT_TOKENS] [DECODE_TOKENS]
#   env:   ROUNDS (3), THREADS (the cores: llama.cpp's CPU threads; lavapipe uses every core),
#          MARS_BIN (a built mars; else cargo builds it), LLAMA_VK_BIN (llama.cpp's Vulkan bin
#          directory; else tests/bench/llama-cpp.sh builds it), KEEP (a directory: mars's
#          last-round `speed` JSON is kept there as MODEL.speed.json, for gpu-price.py)
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bench.sh gpu-peers MODEL.gguf [PROMPT_TOKENS] [DECODE_TOKENS]}
pp=${2:-64}
tg=${3:-32}
rounds=${ROUNDS:-3}
threads=${THREADS:-$(nproc)}
[ -f "$model" ] || { echo "no such model file: $model" >&2; exit 1; }
bin=${LLAMA_VK_BIN:-$(bash tests/bench/llama-cpp.sh vulkan)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. tests/bench/lib.sh
mars=$(mars_bin)
bench() { # llama-bench on the first Vulkan device, all layers on it; its peak RSS to $2
  GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0} LD_LIBRARY_PATH="$bin" \
    /usr/bin/time -f %M -o "$2" "$bin/llama-bench" -m "$model" -ngl 99 -t "$threads" -r 1 -o json "${@:3}" \
    >"$1" 2>>"$out/llama-bench.log" || { tail -5 "$out/llama-bench.log" >&2; return 1; }
}
for r in $(seq 1 "$rounds"); do
  /usr/bin/time -f %M -o "$out/mars-rss.$r" "$mars" speed --model "$model" --device wgpu \
    --prompt-tokens "$pp" --decode-tokens "$tg" >"$out/mars.$r.json" 2>"$out/mars.$r.log" \
    || { tail -5 "$out/mars.$r.log" >&2; exit 1; }
  bench "$out/pp.$r.json" "$out/pp-rss.$r" -p "$pp" -n 0
  # -d: decode from the depth mars speed decodes at (after its prompt).
  bench "$out/tg.$r.json" "$out/tg-rss.$r" -p 0 -n "$tg" -d "$pp"
  # Batches of 5 and 16 tokens after the prompt: a verification pass of that many rows.
  bench "$out/b5.$r.json" "$out/b-rss.$r" -p 5 -n 0 -d "$pp"
  bench "$out/b16.$r.json" "$out/b-rss.$r" -p 16 -n 0 -d "$pp"
done
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP" && cp "$out/mars.$rounds.json" "$KEEP/$(basename "$model" .gguf).speed.json"
fi
python3 - "$model" "$out" "$rounds" "$pp" "$tg" <<'PY'
import json, os, sys
sys.path.insert(0, "tests/bench")
from rounds import peer_table
model, out, rounds, pp, tg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def ts(kind, r):
    return json.load(open(f"{out}/{kind}.{r}.json"))[0]["avg_ts"]
runs = []
for r in range(1, rounds + 1):
    m = json.load(open(f"{out}/mars.{r}.json"))
    runs.append({"m": m, "pp": ts("pp", r), "tg": ts("tg", r), "b5": 5e3 / ts("b5", r),
                 "b16": 16e3 / ts("b16", r), "b1": 1e3 / ts("tg", r),
                 "mars_rss": int(open(f"{out}/mars-rss.{r}").read()) * 1024,
                 "llama_rss": max(int(open(f"{out}/{k}-rss.{r}").read()) for k in ("pp", "tg", "b")) * 1024})
m = runs[-1]["m"]
print(f"{os.path.basename(model)} on {m['adapter']}: {rounds} alternating rounds, "
      f"prompt {pp} tokens, decode {tg}")
print(peer_table(runs, [
    ("decode tok/s", lambda x: x["m"]["decode_tokens_per_second"], lambda x: x["tg"], "{:.2f}"),
    ("prefill tok/s", lambda x: x["m"]["prefill_tokens_per_second"], lambda x: x["pp"], "{:.2f}"),
] + [
    (f"ms for a pass of {rows} rows (llama.cpp: a batch of {rows})",
     lambda x, r=rows: x["m"]["forward_ms_by_rows"][str(r)], lambda x, k=key: x[k], "{:.0f}")
    for rows, key in [(1, "b1"), (5, "b5"), (16, "b16")]
] + [
    ("peak RSS (MiB)", lambda x: x["mars_rss"] / 2**20, lambda x: x["llama_rss"] / 2**20, "{:.0f}"),
], "llama.cpp (Vulkan)", "mars (wgpu)"))
# A first load as a user meets it (the first round's: a card tunes the shapes its table lacks
# then, and reads the table after); a build without these fields says nothing.
if "load_seconds" in runs[0]["m"]:
    loads = "; ".join(f"{x['m']['load_seconds']:.1f} s + tuning {x['m']['tune_seconds']:.1f} s"
                      f" + warming up {x['m']['warm_up_seconds']:.1f} s" for x in runs)
    print(f"\nmars's load by round (the file read and uploaded, a card's tuning, the first short run): {loads}")
g = m.get("gpu")
if g:
    f, t = g["forward_of_one_row"], g["per_token"]
    kinds = ", ".join(f"{k} {v}" for k, v in f["by_kind"].items() if v)
    print(f"\nmars, counted: one forward of one row = {f['launches']} launches ({kinds}); "
          f"{f['launches_per_layer']:.1f} per layer; {f['uploads']} upload ({f['upload_bytes']} B); "
          f"{f.get('left_to_cubecl', 0)} left to CubeCL (a pipeline wgpu refused)")
    print(f"mars, counted per decoded token: {t['launches']:.1f} launches, {t['uploads']:.2f} uploads "
          f"({t['upload_bytes']:.0f} B), {t['reads']:.2f} reads ({t['read_bytes']:.0f} B); "
          f"pipelines compiled after warm-up: {g['pipelines_compiled_after_warm_up']}")
# What the peer's build and the device gave it: integer dot products, matrix cores (its own line).
device = [l.strip() for l in open(f"{out}/llama-bench.log", errors="replace") if l.startswith("ggml_vulkan: 0 = ")]
if device:
    print(f"\nllama.cpp's device: {device[0].removeprefix('ggml_vulkan: 0 = ')}")
PY
