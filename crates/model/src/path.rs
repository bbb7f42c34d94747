//! How a model is placed: the back-end its matrices run on ([`WeightPath`], resolved once per
//! load by the engine) and what the device can hold ([`DeviceLimits`]). A leaf: the back-ends
//! and the loader read it, it reads nothing of the crate.

pub use mars_kernels::KvType;

/// How a model's matrices are stored and multiplied: resolved once per load (the engine's
/// `OpenDevice::weights` turns a user's choice and the device into one), never re-derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(tag = "path", rename_all = "snake_case")]
pub enum WeightPath {
    /// Every weight dequantized to f32 burn tensors on any device: the reference the packed
    /// paths are measured against (4–8× the memory; on the CPU a row's logits then depend on
    /// the batch in the last bits, since burn's matmuls sum in another order for another shape).
    #[default]
    F32,
    /// On the CPU: matrices of the types mars-kernels multiplies (Q8_0, Q4_0, Q4_1, Q5_0,
    /// Q5_1, Q4_K, Q5_K, Q6_K, F16, BF16) kept as stored (others converted to Q8_0), run on
    /// this many threads by a forward pass whose rows do not depend on the batch.
    CpuPacked {
        /// Threads of the kernels' pool.
        threads: usize,
    },
    /// On wgpu / WebGPU: matrices (and the embedding) kept as GGUF blocks in GPU buffers, run
    /// by mars-kernels' WGSL kernels (F32 tensors stay f32; types without a kernel are
    /// converted once to Q8_0), as are norms, RoPE, attention and the logits' reductions.
    GpuBlocks {
        /// The adapter's smallest subgroup where it offers subgroups (wgpu's `SUBGROUP`), so
        /// that the kernels' partial sums meet through shuffles (the same bits as through
        /// workgroup memory, fewer barriers); `None`: as
        /// `mars_kernels::gpu::Reduce::detect` finds.
        subgroups: Option<u32>,
        /// How the KV cache stores keys and values (f16 by default: half the memory).
        #[serde(serialize_with = "kv_name")]
        kv: KvType,
    },
}

impl WeightPath {
    /// A short name for reports and journals: `f32`, `packed` or `gpu_blocks`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::CpuPacked { .. } => "packed",
            Self::GpuBlocks { .. } => "gpu_blocks",
        }
    }

    /// The GPU path's KV cache type (`None` on the other paths: their caches are f32).
    pub fn kv(self) -> Option<KvType> {
        match self {
            Self::GpuBlocks { kv, .. } => Some(kv),
            _ => None,
        }
    }

    /// The packed CPU kernels' threads (`None` on the other paths).
    pub fn threads(self) -> Option<usize> {
        match self {
            Self::CpuPacked { threads } => Some(threads),
            _ => None,
        }
    }
}

fn kv_name<S: serde::Serializer>(kv: &KvType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kv.name())
}

/// What wgpu's first adapter is, as the device choice reads it (`first_adapter` finds it where
/// wgpu is built in; any build can name one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterFacts {
    /// The adapter's name and API, e.g. "NVIDIA H200 (Vulkan)".
    pub name: String,
    /// Whether it runs on the CPU (lavapipe, llvmpipe, SwiftShader, WARP: wgpu's
    /// `DeviceType::Cpu`).
    pub software: bool,
    /// Why the block kernels cannot run on it (`blocks_unsupported`), where they cannot.
    pub blocks_unsupported: Option<&'static str>,
}

/// What a device can hold, checked before anything is allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceLimits {
    /// The device's largest buffer (wgpu's `max_storage_buffer_binding_size`); `None` on the
    /// CPU.
    pub max_buffer_bytes: Option<u64>,
    /// Memory a load may take in all, weights, tables, a run's KV cache and its step buffers
    /// ([`crate::MemoryNeeds`]): available RAM for the CPU, the adapter's free memory where
    /// its driver reports it (NVIDIA through NVML, AMD through sysfs); browsers and other
    /// adapters do not report device memory, so `None` there.
    pub max_total_bytes: Option<u64>,
}

/// Options for `Llama::from_gguf`: the weight path, the device's limits and the context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// How the matrices are stored and multiplied.
    pub weights: WeightPath,
    /// What the device can hold.
    pub limits: DeviceLimits,
    /// The longest prompt plus generation a run may hold (at most the file's context length,
    /// which `None` takes): it sizes the RoPE tables, bounds every cache, and is what the memory
    /// check reserves a KV cache and step buffers for.
    pub context: Option<usize>,
}

impl LoadOptions {
    /// `weights` with no limits checked and the file's context (tests, examples).
    pub fn with_weights(weights: WeightPath) -> Self {
        Self {
            weights,
            limits: DeviceLimits::default(),
            context: None,
        }
    }
}
