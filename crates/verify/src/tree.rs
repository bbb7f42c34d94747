//! Verification of a token tree in one step: the target has scored every node of a draft tree
//! in one pass (a node sees the context and its ancestors), and the walk from the root keeps
//! one path.
//!
//! At each node the walk looks at its children, in the order the drafter gave them:
//!
//! - **greedy strict**: follow the child equal to the target's argmax; none → the argmax is the
//!   correction. The output equals target-only greedy decoding whatever the tree.
//! - **sampling strict** (lossless multi-draft speculative sampling): each child x is tested
//!   against the current residual r (at first the target's p): keep x with probability
//!   min(1, r(x) / q(x)); on a rejection r ← norm(max(r − q, 0)) and the next child is tested;
//!   when every child is rejected the correction is drawn from r. With `TreeDraftProbs::Full`
//!   (children drawn independently from q, duplicates allowed) this is SpecInfer's
//!   multi-step speculative sampling; with `TreeDraftProbs::OneHot` (children chosen by the
//!   drafter deterministically, e.g. its top-c, q = δ at each) it removes each rejected child
//!   from r. Either way each test is one lossless speculative-sampling step against the
//!   residual of the ones before, so the emitted token follows p exactly.
//!   A row that comes with its own draw y (a GPU's [`crate::RowSummary`], [`crate::noise`])
//!   keeps the first child equal to y, else y is the correction: the same law, read from the
//!   draw instead of uniforms.
//! - **MARS** where the criterion holds at a node (the same `Mode` test as on chains): the first
//!   child in the target's live top-2 is kept (greedy: the argmax child first, then the
//!   runner-up's) and the walk goes on — the released code's rule, over siblings; no child in
//!   the top-2 → the correction is drawn from p (greedy: the argmax). Elsewhere, the strict rule.
//!
//! A chain is the tree whose node j has parent j − 1; on it this verifier gives exactly
//! [`crate::Verifier::verify`]'s verdict and draws the same random numbers (tested).

use rand_core::Rng;
use serde::{Deserialize, Serialize};

use crate::config::VerifyConfig;
use crate::dist::{Row, RowSummary, Scratch, process_row, sample_by, sample_residual, uniform};
use crate::error::{Result, VerifyError};
use crate::verify::{
    Decision, Ledger, NextKind, NextToken, PositionRecord, check_draft_row, check_logit_rows,
    check_summaries, margin_of, relaxes,
};

/// The drafter's probabilities over a tree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TreeDraftProbs<'a> {
    /// The drafter chose each node's children deterministically (its top-c, prompt lookup's
    /// matches): q is one-hot at each child.
    OneHot,
    /// Rows `[n + 1, vocab]`: row 0 the distribution the root's children were drawn from, row
    /// 1 + j node j's, each child drawn independently (rows of childless nodes are not read).
    Full(&'a [f32]),
}

/// One tree verification request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeInput<'a> {
    /// Target logits `[n + 1, vocab]`: row 0 scores the token after the context (the root's
    /// children), row 1 + j the token after node j (node j's children).
    pub target_logits: &'a [f32],
    /// Vocabulary size (the row length).
    pub vocab: usize,
    /// Each node's token, `[n]`.
    pub tokens: &'a [u32],
    /// Each node's parent, `[n]`: `None` for a child of the root, else an earlier node (so
    /// nodes are in topological order; siblings are tried in index order).
    pub parents: &'a [Option<u32>],
    /// The drafter's probabilities.
    pub draft_probs: TreeDraftProbs<'a>,
}

/// The outcome of verifying a tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeVerdict {
    /// The kept nodes, root to leaf (indices into `tokens`): the emitted text is their tokens
    /// then `next`.
    pub path: Vec<usize>,
    /// One record per examined depth: the kept node's, then (unless the walk reached a leaf)
    /// the depth where no child was kept, recorded with its first child's token.
    pub positions: Vec<PositionRecord>,
    /// The bonus (a leaf was reached) or correction token.
    pub next: NextToken,
    /// This step's relaxation ledger.
    pub ledger: Ledger,
}

impl TreeVerdict {
    /// The tokens this step emits: the kept path's and the next token.
    pub fn emitted(&self, tokens: &[u32]) -> Vec<u32> {
        self.path
            .iter()
            .filter_map(|&j| tokens.get(j).copied())
            .chain(std::iter::once(self.next.token))
            .collect()
    }
}

