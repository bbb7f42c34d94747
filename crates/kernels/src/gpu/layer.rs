//! The kernels of a Llama block besides its matrix products, and the logits' summary: each a
//! type holding its parameter buffer (made once, at load) and one `run` that launches it over a
//! forward's [`StepBuffer`].

use cubecl::client::Client;
use cubecl::prelude::CubeCount;
use cubecl::server::Handle;

use super::{
    Bindings, NEG_INF_BITS, Shader, Slot, StepBuffer, bound_bytes, check_size, launch, quant_bytes,
    upload_f32, upload_words,
};
use crate::error::{KernelError, Result};

/// Room a run's launches write and the launch after them reads (attention's key-block partials,
/// a row reduction's chunk partials), kept between runs in a [`Slot`] and grown as needed, where
/// each run took its own from CubeCL's pool: ~30 µs of host each on wgpu's no-op card (SmolLM2
/// decoding after 1,024 tokens: 1.76 ms a pass taking attention's partials at every layer, 0.88
/// ms keeping them). Shared by clones: every layer's attention, a model's logits' summaries.
/// A kept buffer is reused where its bound range holds a run ([`bound_bytes`]), never by its
/// allocation's size.
#[derive(Debug, Clone, Default)]
pub(crate) struct Room(Slot<Handle>);

impl Room {
    /// The kept buffer where it holds `bytes`, else a new one of the next power of two (so a
    /// context growing a key block at a time takes a new one rarely).
    fn take(&self, client: &Client, bytes: usize) -> Handle {
        match self.0.take() {
            Some(h) if bound_bytes(&h) >= bytes => h,
            _ => client.empty(bytes.max(4).next_power_of_two()),
        }
    }

    fn put(&self, handle: Handle) {
        self.0.put(handle);
    }
}

fn word(what: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| KernelError::Shape {
        what,
        expected: u32::MAX as usize,
        found: v,
    })
}

/// RMSNorm with its weight: `y = x / rms(x) · g` per row.
#[derive(Debug, Clone)]
pub struct Norm {
    weight: Handle,
    every_row: Handle,
    tail_rows: Handle,
    d: usize,
}

impl Norm {
    /// A norm of `weight.len()` values with `eps` (finite, > 0: the model's config checks it).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for an empty weight.
    pub fn new(client: &Client, weight: &[f32], eps: f32) -> Result<Self> {
        let d = weight.len();
        if d == 0 {
            return Err(KernelError::Shape {
                what: "values of a norm's weight",
                expected: 1,
                found: 0,
            });
        }
        let dw = word("norm width", d)?;
        Ok(Self {
            weight: upload_f32(client, weight),
            every_row: upload_words(client, &[dw, eps.to_bits(), 0]),
            tail_rows: upload_words(client, &[dw, eps.to_bits(), 1]),
            d,
        })
    }

    /// Enqueues the norm of the step's rows of `x` into `y`: every row, or with `tail` only
    /// the last (logit) rows, into the first rows of `y`.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for buffers smaller than the shapes need.
    pub fn run(
        &self,
        client: &Client,
        x: &Handle,
        y: &Handle,
        step: &StepBuffer,
        tail: bool,
    ) -> Result<()> {
        self.launch(client, (x, y, None), step, tail)
    }

    /// [`Norm::run`] that also writes the normed rows quantized to 8 bits into `xq` (room from
    /// [`MatrixGroup::quantized_room`] of the product after the norm, which then takes them:
    /// [`MatrixGroup::run_from`]), the bits a separate quantization of `y` writes, without its
    /// launch.
    ///
    /// # Errors
    /// As [`Norm::run`]; [`KernelError::Shape`] for a width that is not whole 32-value blocks
    /// or an `xq` too small.
    pub fn run_q8(
        &self,
        client: &Client,
        (x, y, xq): (&Handle, &Handle, &Handle),
        step: &StepBuffer,
        tail: bool,
    ) -> Result<()> {
        self.launch(client, (x, y, Some(xq)), step, tail)
    }

    fn launch(
        &self,
        client: &Client,
        (x, y, xq): (&Handle, &Handle, Option<&Handle>),
        step: &StepBuffer,
        tail: bool,
    ) -> Result<()> {
        let out_rows = if tail { step.tail() } else { step.rows() };
        check_size("norm input", x, step.rows() * self.d * 4)?;
        check_size("norm output", y, out_rows * self.d * 4)?;
        let params = if tail {
            &self.tail_rows
        } else {
            &self.every_row
        };
        let mut args = Bindings::new()
            .with(x)
            .with(&self.weight)
            .with(y)
            .with(params)
            .with(step.handle());
        if let Some(xq) = xq {
            if !self.d.is_multiple_of(32) {
                return Err(KernelError::Shape {
                    what: "norm width quantized to 8 bits (whole 32-value blocks)",
                    expected: self.d.next_multiple_of(32),
                    found: self.d,
                });
            }
            check_size("norm's 8-bit output", xq, quant_bytes(out_rows, self.d))?;
            args = args.with(xq);
        }
        launch(
            client,
            Shader::Norm { q8: xq.is_some() },
            CubeCount::Static(word("rows", out_rows)?, 1, 1),
            args,
        );
        Ok(())
    }
}

/// The attention heads of a layer: the CPU attention's [`Heads`], one type for both paths. On
/// the GPU a layer's KV cache is one buffer `[2, kv_heads, capacity, head_dim]` of
/// [`KvType`] values (keys, then values); the capacity is the step's
/// ([`Step::with_capacity`]).
///
/// [`Step::with_capacity`]: super::Step::with_capacity
pub use crate::attention::{Heads, KvType};

