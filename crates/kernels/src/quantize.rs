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

/// `m` activation rows quantized, `[m, cols]` values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QActs {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) q: Vec<i8>,  // [rows, cols], per-32 scales
    pub(crate) d: Vec<f32>, // [rows, cols / 32]
    pub(crate) s: Vec<f32>, // [rows, cols / 32]: d · Σ q over the block
    /// Whether the per-256 form below is filled (cols a multiple of 256).
    pub(crate) has_k: bool,
    pub(crate) kq: Vec<i8>,  // [rows, cols], per-256 scales
    pub(crate) kd: Vec<f32>, // [rows, cols / 256]
    pub(crate) ks: Vec<i16>, // [rows, cols / 16]: Σ kq over each 16 values, |Σ| ≤ 2032
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
    /// Quantizes `x` (`[rows, cols]`, row-major), reusing this value's buffers.
    ///
    /// # Errors
    /// [`KernelError::RaggedRow`] when `cols` is not a multiple of 32, [`KernelError::Shape`]
    /// when `x` is not `rows × cols` long.
    pub fn quantize(&mut self, x: &[f32], rows: usize, cols: usize) -> Result<()> {
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
        let blocks = len / BLOCK;
        self.rows = rows;
        self.cols = cols;
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
        self.x.clear();
        self.x.extend_from_slice(x);
        self.has_k = cols.is_multiple_of(K_GROUP);
        if self.has_k {
            self.kq.resize(len, 0);
            self.kd.resize(len / K_GROUP, 0.0);
            self.ks.resize(len / K_SUM, 0);
            for ((values, q), d) in x
                .chunks_exact(K_GROUP)
                .zip(self.kq.chunks_exact_mut(K_GROUP))
                .zip(&mut self.kd)
            {
                *d = quantize_group(values, q);
            }
            for (q, s) in self.kq.chunks_exact(K_SUM).zip(&mut self.ks) {
                // 16 values of at most 127 in magnitude: |Σ| ≤ 2032.
                *s = q.iter().map(|&v| i16::from(v)).sum();
            }
        }
        Ok(())
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