/// Verifies one tree with `config`, reusing `scratch`'s buffers.
///
/// Randomness, in a fixed order so that a seed reproduces a run: greedy draws none; at a
/// strict sampling depth one uniform per tested child; a correction or bonus draws one.
pub(crate) fn verify_tree<R: Rng + ?Sized>(
    config: &VerifyConfig,
    scratch: &mut Scratch,
    input: &TreeInput<'_>,
    rng: &mut R,
) -> Result<TreeVerdict> {
    let children = check_tree(input)?;
    let TreeInput {
        target_logits,
        vocab,
        tokens,
        draft_probs,
        ..
    } = *input;
    let sampling = config.sampling;
    let rows = |at: usize, scratch: &mut Scratch| {
        process_row(
            &target_logits[at * vocab..(at + 1) * vocab],
            &sampling,
            scratch,
        )
    };
    walk(
        config,
        scratch,
        (tokens, &children),
        draft_probs,
        vocab,
        rows,
        rng,
    )
}

/// The walk from the root (see the module docs), row `at` from `row_at` (checked by the
/// caller); `children[at]` lists the nodes row `at` scores.
fn walk<R: Rng + ?Sized>(
    config: &VerifyConfig,
    scratch: &mut Scratch,
    (tokens, children): (&[u32], &[Vec<usize>]),
    draft_probs: TreeDraftProbs<'_>,
    vocab: usize,
    mut row_at: impl FnMut(usize, &mut Scratch) -> Row,
    rng: &mut R,
) -> Result<TreeVerdict> {
    let greedy = config.sampling.is_greedy();
    let mut path = Vec::new();
    let mut positions = Vec::new();
    let mut ledger = Ledger::default();
    // The row scoring the current node's children: 0 for the root, 1 + j for node j.
    let mut at = 0usize;
    let (token, kind, margin) = loop {
        let row = row_at(at, scratch);
        let weights = &scratch.weights;
        let margin = margin_of(&row, weights);
        let kids = &children[at];
        if kids.is_empty() {
            let token = if greedy {
                row.top1
            } else {
                row.draw(weights, rng)
            };
            break (token, NextKind::Bonus, margin);
        }
        let q_row = match draft_probs {
            TreeDraftProbs::OneHot => None,
            TreeDraftProbs::Full(q) => Some(&q[at * vocab..(at + 1) * vocab]),
        };
        // q(x) of a child's token: 1 for a deterministic child.
        let q_of = |t: u32| q_row.map_or(1.0, |q| f64::from(q[t as usize]));
        let relaxed = relaxes(config.mode, &margin);
        let live_top2 =
            |t: u32| (t == row.top1 || Some(t) == row.top2) && row.prob(weights, t) > 0.0;
        let (kept, decision, token) = match (greedy, relaxed) {
            (true, _) => {
                let exact = kids.iter().find(|&&j| tokens[j] == row.top1);
                let runner_up = kids
                    .iter()
                    .find(|&&j| relaxed && live_top2(tokens[j]) && tokens[j] != row.top1);
                match (exact, runner_up) {
                    (Some(&j), _) => (Some(j), Decision::AcceptedExact, row.top1),
                    (None, Some(&j)) => (Some(j), Decision::AcceptedRelaxed, row.top1),
                    (None, None) => (None, Decision::Rejected, row.top1),
                }
            }
            (false, true) => match kids.iter().find(|&&j| live_top2(tokens[j])) {
                Some(&j) if row.prob(weights, tokens[j]) >= q_of(tokens[j]) => {
                    (Some(j), Decision::AcceptedExact, 0)
                }
                Some(&j) => (Some(j), Decision::AcceptedRelaxed, 0),
                // The authors' choice, as on chains: a relaxed rejection resamples from p.
                None => (None, Decision::Rejected, row.draw(weights, rng)),
            },
            (false, false) => strict_siblings(&row, weights, kids, tokens, q_row, rng),
        };
        let distance = match (relaxed, greedy) {
            (false, _) => 0.0,
            (true, true) if decision == Decision::AcceptedRelaxed => {
                f64::from(margin.top1.prob - margin.top2.map_or(0.0, |c| c.prob))
            }
            (true, true) => 0.0,
            (true, false) => relaxed_tree_tv(&row, weights, kids, tokens, q_row),
        };
        if relaxed {
            ledger.relaxed_positions += 1;
            ledger.distance += distance;
        }
        if decision == Decision::AcceptedRelaxed {
            ledger.relaxed_accepts += 1;
        }
        let recorded = kept.unwrap_or(kids[0]);
        positions.push(PositionRecord {
            draft_token: tokens[recorded],
            decision,
            relaxed,
            margin,
            distance,
        });
        match kept {
            Some(j) => {
                path.push(j);
                at = j + 1;
            }
            None => break (token, NextKind::Correction, margin),
        }
    };
    Ok(TreeVerdict {
        path,
        positions,
        next: NextToken {
            token,
            kind,
            margin,
        },
        ledger,
    })
}

