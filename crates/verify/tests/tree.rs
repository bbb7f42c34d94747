//! Tree verification: a chain is the tree it should be (the chain verifier's verdict and random
//! stream, in every mode); greedy strict follows the target's argmax whatever the tree; sampling
//! strict over siblings is lossless (chi-square, deterministic and independently drawn
//! children, at the root and below it); MARS keeps a top-2 sibling where a chain would reject;
//! the ledger's moved mass is what the node emits (Monte Carlo); bad trees are typed errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

mod common;

use common::*;
use mars_verify::{
    Decision, DraftProbs, Mode, NextKind, Sampling, TreeDraftProbs, TreeInput, Verifier,
    VerifyError, VerifyInput,
};
use rand_chacha::ChaCha8Rng;

const SAMPLES: u64 = 40_000;

fn modes() -> [Mode; 4] {
    [
        Mode::Strict,
        Mode::Paper { theta: 0.9 },
        Mode::Paper { theta: 0.5 },
        Mode::Margin { rho: 0.3 },
    ]
}

/// Draws `c` children independently from `q`.
fn draw_kids(q: &[f64], c: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    (0..c).map(|_| draw(q, rng) as u32).collect()
}

#[test]
fn a_chain_is_verified_as_the_chain_verifier_does() {
    let vocab = 9;
    let mut rng = rng(7);
    let mut compared = 0;
    for case in 0..600 {
        let k = 1 + below(&mut rng, 5);
        // Narrow logits, so that MARS's criterion often holds.
        let target = logits(&mut rng, (k + 1) * vocab, 0.5, 3.0);
        let sampling = if case % 2 == 0 {
            Sampling::GREEDY
        } else {
            Sampling::with_temperature(1.0)
        };
        let full = case % 4 == 1;
        let q: Vec<f32> = (0..k)
            .flat_map(|_| to_f32(&random_dist(&mut rng, vocab)))
            .collect();
        let draft: Vec<u32> = (0..k).map(|_| below(&mut rng, vocab) as u32).collect();
        let parents: Vec<Option<u32>> =
            (0..k).map(|j| j.checked_sub(1).map(|p| p as u32)).collect();
        // The tree form's drafter rows: row i + 0 is the chain's row i (the last row unread).
        let mut tree_q = q.clone();
        tree_q.extend(std::iter::repeat_n(0.0, vocab));
        for mode in modes() {
            let mut v = verifier(sampling, mode);
            let seed = 1000 + case as u64;
            let chain = v
                .verify(
                    &VerifyInput {
                        target_logits: &target,
                        vocab,
                        draft_tokens: &draft,
                        draft_probs: if full {
                            DraftProbs::Full(&q)
                        } else {
                            DraftProbs::OneHot
                        },
                    },
                    &mut common::rng(seed),
                )
                .unwrap();
            let mut tree_rng = common::rng(seed);
            let tree = v
                .verify_tree(
                    &TreeInput {
                        target_logits: &target,
                        vocab,
                        tokens: &draft,
                        parents: &parents,
                        draft_probs: if full {
                            TreeDraftProbs::Full(&tree_q)
                        } else {
                            TreeDraftProbs::OneHot
                        },
                    },
                    &mut tree_rng,
                )
                .unwrap();
            assert_eq!(
                tree.path,
                (0..chain.accepted).collect::<Vec<_>>(),
                "{mode:?}"
            );
            assert_eq!(tree.next, chain.next, "{mode:?}");
            assert_eq!(tree.positions.len(), chain.positions.len());
            for (t, c) in tree.positions.iter().zip(&chain.positions) {
                assert_eq!(
                    (t.draft_token, t.decision, t.relaxed, t.margin),
                    (c.draft_token, c.decision, c.relaxed, c.margin)
                );
                assert!((t.distance - c.distance).abs() < 1e-9, "{t:?} {c:?}");
            }
            assert_eq!(
                tree.ledger.relaxed_positions,
                chain.ledger.relaxed_positions
            );
            assert_eq!(tree.ledger.relaxed_accepts, chain.ledger.relaxed_accepts);
            // The same numbers drawn: both generators are at the same place afterwards.
            let mut chain_rng = common::rng(seed);
            v.verify(
                &VerifyInput {
                    target_logits: &target,
                    vocab,
                    draft_tokens: &draft,
                    draft_probs: if full {
                        DraftProbs::Full(&q)
                    } else {
                        DraftProbs::OneHot
                    },
                },
                &mut chain_rng,
            )
            .unwrap();
            assert_eq!(unit(&mut tree_rng), unit(&mut chain_rng), "{mode:?}");
            compared += 1;
        }
    }
    assert_eq!(compared, 2400);
}

