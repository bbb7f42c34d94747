#!/usr/bin/env bash
# Runs every test of mars: formatting, lints, native tests, and the browser tests (wasm32 in
# headless Chromium). Installs what it needs first (tests/setup.sh). This is the README's test
# command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step with the time it starts (UTC), so that a run's log says where its minutes went.
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%T)"; }

step "setup (tests/setup.sh)"
bash tests/setup.sh
# Khronos's SPIR-V validator for the shader test (every kernel's SPIR-V as wgpu writes it for a
# Vulkan 1.3 card, the matrix-unit tiles that no adapter here runs among them).
spirv_val=$(bash tests/fetch-spirv-val.sh)
if [ -n "$spirv_val" ]; then export MARS_SPIRV_VAL="${MARS_SPIRV_VAL:-$spirv_val}"; fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "clippy (native, all targets)"
cargo clippy --workspace --all-targets --release -- -D warnings
step "clippy (wasm32: the crates the browser runs)"
cargo clippy -p mars-verify -p mars-formats --target wasm32-unknown-unknown --lib --tests --release -- -D warnings
# The model compiles for the browser too (burn's WebGPU backend, async readback).
cargo clippy -p mars-model --features webgpu --target wasm32-unknown-unknown --lib --release -- -D warnings
cargo clippy -p mars-engine -p mars-web --target wasm32-unknown-unknown --lib --tests --release -- -D warnings
cargo clippy -p mars-kernels --target wasm32-unknown-unknown --lib --test wasm --release -- -D warnings

# Windows and macOS, checked from here (their standard libraries added to the toolchain): no
# Windows or Apple linker or C compiler is at hand, so Windows without the test targets
# (criterion's C build) and macOS without the binary (jemalloc's C build), the rest of each
# through the same lints. A user's `cargo run` on DX12 or Metal starts from what these check.
step "clippy (Windows and macOS: what builds there)"
for target in x86_64-pc-windows-msvc aarch64-apple-darwin; do
  rustup target list --installed | grep -qx "$target" || rustup target add "$target"
done
# --release as above: the host's proc macros and build scripts are the native steps' own.
cargo clippy --workspace --lib --bins --target x86_64-pc-windows-msvc --release -- -D warnings
cargo clippy --workspace --lib --target aarch64-apple-darwin --release -- -D warnings

step "native tests (release: the statistical tests draw millions of samples)"
cargo test --workspace --release
# The matrix-unit tiles (cooperative matrices), which Debian 12's lavapipe lacks, on sid's
# lavapipe (8 × 8 blocks on subgroups of 8), the test binary run through that Mesa's loader as
# cargo's runner; there a skip would be a failure (MARS_EXPECT_MATRIX_UNITS).
step "the matrix-unit tiles on a lavapipe with cooperative matrices (tests/fetch-mesa.sh)"
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$(bash tests/fetch-mesa.sh)" MARS_EXPECT_MATRIX_UNITS=1 \
  cargo test --release -p mars-kernels --features gpu --test gpu tiles_on_matrix_units
# GPU cards fold the norms before q | k | v and gate | up into those products, and RoPE into
# attention; CPU adapters (lavapipe here) keep them apart, so the model's GPU tests run again
# with the folds forced (the same build: --workspace keeps the features unified), and with
# every tile launch split along its inputs a group of 32 at a time (the test model's matrices
# are too small for the rule to split any: MARS_GPU_TILE_SPLIT), so that a prefill in passes
# still gives one pass's bits with split tiles.
step "the GPU model's tests with the norms and RoPE folded in and the tiles split, as on a GPU card"
MARS_GPU_NORM=fold MARS_GPU_ROPE=fold MARS_GPU_TILE_SPLIT=32 cargo test --workspace --release --test backends
# The same tests on a device opened without the driver's bounds checks (MARS_GPU_ROBUST=off,
# a switch the GPU bundle's `teams` stage times): every kernel stays in bounds without them.
step "the GPU model's tests on a device without robustBufferAccess (MARS_GPU_ROBUST=off)"
MARS_GPU_ROBUST=off cargo test --workspace --release --test backends
# The CPU kernels' NEON micro-kernels (Apple silicon, Graviton, every aarch64 CPU; with and
# without the dot-product extension) against the scalar one bit for bit and the exact product, built with Debian's cross linker and run under
# qemu's user-mode emulator (.cargo/config.toml names both): no ARM machine is at hand.
step "the CPU kernels on aarch64 (NEON), under qemu"
missing=()
for p in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
  || rustup target add aarch64-unknown-linux-gnu
aarch64_kernels=(-p mars-kernels --release --target aarch64-unknown-linux-gnu --lib --test neon --test matmul --test attention)
cargo clippy "${aarch64_kernels[@]}" -- -D warnings
# qemu's default CPU has the dot-product extension (the `sdot` kernel); a Cortex-A53 lacks it
# (plain NEON): the test is told which to expect.
MARS_TEST_DOTPROD=1 cargo test "${aarch64_kernels[@]}"
QEMU_CPU=cortex-a53 MARS_TEST_DOTPROD=0 cargo test "${aarch64_kernels[@]}"
step "benchmarks run once as tests"
cargo test -p mars-verify --release --benches
# The instruction counter's loop finder (bench.sh gpu-isa), on samples of both drivers' output:
# no driver compiles here, but the counts in docs/performance.md rest on it.
python3 tests/bench/gpu-isa.py --self-test

step "vLLM plugin (integrations/vllm): ruff, conformance with mars-verify, vLLM's CPU engine end to end"
bash integrations/vllm/test.sh

step "browser tests: wasm32 in headless Chromium"
export CHROMEDRIVER="${CHROMEDRIVER:-$(command -v chromedriver)}"
# A browser session a test binary: the timeout bounds one binary's session (a hang, not a
# speed). SwiftShader on CI's two cores takes 90 to 200 s a binary; 300 s was once overrun
# by a binary of 333 s (the tuning test then shared webgpu.rs's session: now webgpu_tune.rs).
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-600}"
cargo test -p mars-verify -p mars-formats --release --target wasm32-unknown-unknown
# The page's CPU path: the simd128 micro-kernel equals the scalar one bit for bit.
cargo test -p mars-kernels --release --target wasm32-unknown-unknown --test wasm
# The model and the engine on real WebGPU (SwiftShader): logits equal flex's, greedy strict
# speculation equals target-only.
cargo test -p mars-web --release --target wasm32-unknown-unknown

step "page end-to-end: trunk build, headless Chromium on WebGPU (SwiftShader) and on the wasm CPU path"
E2E_OUT="${E2E_OUT:-$(mktemp -d)}" bash tests/e2e/run.sh

step "all tests passed"
