//! A weight matrix kept as its GGUF blocks ([`QMatrix`]), as stored or repacked into tiles
//! ([`Layout`]): the one place that knows both the block formats (`block`) and the tiled layout
//! (`tiles`), so neither of those imports the other's matrix type.

use half::f16;

use crate::block::{BLOCK, WeightType, float_at, unpack};
use crate::error::{KernelError, Result};
use crate::tiles;

/// How a matrix's blocks lie in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// As GGUF stores them: row after row, each the row's blocks in order.
    Rows,
    /// Repacked into tiles of 16 output rows for the AVX-512 tile kernels (every type but
    /// Q5_K and the 16-bit floats; [`crate::Kernels::prepare`]; the layout is described in the
    /// `tiles` module). Every other kernel, the embedding lookup and
    /// [`QMatrix::dequantize_row`] read the rows back bit-identical to the file.
    Tiles,
}

/// A weight matrix `W[rows, cols]` (rows = output features, cols = input features) kept as its
/// GGUF blocks: row r is `cols / 32` consecutive blocks, exactly the bytes of the file
/// ([`Layout::Rows`]), or the same blocks repacked into tiles ([`Layout::Tiles`]).
#[derive(Clone, PartialEq, Eq)]
pub struct QMatrix {
    ty: WeightType,
    rows: usize,
    cols: usize,
    layout: Layout,
    // Rows: [rows, cols / block_values, block_bytes];
    // Tiles: [rows / 16 (rounded up), cols / block_values, the type's tile block bytes].
    data: Vec<u8>,
}

impl std::fmt::Debug for QMatrix {
    // The blocks are megabytes: show what they are, not their bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QMatrix")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("layout", &self.layout)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl QMatrix {
    /// Wraps `data`, checking that it holds exactly `rows × cols` values of `ty`.
    ///
    /// # Errors
    /// [`KernelError::RaggedRow`] when `cols` is not a whole number of the type's blocks (32
    /// values, 256 for K-quants), [`KernelError::Overflow`] for a size that does not fit, [`KernelError::Shape`] when `data` has the wrong length.
    pub fn new(ty: WeightType, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self> {
        Self::check(ty, rows, cols, data.len())?;
        Ok(Self {
            ty,
            rows,
            cols,
            layout: Layout::Rows,
            data,
        })
    }

    /// The file's blocks `data` (`[rows, cols / block_values, block_bytes]`) straight into
    /// tiles, without an owned copy in rows first (a copy freed after tiling stayed in the
    /// allocator: SmolLM2's resident memory rose by a third); a type that does not tile is
    /// copied as rows.
    ///
    /// # Errors
    /// As [`QMatrix::new`].
    pub fn tiled_from(ty: WeightType, rows: usize, cols: usize, data: &[u8]) -> Result<Self> {
        Self::check(ty, rows, cols, data.len())?;
        let blocks = cols / ty.block_values();
        Ok(match tiles::tile(ty, data, rows, blocks) {
            Some(data) => Self {
                ty,
                rows,
                cols,
                layout: Layout::Tiles,
                data,
            },
            None => Self {
                ty,
                rows,
                cols,
                layout: Layout::Rows,
                data: data.to_vec(),
            },
        })
    }

    /// Checks that `len` bytes hold exactly `rows × cols` values of `ty`.
    fn check(ty: WeightType, rows: usize, cols: usize, len: usize) -> Result<()> {
        let per = ty.block_values();
        if cols == 0 || !cols.is_multiple_of(per) {
            return Err(KernelError::RaggedRow { cols, block: per });
        }
        let bytes = (cols / per)
            .checked_mul(ty.block_bytes())
            .and_then(|row| row.checked_mul(rows))
            .ok_or(KernelError::Overflow {
                what: "the matrix's bytes",
                rows,
                cols,
            })?;
        if len != bytes {
            return Err(KernelError::Shape {
                what: "bytes of block data",
                expected: bytes,
                found: len,
            });
        }
        Ok(())
    }

    /// This matrix in tiles of 16 output rows ([`Layout::Tiles`]) if its type tiles (all but
    /// Q5_K and the 16-bit floats) and it is in rows, else unchanged. Peak memory while tiling
    /// is the matrix twice ([`QMatrix::tiled_from`] tiles from borrowed bytes).
    pub fn into_tiles(self) -> Self {
        if self.layout != Layout::Rows || tiles::tile_bytes(self.ty).is_none() {
            return self;
        }
        // The shape was checked when `self` was made.
        Self::tiled_from(self.ty, self.rows, self.cols, &self.data).unwrap_or(self)
    }

    /// How the blocks lie in memory.
    pub fn layout(&self) -> Layout {
        self.layout
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
        self.cols / self.ty.block_values() * self.ty.block_bytes()
    }

    /// Bytes of all blocks (what a matrix-vector product reads; with tiles, the padding rows
    /// of a last partial tile and the decoded scales included).
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// The block data in the matrix's layout: for [`Layout::Rows`] the file's bytes,
    /// `[rows, cols / block_values, block_bytes]`.
    pub fn blocks(&self) -> &[u8] {
        &self.data
    }

    /// The GGUF blocks of row `r`, `[cols / block_values, block_bytes]`: borrowed in rows,
    /// rebuilt from tiles.
    ///
    /// # Panics
    /// When `r >= rows` (an internal index, never input).
    pub(crate) fn row(&self, r: usize) -> std::borrow::Cow<'_, [u8]> {
        let n = self.row_bytes();
        match self.layout {
            Layout::Rows => std::borrow::Cow::Borrowed(&self.data[r * n..(r + 1) * n]),
            Layout::Tiles => {
                let blocks = self.cols / self.ty.block_values();
                let mut row = Vec::with_capacity(n);
                for b in 0..blocks {
                    tiles::push_gguf_block(self.ty, &self.data, blocks, (r, b), &mut row);
                }
                std::borrow::Cow::Owned(row)
            }
        }
    }

    /// Tile `t` of a [`Layout::Tiles`] matrix: its blocks, `[cols / block_values, tile block
    /// bytes]`.
    ///
    /// # Panics
    /// When `t` is past the last tile (an internal index, never input).
    pub(crate) fn tile(&self, t: usize) -> &[u8] {
        let per = tiles::tile_bytes(self.ty).unwrap_or(0);
        let n = self.cols / self.ty.block_values() * per;
        &self.data[t * n..(t + 1) * n]
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
        let row = self.row(r);
        let row = &row[..];
        if self.ty.is_float() {
            for (i, v) in out.iter_mut().enumerate() {
                *v = float_at(self.ty, row, i);
            }
            return Ok(());
        }
        for (b, values) in out.chunks_exact_mut(BLOCK).enumerate() {
            let sub = unpack(self.ty, row, b);
            for (i, (v, &q)) in values.iter_mut().zip(&sub.w).enumerate() {
                let s = sub.scale[i / 16];
                // ggml's order of operations per type, so that the values are bit-identical
                // to its dequantizers (and to mars-formats').
                *v = match self.ty {
                    WeightType::Q4_0 => f32::from(i16::from(q) - 8) * s, // (q − 8)·d
                    WeightType::Q4_1 | WeightType::Q5_1 => f32::from(q) * s + sub.min, // q·d + m
                    WeightType::Q4K | WeightType::Q5K => s * f32::from(q) + sub.min, // (d·sc)·q − dmin·m
                    WeightType::Q8_0 | WeightType::Q5_0 | WeightType::Q6K => f32::from(q) * s,
                    WeightType::F16 | WeightType::BF16 => 0.0, // returned above
                };
            }
        }
        Ok(())
    }
}
