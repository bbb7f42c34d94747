//! Hyper-parameters of the Llama family, read from GGUF metadata and validated before anything
//! is allocated.

use mars_formats::{Gguf, Value};

use crate::error::{ModelError, Result};

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (x0, x1), (x2, x3), …: llama.cpp's "norm" RoPE, for which its converter
    /// permutes Llama Q/K weights (GGUF `llama`).
    Interleaved,
    /// First half against second half (HF's rotate_half, llama.cpp's "neox"): GGUF `qwen2` and
    /// `qwen3`, whose weights are not permuted.
    Halves,
}

/// The Llama-family architectures this crate runs, detected once from a file's
/// `general.architecture` (GGUF) or `model_type` (HF `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3.x, SmolLM2, TinyLlama.
    Llama,
    /// Qwen2 / Qwen2.5: biases on Q, K and V.
    Qwen2,
    /// Qwen3: per-head RMSNorm on Q and K, explicit head width.
    Qwen3,
}

impl Architecture {
    /// The architecture named `name` (`llama`, `qwen2`, `qwen3`).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] naming `field` and the value for anything else.
    pub fn from_name(field: &str, name: &str) -> Result<Self> {
        match name {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            "qwen3" => Ok(Self::Qwen3),
            other => Err(ModelError::Unsupported(format!(
                "{field} = {other:?} (supported: llama, qwen2, qwen3)"
            ))),
        }
    }

    /// The name files use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }

    /// How RoPE pairs dimensions for this architecture's weights as the loader presents them:
    /// GGUF `llama` weights are permuted by llama.cpp's converter (and HF Llama weights are
    /// permuted on load to match); Qwen's are not.
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Self::Llama => RopeStyle::Interleaved,
            Self::Qwen2 | Self::Qwen3 => RopeStyle::Halves,
        }
    }
}

/// Hyper-parameters of a Llama-family decoder (Llama 2/3.x, SmolLM2, TinyLlama, Qwen2/2.5,
/// Qwen3): one struct, with the family differences as flags.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// The architecture (which also fixes the RoPE pairing, see [`Architecture::rope_style`]).
    pub architecture: Architecture,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Number of decoder blocks.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Width of one head (usually d_model / n_heads; Qwen3 sets it explicitly).
    pub head_dim: usize,
    /// Hidden width of the SwiGLU feed-forward.
    pub d_ff: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Longest context the model was trained for.
    pub context_length: usize,
    /// Q, K and V projections carry biases (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on Q and K before RoPE (Qwen3).
    pub qk_norm: bool,
    /// The output projection is the embedding (no `output.weight`).
    pub tied_embeddings: bool,
}

impl LlamaConfig {
    /// SmolLM2-135M, for tests and documentation.
    pub fn smollm2_135m() -> Self {
        Self {
            architecture: Architecture::Llama,
            vocab_size: 49152,
            d_model: 576,
            n_layers: 30,
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
            d_ff: 1536,
            rope_theta: 100_000.0,
            rms_eps: 1e-5,
            context_length: 8192,
            qkv_bias: false,
            qk_norm: false,
            tied_embeddings: true,
        }
    }

