//! The one error type of this crate. Every variant names the field and the value at fault, so a
//! caller (the engine, the CLI, the browser page) can tell the user what to fix.

/// Why a verification request was refused. Nothing in this crate panics on input; it returns one
/// of these instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerifyError {
    /// `vocab` was zero.
    #[error("vocab must be at least 1, got 0")]
    EmptyVocab,
    /// Row summaries were given for a step with top-k or top-p: they hold the unfiltered
    /// distribution, and the filters need the row's sorted mass.
    #[error(
        "row summaries hold the unfiltered distribution; top_k {top_k:?} / top_p {top_p} \
         need the logits"
    )]
    SummaryFiltered {
        /// The configured top-k.
        top_k: Option<u32>,
        /// The configured top-p.
        top_p: f32,
    },
    /// Not one row summary per target row.
    #[error("{len} row summaries, expected {rows} (one per target row)")]
    SummaryRows {
        /// Summaries given.
        len: usize,
        /// Target rows of the step.
        rows: usize,
    },
    /// A row summary that no row of logits could give.
    #[error("row summary {position}: {why}")]
    BadSummary {
        /// Row (draft position).
        position: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `target_logits` does not hold `(k + 1) * vocab` values.
    #[error(
        "target_logits has {len} values, expected (k + 1) * vocab = ({k} + 1) * {vocab} \
         (k = draft_tokens.len())"
    )]
    LogitsShape {
        /// Values in `target_logits`.
        len: usize,
        /// Draft length.
        k: usize,
        /// Vocabulary size.
        vocab: usize,
    },
    /// `(k + 1) * vocab` does not fit in `usize`.
    #[error("(k + 1) * vocab overflows: k = {k}, vocab = {vocab}")]
    SizeOverflow {
        /// Draft length.
        k: usize,
        /// Vocabulary size.
        vocab: usize,
    },
    /// Full drafter rows were given but not `k * vocab` values.
    #[error("draft_probs has {len} values, expected k * vocab = {k} * {vocab}")]
    DraftProbsShape {
        /// Values in the drafter's rows.
        len: usize,
        /// Draft length.
        k: usize,
        /// Vocabulary size.
        vocab: usize,
    },
    /// A draft token id is not below the target's vocabulary size.
    #[error("draft_tokens[{position}] = {token} is out of the target vocabulary (vocab = {vocab})")]
    DraftTokenOutOfVocab {
        /// Index in `draft_tokens`.
        position: usize,
        /// The offending id.
        token: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// A target logit is NaN or +inf. −inf is allowed: it is how a model masks a token.
    #[error("target_logits[{position}][{token}] = {value} is NaN or +inf")]
    NonFiniteLogit {
        /// Row (draft position) of the logit.
        position: usize,
        /// Column (token id) of the logit.
        token: u32,
        /// The value.
        value: f32,
    },
    /// Every logit of a row is −inf, so the target allows no token at all.
    #[error("target_logits[{position}] is −inf for every token: the target allows no token")]
    NoValidToken {
        /// Row (draft position).
        position: usize,
    },
    /// A drafter probability is NaN, infinite or negative.
    #[error("draft_probs[{position}][{token}] = {value} is not a finite probability >= 0")]
    InvalidDraftProb {
        /// Row (draft position).
        position: usize,
        /// Token id.
        token: u32,
        /// The value.
        value: f32,
    },
    /// A drafter row does not sum to 1 (within 1e-3).
    #[error("draft_probs[{position}] sums to {sum}, expected 1 (within 1e-3)")]
    DraftProbsNotNormalized {
        /// Row (draft position).
        position: usize,
        /// Its sum.
        sum: f64,
    },
    /// The drafter gave zero probability to the token it drafted, so it cannot have sampled it.
    #[error("draft_probs[{position}][{token}] = 0 but draft_tokens[{position}] = {token}")]
    DraftTokenHasZeroProb {
        /// Row (draft position).
        position: usize,
        /// The drafted token.
        token: u32,
    },
    /// A tree's `parents` is not one entry per node.
    #[error("parents has {len} entries, expected one per node ({nodes})")]
    TreeParents {
        /// Entries in `parents`.
        len: usize,
        /// Nodes (`tokens.len()`).
        nodes: usize,
    },
    /// A tree node's parent is not an earlier node.
    #[error("parents[{node}] = {parent}: a parent must be an earlier node (< {node})")]
    TreeParent {
        /// The node.
        node: usize,
        /// Its parent as given.
        parent: u32,
    },
    /// A tree's drafter rows are not `(n + 1) * vocab` values.
    #[error("draft_probs has {len} values, expected (n + 1) * vocab = ({nodes} + 1) * {vocab}")]
    TreeDraftProbsShape {
        /// Values given.
        len: usize,
        /// Nodes in the tree.
        nodes: usize,
        /// Vocabulary size.
        vocab: usize,
    },
    /// `temperature` is NaN, infinite or negative.
    #[error("temperature must be finite and >= 0 (0 = greedy), got {value}")]
    Temperature {
        /// The value.
        value: f32,
    },
    /// `top_p` is NaN or outside (0, 1].
    #[error("top_p must be in (0, 1] (1 = off), got {value}")]
    TopP {
        /// The value.
        value: f32,
    },
    /// `top_k` is 0; leave it unset to turn top-k off.
    #[error("top_k must be >= 1 when set (unset = off), got {value}")]
    TopK {
        /// The value.
        value: u32,
    },
    /// `theta` (paper mode) is NaN, infinite or not positive.
    #[error("theta must be finite and > 0, got {value}")]
    Theta {
        /// The value.
        value: f32,
    },
    /// `rho` (margin mode) is NaN, infinite or not positive.
    #[error("rho must be finite and > 0, got {value}")]
    Rho {
        /// The value.
        value: f32,
    },
    /// Both MARS thresholds were given: each names a different mode.
    #[error(
        "theta = {theta} and rho = {rho} both given: theta picks the paper mode, rho the margin mode; give one"
    )]
    ThetaAndRho {
        /// The paper-mode threshold given.
        theta: f32,
        /// The margin-mode threshold given.
        rho: f32,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, VerifyError>;
