//! The CPU back-end: matrices kept as their GGUF blocks (packed for the kernels), and a forward
//! pass over them: every matrix runs on mars-kernels, attention on
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

use std::sync::{Arc, Mutex, OnceLock};

use mars_kernels::{Forms, Heads, Kernels, MAX_ROWS, Product, QActs, QMatrix};

use crate::backend::{Backend, LayerCache, Pass, Reads, rope_tables, tree_positions};
use crate::config::{LlamaConfig, RopeStyle};
use crate::error::{ModelError, Result};
use crate::tensors::{BlockTensors, Named, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};
use crate::weights::{Weights, freq_factors, packable_stored, read};

/// One decoder block's weights on the host. Matrices are `[out, in]` blocks.
#[derive(Debug)]
pub(crate) struct CpuBlock {
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

impl CpuBlock {
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
pub(crate) struct CpuModel {
    pub(crate) embedding: Arc<QMatrix>, // [vocab, d_model]
    pub(crate) blocks: Vec<Arc<CpuBlock>>,
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
pub(crate) struct CpuLayer {
    keys: Vec<f32>,   // [capacity, n_kv_heads * head_dim]
    values: Vec<f32>, // [capacity, n_kv_heads * head_dim]
}

/// The CPU back-end's KV cache: one [`CpuLayer`] a block.
#[derive(Debug, Clone)]
pub(crate) struct CpuCache {
    layers: Vec<CpuLayer>,
    capacity: usize,
}

impl LayerCache for CpuCache {
    fn move_rows(&mut self, moves: &[(usize, usize)]) -> Result<()> {
        for layer in &mut self.layers {
            let w = layer.keys.len() / self.capacity.max(1); // n_kv_heads * head_dim
            for &(from, to) in moves {
                layer.keys.copy_within(from * w..(from + 1) * w, to * w);
                layer.values.copy_within(from * w..(from + 1) * w, to * w);
            }
        }
        Ok(())
    }
}

impl Backend for CpuModel {
    type Cache = CpuCache;
    /// Row-major `[rows, vocab]` in host memory, handed over as computed.
    type Logits = Vec<f32>;
    /// The logits are already in host memory: nothing to summarise.
    const READS: Reads = Reads {
        summaries: false,
        top: false,
        chain: false,
    };

    fn forward(&self, c: &LlamaConfig, pass: &Pass<'_>, cache: &mut CpuCache) -> Result<Vec<f32>> {
        if cache.layers.len() != self.blocks.len() {
            return Err(ModelError::CacheKind);
        }
        let layers = &mut cache.layers;
        self.kernels.run(|| {
            self.forward_in_pool(
                c,
                pass.tokens,
                pass.tree,
                pass.start,
                layers,
                pass.rows,
                pass.logit_ids,
            )
        })
    }

    fn new_cache(&self, c: &LlamaConfig, capacity: usize) -> Result<CpuCache> {
        // capacity ≤ context_length and n_kv_heads × head_dim were checked by validate().
        let len = capacity * c.n_kv_heads * c.head_dim;
        let layers = self
            .blocks
            .iter()
            .map(|_| CpuLayer {
                keys: vec![0.0; len],
                values: vec![0.0; len],
            })
            .collect();
        Ok(CpuCache { layers, capacity })
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
            .flat_map(|b| b.matrices())
            .map(|w| w.bytes() as u64)
            .sum();
        blocks + self.lm_head.bytes() as u64
    }

    fn converted(&self) -> &[String] {
        &self.converted
    }
}

impl CpuModel {
    /// Logits `[logit_rows, vocab]` of the last `logit_rows` of `tokens` (at positions
    /// `start..start + t`), writing every token's keys and values into `cache` (one entry per
    /// block), on the kernels' pool. The output head is the largest matrix of a small model:
    /// prefill and drafting, which need one row's logits, skip it for the other rows, and a
    /// vocabulary-limited drafter runs it on its first `logit_ids` rows only (the rest of the
    /// logits are −inf). With `tree = (base, parents)` a row sits at position base + its depth
    /// and attends to the cache before `base`, its ancestors and itself.
    #[allow(clippy::too_many_arguments)]
    fn forward_in_pool(
        &self,
        c: &LlamaConfig,
        tokens: &[u32],
        tree: Option<(usize, &[Option<usize>])>,
        start: usize,
        cache: &mut [CpuLayer],
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
            Some((base, parents)) => tree_positions(base, parents, t),
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

    /// [`CpuModel::linear`] for several matrices of one input (q/k/v, gate/up): each 16-row
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

impl CpuModel {
    /// The weights of `c` from `g` as packed blocks on the host for the kernels of `threads`
    /// threads: no f32 copy of any matrix.
    ///
    /// # Errors
    /// Missing or mis-shaped tensors; the kernels' error for 0 threads.
    pub(crate) fn load(c: &LlamaConfig, g: &dyn Weights, threads: usize) -> Result<Self> {
        let kernels = shared_kernels(threads)?;
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
            layers.push(Arc::new(CpuBlock {
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
        Ok(Self {
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
}