    /// Reads the configuration from GGUF metadata and the tensor table.
    ///
    /// # Errors
    /// [`ModelError::Format`] for missing or mistyped keys, [`ModelError::Unsupported`] for an
    /// architecture outside the Llama family, and whatever [`LlamaConfig::validate`] rejects.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Self> {
        let name = g.get_str("general.architecture")?;
        let architecture = Architecture::from_name("general.architecture", name)?;
        let arch = architecture.as_str();
        let key = |k: &str| format!("{arch}.{k}");
        let usize_of = |k: &str| -> Result<usize> {
            let v = g.get_u64(&key(k))?;
            usize::try_from(v)
                .map_err(|_| ModelError::Config(format!("{} = {v} does not fit", key(k))))
        };
        let d_model = usize_of("embedding_length")?;
        let n_heads = usize_of("attention.head_count")?;
        let n_kv_heads = match g.get(&key("attention.head_count_kv")) {
            Some(_) => usize_of("attention.head_count_kv")?,
            None => n_heads,
        };
        let head_dim = match g.get(&key("attention.key_length")) {
            Some(_) => usize_of("attention.key_length")?,
            None => d_model.checked_div(n_heads).unwrap_or(0),
        };
        let vocab_size = match g.get(&key("vocab_size")) {
            Some(_) => usize_of("vocab_size")?,
            None => match g.get("tokenizer.ggml.tokens") {
                Some(Value::Array(_, t)) => t.len(),
                _ => g
                    .tensor("token_embd.weight")
                    .and_then(|t| t.dims.get(1).copied())
                    .and_then(|d| usize::try_from(d).ok())
                    .unwrap_or(0),
            },
        };
        let f32_of = |k: &str, default: f32| -> Result<f32> {
            match g.get(&key(k)) {
                None => Ok(default),
                Some(_) => Ok(g.get_f64(&key(k))? as f32),
            }
        };
        let config = Self {
            vocab_size,
            d_model,
            n_layers: usize_of("block_count")?,
            n_heads,
            n_kv_heads,
            head_dim,
            d_ff: usize_of("feed_forward_length")?,
            rope_theta: f32_of("rope.freq_base", 10_000.0)?,
            rms_eps: f32_of("attention.layer_norm_rms_epsilon", 1e-5)?,
            context_length: usize_of("context_length")?,
            qkv_bias: g.tensor("blk.0.attn_q.bias").is_some(),
            qk_norm: g.tensor("blk.0.attn_q_norm.weight").is_some(),
            tied_embeddings: g.tensor("output.weight").is_none(),
            architecture,
        };
        config.validate()?;
        config.blocks_listed(|name| g.tensor(name).is_some())?;
        Ok(config)
    }

    /// Rejects inconsistent hyper-parameters before any allocation.
    ///
    /// # Errors
    /// [`ModelError::Config`] naming the field and value.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(ModelError::Config(msg));
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("d_ff", self.d_ff),
            ("context_length", self.context_length),
        ] {
            if v == 0 {
                return bad(format!("{name} is 0"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "n_heads = {} is not a multiple of n_kv_heads = {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.architecture != Architecture::Qwen3 && !self.d_model.is_multiple_of(self.n_heads) {
            return bad(format!(
                "d_model = {} is not a multiple of n_heads = {}",
                self.d_model, self.n_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim = {} is odd: RoPE rotates pairs",
                self.head_dim
            ));
        }
        if !self.rope_theta.is_finite() || self.rope_theta <= 0.0 {
            return bad(format!(
                "rope_theta = {} must be finite and > 0",
                self.rope_theta
            ));
        }
        if !self.rms_eps.is_finite() || self.rms_eps <= 0.0 {
            return bad(format!("rms_eps = {} must be finite and > 0", self.rms_eps));
        }
        // Every size the loader multiplies must fit: the largest single tensor is the
        // embedding or the FFN, and a row of logits is vocab_size long.
        let product = |a: usize, b: usize, what: &str| -> Result<usize> {
            a.checked_mul(b)
                .ok_or_else(|| ModelError::Config(format!("{what} overflows: {a} × {b}")))
        };
        product(self.vocab_size, self.d_model, "vocab_size × d_model")?;
        product(self.d_model, self.d_ff, "d_model × d_ff")?;
        product(self.n_heads, self.head_dim, "n_heads × head_dim")?;
        Ok(())
    }

    /// Refuses a block count the file's tensors do not reach (its last block's input norm,
    /// `has` answering by GGUF name), before anything loops over the blocks: a count is a
    /// number the file states, and a loader that walked 2^40 blocks to find the first one
    /// missing would exhaust the memory first.
    ///
    /// # Errors
    /// [`ModelError::Config`] naming the count and the tensor.
    pub(crate) fn blocks_listed(&self, has: impl Fn(&str) -> bool) -> Result<()> {
        let last = format!("blk.{}.attn_norm.weight", self.n_layers.saturating_sub(1));
        if has(&last) {
            Ok(())
        } else {
            Err(ModelError::Config(format!(
                "n_layers = {}, but the file has no {last}",
                self.n_layers
            )))
        }
    }

    /// How RoPE pairs dimensions (fixed by the architecture).
    pub fn rope_style(&self) -> RopeStyle {
        self.architecture.rope_style()
    }

    /// Query heads that share one key/value head.
    pub fn group_size(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Bytes of f32 weights this configuration needs on the device (`u64::MAX` where that
    /// overflows: a size no device holds, which the memory check refuses).
    pub fn weight_bytes(&self) -> u64 {
        let [d, ff, v, heads, kv_heads, head_dim, layers] = [
            self.d_model,
            self.d_ff,
            self.vocab_size,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
            self.n_layers,
        ]
        .map(|n| n as u64);
        let (q, kv) = (
            heads.saturating_mul(head_dim),
            kv_heads.saturating_mul(head_dim),
        );
        // q and o [q, d], k and v [kv, d], gate, up and down [ff, d], two norms [d].
        let per_layer = [(2, q), (2, kv), (3, ff), (2, 1)]
            .iter()
            .fold(0u64, |sum, &(n, rows)| {
                sum.saturating_add(d.saturating_mul(rows).saturating_mul(n))
            });
        let heads_out = if self.tied_embeddings { 1 } else { 2 };
        per_layer
            .saturating_mul(layers)
            .saturating_add(v.saturating_mul(d).saturating_mul(heads_out))
            .saturating_add(d)
            .saturating_mul(4)
    }

    /// Bytes of KV cache per token of context, at `value_bytes` a value (4 for f32;
    /// `u64::MAX` where that overflows).
    pub fn kv_bytes_per_token(&self, value_bytes: usize) -> u64 {
        [2, self.n_layers, self.n_kv_heads, self.head_dim]
            .iter()
            .fold(value_bytes as u64, |n, &m| n.saturating_mul(m as u64))
    }
}
