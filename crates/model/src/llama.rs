//! The Llama-family decoder: configuration and weights in, one `forward` that returns logits for
//! every input position (a verifier needs all k + 1 of them). Loading is in `load.rs`, the KV
//! cache in `cache.rs`.

use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::cache::KvCache;
use crate::config::{LlamaConfig, RopeStyle};
use crate::error::{ModelError, Result};
use crate::host::HostModel;
use crate::load::WeightPath;
use crate::logits::{ChainLink, Logits, SummaryChain};

/// A weight matrix and how it is applied to activations `[1, t, in]` (the f32 burn path, the
/// reference on the CPU and on wgpu; packed CPU weights are in `host.rs`, GPU blocks in
/// `gpu.rs`).
#[derive(Debug, Clone)]
pub(crate) enum Linear {
    /// f32 `[1, in, out]`: `x @ w` without a transpose per step.
    Dense(Tensor<3>),
    /// f32 `[1, out, in]` applied as `(w @ xᵀ)ᵀ`: the output head on flex, 1.5–3× faster for a
    /// few tokens than the other layout (`examples/matmul_cost.rs`), and shared with a tied
    /// embedding.
    DenseOutIn(Tensor<3>),
}

impl Linear {
    fn forward(&self, x: Tensor<3>) -> Result<Tensor<3>> {
        match self {
            Self::Dense(w) => Ok(x.matmul(w.clone())),
            Self::DenseOutIn(w) => Ok(w.clone().matmul(x.swap_dims(1, 2)).swap_dims(1, 2)),
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            Self::Dense(w) | Self::DenseOutIn(w) => 4 * w.shape().num_elements() as u64,
        }
    }
}

/// One decoder block on burn tensors.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub(crate) attn_norm: Tensor<3>,      // [1, 1, d_model]
    pub(crate) wq: Linear,                // [1, d_model, n_heads * head_dim]
    pub(crate) wk: Linear,                // [1, d_model, n_kv_heads * head_dim]
    pub(crate) wv: Linear,                // [1, d_model, n_kv_heads * head_dim]
    pub(crate) wo: Linear,                // [1, n_heads * head_dim, d_model]
    pub(crate) bq: Option<Tensor<3>>,     // [1, 1, n_heads * head_dim] (Qwen2)
    pub(crate) bk: Option<Tensor<3>>,     // [1, 1, n_kv_heads * head_dim]
    pub(crate) bv: Option<Tensor<3>>,     // [1, 1, n_kv_heads * head_dim]
    pub(crate) q_norm: Option<Tensor<4>>, // [1, 1, 1, head_dim] (Qwen3)
    pub(crate) k_norm: Option<Tensor<4>>, // [1, 1, 1, head_dim]
    pub(crate) ffn_norm: Tensor<3>,       // [1, 1, d_model]
    pub(crate) w_gate: Linear,            // [1, d_model, d_ff]
    pub(crate) w_up: Linear,              // [1, d_model, d_ff]
    pub(crate) w_down: Linear,            // [1, d_ff, d_model]
}

/// The weights on burn tensors, for [`Llama::forward`] on any burn backend.
#[derive(Debug, Clone)]
pub(crate) struct TensorModel {
    pub(crate) embedding: Tensor<2>, // [vocab, d_model]
    pub(crate) blocks: Vec<Block>,
    pub(crate) out_norm: Tensor<3>, // [1, 1, d_model]
    pub(crate) lm_head: Linear,     // vocab × d_model (shares the embedding's memory when tied)
    pub(crate) rope_cos: Tensor<2>, // [context_length, head_dim / 2]
    pub(crate) rope_sin: Tensor<2>, // [context_length, head_dim / 2]
    /// Tensors converted to Q8_0 at load for the GPU kernels, as "name (type)".
    pub(crate) converted: std::sync::Arc<Vec<String>>,
}

/// Where the weights are and which code runs them.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// f32 burn tensors: wgpu, WebGPU, and the CPU reference path.
    Tensors(Box<TensorModel>),
    /// Packed GGUF blocks and mars-kernels on the CPU.
    Host(HostModel),
    /// GGUF blocks and mars-kernels' fused kernels on wgpu / WebGPU.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    Gpu(Box<crate::gpu::GpuModel>),
}

