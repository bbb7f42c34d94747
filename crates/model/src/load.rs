//! Building a [`Llama`] from a weight source on the back-end its [`WeightPath`] names, after
//! every check that can be made before anything is allocated: the configuration, each
//! tensor's presence, shape and type (from the table), and the device's limits. The checks
//! work on a header alone, so a download can be refused before it finishes; each back-end's
//! own loader is in its module.

use burn::tensor::Device;
use mars_formats::{GgmlType, Gguf, SafetensorsFile};

use crate::config::LlamaConfig;
use crate::cpu::CpuModel;
use crate::error::{ModelError, Result};
use crate::llama::{Body, Llama, PREFILL_ROWS};
use crate::path::{KvType, LoadOptions, WeightPath};
use crate::reference::ReferenceModel;
use crate::tensors::{self, BlockTensors, Named, OUTPUT, ROPE_FREQS, TOKEN_EMBD};
use crate::weights::{HfWeights, Weights, packable};

impl Llama {
    /// Builds the model from a GGUF file on `device` on the weight path of `options`.
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
        let c = bounded(c, options)?;
        Self::check_weights(&c, g, options)?;
        let body = match options.weights {
            WeightPath::CpuPacked { threads } => Body::Cpu(CpuModel::load(&c, g, threads)?),
            WeightPath::GpuBlocks { subgroups, kv } => gpu_model(
                &c,
                g,
                device,
                (subgroups, kv),
                options.limits.max_buffer_bytes,
            )?,
            WeightPath::F32 => Body::Reference(Box::new(ReferenceModel::load(&c, g, device)?)),
        };
        Ok(Self {
            weights: options.weights,
            logit_ids: c.vocab_size,
            prefill_rows: PREFILL_ROWS,
            config: c,
            body,
            device: device.clone(),
        })
    }
}

impl Llama {
    /// Everything [`Llama::from_gguf`] checks before it reads any tensor data: the
    /// configuration, every tensor's presence, shape and type (from the table), and the
    /// device's limits. Works on a header alone ([`Gguf::parse_header`]), so that a download
    /// can be refused before it finishes.
    ///
    /// # Errors
    /// As [`Llama::from_gguf`], short of errors reading the data itself.
    pub fn check_gguf(g: &Gguf<'_>, options: LoadOptions) -> Result<LlamaConfig> {
        let c = bounded(LlamaConfig::from_gguf(g)?, options)?;
        Self::check_weights(&c, g, options)?;
        Ok(c)
    }

    /// What loading `g` with `options` asks of the device's memory ([`MemoryNeeds`]), from a
    /// header alone.
    ///
    /// # Errors
    /// As [`Llama::check_gguf`]'s configuration and table checks.
    pub fn memory_needs(g: &Gguf<'_>, options: LoadOptions) -> Result<MemoryNeeds> {
        let c = bounded(LlamaConfig::from_gguf(g)?, options)?;
        c.validate()?;
        MemoryNeeds::of(&c, g, options)
    }

    fn check_weights(c: &LlamaConfig, g: &dyn Weights, options: LoadOptions) -> Result<()> {
        c.validate()?;
        if g.lists_tensors() {
            // A configuration given with the source (`from_weights`) is held to it too.
            c.blocks_listed(|name| matches!(g.stored(name), Ok(Some(_))))?;
        }
        check_tensors(c, g)?;
        check_memory(c, g, options)
    }
}

/// The configuration with its context bounded by `options.context` (never above the file's).
fn bounded(mut c: LlamaConfig, options: LoadOptions) -> Result<LlamaConfig> {
    match options.context {
        Some(0) => Err(ModelError::Config(
            "context is 0: a run needs at least one position".into(),
        )),
        Some(n) => {
            c.context_length = c.context_length.min(n);
            Ok(c)
        }
        None => Ok(c),
    }
}

/// Refuses, from the tensor table alone, a file that lacks a tensor, holds one of another
/// shape, or stores one in a type this crate cannot read. Sources without a table
/// (safetensors) are checked tensor by tensor as they load.
fn check_tensors(c: &LlamaConfig, g: &dyn Weights) -> Result<()> {
    if !g.lists_tensors() {
        return Ok(());
    }
    let mut expected = tensors::expected(c);
    if g.stored(ROPE_FREQS)?.is_some() {
        expected.push(Named {
            name: ROPE_FREQS.into(),
            shape: vec![c.head_dim / 2],
        });
    }
    for Named { name, shape } in expected {
        let Some(s) = g.stored(&name)? else {
            return Err(mars_formats::FormatError::MissingTensor { name }.into());
        };
        if s.shape != shape {
            return Err(ModelError::TensorShape {
                name,
                found: s.shape,
                expected: shape,
            });
        }
        if !s.ty.can_dequantize() {
            return Err(mars_formats::FormatError::BadTensorType {
                name,
                type_id: s.ty.id(),
            }
            .into());
        }
    }
    Ok(())
}

