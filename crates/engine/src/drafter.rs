//! Drafters: what proposes the k tokens the target then verifies.
//! Over 800 lines: both drafters and the draft state a step hands the verifier (chains kept on
//! the GPU, the shared draft noise, trees) are one contract, kept together with its tests.
//!
//! - [`ModelDrafter`]: a smaller model — a separate file, or the target's own first layers
//!   ([`mars_model::Llama::with_layers`], sharing the target's weights) — with its own KV cache;
//!   it samples with the same processing as the verifier and hands over its distributions q.
//! - [`NgramDrafter`]: prompt lookup: copies what followed the latest earlier occurrence of the
//!   current suffix; deterministic (one-hot q), no model at all.

use mars_formats::Tokenizer;
use mars_model::{KvCache, Llama, Logits, SummaryChain};
use mars_verify::{SampleKeys, Sampler, Sampling};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use crate::error::{EngineError, Result};
use crate::readback::{Readback, RowRead};

/// One proposal: up to k token ids (all below the target's vocabulary) and, for a sampling
/// drafter, its distributions q over the target's vocabulary (`[tokens.len() * vocab]`);
/// `None` means one-hot (each token had probability 1). With `parents` the tokens are a tree
/// (each node's parent an earlier node, `None` for a child of the last accepted token; siblings
/// in the order they are to be tried), verified in one target pass.
/// A model drafter's chain on the GPU leaves its ids there (`chained`, `tokens` empty): the
/// target takes them on the device, and the step reads drafts and verdict back at once.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    /// Proposed ids.
    pub tokens: Vec<u32>,
    /// Drafter rows, `[tokens.len() * target_vocab]`, or `None` for one-hot.
    pub probs: Option<Vec<f32>>,
    /// The tree's parent links, `[tokens.len()]`; `None` for a chain.
    pub parents: Option<Vec<Option<u32>>>,
    /// A chain whose ids are still on the GPU (then `tokens` is empty).
    pub chained: Option<ChainedDraft>,
}

/// A chain of `tokens` drafts kept on the GPU: chain rows `0..tokens` hold the draft model's
/// row summaries (row i's token — its best id, or its draw when sampling — is draft token i,
/// the input of its forward i + 1); rows `tokens..=2·tokens` are room for the target's
/// summaries of its `tokens + 1` rows.
#[derive(Debug, Clone)]
pub struct ChainedDraft {
    /// The summaries.
    pub chain: SummaryChain,
    /// Draft tokens in it.
    pub tokens: usize,
}

/// A drafter's randomness: the host's generator, which samples a row read back, and the run's
/// seed, whose counter-based noise ([`mars_verify::noise`]) a GPU draws a chained draft with.
/// That noise is the target's own, position by position: the draft model's draw of a position
/// and the target's are one Gumbel-max coupling, equal wherever the two distributions are
/// close, and a draft kept iff it equals the target's draw leaves target-only's text.
#[derive(Debug, Clone)]
pub struct DraftRandom {
    /// The host's generator (its own stream, apart from the verifier's).
    pub rng: ChaCha8Rng,
    /// The run's seed.
    pub seed: u64,
}

impl DraftRandom {
    /// A run's drafter randomness: stream 1 of the seed's generator (the verifier takes
    /// stream 0) and the seed's noise.
    pub fn new(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(1);
        Self { rng, seed }
    }
}

/// Something that proposes tokens. The loop calls [`Drafter::prefill`] once with the prompt, then
/// per step [`Drafter::draft`] and, once the verifier has decided, [`Drafter::rollback`].
///
/// The methods are async because a model drafter reads logits back from the GPU, which in the
/// browser can only be awaited. Futures are not `Send`: the browser is single-threaded, and
/// natively the loop runs on the caller's thread.
#[allow(async_fn_in_trait)]
pub trait Drafter {
    /// A short label for reports ("layers first:8", "ngram", "draft model").
    fn label(&self) -> String;

    /// Sees the prompt before the first step (a model drafter fills its cache here).
    async fn prefill(&mut self, prompt: &[u32]) -> Result<()>;

    /// Proposes at most `k` tokens to follow `context` (the prompt and everything accepted).
    async fn draft(&mut self, context: &[u32], k: usize, random: &mut DraftRandom)
    -> Result<Draft>;