/// The strict rule over siblings: each child tested against the residual of the ones before;
/// returns the kept child (and `AcceptedExact`), or none and the correction drawn from the
/// final residual.
fn strict_siblings<R: Rng + ?Sized>(
    row: &Row,
    weights: &[f32],
    kids: &[usize],
    tokens: &[u32],
    q_row: Option<&[f32]>,
    rng: &mut R,
) -> (Option<usize>, Decision, u32) {
    // A row with its own draw y (a summary's; children are deterministic then): keep the first
    // child equal to y, else y is the correction. Child c_i is kept with probability p(c_i),
    // and y given no match follows p without the children: recursive rejection's law.
    if let Some(y) = row.sampled {
        return match kids.iter().find(|&&j| tokens[j] == y) {
            Some(&j) => (Some(j), Decision::AcceptedExact, 0),
            None => (None, Decision::Rejected, y),
        };
    }
    // A single child is a chain position: the chain's own residual sampler (the same numbers).
    if let [j] = kids {
        let x = tokens[*j];
        let q = q_row.map_or(1.0, |q| f64::from(q[x as usize]));
        if uniform(rng) < row.prob(weights, x) / q {
            return (Some(*j), Decision::AcceptedExact, 0);
        }
        return (
            None,
            Decision::Rejected,
            sample_residual(row, weights, q_row, x, rng),
        );
    }
    // The residual r, normalised lazily: `mass` is its sum.
    let mut r: Vec<f64> = weights.iter().map(|&w| f64::from(w) / row.sum).collect();
    let mut mass = 1.0f64;
    for &j in kids {
        let x = tokens[j] as usize;
        let q = q_row.map_or(1.0, |q| f64::from(q[x]));
        let p = if mass > 0.0 { r[x] / mass } else { 0.0 };
        if uniform(rng) < p / q {
            return (Some(j), Decision::AcceptedExact, 0);
        }
        match q_row {
            // r ← max(r / mass − q, 0), kept unnormalised.
            Some(q) => {
                for (ri, &qi) in r.iter_mut().zip(q) {
                    *ri = (*ri / mass - f64::from(qi)).max(0.0);
                }
            }
            None => r[x] = 0.0,
        }
        mass = r.iter().sum();
    }
    let u = uniform(rng);
    // Rounding can empty the residual only where p ≤ q everywhere, i.e. p = q: then p itself.
    let token = if mass > 0.0 && mass.is_finite() {
        sample_by(r.iter().copied(), u * mass)
    } else {
        sample_by(weights.iter().map(|&w| f64::from(w)), u * row.sum)
    }
    .unwrap_or(row.top1);
    (None, Decision::Rejected, token)
}

/// TV(e, p) at a relaxed sampling node, where e is what the node emits. With A the live top-2,
/// the node emits, with probability m, a child in A (distributed as w), else a draw from p;
/// so e = m·w + (1 − m)·p on A and (1 − m)·p off it, and TV(e, p) = ½·m·(Σ_A |w − p| + 1 − p(A)).
/// Deterministic children: m = 1 and w = δ at the first child in A, if any (TV = 1 − p(that
/// child)). Children drawn independently from q (c of them): m = 1 − (1 − q(A))^c and
/// w = q / q(A) on A. With one child this is the chain's [`crate::Ledger`] formula.
fn relaxed_tree_tv(
    row: &Row,
    weights: &[f32],
    kids: &[usize],
    tokens: &[u32],
    q_row: Option<&[f32]>,
) -> f64 {
    let a: Vec<u32> = std::iter::once(row.top1)
        .chain(row.top2)
        .filter(|&t| row.prob(weights, t) > 0.0)
        .collect();
    let p_a: f64 = a.iter().map(|&t| row.prob(weights, t)).sum();
    let off = (1.0 - p_a).max(0.0);
    match q_row {
        None => kids
            .iter()
            .map(|&j| tokens[j])
            .find(|t| a.contains(t))
            .map_or(0.0, |t| 1.0 - row.prob(weights, t)),
        Some(q) => {
            let q_a: f64 = a.iter().map(|&t| f64::from(q[t as usize])).sum();
            if q_a <= 0.0 {
                return 0.0;
            }
            let c = i32::try_from(kids.len()).unwrap_or(i32::MAX);
            let m = 1.0 - (1.0 - q_a).max(0.0).powi(c);
            let inside: f64 = a
                .iter()
                .map(|&t| (f64::from(q[t as usize]) / q_a - row.prob(weights, t)).abs())
                .sum();
            0.5 * m * (inside + off)
        }
    }
}