impl Heads {
    /// Bytes of one layer's cache of `capacity` rows of `kv` values.
    ///
    /// # Errors
    /// [`KernelError::Overflow`] past usize.
    pub fn cache_bytes(&self, capacity: usize, kv: KvType) -> Result<usize> {
        2usize
            .checked_mul(self.kv_heads)
            .and_then(|v| v.checked_mul(capacity))
            .and_then(|v| v.checked_mul(self.head_dim))
            .and_then(|v| v.checked_mul(kv.bytes()))
            .ok_or(KernelError::Overflow {
                what: "KV cache bytes",
                rows: capacity,
                cols: self.kv_heads * self.head_dim,
            })
    }

    /// What the GPU kernels take besides the CPU's rule: a head width of 4 to 256, a multiple
    /// of 4 (attention reads keys, values and queries as vec4s; every model's is 64, 80, 96,
    /// 128 or 256).
    fn check_gpu(&self) -> Result<()> {
        let ok = self.kv_heads > 0
            && self.heads.is_multiple_of(self.kv_heads)
            && self.heads >= self.kv_heads
            && self.head_dim.is_multiple_of(4)
            && (4..=256).contains(&self.head_dim);
        if ok {
            Ok(())
        } else {
            Err(KernelError::Shape {
                what: "heads (a multiple of the KV heads) and head width (a multiple of 4, 4 to 256)",
                expected: self.kv_heads.max(1),
                found: self.heads,
            })
        }
    }

    fn words(&self) -> Result<[u32; 3]> {
        Ok([
            word("heads", self.heads)?,
            word("KV heads", self.kv_heads)?,
            word("head width", self.head_dim)?,
        ])
    }
}

/// RoPE on the query and key heads of a q | k | v product, queries out, keys and values into
/// the layer's cache; Qwen3's per-head norms where the model has them. The table is the
/// model's, shared by every layer's copy ([`Rope::with_head_norms`]).
#[derive(Debug, Clone)]
pub struct Rope {
    heads: Heads,
    params: Handle,
    /// `[2, head_dim]`: q_norm then k_norm (zeros where there are none).
    norms: Handle,
    head_norm: bool,
    /// `[context, head_dim / 2, 2]` cos, sin.
    table: Handle,
    context: usize,
    kv: KvType,
    /// Pairs of dimensions (d, d + head_dim / 2), not (2d, 2d + 1).
    halves: bool,
    /// The head norms' epsilon.
    eps: f32,
}

impl Rope {
    /// RoPE for `heads` with the model's `cos` / `sin` tables (`[context, head_dim / 2]`
    /// each), halves or interleaved pairs; `eps` for per-head norms; keys and values stored
    /// in caches of `kv` values.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for tables of the wrong size or a bad head shape.
    pub fn new(
        client: &Client,
        (heads, kv): (Heads, KvType),
        (cos, sin): (&[f32], &[f32]),
        halves: bool,
        eps: f32,
    ) -> Result<Self> {
        heads.check_gpu()?;
        let half = heads.head_dim / 2;
        if cos.len() != sin.len() || cos.is_empty() || !cos.len().is_multiple_of(half) {
            return Err(KernelError::Shape {
                what: "RoPE table values (context × head_dim / 2, cos and sin alike)",
                expected: cos.len(),
                found: sin.len(),
            });
        }
        let table: Vec<f32> = cos.iter().zip(sin).flat_map(|(&c, &s)| [c, s]).collect();
        let [h, g, d] = heads.words()?;
        Ok(Self {
            heads,
            params: upload_words(client, &[h, g, d, u32::from(halves), eps.to_bits()]),
            norms: upload_f32(client, &vec![0.0; 2 * heads.head_dim]),
            head_norm: false,
            table: upload_f32(client, &table),
            context: cos.len() / half,
            kv,
            halves,
            eps,
        })
    }

    /// The same RoPE (sharing its table) after per-head RMSNorms with weights `q_norm` and
    /// `k_norm` (`head_dim` values each: Qwen3).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for weights of the wrong length.
    pub fn with_head_norms(&self, client: &Client, q_norm: &[f32], k_norm: &[f32]) -> Result<Self> {
        let hd = self.heads.head_dim;
        if q_norm.len() != hd || k_norm.len() != hd {
            return Err(KernelError::Shape {
                what: "per-head norm values",
                expected: hd,
                found: q_norm.len().max(k_norm.len()),
            });
        }
        Ok(Self {
            norms: upload_f32(client, &[q_norm, k_norm].concat()),
            head_norm: true,
            ..self.clone()
        })
    }

