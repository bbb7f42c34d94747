"""The plugin's counters as Prometheus metrics on vLLM's `/metrics`, beside vLLM's own
`vllm:spec_decode_*` counters.

The counters are summed where verification runs, in vLLM's worker processes; `/metrics` is served
by the API server (process 0). vLLM has no channel for a plugin's worker statistics, so:

- the first process that registers the plugin (process 0) makes a folder and names it in
  `MARS_VLLM_METRICS_DIR`, which the engine core and workers it starts inherit (a user may set it
  to a folder of their own); it removes a folder it made when it exits;
- a worker that verified a MARS step writes its counters to `<folder>/<pid>.json` (atomically)
  at most every `MARS_VLLM_METRICS_INTERVAL` seconds (default 1) from a background thread, so
  the host reads them there and never on the step's path; only tensor-parallel rank 0 writes
  (every rank verifies the same logits with the same draws: its counters are the same);
- process 0 registers a collector in prometheus_client's default registry, the one vLLM serves
  with one API server; a scrape sums the folder's files (data-parallel engines add up).

With `--api-server-count` above 1 vLLM serves a multiprocess registry instead and these metrics
are not on `/metrics` (the log lines still are).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .stats import Stats

DIR_ENV = "MARS_VLLM_METRICS_DIR"
INTERVAL_ENV = "MARS_VLLM_METRICS_INTERVAL"
PREFIX = "mars_vllm:"

# Stat name -> (metric name without the `_total` Prometheus adds, help text).
METRICS: dict[str, tuple[str, str]] = {
    "steps": ("steps", "Verification steps that went through the plugin's verifier"),
    "draft_tokens": ("draft_tokens", "Draft tokens handed to MARS verification"),
    "examined": ("examined_positions", "Draft positions judged by MARS verification"),
    "accepted": ("accepted_tokens", "Draft tokens kept by MARS verification"),
    "relaxed_positions": (
        "relaxed_positions",
        "Examined positions where the MARS criterion held (target undecided)",
    ),
    "relaxed_accepts": (
        "relaxed_accepts",
        "Draft tokens kept only because of the relaxation (the target's runner-up)",
    ),
    "distance": (
        "ledger_distance",
        "Summed bound on the distance moved from the target's distribution "
        "(greedy: p1 - p2 per runner-up kept; sampling: total variation per relaxed position)",
    ),
}


def metrics_dir(env: Mapping[str, str]) -> Path | None:
    value = env.get(DIR_ENV, "").strip()
    return Path(value) if value else None


def ensure_dir() -> Path:
    """The folder named by `MARS_VLLM_METRICS_DIR`, made (and named in the environment, for the
    processes this one starts) if unset."""
    existing = metrics_dir(os.environ)
    if existing is not None:
        existing.mkdir(parents=True, exist_ok=True)
        return existing
    made = Path(tempfile.mkdtemp(prefix="mars-vllm-metrics-"))
    os.environ[DIR_ENV] = str(made)
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    return made


def read_totals(folder: Path) -> dict[str, float]:
    """The counters summed over every worker's file; a file being replaced or unreadable counts
    as absent for this scrape."""
    totals = dict.fromkeys(METRICS, 0.0)
    for path in folder.glob("*.json"):
        try:
            values = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for key in totals:
            value = values.get(key) if isinstance(values, dict) else None
            if isinstance(value, int | float):
                totals[key] += float(value)
    return totals


class Collector:
    """A prometheus_client collector: one counter per entry of `METRICS`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        totals = read_totals(self.folder)
        for key, (name, doc) in METRICS.items():
            yield CounterMetricFamily(PREFIX + name, doc, value=totals[key])

    def describe(self) -> Iterator[Any]:
        # Names known without reading the folder, so registering never touches the disk.
        from prometheus_client.core import CounterMetricFamily

        for name, doc in METRICS.values():
            yield CounterMetricFamily(PREFIX + name, doc)


_REGISTERED = False


def register_collector(folder: Path) -> None:
    """Adds the collector to prometheus_client's default registry, once per process."""
    global _REGISTERED
    if _REGISTERED:
        return
    from prometheus_client import REGISTRY

    REGISTRY.register(Collector(folder))
    _REGISTERED = True


def _tensor_parallel_rank() -> int:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())
    except Exception:  # not initialised (tests, offline tools): a single rank
        return 0


class Exporter:
    """Writes a `Stats` to `<folder>/<pid>.json` whenever its step count moved, every `interval`
    seconds, from a daemon thread, and once more when the process exits."""

    def __init__(self, stats: Stats, folder: Path, interval: float) -> None:
        self.stats, self.folder, self.interval = stats, folder, interval
        self.path = folder / f"{os.getpid()}.json"
        self._written = -1.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mars-vllm-metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()
        atexit.register(self.close)

    def write(self) -> None:
        snapshot = self.stats.snapshot()
        if snapshot["steps"] == self._written:
            return
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(snapshot))
        temporary.replace(self.path)
        self._written = snapshot["steps"]

    def close(self) -> None:
        self._stop.set()
        try:
            self.write()
        except OSError:
            pass  # the folder's owner exited first and removed it

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.write()
            except OSError:
                return


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A non-negative number of seconds from the environment; ValueError naming it otherwise
    (raised from `register()`, so a bad value stops vLLM at start-up, not in a worker)."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected seconds, got {raw!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise ValueError(f"{name}: expected finite seconds >= 0, got {raw!r}")
    return value


_settled = False
_LOCK = threading.Lock()


def export_from_here(stats: Stats) -> None:
    """Called on every MARS step; on the first, starts this process's exporter where it should
    run (a metrics folder named, tensor-parallel rank 0, an interval above 0)."""
    global _settled
    if _settled:
        return
    with _LOCK:
        if _settled:
            return
        _settled = True
        folder = metrics_dir(os.environ)
        interval = seconds(os.environ, INTERVAL_ENV, 1.0)
        if folder is not None and interval > 0 and _tensor_parallel_rank() == 0:
            Exporter(stats, folder, interval).start()