    /// The verifier kept `kept` (the context but its last token, which is not yet fed
    /// anywhere): forget anything past it (a tree drafter keeps the accepted path's rows).
    fn rollback(&mut self, kept: &[u32]) -> Result<()>;

    /// Tokens in the drafter's cache, if it has one (for tests of the rollback invariant).
    fn cache_len(&self) -> Option<usize>;
}

/// Refuses a draft model whose tokenizer is not the target's, naming the first id whose token
/// differs. The drafter may have fewer ids (its rows are padded) or more (they are masked).
///
/// # Errors
/// [`EngineError::TokenizerMismatch`].
pub fn check_same_tokenizer(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    let common = target.vocab_size().min(draft.vocab_size());
    for id in 0..u32::try_from(common).unwrap_or(u32::MAX) {
        let (t, d) = (target.token(id), draft.token(id));
        if t != d {
            return Err(EngineError::TokenizerMismatch {
                id,
                target: t,
                draft: d,
            });
        }
    }
    Ok(())
}

/// A drafter that runs a (smaller) Llama: a separate model or a layer subset of the target.
#[derive(Debug)]
pub struct ModelDrafter {
    model: Llama,
    cache: KvCache,
    sampler: Sampler,
    /// What this model's rows come back as ([`Readback`]: the one rule).
    readback: Readback,
    target_vocab: usize,
    label: String,
    row: Vec<f32>,
    q: Vec<f32>,
    /// Most nodes of a tree draft; 0: chains.
    tree: usize,
    /// Children per expanded node, and nodes expanded per depth.
    branch: usize,
    /// ln of the least draft probability of a tree node's path ([`ModelDrafter::with_min_p`]);
    /// −∞: no floor.
    min_score: f64,
    /// The last tree's expanded nodes, cached at `base..` until the verdict is known.
    grown: Option<Grown>,
}

/// A tree draft's rows in the drafter's cache: `tokens[r]` at cache row `base + r`, its parent
/// `parents[r]` (an earlier row; `None` for a child of the last context token).
#[derive(Debug)]
struct Grown {
    base: usize,
    tokens: Vec<u32>,
    parents: Vec<Option<usize>>,
}

/// A node of a tree being drafted.
#[derive(Debug, Clone, Copy)]
struct Node {
    token: u32,
    /// An earlier node; `None` under the root.
    parent: Option<usize>,
    /// Draft log-probability of the path to here: the expansion's ranking.
    score: f64,
}

impl ModelDrafter {
    /// A drafter running `model` with a cache of `capacity` tokens, sampling as `sampling` (the
    /// verifier's settings, so that q and p are processed alike), proposing ids below
    /// `target_vocab`.
    ///
    /// # Errors
    /// Invalid sampling, or a capacity beyond the model's context.
    pub fn new(
        model: Llama,
        capacity: usize,
        sampling: Sampling,
        target_vocab: usize,
        label: impl Into<String>,
    ) -> Result<Self> {
        let capacity = capacity.min(model.config().context_length);
        // Ids the target lacks are never proposed: limiting the logits to the target's ids is
        // what `set_row` does to a row read back, and lets a greedy draft on the GPU take its
        // argmax there (a chained draft's ids are never checked on the host before the
        // target reads them).
        let model = if target_vocab < model.logit_ids() {
            model.with_vocab_limit(target_vocab)?
        } else {
            model
        };
        let cache = model.new_cache(capacity)?;
        Ok(Self {
            readback: Readback::new(sampling, model.reads()),
            model,
            cache,
            sampler: Sampler::new(sampling)?,
            target_vocab,
            label: label.into(),
            row: Vec::new(),
            q: Vec::new(),
            tree: 0,
            branch: 0,
            min_score: f64::NEG_INFINITY,
            grown: None,
        })
    }

    /// Drafts trees of at most `nodes` nodes (0: chains), each expanded node with its `branch`
    /// most probable children and at most `branch` nodes expanded per depth (EAGLE-2's dynamic
    /// tree; the depth is the step's k).
    ///
    /// # Errors
    /// [`EngineError::Config`] for a branch of 0 with a tree.
    pub fn with_tree(mut self, nodes: usize, branch: usize) -> Result<Self> {
        if nodes > 0 && branch == 0 {
            return Err(EngineError::Config {
                field: "branch",
                value: branch.to_string(),
                why: "a tree needs at least one child per node",
            });
        }
        self.tree = nodes;
        self.branch = branch;
        Ok(self)
    }

