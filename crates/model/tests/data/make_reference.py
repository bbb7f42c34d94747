#!/usr/bin/env python3
"""Reference outputs of llama.cpp for SmolLM2-135M-Instruct Q4_1, so CI needs no llama.cpp.

- teacher_forced: texts (Spec-Bench first turns, one per category and more, cut to 128 tokens);
  at every position the reference's top-1 and top-2 token and logit.
- greedy: 24 prompts; llama.cpp's 32-token greedy continuation, and the top-1/top-2 logit gap
  at each generated step (to show whether a divergence is a near-tie).
- self: llama.cpp against itself. The same texts and prompts under other, equally valid llama.cpp
  settings — every position in its own decode call (as a decoder feeds tokens) and an f32 KV
  cache — give llama.cpp's own top-1 ids and greedy continuations there. Its kernels quantize
  activations to 8 bits per 32-value block and the rounding depends on the kernel path, so this
  is the agreement any implementation that is not bit-identical to llama.cpp's batch kernels can
  expect; the model test compares mars with it.

Run: python3 -m pip install llama-cpp-python==0.3.36 numpy (builds llama.cpp from source), then
python3 make_reference.py MODEL.gguf "$(bash tests/fetch-spec-bench.sh | tail -n1)" > smollm2_reference.json
(from the project root, paths adjusted)
"""
import json
import sys

import numpy as np
from llama_cpp import Llama

TEACHER_TOKENS = 128
GREEDY_TOKENS = 32


def top2(row):
    order = np.argsort(-row, kind="stable")[:2]
    return [int(order[0]), float(row[order[0]]), int(order[1]), float(row[order[1]])]


def open_model(model_path, **settings):
    return Llama(model_path=model_path, n_ctx=512, logits_all=True, n_threads=2, seed=0, verbose=False,
                 **settings)


def eval_prompt(llm, ids, token_by_token):
    llm.reset()
    if token_by_token:
        for t in ids:
            llm.eval([t])
    else:
        llm.eval(ids)


def teacher_rows(llm, ids, token_by_token):
    eval_prompt(llm, ids, token_by_token)
    return np.array(llm.scores[: len(ids)])


def greedy_run(llm, ids, token_by_token):
    eval_prompt(llm, ids, token_by_token)
    out, gaps = [], []
    for _ in range(GREEDY_TOKENS):
        row = np.array(llm.scores[llm.n_tokens - 1])
        t1, l1, _, l2 = top2(row)
        out.append(t1)
        gaps.append(l1 - l2)
        llm.eval([t1])
    return out, gaps


# Other llama.cpp settings for the self-agreement part: (name, Llama settings, token by token).
SELF_CONFIGS = [
    ("token_by_token", {}, True),
    ("f32_kv_cache", {"type_k": 0, "type_v": 0, "flash_attn": False}, False),  # 0 = GGML_TYPE_F32
]


def main(model_path, bench_path):
    llm = open_model(model_path)
    prompts = [json.loads(line) for line in open(bench_path, encoding="utf-8")]
    # Two prompts of each category, in file order: varied text (code, math, translation, ...).
    seen, picked = {}, []
    for p in prompts:
        c = p["category"]
        if seen.get(c, 0) < 2:
            seen[c] = seen.get(c, 0) + 1
            picked.append(p["turns"][0])

    # Teacher-forced texts: per category, its prompts joined until 128 tokens.
    by_category = {}
    for p in prompts:
        by_category.setdefault(p["category"], []).append(p["turns"][0])
    teacher = []
    for category, texts in by_category.items():
        joined, ids = "", []
        for t in texts:
            joined = (joined + "\n\n" + t) if joined else t
            ids = llm.tokenize(joined.encode(), add_bos=False, special=True)
            if len(ids) >= TEACHER_TOKENS:
                break
        ids = ids[:TEACHER_TOKENS]
        rows = teacher_rows(llm, ids, False)
        teacher.append({"category": category, "ids": ids, "top2": [top2(r) for r in rows]})

    greedy = []
    for text in picked[:24]:
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)[:96]
        out, gaps = greedy_run(llm, ids, False)
        greedy.append({"prompt_ids": ids, "tokens": out, "gaps": gaps})

    own = []
    for name, settings, token_by_token in SELF_CONFIGS:
        other = open_model(model_path, **settings)
        top1 = [[int(np.argmax(r)) for r in teacher_rows(other, t["ids"], token_by_token)] for t in teacher]
        tokens = [greedy_run(other, g["prompt_ids"], token_by_token)[0] for g in greedy]
        own.append({"name": name, "teacher_top1": top1, "greedy_tokens": tokens})

    json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "llama_cpp_python": "0.3.36",
               "teacher_forced": teacher, "greedy": greedy, "self": own}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
