"""llama.cpp's speculative examples beside mars on the same prompts: the one place that writes
Spec-Bench prompts as the pair's chat template for them, and reads their logs back.

  python3 tests/bench/llama-spec.py prompts CATEGORY LIMIT DIR   # DIR/p0.txt, p1.txt, ... (LIMIT 0: all)
  python3 tests/bench/llama-spec.py summary LOG                   # one JSON line: the log's totals

The prompts are the first turn of the category's lines in file order, as `mars compare
--category C --limit N --chat` takes them, in Qwen2.5's ChatML with its default system prompt
(what the GGUF's template gives mars). llama-speculative and llama-speculative-simple print, per
run, "decoded N tokens in S seconds", n_drafted and n_accept; each target pass keeps the accepted
drafts plus one token, so passes = tokens - accepted.
"""

import json
import os
import re
import sys
from pathlib import Path

SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def prompts(category: str, limit: int, out: Path) -> None:
    n = 0
    # Spec-Bench in the data cache (tests/fetch-spec-bench.sh writes it).
    data = Path(os.environ.get("MARS_DATA_DIR", Path.home() / ".cache" / "mars" / "data"))
    bench = (data / "spec_bench.jsonl").read_text(encoding="utf-8")
    for line in bench.splitlines():
        q = json.loads(line)
        if q.get("category") != category:
            continue
        if limit and n >= limit:
            break
        text = (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{q['turns'][0]}<|im_end|>\n<|im_start|>assistant\n"
        )
        (out / f"p{n}.txt").write_text(text, encoding="utf-8")
        n += 1


def summary(log: Path) -> dict[str, float]:
    text = log.read_text(encoding="utf-8", errors="replace")
    tokens = sum(int(x) for x in re.findall(r"decoded\s+(\d+) tokens in", text))
    secs = sum(
        float(x)
        for x in re.findall(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds", text)
    )
    drafted = sum(int(x) for x in re.findall(r"n_drafted\s*=\s*(\d+)", text))
    accepted = sum(int(x) for x in re.findall(r"n_accept\s*=\s*(\d+)", text))
    runs = len(re.findall(r"decoded\s+\d+ tokens in", text))
    # Runs that died (the caller writes "ABORTED <prompt>" for each) add no tokens.
    aborted = len(re.findall(r"^ABORTED ", text, flags=re.MULTILINE))
    passes = max(tokens - accepted, 1)
    return {
        "runs": runs,
        "aborted": aborted,
        "tokens": tokens,
        "seconds": secs,
        "tokens_per_second": tokens / max(secs, 1e-9),
        "drafted": drafted,
        "accepted": accepted,
        "tau": tokens / passes,
        "rows_per_pass": 1 + drafted / passes,
        "acceptance": accepted / max(drafted, 1),
    }


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "prompts":
        prompts(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        print(json.dumps(summary(Path(sys.argv[2]))))
    else:
        sys.exit(__doc__)
