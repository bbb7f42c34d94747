//! Weight blocks as GGUF stores them, and a matrix of them kept packed.
//!
//! Legacy ggml blocks hold 32 values (little-endian):
//! - `Q8_0` (34 bytes): f16 scale d, 32 × i8 q; value = d·q.
//! - `Q4_0` (18 bytes): f16 scale d, 16 bytes of nibbles; byte j holds value j in its low nibble
//!   and value j + 16 in its high nibble; value = d·(q − 8).
//! - `Q4_1` (20 bytes): f16 scale d, f16 minimum m, 16 bytes of nibbles laid out as Q4_0;
//!   value = d·q + m.

use half::f16;

use crate::error::{KernelError, Result};

/// Values per block of every type here.
pub const BLOCK: usize = 32;

/// A weight block type the kernels multiply directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightType {
    /// 8-bit, one f16 scale.
    Q8_0,
    /// 4-bit, one f16 scale, offset 8.
    Q4_0,
    /// 4-bit, f16 scale and minimum.
    Q4_1,
}

impl WeightType {
    /// Bytes per block of [`BLOCK`] values.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
        }
    }

    /// Every type, for tests and benchmarks.
    pub const ALL: [Self; 3] = [Self::Q8_0, Self::Q4_0, Self::Q4_1];
}

/// The f16 at `bytes[at..at + 2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// A weight matrix `W[rows, cols]` (rows = output features, cols = input features) kept as its
/// GGUF blocks: row r is `cols / 32` consecutive blocks, exactly the bytes of the file.
#[derive(Clone, PartialEq, Eq)]
pub struct QMatrix {
    ty: WeightType,
    rows: usize,
    cols: usize,
    data: Vec<u8>, // [rows, cols / 32, block_bytes]
}

impl std::fmt::Debug for QMatrix {
    // The blocks are megabytes: show what they are, not their bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QMatrix")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl QMatrix {
    /// Wraps `data`, checking that it holds exactly `rows × cols` values of `ty`.
    ///
    /// # Errors
    /// [`KernelError::RaggedRow`] when `cols` is not a multiple of 32, [`KernelError::Overflow`]
    /// for a size that does not fit, [`KernelError::Shape`] when `data` has the wrong length.
    pub fn new(ty: WeightType, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(KernelError::RaggedRow { cols, block: BLOCK });
        }
        let bytes = (cols / BLOCK)
            .checked_mul(ty.block_bytes())
            .and_then(|row| row.checked_mul(rows))
            .ok_or(KernelError::Overflow {
                what: "the matrix's bytes",
                rows,
                cols,
            })?;
        if data.len() != bytes {
            return Err(KernelError::Shape {
                what: "bytes of block data",
                expected: bytes,
                found: data.len(),
            });
        }
        Ok(Self {
            ty,
            rows,
            cols,
            data,
        })
    }

    /// `values` (`[rows, cols]`, row-major) quantized to Q8_0 as llama.cpp does: per 32 values
    /// d = max|x| / 127 stored as f16, q = round(x / d). For weights of a type the kernels do not
    /// multiply, converted once at load.
    ///
    /// # Errors
    /// As [`QMatrix::new`], and [`KernelError::Shape`] when `values` is not `rows × cols` long
    /// and [`KernelError::NotFinite`] for a NaN or infinite value.
    pub fn quantize_q8_0(rows: usize, cols: usize, values: &[f32]) -> Result<Self> {
        let len = rows.checked_mul(cols).ok_or(KernelError::Overflow {
            what: "the matrix's values",
            rows,
            cols,
        })?;
        if values.len() != len {
            return Err(KernelError::Shape {
                what: "values to quantize (rows × cols)",
                expected: len,
                found: values.len(),
            });
        }
        if let Some(index) = values.iter().position(|v| !v.is_finite()) {
            return Err(KernelError::NotFinite {
                what: "a weight to quantize",
                index,
                value: values[index],
            });
        }
        if cols == 0 || !cols.is_multiple_of(BLOCK) {
            return Err(KernelError::RaggedRow { cols, block: BLOCK });
        }
        let mut data = Vec::with_capacity(len / BLOCK * WeightType::Q8_0.block_bytes());
        for block in values.chunks_exact(BLOCK) {
            let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            data.extend_from_slice(&f16::from_f32(d).to_le_bytes());
            // |v · inv| ≤ 127 up to rounding; the cast saturates.
            data.extend(block.iter().map(|&v| (v * inv).round() as i8 as u8));
        }
        Self::new(WeightType::Q8_0, rows, cols, data)
    }

    /// The block type.
    pub fn ty(&self) -> WeightType {
        self.ty
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of one row's blocks.
    pub fn row_bytes(&self) -> usize {
        self.cols / BLOCK * self.ty.block_bytes()
    }

    /// Bytes of all blocks (what a matrix-vector product reads).
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// The block data as stored, `[rows, cols / 32, block_bytes]`.
    pub fn blocks(&self) -> &[u8] {
        &self.data
    }

    /// The blocks of row `r`, `[cols / 32, block_bytes]`.
    ///
    /// # Panics
    /// When `r >= rows` (an internal index, never input).
    pub(crate) fn row(&self, r: usize) -> &[u8] {
        let n = self.row_bytes();
        &self.data[r * n..(r + 1) * n]
    }

    /// Row `r` dequantized into `out` (`[cols]`): an embedding lookup reads one row of blocks.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a row out of range or an `out` of the wrong length.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        if r >= self.rows {
            return Err(KernelError::Shape {
                what: "row index below",
                expected: self.rows,
                found: r,
            });
        }
        if out.len() != self.cols {
            return Err(KernelError::Shape {
                what: "output length",
                expected: self.cols,
                found: out.len(),
            });
        }
        let bb = self.ty.block_bytes();
        for (block, values) in self
            .row(r)
            .chunks_exact(bb)
            .zip(out.chunks_exact_mut(BLOCK))
        {
            dequantize_block(self.ty, block, values);
        }
        Ok(())
    }
}

/// One block's 32 values, in ggml's order of operations (bit-identical to its dequantizers).
fn dequantize_block(ty: WeightType, block: &[u8], out: &mut [f32]) {
    match ty {
        WeightType::Q8_0 => {
            let d = f16_at(block, 0);
            for (o, &q) in out.iter_mut().zip(&block[2..34]) {
                *o = f32::from(q as i8) * d;
            }
        }
        WeightType::Q4_0 => {
            let d = f16_at(block, 0);
            for (j, &b) in block[2..18].iter().enumerate() {
                out[j] = f32::from(i16::from(b & 0x0F) - 8) * d;
                out[j + 16] = f32::from(i16::from(b >> 4) - 8) * d;
            }
        }
        WeightType::Q4_1 => {
            let (d, m) = (f16_at(block, 0), f16_at(block, 2));
            for (j, &b) in block[4..20].iter().enumerate() {
                out[j] = f32::from(b & 0x0F) * d + m;
                out[j + 16] = f32::from(b >> 4) * d + m;
            }
        }
    }
}
