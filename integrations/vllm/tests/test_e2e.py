"""End to end on vLLM's CPU build: SmolLM2-135M-Instruct (float32), n-gram drafts, greedy.

Three engines, each in its own process (run_vllm.py): no speculation; n-gram speculation with the
engine strict and MARS asked per request; n-gram speculation with MARS turned on engine-wide by
`MARS_VLLM_MODE` alone. `MARS_VLLM_SMOLLM` names the converted model folder (test.sh sets it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RUNNER = Path(__file__).parent / "run_vllm.py"

# Prompts whose answers copy or rework their input, so that prompt lookup has something to draft
# and some drafts land on the target's runner-up.
PROMPTS = [
    "Rewrite this sentence in formal English: hey guys, the meeting is moved to friday cause "
    "the boss is sick.",
    "Summarize in one sentence: The cat sat on the mat. The cat was black. The mat was red. "
    "The cat liked the mat.",
    "Translate to French: The weather is nice today and I want to go to the park with my friends.",
    "Continue the list: Monday, Tuesday, Wednesday,",
    "Explain what this code does:\n\nnumbers = [1, 2, 3, 4]\nsquares = [n * n for n in numbers]"
    "\nprint(squares)\n",
    "Write the numbers from one to twenty in words, separated by commas.",
    "Add type hints to this Python function and return the whole function:\n\n"
    "def add_numbers(a, b):\n    result = a + b\n    return result\n",
    "Rename the variable x to count in this code and show the code:\n\nx = 0\n"
    "for item in items:\n    x = x + 1\nprint(x)\n",
]
MARS = "default"  # θ = 0.95, the crate's default mode


def model_dir() -> str:
    path = os.environ.get("MARS_VLLM_SMOLLM")
    if not path or not (Path(path) / "config.json").is_file():
        pytest.fail(
            "MARS_VLLM_SMOLLM must name a converted SmolLM2 folder; run "
            "bash integrations/vllm/test.sh (or pytest -m 'not e2e' for the fast tests)"
        )
    return path


def run(tmp_path: Path, name: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    spec_path, out_path = tmp_path / f"{name}.json", tmp_path / f"{name}.out.json"
    spec_path.write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(spec_path), str(out_path)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out_path.read_text())


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("vllm")
    base = {"model": model_dir(), "prompts": PROMPTS, "max_tokens": 64, "temperature": 0.0}
    n = len(PROMPTS)
    no_mode = {"MARS_VLLM_MODE": ""}
    plain = run(tmp, "plain", {**base, "runs": [{"name": "plain", "mars": [None] * n}]}, no_mode)
    speculative = run(
        tmp,
        "ngram",
        {
            **base,
            "draft": "ngram",
            "k": 4,
            "runs": [
                {"name": "strict", "mars": [None] * n},
                {"name": "mars", "mars": [MARS] * n},
                # One batch, strict and MARS requests alternating.
                {"name": "mixed", "mars": [None if i % 2 == 0 else MARS for i in range(n)]},
            ],
        },
        no_mode,
    )
    # vLLM's default process layout (engine core and worker in child processes), so the
    # plugin's counters reach the caller only through its Prometheus export.
    engine = run(
        tmp,
        "engine",
        {
            **base,
            "draft": "ngram",
            "k": 4,
            "multiprocessing": True,
            "runs": [{"name": "engine", "mars": [None] * n}],
        },
        {"MARS_VLLM_MODE": MARS, "MARS_VLLM_METRICS_INTERVAL": "0.2"},
    )
    return {
        "plain": plain["runs"][0],
        **{r["name"]: r for r in speculative["runs"]},
        "engine": engine["runs"][0],
        "engine_mode": engine["engine_mode"],
    }


@pytest.mark.e2e
def test_strict_speculation_through_the_plugin_is_plain_decoding(results: dict[str, Any]) -> None:
    assert results["strict"]["spec"]["drafts"] > 0
    assert results["strict"]["mars"]["steps"] == 0, "an all-strict engine is vLLM's own path"
    assert results["strict"]["tokens"] == results["plain"]["tokens"]


@pytest.mark.e2e
def test_strict_requests_in_a_mars_batch_are_plain_decoding(results: dict[str, Any]) -> None:
    mixed, plain = results["mixed"], results["plain"]
    assert mixed["mars"]["steps"] > 0, "the mixed batch went through the plugin's verifier"
    for i in range(0, len(PROMPTS), 2):
        assert mixed["tokens"][i] == plain["tokens"][i], f"prompt {i}"


@pytest.mark.e2e
def test_mars_relaxes_and_accepts_at_least_what_strict_does(results: dict[str, Any]) -> None:
    mars, strict = results["mars"], results["strict"]
    assert mars["mars"]["relaxed_positions"] > 0
    assert mars["mars"]["relaxed_accepts"] > 0
    assert mars["mars"]["distance"] > 0
    assert mars["spec"]["accepted"] == mars["mars"]["accepted"], "vLLM's counter and ours agree"
    # Draft tokens kept over the same prompts and token budget. (Not the rate per draft: MARS
    # changes the text, and prompt lookup then proposes more, so the two rates count different
    # drafts.)
    assert mars["spec"]["accepted"] >= strict["spec"]["accepted"]


@pytest.mark.e2e
def test_the_environment_variable_alone_turns_mars_on(results: dict[str, Any]) -> None:
    assert results["engine_mode"] == "theta:0.95"
    assert results["engine"]["exported"]["relaxed_positions"] > 0
    # Same engine settings, same batch, same mode: the same tokens as asking per request.
    assert results["engine"]["tokens"] == results["mars"]["tokens"]


@pytest.mark.e2e
def test_the_counters_reach_the_api_servers_metrics_from_the_worker(
    results: dict[str, Any],
) -> None:
    """The worker's counters, summed in the calling process's Prometheus registry (the one vLLM
    serves at /metrics), agree with vLLM's own spec-decode counters."""
    engine = results["engine"]
    exported, spec = engine["exported"], engine["spec"]
    assert engine["mars"]["steps"] == 0, "verification ran in the worker, not here"
    assert exported["steps"] > 0
    assert exported["draft_tokens"] == spec["drafts"]
    assert exported["accepted_tokens"] == spec["accepted"]
    assert 0 < exported["relaxed_positions"] <= exported["examined_positions"]
    assert exported["relaxed_accepts"] > 0
    assert exported["ledger_distance"] > 0
