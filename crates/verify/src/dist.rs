//! One row of target logits → the processed distribution p (temperature, top-k, top-p), its
//! top-2, and sampling from p or from the strict residual norm(max(0, p − q)).
//!
//! The verifier runs this on up to k + 1 rows of up to ~128k logits per step, so it is written
//! to be memory-bound: one pass for the top-2, one fused exp-and-sum pass, and top-k / top-p
//! only when they are switched on. p is kept unnormalised (`weights`, with `sum`) so that a row
//! that is only needed for p(x) never pays a division pass.

use std::cmp::Ordering;

use rand_core::Rng;

use crate::config::Sampling;

/// Reusable buffers, sized to the vocabulary on first use.
#[derive(Debug, Default, Clone)]
pub(crate) struct Scratch {
    /// Unnormalised processed probabilities, [vocab]; `weights[t] / sum` is p(t).
    pub(crate) weights: Vec<f32>,
    /// Token ids for top-k / top-p selection, [vocab].
    order: Vec<u32>,
}

/// What verification needs to know about one processed row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Row {
    /// The target's argmax (lowest id among equal logits).
    pub(crate) top1: u32,
    /// The runner-up, if it survived top-k / top-p and its probability is not 0.
    pub(crate) top2: Option<u32>,
    /// Processed logit of `top1`: logit / T (raw logit when greedy).
    pub(crate) z1: f32,
    /// Processed logit of `top2`; −inf without a runner-up.
    pub(crate) z2: f32,
    /// Sum of `Scratch::weights` after filtering (≥ 1: top-1's weight is exp(0)).
    pub(crate) sum: f64,
    /// The weights of top-1 and top-2 where the row came as a [`RowSummary`]: there are no
    /// per-token weights then, and no other token has a probability the walk needs.
    pub(crate) top2_weights: Option<(f32, f32)>,
    /// The row's token drawn where the row is ([`crate::noise`]); a sampling walk over
    /// deterministic drafts takes it instead of drawing from the weights (a summary's row).
    pub(crate) sampled: Option<u32>,
}

impl Row {
    /// p(token) from the scratch weights this row was built in (or its summary's two).
    pub(crate) fn prob(&self, weights: &[f32], token: u32) -> f64 {
        if let Some((w1, w2)) = self.top2_weights {
            let w = if token == self.top1 {
                w1
            } else if Some(token) == self.top2 {
                w2
            } else {
                0.0
            };
            return f64::from(w) / self.sum;
        }
        weights
            .get(token as usize)
            .map_or(0.0, |&w| f64::from(w) / self.sum)
    }

    /// The row a step reads from a [`RowSummary`] (checked by the caller): what
    /// [`process_row`] would give without top-k / top-p — greedy at T = 1 (the model's own
    /// softmax, for margins), sampling at the draw's temperature with the summary's draw.
    pub(crate) fn of_summary(s: &RowSummary, sampling: &Sampling) -> Self {
        let draw = s.sample.filter(|_| !sampling.is_greedy());
        let (t, sum) = match draw {
            Some(d) => (sampling.temperature, d.sum),
            None => (1.0, s.sum),
        };
        let w2 = if s.top2.is_some() {
            exp_nonpositive((s.z2 - s.z1) / t)
        } else {
            0.0
        };
        Row {
            top1: s.top1,
            top2: s.top2.filter(|_| w2 > 0.0),
            z1: s.z1 / t,
            z2: if w2 > 0.0 {
                s.z2 / t
            } else {
                f32::NEG_INFINITY
            },
            sum,
            top2_weights: Some((1.0, w2)),
            sampled: draw.map(|d| d.token),
        }
    }

    /// A token drawn from p: the row's own draw where it came with one, else one uniform's.
    pub(crate) fn draw<R: Rng + ?Sized>(&self, weights: &[f32], rng: &mut R) -> u32 {
        self.sampled.unwrap_or_else(|| sample_p(self, weights, rng))
    }
}

