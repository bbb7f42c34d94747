//! What a forward pass returns: logits `[rows, vocab]`, held where they were computed. The
//! packed CPU path computes them into host memory and hands that `Vec` over as it is; the burn
//! paths (f32, GPU blocks) leave a tensor on the device until the caller reads it, without
//! blocking where it must not (the browser).

use burn::tensor::Tensor;

use crate::error::{ModelError, Result};

/// Logits `[rows, vocab]` of one forward pass.
#[derive(Debug, Clone)]
pub struct Logits(Inner);

#[derive(Debug, Clone)]
enum Inner {
    /// Row-major `[rows, vocab]` on the host (the packed CPU path).
    Host {
        values: Vec<f32>,
        rows: usize,
        vocab: usize,
    },
    /// `[1, rows, vocab]` on the model's device (boxed: a burn tensor is larger than a `Vec`).
    Device(Box<Tensor<3>>),
    /// `[rows, vocab]` in a GPU buffer of the GPU path, with its summary kernel.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    Gpu(Box<crate::gpu::GpuLogits>),
}

/// What greedy verification needs of a row of logits (`mars_verify::RowSummary`: its best two
/// tokens, the sum of exp(z − z1) and the first NaN or +inf). The GPU path computes it on the
/// device ([`Logits::top2_async`]), so a greedy step reads back a few words a row instead of the
/// vocabulary.
pub use mars_verify::RowSummary;

impl Logits {
    pub(crate) fn host(values: Vec<f32>, rows: usize, vocab: usize) -> Self {
        debug_assert_eq!(values.len(), rows * vocab);
        Self(Inner::Host {
            values,
            rows,
            vocab,
        })
    }

    pub(crate) fn device(t: Tensor<3>) -> Self {
        Self(Inner::Device(Box::new(t)))
    }

    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub(crate) fn gpu(l: crate::gpu::GpuLogits) -> Self {
        Self(Inner::Gpu(Box::new(l)))
    }

    /// Each row's [`RowSummary`], computed where the logits are and read back small — `None`
    /// where that would not save a read (the logits are already in host memory, or on the
    /// f32 burn path), so the caller reads the rows instead.
    ///
    /// # Errors
    /// [`ModelError::Readback`] or the kernels' error when the device cannot return the data.
    pub async fn top2_async(&self) -> Result<Option<Vec<RowSummary>>> {
        match &self.0 {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Inner::Gpu(l) => l.top2_async().await.map(Some),
            _ => Ok(None),
        }
    }

    /// `(rows, vocab)`.
    pub fn dims(&self) -> (usize, usize) {
        match &self.0 {
            Inner::Host { rows, vocab, .. } => (*rows, *vocab),
            Inner::Device(t) => {
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
            Inner::Host { values, .. } => Ok(values),
            Inner::Device(t) => read_f32_async(*t).await,
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
            Inner::Host { values, .. } => Ok(values),
            Inner::Device(t) => read_f32(*t),
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
            Inner::Host { .. } => Ok(()),
            Inner::Device(t) => read_f32_async(t.slice([0..1, 0..1, 0..1])).await.map(drop),
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