/// What a load asks of the device's memory, each part named in a refusal: the weights as the
/// path holds them, the RoPE tables, and one run over the whole context (a KV cache, and the
/// step buffers of the largest pass a run makes: a prefill pass of [`PREFILL_ROWS`] rows, or
/// the context where it is shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryNeeds {
    /// What `weights` are ("the weights in f32", "the weights as packed blocks").
    pub what: &'static str,
    /// Bytes of the weights.
    pub weights: u64,
    /// RoPE cos / sin tables `[context, head_dim / 2]` f32, two of them.
    pub tables: u64,
    /// The KV cache over `context` positions, at the path's cache type.
    pub kv_cache: u64,
    /// Activations of one pass over [`PREFILL_ROWS`] rows or `context`, whichever is fewer
    /// (hidden, q / k / v, attention, gate / up, their product, the output), f32, a
    /// verification pass's logits, and on the GPU a split attention's partials, a split
    /// tile launch's and the passes' outputs kept between passes (logits of every row count a
    /// run takes up to the verification's, within [`mars_kernels::OUTPUTS_KEPT_BYTES`]).
    pub steps: u64,
    /// Positions the cache and the steps are sized for.
    pub context: usize,
}

impl MemoryNeeds {
    /// Rows of logits a verification pass may read back (a tree of up to 32 nodes).
    const LOGIT_ROWS: u64 = 32;

    /// The needs of model `c` (context already bounded) on `options`' path, from the tensor
    /// table alone.
    ///
    /// # Errors
    /// A tensor the packed path cannot hold, or a size that overflows.
    pub fn of(c: &LlamaConfig, g: &dyn Weights, options: LoadOptions) -> Result<Self> {
        let (d, ff, v) = (c.d_model as u64, c.d_ff as u64, c.vocab_size as u64);
        let q = (c.n_heads as u64).saturating_mul(c.head_dim as u64);
        let kv = (c.n_kv_heads as u64).saturating_mul(c.head_dim as u64);
        let n = c.context_length as u64;
        let (what, weights) = if options.weights == WeightPath::F32 {
            ("the weights in f32", c.weight_bytes())
        } else {
            let gpu = matches!(options.weights, WeightPath::GpuBlocks { .. });
            ("the weights as packed blocks", packed_bytes(c, g, gpu)?)
        };
        // Values a row holds across one pass: x, its norm, the attention output and the
        // projection's, the FFN's output [d] each (5d); q and the attention [q] (2q); k, v
        // [kv] (2kv); gate, up and their product [ff] (3ff).
        let per_row = d
            .saturating_mul(5)
            .saturating_add(q.saturating_mul(2))
            .saturating_add(kv.saturating_mul(2))
            .saturating_add(ff.saturating_mul(3));
        let value_bytes = options.weights.kv().map_or(4, KvType::bytes) as u64;
        // On the GPU, a split attention's partials (a pass of at most 16 rows over more than 256
        // keys, mars_kernels::gpu::Attention): per row, query head and 256-key block, head_dim
        // values and a vec4 of (max, weight).
        let partials = if matches!(options.weights, WeightPath::GpuBlocks { .. }) {
            16u64
                .saturating_mul(q.saturating_add(4 * c.n_heads as u64))
                .saturating_mul(n.div_ceil(256))
        } else {
            0
        };
        let split_partials = if matches!(options.weights, WeightPath::GpuBlocks { .. }) {
            split_partials(c).saturating_mul(n.min(PREFILL_ROWS as u64))
        } else {
            0
        };
        let kept_outputs = if matches!(options.weights, WeightPath::GpuBlocks { .. }) {
            Self::kept_outputs(v) / 4
        } else {
            0
        };
        Ok(Self {
            what,
            weights,
            tables: 4u64.saturating_mul(n).saturating_mul(c.head_dim as u64),
            kv_cache: c.kv_bytes_per_token(value_bytes as usize).saturating_mul(n),
            steps: per_row
                .saturating_mul(n.min(PREFILL_ROWS as u64))
                .saturating_add(v.saturating_mul(Self::LOGIT_ROWS))
                .saturating_add(partials)
                .saturating_add(split_partials)
                .saturating_add(kept_outputs)
                .saturating_mul(4),
            context: c.context_length,
        })
    }

