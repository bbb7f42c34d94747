//! The Llama-family decoder: weights, KV cache, and one `forward` that returns logits for every
//! input position (a verifier needs all k + 1 of them).

use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};
use mars_formats::{Gguf, SafetensorsFile};

use crate::config::{LlamaConfig, RopeStyle};
use crate::error::{ModelError, Result};
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
}

/// A weight matrix stored `[1, in, out]`, so that `x @ w` applies it to activations
/// `[1, t, in]` without a transpose per step.
#[derive(Debug, Clone)]
struct Linear {
    w: Tensor<3>, // [1, in, out]
}

impl Linear {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        x.matmul(self.w.clone())
    }
}

/// One decoder block. Matrices are stored `[1, in, out]` so that `x @ w` applies them to
/// activations `[1, t, in]` without a transpose per step.
#[derive(Debug, Clone)]
struct Block {
    attn_norm: Tensor<3>,      // [1, 1, d_model]
    wq: Linear,                // [1, d_model, n_heads * head_dim]
    wk: Linear,                // [1, d_model, n_kv_heads * head_dim]
    wv: Linear,                // [1, d_model, n_kv_heads * head_dim]
    wo: Linear,                // [1, n_heads * head_dim, d_model]
    bq: Option<Tensor<3>>,     // [1, 1, n_heads * head_dim] (Qwen2)
    bk: Option<Tensor<3>>,     // [1, 1, n_kv_heads * head_dim]
    bv: Option<Tensor<3>>,     // [1, 1, n_kv_heads * head_dim]
    q_norm: Option<Tensor<4>>, // [1, 1, 1, head_dim] (Qwen3)
    k_norm: Option<Tensor<4>>, // [1, 1, 1, head_dim]
    ffn_norm: Tensor<3>,       // [1, 1, d_model]
    w_gate: Linear,            // [1, d_model, d_ff]
    w_up: Linear,              // [1, d_model, d_ff]
    w_down: Linear,            // [1, d_ff, d_model]
}

/// A Llama-family model on a burn device (flex on the CPU, wgpu on a GPU or in the browser).
#[derive(Debug, Clone)]
pub struct Llama {
    config: LlamaConfig,
    embedding: Tensor<2>, // [vocab, d_model]
    blocks: Vec<Block>,
    out_norm: Tensor<3>, // [1, 1, d_model]
    lm_head: Tensor<3>,  // [1, vocab, d_model] (shares the embedding's memory when tied)
    rope_cos: Tensor<2>, // [context_length, head_dim / 2]
    rope_sin: Tensor<2>, // [context_length, head_dim / 2]
    device: Device,
}

/// Per-layer keys and values, preallocated to a capacity, with a cursor: appending writes at the
/// cursor, rolling back a rejected draft just moves it (O(1), nothing is copied or freed).
#[derive(Debug, Clone)]
pub struct KvCache {
    keys: Vec<Tensor<4>>,   // per layer: [1, n_kv_heads, capacity, head_dim]
    values: Vec<Tensor<4>>, // per layer: [1, n_kv_heads, capacity, head_dim]
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// Tokens currently cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most tokens the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every token after the first `len` (rolls back a rejected draft).
    ///
    /// # Errors
    /// [`ModelError::TruncateBeyondLength`] when `len` exceeds the cached length.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(ModelError::TruncateBeyondLength {
                len: self.len,
                to: len,
            });
        }
        self.len = len;
        Ok(())
    }
}

/// Reads one tensor, checks its shape (row-major, outermost first), and returns its values.
fn read(w: &dyn Weights, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
    let (found, values) =
        w.tensor(name)?
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

/// A `[out, in]` matrix from the file as a `[1, in, out]` tensor (transposed once, on load).
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
    Ok(Linear {
        w: Tensor::from_data(TensorData::new(t, [1, in_dim, out_dim]), device),
    })
}

fn vector(g: &dyn Weights, name: &str, len: usize, device: &Device) -> Result<Tensor<3>> {
    Ok(Tensor::from_data(
        TensorData::new(read(g, name, &[len])?, [1, 1, len]),
        device,
    ))
}