    /// The positions the table covers.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Enqueues RoPE over the step's rows of `qkv` (`[rows, (heads + 2 kv_heads) · head_dim]`),
    /// queries into `q` (`[rows, heads · head_dim]`), keys and values into `kv` at cache rows
    /// `start..start + rows` (every position below [`Rope::context`]: the caller checks).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for buffers smaller than the shapes need.
    pub fn run(
        &self,
        client: &Client,
        qkv: &Handle,
        q: &Handle,
        kv: &Handle,
        step: &StepBuffer,
    ) -> Result<()> {
        let s = &self.heads;
        let rows = step.rows();
        check_size(
            "q | k | v",
            qkv,
            rows * (s.heads + 2 * s.kv_heads) * s.head_dim * 4,
        )?;
        check_size("queries", q, rows * s.heads * s.head_dim * 4)?;
        check_size("KV cache", kv, s.cache_bytes(step.capacity(), self.kv)?)?;
        launch(
            client,
            Shader::Rope {
                head_norm: self.head_norm,
                kv: self.kv,
            },
            CubeCount::Static(word("heads", s.heads + s.kv_heads)?, word("rows", rows)?, 1),
            Bindings::new()
                .with(qkv)
                .with(q)
                .with(kv)
                .with(&self.table)
                .with(&self.norms)
                .with(&self.params)
                .with(step.handle()),
        );
        Ok(())
    }
}

/// Attention over a layer's cache for every query head of the step's rows.
#[derive(Debug, Clone)]
pub struct Attention {
    heads: Heads,
    params: Handle,
    kv: KvType,
    /// Whether a pass of a few rows over a long context splits by key blocks
    /// ([`Attention::run`]): on GPU cards.
    splits: bool,
    /// RoPE folded in ([`Attention::with_rope`]).
    rope: Option<FoldedRope>,
    /// The key blocks' partials of a split pass ([`Room`]).
    partials: Room,
}

/// What attention_rope.wgsl reads besides attention's own: a [`Rope`]'s table and head norms,
/// and parameters that add its halves, epsilon and head norms to attention's.
#[derive(Debug, Clone)]
struct FoldedRope {
    table: Handle,
    norms: Handle,
    /// `[n_heads, n_kv, head_dim, scale, halves, eps, head norms]` (attention_rope.wgsl).
    params: Handle,
    /// Whether decoding and verification take it (else the rope launch runs apart).
    fold: bool,
}

/// Whether [`Attention::run`] splits long passes on `client`'s device: on GPU cards (CubeCL's
/// physical-device identity, as `Fan::detect`), where one workgroup a head leaves most of the
/// card idle. The environment's `MARS_GPU_SPLIT` (`on` or `off`) overrides it: a measurement
/// knob, as `MARS_GPU_TILES` is, so that the GPU bundle times both shapes without a rebuild.
fn split_attention(client: &Client) -> bool {
    super::switch("MARS_GPU_SPLIT", "on", "off").unwrap_or_else(|| super::is_card(client))
}

/// Keys a block of attention.wgsl.
const ATTENTION_BLOCK: usize = 256;

/// Rows a pass has at most for [`Attention::run`] to split it by key blocks: a decode or a
/// verification pass (a prefill has workgroups enough in its rows, and its partials would take
/// rows × heads × blocks × head_dim floats).
const SPLIT_ROWS: usize = 16;

impl Attention {
    /// Attention for `heads` over caches of `kv` values, scores scaled by 1/√head_dim.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a bad head shape.
    pub fn new(client: &Client, (heads, kv): (Heads, KvType)) -> Result<Self> {
        heads.check_gpu()?;
        let [h, g, d] = heads.words()?;
        let scale = 1.0 / (heads.head_dim as f32).sqrt();
        Ok(Self {
            heads,
            params: upload_words(client, &[h, g, d, scale.to_bits()]),
            kv,
            splits: split_attention(client),
            rope: None,
            partials: Room::default(),
        })
    }

    /// The same attention with `rope` folded in on GPU cards ([`super::is_card`]): in decoding
    /// and verification ([`Attention::folds_rope`], run by [`Attention::run_roped`]) each
    /// workgroup ropes its query and this pass's keys from the q | k | v rows, reads those keys
    /// and values from there, and the launch writes them to the cache (attention_rope.wgsl): a
    /// launch a layer fewer, and no roped queries written. A pass of more than 16 rows keeps
    /// the rope launch (workgroup memory holds 16 rows' keys, and every row's workgroup ropes
    /// the keys before it). CPU adapters keep it always: on lavapipe decode was level and a
    /// 16-row pass 10–15 % slower folded (docs/performance.md). The environment's
    /// `MARS_GPU_ROPE` (`fold` or `apart`) overrides the rule, a measurement knob as
    /// `MARS_GPU_NORM` is.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a rope of other heads, [`KernelError::Unknown`] for one of
    /// another cache type.
    pub fn with_rope(&self, client: &Client, rope: &Rope) -> Result<Self> {
        let fold = super::switch("MARS_GPU_ROPE", "fold", "apart")
            .unwrap_or_else(|| super::is_card(client));
        self.with_rope_as(client, rope, fold)
    }

    /// [`Attention::with_rope`] folding it where `fold` and the shapes allow, whatever the
    /// adapter (tests compare the two on any adapter): an f16 cache and heads of at most 128
    /// values (the pass's keys are held in workgroup memory as cache words, 4 KiB at most
    /// beside attention's own ~9), a multiple of 8 for halves.
    ///
    /// # Errors
    /// As [`Attention::with_rope`].
    pub fn with_rope_as(&self, client: &Client, rope: &Rope, fold: bool) -> Result<Self> {
        if rope.heads != self.heads {
            return Err(KernelError::Shape {
                what: "RoPE of the attention's heads (query heads)",
                expected: self.heads.heads,
                found: rope.heads.heads,
            });
        }
        if rope.kv != self.kv {
            return Err(KernelError::Unknown {
                what: "RoPE's cache type",
                value: format!("{:?}", rope.kv),
                expected: "the attention's cache type",
            });
        }
        let [h, g, d] = self.heads.words()?;
        let scale = 1.0 / (self.heads.head_dim as f32).sqrt();
        let words = [
            h,
            g,
            d,
            scale.to_bits(),
            u32::from(rope.halves),
            rope.eps.to_bits(),
            u32::from(rope.head_norm),
        ];
        Ok(Self {
            rope: Some(FoldedRope {
                table: rope.table.clone(),
                norms: rope.norms.clone(),
                params: upload_words(client, &words),
                fold: fold
                    && self.kv == KvType::F16
                    && self.heads.head_dim <= 128
                    && (!rope.halves || self.heads.head_dim.is_multiple_of(8)),
            }),
            ..self.clone()
        })
    }

