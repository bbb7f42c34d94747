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


def main(path):
    r = GGUFReader(path)
    tensors = {t.name: t for t in r.tensors}

    def w(name):
        t = tensors[name]
        return dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])

    n_layers, d, n_h, n_kv, hd, theta, eps = 30, 576, 9, 3, 64, 100000.0, 1e-5
    emb = w("token_embd.weight")
    inv_freq = theta ** (-np.arange(0, hd, 2) / hd)  # [hd / 2]

    def rms(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    def rope(x):  # x [t, heads, hd]: rotate adjacent pairs
        t = x.shape[0]
        ang = np.arange(t)[:, None] * inv_freq[None, :]  # [t, hd / 2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    layers = []
    for i in range(n_layers):
        n = lambda s: w(f"blk.{i}.{s}")
        layers.append({k: n(k + ".weight") for k in
                       ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]})
    out_norm = w("output_norm.weight")

    results = []
    for ids in SEQUENCES:
        t = len(ids)
        x = emb[ids]  # [t, d]
        mask = np.triu(np.full((t, t), -np.inf), 1)
        for L in layers:
            h = rms(x, L["attn_norm"])
            q = rope((h @ L["attn_q"].T).reshape(t, n_h, hd))
            k = rope((h @ L["attn_k"].T).reshape(t, n_kv, hd))
            v = (h @ L["attn_v"].T).reshape(t, n_kv, hd)
            heads = []
            for head in range(n_h):
                kv = head // (n_h // n_kv)
                s = q[:, head] @ k[:, kv].T / np.sqrt(hd) + mask
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                p /= p.sum(axis=-1, keepdims=True)
                heads.append(p @ v[:, kv])
            x = x + np.concatenate(heads, axis=-1) @ L["attn_output"].T
            h = rms(x, L["ffn_norm"])
            g, u = h @ L["ffn_gate"].T, h @ L["ffn_up"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ L["ffn_down"].T
        logits = rms(x, out_norm) @ emb.T  # [t, vocab]
        rows = []
        for row in logits:
            top = np.argsort(-row, kind="stable")[:8]
            rows.append({"top_ids": top.tolist(), "top": row[top].tolist(), "probe": row[PROBE_IDS].tolist()})
        results.append({"ids": ids, "positions": rows})
    json.dump({"probe_ids": PROBE_IDS, "sequences": results}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
