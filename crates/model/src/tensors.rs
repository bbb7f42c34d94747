//! The GGUF tensors a Llama-family model reads, named once: the loaders (f32, GPU blocks,
//! packed host blocks), the table check and the tiny test model all take names and shapes from
//! here, so a tensor cannot be spelled one way in one loader and another way in the next.

use crate::LlamaConfig;

pub(crate) const TOKEN_EMBD: &str = "token_embd.weight";
pub(crate) const OUTPUT: &str = "output.weight";
pub(crate) const OUTPUT_NORM: &str = "output_norm.weight";
/// Llama 3.x's per-frequency RoPE factors; optional.
pub(crate) const ROPE_FREQS: &str = "rope_freqs.weight";

/// One tensor: its name in the file and its shape, outermost first (a matrix `[out, in]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Named {
    pub name: String,
    pub shape: Vec<usize>,
}

impl Named {
    fn new(name: String, shape: Vec<usize>) -> Self {
        Self { name, shape }
    }

    /// A matrix's `(out, in)`; a vector's `(len, 1)`.
    pub fn dims(&self) -> (usize, usize) {
        (self.shape[0], self.shape.get(1).copied().unwrap_or(1))
    }
}

/// Every tensor of one transformer block. Biases exist with `qkv_bias` (Qwen2), per-head
/// norms with `qk_norm` (Qwen3).
pub(crate) struct BlockTensors {
    pub attn_norm: Named,      // [d]
    pub wq: Named,             // [n_heads·hd, d]
    pub wk: Named,             // [n_kv·hd, d]
    pub wv: Named,             // [n_kv·hd, d]
    pub wo: Named,             // [d, n_heads·hd]
    pub ffn_norm: Named,       // [d]
    pub w_gate: Named,         // [ff, d]
    pub w_up: Named,           // [ff, d]
    pub w_down: Named,         // [d, ff]
    pub bq: Option<Named>,     // [n_heads·hd]
    pub bk: Option<Named>,     // [n_kv·hd]
    pub bv: Option<Named>,     // [n_kv·hd]
    pub q_norm: Option<Named>, // [hd]
    pub k_norm: Option<Named>, // [hd]
}

impl BlockTensors {
    /// Block `i`'s tensors for the configuration `c`.
    pub fn of(c: &LlamaConfig, i: usize) -> Self {
        let (d, hd, ff) = (c.d_model, c.head_dim, c.d_ff);
        let (q, kv) = (c.n_heads * hd, c.n_kv_heads * hd);
        let t = |s: &str, shape: Vec<usize>| Named::new(format!("blk.{i}.{s}"), shape);
        let bias = |s: &str, len: usize| c.qkv_bias.then(|| t(s, vec![len]));
        let norm = |s: &str| c.qk_norm.then(|| t(s, vec![hd]));
        Self {
            attn_norm: t("attn_norm.weight", vec![d]),
            wq: t("attn_q.weight", vec![q, d]),
            wk: t("attn_k.weight", vec![kv, d]),
            wv: t("attn_v.weight", vec![kv, d]),
            wo: t("attn_output.weight", vec![d, q]),
            ffn_norm: t("ffn_norm.weight", vec![d]),
            w_gate: t("ffn_gate.weight", vec![ff, d]),
            w_up: t("ffn_up.weight", vec![ff, d]),
            w_down: t("ffn_down.weight", vec![d, ff]),
            bq: bias("attn_q.bias", q),
            bk: bias("attn_k.bias", kv),
            bv: bias("attn_v.bias", kv),
            q_norm: norm("attn_q_norm.weight"),
            k_norm: norm("attn_k_norm.weight"),
        }
    }

    /// The seven matrices (the tensors the packed and GPU paths keep as blocks).
    pub fn matrices(&self) -> impl Iterator<Item = &Named> {
        [
            &self.wq,
            &self.wk,
            &self.wv,
            &self.wo,
            &self.w_gate,
            &self.w_up,
            &self.w_down,
        ]
        .into_iter()
    }

    /// Every tensor the block has, in file order.
    pub fn all(&self) -> impl Iterator<Item = &Named> {
        [
            Some(&self.attn_norm),
            Some(&self.wq),
            Some(&self.wk),
            Some(&self.wv),
            Some(&self.wo),
            Some(&self.ffn_norm),
            Some(&self.w_gate),
            Some(&self.w_up),
            Some(&self.w_down),
            self.bq.as_ref(),
            self.bk.as_ref(),
            self.bv.as_ref(),
            self.q_norm.as_ref(),
            self.k_norm.as_ref(),
        ]
        .into_iter()
        .flatten()
    }
}

/// Every tensor the model reads and the shape it must have; `rope_freqs` is optional and not
/// listed.
pub(crate) fn expected(c: &LlamaConfig) -> Vec<Named> {
    let (d, v) = (c.d_model, c.vocab_size);
    let mut out = vec![
        Named::new(TOKEN_EMBD.into(), vec![v, d]),
        Named::new(OUTPUT_NORM.into(), vec![d]),
    ];
    if !c.tied_embeddings {
        out.push(Named::new(OUTPUT.into(), vec![v, d]));
    }
    for i in 0..c.n_layers {
        out.extend(BlockTensors::of(c, i).all().cloned());
    }
    out
}
