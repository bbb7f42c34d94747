//! Activations quantized once per call to 8 bits per block of 32 values (as llama.cpp and candle
//! do), so that every weight block meets them in an integer dot product.
//!
//! Per block: d = max|x| / 127, q = round(x / d) ∈ [−127, 127], and s = d·Σq (the Q8_1 sum that
//! a Q4_1 block's minimum multiplies). Scales stay f32 (llama.cpp rounds them to f16), which
//! removes one rounding from the error bound and costs nothing here.

use crate::block::BLOCK;
use crate::error::{KernelError, Result};

/// `m` activation rows quantized, `[m, cols]` values in blocks of 32.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QActs {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) q: Vec<i8>,  // [rows, cols]
    pub(crate) d: Vec<f32>, // [rows, cols / 32]
    pub(crate) s: Vec<f32>, // [rows, cols / 32]: d · Σ q over the block
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
            let amax = values.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
            let mut sum = 0i32;
            for (qi, &v) in q.iter_mut().zip(values) {
                // |v · inv| ≤ 127 up to rounding; the cast saturates (and maps NaN to 0).
                *qi = (v * inv).round() as i8;
                sum += i32::from(*qi);
            }
            *d = scale;
            *s = scale * sum as f32;
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
