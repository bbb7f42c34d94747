//! The aarch64 micro-kernel (NEON, 128-bit Advanced SIMD, part of every aarch64 CPU): what
//! `--device cpu` runs on Apple silicon, Graviton, Ampere and the other ARM machines, where the
//! scalar kernel (7× slower than AVX2 on one row of a 1.5B FFN on x86, where LLVM vectorizes it
//! for SSE2 alone) would leave the CPU path far behind llama.cpp's NEON. Same results as the
//! scalar kernel bit for bit, as the page's simd128 kernel (`wasm.rs`), whose structure this one
//! follows lane for lane: the integer dot products are exact in any order, and every float step
//! is the scalar kernel's, in its order.
//!
//! A weight block is unpacked once into vectors of small integers (Q4_0/Q4_1 nibbles and Q8_0
//! bytes straight from the block, Q5_0/Q5_1 high bits spread from their 32-bit word with a table
//! lookup and a bit test, Q4_K and Q6_K sub-blocks with shifts and masks; Q5_K through the scalar
//! unpacking) and meets each activation row in i8 × i8 → i16 products (`vmull_s8`,
//! `vmull_high_s8`: |w·x| ≤ 128·127, two of them still fit an i16) summed pairwise into i32
//! lanes. K-quant groups meet their scale in i16 × i16 → i32 multiply-adds (`vmlal_s16`; two
//! 16-value groups first added in i16 lanes where they share a scale: Q4_K, Q5_K), and the
//! minimum's Σ mn·Σx is two more, before the one horizontal sum per super-block and row. 16-bit
//! float weights take the scalar path.
//!
//! Not used: the dot-product extension's `sdot` (`vdotq_s32`, ARMv8.2; every Apple M-series and
//! Graviton 2+ has it), which takes four i8 products into an i32 lane in one instruction: its
//! intrinsics are unstable in Rust 1.95 (rust-lang/rust#117224). Speed not measured: no ARM
//! machine is at hand; correctness is tested under qemu (`tests/run.sh`).

use core::arch::aarch64::{
    int8x16_t, int16x8_t, int32x4_t, uint8x16_t, vaddq_s16, vaddq_s32, vaddvq_s32, vandq_u8,
    vdupq_n_s8, vdupq_n_s16, vdupq_n_s32, vdupq_n_u8, vget_low_s8, vget_low_s16, vld1q_s8,
    vld1q_s16, vld1q_u8, vmlal_high_s16, vmlal_s16, vmull_high_s8, vmull_s8, vorrq_u8, vpaddlq_s16,
    vqtbl1q_u8, vreinterpretq_s8_u8, vshlq_n_u8, vshlq_u8, vshrq_n_u8, vsubq_u8, vtstq_u8,
};

use crate::block::{BLOCK, WeightType, f16_at, k_quants, k_scales, unpack};
use crate::quantize::{K_GROUP, K_SUM, MAX_ROWS, QActs};
use crate::scalar;

