//! The portable micro-kernel: one weight row against up to 16 quantized activation rows, in
//! plain Rust. Every test runs it; the SIMD kernels are checked against it.
//!
//! Q4_0 is computed as Q4_1 with minimum −8d: d·(q − 8)·x = d·q·x − 8d·x, so both 4-bit types
//! share one unsigned integer dot product and a per-block minimum term m·s (s = d_x·Σq_x).

use crate::block::{BLOCK, WeightType, f16_at};
use crate::matmul::MAX_ROWS;
use crate::quantize::QActs;

/// `out[r] = Σ_i W[row, i] · x[r, i]` for every activation row r, reading each weight block
/// once. `w_row` is one row's blocks (`[cols / 32, block_bytes]`), `out` is `[x.rows]`.
pub(crate) fn dot_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let nb = x.cols / BLOCK;
    let m = x.rows;
    let mut acc = [0f32; MAX_ROWS];
    let mut mins = [0f32; MAX_ROWS];
    let mut w = [0i16; BLOCK];
    for (b, block) in w_row.chunks_exact(ty.block_bytes()).enumerate() {
        let d = f16_at(block, 0);
        let min = match ty {
            WeightType::Q8_0 => {
                for (wi, &q) in w.iter_mut().zip(&block[2..34]) {
                    *wi = i16::from(q as i8);
                }
                None
            }
            WeightType::Q4_0 | WeightType::Q4_1 => {
                let (qs, min) = match ty {
                    WeightType::Q4_1 => (&block[4..20], f16_at(block, 2)),
                    _ => (&block[2..18], -8.0 * d),
                };
                for (j, &byte) in qs.iter().enumerate() {
                    w[j] = i16::from(byte & 0x0F);
                    w[j + 16] = i16::from(byte >> 4);
                }
                Some(min)
            }
        };
        for r in 0..m {
            let at = r * nb + b;
            let xq = &x.q[at * BLOCK..(at + 1) * BLOCK];
            let sumi: i32 = w
                .iter()
                .zip(xq)
                .map(|(&wi, &xi)| i32::from(wi) * i32::from(xi))
                .sum();
            acc[r] += d * x.d[at] * sumi as f32;
            if let Some(min) = min {
                mins[r] += min * x.s[at];
            }
        }
    }
    for r in 0..m {
        out[r] = acc[r] + mins[r];
    }
}
