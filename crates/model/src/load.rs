//! Building a [`Llama`] from a weight source: shapes checked, memory checked before anything is
//! allocated, matrices laid out for the forward pass, RoPE tables computed.

use std::sync::{Arc, Mutex, OnceLock};

use burn::tensor::{Device, Tensor, TensorData};
use mars_formats::{GgmlType, Gguf, SafetensorsFile};
use mars_kernels::{Kernels, QMatrix, WeightType};

use crate::config::LlamaConfig;
use crate::error::{ModelError, Result};
use crate::llama::{Block, Embedding, Linear, Llama};
use crate::weights::{HfWeights, Weights};

/// Options for [`Llama::from_gguf`].
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// The device's largest buffer (wgpu's `max_storage_buffer_binding_size`); `None` on the
    /// CPU. Checked before anything is allocated.
    pub max_buffer_bytes: Option<u64>,
    /// Memory the weights may take in all (available RAM for the CPU backend; browsers and
    /// wgpu do not report device memory, so `None` there). Checked before anything is
    /// allocated, against the f32 size of every weight.
    pub max_total_bytes: Option<u64>,
    /// On the CPU: keep matrices of the types mars-kernels multiplies (Q8_0, Q4_0, Q4_1) as
    /// their GGUF blocks and run them on this many threads. `None` (GPUs, and the f32
    /// reference path) dequantizes every weight to f32.
    pub cpu_threads: Option<usize>,
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
        _ => None,
    }
}

/// `name` as packed blocks `[out, in]` if the source stores it in a type the kernels take.
fn stored_blocks(
    g: &dyn Weights,
    name: &str,
    out_dim: usize,
    in_dim: usize,
) -> Result<Option<QMatrix>> {
    let Some((shape, ty, bytes)) = g.stored(name)? else {
        return Ok(None);
    };
    let Some(wt) = packable(ty) else {
        return Ok(None);
    };
    if shape != [out_dim, in_dim] {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            found: shape,
            expected: vec![out_dim, in_dim],
        });
    }
    Ok(Some(QMatrix::new(wt, out_dim, in_dim, bytes.to_vec())?))
}

