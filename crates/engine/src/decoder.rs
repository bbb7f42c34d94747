//! The decoding loop: target-only (no drafter) or speculative (strict or MARS), one step at a
//! time so that a caller can stream, race two decoders, or stop early.
//! Over 800 lines: the loop is one state machine (prefill, draft, one target pass, verify, roll
//! back) whose step records and summaries are its output types; `Decoder::step` reads rows
//! back per drafter and back-end, which a readback policy per run should shorten.

use std::sync::Arc;

use mars_formats::{StreamDecoder, Tokenizer};
use mars_model::{ChainLink, KvCache, Llama};
use mars_verify::{
    Decision, DraftProbs, Ledger, Margin, NextKind, PositionRecord, RowSummary, SampleKeys,
    TreeDraftProbs, TreeInput, Verifier, VerifyConfig, VerifyInput,
};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde::{Deserialize, Serialize};
use web_time::Instant;

use crate::drafter::{ChainedDraft, DraftRandom, Drafter};
use crate::error::{EngineError, Result};
use crate::readback::{Readback, RowRead};

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct DecodeConfig {
    /// Draft length per step (0 = target-only decoding).
    pub k: usize,
    /// Sampling and verification mode (strict or MARS).
    pub verify: VerifyConfig,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Seed of the verifier's and the drafter's generators.
    pub seed: u64,
    /// KV-cache capacity; `None` = the target's context length.
    pub capacity: Option<usize>,
    /// Target-only decoding where the target keeps row summaries chained on its device (a GPU,
    /// greedy or sampled without top-k / top-p): passes enqueued, each fed the token the pass
    /// before drew there, before one read — a wait for the device every this many tokens, not
    /// every token ([`PLAIN_TOKENS_A_READ`]; 1 reads each token before the next pass).
    pub tokens_a_read: usize,
}

/// Target-only decoding's tokens a read on a GPU ([`DecodeConfig::tokens_a_read`]): a read is a
/// wait for the device and a gap in its queue (the read's round trip, the host's work on the
/// token, the next pass's first launches recorded before they are submitted), paid once for
/// four tokens; tokens then reach a stream four at a time, and a stop token wastes at most
/// three passes.
pub const PLAIN_TOKENS_A_READ: usize = 4;

/// How a token came to be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    /// Target-only decoding.
    Target,
    /// A draft token the strict rule keeps.
    Exact,
    /// A draft token only the MARS relaxation keeps.
    Relaxed,
    /// The target's token after a rejected draft token.
    Correction,
    /// The target's extra token after a fully accepted draft.
    Bonus,
}

/// One emitted token with the target's view of it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenRecord {
    /// The id.
    pub id: u32,
    /// How it was emitted.
    pub kind: TokenKind,
    /// The target's top-2 at this position (logits, probabilities, MARS ratios).
    pub margin: Margin,
    /// −log p_target(id) under the target's own softmax (T = 1, no filters).
    pub nll: f64,
}

/// A node of a step's token tree, as the page draws it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeNode {
    /// The token id.
    pub id: u32,
    /// The token's text alone (a piece of a multi-byte character shows as U+FFFD).
    pub text: String,
    /// An earlier node; `None` for a child of the last accepted token (the root).
    pub parent: Option<u32>,
    /// On the path the verifier kept.
    pub kept: bool,
}

/// One step of the loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRecord {
    /// Draft tokens proposed (a tree's nodes).
    pub drafted: usize,
    /// Target forward passes (one, but for target-only decoding that chains several passes on
    /// a GPU before a read: [`DecodeConfig::tokens_a_read`]).
    pub forwards: usize,
    /// Whether the draft was a branched tree (verified over siblings), not a chain.
    pub tree: bool,
    /// Draft tokens kept by the strict rule.
    pub accepted_exact: usize,
    /// Draft tokens kept only by the MARS relaxation.
    pub accepted_relaxed: usize,
    /// Whether the step ended with a correction (a rejected draft token).
    pub correction: bool,
    /// Tokens emitted this step (after any stop token or budget cut).
    pub tokens: Vec<TokenRecord>,
    /// Text of this step's tokens (a stop token's text left out), never splitting a UTF-8
    /// character.
    pub text: String,
    /// A branched tree's nodes in draft order, for drawing it (empty for a chain).
    pub nodes: Vec<TreeNode>,
    /// Milliseconds in the drafter (a greedy draft model on the GPU only enqueues its work
    /// here: it is done, and timed, with the target's, whose pass takes the drafts on the
    /// device).
    pub draft_ms: f64,
    /// Milliseconds in the target's forward pass, readback and verification.
    pub verify_ms: f64,
    /// The verifier's ledger for this step.
    pub ledger: Ledger,
    /// What the step asked of the GPU (drafter, target and verification together).
    pub gpu: GpuCost,
}

