//! One verification step: k draft tokens against the target's k + 1 rows of logits.

use rand_core::Rng;
use serde::{Deserialize, Serialize};

use crate::config::{Mode, VerifyConfig};
use crate::dist::{Row, RowSummary, Scratch, process_row, sample_residual, uniform};
use crate::error::{Result, VerifyError};

/// The drafter's probabilities for the tokens it proposed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DraftProbs<'a> {
    /// A deterministic drafter (prompt lookup, greedy draft model): q is one-hot at each draft
    /// token. Strict sampling then accepts with probability p(x) and resamples from p without x.
    OneHot,
    /// Full rows, `[k, vocab]` row-major: the distribution each draft token was sampled from,
    /// processed with the same temperature / top-k / top-p as the target.
    Full(&'a [f32]),
}

/// The numbers of one verification step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerifyInput<'a> {
    /// Target logits, `[k + 1, vocab]` row-major: row i scores the token after the prefix and
    /// the first i draft tokens; row k gives the bonus token when all k are kept.
    pub target_logits: &'a [f32],
    /// Vocabulary size of the target (the row length).
    pub vocab: usize,
    /// The k proposed tokens, `[k]`.
    pub draft_tokens: &'a [u32],
    /// The drafter's probabilities.
    pub draft_probs: DraftProbs<'a>,
}

/// What happened to one draft token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Kept by a rule strict verification would also have kept it by with certainty, or kept
    /// by the strict rule itself (greedy match; min(1, p/q)).
    AcceptedExact,
    /// Kept only because MARS relaxed this position: the runner-up at T = 0, or at T > 0 a
    /// top-2 token whose p(x) < q(x), which strict would have kept only with probability p/q.
    AcceptedRelaxed,
    /// Not kept; the step ends here with a correction token.
    Rejected,
}

/// One of the target's top-2 tokens at a position.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Token id.
    pub token: u32,
    /// Processed logit: logit / T (the raw logit when greedy).
    pub logit: f32,
    /// Processed probability (after top-k / top-p; softmax at T = 1 when greedy).
    pub prob: f32,
}

/// How decided the target was at a position: the figures MARS looks at.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Margin {
    /// The target's best token.
    pub top1: Candidate,
    /// Its runner-up; `None` when top-k / top-p removed it or its probability is 0.
    pub top2: Option<Candidate>,
    /// z2 / z1, the paper's ratio; `None` where it is meaningless (no runner-up, z1 ≤ 0, or a
    /// non-finite processed logit). Reported in every mode.
    pub logit_ratio: Option<f32>,
    /// p2 / p1, the shift-invariant ratio of margin mode (0 without a runner-up).
    pub prob_ratio: f32,
}

/// The verdict on one examined draft position.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PositionRecord {
    /// The draft token at this position.
    pub draft_token: u32,
    /// Kept exactly, kept by relaxation, or rejected.
    pub decision: Decision,
    /// True where the MARS criterion held (the position was judged by the top-2 rule), whether
    /// or not the draft token was then kept.
    pub relaxed: bool,
    /// The target's top-2 figures at this position.
    pub margin: Margin,
    /// This position's entry in the [`Ledger`] (0 where nothing was relaxed).
    pub distance: f64,
}

/// Whether the next token is a bonus (all k drafts kept) or a correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NextKind {
    /// Sampled from p at position k after every draft token was kept.
    Bonus,
    /// Emitted at the rejected position: the strict residual (or p, after a relaxed rejection,
    /// or the argmax when greedy).
    Correction,
}

/// The token verification emits after the kept draft prefix.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NextToken {
    /// Token id.
    pub token: u32,
    /// Bonus or correction.
    pub kind: NextKind,
    /// The target's top-2 figures at the position this token fills.
    pub margin: Margin,
}

