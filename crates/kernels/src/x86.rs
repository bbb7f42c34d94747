//! The AVX2 micro-kernel (x86-64 with AVX2 and FMA, detected at run time): the same contract
//! as `scalar::dot_rows`. Each weight block is unpacked to 32 bytes once, then meets every
//! activation row in `maddubs` (u8 × i8 pairs to i16) and `madd` (to eight i32 lanes); the
//! lanes are scaled by d_w·d_x and accumulated in eight f32 lanes per row, summed at the end.
//! Signed Q8_0 weights use the sign trick (|w| × sign(x, w)); 4-bit weights are unsigned with
//! a minimum term, as in the scalar kernel.

use std::arch::x86_64::*;

use crate::block::{BLOCK, WeightType, f16_at};
use crate::matmul::MAX_ROWS;
use crate::quantize::QActs;

/// Whether this CPU runs [`dot_rows`].
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// As `scalar::dot_rows`. Calling it is unsafe unless the CPU has AVX2 and FMA
/// ([`available`]).
#[target_feature(enable = "avx2,fma")]
pub(crate) fn dot_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let nb = x.cols / BLOCK;
    let m = x.rows;
    let mut acc = [_mm256_setzero_ps(); MAX_ROWS];
    let mut mins = [0f32; MAX_ROWS];
    let ones = _mm256_set1_epi16(1);
    let low_nibbles = _mm_set1_epi8(0x0F);
    for (b, block) in w_row.chunks_exact(ty.block_bytes()).enumerate() {
        let d = f16_at(block, 0);
        let (w, signed, min) = match ty {
            WeightType::Q8_0 => {
                let q = &block[2..34];
                // SAFETY: `q` is 32 bytes long; loadu has no alignment requirement.
                let w = unsafe { _mm256_loadu_si256(q.as_ptr().cast()) };
                (w, true, 0.0)
            }
            WeightType::Q4_0 | WeightType::Q4_1 => {
                let (qs, min) = match ty {
                    WeightType::Q4_1 => (&block[4..20], f16_at(block, 2)),
                    _ => (&block[2..18], -8.0 * d),
                };
                // SAFETY: `qs` is 16 bytes long; loadu has no alignment requirement.
                let packed = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
                let lo = _mm_and_si128(packed, low_nibbles);
                let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low_nibbles);
                (_mm256_set_m128i(hi, lo), false, min)
            }
        };
        let abs_w = if signed { _mm256_sign_epi8(w, w) } else { w };
        for r in 0..m {
            let at = r * nb + b;
            let xq = &x.q[at * BLOCK..(at + 1) * BLOCK];
            // SAFETY: `xq` is 32 bytes long; loadu has no alignment requirement.
            let xv = unsafe { _mm256_loadu_si256(xq.as_ptr().cast()) };
            let x_signed = if signed { _mm256_sign_epi8(xv, w) } else { xv };
            // |w| ≤ 128 and |x| ≤ 127: a pair sums to at most 32,512, inside i16.
            let pairs = _mm256_maddubs_epi16(abs_w, x_signed);
            let lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x.d[at]), lanes, acc[r]);
            mins[r] += min * x.s[at];
        }
    }
    for r in 0..m {
        out[r] = hsum(acc[r]) + mins[r];
    }
}

/// The sum of the eight lanes.
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}
