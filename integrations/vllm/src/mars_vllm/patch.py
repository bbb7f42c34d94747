"""The plugin's hooks into vLLM (the releases and signatures it accepts: compat.py).

vLLM has no verification hook; `register()` runs in every vLLM process (API server, engine core,
each worker, so tensor-parallel ranks too) and replaces, by module attribute, what the rejection
sampler calls:

- `rejection_sampler.rejection_sample`: when any request of the batch is in a MARS mode, the
  step goes to `verify.verify_batch` (vLLM's own uniforms and residual samples reused for the
  strict positions); an all-strict batch goes to vLLM's function untouched.
- `InputBatch.add_request` / `remove_request` / `_make_sampling_metadata`: each request's mode
  (its `extra_args["mars"]`, else `MARS_VLLM_MODE`) is recorded by request id and laid out per
  batch index on the sampling metadata whenever vLLM rebuilds it (adds, removals, reorders).
- `SamplingParams._verify_args`: a malformed `extra_args["mars"]` is refused where the request is
  made (a 400 from the API server), never in the worker.
- On vLLM's CPU build, `expand_batch_to_tokens` (per-request temperature / top-k / top-p spread
  over draft positions) returns uninitialised memory: its C++ kernel writes into an int64 copy of
  the output and never copies back, so every speculative run with T > 0 samples from NaN logits.
  Where a probe shows the bug, the plugin replaces the function with `repeat_interleave`.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from . import compat, metrics
from . import mode as mode_mod
from .mode import Mode
from .stats import STATS
from .verify import BatchModes, verify_batch

# Under "vllm." so that vLLM's logging configuration (handler, level, format) applies.
logger = logging.getLogger("vllm.mars_vllm")

_ENGINE: Mode = mode_mod.STRICT_MODE
_PATCHED = False


def current_engine_mode() -> Mode:
    """The engine-wide mode this process registered with."""
    return _ENGINE


def register() -> None:
    """The `vllm.general_plugins` entry point. Idempotent (vLLM may call it more than once per
    process). Raises `ModeError` on a malformed `MARS_VLLM_MODE`, which stops vLLM's start-up."""
    global _ENGINE, _PATCHED, _LOG_EVERY_S
    _ENGINE = mode_mod.engine_mode(dict(os.environ))
    _LOG_EVERY_S = metrics.seconds(os.environ, LOG_INTERVAL_ENV, 10.0)
    metrics.seconds(os.environ, metrics.INTERVAL_ENV, 1.0)  # checked here, read in the worker
    _keep_v1_model_runner()
    if _PATCHED:
        return
    _check_vllm()
    # Process 0 (the first to register) names the folder its children inherit.
    metrics.register_collector(metrics.ensure_dir())
    _patch_sampling_params()
    _patch_input_batch()
    _patch_rejection_sample()
    _fix_cpu_expand()
    _PATCHED = True
    logger.info("mars-vllm: verification mode %s (MARS_VLLM_MODE)", _ENGINE)


def _check_vllm() -> None:
    """Refuses (CompatError, which stops vLLM's start-up) a release outside the known range
    unless overridden, and any release whose hooked functions changed."""
    import vllm

    version = str(getattr(vllm, "__version__", "unknown"))
    warning = compat.check_version(version, os.environ)
    if warning:
        logger.warning("%s", warning)
    problems = compat.installed_problems()
    if problems:
        raise compat.CompatError(f"mars-vllm cannot hook vLLM {version}: " + "; ".join(problems))


V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def _v2_runner_forced() -> bool:
    return os.environ.get(V2_RUNNER_ENV, "").strip() not in ("", "0")


def _keep_v1_model_runner() -> None:
    """The plugin hooks the rejection sampler of vLLM's V1 model runner. Where Triton is
    present (GPUs), vLLM 0.32 picks Model Runner V2, whose speculative sampler is separate and not
    hooked, so MARS would silently be strict there. Unless the user chose a runner, ask for V1
    (the variable is read when vLLM builds its config, after plugins load; child processes
    inherit it). A user who forces V2 gets an error for any MARS mode instead of strict."""
    if os.environ.get(V2_RUNNER_ENV) is None:
        os.environ[V2_RUNNER_ENV] = "0"
    elif _v2_runner_forced() and _ENGINE.is_mars:
        raise mode_mod.ModeError(
            f"MARS_VLLM_MODE={_ENGINE}: mars-vllm hooks vLLM's V1 model runner, but "
            f"{V2_RUNNER_ENV}={os.environ[V2_RUNNER_ENV]} forces Model Runner V2; unset it"
        )