/// What verification needs of one row of target logits, where the logits are not read back
/// whole (a GPU computes it and returns a few words a row): the best and second-best token
/// (logit descending, lowest id first among equals), the sum of exp((z − z1) / T) over the
/// row, the first NaN or +inf in it (which fails the step as a full row would), and for a
/// sampling step the row's Gumbel-max draw ([`crate::noise`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowSummary {
    /// The argmax.
    pub top1: u32,
    /// Its logit.
    pub z1: f32,
    /// The runner-up; `None` when every other logit is −inf.
    pub top2: Option<u32>,
    /// Its logit (−inf without one).
    pub z2: f32,
    /// Σ exp(z − z1) over the row (at least 1).
    pub sum: f64,
    /// The first NaN or +inf of the row and its value.
    pub bad: Option<(u32, f32)>,
    /// A sampling step's draw; `None` for a greedy step.
    pub sample: Option<RowDraw>,
}

impl RowSummary {
    /// The token the row gives on its own: its draw when sampled, else its best (greedy's draw).
    /// A drafter chained on the GPU feeds this token to its next forward (link.wgsl).
    pub fn token(&self) -> u32 {
        self.sample.map_or(self.top1, |d| d.token)
    }
}

/// A row's draw from softmax(z / T) ([`crate::noise::gumbel_max`]), with what a sampling step
/// needs beside it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowDraw {
    /// The token drawn.
    pub token: u32,
    /// Its logit.
    pub logit: f32,
    /// Σ exp((z − z1) / T) over the row (at least 1): p at T of the top two.
    pub sum: f64,
}

/// Orders token ids by logit descending, then id ascending: the one ranking used for top-1,
/// top-2, top-k and top-p, so that ties are broken the same way everywhere.
fn by_logit_desc(logits: &[f32]) -> impl Fn(&u32, &u32) -> Ordering + '_ {
    move |&a, &b| {
        let (la, lb) = (logits[a as usize], logits[b as usize]);
        lb.total_cmp(&la).then(a.cmp(&b))
    }
}

/// Builds p for one row into `scratch.weights` and returns its summary.
///
/// Preconditions (checked by the caller for the whole request): `logits` is non-empty, holds no
/// NaN or +inf, and at least one value is finite; `sampling` is valid.
pub(crate) fn process_row(logits: &[f32], sampling: &Sampling, scratch: &mut Scratch) -> Row {
    let vocab = logits.len();
    // Pass 1: top-2 on raw logits. Temperature is a positive scale, so it does not reorder them.
    let (best1, top1, best2, top2) = top2_of(logits);
    // Greedy still reports margins, measured on the model's own softmax (T = 1).
    let t_eff = sampling.effective_temperature();

    // Pass 2: weights[i] = exp((l_i − l_max) / T) ≤ 1, fused with their sum. Dividing (rather
    // than multiplying by 1/T) keeps a tiny T from turning 0 · inf into NaN at the maximum.
    scratch.weights.resize(vocab, 0.0);
    let weights = &mut scratch.weights[..vocab];
    let mut sum = exp_shifted_into(logits, best1, t_eff, weights);

    if let Some(k) = sampling.top_k.map(|k| k as usize).filter(|&k| k < vocab) {
        sum = keep_top_k(logits, k, weights, &mut scratch.order);
    }
    if sampling.top_p < 1.0 {
        sum = keep_top_p(
            logits,
            f64::from(sampling.top_p),
            sum,
            weights,
            &mut scratch.order,
        );
    }

    let top2 = top2.filter(|&t| weights[t] > 0.0);
    Row {
        top1: top1 as u32,
        top2: top2.map(|t| t as u32),
        z1: best1 / t_eff,
        z2: top2.map_or(f32::NEG_INFINITY, |_| best2 / t_eff),
        sum,
        top2_weights: None,
        sampled: None,
    }
}

