#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 600) on nightly; new inputs go to a scratch
# corpus so the committed seeds stay small. Crashes land in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-600}"
work="${FUZZ_WORK:-$HOME/.cache/mars/fuzz-corpus}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/mars/fuzz-target}"
# The binary seeds (a tiny GGUF, a safetensors file) are written by code, not committed.
cargo run --release --bin make-seeds
for target in gguf safetensors tokenizer kernels tree model; do
  mkdir -p "$work/$target" "corpus/$target"
  cargo +nightly fuzz run "$target" "$work/$target" "corpus/$target" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 2>&1 | tee "$work/$target.log" | tail -n 3
done