impl Llama {
    /// Builds the model from a GGUF file, dequantizing every weight to f32 on `device`.
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
        let (d, hd, ff, v) = (c.d_model, c.head_dim, c.d_ff, c.vocab_size);
        let (q_dim, kv_dim) = (c.n_heads * hd, c.n_kv_heads * hd);
        let embd = read(g, "token_embd.weight", &[v, d])?;
        let embedding = Tensor::<2>::from_data(TensorData::new(embd, [v, d]), device);
        // The output matrix stays in the file's [vocab, d_model] layout: flex multiplies
        // W @ xᵀ for a few tokens 1.5–3× faster than x @ Wᵀ-as-[d, vocab] (measured with
        // examples/matmul_cost.rs: 19 ms against 30–62 ms for 2–8 tokens on SmolLM2's
        // 576 × 49152 head), and a tied head then needs no second copy.
        let lm_head = if c.tied_embeddings {
            embedding.clone().reshape([1, v, d])
        } else {
            Tensor::from_data(
                TensorData::new(read(g, "output.weight", &[v, d])?, [1, v, d]),
                device,
            )
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
                wq: matrix(g, &n("attn_q.weight"), q_dim, d, device)?,
                wk: matrix(g, &n("attn_k.weight"), kv_dim, d, device)?,
                wv: matrix(g, &n("attn_v.weight"), kv_dim, d, device)?,
                wo: matrix(g, &n("attn_output.weight"), d, q_dim, device)?,
                bq: bias("attn_q.bias", q_dim)?,
                bk: bias("attn_k.bias", kv_dim)?,
                bv: bias("attn_v.bias", kv_dim)?,
                q_norm: head_norm("attn_q_norm.weight")?,
                k_norm: head_norm("attn_k_norm.weight")?,
                ffn_norm: vector(g, &n("ffn_norm.weight"), d, device)?,
                w_gate: matrix(g, &n("ffn_gate.weight"), ff, d, device)?,
                w_up: matrix(g, &n("ffn_up.weight"), ff, d, device)?,
                w_down: matrix(g, &n("ffn_down.weight"), d, ff, device)?,
            });
        }
        let out_norm = vector(g, "output_norm.weight", d, device)?;
        // Llama 3.x files carry per-frequency RoPE scaling factors as a tensor.
        let freq_factors = match g.tensor("rope_freqs.weight")? {
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

    /// The same model running only `layers` (in that order) — a self-speculative drafter. The
    /// result shares every weight with `self`: burn tensors are reference-counted handles, so
    /// nothing is copied or allocated except the handles. Its caches come from its own
    /// [`Llama::new_cache`], with one entry per kept layer.
    ///
    /// # Errors
    /// [`ModelError::LayerSubset`] for an empty list, a repeated layer, or a layer index the
    /// model does not have.
    pub fn with_layers(&self, layers: &[usize]) -> Result<Self> {
        let n_layers = self.config.n_layers;
        mars_formats::check_layer_subset(layers, n_layers).map_err(|why| {
            ModelError::LayerSubset {
                layers: layers.to_vec(),
                n_layers,
                why,
            }
        })?;
        let mut config = self.config.clone();
        config.n_layers = layers.len();
        Ok(Self {
            config,
            blocks: layers.iter().map(|&l| self.blocks[l].clone()).collect(),
            ..self.clone()
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// An empty KV cache for up to `capacity` tokens (at most the model's context length).
    ///
    /// # Errors
    /// [`ModelError::ContextOverflow`] when `capacity` exceeds the context length.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        let c = &self.config;
        if capacity > c.context_length {
            return Err(ModelError::ContextOverflow {
                cached: 0,
                new: capacity,
                capacity: c.context_length,
            });
        }
        let zeros = || Tensor::<4>::zeros([1, c.n_kv_heads, capacity, c.head_dim], &self.device);
        Ok(KvCache {
            keys: (0..c.n_layers).map(|_| zeros()).collect(),
            values: (0..c.n_layers).map(|_| zeros()).collect(),
            len: 0,
            capacity,
        })
    }

    /// Runs `tokens` after what `cache` holds, appends their keys and values, and returns the
    /// logits at every input position: `[1, t, vocab]`.
    ///
    /// # Errors
    /// [`ModelError::EmptyInput`], [`ModelError::TokenOutOfVocab`], or
    /// [`ModelError::ContextOverflow`] naming the cached, new and capacity counts.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor<3>> {
        let c = &self.config;
        let t = tokens.len();
        if t == 0 {
            return Err(ModelError::EmptyInput);
        }
        if let Some((position, &token)) = tokens
            .iter()
            .enumerate()
            .find(|(_, id)| **id as usize >= c.vocab_size)
        {
            return Err(ModelError::TokenOutOfVocab {
                position,
                token,
                vocab: c.vocab_size,
            });
        }
        let start = cache.len;
        let end = start.checked_add(t).filter(|&e| e <= cache.capacity);
        let Some(end) = end else {
            return Err(ModelError::ContextOverflow {
                cached: start,
                new: t,
                capacity: cache.capacity,
            });
        };
        let ids: Vec<i64> = tokens.iter().map(|&id| i64::from(id)).collect();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [t]), &self.device);
        let mut x = self
            .embedding
            .clone()
            .select(0, ids)
            .reshape([1, t, c.d_model]); // [1, t, d_model]

        let cos = self
            .rope_cos
            .clone()
            .slice(start..end)
            .reshape([1, t, 1, c.head_dim / 2, 1]);
        let sin = self
            .rope_sin
            .clone()
            .slice(start..end)
            .reshape([1, t, 1, c.head_dim / 2, 1]);
        let mask = causal_mask(start, t, group_rows(c, t), &self.device); // [1, 1, group * t, end]

        for (layer, block) in self.blocks.iter().enumerate() {
            let h = rms_norm(x.clone(), &block.attn_norm, c.rms_eps);
            let attn = self.attention(block, h, layer, cache, start, &cos, &sin, &mask);
            x = x + attn;
            let h = rms_norm(x.clone(), &block.ffn_norm, c.rms_eps);
            let gated = silu(block.w_gate.forward(h.clone())) * block.w_up.forward(h); // [1, t, d_ff]
            let ffn = block.w_down.forward(gated); // [1, t, d_model]
            x = x + ffn;
        }
        cache.len = end;
        let x = rms_norm(x, &self.out_norm, c.rms_eps); // [1, t, d_model]
        let logits = self.lm_head.clone().matmul(x.swap_dims(1, 2)); // [1, vocab, t]
        Ok(logits.swap_dims(1, 2)) // [1, t, vocab]
    }

    #[allow(clippy::too_many_arguments)] // the pieces of one attention call, kept explicit
    fn attention(
        &self,
        block: &Block,
        h: Tensor<3>, // [1, t, d_model]
        layer: usize,
        cache: &mut KvCache,
        start: usize,
        cos: &Tensor<5>, // [1, t, 1, head_dim / 2, 1]
        sin: &Tensor<5>,
        mask: &Tensor<4>, // [1, 1, group * t, start + t]
    ) -> Tensor<3> {
        let c = &self.config;
        let t = h.dims()[1];
        let (hd, nh, nkv) = (c.head_dim, c.n_heads, c.n_kv_heads);
        let project = |w: &Linear, b: &Option<Tensor<3>>| {
            let y = w.forward(h.clone());
            match b {
                Some(b) => y + b.clone(),
                None => y,
            }
        };
        let q = project(&block.wq, &block.bq).reshape([1, t, nh, hd]); // [1, t, n_heads, head_dim]
        let k = project(&block.wk, &block.bk).reshape([1, t, nkv, hd]); // [1, t, n_kv, head_dim]
        let v = project(&block.wv, &block.bv).reshape([1, t, nkv, hd]); // [1, t, n_kv, head_dim]
        let (q, k) = match (&block.q_norm, &block.k_norm) {
            (Some(qn), Some(kn)) => (rms_norm(q, qn, c.rms_eps), rms_norm(k, kn, c.rms_eps)),
            _ => (q, k),
        };
        let q = rope(q, cos, sin, c.rope_style).swap_dims(1, 2); // [1, n_heads, t, head_dim]
        let k = rope(k, cos, sin, c.rope_style).swap_dims(1, 2); // [1, n_kv, t, head_dim]
        let v = v.swap_dims(1, 2); // [1, n_kv, t, head_dim]

        let end = start + t;
        // Take the cache tensors out (a cheap handle stands in) so that slice_assign holds the
        // only reference and can write in place instead of copying the whole cache each step.
        let keys = std::mem::replace(&mut cache.keys[layer], k.clone())
            .slice_assign([0..1, 0..nkv, start..end, 0..hd], k);
        let values = std::mem::replace(&mut cache.values[layer], v.clone())
            .slice_assign([0..1, 0..nkv, start..end, 0..hd], v);
        cache.keys[layer] = keys.clone();
        cache.values[layer] = values.clone();
        let keys = keys.slice([0..1, 0..nkv, 0..end, 0..hd]); // [1, n_kv, end, head_dim]
        let values = values.slice([0..1, 0..nkv, 0..end, 0..hd]); // [1, n_kv, end, head_dim]

        // Grouped-query attention without copying keys: the query heads that share a KV head
        // are consecutive, so fold them into the row dimension of that head.
        let group = c.group_size();
        let q = q.reshape([1, nkv, group * t, hd]); // [1, n_kv, group * t, head_dim]
        let scores = q.matmul(keys.swap_dims(2, 3)) * (1.0 / (hd as f32).sqrt()) + mask.clone(); // [1, n_kv, group * t, end]
        let probs = softmax(scores, 3);
        let out = probs.matmul(values); // [1, n_kv, group * t, head_dim]
        let out = out
            .reshape([1, nh, t, hd])
            .swap_dims(1, 2)
            .reshape([1, t, nh * hd]); // [1, t, n_heads * head_dim]
        block.wo.forward(out) // [1, t, d_model]
    }
}

