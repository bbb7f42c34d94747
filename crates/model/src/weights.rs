//! Where weights come from: GGUF files or HF safetensors with `config.json`. The loader asks
//! for tensors by their GGUF names; each source maps and re-lays them out.

use std::borrow::Cow;
use std::ops::Range;

use mars_formats::{FormatError, GgmlType, Gguf, SafetensorsFile};
use serde::Deserialize;

use mars_kernels::WeightType;

use crate::config::{Architecture, LlamaConfig, RopeStyle};
use crate::error::{ModelError, Result};
use crate::tensors::ROPE_FREQS;

/// A tensor as stored: shape (outermost first), type and size; its bytes come from
/// [`Weights::stored_bytes`], so that a loader can check a whole file before reading any data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Storage type.
    pub ty: GgmlType,
    /// Bytes of data.
    pub n_bytes: u64,
}

/// A source of f32 weights, addressed by GGUF tensor names.
pub trait Weights {
    /// The tensor's shape (outermost first) and values as f32, or `None` if the source lacks
    /// it. (Named apart from [`Gguf::tensor`], which returns the table entry.)
    ///
    /// # Errors
    /// The format's error for unreadable data.
    fn f32_tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>>;

    /// Whether [`Weights::stored`] lists every tensor of the source (a GGUF's table), so that a
    /// loader can check names, shapes and types before reading any data.
    fn lists_tensors(&self) -> bool {
        false
    }

    /// The tensor as stored (shape, type, size), for loaders that keep blocks packed; `None`
    /// where the source has no such form (safetensors here). Reads no tensor data.
    ///
    /// # Errors
    /// The format's error for an unreadable table.
    fn stored(&self, _name: &str) -> Result<Option<Stored>> {
        Ok(None)
    }

    /// Bytes `range` of a stored tensor (relative to its start), with `extra` bytes of spare
    /// capacity where they are read into a new buffer: a large tensor can be taken a part at a
    /// time from a source that is not in memory.
    ///
    /// # Errors
    /// [`FormatError::MissingTensor`] where the source has no stored form of `name`; the
    /// format's error for unreadable data.
    fn stored_bytes(&self, name: &str, _range: Range<u64>, _extra: usize) -> Result<Cow<'_, [u8]>> {
        Err(FormatError::MissingTensor {
            name: name.to_string(),
        }
        .into())
    }
}

impl Weights for Gguf<'_> {
    fn f32_tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let Some(info) = self.tensor(name) else {
            return Ok(None);
        };
        // GGUF lists dimensions innermost first.
        let shape = info.dims.iter().rev().map(|&d| d as usize).collect();
        Ok(Some((shape, self.tensor_f32(name)?)))
    }

    fn lists_tensors(&self) -> bool {
        true
    }

    fn stored(&self, name: &str) -> Result<Option<Stored>> {
        Ok(self.tensor(name).map(|info| Stored {
            shape: info.dims.iter().rev().map(|&d| d as usize).collect(),
            ty: info.dtype,
            n_bytes: info.n_bytes,
        }))
    }

    fn stored_bytes(&self, name: &str, range: Range<u64>, extra: usize) -> Result<Cow<'_, [u8]>> {
        let info = self
            .tensor(name)
            .ok_or_else(|| FormatError::MissingTensor {
                name: name.to_string(),
            })?;
        Ok(self.tensor_range_with(info, range, extra)?)
    }
}

/// The fields of an HF `config.json` this loader reads.
#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f32,
    rope_theta: Option<f32>,
    max_position_embeddings: usize,
    tie_word_embeddings: Option<bool>,
    rope_scaling: Option<serde_json::Value>,
}

/// HF safetensors weights, presented under GGUF names and in GGUF's layout.
#[derive(Debug)]
pub struct HfWeights<'a> {
    file: SafetensorsFile<'a>,
    config: LlamaConfig,
}

impl<'a> HfWeights<'a> {
    /// Reads `config.json` and wraps the safetensors file.
    ///
    /// # Errors
    /// [`ModelError::Config`] for a malformed or unsupported `config.json` (named field), and
    /// whatever [`LlamaConfig::validate`] rejects.
    pub fn new(file: SafetensorsFile<'a>, config_json: &str) -> Result<Self> {
        let hf: HfConfig = serde_json::from_str(config_json)
            .map_err(|e| ModelError::Config(format!("config.json: {e}")))?;
        let architecture = Architecture::from_name("config.json model_type", &hf.model_type)?;
        if let Some(scaling) = hf.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            return Err(ModelError::Unsupported(format!(
                "config.json rope_scaling = {scaling} (load the GGUF instead)"
            )));
        }
        let n_kv_heads = hf.num_key_value_heads.unwrap_or(hf.num_attention_heads);
        let config = LlamaConfig {
            vocab_size: hf.vocab_size,
            d_model: hf.hidden_size,
            n_layers: hf.num_hidden_layers,
            n_heads: hf.num_attention_heads,
            n_kv_heads,
            head_dim: hf.head_dim.unwrap_or_else(|| {
                hf.hidden_size
                    .checked_div(hf.num_attention_heads)
                    .unwrap_or(0)
            }),
            d_ff: hf.intermediate_size,
            rope_theta: hf.rope_theta.unwrap_or(10_000.0),
            rms_eps: hf.rms_norm_eps,
            context_length: hf.max_position_embeddings,
            qkv_bias: file
                .tensor_f32("model.layers.0.self_attn.q_proj.bias")?
                .is_some(),
            qk_norm: file
                .tensor_f32("model.layers.0.self_attn.q_norm.weight")?
                .is_some(),
            tied_embeddings: hf.tie_word_embeddings.unwrap_or(false)
                || file.tensor_f32("lm_head.weight")?.is_none(),
            // HF weights are laid out for rotate-half; Llama's are permuted on load (below) to
            // the interleaved layout GGUF uses, as the architecture's RoPE style says.
            architecture,
        };
        config.validate()?;
        config.blocks_listed(|name| hf_name(name).is_some_and(|hf| file.contains(&hf)))?;
        Ok(Self { file, config })
    }

    /// The configuration read from `config.json`.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }
}