/// How far MARS moved from the target distribution.
///
/// **Sampling (T > 0).** At a relaxed position with drafter distribution q and target p, let
/// A = {top-1, top-2} ∩ {p > 0}. MARS emits the draft x ~ q if x ∈ A and otherwise a sample from
/// p, so it emits e(y) = q(y)·[y ∈ A] + (1 − q(A))·p(y). Then e − p = q·[A] − q(A)·p, and
/// TV(e, p) = ½ Σ|e − p| = ½ [ q(A)(1 − p(A)) + Σ_{y∈A} |q(y) − q(A)p(y)| ]: it needs only
/// p and q on the top-2. Unrelaxed positions emit p exactly (strict is lossless), so add 0.
///
/// **Why the sum bounds the sequence.** Couple a MARS run and a target-sampling run token by
/// token: given the same prefix, draw the two tokens from a maximal coupling of e_i and p_i, so
/// they differ with probability TV(e_i, p_i). The sequences differ only if some position
/// differs, so by the union bound TV(MARS sequence, target sequence) ≤ E[Σ_i TV(e_i, p_i)], the
/// expectation over MARS prefixes. The ledger's `distance`, summed over a run, is an unbiased
/// sample of that sum.
///
/// **Greedy (T = 0).** The target's choice is its argmax, so the only deviation is keeping the
/// runner-up; the ledger adds p1 − p2 (softmax at T = 1) each time that happens: the probability
/// the model put on its own choice above the kept token.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// Examined positions where the MARS criterion held.
    pub relaxed_positions: u32,
    /// Draft tokens kept only through relaxation ([`Decision::AcceptedRelaxed`]).
    pub relaxed_accepts: u32,
    /// Sum of per-position distances (see the type's docs).
    pub distance: f64,
}

impl Ledger {
    /// Adds another step's ledger to this one.
    pub fn absorb(&mut self, other: &Ledger) {
        self.relaxed_positions = self
            .relaxed_positions
            .saturating_add(other.relaxed_positions);
        self.relaxed_accepts = self.relaxed_accepts.saturating_add(other.relaxed_accepts);
        self.distance += other.distance;
    }
}

/// The outcome of one verification step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Draft tokens kept, in 0..=k: the emitted text is `draft_tokens[..accepted]` then `next`.
    pub accepted: usize,
    /// One record per examined position: the kept ones and, unless all k were kept, the
    /// rejected one. Positions after a rejection are not examined.
    pub positions: Vec<PositionRecord>,
    /// The bonus or correction token.
    pub next: NextToken,
    /// This step's relaxation ledger.
    pub ledger: Ledger,
}

impl Verdict {
    /// The tokens this step emits: the kept draft prefix and the next token.
    pub fn emitted(&self, draft_tokens: &[u32]) -> Vec<u32> {
        let kept = draft_tokens.get(..self.accepted).unwrap_or(draft_tokens);
        kept.iter()
            .copied()
            .chain(std::iter::once(self.next.token))
            .collect()
    }
}

/// A verifier with its own scratch buffers, to be reused across steps.
///
/// Randomness: the generator is consumed in a fixed order so that a seed reproduces a run on any
/// platform. At each examined position strict sampling draws one uniform for the accept test (a
/// relaxed position draws none); the correction or bonus token draws one more. Greedy draws none.
#[derive(Debug, Clone)]
pub struct Verifier {
    config: VerifyConfig,
    scratch: Scratch,
}

