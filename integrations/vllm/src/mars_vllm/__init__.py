"""mars-vllm: MARS verification (margin-aware speculative decoding) inside vLLM.

Install next to vLLM (`pip install ./integrations/vllm`) and set `MARS_VLLM_MODE` (`strict`,
`default`, `theta:<θ>`, `rho:<ρ>`); a request may pick its own with
`SamplingParams(extra_args={"mars": "theta:0.9"})`. vLLM calls `register()` in every process
through the `vllm.general_plugins` entry point. See docs/vllm.md.
"""

from .mode import Mode, ModeError, engine_mode, parse, request_mode
from .patch import register
from .stats import STATS
from .verify import STAT_NAMES, BatchModes, verify_batch

__all__ = [
    "STATS",
    "STAT_NAMES",
    "BatchModes",
    "Mode",
    "ModeError",
    "engine_mode",
    "parse",
    "register",
    "request_mode",
    "verify_batch",
]
