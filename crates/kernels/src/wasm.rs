//! The WebAssembly micro-kernel's instructions (128-bit SIMD, `simd128`): what the page runs
//! where it has no hardware GPU. The kernel itself is `v128.rs`, shared with aarch64's NEON;
//! here are simd128's instructions for its operations ([`Lanes`]): i8 × i8 → i16 products
//! (`i16x8_extmul_*`) summed pairwise into i32 lanes, K-quant scales through `i32x4.dot_i16x8_s`,
//! Q5 high bits spread from their word with a swizzle and a bit mask. Same results as the scalar
//! kernel bit for bit.
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

use crate::v128::Lanes;

/// simd128's instructions for the 128-bit kernel (`v128.rs`).
pub(crate) struct Simd128;

impl Lanes for Simd128 {
    type Bytes = v128;
    type Acts = v128;
    type Halves = v128;
    type Words = v128;

    #[inline(always)]
    fn load(b: &[u8], at: usize) -> v128 {
        let s = &b[at..at + 16];
        // SAFETY: `s` is 16 readable bytes (the slice above is bounds-checked); `v128_load`
        // reads exactly 16 bytes and needs no alignment.
        unsafe { v128_load(s.as_ptr().cast()) }
    }

    #[inline(always)]
    fn load_acts(q: &[i8], at: usize) -> v128 {
        let s = &q[at..at + 16];
        // SAFETY: as in `load`: 16 readable bytes, unaligned reads allowed.
        unsafe { v128_load(s.as_ptr().cast()) }
    }

    #[inline(always)]
    fn load_halves(v: &[i16], at: usize) -> v128 {
        let s = &v[at..at + 8];
        // SAFETY: as in `load`: 16 readable bytes, unaligned reads allowed.
        unsafe { v128_load(s.as_ptr().cast()) }
    }

    #[inline(always)]
    fn splat(v: u8) -> v128 {
        u8x16_splat(v)
    }

    #[inline(always)]
    fn splat_halves(v: i16) -> v128 {
        i16x8_splat(v)
    }

    #[inline(always)]
    fn zero() -> v128 {
        i32x4_splat(0)
    }

    #[inline(always)]
    fn and(a: v128, b: v128) -> v128 {
        v128_and(a, b)
    }

    #[inline(always)]
    fn or(a: v128, b: v128) -> v128 {
        v128_or(a, b)
    }

    #[inline(always)]
    fn sub(a: v128, b: v128) -> v128 {
        i8x16_sub(a, b)
    }

    #[inline(always)]
    fn shr(a: v128, n: u32) -> v128 {
        u8x16_shr(a, n)
    }

    #[inline(always)]
    fn shl4(a: v128) -> v128 {
        i8x16_shl(a, 4)
    }

    #[inline(always)]
    fn high_bits(qh: v128, from: u8) -> v128 {
        let (a, b) = (from, from + 1);
        let bytes = i8x16_swizzle(qh, u8x16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b));
        let bit = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
        let set = i8x16_ne(v128_and(bytes, bit), u8x16_splat(0));
        v128_and(set, u8x16_splat(0x10))
    }

    #[inline(always)]
    fn products(w: v128, x: v128) -> v128 {
        i16x8_add(i16x8_extmul_low_i8x16(w, x), i16x8_extmul_high_i8x16(w, x))
    }

    #[inline(always)]
    fn add_halves(a: v128, b: v128) -> v128 {
        i16x8_add(a, b)
    }

    #[inline(always)]
    fn dot16(w: v128, x: v128) -> v128 {
        i32x4_extadd_pairwise_i16x8(Self::products(w, x))
    }

    #[inline(always)]
    fn add(a: v128, b: v128) -> v128 {
        i32x4_add(a, b)
    }

    #[inline(always)]
    fn dot_halves(acc: v128, a: v128, b: v128) -> v128 {
        i32x4_add(acc, i32x4_dot_i16x8(a, b))
    }

    #[inline(always)]
    fn hsum(v: v128) -> i32 {
        i32x4_extract_lane::<0>(v)
            + i32x4_extract_lane::<1>(v)
            + i32x4_extract_lane::<2>(v)
            + i32x4_extract_lane::<3>(v)
    }
}