/// A Llama-family model: f32 weights on a burn device (flex on the CPU, wgpu on a GPU or in the
/// browser), or packed GGUF blocks on the CPU's quantized kernels.
#[derive(Debug, Clone)]
pub struct Llama {
    pub(crate) config: LlamaConfig,
    /// The weight path it was loaded on.
    pub(crate) weights: WeightPath,
    pub(crate) body: Body,
    pub(crate) device: Device,
    /// Logits are computed for token ids below this (the vocabulary unless
    /// [`Llama::with_vocab_limit`] lowered it); the rest are −inf.
    pub(crate) logit_ids: usize,
}

impl Llama {
    /// The same model running only `layers` (in that order) — a self-speculative drafter. The
    /// result shares every weight with `self`: burn tensors and host blocks are
    /// reference-counted, so nothing is copied or allocated except the handles. Its caches come from its own
    /// [`Llama::new_cache`], with one entry per kept layer.
    ///
    /// # Errors
    /// [`mars_formats::FormatError::LayerSubset`] for an empty list, a repeated layer, or a
    /// layer index the model does not have.
    pub fn with_layers(&self, layers: &[usize]) -> Result<Self> {
        mars_formats::check_layer_subset(layers, self.config.n_layers)?;
        let mut config = self.config.clone();
        config.n_layers = layers.len();
        let body = match &self.body {
            Body::Tensors(m) => Body::Tensors(Box::new(TensorModel {
                blocks: layers.iter().map(|&l| m.blocks[l].clone()).collect(),
                ..(**m).clone()
            })),
            Body::Host(m) => Body::Host(HostModel {
                blocks: layers.iter().map(|&l| m.blocks[l].clone()).collect(),
                ..m.clone()
            }),
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => Body::Gpu(Box::new(m.with_layers(layers))),
        };
        Ok(Self {
            config,
            weights: self.weights,
            body,
            device: self.device.clone(),
            logit_ids: self.logit_ids,
        })
    }

    /// The same model (sharing every weight) with logits only for token ids below `ids`; the
    /// others are −inf, so sampling and argmax never pick them. A draft model that proposes only
    /// frequent tokens this way skips most of its output head — the largest matrix of a small
    /// model (151,936 × 896 of the 0.5B's ~490 MB) — on the packed CPU path, where the head runs
    /// on the first `ids` rows only; burn backends compute every logit and mask the rest.
    /// BPE vocabularies number tokens roughly by merge order, so low ids are the frequent
    /// ones. Verification stays exact: strict acceptance uses the draft distribution actually
    /// sampled from. `ids` at or above the vocabulary means no limit.
    ///
    /// # Errors
    /// [`ModelError::Config`] for 0.
    pub fn with_vocab_limit(&self, ids: usize) -> Result<Self> {
        if ids == 0 {
            return Err(ModelError::Config(
                "vocab limit 0: a drafter needs at least one token id to propose".into(),
            ));
        }
        Ok(Self {
            logit_ids: ids.min(self.config.vocab_size),
            ..self.clone()
        })
    }

    /// Token ids below this get logits (the vocabulary size unless limited).
    pub fn logit_ids(&self) -> usize {
        self.logit_ids
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Runs `tokens` after what `cache` holds, appends their keys and values, and returns the
    /// logits at every input position: `[t, vocab]`.
    ///
    /// # Errors
    /// [`ModelError::EmptyInput`], [`ModelError::TokenOutOfVocab`], or
    /// [`ModelError::ContextOverflow`] naming the cached, new and capacity counts.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Logits> {
        self.forward_tail(tokens, cache, tokens.len(), None)
    }