    /// A tree keeps only nodes whose path's draft probability is at least `min_p` (0: every
    /// node the budget allows), and stops growing where no node of the frontier reaches it.
    /// A node's path probability is about its chance of being accepted, so where a target row
    /// costs something (the CPU) a floor spends the budget where the draft is unsure and skips
    /// the draft passes a deep tree would waste; llama.cpp's tree splits a branch only where
    /// the draft's p > 0.1 for the same reason.
    ///
    /// # Errors
    /// [`EngineError::Config`] for a `min_p` that is not finite or not in [0, 1).
    pub fn with_min_p(mut self, min_p: f32) -> Result<Self> {
        check_min_p(min_p)?;
        self.min_score = if min_p > 0.0 {
            f64::from(min_p).ln()
        } else {
            f64::NEG_INFINITY
        };
        Ok(self)
    }

    /// Runs `tokens` and returns the last position's logits as a target-vocabulary row: ids the
    /// target lacks are dropped, ids the drafter lacks are −inf (never proposed).
    async fn last_row(&mut self, tokens: &[u32]) -> Result<()> {
        let last = self.model.forward_last(tokens, &mut self.cache)?; // [1, draft_vocab]
        let (values, width) = self.host_rows(last).await?;
        self.set_row(&values[..width]);
        Ok(())
    }

    /// `logits` on the host, `[rows, width]`: with top-k where a GPU reduces them, each row's
    /// best k of the ids the target has and −inf elsewhere (all the sampler's top-k keeps:
    /// `Logits::top_k_rows_async`, `2k + 3` words a row read back); else the rows whole.
    async fn host_rows(&self, logits: Logits) -> Result<(Vec<f32>, usize)> {
        let (_, dv) = logits.dims();
        let cols = dv.min(self.target_vocab);
        if let RowRead::TopK(k) = self.readback.host_rows()
            && let Some((values, _)) = logits.top_k_rows_async(k, cols).await?
        {
            return Ok((values, cols));
        }
        Ok((logits.read_async().await?, dv)) // rows * draft_vocab
    }

    /// A chain of `k` drafts on the GPU with nothing read: `feed` then each draft fed back on
    /// the device — greedy, its argmax (the summary's best id, lowest id first among ties, as
    /// the host's greedy sampler ranks them); with `sample`, its Gumbel-max draw with the
    /// noise of the position it predicts, which the target draws that position with. A row
    /// with a NaN or +inf cannot be ranked; the step that reads the chain cuts the draft
    /// before it (what follows was fed a meaningless id).
    fn draft_on_device(
        &mut self,
        feed: &[u32],
        k: usize,
        chain: SummaryChain,
        sample: Option<SampleKeys>,
    ) -> Result<Draft> {
        self.model
            .forward_chained(feed, k, &chain, &mut self.cache, sample.as_ref())?;
        Ok(Draft {
            chained: Some(ChainedDraft { chain, tokens: k }),
            ..Draft::default()
        })
    }

    /// The `branch` children of each of the `rows` rows of `logits` (most probable first, as
    /// [`Sampler::top`] ranks them): reduced where the logits are when they are on a GPU and no
    /// top-k / top-p is set (`2 × branch + 3` words a row read back), else from the rows read
    /// back ([`ModelDrafter::host_rows`]: their best top-k where a GPU can, whole otherwise).
    async fn children(&mut self, logits: Logits, rows: usize) -> Result<Vec<Vec<(u32, f64)>>> {
        let sampling = *self.sampler.sampling();
        let (_, dv) = logits.dims();
        // Ids the target lacks are never proposed (as `set_row` drops them).
        let cols = dv.min(self.target_vocab);
        if self.readback.children_on_device()
            && let Some(tops) = logits
                .top_async(self.branch, cols, sampling.effective_temperature())
                .await?
        {
            return tops
                .iter()
                .map(|t| {
                    let mut out = Vec::new();
                    self.sampler.top_of(t, self.branch, &mut out)?;
                    Ok(out)
                })
                .collect();
        }
        let (values, width) = self.host_rows(logits).await?;
        let mut all = Vec::with_capacity(rows);
        for i in 0..rows {
            self.set_row(&values[i * width..(i + 1) * width]);
            let mut out = Vec::new();
            self.sampler.top(&self.row, self.branch, &mut out)?;
            all.push(out);
        }
        Ok(all)
    }

