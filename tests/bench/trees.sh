#!/usr/bin/env bash
# Chains against token trees on the Qwen2.5-Coder pair (1.5B target, 0.5B draft model, draft ids
# < 32768), packed CPU: one `mars compare` run per shape (each with its own target-only
# baseline), strict and MARS, then one table: τ (tokens per target pass), rows verified per
# step, tok/s and speedup over target-only, MARS's relaxed share and moved mass, time per step
# in the draft and in the target pass, peak memory. A benchmark command, not a CI step
# (~2 min per shape on 6 prompts, 2 threads).
#   usage: bash tests/bench/bench.sh trees [CATEGORY] [PROMPTS] [TEMPERATURE] [SEED] [THETA] [SHAPES...]
# SHAPE: k3 (a chain of 3), or t16k5b4 (a tree of ≤ 16 nodes, depth 5, 4 children per node),
# t16k8b4p0.1 (the same at depth 8 keeping only nodes whose path's draft probability ≥ 0.1).
# LLAMA=1: then llama.cpp's own speculation on the same files, prompts, temperature and threads
# (`llama-speculative`, the draft model's tree: k3 -> -np 1 --spec-draft-n-max 3; t16k5b4 -> -np 4
# --spec-draft-n-max 5, up to 4 branches of depth 5, a branch split where the draft's p > 0.1,
# llama.cpp's default) and llama-bench's target-only decode, in the same table. At T > 0 its
# samplers are set to plain sampling at T (top-k 0, top-p 1, min-p 0), as mars samples. A run
# that aborts (llama-speculative 0.3.36 with -np > 1 at T > 0 fails GGML_ASSERT(logits !=
# nullptr) on most prompts) is counted and left out of its row.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/bench/lib.sh
spec=$(spec_bench)
category=${1:-coding}
limit=${2:-6}
temp=${3:-0}
seed=${4:-0}
theta=${5:-0.95}
shift $(($# < 5 ? $# : 5))
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(k3 k7 t8k4b2 t16k5b4)
need_pair
target=$BENCH_PAIR_TARGET draft=$BENCH_PAIR_DRAFT
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mars=$(mars_bin)
echo "== $category (first $limit prompts), T = $temp, seed $seed, MARS θ $theta, 64 tokens, 2 threads"
for shape in "${shapes[@]}"; do
  if [[ $shape =~ ^k([0-9]+)$ ]]; then
    args=(--k "${BASH_REMATCH[1]}")
  elif [[ $shape =~ ^t([0-9]+)k([0-9]+)b([0-9]+)(p([0-9.]+))?$ ]]; then
    args=(--tree "${BASH_REMATCH[1]}" --k "${BASH_REMATCH[2]}" --branch "${BASH_REMATCH[3]}" --tree-min-p "${BASH_REMATCH[5]:-0}")
  else
    echo "bad shape $shape (k3, t16k5b4)" >&2; exit 2
  fi
  /usr/bin/time -f "%M" -o "$out/$shape.mem" "$mars" compare --device cpu --model "$target" --draft "model:$draft" \
    --draft-vocab 32768 --threads 2 --chat --max-tokens 64 --prompts "$spec" --category "$category" --limit "$limit" \
    --temperature "$temp" --seed "$seed" --theta "$theta" --json "${args[@]}" >"$out/$shape.json" 2>"$out/$shape.log" \
    || { tail -3 "$out/$shape.log" >&2; exit 1; }
done
if [ "${LLAMA:-0}" = 1 ]; then
  bin=$(bash tests/bench/llama-cpp.sh)
  python3 tests/bench/llama-spec.py prompts "$category" "$limit" "$out"
  if [ "$temp" = 0 ]; then sampling=(--temp 0 --top-k 1); else sampling=(--temp "$temp" --top-k 0 --top-p 1 --min-p 0 --seed "$seed"); fi
  for shape in "${shapes[@]}"; do
    if [[ $shape =~ ^k([0-9]+)$ ]]; then np=1; depth=${BASH_REMATCH[1]}
    else [[ $shape =~ ^t([0-9]+)k([0-9]+)b([0-9]+) ]]; np=${BASH_REMATCH[3]}; depth=${BASH_REMATCH[2]}; fi
    for p in "$out"/p*.txt; do
      LD_LIBRARY_PATH="$bin" /usr/bin/time -f "%M" -a -o "$out/$shape.llama.mem" "$bin/llama-speculative" \
        -m "$target" -md "$draft" -f "$p" -n 64 -t 2 -np "$np" --spec-draft-n-max "$depth" -c 4096 "${sampling[@]}" \
        >/dev/null 2>>"$out/$shape.llama.log" || echo "ABORTED $(basename "$p")" >>"$out/$shape.llama.log"
    done
    python3 tests/bench/llama-spec.py summary "$out/$shape.llama.log" >"$out/$shape.llama.json"
  done
  LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$target" -t 2 -p 0 -n 64 -r 3 -o json 2>/dev/null >"$out/llama-target.json"
fi
python3 - "$out" "${shapes[@]}" <<'PY'
import json, os, sys
out, shapes = sys.argv[1], sys.argv[2:]
print("| shape | method | τ | rows/step | tok/s | × target-only | relaxed | moved mass/token | draft ms/step | target ms/step | peak MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for shape in shapes:
    d = json.load(open(f"{out}/{shape}.json"))
    mem = int(open(f"{out}/{shape}.mem").read().split()[-1]) / 1024
    agg = {}
    for p in d["prompts"]:
        for m in ("target", "strict", "mars"):
            r, a = p[m], agg.setdefault(m, dict(tok=0, s=0.0, fw=0, dr=0, rel=0, dist=0.0, dms=0.0, vms=0.0))
            a["tok"] += r["tokens"]; a["s"] += r["tokens"] / r["tokens_per_second"]
            a["fw"] += r["target_forwards"]; a["dr"] += r["drafted"]; a["rel"] += r["relaxed"]
            a["dist"] += r.get("ledger", {}).get("distance", 0.0) if m == "mars" else 0.0
            a["dms"] += r["draft_ms"]; a["vms"] += r["verify_ms"]
    base = agg["target"]["tok"] / agg["target"]["s"]
    for m in ("strict", "mars"):
        a = agg[m]
        tps = a["tok"] / a["s"]
        rel = f"{a['rel'] / a['tok']:.1%}" if m == "mars" else "—"
        dist = f"{a['dist'] / a['tok']:.4f}" if m == "mars" else "—"
        print(f"| {shape} | {m} | {a['tok'] / a['fw']:.2f} | {1 + a['dr'] / a['fw']:.1f} | {tps:.1f} | "
              f"{tps / base:.2f}× | {rel} | {dist} | {a['dms'] / a['fw']:.0f} | {a['vms'] / a['fw']:.0f} | {mem:.0f} |")
print(f"target-only in the last shape's run: {base:.1f} tok/s, {1e3 * agg['target']['s'] / agg['target']['tok']:.0f} ms per token")
if os.path.exists(f"{out}/llama-target.json"):
    llama_base = json.load(open(f"{out}/llama-target.json"))[0]["avg_ts"]
    print()
    print("| shape | llama.cpp `llama-speculative` | τ | rows/step | tok/s | × its target-only | × mars strict, same shape | peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        s = json.load(open(f"{out}/{shape}.llama.json"))
        # An aborted run's line is "Command terminated by signal 6" before its figure.
        mem = max(int(x) for x in open(f"{out}/{shape}.llama.mem").read().split() if x.isdigit()) / 1024
        d = json.load(open(f"{out}/{shape}.json"))
        tok = sum(p["strict"]["tokens"] for p in d["prompts"])
        secs = sum(p["strict"]["tokens"] / p["strict"]["tokens_per_second"] for p in d["prompts"])
        print(f"| {shape} | {s['runs']} runs ({s['aborted']} aborted), acceptance {s['acceptance']:.0%} | {s['tau']:.2f} | {s['rows_per_pass']:.1f} | "
              f"{s['tokens_per_second']:.1f} | {s['tokens_per_second'] / llama_base:.2f}× | "
              f"{s['tokens_per_second'] / (tok / secs):.2f}× | {mem:.0f} |")
    print(f"llama.cpp target-only (llama-bench tg64, 2 threads): {llama_base:.1f} tok/s")
PY
