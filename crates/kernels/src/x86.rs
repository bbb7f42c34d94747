//! The x86-64 micro-kernels, chosen at run time: AVX2 (with FMA and F16C), and the same with
//! AVX-VNNI, which fuses the integer multiply-adds (`vpdpbusd`, `vpdpwssd`) and gives
//! bit-identical results (both forms are exact integer sums). Same contract as
//! `scalar::dot_rows`.
//!
//! - Legacy types: each 32-value block is unpacked to 32 bytes once, meets each activation row
//!   in u8 × i8 products summed four at a time into eight i32 lanes, scaled by d_w·d_x and
//!   accumulated in eight f32 lanes per row. Signed weights (Q8_0, Q5_0) use the sign trick
//!   (|w| × sign(x, w)); unsigned ones (Q4_0, Q4_1, Q5_1) add a minimum term.
//! - K-quants: a whole 256-value super-block stays in integers per row (sub-block products
//!   times the sub-block's integer scale), then meets floats once, with the minimum / offset
//!   term from the activations' 16-value sums.
//! - 16-bit floats (F16 via F16C, BF16 by a shift): eight weights converted to f32 once and met
//!   by each row's f32 activations in FMAs (no integer step, so one kernel for every set).
//!
//! - AVX-512 (F, BW, VNNI): the K kernel in lane order: each super-block is unpacked once into
//!   four vectors whose 32-bit lane l holds only values of 16-value group l (a dword
//!   permutation of the packed bytes, so the activations are quantized in the same order), and
//!   a row meets it in four `vpdpbusd` into one vector of per-group integer sums, then three
//!   float operations (group scales, minimum / offset term, the row's scale): about half the
//!   instructions per row of the sub-block-pair form it replaced (5-row 1.5B forward 2.2× →
//!   1.65× a 1-row one). The legacy kernel two blocks per register: a pair is unpacked once (the
//!   fifth bits straight from a 64-bit mask), each row meets it in one `vpdpbusd` (signed types:
//!   x negated by mask where w < 0), about half the AVX2 instructions per row. Integer sums are
//!   AVX2's; the f32 steps run in another order (within the scalar tolerance).
//!
//! Kernels are instantiated per block type and per row count (1…16), and take rows in groups
//! (four legacy or six K rows on AVX2, eight of either on AVX-512's 32 registers) so that a
//! group's accumulators stay in registers; the row count changes which instantiation runs, never
//! the order of one row's operations. Weight bytes are prefetched ahead of use.

use std::arch::x86_64::*;

use crate::block::{WeightType, scales_mins_k4};
use crate::quantize::QActs;

/// Whether this CPU runs [`dot_rows`].
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// One legacy block type's layout (32 values a block), for the generic kernel.
trait Layout {
    /// Bytes per block.
    const BYTES: usize;
    /// Whether the unpacked weights are signed (sign trick) or unsigned with a minimum.
    const SIGNED: bool;
    /// Block `b` of the row at `row`: its weights as bytes, the scale of each i32 lane of
    /// `madd`, and its minimum (0 for signed types).
    ///
    /// # Safety
    /// `row` points at a row of at least b + 1 blocks, and the CPU has AVX2 and F16C.
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32);
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
struct Q51;

/// The 32 fifth bits at `p` (a little-endian u32; bit i for value i) as 32 bytes of 0x10 or 0.
///
/// # Safety
/// `p` points at 4 readable bytes, and the CPU has AVX2.
#[inline(always)]
unsafe fn fifth_bits(p: *const u8) -> __m256i {
    // SAFETY: 4 readable bytes at `p` (caller); read_unaligned has no alignment requirement;
    // AVX2 is guaranteed by the caller.
    unsafe {
        let qh = p.cast::<u32>().read_unaligned();
        // Byte i of `bits` is 0xFF where bit i of qh is set: each byte gets the qh byte holding
        // its bit, OR-ed with every bit but its own set, compared with all ones.
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
        _mm256_and_si256(bits, _mm256_set1_epi8(0x10))
    }
}

impl Layout for Q80 {
    const BYTES: usize = 34;
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
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: block b's 22 bytes are readable (caller): scale at 0..2, the 32 fifth bits at
        // 2..6, the nibbles at 6..22; read_unaligned has no alignment requirement; AVX2 and F16C
        // are guaranteed by the caller.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let q = _mm256_or_si256(nibbles(p.add(6)), fifth_bits(p.add(2)));
            (
                _mm256_sub_epi8(q, _mm256_set1_epi8(16)),
                _mm256_set1_ps(f16_at(p)),
                0.0,
            )
        }
    }
}

impl Layout for Q51 {
    const BYTES: usize = 24;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn load(row: *const u8, b: usize) -> (__m256i, __m256, f32) {
        // SAFETY: block b's 24 bytes are readable (caller): scale and minimum at 0..4, the 32
        // fifth bits at 4..8, the nibbles at 8..24; AVX2 and F16C are guaranteed by the caller.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let q = _mm256_or_si256(nibbles(p.add(8)), fifth_bits(p.add(4)));
            (q, _mm256_set1_ps(f16_at(p)), f16_at(p.add(2)))
        }
    }
}

/// A 16-bit float type, for the float kernel.
trait Half {
    /// The eight values at `p` as f32 (exact).
    ///
    /// # Safety
    /// `p` points at 16 readable bytes, and the CPU has AVX2 and F16C.
    unsafe fn load8(p: *const u8) -> __m256;
}

struct F16w;
struct Bf16w;

impl Half for F16w {
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: 16 readable bytes at `p` (caller; loadu has no alignment requirement); F16C is
        // guaranteed by the caller.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

impl Half for Bf16w {
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: 16 readable bytes at `p` (caller; loadu has no alignment requirement); AVX2 is
        // guaranteed by the caller. A bf16 is the high half of the f32 with the same bits.
        unsafe {
            let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        }
    }
}

/// Whether this CPU runs [`dot_rows_vnni`].
pub(crate) fn vnni_available() -> bool {
    available() && is_x86_feature_detected!("avxvnni")
}

/// `match rows { 1 => f::<L, 1>(…), …, 16 => … }`: one instantiation per row count.
macro_rules! by_rows {
    ($($kernel:ident)::+, $layout:ty, $w:expr, $x:expr, $out:expr) => {
        match $x.rows {
            1 => $($kernel)::+::<$layout, 1>($w, $x, $out),
            2 => $($kernel)::+::<$layout, 2>($w, $x, $out),
            3 => $($kernel)::+::<$layout, 3>($w, $x, $out),
            4 => $($kernel)::+::<$layout, 4>($w, $x, $out),
            5 => $($kernel)::+::<$layout, 5>($w, $x, $out),
            6 => $($kernel)::+::<$layout, 6>($w, $x, $out),
            7 => $($kernel)::+::<$layout, 7>($w, $x, $out),
            8 => $($kernel)::+::<$layout, 8>($w, $x, $out),
            9 => $($kernel)::+::<$layout, 9>($w, $x, $out),
            10 => $($kernel)::+::<$layout, 10>($w, $x, $out),
            11 => $($kernel)::+::<$layout, 11>($w, $x, $out),
            12 => $($kernel)::+::<$layout, 12>($w, $x, $out),
            13 => $($kernel)::+::<$layout, 13>($w, $x, $out),
            14 => $($kernel)::+::<$layout, 14>($w, $x, $out),
            15 => $($kernel)::+::<$layout, 15>($w, $x, $out),
            16 => $($kernel)::+::<$layout, 16>($w, $x, $out),
            _ => {}
        }
    };
}

/// As `scalar::dot_rows`. Calling it is unsafe unless the CPU has AVX2, FMA and F16C
/// ([`available`]).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn dot_rows(ty: WeightType, w: &[u8], x: &QActs, out: &mut [f32]) {
    match ty {
        WeightType::Q4K => by_rows!(k_avx2::k_rows, Q4K, w, x, out),
        WeightType::Q5K => by_rows!(k_avx2::k_rows, Q5K, w, x, out),
        WeightType::Q6K => by_rows!(k_avx2::k_rows, Q6K, w, x, out),
        WeightType::Q8_0 => by_rows!(k_avx2::legacy_rows, Q80, w, x, out),
        WeightType::Q4_0 => by_rows!(k_avx2::legacy_rows, Q40, w, x, out),
        WeightType::Q4_1 => by_rows!(k_avx2::legacy_rows, Q41, w, x, out),
        WeightType::Q5_0 => by_rows!(k_avx2::legacy_rows, Q50, w, x, out),
        WeightType::Q5_1 => by_rows!(k_avx2::legacy_rows, Q51, w, x, out),
        WeightType::F16 => by_rows!(k_avx2::float_rows, F16w, w, x, out),
        WeightType::BF16 => by_rows!(k_avx2::float_rows, Bf16w, w, x, out),
    }
}

/// As [`dot_rows`], with AVX-VNNI's fused multiply-add of i16 pairs in the K kernel (bit-identical
/// results: both are exact integer sums). Calling it is unsafe unless [`vnni_available`].
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) fn dot_rows_vnni(ty: WeightType, w: &[u8], x: &QActs, out: &mut [f32]) {
    match ty {
        WeightType::Q4K => by_rows!(k_vnni::k_rows, Q4K, w, x, out),
        WeightType::Q5K => by_rows!(k_vnni::k_rows, Q5K, w, x, out),
        WeightType::Q6K => by_rows!(k_vnni::k_rows, Q6K, w, x, out),
        WeightType::Q8_0 => by_rows!(k_vnni::legacy_rows, Q80, w, x, out),
        WeightType::Q4_0 => by_rows!(k_vnni::legacy_rows, Q40, w, x, out),
        WeightType::Q4_1 => by_rows!(k_vnni::legacy_rows, Q41, w, x, out),
        WeightType::Q5_0 => by_rows!(k_vnni::legacy_rows, Q50, w, x, out),
        // No integer step to fuse: the same code as AVX2.
        WeightType::Q5_1 => by_rows!(k_vnni::legacy_rows, Q51, w, x, out),
        WeightType::F16 => by_rows!(k_vnni::float_rows, F16w, w, x, out),
        WeightType::BF16 => by_rows!(k_vnni::float_rows, Bf16w, w, x, out),
    }
}

