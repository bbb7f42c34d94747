"""Which verification rule a request gets: the syntax of `MARS_VLLM_MODE` and of
`SamplingParams(extra_args={"mars": ...})`, and the precedence between them.

Mirrors `mars_verify::Mode` and `Mode::resolve` (crates/verify/src/config.rs): `theta:<θ>` is the
paper's rule (relax where z2/z1 > θ, guarded where z1 ≤ 0 or a logit is not finite),
`rho:<ρ>` the shift-invariant margin rule (relax where p2/p1 ≥ ρ), `default` the crate's
default mode, `strict` lossless verification. θ and ρ must be finite and > 0. A value that does
not parse is an error naming it, never a silent strict. The constants are checked against the
Rust crate's by the conformance tests (the fixture file carries them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# mars_verify::PAPER_THETA, DEFAULT_THETA, DEFAULT_RHO.
PAPER_THETA = 0.9
DEFAULT_THETA = 0.95
DEFAULT_RHO = 0.5

ENV_VAR = "MARS_VLLM_MODE"
EXTRA_ARGS_KEY = "mars"

# Kind codes of the per-request tensor the verifier reads.
STRICT, PAPER, MARGIN = 0, 1, 2


class ModeError(ValueError):
    """A mode value that does not parse or is out of range; the message names the source."""


@dataclass(frozen=True)
class Mode:
    """`kind` is STRICT, PAPER (threshold θ) or MARGIN (threshold ρ)."""

    kind: int
    threshold: float = 0.0

    @property
    def is_mars(self) -> bool:
        return self.kind != STRICT

    def __str__(self) -> str:
        if self.kind == PAPER:
            return f"theta:{self.threshold:g}"
        if self.kind == MARGIN:
            return f"rho:{self.threshold:g}"
        return "strict"


STRICT_MODE = Mode(STRICT)
DEFAULT_MODE = Mode(PAPER, DEFAULT_THETA)


def _threshold(text: str, name: str, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ModeError(f"{source}: {name} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0.0:
        raise ModeError(f"{source}: {name} must be finite and > 0, got {text}")
    return value


def resolve(theta: float | None, rho: float | None, default: Mode, source: str) -> Mode:
    """`Mode::resolve`: θ picks the paper's rule, ρ the margin rule, neither gives `default`,
    both is an error (no hidden precedence)."""
    if theta is not None and rho is not None:
        raise ModeError(f"{source}: give theta or rho, not both (theta={theta}, rho={rho})")
    if theta is not None:
        return Mode(PAPER, _threshold(str(theta), "theta", source))
    if rho is not None:
        return Mode(MARGIN, _threshold(str(rho), "rho", source))
    return default


def parse(value: Any, source: str) -> Mode:
    """Parses `strict`, `default`, `theta:<θ>` or `rho:<ρ>` (a string), or a mapping
    `{"theta": θ}` / `{"rho": ρ}` (the form a JSON request body gives naturally)."""
    if isinstance(value, dict):
        unknown = set(value) - {"theta", "rho"}
        if unknown:
            raise ModeError(f"{source}: unknown keys {sorted(unknown)}; expected theta or rho")
        theta, rho = value.get("theta"), value.get("rho")
        if theta is None and rho is None:
            raise ModeError(f"{source}: a mapping needs theta or rho, got {value!r}")
        return resolve(theta, rho, STRICT_MODE, source)
    if not isinstance(value, str):
        raise ModeError(f"{source}: expected a string such as 'theta:0.9', got {value!r}")
    text = value.strip().lower()
    if text == "strict":
        return STRICT_MODE
    if text == "default":
        return DEFAULT_MODE
    name, sep, number = text.partition(":")
    if sep and name == "theta":
        return resolve(_threshold(number, "theta", source), None, STRICT_MODE, source)
    if sep and name == "rho":
        return resolve(None, _threshold(number, "rho", source), STRICT_MODE, source)
    raise ModeError(f"{source}: expected strict, default, theta:<θ> or rho:<ρ>, got {value!r}")


def engine_mode(environ: dict[str, str]) -> Mode:
    """The engine-wide mode: `MARS_VLLM_MODE`, strict when unset or empty."""
    value = environ.get(ENV_VAR, "")
    if value.strip() == "":
        return STRICT_MODE
    return parse(value, ENV_VAR)


def request_mode(extra_args: dict[str, Any] | None, engine: Mode) -> Mode:
    """A request's mode: its `extra_args["mars"]` where given, else the engine's."""
    if not extra_args or EXTRA_ARGS_KEY not in extra_args:
        return engine
    return parse(extra_args[EXTRA_ARGS_KEY], f'extra_args["{EXTRA_ARGS_KEY}"]')
