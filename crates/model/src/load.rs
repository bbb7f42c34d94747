//! Building a [`Llama`] from a weight source: shapes checked, memory checked before anything is
//! allocated, matrices laid out for the forward pass, RoPE tables computed. Over 800 lines: the
//! three weight paths' loaders and the checks made from a header alone (before any allocation)
//! read the same tensor table, and are kept beside it so that a check and its load cannot drift.

use std::sync::{Arc, Mutex, OnceLock};

use burn::tensor::{Device, Tensor, TensorData};
use mars_formats::{GgmlType, Gguf, SafetensorsFile};
use mars_kernels::{Kernels, QMatrix, WeightType};

use crate::config::LlamaConfig;
use crate::error::{ModelError, Result};
use crate::host::{HostBlock, HostModel};
use crate::llama::{Block, Body, Linear, Llama, TensorModel};
use crate::tensors::{self, BlockTensors, Named, OUTPUT, OUTPUT_NORM, ROPE_FREQS, TOKEN_EMBD};
use crate::weights::{HfWeights, Weights};

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
    /// converted once to Q8_0); norms, RoPE and attention are burn ops.
    GpuBlocks {
        /// The adapter's smallest subgroup where it offers subgroups (wgpu's `SUBGROUP`), so
        /// that the kernels' partial sums meet through shuffles (the same bits as through
        /// workgroup memory, fewer barriers); `None`: as
        /// `mars_kernels::gpu::Reduce::detect` finds.
        subgroups: Option<u32>,
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

    /// The packed CPU kernels' threads (`None` on the other paths).
    pub fn threads(self) -> Option<usize> {
        match self {
            Self::CpuPacked { threads } => Some(threads),
            _ => None,
        }
    }
}

/// What a device can hold, checked before anything is allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceLimits {
    /// The device's largest buffer (wgpu's `max_storage_buffer_binding_size`); `None` on the
    /// CPU.
    pub max_buffer_bytes: Option<u64>,
    /// Memory the weights may take in all (available RAM for the CPU; browsers and wgpu do not
    /// report device memory, so `None` there).
    pub max_total_bytes: Option<u64>,
}

/// Options for [`Llama::from_gguf`]: the weight path and the device's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// How the matrices are stored and multiplied.
    pub weights: WeightPath,
    /// What the device can hold.
    pub limits: DeviceLimits,
}

impl LoadOptions {
    /// `weights` with no limits checked (tests, examples).
    pub fn with_weights(weights: WeightPath) -> Self {
        Self {
            weights,
            limits: DeviceLimits::default(),
        }
    }
}

/// The kernels for `threads` threads, one pool per count for the whole process: a target and
/// its draft model share it (they never run at once).
fn shared_kernels(threads: usize) -> Result<Arc<Kernels>> {
    static POOLS: OnceLock<Mutex<Vec<Arc<Kernels>>>> = OnceLock::new();
    let pools = POOLS.get_or_init(|| Mutex::new(Vec::new()));
    let mut pools = pools
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(k) = pools.iter().find(|k| k.threads() == threads) {
        return Ok(k.clone());
    }
    let k = Arc::new(Kernels::new(threads)?);
    pools.push(k.clone());
    Ok(k)
}

/// The kernels' block type for a GGUF type they multiply directly.
fn packable(ty: GgmlType) -> Option<WeightType> {
    match ty {
        GgmlType::Q8_0 => Some(WeightType::Q8_0),
        GgmlType::Q4_0 => Some(WeightType::Q4_0),
        GgmlType::Q4_1 => Some(WeightType::Q4_1),
        GgmlType::Q5_0 => Some(WeightType::Q5_0),
        GgmlType::Q5_1 => Some(WeightType::Q5_1),
        GgmlType::Q4K => Some(WeightType::Q4K),
        GgmlType::Q5K => Some(WeightType::Q5K),
        GgmlType::Q6K => Some(WeightType::Q6K),
        GgmlType::F16 => Some(WeightType::F16),
        GgmlType::BF16 => Some(WeightType::BF16),
        _ => None,
    }
}