impl Verifier {
    /// A verifier for `config`.
    ///
    /// # Errors
    /// The first invalid field of `config` (temperature, top_p, top_k, theta, rho).
    pub fn new(config: VerifyConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            scratch: Scratch::default(),
        })
    }

    /// The configuration this verifier applies.
    pub fn config(&self) -> &VerifyConfig {
        &self.config
    }

    /// The reusable buffers (the tree verifier shares them).
    pub(crate) fn scratch_mut(&mut self) -> &mut Scratch {
        &mut self.scratch
    }

    /// Verifies one step.
    ///
    /// # Errors
    /// A [`VerifyError`] naming the field when shapes disagree, a draft token is outside the
    /// vocabulary, a target logit is NaN or +inf (or a row is all −inf), or a drafter row is not
    /// a probability distribution that gives its own draft token a non-zero probability. All
    /// input is checked before any decision, so an error never leaves a half-made verdict.
    pub fn verify<R: Rng + ?Sized>(
        &mut self,
        input: &VerifyInput<'_>,
        rng: &mut R,
    ) -> Result<Verdict> {
        check_input(input)?;
        let VerifyInput {
            target_logits,
            vocab,
            draft_tokens,
            draft_probs,
        } = *input;
        let sampling = self.config.sampling;
        let rows = |i: usize, scratch: &mut Scratch| {
            process_row(
                &target_logits[i * vocab..(i + 1) * vocab],
                &sampling,
                scratch,
            )
        };
        self.walk(draft_tokens, draft_probs, vocab, rows, rng)
    }

    /// Verifies one step of deterministic drafts from each target row's [`RowSummary`] (`k + 1`
    /// of them) instead of its logits, for a GPU that reads back a few words a row. Greedy:
    /// the verdict [`Verifier::verify`] gives on the rows they summarise (tested). Sampling:
    /// each row's own draw decides ([`crate::noise`]): a draft is kept iff it is the draw, else
    /// the draw comes next — the law [`Verifier::verify`] gives, with other random numbers.
    ///
    /// # Errors
    /// [`VerifyError::SummaryFiltered`] for top-k / top-p; [`VerifyError::SummaryRows`]
    /// for a count other than k + 1; [`VerifyError::DraftTokenOutOfVocab`]; for a row, the
    /// error its logits would give ([`VerifyError::NonFiniteLogit`],
    /// [`VerifyError::NoValidToken`]) or [`VerifyError::BadSummary`] for one no row could give.
    pub fn verify_summaries<R: Rng + ?Sized>(
        &mut self,
        rows: &[RowSummary],
        vocab: usize,
        draft_tokens: &[u32],
        rng: &mut R,
    ) -> Result<Verdict> {
        check_summaries(&self.config, rows, vocab, draft_tokens.len() + 1)?;
        check_tokens(draft_tokens, vocab)?;
        let sampling = self.config.sampling;
        let row = |i: usize, _: &mut Scratch| Row::of_summary(&rows[i], &sampling);
        self.walk(draft_tokens, DraftProbs::OneHot, vocab, row, rng)
    }

    /// The walk along a chain of drafts, row i from `row_at` (checked by the caller).
    fn walk<R: Rng + ?Sized>(
        &mut self,
        draft_tokens: &[u32],
        draft_probs: DraftProbs<'_>,
        vocab: usize,
        mut row_at: impl FnMut(usize, &mut Scratch) -> Row,
        rng: &mut R,
    ) -> Result<Verdict> {
        let k = draft_tokens.len();
        let sampling = self.config.sampling;
        let greedy = sampling.is_greedy();
        let mut positions = Vec::with_capacity(k);
        let mut ledger = Ledger::default();

        for (i, &draft) in draft_tokens.iter().enumerate() {
            let row = row_at(i, &mut self.scratch);
            let weights = &self.scratch.weights;
            let margin = margin_of(&row, weights);
            let relaxed = relaxes(self.config.mode, &margin);
            let q_row = match draft_probs {
                DraftProbs::OneHot => None,
                DraftProbs::Full(q) => Some(&q[i * vocab..(i + 1) * vocab]),
            };
            let q_of = |t: u32| {
                q_row.map_or(f64::from(u8::from(t == draft)), |q| {
                    f64::from(q[t as usize])
                })
            };
            let p_draft = row.prob(weights, draft);
            let decision = decide(greedy, relaxed, draft, &row, p_draft, q_of(draft), rng);
            let distance = if relaxed {
                relaxed_distance(greedy, decision, &margin, &row, weights, q_of)
            } else {
                0.0
            };
            if relaxed {
                ledger.relaxed_positions += 1;
                ledger.distance += distance;
            }
            if decision == Decision::AcceptedRelaxed {
                ledger.relaxed_accepts += 1;
            }
            positions.push(PositionRecord {
                draft_token: draft,
                decision,
                relaxed,
                margin,
                distance,
            });

            if decision == Decision::Rejected {
                let token = match (greedy, relaxed) {
                    (true, _) => row.top1,
                    // The authors' choice: a relaxed rejection resamples from p itself.
                    (false, true) => row.draw(weights, rng),
                    // A row's own draw rejected the draft: it is the residual's draw.
                    (false, false) => match row.sampled {
                        Some(y) => y,
                        None => sample_residual(&row, weights, q_row, draft, rng),
                    },
                };
                let next = NextToken {
                    token,
                    kind: NextKind::Correction,
                    margin,
                };
                return Ok(Verdict {
                    accepted: i,
                    positions,
                    next,
                    ledger,
                });
            }
        }

        let row = row_at(k, &mut self.scratch);
        let weights = &self.scratch.weights;
        let token = if greedy {
            row.top1
        } else {
            row.draw(weights, rng)
        };
        let next = NextToken {
            token,
            kind: NextKind::Bonus,
            margin: margin_of(&row, weights),
        };
        Ok(Verdict {
            accepted: k,
            positions,
            next,
            ledger,
        })
    }
}