    /// Whether the step's pass takes the folded RoPE ([`Attention::with_rope`]): a decoding
    /// or verification pass (at most 16 rows, not a long prefill's) where it is folded.
    pub fn folds_rope(&self, step: &StepBuffer) -> bool {
        self.rope.as_ref().is_some_and(|r| r.fold)
            && step.rows() <= SPLIT_ROWS
            && !step.is_long_prefill()
    }

    /// Enqueues attention of the step's rows' queries `q` (`[rows, heads · head_dim]`) over
    /// `kv` into `out` (same shape as `q`).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for buffers smaller than the shapes need.
    pub fn run(
        &self,
        client: &Client,
        q: &Handle,
        kv: &Handle,
        out: &Handle,
        step: &StepBuffer,
    ) -> Result<()> {
        self.run_as(client, (q, kv, out), step, self.splits_step(step))
    }

    /// Whether the step's pass splits by key blocks ([`Attention::run`]).
    fn splits_step(&self, step: &StepBuffer) -> bool {
        self.splits && step.rows() <= SPLIT_ROWS && step.most_visible() > ATTENTION_BLOCK
    }

    /// RoPE and attention in one launch (two where split): the step's rows of `qkv`
    /// (`[rows, (heads + 2 kv_heads) · head_dim]`, as the q | k | v product wrote them), their
    /// keys and values stored into `kv` at cache rows `start..start + rows`, the attention of
    /// their roped queries into `out` (`[rows, heads · head_dim]`): what [`Rope::run`] then
    /// [`Attention::run`] give, within f32 rounding. Every position below the rope's context
    /// (the caller checks).
    ///
    /// # Errors
    /// [`KernelError::Shape`] where [`Attention::folds_rope`] does not hold for this step, and
    /// for buffers smaller than the shapes need.
    pub fn run_roped(
        &self,
        client: &Client,
        (qkv, kv, out): (&Handle, &Handle, &Handle),
        step: &StepBuffer,
    ) -> Result<()> {
        self.run_roped_as(client, (qkv, kv, out), step, self.splits_step(step))
    }

    /// [`Attention::run_roped`] in the shape given (as [`Attention::run_as`]).
    ///
    /// # Errors
    /// As [`Attention::run_roped`].
    pub fn run_roped_as(
        &self,
        client: &Client,
        (qkv, kv, out): (&Handle, &Handle, &Handle),
        step: &StepBuffer,
        split: bool,
    ) -> Result<()> {
        let rope = match &self.rope {
            Some(rope) if self.folds_rope(step) => rope,
            _ => {
                return Err(KernelError::Shape {
                    what: "a folded RoPE for this step (at most 16 rows, folded: 1; none: 0)",
                    expected: 1,
                    found: 0,
                });
            }
        };
        let s = &self.heads;
        let width = (s.heads + 2 * s.kv_heads) * s.head_dim;
        check_size("q | k | v", qkv, step.rows() * width * 4)?;
        self.launch_attention(client, (qkv, kv, out), step, split, Some(rope))
    }

    /// [`Attention::run`] in the shape given: `split`, one workgroup a (head, row, 256-key
    /// block) and a launch folding the blocks (attention_merge.wgsl), else one workgroup a
    /// (head, row) walking its blocks. The same bits either way (what the tests check).
    ///
    /// # Errors
    /// As [`Attention::run`].
    pub fn run_as(
        &self,
        client: &Client,
        (q, kv, out): (&Handle, &Handle, &Handle),
        step: &StepBuffer,
        split: bool,
    ) -> Result<()> {
        let s = &self.heads;
        check_size("queries", q, step.rows() * s.heads * s.head_dim * 4)?;
        self.launch_attention(client, (q, kv, out), step, split, None)
    }

    /// The launches of [`Attention::run_as`] and [`Attention::run_roped_as`] (`rope` given),
    /// whose first buffer (queries or q | k | v rows) the caller checked.
    fn launch_attention(
        &self,
        client: &Client,
        (q, kv, out): (&Handle, &Handle, &Handle),
        step: &StepBuffer,
        split: bool,
        rope: Option<&FoldedRope>,
    ) -> Result<()> {
        let s = &self.heads;
        let rows = step.rows();
        check_size("attention output", out, rows * s.heads * s.head_dim * 4)?;
        check_size("KV cache", kv, s.cache_bytes(step.capacity(), self.kv)?)?;
        let (heads, n) = (word("heads", s.heads)?, word("rows", rows)?);
        let blocks = step.most_visible().div_ceil(ATTENTION_BLOCK);
        let split = split && blocks > 0;
        let shader = Shader::Attention {
            kv: self.kv,
            split,
            head_dim: s.head_dim,
            roped: rope.is_some(),
        };
        let params = rope.map_or(&self.params, |r| &r.params);
        let args = |target: &Handle| {
            let args = Bindings::new()
                .with(q)
                .with(kv)
                .with(target)
                .with(params)
                .with(step.handle());
            match rope {
                Some(r) => args.with(&r.table).with(&r.norms),
                None => args,
            }
        };
        if !split {
            launch(client, shader, CubeCount::Static(heads, n, 1), args(out));
            return Ok(());
        }
        // [rows, heads, blocks, head_dim / 4 + 1] vec4s (attention_fold.wgsl).
        let part = self
            .partials
            .take(client, rows * s.heads * blocks * (s.head_dim / 4 + 1) * 16);
        let count = CubeCount::Static(heads, n, word("key blocks", blocks)?);
        launch(client, shader, count, args(&part));
        launch(
            client,
            Shader::AttentionMerge,
            CubeCount::Static(heads, n, 1),
            Bindings::new()
                .with(&part)
                .with(out)
                .with(&self.params)
                .with(step.handle()),
        );
        self.partials.put(part);
        Ok(())
    }
}

