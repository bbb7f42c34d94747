//! The CPU forward pass over packed GGUF blocks: every matrix runs on mars-kernels, attention on
//! its row-by-row kernel, and the rest (norms, RoPE, SwiGLU, residuals) are loops over `Vec<f32>`
//! here. No burn op runs and no tensor is copied between steps.
//!
//! Why not burn ops around the kernels: each linear layer would read its input back from a
//! tensor and write its output into a new one (~200 round trips per token), and flex's batched
//! attention sums in an order that depends on the batch, which the 8-bit activation rounding
//! turns into logit differences of up to ~1 between a 1-row decode and a 5-row verification.
//! Here every operation on a row depends only on that row (and the cache), so a row's logits are
//! bit-identical whether it is decoded alone or verified with k others — greedy strict
//! speculation equals target-only decoding exactly.

use std::sync::{Arc, Mutex};

use mars_kernels::{Forms, Heads, Kernels, MAX_ROWS, Product, QActs, QMatrix};

use crate::config::{LlamaConfig, RopeStyle};
use crate::error::Result;

/// One decoder block's weights on the host. Matrices are `[out, in]` blocks.
#[derive(Debug)]
pub(crate) struct HostBlock {
    pub(crate) attn_norm: Vec<f32>,      // [d_model]
    pub(crate) wq: Arc<QMatrix>,         // [n_heads * head_dim, d_model]
    pub(crate) wk: Arc<QMatrix>,         // [n_kv_heads * head_dim, d_model]
    pub(crate) wv: Arc<QMatrix>,         // [n_kv_heads * head_dim, d_model]
    pub(crate) wo: Arc<QMatrix>,         // [d_model, n_heads * head_dim]
    pub(crate) bq: Option<Vec<f32>>,     // [n_heads * head_dim] (Qwen2)
    pub(crate) bk: Option<Vec<f32>>,     // [n_kv_heads * head_dim]
    pub(crate) bv: Option<Vec<f32>>,     // [n_kv_heads * head_dim]
    pub(crate) q_norm: Option<Vec<f32>>, // [head_dim] (Qwen3)
    pub(crate) k_norm: Option<Vec<f32>>, // [head_dim]
    pub(crate) ffn_norm: Vec<f32>,       // [d_model]
    pub(crate) w_gate: Arc<QMatrix>,     // [d_ff, d_model]
    pub(crate) w_up: Arc<QMatrix>,       // [d_ff, d_model]
    pub(crate) w_down: Arc<QMatrix>,     // [d_model, d_ff]
}

impl HostBlock {
    /// The block's matrices, for byte counts.
    pub(crate) fn matrices(&self) -> [&QMatrix; 7] {
        [
            &self.wq,
            &self.wk,
            &self.wv,
            &self.wo,
            &self.w_gate,
            &self.w_up,
            &self.w_down,
        ]
    }
}

/// A model on the host: blocks shared by reference (a layer-skip drafter is a list of the same
/// `Arc`s), RoPE tables, and the kernels' thread pool.
#[derive(Debug, Clone)]
pub(crate) struct HostModel {
    pub(crate) embedding: Arc<QMatrix>, // [vocab, d_model]
    pub(crate) blocks: Vec<Arc<HostBlock>>,
    pub(crate) out_norm: Arc<Vec<f32>>, // [d_model]
    pub(crate) lm_head: Arc<QMatrix>,   // [vocab, d_model] (the embedding's blocks when tied)
    pub(crate) rope_cos: Arc<Vec<f32>>, // [context_length, head_dim / 2]
    pub(crate) rope_sin: Arc<Vec<f32>>, // [context_length, head_dim / 2]
    pub(crate) kernels: Arc<Kernels>,
    /// A forward pass's buffers, kept for the next (a model clone — a layer-skip drafter —
    /// shares them; a pass that finds them in use makes its own).
    pub(crate) scratch: Arc<Mutex<Scratch>>,
    /// Tensors converted to Q8_0 at load (their type had no kernel), as "name (type)".
    pub(crate) converted: Arc<Vec<String>>,
}

/// A layer's cached keys and values: `[capacity, n_kv_heads * head_dim]` each, position-major,
/// so a token's entries are one contiguous write.
#[derive(Debug, Clone)]
pub(crate) struct HostLayerCache {
    pub(crate) keys: Vec<f32>,
    pub(crate) values: Vec<f32>,
}

impl HostModel {
    /// Logits `[logit_rows, vocab]` of the last `logit_rows` of `tokens` (at positions
    /// `start..start + t`), writing every token's keys and values into `cache` (one entry per
    /// block). Tokens, positions, `logit_rows ≤ t` and `1 ≤ logit_ids ≤ vocab` are checked by
    /// the caller. The output head is the largest matrix of a small model: prefill and drafting,
    /// which need one row's logits, skip it for the other rows, and a vocabulary-limited drafter
    /// runs it on its first `logit_ids` rows only (the rest of the logits are −inf).
    ///
    /// With `tree = (base, parents)` the tokens are the last rows of a token tree whose rows
    /// start at cache row `base` and whose every row `parents` lists (see
    /// [`crate::Llama::extend_tree`]): a row sits at position base + its depth and attends to
    /// the cache before `base`, its ancestors and itself.
    #[allow(clippy::too_many_arguments)] // the pass's operands and its two output limits
    pub(crate) fn forward(
        &self,
        c: &LlamaConfig,
        tokens: &[u32],
        tree: Option<(usize, &[Option<usize>])>,
        start: usize,
        cache: &mut [HostLayerCache],
        logit_rows: usize,
        logit_ids: usize,
    ) -> Result<Vec<f32>> {
        self.kernels
            .run(|| self.forward_in_pool(c, tokens, tree, start, cache, logit_rows, logit_ids))
    }

