//! Greedy verification from row summaries (what a GPU reads back instead of whole rows) gives
//! the verdict the rows themselves give: chains and trees, strict and every MARS mode, rows with
//! ties, negative and masked logits; the same errors for the same bad rows; sampling refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{below, logits, ranking, rng};
use mars_verify::{
    DraftProbs, Mode, RowSummary, Sampling, TreeDraftProbs, TreeInput, Verifier, VerifyConfig,
    VerifyError, VerifyInput,
};

/// A row's summary computed the slow obvious way (a sort, an f64 sum).
fn summary(row: &[f32]) -> RowSummary {
    let bad = row
        .iter()
        .position(|v| v.is_nan() || *v == f32::INFINITY)
        .map(|i| (i as u32, row[i]));
    let order = ranking(row);
    let (top1, z1) = (order[0] as u32, row[order[0]]);
    let second = order.get(1).filter(|&&i| row[i] > f32::NEG_INFINITY);
    let sum = row
        .iter()
        .map(|&v| (f64::from(v) - f64::from(z1)).exp())
        .sum();
    RowSummary {
        top1,
        z1,
        top2: second.map(|&i| i as u32),
        z2: second.map_or(f32::NEG_INFINITY, |&i| row[i]),
        sum,
        bad,
    }
}

/// Rows of `vocab` logits: random, with ties for the top, negative rows and masked tails.
fn rows(seed: u64, n: usize, vocab: usize) -> Vec<f32> {
    let mut r = rng(seed);
    let mut all = Vec::new();
    for i in 0..n {
        let mut row = match i % 4 {
            0 => logits(&mut r, vocab, -3.0, 9.0),
            1 => logits(&mut r, vocab, -12.0, -2.0),
            _ => logits(&mut r, vocab, 0.0, 4.0),
        };
        if i % 3 == 1 {
            // A tie for first place.
            let top = ranking(&row)[0];
            let other = (top + 1 + below(&mut r, vocab - 1)) % vocab;
            row[other] = row[top];
        }
        if i % 5 == 2 {
            for v in &mut row[vocab / 2..] {
                *v = f32::NEG_INFINITY;
            }
        }
        all.extend(row);
    }
    all
}

fn verifier(mode: Mode) -> Verifier {
    Verifier::new(VerifyConfig {
        mode,
        sampling: Sampling::GREEDY,
    })
    .unwrap()
}

const MODES: [Mode; 4] = [
    Mode::Strict,
    Mode::Paper { theta: 0.9 },
    Mode::Paper { theta: 0.5 },
    Mode::Margin { rho: 0.3 },
];

#[test]
fn a_chain_from_summaries_gets_the_rows_verdict() {
    let vocab = 300;
    let mut relaxed = 0;
    for seed in 0..300 {
        let k = 1 + seed as usize % 6;
        let logits = rows(seed, k + 1, vocab);
        let sums: Vec<RowSummary> = logits.chunks_exact(vocab).map(summary).collect();
        let mut r = rng(seed + 1000);
        // Drafts that match the argmax, the runner-up or neither.
        let draft: Vec<u32> = (0..k)
            .map(|i| {
                let order = ranking(&logits[i * vocab..(i + 1) * vocab]);
                order[below(&mut r, 3)] as u32
            })
            .collect();
        for mode in MODES {
            let want = verifier(mode)
                .verify(
                    &VerifyInput {
                        target_logits: &logits,
                        vocab,
                        draft_tokens: &draft,
                        draft_probs: DraftProbs::OneHot,
                    },
                    &mut rng(0),
                )
                .unwrap();
            let got = verifier(mode)
                .verify_summaries(&sums, vocab, &draft, &mut rng(0))
                .unwrap();
            assert_eq!(got.accepted, want.accepted, "seed {seed} {mode:?}");
            assert_eq!(got.next.token, want.next.token);
            assert_eq!(got.next.kind, want.next.kind);
            assert_eq!(got.ledger.relaxed_positions, want.ledger.relaxed_positions);
            assert_eq!(got.ledger.relaxed_accepts, want.ledger.relaxed_accepts);
            assert!((got.ledger.distance - want.ledger.distance).abs() < 1e-6);
            for (g, w) in got.positions.iter().zip(&want.positions) {
                assert_eq!((g.decision, g.relaxed), (w.decision, w.relaxed), "{mode:?}");
                assert_eq!(g.margin.top1.token, w.margin.top1.token);
                assert_eq!(
                    g.margin.top2.map(|c| c.token),
                    w.margin.top2.map(|c| c.token)
                );
                assert_eq!(g.margin.logit_ratio, w.margin.logit_ratio);
                assert!((g.margin.top1.prob - w.margin.top1.prob).abs() < 1e-6);
                assert!((g.margin.prob_ratio - w.margin.prob_ratio).abs() < 1e-6);
            }
            relaxed += got.ledger.relaxed_accepts;
        }
    }
    assert!(
        relaxed > 50,
        "MARS kept a runner-up only {relaxed} times: the test has no power"
    );
}

