//! Weights repacked at load into tiles of 16 output rows, for the AVX-512 kernels that put one
//! output row in each 32-bit lane: the K-quants Q4_K and Q6_K, and the legacy 32-value types.
//!
//! Why: in the lane-order kernel each lane holds one 16-value group of one weight row, so every
//! activation row pays a conversion and three float operations per super-block for 256 values
//! of *one* output, and reloads 256 activation bytes that only that output uses: a 5-row
//! verification pass cost ~2× a one-row pass on the 1.5B. Here lane o of every vector is output
//! row o of the tile: an activation's four bytes are broadcast to all lanes and meet 16 outputs
//! in one `vpdpbusd`, the scales of 16 outputs sit in one vector, and the float work per
//! activation row and 32 values is one conversion and two FMAs for 16 outputs instead of one.
//! llama.cpp's repacked CPU kernels interleave 8 rows the same way.
//!
//! Layout of tile t (output rows 16t … 16t + 15; rows past the matrix are zero blocks, whose
//! scales are 0) and super-block b, [`TILE_BYTES`] bytes at `(t · blocks + b) · TILE_BYTES`:
//! - `0..32`: d of each output (f16, output o at 2o); `32..64`: dmin;
//! - `64..192`: the 6-bit scale of sub-block s of output o at `64 + 16s + o` (a byte each);
//! - `192..320`: the 6-bit minimums, likewise;
//! - `320..2368`: the nibbles, 64 bytes per (sub-block s, chunk j < 4) at `320 + 64·(4s + j)`:
//!   byte `4o + i` (i < 4) holds value `32s + 4j + i` of output o in its low nibble and value
//!   `32s + 16 + 4j + i` in its high nibble.
//!
//! 148 bytes per output and super-block against GGUF's 144 (the scales decoded to a byte
//! each).
//!
//! Q6_K, [`Q6K_TILE_BYTES`] per tile and super-block (210 per output, as in GGUF):
//! - `0..32`: d of each output (f16);
//! - `32..288`: the i8 scale of 16-value sub-block s of output o at `32 + 16s + o`;
//! - `288..3360`: 192 bytes per sub-block s at `288 + 192s`, three 64-byte vectors whose byte
//!   `4o + i` holds value `16s + 4j + i` (chunk j < 4) of output o: the low four bits of
//!   chunk 0 (low nibble) and 2 (high nibble) in the first, of chunks 1 and 3 in the second,
//!   and the top two bits of chunk j at bits 2j, 2j + 1 of the third.
//!
//! The legacy types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), [`legacy_tile_bytes`] per tile and 32-value
//! block (16 × the GGUF block):
//! - `0..32`: d of each output (f16); Q4_1 / Q5_1: `32..64` the minimum m of each output;
//! - the quants, from 32 (64 with a minimum), unsigned: Q8_0's i8 values with the sign bit
//!   flipped (q + 128, the kernel subtracts 128·d·Σx), 4-bit types as four 64-byte vectors whose
//!   byte `4o + i` holds value `4j + i` of output o (vector j < 4) in its low nibble and value
//!   `16 + 4j + i` in its high nibble; Q8_0 as eight vectors, byte `4o + i` of vector c holding
//!   value `4c + i`;
//! - Q5_0 / Q5_1: then one 64-byte vector whose byte `4o + i` holds the fifth bit of value
//!   `4c + i` at bit c (c < 8).
//!
//! The repacking is a bijection: [`gguf_block`] rebuilds the file's exact bytes (the embedding
//! lookup, the other kernels and the tests read them so).

use rayon::prelude::*;

use crate::block::{BLOCK, WeightType, scales_mins_k4};

/// Output rows per tile: one per 32-bit lane of a 512-bit vector.
pub(crate) const TILE: usize = 16;
/// Bytes of one Q4_K tile's super-block (16 outputs × 256 values).
pub(crate) const TILE_BYTES: usize = 2368;
/// Bytes of one Q6_K tile's super-block.
pub(crate) const Q6K_TILE_BYTES: usize = 3360;
/// Where a Q6_K tile's scales start.
pub(crate) const Q6K_SCALES_AT: usize = 32;
/// Where a Q6_K tile's quants start.
pub(crate) const Q6K_QUANTS_AT: usize = 288;
/// Bytes of one Q6_K super-block in GGUF.
const Q6K_BYTES: usize = 210;
/// Where the minimums start in a tile's super-block.
pub(crate) const MINS_AT: usize = 192;
/// Where the scales start.
pub(crate) const SCALES_AT: usize = 64;
/// Where the nibbles start.
pub(crate) const NIBBLES_AT: usize = 320;
/// Bytes of one Q4_K super-block in GGUF.
const Q4K_BYTES: usize = 144;
/// Values per super-block.
const SUPER: usize = 256;

