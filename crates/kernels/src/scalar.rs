//! The portable micro-kernels: one weight row against up to 16 quantized activation rows, in
//! plain Rust. Every test runs them; the SIMD kernels are checked against them.
//!
//! Legacy types: each 32-value weight block is unpacked once (`block::unpack`) to small integers
//! with a scale and a minimum; unsigned types (Q4_0 as Q4_1 with minimum −8d, Q4_1, Q5_1) add a
//! minimum term m·s (s = d_x·Σq_x), so every legacy type shares one integer dot product per 32
//! values against the per-32 activations.
//!
//! 16-bit floats: converted exactly to f32 and multiplied with the unquantized activations.
//!
//! K-quants: a whole 256-value super-block meets the per-256 activations in integers,
//! Σ_h sc_h·(q·x)_h and Σ_h mn_h·Σx_h over its sixteen 16-value groups (`block::KScales`), and
//! turns to floats once: d·d_x·dot − dmin·d_x·offset.

use crate::block::{BLOCK, WeightType, float_at, k_quants, k_scales, unpack};
use crate::quantize::{K_GROUP, K_SUM, MAX_ROWS, QActs};

/// `out[r] = Σ_i W[row, i] · x[r, i]` for every activation row r, reading each weight block
/// once. `w_row` is one row's blocks, `out` is `[x.rows]`.
pub(crate) fn dot_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    if ty.is_k() {
        k_rows(ty, w_row, x, out);
        return;
    }
    if ty.is_float() {
        float_rows(ty, w_row, x, out);
        return;
    }
    let nb = x.cols / BLOCK;
    let m = x.rows;
    let mut acc = [0f32; MAX_ROWS];
    let mut mins = [0f32; MAX_ROWS];
    for b in 0..nb {
        let sub = unpack(ty, w_row, b);
        for r in 0..m {
            let at = r * nb + b;
            let xq = &x.q[at * BLOCK..(at + 1) * BLOCK];
            let dot: i32 = sub
                .w
                .iter()
                .zip(xq)
                .map(|(&wi, &xi)| i32::from(wi) * i32::from(xi))
                .sum();
            acc[r] += sub.scale[0] * x.d[at] * dot as f32;
            if !ty.signed() {
                mins[r] += sub.min * x.s[at];
            }
        }
    }
    for r in 0..m {
        out[r] = acc[r] + mins[r];
    }
}

/// [`dot_rows`] for a K-quant row.
fn k_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let nblk = x.cols / K_GROUP;
    let bytes = ty.block_bytes();
    let mut acc = [0f32; MAX_ROWS];
    for (blk, block) in w_row.chunks_exact(bytes).enumerate().take(nblk) {
        let s = k_scales(ty, block);
        let q: [[u8; BLOCK]; 8] = std::array::from_fn(|j| k_quants(ty, block, j));
        for (r, acc) in acc.iter_mut().enumerate().take(x.rows) {
            let at = r * nblk + blk;
            let xq = &x.kq[at * K_GROUP..(at + 1) * K_GROUP];
            let sums = &x.ks[at * (K_GROUP / K_SUM)..(at + 1) * (K_GROUP / K_SUM)];
            // |q·x| over 16 values ≤ 16·63·127; times |sc| ≤ 128, sixteen times: < 2³¹.
            let (mut dot, mut offset) = (0i32, 0i32);
            for h in 0..K_GROUP / K_SUM {
                let (j, at_j) = (h / 2, K_SUM * (h % 2));
                let part: i32 = q[j][at_j..at_j + K_SUM]
                    .iter()
                    .zip(&xq[K_SUM * h..K_SUM * (h + 1)])
                    .map(|(&qi, &xi)| i32::from(qi) * i32::from(xi))
                    .sum();
                dot += i32::from(s.sc[h]) * part;
                offset += i32::from(s.mn[h]) * i32::from(sums[h]);
            }
            let xd = x.kd[at];
            *acc += s.d * xd * dot as f32 - s.dmin * xd * offset as f32;
        }
    }
    out[..x.rows].copy_from_slice(&acc[..x.rows]);
}

/// [`dot_rows`] for a 16-bit float row: each weight converted exactly to f32 once and
/// multiplied with every row's f32 activation, accumulated in f32 in order.
fn float_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let cols = x.cols;
    let mut acc = [0f32; MAX_ROWS];
    for i in 0..cols {
        let w = float_at(ty, w_row, i);
        for (r, acc) in acc.iter_mut().enumerate().take(x.rows) {
            *acc += w * x.x[r * cols + i];
        }
    }
    out[..x.rows].copy_from_slice(&acc[..x.rows]);
}
