"""Running a snippet in a fresh Python process with vLLM importable: start-up checks (a bad mode,
a refused release, the model runner asked for) happen once per process, at plugin registration."""

from __future__ import annotations

import os
import subprocess
import sys


def in_vllm(code: str, unset: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` with this environment less `unset`, plus `env`."""
    base = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
