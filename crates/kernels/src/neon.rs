//! The aarch64 micro-kernel's instructions (NEON, 128-bit Advanced SIMD, in every aarch64 CPU):
//! what `--device cpu` runs on Apple silicon, Graviton, Ampere and the other ARM machines. The
//! kernel itself is `v128.rs`, shared with the page's simd128; here are NEON's instructions for
//! its operations ([`Lanes`]): i8 × i8 → i16 products (`vmull_s8`, `vmull_high_s8`) summed
//! pairwise into i32 lanes (`vpaddlq_s16`), K-quant scales in i16 × i16 → i32 multiply-adds
//! (`vmlal_s16`), Q5 high bits spread from their word with a table lookup and a bit test. Same
//! results as the scalar kernel bit for bit.
//!
//! `Neon<true>` (`Isa::NeonDot`, where the CPU has ARMv8.2's dot-product extension: Apple's
//! M-series, Graviton 2 on, Ampere Altra, Cortex-A76 on) takes 16 products into four i32 lanes
//! in one `sdot`, where `Neon<false>` needs four instructions (two widening multiplies, an add,
//! a pairwise widening add), and a K-quant group's scale in one `mla` by a scalar: the same
//! integer sums, so the same bits. `sdot`'s intrinsic (`vdotq_s32`) is unstable in Rust 1.95
//! (rust-lang/rust#117224), so it is one instruction of inline assembly, taken only where std's
//! run-time detection reports the extension.
//!
//! Why: the scalar kernel compiles to scalar code here (5 of ~2,500 instructions of
//! `scalar::dot_rows` are vector ones in the aarch64 build), and on x86 the scalar kernel takes 7×
//! the AVX2 kernel's time for a row of a 1.5B FFN. Speed not measured: no ARM machine is at
//! hand; correctness is tested under qemu, with the extension and without (`tests/run.sh`).
//!
//! Every NEON intrinsic is `unsafe` to call outside a function marked with the feature, and a
//! trait's safe method cannot be marked; NEON is in the baseline of every aarch64 target this
//! module is built for (`target_feature = "neon"` in its `cfg`), which is what each call's
//! `SAFETY` rests on.

use core::arch::aarch64::{
    int8x16_t, int16x8_t, int32x4_t, uint8x16_t, vaddq_s16, vaddq_s32, vaddvq_s32, vandq_u8,
    vdupq_n_s8, vdupq_n_s16, vdupq_n_s32, vdupq_n_u8, vget_low_s8, vget_low_s16, vld1q_s8,
    vld1q_s16, vld1q_u8, vmlal_high_s16, vmlal_s16, vmlaq_n_s32, vmull_high_s8, vmull_s8, vorrq_u8,
    vpaddlq_s16, vqtbl1q_u8, vreinterpretq_s8_u8, vshlq_n_u8, vshlq_u8, vsubq_u8, vtstq_u8,
};
use core::arch::asm;

use crate::v128::{Lanes, halves_dot16, halves_dot32};

/// NEON's instructions for the 128-bit kernel (`v128.rs`); with `DOT`, the dot-product
/// extension's too.
pub(crate) struct Neon<const DOT: bool>;

