#!/usr/bin/env bash
# Builds the page into dist/ with the pinned, offline trunk (Trunk.toml): trunk 0.21.14,
# wasm-bindgen-cli equal to Cargo.lock's, and npm binaryen@132's wasm-opt (web/package.json,
# installed here on first use). tests/setup.sh installs trunk and wasm-bindgen-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x web/node_modules/.bin/wasm-opt ]; then
  (cd web && npm ci --no-audit --no-fund --silent)
fi
export PATH="$PWD/web/node_modules/.bin:$HOME/.cargo/bin:$PATH"
trunk build --config Trunk.toml
ls -la dist
