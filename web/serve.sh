#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, fetch the default model, build the
# page, serve it with the model on 127.0.0.1, print the URL, then print the native comparison.
# The server keeps running after the comparison; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
bash web/build.sh >/dev/null
models="${MARS_MODEL_DIR:-$HOME/.cache/mars/models}"
port="${PORT:-8080}"
node web/serve.mjs dist "$models" "$port" &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 1
if ! kill -0 "$server" 2>/dev/null; then
  echo "could not serve on 127.0.0.1:$port (in use?); choose another with PORT=8081 bash web/serve.sh" >&2
  exit 1
fi
echo
echo "The race page: http://127.0.0.1:$port/  (Chrome/Edge with WebGPU; the default model is served from $models)"
echo
cargo run --release
echo
echo "Serving http://127.0.0.1:$port/ until Ctrl-C."
wait $server
