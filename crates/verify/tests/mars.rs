//! MARS: where it relaxes, what it may accept, its guards, and its ledger.
// A failed unwrap is how a test or benchmark reports broken setup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

mod common;

use common::*;
use mars_verify::{Decision, DraftProbs, Mode, Sampling, Verdict, Verifier, VerifyInput};
use rand_core::Rng;

fn sampling_for(case: usize) -> Sampling {
    [
        Sampling::GREEDY,
        Sampling::with_temperature(1.0),
        Sampling::with_temperature(0.3),
        Sampling {
            temperature: 1.0,
            top_k: Some(2),
            top_p: 1.0,
        },
        Sampling {
            temperature: 0.9,
            top_k: Some(5),
            top_p: 0.6,
        },
        Sampling {
            temperature: 0.0,
            top_k: None,
            top_p: 0.5,
        },
    ][case % 6]
}

/// A random step: logits with positive, negative and straddling rows, drafts that are often the
/// target's top-2 and sometimes not, and one-hot or full drafter rows.
struct Step {
    vocab: usize,
    target: Vec<f32>,
    draft: Vec<u32>,
    q: Option<Vec<f32>>,
}

fn random_step(rng: &mut rand_chacha::ChaCha8Rng) -> Step {
    let vocab = 2 + below(rng, 30);
    let k = below(rng, 7);
    let (lo, hi) = [(0.0, 30.0), (-8.0, 8.0), (-30.0, -0.5), (20.0, 24.0)][below(rng, 4)];
    let target = logits(rng, (k + 1) * vocab, lo, hi);
    let full = below(rng, 2) == 0;
    let mut q = Vec::new();
    let draft: Vec<u32> = target
        .chunks_exact(vocab)
        .take(k)
        .map(|row| {
            let rank = ranking(row);
            let dist = random_dist(rng, vocab);
            let token = if below(rng, 3) > 0 {
                rank[below(rng, 2.min(vocab))]
            } else {
                draw(&dist, rng)
            };
            q.extend(to_f32(&dist));
            token as u32
        })
        .collect();
    Step {
        vocab,
        target,
        draft,
        q: full.then_some(q),
    }
}

fn run(verifier: &mut Verifier, step: &Step, rng: &mut rand_chacha::ChaCha8Rng) -> Verdict {
    let input = VerifyInput {
        target_logits: &step.target,
        vocab: step.vocab,
        draft_tokens: &step.draft,
        draft_probs: step
            .q
            .as_deref()
            .map_or(DraftProbs::OneHot, DraftProbs::Full),
    };
    verifier.verify(&input, rng).unwrap()
}

#[test]
fn mars_that_never_relaxes_is_exactly_strict() {
    let mut cases = rng(500);
    let modes = [
        Mode::Paper { theta: 1.0001 },
        Mode::Paper { theta: 1.5 },
        Mode::Paper { theta: 1e6 },
        Mode::Margin { rho: 1.0001 },
        Mode::Margin { rho: 3.0 },
    ];
    for case in 0..3_000 {
        let step = random_step(&mut cases);
        let sampling = sampling_for(case);
        let mode = modes[case % modes.len()];
        let seed = cases.next_u64();
        let (mut rng_strict, mut rng_mars) = (rng(seed), rng(seed));
        let strict = run(
            &mut verifier(sampling, Mode::Strict),
            &step,
            &mut rng_strict,
        );
        let mars = run(&mut verifier(sampling, mode), &step, &mut rng_mars);
        assert_eq!(strict, mars, "case {case}: {mode:?} {sampling:?}");
        // Same randomness consumed, so the rest of a run stays identical too.
        assert_eq!(rng_strict.next_u64(), rng_mars.next_u64(), "case {case}");
    }
}

#[test]
fn mars_accepts_only_top2_tokens_with_nonzero_probability() {
    let mut cases = rng(600);
    let modes = [
        Mode::Paper { theta: 0.05 },
        Mode::Paper { theta: 0.9 },
        Mode::Margin { rho: 1e-4 },
        Mode::Margin { rho: 0.3 },
    ];
    let (mut relaxed_accepts, mut relaxed_rejects) = (0u32, 0u32);
    for case in 0..6_000 {
        let step = random_step(&mut cases);
        let sampling = sampling_for(case);
        let mode = modes[case % modes.len()];
        let k = step.draft.len();
        let verdict = run(&mut verifier(sampling, mode), &step, &mut cases);

        assert!(verdict.accepted <= k, "case {case}");
        assert_eq!(
            verdict.positions.len(),
            if verdict.accepted == k {
                k
            } else {
                verdict.accepted + 1
            }
        );
        assert!((verdict.next.token as usize) < step.vocab);
        for (i, record) in verdict.positions.iter().enumerate() {
            let row = &step.target[i * step.vocab..(i + 1) * step.vocab];
            let p = reference_probs(row, &sampling);
            let rank = ranking(row);
            let token = record.draft_token as usize;
            let kept = record.decision != Decision::Rejected;
            let in_top2 = token == rank[0]
                || (p[rank[1.min(rank.len() - 1)]] > 0.0 && token == rank[1.min(rank.len() - 1)]);
            // Never a token the processed target gives probability 0 (greedy: its own argmax
            // always has p > 0, and a kept runner-up must too).
            if kept {
                assert!(
                    p[token] > 0.0,
                    "case {case} pos {i}: kept a zero-probability token {token}"
                );
            }
            if record.relaxed {
                // The top-2 rule is deterministic: kept iff top-1 or a live runner-up.
                assert_eq!(
                    kept, in_top2,
                    "case {case} pos {i}: relaxed decision {record:?}"
                );
                if kept && token != rank[0] {
                    relaxed_accepts += 1;
                } else if !kept {
                    relaxed_rejects += 1;
                }
            } else {
                assert_ne!(
                    record.decision,
                    Decision::AcceptedRelaxed,
                    "case {case} pos {i}"
                );
            }
            if record.decision == Decision::AcceptedRelaxed {
                assert!(in_top2 && record.relaxed, "case {case} pos {i}");
            }
        }
    }
    // The property above must have been exercised, both ways.
    assert!(
        relaxed_accepts > 500 && relaxed_rejects > 100,
        "{relaxed_accepts} / {relaxed_rejects}"
    );
}