/// One K-quant type's layout, for the K kernel.
trait KLayout {
    /// The type.
    const TYPE: WeightType;
    /// Sub-block `j` (values 32·j..32·j + 32) of the super-block at `p` as unsigned bytes, as
    /// `block::k_quants` gives them.
    ///
    /// # Safety
    /// `p` points at the super-block's readable bytes, j < 8, and the CPU has AVX2.
    unsafe fn quants(p: *const u8, j: usize) -> __m256i;
}

struct Q4K;
struct Q5K;
struct Q6K;

impl KLayout for Q4K {
    const TYPE: WeightType = WeightType::Q4K;
    #[inline(always)]
    unsafe fn quants(p: *const u8, j: usize) -> __m256i {
        // SAFETY: the pair j / 2's 32 bytes of nibbles lie at 16 + 32·(j / 2) of the 144
        // (caller); loadu has no alignment requirement; AVX2 is guaranteed by the caller.
        unsafe {
            let qs = _mm256_loadu_si256(p.add(16 + 32 * (j / 2)).cast());
            let qs = if j % 2 == 1 {
                _mm256_srli_epi16(qs, 4)
            } else {
                qs
            };
            _mm256_and_si256(qs, _mm256_set1_epi8(0x0F))
        }
    }
}

impl KLayout for Q5K {
    const TYPE: WeightType = WeightType::Q5K;
    #[inline(always)]
    unsafe fn quants(p: *const u8, j: usize) -> __m256i {
        // SAFETY: the fifth bits lie at 16..48 and the pair j / 2's nibbles at 48 + 32·(j / 2)
        // of the 176 bytes (caller); loadu has no alignment requirement; AVX2 is guaranteed by
        // the caller.
        unsafe {
            let qh = _mm256_loadu_si256(p.add(16).cast());
            let qs = _mm256_loadu_si256(p.add(48 + 32 * (j / 2)).cast());
            let qs = if j % 2 == 1 {
                _mm256_srli_epi16(qs, 4)
            } else {
                qs
            };
            // Bit j of each byte, moved to bit 4: shifting the 16-bit lanes by 4 − j moves
            // every byte's bit j there; the mask drops what crossed from the neighbouring byte.
            let high = if j <= 4 {
                _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j as i32))
            } else {
                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32 - 4))
            };
            _mm256_or_si256(
                _mm256_and_si256(qs, _mm256_set1_epi8(0x0F)),
                _mm256_and_si256(high, _mm256_set1_epi8(0x10)),
            )
        }
    }
}

impl KLayout for Q6K {
    const TYPE: WeightType = WeightType::Q6K;
    #[inline(always)]
    unsafe fn quants(p: *const u8, j: usize) -> __m256i {
        let (half, quarter) = (j / 4, j % 4);
        // SAFETY: low nibbles at 0..128, high bits at 128..192 of the 210 bytes (caller); loadu
        // has no alignment requirement; AVX2 is guaranteed by the caller.
        unsafe {
            let ql = _mm256_loadu_si256(p.add(64 * half + 32 * (quarter % 2)).cast());
            let qh = _mm256_loadu_si256(p.add(128 + 32 * half).cast());
            let lo = _mm256_and_si256(
                _mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (quarter / 2) as i32)),
                _mm256_set1_epi8(0x0F),
            );
            // The quarter's 2 high bits (at 2·quarter) moved to bits 4–5.
            let hi = if quarter <= 2 {
                _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - 2 * quarter as i32))
            } else {
                _mm256_srli_epi16(qh, 2)
            };
            _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)))
        }
    }
}

/// Rows `0..m` as consecutive groups of at most `most`, sizes as even as possible (5 with at
/// most 4 = 3 + 2): `(first row, rows)` each.
fn row_groups(m: usize, most: usize) -> impl Iterator<Item = (usize, usize)> {
    let groups = m.div_ceil(most);
    (0..groups).scan(0, move |first, g| {
        let n = m / groups + usize::from(g < m % groups);
        let at = *first;
        *first += n;
        Some((at, n))
    })
}

/// Bytes ahead of the block in hand that the kernels ask the cache for: decode streams every
/// weight once, and the hardware prefetcher alone left it at ~9 GB/s here (1.5B decode 9.2
/// tok/s; 2 KiB ahead: 11–17 tok/s on this noisy machine, 512 B or 4 KiB less).
const PREFETCH: usize = 2048;

/// Rows `0..M` in groups of at most `$last` ([`row_groups`]), each group through the
/// instantiation of `$group` for its size: `in_groups!(k_group::<L>, M, (w, x, out), 1 | 2; 3)`.
macro_rules! in_groups {
    ($group:ident::<$layout:ty>, $m:expr, ($w:expr, $x:expr, $out:expr), $($n:literal)|+; $last:literal) => {
        for (first, n) in super::row_groups($m, $last) {
            let out = &mut $out[first..first + n];
            match n {
                $($n => $group::<$layout, $n>($w, $x, first, out),)+
                _ => $group::<$layout, $last>($w, $x, first, out),
            }
        }
    };
}

