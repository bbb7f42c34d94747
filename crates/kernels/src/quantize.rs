//! Activations quantized once per call to 8 bits (as llama.cpp and candle do), so that every
//! weight block meets them in an integer dot product. Two forms, each made from the same f32
//! values:
//! - per 32 values (Q8_0 / Q8_1 style), for the legacy types, whose weight scales change every
//!   32 values anyway: d = max|x| / 127, q = round(x / d) ∈ [−127, 127], s = d·Σq (the sum a
//!   Q4_1 block's minimum multiplies);
//! - per 256 values (Q8_K style), for the K-quants, when a row is a whole number of 256-value
//!   groups: one scale per group, so a whole super-block's dot product stays in integers and
//!   meets a float once; with the sums of each 16 values (what a K-quant's minimums and Q6_K's
//!   offset multiply).
//!
//! The f32 values are kept too, for 16-bit float weights (which meet them unrounded).
//!
//! Scales stay f32 (llama.cpp rounds Q8_0/Q8_1 scales to f16), which removes one rounding from
//! the error bound and costs nothing here. A row's quantization never depends on other rows.

use crate::block::BLOCK;
use crate::error::{KernelError, Result};

/// Most activation rows one call takes (k + 1 for k ≤ 15): what a set of quantized
/// activations holds and every micro-kernel's row loop is sized by.
pub const MAX_ROWS: usize = 16;

/// Values per K-quant activation group (one Q8_K block).
pub(crate) const K_GROUP: usize = 256;
/// Values per partial sum in the K form.
pub(crate) const K_SUM: usize = 16;

/// Which forms of the activations [`QActs::quantize_for`] fills: each kernel needs one
/// ([`crate::Kernels::forms`]), and a call that feeds matrices of one type need not build the
/// others. [`QActs::quantize`] fills them all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forms {
    /// Per 32 values (`q`, `d`, `s`): the legacy types.
    pub(crate) blocks: bool,
    /// Per 256 values in natural order (`kq`, `kd`, `ks`): the K-quants on the scalar and
    /// AVX2 kernels.
    pub(crate) k: bool,
    /// Per 256 values in lane order, group-major (`kl`, `kld`, `klf`): the K-quants on AVX-512.
    pub(crate) lanes: bool,
    /// Per 256 values in natural order with the sums of each 32 and each 16 as f32 (`kq`,
    /// `kd`, `k32`, `k16`): tiled Q4_K and Q6_K on AVX-512.
    pub(crate) tiles: bool,
    /// The f32 values (`x`): 16-bit float weights.
    pub(crate) float: bool,
}

impl Forms {
    /// Every form.
    pub const ALL: Self = Self {
        blocks: true,
        k: true,
        lanes: true,
        tiles: true,
        float: true,
    };

    /// Whether every form in `need` is in `self`.
    pub fn covers(self, need: Self) -> bool {
        (self.blocks || !need.blocks)
            && (self.k || !need.k)
            && (self.lanes || !need.lanes)
            && (self.tiles || !need.tiles)
            && (self.float || !need.float)
    }
}

impl std::ops::BitOr for Forms {
    type Output = Self;
    fn bitor(self, o: Self) -> Self {
        Self {
            blocks: self.blocks || o.blocks,
            k: self.k || o.k,
            lanes: self.lanes || o.lanes,
            tiles: self.tiles || o.tiles,
            float: self.float || o.float,
        }
    }
}