/// A greedy step with k = 1 drafting the runner-up of `row`.
fn greedy_runner_up(row: &[f32], mode: Mode, sampling: Sampling) -> Verdict {
    let mut target = row.to_vec();
    target.extend(vec![0.0; row.len()]);
    let runner_up = ranking(row)[1] as u32;
    let input = VerifyInput {
        target_logits: &target,
        vocab: row.len(),
        draft_tokens: &[runner_up],
        draft_probs: DraftProbs::OneHot,
    };
    verifier(sampling, mode)
        .verify(&input, &mut rng(0))
        .unwrap()
}

#[test]
fn paper_ratio_is_guarded_where_it_is_meaningless() {
    // z1 ≤ 0: the ratio is ≥ 1 for any gap (−1 and −1.05 → 1.05; −1 and −50 → 50).
    for row in [
        [-1.0, -1.05, -9.0],
        [-1.0, -50.0, -60.0],
        [0.0, -0.01, -3.0],
    ] {
        let verdict = greedy_runner_up(&row, Mode::Paper { theta: 0.9 }, Sampling::GREEDY);
        assert!(!verdict.positions[0].relaxed, "{row:?}");
        assert_eq!(verdict.positions[0].margin.logit_ratio, None);
        assert_eq!(verdict.accepted, 0);
    }
    // A runner-up removed by top-k is −inf: no ratio, no relaxation, even at a tiny θ.
    let top1_only = Sampling {
        temperature: 0.0,
        top_k: Some(1),
        top_p: 1.0,
    };
    let verdict = greedy_runner_up(&[5.0, 4.99, 0.0], Mode::Paper { theta: 0.01 }, top1_only);
    assert!(!verdict.positions[0].relaxed && verdict.positions[0].margin.top2.is_none());
    // A temperature so small that logit / T overflows to +inf: guarded, not NaN.
    let cold = Sampling::with_temperature(1e-38);
    let verdict = greedy_runner_up(&[10.0, 9.5, 0.0], Mode::Paper { theta: 0.5 }, cold);
    assert!(!verdict.positions[0].relaxed);
    // The same close call with positive logits does relax.
    let verdict = greedy_runner_up(&[2.0, 1.9, 0.0], Mode::PAPER, Sampling::GREEDY);
    assert!(verdict.positions[0].relaxed && verdict.accepted == 1);
    assert_eq!(verdict.positions[0].decision, Decision::AcceptedRelaxed);
}

#[test]
fn margin_mode_is_shift_invariant_and_the_paper_ratio_is_not() {
    let base = [2.0f32, 1.6, -1.0, 0.5];
    let decisions = |mode: Mode| -> Vec<bool> {
        [-50.0f32, -1.0, 0.0, 3.0, 100.0]
            .iter()
            .map(|&shift| {
                let row: Vec<f32> = base.iter().map(|&l| l + shift).collect();
                greedy_runner_up(&row, mode, Sampling::GREEDY).positions[0].relaxed
            })
            .collect()
    };
    // p2 / p1 = e^{−0.4} ≈ 0.67 whatever the shift.
    assert_eq!(decisions(Mode::Margin { rho: 0.6 }), vec![true; 5]);
    assert_eq!(decisions(Mode::Margin { rho: 0.7 }), vec![false; 5]);
    // z2 / z1 moves with the shift: guarded below 0, 0.8 at 0, 0.92 at +3, ~1 at +100.
    assert_eq!(
        decisions(Mode::Paper { theta: 0.9 }),
        vec![false, false, false, true, true]
    );
}

