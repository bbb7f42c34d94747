#!/usr/bin/env bash
# Speculative decoding on the Qwen2.5-Coder pair (1.5B target, 0.5B draft model), greedy, chat
# template, beside llama.cpp's own speculative decoding on the same files, prompts, k and
# threads: `mars bench` (target-only, strict, MARS; per category) then llama-speculative-simple
# per prompt, then llama-bench's target-only decode. A benchmark command, not a CI step.
#   usage: bash tests/bench/bench.sh pair [K] [MAX_TOKENS] [CATEGORY] [THREADS] [DRAFT_VOCAB]
# DRAFT_VOCAB: mars's draft model proposes only token ids below it (`--draft-vocab`); llama.cpp's
# run always drafts over the whole vocabulary.
set -euo pipefail
cd "$(dirname "$0")/../.."
k=${1:-4}
max=${2:-64}
category=${3:-coding}
threads=${4:-$(nproc)}
vocab=${5:-}
. tests/bench/lib.sh
need_pair
target=$BENCH_PAIR_TARGET draft=$BENCH_PAIR_DRAFT
bin=$(bash tests/bench/llama-cpp.sh)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
spec=$(spec_bench)
python3 - "$category" "$spec" >"$out/prompts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[2]):
    if json.loads(line).get("category") == sys.argv[1]:
        sys.stdout.write(line)
PY
echo "== mars: $(wc -l <"$out/prompts.jsonl") $category prompts, k = $k, $max tokens, $threads threads"
"$(mars_bin)" bench --device cpu --chat --model "$target" --draft "model:$draft" \
  --k "$k" --max-tokens "$max" --threads "$threads" --prompts "$out/prompts.jsonl" --out "$out/mars" \
  ${vocab:+--draft-vocab "$vocab"}
echo "== llama.cpp llama-speculative-simple, same prompts (ChatML), --spec-draft-n-max $k"
python3 tests/bench/llama-spec.py prompts "$category" 0 "$out"
for p in "$out"/p*.txt; do
  LD_LIBRARY_PATH="$bin" "$bin/llama-speculative-simple" -m "$target" -md "$draft" --spec-type draft-simple -f "$p" \
    -n "$max" --temp 0 --top-k 1 -t "$threads" --spec-draft-n-max "$k" --spec-draft-n-min 0 \
    -c 4096 >>"$out/spec.log" 2>&1 || true
done
python3 tests/bench/llama-spec.py summary "$out/spec.log" | python3 -c "import json,sys; s=json.load(sys.stdin); \
print(f\"llama.cpp speculative: {s['tokens']} tokens in {s['seconds']:.1f} s = {s['tokens_per_second']:.2f} tok/s; \
drafts accepted {s['accepted']}/{s['drafted']} = {s['acceptance']:.0%}\")"
LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$target" -t "$threads" -p 0 -n "$max" -r 3 -o json \
  2>/dev/null | python3 -c "import json,sys; print(f'llama.cpp target-only decode (llama-bench tg$max): {json.load(sys.stdin)[0][\"avg_ts\"]:.2f} tok/s')"