/// What decoding asked of the GPU on the GPU path (zeros elsewhere), counted as it happened by
/// the kernels' counters, not estimated: kernel launches, kernels compiled into pipelines,
/// buffers written from the host, and reads back to it (each a wait for the GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GpuCost {
    /// Kernel launches.
    pub launches: u64,
    /// Kernels compiled into pipelines (first uses).
    pub pipelines: u64,
    /// Buffers written from the host.
    pub uploads: u64,
    /// Bytes written from the host.
    pub upload_bytes: u64,
    /// Reads back to the host.
    pub reads: u64,
    /// Bytes read back.
    pub read_bytes: u64,
}

impl GpuCost {
    /// What happened between two snapshots of the counters.
    pub fn between(earlier: &mars_model::GpuCounts, later: &mars_model::GpuCounts) -> Self {
        let d = later.since(earlier);
        Self {
            launches: d.launches,
            pipelines: d.pipelines,
            uploads: d.uploads,
            upload_bytes: d.upload_bytes,
            reads: d.reads,
            read_bytes: d.read_bytes,
        }
    }

    fn absorb(&mut self, o: &GpuCost) {
        self.launches += o.launches;
        self.pipelines += o.pipelines;
        self.uploads += o.uploads;
        self.upload_bytes += o.upload_bytes;
        self.reads += o.reads;
        self.read_bytes += o.read_bytes;
    }
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum StopReason {
    /// A stop token (end of sequence or end of turn) was emitted.
    Eos {
        /// The token.
        token: u32,
    },
    /// `max_tokens` were generated.
    Budget,
    /// The cache is full.
    ContextLimit {
        /// Tokens in the context (prompt and generated).
        context: usize,
        /// Cache capacity.
        capacity: usize,
    },
}

/// Totals of a run (read back too: `mars eval --resume` keeps a journal of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Drafter label, `None` for target-only decoding.
    pub drafter: Option<String>,
    /// Tokens generated.
    pub tokens: usize,
    /// Target forward passes after the prompt.
    pub target_forwards: usize,
    /// τ: tokens per target forward pass.
    pub tau: f64,
    /// Draft tokens proposed / kept (exact + relaxed).
    pub drafted: usize,
    /// Draft tokens kept.
    pub accepted: usize,
    /// Draft tokens kept only by the MARS relaxation.
    pub relaxed: usize,
    /// `relaxed / tokens`.
    pub relaxed_share: f64,
    /// The verifier's ledger summed over the run.
    pub ledger: Ledger,
    /// Mean −log p_target of the generated tokens (T = 1).
    pub nll: f64,
    /// Sum of −log p_target over the generated tokens (what `nll` is the mean of).
    pub nll_sum: f64,
    /// Milliseconds of prompt processing (target and drafter).
    pub prefill_ms: f64,
    /// Milliseconds in the drafter after the prompt.
    pub draft_ms: f64,
    /// Milliseconds in the target and verifier after the prompt.
    pub verify_ms: f64,
    /// Generated tokens per second of `draft_ms + verify_ms`.
    pub tokens_per_second: f64,
    /// Why the run ended (`None` while running).
    pub stop: Option<StopReason>,
    /// What the steps asked of the GPU, summed (prefill aside).
    #[serde(default)]
    pub gpu: GpuCost,
}

impl RunSummary {
    /// Nothing counted yet.
    pub fn empty(drafter: Option<String>) -> Self {
        Self {
            drafter,
            tokens: 0,
            target_forwards: 0,
            tau: 0.0,
            drafted: 0,
            accepted: 0,
            relaxed: 0,
            relaxed_share: 0.0,
            ledger: Ledger::default(),
            nll: 0.0,
            nll_sum: 0.0,
            prefill_ms: 0.0,
            draft_ms: 0.0,
            verify_ms: 0.0,
            tokens_per_second: 0.0,
            stop: None,
            gpu: GpuCost::default(),
        }
    }