/// `acc` plus, in each i32 lane, the four products of its bytes of `w` and `x` (both read as
/// i8): ARMv8.2's `sdot`.
#[inline(always)]
fn sdot(mut acc: int32x4_t, w: uint8x16_t, x: int8x16_t) -> int32x4_t {
    // SAFETY: `sdot` reads two registers and updates a third, touching no memory, stack or
    // flags. It is reached only from `Neon<true>`, which the dispatch (`kernels.rs`) runs only
    // for `Isa::NeonDot`, which `Isa::available` lists only where std's run-time detection
    // reports the dot-product extension (the directive lets the assembler take the instruction
    // in a build whose baseline lacks it).
    unsafe {
        asm!(
            ".arch_extension dotprod",
            "sdot {acc:v}.4s, {w:v}.16b, {x:v}.16b",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            x = in(vreg) x,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

impl<const DOT: bool> Lanes for Neon<DOT> {
    type Bytes = uint8x16_t;
    type Acts = int8x16_t;
    type Halves = int16x8_t;
    type Words = int32x4_t;

    #[inline(always)]
    fn load(b: &[u8], at: usize) -> uint8x16_t {
        let s = &b[at..at + 16];
        // SAFETY: `s` is 16 readable bytes (the slice above is bounds-checked); `vld1q_u8`
        // reads exactly 16 bytes and needs a byte's alignment; NEON is in the target's baseline.
        unsafe { vld1q_u8(s.as_ptr()) }
    }

    #[inline(always)]
    fn load_acts(q: &[i8], at: usize) -> int8x16_t {
        let s = &q[at..at + 16];
        // SAFETY: as in `load`: 16 readable bytes, a byte's alignment.
        unsafe { vld1q_s8(s.as_ptr()) }
    }

    #[inline(always)]
    fn load_halves(v: &[i16], at: usize) -> int16x8_t {
        let s = &v[at..at + 8];
        // SAFETY: 8 readable i16 values (bounds-checked above), the pointer aligned for i16;
        // NEON is in the target's baseline.
        unsafe { vld1q_s16(s.as_ptr()) }
    }

    #[inline(always)]
    fn splat(v: u8) -> uint8x16_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vdupq_n_u8(v) }
    }

    #[inline(always)]
    fn splat_halves(v: i16) -> int16x8_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vdupq_n_s16(v) }
    }

    #[inline(always)]
    fn zero() -> int32x4_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vdupq_n_s32(0) }
    }

    #[inline(always)]
    fn and(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vandq_u8(a, b) }
    }

    #[inline(always)]
    fn or(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vorrq_u8(a, b) }
    }

    #[inline(always)]
    fn sub(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vsubq_u8(a, b) }
    }

    #[inline(always)]
    fn shr(a: uint8x16_t, n: u32) -> uint8x16_t {
        // A right shift is `vshlq_u8` by a negative count (n < 8, so the cast is exact).
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vshlq_u8(a, vdupq_n_s8(-(n as i8))) }
    }

    #[inline(always)]
    fn shl4(a: uint8x16_t) -> uint8x16_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vshlq_n_u8::<4>(a) }
    }

    #[inline(always)]
    fn high_bits(qh: uint8x16_t, from: u8) -> uint8x16_t {
        let (a, b) = (from, from + 1);
        let index = Self::load(&[a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b], 0);
        let bit = Self::load(
            &[1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128],
            0,
        );
        // SAFETY: register-only; NEON is in the target's baseline. `vtstq_u8` sets a byte's
        // bits where the byte and the mask share one.
        unsafe { vandq_u8(vtstq_u8(vqtbl1q_u8(qh, index), bit), vdupq_n_u8(0x10)) }
    }

    #[inline(always)]
    fn products(w: uint8x16_t, x: int8x16_t) -> int16x8_t {
        // Lane i: values i and i + 8.
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe {
            let w = vreinterpretq_s8_u8(w);
            vaddq_s16(
                vmull_s8(vget_low_s8(w), vget_low_s8(x)),
                vmull_high_s8(w, x),
            )
        }
    }

    #[inline(always)]
    fn add_halves(a: int16x8_t, b: int16x8_t) -> int16x8_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vaddq_s16(a, b) }
    }

    #[inline(always)]
    fn dot16(w: uint8x16_t, x: int8x16_t) -> int32x4_t {
        if DOT {
            return sdot(Self::zero(), w, x);
        }
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vpaddlq_s16(Self::products(w, x)) }
    }

    #[inline(always)]
    fn dot16_acc(acc: int32x4_t, w: uint8x16_t, x: int8x16_t) -> int32x4_t {
        if DOT {
            sdot(acc, w, x)
        } else {
            Self::add(acc, Self::dot16(w, x))
        }
    }

    #[inline(always)]
    fn scaled_dot32(
        acc: int32x4_t,
        (w0, x0): (uint8x16_t, int8x16_t),
        (w1, x1): (uint8x16_t, int8x16_t),
        (sc, scale): (int16x8_t, i16),
    ) -> int32x4_t {
        if !DOT {
            return halves_dot32::<Self>(acc, (w0, x0), (w1, x1), sc);
        }
        let group = sdot(sdot(Self::zero(), w0, x0), w1, x1);
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vmlaq_n_s32(acc, group, i32::from(scale)) }
    }

    #[inline(always)]
    fn scaled_dot16(
        acc: int32x4_t,
        (w, x): (uint8x16_t, int8x16_t),
        (sc, scale): (int16x8_t, i16),
    ) -> int32x4_t {
        if !DOT {
            return halves_dot16::<Self>(acc, (w, x), sc);
        }
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vmlaq_n_s32(acc, sdot(Self::zero(), w, x), i32::from(scale)) }
    }

    #[inline(always)]
    fn add(a: int32x4_t, b: int32x4_t) -> int32x4_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vaddq_s32(a, b) }
    }

    #[inline(always)]
    fn dot_halves(acc: int32x4_t, a: int16x8_t, b: int16x8_t) -> int32x4_t {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vmlal_high_s16(vmlal_s16(acc, vget_low_s16(a), vget_low_s16(b)), a, b) }
    }

    #[inline(always)]
    fn hsum(v: int32x4_t) -> i32 {
        // SAFETY: register-only; NEON is in the target's baseline.
        unsafe { vaddvq_s32(v) }
    }
}
