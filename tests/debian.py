"""Fetches Debian packages of another suite than the host's and unpacks them into one tree.

What a Debian 12 host lacks and a newer suite has (a glslc that knows llama.cpp's shader
extensions, a lavapipe with cooperative matrices) is taken from Debian's own mirror, without
installing anything: each .deb is checked against the sha256 of the suite's Packages index
(fetched over https) and unpacked with `dpkg-deb -x`. Programs of that suite then run through
its own loader (`ld-linux-x86-64.so.2 --library-path ROOT/usr/lib/x86_64-linux-gnu`), since its
C library is newer than the host's; a program built here runs that way too (glibc keeps old
symbol versions).

    usage: debian.py SUITE ROOT [--closure] PACKAGE...
With --closure, the packages and everything they depend on (the first of each alternative), but
for the few that only configure a system (debconf, dpkg, …); without, the packages named.
Prints each package unpacked and its version.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import subprocess
import sys
import tempfile
import urllib.request

MIRROR = os.environ.get("DEBIAN_MIRROR", "https://deb.debian.org/debian")
# Packages that configure an installed system and hold nothing a program loads.
NOT_LOADED = {"debconf", "debconf-2.0", "libc-bin", "dpkg", "perl-base", "install-info"}


def index(suite: str) -> dict[str, dict[str, str]]:
    """The suite's amd64 Packages index: package (and what it provides) -> its fields."""
    url = f"{MIRROR}/dists/{suite}/main/binary-amd64/Packages.xz"
    with urllib.request.urlopen(url, timeout=120) as response:
        text = lzma.decompress(response.read()).decode("utf-8")
    packages: dict[str, dict[str, str]] = {}
    provided: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t", "") and ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        name = fields.get("Package")
        if not name:
            continue
        packages.setdefault(name, fields)
        for item in fields.get("Provides", "").split(","):
            virtual = item.strip().split(" ")[0]
            if virtual:
                provided.setdefault(virtual, fields)
    for virtual, fields in provided.items():
        packages.setdefault(virtual, fields)
    return packages


def depends(fields: dict[str, str]) -> list[str]:
    """The first alternative of each of a package's dependencies, by name."""
    names = []
    for field in ("Pre-Depends", "Depends"):
        for dep in fields.get(field, "").split(","):
            dep = dep.strip()
            if dep:
                names.append(dep.split("|")[0].strip().split(" ")[0].split(":")[0])
    return names


def chosen(
    packages: dict[str, dict[str, str]], wanted: list[str], closure: bool
) -> list[dict[str, str]]:
    """The stanzas of `wanted` (and, with `closure`, of all they depend on)."""
    todo, seen, out = list(wanted), set(), []
    while todo:
        name = todo.pop()
        if name in seen or (closure and name in NOT_LOADED):
            continue
        seen.add(name)
        fields = packages.get(name)
        if fields is None:
            sys.exit(f"debian.py: {name} is not in the index")
        if fields["Package"] in {f["Package"] for f in out}:
            continue
        out.append(fields)
        if closure:
            todo.extend(depends(fields))
    return out


def main() -> None:
    args = sys.argv[1:]
    closure = "--closure" in args
    args = [a for a in args if a != "--closure"]
    if len(args) < 3:
        sys.exit(__doc__)
    suite, root, wanted = args[0], args[1], args[2:]
    os.makedirs(root, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for fields in chosen(index(suite), wanted, closure):
            deb = os.path.join(tmp, os.path.basename(fields["Filename"]))
            with urllib.request.urlopen(
                f"{MIRROR}/{fields['Filename']}", timeout=300
            ) as r:
                data = r.read()
            if hashlib.sha256(data).hexdigest() != fields["SHA256"]:
                sys.exit(f"debian.py: sha256 mismatch: {fields['Filename']}")
            with open(deb, "wb") as f:
                f.write(data)
            subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
            print(fields["Package"], fields["Version"])


if __name__ == "__main__":
    main()