#[test]
fn the_same_target_relaxes_at_t0_and_t1_by_their_own_processed_logits() {
    // Paper mode uses logits / T: at T = 2 the ratio is unchanged, but probabilities flatten.
    let row = [4.0f32, 3.0, 0.0];
    let margin_t2 = greedy_runner_up(
        &row,
        Mode::Margin { rho: 0.5 },
        Sampling::with_temperature(2.0),
    );
    assert!(margin_t2.positions[0].relaxed); // e^{−0.5} ≈ 0.61
    let margin_t0 = greedy_runner_up(&row, Mode::Margin { rho: 0.5 }, Sampling::GREEDY);
    assert!(!margin_t0.positions[0].relaxed); // e^{−1} ≈ 0.37
    let paper_t2 = greedy_runner_up(
        &row,
        Mode::Paper { theta: 0.7 },
        Sampling::with_temperature(2.0),
    );
    assert_eq!(paper_t2.positions[0].margin.logit_ratio, Some(0.75));
}

#[test]
fn greedy_ledger_charges_the_probability_gap_of_a_kept_runner_up() {
    let row = [2.0f32, 1.9, 0.0];
    let verdict = greedy_runner_up(&row, Mode::PAPER, Sampling::GREEDY);
    let p = reference_probs(&row, &Sampling::GREEDY);
    assert!((verdict.ledger.distance - (p[0] - p[1])).abs() < 1e-6);
    assert_eq!(
        (
            verdict.ledger.relaxed_positions,
            verdict.ledger.relaxed_accepts
        ),
        (1, 1)
    );
}

/// The ledger's distance at a relaxed sampling position is TV(emitted, p). Checked by Monte
/// Carlo: draw the draft from q, verify, record what comes out.
#[test]
fn ledger_distance_is_the_total_variation_of_what_mars_emits() {
    let vocab = 6;
    let samples = 200_000u64;
    for case in 0..6u64 {
        let mut rng = rng(700 + case);
        let sampling = [
            Sampling::with_temperature(1.0),
            Sampling {
                temperature: 0.7,
                top_k: Some(4),
                top_p: 1.0,
            },
        ][case as usize % 2];
        let mut target = logits(&mut rng, vocab, 0.5, 3.0);
        target.extend(logits(&mut rng, vocab, 0.5, 3.0));
        let p = reference_probs(&target[..vocab], &sampling);
        let one_hot = case >= 4;
        let q = random_dist(&mut rng, vocab);
        let fixed_draft = ranking(&target[..vocab])[1] as u32; // the runner-up
        // ρ tiny: every position with a live runner-up relaxes.
        let mut mars = verifier(sampling, Mode::Margin { rho: 1e-6 });
        let q32 = to_f32(&q);
        let mut counts = vec![0u64; vocab];
        let mut ledger = None;
        for _ in 0..samples {
            let draft = if one_hot {
                fixed_draft
            } else {
                draw(&q, &mut rng) as u32
            };
            let input = VerifyInput {
                target_logits: &target,
                vocab,
                draft_tokens: &[draft],
                draft_probs: if one_hot {
                    DraftProbs::OneHot
                } else {
                    DraftProbs::Full(&q32)
                },
            };
            let verdict = mars.verify(&input, &mut rng).unwrap();
            assert!(verdict.positions[0].relaxed);
            let distance = verdict.positions[0].distance;
            assert!(
                ledger.is_none_or(|d| d == distance),
                "distance depends on p and q only"
            );
            ledger = Some(distance);
            counts[verdict.emitted(&[draft])[0] as usize] += 1;
        }
        let ledger = ledger.unwrap();
        let empirical: Vec<f64> = counts.iter().map(|&c| c as f64 / samples as f64).collect();
        let tv = total_variation(&empirical, &p);
        // Sampling noise of the TV estimate here is ~0.002.
        assert!(
            (tv - ledger).abs() < 0.01,
            "case {case}: empirical TV {tv:.4} vs ledger {ledger:.4}"
        );
        assert!(
            ledger > 0.02,
            "case {case}: the test needs a visible distance, got {ledger}"
        );
        // And the emitted distribution is the derived e(y) = q(y)[y ∈ A] + (1 − q(A)) p(y).
        let rank = ranking(&target[..vocab]);
        let a: Vec<usize> = rank[..2].iter().copied().filter(|&t| p[t] > 0.0).collect();
        let q_eff: Vec<f64> = if one_hot {
            (0..vocab)
                .map(|t| f64::from(u8::from(t == fixed_draft as usize)))
                .collect()
        } else {
            q.clone()
        };
        let q_a: f64 = a.iter().map(|&t| q_eff[t]).sum();
        let e: Vec<f64> = (0..vocab)
            .map(|y| if a.contains(&y) { q_eff[y] } else { 0.0 } + (1.0 - q_a) * p[y])
            .collect();
        assert_matches_distribution(&counts, &e, &format!("case {case}: emitted vs derived e"));
        assert!(
            (total_variation(&e, &p) - ledger).abs() < 1e-6,
            "case {case}: closed form"
        );
    }
}

#[test]
fn strict_has_an_empty_ledger() {
    let mut cases = rng(800);
    for case in 0..500 {
        let step = random_step(&mut cases);
        let verdict = run(
            &mut verifier(sampling_for(case), Mode::Strict),
            &step,
            &mut cases,
        );
        assert_eq!(verdict.ledger, Default::default());
        assert!(
            verdict
                .positions
                .iter()
                .all(|r| !r.relaxed && r.distance == 0.0)
        );
    }
}
