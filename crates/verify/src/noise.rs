//! Sampling by the Gumbel-max rule with counter-based noise, so that a GPU can draw a row's
//! token where the row is and read back its id instead of the vocabulary.
//!
//! x = argmax_i ((z_i − z1) / T + g_i), with g_i independent standard Gumbel variables, is
//! distributed exactly as softmax(z / T). Here g_i is a pure function of (seed, position, id)
//! ([`gumbel`]): no generator state, so any device computes the same noise for the same row,
//! and `summary.wgsl` mirrors this file line for line. `position` is the context index of the
//! token the row predicts, which makes the draw a function of the prefix and the seed alone:
//!
//! - each context position is decided once, with noise no earlier decision looked at (rows a
//!   rejected step computed past its cut were never used to decide anything), so the emitted
//!   text follows the target's distribution exactly;
//! - with deterministic drafts (prompt lookup, every tree's children), "keep the child equal
//!   to the row's draw, else emit the draw" keeps each child with the probability SpecInfer's
//!   recursive rejection gives with one-hot q, and emits what target-only decoding with the
//!   same seed emits, token for token;
//! - a draft model drawing its chain on the GPU draws each position with the same noise (the
//!   Gumbel-max coupling of q and p, "drafter-invariant" speculative decoding): its draft is
//!   deterministic given the noise, so the same rule keeps it iff it is the target's draw and
//!   the text is target-only's. The draft is kept with probability
//!   [`coupled_acceptance`] ≥ (1 − TV) / (1 + TV), against 1 − TV for the p/q test, which
//!   needs both rows whole on rejection (the residual).
//!
//! The uniform behind g has 23 bits (u ∈ [2⁻²⁴, 1 − 2⁻²⁴]), so g ∈ [−2.8, 16.6]: a token more
//! than ~19 nats (at T) below the top one cannot be drawn — each such token's probability is
//! below 4·10⁻⁹ of the top's. E = −ln u is taken from the series of −ln(1 − v) where u is near
//! 1, because a GPU's `log` is only accurate to 2⁻²¹ absolute there (WGSL's bound on [0.5, 2]),
//! which would swamp the small E that give a rare token its chance.

use serde::{Deserialize, Serialize};

/// Chris Wellons' `lowbias32` integer hash (a bijection on u32 with near-ideal avalanche).
#[inline]
fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// The seed's part of every row's key, hashed once a run (a GPU gets it uploaded and finishes
/// each row's key itself: `mix(seed_key ^ position)`).
#[inline]
pub fn seed_key(seed: u64) -> u32 {
    mix(mix(seed as u32) ^ (seed >> 32) as u32)
}

/// The per-row part of the noise's key: (seed, position) hashed once a row.
#[inline]
pub fn row_key(seed: u64, position: u32) -> u32 {
    mix(seed_key(seed) ^ position)
}

/// The standard Gumbel noise of token `id` in the row keyed by [`row_key`].
///
/// Two rounds of the hash a token: with one (`mix(key ^ id)`), two rows whose keys differ in
/// low bits would share values at shifted ids.
#[inline]
pub fn gumbel(row_key: u32, id: u32) -> f32 {
    of_bits(mix(mix(row_key ^ id) ^ mix(row_key ^ 0x9e37_79b9)))
}

/// Standard Gumbel noise from 32 random bits (23 of them used).
#[inline]
fn of_bits(h: u32) -> f32 {
    // u = (2m + 1) · 2⁻²⁴, exact in f32; v = 1 − u is exact too (Sterbenz) for u ≥ ½.
    let u = ((h >> 9) * 2 + 1) as f32 * (1.0 / 16_777_216.0);
    let v = 1.0 - u;
    let e = if v < 0.0625 {
        // −ln(1 − v) = v + v²/2 + … + v⁶/6, truncation below 10⁻⁸ relative at v < 1/16.
        v * (1.0 + v * (0.5 + v * (1.0 / 3.0 + v * (0.25 + v * (0.2 + v * (1.0 / 6.0))))))
    } else {
        -u.ln()
    };
    -e.ln()
}

/// What a row needs to be sampled where it is: the run's seed and the sampling temperature.
/// The rest of a row's key is the context index of the token it predicts — one past its input
/// token's position, which the GPU reads from the forward's own step words, so a row can never
/// be drawn with another position's noise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SampleKeys {
    /// The run's seed.
    pub seed: u64,
    /// Sampling temperature (> 0).
    pub temperature: f32,
}

