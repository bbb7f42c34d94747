//! The Llama-family transformer for mars on burn 0.22: one model code path for the CPU (flex),
//! native GPUs (wgpu on Vulkan/Metal/DX12) and the browser (WebGPU).
//!
//! - [`LlamaConfig`]: hyper-parameters with `validate()`.
//! - [`Llama`]: on one [`WeightPath`]: on the CPU, matrices kept as packed GGUF blocks run by
//!   mars-kernels with a row-independent forward pass ([`WeightPath::CpuPacked`]); on wgpu /
//!   WebGPU, matrices kept as GGUF blocks in GPU buffers and every layer run by mars-kernels'
//!   fused WGSL kernels, a few launches a layer ([`WeightPath::GpuBlocks`]); or every weight
//!   dequantized to f32 burn tensors
//!   (the reference path, [`WeightPath::F32`]). `forward` returns [`Logits`] at every position (host memory on the packed path).
//! - [`KvCache`]: preallocated, with a cursor and O(1) `truncate`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Leaves: what the back-ends and the front read.
mod backend;
mod config;
mod error;
mod path;
mod tensors;
// The three back-ends, each owning its weights, cache, logits and forward pass.
mod cpu;
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
mod gpu;
mod reference;
// The front: the model a caller holds, its cache and logits, and loading.
mod cache;
mod llama;
mod load;
mod logits;
pub mod tiny;
pub mod weights;

pub use backend::Reads;
/// What opening a wgpu device gives (burn's, CubeCL's).
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
pub use burn::backend::wgpu::WgpuSetup;
pub use burn::tensor::{Device, Tensor};
pub use cache::KvCache;
pub use config::{Architecture, LlamaConfig, RopeStyle};
pub use error::{ModelError, Result};
/// wgpu's no-op backend as a card (`open_wgpu` takes it where `WGPU_NOOP_BACKEND=1`): the
/// host's side of a card's launches.
#[cfg(all(feature = "wgpu", not(target_family = "wasm")))]
pub use gpu::noop_card;
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
pub use gpu::{
    FormTime, GroupForm, GroupTiming, KEEP_MARGIN, PrefillTime, SUBMIT_EVERY_CPU, SUBMIT_EVERY_GPU,
    adapter_identity, adapter_software, blocks_unsupported, first_adapter, open_wgpu,
    subgroup_lanes, submit_every, submit_every_on,
};
pub use llama::{Llama, PREFILL_ROWS, TILES_ABOVE};
pub use load::MemoryNeeds;
pub use logits::{ChainLink, Logits, RowSummary, SummaryChain, read_f32, read_f32_async};
/// The blocks and subgroups of a prefill tile on the matrix units.
pub use mars_kernels::UnitShape;
/// The shape of an adapter's matrix units where it has what `TileForm::Units` needs.
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
pub use mars_kernels::gpu::adapter_matrix_units;
/// A matrix group's form and the tuning table (`Llama::time_forms`, `Llama::with_forms`).
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
pub use mars_kernels::gpu::{
    Acts, EVICT_BYTES, Fan, Form, MatVec, PREFILL_ROWS_TIMED, Team, TileForm, Tuned, Tuning,
    tiles_forced,
};
/// What the GPU path's kernels have asked of the device so far (zeros without it).
pub use mars_kernels::{GpuCounts, GpuKernelKind, gpu_counts};
pub use path::{AdapterFacts, DeviceLimits, KvType, LoadOptions, WeightPath};
