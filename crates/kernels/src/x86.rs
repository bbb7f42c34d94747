//! The AVX2 micro-kernel (x86-64 with AVX2, FMA and F16C, detected at run time): the same
//! contract as `scalar::dot_rows`. Each 32-value weight sub-block is unpacked to 32 bytes once,
//! then meets every activation row in `maddubs` (u8 × i8 pairs to i16) and `madd` (to eight i32
//! lanes, four per 16 values); the lanes are scaled by d_w·d_x (a scale per lane: Q6_K has one
//! per 16 values) and accumulated in eight f32 lanes per row, summed at the end. Signed weights
//! (Q8_0, Q5_0, Q6_K) use the sign trick (|w| × sign(x, w)); 4-bit weights are unsigned with a
//! minimum term, as in the scalar kernel.
//!
//! The kernel is instantiated per block type and per row count (1…16), so that the row loop
//! unrolls and each row's accumulator stays in a register; the row count changes which
//! instantiation runs, never the order of one row's operations.

use std::arch::x86_64::*;

use crate::block::{BLOCK, WeightType, scale_min_k4};
use crate::quantize::QActs;

/// Whether this CPU runs [`dot_rows`].
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// One block type's layout, for the generic kernel.
trait Layout {
    /// Bytes per block.
    const BYTES: usize;
    /// Values per block (32, or 256 for K-quants).
    const VALUES: usize;
    /// Whether the unpacked weights are signed (sign trick) or unsigned with a minimum.
    const SIGNED: bool;
    /// Sub-block `b` (32 values) of the row at `row`: its weights as bytes, the scale of each
    /// i32 lane of `madd` (lanes 0–3 hold values 0–15), and its minimum (0 for signed types).
    ///
    /// # Safety
    /// `row` points at a row of at least (b + 1)·32 values' blocks, and the CPU has AVX2 and
    /// F16C.
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32);

    /// Every sub-block of block `blk` as [`Layout::load`] gives them, into `subs[..SUBS]`, with
    /// what they share (f16 scales, packed 6-bit scales) decoded once; the default loads them one
    /// by one.
    ///
    /// # Safety
    /// As [`Layout::load`] for each of the block's sub-blocks.
    #[inline(always)]
    unsafe fn load_block(row: *const u8, blk: usize, subs: &mut [(__m256i, __m256, f32); 8]) {
        let per = Self::VALUES / BLOCK;
        for (j, sub) in subs.iter_mut().enumerate().take(per) {
            // SAFETY: sub-block blk·per + j is inside block blk (caller).
            *sub = unsafe { Self::load(row, blk * per + j) };
        }
    }
}

/// An f16 at `p` (little-endian) as f32.
///
/// # Safety
/// `p` points at 2 readable bytes, and the CPU has F16C.
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes at `p`; read_unaligned has no alignment
    // requirement.
    let bits = unsafe { p.cast::<u16>().read_unaligned() };
    // SAFETY: F16C is guaranteed by the caller.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits)))) }
}

/// 16 bytes of nibbles at `p` as 32 unsigned bytes: value j from the low nibble of byte j,
/// value j + 16 from its high nibble.
///
/// # Safety
/// `p` points at 16 readable bytes, and the CPU has AVX2.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    // SAFETY: 16 readable bytes at `p` (caller); loadu has no alignment requirement; AVX2 is
    // guaranteed by the caller.
    unsafe {
        let packed = _mm_loadu_si128(p.cast());
        let mask = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(packed, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
        _mm256_set_m128i(hi, lo)
    }
}

struct Q80;
struct Q40;
struct Q41;

struct Q50;
struct Q4K;
struct Q6K;

impl Layout for Q80 {
    const BYTES: usize = 34;
    const VALUES: usize = BLOCK;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: block b's 34 bytes are readable (caller): the scale at 0..2, the weights at
        // 2..34.
        unsafe {
            let p = row.add(b * Self::BYTES);
            (
                _mm256_loadu_si256(p.add(2).cast()),
                _mm256_set1_ps(f16_at(p)),
                0.0,
            )
        }
    }
}

