//! Helpers shared by the integration tests. They run natively and, on wasm32, in headless
//! Chromium through wasm-bindgen-test, so nothing here touches the file system or threads.
#![allow(dead_code)] // each test file uses a different subset
#![allow(clippy::expect_used)] // a failed expect is how a test reports broken setup

use mars_verify::{Mode, Sampling, Verifier, VerifyConfig};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// A verifier for `sampling` and `mode` (both valid in the tests that ask).
pub fn verifier(sampling: Sampling, mode: Mode) -> Verifier {
    Verifier::new(VerifyConfig { sampling, mode }).expect("a valid verifier configuration")
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Uniform in [0, 1).
pub fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Uniform in [lo, hi).
pub fn uniform_f32(rng: &mut ChaCha8Rng, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * unit(rng) as f32
}

pub fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}

/// `n` logits uniform in [lo, hi).
pub fn logits(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| uniform_f32(rng, lo, hi)).collect()
}

/// Draws an index from a probability vector.
pub fn draw(probs: &[f64], rng: &mut ChaCha8Rng) -> usize {
    let u = unit(rng) * probs.iter().sum::<f64>();
    let mut cum = 0.0;
    for (i, &p) in probs.iter().enumerate() {
        cum += p;
        if u < cum {
            return i;
        }
    }
    probs.iter().rposition(|&p| p > 0.0).unwrap_or(0)
}

/// Token ids ordered by logit descending, then id ascending (the verifier's ranking).
pub fn ranking(logits: &[f32]) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    ids
}

pub fn argmax(logits: &[f32]) -> u32 {
    ranking(logits)[0] as u32
}

/// The processed target distribution, computed the slow obvious way in f64: the independent
/// reference the verifier's fast path is checked against.
pub fn reference_probs(logits: &[f32], s: &Sampling) -> Vec<f64> {
    let t = if s.is_greedy() {
        1.0
    } else {
        f64::from(s.temperature)
    };
    let ids = ranking(logits);
    let max = f64::from(logits[ids[0]]);
    let mut w: Vec<f64> = logits
        .iter()
        .map(|&l| ((f64::from(l) - max) / t).exp())
        .collect();
    if let Some(k) = s.top_k.map(|k| k as usize).filter(|&k| k < logits.len()) {
        for &i in &ids[k..] {
            w[i] = 0.0;
        }
    }
    if s.top_p < 1.0 {
        let total: f64 = w.iter().sum();
        let mut cum = 0.0;
        let mut cut = ids.len();
        for (j, &i) in ids.iter().enumerate() {
            cum += w[i];
            if cum >= f64::from(s.top_p) * total {
                cut = j + 1;
                break;
            }
        }
        for &i in &ids[cut..] {
            w[i] = 0.0;
        }
    }
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// A random distribution over `n` tokens, bounded away from 0 so chi-square cells are full.
pub fn random_dist(rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
    let w: Vec<f64> = (0..n).map(|_| 0.2 + unit(rng)).collect();
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

pub fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// Pearson's statistic of `counts` against `expected` probabilities, and its degrees of freedom.
/// Cells the expectation gives 0 must be empty: a single hit there is an infinite statistic.
pub fn chi_square(counts: &[u64], expected: &[f64]) -> (f64, usize) {
    let n: u64 = counts.iter().sum();
    let mut stat = 0.0;
    let mut cells = 0usize;
    for (&c, &p) in counts.iter().zip(expected) {
        if p == 0.0 {
            if c > 0 {
                return (f64::INFINITY, 1);
            }
            continue;
        }
        let e = p * n as f64;
        stat += (c as f64 - e).powi(2) / e;
        cells += 1;
    }
    (stat, cells.saturating_sub(1).max(1))
}

/// The chi-square critical value at significance `alpha`.
pub fn chi_square_critical(df: usize, alpha: f64) -> f64 {
    ChiSquared::new(df as f64)
        .expect("df > 0")
        .inverse_cdf(1.0 - alpha)
}

/// Asserts that `counts` are consistent with `expected` at significance 1e-4 (seeds are fixed, so
/// this is deterministic; the level only says how far off a failing case has to be).
pub fn assert_matches_distribution(counts: &[u64], expected: &[f64], what: &str) {
    let (stat, df) = chi_square(counts, expected);
    let critical = chi_square_critical(df, 1e-4);
    assert!(
        stat < critical,
        "{what}: chi-square {stat:.1} >= {critical:.1} (df {df})\ncounts   {counts:?}\nexpected {expected:?}"
    );
}

pub fn total_variation(a: &[f64], b: &[f64]) -> f64 {
    0.5 * a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>()
}