    /// As [`Llama::forward`], returning only the last position's logits, `[1, vocab]`: what
    /// prefill and a draft model need. The packed CPU path then runs the output head on one
    /// row (the same values [`Llama::forward`] gives for it, bit for bit).
    ///
    /// # Errors
    /// As [`Llama::forward`].
    pub fn forward_last(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Logits> {
        self.forward_tail(tokens, cache, 1, None)
    }

    /// An empty [`SummaryChain`] of `rows` row summaries on the model's GPU, or `None` off the
    /// GPU path (where logits are read whole and nothing is chained).
    ///
    /// # Errors
    /// [`ModelError::Kernel`] for a size past usize.
    #[cfg_attr(
        not(any(feature = "wgpu", feature = "webgpu")),
        allow(unused_variables)
    )]
    pub fn summary_chain(&self, rows: usize) -> Result<Option<SummaryChain>> {
        match &self.body {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => Ok(Some(SummaryChain::gpu(m.chain(rows)?))),
            _ => Ok(None),
        }
    }

    /// As [`Llama::forward`] over `tokens` followed by `link.ids` tokens the GPU chose: the
    /// tokens (best ids, or draws when sampling) of the chain's rows `link.ids_from..`, taken on
    /// the device, so that a draft and its verification need no read in between. Returns the
    /// last `rows` rows' logits; [`Logits::summarize_into`] then writes their summaries at
    /// `link.summaries_at`. The GPU path only.
    ///
    /// # Errors
    /// As [`Llama::forward`]; [`ModelError::Unsupported`] off the GPU path;
    /// [`ModelError::Config`] for `rows` of 0 or past the input, or summaries past the chain.
    pub fn forward_linked(
        &self,
        tokens: &[u32],
        link: ChainLink<'_>,
        cache: &mut KvCache,
        rows: usize,
    ) -> Result<Logits> {
        let Some(t) = tokens
            .len()
            .checked_add(link.ids)
            .filter(|&t| t <= cache.capacity())
        else {
            return Err(ModelError::ContextOverflow {
                cached: cache.len(),
                new: tokens.len().saturating_add(link.ids),
                capacity: cache.capacity(),
            });
        };
        let mut input = tokens.to_vec();
        // Placeholders: the link kernel writes the chosen ids over them on the device.
        input.resize(t, 0);
        if rows == 0 || rows > input.len() {
            return Err(ModelError::Config(format!(
                "logit rows {rows} of a forward over {} tokens (1 to all of them)",
                input.len()
            )));
        }
        self.forward_tail(&input, cache, rows, Some(link))
    }

    /// Runs a token tree after what `cache` holds in one pass and returns every row's logits,
    /// `[t, vocab]`: row r sits at position `cache.len()` + its depth and attends to the cache,
    /// its ancestors and itself, so its logits are — bit for bit, on the packed CPU path —
    /// those a chain forward over its path gives. `parents[r]` is `None` for a root (the first
    /// row, the last accepted token, is one), else an earlier row. Every row's keys and values
    /// are written at `cache.len() + r`; [`KvCache::keep_rows`] then keeps the accepted path.
    ///
    /// # Errors
    /// As [`Llama::extend_tree`].
    pub fn forward_tree(
        &self,
        tokens: &[u32],
        parents: &[Option<usize>],
        cache: &mut KvCache,
    ) -> Result<Logits> {
        self.extend_tree(cache.len(), tokens, parents, cache)
    }

    /// Adds `tokens` as the next rows of a token tree whose rows start at cache row `base`
    /// (its earlier rows already cached, `cache.len() − base` of them) and returns the new
    /// rows' logits, `[tokens.len(), vocab]`; `parents` lists every row of the tree, the new
    /// ones last. A drafter grows its tree this way, a depth at a time; each row's logits are
    /// those of the chain over its path, as with [`Llama::forward_tree`].
    ///
    /// # Errors
    /// As [`Llama::forward`]; [`ModelError::TreeParent`] for a parent that is not an earlier
    /// row or a parent list that does not end with the new rows.
    pub fn extend_tree(
        &self,
        base: usize,
        tokens: &[u32],
        parents: &[Option<usize>],
        cache: &mut KvCache,
    ) -> Result<Logits> {
        let cached = cache.len().checked_sub(base);
        if cached.and_then(|c| c.checked_add(tokens.len())) != Some(parents.len()) {
            return Err(ModelError::TreeParent {
                row: parents.len(),
                parent: None,
            });
        }
        if let Some((row, &parent)) = parents
            .iter()
            .enumerate()
            .find(|&(r, p)| p.is_some_and(|p| p >= r))
        {
            return Err(ModelError::TreeParent { row, parent });
        }
        let (start, end) = self.check_input(tokens, cache)?;
        let c = &self.config;
        let t = tokens.len();
        let tree = Some((base, parents));
        let logits = match &self.body {
            Body::Tensors(m) => {
                let all = m.forward(c, &self.device, tokens, cache, start, tree)?; // [1, t, vocab]
                Logits::device(self.limit_ids(all))
            }
            Body::Host(m) => {
                let layers = cache
                    .host_layers()
                    .filter(|l| l.len() == m.blocks.len())
                    .ok_or(ModelError::CacheKind)?;
                let logits = m.forward(c, tokens, tree, start, layers, t, self.logit_ids)?; // [t, vocab]
                Logits::host(logits, t, c.vocab_size)
            }
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => {
                let cache = cache.gpu_layers().ok_or(ModelError::CacheKind)?;
                m.forward(c, tokens, cache, start, tree, t, self.logit_ids, None)? // [t, vocab]
            }
        };
        cache.advance(end);
        Ok(logits)
    }

    /// Logits `[1, rows, vocab]` with the ids at or past [`Llama::with_vocab_limit`]'s limit set
    /// to −inf (burn paths compute every logit).
    fn limit_ids(&self, logits: Tensor<3>) -> Tensor<3> {
        let [_, rows, v] = logits.dims();
        let n = self.logit_ids;
        if n < v {
            let masked = Tensor::full([1, rows, v - n], f32::NEG_INFINITY, &self.device);
            Tensor::cat(vec![logits.slice([0..1, 0..rows, 0..n]), masked], 2)
        } else {
            logits
        }
    }

    /// Refuses an empty input, a token outside the vocabulary or an input past the cache's
    /// capacity; returns the positions the input will take, `start..end`.
    fn check_input(&self, tokens: &[u32], cache: &KvCache) -> Result<(usize, usize)> {
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
        let start = cache.len();
        match start.checked_add(t).filter(|&e| e <= cache.capacity()) {
            Some(end) => Ok((start, end)),
            None => Err(ModelError::ContextOverflow {
                cached: start,
                new: t,
                capacity: cache.capacity(),
            }),
        }
    }

    /// Logits of the last `rows` (1 ≤ rows ≤ t) positions, `[rows, vocab]`.
    /// With `link`, the last `link.ids` tokens are placeholders the GPU fills from a chain.
    fn forward_tail(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        rows: usize,
        link: Option<ChainLink<'_>>,
    ) -> Result<Logits> {
        let c = &self.config;
        let t = tokens.len();
        let (start, end) = self.check_input(tokens, cache)?;
        #[cfg(any(feature = "wgpu", feature = "webgpu"))]
        let gpu_link = link.map(|l| {
            let kernels = mars_kernels::gpu::Link {
                ids_from: l.ids_from,
                ids: l.ids,
                summaries_at: l.summaries_at,
            };
            (l.chain.inner(), kernels)
        });
        #[cfg(any(feature = "wgpu", feature = "webgpu"))]
        let linked = matches!(self.body, Body::Gpu(_));
        #[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
        let linked = false;
        if link.is_some() && !linked {
            return Err(ModelError::Unsupported(
                "ids chained on a device: only the GPU path has them".into(),
            ));
        }
        let logits = match &self.body {
            Body::Tensors(m) => {
                let all = m.forward(c, &self.device, tokens, cache, start, None)?; // [1, t, vocab]
                let last = if rows == t {
                    all
                } else {
                    all.slice([0..1, t - rows..t, 0..c.vocab_size]) // [1, rows, vocab]
                };
                Logits::device(self.limit_ids(last))
            }
            Body::Host(m) => {
                let layers = cache
                    .host_layers()
                    .filter(|l| l.len() == m.blocks.len())
                    .ok_or(ModelError::CacheKind)?;
                let logits = m.forward(c, tokens, None, start, layers, rows, self.logit_ids)?; // [rows, vocab]
                Logits::host(logits, rows, c.vocab_size)
            }
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => {
                let cache = cache.gpu_layers().ok_or(ModelError::CacheKind)?;
                m.forward(
                    c,
                    tokens,
                    cache,
                    start,
                    None,
                    rows,
                    self.logit_ids,
                    gpu_link,
                )? // [rows, vocab]
            }
        };
        cache.advance(end);
        Ok(logits)
    }

    /// The weight path the model was loaded on.
    pub fn weight_path(&self) -> WeightPath {
        self.weights
    }

    /// Launches the head's product takes on the GPU path (one per part of a matrix over the
    /// adapter's largest binding); `None` on the other paths.
    pub fn gpu_head_launches(&self) -> Option<usize> {
        match &self.body {
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => Some(m.head_launches()),
            _ => None,
        }
    }

    /// Weights converted to Q8_0 at load because the kernels have no path for their type, as
    /// "name (type)" (empty on the f32 path).
    pub fn converted(&self) -> &[String] {
        match &self.body {
            Body::Host(m) => &m.converted,
            Body::Tensors(m) => &m.converted,
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => &m.converted,
        }
    }

    /// Bytes of weights one forward pass reads: every matrix (as stored: blocks or f32), the
    /// embedding rows aside.
    pub fn matrix_bytes(&self) -> u64 {
        match &self.body {
            Body::Tensors(m) => {
                let blocks: u64 = m
                    .blocks
                    .iter()
                    .map(|b| {
                        [&b.wq, &b.wk, &b.wv, &b.wo, &b.w_gate, &b.w_up, &b.w_down]
                            .into_iter()
                            .map(Linear::bytes)
                            .sum::<u64>()
                    })
                    .sum();
                blocks + m.lm_head.bytes()
            }
            Body::Host(m) => {
                let blocks: u64 = m
                    .blocks
                    .iter()
                    .flat_map(|b| b.matrices())
                    .map(|w| w.bytes() as u64)
                    .sum();
                blocks + m.lm_head.bytes() as u64
            }
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => m.matrix_bytes(),
        }
    }
}

