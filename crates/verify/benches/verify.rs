//! One verification step at real vocabulary sizes, in the worst case for the verifier: every
//! draft token is kept, so all k + 1 rows are processed.
//!
//! Run: `cargo bench -p mars-verify --bench verify`.
// A failed unwrap is how a test or benchmark reports broken setup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mars_verify::{DraftProbs, Mode, Sampling, Verifier, VerifyConfig, VerifyInput};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// Logits shaped like a language model's: a broad bulk with one clear leader.
fn logits(rows: usize, vocab: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let mut out: Vec<f32> = (0..rows * vocab)
        .map(|_| (rng.next_u32() % 1000) as f32 / 100.0)
        .collect();
    for row in out.chunks_exact_mut(vocab) {
        row[rng.next_u32() as usize % vocab] = 30.0;
    }
    out
}

fn argmax(row: &[f32]) -> u32 {
    row.iter()
        .enumerate()
        .fold(0, |best, (i, &v)| if v > row[best] { i } else { best }) as u32
}

fn softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = row.iter().map(|&v| f64::from(v - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|&e| (e / sum) as f32).collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("verify_step");
    for vocab in [49_152usize, 128_256] {
        for k in [4usize, 8, 16] {
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let target = logits(k + 1, vocab, &mut rng);
            // The drafter proposed the target's own choices, so every position is kept.
            let draft: Vec<u32> = target.chunks_exact(vocab).take(k).map(argmax).collect();
            let q: Vec<f32> = target
                .chunks_exact(vocab)
                .take(k)
                .flat_map(softmax)
                .collect();
            let cases = [
                ("greedy", Sampling::GREEDY, DraftProbs::OneHot, Mode::Strict),
                (
                    "t1_strict",
                    Sampling::with_temperature(1.0),
                    DraftProbs::Full(&q),
                    Mode::Strict,
                ),
                (
                    "t1_mars",
                    Sampling::with_temperature(1.0),
                    DraftProbs::Full(&q),
                    Mode::PAPER,
                ),
            ];
            for (name, sampling, draft_probs, mode) in cases {
                let mut verifier =
                    Verifier::new(VerifyConfig { sampling, mode }).expect("valid config");
                let input = VerifyInput {
                    target_logits: &target,
                    vocab,
                    draft_tokens: &draft,
                    draft_probs,
                };
                let id = BenchmarkId::new(name, format!("v{vocab}_k{k}"));
                group.bench_with_input(id, &input, |b, input| {
                    let mut rng = ChaCha8Rng::seed_from_u64(2);
                    b.iter(|| {
                        black_box(
                            verifier
                                .verify(black_box(input), &mut rng)
                                .expect("valid input"),
                        )
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
