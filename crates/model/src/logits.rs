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
}

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

    /// `(rows, vocab)`.
    pub fn dims(&self) -> (usize, usize) {
        match &self.0 {
            Inner::Host { rows, vocab, .. } => (*rows, *vocab),
            Inner::Device(t) => {
                let [_, rows, vocab] = t.dims();
                (rows, vocab)
            }
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