    /// [`HostModel::forward`], on the kernels' pool.
    #[allow(clippy::too_many_arguments)]
    fn forward_in_pool(
        &self,
        c: &LlamaConfig,
        tokens: &[u32],
        tree: Option<(usize, &[Option<usize>])>,
        start: usize,
        cache: &mut [HostLayerCache],
        logit_rows: usize,
        logit_ids: usize,
    ) -> Result<Vec<f32>> {
        let (t, d, hd) = (tokens.len(), c.d_model, c.head_dim);
        let (q_dim, kv_dim) = (c.n_heads * hd, c.n_kv_heads * hd);
        let heads = Heads {
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            head_dim: hd,
        };
        let mut own = None;
        let mut held = self.scratch.try_lock();
        let scratch: &mut Scratch = match held.as_deref_mut() {
            Ok(s) => s,
            Err(_) => own.insert(Scratch::default()),
        };
        let mut b = std::mem::take(&mut scratch.buffers);
        for (buffer, len) in [
            (&mut b.x, t * d),
            (&mut b.h, t * d),
            (&mut b.q, t * q_dim),
            (&mut b.k, t * kv_dim),
            (&mut b.v, t * kv_dim),
            (&mut b.attn, t * q_dim),
            (&mut b.gate, t * c.d_ff),
            (&mut b.up, t * c.d_ff),
            (&mut b.delta, t * d),
        ] {
            buffer.clear();
            buffer.resize(len, 0.0);
        }
        let Buffers {
            mut x,     // [t, d_model]
            mut h,     // [t, d_model]
            mut q,     // [t, n_heads * head_dim]
            mut k,     // [t, n_kv_heads * head_dim]
            mut v,     // [t, n_kv_heads * head_dim]
            mut attn,  // [t, n_heads * head_dim]
            mut gate,  // [t, d_ff]
            mut up,    // [t, d_ff]
            mut delta, // [t, d_model]
        } = b;
        for (&id, row) in tokens.iter().zip(x.chunks_exact_mut(d)) {
            self.embedding.dequantize_row(id as usize, row)?;
        }
        let acts = &mut scratch.acts;
        let end = start + t;
        // Each row's position: the next in line, or in a tree the tree's base plus its depth.
        let positions: Vec<usize> = match tree {
            None => (start..end).collect(),
            Some((base, parents)) => crate::llama::tree_positions(base, parents, t),
        };
        for (block, layer) in self.blocks.iter().zip(cache.iter_mut()) {
            rms_norm(&x, &block.attn_norm, c.rms_eps, &mut h);
            self.linears(
                [
                    (&*block.wq, &mut q),
                    (&*block.wk, &mut k),
                    (&*block.wv, &mut v),
                ],
                &h,
                acts,
            )?;
            for (y, b) in [
                (&mut q, &block.bq),
                (&mut k, &block.bk),
                (&mut v, &block.bv),
            ] {
                if let Some(b) = b {
                    add_rows(y, b);
                }
            }
            if let (Some(qn), Some(kn)) = (&block.q_norm, &block.k_norm) {
                let (qc, kc) = (q.clone(), k.clone());
                rms_norm(&qc, qn, c.rms_eps, &mut q);
                rms_norm(&kc, kn, c.rms_eps, &mut k);
            }
            self.rope(c, &mut q, &positions);
            self.rope(c, &mut k, &positions);
            layer.keys[start * kv_dim..end * kv_dim].copy_from_slice(&k);
            layer.values[start * kv_dim..end * kv_dim].copy_from_slice(&v);
            match tree {
                None => self.kernels.attention(
                    heads,
                    start,
                    &q,
                    &layer.keys,
                    &layer.values,
                    &mut attn,
                )?,
                Some((base, parents)) => self.kernels.attention_tree(
                    heads,
                    base,
                    &q,
                    &layer.keys,
                    &layer.values,
                    parents,
                    &mut attn,
                )?,
            }
            self.linear(&block.wo, &attn, &mut delta, acts)?;
            add(&mut x, &delta);
            rms_norm(&x, &block.ffn_norm, c.rms_eps, &mut h);
            self.linears(
                [(&*block.w_gate, &mut gate), (&*block.w_up, &mut up)],
                &h,
                acts,
            )?;
            self.kernels.silu_mul(&mut gate, &up)?; // SiLU(gate) · up
            self.linear(&block.w_down, &gate, &mut delta, acts)?;
            add(&mut x, &delta);
        }
        let tail = &x[(t - logit_rows) * d..]; // [logit_rows, d_model]
        let hl = &mut h[..logit_rows * d]; // [logit_rows, d_model]
        rms_norm(tail, &self.out_norm, c.rms_eps, hl);
        let vocab = c.vocab_size;
        let mut logits = vec![0f32; logit_rows * vocab]; // [logit_rows, vocab]
        if logit_ids >= vocab {
            self.linear(&self.lm_head, hl, &mut logits, acts)?;
        } else {
            // The head's first logit_ids rows.
            let mut kept = vec![0f32; logit_rows * logit_ids]; // [logit_rows, logit_ids]
            self.linear(&self.lm_head, hl, &mut kept, acts)?;
            for (row, part) in logits
                .chunks_exact_mut(vocab)
                .zip(kept.chunks_exact(logit_ids))
            {
                row[..logit_ids].copy_from_slice(part);
                row[logit_ids..].fill(f32::NEG_INFINITY);
            }
        }
        if let Ok(s) = held.as_deref_mut() {
            s.buffers = Buffers {
                x,
                h,
                q,
                k,
                v,
                attn,
                gate,
                up,
                delta,
            };
        }
        Ok(logits)
    }

