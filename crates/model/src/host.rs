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

use std::sync::Arc;

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
    pub(crate) fn forward(
        &self,
        c: &LlamaConfig,
        tokens: &[u32],
        start: usize,
        cache: &mut [HostLayerCache],
        logit_rows: usize,
        logit_ids: usize,
    ) -> Result<Vec<f32>> {
        self.kernels
            .run(|| self.forward_in_pool(c, tokens, start, cache, logit_rows, logit_ids))
    }

    /// [`HostModel::forward`], on the kernels' pool.
    fn forward_in_pool(
        &self,
        c: &LlamaConfig,
        tokens: &[u32],
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
        let mut scratch = Scratch::default();
        let mut x = vec![0f32; t * d]; // [t, d_model]
        for (&id, row) in tokens.iter().zip(x.chunks_exact_mut(d)) {
            self.embedding.dequantize_row(id as usize, row)?;
        }
        let mut h = vec![0f32; t * d]; // [t, d_model]
        let mut q = vec![0f32; t * q_dim]; // [t, n_heads * head_dim]
        let mut k = vec![0f32; t * kv_dim]; // [t, n_kv_heads * head_dim]
        let mut v = vec![0f32; t * kv_dim]; // [t, n_kv_heads * head_dim]
        let mut attn = vec![0f32; t * q_dim]; // [t, n_heads * head_dim]
        let mut gate = vec![0f32; t * c.d_ff]; // [t, d_ff]
        let mut up = vec![0f32; t * c.d_ff]; // [t, d_ff]
        let mut delta = vec![0f32; t * d]; // [t, d_model]
        let end = start + t;
        for (block, layer) in self.blocks.iter().zip(cache.iter_mut()) {
            rms_norm(&x, &block.attn_norm, c.rms_eps, &mut h);
            self.linears(
                [
                    (&*block.wq, &mut q),
                    (&*block.wk, &mut k),
                    (&*block.wv, &mut v),
                ],
                &h,
                &mut scratch,
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
            self.rope(c, &mut q, t, start);
            self.rope(c, &mut k, t, start);
            layer.keys[start * kv_dim..end * kv_dim].copy_from_slice(&k);
            layer.values[start * kv_dim..end * kv_dim].copy_from_slice(&v);
            self.kernels
                .attention(heads, start, &q, &layer.keys, &layer.values, &mut attn)?;
            self.linear(&block.wo, &attn, &mut delta, &mut scratch)?;
            add(&mut x, &delta);
            rms_norm(&x, &block.ffn_norm, c.rms_eps, &mut h);
            self.linears(
                [(&*block.w_gate, &mut gate), (&*block.w_up, &mut up)],
                &h,
                &mut scratch,
            )?;
            self.kernels.silu_mul(&mut gate, &up)?; // SiLU(gate) · up
            self.linear(&block.w_down, &gate, &mut delta, &mut scratch)?;
            add(&mut x, &delta);
        }
        let tail = &x[(t - logit_rows) * d..]; // [logit_rows, d_model]
        let h = &mut h[..logit_rows * d]; // [logit_rows, d_model]
        rms_norm(tail, &self.out_norm, c.rms_eps, h);
        let v = c.vocab_size;
        let mut logits = vec![0f32; logit_rows * v]; // [logit_rows, vocab]
        if logit_ids >= v {
            self.linear(&self.lm_head, h, &mut logits, &mut scratch)?;
        } else {
            // The head's first logit_ids rows.
            let mut kept = vec![0f32; logit_rows * logit_ids]; // [logit_rows, logit_ids]
            self.linear(&self.lm_head, h, &mut kept, &mut scratch)?;
            for (row, part) in logits.chunks_exact_mut(v).zip(kept.chunks_exact(logit_ids)) {
                row[..logit_ids].copy_from_slice(part);
                row[logit_ids..].fill(f32::NEG_INFINITY);
            }
        }
        Ok(logits)
    }

    /// `y [t, out] = x [t, in] · Wᵀ`, 16 rows per kernel call; `out` is y's width, the first
    /// `out` rows of W (all of them but for a vocabulary-limited head).
    fn linear(&self, w: &QMatrix, x: &[f32], y: &mut [f32], s: &mut Scratch) -> Result<()> {
        self.linears([(w, y)], x, s)
    }

    /// [`HostModel::linear`] for several matrices of one input (q/k/v, gate/up): each 16-row
    /// chunk of `x` is quantized once for all of them.
    fn linears<const N: usize>(
        &self,
        mut outs: [(&QMatrix, &mut [f32]); N],
        x: &[f32],
        s: &mut Scratch,
    ) -> Result<()> {
        let din = outs[0].0.cols();
        let t = x.len() / din;
        let forms = outs
            .iter()
            .fold(Forms::default(), |f, (w, _)| f | self.kernels.forms(w));
        for (chunk, xs) in x.chunks(MAX_ROWS * din).enumerate() {
            let rows = xs.len() / din;
            s.acts.quantize_for(xs, rows, din, forms)?;
            // One parallel region for all the matrices of this input.
            let mut products = outs.each_mut().map(|(w, y)| {
                let dout = y.len() / t;
                Product {
                    w,
                    rows: 0..dout,
                    y: &mut y[chunk * MAX_ROWS * dout..][..rows * dout],
                }
            });
            self.kernels.matmul_batch(&s.acts, &mut products)?;
        }
        Ok(())
    }

    /// Rotates every head of `x` (`[t, heads * head_dim]`, row r at position start + r) by
    /// the position's angles.
    fn rope(&self, c: &LlamaConfig, x: &mut [f32], t: usize, start: usize) {
        let half = c.head_dim / 2;
        let style = c.rope_style();
        let row_len = x.len() / t;
        for (r, row) in x.chunks_exact_mut(row_len).enumerate() {
            let at = (start + r) * half;
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

/// Reused buffers of one forward pass.
#[derive(Default)]
struct Scratch {
    acts: QActs,
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