/// The two best logits and their ids (lowest id first among equals); the runner-up is `None`
/// when only one logit is finite.
///
/// Why two passes: a branchy "compare with the best two" loop runs at scalar speed, while
/// lane-wise max / min over fixed-size chunks vectorises; finding the ids afterwards is a scan
/// that stops at the first hit.
fn top2_of(logits: &[f32]) -> (f32, usize, f32, Option<usize>) {
    const LANES: usize = 16;
    let mut m1 = [f32::NEG_INFINITY; LANES];
    let mut m2 = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..LANES {
            // Per lane: the best two values seen. Comparisons, not f32::max, so that the
            // compiler emits plain vector max/min (no NaN can reach here: validated).
            let v = chunk[j];
            let lo = if v < m1[j] { v } else { m1[j] };
            m2[j] = if lo > m2[j] { lo } else { m2[j] };
            m1[j] = if v > m1[j] { v } else { m1[j] };
        }
    }
    let mut best1 = f32::NEG_INFINITY;
    let mut best2 = f32::NEG_INFINITY;
    for v in m1.iter().chain(&m2).chain(tail) {
        if *v > best1 {
            best2 = best1;
            best1 = *v;
        } else if *v > best2 {
            best2 = *v;
        }
    }
    let top1 = first_index_of(logits, best1).unwrap_or(0);
    let top2 = if best2 == f32::NEG_INFINITY {
        None
    } else if best2 == best1 {
        // A tie for first place: the runner-up is the next id holding the same value.
        first_index_of(&logits[top1 + 1..], best1).map(|i| top1 + 1 + i)
    } else {
        first_index_of(logits, best2)
    };
    (best1, top1, best2, top2)
}

/// The first index holding exactly `value`. Chunks are tested branch-free (vectorised) and only
/// the chunk with a hit is scanned element by element.
fn first_index_of(values: &[f32], value: f32) -> Option<usize> {
    const LANES: usize = 32;
    let chunks = values.chunks_exact(LANES);
    let tail_start = values.len() - chunks.remainder().len();
    for (c, chunk) in chunks.enumerate() {
        if chunk.iter().fold(false, |hit, &v| hit | (v == value)) {
            return chunk
                .iter()
                .position(|&v| v == value)
                .map(|i| c * LANES + i);
        }
    }
    values[tail_start..]
        .iter()
        .position(|&v| v == value)
        .map(|i| tail_start + i)
}

