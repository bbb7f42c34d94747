//! `y[m, out] = x[m, in] · W[out, in]ᵀ` for m = 1…16 activation rows: the rows are quantized
//! once, each weight block is read once and applied to all m rows (so a verification pass
//! over k + 1 rows streams the weights no more than a one-row decode does), and output rows
//! are split across a persistent thread pool.
//!
//! A row's result does not depend on how many rows share the call: each activation row is
//! accumulated by the same operations in the same order whatever m is, so m = 1 and m = 5 give
//! bit-identical outputs for the same row (tested). That keeps greedy strict speculation equal
//! to target-only decoding.

use std::sync::{Mutex, PoisonError};

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
    /// Tile-result buffers of earlier calls, kept for the next ones: a 16-row pass through a
    /// 1.5B model's output head needs 9.7 MB of them, and an allocator that returns freed
    /// pages at once (the CLI's) made every pass fault them in again (~1.5 ms of a 5-row
    /// pass in page clearing).
    spare: Mutex<Vec<Vec<f32>>>,
}

/// Most buffers [`Kernels`] keeps for reuse (a call needs one per product: q/k/v is three).
const SPARE_BUFFERS: usize = 4;

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
        Ok(Self {
            isa,
            threads,
            pool,
            spare: Mutex::new(Vec::new()),
        })
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
        self.matmul_batch(x, &mut [Product { w, rows, y }])
    }

    /// Several products of one activation `x` (a layer's q/k/v, its gate and up) in one
    /// parallel region: the threads meet once for all of them, not once per matrix — a
    /// one-row decode step of a 1.5B model makes ~200 matrix calls of 10–300 µs each, and
    /// each meeting costs the threads a hand-off. Each value is bit-identical to the same
    /// product's [`Kernels::matmul_rows`] alone.
    ///
    /// # Errors
    /// As [`Kernels::matmul_rows`], for each product.
    pub fn matmul_batch(&self, x: &QActs, products: &mut [Product<'_>]) -> Result<()> {
        let m = x.rows();
        for p in products.iter() {
            self.check(p, x)?;
        }
        if m == 0 {
            return Ok(());
        }
        let plans: Vec<Plan<'_>> = products.iter().map(|p| self.plan(p, m)).collect();
        // Buffers for the products whose units cannot be written into y in place:
        // [units, m, unit] each. Every value is written by its unit before it is read, so a
        // reused buffer's old contents never show.
        let mut buffers: Vec<Vec<f32>> = {
            let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
            plans
                .iter()
                .map(|plan| {
                    if plan.direct {
                        return Vec::new();
                    }
                    let len = plan.units() * m * plan.unit;
                    // The smallest spare buffer that holds len values, else any (grown).
                    let fit = (0..spare.len())
                        .filter(|&i| spare[i].capacity() >= len)
                        .min_by_key(|&i| spare[i].capacity());
                    let mut buffer = match fit {
                        Some(i) => spare.swap_remove(i),
                        None => spare.pop().unwrap_or_default(),
                    };
                    if buffer.capacity() < len {
                        buffer.clear(); // nothing to copy when it grows
                    }
                    buffer.resize(len, 0.0);
                    buffer
                })
                .collect()
        };
        // Several tasks per thread so that a slow core does not hold the call up, sized by
        // weight rows across all products.
        let total_rows: usize = plans.iter().map(|p| p.units() * p.unit).sum();
        let chunk_rows = total_rows.div_ceil(self.threads * 4).max(1);
        let mut tasks = Vec::new();
        for (i, ((p, plan), buffer)) in products
            .iter_mut()
            .zip(&plans)
            .zip(&mut buffers)
            .enumerate()
        {
            let units_per_task = (chunk_rows / plan.unit).max(1);
            let (target, width) = if plan.direct {
                (&mut *p.y, plan.unit)
            } else {
                (&mut buffer[..], m * plan.unit)
            };
            for (c, out) in target.chunks_mut(units_per_task * width).enumerate() {
                tasks.push(Task {
                    product: i,
                    first_unit: plan.first_unit + c * units_per_task,
                    out,
                });
            }
        }
        let run = |task: Task<'_>| self.run_task(&plans[task.product], task, x);
        match &self.pool {
            Some(pool) if tasks.len() > 1 => {
                pool.install(|| tasks.into_par_iter().for_each(run));
            }
            _ => tasks.into_iter().for_each(run),
        }
        for ((p, plan), buffer) in products.iter_mut().zip(&plans).zip(&buffers) {
            if !plan.direct {
                plan.scatter(buffer, m, p);
            }
        }
        let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
        for buffer in buffers {
            if buffer.capacity() > 0 && spare.len() < SPARE_BUFFERS {
                spare.push(buffer);
            }
        }
        Ok(())
    }
}