    /// `y [t, out] = x [t, in] · Wᵀ`, 16 rows per kernel call; `out` is y's width, the first
    /// `out` rows of W (all of them but for a vocabulary-limited head).
    fn linear(&self, w: &QMatrix, x: &[f32], y: &mut [f32], s: &mut QActs) -> Result<()> {
        self.linears([(w, y)], x, s)
    }

    /// [`HostModel::linear`] for several matrices of one input (q/k/v, gate/up): each 16-row
    /// chunk of `x` is quantized once for all of them.
    fn linears<const N: usize>(
        &self,
        mut outs: [(&QMatrix, &mut [f32]); N],
        x: &[f32],
        s: &mut QActs,
    ) -> Result<()> {
        let din = outs[0].0.cols();
        let t = x.len() / din;
        let forms = outs
            .iter()
            .fold(Forms::default(), |f, (w, _)| f | self.kernels.forms(w));
        for (chunk, xs) in x.chunks(MAX_ROWS * din).enumerate() {
            let rows = xs.len() / din;
            s.quantize_for(xs, rows, din, forms)?;
            // One parallel region for all the matrices of this input.
            let mut products = outs.each_mut().map(|(w, y)| {
                let dout = y.len() / t;
                Product {
                    w,
                    rows: 0..dout,
                    y: &mut y[chunk * MAX_ROWS * dout..][..rows * dout],
                }
            });
            self.kernels.matmul_batch(s, &mut products)?;
        }
        Ok(())
    }

    /// Rotates every head of `x` (`[t, heads * head_dim]`, row r at `positions[r]`) by the
    /// position's angles.
    fn rope(&self, c: &LlamaConfig, x: &mut [f32], positions: &[usize]) {
        let half = c.head_dim / 2;
        let style = c.rope_style();
        let row_len = x.len() / positions.len();
        for (row, &position) in x.chunks_exact_mut(row_len).zip(positions) {
            let at = position * half;
            let (cos, sin) = (&self.rope_cos[at..at + half], &self.rope_sin[at..at + half]);
            for head in row.chunks_exact_mut(c.head_dim) {
                for i in 0..half {
                    let (a, b) = rope_pair(style, i, half);
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * cos[i] - x1 * sin[i];
                    head[b] = x0 * sin[i] + x1 * cos[i];
                }
            }
        }
    }
}

/// A forward pass's buffers.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    acts: QActs,
    buffers: Buffers,
}

/// The activations of a forward pass, reused from one pass to the next.
#[derive(Debug, Default)]
struct Buffers {
    x: Vec<f32>,     // [t, d_model]
    h: Vec<f32>,     // [t, d_model]
    q: Vec<f32>,     // [t, n_heads * head_dim]
    k: Vec<f32>,     // [t, n_kv_heads * head_dim]
    v: Vec<f32>,     // [t, n_kv_heads * head_dim]
    attn: Vec<f32>,  // [t, n_heads * head_dim]
    gate: Vec<f32>,  // [t, d_ff]
    up: Vec<f32>,    // [t, d_ff]
    delta: Vec<f32>, // [t, d_model]
}

/// RMSNorm of each `w.len()`-long row of `x` into `out`: x / sqrt(mean(x²) + eps) · w.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
        let mean = xr.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
        let inv = 1.0 / (mean + eps).sqrt();
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * inv * g;
        }
    }
}

/// `y[r] += b` for every row r of `y`.
fn add_rows(y: &mut [f32], b: &[f32]) {
    for row in y.chunks_exact_mut(b.len()) {
        add(row, b);
    }
}

fn add(y: &mut [f32], x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a += b;
    }
}

/// Which two values of a head RoPE rotates together, for pair i of head_dim / 2.
fn rope_pair(style: RopeStyle, i: usize, half: usize) -> (usize, usize) {
    match style {
        RopeStyle::Interleaved => (2 * i, 2 * i + 1),
        RopeStyle::Halves => (i, i + half),
    }
}