/// The K kernel, once per instruction set: `$acc(dot, pairs, sc)` adds `madd(pairs, sc)` to
/// `dot` (i16 pairs × i16 scales to i32 lanes), the one step AVX-VNNI fuses. Both forms are
/// exact integer arithmetic, so they give bit-identical results.
macro_rules! kernels {
    (
        $module:ident,
        $features:literal,
        |$dot:ident, $pairs:ident, $sc:ident| $acc:expr,
        |$w:ident, $x:ident| $dot4:expr
    ) => {
        mod $module {
            use std::arch::x86_64::*;

            use super::{Half, KLayout, Layout, PREFETCH};
            use crate::block::BLOCK;
            use crate::quantize::{K_GROUP, K_SUM, QActs};

            #[inline]
            #[target_feature(enable = $features)]
            fn add_scaled($dot: __m256i, $pairs: __m256i, $sc: __m256i) -> __m256i {
                $acc
            }

            /// u8 × i8 products summed four at a time into eight i32 lanes.
            #[inline]
            #[target_feature(enable = $features)]
            fn dot4($w: __m256i, $x: __m256i) -> __m256i {
                $dot4
            }

            /// One weight row of a legacy type against `M` activation rows, in groups of at
            /// most four ([`super::row_groups`]).
            #[target_feature(enable = $features)]
            pub(super) fn legacy_rows<L: Layout, const M: usize>(
                w_row: &[u8],
                x: &QActs,
                out: &mut [f32],
            ) {
                in_groups!(legacy_group::<L>, M, (w_row, x, out), 1 | 2 | 3; 4);
            }

            /// One legacy weight row against activation rows `first..first + G`: each 32-value
            /// block is unpacked once and meets the G rows in [`dot4`] (signed types through
            /// the sign trick, |w| × sign(x, w)); the eight i32 lanes are scaled by d_w·d_x and
            /// accumulated in f32, with a minimum term m·s for the unsigned types. A row's
            /// operations are the same whatever G and `first` are.
            #[target_feature(enable = $features)]
            fn legacy_group<L: Layout, const G: usize>(
                w_row: &[u8],
                x: &QActs,
                first: usize,
                out: &mut [f32],
            ) {
                let nb = x.cols / BLOCK;
                // Everything the pointer arithmetic below relies on, checked once per call.
                assert!(
                    w_row.len() == nb * L::BYTES
                        && first + G <= x.rows
                        && x.q.len() >= x.rows * x.cols
                        && x.d.len() >= x.rows * nb
                        && x.s.len() >= x.rows * nb
                        && out.len() == G
                );
                let mut acc = [_mm256_setzero_ps(); G];
                let mut mins = [0f32; G];
                let (w_ptr, q_ptr) = (w_row.as_ptr(), x.q.as_ptr());
                for b in 0..nb {
                    if b % 2 == 0 {
                        // A hint: never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(
                            w_ptr.wrapping_add(b * L::BYTES + PREFETCH).cast(),
                        );
                    }
                    // SAFETY: block b < nb lies inside the row's blocks (their length is
                    // asserted); this function's target features include the ones `load` needs.
                    let (w, scale, min) = unsafe { L::load(w_ptr, b) };
                    let abs_w = if L::SIGNED { _mm256_sign_epi8(w, w) } else { w };
                    for i in 0..G {
                        let at = (first + i) * nb + b;
                        // SAFETY: at < rows·nb, so at·32 + 32 ≤ rows·cols ≤ x.q.len()
                        // (asserted); loadu has no alignment requirement.
                        let xv = unsafe { _mm256_loadu_si256(q_ptr.add(at * BLOCK).cast()) };
                        let x_signed = if L::SIGNED {
                            _mm256_sign_epi8(xv, w)
                        } else {
                            xv
                        };
                        // |w| ≤ 128 and |x| ≤ 127: no i16 pair of maddubs saturates, so both
                        // forms of dot4 give the same exact sums.
                        let lanes = _mm256_cvtepi32_ps(dot4(abs_w, x_signed));
                        acc[i] = _mm256_fmadd_ps(
                            _mm256_mul_ps(scale, _mm256_set1_ps(x.d[at])),
                            lanes,
                            acc[i],
                        );
                        if !L::SIGNED {
                            mins[i] += min * x.s[at];
                        }
                    }
                }
                for i in 0..G {
                    out[i] = super::hsum(acc[i]) + mins[i];
                }
            }

            /// One 16-bit float weight row against `M` f32 activation rows, in groups of at most
            /// four.
            #[target_feature(enable = $features)]
            pub(super) fn float_rows<L: Half, const M: usize>(
                w_row: &[u8],
                x: &QActs,
                out: &mut [f32],
            ) {
                in_groups!(float_group::<L>, M, (w_row, x, out), 1 | 2 | 3; 4);
            }

            /// One 16-bit float weight row against activation rows `first..first + G`: eight
            /// weights at a time converted to f32 once and met by each row's eight activations
            /// in an FMA, alternating between two accumulators per row (one FMA chain alone
            /// would wait on its latency). A row's operations are the same whatever G is.
            #[target_feature(enable = $features)]
            fn float_group<L: Half, const G: usize>(
                w_row: &[u8],
                x: &QActs,
                first: usize,
                out: &mut [f32],
            ) {
                let cols = x.cols;
                // Everything the pointer arithmetic below relies on, checked once per call.
                assert!(
                    cols.is_multiple_of(BLOCK)
                        && w_row.len() == 2 * cols
                        && first + G <= x.rows
                        && x.x.len() >= x.rows * cols
                        && out.len() == G
                );
                let mut acc = [[_mm256_setzero_ps(); 2]; G];
                let (w_ptr, x_ptr) = (w_row.as_ptr(), x.x.as_ptr());
                for i in (0..cols).step_by(8) {
                    if i % 32 == 0 {
                        // A hint: never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(w_ptr.wrapping_add(2 * i + PREFETCH).cast());
                    }
                    // SAFETY: i + 8 ≤ cols, so bytes 2i..2i + 16 lie in the row (its length is
                    // asserted); this function's target features include what `load8` needs.
                    let w = unsafe { L::load8(w_ptr.add(2 * i)) };
                    for g in 0..G {
                        // SAFETY: (first + g)·cols + i + 8 ≤ rows·cols ≤ x.x.len() (asserted);
                        // loadu has no alignment requirement.
                        let xv = unsafe { _mm256_loadu_ps(x_ptr.add((first + g) * cols + i)) };
                        let a = &mut acc[g][(i / 8) % 2];
                        *a = _mm256_fmadd_ps(w, xv, *a);
                    }
                }
                for g in 0..G {
                    out[g] = super::hsum(_mm256_add_ps(acc[g][0], acc[g][1]));
                }
            }

            /// One K-quant weight row against `M` activation rows (the per-256 form), in groups of
            /// at most six ([`super::row_groups`]: a 5-row verification pass is one group), each
            /// group a [`k_group`] pass over the row's blocks (a row is a few KiB, so a second
            /// pass reads it from L1).
            #[target_feature(enable = $features)]
            pub(super) fn k_rows<L: KLayout, const M: usize>(
                w_row: &[u8],
                x: &QActs,
                out: &mut [f32],
            ) {
                in_groups!(k_group::<L>, M, (w_row, x, out), 1 | 2 | 3 | 4 | 5; 6);
            }

            /// One K-quant weight row against activation rows `first..first + G`: for each super-block,
            /// each sub-block is unpacked once and meets the G rows in `maddubs` (u8 × i8 pairs to i16) and
            /// `madd` with its integer scales (to i32); a row's eight i32 lanes per super-block turn to
            /// floats once, with the minimum / offset term from the activation sums. A row's operations
            /// are the same whatever G and `first` are, so its result does not depend on the rows beside it.
            #[target_feature(enable = $features)]
            fn k_group<L: KLayout, const G: usize>(
                w_row: &[u8],
                x: &QActs,
                first: usize,
                out: &mut [f32],
            ) {
                let bytes = L::TYPE.block_bytes();
                let nblk = x.cols / K_GROUP;
                let sums = K_GROUP / K_SUM;
                // Everything the pointer arithmetic below relies on, checked once per call.
                assert!(
                    x.forms.k
                        && w_row.len() == nblk * bytes
                        && first + G <= x.rows
                        && x.kq.len() >= x.rows * x.cols
                        && x.kd.len() >= x.rows * nblk
                        && x.ks.len() >= x.rows * nblk * sums
                        && out.len() == G
                );
                let mut acc = [_mm256_setzero_ps(); G];
                let (q_ptr, s_ptr) = (x.kq.as_ptr(), x.ks.as_ptr());
                for (blk, block) in w_row.chunks_exact(bytes).enumerate() {
                    // SAFETY: this function's target features include AVX2 and F16C.
                    let s = unsafe { super::k_scales_simd(L::TYPE, block) };
                    let p = block.as_ptr();
                    for line in 0..bytes.div_ceil(64) {
                        // A hint: never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH + 64 * line).cast());
                    }
                    let at: [usize; G] = std::array::from_fn(|i| (first + i) * nblk + blk);
                    let mut dots = [_mm256_setzero_si256(); G];
                    for j in 0..8 {
                        // SAFETY: `block` is one whole super-block; j < 8; AVX2 is enabled here.
                        let q = unsafe { L::quants(p, j) };
                        // SAFETY: AVX2 is enabled here; j < 8.
                        let sc = unsafe { s.sc(j) };
                        for i in 0..G {
                            // SAFETY: at[i] < rows·nblk, so at[i]·256 + 32·j + 32 ≤ rows·cols ≤ x.kq.len()
                            // (asserted); loadu has no alignment requirement.
                            let xv = unsafe {
                                _mm256_loadu_si256(q_ptr.add(at[i] * K_GROUP + BLOCK * j).cast())
                            };
                            // q ≤ 63 and |x| ≤ 127: a pair sums to at most 16,002, inside i16; times
                            // |sc| ≤ 128 per pair of pairs, eight sub-blocks: inside i32.
                            let pairs = _mm256_maddubs_epi16(q, xv);
                            dots[i] = add_scaled(dots[i], pairs, sc);
                        }
                    }
                    for i in 0..G {
                        // SAFETY: at[i] < rows·nblk, so (at[i] + 1)·16 ≤ x.ks.len() (asserted).
                        let bsums = unsafe { _mm256_loadu_si256(s_ptr.add(at[i] * sums).cast()) };
                        let offset = _mm256_madd_epi16(s.mn, bsums);
                        let xd = x.kd[at[i]];
                        acc[i] = _mm256_fmadd_ps(
                            _mm256_set1_ps(s.d * xd),
                            _mm256_cvtepi32_ps(dots[i]),
                            acc[i],
                        );
                        acc[i] = _mm256_fmadd_ps(
                            _mm256_set1_ps(-(s.dmin * xd)),
                            _mm256_cvtepi32_ps(offset),
                            acc[i],
                        );
                    }
                }
                for i in 0..G {
                    out[i] = super::hsum(acc[i]);
                }
            }
        }
    };
}

kernels!(
    k_avx2,
    "avx2,fma,f16c",
    |dot, pairs, sc| _mm256_add_epi32(dot, _mm256_madd_epi16(pairs, sc)),
    |w, x| _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
);
kernels!(
    k_vnni,
    "avx2,fma,f16c,avxvnni",
    |dot, pairs, sc| _mm256_dpwssd_avx_epi32(dot, pairs, sc),
    |w, x| _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, x)
);

/// A super-block's scales as the K kernel uses them: [`KSimd::sc`] gives sub-block j's 16 i16
/// `madd` multipliers (lanes 0–7 for its first 16 values, 8–15 for the rest) with one permute
/// from `src` (each i16 scale twice, so that a 32-bit lane holds one scale for both of its
/// halves); `mn` the 16 minimums / offsets by 16-value group; d and dmin (see
/// `block::KScales`). Building the eight multipliers up front held nine registers across the
/// row loop and spilled them.
struct KSimd {
    d: f32,
    dmin: f32,
    src: [__m256i; 2],
    mn: __m256i,
    /// Q6_K: two scales per sub-block; the others: one.
    per16: bool,
}

impl KSimd {
    /// Sub-block j's multipliers.
    ///
    /// # Safety
    /// The CPU has AVX2; j < 8.
    #[inline(always)]
    unsafe fn sc(&self, j: usize) -> __m256i {
        // SAFETY: AVX2 is guaranteed by the caller.
        unsafe {
            if self.per16 {
                // src[j / 4] holds scales 8·(j / 4)… twice each: 32-bit lane 2·(j % 4) is the
                // first 16 values' scale, the next lane the second's.
                let lane = 2 * (j % 4) as i32;
                let idx = _mm256_setr_epi32(
                    lane,
                    lane,
                    lane,
                    lane,
                    lane + 1,
                    lane + 1,
                    lane + 1,
                    lane + 1,
                );
                _mm256_permutevar8x32_epi32(self.src[j / 4], idx)
            } else {
                _mm256_permutevar8x32_epi32(self.src[0], _mm256_set1_epi32(j as i32))
            }
        }
    }
}

/// Inlined into each kernel (a call per super-block cost ~10 % of a multi-row pass), so no
/// target feature of its own.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[inline(always)]
unsafe fn k_scales_simd(ty: WeightType, block: &[u8]) -> KSimd {
    // Each of 8 bytes twice.
    const TWICE_LOW: [i8; 16] = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7];
    const TWICE_HIGH: [i8; 16] = [8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15];
    // SAFETY (for every intrinsic below): AVX2 and F16C are guaranteed by the caller; the loads
    // read 16 bytes inside `block` or `both` (loadu has no alignment requirement), and the f16s
    // at 208 (Q6_K) or 0 and 2 (Q4_K, Q5_K).
    unsafe {
        let twice_low = _mm_loadu_si128(TWICE_LOW.as_ptr().cast());
        let twice_high = _mm_loadu_si128(TWICE_HIGH.as_ptr().cast());
        match ty {
            WeightType::Q6K => {
                let scales = _mm_loadu_si128(block.as_ptr().add(192).cast());
                let d = f16_at(block.as_ptr().add(208));
                KSimd {
                    d,
                    dmin: 32.0 * d,
                    src: [
                        _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, twice_low)),
                        _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, twice_high)),
                    ],
                    mn: _mm256_cvtepi8_epi16(scales),
                    per16: true,
                }
            }
            _ => {
                let both = scales_mins_k4(&block[4..16]);
                let both = _mm_loadu_si128(both.as_ptr().cast());
                let sc = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(both, twice_low));
                KSimd {
                    d: f16_at(block.as_ptr()),
                    dmin: f16_at(block.as_ptr().add(2)),
                    src: [sc, sc],
                    // Each minimum twice: it covers two 16-value groups.
                    mn: _mm256_cvtepu8_epi16(_mm_shuffle_epi8(both, twice_high)),
                    per16: false,
                }
            }
        }
    }
}

/// The sum of the eight lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// Whether this CPU runs [`dot_rows_avx512`].
pub(crate) fn avx512_available() -> bool {
    available()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vnni")
}

/// As [`dot_rows`], on 512-bit vectors: the K kernel in lane order ([`k512`]), the legacy
/// kernel two blocks at a time (the same integer sums as AVX2, f32 lanes added in another
/// order). Calling it is unsafe unless [`avx512_available`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(crate) fn dot_rows_avx512(ty: WeightType, w: &[u8], x: &QActs, out: &mut [f32]) {
    match ty {
        WeightType::Q4K => by_rows!(k512::k_rows, Q4K, w, x, out),
        WeightType::Q5K => by_rows!(k512::k_rows, Q5K, w, x, out),
        WeightType::Q6K => by_rows!(k512::k_rows, Q6K, w, x, out),
        WeightType::Q8_0 => by_rows!(k512::legacy_rows, Q80, w, x, out),
        WeightType::Q4_0 => by_rows!(k512::legacy_rows, Q40, w, x, out),
        WeightType::Q4_1 => by_rows!(k512::legacy_rows, Q41, w, x, out),
        WeightType::Q5_0 => by_rows!(k512::legacy_rows, Q50, w, x, out),
        WeightType::Q5_1 => by_rows!(k512::legacy_rows, Q51, w, x, out),
        WeightType::F16 | WeightType::BF16 => dot_rows(ty, w, x, out),
    }
}

