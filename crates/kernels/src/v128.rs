//! The 128-bit SIMD micro-kernel, written once over [`Lanes`], the few vector operations it
//! needs: WebAssembly's simd128 (`wasm.rs`, what the page runs without a hardware GPU) and
//! aarch64's NEON (`neon.rs`) each give their instructions for them. Same results as the scalar
//! kernel bit for bit on both: the integer dot products are exact in any order, and every float
//! step is the scalar kernel's, in its order.
//!
//! A weight block is unpacked once into vectors of small integers (Q4_0/Q4_1 nibbles and Q8_0
//! bytes straight from the block, Q5_0/Q5_1 high bits spread from their 32-bit word, Q4_K and
//! Q6_K sub-blocks with shifts and masks; Q5_K through the scalar unpacking) and meets each
//! activation row in i8 × i8 → i16 products (|w·x| ≤ 128·127, two of them still fit an i16)
//! summed pairwise into i32 lanes. K-quant groups meet their scale in i16 × i16 → i32
//! multiply-adds (two 16-value groups first added in i16 lanes where they share a scale: Q4_K,
//! Q5_K), and the minimum's Σ mn·Σx is two more, before the one horizontal sum per super-block
//! and row. 16-bit float weights take the scalar path.

use crate::block::{BLOCK, WeightType, f16_at, k_quants, k_scales, unpack};
use crate::quantize::{K_GROUP, K_SUM, MAX_ROWS, QActs};
use crate::scalar;

/// A 128-bit instruction set's operations for the kernel. Every method is a few instructions,
/// inlined into the kernel's loops.
pub(crate) trait Lanes {
    /// 16 unsigned bytes (weights, masks).
    type Bytes: Copy;
    /// 16 signed bytes (quantized activations).
    type Acts: Copy;
    /// 8 i16 lanes.
    type Halves: Copy;
    /// 4 i32 lanes.
    type Words: Copy;

    /// 16 bytes of `b` from `at` (bounds-checked).
    fn load(b: &[u8], at: usize) -> Self::Bytes;
    /// 16 activation bytes of `q` from `at` (bounds-checked).
    fn load_acts(q: &[i8], at: usize) -> Self::Acts;
    /// Eight i16 values of `v` from `at` (bounds-checked).
    fn load_halves(v: &[i16], at: usize) -> Self::Halves;
    /// `v` in every byte.
    fn splat(v: u8) -> Self::Bytes;
    /// `v` in every i16 lane.
    fn splat_halves(v: i16) -> Self::Halves;
    /// Four zero i32 lanes.
    fn zero() -> Self::Words;
    /// Bitwise and.
    fn and(a: Self::Bytes, b: Self::Bytes) -> Self::Bytes;
    /// Bitwise or.
    fn or(a: Self::Bytes, b: Self::Bytes) -> Self::Bytes;
    /// Each byte less `b`'s, wrapping.
    fn sub(a: Self::Bytes, b: Self::Bytes) -> Self::Bytes;
    /// Each byte shifted right by `n` < 8, zeros in.
    fn shr(a: Self::Bytes, n: u32) -> Self::Bytes;
    /// Each byte shifted left by 4.
    fn shl4(a: Self::Bytes) -> Self::Bytes;
    /// Bit 4 of byte j set where bit j of the 16 bits in bytes `from`, `from + 1` of `qh` is: a
    /// Q5 block's high bits for 16 values (bytes 0–1: values 0–15; bytes 2–3: values 16–31).
    fn high_bits(qh: Self::Bytes, from: u8) -> Self::Bytes;
    /// w·x over 16 bytes (w read as i8) as eight i16 lanes, each the sum of two products (the
    /// caller bounds them so that the lanes fit).
    fn products(w: Self::Bytes, x: Self::Acts) -> Self::Halves;
    /// Lane-wise i16 sum.
    fn add_halves(a: Self::Halves, b: Self::Halves) -> Self::Halves;
    /// Σ w·x over 16 bytes as four i32 partial sums (w, x i8; at most 128·127 a product, so a
    /// pair of products fits an i16).
    fn dot16(w: Self::Bytes, x: Self::Acts) -> Self::Words;
    /// Lane-wise i32 sum.
    fn add(a: Self::Words, b: Self::Words) -> Self::Words;
    /// `acc` plus the i16 lanes of `a` times those of `b`, in i32 lanes (exact integer sums:
    /// only their total, taken once, matters).
    fn dot_halves(acc: Self::Words, a: Self::Halves, b: Self::Halves) -> Self::Words;
    /// The sum of the four i32 lanes.
    fn hsum(v: Self::Words) -> i32;