/// One product of a [`Kernels::matmul_batch`] call: the weight rows (output features) `rows` of
/// `w` against the call's activations, into `y` (`[m, rows.len()]`).
#[derive(Debug)]
pub struct Product<'a> {
    /// The weight, `[out, in]`.
    pub w: &'a QMatrix,
    /// The output features to compute.
    pub rows: std::ops::Range<usize>,
    /// The result, `[m, rows.len()]`.
    pub y: &'a mut [f32],
}

/// How one product is computed: in units of `unit` weight rows (a 16-row tile on the tile
/// kernel, one row otherwise), each always whole, so that a feature's value does not depend
/// on the range asked for.
struct Plan<'a> {
    w: &'a QMatrix,
    tiles: bool,
    unit: usize,
    first_unit: usize,
    end_unit: usize,
    /// Units written straight into y: one activation row and a range that starts on a unit
    /// (y is then the units' outputs back to back; a partial last unit goes through a copy).
    direct: bool,
}

impl Plan<'_> {
    fn units(&self) -> usize {
        self.end_unit - self.first_unit
    }

    /// Copies the asked-for features out of `buffer` (`[units, m, unit]`) into `p.y`.
    fn scatter(&self, buffer: &[f32], m: usize, p: &mut Product<'_>) {
        let (rows, out) = (&p.rows, p.rows.len());
        for (i, unit) in buffer.chunks_exact(m * self.unit).enumerate() {
            // The features of this unit inside `rows`, as offsets into the unit and into y.
            let base = (self.first_unit + i) * self.unit;
            let (start, end) = (base.max(rows.start), (base + self.unit).min(rows.end));
            let (from, to) = (start - base, start - rows.start);
            for r in 0..m {
                p.y[r * out + to..][..end - start]
                    .copy_from_slice(&unit[r * self.unit + from..][..end - start]);
            }
        }
    }
}

/// A run of consecutive units of one product: `out` is `[units, unit]` of y (direct) or
/// `[units, m, unit]` of the product's buffer.
struct Task<'a> {
    product: usize,
    first_unit: usize,
    out: &'a mut [f32],
}

impl Kernels {
    /// The checks of [`Kernels::matmul_rows`] for one product.
    fn check(&self, p: &Product<'_>, x: &QActs) -> Result<()> {
        let (w, rows, m) = (p.w, &p.rows, x.rows());
        if rows.start >= rows.end || rows.end > w.rows() {
            return Err(KernelError::Shape {
                what: "weight rows asked for (end; at most the weight's rows, after the start)",
                expected: w.rows(),
                found: rows.end,
            });
        }
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
        if p.y.len() != m * rows.len() {
            return Err(KernelError::Shape {
                what: "output values (rows × out)",
                expected: m * rows.len(),
                found: p.y.len(),
            });
        }
        Ok(())
    }

    fn plan<'a>(&self, p: &Product<'a>, m: usize) -> Plan<'a> {
        let tiles = self.runs_tiles(p.w);
        let unit = if tiles { TILE } else { 1 };
        Plan {
            w: p.w,
            tiles,
            unit,
            first_unit: p.rows.start / unit,
            end_unit: p.rows.end.div_ceil(unit),
            direct: m == 1 && p.rows.start.is_multiple_of(unit),
        }
    }

    /// Computes a task's units: a tile of 16 weight rows (`[m, 16]` out) or one weight row
    /// (`[m]` out) each.
    fn run_task(&self, plan: &Plan<'_>, task: Task<'_>, x: &QActs) {
        let unit = |u: usize, out: &mut [f32]| {
            if plan.tiles {
                tile_rows(plan.w.ty(), plan.w.tile(u), x, out);
            } else {
                dot_rows(self.isa, plan.w, u, x, out);
            }
        };
        if plan.direct {
            for (i, out) in task.out.chunks_mut(plan.unit).enumerate() {
                if out.len() == plan.unit {
                    unit(task.first_unit + i, out);
                } else {
                    // The last unit reaches past the range: whole into a copy.
                    let mut whole = [0f32; TILE];
                    unit(task.first_unit + i, &mut whole[..plan.unit]);
                    out.copy_from_slice(&whole[..out.len()]);
                }
            }
        } else {
            for (i, out) in task.out.chunks_exact_mut(x.rows() * plan.unit).enumerate() {
                unit(task.first_unit + i, out);
            }
        }
    }
}

/// One tile of 16 weight rows of type `ty` against every activation row: `out` is `[m, 16]`.
fn tile_rows(ty: WeightType, tile: &[u8], x: &QActs, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: only `run_task` calls this, for a plan on the tile kernel, which runs only where
    // the kernels' isa is Avx512 (`runs_tiles`); `Kernels::with_isa` admits that only where
    // `x86::avx512_available()` said the CPU has AVX2, FMA, F16C, AVX-512 F, BW and VNNI.
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