/// `m` activation rows quantized, `[m, cols]` values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QActs {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// The forms filled by the last quantization (the K forms only when cols is a multiple of
    /// 256).
    pub(crate) forms: Forms,
    pub(crate) q: Vec<i8>,   // [rows, cols], per-32 scales
    pub(crate) d: Vec<f32>,  // [rows, cols / 32]
    pub(crate) s: Vec<f32>,  // [rows, cols / 32]: d · Σ q over the block
    pub(crate) kq: Vec<i8>,  // [rows, cols], per-256 scales (the `k` and `tiles` forms)
    pub(crate) kd: Vec<f32>, // [rows, cols / 256]
    pub(crate) ks: Vec<i16>, // [rows, cols / 16]: Σ kq over each 16 values, |Σ| ≤ 2032
    /// `kq` in lane order, for the AVX-512 K kernel: within each 256-value group, byte
    /// 64·r + 4·l + b holds value 16·l + 4·r + b (r < 4, l < 16, b < 4), so that 32-bit lane l
    /// of each of the group's four 64-byte vectors holds 4 values of 16-value group l. Groups
    /// are stored group-major (every row's group 0, then every row's group 1, …): a weight
    /// super-block meets the rows' groups at fixed distances from one pointer, where row-major
    /// storage needed a pointer per row, which the kernel spilled to the stack and reloaded for
    /// every row of every super-block.
    pub(crate) kl: Vec<i8>, // [cols / 256, rows, 256]
    /// `ks` as f32 (exact: |Σ| ≤ 2032), a whole 16-lane vector per 256-value group, group-major.
    pub(crate) klf: Vec<f32>, // [cols / 256, rows, 16]
    /// `kd` group-major, for the lane-order kernel.
    pub(crate) kld: Vec<f32>, // [cols / 256, rows]
    /// Σ kq over each 32 values as f32 (exact: |Σ| ≤ 4064): what a tiled Q4_K sub-block's
    /// minimum multiplies.
    pub(crate) k32: Vec<f32>, // [rows, cols / 32]
    /// Σ kq over each 16 values as f32: what a tiled Q6_K sub-block's offset of 32 multiplies.
    pub(crate) k16: Vec<f32>, // [rows, cols / 16]
    /// The values as given, `[rows, cols]`: what 16-bit float weights multiply.
    pub(crate) x: Vec<f32>,
}

/// `q[i] = round(x[i] / d)` with d = max|x| / 127 over `x` (NaN values left out of the
/// maximum, and quantized to 0), returning d. Written so that it compiles to vector code in
/// every step (a scalar version cost ~1.2 ns a value, more than the SiLU): the magnitude as
/// the integer maximum of the values' bits without their sign (for non-negative floats the
/// same order as the floats', and no NaN handling on the chain), NaN bits mapped to 0 first;
/// the rounding half to even with the 1.5·2²³ trick and the integer read from the sum's low
/// mantissa bits (a float's cast to an integer saturates lane by lane, with branches). The
/// scaled value is clamped to ±127 first: only an infinite 1/d (d subnormal) can leave the
/// range.
#[inline(always)]
fn quantize_group(x: &[f32], q: &mut [i8]) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    const INF_BITS: u32 = 0x7F80_0000;
    let magnitude = |v: &f32| {
        let b = v.to_bits() & 0x7FFF_FFFF;
        if b > INF_BITS { 0 } else { b }
    };
    let mut lanes = [0u32; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder().iter().map(magnitude).max().unwrap_or(0);
    for c in chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = (*l).max(magnitude(v));
        }
    }
    let amax = f32::from_bits(lanes.into_iter().fold(tail, u32::max));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (qi, &v) in q.iter_mut().zip(x) {
        let r = v * inv;
        let r = if r.is_nan() {
            0.0
        } else {
            r.clamp(-127.0, 127.0)
        };
        // r + MAGIC has the exponent of 2²³·1.5, so its low mantissa bits hold round(r)
        // offset by MAGIC's own.
        let n = (r + MAGIC).to_bits().wrapping_sub(MAGIC.to_bits()) as i32;
        *qi = n as i8;
    }
    d
}

impl QActs {
    /// Quantizes `x` (`[rows, cols]`, row-major) to every form, reusing this value's buffers.
    ///
    /// # Errors
    /// [`KernelError::RaggedRow`] when `cols` is not a multiple of 32, [`KernelError::Shape`]
    /// when `x` is not `rows × cols` long.
    pub fn quantize(&mut self, x: &[f32], rows: usize, cols: usize) -> Result<()> {
        self.quantize_for(x, rows, cols, Forms::ALL)
    }

