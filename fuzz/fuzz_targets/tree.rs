//! Any bytes as a token-tree verification request: `Verifier::verify_tree` returns a verdict or
//! a typed error, never a panic, in every mode, greedy and sampling, with deterministic and
//! drawn children; a verdict's path is a chain of parent links from the root, no longer than
//! the tree, and its next token is in the vocabulary.
//!
//! Layout of an input: byte 0 the vocabulary (1–32), byte 1 the nodes (0–63), byte 2 the mode
//! and sampling, byte 3 whether drafter rows are given and how many rows of logits there are
//! (one more or fewer than needed now and then); then one byte per node for its token (ids up
//! to vocab, one past it allowed) and one for its parent (0: the root, else 1 + an index that
//! may be the node itself or later), then little-endian f32 logits cycled to fill the rows (NaN,
//! ±inf and ties included), the drafter's rows made from the same floats' magnitudes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mars_verify::{Mode, Sampling, TreeDraftProbs, TreeInput, Verifier, VerifyConfig};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

fuzz_target!(|data: &[u8]| {
    let [vocab, nodes, mode, shape, rest @ ..] = data else {
        return;
    };
    let vocab = usize::from(*vocab % 32) + 1;
    let n = usize::from(*nodes % 64);
    if rest.len() < 2 * n {
        return;
    }
    let (node_bytes, floats) = rest.split_at(2 * n);
    let tokens: Vec<u32> = node_bytes[..n]
        .iter()
        .map(|&b| u32::from(b) % (vocab as u32 + 1))
        .collect();
    let parents: Vec<Option<u32>> = node_bytes[n..]
        .iter()
        .map(|&b| b.checked_sub(1).map(|p| u32::from(p) % 64))
        .collect();
    let values: Vec<f32> = floats
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if values.is_empty() {
        return;
    }
    let rows = match shape % 16 {
        0 => n,
        1 => n + 2,
        _ => n + 1,
    };
    let target: Vec<f32> = values.iter().copied().cycle().take(rows * vocab).collect();
    // Drafter rows: |x| normalised per row (a row of zeros or non-finite values is refused).
    let mut q: Vec<f32> = values
        .iter()
        .map(|x| x.abs())
        .cycle()
        .take((n + 1) * vocab)
        .collect();
    for row in q.chunks_exact_mut(vocab) {
        let sum: f32 = row.iter().sum();
        if sum > 0.0 && sum.is_finite() {
            row.iter_mut().for_each(|x| *x /= sum);
        }
    }
    let sampling = if mode & 1 == 0 {
        Sampling::GREEDY
    } else {
        Sampling {
            temperature: 0.5 + f32::from(mode >> 4) / 8.0,
            top_k: (mode & 2 != 0).then_some(3),
            top_p: if mode & 4 != 0 { 0.8 } else { 1.0 },
        }
    };
    let mode = match (mode >> 3) % 3 {
        0 => Mode::Strict,
        1 => Mode::Paper { theta: 0.9 },
        _ => Mode::Margin { rho: 0.3 },
    };
    let Ok(mut verifier) = Verifier::new(VerifyConfig { sampling, mode }) else {
        return;
    };
    let input = TreeInput {
        target_logits: &target,
        vocab,
        tokens: &tokens,
        parents: &parents,
        draft_probs: if shape & 16 != 0 {
            TreeDraftProbs::Full(&q)
        } else {
            TreeDraftProbs::OneHot
        },
    };
    let mut rng = ChaCha8Rng::seed_from_u64(u64::from(*shape));
    if let Ok(v) = verifier.verify_tree(&input, &mut rng) {
        assert!(v.path.len() <= n);
        assert!((v.next.token as usize) < vocab);
        let mut parent = None;
        for &j in &v.path {
            assert_eq!(parents[j], parent);
            parent = Some(j as u32);
        }
        assert_eq!(v.emitted(&tokens).len(), v.path.len() + 1);
    }
});
