#!/usr/bin/env bash
# Fetches Spec-Bench's 480 prompts (github.com/hemingkx/Spec-Bench, data/spec_bench/question.jsonl,
# Apache-2.0) into ~/.cache/mars/data/spec_bench.jsonl (or $MARS_DATA_DIR), sha256 checked, for
# `mars bench` and the benchmark harness. A local mirror at ../shared/bench/spec_bench.jsonl beside
# the project (this project's CI has one) is used instead of the network; its bytes are checked
# the same way. Prints the file's path on its last line. Never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${MARS_DATA_DIR:-$HOME/.cache/mars/data}"
out="$dir/spec_bench.jsonl"
sha=4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04
# The file's last change upstream: the URL names that commit, so its bytes cannot move.
commit=66230f10cb0a02aced5ef3ce1e85163c16160454
url="https://raw.githubusercontent.com/hemingkx/Spec-Bench/$commit/data/spec_bench/question.jsonl"
mirror=../shared/bench/spec_bench.jsonl
check() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha" ]; }
if [ -s "$out" ] && check "$out"; then
  echo "$out"
  exit 0
fi
mkdir -p "$dir"
if [ -s "$mirror" ]; then
  cp "$mirror" "$out.part"
  from="the local mirror $mirror"
else
  if command -v curl >/dev/null; then
    curl -fsSL --retry 3 -o "$out.part" "$url"
  else
    # A fresh machine may lack curl; python3 is there (the other fetch scripts need it too).
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$out.part"
  fi
  from="$url"
fi
if ! check "$out.part"; then
  echo "fetch-spec-bench: $from has sha256 $(sha256sum "$out.part" | cut -d' ' -f1), expected $sha: refusing it" >&2
  rm -f "$out.part"
  exit 1
fi
mv "$out.part" "$out"
echo "spec-bench: 480 prompts from $from" >&2
echo "$out"