    /// Copies one draft-vocabulary row into `self.row` as a target-vocabulary row.
    fn set_row(&mut self, values: &[f32]) {
        let tv = self.target_vocab;
        self.row.clear();
        self.row.extend_from_slice(&values[..values.len().min(tv)]);
        self.row.resize(tv, f32::NEG_INFINITY);
    }

    /// EAGLE-2's dynamic tree: the root's `branch` most probable children; then per depth, the
    /// `branch` best nodes of the last depth (by path log-probability) run in one batched pass
    /// over the cache and their ancestors and contribute their own children; finally the
    /// `tree` best nodes overall. A child's score is at most its parent's, so the best nodes
    /// always include their ancestors. Children are deterministic (the draft's top tokens, not
    /// draws), so the verifier treats q as one-hot, which is what is lossless for them.
    async fn draft_tree(&mut self, context: &[u32], depth: usize) -> Result<Draft> {
        let fed = self.cache.len();
        let last = self.model.forward_last(&context[fed..], &mut self.cache)?; // [1, draft_vocab]
        let children = self.children(last, 1).await?.pop().unwrap_or_default();
        let base = self.cache.len();
        let mut nodes: Vec<Node> = Vec::new();
        let floor = self.min_score;
        // Children come most probable first: those under the floor end the list.
        nodes.extend(
            children
                .iter()
                .map(|&(token, p)| Node {
                    token,
                    parent: None,
                    score: p.ln(),
                })
                .take_while(|n| n.score >= floor),
        );
        let mut frontier: Vec<usize> = (0..nodes.len()).collect();
        // Expanded nodes in cache order (row r at base + r), and each node's row.
        let mut grown = Grown {
            base,
            tokens: Vec::new(),
            parents: Vec::new(),
        };
        let mut row_of: Vec<Option<usize>> = vec![None; nodes.len()];
        for _ in 1..depth {
            // The n-th best score so far: a node below it cannot have a child in the tree.
            let mut scores: Vec<f64> = nodes.iter().map(|n| n.score).collect();
            let bar = if scores.len() >= self.tree {
                let (_, nth, _) =
                    scores.select_nth_unstable_by(self.tree - 1, |a, b| b.total_cmp(a));
                *nth
            } else {
                f64::NEG_INFINITY
            };
            frontier.sort_by(|&a, &b| nodes[b].score.total_cmp(&nodes[a].score).then(a.cmp(&b)));
            frontier.retain(|&j| nodes[j].score > bar);
            let room = self.cache.capacity().saturating_sub(self.cache.len());
            frontier.truncate(self.branch.min(room));
            if frontier.is_empty() {
                break;
            }
            frontier.sort_unstable();
            let first = grown.tokens.len();
            for &j in &frontier {
                row_of[j] = Some(grown.tokens.len());
                grown.tokens.push(nodes[j].token);
                grown.parents.push(nodes[j].parent.and_then(|p| row_of[p]));
            }
            let logits = self.model.extend_tree(
                base,
                &grown.tokens[first..],
                &grown.parents,
                &mut self.cache,
            )?; // [frontier, draft_vocab]
            let expanded = std::mem::take(&mut frontier);
            let all = self.children(logits, expanded.len()).await?;
            for (&j, children) in expanded.iter().zip(&all) {
                for &(token, p) in children {
                    let score = nodes[j].score + p.ln();
                    if score < floor {
                        break;
                    }
                    frontier.push(nodes.len());
                    row_of.push(None);
                    nodes.push(Node {
                        token,
                        parent: Some(j),
                        score,
                    });
                }
            }
        }
        self.grown = Some(grown);
        // The best `tree` nodes, kept in creation order (parents before children, siblings
        // most probable first: the order the verifier tries them).
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|&a, &b| nodes[b].score.total_cmp(&nodes[a].score).then(a.cmp(&b)));
        order.truncate(self.tree);
        order.sort_unstable();
        let mut index = vec![None; nodes.len()];
        let mut tokens = Vec::with_capacity(order.len());
        let mut parents = Vec::with_capacity(order.len());
        for (i, &j) in order.iter().enumerate() {
            index[j] = Some(i as u32);
            tokens.push(nodes[j].token);
            // A kept node's parent is kept (its score is at least the node's, its index lower).
            parents.push(nodes[j].parent.and_then(|p| index[p]));
        }
        Ok(Draft {
            tokens,
            probs: None,
            parents: Some(parents),
            chained: None,
        })
    }
}

