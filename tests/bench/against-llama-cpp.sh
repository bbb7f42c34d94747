#!/usr/bin/env bash
# mars beside llama.cpp on the same GGUF file, the same thread count, in one run: `mars speed`
# (decode, prefill, rows-cost curve, resident memory), then llama-bench (tg, pp), then the
# ratios. A benchmark command, not a CI step (minutes per model).
#   usage: bash tests/bench/against-llama-cpp.sh MODEL.gguf [THREADS] [PROMPT_TOKENS] [DECODE_TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: against-llama-cpp.sh MODEL.gguf [THREADS] [PROMPT_TOKENS] [DECODE_TOKENS]}
threads=${2:-$(nproc)}
pp=${3:-128}
tg=${4:-64}
[ -f "$model" ] || { echo "no such model file: $model" >&2; exit 1; }
bin=$(bash ../shared/tools/llama-cpp.sh)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release -q
"${CARGO_TARGET_DIR:-target}/release/mars" speed --model "$model" --threads "$threads" \
  --prompt-tokens "$pp" --decode-tokens "$tg" >"$out/mars.json"
# -r 3: llama-bench's repetitions; -p/-n as separate tests (prefill only, decode only).
LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$model" -t "$threads" -p "$pp" -n 0 -r 3 -o json \
  >"$out/pp.json" 2>"$out/llama-bench.log"
LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$model" -t "$threads" -p 0 -n "$tg" -r 3 -o json \
  >"$out/tg.json" 2>>"$out/llama-bench.log"
python3 - "$model" "$threads" "$out" <<'PY'
import json, os, sys
model, threads, out = sys.argv[1], sys.argv[2], sys.argv[3]
m = json.load(open(f"{out}/mars.json"))
pp = json.load(open(f"{out}/pp.json"))[0]["avg_ts"]
tg = json.load(open(f"{out}/tg.json"))[0]["avg_ts"]
size = os.path.getsize(model)
rows = m["forward_ms_by_rows"]
one = rows["1"]
print(f"{os.path.basename(model)}, {threads} threads ({'packed' if m['packed'] else 'f32'} mars path)")
print(f"{'':24}{'mars':>10}{'llama.cpp':>12}{'ratio':>8}")
print(f"{'decode tok/s':24}{m['decode_tokens_per_second']:10.1f}{tg:12.1f}{m['decode_tokens_per_second']/tg:7.2f}x")
print(f"{'prefill tok/s':24}{m['prefill_tokens_per_second']:10.1f}{pp:12.1f}{m['prefill_tokens_per_second']/pp:7.2f}x")
print("forward cost by rows (mars, relative to 1 row): " +
      ", ".join(f"{k}: {v/one:.2f}x" for k, v in sorted(rows.items(), key=lambda kv: int(kv[0]))))
rss, anon, kv = m.get("resident_bytes"), m.get("anonymous_resident_bytes"), m.get("kv_cache_bytes", 0)
if rss and anon:
    print(f"resident memory {rss/2**20:.0f} MiB in all; without the binary's code pages (RssAnon) "
          f"{anon/2**20:.0f} MiB = {(anon - kv)/size:.2f}x the file ({size/2**20:.0f} MiB) "
          f"+ KV cache {kv/2**20:.0f} MiB")
PY