    /// Bytes of the outputs one thread keeps between GPU passes over a vocabulary of `vocab`
    /// (`mars_kernels::gpu::direct`): a slot a size, so logits `[rows, vocab]` f32 for each row
    /// count from 1 to [`Self::LOGIT_ROWS`], within [`mars_kernels::OUTPUTS_KEPT_BYTES`].
    fn kept_outputs(vocab: u64) -> u64 {
        let rows = Self::LOGIT_ROWS * (Self::LOGIT_ROWS + 1) / 2;
        (vocab.saturating_mul(rows).saturating_mul(4)).min(mars_kernels::OUTPUTS_KEPT_BYTES)
    }

    /// All of it.
    pub fn total(&self) -> u64 {
        self.weights
            .saturating_add(self.tables)
            .saturating_add(self.kv_cache)
            .saturating_add(self.steps)
    }

    /// The refusal's description: every part with its size.
    fn describe(&self) -> String {
        let mib = |b: u64| format!("{:.0} MiB", b as f64 / 1_048_576.0);
        format!(
            "{} ({}), a KV cache and step buffers for a context of {} positions ({} + {}; \
             --context sets it) and RoPE tables ({})",
            self.what,
            mib(self.weights),
            self.context,
            mib(self.kv_cache),
            mib(self.steps),
            mib(self.tables)
        )
    }
}

/// f32 partial sums a row that a long prefill's split tile launch writes on the GPU (split-K,
/// [`mars_kernels::Splits`]): the largest of q | k | v, o, gate | up and down (one launch's at
/// a time).
fn split_partials(c: &LlamaConfig) -> u64 {
    let (d, ff) = (c.d_model, c.d_ff);
    let q = c.n_heads.saturating_mul(c.head_dim);
    let kv = c.n_kv_heads.saturating_mul(c.head_dim);
    [
        (d, q.saturating_add(kv.saturating_mul(2)), false),
        (q, d, false),
        (d, ff.saturating_mul(2), true),
        (ff, d, false),
    ]
    .into_iter()
    .map(|(cols, outputs, swiglu)| {
        mars_kernels::Splits::rule(cols, outputs, swiglu).partials(outputs) as u64
    })
    .max()
    .unwrap_or(0)
}