    /// Adds `other`'s counts and times to these and recomputes the derived figures (τ, relaxed
    /// share, mean NLL, tokens/s): the one merge, used by the loop for each step and by reports
    /// for totals over prompts. `drafter` and `stop` stay this summary's.
    pub fn merge(&mut self, other: &RunSummary) {
        self.tokens += other.tokens;
        self.target_forwards += other.target_forwards;
        self.drafted += other.drafted;
        self.accepted += other.accepted;
        self.relaxed += other.relaxed;
        self.ledger.absorb(&other.ledger);
        self.nll_sum += other.nll_sum;
        self.prefill_ms += other.prefill_ms;
        self.draft_ms += other.draft_ms;
        self.verify_ms += other.verify_ms;
        self.gpu.absorb(&other.gpu);
        let tokens = self.tokens as f64;
        self.tau = tokens / self.target_forwards.max(1) as f64;
        self.relaxed_share = self.relaxed as f64 / tokens.max(1.0);
        self.nll = self.nll_sum / tokens.max(1.0);
        let secs = (self.draft_ms + self.verify_ms) / 1e3;
        self.tokens_per_second = if secs > 0.0 { tokens / secs } else { 0.0 };
    }

    /// One step's counts, to be merged into a run's.
    fn of_step(step: &StepRecord) -> Self {
        Self {
            tokens: step.tokens.len(),
            target_forwards: step.forwards,
            drafted: step.drafted,
            accepted: step.accepted_exact + step.accepted_relaxed,
            relaxed: step.accepted_relaxed,
            ledger: step.ledger,
            nll_sum: step.tokens.iter().map(|r| r.nll).sum(),
            draft_ms: step.draft_ms,
            verify_ms: step.verify_ms,
            gpu: step.gpu,
            ..Self::empty(None)
        }
    }
}

/// The target's KV cache after a prompt (all but its last token, which the first step feeds).
#[derive(Debug, Clone)]
pub struct Prefill {
    cache: KvCache,
    prompt: Vec<u32>,
    ms: f64,
}

