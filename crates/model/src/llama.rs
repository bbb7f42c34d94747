//! The model a front end holds: a Llama-family decoder on one back-end, chosen once at load
//! (`load.rs`), with one `forward` that returns logits for every input position a caller asks
//! for (a verifier needs all k + 1 of them). The back-ends are in `reference.rs`, `cpu.rs` and
//! `gpu.rs`; what each must do is the `Backend` trait (`backend.rs`).

use crate::backend::{Backend, Pass, Reads};
use crate::cache::{KvCache, Store};
use crate::config::LlamaConfig;
use crate::cpu::CpuModel;
use crate::error::{ModelError, Result};
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
use crate::gpu::GpuModel;
use crate::logits::{ChainLink, Logits, SampleKeys, SummaryChain};
use crate::path::WeightPath;
use crate::reference::ReferenceModel;
use burn::tensor::Device;

/// The back-end a model was loaded on, with its weights.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// f32 burn tensors (flex, wgpu, WebGPU): the reference.
    Reference(Box<ReferenceModel>),
    /// Packed GGUF blocks and mars-kernels on the CPU.
    Cpu(CpuModel),
    /// GGUF blocks and mars-kernels' fused kernels on wgpu / WebGPU.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    Gpu(Box<GpuModel>),
}

/// Applies the same [`Backend`] call to whichever back-end `body` holds.
macro_rules! each {
    ($body:expr, $m:ident => $e:expr) => {
        match $body {
            Body::Reference($m) => $e,
            Body::Cpu($m) => $e,
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu($m) => $e,
        }
    };
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
    /// [`Llama::forward_last`] runs a longer input in passes of this many rows
    /// ([`PREFILL_ROWS`] unless [`Llama::with_prefill_rows`] changed it).
    pub(crate) prefill_rows: usize,
}

/// Rows a prefill pass holds at most (llama.cpp's default micro-batch): a pass's activations are
/// sized by its rows (the GPU path's step buffers, the CPU path's vectors), so a prompt that
/// fills a 32K context needs the activations of 512 rows, not 32,768 (`MemoryNeeds::steps`
/// reserves this many). The passes give the same logits and cache as one pass, bit for bit:
/// a row's results never depend on the rows beside it.
pub const PREFILL_ROWS: usize = 512;