/// Words a row's summary takes (summary.wgsl).
pub const SUMMARY_WORDS: usize = 10;

/// The top-2 summary of rows of logits (summary.wgsl), with each row's Gumbel-max draw when the
/// step samples.
#[derive(Debug, Clone)]
pub struct Summary {
    /// [vocab, 0, the bits of −inf, values a chunk, chunks a row] (summary.wgsl).
    params: Handle,
    /// The draw's words of a greedy step: none (and 1 / T = 1, so the sum is at T = 1).
    greedy: Handle,
    vocab: usize,
    chunks: usize,
    /// The chunks' partials ([`Room`]).
    partials: Room,
}

/// The launches of a row reduction over chunks, in order (summary.wgsl, top.wgsl): each chunk
/// of a row ranked, each chunk summed (and drawn) against the row's best, the chunks merged
/// into the row's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowPass {
    /// summary_rank.wgsl, top_rank.wgsl.
    Rank,
    /// summary_sum.wgsl, top_sum.wgsl.
    Sum,
    /// summary_end.wgsl, top_end.wgsl.
    End,
}

/// Values a workgroup of a summary takes on a card: 8 a thread, so that a 150K vocabulary
/// spreads over ~75 workgroups (one a row left an H100 waiting on one workgroup's loads).
const SUMMARY_CHUNK: usize = 2048;

/// Chunks a row at most: summary_end.wgsl's one thread a chunk.
const MAX_SUMMARY_CHUNKS: usize = 256;

/// 1 / `temperature`, the factor the kernels scale logits by.
///
/// # Errors
/// [`KernelError::NotFinite`] naming `what` where it is not a finite positive number (a
/// temperature of 0, negative, subnormal or not finite).
fn inverse_temperature(temperature: f32, what: &'static str) -> Result<f32> {
    let inv_t = 1.0 / temperature;
    if inv_t > 0.0 && inv_t.is_finite() {
        Ok(inv_t)
    } else {
        Err(KernelError::NotFinite {
            what,
            index: 0,
            value: inv_t,
        })
    }
}

/// How a step's rows are drawn: greedy (`None` in [`Summary::run`]) or by the Gumbel-max rule at
/// a temperature, with noise keyed by the run's seed and each row's predicted position
/// (`mars_verify::noise::row_key`; the kernel takes the position from the forward's step
/// words). One upload a run and temperature, however many steps draw with it.
#[derive(Debug, Clone)]
pub struct Draw {
    words: Handle,
}

impl Draw {
    /// Uploads the draw's words: 1 / `temperature` and the seed's key
    /// (`mars_verify::noise::seed_key`).
    ///
    /// # Errors
    /// [`KernelError::NotFinite`] for a temperature whose inverse is not a finite positive
    /// number (0, negative, subnormal or not finite).
    pub fn new(client: &Client, temperature: f32, seed_key: u32) -> Result<Self> {
        let inv_t = inverse_temperature(temperature, "1 / the sampling temperature of a row draw")?;
        Ok(Self {
            words: upload_words(client, &[1, inv_t.to_bits(), seed_key]),
        })
    }
}

impl Summary {
    /// Summaries of rows of `vocab` logits.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for an empty vocabulary or one past u32.
    pub fn new(client: &Client, vocab: usize) -> Result<Self> {
        // A CPU adapter runs a workgroup's threads a few at a time, and each chunk costs it
        // its barriers: one chunk a row there (lavapipe, `gpu_cost stream`, 151,936 logits, 1 /
        // 5 rows: 3.5 / 8.1 ms in one chunk, 4.3 / 14.8 in 8, 40 / 156 in 256).
        let chunk = if super::is_card(client) {
            SUMMARY_CHUNK
        } else {
            vocab
        };
        Self::with_chunk(client, vocab, chunk.max(vocab.div_ceil(MAX_SUMMARY_CHUNKS)))
    }

    /// [`Summary::new`] with `chunk` values a workgroup (what the tests vary).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for an empty vocabulary or one past u32, an empty chunk, or
    /// more than 256 chunks a row.
    pub fn with_chunk(client: &Client, vocab: usize, chunk: usize) -> Result<Self> {
        if vocab == 0 || chunk == 0 {
            return Err(KernelError::Shape {
                what: "vocabulary and chunk of a logit summary",
                expected: 1,
                found: 0,
            });
        }
        let chunks = vocab.div_ceil(chunk);
        if chunks > MAX_SUMMARY_CHUNKS {
            return Err(KernelError::Shape {
                what: "chunks a row of a logit summary",
                expected: MAX_SUMMARY_CHUNKS,
                found: chunks,
            });
        }
        let words = [
            word("vocabulary", vocab)?,
            0,
            NEG_INF_BITS,
            word("summary chunk", chunk)?,
            word("summary chunks", chunks)?,
        ];
        Ok(Self {
            params: upload_words(client, &words),
            greedy: upload_words(client, &[0, 1.0f32.to_bits(), 0]),
            vocab,
            chunks,
            partials: Room::default(),
        })
    }

