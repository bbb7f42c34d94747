#!/usr/bin/env python3
"""Exact (f64) logits of SmolLM2-135M-Instruct Q4_1, computed with numpy from the weights as
`gguf` dequantizes them: the file's meaning without any kernel's rounding. The burn model must
match these to f32 accuracy; llama.cpp itself sits ~0.15 logits away on average (its kernels
quantize activations), which is why the llama.cpp comparison is by top-1 agreement.

Run: python3 -m pip install gguf==0.19.0 numpy; python3 make_exact.py MODEL.gguf > smollm2_exact.json
"""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

SEQUENCES = [
    [3750, 314, 1107, 2474, 3006, 282, 253, 4145, 1928, 30, 1859, 10854],
    [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308],
    [504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30, 2, 20],
]
PROBE_IDS = list(range(0, 49152, 1536))  # 32 fixed ids, spread over the vocabulary


N_LAYERS, D, N_H, N_KV, HD, THETA, EPS = 30, 576, 9, 3, 64, 100000.0, 1e-5


def load(path):
    """The file's weights, dequantized by `gguf`, as f64 arrays in [out, in] layout."""
    r = GGUFReader(path)
    tensors = {t.name: t for t in r.tensors}

    def w(name):
        t = tensors[name]
        return dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])

    names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    layers = [{k: w(f"blk.{i}.{k}.weight") for k in names} for i in range(N_LAYERS)]
    return {"emb": w("token_embd.weight"), "layers": layers, "out_norm": w("output_norm.weight")}


def forward(m, ids, before_matmul=lambda a: a):
    """Normed final hidden states [t, d] of one sequence. `before_matmul` is applied to every
    activation that enters a weight matrix (identity: the exact forward pass)."""
    inv_freq = THETA ** (-np.arange(0, HD, 2) / HD)  # [hd / 2]

    def rms(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * g

    def rope(x):  # x [t, heads, hd]: rotate adjacent pairs
        t = x.shape[0]
        ang = np.arange(t)[:, None] * inv_freq[None, :]  # [t, hd / 2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    q8 = before_matmul
    t = len(ids)
    x = m["emb"][ids]  # [t, d]
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for L in m["layers"]:
        h = q8(rms(x, L["attn_norm"]))
        q = rope((h @ L["attn_q"].T).reshape(t, N_H, HD))
        k = rope((h @ L["attn_k"].T).reshape(t, N_KV, HD))
        v = (h @ L["attn_v"].T).reshape(t, N_KV, HD)
        heads = []
        for head in range(N_H):
            kv = head // (N_H // N_KV)
            s = q[:, head] @ k[:, kv].T / np.sqrt(HD) + mask
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            heads.append(p @ v[:, kv])
        x = x + q8(np.concatenate(heads, axis=-1)) @ L["attn_output"].T
        h = q8(rms(x, L["ffn_norm"]))
        g, u = h @ L["ffn_gate"].T, h @ L["ffn_up"].T
        x = x + q8(g / (1 + np.exp(-g)) * u) @ L["ffn_down"].T
    return rms(x, m["out_norm"])


def main(path):
    m = load(path)
    results = []
    for ids in SEQUENCES:
        logits = forward(m, ids) @ m["emb"].T  # [t, vocab]
        rows = []
        for row in logits:
            top = np.argsort(-row, kind="stable")[:8]
            rows.append({"top_ids": top.tolist(), "top": row[top].tolist(), "probe": row[PROBE_IDS].tolist()})
        results.append({"ids": ids, "positions": rows})
    json.dump({"probe_ids": PROBE_IDS, "sequences": results}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