/// One-shot convenience: builds a [`Verifier`] and runs one step. Prefer a long-lived
/// [`Verifier`] in a decoding loop: it reuses its buffers.
///
/// # Errors
/// See [`Verifier::new`] and [`Verifier::verify`].
pub fn verify<R: Rng + ?Sized>(
    config: &VerifyConfig,
    input: &VerifyInput<'_>,
    rng: &mut R,
) -> Result<Verdict> {
    Verifier::new(*config)?.verify(input, rng)
}

/// The rule at one draft position x, as the paper states it (p: the target's processed
/// distribution, q: the drafter's; "relaxed": the MARS criterion holds here):
///
/// - greedy: keep x iff it is the target's argmax; at a relaxed position also keep the
///   runner-up;
/// - sampling at a relaxed position: keep x iff it is in the live top-2 (p(x) > 0). Where
///   p(x) ≥ q(x) strict would have kept it with certainty, so that is an exact accept;
/// - sampling elsewhere (strict): keep x with probability min(1, p(x)/q(x)).
///
/// Only the last case draws from `rng` (one uniform), which fixes the stream's order. q(x) > 0
/// is checked in `check_input`, so the ratio is finite.
fn decide<R: Rng + ?Sized>(
    greedy: bool,
    relaxed: bool,
    draft: u32,
    row: &Row,
    p_draft: f64,
    q_draft: f64,
    rng: &mut R,
) -> Decision {
    let in_top2 = (draft == row.top1 || Some(draft) == row.top2) && p_draft > 0.0;
    match (greedy, relaxed) {
        (true, _) if draft == row.top1 => Decision::AcceptedExact,
        (true, true) if in_top2 => Decision::AcceptedRelaxed,
        (true, _) => Decision::Rejected,
        (false, true) if !in_top2 => Decision::Rejected,
        (false, true) if p_draft >= q_draft => Decision::AcceptedExact,
        (false, true) => Decision::AcceptedRelaxed,
        // A row with its own draw (a summary's; its drafts are deterministic): keep the draft
        // iff it is the draw, which happens with probability p(x) = min(1, p(x) / 1).
        (false, false) if row.sampled.is_some() => match row.sampled == Some(draft) {
            true => Decision::AcceptedExact,
            false => Decision::Rejected,
        },
        (false, false) if uniform(rng) < p_draft / q_draft => Decision::AcceptedExact,
        (false, false) => Decision::Rejected,
    }
}

/// A relaxed position's entry in the [`Ledger`]: greedy, p1 − p2 where the runner-up was kept
/// (0 otherwise); sampling, TV(e, p) whatever was decided, since the emitted distribution moved
/// either way.
fn relaxed_distance(
    greedy: bool,
    decision: Decision,
    margin: &Margin,
    row: &Row,
    weights: &[f32],
    q_of: impl Fn(u32) -> f64,
) -> f64 {
    match (greedy, decision) {
        (true, Decision::AcceptedRelaxed) => {
            f64::from(margin.top1.prob - margin.top2.map_or(0.0, |c| c.prob))
        }
        (true, _) => 0.0,
        (false, _) => relaxed_tv(row, weights, q_of),
    }
}

pub(crate) fn margin_of(row: &Row, weights: &[f32]) -> Margin {
    let top1 = Candidate {
        token: row.top1,
        logit: row.z1,
        prob: row.prob(weights, row.top1) as f32,
    };
    let top2 = row.top2.map(|t| Candidate {
        token: t,
        logit: row.z2,
        prob: row.prob(weights, t) as f32,
    });
    let logit_ratio = top2
        .filter(|_| row.z1.is_finite() && row.z2.is_finite() && row.z1 > 0.0)
        .map(|_| row.z2 / row.z1);
    let prob_ratio = top2.map_or(0.0, |c| c.prob / top1.prob);
    Margin {
        top1,
        top2,
        logit_ratio,
        prob_ratio,
    }
}

