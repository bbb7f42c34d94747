//! Quantized matrix kernels for mars on the CPU, with no burn dependency, so that they can be
//! tested, benchmarked and fuzzed alone.
//!
//! Weights stay in their GGUF blocks ([`QMatrix`]); activations are quantized once per call to
//! 8 bits ([`QActs`]: per 32 values for the legacy types, per 256 for K-quants; 16-bit float
//! weights meet the f32 values instead);
//! [`Kernels::matmul`] computes `y[m, out] = x[m, in] · W[out, in]ᵀ` for m ≤ 16 with integer dot
//! products, reading each weight block once for all m rows, on a persistent thread pool, with a
//! portable scalar micro-kernel and SIMD ones (AVX2, AVX-VNNI, AVX-512 chosen at run time;
//! aarch64's NEON; WebAssembly's simd128 where the module is built with it).
//!
//! **Error bound.** Against the exact product over the dequantized weights, the only rounding
//! that matters is the activations': a group of values sharing one scale (32 values for the
//! legacy types, 256 for K-quants: [`WeightType::act_group`]) with largest magnitude a is
//! quantized with step a/127, so each value moves by at most a/254 and output o moves by at
//! most Σ_groups (a_g / 254) · Σ_{i ∈ g} |W[o, i]|, plus f32 accumulation (relative ~1e-6 of
//! Σ|W·x|). The tests hold every kernel, type and m to exactly that bound (16-bit floats: the
//! f32 accumulation term alone).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod activation;
mod attention;
mod block;
mod counts;
mod error;
#[cfg(feature = "gpu")]
pub mod gpu;
mod kernels;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod neon;
mod qmatrix;
mod quantize;
mod scalar;
mod tiles;
mod units;
#[cfg(any(
    all(target_arch = "wasm32", target_feature = "simd128"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
mod v128;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm;
#[cfg(target_arch = "x86_64")]
mod x86;

/// What one thread keeps at most in a GPU pass's output buffers between passes (logits, their
/// summaries, top rows: one slot for each size a run asks for, so a run with passes of 1 to
/// 32 rows over a 152k vocabulary would keep 321 MB without it); a pass asking for more gets
/// a buffer of its own. Here, not in `gpu`, because a load's memory check counts it on every
/// build.
pub const OUTPUTS_KEPT_BYTES: u64 = 256 << 20;

pub use attention::{Heads, KvType};
pub use block::{BLOCK, WeightType};
pub use counts::{GpuCounts, Kind as GpuKernelKind, gpu_counts};
pub use error::{KernelError, Result};
pub use kernels::{Isa, Kernels, MAX_ROWS, Product};
pub use qmatrix::{Layout, QMatrix};
pub use quantize::{Forms, QActs};
pub use units::{Splits, UnitShape, UnitTile};
