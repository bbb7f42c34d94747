#!/usr/bin/env bash
# The host's side of a GPU card's passes, measured without a GPU: the model's passes (1, 5 and
# 16 rows, each followed by its summaries' read, as decoding and verification run them) on
# wgpu's no-op backend dressed as a card (`WGPU_NOOP_BACKEND=1`, `mars_model::open_wgpu`): the
# card's configuration is recorded and submitted through CubeCL and wgpu-core and nothing runs,
# so a pass's time is what the host spends on its launches (no driver: a card's driver adds its
# own). After a short prompt and after a long one (split attention's extra launches). A card is
# host-bound where this time reaches its decode time; `gpu_cost launch` on the card says the
# same from the other side. With PERF=1 a perf profile follows. With COUNT=1 the instructions a
# launch instead, which do not move with the machine's load: callgrind over 40 and over 120
# one-row passes after 64 tokens, the difference's instructions divided by the launches, on the
# caller's thread (where direct launches are recorded, `gpu::direct`; less its spinning wait for
# CubeCL's thread, which valgrind stretches by running one thread at a time) and on CubeCL's runtime
# thread (where its launches are: in all, and its tasks' work alone; the rest is its wait for
# them, which spins). MARS_GPU_LAUNCH=cubecl counts CubeCL's launches.
#   usage: bash tests/bench/bench.sh gpu-host MODEL.gguf [REPS] [LONG_PROMPT]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: bench.sh gpu-host MODEL.gguf [REPS] [LONG_PROMPT]}
reps=${2:-1000}
long=${3:-1024}
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p mars-model --features wgpu --example step_cost
bin=$target/release/examples/step_cost
if [ "${COUNT:-0}" = 1 ]; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  for n in 40 120; do
    STEP_DEVICE=wgpu WGPU_NOOP_BACKEND=1 STEP_PROMPT=64 STEP_REPS=$n valgrind -q --tool=callgrind \
      --separate-threads=yes --callgrind-out-file="$dir/$n.%p" "$bin" "$model" 1 >"$dir/$n.txt" 2>&1 &
  done
  wait
  # Thread 2 is the runtime's (the first the process starts; thread 1 is the caller's).
  python3 - "$dir" <<'PY'
import glob, re, subprocess, sys
d = sys.argv[1]
def inclusive(n, thread, yes="yes"):
    f = glob.glob(f"{d}/{n}.*-{thread}")[0]
    out = subprocess.run(["callgrind_annotate", f"--inclusive={yes}", "--threshold=100", f],
                         capture_output=True, text=True, check=True).stdout
    cost = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*?)(?: \[.*)?$", line)
        if m:
            cost.setdefault(m.group(2), int(m.group(1).replace(",", "")))
    return cost
launches = int(re.search(r"(\d+) launches a pass", open(f"{d}/40.txt").read()).group(1))
a, b = inclusive(40, "01"), inclusive(120, "01")
ra, rb = inclusive(40, "02"), inclusive(120, "02")
per = lambda x, y, k: (y.get(k, 0) - x.get(k, 0)) / 80 / launches / 1e3
tasks = "???:cubecl_environment::stream::id::StreamId::executes"
# The caller's wait for CubeCL's thread spins in the channel's submit (its own instructions):
# left out, as valgrind runs one thread at a time and so stretches the wait.
wait = "???:cubecl_common::device::handle::channel::ChannelDeviceHandle::submit_inner"
sa, sb = inclusive(40, "01", "no"), inclusive(120, "01", "no")
spin = max(0.0, per(sa, sb, wait))
print(f"{launches} launches a one-row pass; instructions a launch: "
      f"{per(a, b, 'PROGRAM TOTALS') - spin:.1f}k on the caller's thread "
      f"(its spinning wait for CubeCL's thread, {spin:.1f}k, left out), "
      f"{per(ra, rb, 'PROGRAM TOTALS'):.1f}k on CubeCL's runtime thread "
      f"({per(ra, rb, tasks):.1f}k its tasks' work)")
PY
  exit 0
fi
for depth in 64 "$long"; do
  echo "after $depth tokens (host only: wgpu's no-op backend as a card, $reps passes each):"
  STEP_DEVICE=wgpu WGPU_NOOP_BACKEND=1 STEP_PROMPT=$depth STEP_REPS=$reps "$bin" "$model" 1 5 16
done
if [ "${PERF:-0}" = 1 ]; then
  data=$(mktemp)
  trap 'rm -f "$data"' EXIT
  # Past load and warm-up (-D), the functions with what they call (both threads: the caller mostly waits on CubeCL's runtime thread).
  STEP_DEVICE=wgpu WGPU_NOOP_BACKEND=1 STEP_REPS=$((reps * 4)) \
    perf record -q -D 2000 --call-graph dwarf,16384 -F 1000 -o "$data" "$bin" "$model" 1 >/dev/null
  perf report -i "$data" --children --sort symbol -g none 2>/dev/null | grep '%' | head -40
fi
