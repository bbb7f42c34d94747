"""The plugin's verification against mars-verify's, on fixtures the Rust crate made.

`fixtures/verify_cases.json` is written by crates/verify/tests/vllm_fixtures.rs, which also fails
when the file no longer matches what the crate does. Greedy cases are compared exactly (accepted
count, emitted tokens, relaxed positions, relaxed keeps, the ledger's distance); sampling cases
by a two-sample chi-square test between the crate's histogram of emitted sequences and the
plugin's, over the same number of draws. The plugin is called the way vLLM calls it: through the
patched `rejection_sample`, with vLLM's uniform draws and vLLM's residual sampler.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import mars_vllm
from mars_vllm import mode as mode_mod

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "verify_cases.json").read_text())
CASES = FIXTURES["cases"]
GREEDY = [c for c in CASES if c["temperature"] == 0.0]
SAMPLED = [c for c in CASES if c["temperature"] != 0.0]


@pytest.fixture(scope="module")
def rejection_sample() -> Any:
    """vLLM's `rejection_sample` after the plugin patched it."""
    mars_vllm.register()
    from vllm.platforms import current_platform
    from vllm.v1.sample import rejection_sampler as rs

    # What vLLM's CPU worker does at start-up: its C++ stand-ins for the Triton kernels.
    current_platform.register_triton_kernel_overrides()

    return rs.rejection_sample


def f32(x: float) -> float:
    return torch.tensor(x, dtype=torch.float32).item()


def test_constants_are_the_crates() -> None:
    constants = FIXTURES["constants"]
    assert f32(mode_mod.PAPER_THETA) == constants["paper_theta"]
    assert f32(mode_mod.DEFAULT_THETA) == constants["default_theta"]
    assert f32(mode_mod.DEFAULT_RHO) == constants["default_rho"]
    assert str(mode_mod.DEFAULT_MODE) == constants["default_mode"]


def run_batch(
    rejection_sample: Any,
    cases: list[dict[str, Any]],
    repeats: int = 1,
    seed: int = 0,
) -> tuple[list[list[int]], torch.Tensor]:
    """Runs `cases` (one vocabulary) as one vLLM batch, each repeated `repeats` times; returns the
    emitted tokens per request and the plugin's step statistics."""
    vocab = cases[0]["vocab"]
    assert all(c["vocab"] == vocab for c in cases)
    torch.manual_seed(seed)
    drafts, targets, qs, bonus, counts, greedy, temps, kinds, thresholds = (
        [],
        [],
        [],
        [],
        [],
        [],
        [],
        [],
        [],
    )
    for case in cases:
        k = len(case["draft"])
        logits = torch.tensor(case["logits"], dtype=torch.float32).view(k + 1, vocab)
        t = case["temperature"]
        # What vLLM hands the rejection sampler: logits / T for sampled requests (raw for
        # greedy); the bonus token is sampled by vLLM's sampler from the last row's p.
        processed = logits if t == 0.0 else logits / torch.tensor(t, dtype=torch.float32)
        m = mode_mod.parse(case["mode"], case["name"])
        for _ in range(repeats):
            drafts.append(torch.tensor(case["draft"], dtype=torch.int32))
            targets.append(processed[:k])
            if case["draft_probs"] is not None:
                qs.append(torch.tensor(case["draft_probs"], dtype=torch.float32).view(k, vocab))
            if t == 0.0:
                bonus.append(int(processed[k].argmax()))
            else:
                bonus.append(int(torch.multinomial(processed[k].softmax(-1), 1)))
            counts.append(k)
            greedy.append(t == 0.0)
            temps.append(t)
            kinds.append(m.kind)
            thresholds.append(m.threshold)
    has_q = [c["draft_probs"] is not None for c in cases]
    assert all(has_q) or not any(has_q), "one batch has one drafter kind, as in vLLM"
    batch = len(counts)
    metadata = SimpleNamespace(
        all_greedy=all(greedy),
        all_random=not any(greedy),
        temperature=torch.tensor(temps, dtype=torch.float32),
        generators={},
        # As the patched InputBatch lays it out: None when every request is strict.
        mars_modes=mars_vllm.BatchModes(
            kind=torch.tensor(kinds, dtype=torch.int8),
            threshold=torch.tensor(thresholds, dtype=torch.float32),
        )
        if any(kinds)
        else None,
    )
    mars_vllm.STATS.reset()
    out = rejection_sample(
        torch.cat(drafts),
        counts,
        max(counts),
        torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32),
        torch.cat(qs) if qs else None,
        torch.cat(targets).contiguous(),
        torch.tensor(bonus, dtype=torch.int64).view(batch, 1),
        metadata,
    )
    stats = torch.tensor(list(mars_vllm.STATS.snapshot().values())[: len(mars_vllm.STAT_NAMES)])
    return [[t for t in row if t != -1] for row in out.tolist()], stats


