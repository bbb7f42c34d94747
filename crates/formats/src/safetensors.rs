//! HF safetensors: tensors by name as f32, read with the `safetensors` crate (which bounds-checks
//! its header and offsets). Names and layout stay HF's; mapping them onto a model is the model
//! crate's job.

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use crate::error::{FormatError, Result};

/// A parsed safetensors file borrowing its bytes.
#[derive(Debug)]
pub struct SafetensorsFile<'a> {
    inner: SafeTensors<'a>,
}

impl<'a> SafetensorsFile<'a> {
    /// Parses the header and checks every tensor's byte range.
    ///
    /// # Errors
    /// [`FormatError::Safetensors`] with the crate's message for a malformed file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let inner =
            SafeTensors::deserialize(bytes).map_err(|e| FormatError::Safetensors(e.to_string()))?;
        Ok(Self { inner })
    }

    /// Tensor names.
    pub fn names(&self) -> Vec<&str> {
        self.inner.names()
    }

    /// Whether the file holds a tensor of that name (reads no data).
    pub fn contains(&self, name: &str) -> bool {
        self.inner.tensor(name).is_ok()
    }

    /// A tensor's shape (outermost first) and values as f32, or `None` if absent.
    ///
    /// # Errors
    /// [`FormatError::Safetensors`] for a dtype other than F32, F16 or BF16.
    pub fn tensor_f32(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let Ok(view) = self.inner.tensor(name) else {
            return Ok(None);
        };
        let data = view.data();
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(FormatError::Safetensors(format!(
                    "tensor {name:?} has dtype {other:?} (supported: F32, F16, BF16)"
                )));
            }
        };
        Ok(Some((view.shape().to_vec(), values)))
    }
}