def _patch_sampling_params() -> None:
    from vllm.sampling_params import SamplingParams

    original = SamplingParams._verify_args

    def _verify_args(self: SamplingParams) -> None:
        original(self)
        if self.extra_args and mode_mod.EXTRA_ARGS_KEY in self.extra_args:
            try:
                wanted = mode_mod.request_mode(self.extra_args, _ENGINE)
            except mode_mod.ModeError as e:
                # vLLM turns a ValueError from argument checks into a client error.
                raise ValueError(str(e)) from None
            if wanted.is_mars and _v2_runner_forced():
                raise ValueError(
                    f'extra_args["mars"]={wanted}: this vLLM runs Model Runner V2 '
                    f"({V2_RUNNER_ENV} is set), which mars-vllm does not hook"
                )

    SamplingParams._verify_args = _verify_args  # type: ignore[method-assign]


def _patch_input_batch() -> None:
    from vllm.v1.worker.gpu_input_batch import InputBatch

    add, remove, make = (
        InputBatch.add_request,
        InputBatch.remove_request,
        InputBatch._make_sampling_metadata,
    )

    def _modes(self: InputBatch) -> dict[str, Mode]:
        table = self.__dict__.get("_mars_modes")
        if table is None:
            table = self.__dict__["_mars_modes"] = {}
        return table

    def add_request(self: InputBatch, request: Any) -> int:
        index = add(self, request)
        params = request.sampling_params
        extra = params.extra_args if params is not None else None
        _modes(self)[request.req_id] = mode_mod.request_mode(extra, _ENGINE)
        return index

    def remove_request(self: InputBatch, req_id: str) -> int | None:
        _modes(self).pop(req_id, None)
        return remove(self, req_id)

    def _make_sampling_metadata(self: InputBatch) -> Any:
        metadata = make(self)
        table = _modes(self)
        modes = [table.get(r, _ENGINE) if r is not None else _ENGINE for r in self.req_ids]
        if any(m.is_mars for m in modes):
            metadata.mars_modes = BatchModes(
                kind=torch.tensor([m.kind for m in modes], dtype=torch.int8).to(self.device),
                threshold=torch.tensor([m.threshold for m in modes], dtype=torch.float32).to(
                    self.device
                ),
            )
        else:
            metadata.mars_modes = None
        return metadata

    InputBatch.add_request = add_request  # type: ignore[method-assign]
    InputBatch.remove_request = remove_request  # type: ignore[method-assign]
    InputBatch._make_sampling_metadata = _make_sampling_metadata  # type: ignore[method-assign]


def _batch_modes(metadata: Any, batch: int, device: torch.device) -> BatchModes | None:
    """The batch's modes, or None when every request is strict. Metadata made outside an
    InputBatch (none in vLLM 0.32's runners) gets the engine-wide mode."""
    if hasattr(metadata, "mars_modes"):
        modes = metadata.mars_modes
        if modes is None or modes.kind.shape[0] == batch:
            return modes
        # vLLM sliced the batch (padding, a sub-batch): the rows are its first `batch`.
        return BatchModes(modes.kind[:batch], modes.threshold[:batch])
    if not _ENGINE.is_mars:
        return None
    return BatchModes(
        kind=torch.full((batch,), _ENGINE.kind, dtype=torch.int8, device=device),
        threshold=torch.full((batch,), _ENGINE.threshold, dtype=torch.float32, device=device),
    )


def _patch_rejection_sample() -> None:
    from vllm.v1.sample import rejection_sampler as rs

    rs.rejection_sample = wrap_rejection_sample(rs.rejection_sample)


