"""The vLLM releases the plugin accepts, and the check of the functions it hooks: on the installed
vLLM, on the source of a release that cannot run here (vllm 0.33.0, CUDA only), and on the
wrapper's handling of what 0.33 adds to `rejection_sample`."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm_process import in_vllm

import mars_vllm
from mars_vllm import compat
from mars_vllm.patch import wrap_rejection_sample


def test_tested_releases_pass_checked_ones_warn_and_others_are_refused_naming_the_range() -> None:
    assert compat.check_version("0.32.0", {}) is None
    assert compat.check_version("0.32.1+cpu", {}) is None
    warning = compat.check_version("0.33.0", {})
    assert warning is not None and "0.33.0's source" in warning
    for version in ("0.31.2", "0.34.0", "1.0.0", "nightly"):
        with pytest.raises(compat.CompatError, match=r"supports vLLM 0\.32 to 0\.33") as err:
            compat.check_version(version, {})
        assert version in str(err.value) and compat.ALLOW_ENV in str(err.value)
    brave = compat.check_version("0.34.0", {compat.ALLOW_ENV: "1"})
    assert brave is not None and "going on" in brave
    with pytest.raises(compat.CompatError):
        compat.check_version("0.34.0", {compat.ALLOW_ENV: "yes"})


def _signatures(**changes: list[compat.Param] | None) -> Any:
    """Each hook's expected signature, with `changes` (by hook name) applied."""
    table: dict[str, list[compat.Param] | None] = {
        h.name: [(n, False) for n in h.leading] for h in compat.HOOKS
    }
    table.update(changes)
    return lambda hook: table[hook.name]


def test_the_hook_check_finds_each_kind_of_change() -> None:
    def problems(constant: bool = True, **changes: list[compat.Param] | None) -> list[str]:
        return compat.hook_problems(_signatures(**changes), lambda m, n: constant)

    assert problems() == []
    rs = next(h for h in compat.HOOKS if h.name == "rejection_sample")
    base = [(n, False) for n in rs.leading]
    # A parameter the plugin knows, with a default: fine. Without one, or unknown: refused.
    assert problems(rejection_sample=[*base, ("fly_window_size", True)]) == []
    assert "has no default" in problems(rejection_sample=[*base, ("fly_window_size", False)])[0]
    assert "is new to mars-vllm" in problems(rejection_sample=[*base, ("strictness", True)])[0]
    swapped = [base[1], base[0], *base[2:]]
    assert "expected it to start with" in problems(rejection_sample=swapped)[0]
    assert "not found" in problems(rejection_sample=None)[0]
    # A function called positionally takes no new parameter, even with a default.
    uniform = [(n, False) for n in ("num_tokens", "num_draft_tokens", "generators", "device")]
    assert "is new" in problems(generate_uniform_probs=[*uniform, ("dtype", True)])[0]
    assert problems(constant=False) == [
        "vllm.v1.sample.rejection_sampler.GREEDY_TEMPERATURE not found"
    ]


def test_the_installed_vllm_matches_and_its_source_reads_the_same() -> None:
    import vllm

    assert compat.installed_problems() == []
    signature_of, has_constant = compat.source_signatures(Path(vllm.__file__).parent.parent)
    from_source = {h.name: signature_of(h) for h in compat.HOOKS}
    assert compat.hook_problems(signature_of, has_constant) == []
    # The source reader sees what inspect sees (defaults included), hook by hook.
    assert from_source == {h.name: compat._installed_signature(h) for h in compat.HOOKS}


def release_source(version: str) -> Path:
    folder = os.environ.get("MARS_VLLM_RELEASES")
    path = Path(folder or "") / version
    if not folder or not (path / "vllm" / "__init__.py").is_file():
        pytest.fail(
            f"MARS_VLLM_RELEASES must name a folder holding {version}/vllm (the release's "
            "unpacked wheel); bash integrations/vllm/test.sh makes it"
        )
    return path


