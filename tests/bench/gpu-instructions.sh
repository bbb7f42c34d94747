#!/usr/bin/env bash
# What an m-row call of the WGSL matmul costs on lavapipe in instructions, not seconds: the
# gpu_cost example under valgrind, making N calls after a warm-up; callgrind counts every
# instruction the process runs, and the shader code lavapipe's LLVM compiled is the part with no
# object file (callgrind's "???"), so its count over N + 1 is one call's, the same from run to
# run whatever else the machine does (the process total is not: lavapipe caches compiled shaders
# on disk, and waiting threads poll). Then each m against one row: what a row adds on a
# CPU-emulated GPU, as a count where wall-clock times move ~1.5x.
# A benchmark command, not a CI step (~10 minutes: valgrind runs ~50x slower).
#   usage: bash tests/bench/bench.sh gpu-instructions [SHAPES] [ROWS] [N]
#   SHAPES: indices into gpu_cost's shapes (0 SmolLM2 FFN Q4_1, 1 SmolLM2 head Q8_0,
#   2 Qwen2.5-1.5B FFN Q4_K, 3 Qwen2.5-0.5B FFN Q5_0, 4 Qwen2.5-0.5B head Q8_0, 5 Qwen2.5-0.5B
#   FFN down Q4_K, 6 the same shape in Q6_K), default "0 1 2";
#   ROWS default "1 5 16"; N default 2. FAN=1 or FAN=4: outputs a team (default: the device's).
set -euo pipefail
cd "$(dirname "$0")/../.."
shapes=${1:-0 1 2}
rows=${2:-1 5 16}
n=${3:-2}
command -v valgrind >/dev/null || { echo "needs valgrind (Debian: apt install valgrind)" >&2; exit 1; }
cargo build --release -q -p mars-kernels --features gpu --example gpu_cost
bin="${CARGO_TARGET_DIR:-target}/release/examples/gpu_cost"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() { # shape m calls -> instructions in the shader code, over all calls
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" "$1" "$2" "$3" ${FAN:-} >/dev/null 2>&1
  callgrind_annotate --threshold=100 "$out/cg" | grep -F '[???]' \
    | awk '{ gsub(",", "", $1); s += $1 } END { printf "%.0f\n", s }'
}
for s in $shapes; do
  line="shape $s:"
  one=""
  for m in $rows; do
    per=$(( $(count "$s" "$m" "$n") / (n + 1) ))
    [ -n "$one" ] || one=$per
    line+=$(python3 -c "import sys; p, o, m = map(int, sys.argv[1:]); print(f'  m={m}: {p/1e6:.1f} M instr ({p/o:.2f}x)', end='')" "$per" "$one" "$m")
  done
  echo "$line"
done