/// Value `i` (< 256) of a GGUF Q4_K super-block's nibbles (`qs`, 128 bytes): sub-block
/// s = 2c + h is nibble h of bytes 32c … 32c + 31.
fn nibble(qs: &[u8], i: usize) -> u8 {
    let (s, v) = (i / BLOCK, i % BLOCK);
    (qs[32 * (s / 2) + v] >> (4 * (s % 2))) & 0x0F
}

/// The types that tile, and the bytes of a tile's block (super-block for K-quants).
pub(crate) fn tile_bytes(ty: WeightType) -> Option<usize> {
    match ty {
        WeightType::Q4K => Some(TILE_BYTES),
        WeightType::Q6K => Some(Q6K_TILE_BYTES),
        WeightType::F16 | WeightType::BF16 | WeightType::Q5K => None,
        _ => Some(legacy_tile_bytes(ty)),
    }
}

/// Bytes of a legacy type's tile block: 16 GGUF blocks' worth.
pub(crate) const fn legacy_tile_bytes(ty: WeightType) -> usize {
    TILE * ty.block_bytes()
}

/// Where a legacy GGUF block keeps its parts: (minimum, fifth bits, quants), as byte offsets.
fn legacy_parts(ty: WeightType) -> (Option<usize>, Option<usize>, usize) {
    match ty {
        WeightType::Q4_1 => (Some(2), None, 4),
        WeightType::Q5_0 => (None, Some(2), 6),
        WeightType::Q5_1 => (Some(2), Some(4), 8),
        // Q8_0, Q4_0.
        _ => (None, None, 2),
    }
}

/// Where a legacy tile block keeps its quants (after d and the minimum) and its fifth bits.
pub(crate) const fn legacy_tile_parts(ty: WeightType) -> (usize, usize) {
    let quants = if matches!(ty, WeightType::Q4_1 | WeightType::Q5_1) {
        64
    } else {
        32
    };
    (quants, quants + 256)
}

/// One value of a legacy GGUF block (`src`, `block_bytes` long) as the tile stores it
/// (unsigned, up to 8 bits; Q8_0 with the sign bit flipped), or back: `q` into `dst`.
fn legacy_value(ty: WeightType, src: &[u8], i: usize) -> u8 {
    let (_, fifth, qs) = legacy_parts(ty);
    if ty == WeightType::Q8_0 {
        return src[qs + i] ^ 0x80;
    }
    let nibble = (src[qs + i % 16] >> (4 * (i / 16))) & 0x0F;
    match fifth {
        Some(at) => nibble | (((src[at + i / 8] >> (i % 8)) & 1) << 4),
        None => nibble,
    }
}

/// Sets value `i` of a legacy GGUF block `dst` (zeroed beforehand) to `q` (as the tile stores
/// it): the inverse of [`legacy_value`].
fn set_legacy_value(ty: WeightType, dst: &mut [u8], i: usize, q: u8) {
    let (_, fifth, qs) = legacy_parts(ty);
    if ty == WeightType::Q8_0 {
        dst[qs + i] = q ^ 0x80;
        return;
    }
    dst[qs + i % 16] |= (q & 0x0F) << (4 * (i / 16));
    if let Some(at) = fifth {
        dst[at + i / 8] |= ((q >> 4) & 1) << (i % 8);
    }
}

/// Byte (offset into the tile block) and shift of value i's low bits (4-bit and 5-bit types:
/// the nibble; Q8_0: the byte, shift 0) for output o.
fn legacy_tile_place(ty: WeightType, o: usize, i: usize) -> (usize, u32) {
    let (quants, _) = legacy_tile_parts(ty);
    let (c, k) = (i / 4, i % 4);
    if ty == WeightType::Q8_0 {
        (quants + 64 * c + 4 * o + k, 0)
    } else {
        (quants + 64 * (c % 4) + 4 * o + k, 4 * (c / 4) as u32)
    }
}