/// The Gumbel-max draw of one row of logits (the reference the GPU kernel is tested against):
/// argmax over finite z of (z − z1) / T + g, lowest id among equals; `None` for a row without a
/// finite logit. `z1` is the row's maximum.
pub fn gumbel_max(logits: &[f32], z1: f32, temperature: f32, key: u32) -> Option<u32> {
    let inv_t = 1.0 / temperature;
    let mut best: Option<(f32, u32)> = None;
    for (id, &z) in logits.iter().enumerate() {
        if !z.is_finite() {
            continue;
        }
        let id = id as u32;
        let v = (z - z1) * inv_t + gumbel(key, id);
        if best.is_none_or(|(b, _)| v > b) {
            best = Some((v, id));
        }
    }
    best.map(|(_, id)| id)
}

/// The probability that a draw from `q` and a draw from `p` with the same Gumbel noise agree:
/// Σₓ 1 / Σ_y max(p_y / p_x, q_y / q_x) (x wins both races iff every E_y exceeds E_x times
/// that ratio, E the unit exponentials behind the noise). At most 1 − TV(p, q) (no coupling
/// keeps more) and at least (1 − TV) / (1 + TV). `p` and `q` are distributions over the same
/// ids (non-negative, summing to 1).
///
/// With r = q / p, max(p_y / p_x, q_y / q_x) = (p_y / p_x) · max(1, r_y / r_x), so each inner
/// sum is the p-mass of the ids with r_y ≤ r_x plus 1 / r_x times the q-mass of the rest: one
/// sort by r and two running sums, O(V log V) instead of O(V²).
pub fn coupled_acceptance(p: &[f64], q: &[f64]) -> f64 {
    let ratio = |y: usize| {
        if p[y] > 0.0 {
            q[y] / p[y]
        } else {
            f64::INFINITY
        }
    };
    let mut order: Vec<usize> = (0..p.len().min(q.len()))
        .filter(|&y| p[y] > 0.0 || q[y] > 0.0)
        .collect();
    order.sort_by(|&a, &b| ratio(a).total_cmp(&ratio(b)));
    let rs: Vec<f64> = order.iter().map(|&y| ratio(y)).collect();
    // below[i]: p-mass of order[..i]; above[i]: q-mass of order[i..].
    let mut below = Vec::with_capacity(order.len() + 1);
    below.push(0.0);
    for &y in &order {
        below.push(below[below.len() - 1] + p[y]);
    }
    let mut above = vec![0.0; order.len() + 1];
    for i in (0..order.len()).rev() {
        above[i] = above[i + 1] + q[order[i]];
    }
    let mut total = 0.0;
    for &x in &order {
        let r = ratio(x);
        if p[x] > 0.0 && q[x] > 0.0 {
            let hi = rs.partition_point(|&v| v <= r);
            total += p[x] / (below[hi] + above[hi] / r);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coupling's match rate is what the noise gives: draws from p and q with the same
    /// keys agree as often as [`coupled_acceptance`] says (20,000 keys, within 4 σ), between
    /// its bounds.
    #[test]
    fn coupled_draws_agree_as_computed() {
        let p = [0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02, 0.0];
        let q = [0.2, 0.35, 0.05, 0.2, 0.1, 0.0, 0.05, 0.05];
        let logits = |d: &[f64]| d.iter().map(|&v| v.ln() as f32).collect::<Vec<f32>>();
        let (lp, lq) = (logits(&p), logits(&q));
        let max = |l: &[f32]| l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let (mp, mq) = (max(&lp), max(&lq));
        let n = 20_000u32;
        let agree = (0..n)
            .filter(|&i| {
                let key = row_key(3, i);
                gumbel_max(&lp, mp, 1.0, key) == gumbel_max(&lq, mq, 1.0, key)
            })
            .count();
        let rate = agree as f64 / f64::from(n);
        let want = coupled_acceptance(&p, &q);
        let sigma = (want * (1.0 - want) / f64::from(n)).sqrt();
        assert!((rate - want).abs() < 4.0 * sigma, "{rate} vs {want}");
        let tv: f64 = p.iter().zip(&q).map(|(a, b)| (a - b).abs()).sum::<f64>() / 2.0;
        assert!(
            want <= 1.0 - tv && want >= (1.0 - tv) / (1.0 + tv),
            "{want} tv {tv}"
        );
        // The direct O(V²) sum; equal distributions always agree.
        let slow = direct(&p, &q);
        assert!((want - slow).abs() < 1e-12, "{want} vs {slow}");
        assert!((coupled_acceptance(&p, &p) - 1.0).abs() < 1e-12);
    }

    /// The direct O(V²) sum of [`coupled_acceptance`].
    fn direct(p: &[f64], q: &[f64]) -> f64 {
        (0..p.len())
            .filter(|&x| p[x] > 0.0 && q[x] > 0.0)
            .map(|x| {
                let d: f64 = (0..p.len()).map(|y| (p[y] / p[x]).max(q[y] / q[x])).sum();
                1.0 / d
            })
            .sum()
    }

    // proptest is a native dev-dependency (the wasm32 tests run in a browser).
    #[cfg(not(target_arch = "wasm32"))]
    mod props {
        use super::{coupled_acceptance, direct};
        use proptest::prelude::*;

        fn weight() -> impl Strategy<Value = f64> {
            prop_oneof![Just(0.0f64), Just(0.25), 0.0f64..1.0]
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 1000,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// For any two distributions — zeros, ties of q/p and disjoint supports among
            /// them — the sorted sum is the direct one and lies between (1 − TV) / (1 + TV)
            /// and 1 − TV.
            #[test]
            fn coupled_acceptance_is_the_direct_sum_within_its_bounds(
                w in proptest::collection::vec((weight(), weight()), 1..12)
            ) {
                let (sa, sb) = w.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
                prop_assume!(sa > 0.0 && sb > 0.0);
                let p: Vec<f64> = w.iter().map(|(x, _)| x / sa).collect();
                let q: Vec<f64> = w.iter().map(|(_, y)| y / sb).collect();
                let fast = coupled_acceptance(&p, &q);
                let slow = direct(&p, &q);
                prop_assert!((fast - slow).abs() < 1e-9, "{} vs {}", fast, slow);
                let tv: f64 = p.iter().zip(&q).map(|(a, b)| (a - b).abs()).sum::<f64>() / 2.0;
                prop_assert!(fast <= 1.0 - tv + 1e-9, "{} above 1 - TV {}", fast, tv);
                prop_assert!(fast >= (1.0 - tv) / (1.0 + tv) - 1e-9, "{} tv {}", fast, tv);
            }
        }
    }

    /// The uniform behind the noise is uniform: 64 equal bins over many (row, id) pairs pass a
    /// chi-square test, and the Gumbel values have the distribution's mean (Euler's γ).
    #[test]
    fn the_noise_is_gumbel() {
        let bins = 64;
        let mut counts = vec![0u64; bins];
        let mut total = 0.0f64;
        let n = 200_000u32;
        for i in 0..n {
            let key = row_key(7, i / 1000);
            let g = gumbel(key, i % 1000);
            assert!(g.is_finite() && (-3.0..17.0).contains(&g), "{g}");
            total += f64::from(g);
            // Back to the uniform: u = exp(−exp(−g)).
            let u = (-(-f64::from(g)).exp()).exp();
            counts[((u * bins as f64) as usize).min(bins - 1)] += 1;
        }
        let expected = f64::from(n) / bins as f64;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum();
        // 63 degrees of freedom: the 99.9 % point is 103.4.
        assert!(chi2 < 103.4, "chi2 {chi2}");
        let mean = total / f64::from(n);
        assert!((mean - 0.577_215_7).abs() < 0.01, "mean {mean}");
    }

    /// The series branch and `ln` agree where they meet, and the smallest E stays positive.
    #[test]
    fn the_noise_is_continuous_and_finite_at_its_ends() {
        let v = 0.0625f32;
        let series =
            v * (1.0 + v * (0.5 + v * (1.0 / 3.0 + v * (0.25 + v * (0.2 + v * (1.0 / 6.0))))));
        assert!((series - -(1.0 - v).ln()).abs() < 1e-7);
        // The extreme bits give the documented range, and every value in between is finite.
        assert!(
            (of_bits(0) - -(16.635_532f32).ln()).abs() < 1e-5,
            "{}",
            of_bits(0)
        );
        assert!(
            (of_bits(u32::MAX) - 16.635_532).abs() < 1e-3,
            "{}",
            of_bits(u32::MAX)
        );
        for h in (0..=u32::MAX).step_by(4099) {
            let g = of_bits(h);
            assert!(g.is_finite() && (-2.82..16.64).contains(&g), "{h}: {g}");
        }
    }
}
