//! `y[m, out] = x[m, in] · W[out, in]ᵀ` for m = 1…16 activation rows: the rows are quantized
//! once, each weight block is read once and applied to all m rows (so a verification pass
//! over k + 1 rows streams the weights no more than a one-row decode does), and output rows
//! are split across a persistent thread pool.
//!
//! A row's result does not depend on how many rows share the call: each activation row is
//! accumulated by the same operations in the same order whatever m is, so m = 1 and m = 5 give
//! bit-identical outputs for the same row (tested). That keeps greedy strict speculation equal
//! to target-only decoding.

use rayon::prelude::*;

use crate::block::{Layout, QMatrix, WeightType};
use crate::error::{KernelError, Result};
use crate::quantize::{Forms, QActs};
use crate::scalar;
use crate::tiles::TILE;

/// Most activation rows one call takes (k + 1 for k ≤ 15).
pub const MAX_ROWS: usize = 16;

/// Which micro-kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust, every CPU.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 with AVX-VNNI (fused i16 multiply-add in the K-quant kernel; same results as Avx2).
    AvxVnni,
    /// AVX-512 (F, BW, VNNI): the K-quant kernel in lane order (one 16-value group per 32-bit
    /// lane, activations in [`Forms`]' lane form), the legacy kernel two blocks per register;
    /// same integer sums as Avx2, f32 steps in another order.
    Avx512,
}

impl Isa {
    /// The fastest kernel this CPU runs.
    pub fn detect() -> Self {
        Self::available().into_iter().last().unwrap_or(Self::Scalar)
    }

    /// Every kernel this CPU runs, the portable one first.
    pub fn available() -> Vec<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            let mut isas = Vec::new();
            if crate::x86::available() {
                isas.extend([Self::Scalar, Self::Avx2]);
            }
            if crate::x86::vnni_available() {
                isas.push(Self::AvxVnni);
            }
            if crate::x86::avx512_available() {
                isas.push(Self::Avx512);
            }
            if !isas.is_empty() {
                return isas;
            }
        }
        vec![Self::Scalar]
    }
}

/// The kernels with their thread pool.
#[derive(Debug)]
pub struct Kernels {
    isa: Isa,
    threads: usize,
    pool: Option<rayon::ThreadPool>,
}

impl Kernels {
    /// Kernels on `threads` threads with the fastest micro-kernel this CPU runs.
    ///
    /// # Errors
    /// [`KernelError::Threads`] for 0 threads or a pool that cannot start.
    pub fn new(threads: usize) -> Result<Self> {
        Self::with_isa(Isa::detect(), threads)
    }

