//! Building a [`Llama`] from a weight source on the back-end its [`WeightPath`] names, after
//! every check that can be made before anything is allocated: the configuration, each
//! tensor's presence, shape and type (from the table), and the device's limits. The checks
//! work on a header alone, so a download can be refused before it finishes; each back-end's
//! own loader is in its module.

use burn::tensor::Device;
use mars_formats::{GgmlType, Gguf, SafetensorsFile};

use crate::config::LlamaConfig;
use crate::cpu::CpuModel;
use crate::error::{ModelError, Result};
use crate::llama::{Body, Llama};
use crate::path::{KvType, LoadOptions, WeightPath};
use crate::reference::ReferenceModel;
use crate::tensors::{self, BlockTensors, Named, OUTPUT, ROPE_FREQS, TOKEN_EMBD};
use crate::weights::{HfWeights, Weights, packable};

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
            WeightPath::CpuPacked { threads } => Body::Cpu(CpuModel::load(&c, g, threads)?),
            WeightPath::GpuBlocks { subgroups, kv } => gpu_model(
                &c,
                g,
                device,
                (subgroups, kv),
                options.limits.max_buffer_bytes,
            )?,
            WeightPath::F32 => Body::Reference(Box::new(ReferenceModel::load(&c, g, device)?)),
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

/// The weights as GGUF blocks on the GPU, run by the fused kernels (`gpu.rs`).
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
fn gpu_model(
    c: &LlamaConfig,
    g: &dyn Weights,
    device: &Device,
    gpu: (Option<u32>, KvType),
    max_binding: Option<u64>,
) -> Result<Body> {
    Ok(Body::Gpu(Box::new(crate::gpu::GpuModel::load(
        c,
        g,
        device,
        gpu,
        max_binding,
    )?)))
}

/// Without a wgpu backend there is no GPU to hold blocks.
#[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
fn gpu_model(
    _: &LlamaConfig,
    _: &dyn Weights,
    _: &Device,
    _: (Option<u32>, KvType),
    _: Option<u64>,
) -> Result<Body> {
    Err(ModelError::Unsupported(
        "GGUF blocks on the GPU: this build has no wgpu backend".into(),
    ))
}