/// One tile of 16 tiled weight rows ([`crate::tiles`]) against every activation
/// row (`x.rows`), `out` `[rows, 16]`: rows in groups of at most eight. Calling it is unsafe
/// unless [`avx512_available`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_rows_avx512(ty: WeightType, tile: &[u8], x: &QActs, out: &mut [f32]) {
    use crate::tiles::TILE;
    macro_rules! groups {
        ($kernel:ident) => {
            for (first, n) in row_groups(x.rows, 8) {
                let out = &mut out[first * TILE..(first + n) * TILE];
                match n {
                    1 => k512::$kernel::<1>(tile, x, first, out),
                    2 => k512::$kernel::<2>(tile, x, first, out),
                    3 => k512::$kernel::<3>(tile, x, first, out),
                    4 => k512::$kernel::<4>(tile, x, first, out),
                    5 => k512::$kernel::<5>(tile, x, first, out),
                    6 => k512::$kernel::<6>(tile, x, first, out),
                    7 => k512::$kernel::<7>(tile, x, first, out),
                    _ => k512::$kernel::<8>(tile, x, first, out),
                }
            }
        };
    }
    match ty {
        WeightType::Q4K => groups!(tile_group),
        WeightType::Q6K => groups!(tile_group_q6k),
        WeightType::Q8_0 => groups!(legacy_tile_q80),
        WeightType::Q4_0 => groups!(legacy_tile_q40),
        WeightType::Q4_1 => groups!(legacy_tile_q41),
        WeightType::Q5_0 => groups!(legacy_tile_q50),
        WeightType::Q5_1 => groups!(legacy_tile_q51),
        // Never tiled (`tiles::tile_bytes`).
        WeightType::Q5K | WeightType::F16 | WeightType::BF16 => {}
    }
}

/// Two consecutive legacy blocks as the 512-bit kernel uses them.
trait Pair: Layout {
    /// Blocks `b` and `b + 1` of the row at `row`: their 64 weights as bytes (block b in the
    /// low half), each i32 lane's weight scale (lanes 0–7 d_b, 8–15 d_(b+1)), and the two
    /// minimums as [m_b, m_(b+1), m_b, m_(b+1)] (zero for signed types).
    ///
    /// # Safety
    /// `row` points at a row of at least b + 2 blocks, and the CPU has AVX2, F16C, AVX-512 F
    /// and BW.
    unsafe fn load2(row: *const u8, b: usize) -> (__m512i, __m512, __m128);
}

/// Block `b`'s and block `b + 1`'s f16 scales at byte `at` of each as [d_b × 8, d_(b+1) × 8],
/// and the f16s at `min_at` (if any) as [m_b, m_(b+1), m_b, m_(b+1)].
///
/// # Safety
/// `row` points at a row of at least b + 2 blocks of `bytes` bytes each, with 2 readable
/// bytes at `at` and `min_at`; the CPU has AVX2, F16C and AVX-512 F.
#[inline(always)]
unsafe fn pair_scales(
    row: *const u8,
    b: usize,
    bytes: usize,
    min_at: Option<usize>,
) -> (__m512, __m128) {
    // SAFETY: both blocks lie inside the row (caller); read_unaligned has no alignment
    // requirement; the instructions are guaranteed by the caller.
    unsafe {
        let p = row.add(b * bytes);
        let half = |q: *const u8| u32::from(q.cast::<u16>().read_unaligned());
        let ds = _mm_cvtph_ps(_mm_cvtsi32_si128(
            (half(p) | half(p.add(bytes)) << 16) as i32,
        ));
        let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        let d = _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(ds));
        let m = match min_at {
            Some(at) => {
                let both = half(p.add(at)) | half(p.add(bytes + at)) << 16;
                _mm_cvtph_ps(_mm_set1_epi32(both as i32))
            }
            None => _mm_setzero_ps(),
        };
        (d, m)
    }
}

/// The 16 nibble bytes at `p0` and at `p1` as 64 unsigned bytes: the values of the block at
/// `p0` (low nibbles, then high) and then those of the block at `p1`.
///
/// # Safety
/// 16 readable bytes at each of `p0` and `p1`; the CPU has AVX2, AVX-512 F and BW.
#[inline(always)]
unsafe fn nibbles2(p0: *const u8, p1: *const u8) -> __m512i {
    // SAFETY: the loads read 16 bytes at each pointer (caller; loadu has no alignment
    // requirement); the instructions are guaranteed by the caller.
    unsafe {
        let both = _mm256_loadu2_m128i(p1.cast(), p0.cast());
        // 128-bit lanes [p0, p0, p1, p1], then the second and fourth shifted to their high
        // nibbles.
        let wide = _mm512_castsi256_si512(both);
        let spread = _mm512_shuffle_i64x2::<0b01_01_00_00>(wide, wide);
        // The 16-bit lanes of the second and fourth 128-bit lanes.
        let high = _mm512_mask_srli_epi16::<4>(spread, 0xFF00_FF00, spread);
        _mm512_and_si512(high, _mm512_set1_epi8(0x0F))
    }
}

/// The fifth bits of two blocks (little-endian u32s at `p0` and `p1`) as 64 bytes of 0x10 or 0.
///
/// # Safety
/// 4 readable bytes at each of `p0` and `p1`; the CPU has AVX-512 F and BW.
#[inline(always)]
unsafe fn fifth_bits2(p0: *const u8, p1: *const u8) -> __m512i {
    // SAFETY: 4 readable bytes at each pointer (caller); read_unaligned has no alignment
    // requirement; AVX-512 BW is guaranteed by the caller.
    unsafe {
        let lo = u64::from(p0.cast::<u32>().read_unaligned());
        let hi = u64::from(p1.cast::<u32>().read_unaligned());
        _mm512_maskz_mov_epi8(lo | hi << 32, _mm512_set1_epi8(0x10))
    }
}

impl Pair for Q80 {
    #[inline(always)]
    unsafe fn load2(row: *const u8, b: usize) -> (__m512i, __m512, __m128) {
        // SAFETY: blocks b and b + 1 lie inside the row (caller): each has its scale at 0..2 and
        // its weights at 2..34.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let w = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(p.add(2).cast())),
                _mm256_loadu_si256(p.add(Self::BYTES + 2).cast()),
            );
            let (d, m) = pair_scales(row, b, Self::BYTES, None);
            (w, d, m)
        }
    }
}

impl Pair for Q40 {
    #[inline(always)]
    unsafe fn load2(row: *const u8, b: usize) -> (__m512i, __m512, __m128) {
        // SAFETY: blocks b and b + 1 lie inside the row (caller): scale at 0..2, nibbles at
        // 2..18 of each.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let w = nibbles2(p.add(2), p.add(Self::BYTES + 2));
            let (d, _) = pair_scales(row, b, Self::BYTES, None);
            // Values are q − 8: the minimum is −8·d.
            let ds = _mm512_castps512_ps128(_mm512_permutexvar_ps(
                _mm512_setr_epi32(0, 8, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                d,
            ));
            (w, d, _mm_mul_ps(ds, _mm_set1_ps(-8.0)))
        }
    }
}

impl Pair for Q41 {
    #[inline(always)]
    unsafe fn load2(row: *const u8, b: usize) -> (__m512i, __m512, __m128) {
        // SAFETY: blocks b and b + 1 lie inside the row (caller): scale, minimum, then the
        // nibbles at 4..20 of each.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let w = nibbles2(p.add(4), p.add(Self::BYTES + 4));
            let (d, m) = pair_scales(row, b, Self::BYTES, Some(2));
            (w, d, m)
        }
    }
}

impl Pair for Q50 {
    #[inline(always)]
    unsafe fn load2(row: *const u8, b: usize) -> (__m512i, __m512, __m128) {
        // SAFETY: blocks b and b + 1 lie inside the row (caller): scale at 0..2, fifth bits at
        // 2..6, nibbles at 6..22 of each.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let q = _mm512_or_si512(
                nibbles2(p.add(6), p.add(Self::BYTES + 6)),
                fifth_bits2(p.add(2), p.add(Self::BYTES + 2)),
            );
            let (d, m) = pair_scales(row, b, Self::BYTES, None);
            (_mm512_sub_epi8(q, _mm512_set1_epi8(16)), d, m)
        }
    }
}

impl Pair for Q51 {
    #[inline(always)]
    unsafe fn load2(row: *const u8, b: usize) -> (__m512i, __m512, __m128) {
        // SAFETY: blocks b and b + 1 lie inside the row (caller): scale and minimum at 0..4,
        // fifth bits at 4..8, nibbles at 8..24 of each.
        unsafe {
            let p = row.add(b * Self::BYTES);
            let q = _mm512_or_si512(
                nibbles2(p.add(8), p.add(Self::BYTES + 8)),
                fifth_bits2(p.add(4), p.add(Self::BYTES + 4)),
            );
            let (d, m) = pair_scales(row, b, Self::BYTES, Some(2));
            (q, d, m)
        }
    }
}

/// The 512-bit kernels: the legacy types two blocks per register; the K-quants in lane order
/// (each 32-bit lane one 16-value group for a whole super-block, the activations stored to
/// match), so a row's super-block is four `vpdpbusd` and three float operations. The K sums
/// are the same integers as AVX2's, grouped and scaled in another order (within the scalar
/// tolerance, not bit-identical).
mod k512 {
    use std::arch::x86_64::*;

    use super::{PREFETCH, Pair, Q4K, Q5K, Q6K, Q40, Q41, Q50, Q51, Q80};
    use crate::block::{BLOCK, WeightType, scales_mins_k4};
    use crate::quantize::{K_GROUP, K_SUM, QActs};

