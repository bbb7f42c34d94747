//! The reference back-end: every weight dequantized to f32 burn tensors, on any burn device
//! (flex on the CPU, wgpu natively, WebGPU in the browser), run by burn ops. The paths the
//! packed ones are measured against (4–8× the memory; on the CPU a row's logits then depend on
//! the batch in the last bits, since burn's matmuls sum in another order for another shape).

use std::ops::Range;

use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::backend::{Backend, LayerCache, Pass, Reads, rope_tables, tree_positions};
use crate::config::{LlamaConfig, RopeStyle};
use crate::error::{ModelError, Result};
use crate::tensors::{BlockTensors, Named, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};
use crate::weights::{Weights, freq_factors, read};

/// A weight matrix and how it is applied to activations `[1, t, in]`.
#[derive(Debug, Clone)]
enum Linear {
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

/// The weights on burn tensors, on the burn device they were loaded on.
#[derive(Debug, Clone)]
pub(crate) struct ReferenceModel {
    device: Device,
    embedding: Tensor<2>, // [vocab, d_model]
    blocks: Vec<Block>,
    out_norm: Tensor<3>, // [1, 1, d_model]
    lm_head: Linear,     // vocab × d_model (shares the embedding's memory when tied)
    rope_cos: Tensor<2>, // [context_length, head_dim / 2]
    rope_sin: Tensor<2>, // [context_length, head_dim / 2]
}

/// Keys and values per layer as burn tensors, each `[1, n_kv_heads, capacity, head_dim]`.
#[derive(Debug, Clone)]
pub(crate) struct ReferenceCache {
    keys: Vec<Tensor<4>>,   // per layer: [1, n_kv_heads, capacity, head_dim]
    values: Vec<Tensor<4>>, // per layer: [1, n_kv_heads, capacity, head_dim]
}

impl ReferenceCache {
    /// Writes keys and values `[1, n_kv_heads, t, head_dim]` of `layer` at `positions` and
    /// returns the layer's whole key and value tensors `[1, n_kv_heads, capacity, head_dim]`.
    fn write(
        &mut self,
        layer: usize,
        positions: Range<usize>,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>) {
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        let [_, nkv, _, hd] = k.dims();
        let at = [0..1, 0..nkv, positions, 0..hd];
        // Take the cache tensors out (a cheap handle stands in) so that slice_assign holds the
        // only reference and can write in place instead of copying the whole cache each step.
        let new_keys = std::mem::replace(keys, k.clone()).slice_assign(at.clone(), k);
        let new_values = std::mem::replace(values, v.clone()).slice_assign(at, v);
        *keys = new_keys.clone();
        *values = new_values.clone();
        (new_keys, new_values)
    }
}

impl LayerCache for ReferenceCache {
    fn move_rows(&mut self, moves: &[(usize, usize)]) -> Result<()> {
        for t in self.keys.iter_mut().chain(self.values.iter_mut()) {
            let [_, nkv, _, hd] = t.dims();
            for &(from, to) in moves {
                let row = t.clone().slice([0..1, 0..nkv, from..from + 1, 0..hd]);
                *t = t
                    .clone()
                    .slice_assign([0..1, 0..nkv, to..to + 1, 0..hd], row);
            }
        }
        Ok(())
    }
}

impl Backend for ReferenceModel {
    type Cache = ReferenceCache;
    /// `[1, rows, vocab]` on the model's device.
    type Logits = Tensor<3>;
    /// Whole rows only: nothing is summarised on the device.
    const READS: Reads = Reads {
        summaries: false,
        top: false,
        chain: false,
    };

    fn forward(
        &self,
        c: &LlamaConfig,
        pass: &Pass<'_>,
        cache: &mut ReferenceCache,
    ) -> Result<Tensor<3>> {
        if cache.keys.len() != self.blocks.len() {
            return Err(ModelError::CacheKind);
        }
        let t = pass.tokens.len();
        let all = self.forward_all(c, pass, cache)?; // [1, t, vocab]
        let last = if pass.rows == t {
            all
        } else {
            all.slice([0..1, t - pass.rows..t, 0..c.vocab_size]) // [1, rows, vocab]
        };
        // burn computes every logit: the ids past the limit are set to −inf afterwards.
        let (rows, v, n) = (pass.rows, c.vocab_size, pass.logit_ids);
        Ok(if n < v {
            let masked = Tensor::full([1, rows, v - n], f32::NEG_INFINITY, &self.device);
            Tensor::cat(vec![last.slice([0..1, 0..rows, 0..n]), masked], 2)
        } else {
            last
        })
    }

    fn new_cache(&self, c: &LlamaConfig, capacity: usize) -> Result<ReferenceCache> {
        let zeros = || Tensor::<4>::zeros([1, c.n_kv_heads, capacity, c.head_dim], &self.device);
        Ok(ReferenceCache {
            keys: self.blocks.iter().map(|_| zeros()).collect(),
            values: self.blocks.iter().map(|_| zeros()).collect(),
        })
    }

    fn with_layers(&self, layers: &[usize]) -> Self {
        Self {
            blocks: layers.iter().map(|&l| self.blocks[l].clone()).collect(),
            ..self.clone()
        }
    }

    fn matrix_bytes(&self) -> u64 {
        let blocks: u64 = self
            .blocks
            .iter()
            .map(|b| {
                [&b.wq, &b.wk, &b.wv, &b.wo, &b.w_gate, &b.w_up, &b.w_down]
                    .into_iter()
                    .map(Linear::bytes)
                    .sum::<u64>()
            })
            .sum();
        blocks + self.lm_head.bytes()
    }

    fn converted(&self) -> &[String] {
        &[]
    }
}

impl ReferenceModel {
    /// Logits `[1, t, vocab]` of every input row.
    fn forward_all(
        &self,
        c: &LlamaConfig,
        pass: &Pass<'_>,
        cache: &mut ReferenceCache,
    ) -> Result<Tensor<3>> {
        let (device, tokens, start, tree) = (&self.device, pass.tokens, pass.start, pass.tree);
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
        cache: &mut ReferenceCache,
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
        let (keys, values) = cache.write(layer, start..end, k, v);
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

fn vector(g: &dyn Weights, name: &str, len: usize, device: &Device) -> Result<Tensor<3>> {
    Ok(Tensor::from_data(
        TensorData::new(read(g, name, &[len])?, [1, 1, len]),
        device,
    ))
}

impl ReferenceModel {
    /// The weights of `c` from `g` as f32 burn tensors on `device`.
    ///
    /// # Errors
    /// Missing or mis-shaped tensors.
    pub(crate) fn load(c: &LlamaConfig, g: &dyn Weights, device: &Device) -> Result<Self> {
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
        Ok(Self {
            device: device.clone(),
            embedding,
            blocks,
            out_norm,
            lm_head,
            rope_cos: Tensor::from_data(TensorData::new(cos, [c.context_length, half]), device),
            rope_sin: Tensor::from_data(TensorData::new(sin, [c.context_length, half]), device),
        })
    }
}
