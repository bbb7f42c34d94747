#!/usr/bin/env python3
"""Writes dequantization test vectors with the reference implementation (PyPI `gguf`).

For each type: TYPE.bin holds random blocks (scale fields set to finite f16 values, everything
else random bytes), TYPE.f32 holds gguf.quants.dequantize's output as little-endian f32.
Run from this folder: python3 -m pip install gguf==0.19.0 numpy && python3 make_vectors.py
"""
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

rng = np.random.default_rng(20261121)

# Byte offsets of f16 scale fields inside one block, per type.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}

def blocks(qtype, n_blocks):
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for at in F16_FIELDS[qtype]:
        scales = rng.uniform(-0.05, 0.05, size=n_blocks).astype(np.float16)
        raw[:, at:at + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw

def write(name, raw, qtype):
    values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    raw.tofile(f"{name}.bin")
    values.astype("<f4").tofile(f"{name}.f32")
    print(name, raw.size, "bytes ->", values.size, "values")

for qtype, n_blocks in [(T.Q4_0, 8), (T.Q4_1, 8), (T.Q5_0, 8), (T.Q5_1, 8), (T.Q8_0, 8),
                        (T.Q4_K, 4), (T.Q5_K, 4), (T.Q6_K, 4)]:
    write(qtype.name, blocks(qtype, n_blocks), qtype)

# Plain float types: random finite values stored in each format.
f = rng.normal(0, 3, size=256)
write("F32", f.astype("<f4").view(np.uint8), T.F32)
write("F16", f.astype("<f2").view(np.uint8), T.F16)
# bf16 = the top half of an f32.
bf = (f.astype("<f4").view("<u4") >> 16).astype("<u2")
write("BF16", bf.view(np.uint8), T.BF16)
