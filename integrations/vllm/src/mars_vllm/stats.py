"""The plugin's counters: relaxed positions, relaxed keeps and the ledger's moved mass.

Summed on the device every step (no host sync); read on demand with `snapshot()`, which is the
one place a sync happens. Counters are per process: with vLLM's multiprocessing they live in the
worker, which logs them every `MARS_VLLM_LOG_INTERVAL` seconds and exports them to the API
server's `/metrics` (metrics.py); with `VLLM_ENABLE_V1_MULTIPROCESSING=0` they can be read in the
caller's process.
"""

from __future__ import annotations

import threading

import torch

from .verify import STAT_NAMES


class Stats:
    """Running sums of `verify.STAT_NAMES` plus the number of MARS steps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: torch.Tensor | None = None
        self._steps = 0

    def add(self, step: torch.Tensor) -> None:
        with self._lock:
            if self._sums is None or self._sums.device != step.device:
                self._sums = torch.zeros_like(step)
            self._sums += step
            self._steps += 1

    def snapshot(self) -> dict[str, float]:
        # A copy under the lock (queued on the device, no wait), read outside it: a reader on
        # another thread (metrics.Exporter) never holds up `add` while the device catches up.
        with self._lock:
            sums = None if self._sums is None else self._sums.clone()
            steps = self._steps
        values = [0.0] * len(STAT_NAMES) if sums is None else sums.tolist()
        out = dict(zip(STAT_NAMES, values, strict=True))
        out["steps"] = float(steps)
        return out

    def reset(self) -> None:
        with self._lock:
            self._sums = None
            self._steps = 0

    def summary(self) -> str:
        s = self.snapshot()
        examined = max(s["examined"], 1.0)
        return (
            f"{s['steps']:.0f} MARS steps, {s['accepted']:.0f}/{s['draft_tokens']:.0f} drafts "
            f"kept, relaxed {s['relaxed_positions']:.0f} of {s['examined']:.0f} examined "
            f"positions ({100 * s['relaxed_positions'] / examined:.1f} %), "
            f"{s['relaxed_accepts']:.0f} kept by relaxation, ledger distance {s['distance']:.3f}"
        )


STATS = Stats()
