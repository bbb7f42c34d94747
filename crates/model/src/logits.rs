//! What a forward pass returns: logits `[rows, vocab]`, held where they were computed. The
//! packed CPU path computes them into host memory and hands that `Vec` over as it is; the burn
//! paths (f32, GPU blocks) leave a tensor on the device until the caller reads it, without
//! blocking where it must not (the browser).

use burn::tensor::Tensor;

use crate::error::{ModelError, Result};
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
use crate::gpu::{GpuChain, GpuLogits};

/// Logits `[rows, vocab]` of one forward pass.
#[derive(Debug, Clone)]
pub struct Logits(Inner);

#[derive(Debug, Clone)]
enum Inner {
    /// Row-major `[rows, vocab]` on the host (the CPU back-end).
    Cpu {
        values: Vec<f32>,
        rows: usize,
        vocab: usize,
    },
    /// `[1, rows, vocab]` on the reference back-end's device (boxed: a burn tensor is larger
    /// than a `Vec`).
    Reference(Box<Tensor<3>>),
    /// `[rows, vocab]` in a GPU buffer of the GPU back-end, with its summary kernel.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    Gpu(Box<GpuLogits>),
}

/// What greedy verification needs of a row of logits (`mars_verify::RowSummary`: its best two
/// tokens, the sum of exp(z − z1) and the first NaN or +inf). The GPU path computes it on the
/// device ([`Logits::summaries_async`]), so a step reads back a few words a row instead of the
/// vocabulary.
pub use mars_verify::{RowSummary, RowTop, SampleKeys};

/// Row summaries a speculative step keeps on the GPU until one read at its end (the GPU path
/// only: [`Llama::summary_chain`](crate::Llama::summary_chain)). A draft model writes each
/// row's summary here ([`Logits::summarize_into`]) and its next forward takes that row's token
/// on the device ([`Llama::forward_linked`](crate::Llama::forward_linked)) — its best id, or
/// its draw when sampling ([`RowSummary::token`]); the target takes all the drafts the same way
/// and writes its rows' summaries after them, so the host learns the drafts and the target's
/// verdict from one read ([`SummaryChain::read`]).
#[derive(Debug, Clone)]
pub struct SummaryChain(ChainInner);

#[derive(Debug, Clone)]
enum ChainInner {
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    Gpu(GpuChain),
    /// Never made: no path but the GPU's keeps summaries on a device.
    #[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
    #[allow(dead_code)] // the type must exist for the engine, which never gets one here
    None(std::convert::Infallible),
}

/// A forward's place in a [`SummaryChain`]: its last `ids` rows take as their token the token
/// ([`RowSummary::token`]) of chain rows `ids_from..` (their ids in the forward's input are
/// placeholders), and its logit rows' summaries go to chain rows `summaries_at..` when
/// [`Logits::summarize_into`] is called.
#[derive(Debug, Clone, Copy)]
pub struct ChainLink<'a> {
    /// The chain.
    pub chain: &'a SummaryChain,
    /// Chain row whose token the first linked row takes.
    pub ids_from: usize,
    /// Rows (the forward's last) whose ids come from the chain.
    pub ids: usize,
    /// Chain row of the first logit row's summary.
    pub summaries_at: usize,
}

impl SummaryChain {
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub(crate) fn gpu(c: GpuChain) -> Self {
        Self(ChainInner::Gpu(c))
    }

    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub(crate) fn inner(&self) -> &GpuChain {
        match &self.0 {
            ChainInner::Gpu(c) => c,
        }
    }

    /// Rows it holds.
    pub fn rows(&self) -> usize {
        match &self.0 {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            ChainInner::Gpu(c) => c.rows(),
            #[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
            ChainInner::None(n) => match *n {},
        }
    }

    /// Every row's summary (rows never written read as zeros): one read, without blocking.
    ///
    /// # Errors
    /// [`ModelError::Readback`] or the kernels' error when the device cannot return the data.
    pub async fn read(&self) -> Result<Vec<RowSummary>> {
        match &self.0 {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            ChainInner::Gpu(c) => c.read().await,
            #[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
            ChainInner::None(n) => match *n {},
        }
    }
}

