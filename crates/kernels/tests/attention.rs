//! The attention kernel against an exact f64 softmax attention; a row's output bit-identical
//! whether it is computed alone or among others and on any thread count; bad shapes refused.
//! Also the Q8_0 conversion of weights of other types.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_kernels::{BLOCK, Heads, Isa, KernelError, Kernels, QMatrix, WeightType};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

fn values(n: usize, scale: f32, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..n)
        .map(|_| ((rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale)
        .collect()
}

const HEADS: Heads = Heads {
    heads: 6,
    kv_heads: 2,
    head_dim: 20, // not a multiple of the 8-lane dot product: the tail is exercised
};

/// Exact causal GQA attention in f64: q `[t, heads, hd]` at positions start.., kv `[end, kv, hd]`.
fn reference(h: Heads, start: usize, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
    let hd = h.head_dim;
    let t = q.len() / (h.heads * hd);
    let group = h.heads / h.kv_heads;
    let mut out = vec![0f64; q.len()];
    for r in 0..t {
        for head in 0..h.heads {
            let qv = &q[(r * h.heads + head) * hd..][..hd];
            let kvh = head / group;
            let at = |j: usize| (j * h.kv_heads + kvh) * hd;
            let scores: Vec<f64> = (0..=start + r)
                .map(|j| {
                    let dot: f64 = (0..hd)
                        .map(|i| f64::from(qv[i]) * f64::from(k[at(j) + i]))
                        .sum();
                    dot / (hd as f64).sqrt()
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = exps.iter().sum();
            for i in 0..hd {
                out[(r * h.heads + head) * hd + i] = exps
                    .iter()
                    .enumerate()
                    .map(|(j, p)| p / sum * f64::from(v[at(j) + i]))
                    .sum();
            }
        }
    }
    out
}

#[test]
fn attention_matches_exact_f64() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (start, t) = (37, 5);
    let kv = (start + t) * HEADS.kv_heads * HEADS.head_dim;
    // Scores up to ~±20 before the softmax, so the max subtraction matters.
    let q = values(t * HEADS.heads * HEADS.head_dim, 2.0, &mut rng);
    let k = values(kv + 100, 2.0, &mut rng); // longer than filled: a cache with room left
    let v = values(kv + 100, 1.0, &mut rng);
    for threads in [1, 2] {
        let kernels = Kernels::new(threads).unwrap();
        let mut out = vec![0f32; q.len()];
        kernels
            .attention(HEADS, start, &q, &k, &v, &mut out)
            .unwrap();
        let want = reference(HEADS, start, &q, &k, &v);
        for (i, (&o, &w)) in out.iter().zip(&want).enumerate() {
            // f32 accumulation over ≤ 42 positions of values ≤ 1: 1e-5 absolute is ~100 ulps.
            assert!((f64::from(o) - w).abs() < 1e-5, "{i}: {o} vs {w}");
        }
    }
}

#[test]
fn a_rows_result_does_not_depend_on_the_rows_beside_it_or_the_threads() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let row = HEADS.heads * HEADS.head_dim;
    let (start, t) = (300, 16); // long enough to run on the pool with 2 threads
    let kv = (start + t) * HEADS.kv_heads * HEADS.head_dim;
    let q = values(t * row, 3.0, &mut rng);
    let k = values(kv, 3.0, &mut rng);
    let v = values(kv, 1.0, &mut rng);
    let one = Kernels::new(1).unwrap();
    let two = Kernels::new(2).unwrap();
    let mut batch = vec![0f32; q.len()];
    two.attention(HEADS, start, &q, &k, &v, &mut batch).unwrap();
    for r in 0..t {
        for (kernels, what) in [(&one, "1 thread"), (&two, "2 threads")] {
            let mut alone = vec![0f32; row];
            let qr = &q[r * row..(r + 1) * row];
            kernels
                .attention(HEADS, start + r, qr, &k, &v, &mut alone)
                .unwrap();
            assert_eq!(
                alone.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                batch[r * row..(r + 1) * row]
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                "row {r}, {what}"
            );
        }
        // Five rows starting at r (where they fit) agree with the 16-row batch too.
        if r + 5 <= t {
            let mut five = vec![0f32; 5 * row];
            one.attention(
                HEADS,
                start + r,
                &q[r * row..(r + 5) * row],
                &k,
                &v,
                &mut five,
            )
            .unwrap();
            assert_eq!(five, batch[r * row..(r + 5) * row], "rows {r}..{}", r + 5);
        }
    }
}

fn bits_of(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// A tree's rows against chains: row r's output equals, bit for bit, a causal attention over a
/// cache holding the prefix then r's ancestors and r itself (what a chain forward over its
/// path computes), on one thread and on two.
#[test]
fn a_tree_row_equals_the_chain_over_its_path() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let row = HEADS.heads * HEADS.head_dim;
    let kv_row = HEADS.kv_heads * HEADS.head_dim;
    let (start, t) = (45, 12);
    // Two roots (0 and 5), branches and a chain of depth 5.
    let parents = [
        None,
        Some(0),
        Some(0),
        Some(1),
        Some(3),
        None,
        Some(5),
        Some(2),
        Some(4),
        Some(8),
        Some(6),
        Some(1),
    ];
    let q = values(t * row, 3.0, &mut rng);
    let k = values((start + t) * kv_row, 3.0, &mut rng);
    let v = values((start + t) * kv_row, 1.0, &mut rng);
    for threads in [1, 2] {
        let kernels = Kernels::new(threads).unwrap();
        let mut tree = vec![0f32; q.len()];
        kernels
            .attention_tree(HEADS, start, &q, &k, &v, &parents, &mut tree)
            .unwrap();
        for r in 0..t {
            let mut path = vec![r];
            while let Some(p) = parents[*path.last().unwrap()] {
                path.push(p);
            }
            path.reverse();
            // The chain's cache: the prefix, then the path's rows in order.
            let mut ck = k[..start * kv_row].to_vec();
            let mut cv = v[..start * kv_row].to_vec();
            for &j in &path {
                ck.extend_from_slice(&k[(start + j) * kv_row..][..kv_row]);
                cv.extend_from_slice(&v[(start + j) * kv_row..][..kv_row]);
            }
            let mut chain = vec![0f32; row];
            let at = start + path.len() - 1;
            kernels
                .attention(HEADS, at, &q[r * row..(r + 1) * row], &ck, &cv, &mut chain)
                .unwrap();
            assert_eq!(
                chain.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                tree[r * row..(r + 1) * row]
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                "row {r} (path {path:?}), {threads} threads"
            );
        }
        // The same tree grown in two calls (rows 0..5, then 5..12 with rows 0..5 cached): the
        // later rows' results are the one-call results.
        let mut later = vec![0f32; 7 * row];
        kernels
            .attention_tree(HEADS, start, &q[5 * row..], &k, &v, &parents, &mut later)
            .unwrap();
        assert_eq!(
            bits_of(&later),
            bits_of(&tree[5 * row..]),
            "{threads} threads"
        );
        // A chain written as a tree is the causal attention.
        let chain_parents: Vec<Option<usize>> = (0..t).map(|r| r.checked_sub(1)).collect();
        let mut causal = vec![0f32; q.len()];
        kernels
            .attention(HEADS, start, &q, &k, &v, &mut causal)
            .unwrap();
        kernels
            .attention_tree(HEADS, start, &q, &k, &v, &chain_parents, &mut tree)
            .unwrap();
        assert_eq!(causal, tree);
    }
    // A parent that is not an earlier row, and a parent list of the wrong length, are refused.
    let kernels = Kernels::new(1).unwrap();
    let mut out = vec![0f32; 2 * row];
    for bad in [&[None, Some(1)][..], &[None, Some(2)][..], &[None][..]] {
        assert!(matches!(
            kernels.attention_tree(HEADS, start, &q[..2 * row], &k, &v, bad, &mut out),
            Err(KernelError::Shape { .. })
        ));
    }
}

#[test]
fn every_instruction_set_gives_the_same_bits() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    // A head size of whole 64-value chunks (the widest build's), and one with a tail for every
    // build (20: 16 + 4 in the dot products, a part chunk in the weighted sum).
    for (head_dim, start, t) in [(128, 70, 5), (20, 3, 3)] {
        let heads = Heads {
            heads: 4,
            kv_heads: 2,
            head_dim,
        };
        let kv = (start + t) * heads.kv_heads * head_dim;
        let q = values(t * heads.heads * head_dim, 3.0, &mut rng);
        let k = values(kv, 3.0, &mut rng);
        let v = values(kv, 1.0, &mut rng);
        let run = |isa: Isa| {
            let mut out = vec![0f32; q.len()];
            Kernels::with_isa(isa, 1)
                .unwrap()
                .attention(heads, start, &q, &k, &v, &mut out)
                .unwrap();
            out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        let scalar = run(Isa::Scalar);
        for isa in Isa::available() {
            assert_eq!(run(isa), scalar, "{isa:?}, head_dim {head_dim}");
        }
    }
}

#[test]
fn bad_attention_shapes_are_refused() {
    let k = Kernels::new(1).unwrap();
    let row = HEADS.heads * HEADS.head_dim;
    let kv_row = HEADS.kv_heads * HEADS.head_dim;
    let q = vec![0.5f32; 2 * row];
    let cache = vec![0.5f32; 10 * kv_row];
    let mut out = vec![0f32; 2 * row];
    // Positions 8 and 9 fit a 10-position cache; 9 and 10 do not.
    assert!(k.attention(HEADS, 8, &q, &cache, &cache, &mut out).is_ok());
    assert!(matches!(
        k.attention(HEADS, 9, &q, &cache, &cache, &mut out),
        Err(KernelError::Shape {
            what: "cached keys",
            ..
        })
    ));
    assert!(matches!(
        k.attention(HEADS, 0, &q, &cache, &cache, &mut out[..row]),
        Err(KernelError::Shape { .. })
    ));
    assert!(matches!(
        k.attention(HEADS, 0, &q[..row - 1], &cache, &cache, &mut out[..row - 1]),
        Err(KernelError::Shape { .. })
    ));
    let uneven = Heads { heads: 5, ..HEADS };
    assert!(matches!(
        k.attention(uneven, 0, &q, &cache, &cache, &mut out),
        Err(KernelError::Shape { .. })
    ));
    assert!(matches!(
        k.attention(HEADS, usize::MAX, &q, &cache, &cache, &mut out),
        Err(KernelError::Overflow { .. })
    ));
}

#[test]
fn q8_0_conversion_rounds_each_value_to_its_block_step() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (rows, cols) = (3, 4 * BLOCK);
    let mut w = values(rows * cols, 0.3, &mut rng);
    w[5] = 0.0; // a zero inside a block
    w[BLOCK..2 * BLOCK].fill(0.0); // an all-zero block: scale 0, no division by zero
    let m = QMatrix::quantize_q8_0(rows, cols, &w).unwrap();
    assert_eq!(m.ty(), WeightType::Q8_0);
    let mut back = vec![0f32; cols];
    for r in 0..rows {
        m.dequantize_row(r, &mut back).unwrap();
        for (b, (&got, &want)) in back.iter().zip(&w[r * cols..]).enumerate() {
            let block = &w[r * cols + b / BLOCK * BLOCK..][..BLOCK];
            let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
            // Half a step, plus the f16 rounding of the scale (2⁻¹¹ relative) over 127 steps.
            let bound = amax / 127.0 * 0.5 + amax * 2f32.powi(-11) + 1e-7;
            assert!((got - want).abs() <= bound, "{r},{b}: {got} vs {want}");
        }
    }
}

#[test]
fn q8_0_conversion_refuses_bad_input() {
    assert!(matches!(
        QMatrix::quantize_q8_0(2, 32, &[0.0; 63]),
        Err(KernelError::Shape { .. })
    ));
    assert!(matches!(
        QMatrix::quantize_q8_0(1, 33, &[0.0; 33]),
        Err(KernelError::RaggedRow { cols: 33, .. })
    ));
    let mut w = vec![0.1f32; 64];
    w[40] = f32::NAN;
    assert!(matches!(
        QMatrix::quantize_q8_0(2, 32, &w),
        Err(KernelError::NotFinite { index: 40, .. })
    ));
    assert!(matches!(
        QMatrix::quantize_q8_0(usize::MAX, 64, &w),
        Err(KernelError::Overflow { .. })
    ));
}