def test_vllm_0_33s_hooks_match_its_source() -> None:
    signature_of, has_constant = compat.source_signatures(release_source("0.33.0"))
    assert compat.hook_problems(signature_of, has_constant) == []
    rs = next(h for h in compat.HOOKS if h.name == "rejection_sample")
    names = [n for n, _ in signature_of(rs) or []]
    assert "fly_window_size" in names, "the check read 0.33's signature, not 0.32's"


def _greedy_batch() -> tuple[list[Any], Any]:
    """One request, two drafts, greedy: the target's top-1 is token 1 then token 2."""
    logits = torch.tensor([[0.0, 5.0, 1.0, 0.0], [0.0, 1.0, 5.0, 0.0]])
    metadata = SimpleNamespace(
        all_greedy=True,
        temperature=torch.zeros(1),
        generators={},
        mars_modes=mars_vllm.BatchModes(
            kind=torch.tensor([mars_vllm.parse("default", "t").kind], dtype=torch.int8),
            threshold=torch.tensor([0.95]),
        ),
    )
    args = [
        torch.tensor([1, 2], dtype=torch.int32),
        [2],
        2,
        torch.tensor([2], dtype=torch.int32),
        None,
        logits,
        torch.tensor([[3]]),
        metadata,
    ]
    return args, metadata


def test_the_wrapper_takes_vllm_0_33s_new_parameters() -> None:
    """0.33 adds FLy's parameters (with defaults) to `rejection_sample`: strict batches hand them
    to vLLM untouched, MARS batches without FLy verify as on 0.32, MARS beside FLy is refused."""
    seen: list[dict[str, Any]] = []

    def original_0_33(
        draft_token_ids: Any,
        num_draft_tokens: Any,
        max_spec_len: Any,
        cu_num_draft_tokens: Any,
        draft_probs: Any,
        target_logits: Any,
        bonus_token_ids: Any,
        sampling_metadata: Any,
        synthetic_mode: bool = False,
        synthetic_conditional_rates: Any = None,
        use_fp64_gumbel: bool = False,
        fly_window_size: int | None = None,
        fly_entropy_threshold: float | None = None,
        fly_entropy_top_k: int = 3,
    ) -> torch.Tensor:
        seen.append({"fly_window_size": fly_window_size, "top_k": fly_entropy_top_k})
        return torch.zeros(1, 3, dtype=torch.int32)

    wrapped = wrap_rejection_sample(original_0_33)
    args, metadata = _greedy_batch()
    out = wrapped(*args)
    assert out.tolist() == [[1, 2, 3]] and seen == [], "MARS batch verified by the plugin"
    metadata.mars_modes = None
    wrapped(*args, fly_window_size=4, fly_entropy_threshold=0.5, fly_entropy_top_k=5)
    assert seen == [{"fly_window_size": 4, "top_k": 5}], "strict batch went to vLLM as called"
    args, _ = _greedy_batch()
    with pytest.raises(ValueError, match="rejection_sample_method='fly'"):
        wrapped(*args, fly_window_size=4, fly_entropy_threshold=0.5)


def test_an_unsupported_release_stops_vllm_at_start_up_unless_overridden() -> None:
    code = (
        "import vllm; vllm.__version__ = '0.31.0'; "
        "from vllm.plugins import load_general_plugins; load_general_plugins()"
    )
    refused = in_vllm(code, (compat.ALLOW_ENV,))
    assert refused.returncode != 0
    assert "mars-vllm supports vLLM 0.32 to 0.33" in refused.stderr
    assert "not vLLM 0.31.0" in refused.stderr
    brave = in_vllm(code, (compat.ALLOW_ENV,), **{compat.ALLOW_ENV: "1"})
    assert brave.returncode == 0, brave.stderr[-2000:]
    assert "going on because MARS_VLLM_ALLOW_UNTESTED=1" in brave.stdout + brave.stderr
