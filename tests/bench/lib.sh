# Sourced by every benchmark stage (tests/bench/bench.sh runs them): the one model-cache lookup,
# the one way to get the mars binary and Spec-Bench's prompts, from the repository root. Its
# names start with BENCH_ (or are functions), so no stage's own knob (SMOL=0, …) is overwritten.
# shellcheck shell=bash

# The model cache the fetch scripts fill (tests/fetch-*.sh); MARS_MODEL_DIR overrides it.
BENCH_MODELS="${MARS_MODEL_DIR:-$HOME/.cache/mars/models}"
BENCH_SMOL="$BENCH_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
BENCH_PAIR_TARGET="$BENCH_MODELS/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf"
BENCH_PAIR_DRAFT="$BENCH_MODELS/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"

# Fetches SmolLM2 / the Qwen pair where absent (sha256 checked by the fetch scripts).
need_smol() { [ -f "$BENCH_SMOL" ] || bash tests/fetch-model.sh >&2; }
need_pair() { [ -f "$BENCH_PAIR_TARGET" ] && [ -f "$BENCH_PAIR_DRAFT" ] || bash tests/fetch-pair.sh >&2; }

# Prints the mars binary: MARS_BIN where set (a machine without a toolchain), else a release build.
mars_bin() {
  if [ -n "${MARS_BIN:-}" ]; then
    echo "$MARS_BIN"
  else
    cargo build --release -q
    echo "${CARGO_TARGET_DIR:-target}/release/mars"
  fi
}

# Spec-Bench's prompt file: SPEC_BENCH where set, else fetched into the cache.
spec_bench() { echo "${SPEC_BENCH:-$(bash tests/fetch-spec-bench.sh | tail -n1)}"; }