/// `name` as packed blocks `[out, in]` if the source stores it in a type the kernels take:
/// laid out for `kernels` (tiled from the file's bytes where they tile), or as stored.
fn stored_blocks(
    g: &dyn Weights,
    name: &str,
    out_dim: usize,
    in_dim: usize,
    kernels: Option<&Kernels>,
) -> Result<Option<QMatrix>> {
    let Some(wt) = packable_stored(g, name, out_dim, in_dim)? else {
        return Ok(None);
    };
    let n_bytes = g.stored(name)?.map_or(0, |s| s.n_bytes);
    let bytes = g.stored_bytes(name, 0..n_bytes, 0)?;
    Ok(Some(match kernels {
        Some(k) => k.prepare_bytes(wt, out_dim, in_dim, bytes)?,
        None => QMatrix::new(wt, out_dim, in_dim, bytes.into_owned())?,
    }))
}

/// The kernels' type for `name` if the source stores it `[out, in]` in a type they take.
///
/// # Errors
/// [`ModelError::TensorShape`] for a stored tensor of another shape.
pub(crate) fn packable_stored(
    g: &dyn Weights,
    name: &str,
    out_dim: usize,
    in_dim: usize,
) -> Result<Option<WeightType>> {
    let Some(s) = g.stored(name)? else {
        return Ok(None);
    };
    let Some(wt) = packable(s.ty) else {
        return Ok(None);
    };
    if s.shape != [out_dim, in_dim] {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            found: s.shape,
            expected: vec![out_dim, in_dim],
        });
    }
    Ok(Some(wt))
}

/// Reads one tensor, checks its shape (row-major, outermost first), and returns its values.
pub(crate) fn read(w: &dyn Weights, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
    let (found, values) =
        w.f32_tensor(name)?
            .ok_or_else(|| mars_formats::FormatError::MissingTensor {
                name: name.to_string(),
            })?;
    if found != expected {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            found,
            expected: expected.to_vec(),
        });
    }
    Ok(values)
}

/// A `[out, in]` matrix from the file as a `[1, in, out]` f32 tensor (transposed once, on load).
fn matrix(
    g: &dyn Weights,
    name: &str,
    out_dim: usize,
    in_dim: usize,
    device: &Device,
) -> Result<Linear> {
    let w = read(g, name, &[out_dim, in_dim])?;
    let mut t = vec![0f32; w.len()];
    for (o, row) in w.chunks_exact(in_dim).enumerate() {
        for (i, &v) in row.iter().enumerate() {
            t[i * out_dim + o] = v;
        }
    }
    Ok(Linear::Dense(Tensor::from_data(
        TensorData::new(t, [1, in_dim, out_dim]),
        device,
    )))
}

/// A `[out, in]` matrix as blocks for the kernels: as stored where the kernels take the type,
/// else dequantized and converted once to Q8_0 (noted in `converted`); laid out for `kernels`
/// where given ([`Kernels::prepare`]).
fn blocks(
    g: &dyn Weights,
    name: &str,
    (out_dim, in_dim): (usize, usize),
    kernels: Option<&Kernels>,
    converted: &mut Vec<String>,
) -> Result<Arc<QMatrix>> {
    if let Some(blocks) = stored_blocks(g, name, out_dim, in_dim, kernels)? {
        return Ok(Arc::new(blocks));
    }
    let ty = g
        .stored(name)?
        .map_or_else(|| "f32".to_string(), |s| format!("{:?}", s.ty));
    converted.push(format!("{name} ({ty})"));
    let values = read(g, name, &[out_dim, in_dim])?;
    let w = QMatrix::quantize_q8_0(out_dim, in_dim, &values)?;
    Ok(Arc::new(match kernels {
        Some(k) => k.prepare(w),
        None => w,
    }))
}

fn vector(g: &dyn Weights, name: &str, len: usize, device: &Device) -> Result<Tensor<3>> {
    Ok(Tensor::from_data(
        TensorData::new(read(g, name, &[len])?, [1, 1, len]),
        device,
    ))
}

