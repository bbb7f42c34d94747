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

use crate::block::{QMatrix, WeightType};
use crate::error::{KernelError, Result};
use crate::quantize::{Forms, QActs};
use crate::scalar;

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

    /// The activation forms the micro-kernel reads for a `ty` matrix: quantize with these
    /// ([`QActs::quantize_for`]) to build nothing else.
    pub fn forms(&self, ty: WeightType) -> Forms {
        let k = matches!(ty, WeightType::Q4K | WeightType::Q5K | WeightType::Q6K);
        Forms {
            blocks: !k && !ty.is_float(),
            k: k && self.isa != Isa::Avx512,
            lanes: k && self.isa == Isa::Avx512,
            float: ty.is_float(),
        }
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
        if !x.forms().covers(self.forms(w.ty())) {
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

/// One weight row against every activation row with the chosen micro-kernel.
fn dot_rows(isa: Isa, w: &QMatrix, row: usize, x: &QActs, out: &mut [f32]) {
    match isa {
        Isa::Scalar => scalar::dot_rows(w.ty(), w.row(row), x, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Kernels::with_isa` admits Avx2 only where `x86::available()` said the CPU
        // has AVX2, FMA and F16C.
        Isa::Avx2 => unsafe { crate::x86::dot_rows(w.ty(), w.row(row), x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Kernels::with_isa` admits AvxVnni only where `x86::vnni_available()` said
        // the CPU has AVX2, FMA, F16C and AVX-VNNI.
        Isa::AvxVnni => unsafe { crate::x86::dot_rows_vnni(w.ty(), w.row(row), x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Kernels::with_isa` admits Avx512 only where `x86::avx512_available()` said
        // the CPU has AVX2, FMA, F16C, AVX-512 F, BW and VNNI.
        Isa::Avx512 => unsafe { crate::x86::dot_rows_avx512(w.ty(), w.row(row), x, out) },
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512 => scalar::dot_rows(w.ty(), w.row(row), x, out),
    }
}
