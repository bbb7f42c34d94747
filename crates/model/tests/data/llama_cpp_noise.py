#!/usr/bin/env python3
"""Where llama.cpp's logits differ from the file's exact meaning, and why no other
implementation can track them beyond ~96 % top-1 (the figures behind `smollm2.rs`'s bar).

Per position of the `make_exact.py` sequences, relative distance of the normed final hidden
state between: llama.cpp (batch and token by token), the exact f64 forward pass, and that pass
with llama.cpp's 8-bit activation rounding emulated (Q8_1: 32-value blocks, scale max/127
stored as f16) before every matmul. If the emulation tracks llama.cpp only where attention is
trivial (position 0), the rounding is chaotic in arithmetic order and cannot be reproduced
without copying llama.cpp's kernels.

Run: python3 -m pip install llama-cpp-python==0.3.36 gguf==0.19.0 numpy;
python3 llama_cpp_noise.py MODEL.gguf
"""
import sys

import llama_cpp
import numpy as np
from llama_cpp import Llama

from make_exact import SEQUENCES, D, forward, load


def q8_1(a):
    """llama.cpp's activation rounding before a Q4_1 / Q8_0 matmul, in f64."""
    blocks = a.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / 127
    q = np.round(blocks / np.where(d > 0, d, 1))
    return (q * d.astype(np.float16).astype(np.float64)).reshape(a.shape)


def llama_hidden(llm, ids, token_by_token):
    """llama.cpp's normed final hidden states [t, d] (embeddings mode, no pooling)."""
    llm.reset()
    rows = []
    if token_by_token:
        for t in ids:
            llm.eval([t])
            rows.append(np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_ith(llm._ctx.ctx, 0), shape=(D,)).copy())
    else:
        llm.eval(ids)
        rows = [np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_ith(llm._ctx.ctx, i), shape=(D,)).copy()
                for i in range(len(ids))]
    return np.array(rows, dtype=np.float64)


def main(path):
    m = load(path)
    llm = Llama(model_path=path, n_ctx=512, embedding=True, pooling_type=0, n_threads=2, seed=0, verbose=False)
    np.set_printoptions(precision=4, linewidth=160)
    for ids in SEQUENCES:
        exact, emulated = forward(m, ids), forward(m, ids, q8_1)
        batch, single = llama_hidden(llm, ids, False), llama_hidden(llm, ids, True)
        rel = lambda a, b: np.linalg.norm(a - b, axis=1) / np.linalg.norm(exact, axis=1)
        print(f"sequence of {len(ids)} tokens, relative distance per position:")
        print("  llama.cpp batch vs exact         ", rel(batch, exact))
        print("  Q8_1 emulation vs exact          ", rel(emulated, exact))
        print("  llama.cpp batch vs emulation     ", rel(batch, emulated))
        print("  llama.cpp batch vs token by token", rel(batch, single))


if __name__ == "__main__":
    main(sys.argv[1])