    /// `acc` plus Σ w·x over 16 bytes (as [`Lanes::dot16`]) in i32 lanes.
    fn dot16_acc(acc: Self::Words, w: Self::Bytes, x: Self::Acts) -> Self::Words {
        Self::add(acc, Self::dot16(w, x))
    }

    /// `acc` plus `scale` · (Σ w0·x0 + Σ w1·x1): two 16-value groups of a K-quant super-block
    /// that share a scale (`sc` is `scale` in every i16 lane), in i32 lanes.
    fn scaled_dot32(
        acc: Self::Words,
        (w0, x0): (Self::Bytes, Self::Acts),
        (w1, x1): (Self::Bytes, Self::Acts),
        (sc, scale): (Self::Halves, i16),
    ) -> Self::Words {
        let _ = scale;
        halves_dot32::<Self>(acc, (w0, x0), (w1, x1), sc)
    }

    /// `acc` plus `scale` · Σ w·x over one 16-value group (`sc` as in
    /// [`Lanes::scaled_dot32`]).
    fn scaled_dot16(
        acc: Self::Words,
        (w, x): (Self::Bytes, Self::Acts),
        (sc, scale): (Self::Halves, i16),
    ) -> Self::Words {
        let _ = scale;
        halves_dot16::<Self>(acc, (w, x), sc)
    }
}

/// [`Lanes::scaled_dot32`] in i16 lanes: the pairs of products of both groups added (a lane
/// then holds 4 products: Q4_K ≤ 4·15·128, Q5_K ≤ 4·31·128, < 2¹⁵), then each lane times the
/// scale into i32.
#[inline(always)]
pub(crate) fn halves_dot32<L: Lanes + ?Sized>(
    acc: L::Words,
    (w0, x0): (L::Bytes, L::Acts),
    (w1, x1): (L::Bytes, L::Acts),
    sc: L::Halves,
) -> L::Words {
    L::dot_halves(
        acc,
        L::add_halves(L::products(w0, x0), L::products(w1, x1)),
        sc,
    )
}

/// [`Lanes::scaled_dot16`] in i16 lanes (a lane 2 products: Q6_K ≤ 2·63·128).
#[inline(always)]
pub(crate) fn halves_dot16<L: Lanes + ?Sized>(
    acc: L::Words,
    (w, x): (L::Bytes, L::Acts),
    sc: L::Halves,
) -> L::Words {
    L::dot_halves(acc, L::products(w, x), sc)
}

/// `out[r] = Σ_i W[row, i] · x[r, i]` for every activation row r: the scalar kernel's
/// [`scalar::dot_rows`], the same bits.
pub(crate) fn dot_rows<L: Lanes>(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    match ty {
        WeightType::F16 | WeightType::BF16 => scalar::dot_rows(ty, w_row, x, out),
        WeightType::Q4K | WeightType::Q5K | WeightType::Q6K => k_rows::<L>(ty, w_row, x, out),
        _ => legacy_rows::<L>(ty, w_row, x, out),
    }
}

/// A legacy block's 32 values as two vectors (values 0–15, 16–31), its scale and its minimum
/// term's factor, as `block::unpack` gives them.
#[inline(always)]
fn legacy_block<L: Lanes>(ty: WeightType, row: &[u8], b: usize) -> (L::Bytes, L::Bytes, f32, f32) {
    let bytes = ty.block_bytes();
    let block = &row[b * bytes..(b + 1) * bytes];
    let low4 = L::splat(0x0F);
    match ty {
        WeightType::Q8_0 => (L::load(block, 2), L::load(block, 18), f16_at(block, 0), 0.0),
        WeightType::Q4_0 | WeightType::Q4_1 => {
            let d = f16_at(block, 0);
            let (at, min) = if ty == WeightType::Q4_1 {
                (4, f16_at(block, 2))
            } else {
                (2, -8.0 * d)
            };
            let v = L::load(block, at);
            (L::and(v, low4), L::shr(v, 4), d, min)
        }
        WeightType::Q5_0 | WeightType::Q5_1 => {
            // d, (Q5_1: the minimum), 32 high bits, 16 bytes of nibbles (the 16 bytes loaded
            // from the high bits' first stay inside the block: 22 or 24 bytes).
            let (high_at, low_at) = if ty == WeightType::Q5_1 {
                (4, 8)
            } else {
                (2, 6)
            };
            let qh = L::load(block, high_at);
            let v = L::load(block, low_at);
            let w0 = L::or(L::and(v, low4), L::high_bits(qh, 0));
            let w1 = L::or(L::shr(v, 4), L::high_bits(qh, 2));
            let d = f16_at(block, 0);
            if ty == WeightType::Q5_1 {
                (w0, w1, d, f16_at(block, 2))
            } else {
                // w − 16 wraps to the signed value's byte.
                let sixteen = L::splat(16);
                (L::sub(w0, sixteen), L::sub(w1, sixteen), d, 0.0)
            }
        }
        _ => {
            let sub = unpack(ty, row, b);
            let w: [u8; BLOCK] = sub.w.map(|v| v as u8);
            (L::load(&w, 0), L::load(&w, 16), sub.scale[0], sub.min)
        }
    }
}

