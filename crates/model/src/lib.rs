//! The Llama-family transformer for mars on burn 0.22: one model code path for the CPU (flex),
//! native GPUs (wgpu on Vulkan/Metal/DX12) and the browser (WebGPU).
//!
//! - [`LlamaConfig`]: hyper-parameters with `validate()`.
//! - [`Llama`]: on one [`WeightPath`]: on the CPU, matrices kept as packed GGUF blocks run by
//!   mars-kernels with a row-independent forward pass ([`WeightPath::CpuPacked`]); on wgpu /
//!   WebGPU, matrices kept as GGUF blocks in GPU buffers run by mars-kernels' WGSL kernels, the
//!   rest burn ops ([`WeightPath::GpuBlocks`]); or every weight dequantized to f32 burn tensors
//!   (the reference path, [`WeightPath::F32`]). `forward` returns logits at every position.
//! - [`KvCache`]: preallocated, with a cursor and O(1) `truncate`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cache;
mod config;
mod error;
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
mod gpu;
mod host;
mod llama;
mod load;
pub mod tiny;
pub mod weights;

pub use burn::tensor::{Device, Tensor};
pub use cache::KvCache;
pub use config::{Architecture, LlamaConfig, RopeStyle};
pub use error::{ModelError, Result};
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
pub use gpu::{blocks_unsupported, subgroup_lanes};
pub use llama::Llama;
pub use load::{DeviceLimits, LoadOptions, WeightPath};

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