impl Layout for Q40 {
    const BYTES: usize = 18;
    const VALUES: usize = BLOCK;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: block b's 18 bytes are readable (caller): the scale at 0..2, the nibbles at
        // 2..18.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let d = f16_at(p);
            (nibbles(p.add(2)), _mm256_set1_ps(d), -8.0 * d)
        }
    }
}

impl Layout for Q41 {
    const BYTES: usize = 20;
    const VALUES: usize = BLOCK;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: block b's 20 bytes are readable (caller): scale, minimum, then the nibbles at
        // 4..20.
        unsafe {
            let p = row.add(b * Self::BYTES);
            (
                nibbles(p.add(4)),
                _mm256_set1_ps(f16_at(p)),
                f16_at(p.add(2)),
            )
        }
    }
}

impl Layout for Q50 {
    const BYTES: usize = 22;
    const VALUES: usize = BLOCK;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: block b's 22 bytes are readable (caller): scale at 0..2, the 32 fifth bits at
        // 2..6, the nibbles at 6..22; read_unaligned has no alignment requirement; AVX2 and F16C
        // are guaranteed by the caller.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let qh = p.add(2).cast::<u32>().read_unaligned();
            // Byte i of the result is 0xFF where bit i of qh is set: each byte gets the qh byte
            // holding its bit, OR-ed with every bit but its own set, compared with all ones.
            let spread = _mm256_shuffle_epi8(
                _mm256_set1_epi32(qh as i32),
                _mm256_setr_epi64x(
                    0,
                    0x0101_0101_0101_0101,
                    0x0202_0202_0202_0202,
                    0x0303_0303_0303_0303,
                ),
            );
            let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
            let bits = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
            let q = _mm256_or_si256(
                nibbles(p.add(6)),
                _mm256_and_si256(bits, _mm256_set1_epi8(0x10)),
            );
            (
                _mm256_sub_epi8(q, _mm256_set1_epi8(16)),
                _mm256_set1_ps(f16_at(p)),
                0.0,
            )
        }
    }
}

impl Layout for Q4K {
    const BYTES: usize = 144;
    const VALUES: usize = 256;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: super-block b / 8's 144 bytes are readable (caller): d and dmin at 0..4, the
        // scales at 4..16, sub-block pair j / 2's 32 bytes of nibbles at 16 + 32·(j / 2).
        unsafe {
            let p = row.add(b / 8 * Self::BYTES);
            let j = b % 8;
            let scales = std::slice::from_raw_parts(p.add(4), 12);
            let (sc, m) = scale_min_k4(j, scales);
            let qs = _mm256_loadu_si256(p.add(16 + 32 * (j / 2)).cast());
            let qs = if j % 2 == 1 {
                _mm256_srli_epi16(qs, 4)
            } else {
                qs
            };
            (
                _mm256_and_si256(qs, _mm256_set1_epi8(0x0F)),
                _mm256_set1_ps(f16_at(p) * f32::from(sc)),
                -(f16_at(p.add(2)) * f32::from(m)),
            )
        }
    }
    #[inline(always)]
    unsafe fn load_block(row: *const u8, blk: usize, subs: &mut [(__m256i, __m256, f32); 8]) {
        // SAFETY: block blk's 144 bytes are readable (caller): d and dmin at 0..4, the scales at
        // 4..16, the nibbles at 16..144 (four 32-byte loads).
        unsafe {
            let p = row.add(blk * Self::BYTES);
            let (d, dmin) = (f16_at(p), f16_at(p.add(2)));
            let scales = std::slice::from_raw_parts(p.add(4), 12);
            let mask = _mm256_set1_epi8(0x0F);
            for pair in 0..4 {
                let qs = _mm256_loadu_si256(p.add(16 + 32 * pair).cast());
                for (half, q) in [
                    _mm256_and_si256(qs, mask),
                    _mm256_and_si256(_mm256_srli_epi16(qs, 4), mask),
                ]
                .into_iter()
                .enumerate()
                {
                    let j = 2 * pair + half;
                    let (sc, m) = scale_min_k4(j, scales);
                    subs[j] = (q, _mm256_set1_ps(d * f32::from(sc)), -(dmin * f32::from(m)));
                }
            }
        }
    }
}