    /// Kernels with a chosen micro-kernel (tests compare them).
    ///
    /// # Errors
    /// As [`Kernels::new`], and [`KernelError::Threads`] naming an `isa` this CPU lacks.
    pub fn with_isa(isa: Isa, threads: usize) -> Result<Self> {
        let err = |why: String| KernelError::Threads { threads, why };
        if threads == 0 {
            return Err(err("at least 1 thread".into()));
        }
        if !Isa::available().contains(&isa) {
            return Err(err(format!("this CPU cannot run the {isa:?} kernel")));
        }
        let pool = if threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .map_err(|e| err(e.to_string()))?,
            )
        } else {
            None
        };
        Ok(Self { isa, threads, pool })
    }

    /// The micro-kernel in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Threads in use.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on this kernel set's pool (inline on one thread), so that the matmuls it makes
    /// split their work from inside the pool: a forward pass makes ~200 calls of a few hundred
    /// microseconds, and entering the pool from outside on each one put the caller to sleep and
    /// woke it again every time (~13 % of a 0.5B decode step in scheduler code).
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }

    /// The pool, `None` on one thread.
    pub(crate) fn pool(&self) -> Option<&rayon::ThreadPool> {
        self.pool.as_ref()
    }

    /// The activation forms the micro-kernel reads for `w`: quantize with these
    /// ([`QActs::quantize_for`]) to build nothing else.
    pub fn forms(&self, w: &QMatrix) -> Forms {
        let ty = w.ty();
        let k = ty.is_k();
        let tiles = self.runs_tiles(w);
        Forms {
            blocks: !k && !ty.is_float(),
            k: k && self.isa != Isa::Avx512,
            lanes: k && self.isa == Isa::Avx512 && !tiles,
            tiles: k && tiles,
            float: ty.is_float(),
        }
    }

    /// `w` laid out for this kernel set: every block type but Q5_K and the 16-bit floats in
    /// tiles of 16 output rows where the micro-kernel is AVX-512 (the tile kernels: one output
    /// per lane, so that an activation row costs about a third of the vector operations of the
    /// row-at-a-time kernels), else unchanged. The results equal those of `w` as given within f32 accumulation order, and
    /// a row's result still does not depend on the rows beside it.
    pub fn prepare(&self, w: QMatrix) -> QMatrix {
        if self.isa == Isa::Avx512 {
            // On this pool, tiles in parallel (a 1.5B model's matrices take seconds alone).
            self.run(|| w.into_tiles())
        } else {
            w
        }
    }

    /// The file's blocks `data` of a `[rows, cols]` matrix of `ty` as [`Kernels::prepare`]
    /// lays them out, tiled straight from the borrowed bytes where it tiles.
    ///
    /// # Errors
    /// As [`QMatrix::new`].
    pub fn prepare_bytes(
        &self,
        ty: WeightType,
        rows: usize,
        cols: usize,
        data: std::borrow::Cow<'_, [u8]>,
    ) -> Result<QMatrix> {
        if self.isa == Isa::Avx512 {
            self.run(|| QMatrix::tiled_from(ty, rows, cols, &data))
        } else {
            QMatrix::new(ty, rows, cols, data.into_owned())
        }
    }

    /// Whether `w` runs on the tile kernel (tiled, on AVX-512); a tiled matrix on another
    /// kernel is read back as rows.
    fn runs_tiles(&self, w: &QMatrix) -> bool {
        w.layout() == Layout::Tiles && self.isa == Isa::Avx512
    }

    /// `y = x · Wᵀ`: `x` quantized activations `[m, in]`, `w` `[out, in]`, `y` `[m, out]`.
    ///
    /// # Errors
    /// [`KernelError::Shape`] when `x.cols() != w.cols()` or `y` is not `m × out`;
    /// [`KernelError::TooManyRows`] for m > [`MAX_ROWS`]; [`KernelError::MissingForm`] when `x`
    /// was quantized without what [`Kernels::forms`] names.
    pub fn matmul(&self, w: &QMatrix, x: &QActs, y: &mut [f32]) -> Result<()> {
        self.matmul_rows(w, 0..w.rows(), x, y)
    }

    /// As [`Kernels::matmul`] for the weight rows (output features) `rows` only: `y` is
    /// `[m, rows.len()]`, each value bit-identical to the same feature of a full call. A draft
    /// model that proposes only the first n token ids runs its output head this way.
    ///
    /// # Errors
    /// As [`Kernels::matmul`], and [`KernelError::Shape`] when `rows` is empty, reversed or
    /// reaches past the weight's rows.
    pub fn matmul_rows(
        &self,
        w: &QMatrix,
        rows: std::ops::Range<usize>,
        x: &QActs,
        y: &mut [f32],
    ) -> Result<()> {
        if rows.start >= rows.end || rows.end > w.rows() {
            return Err(KernelError::Shape {
                what: "weight rows asked for (end; at most the weight's rows, after the start)",
                expected: w.rows(),
                found: rows.end,
            });
        }
        let (m, out, first_row) = (x.rows(), rows.len(), rows.start);
        if x.cols() != w.cols() {
            return Err(KernelError::Shape {
                what: "activation columns (the weight's input features)",
                expected: w.cols(),
                found: x.cols(),
            });
        }
        if !x.forms().covers(self.forms(w)) {
            return Err(KernelError::MissingForm {
                ty: w.ty(),
                isa: self.isa,
            });
        }
        if m > MAX_ROWS {
            return Err(KernelError::TooManyRows {
                rows: m,
                max: MAX_ROWS,
            });
        }
        if y.len() != m * out {
            return Err(KernelError::Shape {
                what: "output values (rows × out)",
                expected: m * out,
                found: y.len(),
            });
        }
        if m == 0 {
            return Ok(());
        }
        if self.runs_tiles(w) {
            self.matmul_tiles(w, rows, x, y);
            return Ok(());
        }
        // Output features in the order the kernel makes them: [out, m]. One row needs no
        // transpose, which keeps the decode path free of a copy.
        let mut by_feature = if m == 1 {
            Vec::new()
        } else {
            vec![0f32; m * out]
        };
        let target: &mut [f32] = if m == 1 { y } else { &mut by_feature };
        let isa = self.isa;
        let run = |first: usize, part: &mut [f32]| {
            for (i, outs) in part.chunks_exact_mut(m).enumerate() {
                dot_rows(isa, w, first_row + first + i, x, outs);
            }
        };
        match &self.pool {
            None => run(0, target),
            Some(pool) => {
                // Several chunks per thread so that a slow core does not hold the call up.
                let chunk = out.div_ceil(self.threads * 4).max(1);
                pool.install(|| {
                    target
                        .par_chunks_mut(chunk * m)
                        .enumerate()
                        .for_each(|(c, part)| run(c * chunk, part));
                });
            }
        }
        if m > 1 {
            for (o, outs) in by_feature.chunks_exact(m).enumerate() {
                for (r, &v) in outs.iter().enumerate() {
                    y[r * out + o] = v;
                }
            }
        }
        Ok(())
    }
}

