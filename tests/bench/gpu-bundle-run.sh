#!/usr/bin/env bash
# The runner each part of tests/bench/gpu-bundle.sh carries: `add` copies the part it sits in to
# $WORK (default ~/mars-gpu); a stage runs on what has arrived (the models it finds).
#   usage: bash PART/run.sh add | drop | tests | launch | stream | stream-unrobust | tune | peers | price | reads | ways | teams | long | spec | profile | submits | registers | all | lease …
#   env:   WORK, OUT, ROUNDS, PEERS_PP, PEERS_TG, PEER_MODELS (the peers stage's models, in order),
#          TEAM_MODELS (the teams stage's), TEAMS_PP, TEAMS_TG (its prompt and decode tokens, 128 and
#          64: a rehearsal on lavapipe takes 16 and 8 so that every row runs), PROFILE_MODELS (the profile stage's; all three default to every
#          model, smallest first),
#          LONG_MODELS (the long stage's; default the smallest and the 7B), LONG_PP (2048: eight 256-key blocks; a mars speed run prefills it three times)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-$HOME/mars-gpu}
out=${OUT:-$work/out}
in=$work/in
mkdir -p "$in" "$work/bin" "$work/models" "$out"
unxz() {
  python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$1" "$2"
}
setup() { # unpacks what has arrived and is not unpacked yet
  local t b s m f d name n i all
  for b in mars gpu_cost; do
    if [ ! -x "$work/bin/$b" ] && [ -f "$in/$b.xz" ]; then
      unxz "$in/$b.xz" "$work/bin/$b" && chmod +x "$work/bin/$b"
    fi
  done
  if [ ! -d "$work/repo" ] && [ -f "$in/scripts.tar.xz" ]; then
    mkdir -p "$work/repo" && tar -C "$work/repo" -xJf "$in/scripts.tar.xz"
  fi
  [ -d "$work/llama" ] || { [ -f "$in/llama.tar.xz" ] && tar -C "$work" -xJf "$in/llama.tar.xz"; }
  [ -f "$work/spec_bench.jsonl" ] || { [ -f "$in/spec_bench.jsonl.xz" ] && unxz "$in/spec_bench.jsonl.xz" "$work/spec_bench.jsonl"; }
  [ -x /usr/bin/time ] || { [ -f "$in/time" ] && cp "$in/time" /usr/bin/time && chmod +x /usr/bin/time; }
  [ -d "$work/isa" ] || { [ -f "$in/isa.tar.xz" ] && tar -C "$work" -xJf "$in/isa.tar.xz"; }
  for t in "$in"/test-*.xz; do
    [ -e "$t" ] || continue
    b="$work/bin/$(basename "$t" .xz)"
    [ -x "$b" ] || { unxz "$t" "$b" && chmod +x "$b"; }
  done
  # Split files, once all their pieces are in.
  if [ -f "$in/pieces.txt" ]; then
    while read -r name n; do
      [ -f "$in/$name" ] && continue
      all=1
      for i in $(seq 0 $((n - 1))); do [ -f "$in/$(printf '%s.%03d' "$name" "$i")" ] || all=0; done
      if [ $all = 1 ]; then
        for i in $(seq 0 $((n - 1))); do cat "$in/$(printf '%s.%03d' "$name" "$i")"; done >"$in/$name"
      fi
    done <"$in/pieces.txt"
  fi
  for f in "$in"/*.gguf; do [ -e "$f" ] && [ ! -f "$work/models/$(basename "$f")" ] && cp "$f" "$work/models/"; done
  for s in "$in"/*.skel.xz; do
    [ -e "$s" ] && [ ! -f "${s%.xz}" ] && unxz "$s" "${s%.xz}"
  done
  # Smallest first; a shape the folder has no room for is left packed, said at each setup (a 72B's 47 GB
  # beside the others may not fit a machine's /dev/shm: the drop stage makes room).
  for s in $(ls "$in"/*.skel >/dev/null 2>&1 && python3 -c "
import struct, sys
def size(p):  # the model's bytes: after the 6-byte magic, the header's length, then the file's
    with open(p, 'rb') as f:
        f.read(6)
        return struct.unpack('<QQ', f.read(16))[1]
print(' '.join(sorted(sys.argv[1:], key=size)))" "$in"/*.skel); do
    m="$work/models/$(basename "$s" .skel).skeleton.gguf"
    # Said once: a lease's steps (LEASE_END set) run setup again, and would say it each time.
    [ -f "$m" ] || python3 "$work/repo/tests/bench/gguf-skeleton.py" unpack "$s" "$m" 2>&1 \
      | tail -1 | sed 's/^ValueError: /not unpacked: /' | if [ -n "${LEASE_END:-}" ]; then cat >/dev/null; else cat; fi
  done
  # A Vulkan loader where the machine has none, glvnd's dispatch libraries where it has a loader
  # but not them (NVIDIA's ICD, libGLX_nvidia, then yields no vkCreateInstance and wgpu finds no
  # adapter: seen on a lent H100), and NVIDIA's driver manifest where the loader does not look.
  if { ! ldconfig -p | grep -q 'libvulkan.so.1 ' || ! ldconfig -p | grep -q 'libGLdispatch.so.0 '; } \
    && [ -f "$in/debs.tar" ]; then
    mkdir -p "$work/debs" && tar -C "$work/debs" -xf "$in/debs.tar"
    for d in "$work"/debs/*.deb; do dpkg -x "$d" /; done
    ldconfig
  fi
  local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  if [ -f $icd ] && [ ! -f /usr/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd
  fi
  export MARS_BIN=$work/bin/mars LLAMA_VK_BIN=$work/llama MARS_MODEL_DIR=$work/models
  export MARS_TUNE_CACHE=${MARS_TUNE_CACHE:-$out/tune.tsv}
  export SPEC_BENCH=$work/spec_bench.jsonl ROUNDS=${ROUNDS:-2}
  export PEERS_PP=${PEERS_PP:-128} PEERS_TG=${PEERS_TG:-64}
}
models() { ls -Sr "$work"/models/*.gguf 2>/dev/null | tr '\n' ' '; } # smallest first
tmo() { # timeout N COMMAND…, cut to what is left before LEASE_END (epoch seconds) where set
  local n=$1 left
  shift
  if [ -n "${LEASE_END:-}" ]; then
    left=$((LEASE_END - $(date +%s)))
    [ "$left" -ge 1 ] || { echo "not run, the lease step's time spent: ${*:1:2}" >&2; return 124; }
    [ "$left" -lt "$n" ] && n=$left
  fi
  timeout -k 5 "$n" "$@"
}
named() { # the models whose names hold any of these (e.g. 0.5B 7B), smallest first
  local m p
  for m in $(models); do for p in "$@"; do case $(basename "$m") in *"$p"*) echo "$m"; break ;; esac; done; done | tr '\n' ' '
}
# One call of a lease, the most wanted figures first. A call runs at most 10 minutes and brings
# back at most 8 files, and a lease is 15 minutes in all, so: LEASE_STEPS (default below) run
# in order within LEASE_S seconds (480: with `add` unpacking the shapes, ~50 s on the H200, a call
# of ~9 minutes) of the stage's start, each starting only where its
# least time is left and stopped at what is left; everything they print goes to $OUT/lease.md
# (each stage's own files to $WORK/out-lease), the tuning table to $OUT/tune.tsv and the
# peers' speed JSONs to $OUT/speed.tar (a second call's price step lacks the first's). Steps:
# tests, launch, stream, stream-unrobust, tune, long, submits (the stages of those names, one
# round), peers-first
# (mars beside llama.cpp on the 0.5B and the 7B shape: the principal gap, and the draft and target
# that price speculation), price, reads (target-only decoding a read a token against four a read, on the
# 0.5B), ways (direct launches against CubeCL's on the 0.5B and the 7B),
# registers (the driver's own statistics of every kernel form beside llama.cpp's: seconds, and
# the registers of NVIDIA's own compiler, which nothing else here runs), teams
# (every kernel form on the 7B shape), peers-rest (the
# 1.5B, 14B, 32B and, where unpacked, 72B shapes), profile (the 0.5B's and the 7B's per-kernel
# split beside llama.cpp's per-op log: second, right after peers-first, since no lease has
# reached it in four places down the list and it says where a token's time goes, which every
# further kernel change needs; the 0.5B's against its decode time says whether the draft is
# bound by its kernels or by the host's launches, which `launch` times), peers-72b (the 7B, 14B and 32B shapes dropped for good first, so
# that the 72B's fits the folder: last). The kernel tests go after the figures: on the H200
# they took 200 s of a 470 s call (2026-12-04). A second call takes the rest, e.g.
# LEASE_STEPS="peers-rest price tests profile stream tune long peers-72b".
lease() {
  local start=$SECONDS budget=${LEASE_S:-480} final=$out step least cap left env s drop
  local steps=${LEASE_STEPS:-peers-first profile registers ways price teams launch peers-rest price tests stream tune long}
  export MARS_TUNE_CACHE=$final/tune.tsv
  mkdir -p "$work/out-lease"
  {
    echo "# lease: $steps (${budget} s), $(date -u '+%F %T') UTC, the build of $(cat "$in/build.txt" 2>/dev/null || echo '(unnamed)')"
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null
    for step in $steps; do
      env=() s=$step least=60 cap=300 drop=
      case $step in
        tests) cap=200 ;;
        launch) least=20 cap=60 ;;
        stream | stream-unrobust | submits) cap=240 ;;
        tune) cap=300 ;;
        long) least=120 ;;
        price) least=5 cap=30 ;;
        reads) least=20 cap=60 env=(READ_MODELS="$(named 0.5B)") ;;
        ways) least=60 cap=180 env=(WAYS_MODELS="$(named 0.5B 7B)") ;;
        peers-first) s=peers least=90 cap=300 env=(PEER_MODELS="$(named 0.5B 7B)") ;;
        peers-rest) s=peers least=90 env=(PEER_MODELS="$(named 1.5B 14B 32B 72B)") ;;
        peers-72b) # after the time check: the 7B, 14B and 32B dropped so that the 72B unpacks
          s=peers least=120 drop=1 env=(PEER_MODELS="$(compgen -G "$in/*72B*")") ;;
        teams) least=120 cap=240 env=(TEAM_MODELS="$(named 7B)") ;;
        profile) least=40 cap=240 env=(PROFILE_MODELS="$(named 0.5B 7B)") ;;
        registers) least=20 cap=90 ;;
        *) echo "unknown lease step $step"; continue ;;
      esac
      if [[ ${env[*]:-} == *_MODELS= ]]; then
        echo "== $step: skipped, none of its models is here"
        continue
      fi
      left=$((budget - (SECONDS - start)))
      if [ "$left" -lt "$least" ]; then
        echo "== $step: skipped, ${left} s left (it needs ${least})"
        continue
      fi
      if [ -n "$drop" ]; then
        DROP="7B 14B 32B" bash "$here/run.sh" drop >/dev/null
        env=(PEER_MODELS="$(named 72B)")
        left=$((budget - (SECONDS - start))) # the 72B's unpacking took its share
        if [[ ${env[*]} == *_MODELS= ]]; then
          echo "== $step: skipped, the 72B shape did not unpack"
          continue
        fi
      fi
      [ "$left" -lt "$cap" ] && cap=$left
      echo "== $step (at $((SECONDS - start)) s, at most ${cap} s)"
      # The GPU's clocks, temperature and power as each stage starts: whether a figure was
      # taken at the clocks the peer's was (an idle H200 sat at 345 MHz, 1980 under load).
      # (The reasons' field was renamed in newer drivers: whichever this one knows.)
      nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null \
        | sed 's/^/   GPU: /'
      { nvidia-smi --query-gpu=clocks_event_reasons.active --format=csv,noheader 2>/dev/null \
        || nvidia-smi --query-gpu=clocks_throttle_reasons.active --format=csv,noheader 2>/dev/null; } \
        | sed 's/^/   GPU clocks held back by (bit mask): /'
      # Every command a stage times out (tmo) stops by LEASE_END, nested scripts included.
      env "${env[@]}" ROUNDS=1 OUT="$work/out-lease" LEASE_END=$(($(date +%s) + cap)) \
        bash "$here/run.sh" "$s" 2>&1 | grep -v XDG_RUNTIME_DIR
    done
    echo "== lease: done at $((SECONDS - start)) s"
  } | tee -a "$final/lease.md"
  # The peers' speed JSONs as one file, so that figures from two calls (two machines) can be
  # priced together here: gpu-price.py DIR 0.5B over both unpacked.
  if [ -d "$work/speed" ]; then tar -C "$work" -cf "$final/speed.tar" speed; fi
  # The registers stage's SASS (or the pipeline caches it found none in): a file back from
  # $OUT is at most 16 MiB, so without the caches and binary forms where they would pass it.
  if [ -d "$work/out-lease/sass" ]; then
    local t=$final/sass.tar.xz
    tar -C "$work/out-lease" -cJf "$t" sass
    if [ "$(stat -c %s "$t")" -gt 15000000 ]; then
      tar -C "$work/out-lease" -cJf "$t" --exclude='*.cache' --exclude='*.bin' sass
    fi
    if [ "$(stat -c %s "$t")" -gt 15000000 ]; then
      rm -f "$t"
      echo "sass.tar.xz left out: over 15 MB without its caches" >>"$final/lease.md"
    fi
  fi
}
stage() {
  case "$1" in
    add) cp -r "$here"/. "$in/" && rm -f "$in/run.sh" && echo "added $(basename "$here")" ;;
    drop) # DROP="7B 14B": the models whose names hold these, unpacked and packed, removed for
      # good (room for a larger shape, which the next stage's setup unpacks)
      local p
      for p in ${DROP:?DROP names the models to drop}; do
        rm -fv "$work"/models/*"$p"*.gguf "$in"/*"$p"*.skel "$in"/*"$p"*.skel.xz
      done
      setup ;;
    tests) # the binaries side by side (their pipelines compile on the host's cores: on the
      # H200 one after another took 200 s and more, 2026-12-04), each one's tail in turn
      for t in "$work"/bin/test-*; do tmo 300 "$t" >"$work/out-$(basename "$t").log" 2>&1 & done
      wait
      for t in "$work"/bin/test-*; do echo "== $(basename "$t")"; tail -15 "$work/out-$(basename "$t").log"; done ;;
    registers) # the GPU driver's own statistics of each kernel form and of llama.cpp's
      # mat-vec shaders (gpu-isa.py --stats: on NVIDIA its register counts, which say the warps
      # a multiprocessor holds, where NAK's counts stood in for them), through the `vulkan`
      # package and the cffi wheel of this machine's python3
      local py
      py=$(python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
      if [ ! -d "$work/isa/py-$py" ]; then
        mkdir -p "$work/isa/py-$py"
        for w in "$work"/isa/wheels/vulkan-*.whl "$work"/isa/wheels/pycparser-*.whl "$work"/isa/wheels/cffi-*-"$py"-*.whl; do
          [ -e "$w" ] && python3 -m zipfile -e "$w" "$work/isa/py-$py"
        done
      fi
      # Each pipeline's cache data too, and the CUDA ELFs inside it where NVIDIA's driver keeps
      # its machine code so: their SASS (cuobjdump, CUDA's, on that machine) comes back in
      # sass.tar.xz, the kernels as NVIDIA's compiler made them. Without any, the caches come
      # back instead, to read their container here.
      local sass=$out/sass
      rm -rf "$sass"
      # NVIDIA's driver writes its own disk cache of compiled shaders where told (kept, not
      # pruned): searched too.
      ISA_CACHE_DIR=$sass __GL_SHADER_DISK_CACHE_PATH=$sass/driver-cache __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
        PYTHONPATH="$work/isa/py-$py" tmo 120 python3 "$work/isa/gpu-isa.py" \
        --stats "$work/isa/modules/table.tsv" 2>&1 | tee "$out/registers.md"
      [ -d "$sass" ] || return 0
      python3 "$work/isa/gpu-isa.py" --carve "$sass" \
        | awk '{ n += $(NF - 2) } END { print NR " files searched, " n " CUDA ELF in them" }'
      local cuobjdump
      cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
      if [ -n "$(find "$sass" -name '*.cubin' -print -quit)" ]; then
        rm -f "$sass"/*.cache
        if [ -x "$cuobjdump" ]; then
          echo "| kernel (NVIDIA's compiler, its cubin) | SASS instructions | cuobjdump -res-usage |"
          echo "|---|---|---|"
          find "$sass" -name '*.cubin' | sort | while read -r c; do
            "$cuobjdump" -sass "$c" >"${c%.cubin}.sass" 2>&1
            echo "| $(basename "$c" .cubin) | $(grep -cE '/\*[0-9a-f]{4}\*/' "${c%.cubin}.sass") |" \
              "$("$cuobjdump" -res-usage "$c" 2>&1 | grep -m1 -o 'REG:.*' | tr -s ' ')) |"
          done
        fi
      fi ;;
    stream) tmo 240 "$work/bin/gpu_cost" stream 2>&1 | grep -v XDG | tee "$out/stream.md" ;;
    stream-unrobust) # the same on a device without the driver's bounds checks
      MARS_GPU_ROBUST=off tmo 240 "$work/bin/gpu_cost" stream 2>&1 | grep -v XDG | tee "$out/stream-unrobust.md" ;;
    launch) # the cost of a launch alone (stream's first table): host- or device-bound
      tmo 60 "$work/bin/gpu_cost" launch 2>&1 | grep -v XDG | tee "$out/launch.md" ;;
    tune) # every form of every group shape timed (`mars tune`), the choices kept in the table
      # that later loads here read (MARS_TUNE_CACHE)
      for m in $(models); do
        echo "== $(basename "$m")"
        tmo 120 "$MARS_BIN" tune --model "$m" --budget-ms 30 2>&1 | grep -v XDG
      done | tee "$out/tune.md" ;;
    peers)
      KEEP="$work/speed" PEER_MODELS="${PEER_MODELS:-$(models)}" SPEC="" OUT="$out/gpu-peers.md" tmo 600 bash "$work/repo/tests/bench/gpu.sh" ;;
    price) # speculation priced from the peers stage's measured costs (a projection)
      python3 "$work/repo/tests/bench/gpu-price.py" "$work/speed" 0.5B | tee "$out/price.md" ;;
    spec)
      # The pair's rows where its whole files have arrived (PAIR=real), not its skeletons.
      spec=smol
      if [ -f "$work/models/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf" ] \
        && [ -f "$work/models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf" ]; then spec="pair smol"; fi
      PEERS=0 SPEC=$spec OUT="$out/gpu-spec.md" tmo 600 bash "$work/repo/tests/bench/gpu.sh" 6 64 ;;
    profile) # mars's time a kernel (gpu-profile.sh), then llama.cpp's own per-op log of one
      # decoded token on the same model (GGML_VK_PERF_LOGGER: its last graph of 8 tokens)
      for m in ${PROFILE_MODELS:-$(models)}; do
        tmo 120 bash "$work/repo/tests/bench/gpu-profile.sh" "$m" 128 16
        if [[ $(basename "$m") == *7B* ]]; then
          # The same steps in wide teams on 8-bit activations that each product quantizes
          # itself in one-row steps (q8own: untuned; a forced form leaves the card's rule, so
          # both are named): whether those products read faster than the f32 ones, the norms'
          # and quantizations' launches of the plain 8-bit form gone (the 2026-12-04 lease's
          # wide-q8 decode was 0.71x wide f32's; the teams stage times wide-q8 beside it).
          echo "The same, wide teams on 8-bit activations quantized in the products (MARS_TUNE=off MARS_GPU_TEAM=wide MARS_GPU_ACTS=q8own):"
          MARS_TUNE=off MARS_GPU_TEAM=wide MARS_GPU_ACTS=q8own tmo 90 bash "$work/repo/tests/bench/gpu-profile.sh" "$m" 32 8
        fi
        echo "llama.cpp's per-op log, one decoded token of $(basename "$m") (llama-bench -n 8):"
        # The first Vulkan device, as the peers stage takes it (llama.cpp skips a CPU adapter,
        # lavapipe's in a rehearsal, unless named).
        GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0} LD_LIBRARY_PATH="$LLAMA_VK_BIN" \
          GGML_VK_PERF_LOGGER=1 tmo 120 "$LLAMA_VK_BIN/llama-bench" -m "$m" -ngl 99 -p 0 -n 8 \
          -r 1 2>&1 >/dev/null | awk '/^Vulkan Timings:/ { b = "" } { b = b $0 "\n" } END { printf "%s", b }'
      done | tee "$out/profile.md" ;;
    ways) # the ways of launching, alternating for 2 rounds, on the rule's forms: direct
      # (the default: each launch's bind group kept, its pipeline with wgpu's shader checks,
      # every loop's bound emulated), through CubeCL (MARS_GPU_LAUNCH=cubecl: a bind group made
      # each launch, the loops unbounded) and through CubeCL with the loops bounded as the
      # direct pipelines bound them (cubecl-bounded): direct against cubecl-bounded is the host's
      # share alone, cubecl against cubecl-bounded the kernels' loop bound alone
      for m in ${WAYS_MODELS:-$(models)}; do for r in 1 2; do for t in direct cubecl cubecl-bounded; do
        case $t in
          direct) e="MARS_GPU_LAUNCH=direct" ;; cubecl) e="MARS_GPU_LAUNCH=cubecl" ;;
          cubecl-bounded) e="MARS_GPU_LAUNCH=cubecl MARS_GPU_LOOP_BOUND=on" ;;
        esac
        tmo 90 env MARS_TUNE=off $e "$MARS_BIN" speed --model "$m" --device wgpu \
          --prompt-tokens 16 --decode-tokens 64 2>/dev/null | python3 -c "
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(print('$r', '$(basename "$m")', '$t: no result, the run failed or timed out'))
ms = d['forward_ms_by_rows']
print('$r', '$(basename "$m")', '$t', round(d['decode_tokens_per_second'], 1), 'tok/s;',
      'ms 1/5/16 rows', ' / '.join(str(round(ms[k], 2)) for k in ('1', '5', '16') if k in ms))"
      done; done; done | tee "$out/ways.txt" ;;
    reads) # target-only decoding reading back every token before its next pass against the
      # rule's chain of four passes a read (MARS_TOKENS_A_READ), alternating, on the 0.5B
      # (where a read's gap is the largest share of a token)
      for m in ${READ_MODELS:-$(models)}; do for r in 1 2; do for t in 1 4; do
        MARS_TOKENS_A_READ=$t tmo 60 "$MARS_BIN" speed --model "$m" --device wgpu \
          --prompt-tokens 16 --decode-tokens 128 2>/dev/null | python3 -c "
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(print('$r', '$(basename "$m")', '$t tokens a read: no result, the run failed or timed out'))
print('$r', '$(basename "$m")', '$t tokens a read', round(d['decode_tokens_per_second'], 1), 'tok/s')"
      done; done; done | tee "$out/reads.txt" ;;
    teams) # a whole decode, passes of 5 and 16 rows and a 128-token prefill in each matmul form,
      # alternating for ROUNDS rounds: the shapes' rules (no tuning table: on a card one-row
      # steps in wide f32 teams, passes in wide 8-bit ones where the types allow), the same
      # with passes in the one-row form (MARS_GPU_PASS=same), the table's forms
      # (tuned: the tune stage's, or timed at this first load), the forms a tuning chooses
      # timing each product back to back, its weights in the GPU's cache (tuned-warm:
      # MARS_TUNE_EVICT=off, its own table; a tuning empties the cache before each product
      # since 2026-12-04), lane teams on every group
      # (MARS_GPU_TEAM=lanes), lane and wide teams with the whole workgroup on an output on
      # every group but the SwiGLU's, which keeps 16-thread ones (MARS_GPU_TEAM=whole-lanes,
      # whole-wide: a row's super-blocks spread over 64 threads, as llama.cpp spreads them over
      # 128 where outputs are few), wide teams on 8-bit activations for every row count
      # (MARS_GPU_TEAM=wide MARS_GPU_ACTS=q8), the prefill in the
      # mat-vec form instead of tiles
      # (MARS_GPU_TILES=off), its tiles on the matrix units (MARS_GPU_TILES=units), both kinds
      # of tiles unsplit along the inputs (MARS_GPU_TILE_SPLIT=off; the rule splits launches
      # of few output workgroups: a 7B's q|k|v, o and down) and 8-bit
      # activations on every group that takes them (MARS_GPU_ACTS=q8)
      # and, third, the norms before q|k|v and gate|up in launches of their own (norm-apart:
      # the products then in their unnormed forms, which NAK gives 72 registers a thread where
      # the wide one-row form with the norm folded takes 128: whether folding pays on a card),
      # fourth, wide teams on 8-bit activations that each one-row product quantizes itself,
      # the norm's 1/rms included (wide-q8own: no launch before a product, the 8-bit form's
      # bits; NAK gives its one-row loop 40-56 registers and under half the f32 form's
      # instructions a weight), passes as wide-q8's, then the prefill on the matrix units in
      # the wide tile (units-wide: 64 rows by 128 outputs a workgroup, NAK 0.28 instructions a
      # multiply-add at 128 registers against the 32 x 64 tile's 0.66 at 56; the 2026-12-04
      # lease's 7B prefill was 0.40x the peer's in f32 tiles and no lease has timed the 7B's
      # on the units) and the tall one (units-tall: 64 x 64, 0.37 at 88), wide-q8, then the
      # narrow tile on the units, then the wide one split along the inputs 16 groups a split
      # on every product (units-wide-split: the rule splits by the narrow tile's workgroups, so
      # a wide launch has a quarter of them, 288 for the 7B's q | k | v at 128 rows), the f32
      # tiles in the tall tile (tiles-tall: 64 x 64, the browser's prefill form where Chrome
      # offers the workgroup memory, NAK 1.45 instructions a multiply-add against 1.78),
      # and at the end the norms and RoPE in launches of their own
      # (MARS_GPU_NORM=apart MARS_GPU_ROPE=apart; a card folds them into the products and
      # attention: two launches a layer fewer); and the rule on a device without the driver's
      # bounds checks (MARS_GPU_ROBUST=off: wgpu's robustBufferAccess2 splits each 16-byte
      # load into four checked ones in Mesa's NVIDIA compiler, and llama.cpp runs its mat-vec
      # pipelines without robustness); and target-only decoding reading back every token
      # before its next pass (MARS_TOKENS_A_READ=1; the rule chains four passes a read)
      for m in ${TEAM_MODELS:-$(models)}; do for r in $(seq 1 "$ROUNDS"); do for t in rule whole-wide norm-apart wide-q8own units-wide units-tall wide-q8 units units-wide-split tiles-tall pass-same tuned tuned-warm unrobust read-each lanes whole-lanes q8 no-tiles unsplit units-unsplit folds-apart; do
        case $t in
          rule) e=MARS_TUNE=off ;; tuned) e= ;; lanes) e=MARS_GPU_TEAM=lanes ;;
          whole-wide | whole-lanes) e="MARS_TUNE=off MARS_GPU_TEAM=$t" ;;
          tuned-warm) e="MARS_TUNE_EVICT=off MARS_TUNE_CACHE=$work/tune-warm.tsv" ;;
          pass-same) e="MARS_TUNE=off MARS_GPU_PASS=same" ;;
          unrobust) e="MARS_TUNE=off MARS_GPU_ROBUST=off" ;;
          read-each) e="MARS_TUNE=off MARS_TOKENS_A_READ=1" ;;
          wide-q8) e="MARS_TUNE=off MARS_GPU_TEAM=wide MARS_GPU_ACTS=q8" ;;
          wide-q8own) e="MARS_TUNE=off MARS_GPU_TEAM=wide MARS_GPU_ACTS=q8own" ;;
          folds-apart) e="MARS_TUNE=off MARS_GPU_NORM=apart MARS_GPU_ROPE=apart" ;;
          norm-apart) e="MARS_TUNE=off MARS_GPU_NORM=apart" ;;
          q8) e="MARS_TUNE=off MARS_GPU_ACTS=q8" ;;
          no-tiles) e="MARS_TUNE=off MARS_GPU_TILES=off" ;; units) e="MARS_TUNE=off MARS_GPU_TILES=units" ;;
          units-wide | units-tall) e="MARS_TUNE=off MARS_GPU_TILES=$t" ;;
          units-wide-split) e="MARS_TUNE=off MARS_GPU_TILES=units-wide MARS_GPU_TILE_SPLIT=512" ;;
          tiles-tall) e="MARS_TUNE=off MARS_GPU_TILES=tall" ;;
          unsplit) e="MARS_TUNE=off MARS_GPU_TILE_SPLIT=off" ;;
          units-unsplit) e="MARS_TUNE=off MARS_GPU_TILES=units MARS_GPU_TILE_SPLIT=off" ;;
        esac
        tmo 120 env $e "$MARS_BIN" speed --model "$m" \
          --device wgpu --prompt-tokens "${TEAMS_PP:-128}" --decode-tokens "${TEAMS_TG:-64}" 2>/dev/null | python3 -c "
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(print('$r', '$(basename "$m")', '$t', 'no result: the run failed or timed out'))
ms = d['forward_ms_by_rows']
print('$r', '$(basename "$m")', '$t', round(d['decode_tokens_per_second'], 1), 'tok/s;',
      'prefill', round(d['prefill_tokens_per_second'], 1), 'tok/s;',
      'ms 1/5/16 rows', ' / '.join(str(round(ms[k], 2)) for k in ('1', '5', '16') if k in ms))"
      done; done; done | tee "$out/teams.txt" ;;
    long) # decode and passes of 5 and 16 rows after a long prompt, beside llama.cpp at that
      # depth (one round), then mars with attention in one workgroup a head (MARS_GPU_SPLIT=off)
      # against its split by key blocks (the rule on a card)
      local long=${LONG_MODELS:-$(ls "$work"/models/*.gguf | grep -E '0\.5B|7B' | tr '\n' ' ')}
      for m in $long; do
        ROUNDS=1 tmo 300 bash "$work/repo/tests/bench/gpu-peers.sh" "$m" "${LONG_PP:-2048}" 32
        for t in on off; do
          MARS_GPU_SPLIT=$t tmo 120 "$MARS_BIN" speed --model "$m" --device wgpu \
            --prompt-tokens "${LONG_PP:-2048}" --decode-tokens 32 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
ms = d['forward_ms_by_rows']
print('$(basename "$m")', 'split $t', round(d['decode_tokens_per_second'], 1), 'tok/s; ms 1/5/16 rows',
      ' / '.join(str(round(ms[k], 2)) for k in ('1', '5', '16') if k in ms))"
        done
      done 2>&1 | grep -v XDG | tee "$out/long.md" ;;
    submits)
      for m in $(models); do for r in 1 2; do for t in 512 64 32 16; do
        CUBECL_WGPU_MAX_TASKS=$t tmo 90 "$MARS_BIN" speed --model "$m" --device wgpu \
          --prompt-tokens 128 --decode-tokens 128 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('$r', '$(basename "$m")', 'tasks $t', round(d['decode_tokens_per_second'], 1), 'tok/s')"
      done; done; done | tee "$out/submits.txt" ;;
    all) for s in tests registers stream stream-unrobust tune peers price ways teams long spec profile submits; do stage "$s"; done ;;
    lease) lease ;;
    *) echo "unknown stage $1" >&2; return 2 ;;
  esac
}
[ $# -gt 0 ] || { sed -n 2,4p "$0"; exit 2; }
for s in "$@"; do
  [ "$s" = add ] || setup
  stage "$s"
done
setup