impl Prefill {
    /// Runs the prompt through the target into a cache of `capacity` tokens.
    ///
    /// # Errors
    /// An empty prompt, a prompt longer than `capacity` (naming both), or a model error.
    pub async fn new(target: &Llama, prompt: &[u32], capacity: usize) -> Result<Self> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if prompt.len() > capacity {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                capacity,
            });
        }
        let mut cache = target.new_cache(capacity)?;
        let started = Instant::now();
        if prompt.len() > 1 {
            // Logits are not needed: the first step feeds the last prompt token.
            // Waiting for the device (a no-op on the host), so prefill time is measured honestly.
            target
                .forward_last(&prompt[..prompt.len() - 1], &mut cache)? // [1, vocab]
                .wait()
                .await?;
        }
        Ok(Self {
            cache,
            prompt: prompt.to_vec(),
            ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// Milliseconds the target took.
    pub fn ms(&self) -> f64 {
        self.ms
    }

    /// Tokens the cache can hold.
    pub fn capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// Prompt tokens.
    pub fn prompt_len(&self) -> usize {
        self.prompt.len()
    }
}

/// A decoding run over one prompt. `D` is the drafter; `None` decodes with the target alone.
#[derive(Debug)]
pub struct Decoder<D> {
    target: Llama,
    cache: KvCache,
    drafter: Option<D>,
    verifier: Verifier,
    /// What the target's rows come back as ([`Readback`]: the one rule).
    readback: Readback,
    k: usize,
    /// Target-only decoding's tokens a read where the target chains summaries (at least 1).
    tokens_a_read: usize,
    max_tokens: usize,
    vocab: usize,
    rng: ChaCha8Rng,
    /// The drafter's generator and the run's seed: a GPU draws a sampling step's rows, the
    /// target's and a chained draft's, with noise keyed by it.
    draft_rng: DraftRandom,
    context: Vec<u32>,
    prompt_len: usize,
    stop_ids: Vec<u32>,
    text: StreamDecoder<Arc<Tokenizer>>,
    /// For a tree node's text.
    tokenizer: Arc<Tokenizer>,
    stop: Option<StopReason>,
    totals: RunSummary,
}

impl<D: Drafter> Decoder<D> {
    /// Prefills the target (and the drafter) with `prompt` and returns a decoder ready to step.
    ///
    /// # Errors
    /// An empty prompt, a prompt that leaves no room in the cache (naming both numbers), an
    /// invalid verification config, or a model error.
    pub async fn new(
        target: &Llama,
        tokenizer: Arc<Tokenizer>,
        drafter: Option<D>,
        config: &DecodeConfig,
        prompt: &[u32],
    ) -> Result<Self> {
        let capacity = config.capacity.unwrap_or(target.config().context_length);
        let prefill = Prefill::new(target, prompt, capacity).await?;
        Self::from_prefill(target, tokenizer, drafter, config, prefill).await
    }

    /// A decoder that starts from a target prefill made earlier (several decoders can share one
    /// by cloning it: the clone's cache is copied on its first write). `config.capacity` is
    /// ignored: the prefill's cache sets it.
    ///
    /// # Errors
    /// An invalid verification config, or a drafter error.
    pub async fn from_prefill(
        target: &Llama,
        tokenizer: Arc<Tokenizer>,
        mut drafter: Option<D>,
        config: &DecodeConfig,
        prefill: Prefill,
    ) -> Result<Self> {
        let verifier = Verifier::new(config.verify)?;
        let Prefill {
            cache,
            prompt,
            ms: target_ms,
        } = prefill;
        let started = Instant::now();
        if let Some(d) = drafter.as_mut() {
            d.prefill(&prompt).await?;
        }
        let prefill_ms = target_ms + started.elapsed().as_secs_f64() * 1e3;
        let stop_ids = tokenizer.stop_ids.clone();
        Ok(Self {
            target: target.clone(),
            cache,
            k: if drafter.is_some() { config.k } else { 0 },
            tokens_a_read: config.tokens_a_read.max(1),
            totals: RunSummary {
                prefill_ms,
                ..RunSummary::empty(drafter.as_ref().map(Drafter::label))
            },
            drafter,
            verifier,
            readback: Readback::new(config.verify.sampling, target.reads()),
            max_tokens: config.max_tokens,
            vocab: target.config().vocab_size,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            draft_rng: DraftRandom::new(config.seed),
            context: prompt.clone(),
            prompt_len: prompt.len(),
            stop_ids,
            text: StreamDecoder::new(tokenizer.clone()),
            tokenizer,
            stop: None,
        })
    }

    /// Runs one step: draft, one target pass over the last token and the draft, verify, roll
    /// back. Returns `None` once the run has ended (see [`Decoder::stop_reason`]).
    ///
    /// # Errors
    /// Model, drafter or verifier errors; a drafter proposing an id outside the target's
    /// vocabulary.
    pub async fn step(&mut self) -> Result<Option<StepRecord>> {
        if self.stop.is_some() {
            return Ok(None);
        }
        let generated = self.context.len() - self.prompt_len;
        let remaining = self.max_tokens.saturating_sub(generated);
        if remaining == 0 {
            return Ok(self.finish(StopReason::Budget));
        }
        // The cache holds the context minus its last token; the step feeds that token and the
        // draft, so it needs 1 + k free slots.
        let room = self.cache.capacity() - self.cache.len();
        if room == 0 {
            let reason = StopReason::ContextLimit {
                context: self.context.len(),
                capacity: self.cache.capacity(),
            };
            return Ok(self.finish(reason));
        }
        let k = self.k.min(remaining - 1).min(room - 1);

        let counted = mars_model::gpu_counts();
        let started = Instant::now();
        let ahead = self.tokens_a_read.min(remaining).min(room);
        if self.drafter.is_none()
            && ahead > 1
            && self.readback.over_chain() == Some(true)
            && let Some((tokens, ledger)) = self.chained_tokens(ahead).await?
        {
            let record = StepRecord {
                drafted: 0,
                forwards: ahead,
                tree: false,
                accepted_exact: 0,
                accepted_relaxed: 0,
                correction: false,
                tokens,
                text: String::new(),
                nodes: Vec::new(),
                draft_ms: 0.0,
                verify_ms: started.elapsed().as_secs_f64() * 1e3,
                ledger,
                gpu: GpuCost::default(),
            };
            return self.close_step(record, remaining, &counted);
        }
        let mut draft = match (self.drafter.as_mut(), k) {
            (Some(d), 1..) => d.draft(&self.context, k, &mut self.draft_rng).await?,
            _ => Default::default(),
        };
        // A chain drafted on the GPU has only been enqueued: its time shows in the target's.
        let draft_ms = started.elapsed().as_secs_f64() * 1e3;
        let started = Instant::now();
        let before = self.cache.len();
        let mut linked = None;
        if let Some(chained) = draft.chained.take() {
            let (tokens, rows) = self.over_chain(&chained).await?;
            draft.tokens = tokens;
            linked = rows;
        }
        // A chain is cut to k; a tree (k its depth) to the cache's room.
        let limit = if draft.parents.is_some() { room - 1 } else { k };
        let d = draft.tokens.len().min(limit);
        let draft_tokens = &draft.tokens[..d];
        if let Some((position, &token)) = draft_tokens
            .iter()
            .enumerate()
            .find(|(_, t)| **t as usize >= self.vocab)
        {
            return Err(EngineError::DraftOutOfVocab {
                position,
                token,
                vocab: self.vocab,
            });
        }
        let draft_probs = match &draft.probs {
            None => DraftProbs::OneHot,
            Some(q) if q.len() >= d * self.vocab => DraftProbs::Full(&q[..d * self.vocab]),
            Some(q) => {
                return Err(EngineError::DraftProbsShape {
                    len: q.len(),
                    k: d,
                    vocab: self.vocab,
                });
            }
        };
        let last = self.context[self.context.len() - 1];
        let mut input = Vec::with_capacity(d + 1);
        input.push(last);
        input.extend_from_slice(draft_tokens);
        // The verdict as the kept draft tokens (each with its kind, margin and logits row), then
        // the next token and its row, and the cache rows (after `before`) that hold the kept
        // path.
        let (target_rows, kept, next, ledger, nodes) = match &draft.parents {
            None => {
                let rows = match linked {
                    Some(rows) => rows,
                    None => {
                        let logits = self.target.forward(&input, &mut self.cache)?; // [d + 1, vocab]
                        let one_hot = matches!(draft_probs, DraftProbs::OneHot);
                        self.rows(logits, one_hot).await?
                    }
                };
                let verdict = match &rows {
                    Rows::Full { values: logits, .. } => self.verifier.verify(
                        &VerifyInput {
                            target_logits: logits,
                            vocab: self.vocab,
                            draft_tokens,
                            draft_probs,
                        },
                        &mut self.rng,
                    )?,
                    Rows::Summaries(s) => self.verifier.verify_summaries(
                        s,
                        self.vocab,
                        draft_tokens,
                        &mut self.rng,
                    )?,
                };
                let kept: Vec<(PositionRecord, usize)> = verdict.positions[..verdict.accepted]
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (*p, i))
                    .collect();
                let next = (verdict.next, verdict.accepted);
                self.cache.truncate(before + 1 + verdict.accepted)?;
                (rows, kept, next, verdict.ledger, Vec::new())
            }
            Some(parents) => {
                let parents = parents.get(..d).ok_or(EngineError::DraftTreeShape {
                    parents: parents.len(),
                    tokens: d,
                })?;
                if !matches!(draft_probs, DraftProbs::OneHot) {
                    return Err(EngineError::Config {
                        field: "draft",
                        value: "a tree with drafter rows".into(),
                        why: "tree drafts are deterministic (one-hot q): drafter rows are for chains",
                    });
                }
                // Row 0 is the last accepted token (the root); node j is row j + 1.
                let rows: Vec<Option<usize>> = std::iter::once(None)
                    .chain(
                        parents
                            .iter()
                            .map(|p| Some(p.map_or(0, |p| p as usize + 1))),
                    )
                    .collect();
                let logits = self.target.forward_tree(&input, &rows, &mut self.cache)?; // [d + 1, vocab]
                let rows = self.rows(logits, true).await?;
                let verdict = match &rows {
                    Rows::Full { values: logits, .. } => self.verifier.verify_tree(
                        &TreeInput {
                            target_logits: logits,
                            vocab: self.vocab,
                            tokens: draft_tokens,
                            parents,
                            draft_probs: TreeDraftProbs::OneHot,
                        },
                        &mut self.rng,
                    )?,
                    Rows::Summaries(s) => self.verifier.verify_tree_summaries(
                        s,
                        self.vocab,
                        draft_tokens,
                        parents,
                        &mut self.rng,
                    )?,
                };
                // Node path[i] was scored by its parent's row: the root's (0) or path[i − 1] + 1.
                let kept: Vec<(PositionRecord, usize)> = verdict
                    .positions
                    .iter()
                    .zip(&verdict.path)
                    .enumerate()
                    .map(|(i, (p, _))| (*p, if i == 0 { 0 } else { verdict.path[i - 1] + 1 }))
                    .collect();
                let next = (verdict.next, verdict.path.last().map_or(0, |&j| j + 1));
                let path_rows: Vec<usize> = std::iter::once(0)
                    .chain(verdict.path.iter().map(|&j| j + 1))
                    .collect();
                self.cache.keep_rows(before, &path_rows)?;
                let nodes = draft_tokens
                    .iter()
                    .zip(parents)
                    .enumerate()
                    .map(|(j, (&id, &parent))| TreeNode {
                        id,
                        text: self.tokenizer.decode(&[id]).unwrap_or_default(),
                        parent,
                        kept: verdict.path.contains(&j),
                    })
                    .collect();
                (rows, kept, next, verdict.ledger, nodes)
            }
        };
        let verify_ms = started.elapsed().as_secs_f64() * 1e3;

        // Emitted: the kept draft tokens, then the correction or bonus token.
        let mut tokens = Vec::with_capacity(kept.len() + 1);
        for (p, row) in &kept {
            let kind = if p.decision == Decision::AcceptedRelaxed {
                TokenKind::Relaxed
            } else {
                TokenKind::Exact
            };
            tokens.push(self.record(&target_rows, *row, p.draft_token, kind, p.margin));
        }
        let (next, next_row) = next;
        let next_kind = match (self.drafter.is_some(), next.kind) {
            (false, _) => TokenKind::Target,
            (true, NextKind::Bonus) => TokenKind::Bonus,
            (true, NextKind::Correction) => TokenKind::Correction,
        };
        tokens.push(self.record(&target_rows, next_row, next.token, next_kind, next.margin));

        let record = StepRecord {
            drafted: d,
            forwards: 1,
            tree: draft.parents.is_some() && d > 0,
            accepted_exact: 0,
            accepted_relaxed: 0,
            correction: next.kind == NextKind::Correction && d > 0,
            tokens,
            text: String::new(),
            nodes,
            draft_ms,
            verify_ms,
            ledger,
            gpu: GpuCost::default(),
        };
        self.close_step(record, remaining, &counted)
    }

    /// Closes a step: cuts its tokens at a stop token and at the budget (`remaining`), extends
    /// the context, trims the caches to it, and sets the record's visible text, kept-draft
    /// counts and GPU cost (since `counted`) before counting it into the run's totals.
    fn close_step(
        &mut self,
        mut record: StepRecord,
        remaining: usize,
        counted: &mars_model::GpuCounts,
    ) -> Result<Option<StepRecord>> {
        let mut tokens = std::mem::take(&mut record.tokens);
        let mut stop = None;
        if let Some(i) = tokens.iter().position(|t| self.stop_ids.contains(&t.id)) {
            stop = Some(StopReason::Eos {
                token: tokens[i].id,
            });
            tokens.truncate(i + 1);
        }
        if tokens.len() >= remaining {
            tokens.truncate(remaining);
            stop = stop.or(Some(StopReason::Budget));
        }
        self.context.extend(tokens.iter().map(|t| t.id));
        // Keeps the target's cache at exactly context − 1 even after a cut.
        let keep = self.context.len() - 1;
        if self.cache.len() > keep {
            self.cache.truncate(keep)?;
        }
        if let Some(drafter) = self.drafter.as_mut() {
            drafter.rollback(&self.context[..keep])?;
        }

        // The visible text: a stop token ends the run but is not shown.
        for t in tokens.iter().filter(|t| !self.stop_ids.contains(&t.id)) {
            if let Some(piece) = self.text.push(t.id)? {
                record.text.push_str(&piece);
            }
        }
        let kept = |kind| tokens.iter().filter(|t| t.kind == kind).count();
        record.accepted_relaxed = kept(TokenKind::Relaxed);
        record.accepted_exact = kept(TokenKind::Exact);
        record.tokens = tokens;
        record.gpu = GpuCost::between(counted, &mars_model::gpu_counts());
        self.totals.merge(&RunSummary::of_step(&record));
        if let Some(reason) = stop {
            self.stop = Some(reason);
            self.totals.stop = Some(reason);
            if let Some(rest) = self.text.finish()? {
                record.text.push_str(&rest);
            }
        }
        Ok(Some(record))
    }

    /// Steps until the run ends, calling `on_step` after each step (for streaming).
    ///
    /// # Errors
    /// As [`Decoder::step`].
    pub async fn run(&mut self, mut on_step: impl FnMut(&StepRecord)) -> Result<RunSummary> {
        while let Some(step) = self.step().await? {
            on_step(&step);
        }
        Ok(self.summary())
    }

    fn record(
        &self,
        rows: &Rows,
        row: usize,
        id: u32,
        kind: TokenKind,
        margin: Margin,
    ) -> TokenRecord {
        let nll = match rows {
            Rows::Full { values, sums } => {
                let row_values = &values[row * self.vocab..(row + 1) * self.vocab];
                match sums {
                    // A top-k row: the other values' mass is in its sum.
                    Some(sums) => sums
                        .get(row)
                        .map_or(f64::NAN, |&sum| nll(row_values, id, Some(sum))),
                    None => nll(row_values, id, None),
                }
            }
            Rows::Summaries(s) => s.get(row).map_or(f64::NAN, |s| summary_nll(s, id)),
        };
        TokenRecord {
            id,
            kind,
            margin,
            nll,
        }
    }

    /// The target over a draft kept on the GPU ([`ChainedDraft`]): one forward over the last
    /// token and the drafts, which it takes on the device, and one read. Where summaries hold
    /// what verification needs, the target's rows are summarised (and drawn, when sampling, with
    /// the noise a drawn draft used: a draft is kept iff it is the target's draw) after the
    /// drafts', and that one read returns both; else (greedy with top-k / top-p) the rows are
    /// read after the drafts. Returns the draft's ids, cut before a row the drafter could not
    /// rank (a NaN or +inf: what followed it was fed a meaningless id, and the target's rows up
    /// to the cut do not depend on the rows after it), and the target's rows over them. A
    /// target off the GPU path reads the drafts and leaves the forward to the caller (`None`).
    async fn over_chain(&mut self, c: &ChainedDraft) -> Result<(Vec<u32>, Option<Rows>)> {
        let d = c.tokens;
        let on_device = self.readback.over_chain();
        let mut unsummarised = None;
        if let Some(summarised) = on_device
            && d > 0
        {
            let last = self.context[self.context.len() - 1];
            let link = ChainLink {
                chain: &c.chain,
                ids_from: 0,
                ids: d,
                summaries_at: d,
            };
            let logits = self
                .target
                .forward_linked(&[last], link, &mut self.cache, d + 1)?; // [d + 1, vocab]
            if summarised {
                logits.summarize_into(&c.chain, self.sample_keys().as_ref())?;
            } else {
                unsummarised = Some(logits);
            }
        }
        let all = c.chain.read().await?;
        let drafts = all.get(..d).unwrap_or_default();
        let good = drafts.iter().take_while(|s| s.bad.is_none()).count();
        let tokens = drafts[..good].iter().map(RowSummary::token).collect();
        let rows = match (unsummarised, all.get(d..d + good + 1)) {
            (Some(logits), _) => {
                let mut rows = self.rows(logits, true).await?;
                rows.truncate(good + 1, self.vocab);
                Some(rows)
            }
            (None, Some(target)) if on_device.is_some() && d > 0 => {
                Some(Rows::Summaries(target.to_vec()))
            }
            _ => None,
        };
        Ok((tokens, rows))
    }

    /// Target-only decoding's next `n` tokens with one read: `n` one-row passes enqueued, the
    /// first fed the context's last token, each later one the token its predecessor's summary
    /// gives on the device ([`mars_verify::RowSummary::token`]: greedy's argmax, a sampling
    /// row's draw with the noise of the position it predicts), then the `n` summaries read at
    /// once. Each row's token is the verifier's from that summary alone, as a step of one pass
    /// takes it, so the tokens are one-read-a-token's. A row the verifier refuses (a NaN or
    /// +inf) ends the tokens before it, and fails the run if it is the first: the next step
    /// then meets the same row (the passes are deterministic and their rows independent of the
    /// read), as a pass a token would. Returns the tokens (their rows' passes past the cache's
    /// context − 1 are cut by the caller) and the verifier's ledger; `None` where the target
    /// keeps no chain.
    async fn chained_tokens(&mut self, n: usize) -> Result<Option<(Vec<TokenRecord>, Ledger)>> {
        let Some(chain) = self.target.summary_chain(n)? else {
            return Ok(None);
        };
        let keys = self.sample_keys();
        let last = [self.context[self.context.len() - 1]];
        self.target
            .forward_chained(&last, n, &chain, &mut self.cache, keys.as_ref())?;
        let summaries = chain.read().await?;
        let mut tokens = Vec::with_capacity(n);
        let mut ledger = Ledger::default();
        for (i, s) in summaries.iter().take(n).enumerate() {
            let verdict = match self.verifier.verify_summaries(
                std::slice::from_ref(s),
                self.vocab,
                &[],
                &mut self.rng,
            ) {
                Ok(v) => v,
                Err(e) if i == 0 => return Err(e.into()),
                Err(_) => break,
            };
            ledger.absorb(&verdict.ledger);
            let next = verdict.next;
            tokens.push(TokenRecord {
                id: next.token,
                kind: TokenKind::Target,
                margin: next.margin,
                nll: summary_nll(s, next.token),
            });
            // The next pass was fed this row's own token: a verifier that took another (never,
            // where the summary holds the draw) ends the tokens here.
            if next.token != s.token() {
                break;
            }
        }
        Ok(Some((tokens, ledger)))
    }

    /// What a GPU draws the step's rows with when it samples (`None` when greedy): each row's
    /// noise is keyed by the seed and the position it predicts.
    fn sample_keys(&self) -> Option<SampleKeys> {
        let sampling = self.verifier.config().sampling;
        (!sampling.is_greedy()).then_some(SampleKeys {
            seed: self.draft_rng.seed,
            temperature: sampling.temperature,
        })
    }

    /// The target's rows as verification needs them: where the logits are on a GPU that
    /// summarises them, each row's summary (a few words a row read back instead of the
    /// vocabulary) — greedy, or sampling without top-k / top-p over deterministic drafts, each
    /// row drawn there by the Gumbel-max rule with the noise of the position it predicts
    /// (`mars_verify::noise`); with top-k there, each row's best k (`2k + 3`
    /// words a row: top-k and top-p after it keep nothing else, so the verdict is the whole
    /// rows'); otherwise the rows themselves (a draft model's sampled chain read to the host
    /// needs p(x) / q(x) and the residual over the whole row; top-p alone needs the row's
    /// sorted mass).
    async fn rows(&self, logits: mars_model::Logits, one_hot: bool) -> Result<Rows> {
        // Logits decline a reduction only where it would not save a read; the rows then come
        // whole.
        match self.readback.verify_rows(one_hot) {
            RowRead::Summaries => {
                let keys = self.sample_keys();
                if let Some(s) = logits.summaries_async(keys.as_ref()).await? {
                    return Ok(Rows::Summaries(s));
                }
            }
            RowRead::TopK(k) => {
                if let Some((values, sums)) = logits.top_k_rows_async(k, self.vocab).await? {
                    return Ok(Rows::Full {
                        values,
                        sums: Some(sums),
                    });
                }
            }
            RowRead::Whole => {}
        }
        Ok(Rows::Full {
            values: logits.read_async().await?, // rows * vocab
            sums: None,
        })
    }

    fn finish(&mut self, reason: StopReason) -> Option<StepRecord> {
        self.stop = Some(reason);
        self.totals.stop = Some(reason);
        None
    }

    /// Why the run ended, once it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }

    /// Totals so far.
    pub fn summary(&self) -> RunSummary {
        self.totals.clone()
    }

    /// The prompt followed by every emitted token.
    pub fn context(&self) -> &[u32] {
        &self.context
    }

    /// The generated tokens.
    pub fn generated(&self) -> &[u32] {
        &self.context[self.prompt_len..]
    }

    /// Tokens in the target's cache (always `context().len() - 1` between steps).
    pub fn target_cache_len(&self) -> usize {
        self.cache.len()
    }

    /// Tokens in the drafter's cache, if it has one.
    pub fn drafter_cache_len(&self) -> Option<usize> {
        self.drafter.as_ref().and_then(Drafter::cache_len)
    }
}