/// A legacy matrix as tiles (see the module docs).
fn tile_legacy(ty: WeightType, data: &[u8], rows: usize, blocks: usize) -> Vec<u8> {
    let (bb, tb) = (ty.block_bytes(), legacy_tile_bytes(ty));
    let (min, fifth, _) = legacy_parts(ty);
    let (_, fifth_at) = legacy_tile_parts(ty);
    let tiles = rows.div_ceil(TILE);
    let mut out = vec![0u8; tiles * blocks * tb];
    out.par_chunks_mut(blocks * tb)
        .enumerate()
        .for_each(|(t, tile)| {
            for (o, r) in (t * TILE..rows.min((t + 1) * TILE)).enumerate() {
                for b in 0..blocks {
                    let src = &data[(r * blocks + b) * bb..][..bb];
                    let dst = &mut tile[b * tb..][..tb];
                    dst[2 * o..2 * o + 2].copy_from_slice(&src[0..2]);
                    if let Some(at) = min {
                        dst[32 + 2 * o..32 + 2 * o + 2].copy_from_slice(&src[at..at + 2]);
                    }
                    for i in 0..BLOCK {
                        let q = legacy_value(ty, src, i);
                        let (at, shift) = legacy_tile_place(ty, o, i);
                        dst[at] |= (q & if ty == WeightType::Q8_0 { 0xFF } else { 0x0F }) << shift;
                        if fifth.is_some() {
                            dst[fifth_at + 4 * o + i % 4] |= ((q >> 4) & 1) << (i / 4);
                        }
                    }
                }
            }
        });
    out
}

/// The GGUF bytes of block `b` of row `r` of a tiled legacy matrix, appended to `out`.
fn push_gguf_block_legacy(
    ty: WeightType,
    tiles: &[u8],
    blocks: usize,
    (r, b): (usize, usize),
    out: &mut Vec<u8>,
) {
    let (bb, tb) = (ty.block_bytes(), legacy_tile_bytes(ty));
    let (min, fifth, _) = legacy_parts(ty);
    let (_, fifth_at) = legacy_tile_parts(ty);
    let (t, o) = (r / TILE, r % TILE);
    let src = &tiles[(t * blocks + b) * tb..][..tb];
    let start = out.len();
    out.resize(start + bb, 0);
    let dst = &mut out[start..];
    dst[0..2].copy_from_slice(&src[2 * o..2 * o + 2]);
    if let Some(at) = min {
        dst[at..at + 2].copy_from_slice(&src[32 + 2 * o..32 + 2 * o + 2]);
    }
    for i in 0..BLOCK {
        let (at, shift) = legacy_tile_place(ty, o, i);
        let mut q = src[at] >> shift;
        if ty != WeightType::Q8_0 {
            q &= 0x0F;
        }
        if fifth.is_some() {
            q |= ((src[fifth_at + 4 * o + i % 4] >> (i / 4)) & 1) << 4;
        }
        set_legacy_value(ty, dst, i, q);
    }
}

/// `data` (`rows × blocks` GGUF super-blocks of `ty`, row-major) as tiles: `rows.div_ceil(16)`
/// tiles of `blocks` super-blocks each; `None` for a type that does not tile.
pub(crate) fn tile(ty: WeightType, data: &[u8], rows: usize, blocks: usize) -> Option<Vec<u8>> {
    match ty {
        WeightType::Q4K => Some(tile_q4k(data, rows, blocks)),
        WeightType::Q6K => Some(tile_q6k(data, rows, blocks)),
        WeightType::F16 | WeightType::BF16 | WeightType::Q5K => None,
        _ => Some(tile_legacy(ty, data, rows, blocks)),
    }
}

/// The GGUF bytes of super-block `b` of row `r` of a tiled matrix of `ty` with `blocks`
/// super-blocks per row, appended to `out`, bit-identical to the file's.
pub(crate) fn push_gguf_block(
    ty: WeightType,
    tiles: &[u8],
    blocks: usize,
    (r, b): (usize, usize),
    out: &mut Vec<u8>,
) {
    match ty {
        WeightType::Q4K => out.extend_from_slice(&gguf_block(tiles, blocks, r, b)),
        WeightType::Q6K => out.extend_from_slice(&gguf_block_q6k(tiles, blocks, r, b)),
        _ => push_gguf_block_legacy(ty, tiles, blocks, (r, b), out),
    }
}

