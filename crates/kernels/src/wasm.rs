//! The WebAssembly micro-kernel (128-bit SIMD, `simd128`): what the page runs where it has no
//! hardware GPU. Same results as the scalar kernel bit for bit: the integer dot products are
//! exact in any order, and every float step is the scalar kernel's, in its order.
//!
//! A weight block is unpacked once into vectors of small integers (Q4_0/Q4_1 nibbles and Q8_0
//! bytes straight from the block, Q5_0/Q5_1 high bits spread from their 32-bit word with a
//! swizzle and a bit mask, Q4_K and Q6_K sub-blocks with shifts and masks; Q5_K through the
//! scalar unpacking) and meets each activation row in i8 × i8 → i16 products
//! (`i16x8_extmul_*`: |w·x| ≤ 128·127, two of them still fit an i16) summed pairwise into i32
//! lanes. K-quant groups meet their scale in `i32x4.dot_i16x8_s` (two 16-value groups first added
//! in i16 lanes where they share a scale: Q4_K, Q5_K), and the minimum's Σ mn·Σx is two more
//! such dots, before the one horizontal sum per super-block and row. 16-bit float weights take
//! the scalar path.
//!
//! Relaxed SIMD's `i32x4.relaxed_dot_i8x16_i7x16_add` (4-bit weights as the 7-bit operand) was
//! timed against this kernel's Q4_K inner step (two 16-value groups against one row, times the
//! shared scale, the same sums): 1.20–1.32× as fast at 16 and 1 rows in Chromium 156 on an
//! AVX-512 VNNI EPYC, 1.09–1.15× in Node 20. That step is part of a block's work (the unpacking,
//! the scales and the float sums stay), and a module using it does not validate in a browser
//! without relaxed SIMD (Safari), so it would need a second build of the page's wasm chosen at
//! load: not worth it at that gain.

use core::arch::wasm32::{
    i8x16_ne, i8x16_shl, i8x16_sub, i8x16_swizzle, i16x8_add, i16x8_extmul_high_i8x16,
    i16x8_extmul_low_i8x16, i16x8_splat, i32x4_add, i32x4_dot_i16x8, i32x4_extadd_pairwise_i16x8,
    i32x4_extract_lane, i32x4_splat, u8x16, u8x16_shr, u8x16_splat, v128, v128_and, v128_load,
    v128_or,
};

use crate::block::{BLOCK, WeightType, f16_at, k_quants, k_scales, unpack};
use crate::quantize::{K_GROUP, K_SUM, MAX_ROWS, QActs};
use crate::scalar;

