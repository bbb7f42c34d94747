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

use crate::block::WeightType;
use crate::error::{KernelError, Result};
use crate::qmatrix::{Layout, QMatrix};
pub use crate::quantize::MAX_ROWS;
use crate::quantize::{Forms, QActs};
use crate::scalar;
use crate::tiles::TILE;

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
    /// WebAssembly's 128-bit SIMD (`v128.rs` in `wasm.rs`'s instructions, built where the
    /// target enables `simd128`): the scalar kernel's results bit for bit.
    Simd128,
    /// aarch64's NEON (`v128.rs` in `neon.rs`'s instructions, part of every aarch64 CPU): the
    /// scalar kernel's results bit for bit.
    Neon,
    /// NEON with ARMv8.2's dot-product extension (`sdot`), where the CPU has it: the same bits.
    NeonDot,
}

impl Isa {
    /// The kernel's name as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "AVX2",
            Self::AvxVnni => "AVX-VNNI",
            Self::Avx512 => "AVX-512",
            Self::Simd128 => "simd128",
            Self::Neon => "NEON",
            Self::NeonDot => "NEON-dotprod",
        }
    }

    /// The fastest kernel this CPU runs, or the one the environment's `MARS_CPU_KERNEL` names
    /// (`scalar`, `avx2`, `avx-vnni`, `avx512`, `neon`, `neon-dotprod`) where this CPU runs it: a reference knob, so that a
    /// native run can give the bits of the browser's CPU path (simd128 gives the scalar kernel's;
    /// AVX-512 sums its f32 steps in another order, and a greedy near-tie can go the other way).
    /// Read once; another value, or a kernel this CPU lacks: the fastest.
    pub fn detect() -> Self {
        static NAMED: std::sync::OnceLock<Option<Isa>> = std::sync::OnceLock::new();
        let available = Self::available();
        let named = *NAMED.get_or_init(|| {
            let name = std::env::var("MARS_CPU_KERNEL").ok()?;
            available.iter().copied().find(|isa| {
                isa.name()
                    .eq_ignore_ascii_case(&name.replace("avx512", "avx-512"))
            })
        });
        named.unwrap_or_else(|| available.into_iter().last().unwrap_or(Self::Scalar))
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
        // Fixed when the module is built: a wasm module with SIMD instructions does not load
        // where they are missing, and NEON is part of the aarch64 targets' baseline; NEON's
        // dot-product extension is not (ARMv8.2), so it is asked of the CPU.
        if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
            vec![Self::Scalar, Self::Simd128]
        } else if cfg!(all(target_arch = "aarch64", target_feature = "neon")) {
            let mut isas = vec![Self::Scalar, Self::Neon];
            if dotprod_available() {
                isas.push(Self::NeonDot);
            }
            isas
        } else {
            vec![Self::Scalar]
        }
    }
}

/// Whether the CPU has aarch64's dot-product extension (std's run-time detection).
#[cfg(target_arch = "aarch64")]
fn dotprod_available() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// No aarch64 dot-product extension off aarch64.
#[cfg(not(target_arch = "aarch64"))]
fn dotprod_available() -> bool {
    false
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
        let plans: Vec<Plan<'_>> = products.iter().map(|p| self.plan(p)).collect();
        // Several tasks per thread so that a slow core does not hold the call up, sized by
        // weight rows across all products.
        let total_rows: usize = plans.iter().map(|p| p.units() * p.unit).sum();
        let chunk_rows = total_rows.div_ceil(self.threads * 4).max(1);
        let mut tasks = Vec::new();
        for (i, (p, plan)) in products.iter_mut().zip(&plans).enumerate() {
            let units_per_task = (chunk_rows / plan.unit).max(1);
            let out = p.rows.len();
            // Each task writes its own columns of every row of y: the rows are cut at the
            // tasks' column boundaries, so the tasks hold disjoint slices.
            // (Arrays, not vectors: a decode step makes ~1,500 tasks.)
            let mut rows: [&mut [f32]; MAX_ROWS] = Default::default();
            for (slot, row) in rows.iter_mut().zip(p.y.chunks_exact_mut(out)) {
                *slot = row;
            }
            let mut first_unit = plan.first_unit;
            while first_unit < plan.end_unit {
                let end_unit = (first_unit + units_per_task).min(plan.end_unit);
                let cols = plan.columns(first_unit, end_unit);
                let pieces = std::array::from_fn(|r| {
                    let row = std::mem::take(&mut rows[r]);
                    if row.is_empty() {
                        return row; // past the m rows
                    }
                    let (piece, rest) = row.split_at_mut(cols.len());
                    rows[r] = rest;
                    piece
                });
                tasks.push(Task {
                    product: i,
                    first_unit,
                    end_unit,
                    first_col: cols.start,
                    pieces,
                });
                first_unit = end_unit;
            }
        }
        let run = |task: Task<'_>| self.run_task(&plans[task.product], task, x);
        match &self.pool {
            Some(pool) if tasks.len() > 1 => {
                pool.install(|| tasks.into_par_iter().for_each(run));
            }
            _ => tasks.into_iter().for_each(run),
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
    /// The features asked for.
    rows: std::ops::Range<usize>,
    first_unit: usize,
    end_unit: usize,
}

impl Plan<'_> {
    fn units(&self) -> usize {
        self.end_unit - self.first_unit
    }

    /// The features of units `first_unit..end_unit` inside the range asked for, as columns
    /// of y.
    fn columns(&self, first_unit: usize, end_unit: usize) -> std::ops::Range<usize> {
        let start = (first_unit * self.unit).max(self.rows.start);
        let end = (end_unit * self.unit).min(self.rows.end);
        start - self.rows.start..end - self.rows.start
    }
}