#[test]
fn a_tree_from_summaries_gets_the_rows_verdict() {
    let vocab = 200;
    for seed in 0..200 {
        let mut r = rng(seed + 7);
        let n = 2 + below(&mut r, 10);
        let parents: Vec<Option<u32>> = (0..n)
            .map(|j| (j > 0 && below(&mut r, 3) > 0).then(|| below(&mut r, j) as u32))
            .collect();
        let logits = rows(seed + 50, n + 1, vocab);
        // Each node's token: its parent row's argmax, runner-up or another token.
        let tokens: Vec<u32> = parents
            .iter()
            .map(|p| {
                let row = p.map_or(0, |p| p as usize + 1);
                ranking(&logits[row * vocab..(row + 1) * vocab])[below(&mut r, 3)] as u32
            })
            .collect();
        let sums: Vec<RowSummary> = logits.chunks_exact(vocab).map(summary).collect();
        for mode in MODES {
            let want = verifier(mode)
                .verify_tree(
                    &TreeInput {
                        target_logits: &logits,
                        vocab,
                        tokens: &tokens,
                        parents: &parents,
                        draft_probs: TreeDraftProbs::OneHot,
                    },
                    &mut rng(0),
                )
                .unwrap();
            let got = verifier(mode)
                .verify_tree_summaries(&sums, vocab, &tokens, &parents, &mut rng(0))
                .unwrap();
            assert_eq!(got.path, want.path, "seed {seed} {mode:?}");
            assert_eq!(got.next.token, want.next.token);
            assert_eq!(got.ledger.relaxed_accepts, want.ledger.relaxed_accepts);
            assert!((got.ledger.distance - want.ledger.distance).abs() < 1e-6);
        }
    }
}

#[test]
fn bad_summaries_get_the_rows_errors() {
    let vocab = 50;
    let mut logits = rows(9, 3, vocab);
    logits[vocab + 7] = f32::NAN;
    let sums: Vec<RowSummary> = logits.chunks_exact(vocab).map(summary).collect();
    let draft = [1, 2];
    let full = verifier(Mode::Strict).verify(
        &VerifyInput {
            target_logits: &logits,
            vocab,
            draft_tokens: &draft,
            draft_probs: DraftProbs::OneHot,
        },
        &mut rng(0),
    );
    let from_sums = verifier(Mode::Strict).verify_summaries(&sums, vocab, &draft, &mut rng(0));
    assert!(matches!(
        full,
        Err(VerifyError::NonFiniteLogit {
            position: 1,
            token: 7,
            ..
        })
    ));
    assert!(matches!(
        from_sums,
        Err(VerifyError::NonFiniteLogit {
            position: 1,
            token: 7,
            ..
        })
    ));

    let good: Vec<RowSummary> = rows(9, 3, vocab).chunks_exact(vocab).map(summary).collect();
    let v =
        |s: &[RowSummary]| verifier(Mode::Strict).verify_summaries(s, vocab, &draft, &mut rng(0));
    assert!(v(&good).is_ok());
    assert!(matches!(
        v(&good[..2]),
        Err(VerifyError::SummaryRows { len: 2, rows: 3 })
    ));
    let mut above = good.clone();
    above[0].z2 = above[0].z1 + 1.0;
    assert!(matches!(
        v(&above),
        Err(VerifyError::BadSummary { position: 0, .. })
    ));
    let mut masked = good.clone();
    masked[2].z1 = f32::NEG_INFINITY;
    assert!(matches!(
        v(&masked),
        Err(VerifyError::NoValidToken { position: 2 })
    ));
    let mut outside = good.clone();
    outside[1].top1 = vocab as u32;
    assert!(matches!(
        v(&outside),
        Err(VerifyError::BadSummary { position: 1, .. })
    ));
    let mut low = good;
    low[0].sum = 0.5;
    assert!(matches!(
        v(&low),
        Err(VerifyError::BadSummary { position: 0, .. })
    ));

    let sampling = Verifier::new(VerifyConfig {
        mode: Mode::Strict,
        sampling: Sampling::with_temperature(0.7),
    })
    .unwrap()
    .verify_summaries(&sums, vocab, &draft, &mut rng(0));
    assert!(matches!(
        sampling,
        Err(VerifyError::SummaryNotGreedy { .. })
    ));
}