    /// Chunks a row: workgroups a row in the first two launches.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Enqueues the summaries of the first `rows` rows of `logits` (the last rows of a forward
    /// of `step`) into `out`, from its row `step.link().summaries_at` on (`SUMMARY_WORDS` words
    /// a row), each with its draw where `draw` is given.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for buffers smaller than the shapes need, or more rows than the
    /// forward's logit rows (their positions are the step's).
    pub fn run(
        &self,
        client: &Client,
        logits: &Handle,
        out: &Handle,
        rows: usize,
        step: &StepBuffer,
        draw: Option<&Draw>,
    ) -> Result<()> {
        check_size("logits", logits, rows * self.vocab * 4)?;
        if rows > step.tail() {
            return Err(KernelError::Shape {
                what: "rows summarised (at most the forward's logit rows)",
                expected: step.tail(),
                found: rows,
            });
        }
        let draw = draw.map_or(&self.greedy, |d| &d.words);
        let end = step.link().summaries_at.checked_add(rows);
        let bytes = end.and_then(|e| e.checked_mul(SUMMARY_WORDS * 4));
        check_size("summaries", out, bytes.unwrap_or(usize::MAX))?;
        if rows == 0 {
            return Ok(());
        }
        let n = word("rows", rows)?;
        let chunks = word("summary chunks", self.chunks)?;
        // [rows, chunks, 9] words (summary.wgsl).
        let part = self.partials.take(client, rows * self.chunks * 9 * 4);
        launch(
            client,
            Shader::Summary(RowPass::Rank),
            CubeCount::Static(chunks, n, 1),
            Bindings::new().with(logits).with(&self.params).with(&part),
        );
        launch(
            client,
            Shader::Summary(RowPass::Sum),
            CubeCount::Static(chunks, n, 1),
            Bindings::new()
                .with(logits)
                .with(&self.params)
                .with(&part)
                .with(step.handle())
                .with(draw),
        );
        launch(
            client,
            Shader::Summary(RowPass::End),
            CubeCount::Static(n, 1, 1),
            Bindings::new()
                .with(logits)
                .with(out)
                .with(&self.params)
                .with(step.handle())
                .with(&part),
        );
        self.partials.put(part);
        Ok(())
    }
}

/// Most values a row keeps in [`TopRows`]: a tree node's children, or a top-k sampler's k
/// (llama.cpp's default top-k is 40; model cards ask 20–50).
pub const MAX_TOP: usize = 64;

/// Each row's best `c` values with the sum of exp((z − z1) / T) and the first bad value
/// (top.wgsl): what a tree drafter needs of its frontier rows, and all a top-k sampler or
/// verifier needs of a row, `2c + 3` words a row.
#[derive(Debug, Clone)]
pub struct TopRows {
    /// [stride, cols, the bits of 1 / T, the bits of −inf, values a chunk, chunks a row]
    /// (top.wgsl).
    params: Handle,
    c: usize,
    stride: usize,
    chunks: usize,
    /// The chunks' partials ([`Room`]).
    partials: Room,
}

/// Threads a workgroup of a top-`c`: workgroup memory holds every thread's list, so fewer
/// threads for longer lists keep it at 8 KiB, under WebGPU's 16 KiB.
pub(crate) fn top_threads(c: usize) -> usize {
    match c {
        0..=4 => 256,
        5..=8 => 128,
        9..=16 => 64,
        17..=32 => 32,
        _ => 16,
    }
}

/// Chunks a row of a top-`c` at most: the last launch's threads take several each, so this
/// bounds only the partials' memory.
const MAX_TOP_CHUNKS: usize = 1024;

impl TopRows {
    /// The best `c` (1..=[`MAX_TOP`]) of the first `cols` values of rows `stride` values apart,
    /// at `temperature` (1 for greedy: the model's own softmax).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for `c` or `cols` out of range; [`KernelError::NotFinite`] for a
    /// temperature whose inverse is not a finite positive number.
    pub fn new(
        client: &Client,
        c: usize,
        stride: usize,
        cols: usize,
        temperature: f32,
    ) -> Result<Self> {
        // On a card, a chunk balances the two passes' loads a thread: the rank pass reads
        // chunk / threads values, the merge (chunks / threads) lists of 2c words each, least in
        // sum near chunk = √(2c · cols) (a reckoning, not a measurement: `gpu_cost stream` times
        // a top-40 in these chunks against one), and at least 16 values a thread. One chunk a
        // row on a CPU adapter (lavapipe, top-40 of 151,936 logits, 1 / 5 rows: 3.6 / 10.9 ms in
        // one chunk, 9.6 / 27.6 in 8).
        let chunk = if super::is_card(client) {
            (16 * top_threads(c)).max((2 * c).saturating_mul(cols).isqrt())
        } else {
            cols
        };
        Self::with_chunk(client, (c, stride, cols, temperature), chunk.max(1))
    }

