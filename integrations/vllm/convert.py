"""Converts one of the project's GGUF files into a float32 safetensors folder vLLM's CPU build runs.

Usage: python convert.py MODEL.gguf OUT_DIR

Why: vLLM's CPU build cannot run GGUF weights (its GGUF support ships CUDA kernels only), so the
plugin's tests and benchmark run the same checkpoints the Rust engine runs, dequantised by
transformers' GGUF reader. float32 because bf16 rounding flips exact greedy ties, and the tests
compare greedy texts. The folder is written to a temporary name and renamed when complete, so an
interrupted conversion is never mistaken for a finished one; an existing OUT_DIR is kept.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def convert(gguf: Path, out: Path) -> Path:
    """Writes `out` (config, tokenizer, float32 safetensors) from `gguf` unless it exists."""
    if (out / "config.json").is_file():
        return out
    if not gguf.is_file():
        raise FileNotFoundError(f"gguf file not found: {gguf}")
    # Imported here so `--help` and the tests' imports do not pay transformers' start-up.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # save_pretrained refuses a model that still says it is GGUF-quantised: rebuild it from a
    # config without the quantisation entry and copy the (already dequantised) weights over.
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    plain.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(tmp)
    tmp.rename(out)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = convert(Path(argv[1]), Path(argv[2]))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