/// A random tree of `n` nodes over `vocab` tokens, with the target's argmax planted as a child
/// of about half the nodes so that greedy walks go deep.
fn random_tree(
    rng: &mut ChaCha8Rng,
    n: usize,
    vocab: usize,
) -> (Vec<Option<u32>>, Vec<u32>, Vec<f32>) {
    let mut parents = Vec::with_capacity(n);
    for j in 0..n {
        parents.push(if j == 0 || below(rng, 4) == 0 {
            None
        } else {
            Some(below(rng, j) as u32)
        });
    }
    let target = logits(rng, (n + 1) * vocab, -3.0, 3.0);
    let mut tokens: Vec<u32> = (0..n).map(|_| below(rng, vocab) as u32).collect();
    for j in 0..n {
        if below(rng, 2) == 0 {
            let row = parents[j].map_or(0, |p| p as usize + 1);
            tokens[j] = argmax(&target[row * vocab..(row + 1) * vocab]);
        }
    }
    (parents, tokens, target)
}

#[test]
fn greedy_strict_follows_the_argmax_through_any_tree() {
    let vocab = 6;
    let mut rng = rng(11);
    let mut deepest = 0;
    for _ in 0..500 {
        let n = 1 + below(&mut rng, 24);
        let (parents, tokens, target) = random_tree(&mut rng, n, vocab);
        let v = &mut verifier(Sampling::GREEDY, Mode::Strict);
        let verdict = v
            .verify_tree(
                &TreeInput {
                    target_logits: &target,
                    vocab,
                    tokens: &tokens,
                    parents: &parents,
                    draft_probs: TreeDraftProbs::OneHot,
                },
                &mut common::rng(0),
            )
            .unwrap();
        // The reference walk: at each row, the first child holding the row's argmax.
        let mut row = 0;
        let mut expected = Vec::new();
        let next = loop {
            let best = argmax(&target[row * vocab..(row + 1) * vocab]);
            let kid = (0..n)
                .find(|&j| parents[j].map_or(0, |p| p as usize + 1) == row && tokens[j] == best);
            match kid {
                Some(j) => {
                    expected.push(j);
                    row = j + 1;
                }
                None => break best,
            }
        };
        assert_eq!(verdict.path, expected);
        assert_eq!(verdict.next.token, next);
        // Target-only greedy would emit the same tokens: each is its row's argmax.
        let emitted = verdict.emitted(&tokens);
        assert_eq!(emitted.len(), expected.len() + 1);
        assert!(
            verdict
                .positions
                .iter()
                .all(|p| p.decision != Decision::AcceptedRelaxed)
        );
        deepest = deepest.max(expected.len());
    }
    assert!(
        deepest >= 4,
        "the walks never went deep: the test would be weak"
    );
}

/// The first emitted token of a one-level tree: the kept child or the correction.
fn first_token(
    v: &mut Verifier,
    target: &[f32],
    vocab: usize,
    kids: &[u32],
    q: Option<&[f32]>,
    rng: &mut ChaCha8Rng,
) -> u32 {
    let parents = vec![None; kids.len()];
    let verdict = v
        .verify_tree(
            &TreeInput {
                target_logits: target,
                vocab,
                tokens: kids,
                parents: &parents,
                draft_probs: q.map_or(TreeDraftProbs::OneHot, TreeDraftProbs::Full),
            },
            rng,
        )
        .unwrap();
    verdict.emitted(kids)[0]
}