/// 16 bytes of `b` from `at`.
#[target_feature(enable = "neon")]
#[inline]
fn load(b: &[u8], at: usize) -> uint8x16_t {
    let s = &b[at..at + 16];
    // SAFETY: `s` is 16 readable bytes (the slice above is bounds-checked); `vld1q_u8` reads
    // exactly 16 bytes and needs no alignment beyond a byte's.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// 16 activation bytes of `q` from `at`.
#[target_feature(enable = "neon")]
#[inline]
fn load_i8(q: &[i8], at: usize) -> int8x16_t {
    let s = &q[at..at + 16];
    // SAFETY: as in `load`: 16 readable bytes, a byte's alignment.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// Eight i16 values of `v` from `at`.
#[target_feature(enable = "neon")]
#[inline]
fn load_i16(v: &[i16], at: usize) -> int16x8_t {
    let s = &v[at..at + 8];
    // SAFETY: 8 readable i16 values (bounds-checked above), `s`'s pointer aligned for i16.
    unsafe { vld1q_s16(s.as_ptr()) }
}

/// w·x over 16 bytes as eight i16 lanes, each the sum of two products (w, x i8; the caller
/// bounds them so that the lanes fit): lane i holds values i and i + 8.
#[target_feature(enable = "neon")]
#[inline]
fn products(w: uint8x16_t, x: int8x16_t) -> int16x8_t {
    let w = vreinterpretq_s8_u8(w);
    vaddq_s16(
        vmull_s8(vget_low_s8(w), vget_low_s8(x)),
        vmull_high_s8(w, x),
    )
}

/// Σ w·x over 16 bytes as four i32 partial sums (w, x i8; at most 128·127 per product, so a
/// pair of products fits an i16).
#[target_feature(enable = "neon")]
#[inline]
fn dot16(w: uint8x16_t, x: int8x16_t) -> int32x4_t {
    vpaddlq_s16(products(w, x))
}

/// `acc` plus each i16 lane of `a` times the same lane of `b`, in i32 lanes (what simd128's
/// `i32x4.dot_i16x8_s` adds, summed across other lanes: the sums are exact integers, so only
/// their total, taken once, matters).
#[target_feature(enable = "neon")]
#[inline]
fn dot_i16(acc: int32x4_t, a: int16x8_t, b: int16x8_t) -> int32x4_t {
    vmlal_high_s16(vmlal_s16(acc, vget_low_s16(a), vget_low_s16(b)), a, b)
}

/// `out[r] = Σ_i W[row, i] · x[r, i]` for every activation row r: the scalar kernel's
/// [`scalar::dot_rows`], the same bits.
#[target_feature(enable = "neon")]
pub(crate) fn dot_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    match ty {
        WeightType::F16 | WeightType::BF16 => scalar::dot_rows(ty, w_row, x, out),
        WeightType::Q4K | WeightType::Q5K | WeightType::Q6K => k_rows(ty, w_row, x, out),
        _ => legacy_rows(ty, w_row, x, out),
    }
}

/// A legacy block's 32 values as two vectors (values 0–15, 16–31), its scale and its minimum
/// term's factor, as `block::unpack` gives them.
#[target_feature(enable = "neon")]
#[inline]
fn legacy_block(ty: WeightType, row: &[u8], b: usize) -> (uint8x16_t, uint8x16_t, f32, f32) {
    let bytes = ty.block_bytes();
    let block = &row[b * bytes..(b + 1) * bytes];
    let low4 = vdupq_n_u8(0x0F);
    match ty {
        WeightType::Q8_0 => (load(block, 2), load(block, 18), f16_at(block, 0), 0.0),
        WeightType::Q4_0 | WeightType::Q4_1 => {
            let d = f16_at(block, 0);
            let (at, min) = if ty == WeightType::Q4_1 {
                (4, f16_at(block, 2))
            } else {
                (2, -8.0 * d)
            };
            let v = load(block, at);
            (vandq_u8(v, low4), vshrq_n_u8::<4>(v), d, min)
        }
        WeightType::Q5_0 | WeightType::Q5_1 => {
            // d, (Q5_1: the minimum), 32 high bits, 16 bytes of nibbles (the 16 bytes loaded
            // from the high bits' first stay inside the block: 22 or 24 bytes).
            let (high_at, low_at) = if ty == WeightType::Q5_1 {
                (4, 8)
            } else {
                (2, 6)
            };
            let qh = load(block, high_at);
            let v = load(block, low_at);
            let w0 = vorrq_u8(vandq_u8(v, low4), high_bits(qh, 0));
            let w1 = vorrq_u8(vshrq_n_u8::<4>(v), high_bits(qh, 2));
            let d = f16_at(block, 0);
            if ty == WeightType::Q5_1 {
                (w0, w1, d, f16_at(block, 2))
            } else {
                // w − 16 wraps to the signed value's byte.
                let sixteen = vdupq_n_u8(16);
                (vsubq_u8(w0, sixteen), vsubq_u8(w1, sixteen), d, 0.0)
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
#[target_feature(enable = "neon")]
#[inline]
fn high_bits(qh: uint8x16_t, from: u8) -> uint8x16_t {
    let (a, b) = (from, from + 1);
    let index = [a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b];
    let bytes = vqtbl1q_u8(qh, load(&index, 0));
    let bit = [1u8, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // All ones where the lane's bit is set.
    let set = vtstq_u8(bytes, load(&bit, 0));
    vandq_u8(set, vdupq_n_u8(0x10))
}

#[target_feature(enable = "neon")]
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
            let dot = vaddvq_s32(vaddq_s32(
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
#[target_feature(enable = "neon")]
#[inline]
fn k_block(ty: WeightType, block: &[u8]) -> [uint8x16_t; 16] {
    let low4 = vdupq_n_u8(0x0F);
    let mut q = [vdupq_n_u8(0); 16];
    match ty {
        WeightType::Q4K => {
            // Sub-blocks 2c and 2c + 1: the low and high nibbles of bytes 16 + 32c….
            for (h, q) in q.iter_mut().enumerate() {
                let (j, part) = (h / 2, h % 2);
                let v = load(block, 16 + 32 * (j / 2) + 16 * part);
                *q = if j % 2 == 0 {
                    vandq_u8(v, low4)
                } else {
                    vshrq_n_u8::<4>(v)
                };
            }
        }
        WeightType::Q6K => {
            for (h, q) in q.iter_mut().enumerate() {
                let (j, part) = (h / 2, h % 2);
                let (half, quarter) = (j / 4, j % 4);
                let ql = load(block, 64 * half + 32 * (quarter % 2) + 16 * part);
                let qh = load(block, 128 + 32 * half + 16 * part);
                // Right shifts by a lane count: `vshlq_u8` by a negative one.
                let low = vandq_u8(vshlq_u8(ql, vdupq_n_s8(-4 * (quarter as i8 / 2))), low4);
                let high = vandq_u8(vshlq_u8(qh, vdupq_n_s8(-2 * quarter as i8)), vdupq_n_u8(3));
                *q = vorrq_u8(low, vshlq_n_u8::<4>(high));
            }
        }
        _ => {
            for (h, q) in q.iter_mut().enumerate() {
                let values = k_quants(ty, block, h / 2);
                *q = load(&values, 16 * (h % 2));
            }
        }
    }
    q
}

#[target_feature(enable = "neon")]
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
        let sc: [int16x8_t; 16] = std::array::from_fn(|h| vdupq_n_s16(s.sc[h]));
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
            // q·x pairs in i16 lanes, then each lane times the group's scale into i32. A lane
            // holds 2 products (Q6_K: ≤ 2·63·128) or, where two 16-value groups share a scale,
            // 4 (Q4_K ≤ 4·15·128, Q5_K ≤ 4·31·128): < 2¹⁵. The i32 sums are the scalar
            // kernel's (< 2³¹, exact in any order).
            let mut dot = vdupq_n_s32(0);
            if paired {
                for j in 0..SUMS / 2 {
                    let p = vaddq_s16(
                        products(q[2 * j], load_i8(xq, K_SUM * 2 * j)),
                        products(q[2 * j + 1], load_i8(xq, K_SUM * (2 * j + 1))),
                    );
                    dot = dot_i16(dot, p, sc[2 * j]);
                }
            } else {
                for h in 0..SUMS {
                    let p = products(q[h], load_i8(xq, K_SUM * h));
                    dot = dot_i16(dot, p, sc[h]);
                }
            }
            // Σ mn·Σx over the sixteen groups (|mn| ≤ 128, |Σx| ≤ 2032).
            let offset = dot_i16(
                dot_i16(vdupq_n_s32(0), load_i16(sums, 0), mn[0]),
                load_i16(sums, 8),
                mn[1],
            );
            let xd = x.kd[at];
            *acc += s.d * xd * vaddvq_s32(dot) as f32 - s.dmin * xd * vaddvq_s32(offset) as f32;
        }
    }
    out[..x.rows].copy_from_slice(&acc[..x.rows]);
}
