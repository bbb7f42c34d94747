#!/usr/bin/env bash
# What a real GPU compiler makes of the mat-vec kernels, without the GPU: every form's SPIR-V
# (the `spirv` example: as wgpu writes it for a Vulkan card) and llama.cpp 0.3.36's Vulkan mat-vec
# shaders (compiled as its build compiles them, by the glslc its whole backend needs,
# tests/bench/glslc.sh; specialized as it specializes them for NVIDIA: one 32-wide subgroup a
# workgroup, 2 outputs (f32) or 1 (integer dot products on 8-bit activations)) go through a
# Mesa driver for a card that is not there, which reports registers and spills and dumps the
# machine code; gpu-isa.py counts the instructions of the inner loop per weight and row.
# ISA_DRIVER=radv (the default): RADV's null device (RADV_FORCE_FAMILY, the host's Mesa: AMD's
# ACO compiler for an RDNA2 card). ISA_DRIVER=nak: NVK, Mesa's NVIDIA driver, on the DRM shim
# of Debian sid's Mesa (tests/fetch-mesa.sh; NOUVEAU_CHIPSET, default 194: an Ada AD104, the
# newest family NVK compiles for; the H200 is Hopper, one generation on), its compiler NAK
# writing NVIDIA's instructions with their issue delays. Each kernel is compiled as it runs:
# mars's under wgpu's device robustness (robustBufferAccess and robustBufferAccess2, which
# wgpu enables wherever the device has them; ISA_MARS_ROBUST=off counts them without), the
# peer's mat-vec pipelines without (llama.cpp creates them with robustness disabled). Counts,
# not times: what they compare is the work each kernel asks of a GPU for a weight, beside the
# peer's, on one compiler. A benchmark command, not a CI step (a few minutes).
# ISA_WRITE=DIR: compile nothing here; write the chosen modules (mars's forms also as the
# direct launches compile them, wgpu's safe pipelines: "mars-checked:…") and their table to
# DIR, for a GPU machine whose own driver `gpu-isa.py --stats DIR/table.tsv` asks there (the
# GPU bundle's registers stage: NVIDIA's own register counts beside NAK's).
#   usage: bash tests/bench/bench.sh gpu-isa [FILTER]   (FILTER: an awk regex on the names, e.g.
#   'llama|q4k-wide-1-.*-r1$')
set -euo pipefail
cd "$(dirname "$0")/../.."
filter=${1:-.}
family=${RADV_FAMILY:-navi21}
driver=${ISA_DRIVER:-radv}
mars_robust=${ISA_MARS_ROBUST:-wgpu}
case "$driver" in radv | nak) ;; *) echo "gpu-isa: ISA_DRIVER is radv or nak, not $driver" >&2; exit 2 ;; esac
case "$mars_robust" in wgpu | off) ;; *) echo "gpu-isa: ISA_MARS_ROBUST is wgpu or off, not $mars_robust" >&2; exit 2 ;; esac
# A driver and the `vulkan` package (cffi over the system's Vulkan loader, pinned, in a venv of
# its own) where the modules are compiled here, not where they are only written (ISA_WRITE).
venv="$HOME/.cache/mars/isa-venv"
if [ -z "${ISA_WRITE:-}" ]; then
  need=()
  dpkg -s mesa-vulkan-drivers >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
  if [ "$driver" = radv ] && [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c 'import vulkan' 2>/dev/null || "$venv/bin/pip" install -q "vulkan==1.3.275.1"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo run --release -q -p mars-kernels --features gpu --example spirv -- "$work/mars"
# llama.cpp's shader sources: the sdist the peer's tools are built from (downloaded once).
src="${LLAMA_CPP_DIR:-$HOME/.cache/mars/llama.cpp-0.3.36}/src"
if [ ! -d "$src" ]; then
  mkdir -p "$(dirname "$src")"
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps "llama-cpp-python==0.3.36" -d "$tmp" >&2
  tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp"
  mv "$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp" "$src"
  rm -rf "$tmp"
fi
shaders="$src/ggml/src/ggml-vulkan/vulkan-shaders"
# The first line of what glslc.sh prints (sed reads the rest: `head` closing the pipe early
# killed the script with SIGPIPE under pipefail, now and then).
glslc=$(bash tests/bench/glslc.sh | sed -n 1p)
table="$work/table.tsv"
: >"$table"
base="-DFLOAT_TYPE=float -DFLOAT_TYPEV2=vec2 -DD_TYPE=float"
f32b="-DB_TYPE=float -DB_TYPEV2=vec2 -DB_TYPEV4=vec4"
# name, shader, defines, specialization (BLOCK_SIZE, NUM_ROWS, NUM_COLS), weights a pass, rows.
# The f32 mat-vec (what llama.cpp runs on NVIDIA for one row where rows are <= 4096, and for
# Q6_K always): 16 threads a K-quant super-block, each 16 weights (Q4_K) of each of 2 outputs a
# pass. The 8-bit form (mul_mat_vecq: every batch of 2-8 rows, and one row over longer rows, on
# NVIDIA; activations as Q8_1): 16 weights of 1 output a thread an iteration, four iterations a
# pass of its loop (unrolled by hand). Its Q6_K form runs on Intel only (ggml-vulkan: "q6_k
# only has 2-byte alignment", its blocks read 2 bytes a load): counted beside mars's.
peer() { # name shader defines outputs rows per_pass
  local out="$work/$1.spv"
  # shellcheck disable=SC2086
  "$glslc" -fshader-stage=compute --target-env=vulkan1.2 -O "$shaders/$2" $base $3 -DUSE_SUBGROUP_ADD=1 -o "$out"
  printf 'llama.cpp %s\t%s\t0=32,1=%s,2=%s\t%s\t%s\toff\n' "$1" "$out" "$4" "$5" "$6" "$5" >>"$table"
}
q8b="-DACC_TYPE=float"
for r in 1 8; do
  peer "q4_k-f32-r$r" mul_mat_vec_q4_k.comp "-DDATA_A_Q4_K=1 $f32b" 2 "$r" 32
  peer "q6_k-f32-r$r" mul_mat_vec_q6_k.comp "-DDATA_A_Q6_K=1 $f32b" 2 "$r" 32
  peer "q4_k-q8-r$r" mul_mat_vecq.comp "-DDATA_A_Q4_K=1 $q8b" 1 "$r" 64
  peer "q6_k-q8-r$r" mul_mat_vecq.comp "-DDATA_A_Q6_K=1 $q8b" 1 "$r" 64
done
forms() { # the table's rows for the forms the spirv example wrote to $2, named "$1 …"
  while IFS=$'\t' read -r name _ _ outs _ rows per_pass; do
    [ "$name" = name ] && continue
    printf '%s %s\t%s\t-\t%s\t%s\t%s\n' "$1" "$name" "$2/$name.spv" "$per_pass" "$rows" "$mars_robust" >>"$table"
    : "$outs"
  done <"$2/forms.tsv"
}
forms mars "$work/mars"
if [ -n "${ISA_WRITE:-}" ]; then
  # Also as the direct launches compile them (wgpu's safe pipelines: every loop's bound
  # emulated, indices clamped).
  ISA_CHECKED=1 cargo run --release -q -p mars-kernels --features gpu --example spirv -- "$work/mars-checked"
  forms mars-checked "$work/mars-checked"
fi
# The filter on the names alone ("llama.cpp:…", "mars:…", "mars-checked:…").
sed 's/^\(llama.cpp\|mars\|mars-checked\) /\1:/' "$table" | awk -F'\t' -v re="$filter" '$1 ~ re' >"$work/chosen.tsv"
if [ -n "${ISA_WRITE:-}" ]; then
  # The chosen modules and their table (paths relative to it) for a GPU machine, whose own
  # driver's statistics `gpu-isa.py --stats` reads there (the GPU bundle's registers stage).
  mkdir -p "$ISA_WRITE"
  : >"$ISA_WRITE/table.tsv"
  while IFS=$'\t' read -r name path rest; do
    file="$(echo "$name" | tr ':' '-').spv"
    cp "$path" "$ISA_WRITE/$file"
    printf '%s\t%s\t%s\n' "$name" "$file" "$rest" >>"$ISA_WRITE/table.tsv"
  done <"$work/chosen.tsv"
  echo "wrote $(wc -l <"$ISA_WRITE/table.tsv") modules to $ISA_WRITE"
  exit 0
fi
if [ "$driver" = nak ]; then
  chip=${NOUVEAU_CHIPSET:-194}
  root="$(dirname "$(bash tests/fetch-mesa.sh)")/root"
  lib="$root/usr/lib/x86_64-linux-gnu"
  cat >"$work/nak" <<SH
#!/bin/sh
# The compiling child on sid's NVK, its card the DRM shim's.
export NOUVEAU_CHIPSET=$chip VK_DRIVER_FILES=$root/usr/share/vulkan/icd.d/nouveau_icd.json
export XDG_RUNTIME_DIR=\${XDG_RUNTIME_DIR:-/tmp}
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" --preload "$lib/libnouveau_noop_drm_shim.so" "\$@"
SH
  chmod +x "$work/nak"
  echo "NVK (NAK) on Mesa's DRM shim, chipset 0x$chip, Mesa $(zcat "$root/usr/share/doc/mesa-vulkan-drivers/changelog.Debian.gz" | sed -n 1p | cut -d' ' -f2); mars's kernels robustness: $mars_robust"
  ISA_DRIVER=nak ISA_RUNNER="$work/nak" "$venv/bin/python" tests/bench/gpu-isa.py "$work/chosen.tsv"
  exit 0
fi
echo "RADV $family (null device), Mesa $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers); mars's kernels robustness: $mars_robust"
XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} NODEVICE_SELECT=1 RADV_FORCE_FAMILY=$family \
  VK_DRIVER_FILES=/usr/share/vulkan/icd.d/radeon_icd.x86_64.json \
  "$venv/bin/python" tests/bench/gpu-isa.py "$work/chosen.tsv"