/// The HF name of a GGUF tensor name.
fn hf_name(name: &str) -> Option<String> {
    let fixed = match name {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let hf_tail = match tail {
        "attn_norm.weight" => "input_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf_tail}"))
}

/// Reorders the rows of a Q or K projection from rotate-half to interleaved pairs: within each
/// head, row j·(hd/2) + i moves to 2i + j (llama.cpp's `permute` in its HF converter).
pub fn interleave_rows(values: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    let hd = rows / heads;
    let mut out = vec![0f32; values.len()];
    for h in 0..heads {
        for j in 0..2 {
            for i in 0..hd / 2 {
                let from = h * hd + j * (hd / 2) + i;
                let to = h * hd + 2 * i + j;
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&values[from * cols..(from + 1) * cols]);
            }
        }
    }
    out
}

impl Weights for HfWeights<'_> {
    fn f32_tensor(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let Some(hf) = hf_name(name) else {
            return Ok(None);
        };
        let Some((shape, values)) = self.file.tensor_f32(&hf)? else {
            return Ok(None);
        };
        let heads = if name.ends_with("attn_q.weight") || name.ends_with("attn_q.bias") {
            Some(self.config.n_heads)
        } else if name.ends_with("attn_k.weight") || name.ends_with("attn_k.bias") {
            Some(self.config.n_kv_heads)
        } else {
            None
        };
        // A tensor of no dimensions (a scalar) passes as it is, to be refused by its shape.
        match (heads, shape.first()) {
            (Some(heads), Some(&rows))
                if self.config.rope_style() == RopeStyle::Interleaved
                    && rows % (2 * heads) == 0 =>
            {
                let cols = shape.get(1).copied().unwrap_or(1);
                Ok(Some((
                    shape.clone(),
                    interleave_rows(&values, rows, cols, heads),
                )))
            }
            _ => Ok(Some((shape, values))),
        }
    }
}

/// The kernels' block type for a GGUF type they multiply directly.
pub(crate) fn packable(ty: GgmlType) -> Option<WeightType> {
    match ty {
        GgmlType::Q8_0 => Some(WeightType::Q8_0),
        GgmlType::Q4_0 => Some(WeightType::Q4_0),
        GgmlType::Q4_1 => Some(WeightType::Q4_1),
        GgmlType::Q5_0 => Some(WeightType::Q5_0),
        GgmlType::Q5_1 => Some(WeightType::Q5_1),
        GgmlType::Q4K => Some(WeightType::Q4K),
        GgmlType::Q5K => Some(WeightType::Q5K),
        GgmlType::Q6K => Some(WeightType::Q6K),
        GgmlType::F16 => Some(WeightType::F16),
        GgmlType::BF16 => Some(WeightType::BF16),
        _ => None,
    }
}

/// The kernels' type for `name` if the source stores it `[out, in]` in a type they take.
///
/// # Errors
/// [`ModelError::TensorShape`] for a stored tensor of another shape.
pub(crate) fn packable_stored(
    g: &dyn Weights,
    name: &str,
    out_dim: usize,
    in_dim: usize,
) -> Result<Option<WeightType>> {
    let Some(s) = g.stored(name)? else {
        return Ok(None);
    };
    let Some(wt) = packable(s.ty) else {
        return Ok(None);
    };
    if s.shape != [out_dim, in_dim] {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            found: s.shape,
            expected: vec![out_dim, in_dim],
        });
    }
    Ok(Some(wt))
}

/// Reads one tensor, checks its shape (row-major, outermost first), and returns its values.
pub(crate) fn read(w: &dyn Weights, name: &str, expected: &[usize]) -> Result<Vec<f32>> {
    let (found, values) = w
        .f32_tensor(name)?
        .ok_or_else(|| FormatError::MissingTensor {
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

/// Llama 3.x files carry per-frequency RoPE scaling factors as a tensor.
pub(crate) fn freq_factors(g: &dyn Weights, hd: usize) -> Result<Option<Vec<f32>>> {
    match g.f32_tensor(ROPE_FREQS)? {
        Some(_) => Ok(Some(read(g, ROPE_FREQS, &[hd / 2])?)),
        None => Ok(None),
    }
}
