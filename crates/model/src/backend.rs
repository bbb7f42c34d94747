//! What every back-end is: the [`Backend`] trait that the reference (f32 burn tensors,
//! `reference.rs`), the CPU (packed blocks on mars-kernels, `cpu.rs`) and the GPU (blocks in GPU
//! buffers and fused WGSL kernels, `gpu.rs`) implement, and what a forward pass asks of one
//! ([`Pass`]). A leaf of the crate: the back-ends import it, the front (`llama.rs`, `cache.rs`,
//! `logits.rs`, `load.rs`) imports them, and nothing here imports either.

use crate::config::LlamaConfig;
use crate::error::Result;

/// What a back-end's logits can be read back as, besides whole rows (which every back-end
/// returns): decided by the back-end, so that a run's readback policy asks it once instead of
/// matching on where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Reads {
    /// Each row's `RowSummary` (top-2, sum, a sampling row's draw) computed where the logits
    /// are and read back small (`Logits::summaries_async`).
    pub summaries: bool,
    /// Each row's best c values (`Logits::top_async`, `Logits::top_k_rows_async`).
    pub top: bool,
    /// Row summaries chained on the device between forwards (`Llama::summary_chain`,
    /// `Llama::forward_linked`): a draft and its verification with one read.
    pub chain: bool,
}

/// One forward pass's input, checked by the front (`Llama`): tokens in the vocabulary, the
/// positions inside the cache's capacity, `1 ≤ rows ≤ tokens.len()`, a tree's parents earlier
/// rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pass<'a> {
    /// Token ids, one a row.
    pub(crate) tokens: &'a [u32],
    /// The cache row of the first token.
    pub(crate) start: usize,
    /// `Some((base, parents))`: the tokens are the last rows of a token tree whose rows start at
    /// cache row `base`, `parents` listing every row of it (`Llama::extend_tree`).
    pub(crate) tree: Option<(usize, &'a [Option<usize>])>,
    /// Logit rows wanted: the last `rows` of the input.
    pub(crate) rows: usize,
    /// Token ids below this get logits; the rest are −inf (`Llama::with_vocab_limit`).
    pub(crate) logit_ids: usize,
    /// Part of a prefill of more than `TILES_ABOVE` tokens (`Llama::forward_last`): the GPU
    /// runs its products in tiles, within f32 rounding of the mat-vec form but not its bits. Never
    /// set for a pass whose rows are compared with a decode's (verification, trees): those
    /// stay in the mat-vec form, batch-invariant bit for bit.
    #[cfg_attr(not(any(feature = "wgpu", feature = "webgpu")), allow(dead_code))]
    pub(crate) long_prefill: bool,
}

/// A back-end's KV cache: one entry per block of the model that made it.
pub(crate) trait LayerCache: Clone + std::fmt::Debug {
    /// Moves cache rows `from → to` in every layer (a token tree's accepted path into place).
    fn move_rows(&mut self, moves: &[(usize, usize)]) -> Result<()>;
}

/// Where a model runs: its weights, its cache, its logits and its forward pass.
pub(crate) trait Backend: Clone + std::fmt::Debug {
    /// Its KV cache.
    type Cache: LayerCache;
    /// What its forward returns: `[rows, vocab]` logits held where they were computed.
    type Logits;
    /// What its logits can be read back as.
    const READS: Reads;

    /// Runs `pass` after what `cache` holds, writing every row's keys and values at
    /// `pass.start..`, and returns the last `pass.rows` rows' logits.
    ///
    /// # Errors
    /// `ModelError::CacheKind` for a cache of another model; the back-end's own errors.
    fn forward(
        &self,
        c: &LlamaConfig,
        pass: &Pass<'_>,
        cache: &mut Self::Cache,
    ) -> Result<Self::Logits>;

    /// An empty cache of `capacity` rows a layer (`capacity` ≤ the context length, checked by
    /// the caller).
    ///
    /// # Errors
    /// A size past `usize`, or the device's refusal.
    fn new_cache(&self, c: &LlamaConfig, capacity: usize) -> Result<Self::Cache>;

    /// The same model running only `layers` (checked by the caller), sharing every weight.
    fn with_layers(&self, layers: &[usize]) -> Self;

    /// Bytes of weights one forward pass reads: every matrix as held, the embedding rows aside.
    fn matrix_bytes(&self) -> u64;

    /// Weights converted to Q8_0 at load because the kernels have no path for their type, as
    /// "name (type)".
    fn converted(&self) -> &[String];
}

/// Positions of a token tree's last `t` rows: the tree's base plus each row's depth (`parents`
/// lists every row; a parent is an earlier row, checked by the caller).
pub(crate) fn tree_positions(base: usize, parents: &[Option<usize>], t: usize) -> Vec<usize> {
    let mut depth: Vec<usize> = Vec::with_capacity(parents.len());
    for (r, &p) in parents.iter().enumerate() {
        depth.push(p.filter(|&p| p < r).map_or(0, |p| depth[p] + 1));
    }
    depth[parents.len() - t..]
        .iter()
        .map(|d| base + d)
        .collect()
}

/// cos / sin tables `[context_length, head_dim / 2]`: angle = pos · θ^(−2i / head_dim), divided by
/// the file's per-frequency factors when it has them (Llama 3.x scaling).
pub(crate) fn rope_tables(c: &LlamaConfig, factors: Option<&[f32]>) -> (Vec<f32>, Vec<f32>) {
    let half = c.head_dim / 2;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| {
            let f = f64::from(c.rope_theta).powf(-2.0 * i as f64 / c.head_dim as f64);
            f / factors.map_or(1.0, |fs| f64::from(fs[i]))
        })
        .collect();
    let mut cos = Vec::with_capacity(c.context_length * half);
    let mut sin = Vec::with_capacity(c.context_length * half);
    for pos in 0..c.context_length {
        for &f in &inv_freq {
            let angle = pos as f64 * f;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}