    /// [`TopRows::new`] of `(c, stride, cols, temperature)` with `chunk` values a workgroup
    /// (what the tests vary; more are taken where a row would pass 1,024 chunks).
    ///
    /// # Errors
    /// As [`TopRows::new`], and [`KernelError::Shape`] for an empty chunk.
    pub fn with_chunk(
        client: &Client,
        (c, stride, cols, temperature): (usize, usize, usize, f32),
        chunk: usize,
    ) -> Result<Self> {
        if !(1..=MAX_TOP).contains(&c) {
            return Err(KernelError::Shape {
                what: "children a row (top-c)",
                expected: MAX_TOP,
                found: c,
            });
        }
        if cols == 0 || cols > stride {
            return Err(KernelError::Shape {
                what: "columns ranked of a row (at least 1, at most the row)",
                expected: stride,
                found: cols,
            });
        }
        if chunk == 0 {
            return Err(KernelError::Shape {
                what: "values a chunk of a top-c (at least 1)",
                expected: 1,
                found: 0,
            });
        }
        let inv_t = inverse_temperature(temperature, "1 / the temperature of a top-c")?;
        let chunk = chunk.max(cols.div_ceil(MAX_TOP_CHUNKS));
        let chunks = cols.div_ceil(chunk);
        let words = [
            word("row stride", stride)?,
            word("columns", cols)?,
            inv_t.to_bits(),
            NEG_INF_BITS,
            word("top-c chunk", chunk)?,
            word("top-c chunks", chunks)?,
        ];
        Ok(Self {
            params: upload_words(client, &words),
            c,
            stride,
            chunks,
            partials: Room::default(),
        })
    }

    /// Chunks a row: workgroups a row in the first two launches.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Words a row's result takes.
    pub fn words(&self) -> usize {
        2 * self.c + 3
    }

    /// Enqueues the results of the first `rows` rows of `logits` into `out`.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for buffers smaller than the shapes need.
    pub fn run(&self, client: &Client, logits: &Handle, out: &Handle, rows: usize) -> Result<()> {
        check_size("logits", logits, rows * self.stride * 4)?;
        check_size("top-c results", out, rows * self.words() * 4)?;
        if rows == 0 {
            return Ok(());
        }
        let n = word("rows", rows)?;
        let chunks = word("top-c chunks", self.chunks)?;
        // [rows, chunks, 2c + 2] words (top.wgsl).
        let part = self
            .partials
            .take(client, rows * self.chunks * (2 * self.c + 2) * 4);
        let c = self.c;
        for pass in [RowPass::Rank, RowPass::Sum] {
            launch(
                client,
                Shader::Top { c, pass },
                CubeCount::Static(chunks, n, 1),
                Bindings::new().with(logits).with(&self.params).with(&part),
            );
        }
        launch(
            client,
            Shader::Top {
                c,
                pass: RowPass::End,
            },
            CubeCount::Static(n, 1, 1),
            Bindings::new()
                .with(logits)
                .with(out)
                .with(&self.params)
                .with(&part),
        );
        self.partials.put(part);
        Ok(())
    }
}

/// Enqueues what takes a step's linked ids from `chain` (link.wgsl): the step's last
/// `step.link().ids` ids become the tokens of chain rows `ids_from..` (each row's draw where it
/// was drawn, else its best id), before the embedding reads them. Nothing to launch for a step
/// without a link.
///
/// # Errors
/// [`KernelError::Shape`] for a chain smaller than the link reads.
pub fn link_ids(client: &Client, step: &StepBuffer, chain: &Handle) -> Result<()> {
    let link = step.link();
    if link.ids == 0 {
        return Ok(());
    }
    let end = link.ids_from.checked_add(link.ids);
    let bytes = end.and_then(|e| e.checked_mul(SUMMARY_WORDS * 4));
    check_size("summary chain", chain, bytes.unwrap_or(usize::MAX))?;
    launch(
        client,
        Shader::Link,
        CubeCount::Static(1, 1, 1),
        Bindings::new().with(step.handle()).with(chain),
    );
    Ok(())
}

/// Moves a token tree's accepted rows into place in a layer's cache, and copies whole caches.
#[derive(Debug, Clone)]
pub struct CopyRows {
    heads: Heads,
    params: Handle,
}

impl CopyRows {
    /// Row moves for caches of `heads` with `kv` values.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a bad head shape.
    pub fn new(client: &Client, (heads, kv): (Heads, KvType)) -> Result<Self> {
        heads.check_gpu()?;
        // The kernel moves 32-bit words: a row's head_dim values are head_dim · bytes / 4 of
        // them (whole: the head width is a multiple of 4).
        let words = heads.head_dim * kv.bytes() / 4;
        Ok(Self {
            heads,
            params: upload_words(client, &[word("words a cache row", words)?]),
        })
    }

    /// The moves `(from, to)` in caches of `capacity` rows, as the kernel reads them: one
    /// upload a step, shared by every layer's launch.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a row past the capacity.
    pub fn moves(
        &self,
        client: &Client,
        moves: &[(usize, usize)],
        capacity: usize,
    ) -> Result<Handle> {
        let mut words = vec![word("moves", moves.len())?, word("capacity", capacity)?];
        for &(from, to) in moves {
            if from.max(to) >= capacity {
                return Err(KernelError::Shape {
                    what: "a moved cache row (below the capacity)",
                    expected: capacity,
                    found: from.max(to),
                });
            }
            words.extend([word("row", from)?, word("row", to)?]);
        }
        Ok(upload_words(client, &words))
    }

