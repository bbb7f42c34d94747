"""Mode syntax and precedence: the same rules as mars_verify::Mode::resolve."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from vllm_process import in_vllm

from mars_vllm import mode as m


def test_strings_parse_to_the_crates_modes() -> None:
    assert m.parse("strict", "t") == m.STRICT_MODE
    assert m.parse("default", "t") == m.Mode(m.PAPER, m.DEFAULT_THETA)
    assert m.parse("theta:0.9", "t") == m.Mode(m.PAPER, 0.9)
    assert m.parse(" RHO:0.25 ", "t") == m.Mode(m.MARGIN, 0.25)
    assert m.parse({"theta": 0.8}, "t") == m.Mode(m.PAPER, 0.8)
    assert m.parse({"rho": 0.5}, "t") == m.Mode(m.MARGIN, 0.5)
    assert str(m.Mode(m.PAPER, 0.9)) == "theta:0.9"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("theta:abc", "theta must be a number"),
        ("theta:nan", "finite and > 0"),
        ("theta:inf", "finite and > 0"),
        ("rho:0", "finite and > 0"),
        ("rho:-1", "finite and > 0"),
        ("mars", "expected strict, default"),
        ("theta", "expected strict, default"),
        (0.9, "expected a string"),
        ({"theta": 0.9, "rho": 0.5}, "not both"),
        ({"gamma": 1}, "unknown keys"),
        ({}, "needs theta or rho"),
    ],
)
def test_malformed_values_are_errors_naming_the_source(value: object, message: str) -> None:
    with pytest.raises(m.ModeError, match=message) as err:
        m.parse(value, "SOURCE")
    assert "SOURCE" in str(err.value)


def test_request_overrides_engine_and_unset_is_strict() -> None:
    engine = m.engine_mode({})
    assert engine == m.STRICT_MODE
    assert m.engine_mode({"MARS_VLLM_MODE": "  "}) == m.STRICT_MODE
    paper = m.engine_mode({"MARS_VLLM_MODE": "theta:0.9"})
    assert m.request_mode(None, paper) == paper
    assert m.request_mode({"other": 1}, paper) == paper
    assert m.request_mode({"mars": "strict"}, paper) == m.STRICT_MODE
    assert m.request_mode({"mars": "rho:0.4"}, engine) == m.Mode(m.MARGIN, 0.4)


def test_a_malformed_engine_mode_stops_vllm_at_start_up() -> None:
    """vLLM runs every general plugin's register() while building its engine arguments; a bad
    MARS_VLLM_MODE must stop it there with the message, not fall back to strict."""
    code = "from vllm.plugins import load_general_plugins; load_general_plugins()"
    env = dict(os.environ, MARS_VLLM_MODE="theta:zero")
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "MARS_VLLM_MODE: theta must be a number, got 'zero'" in done.stderr


def test_a_malformed_request_mode_is_refused_when_the_request_is_made() -> None:
    import mars_vllm

    mars_vllm.register()
    from vllm import SamplingParams

    with pytest.raises(ValueError, match=r'extra_args\["mars"\]: rho must be finite'):
        SamplingParams(max_tokens=4, extra_args={"mars": "rho:-2"})
    SamplingParams(max_tokens=4, extra_args={"mars": "rho:0.5"})


def _in_vllm(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return in_vllm(code, ("VLLM_USE_V2_MODEL_RUNNER",), **env)


def test_the_v1_model_runner_is_asked_for_unless_the_user_chose() -> None:
    """vLLM picks Model Runner V2 where Triton runs (GPUs); its sampler is not hooked, so the
    plugin asks for V1, and refuses MARS (never a silent strict) where V2 is forced."""
    code = (
        "from vllm.plugins import load_general_plugins; load_general_plugins(); "
        "import vllm.envs as e; print('V2', e.VLLM_USE_V2_MODEL_RUNNER)"
    )
    done = _in_vllm(code, MARS_VLLM_MODE="theta:0.9")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "V2 False" in done.stdout
    forced = _in_vllm(code, MARS_VLLM_MODE="theta:0.9", VLLM_USE_V2_MODEL_RUNNER="1")
    assert forced.returncode != 0
    assert "forces Model Runner V2" in forced.stderr
    per_request = _in_vllm(
        code + "; from vllm import SamplingParams as S; S(extra_args={'mars': 'strict'}); "
        "S(extra_args={'mars': 'rho:0.5'})",
        MARS_VLLM_MODE="strict",
        VLLM_USE_V2_MODEL_RUNNER="1",
    )
    assert per_request.returncode != 0
    assert "does not hook" in per_request.stderr