    /// One weight row of a legacy type against `M` activation rows, in groups of at most
    /// eight ([`super::row_groups`]: 32 vector registers hold eight rows' accumulators, so a
    /// 5-row verification pass is one pass over the weights).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) fn legacy_rows<L: Pair, const M: usize>(w_row: &[u8], x: &QActs, out: &mut [f32]) {
        in_groups!(legacy_group::<L>, M, (w_row, x, out), 1 | 2 | 3 | 4 | 5 | 6 | 7; 8);
    }

    /// One legacy weight row against activation rows `first..first + G`, two blocks (64
    /// values) at a time: the pair is unpacked once, and for each row its 64 activation bytes
    /// meet the weights in one `vpdpbusd` (signed types: |w| against x negated where w < 0, by
    /// mask), the 16 i32 lanes turn to floats and are scaled by d_w·d_x per block into 16 f32
    /// lanes; minimums m·s go to a separate 4-lane sum. An odd last block runs the same steps
    /// with its upper half zero. A row's operations are the same whatever G and `first` are.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    fn legacy_group<L: Pair, const G: usize>(
        w_row: &[u8],
        x: &QActs,
        first: usize,
        out: &mut [f32],
    ) {
        let nb = x.cols / BLOCK;
        // Everything the pointer arithmetic below relies on, checked once per call.
        assert!(
            w_row.len() == nb * L::BYTES
                && first + G <= x.rows
                && x.q.len() >= x.rows * x.cols
                && x.d.len() >= x.rows * nb
                && x.s.len() >= x.rows * nb
                && out.len() == G
        );
        let mut acc = [_mm512_setzero_ps(); G];
        let mut mins = [_mm_setzero_ps(); G];
        let (w_ptr, q_ptr) = (w_row.as_ptr(), x.q.as_ptr());
        let (d_ptr, s_ptr) = (x.d.as_ptr(), x.s.as_ptr());
        // Lanes 0–7 take block b's activation scale, 8–15 block b + 1's.
        let idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        let mut b = 0;
        while b < nb {
            // A hint: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T0>(w_ptr.wrapping_add(b * L::BYTES + PREFETCH).cast());
            let two = b + 1 < nb;
            // SAFETY: blocks b and b + 1 (when `two`), or block b alone, lie inside the row
            // (its length is asserted); this function's target features include what `load2`
            // and `load` need.
            let (w, dw, mw) = unsafe {
                if two {
                    L::load2(w_ptr, b)
                } else {
                    let (w, d, m) = L::load(w_ptr, b);
                    (
                        _mm512_zextsi256_si512(w),
                        _mm512_zextps256_ps512(d),
                        _mm_setr_ps(m, 0.0, 0.0, 0.0),
                    )
                }
            };
            // Bytes of the pair (all 64) or of the single block (the low 32).
            let lanes: u64 = if two { !0 } else { 0xFFFF_FFFF };
            let (abs_w, negative) = if L::SIGNED {
                (_mm512_abs_epi8(w), _mm512_movepi8_mask(w))
            } else {
                (w, 0)
            };
            for i in 0..G {
                let at = (first + i) * nb + b;
                // SAFETY: at < rows·nb and (when `two`) at + 1 < rows·nb, so the masked load
                // reads inside x.q (at·32 + 32 or + 64 ≤ rows·cols, asserted) and the 8-byte
                // loads inside x.d and x.s; a masked-off byte is never read.
                let (xv, dx, sx) = unsafe {
                    let xv = _mm512_maskz_loadu_epi8(lanes, q_ptr.add(at * BLOCK).cast());
                    let (dx, sx) = if two {
                        (
                            _mm_loadl_epi64(d_ptr.add(at).cast()),
                            _mm_castsi128_ps(_mm_loadl_epi64(s_ptr.add(at).cast())),
                        )
                    } else {
                        (
                            _mm_castps_si128(_mm_load_ss(d_ptr.add(at))),
                            _mm_load_ss(s_ptr.add(at)),
                        )
                    };
                    (xv, _mm_castsi128_ps(dx), sx)
                };
                // |w| ≤ 128 and |x| ≤ 127: four products sum inside i32, exactly.
                let x_signed = if L::SIGNED {
                    _mm512_mask_sub_epi8(xv, negative, _mm512_setzero_si512(), xv)
                } else {
                    xv
                };
                let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), abs_w, x_signed);
                let scale =
                    _mm512_mul_ps(dw, _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(dx)));
                acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[i]);
                if !L::SIGNED {
                    mins[i] = _mm_fmadd_ps(mw, sx, mins[i]);
                }
            }
            b += 2;
        }
        for i in 0..G {
            let m = mins[i];
            out[i] = _mm512_reduce_add_ps(acc[i])
                + (_mm_cvtss_f32(m) + _mm_cvtss_f32(_mm_movehdup_ps(m)));
        }
    }

    /// A K-quant row against `M` activation rows in lane order ([`QActs`]'s `kl`), in groups of
    /// at most eight (16 rows of prefill: two passes).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) fn k_rows<L: Lanes, const M: usize>(w_row: &[u8], x: &QActs, out: &mut [f32]) {
        in_groups!(k_group::<L>, M, (w_row, x, out), 1 | 2 | 3 | 4 | 5 | 6 | 7; 8);
    }

    /// One K-quant weight row against activation rows `first..first + G`. Each super-block is
    /// unpacked once into four vectors whose 32-bit lane l holds only values of 16-value group
    /// l ([`Lanes::unpack`], the activations stored to match), so a row's whole super-block is
    /// four `vpdpbusd` into one i32 vector of per-group sums, and meets floats once: the group
    /// scales, the minimum / offset term from the activations' group sums and the row's scale,
    /// in three float operations. About half the instructions per row of the sub-block-pair
    /// form this replaces (which needed a `maddubs` and a scaled `madd` per 64 values). A row's
    /// operations are the same whatever G and `first` are.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    fn k_group<L: Lanes, const G: usize>(w_row: &[u8], x: &QActs, first: usize, out: &mut [f32]) {
        let bytes = L::TYPE.block_bytes();
        let nblk = x.cols / K_GROUP;
        let sums = K_GROUP / K_SUM;
        // Everything the pointer arithmetic below relies on, checked once per call.
        assert!(
            x.forms.lanes
                && w_row.len() == nblk * bytes
                && first + G <= x.rows
                && x.kl.len() >= x.rows * x.cols
                && x.kld.len() >= x.rows * nblk
                && x.klf.len() >= x.rows * nblk * sums
                && out.len() == G
        );
        let mut acc = [_mm512_setzero_ps(); G];
        let (q_ptr, s_ptr, d_ptr) = (x.kl.as_ptr(), x.klf.as_ptr(), x.kld.as_ptr());
        for (blk, block) in w_row.chunks_exact(bytes).enumerate() {
            let p = block.as_ptr();
            for line in 0..bytes.div_ceil(64) {
                // A hint: never faults, whatever the address.
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH + 64 * line).cast());
            }
            // SAFETY: `block` is one whole super-block; this function's target features
            // include what `unpack` needs.
            let (q, scale, factor) = unsafe { L::unpack(p) };
            // The activations are group-major: this block's group of row `first`, then the
            // next rows' at fixed distances.
            let at = blk * x.rows + first;
            for (i, acc) in acc.iter_mut().enumerate() {
                // SAFETY: at + i < nblk·rows (first + G ≤ rows, blk < nblk), so
                // (at + i)·256 + 256 ≤ rows·cols ≤ x.kl.len(), (at + i)·16 + 16 ≤ x.klf.len()
                // and at + i < x.kld.len() (asserted); loadu has no alignment requirement.
                let (xv, group_sums, xd) = unsafe {
                    let base = q_ptr.add((at + i) * K_GROUP);
                    (
                        [
                            _mm512_loadu_si512(base.cast()),
                            _mm512_loadu_si512(base.add(64).cast()),
                            _mm512_loadu_si512(base.add(128).cast()),
                            _mm512_loadu_si512(base.add(192).cast()),
                        ],
                        _mm512_loadu_ps(s_ptr.add((at + i) * sums)),
                        *d_ptr.add(at + i),
                    )
                };
                // q ≤ 63 and |x| ≤ 127: a lane sums 16 products, |Σ| ≤ 128,016: exact in i32
                // and in f32.
                // Two chains of two, so that a row waits on two `vpdpbusd` latencies, not four.
                let zero = _mm512_setzero_si512();
                let low = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, q[0], xv[0]), q[1], xv[1]);
                let high = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, q[2], xv[2]), q[3], xv[3]);
                let dot = _mm512_add_epi32(low, high);
                // The minimum / offset term does not wait on the products.
                let v = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(dot),
                    scale,
                    _mm512_mul_ps(group_sums, factor),
                );
                *acc = _mm512_fmadd_ps(v, _mm512_set1_ps(xd), *acc);
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = _mm512_reduce_add_ps(acc);
        }
    }

    /// A sub-block's integer sums `dot` of one row into its super-block sum: `sum` +
    /// cvt(dot)·`scale` − `min`·`row_sum` (the 16 outputs' scale and minimum or offset term,
    /// the row's activation sum over the sub-block).
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[inline(always)]
    unsafe fn add_sub_block(
        sum: __m512,
        dot: __m512i,
        (scale, min): (__m512, __m512),
        row_sum: f32,
    ) -> __m512 {
        // SAFETY: AVX-512 F is guaranteed by the caller.
        unsafe {
            let sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, sum);
            _mm512_fnmadd_ps(min, _mm512_set1_ps(row_sum), sum)
        }
    }

    /// Each row's super-block sum times the row's activation scale, into its accumulator:
    /// `xd(i)` is row `first + i`'s scale for this super-block.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[inline(always)]
    unsafe fn add_scaled_rows<const G: usize>(
        acc: &mut [__m512; G],
        sums: [__m512; G],
        xd: impl Fn(usize) -> f32,
    ) {
        for (i, (acc, sum)) in acc.iter_mut().zip(sums).enumerate() {
            // SAFETY: AVX-512 F is guaranteed by the caller.
            *acc = unsafe { _mm512_fmadd_ps(sum, _mm512_set1_ps(xd(i)), *acc) };
        }
    }

    /// The rows' accumulators into `out` (`[G, 16]`).
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[inline(always)]
    unsafe fn store_rows<const G: usize>(out: &mut [f32], acc: [__m512; G]) {
        for (o, acc) in out.chunks_exact_mut(crate::tiles::TILE).zip(acc) {
            // SAFETY: `o` is 16 writable f32s; storeu has no alignment requirement; AVX-512 F
            // is guaranteed by the caller.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), acc) };
        }
    }

    /// One tile of 16 Q4_K weight rows against activation rows `first..first + G`, `out`
    /// `[G, 16]`. Lane o of every vector is output o: per sub-block (32 values) and chunk j,
    /// one 64-byte load holds 16 outputs × 8 nibbles, split into two vectors of 4 values per
    /// lane; each row's 4 + 4 activation bytes are broadcast and meet them in two `vpdpbusd`
    /// into the row's i32 sums for the sub-block; then one conversion and two FMAs per row
    /// (the 16 outputs' d·sc, and dmin·mn against the row's 32-value sum), and once per
    /// super-block the row's scale. A row's operations are the same whatever G and `first`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) fn tile_group<const G: usize>(
        tile: &[u8],
        x: &QActs,
        first: usize,
        out: &mut [f32],
    ) {
        use crate::tiles::{MINS_AT, NIBBLES_AT, SCALES_AT, TILE, TILE_BYTES};
        let nblk = x.cols / K_GROUP;
        let per = K_GROUP / BLOCK;
        // Everything the pointer arithmetic below relies on, checked once per call.
        assert!(
            x.forms.tiles
                && tile.len() == nblk * TILE_BYTES
                && first + G <= x.rows
                && x.kq.len() >= x.rows * x.cols
                && x.kd.len() >= x.rows * nblk
                && x.k32.len() >= x.rows * nblk * per
                && out.len() == G * TILE
        );
        let mut acc = [_mm512_setzero_ps(); G];
        let (q_ptr, d_ptr, s_ptr) = (x.kq.as_ptr(), x.kd.as_ptr(), x.k32.as_ptr());
        let low_nibbles = _mm512_set1_epi8(0x0F);
        for blk in 0..nblk {
            let p = tile.as_ptr().wrapping_add(blk * TILE_BYTES);
            // SAFETY: p..p + TILE_BYTES is super-block blk of the tile (its length is
            // asserted); the features are this function's.
            let (d, dmin) = unsafe {
                (
                    _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
                    _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32).cast())),
                )
            };
            let mut sums = [_mm512_setzero_ps(); G];
            for s in 0..per {
                // SAFETY: the 16 scale and 16 minimum bytes of sub-block s lie inside the
                // super-block (SCALES_AT + 16s + 16 ≤ MINS_AT, MINS_AT + 16s + 16 ≤
                // NIBBLES_AT).
                let (scale, min) = unsafe {
                    (
                        _mm512_mul_ps(
                            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                p.add(SCALES_AT + 16 * s).cast(),
                            ))),
                            d,
                        ),
                        _mm512_mul_ps(
                            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                p.add(MINS_AT + 16 * s).cast(),
                            ))),
                            dmin,
                        ),
                    )
                };
                let mut dots = [_mm512_setzero_si512(); G];
                for j in 0..4 {
                    let at = NIBBLES_AT + 64 * (4 * s + j);
                    // A hint: never faults, whatever the address.
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at + PREFETCH).cast());
                    // SAFETY: at + 64 ≤ TILE_BYTES (s < 8, j < 4).
                    let w = unsafe { _mm512_loadu_si512(p.add(at).cast()) };
                    let low = _mm512_and_si512(w, low_nibbles);
                    let high = _mm512_and_si512(_mm512_srli_epi16(w, 4), low_nibbles);
                    for (i, dot) in dots.iter_mut().enumerate() {
                        let v = (first + i) * x.cols + blk * K_GROUP + BLOCK * s + 4 * j;
                        // SAFETY: v + 16 + 4 ≤ (first + i + 1)·cols ≤ rows·cols ≤ kq.len()
                        // (asserted); read_unaligned has no alignment requirement.
                        let (a, b) = unsafe {
                            (
                                q_ptr.add(v).cast::<i32>().read_unaligned(),
                                q_ptr.add(v + 16).cast::<i32>().read_unaligned(),
                            )
                        };
                        // q ≤ 15 and |x| ≤ 127: a lane sums 32 products, |Σ| ≤ 60,960.
                        *dot = _mm512_dpbusd_epi32(*dot, low, _mm512_set1_epi32(a));
                        *dot = _mm512_dpbusd_epi32(*dot, high, _mm512_set1_epi32(b));
                    }
                }
                for (i, (sum, dot)) in sums.iter_mut().zip(dots).enumerate() {
                    // SAFETY: (first + i)·nblk·per + blk·per + s < rows·nblk·per ≤ k32.len()
                    // (asserted); the features are this function's.
                    *sum = unsafe {
                        let row_sum = *s_ptr.add(((first + i) * nblk + blk) * per + s);
                        add_sub_block(*sum, dot, (scale, min), row_sum)
                    };
                }
            }
            // SAFETY: (first + i)·nblk + blk < rows·nblk ≤ kd.len() (asserted); the features
            // are this function's.
            unsafe { add_scaled_rows(&mut acc, sums, |i| *d_ptr.add((first + i) * nblk + blk)) };
        }
        // SAFETY: out is [G, 16] (asserted); the features are this function's.
        unsafe { store_rows(out, acc) };
    }

    /// One tile of 16 Q6_K weight rows against activation rows `first..first + G`, `out`
    /// `[G, 16]`, as [`tile_group`] for Q4_K: per 16-value sub-block, three 64-byte loads give
    /// four vectors of 4 unsigned 6-bit values per lane (the offset of 32 left out), each
    /// row's four broadcast activation words meet them in four `vpdpbusd`, then one conversion
    /// and two FMAs per row: the 16 outputs' d·sc, and −32·d·sc against the row's 16-value sum.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    pub(super) fn tile_group_q6k<const G: usize>(
        tile: &[u8],
        x: &QActs,
        first: usize,
        out: &mut [f32],
    ) {
        use crate::tiles::{Q6K_QUANTS_AT, Q6K_SCALES_AT, Q6K_TILE_BYTES, TILE};
        let nblk = x.cols / K_GROUP;
        let per = K_GROUP / K_SUM;
        // Everything the pointer arithmetic below relies on, checked once per call.
        assert!(
            x.forms.tiles
                && tile.len() == nblk * Q6K_TILE_BYTES
                && first + G <= x.rows
                && x.kq.len() >= x.rows * x.cols
                && x.kd.len() >= x.rows * nblk
                && x.k16.len() >= x.rows * nblk * per
                && out.len() == G * TILE
        );
        let mut acc = [_mm512_setzero_ps(); G];
        let (q_ptr, d_ptr, s_ptr) = (x.kq.as_ptr(), x.kd.as_ptr(), x.k16.as_ptr());
        let (low4, top2) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        for blk in 0..nblk {
            let p = tile.as_ptr().wrapping_add(blk * Q6K_TILE_BYTES);
            // SAFETY: p..p + Q6K_TILE_BYTES is super-block blk of the tile (its length is
            // asserted); the features are this function's.
            let d = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) };
            let mut sums = [_mm512_setzero_ps(); G];
            for s in 0..per {
                let at = Q6K_QUANTS_AT + 192 * s;
                for line in 0..3 {
                    // A hint: never faults, whatever the address.
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at + 64 * line + PREFETCH).cast());
                }
                // SAFETY: the 16 scale bytes of sub-block s lie at Q6K_SCALES_AT + 16s <
                // Q6K_QUANTS_AT, its 192 quant bytes at at..at + 192 ≤ Q6K_TILE_BYTES.
                let (scale, l0, l1, h) = unsafe {
                    (
                        _mm512_mul_ps(
                            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                p.add(Q6K_SCALES_AT + 16 * s).cast(),
                            ))),
                            d,
                        ),
                        _mm512_loadu_si512(p.add(at).cast()),
                        _mm512_loadu_si512(p.add(at + 64).cast()),
                        _mm512_loadu_si512(p.add(at + 128).cast()),
                    )
                };
                let offset = _mm512_mul_ps(scale, _mm512_set1_ps(32.0));
                // Chunk j: its low four bits from l0 / l1 (nibble j / 2), its top two from bits
                // 2j, 2j + 1 of h, moved to bits 4–5 (16-bit shifts: what crosses into the
                // neighbouring byte is masked off).
                let q = [
                    _mm512_or_si512(
                        _mm512_and_si512(l0, low4),
                        _mm512_and_si512(_mm512_slli_epi16(h, 4), top2),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(l1, low4),
                        _mm512_and_si512(_mm512_slli_epi16(h, 2), top2),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(l0, 4), low4),
                        _mm512_and_si512(h, top2),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(l1, 4), low4),
                        _mm512_and_si512(_mm512_srli_epi16(h, 2), top2),
                    ),
                ];
                for (i, sum) in sums.iter_mut().enumerate() {
                    let v = (first + i) * x.cols + blk * K_GROUP + K_SUM * s;
                    let mut dot = _mm512_setzero_si512();
                    for (j, q) in q.iter().enumerate() {
                        // SAFETY: v + 4j + 4 ≤ v + 16 ≤ (first + i + 1)·cols ≤ kq.len()
                        // (asserted); read_unaligned has no alignment requirement.
                        let a = unsafe { q_ptr.add(v + 4 * j).cast::<i32>().read_unaligned() };
                        // q ≤ 63 and |x| ≤ 127: a lane sums 16 products, |Σ| ≤ 128,016.
                        dot = _mm512_dpbusd_epi32(dot, *q, _mm512_set1_epi32(a));
                    }
                    // SAFETY: ((first + i)·nblk + blk)·per + s < rows·nblk·per ≤ k16.len()
                    // (asserted); the features are this function's.
                    *sum = unsafe {
                        let row_sum = *s_ptr.add(((first + i) * nblk + blk) * per + s);
                        add_sub_block(*sum, dot, (scale, offset), row_sum)
                    };
                }
            }
            // SAFETY: (first + i)·nblk + blk < rows·nblk ≤ kd.len() (asserted); the features
            // are this function's.
            unsafe { add_scaled_rows(&mut acc, sums, |i| *d_ptr.add((first + i) * nblk + blk)) };
        }
        // SAFETY: out is [G, 16] (asserted); the features are this function's.
        unsafe { store_rows(out, acc) };
    }

    /// One tile of 16 weight rows of a legacy type against activation rows `first..first +
    /// G`, `out` `[G, 16]`. Per 32-value block the tile's quants unpack to eight vectors of 4
    /// unsigned values per lane (lane o: output o), each row's eight broadcast activation words
    /// meet them in eight `vpdpbusd`, then one conversion and three float operations per row:
    /// d_w·d_x, and the minimum (Q4_1 / Q5_1's m, or −8·d, −16·d, −128·d for the offsets of
    /// Q4_0, Q5_0 and Q8_0 stored unsigned) against the row's d_x·Σq.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    fn legacy_tile_group<L: LegacyTile, const G: usize>(
        tile: &[u8],
        x: &QActs,
        first: usize,
        out: &mut [f32],
    ) {
        use crate::tiles::{TILE, legacy_tile_bytes};
        let tb = legacy_tile_bytes(L::TYPE);
        let nb = x.cols / BLOCK;
        // Everything the pointer arithmetic below relies on, checked once per call.
        assert!(
            x.forms.blocks
                && tile.len() == nb * tb
                && first + G <= x.rows
                && x.q.len() >= x.rows * x.cols
                && x.d.len() >= x.rows * nb
                && x.s.len() >= x.rows * nb
                && out.len() == G * TILE
        );
        let mut acc = [_mm512_setzero_ps(); G];
        let (q_ptr, d_ptr, s_ptr) = (x.q.as_ptr(), x.d.as_ptr(), x.s.as_ptr());
        for blk in 0..nb {
            let p = tile.as_ptr().wrapping_add(blk * tb);
            for line in 0..tb.div_ceil(64) {
                // A hint: never faults, whatever the address.
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH + 64 * line).cast());
            }
            // SAFETY: p..p + tb is block blk of the tile (its length is asserted); the
            // features are this function's.
            let ((dw, min), q) = unsafe { (L::scales(p), L::unpack(p)) };
            for (i, acc) in acc.iter_mut().enumerate() {
                let at = (first + i) * nb + blk;
                let mut dot = _mm512_setzero_si512();
                for (c, q) in q.iter().enumerate() {
                    // SAFETY: at·32 + 4c + 4 ≤ (at + 1)·32 ≤ rows·cols ≤ q.len() (asserted);
                    // read_unaligned has no alignment requirement.
                    let a = unsafe { q_ptr.add(at * BLOCK + 4 * c).cast::<i32>().read_unaligned() };
                    // q ≤ 255 and |x| ≤ 127: a lane sums 32 products, |Σ| ≤ 1,036,320.
                    dot = _mm512_dpbusd_epi32(dot, *q, _mm512_set1_epi32(a));
                }
                // SAFETY: at < rows·nb ≤ d.len(), s.len() (asserted).
                let (xd, xs) = unsafe { (*d_ptr.add(at), *s_ptr.add(at)) };
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *acc);
                *acc = _mm512_fmadd_ps(min, _mm512_set1_ps(xs), *acc);
            }
        }
        // SAFETY: out is [G, 16] (asserted); the features are this function's.
        unsafe { store_rows(out, acc) };
    }

    /// [`legacy_tile_group`] per type, as the tile dispatch names them.
    macro_rules! legacy_tiles {
        ($($name:ident: $ty:ty),+) => {
            $(
                #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
                pub(super) fn $name<const G: usize>(
                    tile: &[u8],
                    x: &QActs,
                    first: usize,
                    out: &mut [f32],
                ) {
                    legacy_tile_group::<$ty, G>(tile, x, first, out)
                }
            )+
        };
    }
    legacy_tiles!(legacy_tile_q80: Q80, legacy_tile_q40: Q40, legacy_tile_q41: Q41,
        legacy_tile_q50: Q50, legacy_tile_q51: Q51);

    /// A legacy type as its tile kernel reads it ([`crate::tiles`]).
    pub(super) trait LegacyTile {
        /// The type.
        const TYPE: WeightType;
        /// The 16 outputs' d and minimum (m, or −offset·d).
        ///
        /// # Safety
        /// `p` points at one whole tile block, and the CPU has F16C and AVX-512 F.
        unsafe fn scales(p: *const u8) -> (__m512, __m512);
        /// The block's 32 values of 16 outputs as eight vectors: vector c's lane o holds
        /// values 4c … 4c + 3 of output o, unsigned.
        ///
        /// # Safety
        /// As [`LegacyTile::scales`], and the CPU has AVX-512 BW.
        unsafe fn unpack(p: *const u8) -> [__m512i; 8];
    }

    /// d of the 16 outputs, and `offset`·d or the f16 minimums at 32.
    ///
    /// # Safety
    /// `p` points at 64 readable bytes (32 without `stored_min`), the CPU has F16C and AVX-512 F.
    #[inline(always)]
    unsafe fn legacy_scales(p: *const u8, offset: f32, stored_min: bool) -> (__m512, __m512) {
        // SAFETY: the caller guarantees the bytes and the features.
        unsafe {
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()));
            let min = if stored_min {
                _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32).cast()))
            } else {
                _mm512_mul_ps(d, _mm512_set1_ps(-offset))
            };
            (d, min)
        }
    }

    /// Four 64-byte vectors of nibbles at `p` as eight chunks (low nibbles the first four).
    ///
    /// # Safety
    /// `p` points at 256 readable bytes, and the CPU has AVX-512 F and BW.
    #[inline(always)]
    unsafe fn legacy_nibbles(p: *const u8) -> [__m512i; 8] {
        // SAFETY: the loads read p..p + 256 (caller); AVX-512 F and BW are guaranteed by the
        // caller.
        unsafe {
            let low4 = _mm512_set1_epi8(0x0F);
            let mut q = [_mm512_setzero_si512(); 8];
            for j in 0..4 {
                let v = _mm512_loadu_si512(p.add(64 * j).cast());
                q[j] = _mm512_and_si512(v, low4);
                q[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            }
            q
        }
    }

    /// The fifth bits at `p` (bit c of byte 4o + i: value 4c + i of output o) moved to bit 4
    /// of each chunk's bytes (16-bit shifts: what crosses into the neighbouring byte is masked
    /// off).
    ///
    /// # Safety
    /// `p` points at 64 readable bytes, and the CPU has AVX-512 F and BW.
    #[inline(always)]
    unsafe fn legacy_fifth(p: *const u8, q: &mut [__m512i; 8]) {
        // SAFETY: the load reads p..p + 64 (caller); AVX-512 F and BW are guaranteed by the
        // caller.
        unsafe {
            let bit4 = _mm512_set1_epi8(0x10);
            let h = _mm512_loadu_si512(p.cast());
            let moved = [
                _mm512_slli_epi16(h, 4),
                _mm512_slli_epi16(h, 3),
                _mm512_slli_epi16(h, 2),
                _mm512_slli_epi16(h, 1),
                h,
                _mm512_srli_epi16(h, 1),
                _mm512_srli_epi16(h, 2),
                _mm512_srli_epi16(h, 3),
            ];
            for (q, m) in q.iter_mut().zip(moved) {
                *q = _mm512_or_si512(*q, _mm512_and_si512(m, bit4));
            }
        }
    }

    impl LegacyTile for Q80 {
        const TYPE: WeightType = WeightType::Q8_0;
        #[inline(always)]
        unsafe fn scales(p: *const u8) -> (__m512, __m512) {
            // SAFETY: as the trait's contract.
            unsafe { legacy_scales(p, 128.0, false) }
        }
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> [__m512i; 8] {
            // SAFETY: the quants lie at 32..544 of the 544-byte block (caller); AVX-512 F is
            // guaranteed by the caller.
            unsafe {
                let mut q = [_mm512_setzero_si512(); 8];
                for (c, q) in q.iter_mut().enumerate() {
                    *q = _mm512_loadu_si512(p.add(32 + 64 * c).cast());
                }
                q
            }
        }
    }

    impl LegacyTile for Q40 {
        const TYPE: WeightType = WeightType::Q4_0;
        #[inline(always)]
        unsafe fn scales(p: *const u8) -> (__m512, __m512) {
            // SAFETY: as the trait's contract.
            unsafe { legacy_scales(p, 8.0, false) }
        }
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> [__m512i; 8] {
            // SAFETY: the nibbles lie at 32..288 of the 288-byte block (caller).
            unsafe { legacy_nibbles(p.add(32)) }
        }
    }

    impl LegacyTile for Q41 {
        const TYPE: WeightType = WeightType::Q4_1;
        #[inline(always)]
        unsafe fn scales(p: *const u8) -> (__m512, __m512) {
            // SAFETY: as the trait's contract.
            unsafe { legacy_scales(p, 0.0, true) }
        }
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> [__m512i; 8] {
            // SAFETY: the nibbles lie at 64..320 of the 320-byte block (caller).
            unsafe { legacy_nibbles(p.add(64)) }
        }
    }

    impl LegacyTile for Q50 {
        const TYPE: WeightType = WeightType::Q5_0;
        #[inline(always)]
        unsafe fn scales(p: *const u8) -> (__m512, __m512) {
            // SAFETY: as the trait's contract.
            unsafe { legacy_scales(p, 16.0, false) }
        }
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> [__m512i; 8] {
            // SAFETY: the nibbles lie at 32..288, the fifth bits at 288..352 of the 352-byte
            // block (caller).
            unsafe {
                let mut q = legacy_nibbles(p.add(32));
                legacy_fifth(p.add(288), &mut q);
                q
            }
        }
    }

    impl LegacyTile for Q51 {
        const TYPE: WeightType = WeightType::Q5_1;
        #[inline(always)]
        unsafe fn scales(p: *const u8) -> (__m512, __m512) {
            // SAFETY: as the trait's contract.
            unsafe { legacy_scales(p, 0.0, true) }
        }
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> [__m512i; 8] {
            // SAFETY: the nibbles lie at 64..320, the fifth bits at 320..384 of the 384-byte
            // block (caller).
            unsafe {
                let mut q = legacy_nibbles(p.add(64));
                legacy_fifth(p.add(320), &mut q);
                q
            }
        }
    }

    /// A K-quant type as the lane-order kernel reads it.
    pub(super) trait Lanes {
        /// The type.
        const TYPE: WeightType;
        /// The super-block at `p`: its 256 unsigned values as four vectors, vector r's 32-bit
        /// lane l holding values 16·l + 4·r … + 3 (the order of `QActs::kl`); each lane's
        /// scale (d·sc of its 16-value group) and the factor its activation sum meets (−dmin·mn
        /// for Q4_K / Q5_K's minimum, −32·d·sc for Q6_K's offset of 32).
        ///
        /// # Safety
        /// `p` points at one whole readable super-block, and the CPU has AVX2, F16C, AVX-512 F
        /// and BW.
        unsafe fn unpack(p: *const u8) -> ([__m512i; 4], __m512, __m512);
    }

    /// Where lane l of vector r finds its bytes, as 32-bit word indices into the packed data.
    #[derive(Clone, Copy)]
    enum Source {
        /// Q4_K / Q5_K nibbles (128 bytes): value v of sub-block s = 2c + h is nibble h of
        /// byte 32·c + v; lane l is sub-block l / 2, its values 16·(l % 2) + 4·r ….
        Nibbles,
        /// Q5_K fifth bits (32 bytes): value v of any sub-block at byte v.
        FifthBits,
        /// Q6_K low nibbles (128 bytes): value 32·qr + i of half n at byte 64·n + 32·(qr % 2)
        /// + i, lane l being half l / 8, quarter qr = (l % 8) / 2, i = 16·(l % 2) + 4·r ….
        Low6,
        /// Q6_K high bit pairs (64 bytes): value 32·qr + i of half n at byte 32·n + i.
        High6,
    }

    /// The `vpermd` indices of each vector r for `source`.
    const fn word_index(source: Source) -> [[i32; 16]; 4] {
        let mut t = [[0; 16]; 4];
        let mut r = 0;
        while r < 4 {
            let mut l = 0;
            while l < 16 {
                let (odd, quarter) = (l % 2, (l % 8) / 2);
                t[r][l] = (match source {
                    Source::Nibbles => 8 * (l / 4) + 4 * odd + r,
                    Source::FifthBits => 4 * odd + r,
                    Source::Low6 => 16 * (l / 8) + 8 * (quarter % 2) + 4 * odd + r,
                    Source::High6 => 8 * (l / 8) + 4 * odd + r,
                }) as i32;
                l += 1;
            }
            r += 1;
        }
        t
    }

    const NIBBLES: [[i32; 16]; 4] = word_index(Source::Nibbles);
    const FIFTH_BITS: [[i32; 16]; 4] = word_index(Source::FifthBits);
    const LOW6: [[i32; 16]; 4] = word_index(Source::Low6);
    const HIGH6: [[i32; 16]; 4] = word_index(Source::High6);
    /// Per lane, the left rotation that brings Q5_K's fifth bit (bit l / 2 of each byte) to
    /// bit 4: 4 − l / 2, mod 32.
    const FIFTH_ROTATE: [u32; 16] = [4, 4, 3, 3, 2, 2, 1, 1, 0, 0, 31, 31, 30, 30, 29, 29];
    /// Per lane, the left rotation that brings Q6_K's bit pair 2·qr of each byte to bits 4–5.
    const HIGH6_ROTATE: [u32; 16] = [4, 4, 2, 2, 0, 0, 30, 30, 4, 4, 2, 2, 0, 0, 30, 30];

    /// Loads one of the index tables above.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[inline(always)]
    unsafe fn table<T>(t: &[T; 16]) -> __m512i {
        const { assert!(size_of::<T>() == 4) };
        // SAFETY: 16 four-byte values are 64 readable bytes; loadu has no alignment
        // requirement; AVX-512 F is guaranteed by the caller.
        unsafe { _mm512_loadu_si512(t.as_ptr().cast()) }
    }

    /// The 128 bytes of nibbles at `p` (Q4_K, Q5_K), in lane order, high nibbles where lane l
    /// holds an odd sub-block ((l / 2) % 2 = 1: 16-bit words 4–7 of each 16).
    ///
    /// # Safety
    /// `p` points at 128 readable bytes, and the CPU has AVX-512 F and BW.
    #[inline(always)]
    unsafe fn nibble_lanes(p: *const u8) -> [__m512i; 4] {
        // SAFETY: the loads read p..p + 128 (caller); AVX-512 F and BW are guaranteed by the
        // caller.
        unsafe {
            let (q0, q1) = (
                _mm512_loadu_si512(p.cast()),
                _mm512_loadu_si512(p.add(64).cast()),
            );
            // Loops, not closures: a closure would not inherit the caller's target features.
            let mut q = [_mm512_setzero_si512(); 4];
            for (r, q) in q.iter_mut().enumerate() {
                let t = _mm512_permutex2var_epi32(q0, table(&NIBBLES[r]), q1);
                let t = _mm512_mask_srli_epi16(t, 0xF0F0_F0F0, t, 4);
                *q = _mm512_and_si512(t, _mm512_set1_epi8(0x0F));
            }
            q
        }
    }

    /// Q4_K / Q5_K lane scales: d·sc and −dmin·mn of each lane's sub-block (l / 2).
    ///
    /// # Safety
    /// `p` points at a whole Q4_K or Q5_K super-block, and the CPU has AVX2, F16C and
    /// AVX-512 F.
    #[inline(always)]
    unsafe fn k4_scales(p: *const u8) -> (__m512, __m512) {
        // Each of 8 bytes twice.
        const TWICE_LOW: [i8; 16] = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7];
        const TWICE_HIGH: [i8; 16] = [8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15];
        // SAFETY: the 12 scale bytes lie at 4..16 of the block (caller); read_unaligned has no
        // alignment requirement.
        let packed: [u8; 12] = unsafe { p.add(4).cast::<[u8; 12]>().read_unaligned() };
        let both = scales_mins_k4(&packed);
        // SAFETY: the f16s lie at 0 and 2 of the block (caller); the loads read 16 bytes of
        // `both` and of the tables; the features are guaranteed by the caller.
        unsafe {
            let both = _mm_loadu_si128(both.as_ptr().cast());
            let (low, high) = (
                _mm_loadu_si128(TWICE_LOW.as_ptr().cast()),
                _mm_loadu_si128(TWICE_HIGH.as_ptr().cast()),
            );
            let sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(both, low)));
            let mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(both, high)));
            (
                _mm512_mul_ps(sc, _mm512_set1_ps(super::f16_at(p))),
                _mm512_mul_ps(mn, _mm512_set1_ps(-super::f16_at(p.add(2)))),
            )
        }
    }

    impl Lanes for Q4K {
        const TYPE: WeightType = WeightType::Q4K;
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> ([__m512i; 4], __m512, __m512) {
            // SAFETY: a Q4_K super-block is 144 bytes: d, dmin, 12 bytes of scales, then the
            // nibbles at 16..144 (caller); the features are guaranteed by the caller.
            unsafe {
                let (scale, factor) = k4_scales(p);
                (nibble_lanes(p.add(16)), scale, factor)
            }
        }
    }

    impl Lanes for Q5K {
        const TYPE: WeightType = WeightType::Q5K;
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> ([__m512i; 4], __m512, __m512) {
            // SAFETY: a Q5_K super-block is 176 bytes: d, dmin, 12 bytes of scales, the fifth
            // bits at 16..48 and the nibbles at 48..176 (caller); the features are guaranteed
            // by the caller.
            unsafe {
                let (scale, factor) = k4_scales(p);
                let qh = _mm512_castsi256_si512(_mm256_loadu_si256(p.add(16).cast()));
                let rotate = table(&FIFTH_ROTATE);
                let mut q = nibble_lanes(p.add(48));
                for (r, q) in q.iter_mut().enumerate() {
                    let h = _mm512_permutexvar_epi32(table(&FIFTH_BITS[r]), qh);
                    // Bit l / 2 of each byte to bit 4 (a rotation within the 32-bit lane:
                    // bits that cross into a neighbouring byte land outside bit 4).
                    let h = _mm512_and_si512(_mm512_rolv_epi32(h, rotate), _mm512_set1_epi8(0x10));
                    *q = _mm512_or_si512(*q, h);
                }
                (q, scale, factor)
            }
        }
    }

    impl Lanes for Q6K {
        const TYPE: WeightType = WeightType::Q6K;
        #[inline(always)]
        unsafe fn unpack(p: *const u8) -> ([__m512i; 4], __m512, __m512) {
            // SAFETY: a Q6_K super-block is 210 bytes: low nibbles at 0..128, high bit pairs
            // at 128..192, 16 i8 scales at 192..208, d at 208 (caller); the features are
            // guaranteed by the caller.
            unsafe {
                let (l0, l1) = (
                    _mm512_loadu_si512(p.cast()),
                    _mm512_loadu_si512(p.add(64).cast()),
                );
                let qh = _mm512_loadu_si512(p.add(128).cast());
                let rotate = table(&HIGH6_ROTATE);
                let mut q = [_mm512_setzero_si512(); 4];
                for (r, q) in q.iter_mut().enumerate() {
                    let low = _mm512_permutex2var_epi32(l0, table(&LOW6[r]), l1);
                    // Quarters 2 and 3 (lanes 4–7 of each 8: 16-bit words 8–15 of each 16)
                    // take the high nibbles.
                    let low = _mm512_mask_srli_epi16(low, 0xFF00_FF00, low, 4);
                    let high = _mm512_permutexvar_epi32(table(&HIGH6[r]), qh);
                    let high = _mm512_rolv_epi32(high, rotate);
                    *q = _mm512_or_si512(
                        _mm512_and_si512(low, _mm512_set1_epi8(0x0F)),
                        _mm512_and_si512(high, _mm512_set1_epi8(0x30)),
                    );
                }
                let scale = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(192).cast()))),
                    _mm512_set1_ps(super::f16_at(p.add(208))),
                );
                (q, scale, _mm512_mul_ps(scale, _mm512_set1_ps(-32.0)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::row_groups;

    #[test]
    fn row_groups_cover_every_row_once_in_even_groups() {
        assert_eq!(row_groups(5, 4).collect::<Vec<_>>(), [(0, 3), (3, 2)]);
        assert_eq!(
            row_groups(16, 6).collect::<Vec<_>>(),
            [(0, 6), (6, 5), (11, 5)]
        );
        for most in [4, 6] {
            for m in 1..=16 {
                let groups: Vec<_> = row_groups(m, most).collect();
                let mut next = 0;
                for &(first, n) in &groups {
                    assert!(first == next && (1..=most).contains(&n), "m={m} {groups:?}");
                    next += n;
                }
                assert_eq!(next, m);
                let sizes = groups.iter().map(|g| g.1);
                assert!(sizes.clone().max().unwrap_or(0) - sizes.min().unwrap_or(0) <= 1);
            }
        }
    }
}
