//! Strict verification: lossless sampling (chi-square), the greedy prefix rule.
// A failed unwrap is how a test or benchmark reports broken setup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

mod common;

use common::*;
use mars_verify::{
    Decision, DraftProbs, Mode, NextKind, Sampling, Verifier, VerifyConfig, VerifyInput,
};

const SAMPLES: u64 = 40_000;

fn strict(sampling: Sampling) -> Verifier {
    Verifier::new(VerifyConfig {
        sampling,
        mode: Mode::Strict,
    })
    .unwrap()
}

/// The settings under which losslessness is checked: plain, hot, cold, and filtered.
fn sampling_cases() -> [Sampling; 5] {
    [
        Sampling::with_temperature(1.0),
        Sampling::with_temperature(1.7),
        Sampling::with_temperature(0.4),
        Sampling {
            temperature: 1.0,
            top_k: Some(3),
            top_p: 1.0,
        },
        Sampling {
            temperature: 0.8,
            top_k: None,
            top_p: 0.7,
        },
    ]
}

/// Emits one token by a k = 1 step: the accepted draft or the correction.
fn one_position_emission(
    verifier: &mut Verifier,
    logits: &[f32],
    q: Option<&[f32]>,
    fixed_draft: u32,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> u32 {
    let vocab = logits.len() / 2;
    let draft = match q {
        Some(q) => draw(&q.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(), rng) as u32,
        None => fixed_draft,
    };
    let input = VerifyInput {
        target_logits: logits,
        vocab,
        draft_tokens: &[draft],
        draft_probs: q.map_or(DraftProbs::OneHot, DraftProbs::Full),
    };
    let verdict = verifier.verify(&input, rng).unwrap();
    if verdict.accepted == 1 {
        draft
    } else {
        verdict.next.token
    }
}

#[test]
fn strict_sampling_emits_the_target_distribution_at_one_position() {
    let vocab = 7;
    for (case, sampling) in sampling_cases().into_iter().enumerate() {
        for draft_kind in ["full q", "one-hot q"] {
            let mut rng = rng(100 + case as u64);
            // Row 0 is what is tested; row 1 only feeds the bonus token.
            let mut target = logits(&mut rng, vocab, -2.0, 2.0);
            target.extend(logits(&mut rng, vocab, -2.0, 2.0));
            let q = to_f32(&random_dist(&mut rng, vocab));
            let p = reference_probs(&target[..vocab], &sampling);
            let mut verifier = strict(sampling);
            let mut counts = vec![0u64; vocab];
            for s in 0..SAMPLES {
                let q_row = (draft_kind == "full q").then_some(q.as_slice());
                // One-hot: a deterministic drafter that proposes a different token each time.
                let fixed = (s % vocab as u64) as u32;
                counts[one_position_emission(&mut verifier, &target, q_row, fixed, &mut rng)
                    as usize] += 1;
            }
            assert_matches_distribution(&counts, &p, &format!("{sampling:?}, {draft_kind}"));
        }
    }
}

/// The check above must be able to fail: resampling the correction from p instead of the
/// residual (a classic bug, and what MARS does at relaxed positions) is caught.
#[test]
fn chi_square_check_catches_a_biased_correction() {
    let vocab = 7;
    let mut rng = rng(7);
    let target = logits(&mut rng, vocab, -2.0, 2.0);
    let q = random_dist(&mut rng, vocab);
    let p = reference_probs(&target, &Sampling::with_temperature(1.0));
    let mut counts = vec![0u64; vocab];
    for _ in 0..SAMPLES {
        let x = draw(&q, &mut rng);
        let token = if unit(&mut rng) < p[x] / q[x] {
            x
        } else {
            draw(&p, &mut rng)
        };
        counts[token] += 1;
    }
    let (stat, df) = chi_square(&counts, &p);
    assert!(
        stat > chi_square_critical(df, 1e-4),
        "a biased sampler passed: {stat}"
    );
}

#[test]
fn strict_sampling_emits_the_target_distribution_over_two_positions() {
    // Target: p0(a) at the first position, p1(b | a) at the second. Drafter: q0(a), q1(b | a).
    // The emitted pair must follow p0(a) · p1(b | a), whether it came from one step (both kept,
    // or first kept and second corrected) or from two (first rejected, then a fresh step).
    let vocab = 4;
    for (case, sampling) in sampling_cases().into_iter().take(3).enumerate() {
        let mut rng = rng(200 + case as u64);
        let l0 = logits(&mut rng, vocab, -1.5, 1.5);
        let l1: Vec<Vec<f32>> = (0..vocab)
            .map(|_| logits(&mut rng, vocab, -1.5, 1.5))
            .collect();
        let bonus = logits(&mut rng, vocab, -1.5, 1.5);
        let q0 = random_dist(&mut rng, vocab);
        let q1: Vec<Vec<f64>> = (0..vocab).map(|_| random_dist(&mut rng, vocab)).collect();
        let mut verifier = strict(sampling);

        let mut counts = vec![0u64; vocab * vocab];
        for _ in 0..60_000 {
            let x0 = draw(&q0, &mut rng);
            let x1 = draw(&q1[x0], &mut rng);
            let target: Vec<f32> = [&l0[..], &l1[x0], &bonus].concat();
            let q: Vec<f32> = [to_f32(&q0), to_f32(&q1[x0])].concat();
            let input = VerifyInput {
                target_logits: &target,
                vocab,
                draft_tokens: &[x0 as u32, x1 as u32],
                draft_probs: DraftProbs::Full(&q),
            };
            let verdict = verifier.verify(&input, &mut rng).unwrap();
            let (a, b) = match verdict.accepted {
                2 => (x0, x1),
                1 => (x0, verdict.next.token as usize),
                _ => {
                    let a = verdict.next.token as usize;
                    let y = draw(&q1[a], &mut rng);
                    let target: Vec<f32> = [&l1[a][..], &bonus].concat();
                    let q = to_f32(&q1[a]);
                    let input = VerifyInput {
                        target_logits: &target,
                        vocab,
                        draft_tokens: &[y as u32],
                        draft_probs: DraftProbs::Full(&q),
                    };
                    let second = verifier.verify(&input, &mut rng).unwrap();
                    (
                        a,
                        if second.accepted == 1 {
                            y
                        } else {
                            second.next.token as usize
                        },
                    )
                }
            };
            counts[a * vocab + b] += 1;
        }
        let p0 = reference_probs(&l0, &sampling);
        let joint: Vec<f64> = (0..vocab * vocab)
            .map(|cell| {
                p0[cell / vocab] * reference_probs(&l1[cell / vocab], &sampling)[cell % vocab]
            })
            .collect();
        assert_matches_distribution(&counts, &joint, &format!("two positions, {sampling:?}"));
    }
}

#[test]
fn strict_bonus_token_follows_p() {
    let vocab = 6;
    let mut rng = rng(300);
    let target = logits(&mut rng, vocab, -2.0, 2.0);
    let sampling = Sampling {
        temperature: 1.3,
        top_k: Some(4),
        top_p: 1.0,
    };
    let mut verifier = strict(sampling);
    let mut counts = vec![0u64; vocab];
    for _ in 0..SAMPLES {
        let input = VerifyInput {
            target_logits: &target,
            vocab,
            draft_tokens: &[],
            draft_probs: DraftProbs::OneHot,
        };
        let verdict = verifier.verify(&input, &mut rng).unwrap();
        assert_eq!((verdict.accepted, verdict.next.kind), (0, NextKind::Bonus));
        counts[verdict.next.token as usize] += 1;
    }
    assert_matches_distribution(&counts, &reference_probs(&target, &sampling), "bonus");
}

#[test]
fn greedy_strict_keeps_exactly_the_longest_argmax_prefix() {
    let mut rng = rng(400);
    let mut verifier = strict(Sampling::GREEDY);
    for case in 0..2_000 {
        let vocab = 2 + below(&mut rng, 60);
        let k = below(&mut rng, 9);
        // Integer logits: ties are common, and the argmax is the lowest id among them.
        let target: Vec<f32> = (0..(k + 1) * vocab)
            .map(|_| below(&mut rng, 6) as f32)
            .collect();
        let rows: Vec<&[f32]> = target.chunks_exact(vocab).collect();
        let keep = below(&mut rng, k + 1);
        let draft: Vec<u32> = (0..k)
            .map(|i| {
                let best = argmax(rows[i]);
                if i < keep {
                    best
                } else {
                    (best + 1 + below(&mut rng, vocab - 1) as u32) % vocab as u32
                }
            })
            .collect();
        let input = VerifyInput {
            target_logits: &target,
            vocab,
            draft_tokens: &draft,
            draft_probs: DraftProbs::OneHot,
        };
        let verdict = verifier.verify(&input, &mut rng).unwrap();

        assert_eq!(verdict.accepted, keep, "case {case}");
        assert_eq!(verdict.next.token, argmax(rows[keep]), "case {case}");
        assert_eq!(
            verdict.next.kind,
            if keep == k {
                NextKind::Bonus
            } else {
                NextKind::Correction
            }
        );
        assert_eq!(verdict.positions.len(), (keep + 1).min(k));
        for (i, record) in verdict.positions.iter().enumerate() {
            let want = if i < keep {
                Decision::AcceptedExact
            } else {
                Decision::Rejected
            };
            assert_eq!(record.decision, want, "case {case} position {i}");
            assert!(!record.relaxed);
        }
        assert_eq!(verdict.emitted(&draft).len(), keep + 1);
        assert_eq!(verdict.ledger.distance, 0.0);
    }
}

#[test]
fn greedy_consumes_no_randomness() {
    use rand_core::Rng;
    let mut a = rng(9);
    let mut b = rng(9);
    let target = [0.0, 1.0, 0.5, 2.0, 0.0, 0.0];
    let input = VerifyInput {
        target_logits: &target,
        vocab: 3,
        draft_tokens: &[1],
        draft_probs: DraftProbs::OneHot,
    };
    strict(Sampling::GREEDY).verify(&input, &mut a).unwrap();
    assert_eq!(a.next_u64(), b.next_u64());
}

/// The public sampler draws from the same processed p the verifier uses: its histogram matches
/// p by chi-square, and the probabilities it reports are that p.
#[test]
fn sampler_draws_from_the_processed_distribution() {
    use mars_verify::Sampler;
    let logits = [2.0f32, 1.0, 0.5, -1.0, f32::NEG_INFINITY, 0.0];
    let sampling = Sampling {
        temperature: 0.8,
        top_k: Some(4),
        top_p: 1.0,
    };
    let mut sampler = Sampler::new(sampling).unwrap();
    let mut rng = rng(11);
    let mut probs = Vec::new();
    sampler
        .sample_with_probs(&logits, &mut rng, &mut probs)
        .unwrap();
    // Reference p: softmax(logits / T) over the 4 best, zero elsewhere.
    let mut expected = [0f64; 6];
    for i in [0usize, 1, 2, 5] {
        expected[i] = (f64::from(logits[i]) / 0.8).exp();
    }
    let total: f64 = expected.iter().sum();
    for (i, e) in expected.iter().enumerate() {
        assert!((f64::from(probs[i]) - e / total).abs() < 1e-6, "p[{i}]");
    }
    let n = 40_000;
    let mut counts = [0usize; 6];
    for _ in 0..n {
        counts[sampler.sample(&logits, &mut rng).unwrap() as usize] += 1;
    }
    assert_eq!(counts[3] + counts[4], 0, "filtered tokens were drawn");
    let chi2: f64 = [0usize, 1, 2, 5]
        .iter()
        .map(|&i| {
            let e = n as f64 * expected[i] / total;
            (counts[i] as f64 - e).powi(2) / e
        })
        .sum();
    // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
    assert!(chi2 < 16.27, "chi2 = {chi2}, counts {counts:?}");
    // Greedy: argmax, and errors name the bad logit.
    let mut greedy = Sampler::new(Sampling::GREEDY).unwrap();
    assert_eq!(greedy.sample(&logits, &mut rng).unwrap(), 0);
    assert!(greedy.sample(&[1.0, f32::NAN], &mut rng).is_err());
    assert!(greedy.sample(&[], &mut rng).is_err());
}
