#!/usr/bin/env python3
"""A GGUF model's skeleton: its header whole and each tensor's first rows, small enough to carry
to a machine that cannot fetch the model (a lent GPU takes 64 MiB a call; the Qwen pair is
1.6 GB). `unpack` rebuilds a file of the same size, tensor shapes, types and offsets, each
tensor's data its first rows tiled: the blocks are real (finite scales), the text it writes is
not. A speed benchmark of plain decoding is the same on it: no kernel's work depends on the
weights' values. Speculative decoding is not: a draft's acceptance needs the real weights.

    usage: gguf-skeleton.py pack MODEL.gguf SKELETON [BYTES_A_TENSOR (65536)]
           gguf-skeleton.py unpack SKELETON MODEL.gguf
"""

from __future__ import annotations

import io
import struct
import sys
from typing import BinaryIO

# ggml type -> (elements a block, bytes a block): the types llama.cpp's Q4_K_M / Q4_1 files use.
BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    30: (1, 2),  # BF16
}
# GGUF metadata value types -> struct formats (8: string, 9: array are read apart).
SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
MAGIC = b"SKEL1\n"


def read(f: BinaryIO, fmt: str) -> tuple:
    size = struct.calcsize("<" + fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError(f"truncated header at byte {f.tell()}")
    return struct.unpack("<" + fmt, data)


def skip_value(f: BinaryIO, vtype: int) -> object:
    """Reads one metadata value; returns it where the tensors' layout needs it (alignment)."""
    if vtype == 8:
        (n,) = read(f, "Q")
        return f.read(n).decode("utf-8", "replace")
    if vtype == 9:
        etype, n = read(f, "IQ")
        if etype in SCALARS:
            f.seek(n * struct.calcsize("<" + SCALARS[etype]), 1)
        else:
            for _ in range(n):
                skip_value(f, etype)
        return None
    if vtype not in SCALARS:
        raise ValueError(f"metadata value type {vtype} unknown")
    return read(f, SCALARS[vtype])[0]


def layout(f: BinaryIO) -> tuple[int, list[tuple[str, int, int, int]]]:
    """The data section's start and each tensor's (name, offset in it, bytes, bytes a row)."""
    magic, version = read(f, "4sI")
    if magic != b"GGUF" or version < 2:
        raise ValueError(f"not a GGUF v2+ file (magic {magic!r}, version {version})")
    n_tensors, n_kv = read(f, "QQ")
    alignment = 32
    for _ in range(n_kv):
        (n,) = read(f, "Q")
        key = f.read(n).decode()
        (vtype,) = read(f, "I")
        value = skip_value(f, vtype)
        if key == "general.alignment" and isinstance(value, int):
            alignment = value
    tensors = []
    for _ in range(n_tensors):
        (n,) = read(f, "Q")
        name = f.read(n).decode()
        (n_dims,) = read(f, "I")
        dims = read(f, "Q" * n_dims)
        ggml_type, offset = read(f, "IQ")
        if ggml_type not in BLOCKS:
            raise ValueError(
                f"tensor {name}: ggml type {ggml_type} not in this script's table"
            )
        per_block, block_bytes = BLOCKS[ggml_type]
        if dims[0] % per_block:
            raise ValueError(
                f"tensor {name}: row of {dims[0]} not whole blocks of {per_block}"
            )
        row = dims[0] // per_block * block_bytes
        rows = 1
        for d in dims[1:]:
            rows *= d
        tensors.append((name, offset, row * rows, row))
    start = -(-f.tell() // alignment) * alignment
    return start, tensors


def pack(model: str, skeleton: str, budget: int) -> None:
    with open(model, "rb") as f, open(skeleton, "wb") as out:
        start, tensors = layout(f)
        f.seek(0)
        header = f.read(start)
        out.write(MAGIC + struct.pack("<QQ", len(header), f.seek(0, 2)) + header)
        for _, offset, size, row in tensors:
            keep = min(size, max(row, budget // row * row))
            f.seek(start + offset)
            out.write(struct.pack("<Q", keep) + f.read(keep))


def unpack(skeleton: str, model: str) -> None:
    with open(skeleton, "rb") as f, open(model, "wb") as out:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{skeleton} is not a skeleton")
        header_len, file_len = read(f, "QQ")
        header = f.read(header_len)
        out.write(header)
        start, tensors = layout(io.BytesIO(header))
        for name, offset, size, _ in tensors:
            (keep,) = read(f, "Q")
            sample = f.read(keep)
            if not sample:
                raise ValueError(f"tensor {name}: empty sample")
            out.seek(start + offset)
            whole, rest = divmod(size, len(sample))
            out.write(sample * whole + sample[:rest])
        out.truncate(file_len)


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[0] == "pack":
        pack(argv[1], argv[2], int(argv[3]) if len(argv) > 3 else 65536)
    elif len(argv) == 3 and argv[0] == "unpack":
        unpack(argv[1], argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