#[test]
fn strict_sampling_over_siblings_emits_the_target_distribution() {
    let vocab = 7;
    for (case, sampling) in [
        Sampling::with_temperature(1.0),
        Sampling::with_temperature(0.6),
        Sampling {
            temperature: 1.0,
            top_k: Some(4),
            top_p: 0.9,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = rng(300 + case as u64);
        let row0 = logits(&mut rng, vocab, -2.0, 2.0);
        let p = reference_probs(&row0, &sampling);
        let q64 = random_dist(&mut rng, vocab);
        let c = 3;
        // Rows: the root's, then one per child (only feeding bonus tokens).
        let mut target = row0.clone();
        target.extend(logits(&mut rng, c * vocab, -2.0, 2.0));
        let mut q = to_f32(&q64);
        q.extend(std::iter::repeat_n(0.0, c * vocab));
        let v = &mut verifier(sampling, Mode::Strict);

        // Independently drawn children (duplicates allowed), each tested against the residual.
        let mut counts = vec![0u64; vocab];
        for _ in 0..SAMPLES {
            let kids = draw_kids(&q64, c, &mut rng);
            counts[first_token(v, &target, vocab, &kids, Some(&q), &mut rng) as usize] += 1;
        }
        assert_matches_distribution(&counts, &p, &format!("case {case}, drawn children"));

        // Deterministic children: the drafter's top 3, and a fixed set with a repeat.
        for kids in [[1u32, 4, 0], [5, 5, 2]] {
            let mut counts = vec![0u64; vocab];
            for _ in 0..SAMPLES {
                counts[first_token(v, &target, vocab, &kids, None, &mut rng) as usize] += 1;
            }
            assert_matches_distribution(&counts, &p, &format!("case {case}, children {kids:?}"));
        }
    }
}

#[test]
fn strict_sampling_below_a_kept_node_emits_that_node_s_distribution() {
    // Root children a = 0 and b = 1; a has children 2, 3, 4; b has child 0. Given that a was
    // kept, the next token must follow the target's row for a.
    let vocab = 6;
    let sampling = Sampling::with_temperature(1.0);
    let mut rng = rng(5);
    let tokens = [0u32, 1, 2, 3, 4, 0];
    let parents = [None, None, Some(0), Some(0), Some(0), Some(1)];
    let mut target = logits(&mut rng, 7 * vocab, -1.5, 1.5);
    // Make a likely at the root, so that many trials condition on it.
    target[0] = 3.0;
    let p_a = reference_probs(&target[vocab..2 * vocab], &sampling);
    let v = &mut verifier(sampling, Mode::Strict);
    let mut counts = vec![0u64; vocab];
    let mut kept_a = 0;
    for _ in 0..SAMPLES * 2 {
        let verdict = v
            .verify_tree(
                &TreeInput {
                    target_logits: &target,
                    vocab,
                    tokens: &tokens,
                    parents: &parents,
                    draft_probs: TreeDraftProbs::OneHot,
                },
                &mut rng,
            )
            .unwrap();
        if verdict.path.first() == Some(&0) {
            kept_a += 1;
            counts[verdict.emitted(&tokens)[1] as usize] += 1;
        }
    }
    assert!(kept_a > SAMPLES, "a kept {kept_a} times");
    assert_matches_distribution(&counts, &p_a, "the token after a kept node");
}

#[test]
fn mars_keeps_a_top2_sibling_where_a_chain_rejects() {
    // Row 0: tokens 0 and 1 nearly tied (z2/z1 = 0.96 > θ 0.9), token 2 far below.
    let vocab = 4;
    let mut target = vec![5.0, 4.8, 0.5, 0.1];
    target.extend([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    let tokens = [2u32, 1];
    let parents = [None, None];
    let input = TreeInput {
        target_logits: &target,
        vocab,
        tokens: &tokens,
        parents: &parents,
        draft_probs: TreeDraftProbs::OneHot,
    };
    for sampling in [Sampling::GREEDY, Sampling::with_temperature(1.0)] {
        let mars = verifier(sampling, Mode::Paper { theta: 0.9 })
            .verify_tree(&input, &mut rng(1))
            .unwrap();
        // Token 2 is outside the top-2: skipped; token 1 (the runner-up) is kept.
        assert_eq!(mars.path, [1], "{sampling:?}");
        assert_eq!(mars.positions[0].decision, Decision::AcceptedRelaxed);
        assert!(mars.positions[0].relaxed);
        assert_eq!(mars.ledger.relaxed_accepts, 1);
        assert_eq!(mars.next.kind, NextKind::Bonus);
        let p = reference_probs(&target[..vocab], &Sampling::with_temperature(1.0));
        // Greedy: p1 − p2; sampling with deterministic children: 1 − p(kept).
        let expected = if sampling.is_greedy() {
            p[0] - p[1]
        } else {
            1.0 - p[1]
        };
        assert!(
            (mars.ledger.distance - expected).abs() < 1e-6,
            "{sampling:?}"
        );
    }
    // Greedy MARS prefers the argmax child wherever it is among the siblings.
    let tokens = [1u32, 0];
    let greedy = verifier(Sampling::GREEDY, Mode::Paper { theta: 0.9 })
        .verify_tree(
            &TreeInput {
                tokens: &tokens,
                ..input
            },
            &mut rng(1),
        )
        .unwrap();
    assert_eq!(
        (greedy.path.as_slice(), greedy.positions[0].decision),
        ([1usize].as_slice(), Decision::AcceptedExact)
    );
    assert_eq!(greedy.ledger.distance, 0.0);
}

#[test]
fn the_ledger_is_the_moved_mass_of_independently_drawn_children() {
    // A relaxed root (z2/z1 > 0.5) whose c children are drawn from q: the empirical distribution
    // of the first emitted token is e, and TV(e, p) must match the ledger's figure.
    let vocab = 5;
    let sampling = Sampling::with_temperature(1.0);
    let mut target = vec![2.0, 1.6, 1.0, 0.3, 0.2];
    target.extend(std::iter::repeat_n(0.0, 3 * vocab));
    let p = reference_probs(&target[..vocab], &sampling);
    let q64 = vec![0.1, 0.15, 0.45, 0.2, 0.1];
    let mut q = to_f32(&q64);
    q.extend(std::iter::repeat_n(0.0, 3 * vocab));
    let mut rng = rng(9);
    let v = &mut verifier(sampling, Mode::Paper { theta: 0.5 });
    let parents = [None; 3];
    let mut counts = vec![0u64; vocab];
    let mut ledger = 0.0;
    let n = 200_000u64;
    for _ in 0..n {
        let kids = draw_kids(&q64, 3, &mut rng);
        let verdict = v
            .verify_tree(
                &TreeInput {
                    target_logits: &target,
                    vocab,
                    tokens: &kids,
                    parents: &parents,
                    draft_probs: TreeDraftProbs::Full(&q),
                },
                &mut rng,
            )
            .unwrap();
        assert!(verdict.positions[0].relaxed);
        ledger = verdict.ledger.distance;
        counts[verdict.emitted(&kids)[0] as usize] += 1;
    }
    let e: Vec<f64> = counts.iter().map(|&c| c as f64 / n as f64).collect();
    let tv = total_variation(&e, &p);
    eprintln!("ledger {ledger:.4}, Monte Carlo TV {tv:.4}");
    assert!(
        ledger > 0.05,
        "a relaxed node that moved nothing: the test would be weak"
    );
    assert!((tv - ledger).abs() < 0.01, "ledger {ledger}, measured {tv}");
}

#[test]
fn bad_trees_are_typed_errors() {
    let vocab = 3;
    let target = vec![0.0f32; 3 * vocab];
    let v = &mut verifier(Sampling::with_temperature(1.0), Mode::Strict);
    let tokens = [0u32, 1];
    let ok = TreeInput {
        target_logits: &target,
        vocab,
        tokens: &tokens,
        parents: &[None, Some(0)],
        draft_probs: TreeDraftProbs::OneHot,
    };
    assert!(v.verify_tree(&ok, &mut rng(0)).is_ok());
    let err = |input: TreeInput<'_>| v.clone().verify_tree(&input, &mut rng(0)).unwrap_err();
    assert_eq!(
        err(TreeInput {
            parents: &[None, Some(1)],
            ..ok
        }),
        VerifyError::TreeParent { node: 1, parent: 1 }
    );
    assert_eq!(
        err(TreeInput {
            parents: &[None],
            ..ok
        }),
        VerifyError::TreeParents { len: 1, nodes: 2 }
    );
    assert_eq!(
        err(TreeInput {
            target_logits: &target[..8],
            ..ok
        }),
        VerifyError::LogitsShape {
            len: 8,
            k: 2,
            vocab: 3
        }
    );
    assert_eq!(
        err(TreeInput {
            tokens: &[0, 3],
            ..ok
        }),
        VerifyError::DraftTokenOutOfVocab {
            position: 1,
            token: 3,
            vocab: 3
        }
    );
    let mut nan = target.clone();
    nan[4] = f32::NAN;
    assert!(matches!(
        err(TreeInput {
            target_logits: &nan,
            ..ok
        }),
        VerifyError::NonFiniteLogit {
            position: 1,
            token: 1,
            ..
        }
    ));
    assert_eq!(
        err(TreeInput {
            draft_probs: TreeDraftProbs::Full(&[0.5; 6]),
            ..ok
        }),
        VerifyError::TreeDraftProbsShape {
            len: 6,
            nodes: 2,
            vocab: 3
        }
    );
    // Node 0's row gives its child (node 1, token 1) no probability.
    let q = [0.5, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    assert_eq!(
        err(TreeInput {
            draft_probs: TreeDraftProbs::Full(&q),
            ..ok
        }),
        VerifyError::DraftTokenHasZeroProb {
            position: 1,
            token: 1
        }
    );
}

#[test]
fn random_trees_never_panic_and_mostly_verify() {
    // Shapes, parents, ties, −inf and NaN drawn at random: every request is a verdict or a
    // typed error, and a good share are verdicts (so the test is not vacuous).
    let mut rng = rng(77);
    let mut verdicts = 0;
    let total = 3000;
    for _ in 0..total {
        let vocab = 1 + below(&mut rng, 6);
        let n = below(&mut rng, 8);
        let rows = n + 1 + usize::from(below(&mut rng, 10) == 0);
        let target: Vec<f32> = (0..rows * vocab)
            .map(|_| match below(&mut rng, 40) {
                0 => f32::NEG_INFINITY,
                1 => f32::NAN,
                2 => 1.0,
                _ => uniform_f32(&mut rng, -2.0, 2.0),
            })
            .collect();
        let tokens: Vec<u32> = (0..n).map(|_| below(&mut rng, vocab + 1) as u32).collect();
        let parents: Vec<Option<u32>> = (0..n)
            .map(|j| (j > 0 && below(&mut rng, 2) == 0).then(|| below(&mut rng, j + 1) as u32))
            .collect();
        let q: Vec<f32> = (0..(n + 1) * vocab).map(|_| 1.0 / vocab as f32).collect();
        let sampling = if below(&mut rng, 2) == 0 {
            Sampling::GREEDY
        } else {
            Sampling::with_temperature(1.0)
        };
        let mode = modes()[below(&mut rng, 4)];
        let probs = if below(&mut rng, 2) == 0 {
            TreeDraftProbs::OneHot
        } else {
            TreeDraftProbs::Full(&q)
        };
        let r = verifier(sampling, mode).verify_tree(
            &TreeInput {
                target_logits: &target,
                vocab,
                tokens: &tokens,
                parents: &parents,
                draft_probs: probs,
            },
            &mut rng,
        );
        if let Ok(v) = r {
            verdicts += 1;
            assert!(v.path.len() <= n);
            assert!((v.next.token as usize) < vocab);
            // The path is a chain of parent links from the root.
            for (d, &j) in v.path.iter().enumerate() {
                let parent = if d == 0 {
                    None
                } else {
                    Some(v.path[d - 1] as u32)
                };
                assert_eq!(parents[j], parent);
            }
        }
    }
    eprintln!("{verdicts} of {total} random trees verified");
    assert!(verdicts > total / 4, "only {verdicts} of {total} verified");
}

#[test]
fn a_tree_drafters_children_are_the_most_probable_tokens_in_order() {
    let mut rng = rng(21);
    let mut out = Vec::new();
    for case in 0..400 {
        let vocab = 1 + below(&mut rng, 40);
        // Coarse logits, so that ties are common; −inf where a drafter lacks an id.
        let mut row: Vec<f32> = (0..vocab).map(|_| below(&mut rng, 5) as f32).collect();
        row[below(&mut rng, vocab)] = f32::NEG_INFINITY;
        if row.iter().all(|l| *l == f32::NEG_INFINITY) {
            row[0] = 0.0;
        }
        let sampling = match case % 4 {
            0 => Sampling::GREEDY,
            1 => Sampling::with_temperature(0.7),
            2 => Sampling {
                top_k: Some(3),
                ..Sampling::with_temperature(1.0)
            },
            _ => Sampling {
                top_p: 0.6,
                ..Sampling::with_temperature(1.3)
            },
        };
        let c = below(&mut rng, 6);
        let mut sampler = mars_verify::Sampler::new(sampling).unwrap();
        sampler.top(&row, c, &mut out).unwrap();
        // Reference: p from the f64 reference (greedy ranks by T = 1), the ranking by logit
        // then id, kept while p > 0.
        let reference_sampling = if sampling.is_greedy() {
            Sampling::with_temperature(1.0)
        } else {
            sampling
        };
        let p = reference_probs(&row, &reference_sampling);
        let want: Vec<u32> = ranking(&row)
            .into_iter()
            .filter(|&t| p[t] > 0.0)
            .take(c)
            .map(|t| t as u32)
            .collect();
        let got: Vec<u32> = out.iter().map(|&(t, _)| t).collect();
        assert_eq!(got, want, "case {case}: {row:?} {sampling:?} c {c}");
        for &(t, q) in &out {
            assert!((q - p[t as usize]).abs() < 1e-6, "case {case}: p({t}) {q}");
        }
    }
    let mut sampler = mars_verify::Sampler::new(Sampling::GREEDY).unwrap();
    assert!(sampler.top(&[f32::NAN, 1.0], 2, &mut out).is_err());
}