/// A step's target rows: whole, or summarised where verification needs no more.
enum Rows {
    /// `[rows, vocab]` logits: whole, or with top-k each row's best k and −inf elsewhere
    /// (`mars_model::Logits::top_k_rows_async`: the same verdicts), then with `sums`, each
    /// row's Σ exp(z − z1) over the whole row.
    Full {
        values: Vec<f32>,
        sums: Option<Vec<f64>>,
    },
    /// One summary a row.
    Summaries(Vec<RowSummary>),
}

impl Rows {
    /// Keeps the first `rows` rows.
    fn truncate(&mut self, rows: usize, vocab: usize) {
        match self {
            Self::Full { values, sums } => {
                values.truncate(rows * vocab);
                if let Some(s) = sums {
                    s.truncate(rows);
                }
            }
            Self::Summaries(s) => s.truncate(rows),
        }
    }
}

/// −log softmax(row)[id] from a row's summary: the two tokens greedy can emit and a sampling
/// row's draw (any other token's logit is not in it: NaN).
fn summary_nll(s: &RowSummary, id: u32) -> f64 {
    let z = if id == s.top1 {
        s.z1
    } else if Some(id) == s.top2 {
        s.z2
    } else if let Some(d) = s.sample.filter(|d| d.token == id) {
        d.logit
    } else {
        return f64::NAN;
    };
    s.sum.ln() - f64::from(z - s.z1)
}

/// −log softmax(row)[id], computed in f64 with the max subtracted; `sum` is Σ exp(z − max)
/// over the whole row where `row` holds only part of it (a top-k row), else it is summed here.
fn nll(row: &[f32], id: u32, sum: Option<f64>) -> f64 {
    let id = id as usize;
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum = sum.unwrap_or_else(|| row.iter().map(|&l| f64::from(l - max).exp()).sum());
    sum.ln() - f64::from(row[id] - max)
}