/// A prefill of more tokens than this is a long one ([`Pass::long_prefill`]): on the GPU its
/// products run in tiles of 32 rows out of workgroup memory, where the mat-vec kernel holds 16
/// rows and reloads each activation for every output it meets.
pub const TILES_ABOVE: usize = mars_kernels::MAX_ROWS;

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
            Body::Reference(m) => Body::Reference(Box::new(m.with_layers(layers))),
            Body::Cpu(m) => Body::Cpu(m.with_layers(layers)),
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => Body::Gpu(Box::new(m.with_layers(layers))),
        };
        Ok(Self {
            config,
            weights: self.weights,
            body,
            device: self.device.clone(),
            logit_ids: self.logit_ids,
            prefill_rows: self.prefill_rows,
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

    /// The same model (sharing every weight) running a longer [`Llama::forward_last`] input in
    /// passes of at most `rows` rows: less memory a pass, the same logits and cache.
    ///
    /// # Errors
    /// [`ModelError::Config`] for 0.
    pub fn with_prefill_rows(&self, rows: usize) -> Result<Self> {
        if rows == 0 {
            return Err(ModelError::Config(
                "prefill rows 0: a pass needs at least one row".into(),
            ));
        }
        Ok(Self {
            prefill_rows: rows,
            ..self.clone()
        })
    }

    /// The same model (sharing every weight) with a long prefill's products on the GPU in
    /// tiles (`tiles`) or in the mat-vec form that decoding takes: the choice the adapter's
    /// kind makes at load (tiles on a GPU card, not on a CPU adapter) set by hand, for tests and
    /// measurements. The CPU and f32 paths have one form: the same model.
    ///
    /// # Errors
    /// The kernels' error for a group that cannot be remade.
    pub fn with_prefill_tiles(&self, tiles: bool) -> Result<Self> {
        #[cfg(any(feature = "wgpu", feature = "webgpu"))]
        if let Body::Gpu(m) = &self.body {
            let form = tiles.then_some(mars_kernels::gpu::TileForm::Vectors);
            return Ok(Self {
                body: Body::Gpu(Box::new(m.with_tiles(form)?)),
                ..self.clone()
            });
        }
        let _ = tiles;
        Ok(self.clone())
    }

    /// The GPU path's distinct matrix-group shapes, each with its role, count and form (empty on
    /// the other paths, which have no forms).
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub fn group_forms(&self) -> Vec<crate::GroupForm> {
        match &self.body {
            Body::Gpu(m) => m.group_forms(),
            _ => Vec::new(),
        }
    }

    /// Times one group of each distinct shape on the GPU path in every form it can take
    /// (`mars_kernels::gpu::MatrixGroup::forms`), at one row and at `pass_rows` rows (a
    /// verification pass: k + 1), then a long prefill's product in each prefill form (tiles on
    /// the matrix units in each of the adapter's shapes, `units`: `adapter_matrix_units`), each
    /// timing within about
    /// `budget_ms`, each product after a read of `evict_bytes` where that is not 0 (a card's
    /// cache emptied of its weights, as a forward meets them: `mars_kernels::gpu::EVICT_BYTES`):
    /// what `mars tune` prints and the tuning table keeps the best of.
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] off the GPU path; the kernels' error for a group that cannot
    /// run, an eviction that is not whole vec4s, or a failed read.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub async fn time_forms(
        &self,
        pass_rows: usize,
        budget_ms: f64,
        units: &[crate::UnitShape],
        evict_bytes: usize,
    ) -> Result<Vec<crate::GroupTiming>> {
        if !budget_ms.is_finite() || budget_ms <= 0.0 {
            return Err(ModelError::Config(format!(
                "tuning budget {budget_ms} ms: expected a positive finite number"
            )));
        }
        match &self.body {
            Body::Gpu(m) => {
                m.time_forms(
                    pass_rows.clamp(1, crate::gpu::MAX_PASS_ROWS),
                    budget_ms,
                    units,
                    evict_bytes,
                )
                .await
            }
            _ => Err(ModelError::Unsupported(
                "forms are timed on the GPU path (GGUF blocks on wgpu) only".into(),
            )),
        }
    }

    /// The same model (sharing every weight) with each matrix group whose shape `choose` names
    /// a form for run in that form (the tuning table's choice); the others, and the CPU and f32
    /// paths, as they are. Each form keeps the contract of every form: a row's logits do not
    /// depend on the rows beside it, so decoding and verification agree bit for bit.
    ///
    /// # Errors
    /// The kernels' error for a form a group cannot take.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub fn with_forms(&self, choose: &dyn Fn(&str) -> Option<crate::Form>) -> Result<Self> {
        let mut model = self.clone();
        if let Body::Gpu(m) = &self.body {
            model.body = Body::Gpu(Box::new(m.with_forms(choose)?));
        }
        Ok(model)
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
        // The whole input is checked before the first pass, so a refusal leaves the cache as
        // it was; then every pass but the last writes the cache and drops its one logit row.
        self.check_input(tokens, cache)?;
        // One form for the whole input, whatever passes it is cut into.
        let long = tokens.len() > TILES_ABOVE;
        let mut rest = tokens;
        while rest.len() > self.prefill_rows {
            let (pass, after) = rest.split_at(self.prefill_rows);
            self.pass(pass, cache, 1, None, long)?;
            rest = after;
        }
        self.pass(rest, cache, 1, None, long)
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

    /// `passes` one-row forwards chained on the device with nothing read: the first over
    /// `feed`, each later one over the token ([`RowSummary::token`](crate::RowSummary::token):
    /// the best id, or the draw with `sample`'s noise for the position it predicts) of the row
    /// the pass before summarised, the summaries going to chain rows `0..passes`. A draft
    /// model's chain of drafts and target-only decoding's tokens a read; one
    /// [`SummaryChain::read`] then returns them. The GPU path only.
    ///
    /// # Errors
    /// As [`Llama::forward_linked`] and [`Logits::summarize_into`].
    pub fn forward_chained(
        &self,
        feed: &[u32],
        passes: usize,
        chain: &SummaryChain,
        cache: &mut KvCache,
        sample: Option<&SampleKeys>,
    ) -> Result<()> {
        for i in 0..passes {
            let link = ChainLink {
                chain,
                ids_from: i.saturating_sub(1),
                ids: usize::from(i > 0),
                summaries_at: i,
            };
            let host = if i == 0 { feed } else { &[] };
            let last = self.forward_linked(host, link, cache, 1)?; // [1, vocab]
            last.summarize_into(chain, sample)?;
        }
        Ok(())
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
        let pass = Pass {
            tokens,
            start,
            tree: Some((base, parents)),
            rows: tokens.len(),
            logit_ids: self.logit_ids,
            long_prefill: false,
        };
        let logits = self.run(&pass, cache, None)?;
        cache.advance(end);
        Ok(logits)
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
        self.pass(tokens, cache, rows, link, false)
    }

    /// One chain pass over `tokens`, part of a long prefill where `long_prefill` says so.
    fn pass(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        rows: usize,
        link: Option<ChainLink<'_>>,
        long_prefill: bool,
    ) -> Result<Logits> {
        let (start, end) = self.check_input(tokens, cache)?;
        let pass = Pass {
            tokens,
            start,
            tree: None,
            rows,
            logit_ids: self.logit_ids,
            long_prefill,
        };
        let logits = self.run(&pass, cache, link)?;
        cache.advance(end);
        Ok(logits)
    }

    /// The back-end's forward over a checked pass, on the back-end's own cache.
    #[cfg_attr(
        not(any(feature = "wgpu", feature = "webgpu")),
        allow(clippy::needless_pass_by_value)
    )]
    fn run(
        &self,
        pass: &Pass<'_>,
        cache: &mut KvCache,
        link: Option<ChainLink<'_>>,
    ) -> Result<Logits> {
        let c = &self.config;
        if link.is_some() && !self.reads().chain {
            return Err(ModelError::Unsupported(
                "ids chained on a device: only the GPU path has them".into(),
            ));
        }
        match (&self.body, cache.store_mut()) {
            (Body::Reference(m), Store::Reference(k)) => {
                Ok(Logits::reference(m.forward(c, pass, k)?)) // [1, rows, vocab]
            }
            (Body::Cpu(m), Store::Cpu(k)) => {
                let values = m.forward(c, pass, k)?; // [rows, vocab]
                Ok(Logits::cpu(values, pass.rows, c.vocab_size))
            }
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            (Body::Gpu(m), Store::Gpu(k)) => {
                let link = link.map(|l| {
                    let kernels = mars_kernels::gpu::Link {
                        ids_from: l.ids_from,
                        ids: l.ids,
                        summaries_at: l.summaries_at,
                    };
                    (l.chain.inner(), kernels)
                });
                Ok(Logits::gpu(m.forward_linked(c, pass, k, link)?)) // [rows, vocab]
            }
            _ => Err(ModelError::CacheKind),
        }
    }

    /// What this model's logits can be read back as besides whole rows (decided by its
    /// back-end).
    pub fn reads(&self) -> Reads {
        match &self.body {
            Body::Reference(_) => ReferenceModel::READS,
            Body::Cpu(_) => CpuModel::READS,
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(_) => GpuModel::READS,
        }
    }

    /// An empty KV cache for up to `capacity` tokens (at most the model's context length).
    ///
    /// # Errors
    /// [`ModelError::ContextOverflow`] when `capacity` exceeds the context length.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        let c = &self.config;
        if capacity > c.context_length {
            return Err(ModelError::ContextOverflow {
                cached: 0,
                new: capacity,
                capacity: c.context_length,
            });
        }
        let store = match &self.body {
            Body::Reference(m) => Store::Reference(m.new_cache(c, capacity)?),
            Body::Cpu(m) => Store::Cpu(m.new_cache(c, capacity)?),
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => Store::Gpu(m.new_cache(c, capacity)?),
        };
        Ok(KvCache::new(store, capacity))
    }

    /// The weight path the model was loaded on.
    pub fn weight_path(&self) -> WeightPath {
        self.weights
    }

    /// Bytes of KV cache a token of context takes on this model's path (f16 or f32 on the
    /// GPU, f32 elsewhere).
    pub fn kv_bytes_per_token(&self) -> u64 {
        let value = self.weights.kv().map_or(4, mars_kernels::KvType::bytes);
        self.config().kv_bytes_per_token(value)
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
        each!(&self.body, m => m.converted())
    }

    /// Bytes of weights one forward pass reads: every matrix (as stored: blocks or f32), the
    /// embedding rows aside.
    pub fn matrix_bytes(&self) -> u64 {
        each!(&self.body, m => m.matrix_bytes())
    }
}