/// Refuses a model that cannot fit, before anything is allocated (so a too-large model costs
/// nothing but the message): on the burn path the largest single tensor in f32 against the
/// device's buffer limit; on the GPU blocks path a row of blocks against it; and
/// [`MemoryNeeds`] against the memory the device reports, where it reports any.
fn check_memory(c: &LlamaConfig, g: &dyn Weights, options: LoadOptions) -> Result<()> {
    let (d, ff, v) = (c.d_model as u64, c.d_ff as u64, c.vocab_size as u64);
    let q = (c.n_heads as u64).saturating_mul(c.head_dim as u64);
    // GGUF blocks on the GPU are split by rows to fit a binding (the kernels check each row).
    let f32_buffers = options.weights == WeightPath::F32;
    let gpu_blocks = matches!(options.weights, WeightPath::GpuBlocks { .. });
    let limits = options.limits;
    if let Some(limit) = limits.max_buffer_bytes.filter(|_| f32_buffers) {
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
    if let Some(limit) = limits.max_buffer_bytes.filter(|_| gpu_blocks) {
        check_block_buffers(c, g, limit)?;
    }
    if let Some(limit) = limits.max_total_bytes {
        let needs = MemoryNeeds::of(c, g, options)?;
        if needs.total() > limit {
            return Err(ModelError::TooBigForDevice {
                what: needs.describe(),
                needed: needs.total(),
                limit,
            });
        }
    }
    Ok(())
}

/// GGUF blocks on the GPU are split by output rows to fit a binding, so what must fit is one
/// row of blocks (and, for a matrix the file keeps in F32, which stays a dense tensor, the
/// whole matrix): refused here, before any upload, naming the tensor and the limit.
fn check_block_buffers(c: &LlamaConfig, g: &dyn Weights, limit: u64) -> Result<()> {
    for Named { name, shape } in tensors::expected(c) {
        let [rows, cols] = shape[..] else {
            continue;
        };
        let Some(s) = g.stored(&name)? else {
            continue;
        };
        let (what, needed) = if s.ty == GgmlType::F32 {
            (format!("{name} (F32, kept dense)"), s.n_bytes)
        } else if let Some(ty) = packable(s.ty) {
            let per_row = ty.gpu_bytes(s.n_bytes, cols as u64) / (rows.max(1) as u64);
            (format!("a row of {name} ({cols} {} values)", s.ty), per_row)
        } else {
            // Converted to Q8_0: 34 bytes per 32 values.
            (
                format!("a row of {name} as Q8_0"),
                (cols as u64).div_ceil(32) * 34,
            )
        };
        // A part holds whole rows plus one padding word.
        if needed.saturating_add(8) > limit {
            return Err(ModelError::TooBigForDevice {
                what,
                needed,
                limit,
            });
        }
    }
    Ok(())
}

/// Bytes the packed path holds for the matrices (on the `gpu`, in its layout): a packable
/// tensor's stored bytes, any other tensor's values at Q8_0's 34 bytes per 32 (a missing tensor
/// counts 0 here and is refused by the loader by name).
fn packed_bytes(c: &LlamaConfig, g: &dyn Weights, gpu: bool) -> Result<u64> {
    let mut names = vec![TOKEN_EMBD.to_string()];
    if !c.tied_embeddings {
        names.push(OUTPUT.into());
    }
    for i in 0..c.n_layers {
        names.extend(BlockTensors::of(c, i).matrices().map(|t| t.name.clone()));
    }
    let mut total = 0u64;
    for name in &names {
        if let Some(s) = g.stored(name)? {
            total = total.saturating_add(if let Some(ty) = packable(s.ty) {
                if gpu {
                    // The innermost dimension is a row's values.
                    ty.gpu_bytes(s.n_bytes, s.shape.last().map_or(0, |&c| c as u64))
                } else {
                    s.n_bytes
                }
            } else {
                let values = s
                    .shape
                    .iter()
                    .fold(1u64, |n, &d| n.saturating_mul(d as u64));
                values.saturating_mul(34) / 32
            });
        }
    }
    // A source without stored forms (safetensors) is converted whole: f32 size × 34 / 128.
    if total == 0 {
        total = c.weight_bytes().saturating_mul(34) / 128;
    }
    Ok(total)
}

/// The weights as GGUF blocks on the GPU, run by the fused kernels (`gpu.rs`).
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
fn gpu_model(
    c: &LlamaConfig,
    g: &dyn Weights,
    device: &Device,
    gpu: (Option<u32>, KvType),
    max_binding: Option<u64>,
) -> Result<Body> {
    Ok(Body::Gpu(Box::new(crate::gpu::GpuModel::load(
        c,
        g,
        device,
        gpu,
        max_binding,
    )?)))
}

/// Without a wgpu backend there is no GPU to hold blocks.
#[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
fn gpu_model(
    _: &LlamaConfig,
    _: &dyn Weights,
    _: &Device,
    _: (Option<u32>, KvType),
    _: Option<u64>,
) -> Result<Body> {
    Err(ModelError::Unsupported(
        "GGUF blocks on the GPU: this build has no wgpu backend".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partials the memory check counts are the largest split launch's, on Qwen2.5's
    /// shapes: none in the tiny model (nothing splits), the 0.5B's down (9 splits × 896), the
    /// 7B's and 14B's q | k | v (4 × 4,608 and 3 × 7,168).
    #[test]
    fn split_partials_are_the_largest_split_launchs() {
        let shape = |d, heads, kv_heads, ff| LlamaConfig {
            d_model: d,
            n_heads: heads,
            n_kv_heads: kv_heads,
            head_dim: 64.max(d / heads),
            d_ff: ff,
            ..crate::tiny::tiny_config()
        };
        assert_eq!(split_partials(&crate::tiny::tiny_config()), 0);
        assert_eq!(split_partials(&shape(896, 14, 2, 4864)), 9 * 896);
        assert_eq!(split_partials(&shape(3584, 28, 4, 18944)), 4 * 4608);
        assert_eq!(split_partials(&shape(5120, 40, 8, 13824)), 3 * 7168);
    }

    /// The kept outputs the memory check counts: every row count's logits for a small
    /// vocabulary (1 + 2 + … + 32 = 528 rows), the kept bound for Qwen2.5's 151,936 tokens
    /// (528 rows would be 321 MB).
    #[test]
    fn kept_outputs_are_every_row_counts_logits_within_the_bound() {
        assert_eq!(MemoryNeeds::kept_outputs(257), 257 * 528 * 4);
        assert_eq!(MemoryNeeds::kept_outputs(151_936), 256 << 20);
        assert_eq!(MemoryNeeds::kept_outputs(u64::MAX), 256 << 20);
    }
}