    /// As [`QActs::quantize`], filling only the forms in `forms` (the K forms only where
    /// `cols` is a multiple of 256). A matmul whose kernel needs a form left out is an error.
    ///
    /// # Errors
    /// As [`QActs::quantize`].
    pub fn quantize_for(
        &mut self,
        x: &[f32],
        rows: usize,
        cols: usize,
        forms: Forms,
    ) -> Result<()> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(KernelError::RaggedRow { cols, block: BLOCK });
        }
        let len = rows.checked_mul(cols).ok_or(KernelError::Overflow {
            what: "activation values",
            rows,
            cols,
        })?;
        if x.len() != len {
            return Err(KernelError::Shape {
                what: "activation values (rows × cols)",
                expected: len,
                found: x.len(),
            });
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F, the only feature `fill_avx512` is compiled for.
            unsafe { self.fill_avx512(x, rows, cols, forms) };
            return Ok(());
        }
        self.fill(x, rows, cols, forms);
        Ok(())
    }

    /// [`QActs::fill`] compiled for AVX-512 (16 values per instruction where the baseline has
    /// 4); no fused multiply-add is formed, so the values are the same (tested).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn fill_avx512(&mut self, x: &[f32], rows: usize, cols: usize, forms: Forms) {
        self.fill(x, rows, cols, forms);
    }

    /// The quantization of [`QActs::quantize_for`], its arguments checked.
    #[inline(always)]
    pub(crate) fn fill(&mut self, x: &[f32], rows: usize, cols: usize, forms: Forms) {
        let len = rows * cols;
        self.rows = rows;
        self.cols = cols;
        let whole_k = cols.is_multiple_of(K_GROUP);
        self.forms = Forms {
            k: forms.k && whole_k,
            lanes: forms.lanes && whole_k,
            tiles: forms.tiles && whole_k,
            ..forms
        };
        if forms.blocks {
            let blocks = len / BLOCK;
            self.q.resize(len, 0);
            self.d.resize(blocks, 0.0);
            self.s.resize(blocks, 0.0);
            for (((values, q), d), s) in x
                .chunks_exact(BLOCK)
                .zip(self.q.chunks_exact_mut(BLOCK))
                .zip(&mut self.d)
                .zip(&mut self.s)
            {
                *d = quantize_group(values, q);
                *s = *d * q.iter().map(|&v| i32::from(v)).sum::<i32>() as f32;
            }
        }
        if forms.float {
            self.x.clear();
            self.x.extend_from_slice(x);
        }
        if self.forms.k || self.forms.lanes || self.forms.tiles {
            self.quantize_k(x, len);
        }
    }

    /// The per-256 forms asked for in `self.forms`, from `x` (`len` values, a whole number of
    /// 256-value groups).
    #[inline(always)]
    fn quantize_k(&mut self, x: &[f32], len: usize) {
        let (k, lanes, tiles) = (self.forms.k, self.forms.lanes, self.forms.tiles);
        let groups = len / K_GROUP;
        const SUMS: usize = K_GROUP / K_SUM;
        self.kd.resize(groups, 0.0);
        if k || tiles {
            self.kq.resize(len, 0);
        }
        if k {
            self.ks.resize(len / K_SUM, 0);
        }
        if tiles {
            self.k32.resize(len / BLOCK, 0.0);
            self.k16.resize(len / K_SUM, 0.0);
        }
        if lanes {
            self.kl.resize(len, 0);
            self.klf.resize(len / K_SUM, 0.0);
            self.kld.resize(groups, 0.0);
        }
        let per_row = self.cols / K_GROUP;
        let mut q = [0i8; K_GROUP];
        for (g, values) in x.chunks_exact(K_GROUP).enumerate() {
            self.kd[g] = quantize_group(values, &mut q);
            // 16 values of at most 127 in magnitude: |Σ| ≤ 2032. Summed as i32 (a vector
            // reduction per 16 bytes; the i16 sums compiled to a chain of scalar adds).
            let mut sums = [0i16; SUMS];
            for (sum, part) in sums.iter_mut().zip(q.chunks_exact(K_SUM)) {
                *sum = part.iter().map(|&v| i32::from(v)).sum::<i32>() as i16;
            }
            if k || tiles {
                self.kq[K_GROUP * g..K_GROUP * (g + 1)].copy_from_slice(&q);
            }
            if k {
                self.ks[SUMS * g..SUMS * (g + 1)].copy_from_slice(&sums);
            }
            if tiles {
                let per = K_GROUP / BLOCK;
                for (s, pair) in self.k32[per * g..per * (g + 1)]
                    .iter_mut()
                    .zip(sums.chunks_exact(2))
                {
                    *s = f32::from(pair[0] + pair[1]);
                }
                for (f, &s) in self.k16[SUMS * g..SUMS * (g + 1)].iter_mut().zip(&sums) {
                    *f = f32::from(s);
                }
            }
            if lanes {
                // Row g / per_row's group g % per_row, stored group-major.
                let at = (g % per_row) * self.rows + g / per_row;
                self.kld[at] = self.kd[g];
                let out = &mut self.kl[K_GROUP * at..K_GROUP * (at + 1)];
                for l in 0..SUMS {
                    for r in 0..4 {
                        out[64 * r + 4 * l..][..4].copy_from_slice(&q[16 * l + 4 * r..][..4]);
                    }
                }
                for (f, &s) in self.klf[SUMS * at..SUMS * (at + 1)].iter_mut().zip(&sums) {
                    *f = f32::from(s);
                }
            }
        }
    }

    /// The forms the last quantization filled.
    pub fn forms(&self) -> Forms {
        self.forms
    }

    /// Rows quantized.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain statement of [`quantize_group`].
    fn quantize_group_reference(x: &[f32], q: &mut [i8]) -> f32 {
        let amax = x
            .iter()
            .filter(|v| !v.is_nan())
            .fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        for (qi, &v) in q.iter_mut().zip(x) {
            let r = v * inv;
            *qi = if r.is_nan() {
                0
            } else {
                r.round_ties_even().clamp(-127.0, 127.0) as i8
            };
        }
        d
    }

    #[test]
    fn a_group_quantizes_as_its_plain_statement_says() {
        let specials = [
            0.0,
            -0.0,
            1e-42,
            -1e-42,
            1e-38,
            f32::NAN,
            f32::INFINITY,
            -f32::INFINITY,
        ];
        for len in [32usize, 256, 48] {
            for case in 0..40u32 {
                let x: Vec<f32> = (0..len)
                    .map(|i| {
                        let i = i as u32;
                        match (i * 31 + case * 17) % 101 {
                            k if k < 3 && case.is_multiple_of(4) => {
                                specials[(case as usize / 4) % 8]
                            }
                            // Ties: k + 0.5 steps of the scale.
                            k if k < 10 && case.is_multiple_of(3) => (k as f32 + 0.5) * 0.25,
                            _ => ((i * 7919 + case * 104_729) % 20_011) as f32 * 1e-3 - 10.0,
                        }
                        .copysign(if (i + case).is_multiple_of(5) {
                            -1.0
                        } else {
                            1.0
                        })
                    })
                    .collect();
                let (mut got, mut want) = (vec![0i8; len], vec![0i8; len]);
                let (dg, dw) = (
                    quantize_group(&x, &mut got),
                    quantize_group_reference(&x, &mut want),
                );
                assert_eq!(
                    (dg.to_bits(), &got),
                    (dw.to_bits(), &want),
                    "len {len}, case {case}"
                );
            }
        }
        // A subnormal maximum makes 1/d infinite: the values still land in ±127.
        let x = [1e-44f32, -1e-44, 5e-45, 0.0];
        let mut q = [0i8; 4];
        quantize_group(&x, &mut q);
        assert!(q.iter().all(|v| (-127..=127).contains(v)), "{q:?}");
    }

    #[test]
    fn the_wide_build_quantizes_to_the_same_values() {
        for (rows, cols) in [(1, 32), (3, 96), (1, 256), (5, 1536), (16, 768), (2, 8960)] {
            let x: Vec<f32> = (0..rows * cols)
                .map(|i| match i % 97 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => 1e-30,
                    3 => -3e4,
                    _ => ((i * 7919 % 2003) as f32 - 1001.0) * 0.013,
                })
                .collect();
            let mut plain = QActs::default();
            plain.fill(&x, rows, cols, Forms::ALL);
            let mut dispatched = QActs::default();
            dispatched.quantize(&x, rows, cols).unwrap();
            assert_eq!(plain, dispatched, "{rows} x {cols}");
        }
    }
}