impl Logits {
    pub(crate) fn cpu(values: Vec<f32>, rows: usize, vocab: usize) -> Self {
        debug_assert_eq!(values.len(), rows * vocab);
        Self(Inner::Cpu {
            values,
            rows,
            vocab,
        })
    }

    pub(crate) fn reference(t: Tensor<3>) -> Self {
        Self(Inner::Reference(Box::new(t)))
    }

    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub(crate) fn gpu(l: GpuLogits) -> Self {
        Self(Inner::Gpu(Box::new(l)))
    }

    /// Each row's [`RowSummary`], computed where the logits are and read back small — `None`
    /// where that would not save a read (the logits are already in host memory, or on the
    /// f32 burn path), so the caller reads the rows instead. With `sample`, each row also
    /// carries its Gumbel-max draw at that temperature and its sum is taken there
    /// (`mars_verify::noise`), keyed by the seed and the position the row predicts (one past
    /// its input token's).
    ///
    /// # Errors
    /// [`ModelError::Readback`] or the kernels' error when the device cannot return the data,
    /// or for fewer positions than rows.
    #[cfg_attr(
        not(any(feature = "wgpu", feature = "webgpu")),
        allow(unused_variables)
    )]
    pub async fn summaries_async(
        &self,
        sample: Option<&SampleKeys>,
    ) -> Result<Option<Vec<RowSummary>>> {
        match &self.0 {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Inner::Gpu(l) => l.summaries_async(sample).await.map(Some),
            _ => Ok(None),
        }
    }

    /// Each row's best `c` values among its first `cols` (ids at or past `cols` are never
    /// ranked) with the sum of exp((z − z1) / `temperature`), computed where the logits are
    /// and read back small (`2c + 3` words a row) — `None` where that would not save a read
    /// (host memory, the f32 burn path) or cannot be done there (`c` past
    /// `mars_kernels::gpu::MAX_TOP`, a temperature whose inverse is not finite), so the caller
    /// reads the rows instead. A tree drafter's frontier ([`mars_verify::Sampler::top_of`]).
    ///
    /// # Errors
    /// [`ModelError::Readback`] or the kernels' error when the device cannot return the data.
    #[cfg_attr(
        not(any(feature = "wgpu", feature = "webgpu")),
        allow(unused_variables)
    )]
    pub async fn top_async(
        &self,
        c: usize,
        cols: usize,
        temperature: f32,
    ) -> Result<Option<Vec<RowTop>>> {
        match &self.0 {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Inner::Gpu(l) => l.top_async(c, cols, temperature).await,
            _ => Ok(None),
        }
    }

    /// The rows as a top-`k` sampler sees them, reduced where the logits are
    /// ([`Logits::top_async`], `2k + 3` words a row read back): `[rows, cols]` values, each row's best `k` of its first
    /// `cols` kept and every other value −inf (a NaN or +inf kept where it was, so the row is
    /// refused as it would be whole), and each row's Σ exp(z − z1) over those `cols` (for its
    /// log-probabilities). Top-k, and top-p after it, keep nothing outside a row's best k, so
    /// what the sampler and the verifier compute from these rows is what they compute from the
    /// whole ones, bit for bit (ties at the k-th value broken by id, as theirs are). `None`
    /// where that would not save a read or cannot be done there (as [`Logits::top_async`]).
    ///
    /// # Errors
    /// [`ModelError::Readback`] or the kernels' error when the device cannot return the data.
    pub async fn top_k_rows_async(
        &self,
        k: usize,
        cols: usize,
    ) -> Result<Option<(Vec<f32>, Vec<f64>)>> {
        let (rows, stride) = self.dims();
        let cols = cols.min(stride);
        let Some(tops) = self.top_async(k, cols, 1.0).await? else {
            return Ok(None);
        };
        let mut values = vec![f32::NEG_INFINITY; rows * cols]; // [rows, cols]
        let mut sums = Vec::with_capacity(rows);
        for (row, top) in values.chunks_exact_mut(cols.max(1)).zip(&tops) {
            for &(id, z) in top.best.iter().chain(&top.bad) {
                if let Some(v) = row.get_mut(id as usize) {
                    *v = z;
                }
            }
            sums.push(top.sum);
        }
        Ok(Some((values, sums)))
    }

    /// Enqueues each row's [`RowSummary`] into `chain`, at the row the forward's
    /// [`ChainLink`] named (row 0 for a forward without one), each row drawn where `sample`
    /// says (as [`Logits::summaries_async`]); nothing is read.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for logits not on the GPU path; the kernels' error for a
    /// chain too short or fewer positions than rows.
    #[cfg_attr(
        not(any(feature = "wgpu", feature = "webgpu")),
        allow(unused_variables)
    )]
    pub fn summarize_into(&self, chain: &SummaryChain, sample: Option<&SampleKeys>) -> Result<()> {
        match &self.0 {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Inner::Gpu(l) => l.summarize_into(chain.inner(), sample),
            _ => Err(ModelError::Unsupported(
                "row summaries kept on a device: only the GPU path has them".into(),
            )),
        }
    }

    /// `(rows, vocab)`.
    pub fn dims(&self) -> (usize, usize) {
        match &self.0 {
            Inner::Cpu { rows, vocab, .. } => (*rows, *vocab),
            Inner::Reference(t) => {
                let [_, rows, vocab] = t.dims();
                (rows, vocab)
            }
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Inner::Gpu(l) => l.dims(),
        }
    }

    /// The values, row-major `[rows, vocab]`, waiting for the device without blocking
    /// (required in the browser, where a synchronous readback traps).
    ///
    /// # Errors
    /// [`ModelError::Readback`] when the device cannot return the data.
    pub async fn read_async(self) -> Result<Vec<f32>> {
        match self.0 {
            Inner::Cpu { values, .. } => Ok(values),
            Inner::Reference(t) => read_f32_async(*t).await,
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Inner::Gpu(l) => l.read_async().await,
        }
    }

    /// The values, row-major `[rows, vocab]` (natively; the browser uses
    /// [`Logits::read_async`]).
    ///
    /// # Errors
    /// [`ModelError::Readback`] when the device cannot return the data.
    pub fn read(self) -> Result<Vec<f32>> {
        match self.0 {
            Inner::Cpu { values, .. } => Ok(values),
            Inner::Reference(t) => read_f32(*t),
            #[cfg(all(any(feature = "wgpu", feature = "webgpu"), not(target_family = "wasm")))]
            Inner::Gpu(l) => l.read(),
            #[cfg(all(any(feature = "wgpu", feature = "webgpu"), target_family = "wasm"))]
            Inner::Gpu(_) => Err(ModelError::Readback(
                "a blocking read in the browser: use read_async".into(),
            )),
        }
    }

    /// Waits until the device has computed them, reading back one value (so that a timing
    /// covers the work, not just its submission).
    ///
    /// # Errors
    /// [`ModelError::Readback`] when the device cannot return the data.
    pub async fn wait(self) -> Result<()> {
        match self.0 {
            Inner::Cpu { .. } => Ok(()),
            Inner::Reference(t) => read_f32_async(t.slice([0..1, 0..1, 0..1])).await.map(drop),
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Inner::Gpu(l) => l.wait().await,
        }
    }
}

/// Reads a float tensor back as a `Vec<f32>` (natively; the browser uses [`read_f32_async`]).
///
/// # Errors
/// [`ModelError::Readback`] when the device cannot return the data.
pub fn read_f32<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    let data = t
        .try_into_data()
        .map_err(|e| ModelError::Readback(format!("{e:?}")))?;
    data.try_into_vec::<f32>()
        .map_err(|e| ModelError::Readback(format!("{e:?}")))
}

/// Reads a float tensor back without blocking (required in the browser, where a synchronous
/// readback traps).
///
/// # Errors
/// [`ModelError::Readback`] when the device cannot return the data.
pub async fn read_f32_async<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    let data = t
        .into_data_async()
        .await
        .map_err(|e| ModelError::Readback(format!("{e:?}")))?;
    data.try_into_vec::<f32>()
        .map_err(|e| ModelError::Readback(format!("{e:?}")))
}