/// Where value `i` (< 256) of a GGUF Q6_K super-block lives: (byte of `ql`, shift of its
/// nibble, byte of `qh`, shift of its two bits). Halves n of 128 values: value 128n + 32k + l
/// (k < 4, l < 32) takes nibble k / 2 of ql[64n + 32(k % 2) + l] and bits 2k, 2k + 1 of
/// qh[32n + l].
fn q6k_place(i: usize) -> (usize, u32, usize, u32) {
    let (n, k, l) = (i / 128, (i % 128) / 32, i % 32);
    (
        64 * n + 32 * (k % 2) + l,
        4 * (k as u32 / 2),
        32 * n + l,
        2 * k as u32,
    )
}

/// Q6_K as tiles (see the module docs).
fn tile_q6k(data: &[u8], rows: usize, blocks: usize) -> Vec<u8> {
    let tiles = rows.div_ceil(TILE);
    let mut out = vec![0u8; tiles * blocks * Q6K_TILE_BYTES];
    out.par_chunks_mut(blocks * Q6K_TILE_BYTES)
        .enumerate()
        .for_each(|(t, tile)| {
            for (o, r) in (t * TILE..rows.min((t + 1) * TILE)).enumerate() {
                for b in 0..blocks {
                    let src = &data[(r * blocks + b) * Q6K_BYTES..][..Q6K_BYTES];
                    let dst = &mut tile[b * Q6K_TILE_BYTES..][..Q6K_TILE_BYTES];
                    dst[2 * o..2 * o + 2].copy_from_slice(&src[208..210]);
                    for s in 0..16 {
                        dst[Q6K_SCALES_AT + 16 * s + o] = src[192 + s];
                    }
                    for i in 0..SUPER {
                        let (ql, nib, qh, bits) = q6k_place(i);
                        let low = (src[ql] >> nib) & 0x0F;
                        let high = (src[128 + qh] >> bits) & 3;
                        let (s, j, k) = (i / 16, (i % 16) / 4, i % 4);
                        let at = Q6K_QUANTS_AT + 192 * s + 4 * o + k;
                        dst[at + 64 * (j % 2)] |= low << (4 * (j / 2));
                        dst[at + 128] |= high << (2 * j);
                    }
                }
            }
        });
    out
}

/// The GGUF bytes of super-block `b` of row `r` of a tiled Q6_K matrix.
fn gguf_block_q6k(tiles: &[u8], blocks: usize, r: usize, b: usize) -> [u8; Q6K_BYTES] {
    let (t, o) = (r / TILE, r % TILE);
    let src = &tiles[(t * blocks + b) * Q6K_TILE_BYTES..][..Q6K_TILE_BYTES];
    let mut dst = [0u8; Q6K_BYTES];
    dst[208..210].copy_from_slice(&src[2 * o..2 * o + 2]);
    for s in 0..16 {
        dst[192 + s] = src[Q6K_SCALES_AT + 16 * s + o];
    }
    for i in 0..SUPER {
        let (s, j, k) = (i / 16, (i % 16) / 4, i % 4);
        let at = Q6K_QUANTS_AT + 192 * s + 4 * o + k;
        let low = (src[at + 64 * (j % 2)] >> (4 * (j / 2))) & 0x0F;
        let high = (src[at + 128] >> (2 * j)) & 3;
        let (ql, nib, qh, bits) = q6k_place(i);
        dst[ql] |= low << nib;
        dst[128 + qh] |= high << bits;
    }
    dst
}

/// `data` (`rows × blocks` GGUF Q4_K super-blocks, row-major) as tiles: `rows.div_ceil(16)`
/// tiles of `blocks` super-blocks each.
fn tile_q4k(data: &[u8], rows: usize, blocks: usize) -> Vec<u8> {
    let tiles = rows.div_ceil(TILE);
    let mut out = vec![0u8; tiles * blocks * TILE_BYTES];
    out.par_chunks_mut(blocks * TILE_BYTES)
        .enumerate()
        .for_each(|(t, tile)| {
            for (o, r) in (t * TILE..rows.min((t + 1) * TILE)).enumerate() {
                for b in 0..blocks {
                    let src = &data[(r * blocks + b) * Q4K_BYTES..][..Q4K_BYTES];
                    let dst = &mut tile[b * TILE_BYTES..][..TILE_BYTES];
                    dst[2 * o..2 * o + 2].copy_from_slice(&src[0..2]);
                    dst[32 + 2 * o..32 + 2 * o + 2].copy_from_slice(&src[2..4]);
                    let both = scales_mins_k4(&src[4..16]);
                    for s in 0..8 {
                        dst[SCALES_AT + 16 * s + o] = both[s];
                        dst[MINS_AT + 16 * s + o] = both[8 + s];
                    }
                    let qs = &src[16..];
                    for s in 0..8 {
                        for j in 0..4 {
                            for i in 0..4 {
                                let low = nibble(qs, 32 * s + 4 * j + i);
                                let high = nibble(qs, 32 * s + 16 + 4 * j + i);
                                dst[NIBBLES_AT + 64 * (4 * s + j) + 4 * o + i] = low | (high << 4);
                            }
                        }
                    }
                }
            }
        });
    out
}

