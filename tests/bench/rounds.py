"""The benchmarks' one rounds-and-median routine. mars and its peer take turns for ROUNDS rounds;
each ratio is taken within a round and the median of the ratios printed beside the medians of
each side, with every round's ratio: on these machines the memory speed drifts by up to ~1.5x
over minutes, so one mars run against one peer run minutes apart measures the drift as much as
the code.

    python3 tests/bench/rounds.py medians FILE.json   # {"measurement": [values…]} -> a table

Imported by the stages that compare with a peer (against-llama-cpp.sh, gpu-peers.sh) as
`peer_table`; `medians` serves the browser stage (browser-cpu.mjs writes its values as JSON).
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any, Callable

Run = dict[str, Any]


def median(values: list[float]) -> float:
    return statistics.median(values)


def peer_row(
    runs: list[Run],
    name: str,
    mars: Callable[[Run], float],
    peer: Callable[[Run], float],
    fmt: str = "{:.2f}",
) -> str:
    """One table row: mars's median, the peer's, the median of the per-round ratios, each round's."""
    ratios = [mars(r) / peer(r) for r in runs]
    return (
        f"| {name} | {fmt.format(median([mars(r) for r in runs]))} | "
        f"{fmt.format(median([peer(r) for r in runs]))} | {median(ratios):.2f}x | "
        + " ".join(f"{v:.2f}" for v in ratios)
        + " |"
    )


def peer_table(
    runs: list[Run],
    rows: list[tuple[str, Callable[[Run], float], Callable[[Run], float], str]],
    peer_name: str,
    mars_name: str = "mars",
) -> str:
    head = f"| measure | {mars_name} | {peer_name} | {mars_name} / {peer_name} | by round |\n|---|---|---|---|---|"
    return "\n".join([head] + [peer_row(runs, n, m, p, f) for n, m, p, f in rows])


def medians(results: dict[str, list[float]]) -> str:
    lines = ["| measurement | median | runs |", "|---|---|---|"]
    for key, values in results.items():
        lines.append(f"| {key} | {median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "medians":
        sys.exit("usage: rounds.py medians FILE.json")
    with open(sys.argv[2]) as f:
        print(medians(json.load(f)))