    /// Enqueues the moves (made by [`CopyRows::moves`] for this cache's capacity) in `kv`.
    pub fn run(&self, client: &Client, kv: &Handle, moves: &Handle) -> Result<()> {
        launch(
            client,
            Shader::Copy,
            CubeCount::Static(word("heads", 2 * self.heads.kv_heads)?, 1, 1),
            Bindings::new().with(kv).with(moves).with(&self.params),
        );
        Ok(())
    }
}

/// Reads the first `bytes` of `src` (a multiple of 16) once, coalesced, at the device's full
/// width: what a kernel reading those bytes can reach (the `gpu_cost` example's ceiling).
/// Returns the threads' words, whose XOR is the bytes' (as little-endian u32s).
///
/// # Errors
/// [`KernelError::Shape`] for a size past the source or not whole vec4s.
pub fn read_through(client: &Client, src: &Handle, bytes: usize) -> Result<Handle> {
    let read = ReadThrough::new(client, bytes)?;
    read.run(client, src)?;
    Ok(read.out)
}

/// [`read_through`]'s launch with its output and parameters made once, so that a call
/// enqueues one launch and nothing else: what `gpu_cost launch` times as the cost of a launch
/// itself (16 bytes: one workgroup, three bindings).
#[derive(Debug)]
pub struct ReadThrough {
    bytes: usize,
    groups: (u32, u32),
    /// The threads' words (u32 each).
    pub out: Handle,
    params: Handle,
}

impl ReadThrough {
    /// The word whose fold makes an eviction's thread write it ([`ReadThrough::evicting`]): the
    /// golden ratio's; any value serves, one a buffer's words rarely fold to.
    pub const MARK: u32 = 0x9e37_79b9;

    /// The launch for `bytes` (a multiple of 16, at least 16).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a size that is not whole vec4s.
    pub fn new(client: &Client, bytes: usize) -> Result<Self> {
        Self::with_outs(client, bytes, true)
    }

    /// The launch for `bytes` as an eviction ([`super::Evict`]): the threads write nothing
    /// (but where a thread's word meets the mark, a 2⁻³² chance), so that it can be bound to a
    /// timed product's output ([`ReadThrough::run_into`]) without changing it, only ordering
    /// the two launches.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a size that is not whole vec4s.
    pub fn evicting(client: &Client, bytes: usize) -> Result<Self> {
        Self::with_outs(client, bytes, false)
    }

    fn with_outs(client: &Client, bytes: usize, outs: bool) -> Result<Self> {
        if !bytes.is_multiple_of(16) || bytes == 0 {
            return Err(KernelError::Shape {
                what: "bytes of a read buffer (whole vec4s, at least one)",
                expected: bytes.div_ceil(16).max(1) * 16,
                found: bytes,
            });
        }
        let n = bytes / 16;
        // About four vec4s a thread: enough threads to cover every core's memory queue, few
        // enough that each thread's loop amortises its start.
        let groups = n.div_ceil(4 * 256).clamp(1, 65_535);
        let threads = groups * 256;
        let (gx, gy) = super::grid(groups);
        let outs = if outs { threads } else { 0 };
        let params = upload_words(
            client,
            &[
                word("vec4s", n)?,
                word("threads", threads)?,
                word("groups", gx)?,
                word("outs", outs)?,
                Self::MARK,
            ],
        );
        Ok(Self {
            bytes,
            groups: (word("groups", gx)?, word("groups", gy)?),
            out: client.empty(outs.max(1) * 4),
            params,
        })
    }

    /// Enqueues the read of `src`'s first bytes into [`ReadThrough::out`].
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a source shorter than the bytes read.
    pub fn run(&self, client: &Client, src: &Handle) -> Result<()> {
        self.run_into(client, src, &self.out)
    }

    /// [`ReadThrough::run`] writing into `out` (at least the threads' words, or one word for
    /// an eviction).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a source shorter than the bytes read.
    pub fn run_into(&self, client: &Client, src: &Handle, out: &Handle) -> Result<()> {
        check_size("read buffer", src, self.bytes)?;
        check_size("read output", out, bound_bytes(&self.out))?;
        launch(
            client,
            Shader::Read,
            CubeCount::Static(self.groups.0, self.groups.1, 1),
            Bindings::new().with(src).with(out).with(&self.params),
        );
        Ok(())
    }
}

/// A copy of `src` (`bytes`, a multiple of 4) made on the device: a new buffer.
///
/// # Errors
/// [`KernelError::Shape`] for a size that is not whole words or past the source.
pub fn clone_buffer(client: &Client, src: &Handle, bytes: usize) -> Result<Handle> {
    check_size("copied buffer", src, bytes)?;
    if !bytes.is_multiple_of(4) {
        return Err(KernelError::Shape {
            what: "bytes of a copied buffer (whole words)",
            expected: bytes.div_ceil(4) * 4,
            found: bytes,
        });
    }
    let dst = client.empty(bytes.max(4));
    let words = bytes / 4;
    let (gx, gy) = super::grid(words.div_ceil(256));
    let params = upload_words(client, &[word("words", words)?, word("groups", gx)?]);
    launch(
        client,
        Shader::Clone,
        CubeCount::Static(word("groups", gx)?, word("groups", gy)?, 1),
        Bindings::new().with(src).with(&dst).with(&params),
    );
    Ok(dst)
}