/// Validates the whole request before any decision and returns each row's children (index 0:
/// the root's; 1 + j: node j's), in index order.
fn check_tree(input: &TreeInput<'_>) -> Result<Vec<Vec<usize>>> {
    let TreeInput {
        target_logits,
        vocab,
        tokens,
        parents,
        draft_probs,
    } = *input;
    let n = tokens.len();
    if vocab == 0 {
        return Err(VerifyError::EmptyVocab);
    }
    if parents.len() != n {
        return Err(VerifyError::TreeParents {
            len: parents.len(),
            nodes: n,
        });
    }
    let rows_len = n
        .checked_add(1)
        .and_then(|rows| rows.checked_mul(vocab))
        .ok_or(VerifyError::SizeOverflow { k: n, vocab })?;
    if target_logits.len() != rows_len {
        return Err(VerifyError::LogitsShape {
            len: target_logits.len(),
            k: n,
            vocab,
        });
    }
    if u32::try_from(vocab).is_err() {
        return Err(VerifyError::SizeOverflow { k: n, vocab });
    }
    let children = tree_children(tokens, parents, vocab)?;
    check_logit_rows(target_logits, vocab)?;
    if let TreeDraftProbs::Full(q) = draft_probs {
        if q.len() != rows_len {
            return Err(VerifyError::TreeDraftProbsShape {
                len: q.len(),
                nodes: n,
                vocab,
            });
        }
        for (row, kids) in children.iter().enumerate().filter(|(_, k)| !k.is_empty()) {
            let drawn: Vec<(usize, u32)> = kids.iter().map(|&j| (j, tokens[j])).collect();
            check_draft_row(row, &q[row * vocab..(row + 1) * vocab], &drawn)?;
        }
    }
    Ok(children)
}

/// Each row's children (index 0: the root's; 1 + j: node j's), in index order, with every
/// token below `vocab` and every parent an earlier node (`parents` as long as `tokens`).
fn tree_children(tokens: &[u32], parents: &[Option<u32>], vocab: usize) -> Result<Vec<Vec<usize>>> {
    let n = tokens.len();
    let mut children = vec![Vec::new(); n + 1];
    for (node, (&token, &parent)) in tokens.iter().zip(parents).enumerate() {
        if token as usize >= vocab {
            return Err(VerifyError::DraftTokenOutOfVocab {
                position: node,
                token,
                vocab,
            });
        }
        let row = match parent {
            None => 0,
            Some(p) if (p as usize) < node => p as usize + 1,
            Some(p) => return Err(VerifyError::TreeParent { node, parent: p }),
        };
        children[row].push(node);
    }
    Ok(children)
}

impl crate::Verifier {
    /// Verifies one token tree (see the [module docs](crate::tree) for the rules).
    ///
    /// # Errors
    /// As [`crate::Verifier::verify`], and [`VerifyError::TreeParents`] /
    /// [`VerifyError::TreeParent`] for a malformed tree, [`VerifyError::TreeDraftProbsShape`]
    /// for drafter rows of the wrong size. All input is checked before any decision.
    pub fn verify_tree<R: Rng + ?Sized>(
        &mut self,
        input: &TreeInput<'_>,
        rng: &mut R,
    ) -> Result<TreeVerdict> {
        let config = *self.config();
        verify_tree(&config, self.scratch_mut(), input, rng)
    }

    /// Verifies one token tree (deterministic children) from each target row's [`RowSummary`]
    /// (`tokens.len() + 1` of them: the root's row, then each node's), as
    /// [`crate::Verifier::verify_summaries`] does a chain: greedy, the verdict
    /// [`crate::Verifier::verify_tree`] gives on the rows they summarise; sampling, each row's
    /// draw picks the child (or is the correction), recursive rejection's law.
    ///
    /// # Errors
    /// As [`crate::Verifier::verify_summaries`], and [`VerifyError::TreeParents`] /
    /// [`VerifyError::TreeParent`] for a malformed tree.
    pub fn verify_tree_summaries<R: Rng + ?Sized>(
        &mut self,
        rows: &[RowSummary],
        vocab: usize,
        tokens: &[u32],
        parents: &[Option<u32>],
        rng: &mut R,
    ) -> Result<TreeVerdict> {
        let config = *self.config();
        if parents.len() != tokens.len() {
            return Err(VerifyError::TreeParents {
                len: parents.len(),
                nodes: tokens.len(),
            });
        }
        check_summaries(&config, rows, vocab, tokens.len() + 1)?;
        let children = tree_children(tokens, parents, vocab)?;
        let sampling = config.sampling;
        let row = |at: usize, _: &mut Scratch| Row::of_summary(&rows[at], &sampling);
        let (t, c) = (tokens, children.as_slice());
        walk(
            &config,
            self.scratch_mut(),
            (t, c),
            TreeDraftProbs::OneHot,
            vocab,
            row,
            rng,
        )
    }
}
