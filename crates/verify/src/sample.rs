//! Sampling outside verification: drafters draw their proposals, and target-only decoding draws
//! its tokens, with exactly the processing the verifier applies (temperature, top-k, top-p, ties
//! broken by lowest id). A drafter's q and the verifier's p then differ only by the model.

use rand_core::Rng;

use crate::config::Sampling;
use crate::dist::{Scratch, exp_nonpositive, process_row, sample_p};
use crate::error::{Result, VerifyError};
use crate::verify::{DraftProbs, VerifyInput, check_input};

/// Draws tokens from processed rows of logits, reusing its buffers across calls.
#[derive(Debug, Clone)]
pub struct Sampler {
    sampling: Sampling,
    scratch: Scratch,
}

impl Sampler {
    /// A sampler for `sampling`.
    ///
    /// # Errors
    /// [`crate::VerifyError`] naming the parameter when `sampling` is invalid.
    pub fn new(sampling: Sampling) -> Result<Self> {
        sampling.validate()?;
        Ok(Self {
            sampling,
            scratch: Scratch::default(),
        })
    }

    /// The settings this sampler applies.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// Draws one token from the processed distribution of `logits` (one row, `[vocab]`). Greedy
    /// returns the argmax and consumes no randomness.
    ///
    /// # Errors
    /// An empty row, a NaN or +inf logit, or a row that is −inf everywhere.
    pub fn sample<R: Rng + ?Sized>(&mut self, logits: &[f32], rng: &mut R) -> Result<u32> {
        check_row(logits)?;
        let row = process_row(logits, &self.sampling, &mut self.scratch);
        Ok(if self.sampling.is_greedy() {
            row.top1
        } else {
            sample_p(&row, &self.scratch.weights, rng)
        })
    }

    /// As [`Sampler::sample`], and writes the normalised processed distribution into `probs`
    /// (resized to the row): the q a drafter hands to the verifier. Greedy writes the one-hot
    /// row of its argmax.
    ///
    /// # Errors
    /// As [`Sampler::sample`].
    pub fn sample_with_probs<R: Rng + ?Sized>(
        &mut self,
        logits: &[f32],
        rng: &mut R,
        probs: &mut Vec<f32>,
    ) -> Result<u32> {
        check_row(logits)?;
        let row = process_row(logits, &self.sampling, &mut self.scratch);
        let weights = &self.scratch.weights[..logits.len()];
        probs.clear();
        if self.sampling.is_greedy() {
            probs.resize(logits.len(), 0.0);
            probs[row.top1 as usize] = 1.0;
            return Ok(row.top1);
        }
        let inv = 1.0 / row.sum;
        probs.extend(weights.iter().map(|&w| (f64::from(w) * inv) as f32));
        Ok(sample_p(&row, weights, rng))
    }
}

impl Sampler {
    /// The `c` most probable tokens of the processed distribution of `logits` (one row,
    /// `[vocab]`) with their probabilities, most probable first (ties: lowest id first), written
    /// into `out`; tokens of probability 0 (cut by top-k / top-p) are never listed. Greedy ranks
    /// by the model's own softmax (T = 1), as its margins do. A tree drafter's children.
    ///
    /// # Errors
    /// As [`Sampler::sample`].
    pub fn top(&mut self, logits: &[f32], c: usize, out: &mut Vec<(u32, f64)>) -> Result<()> {
        check_row(logits)?;
        let row = process_row(logits, &self.sampling, &mut self.scratch);
        let weights = &self.scratch.weights[..logits.len()];
        out.clear();
        if c == 0 {
            return Ok(());
        }
        // One pass keeping the best c in order: c is a handful, the vocabulary ~10^5, and most
        // weights lose the first comparison.
        let mut worst = 0.0f32;
        for (id, &w) in weights.iter().enumerate() {
            if w <= 0.0 || (out.len() == c && w <= worst) {
                continue;
            }
            // After every weight ≥ w (ids ascend, so equal weights keep the lower id first).
            let at = out.partition_point(|&(_, v)| v >= f64::from(w));
            out.insert(at, (id as u32, f64::from(w)));
            out.truncate(c);
            worst = out.last().map_or(0.0, |&(_, v)| v as f32);
        }
        for (_, p) in out.iter_mut() {
            *p /= row.sum;
        }
        Ok(())
    }
}

/// A row reduced where it is to its best values (a GPU's top-c kernel), for
/// [`Sampler::top_of`]: `2c + 3` words read back instead of the row.
#[derive(Debug, Clone, PartialEq)]
pub struct RowTop {
    /// The best values with their ids, descending, lowest id first among equals; −inf never
    /// listed.
    pub best: Vec<(u32, f32)>,
    /// Σ exp((z − z1) / T) over the row, T the sampler's (1 when greedy); at least 1.
    pub sum: f64,
    /// The first NaN or +inf of the row and its value.
    pub bad: Option<(u32, f32)>,
}

impl Sampler {
    /// What [`Sampler::top`] gives for the row `row` reduces (its best `c` with their
    /// probabilities), for a sampler without top-k / top-p.
    ///
    /// # Errors
    /// [`VerifyError::SummaryFiltered`] for top-k / top-p (they need the row's sorted mass); the
    /// row's own error for a bad value or no allowed token; [`VerifyError::BadSummary`] for a
    /// reduction no row could give.
    pub fn top_of(&self, row: &RowTop, c: usize, out: &mut Vec<(u32, f64)>) -> Result<()> {
        let sampling = self.sampling;
        if !sampling.summaries_suffice() {
            return Err(VerifyError::SummaryFiltered {
                top_k: sampling.top_k,
                top_p: sampling.top_p,
            });
        }
        if let Some((token, value)) = row.bad {
            return Err(VerifyError::NonFiniteLogit {
                position: 0,
                token,
                value,
            });
        }
        let bad = |why| VerifyError::BadSummary { position: 0, why };
        let Some(&(_, z1)) = row.best.first() else {
            return Err(VerifyError::NoValidToken { position: 0 });
        };
        if !(row.sum >= 1.0 && row.sum.is_finite()) {
            return Err(bad("a sum of exp((z − z1) / T) below 1 or not finite"));
        }
        if !row
            .best
            .windows(2)
            .all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0))
            || !row
                .best
                .iter()
                .all(|&(_, z)| z > f32::NEG_INFINITY && z < f32::INFINITY)
        {
            return Err(bad("best values out of order, repeated or not finite"));
        }
        // The weights process_row would give these tokens: exp((z − z1) / T) in f32 (a
        // multiply where 1 / T is finite, as there).
        let t = sampling.effective_temperature();
        let inv_t = 1.0 / t;
        let shifted = |z: f32| {
            if inv_t.is_finite() {
                (z - z1) * inv_t
            } else {
                (z - z1) / t
            }
        };
        out.clear();
        out.extend(
            row.best
                .iter()
                .take(c)
                .map(|&(id, z)| (id, f64::from(exp_nonpositive(shifted(z))) / row.sum))
                // After the division: a weight over a huge (nonsense but finite) sum can
                // underflow f64 to 0, and a token of probability 0 is no candidate.
                .filter(|&(_, p)| p > 0.0),
        );
        Ok(())
    }
}

fn check_row(logits: &[f32]) -> Result<()> {
    check_input(&VerifyInput {
        target_logits: logits,
        vocab: logits.len(),
        draft_tokens: &[],
        draft_probs: DraftProbs::OneHot,
    })
}
