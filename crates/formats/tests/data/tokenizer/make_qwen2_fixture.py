#!/usr/bin/env python3
"""Token ids of test strings under llama.cpp's tokenizer for Qwen2.5-Coder (gpt2 BPE, qwen2
pre-tokenizer): the strings of make_fixture.py plus llama.cpp's own qwen2 test strings
(models/ggml-vocab-qwen2.gguf.inp) and more code, CJK and whitespace runs.

Run: BIN=$(bash tests/bench/bench.sh llama-cpp); cmake --build "$BIN/../.." --target llama-tokenize
     python3 make_qwen2_fixture.py "$BIN" PATH/TO/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf > qwen2.json
"""
import json
import os
import subprocess
import sys
import tempfile

from make_fixture import STRINGS

MORE = [
    "def add(a, b):\n\treturn a + b\n\n\nclass Foo:\n    pass\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "    if x:\n        y = 1\n    else:\n        y = 2",
    "#include <stdio.h>\nint main(void) { return 0; }",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)",
    "// comment\n/* block */\n\"\"\"docstring\"\"\"",
    "          ten spaces", "\n\n\n\n\n\n", "\t\t\t\tindented", " \t \t mixed",
    "一二三四五六七八九十", "我爱北京天安门", "これは日本語です。", "中文 and English 混合",
    "１２３ full-width", "<|im_start|>system\nYou are Qwen.<|im_end|>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "x=1;y=2;z=x+y",
    "0x1F 0b1010 1e-9 -42", "αβγ δεζ", "a\u00a0b",
]


def llama_cpp_strings(bin_dir):
    inp = os.path.join(bin_dir, "..", "..", "src", "models", "ggml-vocab-qwen2.gguf.inp")
    with open(inp, encoding="utf-8") as f:
        parts = f.read().split("\n__ggml_vocab_test__\n")
    return [p for p in parts if p]


def tokenize(bin_dir, model, text):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode())
        path = f.name
    try:
        out = subprocess.run(
            [os.path.join(bin_dir, "llama-tokenize"), "-m", model, "-f", path, "--ids",
             "--no-bos", "--log-disable"],
            capture_output=True, check=True, env={**os.environ, "LD_LIBRARY_PATH": bin_dir},
        ).stdout.decode().strip().splitlines()[-1]
    finally:
        os.unlink(path)
    return json.loads(out)


def main(bin_dir, model):
    strings = [s for s in STRINGS if s] + llama_cpp_strings(bin_dir) + MORE
    seen, cases = set(), []
    for s in strings:
        if s not in seen:
            seen.add(s)
            cases.append({"text": s, "ids": tokenize(bin_dir, model, s)})
    json.dump({"model": os.path.basename(model), "special": True, "cases": cases},
              sys.stdout, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