/// The GGUF bytes of super-block `b` of row `r` of a tiled Q4_K matrix with `blocks`
/// super-blocks per row, bit-identical to the file's.
fn gguf_block(tiles: &[u8], blocks: usize, r: usize, b: usize) -> [u8; Q4K_BYTES] {
    let (t, o) = (r / TILE, r % TILE);
    let src = &tiles[(t * blocks + b) * TILE_BYTES..][..TILE_BYTES];
    let mut dst = [0u8; Q4K_BYTES];
    dst[0..2].copy_from_slice(&src[2 * o..2 * o + 2]);
    dst[2..4].copy_from_slice(&src[32 + 2 * o..32 + 2 * o + 2]);
    let sc = |s: usize| src[SCALES_AT + 16 * s + o];
    let mn = |s: usize| src[MINS_AT + 16 * s + o];
    // The inverse of `scale_min_k4`: sub-blocks 0–3 keep six bits in bytes 0–3 (scales) and
    // 4–7 (minimums); sub-blocks 4–7 keep their low four bits in bytes 8–11 and their top two
    // in the top two bits of bytes 0–7.
    for j in 0..4 {
        dst[4 + j] = (sc(j) & 63) | ((sc(j + 4) >> 4) << 6);
        dst[4 + j + 4] = (mn(j) & 63) | ((mn(j + 4) >> 4) << 6);
        dst[4 + j + 8] = (sc(j + 4) & 0x0F) | ((mn(j + 4) & 0x0F) << 4);
    }
    for i in 0..SUPER {
        let (s, v) = (i / BLOCK, i % BLOCK);
        let (j, half, k) = ((v % 16) / 4, v / 16, v % 4);
        let byte = src[NIBBLES_AT + 64 * (4 * s + j) + 4 * o + k];
        let q = (byte >> (4 * half)) & 0x0F;
        dst[16 + 32 * (s / 2) + v] |= q << (4 * (s % 2));
    }
    dst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_is_undone_bit_for_bit_for_every_row_and_block() {
        for ty in WeightType::ALL {
            let Some(per) = tile_bytes(ty) else {
                continue;
            };
            let bytes = ty.block_bytes();
            // Random bytes (every scale and bit pattern), 37 rows: a partial last tile.
            let (rows, blocks) = (37, 3);
            let mut state = 0x1234_5678u32;
            let data: Vec<u8> = (0..rows * blocks * bytes)
                .map(|_| {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (state >> 24) as u8
                })
                .collect();
            let tiles = tile(ty, &data, rows, blocks).unwrap();
            assert_eq!(tiles.len(), 3 * blocks * per);
            for r in 0..rows {
                for b in 0..blocks {
                    let want = &data[(r * blocks + b) * bytes..][..bytes];
                    let mut got = Vec::new();
                    push_gguf_block(ty, &tiles, blocks, (r, b), &mut got);
                    assert_eq!(got, want, "{ty:?} row {r} block {b}");
                }
            }
            // The padding rows are zero: d (and Q4_K's dmin) = 0, so they contribute nothing.
            let last = &tiles[(2 * blocks) * per..][..per];
            for o in (rows % TILE)..TILE {
                assert_eq!(&last[2 * o..2 * o + 2], &[0, 0], "{ty:?}");
                if matches!(ty, WeightType::Q4K | WeightType::Q4_1 | WeightType::Q5_1) {
                    assert_eq!(&last[32 + 2 * o..32 + 2 * o + 2], &[0, 0], "{ty:?}");
                }
            }
        }
        assert_eq!(tile(WeightType::F16, &[0; 64], 1, 1), None);
    }
}