/// Llama 3.x files carry per-frequency RoPE scaling factors as a tensor.
pub(crate) fn freq_factors(g: &dyn Weights, hd: usize) -> Result<Option<Vec<f32>>> {
    match g.f32_tensor(ROPE_FREQS)? {
        Some(_) => Ok(Some(read(g, ROPE_FREQS, &[hd / 2])?)),
        None => Ok(None),
    }
}

impl Llama {
    /// Builds the model from a GGUF file on `device` on the weight path of `options`.
    ///
    /// # Errors
    /// Configuration, missing or mis-shaped tensors, or a model too large for the device.
    pub fn from_gguf(g: &Gguf<'_>, device: &Device, options: LoadOptions) -> Result<Self> {
        Self::from_weights(LlamaConfig::from_gguf(g)?, g, device, options)
    }

    /// Builds the model from HF safetensors and the model's `config.json`. Llama Q/K weights
    /// are permuted from HF's rotate-half layout to interleaved pairs on load.
    ///
    /// # Errors
    /// As [`Llama::from_gguf`], plus a malformed or unsupported `config.json`.
    pub fn from_safetensors(
        file: SafetensorsFile<'_>,
        config_json: &str,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Self> {
        let weights = HfWeights::new(file, config_json)?;
        Self::from_weights(weights.config().clone(), &weights, device, options)
    }

    /// Builds the model from any weight source and a validated configuration.
    ///
    /// # Errors
    /// Missing or mis-shaped tensors, or a model too large for the device.
    pub fn from_weights(
        c: LlamaConfig,
        g: &dyn Weights,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Self> {
        Self::check_weights(&c, g, options)?;
        let body = match options.weights {
            WeightPath::CpuPacked { threads } => {
                Body::Host(host_model(&c, g, shared_kernels(threads)?)?)
            }
            WeightPath::GpuBlocks { subgroups } => gpu_model(&c, g, device, subgroups)?,
            WeightPath::F32 => Body::Tensors(Box::new(tensor_model(&c, g, device)?)),
        };
        Ok(Self {
            weights: options.weights,
            logit_ids: c.vocab_size,
            config: c,
            body,
            device: device.clone(),
        })
    }
}

impl Llama {
    /// Everything [`Llama::from_gguf`] checks before it reads any tensor data: the
    /// configuration, every tensor's presence, shape and type (from the table), and the
    /// device's limits. Works on a header alone ([`Gguf::parse_header`]), so that a download
    /// can be refused before it finishes.
    ///
    /// # Errors
    /// As [`Llama::from_gguf`], short of errors reading the data itself.
    pub fn check_gguf(g: &Gguf<'_>, options: LoadOptions) -> Result<LlamaConfig> {
        let c = LlamaConfig::from_gguf(g)?;
        Self::check_weights(&c, g, options)?;
        Ok(c)
    }

    fn check_weights(c: &LlamaConfig, g: &dyn Weights, options: LoadOptions) -> Result<()> {
        c.validate()?;
        check_tensors(c, g)?;
        check_memory(c, g, options)
    }
}

/// Refuses, from the tensor table alone, a file that lacks a tensor, holds one of another
/// shape, or stores one in a type this crate cannot read. Sources without a table
/// (safetensors) are checked tensor by tensor as they load.
fn check_tensors(c: &LlamaConfig, g: &dyn Weights) -> Result<()> {
    if !g.lists_tensors() {
        return Ok(());
    }
    let mut expected = tensors::expected(c);
    if g.stored(ROPE_FREQS)?.is_some() {
        expected.push(Named {
            name: ROPE_FREQS.into(),
            shape: vec![c.head_dim / 2],
        });
    }
    for Named { name, shape } in expected {
        let Some(s) = g.stored(&name)? else {
            return Err(mars_formats::FormatError::MissingTensor { name }.into());
        };
        if s.shape != shape {
            return Err(ModelError::TensorShape {
                name,
                found: s.shape,
                expected: shape,
            });
        }
        if !s.ty.can_dequantize() {
            return Err(mars_formats::FormatError::BadTensorType {
                name,
                type_id: s.ty.id(),
            }
            .into());
        }
    }
    Ok(())
}

/// The weights as f32 burn tensors on `device` (the reference path).
fn tensor_model(c: &LlamaConfig, g: &dyn Weights, device: &Device) -> Result<TensorModel> {
    let (d, hd, v) = (c.d_model, c.head_dim, c.vocab_size);
    // The output matrix stays in the file's [vocab, d_model] layout (applied as W @ xᵀ), so a
    // tied head shares the embedding's memory.
    let table = |name: &str| -> Result<Tensor<2>> {
        Ok(Tensor::from_data(
            TensorData::new(read(g, name, &[v, d])?, [v, d]),
            device,
        ))
    };
    let embedding = table(TOKEN_EMBD)?;
    let lm_head = if c.tied_embeddings {
        embedding.clone()
    } else {
        table(OUTPUT)?
    };
    let lm_head = Linear::DenseOutIn(lm_head.reshape([1, v, d]));
    let matrix = |t: &Named| -> Result<Linear> {
        let (out_dim, in_dim) = t.dims();
        matrix(g, &t.name, out_dim, in_dim, device)
    };
    let vector = |t: &Named| vector(g, &t.name, t.shape[0], device);
    let mut blocks = Vec::with_capacity(c.n_layers);
    for i in 0..c.n_layers {
        let t = BlockTensors::of(c, i);
        let head_norm = |t: &Option<Named>| -> Result<Option<Tensor<4>>> {
            t.as_ref()
                .map(|t| {
                    Ok(Tensor::from_data(
                        TensorData::new(read(g, &t.name, &[hd])?, [1, 1, 1, hd]),
                        device,
                    ))
                })
                .transpose()
        };
        blocks.push(Block {
            attn_norm: vector(&t.attn_norm)?,
            wq: matrix(&t.wq)?,
            wk: matrix(&t.wk)?,
            wv: matrix(&t.wv)?,
            wo: matrix(&t.wo)?,
            bq: t.bq.as_ref().map(vector).transpose()?,
            bk: t.bk.as_ref().map(vector).transpose()?,
            bv: t.bv.as_ref().map(vector).transpose()?,
            q_norm: head_norm(&t.q_norm)?,
            k_norm: head_norm(&t.k_norm)?,
            ffn_norm: vector(&t.ffn_norm)?,
            w_gate: matrix(&t.w_gate)?,
            w_up: matrix(&t.w_up)?,
            w_down: matrix(&t.w_down)?,
        });
    }
    let out_norm = vector(&Named {
        name: OUTPUT_NORM.into(),
        shape: vec![d],
    })?;
    let (cos, sin) = rope_tables(c, freq_factors(g, hd)?.as_deref());
    let half = hd / 2;
    Ok(TensorModel {
        embedding,
        blocks,
        out_norm,
        lm_head,
        rope_cos: Tensor::from_data(TensorData::new(cos, [c.context_length, half]), device),
        rope_sin: Tensor::from_data(TensorData::new(sin, [c.context_length, half]), device),
        converted: Arc::new(Vec::new()),
    })
}

/// The weights as GGUF blocks on the GPU, run by the fused kernels (`gpu.rs`).
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
fn gpu_model(
    c: &LlamaConfig,
    g: &dyn Weights,
    device: &Device,
    subgroups: Option<u32>,
) -> Result<Body> {
    Ok(Body::Gpu(Box::new(crate::gpu::GpuModel::load(
        c, g, device, subgroups,
    )?)))
}

/// Without a wgpu backend there is no GPU to hold blocks.
#[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
fn gpu_model(_: &LlamaConfig, _: &dyn Weights, _: &Device, _: Option<u32>) -> Result<Body> {
    Err(ModelError::Unsupported(
        "GGUF blocks on the GPU: this build has no wgpu backend".into(),
    ))
}

/// The weights as packed blocks on the host for the kernels: no f32 copy of any matrix.
fn host_model(c: &LlamaConfig, g: &dyn Weights, kernels: Arc<Kernels>) -> Result<HostModel> {
    let (d, hd, v) = (c.d_model, c.head_dim, c.vocab_size);
    let mut converted = Vec::new();
    // Matrices in the layout the kernels read fastest (16-row tiles on AVX-512), the embedding
    // too when it is the output head: its lookup reads a tiled matrix's rows back as the file's
    // blocks.
    let k = Some(&*kernels);
    let tied = c.tied_embeddings;
    let embedding = blocks(g, TOKEN_EMBD, (v, d), k.filter(|_| tied), &mut converted)?;
    let lm_head = if tied {
        embedding.clone()
    } else {
        blocks(g, OUTPUT, (v, d), k, &mut converted)?
    };
    let mut layers = Vec::with_capacity(c.n_layers);
    for i in 0..c.n_layers {
        let t = BlockTensors::of(c, i);
        let vector = |t: &Named| read(g, &t.name, &t.shape);
        let mut m = |t: &Named| blocks(g, &t.name, t.dims(), k, &mut converted);
        layers.push(Arc::new(HostBlock {
            wq: m(&t.wq)?,
            wk: m(&t.wk)?,
            wv: m(&t.wv)?,
            wo: m(&t.wo)?,
            w_gate: m(&t.w_gate)?,
            w_up: m(&t.w_up)?,
            w_down: m(&t.w_down)?,
            attn_norm: vector(&t.attn_norm)?,
            ffn_norm: vector(&t.ffn_norm)?,
            bq: t.bq.as_ref().map(vector).transpose()?,
            bk: t.bk.as_ref().map(vector).transpose()?,
            bv: t.bv.as_ref().map(vector).transpose()?,
            q_norm: t.q_norm.as_ref().map(vector).transpose()?,
            k_norm: t.k_norm.as_ref().map(vector).transpose()?,
        }));
    }
    let (cos, sin) = rope_tables(c, freq_factors(g, hd)?.as_deref());
    Ok(HostModel {
        embedding,
        blocks: layers,
        out_norm: Arc::new(read(g, OUTPUT_NORM, &[d])?),
        lm_head,
        rope_cos: Arc::new(cos),
        rope_sin: Arc::new(sin),
        kernels,
        scratch: Arc::default(),
        converted: Arc::new(converted),
    })
}

/// Refuses a model whose weights cannot fit, before anything is allocated (so a too-large model
/// costs nothing but the message): on the burn path the largest single tensor in f32 against the
/// device's buffer limit and every weight in f32 against the memory budget; on the packed path
/// the matrices as they will be held (stored blocks, or Q8_0 for converted types) against the
/// budget.
fn check_memory(c: &LlamaConfig, g: &dyn Weights, options: LoadOptions) -> Result<()> {
    let (d, ff, v) = (c.d_model as u64, c.d_ff as u64, c.vocab_size as u64);
    let q = (c.n_heads as u64).saturating_mul(c.head_dim as u64);
    // GGUF blocks on the GPU are split by rows to fit a binding (the kernels check each row).
    let f32_buffers = options.weights == WeightPath::F32;
    let gpu_blocks = matches!(options.weights, WeightPath::GpuBlocks { .. });
    let limits = options.limits;
    if let Some(limit) = limits.max_buffer_bytes.filter(|_| f32_buffers) {
        let tensors = [
            ("the embedding matrix", v.saturating_mul(d)),
            ("an FFN matrix", ff.saturating_mul(d)),
            ("an attention projection", q.saturating_mul(d)),
        ];
        for (what, elements) in tensors {
            let needed = elements.saturating_mul(4);
            if needed > limit {
                return Err(ModelError::TooBigForDevice {
                    what: what.into(),
                    needed,
                    limit,
                });
            }
        }
    }
    if let Some(limit) = limits.max_buffer_bytes.filter(|_| gpu_blocks) {
        check_block_buffers(c, g, limit)?;
    }
    if let Some(limit) = limits.max_total_bytes {
        let rope = 4u64
            .saturating_mul(c.context_length as u64)
            .saturating_mul(c.head_dim as u64);
        let (what, weights) = if f32_buffers {
            ("the weights in f32", c.weight_bytes())
        } else {
            ("the weights as packed blocks", packed_bytes(c, g)?)
        };
        let needed = weights.saturating_add(rope);
        if needed > limit {
            return Err(ModelError::TooBigForDevice {
                what: what.into(),
                needed,
                limit,
            });
        }
    }
    Ok(())
}

/// GGUF blocks on the GPU are split by output rows to fit a binding, so what must fit is one
/// row of blocks (and, for a matrix the file keeps in F32, which stays a dense tensor, the
/// whole matrix): refused here, before any upload, naming the tensor and the limit.
fn check_block_buffers(c: &LlamaConfig, g: &dyn Weights, limit: u64) -> Result<()> {
    for Named { name, shape } in tensors::expected(c) {
        let [rows, cols] = shape[..] else {
            continue;
        };
        let Some(s) = g.stored(&name)? else {
            continue;
        };
        let (what, needed) = if s.ty == GgmlType::F32 {
            (format!("{name} (F32, kept dense)"), s.n_bytes)
        } else if packable(s.ty).is_some() {
            let per_row = s.n_bytes / (rows.max(1) as u64);
            (format!("a row of {name} ({cols} {} values)", s.ty), per_row)
        } else {
            // Converted to Q8_0: 34 bytes per 32 values.
            (
                format!("a row of {name} as Q8_0"),
                (cols as u64).div_ceil(32) * 34,
            )
        };
        // A part holds whole rows plus one padding word.
        if needed.saturating_add(8) > limit {
            return Err(ModelError::TooBigForDevice {
                what,
                needed,
                limit,
            });
        }
    }
    Ok(())
}

/// Bytes the packed path holds for the matrices: a packable tensor's stored bytes, any other
/// tensor's values at Q8_0's 34 bytes per 32 (a missing tensor counts 0 here and is refused by
/// the loader by name).
fn packed_bytes(c: &LlamaConfig, g: &dyn Weights) -> Result<u64> {
    let mut names = vec![TOKEN_EMBD.to_string()];
    if !c.tied_embeddings {
        names.push(OUTPUT.into());
    }
    for i in 0..c.n_layers {
        names.extend(BlockTensors::of(c, i).matrices().map(|t| t.name.clone()));
    }
    let mut total = 0u64;
    for name in &names {
        if let Some(s) = g.stored(name)? {
            total = total.saturating_add(if packable(s.ty).is_some() {
                s.n_bytes
            } else {
                let values = s
                    .shape
                    .iter()
                    .fold(1u64, |n, &d| n.saturating_mul(d as u64));
                values.saturating_mul(34) / 32
            });
        }
    }
    // A source without stored forms (safetensors) is converted whole: f32 size × 34 / 128.
    if total == 0 {
        total = c.weight_bytes().saturating_mul(34) / 128;
    }
    Ok(total)
}

/// cos / sin tables `[context_length, head_dim / 2]`: angle = pos · θ^(−2i / head_dim), divided by
/// the file's per-frequency factors when it has them (Llama 3.x scaling).
pub(crate) fn rope_tables(c: &LlamaConfig, factors: Option<&[f32]>) -> (Vec<f32>, Vec<f32>) {
    let half = c.head_dim / 2;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| {
            let f = f64::from(c.rope_theta).powf(-2.0 * i as f64 / c.head_dim as f64);
            f / factors.map_or(1.0, |fs| f64::from(fs[i]))
        })
        .collect();
    let mut cos = Vec::with_capacity(c.context_length * half);
    let mut sin = Vec::with_capacity(c.context_length * half);
    for pos in 0..c.context_length {
        for &f in &inv_freq {
            let angle = pos as f64 * f;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}