impl TensorModel {
    /// [`Llama::forward`] on burn tensors: logits `[1, t, vocab]`. With `tree = (base,
    /// parents)` the tokens are a token tree's last rows, as in [`Llama::extend_tree`].
    fn forward(
        &self,
        c: &LlamaConfig,
        device: &Device,
        tokens: &[u32],
        cache: &mut KvCache,
        start: usize,
        tree: Option<(usize, &[Option<usize>])>,
    ) -> Result<Tensor<3>> {
        let t = tokens.len();
        let end = start + t;
        let mut x = self.embed(tokens, c.d_model, device)?; // [1, t, d_model]
        let half = c.head_dim / 2;
        let (cos, sin, mask) = match tree {
            None => (
                self.rope_cos.clone().slice(start..end), // [t, head_dim / 2]
                self.rope_sin.clone().slice(start..end),
                causal_mask(start, t, group_rows(c, t), device), // [1, 1, group * t, end]
            ),
            Some((base, parents)) => {
                let at: Vec<i64> = tree_positions(base, parents, t)
                    .into_iter()
                    .map(|p| p as i64)
                    .collect();
                let at = Tensor::<1, Int>::from_data(TensorData::new(at, [t]), device);
                (
                    self.rope_cos.clone().select(0, at.clone()), // [t, head_dim / 2]
                    self.rope_sin.clone().select(0, at),
                    tree_mask(base, parents, t, group_rows(c, t), device), // [1, 1, group * t, end]
                )
            }
        };
        let cos = cos.reshape([1, t, 1, half, 1]);
        let sin = sin.reshape([1, t, 1, half, 1]);

        for (layer, block) in self.blocks.iter().enumerate() {
            let h = rms_norm(x.clone(), &block.attn_norm, c.rms_eps);
            let attn = self.attention(c, block, h, layer, cache, start, &cos, &sin, &mask)?;
            x = x + attn;
            let h = rms_norm(x.clone(), &block.ffn_norm, c.rms_eps);
            let gated = silu(block.w_gate.forward(h.clone())?) * block.w_up.forward(h)?; // [1, t, d_ff]
            let ffn = block.w_down.forward(gated)?; // [1, t, d_model]
            x = x + ffn;
        }
        let x = rms_norm(x, &self.out_norm, c.rms_eps); // [1, t, d_model]
        self.lm_head.forward(x) // [1, t, vocab]
    }