/// Refuses a model whose weights, dequantized to f32, cannot fit: the largest single tensor
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

fn group_rows(c: &LlamaConfig, t: usize) -> usize {
    c.group_size() * t
}

/// RMSNorm over the last dimension: x / sqrt(mean(x²) + eps) · w.
fn rms_norm<const D: usize>(x: Tensor<D>, weight: &Tensor<D>, eps: f32) -> Tensor<D> {
    let rms = (x.clone() * x.clone())
        .mean_dim(D - 1)
        .add_scalar(eps)
        .sqrt(); // [.., 1]
    x / rms * weight.clone()
}

/// Rotates dimension pairs by position-dependent angles: adjacent pairs (x0, x1), (x2, x3), …
/// for [`RopeStyle::Interleaved`], (x_i, x_{i + hd/2}) for [`RopeStyle::Halves`].
fn rope(x: Tensor<4>, cos: &Tensor<5>, sin: &Tensor<5>, style: RopeStyle) -> Tensor<4> {
    let [b, t, n, hd] = x.dims();
    let half = hd / 2;
    let (x0, x1, last) = match style {
        RopeStyle::Interleaved => {
            let pairs = x.reshape([b, t, n, half, 2]); // [1, t, n, head_dim / 2, 2]
            let x0 = pairs.clone().slice([0..b, 0..t, 0..n, 0..half, 0..1]);
            (x0, pairs.slice([0..b, 0..t, 0..n, 0..half, 1..2]), 4)
        }
        RopeStyle::Halves => {
            let halves = x.reshape([b, t, n, 2, half]); // [1, t, n, 2, head_dim / 2]
            let x0 = halves.clone().slice([0..b, 0..t, 0..n, 0..1, 0..half]);
            (x0, halves.slice([0..b, 0..t, 0..n, 1..2, 0..half]), 3)
        }
    };
    // cos / sin are [1, t, 1, head_dim / 2, 1]; for halves they broadcast along the other axis.
    let (cos, sin) = match style {
        RopeStyle::Interleaved => (cos.clone(), sin.clone()),
        RopeStyle::Halves => (cos.clone().swap_dims(3, 4), sin.clone().swap_dims(3, 4)),
    };
    let r0 = x0.clone() * cos.clone() - x1.clone() * sin.clone();
    let r1 = x0 * sin + x1 * cos;
    Tensor::cat(vec![r0, r1], last).reshape([b, t, n, hd])
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

/// Additive causal mask `[1, 1, rows, start + t]`: row r is query position start + r % t (rows
/// are query heads folded with positions), and it may see keys 0..=start + r % t.
fn causal_mask(start: usize, t: usize, rows: usize, device: &Device) -> Tensor<4> {
    let end = start + t;
    let mut m = vec![0f32; rows * end];
    for r in 0..rows {
        let pos = start + r % t;
        for v in &mut m[r * end + pos + 1..(r + 1) * end] {
            *v = f32::NEG_INFINITY;
        }
    }
    Tensor::from_data(TensorData::new(m, [1, 1, rows, end]), device)
}
