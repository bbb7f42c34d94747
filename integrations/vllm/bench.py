"""vLLM on this machine's CPU with the plugin: plain decoding, then speculation verified strict and
with MARS, on the same prompts, engine, threads and token budget. Prints a markdown table.

Usage (bench.sh sets up the venv and the converted models):
  python bench.py --target DIR [--draft ngram|DIR] [--category C] [--limit N] [--max-tokens T]
                  [--temperature T] [--k K] [--rounds R] [--modes strict,default,theta:0.9,rho:0.5]

One process for plain decoding, one for speculation; in the second the modes run in turn, round
after round (strict, MARS, strict, MARS, ...) so that drift in the machine's speed is shared. Per
mode: tokens per second over all rounds, its ratio to plain decoding, τ (tokens per verification
step: 1 + accepted / draft steps, vLLM's mean acceptance length), acceptance per draft position,
the plugin's relaxed positions and keeps, and the ledger's distance. Peak RSS per engine process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "tests" / "run_vllm.py"
# One prompt through each engine first, not counted: the first steps pay one-off set-up.
WARM_UP = {"name": "warm-up", "mars": [None]}


def prompts(path: Path, category: str, limit: int) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if category in ("all", row.get("category")):
            out.append(row["turns"][0])
        if len(out) == limit:
            break
    return out


def engine(spec: dict[str, Any], env: dict[str, str], tmp: Path, name: str) -> dict[str, Any]:
    spec_path, out_path, log_path = (tmp / f"{name}.json", tmp / f"{name}.out", tmp / f"{name}.log")
    spec_path.write_text(json.dumps(spec))
    with open(log_path, "w") as log:
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(spec_path), str(out_path)],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        sys.exit(f"{name} failed; its log: {log_path}\n" + log_path.read_text()[-4000:])
    return json.loads(out_path.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default="ngram")
    # Spec-Bench in mars's data cache (tests/fetch-spec-bench.sh writes it).
    data = Path(os.environ.get("MARS_DATA_DIR", Path.home() / ".cache" / "mars" / "data"))
    ap.add_argument("--prompts", default=str(data / "spec_bench.jsonl"))
    ap.add_argument("--category", default="coding")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0, help="per-request seeds start here (T > 0)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="send the prompts one by one (latency) instead of as one batch (throughput)",
    )
    ap.add_argument("--modes", default="strict,default,theta:0.9,rho:0.5")
    args = ap.parse_args()

    texts = prompts(Path(args.prompts), args.category, args.limit)
    if not texts:
        sys.exit(f"no prompts in category {args.category!r} of {args.prompts}")
    modes = args.modes.split(",")
    base = {
        "model": args.target,
        "prompts": texts,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "request_seed": args.seed if args.temperature > 0 else None,
        "ignore_eos": True,
        "sequential": args.one_at_a_time,
    }
    n = len(texts)
    env = {"MARS_VLLM_MODE": "", "MARS_VLLM_LOG_INTERVAL": "0"}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        plain = engine(
            {
                **base,
                "runs": [{"name": f"plain-{r}", "mars": [None] * n} for r in range(args.rounds)],
            },
            env,
            tmp,
            "plain",
        )
        runs = [WARM_UP] + [
            {"name": f"{m}#{r}", "mars": [None if m == "strict" else m] * n}
            for r in range(args.rounds)
            for m in modes
        ]
        spec = engine({**base, "draft": args.draft, "k": args.k, "runs": runs}, env, tmp, "spec")

    def tok_s(rs: list[dict[str, Any]]) -> float:
        tokens = sum(len(t) for r in rs for t in r["tokens"])
        return tokens / sum(r["seconds"] for r in rs)

    plain_tok_s = tok_s([r for r in plain["runs"] if r["name"] != WARM_UP["name"]])
    draft = "prompt lookup (n-gram)" if args.draft == "ngram" else Path(args.draft).name
    print(
        f"target {Path(args.target).name}, draft {draft}, k = {args.k}, {n} {args.category} "
        f"prompts, {args.max_tokens} tokens each (ignore_eos), T = {args.temperature}, "
        f"{args.rounds} rounds, {'one request at a time' if args.one_at_a_time else 'one batch'}; "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'vLLM default')}"
    )
    print(
        f"peak RSS: plain {plain['peak_rss_mib']:.0f} MiB, "
        f"speculative {spec['peak_rss_mib']:.0f} MiB"
    )
    print()
    print(
        "| mode | tok/s | vs plain | τ | acceptance per position | relaxed / examined | "
        "kept by relaxation | ledger distance |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print(f"| plain decoding | {plain_tok_s:.2f} | 1.00 | — | — | — | — | — |")
    for m in modes:
        rs = [r for r in spec["runs"] if r["name"].split("#")[0] == m]
        steps = sum(r["spec"]["steps"] for r in rs)
        accepted = sum(r["spec"]["accepted"] for r in rs)
        per_pos = [sum(r["spec"]["per_pos"][i] for r in rs) for i in range(args.k)]
        rate = " / ".join(f"{a / max(steps, 1):.2f}" for a in per_pos)
        relaxed = sum(r["mars"]["relaxed_positions"] for r in rs)
        examined = sum(r["mars"]["examined"] for r in rs)
        kept = sum(r["mars"]["relaxed_accepts"] for r in rs)
        distance = sum(r["mars"]["distance"] for r in rs)
        speed = tok_s(rs)
        mars_cells = (
            "— | — | —"
            if m == "strict"
            else f"{relaxed:.0f} / {examined:.0f} | {kept:.0f} | {distance:.2f}"
        )
        print(
            f"| {m} | {speed:.2f} | {speed / plain_tok_s:.2f} | {1 + accepted / max(steps, 1):.2f} "
            f"| {rate} | {mars_cells} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