/// [`DraftShape::tree_min_p`](crate::DraftShape::tree_min_p)'s rule, the one check of it.
pub(crate) fn check_min_p(min_p: f32) -> Result<()> {
    if min_p.is_finite() && (0.0..1.0).contains(&min_p) {
        Ok(())
    } else {
        Err(EngineError::Config {
            field: "tree_min_p",
            value: min_p.to_string(),
            why: "a probability in [0, 1)",
        })
    }
}

impl Drafter for ModelDrafter {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn prefill(&mut self, prompt: &[u32]) -> Result<()> {
        // Everything but the last prompt token, which the first draft feeds.
        let n = prompt.len().saturating_sub(1).min(self.cache.capacity());
        if n > 0 {
            self.model.forward_last(&prompt[..n], &mut self.cache)?;
        }
        Ok(())
    }

    async fn draft(
        &mut self,
        context: &[u32],
        k: usize,
        random: &mut DraftRandom,
    ) -> Result<Draft> {
        let fed = self.cache.len();
        // The cache never holds more than context minus its last token (rollback ensures it).
        let pending = context.len().saturating_sub(fed);
        // Feeding the pending tokens and k − 1 drafts must fit the cache: cap k instead of failing
        // (a separate draft model may have a shorter context than the target).
        let room = self.cache.capacity().saturating_sub(fed);
        let k = k.min((room + 1).saturating_sub(pending));
        if k == 0 || pending == 0 {
            return Ok(Draft::default());
        }
        if self.tree > 0 {
            return self.draft_tree(context, k).await;
        }
        let sampling = *self.sampler.sampling();
        let greedy = sampling.is_greedy();
        // On the GPU the chain stays there: greedy (top-k / top-p never move an argmax) or
        // drawn by the Gumbel-max rule where no filter needs the row's sorted mass.
        if self.readback.chain_on_device()
            && let Some(chain) = self.model.summary_chain(2 * k + 1)?
        {
            let sample = (!greedy).then_some(SampleKeys {
                seed: random.seed,
                temperature: sampling.temperature,
            });
            return self.draft_on_device(&context[fed..], k, chain, sample);
        }
        let mut tokens = Vec::with_capacity(k);
        let mut probs = Vec::with_capacity(if greedy { 0 } else { k * self.target_vocab });
        let mut feed = context[fed..].to_vec();
        loop {
            // Off the GPU blocks path no kernel summarises the logits: the row is read.
            self.last_row(&feed).await?;
            let token = self
                .sampler
                .sample_with_probs(&self.row, &mut random.rng, &mut self.q)?;
            if !greedy {
                probs.extend_from_slice(&self.q);
            }
            tokens.push(token);
            if tokens.len() == k {
                break;
            }
            feed = vec![token];
        }
        Ok(Draft {
            tokens,
            probs: (!greedy).then_some(probs),
            parents: None,
            chained: None,
        })
    }

    fn rollback(&mut self, kept: &[u32]) -> Result<()> {
        if let Some(g) = self.grown.take() {
            // The accepted path's expanded nodes move into place after the context they
            // continue; the next draft feeds only what follows them.
            if let Some(path) = kept.get(g.base..) {
                let mut rows = Vec::new();
                let mut parent = None;
                for &t in path {
                    match (0..g.tokens.len()).find(|&r| g.parents[r] == parent && g.tokens[r] == t)
                    {
                        Some(r) => {
                            rows.push(r);
                            parent = Some(r);
                        }
                        None => break,
                    }
                }
                self.cache.keep_rows(g.base, &rows)?;
            }
        }
        let keep = self.cache.len().min(kept.len());
        self.cache.truncate(keep)?;
        Ok(())
    }

    fn cache_len(&self) -> Option<usize> {
        Some(self.cache.len())
    }
}

/// Prompt lookup: finds the latest earlier occurrence of the context's last n tokens (n from
/// `max_ngram` down to `min_ngram`) and proposes the tokens that followed it; with a tree
/// budget, what followed several earlier occurrences, as branches of one tree.
#[derive(Debug, Clone)]
pub struct NgramDrafter {
    max_ngram: usize,
    min_ngram: usize,
    /// Most nodes of a tree draft; 0: chains.
    tree: usize,
}

