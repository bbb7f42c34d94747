#!/usr/bin/env python3
"""Token ids of test strings under llama.cpp's tokenizer for SmolLM2-135M-Instruct Q4_1.

Run: python3 -m pip install llama-cpp-python==0.3.36 (builds llama.cpp from source), then
python3 make_fixture.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf > smollm2.json
"""
import json
import sys

STRINGS = [
    "Hello, world!", "hello world", " Hello", "  two leading spaces", "trailing space ",
    "The quick brown fox jumps over the lazy dog.", "I'm sure you'll see they've done it.",
    "café", "naïve résumé", "Crème brûlée à la française", "Ångström", "Straße", "Ελληνικά",
    "Привет, мир", "עברית", "العربية", "हिन्दी", "日本語のテキスト", "中文分词测试", "한국어 문장",
    "emoji 😀", "👍🏽", "👨‍👩‍👧‍👦 family", "🏳️‍🌈", "❤️‍🔥 and ✨", "math: ∑ ∫ √ ∞ ≠ ≤",
    "12345", "3.14159", "1,000,000", "2026-11-21", "version 0.22.1", "phone: +1 (555) 010-9999",
    "def f(x):\n    return x * 2\n", "fn main() {\n\tprintln!(\"{}\", 1 + 2);\n}",
    "<div class=\"a\">text</div>", "SELECT * FROM t WHERE id = 42;", "a = {'k': [1, 2, 3]}",
    "x\ty\tz", "line1\nline2\r\nline3", "\n\n\n", "   ", "\t\t", " \n \n",
    "multiple     spaces", "end with newline\n", "ALLCAPS WORDS", "camelCaseIdentifier",
    "snake_case_identifier", "https://example.com/path?q=1&r=2", "user@example.com",
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>",
    "text<|im_end|>more", "don't", "'quoted'", "\"double\"", "(parens) [brackets] {braces}",
    "...", "?!", "—em dash– en dash", "a", "",
]


def main(path):
    # Imported here so that make_qwen2_fixture.py can reuse STRINGS without llama-cpp-python.
    from llama_cpp import Llama

    llm = Llama(model_path=path, vocab_only=True, verbose=False)
    cases = [{"text": s, "ids": llm.tokenize(s.encode(), add_bos=False, special=True)} for s in STRINGS]
    json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "special": True, "cases": cases},
              sys.stdout, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
