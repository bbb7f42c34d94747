#!/usr/bin/env python3
"""Speculation priced from measured costs: a projection, not a run. A step of speculative
decoding is k draft passes of one row on the draft model and one pass of k + 1 rows on the
target, and gives tau tokens; plain decoding gives one token a target decode step. From
`mars speed` JSONs (gpu-peers.sh with KEEP=DIR keeps them) this prints, for every target in
DIR, the projected speedup of strict and MARS over plain decoding. tau comes from real runs of
the pair (greedy acceptance does not depend on the device, up to near-ties); the defaults are
the Qwen2.5-Coder 0.5B -> 1.5B pair's on the CPU, k = 4, coding, greedy (docs/mars.md).

    usage: gpu-price.py DIR DRAFT_NAME [K (4)] [TAU_STRICT (3.79)] [TAU_MARS (4.05)]
"""

from __future__ import annotations

import json
import os
import sys


def ms_per_token(speed: dict) -> float:
    return 1000.0 / speed["decode_tokens_per_second"]


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    folder, draft_name = argv[0], argv[1]
    k = int(argv[2]) if len(argv) > 2 else 4
    taus = {
        "strict": float(argv[3]) if len(argv) > 3 else 3.79,
        "MARS": float(argv[4]) if len(argv) > 4 else 4.05,
    }
    if not 1 <= k <= 15 or any(not 1.0 <= t <= k + 1 for t in taus.values()):
        sys.exit(f"k must be 1..15 and each tau within 1..k + 1 (k {k}, tau {taus})")
    if not os.path.isdir(folder):
        sys.exit(f"no speed figures in {folder}: the peers stage keeps them (KEEP)")
    speeds = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".speed.json"):
            with open(os.path.join(folder, name)) as f:
                speeds[name[: -len(".speed.json")]] = json.load(f)
    drafts = [n for n in speeds if draft_name in n]
    if len(drafts) != 1:
        sys.exit(f"{draft_name!r} names {len(drafts)} of {sorted(speeds)}: name one")
    draft_ms = ms_per_token(speeds[drafts[0]])
    print(
        f"Projection from measured costs (not a run): k = {k}, draft {drafts[0]} at "
        f"{draft_ms:.2f} ms a token; tau strict {taus['strict']}, MARS {taus['MARS']}"
    )
    print()
    print(
        f"| target | plain decode ms | {k} drafts + a {k + 1}-row pass, ms | "
        + " | ".join(f"{m} (tau {t})" for m, t in taus.items())
        + " |"
    )
    print("|---|---|---|" + "---|" * len(taus))
    for name, speed in speeds.items():
        if name == drafts[0]:
            continue
        rows = speed["forward_ms_by_rows"]
        if str(k + 1) not in rows:
            print(f"| {name} | no pass of {k + 1} rows measured ({sorted(rows, key=int)}) |")
            continue
        plain = ms_per_token(speed)
        step = k * draft_ms + rows[str(k + 1)]
        cells = " | ".join(f"{t * plain / step:.2f}x" for t in taus.values())
        print(f"| {name} | {plain:.2f} | {k * draft_ms:.1f} + {rows[str(k + 1)]:.1f} | {cells} |")


if __name__ == "__main__":
    main(sys.argv[1:])