impl Kernels {
    /// [`Kernels::matmul_rows`] on the tile kernel, shapes checked by the caller: the tiles
    /// that hold `rows` are computed whole (`[tiles, m, 16]`, split across the pool) and the
    /// asked-for features copied out, so a feature's value does not depend on the range.
    fn matmul_tiles(&self, w: &QMatrix, rows: std::ops::Range<usize>, x: &QActs, y: &mut [f32]) {
        let (m, out) = (x.rows(), rows.len());
        let (first_tile, end_tile) = (rows.start / TILE, rows.end.div_ceil(TILE));
        let mut by_tile = vec![0f32; (end_tile - first_tile) * m * TILE]; // [tiles, m, 16]
        let run = |first: usize, part: &mut [f32]| {
            for (i, outs) in part.chunks_exact_mut(m * TILE).enumerate() {
                tile_rows(w.ty(), w.tile(first_tile + first + i), x, outs);
            }
        };
        match &self.pool {
            None => run(0, &mut by_tile),
            Some(pool) => {
                let tiles = end_tile - first_tile;
                let chunk = tiles.div_ceil(self.threads * 4).max(1);
                pool.install(|| {
                    by_tile
                        .par_chunks_mut(chunk * m * TILE)
                        .enumerate()
                        .for_each(|(c, part)| run(c * chunk, part));
                });
            }
        }
        for (t, tile) in by_tile.chunks_exact(m * TILE).enumerate() {
            // The features of this tile inside `rows`, as offsets into the tile and into y.
            let start = ((first_tile + t) * TILE).max(rows.start);
            let end = ((first_tile + t + 1) * TILE).min(rows.end);
            let (from, to) = (start - (first_tile + t) * TILE, start - rows.start);
            for r in 0..m {
                y[r * out + to..][..end - start]
                    .copy_from_slice(&tile[r * TILE + from..][..end - start]);
            }
        }
    }
}

/// One tile of 16 weight rows of type `ty` against every activation row: `out` is `[m, 16]`.
fn tile_rows(ty: WeightType, tile: &[u8], x: &QActs, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: only `matmul_tiles` calls this, and only where the kernels' isa is Avx512, which
    // `Kernels::with_isa` admits only where `x86::avx512_available()` said the CPU has AVX2,
    // FMA, F16C, AVX-512 F, BW and VNNI.
    unsafe {
        crate::x86::tile_rows_avx512(ty, tile, x, out);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Never reached: tiles run only on the AVX-512 kernel.
        let _ = (ty, tile, x, out);
    }
}

/// One weight row against every activation row with the chosen micro-kernel.
fn dot_rows(isa: Isa, w: &QMatrix, row: usize, x: &QActs, out: &mut [f32]) {
    let (ty, row) = (w.ty(), w.row(row));
    let row = &row[..];
    match isa {
        Isa::Scalar => scalar::dot_rows(ty, row, x, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Kernels::with_isa` admits Avx2 only where `x86::available()` said the CPU
        // has AVX2, FMA and F16C.
        Isa::Avx2 => unsafe { crate::x86::dot_rows(ty, row, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Kernels::with_isa` admits AvxVnni only where `x86::vnni_available()` said
        // the CPU has AVX2, FMA, F16C and AVX-VNNI.
        Isa::AvxVnni => unsafe { crate::x86::dot_rows_vnni(ty, row, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Kernels::with_isa` admits Avx512 only where `x86::avx512_available()` said
        // the CPU has AVX2, FMA, F16C, AVX-512 F, BW and VNNI.
        Isa::Avx512 => unsafe { crate::x86::dot_rows_avx512(ty, row, x, out) },
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 => scalar::dot_rows(ty, row, x, out),
    }
}
