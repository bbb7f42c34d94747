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

/// `q[i] = round(x[i] / d)` with d = max|x| / 127 over `x`, returning d. Rounds half to even
/// with the 1.5·2²³ trick, which vectorizes (`f32::round` is a library call on baseline
/// x86-64); |x / d| ≤ 127 up to rounding, and the cast saturates and maps NaN to 0.
fn quantize_group(x: &[f32], q: &mut [i8]) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (qi, &v) in q.iter_mut().zip(x) {
        *qi = ((v * inv + MAGIC) - MAGIC) as i8;
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
        Ok(())
    }

    /// The per-256 forms asked for in `self.forms`, from `x` (`len` values, a whole number of
    /// 256-value groups).
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
            // 16 values of at most 127 in magnitude: |Σ| ≤ 2032.
            let sums: [i16; SUMS] = std::array::from_fn(|l| {
                q[K_SUM * l..K_SUM * (l + 1)]
                    .iter()
                    .map(|&v| i16::from(v))
                    .sum()
            });
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