/// Does the MARS criterion hold? `logit_ratio` is already `None` where the paper's ratio is
/// guarded (z1 ≤ 0, non-finite logits, no runner-up), so those positions stay strict.
pub(crate) fn relaxes(mode: Mode, margin: &Margin) -> bool {
    match mode {
        Mode::Strict => false,
        Mode::Paper { theta } => margin.logit_ratio.is_some_and(|r| r > theta),
        Mode::Margin { rho } => margin.top2.is_some() && margin.prob_ratio >= rho,
    }
}

/// TV(e, p) at a relaxed sampling position; see [`Ledger`] for the derivation.
fn relaxed_tv(row: &Row, weights: &[f32], q_of: impl Fn(u32) -> f64) -> f64 {
    let accepted: Vec<(f64, f64)> = std::iter::once(row.top1)
        .chain(row.top2)
        .map(|t| (q_of(t), row.prob(weights, t)))
        .filter(|&(_, p)| p > 0.0)
        .collect();
    let q_a: f64 = accepted.iter().map(|&(q, _)| q).sum();
    let p_a: f64 = accepted.iter().map(|&(_, p)| p).sum();
    let inside: f64 = accepted.iter().map(|&(q, p)| (q - q_a * p).abs()).sum();
    0.5 * (q_a * (1.0 - p_a).max(0.0) + inside)
}

/// Validates the whole request up front: shapes, ids, and every number that will be read.
pub(crate) fn check_input(input: &VerifyInput<'_>) -> Result<()> {
    let VerifyInput {
        target_logits,
        vocab,
        draft_tokens,
        draft_probs,
    } = *input;
    let k = draft_tokens.len();
    if vocab == 0 {
        return Err(VerifyError::EmptyVocab);
    }
    let expected = k
        .checked_add(1)
        .and_then(|rows| rows.checked_mul(vocab))
        .ok_or(VerifyError::SizeOverflow { k, vocab })?;
    if target_logits.len() != expected {
        return Err(VerifyError::LogitsShape {
            len: target_logits.len(),
            k,
            vocab,
        });
    }
    if u32::try_from(vocab).is_err() {
        // Token ids are u32; a larger vocabulary could not be addressed.
        return Err(VerifyError::SizeOverflow { k, vocab });
    }
    check_tokens(draft_tokens, vocab)?;
    check_logit_rows(target_logits, vocab)?;
    if let DraftProbs::Full(q) = draft_probs {
        if q.len() != k * vocab {
            return Err(VerifyError::DraftProbsShape {
                len: q.len(),
                k,
                vocab,
            });
        }
        for (position, (row, &draft)) in q.chunks_exact(vocab).zip(draft_tokens).enumerate() {
            check_draft_row(position, row, &[(position, draft)])?;
        }
    }
    Ok(())
}

/// Every draft token is below `vocab`.
fn check_tokens(draft_tokens: &[u32], vocab: usize) -> Result<()> {
    match draft_tokens
        .iter()
        .enumerate()
        .find(|(_, t)| **t as usize >= vocab)
    {
        Some((position, &token)) => Err(VerifyError::DraftTokenOutOfVocab {
            position,
            token,
            vocab,
        }),
        None => Ok(()),
    }
}