/// 16 bytes of `b` from `at`.
#[inline(always)]
fn load(b: &[u8], at: usize) -> v128 {
    let s = &b[at..at + 16];
    // SAFETY: `s` is 16 readable bytes (the slice above is bounds-checked); `v128_load` reads
    // exactly 16 bytes and needs no alignment.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// 16 activation bytes of `q` from `at`.
#[inline(always)]
fn load_i8(q: &[i8], at: usize) -> v128 {
    let s = &q[at..at + 16];
    // SAFETY: as in `load`: 16 readable bytes, unaligned reads allowed.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// Eight i16 values of `v` from `at`.
#[inline(always)]
fn load_i16(v: &[i16], at: usize) -> v128 {
    let s = &v[at..at + 8];
    // SAFETY: as in `load`: 16 readable bytes, unaligned reads allowed.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// w·x over 16 bytes as eight i16 lanes, each the sum of two products (w, x i8; the caller
/// bounds them so that the lanes fit).
#[inline(always)]
fn products(w: v128, x: v128) -> v128 {
    i16x8_add(i16x8_extmul_low_i8x16(w, x), i16x8_extmul_high_i8x16(w, x))
}

/// Σ w·x over 16 bytes as four i32 partial sums (w, x i8; at most 128·127 per product, so a
/// pair of products fits an i16).
#[inline(always)]
fn dot16(w: v128, x: v128) -> v128 {
    i32x4_extadd_pairwise_i16x8(products(w, x))
}

#[inline(always)]
fn hsum(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        + i32x4_extract_lane::<1>(v)
        + i32x4_extract_lane::<2>(v)
        + i32x4_extract_lane::<3>(v)
}

/// `out[r] = Σ_i W[row, i] · x[r, i]` for every activation row r: the scalar kernel's
/// [`scalar::dot_rows`], the same bits.
pub(crate) fn dot_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    match ty {
        WeightType::F16 | WeightType::BF16 => scalar::dot_rows(ty, w_row, x, out),
        WeightType::Q4K | WeightType::Q5K | WeightType::Q6K => k_rows(ty, w_row, x, out),
        _ => legacy_rows(ty, w_row, x, out),
    }
}

/// A legacy block's 32 values as two vectors (values 0–15, 16–31), its scale and its minimum
/// term's factor, as `block::unpack` gives them.
#[inline(always)]
fn legacy_block(ty: WeightType, row: &[u8], b: usize) -> (v128, v128, f32, f32) {
    let bytes = ty.block_bytes();
    let block = &row[b * bytes..(b + 1) * bytes];
    match ty {
        WeightType::Q8_0 => (load(block, 2), load(block, 18), f16_at(block, 0), 0.0),
        WeightType::Q4_0 | WeightType::Q4_1 => {
            let (at, d) = if ty == WeightType::Q4_1 {
                (4, f16_at(block, 0))
            } else {
                (2, f16_at(block, 0))
            };
            let min = if ty == WeightType::Q4_1 {
                f16_at(block, 2)
            } else {
                -8.0 * d
            };
            let v = load(block, at);
            (v128_and(v, u8x16_splat(0x0F)), u8x16_shr(v, 4), d, min)
        }
        WeightType::Q5_0 | WeightType::Q5_1 => {
            // d, (Q5_1: the minimum), 32 high bits, 16 bytes of nibbles.
            let (high_at, low_at) = if ty == WeightType::Q5_1 {
                (4, 8)
            } else {
                (2, 6)
            };
            let qh = load(block, high_at);
            let v = load(block, low_at);
            let w0 = v128_or(v128_and(v, u8x16_splat(0x0F)), high_bits(qh, 0));
            let w1 = v128_or(u8x16_shr(v, 4), high_bits(qh, 2));
            let d = f16_at(block, 0);
            if ty == WeightType::Q5_1 {
                (w0, w1, d, f16_at(block, 2))
            } else {
                let sixteen = u8x16_splat(16);
                (i8x16_sub(w0, sixteen), i8x16_sub(w1, sixteen), d, 0.0)
            }
        }
        _ => {
            let sub = unpack(ty, row, b);
            let w: [u8; BLOCK] = sub.w.map(|v| v as u8);
            (load(&w, 0), load(&w, 16), sub.scale[0], sub.min)
        }
    }
}

/// Bit 4 of lane j set where bit j of the 16 bits in bytes `from`, `from + 1` of `qh` is: a
/// Q5 block's high bits for 16 values (bytes 0–1: values 0–15; bytes 2–3: values 16–31).
#[inline(always)]
fn high_bits(qh: v128, from: u8) -> v128 {
    let (a, b) = (from, from + 1);
    let bytes = i8x16_swizzle(qh, u8x16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b));
    let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    let set = i8x16_ne(v128_and(bytes, bit), u8x16_splat(0));
    v128_and(set, u8x16_splat(0x10))
}

fn legacy_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let nb = x.cols / BLOCK;
    let m = x.rows;
    let mut acc = [0f32; MAX_ROWS];
    let mut mins = [0f32; MAX_ROWS];
    for b in 0..nb {
        let (w0, w1, scale, min) = legacy_block(ty, w_row, b);
        for r in 0..m {
            let at = r * nb + b;
            let xq = &x.q[at * BLOCK..(at + 1) * BLOCK];
            let dot = hsum(i32x4_add(
                dot16(w0, load_i8(xq, 0)),
                dot16(w1, load_i8(xq, 16)),
            ));
            // The scalar kernel's float steps, in its order.
            acc[r] += scale * x.d[at] * dot as f32;
            if !ty.signed() {
                mins[r] += min * x.s[at];
            }
        }
    }
    for r in 0..m {
        out[r] = acc[r] + mins[r];
    }
}