/// Most branches a prompt-lookup tree takes (distinct continuations, latest first).
const NGRAM_BRANCHES: usize = 4;

impl NgramDrafter {
    /// Matches suffixes of `min_ngram..=max_ngram` tokens.
    ///
    /// # Errors
    /// [`EngineError::Config`] when `min_ngram` is 0 or above `max_ngram`.
    pub fn new(min_ngram: usize, max_ngram: usize) -> Result<Self> {
        if min_ngram == 0 || min_ngram > max_ngram {
            return Err(EngineError::Config {
                field: "ngram",
                value: format!("{min_ngram}..={max_ngram}"),
                why: "needs 1 <= min <= max",
            });
        }
        Ok(Self {
            max_ngram,
            min_ngram,
            tree: 0,
        })
    }

    /// Proposes trees of at most `nodes` nodes (0: chains, as [`NgramDrafter::new`]).
    #[must_use]
    pub fn with_tree(mut self, nodes: usize) -> Self {
        self.tree = nodes;
        self
    }

    /// A tree of what followed earlier occurrences of the context's suffix: up to
    /// [`NGRAM_BRANCHES`] distinct continuations of at most `depth` tokens (the longest suffix
    /// that matches first, the latest occurrence first), merged where they share a prefix, at
    /// most `nodes` nodes. Returns the tokens and their parents; one continuation is a chain.
    pub fn propose_tree(
        &self,
        context: &[u32],
        depth: usize,
        nodes: usize,
    ) -> (Vec<u32>, Vec<Option<u32>>) {
        let len = context.len();
        let mut branches: Vec<&[u32]> = Vec::new();
        for n in (self.min_ngram..=self.max_ngram.min(len.saturating_sub(1))).rev() {
            let suffix = &context[len - n..];
            for start in (0..len - n).rev() {
                if &context[start..start + n] == suffix {
                    let from = start + n;
                    let cont = &context[from..(from + depth).min(len)];
                    if !cont.is_empty() && !branches.iter().any(|b| b.starts_with(cont)) {
                        branches.push(cont);
                    }
                    if branches.len() == NGRAM_BRANCHES {
                        break;
                    }
                }
            }
            if branches.len() == NGRAM_BRANCHES {
                break;
            }
        }
        // Merge into a trie, in order: a branch's nodes are added until the budget is spent.
        let (mut tokens, mut parents) = (Vec::new(), Vec::new());
        'branches: for branch in branches {
            let mut parent: Option<u32> = None;
            for &t in branch {
                let existing = (0..tokens.len()).find(|&j| parents[j] == parent && tokens[j] == t);
                match existing {
                    Some(j) => parent = Some(j as u32),
                    None if tokens.len() < nodes => {
                        tokens.push(t);
                        parents.push(parent);
                        parent = Some((tokens.len() - 1) as u32);
                    }
                    None => break 'branches,
                }
            }
        }
        (tokens, parents)
    }

    /// The proposal for `context`, at most `k` tokens.
    pub fn propose(&self, context: &[u32], k: usize) -> Vec<u32> {
        let len = context.len();
        for n in (self.min_ngram..=self.max_ngram.min(len.saturating_sub(1))).rev() {
            let suffix = &context[len - n..];
            // Latest match first: recent text predicts the continuation best.
            for start in (0..len - n).rev() {
                if &context[start..start + n] == suffix {
                    let from = start + n;
                    return context[from..(from + k).min(len)].to_vec();
                }
            }
        }
        Vec::new()
    }
}

impl Default for NgramDrafter {
    /// Suffixes of 1 to 3 tokens, the common prompt-lookup setting.
    fn default() -> Self {
        Self {
            max_ngram: 3,
            min_ngram: 1,
            tree: 0,
        }
    }
}

impl Drafter for NgramDrafter {
    fn label(&self) -> String {
        format!(
            "prompt lookup ({}..{}-gram)",
            self.min_ngram, self.max_ngram
        )
    }

    async fn prefill(&mut self, _prompt: &[u32]) -> Result<()> {
        Ok(())
    }