/// Row summaries for a greedy step of `rows` target rows over `vocab` tokens: the errors the
/// rows' logits would give, and any summary no row of logits could give.
pub(crate) fn check_summaries(
    config: &VerifyConfig,
    summaries: &[RowSummary],
    vocab: usize,
    rows: usize,
) -> Result<()> {
    let sampling = config.sampling;
    if !sampling.summaries_suffice() {
        return Err(VerifyError::SummaryFiltered {
            top_k: sampling.top_k,
            top_p: sampling.top_p,
        });
    }
    if vocab == 0 {
        return Err(VerifyError::EmptyVocab);
    }
    if u32::try_from(vocab).is_err() {
        return Err(VerifyError::SizeOverflow { k: rows, vocab });
    }
    if summaries.len() != rows {
        return Err(VerifyError::SummaryRows {
            len: summaries.len(),
            rows,
        });
    }
    for (position, s) in summaries.iter().enumerate() {
        let bad = |why| Err(VerifyError::BadSummary { position, why });
        if let Some((token, value)) = s.bad {
            return Err(VerifyError::NonFiniteLogit {
                position,
                token,
                value,
            });
        }
        #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN or +inf in one comparison
        if !(s.z1 < f32::INFINITY) {
            return Err(VerifyError::NonFiniteLogit {
                position,
                token: s.top1,
                value: s.z1,
            });
        }
        if s.z1 == f32::NEG_INFINITY {
            return Err(VerifyError::NoValidToken { position });
        }
        if s.top1 as usize >= vocab || s.top2.is_some_and(|t| t as usize >= vocab || t == s.top1) {
            return bad("a token id outside the vocabulary, or the same token twice");
        }
        // A NaN runner-up fails this too.
        if s.top2.is_some() && s.z2.partial_cmp(&s.z1).is_none_or(|o| o.is_gt()) {
            return bad("a runner-up above the best token");
        }
        if !(s.sum >= 1.0 && s.sum.is_finite()) {
            return bad("a sum of exp(z − z1) below 1 or not finite");
        }
        if !sampling.is_greedy() {
            let Some(d) = s.sample else {
                return bad("a sampling step's summary without its draw");
            };
            if d.token as usize >= vocab || !(d.logit > f32::NEG_INFINITY && d.logit <= s.z1) {
                return bad("a draw outside the vocabulary, of probability 0, or above the best");
            }
            if !(d.sum >= 1.0 && d.sum.is_finite()) {
                return bad("a draw's sum of exp((z − z1) / T) below 1 or not finite");
            }
        }
    }
    Ok(())
}

/// Every row of target logits (`vocab` each) holds no NaN or +inf and allows some token.
pub(crate) fn check_logit_rows(target_logits: &[f32], vocab: usize) -> Result<()> {
    for (position, row) in target_logits.chunks_exact(vocab).enumerate() {
        // NaN or +inf anywhere means the forward pass is broken: refuse rather than skip it.
        // A branch-free any() first (it vectorises); the slow search only runs on bad input.
        // !(v < inf) is NaN or +inf in one comparison that vectorises.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        let bad = |v: f32| !(v < f32::INFINITY);
        if row.iter().fold(false, |any, &v| any | bad(v))
            && let Some((token, &value)) = row.iter().enumerate().find(|(_, v)| bad(**v))
        {
            return Err(VerifyError::NonFiniteLogit {
                position,
                token: token as u32,
                value,
            });
        }
        if row.iter().all(|&v| v == f32::NEG_INFINITY) {
            return Err(VerifyError::NoValidToken { position });
        }
    }
    Ok(())
}

/// A drafter row (row `position`) is a probability distribution that gives each of `drawn`
/// (the index of a draft token in its request, and the token) a non-zero probability.
pub(crate) fn check_draft_row(position: usize, row: &[f32], drawn: &[(usize, u32)]) -> Result<()> {
    let (any_bad, sum) = checked_sum(row);
    if any_bad
        && let Some((token, &value)) = row
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v < 0.0)
    {
        return Err(VerifyError::InvalidDraftProb {
            position,
            token: token as u32,
            value,
        });
    }
    if (sum - 1.0).abs() > 1e-3 {
        return Err(VerifyError::DraftProbsNotNormalized { position, sum });
    }
    for &(at, token) in drawn {
        if row.get(token as usize).is_none_or(|&q| q == 0.0) {
            return Err(VerifyError::DraftTokenHasZeroProb {
                position: at,
                token,
            });
        }
    }
    Ok(())
}

/// Whether any value is NaN, infinite or negative, and the f64 sum of the row, in one pass that
/// vectorises: NaN and ±inf make the sum non-finite and a lane-wise minimum catches negatives,
/// so no per-element flag is needed (a `bool` accumulator kept this loop scalar, measured 6×
/// slower). The caller searches for the culprit only on bad input.
fn checked_sum(row: &[f32]) -> (bool, f64) {
    const LANES: usize = 8;
    let mut acc = [0.0f64; LANES];
    let mut min = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..LANES {
            acc[j] += f64::from(chunk[j]);
            min[j] = if chunk[j] < min[j] { chunk[j] } else { min[j] };
        }
    }
    for &v in tail {
        acc[0] += f64::from(v);
        min[0] = if v < min[0] { v } else { min[0] };
    }
    let sum: f64 = acc.iter().sum();
    (!sum.is_finite() || min.iter().any(|&m| m < 0.0), sum)
}
