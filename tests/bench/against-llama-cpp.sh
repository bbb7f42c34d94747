#!/usr/bin/env bash
# mars beside llama.cpp on the same GGUF file, the same thread count, in one run: `mars speed`
# (decode, prefill, rows-cost curve, resident memory), then llama-bench (tg, pp), then the
# ratios. The two alternate for ROUNDS rounds (default 3) and each ratio is taken within a round,
# then the median printed: this machine's memory speed drifts by up to ~1.5x over minutes, so
# one mars run against one llama.cpp run minutes apart measures the drift as much as the code.
# A benchmark command, not a CI step (minutes per model).
#   usage: bash tests/bench/against-llama-cpp.sh MODEL.gguf [THREADS] [PROMPT_TOKENS] [DECODE_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: against-llama-cpp.sh MODEL.gguf [THREADS] [PROMPT_TOKENS] [DECODE_TOKENS]}
threads=${2:-$(nproc)}
pp=${3:-128}
tg=${4:-64}
rounds=${ROUNDS:-3}
[ -f "$model" ] || { echo "no such model file: $model" >&2; exit 1; }
bin=$(bash tests/bench/llama-cpp.sh)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -q
for r in $(seq 1 "$rounds"); do
  "${CARGO_TARGET_DIR:-target}/release/mars" speed --model "$model" --threads "$threads" \
    --prompt-tokens "$pp" --decode-tokens "$tg" >"$out/mars.$r.json"
  # -r 2: llama-bench's repetitions; -p/-n as separate tests (prefill only, decode only).
  LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$model" -t "$threads" -p "$pp" -n 0 -r 2 -o json \
    >"$out/pp.$r.json" 2>"$out/llama-bench.log"
  # -d: decode from the same depth as mars speed does (after its PROMPT_TOKENS-token prompt).
  LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$model" -t "$threads" -p 0 -n "$tg" -d "$pp" -r 2 -o json \
    >"$out/tg.$r.json" 2>>"$out/llama-bench.log"
done
python3 - "$model" "$threads" "$out" "$rounds" <<'PY'
import json, os, statistics, sys
model, threads, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = []
for r in range(1, rounds + 1):
    m = json.load(open(f"{out}/mars.{r}.json"))
    pp = json.load(open(f"{out}/pp.{r}.json"))[0]["avg_ts"]
    tg = json.load(open(f"{out}/tg.{r}.json"))[0]["avg_ts"]
    runs.append((m, pp, tg))
size = os.path.getsize(model)
m = runs[-1][0]
print(f"{os.path.basename(model)}, {threads} threads ({'packed' if m['packed'] else 'f32'} mars path), "
      f"{rounds} alternating rounds")
print(f"{'':24}{'mars':>10}{'llama.cpp':>12}{'ratio':>8}   ratio by round")
for name, key, i in [("decode tok/s", "decode_tokens_per_second", 2),
                     ("prefill tok/s", "prefill_tokens_per_second", 1)]:
    ratios = [run[0][key] / run[i] for run in runs]
    med = statistics.median(ratios)
    print(f"{name:24}{statistics.median(run[0][key] for run in runs):10.1f}"
          f"{statistics.median(run[i] for run in runs):12.1f}{med:7.2f}x   "
          + " ".join(f"{x:.2f}" for x in ratios))
curves = [{int(k): v / run[0]["forward_ms_by_rows"]["1"] for k, v in run[0]["forward_ms_by_rows"].items()}
          for run in runs]
print("forward cost by rows (mars, relative to 1 row, median of rounds): " +
      ", ".join(f"{k}: {statistics.median(c[k] for c in curves):.2f}x" for k in sorted(curves[0])))
rss, anon, kv = m.get("resident_bytes"), m.get("anonymous_resident_bytes"), m.get("kv_cache_bytes", 0)
if rss and anon:
    print(f"resident memory {rss/2**20:.0f} MiB in all; without the binary's code pages (RssAnon) "
          f"{anon/2**20:.0f} MiB = {(anon - kv)/size:.2f}x the file ({size/2**20:.0f} MiB) "
          f"+ KV cache {kv/2**20:.0f} MiB")
PY