    /// The embedding rows of `tokens` (checked against the vocabulary): `[1, t, d_model]`.
    fn embed(&self, tokens: &[u32], d: usize, device: &Device) -> Result<Tensor<3>> {
        let t = tokens.len();
        let ids: Vec<i64> = tokens.iter().map(|&id| i64::from(id)).collect();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [t]), device);
        Ok(self.embedding.clone().select(0, ids).reshape([1, t, d]))
    }

    #[allow(clippy::too_many_arguments)] // the pieces of one attention call, kept explicit
    fn attention(
        &self,
        c: &LlamaConfig,
        block: &Block,
        h: Tensor<3>, // [1, t, d_model]
        layer: usize,
        cache: &mut KvCache,
        start: usize,
        cos: &Tensor<5>, // [1, t, 1, head_dim / 2, 1]
        sin: &Tensor<5>,
        mask: &Tensor<4>, // [1, 1, group * t, start + t]
    ) -> Result<Tensor<3>> {
        let t = h.dims()[1];
        let (hd, nh, nkv) = (c.head_dim, c.n_heads, c.n_kv_heads);
        let project = |w: &Linear, b: &Option<Tensor<3>>| -> Result<Tensor<3>> {
            let y = w.forward(h.clone())?;
            Ok(match b {
                Some(b) => y + b.clone(),
                None => y,
            })
        };
        let q = project(&block.wq, &block.bq)?.reshape([1, t, nh, hd]); // [1, t, n_heads, head_dim]
        let k = project(&block.wk, &block.bk)?.reshape([1, t, nkv, hd]); // [1, t, n_kv, head_dim]
        let v = project(&block.wv, &block.bv)?.reshape([1, t, nkv, hd]); // [1, t, n_kv, head_dim]
        let (q, k) = match (&block.q_norm, &block.k_norm) {
            (Some(qn), Some(kn)) => (rms_norm(q, qn, c.rms_eps), rms_norm(k, kn, c.rms_eps)),
            _ => (q, k),
        };
        let q = rope(q, cos, sin, c.rope_style()).swap_dims(1, 2); // [1, n_heads, t, head_dim]
        let k = rope(k, cos, sin, c.rope_style()).swap_dims(1, 2); // [1, n_kv, t, head_dim]
        let v = v.swap_dims(1, 2); // [1, n_kv, t, head_dim]

        let end = start + t;
        let (keys, values) = cache
            .write(layer, start..end, k, v)
            .ok_or(ModelError::CacheKind)?;
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

/// Positions of a token tree's last `t` rows: the tree's base plus each row's depth (`parents`
/// lists every row; a parent is an earlier row, checked by the caller).
pub(crate) fn tree_positions(base: usize, parents: &[Option<usize>], t: usize) -> Vec<usize> {
    let mut depth: Vec<usize> = Vec::with_capacity(parents.len());
    for (r, &p) in parents.iter().enumerate() {
        depth.push(p.filter(|&p| p < r).map_or(0, |p| depth[p] + 1));
    }
    depth[parents.len() - t..]
        .iter()
        .map(|d| base + d)
        .collect()
}

/// Additive tree mask `[1, 1, rows, base + parents.len()]` for a token tree's last `t` rows (the
/// tree's rows at cache rows `base..`): mask row r (query heads folded with those rows, r % t)
/// sees the cache before `base`, its row's ancestors and the row itself.
fn tree_mask(
    base: usize,
    parents: &[Option<usize>],
    t: usize,
    rows: usize,
    device: &Device,
) -> Tensor<4> {
    let end = base + parents.len();
    let first = parents.len() - t;
    let mut m = vec![f32::NEG_INFINITY; rows * end];
    for r in 0..rows {
        let row = &mut m[r * end..(r + 1) * end];
        row[..base].fill(0.0);
        let mut at = Some(first + r % t);
        while let Some(a) = at {
            row[base + a] = 0.0;
            at = parents[a].filter(|&p| p < a);
        }
    }
    Tensor::from_data(TensorData::new(m, [1, 1, rows, end]), device)
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