/// A run of consecutive units of one product, and where their results go: `pieces[r]` is
/// row r of y from column `first_col` on, as many columns as the units have inside the
/// product's range.
struct Task<'a> {
    product: usize,
    first_unit: usize,
    end_unit: usize,
    first_col: usize,
    /// Rows past m are empty.
    pieces: [&'a mut [f32]; MAX_ROWS],
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

    fn plan<'a>(&self, p: &Product<'a>) -> Plan<'a> {
        let tiles = self.runs_tiles(p.w);
        let unit = if tiles { TILE } else { 1 };
        Plan {
            w: p.w,
            tiles,
            unit,
            rows: p.rows.clone(),
            first_unit: p.rows.start / unit,
            end_unit: p.rows.end.div_ceil(unit),
        }
    }

    /// Computes a task's units, a tile of 16 weight rows (`[m, 16]` results) or one weight
    /// row (`[m]`) each, and copies each unit's results into its columns of the rows of y
    /// while they are in cache: one row writes straight into y where the unit lies whole in
    /// it.
    fn run_task(&self, plan: &Plan<'_>, mut task: Task<'_>, x: &QActs) {
        let m = x.rows();
        let unit = |u: usize, out: &mut [f32]| {
            if plan.tiles {
                tile_rows(plan.w.ty(), plan.w.tile(u), x, out);
            } else {
                dot_rows(self.isa, plan.w, u, x, out);
            }
        };
        // [m, unit] results of one unit.
        let mut whole = [0f32; MAX_ROWS * TILE];
        for u in task.first_unit..task.end_unit {
            // This unit's features inside the range asked for: columns `cols` of y, values
            // `from..from + cols.len()` of the unit.
            let cols = plan.columns(u, u + 1);
            let from = plan.rows.start + cols.start - u * plan.unit;
            let at = cols.start - task.first_col..cols.end - task.first_col;
            if m == 1 && cols.len() == plan.unit {
                unit(u, &mut task.pieces[0][at]);
            } else {
                let whole = &mut whole[..m * plan.unit];
                unit(u, whole);
                for (r, piece) in task.pieces[..m].iter_mut().enumerate() {
                    piece[at.clone()].copy_from_slice(&whole[r * plan.unit + from..][..at.len()]);
                }
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
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => crate::v128::dot_rows::<crate::wasm::Simd128>(ty, row, x, out),
        // Never reached: `Kernels::with_isa` admits Simd128 only where it was built in.
        #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
        Isa::Simd128 => scalar::dot_rows(ty, row, x, out),
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        Isa::Neon => crate::v128::dot_rows::<crate::neon::Neon<false>>(ty, row, x, out),
        // `Kernels::with_isa` admits NeonDot only where `Isa::available` found the dot-product
        // extension, which `Neon<true>`'s `sdot` needs.
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        Isa::NeonDot => crate::v128::dot_rows::<crate::neon::Neon<true>>(ty, row, x, out),
        // Never reached: `Kernels::with_isa` admits Neon only where it was built in.
        #[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
        Isa::Neon | Isa::NeonDot => scalar::dot_rows(ty, row, x, out),
    }
}
