"""Runs vLLM offline on one model and writes what the tests and the benchmark compare, as JSON.

Usage: python run_vllm.py SPEC.json OUT.json — SPEC holds `model`, optional `draft` (`"ngram"`
or a model folder), `k`, `max_tokens`, `temperature`, `seed`, `sequential` (one request at a
time), `prompts` and `runs`: a list of `{"name", "mars": [per-prompt extra_args["mars"] or
null]}` generated in order on one engine.
For each run it prints the texts, token ids, wall time, vLLM's speculation counters (deltas) and
the plugin's counters (deltas). A separate process per engine: vLLM's CPU engine is not built to be
created twice in one process, and `MARS_VLLM_MODE` is read at start-up as in a real deployment.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

# Offline, single process (so the plugin's counters are readable here), small KV cache.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("MARS_VLLM_LOG_INTERVAL", "0")


def spec_counters(llm: Any) -> dict[str, Any]:
    """vLLM's speculation counters: drafts, accepted, accepted per position."""
    out: dict[str, Any] = {"steps": 0, "drafts": 0, "accepted": 0, "per_pos": []}
    for metric in llm.get_metrics():
        name = metric.name
        if name == "vllm:spec_decode_num_draft_tokens":
            out["drafts"] = int(metric.value)
        elif name == "vllm:spec_decode_num_drafts":
            out["steps"] = int(metric.value)
        elif name == "vllm:spec_decode_num_accepted_tokens":
            out["accepted"] = int(metric.value)
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            out["per_pos"] = [int(v) for v in metric.values]
    return out


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, list):
            prev = before.get(key) or [0] * len(value)
            out[key] = [a - b for a, b in zip(value, prev, strict=False)]
        else:
            out[key] = value - before.get(key, 0)
    return out


def exported(want: dict[str, int] | None = None, wait_s: float = 10.0) -> dict[str, float]:
    """The plugin's counters as this process's Prometheus registry serves them (what vLLM's
    `/metrics` shows), waiting up to `wait_s` for the workers' exporters to reach every count
    in `want` (a last step that accepted nothing leaves the accepted count where it was while
    its drafts are still on their way, so one count alone cannot say the export is done)."""
    from prometheus_client import REGISTRY

    deadline = time.monotonic() + wait_s
    while True:
        out = {
            family.name.removeprefix("mars_vllm:"): family.samples[0].value
            for family in REGISTRY.collect()
            if family.name.startswith("mars_vllm:")
        }
        if want is None or all(out.get(k) == v for k, v in want.items()):
            return out
        if time.monotonic() > deadline:
            return out
        time.sleep(0.1)


def main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    if spec.get("multiprocessing"):
        # vLLM's default: the engine core and its worker in child processes, so the plugin's
        # counters reach this process only through its metrics export.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    from vllm import LLM, SamplingParams

    import mars_vllm

    kwargs: dict[str, Any] = {
        "model": spec["model"],
        "dtype": "float32",
        "enforce_eager": True,
        "max_model_len": spec.get("max_model_len", 1024),
        "seed": spec.get("seed", 0),
        "disable_log_stats": False,
    }
    draft = spec.get("draft")
    k = spec.get("k", 4)
    if draft == "ngram":
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
    elif draft:
        kwargs["speculative_config"] = {"model": draft, "num_speculative_tokens": k}
    # Anything else vLLM's LLM takes (tensor_parallel_size, ...), passed through.
    kwargs.update(spec.get("engine_args", {}))
    llm = LLM(**kwargs)
    tokenizer = llm.get_tokenizer()
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
        )
        for p in spec["prompts"]
    ]
    results = []
    for run in spec["runs"]:
        params = []
        for i, m in enumerate(run["mars"]):
            params.append(
                SamplingParams(
                    max_tokens=spec.get("max_tokens", 48),
                    temperature=spec.get("temperature", 0.0),
                    seed=None if spec.get("request_seed") is None else spec["request_seed"] + i,
                    ignore_eos=spec.get("ignore_eos", False),
                    extra_args=None if m is None else {"mars": m},
                )
            )
        before, stats_before = spec_counters(llm), mars_vllm.STATS.snapshot()
        exported_before = exported()
        start = time.perf_counter()
        if spec.get("sequential"):
            # One request at a time: the latency regime speculation is for.
            outputs = [
                llm.generate([p], [sp], use_tqdm=False)[0]
                for p, sp in zip(prompts, params, strict=False)
            ]
        else:
            outputs = llm.generate(prompts[: len(params)], params, use_tqdm=False)
        seconds = time.perf_counter() - start
        spec_delta = delta(spec_counters(llm), before)
        want = {
            "accepted_tokens": int(exported_before.get("accepted_tokens", 0))
            + spec_delta["accepted"],
            "draft_tokens": int(exported_before.get("draft_tokens", 0)) + spec_delta["drafts"],
        }
        results.append(
            {
                "name": run["name"],
                "texts": [o.outputs[0].text for o in outputs],
                "tokens": [list(o.outputs[0].token_ids) for o in outputs],
                "seconds": seconds,
                "spec": spec_delta,
                "mars": delta(mars_vllm.STATS.snapshot(), stats_before),
                "exported": delta(
                    exported(want if spec.get("multiprocessing") else None), exported_before
                ),
            }
        )
    # A file, not stdout: vLLM logs to stdout.
    with open(out_path, "w") as f:
        json.dump(
            {
                "engine_mode": str(mars_vllm.patch.current_engine_mode()),
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "runs": results,
            },
            f,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