impl Layout for Q6K {
    const BYTES: usize = 210;
    const VALUES: usize = 256;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: super-block b / 8's 210 bytes are readable (caller): low nibbles at 0..128,
        // high bits at 128..192, the i8 scales at 192..208, d at 208..210.
        unsafe {
            let p = row.add(b / 8 * Self::BYTES);
            let (half, quarter) = ((b % 8) / 4, b % 4);
            let ql = _mm256_loadu_si256(p.add(64 * half + 32 * (quarter % 2)).cast());
            let qh = _mm256_loadu_si256(p.add(128 + 32 * half).cast());
            let lo = _mm256_and_si256(
                _mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (quarter / 2) as i32)),
                _mm256_set1_epi8(0x0F),
            );
            let hi = _mm256_and_si256(
                _mm256_sll_epi16(
                    _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * quarter as i32)),
                    _mm_cvtsi32_si128(4),
                ),
                _mm256_set1_epi8(0x30),
            );
            let q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
            let d = f16_at(p.add(208));
            let sc = p.add(192 + 8 * half + 2 * quarter).cast::<i8>();
            let (s0, s1) = (d * f32::from(*sc), d * f32::from(*sc.add(1)));
            (q, _mm256_setr_m128(_mm_set1_ps(s0), _mm_set1_ps(s1)), 0.0)
        }
    }
    #[inline(always)]
    unsafe fn load_block(row: *const u8, blk: usize, subs: &mut [(__m256i, __m256, f32); 8]) {
        // SAFETY: block blk's 210 bytes are readable (caller): low nibbles at 0..128, high bits
        // at 128..192, the i8 scales at 192..208, d at 208..210.
        unsafe {
            let p = row.add(blk * Self::BYTES);
            let d = f16_at(p.add(208));
            let sc = p.add(192).cast::<i8>();
            let (mask, hi_mask, bias) = (
                _mm256_set1_epi8(0x0F),
                _mm256_set1_epi8(0x30),
                _mm256_set1_epi8(32),
            );
            for half in 0..2 {
                let qh = _mm256_loadu_si256(p.add(128 + 32 * half).cast());
                let ql = [
                    _mm256_loadu_si256(p.add(64 * half).cast()),
                    _mm256_loadu_si256(p.add(64 * half + 32).cast()),
                ];
                for quarter in 0..4 {
                    let l = ql[quarter % 2];
                    let lo = if quarter < 2 {
                        _mm256_and_si256(l, mask)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(l, 4), mask)
                    };
                    // The quarter's 2 high bits moved to bits 4–5.
                    let hi = match quarter {
                        0 => _mm256_slli_epi16(qh, 4),
                        1 => _mm256_slli_epi16(qh, 2),
                        2 => qh,
                        _ => _mm256_srli_epi16(qh, 2),
                    };
                    let q =
                        _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_and_si256(hi, hi_mask)), bias);
                    let s = 8 * half + 2 * quarter;
                    let (s0, s1) = (d * f32::from(*sc.add(s)), d * f32::from(*sc.add(s + 1)));
                    subs[4 * half + quarter] =
                        (q, _mm256_setr_m128(_mm_set1_ps(s0), _mm_set1_ps(s1)), 0.0);
                }
            }
        }
    }
}

