//! The portable micro-kernel: one weight row against up to 16 quantized activation rows, in
//! plain Rust. Every test runs it; the SIMD kernels are checked against it.
//!
//! Each 32-value weight sub-block is unpacked once (`block::unpack`) to small integers with a
//! scale per 16 values and a minimum; unsigned types (Q4_0 as Q4_1 with minimum −8d, Q4_1,
//! Q4_K) add a minimum term m·s (s = d_x·Σq_x), so every type shares one integer dot product.

use crate::block::{BLOCK, WeightType, unpack};
use crate::matmul::MAX_ROWS;
use crate::quantize::QActs;

/// `out[r] = Σ_i W[row, i] · x[r, i]` for every activation row r, reading each weight block
/// once. `w_row` is one row's blocks, `out` is `[x.rows]`.
pub(crate) fn dot_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let nb = x.cols / BLOCK;
    let m = x.rows;
    let mut acc = [0f32; MAX_ROWS];
    let mut mins = [0f32; MAX_ROWS];
    let one_scale = !matches!(ty, WeightType::Q6K);
    for b in 0..nb {
        let sub = unpack(ty, w_row, b);
        for r in 0..m {
            let at = r * nb + b;
            let xq = &x.q[at * BLOCK..(at + 1) * BLOCK];
            let dot = |range: std::ops::Range<usize>| -> i32 {
                sub.w[range.clone()]
                    .iter()
                    .zip(&xq[range])
                    .map(|(&wi, &xi)| i32::from(wi) * i32::from(xi))
                    .sum()
            };
            if one_scale {
                acc[r] += sub.scale[0] * x.d[at] * dot(0..BLOCK) as f32;
            } else {
                acc[r] += x.d[at]
                    * (sub.scale[0] * dot(0..16) as f32 + sub.scale[1] * dot(16..BLOCK) as f32);
            }
            if !ty.signed() {
                mins[r] += sub.min * x.s[at];
            }
        }
    }
    for r in 0..m {
        out[r] = acc[r] + mins[r];
    }
}
