#!/usr/bin/env bash
# mars beside llama.cpp on the same GGUF file, the same thread count, in one run: `mars speed`
# (decode, prefill, rows-cost curve, resident memory), then llama-bench (tg, pp), then the
# ratios. The two alternate for ROUNDS rounds (default 3), medians by tests/bench/rounds.py.
# A benchmark command, not a CI step (minutes per model).
#   usage: bash tests/bench/bench.sh cpu MODEL.gguf [THREADS] [PROMPT_TOKENS] [DECODE_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bench.sh cpu MODEL.gguf [THREADS] [PROMPT_TOKENS] [DECODE_TOKENS]}
threads=${2:-$(nproc)}
pp=${3:-128}
tg=${4:-64}
rounds=${ROUNDS:-3}
[ -f "$model" ] || { echo "no such model file: $model" >&2; exit 1; }
bin=$(bash tests/bench/llama-cpp.sh)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. tests/bench/lib.sh
mars=$(mars_bin)
for r in $(seq 1 "$rounds"); do
  "$mars" speed --model "$model" --threads "$threads" \
    --prompt-tokens "$pp" --decode-tokens "$tg" >"$out/mars.$r.json"
  # -r 2: llama-bench's repetitions; -p/-n as separate tests (prefill only, decode only).
  LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$model" -t "$threads" -p "$pp" -n 0 -r 2 -o json \
    >"$out/pp.$r.json" 2>"$out/llama-bench.log"
  # -d: decode from the same depth as mars speed does (after its PROMPT_TOKENS-token prompt).
  LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$model" -t "$threads" -p 0 -n "$tg" -d "$pp" -r 2 -o json \
    >"$out/tg.$r.json" 2>>"$out/llama-bench.log"
done
python3 - "$model" "$threads" "$out" "$rounds" <<'PY'
import json, os, sys
sys.path.insert(0, "tests/bench")
from rounds import median, peer_table
model, threads, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = []
for r in range(1, rounds + 1):
    runs.append({"m": json.load(open(f"{out}/mars.{r}.json")),
                 "pp": json.load(open(f"{out}/pp.{r}.json"))[0]["avg_ts"],
                 "tg": json.load(open(f"{out}/tg.{r}.json"))[0]["avg_ts"]})
size = os.path.getsize(model)
m = runs[-1]["m"]
print(f"{os.path.basename(model)}, {threads} threads ({m['weights']} weights), "
      f"{rounds} alternating rounds")
print(peer_table(runs, [
    ("decode tok/s", lambda x: x["m"]["decode_tokens_per_second"], lambda x: x["tg"], "{:.1f}"),
    ("prefill tok/s", lambda x: x["m"]["prefill_tokens_per_second"], lambda x: x["pp"], "{:.1f}"),
], "llama.cpp"))
curves = [{int(k): v / run["m"]["forward_ms_by_rows"]["1"] for k, v in run["m"]["forward_ms_by_rows"].items()}
          for run in runs]
print("forward cost by rows (mars, relative to 1 row, median of rounds): " +
      ", ".join(f"{k}: {median([c[k] for c in curves]):.2f}x" for k in sorted(curves[0])))
rss, anon, kv = m.get("resident_bytes"), m.get("anonymous_resident_bytes"), m.get("kv_cache_bytes", 0)
if rss and anon:
    print(f"resident memory {rss/2**20:.0f} MiB in all; without the binary's code pages (RssAnon) "
          f"{anon/2**20:.0f} MiB = {(anon - kv)/size:.2f}x the file ({size/2**20:.0f} MiB) "
          f"+ KV cache {kv/2**20:.0f} MiB")
PY