/// As `scalar::dot_rows`. Calling it is unsafe unless the CPU has AVX2, FMA and F16C
/// ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_rows(ty: WeightType, w_row: &[u8], x: &QActs, out: &mut [f32]) {
    macro_rules! by_rows {
        ($layout:ty) => {
            match x.rows {
                1 => rows::<$layout, 1>(w_row, x, out),
                2 => rows::<$layout, 2>(w_row, x, out),
                3 => rows::<$layout, 3>(w_row, x, out),
                4 => rows::<$layout, 4>(w_row, x, out),
                5 => rows::<$layout, 5>(w_row, x, out),
                6 => rows::<$layout, 6>(w_row, x, out),
                7 => rows::<$layout, 7>(w_row, x, out),
                8 => rows::<$layout, 8>(w_row, x, out),
                9 => rows::<$layout, 9>(w_row, x, out),
                10 => rows::<$layout, 10>(w_row, x, out),
                11 => rows::<$layout, 11>(w_row, x, out),
                12 => rows::<$layout, 12>(w_row, x, out),
                13 => rows::<$layout, 13>(w_row, x, out),
                14 => rows::<$layout, 14>(w_row, x, out),
                15 => rows::<$layout, 15>(w_row, x, out),
                16 => rows::<$layout, 16>(w_row, x, out),
                _ => {}
            }
        };
    }
    match ty {
        WeightType::Q8_0 => by_rows!(Q80),
        WeightType::Q4_0 => by_rows!(Q40),
        WeightType::Q4_1 => by_rows!(Q41),
        WeightType::Q5_0 => by_rows!(Q50),
        WeightType::Q4K => by_rows!(Q4K),
        WeightType::Q6K => by_rows!(Q6K),
    }
}

/// One weight row against `M` activation rows.
#[target_feature(enable = "avx2,fma,f16c")]
fn rows<L: Layout, const M: usize>(w_row: &[u8], x: &QActs, out: &mut [f32]) {
    let nb = x.cols / BLOCK;
    // Everything the pointer arithmetic below relies on, checked once per row.
    assert!(
        (nb * BLOCK).is_multiple_of(L::VALUES)
            && w_row.len() == nb * BLOCK / L::VALUES * L::BYTES
            && x.rows == M
            && x.q.len() >= M * x.cols
            && x.d.len() >= M * nb
            && x.s.len() >= M * nb
            && out.len() >= M
    );
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); M];
    let mut mins = [0f32; M];
    let (w_ptr, q_ptr) = (w_row.as_ptr(), x.q.as_ptr());
    let per = L::VALUES / BLOCK;
    let mut subs = [(_mm256_setzero_si256(), _mm256_setzero_ps(), 0f32); 8];
    // With one or two rows, decoding a K-quant block's shared scales once pays (decode +24 %
    // on the 1.5B); with more, holding eight unpacked sub-blocks costs more than it saves. Both
    // give the same values, so a row's result does not depend on which runs.
    let whole_blocks = M <= 2;
    for b in 0..nb {
        let (w, scale, min) = if whole_blocks {
            if b % per == 0 {
                // SAFETY: block b / per lies inside the row's blocks (their length is
                // asserted); this function's target features include the ones `load_block`
                // needs.
                unsafe { L::load_block(w_ptr, b / per, &mut subs) };
            }
            subs[b % per]
        } else {
            // SAFETY: sub-block b < nb lies inside the row's blocks (their length is asserted);
            // this function's target features include the ones `load` needs.
            unsafe { L::load(w_ptr, b) }
        };
        let abs_w = if L::SIGNED { _mm256_sign_epi8(w, w) } else { w };
        for r in 0..M {
            let at = r * nb + b;
            // SAFETY: at < M·nb, so at·32 + 32 ≤ M·cols ≤ x.q.len() (asserted); loadu has no
            // alignment requirement.
            let xv = unsafe { _mm256_loadu_si256(q_ptr.add(at * BLOCK).cast()) };
            let x_signed = if L::SIGNED {
                _mm256_sign_epi8(xv, w)
            } else {
                xv
            };
            // |w| ≤ 128 and |x| ≤ 127: a pair sums to at most 32,512, inside i16.
            let pairs = _mm256_maddubs_epi16(abs_w, x_signed);
            let lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(scale, _mm256_set1_ps(x.d[at])), lanes, acc[r]);
            if !L::SIGNED {
                mins[r] += min * x.s[at];
            }
        }
    }
    for r in 0..M {
        out[r] = hsum(acc[r]) + mins[r];
    }
}

/// The sum of the eight lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}
