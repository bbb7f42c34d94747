//! The AVX-512 (F, BW, VNNI) kernels: the K kernel in lane order and the legacy kernel two
//! blocks per register (see the parent module's documentation for the method). A module of
//! `x86` so that the shared layouts, helpers and macros (`by_rows!`, `in_groups!`) reach it.
//! Over 800 lines as one family: the legacy and K kernels, row and tile forms, for 1–8 rows.

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
fn legacy_group<L: Pair, const G: usize>(w_row: &[u8], x: &QActs, first: usize, out: &mut [f32]) {
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
            let scale = _mm512_mul_ps(dw, _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(dx)));
            acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[i]);
            if !L::SIGNED {
                mins[i] = _mm_fmadd_ps(mw, sx, mins[i]);
            }
        }
        b += 2;
    }
    for i in 0..G {
        let m = mins[i];
        out[i] =
            _mm512_reduce_add_ps(acc[i]) + (_mm_cvtss_f32(m) + _mm_cvtss_f32(_mm_movehdup_ps(m)));
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
pub(super) fn tile_group<const G: usize>(tile: &[u8], x: &QActs, first: usize, out: &mut [f32]) {
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
