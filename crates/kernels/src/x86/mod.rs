//! The x86-64 micro-kernels, chosen at run time (over 800 lines: the AVX2 and AVX-VNNI kernels
//! are one macro instantiated per instruction set, kept beside the layouts and helpers that it
//! and the AVX-512 module, `k512.rs`, share; macros reach only modules declared after them): AVX2 (with FMA and F16C), and the same with
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
mod k512;

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