/// The 16 vectors of 16 values of a K-quant super-block (group h = values 16h…16h + 15).
#[inline(always)]
fn k_block(ty: WeightType, block: &[u8]) -> [v128; 16] {
    let low4 = u8x16_splat(0x0F);
    match ty {
        WeightType::Q4K => {
            // Sub-blocks 2c and 2c + 1: the low and high nibbles of bytes 16 + 32c….
            std::array::from_fn(|h| {
                let (j, part) = (h / 2, h % 2);
                let v = load(block, 16 + 32 * (j / 2) + 16 * part);
                if j % 2 == 0 {
                    v128_and(v, low4)
                } else {
                    u8x16_shr(v, 4)
                }
            })
        }
        WeightType::Q6K => std::array::from_fn(|h| {
            let (j, part) = (h / 2, h % 2);
            let (half, quarter) = (j / 4, j % 4);
            let ql = load(block, 64 * half + 32 * (quarter % 2) + 16 * part);
            let qh = load(block, 128 + 32 * half + 16 * part);
            let low = v128_and(u8x16_shr(ql, 4 * (quarter as u32 / 2)), low4);
            let high = v128_and(u8x16_shr(qh, 2 * quarter as u32), u8x16_splat(3));
            v128_or(low, i8x16_shl(high, 4))
        }),
        _ => std::array::from_fn(|h| {
            let q = k_quants(ty, block, h / 2);
            load(&q, 16 * (h % 2))
        }),
    }
}

fn k_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    const SUMS: usize = K_GROUP / K_SUM;
    let nblk = x.cols / K_GROUP;
    let bytes = ty.block_bytes();
    // Q4_K and Q5_K scale 32 values at a time (`sc[2j] == sc[2j + 1]`), Q6_K 16.
    let paired = ty != WeightType::Q6K;
    let mut acc = [0f32; MAX_ROWS];
    for (blk, block) in w_row.chunks_exact(bytes).enumerate().take(nblk) {
        let s = k_scales(ty, block);
        let q = k_block(ty, block);
        let sc: [v128; 16] = std::array::from_fn(|h| i16x8_splat(s.sc[h]));
        let mn = [load_i16(&s.mn, 0), load_i16(&s.mn, 8)];
        for (r, acc) in acc.iter_mut().enumerate().take(x.rows) {
            let at = r * nblk + blk;
            // Whole groups as arrays: every load below is at a constant offset, unchecked.
            let (Some(xq), Some(sums)) = (
                x.kq.get(at * K_GROUP..)
                    .and_then(<[i8]>::first_chunk::<K_GROUP>),
                x.ks.get(at * SUMS..).and_then(<[i16]>::first_chunk::<SUMS>),
            ) else {
                break;
            };
            // q·x pairs in i16 lanes, then each lane pair times the group's scale into i32
            // (`i32x4_dot_i16x8`). A lane holds 2 products (Q6_K: ≤ 2·63·128) or, where two
            // 16-value groups share a scale, 4 (Q4_K ≤ 4·15·128, Q5_K ≤ 4·31·128): < 2¹⁵. The
            // i32 sums are the scalar kernel's (< 2³¹, exact in any order).
            let mut dot = i32x4_splat(0);
            if paired {
                for j in 0..SUMS / 2 {
                    let p = i16x8_add(
                        products(q[2 * j], load_i8(xq, K_SUM * 2 * j)),
                        products(q[2 * j + 1], load_i8(xq, K_SUM * (2 * j + 1))),
                    );
                    dot = i32x4_add(dot, i32x4_dot_i16x8(p, sc[2 * j]));
                }
            } else {
                for h in 0..SUMS {
                    let p = products(q[h], load_i8(xq, K_SUM * h));
                    dot = i32x4_add(dot, i32x4_dot_i16x8(p, sc[h]));
                }
            }
            // Σ mn·Σx over the sixteen groups (|mn| ≤ 128, |Σx| ≤ 2032).
            let offset = i32x4_add(
                i32x4_dot_i16x8(load_i16(sums, 0), mn[0]),
                i32x4_dot_i16x8(load_i16(sums, 8), mn[1]),
            );
            let xd = x.kd[at];
            *acc += s.d * xd * hsum(dot) as f32 - s.dmin * xd * hsum(offset) as f32;
        }
    }
    out[..x.rows].copy_from_slice(&acc[..x.rows]);
}