    async fn draft(
        &mut self,
        context: &[u32],
        k: usize,
        _random: &mut DraftRandom,
    ) -> Result<Draft> {
        if self.tree > 0 {
            let (tokens, parents) = self.propose_tree(context, k, self.tree);
            // A tree without a branch is a chain: the chain's path (the same verdicts).
            let branched = parents
                .iter()
                .enumerate()
                .any(|(j, p)| *p != j.checked_sub(1).map(|p| p as u32));
            return Ok(Draft {
                tokens,
                probs: None,
                parents: branched.then_some(parents),
                chained: None,
            });
        }
        Ok(Draft {
            tokens: self.propose(context, k),
            probs: None,
            parents: None,
            chained: None,
        })
    }

    fn rollback(&mut self, _kept: &[u32]) -> Result<()> {
        Ok(())
    }

    fn cache_len(&self) -> Option<usize> {
        None
    }
}

/// Any of the built-in drafters, so that a caller can choose one at run time.
#[derive(Debug)]
pub enum AnyDrafter {
    /// A separate model or a layer subset.
    Model(Box<ModelDrafter>),
    /// Prompt lookup.
    Ngram(NgramDrafter),
}

impl Drafter for AnyDrafter {
    fn label(&self) -> String {
        match self {
            Self::Model(d) => d.label(),
            Self::Ngram(d) => d.label(),
        }
    }

    async fn prefill(&mut self, prompt: &[u32]) -> Result<()> {
        match self {
            Self::Model(d) => d.prefill(prompt).await,
            Self::Ngram(d) => d.prefill(prompt).await,
        }
    }

    async fn draft(
        &mut self,
        context: &[u32],
        k: usize,
        random: &mut DraftRandom,
    ) -> Result<Draft> {
        match self {
            Self::Model(d) => d.draft(context, k, random).await,
            Self::Ngram(d) => d.draft(context, k, random).await,
        }
    }

    fn rollback(&mut self, kept: &[u32]) -> Result<()> {
        match self {
            Self::Model(d) => d.rollback(kept),
            Self::Ngram(d) => d.rollback(kept),
        }
    }

    fn cache_len(&self) -> Option<usize> {
        match self {
            Self::Model(d) => d.cache_len(),
            Self::Ngram(d) => d.cache_len(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ngram_proposes_what_followed_the_latest_match() {
        let d = NgramDrafter::new(1, 3).unwrap();
        // Suffix [1, 2] last occurred at 4..6, followed by 9, 1, 2.
        assert_eq!(d.propose(&[1, 2, 3, 7, 1, 2, 9, 1, 2], 2), [9, 1]);
        assert_eq!(d.propose(&[1, 2, 3, 7, 1, 2, 9, 1, 2], 8), [9, 1, 2]);
        // No earlier occurrence of any suffix.
        assert!(d.propose(&[5, 6, 7], 4).is_empty());
        assert!(d.propose(&[], 4).is_empty());
        assert!(d.propose(&[5], 4).is_empty());
        assert!(NgramDrafter::new(0, 2).is_err());
        assert!(NgramDrafter::new(3, 2).is_err());
    }

    #[test]
    fn ngram_trees_branch_over_earlier_matches() {
        let d = NgramDrafter::new(1, 3).unwrap();
        // Suffix [1] occurs at 0 (then 2, 3), at 4 (then 5, 6) and at 7 (then 2, 8); the
        // latest first: [2, 8], then [5, 6], then [2, 3] shares the 2.
        let ctx = [1, 2, 3, 9, 1, 5, 6, 9, 1, 2, 8, 9, 1];
        let (tokens, parents) = d.propose_tree(&ctx, 2, 16);
        assert_eq!(tokens, [2, 8, 5, 6, 3]);
        assert_eq!(parents, [None, Some(0), None, Some(2), Some(0)]);
        // A budget of 3 nodes stops inside the second branch.
        let (tokens, parents) = d.propose_tree(&ctx, 2, 3);
        assert_eq!(
            (tokens, parents),
            (vec![2, 8, 5], vec![None, Some(0), None])
        );
        // A continuation inside an earlier branch adds nothing; a longer one extends it.
        let (tokens, parents) = d.propose_tree(&[4, 5, 4, 5, 4], 3, 16);
        assert_eq!(tokens, [5, 4, 5]);
        assert_eq!(parents, [None, Some(0), Some(1)]);
        assert!(d.propose_tree(&[7, 8], 3, 16).0.is_empty());
    }
}