@pytest.mark.parametrize("case", GREEDY, ids=[c["name"] for c in GREEDY])
def test_greedy_case_matches_the_crate(rejection_sample: Any, case: dict[str, Any]) -> None:
    expect = case["expect"]
    [emitted], stats = run_batch(rejection_sample, [case])
    s = dict(zip(mars_vllm.STAT_NAMES, stats.tolist(), strict=True))
    if not mode_mod.parse(case["mode"], "case").is_mars:
        # An all-strict batch is vLLM's own function, untouched; the crate agrees with it.
        assert emitted == expect["emitted"]
        assert s["examined"] == 0
        return
    assert emitted == expect["emitted"]
    assert s["accepted"] == expect["accepted"]
    assert s["relaxed_positions"] == sum(expect["relaxed"])
    assert s["relaxed_accepts"] == expect["relaxed_accepts"]
    assert s["distance"] == pytest.approx(expect["distance"], abs=1e-6)


def test_greedy_batches_mix_modes_per_request(rejection_sample: Any) -> None:
    """All greedy cases of a vocabulary in one batch, each with its own mode: every request
    gets what it gets alone (per-request modes, batch layout, placeholders)."""
    by_vocab: dict[int, list[dict[str, Any]]] = {}
    for case in GREEDY:
        by_vocab.setdefault(case["vocab"], []).append(case)
    mixed = 0
    for cases in by_vocab.values():
        emitted, _ = run_batch(rejection_sample, cases)
        assert emitted == [c["expect"]["emitted"] for c in cases]
        mixed += len({c["mode"] for c in cases}) > 1
    assert mixed > 0, "no batch mixed modes"


def chi_square_p(a: Counter[str], b: Counter[str]) -> float:
    """p-value of the two-sample chi-square test of homogeneity; categories with fewer than 10
    draws in both samples together are pooled."""
    na, nb = sum(a.values()), sum(b.values())
    pooled = (0, 0)
    bins = []
    for key in set(a) | set(b):
        x, y = a.get(key, 0), b.get(key, 0)
        if x + y < 10:
            pooled = (pooled[0] + x, pooled[1] + y)
        else:
            bins.append((x, y))
    if sum(pooled) > 0:
        bins.append(pooled)
    stat = sum(
        (x * math.sqrt(nb / na) - y * math.sqrt(na / nb)) ** 2 / (x + y) for x, y in bins if x + y
    )
    df = len(bins) - 1
    if df == 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0)))


@pytest.mark.parametrize("case", SAMPLED, ids=[c["name"] for c in SAMPLED])
def test_sampled_case_matches_the_crate_in_distribution(
    rejection_sample: Any, case: dict[str, Any]
) -> None:
    expect = case["expect"]
    samples = expect["samples"]
    emitted, stats = run_batch(rejection_sample, [case], repeats=samples, seed=1)
    ours = Counter(",".join(map(str, e)) for e in emitted)
    theirs = Counter(expect["histogram"])
    p = chi_square_p(ours, theirs)
    # Fixed seeds make the outcome deterministic; 1e-4 keeps a correct plugin from failing by
    # chance across the 16 cases while a 5 % shift of a common outcome still fails.
    assert p > 1e-4, f"emitted sequences differ from mars-verify's (p = {p:.2e})"
    s = dict(zip(mars_vllm.STAT_NAMES, stats.tolist(), strict=True))
    if mode_mod.parse(case["mode"], "case").is_mars:
        relaxed = s["relaxed_positions"] / samples
        assert relaxed == pytest.approx(expect["mean_relaxed_positions"], abs=0.02)
        distance = s["distance"] / samples
        assert distance == pytest.approx(expect["mean_distance"], rel=0.05, abs=1e-3)


def test_a_wrong_rule_would_fail_the_comparison(rejection_sample: Any) -> None:
    """The chi-square check has power: the crate's histogram of a MARS case against the plugin
    run in strict mode on the same case is rejected."""
    case = next(
        c for c in SAMPLED if c["mode"] != "strict" and c["expect"]["mean_relaxed_positions"] > 0.3
    )
    strict = dict(case, mode="strict")
    emitted, _ = run_batch(rejection_sample, [strict], repeats=case["expect"]["samples"], seed=1)
    ours = Counter(",".join(map(str, e)) for e in emitted)
    assert chi_square_p(ours, Counter(case["expect"]["histogram"])) < 1e-4
