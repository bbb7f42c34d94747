#!/usr/bin/env bash
# Builds the page into dist/ with the pinned, offline trunk (Trunk.toml): trunk 0.21.14,
# wasm-bindgen-cli equal to Cargo.lock's, and npm binaryen@132's wasm-opt (tests/e2e/node_modules).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/tests/e2e/node_modules/.bin:$HOME/.cargo/bin:$PATH"
trunk build --config Trunk.toml
ls -la dist