def wrap_rejection_sample(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """vLLM's `rejection_sample` with MARS batches sent to `verify.verify_batch`; anything else
    (an all-strict batch, synthetic mode) goes to `original` with its arguments untouched."""
    from vllm.v1.sample import rejection_sampler as rs

    signature = inspect.signature(original)

    def rejection_sample(*args: Any, **kwargs: Any) -> torch.Tensor:
        # By name through vLLM's own signature, so that parameters a release adds with defaults
        # (compat.HOOKS lists the ones the plugin knows) pass through to vLLM untouched.
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        draft_token_ids, num_draft_tokens = a["draft_token_ids"], a["num_draft_tokens"]
        max_spec_len, cu_num_draft_tokens = a["max_spec_len"], a["cu_num_draft_tokens"]
        draft_probs, target_logits = a["draft_probs"], a["target_logits"]
        bonus_token_ids, sampling_metadata = a["bonus_token_ids"], a["sampling_metadata"]
        batch = len(num_draft_tokens)
        device = target_logits.device
        modes = _batch_modes(sampling_metadata, batch, device)
        if modes is None or a.get("synthetic_mode", False):
            return original(*args, **kwargs)
        if a.get("fly_window_size") is not None:
            # vLLM 0.33's FLy is another relaxed acceptance rule; one step cannot follow both.
            raise ValueError(
                "mars-vllm: a MARS mode was asked for on an engine whose speculative config "
                "sets rejection_sample_method='fly'; use one relaxed rule or the other"
            )
        use_fp64_gumbel = a.get("use_fp64_gumbel", False)
        num_tokens = target_logits.shape[0]
        uniform = recovered = uniform_p = target_probs = None
        if sampling_metadata.all_greedy:
            is_greedy = torch.ones(batch, dtype=torch.bool, device=device)
        else:
            is_greedy = sampling_metadata.temperature == rs.GREEDY_TEMPERATURE
            generators = sampling_metadata.generators
            target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
            # vLLM's own random streams for the strict positions, in vLLM's order.
            uniform = rs.generate_uniform_probs(num_tokens, num_draft_tokens, generators, device)
            recovered = rs.sample_recovered_tokens(
                max_spec_len,
                num_draft_tokens,
                cu_num_draft_tokens,
                draft_token_ids,
                draft_probs,
                target_probs,
                sampling_metadata,
                device,
                use_fp64_gumbel,
            )
            # One uniform per request for a relaxed rejection's sample from p; seeded requests
            # draw theirs from their own generator, after vLLM's draws.
            uniform_p = torch.rand(batch, dtype=torch.float64, device=device)
            for i, generator in generators.items():
                if num_draft_tokens[i] > 0:
                    uniform_p[i : i + 1].uniform_(generator=generator)
        out, stats = verify_batch(
            draft_token_ids,
            cu_num_draft_tokens,
            max_spec_len,
            draft_probs,
            target_logits,
            bonus_token_ids,
            is_greedy,
            modes,
            uniform,
            recovered,
            uniform_p,
            target_probs,
        )
        STATS.add(stats)
        metrics.export_from_here(STATS)
        _maybe_log()
        return out

    rejection_sample.__mars_original__ = original  # type: ignore[attr-defined]
    return rejection_sample


LOG_INTERVAL_ENV = "MARS_VLLM_LOG_INTERVAL"
_LOG_EVERY_S = 10.0
_last_log = time.monotonic()


def _maybe_log() -> None:
    """Logs the counters at most every `MARS_VLLM_LOG_INTERVAL` seconds (0: never); reading
    them is the only host sync the plugin adds, once per interval."""
    global _last_log
    if _LOG_EVERY_S <= 0:
        return
    now = time.monotonic()
    if now - _last_log < _LOG_EVERY_S:
        return
    _last_log = now
    logger.info("mars-vllm: %s", STATS.summary())


def _fix_cpu_expand() -> None:
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.sample import rejection_sampler as rs

    original = rs.expand_batch_to_tokens
    # The CPU build installs its C++ kernels when the worker starts, after plugins register, so
    # the probe runs on the first call, on a synthetic input whose answer is known.
    chosen: list[Any] = []

    def fixed(
        x: torch.Tensor,
        cu_num_tokens: torch.Tensor,
        num_tokens: int,
        replace_from: int = 0,
        replace_to: int = 0,
    ) -> torch.Tensor:
        counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1))
        expanded = torch.repeat_interleave(x, counts, output_size=num_tokens)
        return torch.where(expanded == replace_from, replace_to, expanded).to(x.dtype)

    def expand_batch_to_tokens(
        x: torch.Tensor,
        cu_num_tokens: torch.Tensor,
        num_tokens: int,
        replace_from: int = 0,
        replace_to: int = 0,
    ) -> torch.Tensor:
        if not chosen:
            args = (torch.tensor([0.5, 2.0, 0.0]), torch.tensor([1, 3, 4]), 4, 0, 1)
            broken = not torch.equal(original(*args), fixed(*args))
            chosen.append(fixed if broken else original)
            if broken:
                logger.warning(
                    "mars-vllm: this vLLM CPU build's expand_batch_to_tokens returns "
                    "uninitialised memory (speculative sampling would read NaN logits); "
                    "using repeat_interleave instead"
                )
        return chosen[0](x, cu_num_tokens, num_tokens, replace_from, replace_to)

    rs.expand_batch_to_tokens = expand_batch_to_tokens