/// Writes exp((l − max) / t) for every logit and returns their sum.
///
/// The sum is taken in f64 lanes in a second pass over the (cache-hot) weights: summing 10^5
/// terms in f32 would lose the small ones, and keeping the exp loop free of other work lets it
/// vectorise (measured: fusing the two passes made the step 3× slower).
fn exp_shifted_into(logits: &[f32], max: f32, t: f32, out: &mut [f32]) -> f64 {
    let inv_t = 1.0 / t;
    if t == 1.0 {
        for (o, &l) in out.iter_mut().zip(logits) {
            *o = exp_nonpositive(l - max);
        }
    } else if inv_t.is_finite() {
        // A multiply, not a division: vector division costs several times more per lane.
        for (o, &l) in out.iter_mut().zip(logits) {
            *o = exp_nonpositive((l - max) * inv_t);
        }
    } else {
        // T so small that 1/T overflows: dividing keeps (max − max) / T at 0 where
        // multiplying would make 0 · inf = NaN.
        for (o, &l) in out.iter_mut().zip(logits) {
            *o = exp_nonpositive((l - max) / t);
        }
    }
    const LANES: usize = 8;
    let mut acc = [0.0f64; LANES];
    let chunks = out.chunks_exact(LANES);
    let tail: f64 = chunks.remainder().iter().map(|&w| f64::from(w)).sum();
    for chunk in chunks {
        for j in 0..LANES {
            acc[j] += f64::from(chunk[j]);
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// e^x for x ≤ 0 (x = −inf gives 0), relative error below 2e-7.
///
/// Why not `f32::exp`: it is a libm call that the compiler cannot vectorise, and at a 128k
/// vocabulary the exp pass is most of a verification step. This is the Cephes `expf` scheme
/// (x = n·ln2 + r, |r| ≤ ln2/2, degree-6 polynomial for e^r, 2^n built from the exponent bits)
/// written with plain arithmetic so that the loop above vectorises: no libm call, no saturating
/// float-to-int cast (n is read from the bits of the rounding sum instead). Inputs below −87.3
/// return 0: such a token has probability < 1e-38 relative to the top token.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // ln 2 split so that n · LN2_HI is exact for |n| ≤ 126
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding then subtracting 1.5 · 2^23 rounds to the nearest integer; in that range one ulp
    // is 1, so the integer n also sits in the low bits of the sum.
    const ROUND: f32 = 12_582_912.0;
    const ROUND_BITS: u32 = 0x4B40_0000;
    const MIN_X: f32 = -87.3;
    let xc = if x < MIN_X { MIN_X } else { x };
    let shifted = xc * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let mut poly = 1.987_569_1e-4_f32;
    poly = poly * r + 1.398_199_9e-3;
    poly = poly * r + 8.333_452e-3;
    poly = poly * r + 4.166_579_6e-2;
    poly = poly * r + 1.666_666_5e-1;
    poly = poly * r + 0.5;
    let er = poly * r * r + r + 1.0;
    // n ∈ [−126, 0], so n + 127 ∈ [1, 127] is a normal exponent (wrapping: n is negative).
    let exponent = shifted.to_bits().wrapping_sub(ROUND_BITS).wrapping_add(127);
    let scale = f32::from_bits(exponent << 23);
    if x < MIN_X { 0.0 } else { er * scale }
}

/// Zeroes every weight outside the k best tokens (by logit, then id) and returns the new sum.
fn keep_top_k(logits: &[f32], k: usize, weights: &mut [f32], order: &mut Vec<u32>) -> f64 {
    order.clear();
    order.extend(0..logits.len() as u32);
    let cmp = by_logit_desc(logits);
    // k ≥ 1 (validated) and k < vocab (caller), so k − 1 is a valid pivot.
    order.select_nth_unstable_by(k - 1, &cmp);
    for &t in &order[k..] {
        weights[t as usize] = 0.0;
    }
    order[..k]
        .iter()
        .map(|&t| f64::from(weights[t as usize]))
        .sum()
}

/// Keeps the smallest set of best tokens whose mass reaches `top_p` and returns the new sum.
///
/// The set is usually a few dozen tokens, so instead of sorting the vocabulary this sorts the
/// best 64 candidates, and only widens (×4) when their mass falls short. Exact either way.
fn keep_top_p(
    logits: &[f32],
    top_p: f64,
    sum: f64,
    weights: &mut [f32],
    order: &mut Vec<u32>,
) -> f64 {
    order.clear();
    order.extend((0..logits.len() as u32).filter(|&t| weights[t as usize] > 0.0));
    let n = order.len();
    let cmp = by_logit_desc(logits);
    let target = top_p * sum;
    let mut m = n.min(64);
    let keep = loop {
        if m < n {
            order.select_nth_unstable_by(m - 1, &cmp);
        }
        order[..m].sort_unstable_by(&cmp);
        let mut cum = 0.0f64;
        let reached = order[..m].iter().position(|&t| {
            cum += f64::from(weights[t as usize]);
            cum >= target
        });
        match reached {
            Some(j) => break j + 1,
            // Rounding can leave the whole set a hair short of top_p · sum: keep it all.
            None if m == n => break n,
            None => m = (m * 4).min(n),
        }
    };
    for &t in &order[keep..] {
        weights[t as usize] = 0.0;
    }
    order[..keep]
        .iter()
        .map(|&t| f64::from(weights[t as usize]))
        .sum()
}

/// A uniform draw in [0, 1) with 53 random bits.
pub(crate) fn uniform<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Draws a token from p (the weights of `row`). Consumes one uniform.
pub(crate) fn sample_p<R: Rng + ?Sized>(row: &Row, weights: &[f32], rng: &mut R) -> u32 {
    let target = uniform(rng) * row.sum;
    sample_by(weights.iter().map(|&w| f64::from(w)), target).unwrap_or(row.top1)
}

/// Draws a token from norm(max(0, p − q)), the strict rejection residual. `q_row` is the
/// drafter's distribution; `None` means one-hot at `draft`. Consumes one uniform.
///
/// Rejection implies p(x) < q(x), hence a residual mass ≥ q(x) − p(x) > 0; only rounding can
/// leave it at 0, and then p itself is the right fallback (p − q ≈ 0 means q ≈ p).
pub(crate) fn sample_residual<R: Rng + ?Sized>(
    row: &Row,
    weights: &[f32],
    q_row: Option<&[f32]>,
    draft: u32,
    rng: &mut R,
) -> u32 {
    let inv_sum = 1.0 / row.sum;
    let residual = |i: usize, w: f32| -> f64 {
        let q = match q_row {
            Some(q) => f64::from(q[i]),
            None => f64::from(u8::from(i == draft as usize)),
        };
        (f64::from(w) * inv_sum - q).max(0.0)
    };
    let mass: f64 = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| residual(i, w))
        .sum();
    let u = uniform(rng);
    if !(mass > 0.0 && mass.is_finite()) {
        return sample_by(weights.iter().map(|&w| f64::from(w)), u * row.sum).unwrap_or(row.top1);
    }
    let iter = weights.iter().enumerate().map(|(i, &w)| residual(i, w));
    sample_by(iter, u * mass).unwrap_or(row.top1)
}

/// Index of the first weight at which the running sum passes `target`; when rounding leaves the
/// total at or below `target`, the last index with positive weight. `None` if all are 0.
pub(crate) fn sample_by(weights: impl Iterator<Item = f64>, target: f64) -> Option<u32> {
    let mut cum = 0.0;
    let mut last_positive = None;
    for (i, w) in weights.enumerate() {
        if w > 0.0 {
            cum += w;
            last_positive = Some(i as u32);
            if cum > target {
                return last_positive;
            }
        }
    }
    last_positive
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;
    #[cfg(target_arch = "wasm32")]
    wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

    #[test]
    fn fast_exp_matches_f64_exp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 0.0 {
            let got = f64::from(exp_nonpositive(x));
            let want = f64::from(x).exp();
            worst = worst.max((got - want).abs() / want);
            x += 0.000_37;
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-1e30), 0.0);
    }

    #[test]
    fn processed_row_matches_a_sort_based_reference() {
        use rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut scratch = Scratch::default();
        for case in 0..300 {
            let vocab = 1 + (rng.next_u32() % 700) as usize;
            // Integer-valued logits make exact ties common, which is what the ordering must get right.
            let logits: Vec<f32> = (0..vocab)
                .map(|_| {
                    if case % 2 == 0 {
                        (rng.next_u32() % 9) as f32
                    } else {
                        uniform(&mut rng) as f32 * 20.0 - 10.0
                    }
                })
                .collect();
            let s = Sampling {
                temperature: [0.0, 0.3, 1.0, 2.5][case % 4],
                top_k: [None, Some(1), Some(3), Some(50)][(case / 4) % 4],
                top_p: [1.0, 0.9, 0.5, 0.05][(case / 16) % 4],
            };
            let row = process_row(&logits, &s, &mut scratch);
            let want = crate::test_reference::reference_probs(&logits, &s);
            for (t, &p) in want.iter().enumerate() {
                let got = row.prob(&scratch.weights, t as u32);
                assert!(
                    (got - p).abs() < 1e-6,
                    "case {case} token {t}: {got} vs {p}"
                );
                assert_eq!(
                    got == 0.0,
                    p == 0.0,
                    "case {case} token {t}: support differs"
                );
            }
            let best = (0..vocab).max_by(|&a, &b| want[a].total_cmp(&want[b]).then(b.cmp(&a)));
            assert_eq!(Some(row.top1 as usize), best, "case {case}");
        }
    }
}