/// Reads one tensor, checks its shape (row-major, outermost first), and returns its values.
fn read(w: &dyn Weights, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
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

/// A `[out, in]` matrix from the file: packed blocks where `kernels` are given and the type
/// allows, else a `[1, in, out]` f32 tensor (transposed once, on load).
fn matrix(
    g: &dyn Weights,
    name: &str,
    out_dim: usize,
    in_dim: usize,
    device: &Device,
    kernels: Option<&Arc<Kernels>>,
) -> Result<Linear> {
    if let Some(k) = kernels
        && let Some(blocks) = stored_blocks(g, name, out_dim, in_dim)?
    {
        return Ok(Linear::Packed(Arc::new(blocks), k.clone()));
    }
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

fn vector(g: &dyn Weights, name: &str, len: usize, device: &Device) -> Result<Tensor<3>> {
    Ok(Tensor::from_data(
        TensorData::new(read(g, name, &[len])?, [1, 1, len]),
        device,
    ))
}

impl Llama {
    /// Builds the model from a GGUF file on `device`: every weight dequantized to f32, or with
    /// [`LoadOptions::cpu_threads`] the Q8_0/Q4_0/Q4_1 matrices kept as their blocks.
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
        c.validate()?;
        check_memory(&c, options)?;
        let kernels = options.cpu_threads.map(shared_kernels).transpose()?;
        let kernels = kernels.as_ref();
        let (d, hd, ff, v) = (c.d_model, c.head_dim, c.d_ff, c.vocab_size);
        let (q_dim, kv_dim) = (c.n_heads * hd, c.n_kv_heads * hd);
        // The output matrix stays in the file's [vocab, d_model] layout (blocks, or f32 applied
        // as W @ xᵀ), so a tied head shares the embedding's memory.
        let head = |name: &str| -> Result<(Embedding, Linear)> {
            if let Some(k) = kernels
                && let Some(blocks) = stored_blocks(g, name, v, d)?
            {
                let blocks = Arc::new(blocks);
                return Ok((
                    Embedding::Packed(blocks.clone()),
                    Linear::Packed(blocks, k.clone()),
                ));
            }
            let table =
                Tensor::<2>::from_data(TensorData::new(read(g, name, &[v, d])?, [v, d]), device);
            let head = Linear::DenseOutIn(table.clone().reshape([1, v, d]));
            Ok((Embedding::Dense(Box::new(table)), head))
        };
        let (embedding, tied_head) = head("token_embd.weight")?;
        let lm_head = if c.tied_embeddings {
            tied_head
        } else {
            head("output.weight")?.1
        };
        let mut blocks = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let bias = |s: &str, len: usize| -> Result<Option<Tensor<3>>> {
                if c.qkv_bias {
                    vector(g, &n(s), len, device).map(Some)
                } else {
                    Ok(None)
                }
            };
            let head_norm = |s: &str| -> Result<Option<Tensor<4>>> {
                if c.qk_norm {
                    Ok(Some(Tensor::from_data(
                        TensorData::new(read(g, &n(s), &[hd])?, [1, 1, 1, hd]),
                        device,
                    )))
                } else {
                    Ok(None)
                }
            };
            blocks.push(Block {
                attn_norm: vector(g, &n("attn_norm.weight"), d, device)?,
                wq: matrix(g, &n("attn_q.weight"), q_dim, d, device, kernels)?,
                wk: matrix(g, &n("attn_k.weight"), kv_dim, d, device, kernels)?,
                wv: matrix(g, &n("attn_v.weight"), kv_dim, d, device, kernels)?,
                wo: matrix(g, &n("attn_output.weight"), d, q_dim, device, kernels)?,
                bq: bias("attn_q.bias", q_dim)?,
                bk: bias("attn_k.bias", kv_dim)?,
                bv: bias("attn_v.bias", kv_dim)?,
                q_norm: head_norm("attn_q_norm.weight")?,
                k_norm: head_norm("attn_k_norm.weight")?,
                ffn_norm: vector(g, &n("ffn_norm.weight"), d, device)?,
                w_gate: matrix(g, &n("ffn_gate.weight"), ff, d, device, kernels)?,
                w_up: matrix(g, &n("ffn_up.weight"), ff, d, device, kernels)?,
                w_down: matrix(g, &n("ffn_down.weight"), d, ff, device, kernels)?,
            });
        }
        let out_norm = vector(g, "output_norm.weight", d, device)?;
        // Llama 3.x files carry per-frequency RoPE scaling factors as a tensor.
        let freq_factors = match g.f32_tensor("rope_freqs.weight")? {
            Some(_) => Some(read(g, "rope_freqs.weight", &[hd / 2])?),
            None => None,
        };
        let (rope_cos, rope_sin) = rope_tables(&c, freq_factors.as_deref(), device);
        Ok(Self {
            config: c,
            embedding,
            blocks,
            out_norm,
            lm_head,
            rope_cos,
            rope_sin,
            device: device.clone(),
        })
    }
}

/// Refuses a model whose weights, dequantized to f32, cannot fit (also on the packed path, where
/// this over-counts: an upper bound until the packed size is checked instead): the largest single tensor
/// against the device's buffer limit, the sum against the memory budget. Runs before anything
/// is allocated, so a too-large model costs nothing but the message.
fn check_memory(c: &LlamaConfig, options: LoadOptions) -> Result<()> {
    let (d, ff, v) = (c.d_model as u64, c.d_ff as u64, c.vocab_size as u64);
    let q = (c.n_heads as u64).saturating_mul(c.head_dim as u64);
    if let Some(limit) = options.max_buffer_bytes {
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
    if let Some(limit) = options.max_total_bytes {
        let rope = 4u64
            .saturating_mul(c.context_length as u64)
            .saturating_mul(c.head_dim as u64);
        let needed = c.weight_bytes().saturating_add(rope);
        if needed > limit {
            return Err(ModelError::TooBigForDevice {
                what: "the weights in f32".into(),
                needed,
                limit,
            });
        }
    }
    Ok(())
}

/// cos / sin tables `[context_length, head_dim / 2]`: angle = pos · θ^(−2i / head_dim), divided by
/// the file's per-frequency factors when it has them (Llama 3.x scaling).
fn rope_tables(
    c: &LlamaConfig,
    factors: Option<&[f32]>,
    device: &Device,
) -> (Tensor<2>, Tensor<2>) {
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
    (
        Tensor::from_data(TensorData::new(cos, [c.context_length, half]), device),
        Tensor::from_data(TensorData::new(sin, [c.context_length, half]), device),
    )
}