fn legacy_rows<L: Lanes>(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let nb = x.cols / BLOCK;
    let m = x.rows;
    let mut acc = [0f32; MAX_ROWS];
    let mut mins = [0f32; MAX_ROWS];
    for b in 0..nb {
        let (w0, w1, scale, min) = legacy_block::<L>(ty, w_row, b);
        for r in 0..m {
            let at = r * nb + b;
            let xq = &x.q[at * BLOCK..(at + 1) * BLOCK];
            let dot = L::hsum(L::dot16_acc(
                L::dot16(w0, L::load_acts(xq, 0)),
                w1,
                L::load_acts(xq, 16),
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
fn k_block<L: Lanes>(ty: WeightType, block: &[u8]) -> [L::Bytes; 16] {
    let low4 = L::splat(0x0F);
    match ty {
        WeightType::Q4K => {
            // Sub-blocks 2c and 2c + 1: the low and high nibbles of bytes 16 + 32c….
            std::array::from_fn(|h| {
                let (j, part) = (h / 2, h % 2);
                let v = L::load(block, 16 + 32 * (j / 2) + 16 * part);
                if j % 2 == 0 {
                    L::and(v, low4)
                } else {
                    L::shr(v, 4)
                }
            })
        }
        WeightType::Q6K => std::array::from_fn(|h| {
            let (j, part) = (h / 2, h % 2);
            let (half, quarter) = (j / 4, j % 4);
            let ql = L::load(block, 64 * half + 32 * (quarter % 2) + 16 * part);
            let qh = L::load(block, 128 + 32 * half + 16 * part);
            let low = L::and(L::shr(ql, 4 * (quarter as u32 / 2)), low4);
            let high = L::and(L::shr(qh, 2 * quarter as u32), L::splat(3));
            L::or(low, L::shl4(high))
        }),
        _ => std::array::from_fn(|h| {
            let q = k_quants(ty, block, h / 2);
            L::load(&q, 16 * (h % 2))
        }),
    }
}

fn k_rows<L: Lanes>(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    const SUMS: usize = K_GROUP / K_SUM;
    let nblk = x.cols / K_GROUP;
    let bytes = ty.block_bytes();
    // Q4_K and Q5_K scale 32 values at a time (`sc[2j] == sc[2j + 1]`), Q6_K 16.
    let paired = ty != WeightType::Q6K;
    let mut acc = [0f32; MAX_ROWS];
    for (blk, block) in w_row.chunks_exact(bytes).enumerate().take(nblk) {
        let s = k_scales(ty, block);
        let q = k_block::<L>(ty, block);
        let sc: [L::Halves; 16] = std::array::from_fn(|h| L::splat_halves(s.sc[h]));
        let mn = [L::load_halves(&s.mn, 0), L::load_halves(&s.mn, 8)];
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
            // Each group's q·x times its scale, into i32 lanes (`halves_dot32` and
            // `halves_dot16` say how the lanes stay in range). The i32 sums are the scalar
            // kernel's (< 2³¹, exact in any order).
            let mut dot = L::zero();
            if paired {
                for j in 0..SUMS / 2 {
                    dot = L::scaled_dot32(
                        dot,
                        (q[2 * j], L::load_acts(xq, K_SUM * 2 * j)),
                        (q[2 * j + 1], L::load_acts(xq, K_SUM * (2 * j + 1))),
                        (sc[2 * j], s.sc[2 * j]),
                    );
                }
            } else {
                for h in 0..SUMS {
                    let x = L::load_acts(xq, K_SUM * h);
                    dot = L::scaled_dot16(dot, (q[h], x), (sc[h], s.sc[h]));
                }
            }
            // Σ mn·Σx over the sixteen groups (|mn| ≤ 128, |Σx| ≤ 2032).
            let offset = L::dot_halves(
                L::dot_halves(L::zero(), L::load_halves(sums, 0), mn[0]),
                L::load_halves(sums, 8),
                mn[1],
            );
            let xd = x.kd[at];
            *acc += s.d * xd * L::hsum(dot) as f32 - s.dmin * xd * L::hsum(offset) as f32;
        }
    }
    out[..x.rows].copy_from_slice(&acc[..x.rows]);
}
