//! The block kernels besides the matrix products, on wgpu (lavapipe where there is no GPU),
//! against f64 references: RMSNorm (every row and the last rows), RoPE with the cache write
//! (both pairings, Qwen3's head norm), attention over a chain and over a token tree, the top-2
//! summary (ties, −inf, NaN) and a tree's row moves. The properties the model relies on are
//! checked bit for bit: a row's attention alone equals the same row beside others, and a tree
//! row equals the chain over its path; a matmul group equals its members run alone.
//! Over 800 lines: every non-matmul kernel's test in one binary, which travels to a lent GPU
//! beside `gpu.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "common/gpu.rs"]
mod gpu_common;
use gpu_common::{client, read_f32};

use common::{bits, cols_for, dequantized, random_matrix};
use cubecl::client::Client;
use cubecl::server::Handle;
use mars_kernels::gpu::{
    Attention, CopyRows, Draw, Epilogue, Evict, Fan, GpuMatrix, GpuType, Heads, Link, MatrixGroup,
    Norm, ReadThrough, Rope, Rows, SUMMARY_WORDS, Step, StepBuffer, Summary, TopRows, clone_buffer,
    link_ids, read_through, upload_f32,
};
use mars_kernels::{KernelError, KvType, WeightType};
use mars_verify::noise::{gumbel_max, row_key, seed_key};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

fn read_u32(client: &Client, h: Handle) -> Vec<u32> {
    let bytes = mars_kernels::gpu::read_blocking(client, h).unwrap();
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn normal(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next_u32() as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale)
        .collect()
}

/// Rows of the caches the attention tests use.
const CAP: usize = 300;
/// Cache rows written before the rows a test looks at: more than one of attention's 256-key
/// blocks.
const PREFIX: usize = 270;

fn step(client: &Client, s: &Step) -> StepBuffer {
    StepBuffer::new(client, s)
}

#[test]
fn rms_norm_matches_f64_on_every_row_and_the_last_rows() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (rows, d) = (5, 200);
    let x = normal(&mut rng, rows * d, 3.0);
    let g = normal(&mut rng, d, 1.5);
    let norm = Norm::new(&client, &g, 1e-5).unwrap();
    let xh = upload_f32(&client, &x);
    let s = step(&client, &Step::chain(&[0; 5], 0, 2, 1).unwrap());
    let want = |r: usize| -> Vec<f64> {
        let row = &x[r * d..(r + 1) * d];
        let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + 1e-5).sqrt();
        row.iter()
            .zip(&g)
            .map(|(&v, &w)| f64::from(v) * inv * f64::from(w))
            .collect()
    };
    let y = client.empty(rows * d * 4);
    norm.run(&client, &xh, &y, &s, false).unwrap();
    let all = read_f32(&client, y);
    let tail = client.empty(2 * d * 4);
    norm.run(&client, &xh, &tail, &s, true).unwrap();
    let tail = read_f32(&client, tail);
    for r in 0..rows {
        for (i, w) in want(r).iter().enumerate() {
            let got = f64::from(all[r * d + i]);
            assert!(
                (got - w).abs() <= 1e-5 * w.abs().max(1.0),
                "row {r} [{i}]: {got} vs {w}"
            );
        }
    }
    // The last two rows, bit for bit the same values as computed with every row.
    assert_eq!(bits(&tail), bits(&all[3 * d..]));
}

/// Per KV head, a key or value row in f64.
type Heads64 = Vec<Vec<f64>>;

/// The reference: q, k rotated at `pos` (pairs as the kernel pairs them), then softmax(q·k /
/// √hd) over the visible cache rows, in f64.
struct Reference {
    shape: Heads,
    halves: bool,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Reference {
    fn rotate(&self, x: &[f32], pos: usize) -> Vec<f64> {
        let hd = self.shape.head_dim;
        let half = hd / 2;
        let mut out = vec![0f64; hd];
        for i in 0..half {
            let (a, b) = if self.halves {
                (i, i + half)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (c, s) = (
                f64::from(self.cos[pos * half + i]),
                f64::from(self.sin[pos * half + i]),
            );
            let (xa, xb) = (f64::from(x[a]), f64::from(x[b]));
            out[a] = xa * c - xb * s;
            out[b] = xa * s + xb * c;
        }
        out
    }
}

/// A cache buffer's values as f64, in its layout's order (`[2, kv_heads, capacity, head_dim]`):
/// f16 pairs are packed low half first (WGSL's `pack2x16float`).
fn read_cache(client: &Client, kv: &Handle, ty: KvType) -> Vec<f64> {
    let bytes = mars_kernels::gpu::read_blocking(client, kv.clone()).unwrap();
    match ty {
        KvType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        KvType::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
    }
}

/// How far a stored value may be from the exact one: f32's rounding of RoPE, and f16's
/// rounding on top where the cache is f16 (one unit in the last place either way WGSL lets an
/// implementation round: 2^-10 of the value, relative).
fn stored_bound(ty: KvType, exact: f64) -> f64 {
    match ty {
        KvType::F32 => 1e-4,
        KvType::F16 => 1e-4 + exact.abs() * 2f64.powi(-10),
    }
}

fn tables(context: usize, hd: usize) -> (Vec<f32>, Vec<f32>) {
    let half = hd / 2;
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for pos in 0..context {
        for i in 0..half {
            let a = pos as f64 * 10_000f64.powf(-2.0 * i as f64 / hd as f64);
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    (cos, sin)
}

/// Runs RoPE then attention for the rows of `s` with `qkv`, on `kv`; returns the outputs. With
/// `attn`'s RoPE folded in, a pass it takes (≤ 16 rows) runs in its one launch, the others apart.
fn rope_attend(
    client: &Client,
    (rope, attn): (&Rope, &Attention),
    shape: Heads,
    qkv: &[f32],
    kv: &Handle,
    s: &Step,
) -> Vec<f32> {
    let rows = s.rows();
    let sb = step(client, &s.clone().with_capacity(CAP).unwrap());
    let out = client.empty(rows * shape.heads * shape.head_dim * 4);
    let split = client.empty(rows * shape.heads * shape.head_dim * 4);
    let qkv = upload_f32(client, qkv);
    if attn.folds_rope(&sb) {
        // The split shape first: it writes the same keys and values as the other then
        // rewrites, so each launch reads what the other stored.
        attn.run_roped_as(client, (&qkv, kv, &split), &sb, true)
            .unwrap();
        attn.run_roped(client, (&qkv, kv, &out), &sb).unwrap();
    } else {
        let q = client.empty(rows * shape.heads * shape.head_dim * 4);
        rope.run(client, &qkv, &q, kv, &sb).unwrap();
        attn.run(client, &q, kv, &out, &sb).unwrap();
        // Split by 256-key blocks and folded by a second launch: the same bits.
        attn.run_as(client, (&q, kv, &split), &sb, true).unwrap();
    }
    let (out, split) = (read_f32(client, out), read_f32(client, split));
    assert_eq!(bits(&out), bits(&split), "split attention");
    out
}

/// Over either cache type, with RoPE launched apart and folded into attention: RoPE stores
/// each key within its type's rounding of the exact rotation and each value as it came
/// (rounded likewise), attention over the stored keys and values equals f64's, a row alone
/// equals itself beside others, a tree row the chain over its path, and attention split by
/// key blocks the one-workgroup form (bit for bit).
#[test]
fn rope_and_attention_match_f64_over_chains_and_trees() {
    for fold in [false, true] {
        for ty in [KvType::F16, KvType::F32] {
            rope_and_attention_over(ty, fold);
        }
    }
}

fn rope_and_attention_over(ty: KvType, fold: bool) {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    // Head widths whose vec4 lanes split the 256 threads evenly (32, 64, 128, 256) and not (96:
    // 10 teams of 24 lanes, 16 threads idle).
    let shapes = [
        (false, 64, 6, 2),
        (true, 128, 4, 4),
        (true, 32, 3, 1),
        (false, 96, 4, 2),
        (true, 256, 2, 1),
    ];
    for (halves, hd, heads, kv_heads) in shapes {
        let shape = Heads {
            heads,
            kv_heads,
            head_dim: hd,
        };
        let (cos, sin) = tables(CAP, hd);
        let rope = Rope::new(&client, (shape, ty), (&cos, &sin), halves, 1e-6).unwrap();
        let attn = Attention::new(&client, (shape, ty))
            .unwrap()
            .with_rope_as(&client, &rope, fold)
            .unwrap();
        let reference = Reference {
            shape,
            halves,
            cos,
            sin,
        };
        let width = (heads + 2 * kv_heads) * hd;
        // A prefix of PREFIX rows (more than one 256-key block), then 5 rows as a chain.
        let kv = client.empty(shape.cache_bytes(CAP, ty).unwrap());
        let prefix = normal(&mut rng, PREFIX * width, 2.0);
        rope_attend(
            &client,
            (&rope, &attn),
            shape,
            &prefix,
            &kv,
            &Step::chain(&[0; PREFIX], 0, 1, 1).unwrap(),
        );
        let rows = normal(&mut rng, 5 * width, 2.0);
        let chain = rope_attend(
            &client,
            (&rope, &attn),
            shape,
            &rows,
            &kv,
            &Step::chain(&[0; 5], PREFIX, 5, 1).unwrap(),
        );
        // The cache the chain wrote (rows 0..PREFIX from the prefix, then these), each value
        // within its type's rounding of the exact one; the reference attends over it.
        let all: Vec<f32> = [prefix.as_slice(), rows.as_slice()].concat();
        let cache = read_cache(&client, &kv, ty);
        let stored = |part: usize, g: usize, p: usize| -> Vec<f64> {
            let at = ((part * kv_heads + g) * CAP + p) * hd;
            cache[at..at + hd].to_vec()
        };
        let keys: Vec<(Heads64, Heads64)> = (0..PREFIX + 5)
            .map(|p| {
                let row = &all[p * width..(p + 1) * width];
                let k: Heads64 = (0..kv_heads).map(|g| stored(0, g, p)).collect();
                let v: Heads64 = (0..kv_heads).map(|g| stored(1, g, p)).collect();
                for g in 0..kv_heads {
                    let exact_k = reference.rotate(&row[(heads + g) * hd..(heads + g + 1) * hd], p);
                    let exact_v =
                        &row[(heads + kv_heads + g) * hd..(heads + kv_heads + g + 1) * hd];
                    for d in 0..hd {
                        let (ek, ev) = (exact_k[d], f64::from(exact_v[d]));
                        assert!(
                            (k[g][d] - ek).abs() <= stored_bound(ty, ek),
                            "{ty:?} fold {fold} key row {p} head {g} [{d}]: {} vs {ek}",
                            k[g][d]
                        );
                        assert!(
                            (v[g][d] - ev).abs() <= stored_bound(ty, ev),
                            "{ty:?} value row {p} head {g} [{d}]: {} vs {ev}",
                            v[g][d]
                        );
                    }
                }
                (k, v)
            })
            .collect();
        let attend = |q: &[f64], g: usize, visible: &[usize]| -> Vec<f64> {
            let scores: Vec<f64> = visible
                .iter()
                .map(|&j| {
                    q.iter().zip(&keys[j].0[g]).map(|(a, b)| a * b).sum::<f64>()
                        / (hd as f64).sqrt()
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let l: f64 = w.iter().sum();
            let mut out = vec![0f64; hd];
            for (wi, &j) in w.iter().zip(visible) {
                for (o, v) in out.iter_mut().zip(&keys[j].1[g]) {
                    *o += wi * v / l;
                }
            }
            out
        };
        for r in 0..5 {
            let visible: Vec<usize> = (0..=PREFIX + r).collect();
            for h in 0..heads {
                let q = reference.rotate(
                    &rows[r * width + h * hd..r * width + (h + 1) * hd],
                    PREFIX + r,
                );
                let want = attend(&q, h / (heads / kv_heads), &visible);
                let got = &chain[(r * heads + h) * hd..(r * heads + h + 1) * hd];
                for (d, (&g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(g) - w).abs() < 2e-4,
                        "{ty:?} fold {fold} halves {halves} row {r} head {h} [{d}]: {g} vs {w}"
                    );
                }
            }
        }
        // Row 3 alone, after rows 0..3 are cached: the same bits as beside the others.
        let alone = rope_attend(
            &client,
            (&rope, &attn),
            shape,
            &rows[3 * width..4 * width],
            &kv,
            &Step::chain(&[0], PREFIX + 3, 1, 1).unwrap(),
        );
        assert_eq!(
            bits(&alone),
            bits(&chain[3 * heads * hd..4 * heads * hd]),
            "row alone"
        );

        // A tree at base PREFIX: 0 ─ 1 ─ 3, 0 ─ 2 ─ 4; row 4's path is 0, 2, 4 and row 3's 0, 1, 3.
        let parents = [None, Some(0), Some(0), Some(1), Some(2)];
        let tree_kv = client.empty(shape.cache_bytes(CAP, ty).unwrap());
        rope_attend(
            &client,
            (&rope, &attn),
            shape,
            &prefix,
            &tree_kv,
            &Step::chain(&[0; PREFIX], 0, 1, 1).unwrap(),
        );
        let nodes = normal(&mut rng, 5 * width, 2.0);
        let tree = rope_attend(
            &client,
            (&rope, &attn),
            shape,
            &nodes,
            &tree_kv,
            &Step::tree(&[0; 5], PREFIX, &parents, 5, 1).unwrap(),
        );
        for path in [[0usize, 2, 4], [0, 1, 3]] {
            let chain_kv = client.empty(shape.cache_bytes(CAP, ty).unwrap());
            rope_attend(
                &client,
                (&rope, &attn),
                shape,
                &prefix,
                &chain_kv,
                &Step::chain(&[0; PREFIX], 0, 1, 1).unwrap(),
            );
            let path_rows: Vec<f32> = path
                .iter()
                .flat_map(|&a| nodes[a * width..(a + 1) * width].to_vec())
                .collect();
            let chain = rope_attend(
                &client,
                (&rope, &attn),
                shape,
                &path_rows,
                &chain_kv,
                &Step::chain(&[0; 3], PREFIX, 3, 1).unwrap(),
            );
            for (d, &a) in path.iter().enumerate() {
                assert_eq!(
                    bits(&tree[a * heads * hd..(a + 1) * heads * hd]),
                    bits(&chain[d * heads * hd..(d + 1) * heads * hd]),
                    "{ty:?} fold {fold} halves {halves}: tree row {a} vs the chain over {path:?}"
                );
            }
        }
    }
}

/// RoPE folded into attention against RoPE launched apart, with Qwen3's head norms (which the
/// f64 test above leaves out) and without, both pairings and cache types, over a chain and a
/// tree after a prefix: the outputs within f32 rounding of each other, the stored keys and
/// values within one rounding of the cache's type; and the fold refused where a pass does not
/// take it.
#[test]
fn a_folded_rope_equals_rope_launched_apart() {
    use mars_kernels::gpu::outputs_agree;
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(34);
    for (halves, hd, heads, kv_heads, norms) in [
        (true, 64, 4, 2, true),
        (false, 32, 3, 1, true),
        (true, 128, 2, 2, false),
    ] {
        let shape = Heads {
            heads,
            kv_heads,
            head_dim: hd,
        };
        let (cos, sin) = tables(CAP, hd);
        let (qn, kn) = (normal(&mut rng, hd, 1.0), normal(&mut rng, hd, 1.0));
        let width = (heads + 2 * kv_heads) * hd;
        let prefix = normal(&mut rng, 20 * width, 2.0);
        let rows = normal(&mut rng, 5 * width, 2.0);
        // The fold holds the pass's keys as f16 cache words: an f32 cache keeps RoPE apart.
        for ty in [KvType::F16] {
            let mut rope = Rope::new(&client, (shape, ty), (&cos, &sin), halves, 1e-6).unwrap();
            if norms {
                rope = rope.with_head_norms(&client, &qn, &kn).unwrap();
            }
            let attn = Attention::new(&client, (shape, ty)).unwrap();
            let run = |fold: bool, tree: bool| {
                let attn = attn.with_rope_as(&client, &rope, fold).unwrap();
                let kv = client.empty(shape.cache_bytes(CAP, ty).unwrap());
                let first = Step::chain(&[0; 20], 0, 1, 1).unwrap();
                rope_attend(&client, (&rope, &attn), shape, &prefix, &kv, &first);
                let s = if tree {
                    let parents = [None, Some(0), Some(0), Some(1), Some(2)];
                    Step::tree(&[0; 5], 20, &parents, 5, 1).unwrap()
                } else {
                    Step::chain(&[0; 5], 20, 5, 1).unwrap()
                };
                let out = rope_attend(&client, (&rope, &attn), shape, &rows, &kv, &s);
                (out, read_cache(&client, &kv, ty))
            };
            for tree in [false, true] {
                let what = format!("{ty:?} halves {halves} head {hd} norms {norms} tree {tree}");
                let (want, want_kv) = run(false, tree);
                let (got, got_kv) = run(true, tree);
                assert!(
                    outputs_agree(&got, &want, 1e-5),
                    "{what}: {got:?} vs {want:?}"
                );
                // The cache rows this pass wrote (the prefix's are rope.wgsl's in both).
                for part in 0..2 {
                    for g in 0..kv_heads {
                        for p in 20..25 {
                            let at = ((part * kv_heads + g) * CAP + p) * hd;
                            for d in 0..hd {
                                let (a, b) = (got_kv[at + d], want_kv[at + d]);
                                let bound = match ty {
                                    KvType::F32 => 1e-5 * b.abs().max(1.0),
                                    KvType::F16 => b.abs() * 2f64.powi(-10) + 1e-6,
                                };
                                assert!(
                                    (a - b).abs() <= bound,
                                    "{what}: cache {part} head {g} row {p} [{d}]: {a} vs {b}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    // Not taken: a pass of 17 rows, and a RoPE that is not folded.
    let shape = Heads {
        heads: 2,
        kv_heads: 1,
        head_dim: 64,
    };
    let (cos, sin) = tables(CAP, 64);
    let rope = Rope::new(&client, (shape, KvType::F16), (&cos, &sin), true, 1e-6).unwrap();
    let attn = Attention::new(&client, (shape, KvType::F16)).unwrap();
    let folded = attn.with_rope_as(&client, &rope, true).unwrap();
    let chain = |rows: usize| {
        let s = Step::chain(&vec![0; rows], 0, 1, 1).unwrap();
        step(&client, &s.with_capacity(CAP).unwrap())
    };
    let (long, one) = (chain(17), chain(1));
    assert!(!folded.folds_rope(&long) && folded.folds_rope(&one));
    let apart = attn.with_rope_as(&client, &rope, false).unwrap();
    assert!(!apart.folds_rope(&one) && !attn.folds_rope(&one));
    // Shapes it does not fold: an f32 cache, heads of 256 values (their keys would not fit
    // workgroup memory), halves of a width not a multiple of 8.
    for (hd, ty, halves) in [
        (64, KvType::F32, true),
        (256, KvType::F16, true),
        (12, KvType::F16, true),
    ] {
        let shape = Heads {
            heads: 2,
            kv_heads: 1,
            head_dim: hd,
        };
        let (cos, sin) = tables(CAP, hd);
        let rope = Rope::new(&client, (shape, ty), (&cos, &sin), halves, 1e-6).unwrap();
        let attn = Attention::new(&client, (shape, ty)).unwrap();
        let folded = attn.with_rope_as(&client, &rope, true).unwrap();
        assert!(!folded.folds_rope(&one), "{hd} {ty:?}");
    }
    let buf = |n: usize| client.empty(n * 4);
    let kv = client.empty(shape.cache_bytes(CAP, KvType::F16).unwrap());
    assert!(
        folded
            .run_roped(&client, (&buf(17 * 256), &kv, &buf(17 * 128)), &long)
            .is_err()
    );
    assert!(
        apart
            .run_roped(&client, (&buf(256), &kv, &buf(128)), &one)
            .is_err()
    );
    // A RoPE of other heads.
    let other = Heads { heads: 4, ..shape };
    let rope4 = Rope::new(&client, (other, KvType::F16), (&cos, &sin), true, 1e-6).unwrap();
    assert!(attn.with_rope_as(&client, &rope4, true).is_err());
    // A RoPE writing another cache type.
    let rope32 = Rope::new(&client, (shape, KvType::F32), (&cos, &sin), true, 1e-6).unwrap();
    assert!(attn.with_rope_as(&client, &rope32, true).is_err());
}

#[test]
fn qwen3_head_norm_comes_before_rope() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let shape = Heads {
        heads: 2,
        kv_heads: 1,
        head_dim: 64,
    };
    let (cos, sin) = tables(8, 64);
    let (qn, kn) = (normal(&mut rng, 64, 1.0), normal(&mut rng, 64, 1.0));
    let rope = Rope::new(&client, (shape, KvType::F32), (&cos, &sin), true, 1e-6)
        .unwrap()
        .with_head_norms(&client, &qn, &kn)
        .unwrap();
    let width = 4 * 64;
    let qkv = normal(&mut rng, width, 2.0);
    let s = step(
        &client,
        &Step::chain(&[0], 5, 1, 1)
            .unwrap()
            .with_capacity(8)
            .unwrap(),
    );
    let q = client.empty(2 * 64 * 4);
    let kv = client.empty(shape.cache_bytes(8, KvType::F32).unwrap());
    rope.run(&client, &upload_f32(&client, &qkv), &q, &kv, &s)
        .unwrap();
    let q = read_f32(&client, q);
    let kv = read_f32(&client, kv);
    let reference = Reference {
        shape,
        halves: true,
        cos,
        sin,
    };
    let normed = |x: &[f32], w: &[f32]| -> Vec<f32> {
        let ms = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / 64.0;
        let inv = 1.0 / (ms + 1e-6).sqrt();
        x.iter()
            .zip(w)
            .map(|(&v, &w)| (f64::from(v) * inv) as f32 * w)
            .collect()
    };
    let want_q1 = reference.rotate(&normed(&qkv[64..128], &qn), 5);
    let want_k = reference.rotate(&normed(&qkv[128..192], &kn), 5);
    for d in 0..64 {
        assert!((f64::from(q[64 + d]) - want_q1[d]).abs() < 1e-4, "q [{d}]");
        // Key head 0 at cache row 5; its value head copied as it is.
        assert!(
            (f64::from(kv[5 * 64 + d]) - want_k[d]).abs() < 1e-4,
            "k [{d}]"
        );
        assert_eq!(kv[8 * 64 + 5 * 64 + d], qkv[192 + d], "v [{d}]");
    }
}

#[test]
fn the_summary_ranks_as_the_verifier_does() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let vocab = 1000;
    let mut z = normal(&mut rng, 5 * vocab, 8.0);
    // Row 1: a tie for first place at ids 700 and 300 (300 first, 700 the runner-up).
    z[vocab + 300] = 50.0;
    z[vocab + 700] = 50.0;
    // Row 2: everything −inf but one id.
    for v in &mut z[2 * vocab..3 * vocab] {
        *v = f32::NEG_INFINITY;
    }
    z[2 * vocab + 17] = 1.0;
    // Row 3: a NaN at 40 and +inf at 900 (the lowest id is reported).
    z[3 * vocab + 900] = f32::INFINITY;
    z[3 * vocab + 40] = f32::NAN;
    let s = step(&client, &Step::chain(&[0; 5], 0, 5, vocab).unwrap());
    let logits = upload_f32(&client, &z);
    // One chunk a row, the adapter's own, chunks that leave a short last one, and 143 chunks
    // of 7 values: every chunking ranks alike.
    let mut first: Option<Vec<u32>> = None;
    for summary in [
        Summary::with_chunk(&client, vocab, vocab).unwrap(),
        Summary::new(&client, vocab).unwrap(),
        Summary::with_chunk(&client, vocab, 64).unwrap(),
        Summary::with_chunk(&client, vocab, 7).unwrap(),
    ] {
        let out = client.empty(5 * SUMMARY_WORDS * 4);
        summary.run(&client, &logits, &out, 5, &s, None).unwrap();
        let out = read_u32(&client, out);
        summary_ranks(&z, vocab, &out);
        // The words but the sums (summed in another order) are the same bits.
        let ranks = |w: &[u32]| {
            w.chunks(SUMMARY_WORDS)
                .flat_map(|r| [&r[..4], &r[5..9]].concat())
                .collect::<Vec<u32>>()
        };
        match &first {
            None => first = Some(out),
            Some(f) => assert_eq!(ranks(f), ranks(&out), "{} chunks", summary.chunks()),
        }
    }
    // One summary run again and again (its partials kept between runs), over other logits and
    // other rows, fewer and more: with one chunk a row, one row's partials are kept in 64
    // bytes of a larger allocation, which a five-row run must not take (the browser dropped
    // the writes past the 64 bytes; lavapipe reaches the padding, so here the refusal below
    // is what catches a buffer sized by its allocation: `bound_bytes`).
    for (chunk, runs) in [
        (7, [(5, 11), (2, 12), (5, 13), (1, 14)]),
        (vocab, [(1, 15), (5, 16), (2, 17), (5, 18)]),
    ] {
        summaries_kept_between_runs(&client, vocab, chunk, &runs);
    }
    // A buffer is as large as its range, not as its allocation (which CubeCL rounds up to the
    // device's alignment): a word short of four rows' summaries is refused them by name.
    let short = client.empty(4 * SUMMARY_WORDS * 4 - 4);
    assert!(short.size() >= 4 * SUMMARY_WORDS as u64 * 4, "{short:?}");
    let refused = Summary::new(&client, vocab)
        .unwrap()
        .run(&client, &logits, &short, 4, &s, None);
    let named = matches!(&refused, Err(KernelError::Shape { what, .. }) if *what == "summaries");
    assert!(named, "{refused:?}");
    // More chunks than a row's merge takes, or none: refused by name.
    assert!(Summary::with_chunk(&client, vocab, 3).is_err());
    assert!(Summary::with_chunk(&client, vocab, 0).is_err());
    assert!(Summary::new(&client, 0).is_err());
}

/// One summary run again and again (its partials kept between runs) over other logits and
/// `runs`' rows: each run the words of a summary made for it alone.
fn summaries_kept_between_runs(client: &Client, vocab: usize, chunk: usize, runs: &[(usize, u64)]) {
    let kept = Summary::with_chunk(client, vocab, chunk).unwrap();
    for &(rows, seed) in runs {
        let z = normal(&mut ChaCha8Rng::seed_from_u64(seed), rows * vocab, 8.0);
        let logits = upload_f32(client, &z);
        let s = step(
            client,
            &Step::chain(&vec![0; rows], 0, rows, vocab).unwrap(),
        );
        let words = |summary: &Summary| {
            let out = client.empty(rows * SUMMARY_WORDS * 4);
            summary.run(client, &logits, &out, rows, &s, None).unwrap();
            read_u32(client, out)
        };
        let fresh = words(&Summary::with_chunk(client, vocab, chunk).unwrap());
        assert_eq!(
            words(&kept),
            fresh,
            "{rows} rows after other runs, chunk {chunk}"
        );
    }
}

/// The checks of [`the_summary_ranks_as_the_verifier_does`] on one chunking's words.
fn summary_ranks(z: &[f32], vocab: usize, out: &[u32]) {
    for r in [0, 1, 2, 4] {
        let row = &z[r * vocab..(r + 1) * vocab];
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let w = &out[r * SUMMARY_WORDS..(r + 1) * SUMMARY_WORDS];
        assert_eq!(w[0] as usize, order[0], "row {r} top1");
        assert_eq!(f32::from_bits(w[1]), row[order[0]]);
        if row[order[1]] == f32::NEG_INFINITY {
            assert_eq!(w[2], u32::MAX, "row {r}: no runner-up");
        } else {
            assert_eq!(w[2] as usize, order[1], "row {r} top2");
            assert_eq!(f32::from_bits(w[3]), row[order[1]]);
        }
        let sum: f64 = row
            .iter()
            .map(|&v| (f64::from(v) - f64::from(row[order[0]])).exp())
            .sum();
        let got = f64::from(f32::from_bits(w[4]));
        assert!((got - sum).abs() < 1e-5 * sum, "row {r} sum {got} vs {sum}");
        assert_eq!(w[5], u32::MAX, "row {r}: nothing bad");
    }
    assert_eq!((out[SUMMARY_WORDS], out[SUMMARY_WORDS + 2]), (300, 700));
    let bad = &out[3 * SUMMARY_WORDS..4 * SUMMARY_WORDS];
    assert_eq!(bad[5], 40);
    assert!(f32::from_bits(bad[6]).is_nan());
}

/// A sampling step's summaries carry each row's Gumbel-max draw: the token the verifier's own
/// noise (`mars_verify::noise`) picks on the host for the same key — the seed's and the
/// position the row predicts, one past its input's in the step — its logit, and the sum at T,
/// while the greedy words stay as they were; over many keys a row's draws follow
/// softmax(z / T).
#[test]
fn the_summary_draws_as_the_verifier_does() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let (vocab, rows, t) = (1000, 4, 0.7f32);
    let mut z = normal(&mut rng, rows * vocab, 3.0);
    // Row 3: all but three ids masked.
    for v in &mut z[3 * vocab..4 * vocab] {
        *v = f32::NEG_INFINITY;
    }
    z[3 * vocab + 5] = 1.0;
    z[3 * vocab + 600] = 0.5;
    z[3 * vocab + 999] = -1.0;
    let summary = Summary::new(&client, vocab).unwrap();
    // Six rows at positions 100..106, the last four with logits: they predict 103..107.
    let s = step(&client, &Step::chain(&[0; 6], 100, rows, vocab).unwrap());
    let logits = upload_f32(&client, &z);
    let run = |out: &Handle, draw: bool| {
        let d = Draw::new(&client, t, seed_key(42)).unwrap();
        summary
            .run(&client, &logits, out, rows, &s, draw.then_some(&d))
            .unwrap();
    };
    let keys: Vec<u32> = (0..rows as u32).map(|r| row_key(42, 103 + r)).collect();
    let (greedy, drawn) = (
        client.empty(rows * SUMMARY_WORDS * 4),
        client.empty(rows * SUMMARY_WORDS * 4),
    );
    run(&greedy, false);
    run(&drawn, true);
    let (greedy, drawn) = (read_u32(&client, greedy), read_u32(&client, drawn));
    for r in 0..rows {
        let row = &z[r * vocab..(r + 1) * vocab];
        let w = &drawn[r * SUMMARY_WORDS..(r + 1) * SUMMARY_WORDS];
        let g = &greedy[r * SUMMARY_WORDS..(r + 1) * SUMMARY_WORDS];
        assert_eq!(&w[..7], &g[..7], "row {r}: the greedy words");
        assert_eq!(g[7], u32::MAX, "row {r}: greedy draws nothing");
        let z1 = f32::from_bits(w[1]);
        let want = gumbel_max(row, z1, t, keys[r]).unwrap();
        assert_eq!(w[7], want, "row {r}: the draw");
        assert_eq!(f32::from_bits(w[8]), row[want as usize]);
        let sum_t: f64 = row
            .iter()
            .map(|&v| ((f64::from(v) - f64::from(z1)) / f64::from(t)).exp())
            .sum();
        let got = f64::from(f32::from_bits(w[9]));
        assert!(
            (got - sum_t).abs() < 1e-5 * sum_t,
            "row {r}: sum at T {got} vs {sum_t}"
        );
    }
    assert!([5, 600, 999].contains(&drawn[3 * SUMMARY_WORDS + 7]));
    // Chunks of 7 values draw the same ids with the same logits.
    let fine = Summary::with_chunk(&client, vocab, 7).unwrap();
    let out = client.empty(rows * SUMMARY_WORDS * 4);
    let d = Draw::new(&client, t, seed_key(42)).unwrap();
    fine.run(&client, &logits, &out, rows, &s, Some(&d))
        .unwrap();
    let fine = read_u32(&client, out);
    for r in 0..rows {
        let at = r * SUMMARY_WORDS;
        assert_eq!(
            fine[at + 7..at + 9],
            drawn[at + 7..at + 9],
            "row {r}: 7-value chunks"
        );
    }
    // Row 3 over 400 keys: its three ids drawn as softmax(z / T) says (chi-square, 2 degrees of
    // freedom, P(> 13.8) = 0.001).
    let n = 400;
    let only3 = upload_f32(&client, &z[3 * vocab..4 * vocab].repeat(n as usize));
    let many = Step::chain(&vec![0; n as usize], 0, n as usize, vocab).unwrap();
    let many = step(&client, &many);
    let out = client.empty(n as usize * SUMMARY_WORDS * 4);
    let d = Draw::new(&client, t, seed_key(9)).unwrap();
    summary
        .run(&client, &only3, &out, n as usize, &many, Some(&d))
        .unwrap();
    let out = read_u32(&client, out);
    let ids = [5usize, 600, 999];
    let w: Vec<f64> = ids
        .iter()
        .map(|&i| (f64::from(z[3 * vocab + i] - 1.0) / f64::from(t)).exp())
        .collect();
    let total: f64 = w.iter().sum();
    let chi2: f64 = ids
        .iter()
        .zip(&w)
        .map(|(&i, &wi)| {
            let seen = (0..n as usize)
                .filter(|&r| out[r * SUMMARY_WORDS + 7] as usize == i)
                .count() as f64;
            let e = f64::from(n) * wi / total;
            (seen - e).powi(2) / e
        })
        .sum();
    assert!(chi2 < 13.8, "chi2 {chi2}");
    // A temperature with no finite inverse is refused by name.
    assert!(Draw::new(&client, 0.0, seed_key(9)).is_err());
    assert!(Draw::new(&client, f32::NAN, seed_key(9)).is_err());
    // More rows than the forward has logit rows: refused (they would have no position).
    let few = step(&client, &Step::chain(&[0; 6], 100, 2, vocab).unwrap());
    assert!(
        summary
            .run(
                &client,
                &logits,
                &client.empty(rows * SUMMARY_WORDS * 4),
                rows,
                &few,
                Some(&d)
            )
            .is_err()
    );
}

/// Rows reduced to their best c on the device (a tree drafter's frontier, a top-k sampler's
/// rows): each row's best c of its first `cols` values in the verifier's order (value
/// descending, lowest id first, −inf never listed), the sum at T and the first bad value, for
/// every list length a workgroup size is chosen for (256 threads to 16).
#[test]
fn the_top_c_ranks_as_the_verifier_does() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let (stride, cols, rows, t) = (900, 800, 5, 0.8f32);
    let mut z = normal(&mut rng, rows * stride, 4.0);
    // Row 1: a three-way tie for first place; row 2: only two allowed values; row 3: a NaN
    // at 50 and +inf at 20 (the lowest reported); row 4: its best value past `cols`.
    for i in [600, 200, 400] {
        z[stride + i] = 40.0;
    }
    for v in &mut z[2 * stride..3 * stride] {
        *v = f32::NEG_INFINITY;
    }
    z[2 * stride + 9] = 1.0;
    z[2 * stride + 3] = 2.0;
    z[3 * stride + 50] = f32::NAN;
    z[3 * stride + 20] = f32::INFINITY;
    z[4 * stride + 850] = 99.0;
    let logits = upload_f32(&client, &z);
    for c in [1, 3, 4, 5, 8, 9, 16, 20, 33, 64] {
        // The adapter's chunks, one chunk a row, and chunks of 7 values (115 a row, a short
        // last one, more than the last launch's threads): the same ranks and bad ids.
        let tops = [
            TopRows::new(&client, c, stride, cols, t).unwrap(),
            TopRows::with_chunk(&client, (c, stride, cols, t), cols).unwrap(),
            TopRows::with_chunk(&client, (c, stride, cols, t), 7).unwrap(),
        ];
        let outs: Vec<Vec<u32>> = tops
            .iter()
            .map(|top| {
                let out = client.empty(rows * top.words() * 4);
                top.run(&client, &logits, &out, rows).unwrap();
                read_u32(&client, out)
            })
            .collect();
        let top = &tops[0];
        let sum_at = 2 * c;
        for (o, other) in outs.iter().enumerate().skip(1) {
            for r in 0..rows {
                let w = |out: &[u32]| {
                    let row = &out[r * top.words()..(r + 1) * top.words()];
                    [&row[..sum_at], &row[sum_at + 1..]].concat()
                };
                assert_eq!(
                    w(&outs[0]),
                    w(other),
                    "c {c} row {r}: {} chunks",
                    tops[o].chunks()
                );
            }
        }
        let out = &outs[2];
        for r in [0, 1, 2, 4] {
            let row = &z[r * stride..r * stride + cols];
            let mut order: Vec<usize> = (0..cols).filter(|&i| row[i] > f32::NEG_INFINITY).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            let w = &out[r * top.words()..(r + 1) * top.words()];
            for j in 0..c {
                match order.get(j) {
                    Some(&i) => {
                        assert_eq!(w[2 * j] as usize, i, "c {c} row {r} rank {j}");
                        assert_eq!(f32::from_bits(w[2 * j + 1]), row[i]);
                    }
                    None => assert_eq!(w[2 * j], u32::MAX, "c {c} row {r}: nothing at rank {j}"),
                }
            }
            let z1 = f64::from(row[order[0]]);
            let sum: f64 = row
                .iter()
                .map(|&v| ((f64::from(v) - z1) / f64::from(t)).exp())
                .sum();
            let got = f64::from(f32::from_bits(w[2 * c]));
            assert!(
                (got - sum).abs() < 1e-5 * sum,
                "c {c} row {r}: sum {got} vs {sum}"
            );
            assert_eq!(w[2 * c + 1], u32::MAX, "c {c} row {r}: nothing bad");
        }
        let bad = &out[3 * top.words()..4 * top.words()];
        assert_eq!(bad[2 * c + 1], 20);
        assert_eq!(f32::from_bits(bad[2 * c + 2]), f32::INFINITY);
    }
    assert!(TopRows::new(&client, 0, stride, cols, t).is_err());
    assert!(TopRows::new(&client, 65, stride, cols, t).is_err());
    assert!(TopRows::new(&client, 4, stride, stride + 1, t).is_err());
    assert!(TopRows::new(&client, 4, stride, cols, 0.0).is_err());
    assert!(TopRows::with_chunk(&client, (4, stride, cols, t), 0).is_err());
}

/// A draft chained on the device: a step's summaries land at its link's chain row, the next
/// step's linked rows take those rows' best ids (greedy) or draws (sampling), and the
/// embedding reads them.
#[test]
fn a_linked_step_takes_its_ids_from_the_chain() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (vocab, d) = (300, 64);
    let z = normal(&mut rng, 2 * vocab, 4.0);
    let best = |r: usize| {
        let row = &z[r * vocab..(r + 1) * vocab];
        (0..vocab).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as u32
    };
    let summary = Summary::new(&client, vocab).unwrap();
    // Chain rows 0..4: the two logit rows' summaries go to rows 1 and 2.
    let chain = upload_f32(&client, &[0.0; 4 * SUMMARY_WORDS]);
    let link = Link {
        ids_from: 0,
        ids: 0,
        summaries_at: 1,
    };
    // A chain step over `ids` with `link`, in a buffer.
    let linked = |ids: &[u32], link: Link| {
        let rows = ids.len();
        let plain = Step::chain(ids, 0, rows, vocab).unwrap();
        step(&client, &plain.with_link(link).unwrap())
    };
    let s = linked(&[0, 0], link);
    summary
        .run(&client, &upload_f32(&client, &z), &chain, 2, &s, None)
        .unwrap();
    // Three rows: the host's id 7, then the best ids of chain rows 1 and 2.
    let link = Link {
        ids_from: 1,
        ids: 2,
        summaries_at: 0,
    };
    let next = linked(&[7, 0, 0], link);
    link_ids(&client, &next, &chain).unwrap();
    let table = normal(&mut rng, vocab * d, 1.0);
    let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    let limit = client.properties().memory.max_page_size;
    let w = GpuMatrix::upload(&client, GpuType::F32, vocab, d, &bytes, limit).unwrap();
    let x = client.empty(3 * d * 4);
    w.embed(&client, &next, &x).unwrap();
    let x = read_f32(&client, x);
    for (i, id) in [7, best(0), best(1)].into_iter().enumerate() {
        let want = &table[id as usize * d..(id as usize + 1) * d];
        assert_eq!(bits(&x[i * d..(i + 1) * d]), bits(want), "row {i}: id {id}");
    }
    let words = read_u32(&client, chain.clone());
    assert_eq!(
        &words[..SUMMARY_WORDS],
        &[0; SUMMARY_WORDS],
        "row 0 untouched"
    );
    assert_eq!(
        (words[SUMMARY_WORDS], words[2 * SUMMARY_WORDS]),
        (best(0), best(1))
    );
    // A drawn chain (a sampling drafter's): the linked rows take each row's draw, at a
    // temperature where it is seldom the best id.
    let t = 4.0;
    // Both rows at positions 0 and 1: they predict 1 and 2.
    let keys: Vec<u32> = (0..2).map(|r| row_key(13, 1 + r)).collect();
    let draw = Draw::new(&client, t, seed_key(13)).unwrap();
    let logits = upload_f32(&client, &z);
    summary
        .run(&client, &logits, &chain, 2, &s, Some(&draw))
        .unwrap();
    link_ids(&client, &next, &chain).unwrap();
    let x = client.empty(3 * d * 4);
    w.embed(&client, &next, &x).unwrap();
    let x = read_f32(&client, x);
    let drawn: Vec<u32> = (0..2)
        .map(|r| {
            let row = &z[r * vocab..(r + 1) * vocab];
            let z1 = row[best(r) as usize];
            gumbel_max(row, z1, t, keys[r]).unwrap()
        })
        .collect();
    assert!(
        (0..2).any(|r| drawn[r] != best(r)),
        "the draws are the best ids: the check would not tell them apart"
    );
    for (i, id) in [7, drawn[0], drawn[1]].into_iter().enumerate() {
        let want = &table[id as usize * d..(id as usize + 1) * d];
        assert_eq!(
            bits(&x[i * d..(i + 1) * d]),
            bits(want),
            "row {i}: drawn id {id}"
        );
    }
    // A chain too short for the link is refused. The runtime pads an allocation to the
    // device's alignment (256 bytes on an H100: a 2-row chain there holds 6 rows), so the
    // links here reach past any padding: chain row 64 and beyond.
    let short = client.empty(2 * SUMMARY_WORDS * 4);
    let far = Link {
        ids_from: 64,
        ids: 2,
        summaries_at: 64,
    };
    assert!(link_ids(&client, &linked(&[7, 0, 0], far), &short).is_err());
    let far_summaries = linked(&[0, 0], Link { ids: 0, ..far });
    assert!(
        summary
            .run(
                &client,
                &upload_f32(&client, &z),
                &short,
                2,
                &far_summaries,
                None
            )
            .is_err()
    );
}

#[test]
fn a_trees_rows_move_into_place() {
    let client = client();
    let shape = Heads {
        heads: 2,
        kv_heads: 2,
        head_dim: 96,
    };
    for ty in [KvType::F16, KvType::F32] {
        // The moves copy bits: 32-bit words, 96 values a row in 48 (f16) or 96 (f32) of them.
        let row = 96 * ty.bytes() / 4;
        let n = shape.cache_bytes(12, ty).unwrap() / 4;
        assert_eq!(n, 4 * 12 * row);
        let before: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let kv = upload_f32(&client, &before);
        let copy = CopyRows::new(&client, (shape, ty)).unwrap();
        let moves = copy.moves(&client, &[(7, 5), (9, 6)], 12).unwrap();
        copy.run(&client, &kv, &moves).unwrap();
        let after = read_f32(&client, kv);
        let mut want = before.clone();
        for head in 0..4 {
            for (from, to) in [(7, 5), (9, 6)] {
                for d in 0..row {
                    want[(head * 12 + to) * row + d] = before[(head * 12 + from) * row + d];
                }
            }
        }
        assert_eq!(bits(&after), bits(&want), "{ty:?}");
        assert!(copy.moves(&client, &[(12, 3)], 12).is_err());
        // A cache cloned on the device equals its source.
        let kv = upload_f32(&client, &before);
        let copied = clone_buffer(&client, &kv, n * 4).unwrap();
        assert_eq!(bits(&read_f32(&client, copied)), bits(&before));
    }
}

/// The measurement's read touches every word it is given once: its threads' words XOR to the
/// buffer's (for a size that leaves threads without work, and one that wraps threads around),
/// and sizes it cannot read are refused.
#[test]
fn a_read_through_sees_every_word_once() {
    let client = client();
    for words in [4usize, 8000, 40_000] {
        let data: Vec<u32> = (0..words as u32)
            .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(i % 31))
            .collect();
        let bytes: Vec<u8> = data.iter().flat_map(|w| w.to_le_bytes()).collect();
        let h = client.create_from_slice(&bytes);
        let out = read_u32(&client, read_through(&client, &h, words * 4).unwrap());
        let want = data.iter().fold(0, |a, &w| a ^ w);
        assert_eq!(out.iter().fold(0, |a, &w| a ^ w), want, "{words} words");
        if words < 8 {
            continue;
        }
        // A prefix: the words past it are not read.
        let half = read_u32(&client, read_through(&client, &h, words * 2).unwrap());
        let want = data[..words / 2].iter().fold(0, |a, &w| a ^ w);
        assert_eq!(
            half.iter().fold(0, |a, &w| a ^ w),
            want,
            "half of {words} words"
        );
    }
    let h = client.create_from_slice(&[0u8; 64]);
    assert!(read_through(&client, &h, 0).is_err());
    assert!(read_through(&client, &h, 20).is_err());
    assert!(read_through(&client, &h, 128).is_err());
}

/// An eviction (a tuning's read before each timed product) leaves the output it is bound to as
/// it was, unless a thread's words fold to the mark, which it then writes at the output's first
/// word: so its reads count (the write depends on them) and cannot touch more than that word.
#[test]
fn an_eviction_leaves_its_output_but_where_the_data_meet_the_mark() {
    let client = client();
    // 2,048 vec4s: 2 workgroups of 256 threads, 4 vec4s a thread (vec4s t, t + 512, …).
    let vec4s = 2048;
    let evict = ReadThrough::evicting(&client, vec4s * 16).unwrap();
    let y0: Vec<u32> = (0..8).map(|i| 1000 + i).collect();
    for marked in [None, Some(0usize), Some(3 * 512 + 7)] {
        let mut words = vec![0u32; vec4s * 4];
        if let Some(v) = marked {
            // Thread (v mod 512)'s fold: the mark in one lane of one of its vec4s.
            words[v * 4 + 2] = ReadThrough::MARK;
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let src = client.create_from_slice(&bytes);
        let y =
            client.create_from_slice(&y0.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>());
        evict.run_into(&client, &src, &y).unwrap();
        let mut want = y0.clone();
        if marked.is_some() {
            want[0] = ReadThrough::MARK;
        }
        assert_eq!(read_u32(&client, y), want, "mark at {marked:?}");
    }
    // A source shorter than the read is refused.
    let short = client.create_from_slice(&[0u8; 64]);
    let y = client.create_from_slice(&[0u8; 4]);
    assert!(evict.run_into(&client, &short, &y).is_err());

    // A product timed after evictions: a time (at least 0: the least batch less the least of
    // the reads alone), and the group's outputs as before.
    let max = client.properties().memory.max_page_size;
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let cols = cols_for(WeightType::Q4K, 256);
    let w = random_matrix(WeightType::Q4K, 16, cols, &mut rng);
    let g = GpuMatrix::upload(&client, w.ty(), w.rows(), w.cols(), w.blocks(), max).unwrap();
    let group = MatrixGroup::new(&client, vec![g], Epilogue::Store, None, Rows::All).unwrap();
    let before =
        pollster::block_on(mars_kernels::gpu::group_output(&client, &group, 5, false)).unwrap();
    let evict = Evict::new(&client, 64 << 10).unwrap();
    for rows in [1, 5] {
        let ms = pollster::block_on(mars_kernels::gpu::time_group(
            &client,
            &group,
            (rows, false),
            1.0,
            Some(&evict),
        ))
        .unwrap();
        assert!(ms.is_finite() && ms >= 0.0, "{rows} rows: {ms}");
    }
    let after =
        pollster::block_on(mars_kernels::gpu::group_output(&client, &group, 5, false)).unwrap();
    assert_eq!(bits(&before), bits(&after));
    assert!(Evict::new(&client, 10).is_err());
}

/// q | k | v in one launch (three types, with biases) equals each matrix alone plus its bias;
/// gate | up with SiLU(gate)·up, and a residual added in place, equal their definitions.
#[test]
fn a_group_equals_its_members_alone() {
    let client = client();
    let max = client.properties().memory.max_page_size;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let cols = cols_for(WeightType::Q4K, 256);
    let upload = |w: &mars_kernels::QMatrix| {
        GpuMatrix::upload(&client, w.ty(), w.rows(), w.cols(), w.blocks(), max).unwrap()
    };
    let ws = [
        random_matrix(WeightType::Q4K, 12, cols, &mut rng),
        random_matrix(WeightType::Q8_0, 8, cols, &mut rng),
        random_matrix(WeightType::Q6K, 8, cols, &mut rng),
    ];
    let gs: Vec<GpuMatrix> = ws.iter().map(upload).collect();
    let bias = normal(&mut rng, 28, 1.0);
    let qkv =
        MatrixGroup::new(&client, gs.clone(), Epilogue::Store, Some(&bias), Rows::All).unwrap();
    assert_eq!(qkv.launches(), 1);
    for m in [1, 3, 16, 20] {
        let x = normal(&mut rng, m * cols, 1.0);
        let xh = upload_f32(&client, &x);
        let s = step(
            &client,
            &Step::chain(&vec![0; m], 0, m, usize::MAX >> 40).unwrap(),
        );
        let y = client.empty(m * 28 * 4);
        qkv.run(&client, &xh, &y, &s).unwrap();
        let y = read_f32(&client, y);
        let mut first = 0;
        for g in &gs {
            let alone = client.empty(m * g.rows() * 4);
            g.matmul(&client, &xh, &alone, m).unwrap();
            let alone = read_f32(&client, alone);
            for r in 0..m {
                for o in 0..g.rows() {
                    let want = alone[r * g.rows() + o] + bias[first + o];
                    assert_eq!(
                        y[r * 28 + first + o].to_bits(),
                        want.to_bits(),
                        "m {m} row {r} output {}",
                        first + o
                    );
                }
            }
            first += g.rows();
        }
    }

    // gate | up: silu(gate) · up, within f32 rounding of the definition over the exact products.
    let gate = random_matrix(WeightType::Q4K, 10, cols, &mut rng);
    let up = random_matrix(WeightType::Q5_0, 10, cols, &mut rng);
    let swiglu = MatrixGroup::new(
        &client,
        vec![upload(&gate), upload(&up)],
        Epilogue::SwiGlu,
        None,
        Rows::All,
    )
    .unwrap();
    assert_eq!(swiglu.outputs(), 10);
    let m = 5;
    let x = normal(&mut rng, m * cols, 1.0);
    let s = step(&client, &Step::chain(&vec![0; m], 0, m, 1).unwrap());
    let y = client.empty(m * 10 * 4);
    swiglu
        .run(&client, &upload_f32(&client, &x), &y, &s)
        .unwrap();
    let y = read_f32(&client, y);
    let (gd, ud) = (dequantized(&gate), dequantized(&up));
    for r in 0..m {
        for j in 0..10 {
            let dot = |w: &[f32]| -> f64 {
                w[j * cols..(j + 1) * cols]
                    .iter()
                    .zip(&x[r * cols..(r + 1) * cols])
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum()
            };
            let (g, u) = (dot(&gd), dot(&ud));
            let want = g / (1.0 + (-g).exp()) * u;
            let got = f64::from(y[r * 10 + j]);
            assert!(
                (got - want).abs() < 1e-4 * want.abs().max(1.0),
                "row {r} [{j}]: {got} vs {want}"
            );
        }
    }

    // A residual added in place: y0 + x·Wᵀ.
    let add = MatrixGroup::new(
        &client,
        vec![upload(&ws[0])],
        Epilogue::Add,
        None,
        Rows::All,
    )
    .unwrap();
    let y0 = normal(&mut rng, m * 12, 3.0);
    let yh = upload_f32(&client, &y0);
    let xh = upload_f32(&client, &x);
    add.run(&client, &xh, &yh, &s).unwrap();
    let sum = read_f32(&client, yh);
    let alone = client.empty(m * 12 * 4);
    gs[0].matmul(&client, &xh, &alone, m).unwrap();
    let alone = read_f32(&client, alone);
    for i in 0..m * 12 {
        assert_eq!(sum[i].to_bits(), (y0[i] + alone[i]).to_bits(), "[{i}]");
    }
}

/// A team of four outputs gives each output the bits a team of one gives, in every epilogue:
/// q | k | v groups whose members' sizes are not multiples of four (a team straddles two
/// matrices), a bias, a logit limit inside a team, a residual added in place, and gate | up.
#[test]
fn four_outputs_a_team_give_the_bits_of_one() {
    let client = client();
    let max = client.properties().memory.max_page_size;
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let cols = cols_for(WeightType::Q5_0, 512);
    let ws = [
        random_matrix(WeightType::Q5_0, 6, cols, &mut rng),
        random_matrix(WeightType::Q8_0, 5, cols, &mut rng),
        random_matrix(WeightType::Q6K, 3, cols, &mut rng),
    ];
    let bias = normal(&mut rng, 14, 1.0);
    let run = |fan: Fan, members: &[usize], epilogue: Epilogue, m: usize, limit: usize| {
        let gs: Vec<GpuMatrix> = members
            .iter()
            .map(|&i| {
                let w = &ws[i];
                let mut g = GpuMatrix::upload(&client, w.ty(), w.rows(), w.cols(), w.blocks(), max)
                    .unwrap();
                g.set_fan(fan);
                g
            })
            .collect();
        group_output(&client, gs, &bias, epilogue, m, limit).0
    };
    let cases: [(&[usize], Epilogue, usize); 5] = [
        (&[0, 1, 2], Epilogue::Store, usize::MAX >> 40),
        (&[0, 1, 2], Epilogue::Store, 9),
        (&[1], Epilogue::Store, 3),
        (&[1], Epilogue::Add, 1),
        (&[0, 0], Epilogue::SwiGlu, 1),
    ];
    for (members, epilogue, limit) in cases {
        for m in [1, 3, 16, 20] {
            let one = run(Fan::One, members, epilogue, m, limit);
            let four = run(Fan::Four, members, epilogue, m, limit);
            assert_eq!(
                bits(&four),
                bits(&one),
                "{members:?} {epilogue:?} limit {limit} m {m}"
            );
            // Past the logit limit every row's outputs are −inf.
            let total: usize = members.iter().map(|&i| ws[i].rows()).sum();
            if limit < total && epilogue == Epilogue::Store {
                for row in four.chunks(total) {
                    assert!(
                        row[limit..].iter().all(|v| *v == f32::NEG_INFINITY),
                        "{row:?}"
                    );
                    assert!(row[..limit].iter().all(|v| v.is_finite()), "{row:?}");
                }
            }
        }
    }
}

/// A group whose matrices are too large for one binding each (a 32B's gate | up: ~80 MB each
/// in Q4_K, over the 64 MiB parts a load uploads) runs a launch per part and gives the bits of
/// the unsplit group: q | k | v with biases and a logit limit, a residual added in place, and
/// gate | up, with part sizes lowered here so that small matrices split into several parts.
#[test]
fn a_split_group_gives_the_bits_of_an_unsplit_one() {
    let client = client();
    let max = client.properties().memory.max_page_size;
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let cols = cols_for(WeightType::Q4K, 512);
    let ws = [
        random_matrix(WeightType::Q4K, 13, cols, &mut rng),
        random_matrix(WeightType::Q6K, 7, cols, &mut rng),
        random_matrix(WeightType::Q8_0, 9, cols, &mut rng),
        random_matrix(WeightType::Q4K, 13, cols, &mut rng),
    ];
    let bias = normal(&mut rng, 29, 1.0);
    // Parts of 3 + i rows for a group's matrix i: every matrix in two parts or more, gate and
    // up (of other types in a real file) split at different rows.
    let small =
        |w: &mars_kernels::QMatrix, i: usize| ((3 + i) * w.blocks().len() / w.rows() + 4) as u64;
    let run = |split: bool, members: &[usize], epilogue: Epilogue, m: usize, limit: usize| {
        let gs: Vec<GpuMatrix> = members
            .iter()
            .enumerate()
            .map(|(at, &i)| {
                let w = &ws[i];
                let bound = if split { small(w, at) } else { max };
                GpuMatrix::upload(&client, w.ty(), w.rows(), w.cols(), w.blocks(), bound).unwrap()
            })
            .collect();
        if split {
            assert!(gs.iter().all(|g| g.parts().len() >= 2));
        }
        let (y, launches) = group_output(&client, gs, &bias, epilogue, m, limit);
        assert_eq!(launches > 1, split, "{members:?} {epilogue:?}");
        y
    };
    let cases: [(&[usize], Epilogue, usize); 5] = [
        (&[0, 1, 2], Epilogue::Store, usize::MAX >> 40),
        (&[0, 1, 2], Epilogue::Store, 17),
        (&[1], Epilogue::Store, 5),
        (&[0], Epilogue::Add, 1),
        (&[0, 3], Epilogue::SwiGlu, 1),
    ];
    for (members, epilogue, limit) in cases {
        for m in [1, 17] {
            let whole = run(false, members, epilogue, m, limit);
            let parts = run(true, members, epilogue, m, limit);
            assert_eq!(
                bits(&parts),
                bits(&whole),
                "{members:?} {epilogue:?} limit {limit} m {m}"
            );
        }
    }
}

/// The output of the group of `gs` (biases from `bias` where it stores) over `m` rows of
/// activations drawn from the seed `m`, y starting from drawn values (read by Add), with the
/// step's logit limit `limit`; and the launches the group took.
fn group_output(
    client: &Client,
    gs: Vec<GpuMatrix>,
    bias: &[f32],
    epilogue: Epilogue,
    m: usize,
    limit: usize,
) -> (Vec<f32>, usize) {
    let cols = gs[0].cols();
    let total: usize = gs.iter().map(GpuMatrix::rows).sum();
    let bias = (epilogue == Epilogue::Store).then_some(&bias[..total]);
    // Over the logit rows (every row of the step), as the output head is: the logit limit
    // applies to that product alone.
    let group = MatrixGroup::new(client, gs, epilogue, bias, Rows::Tail).unwrap();
    let mut x_rng = ChaCha8Rng::seed_from_u64(m as u64);
    let x = normal(&mut x_rng, m * cols, 1.0);
    let y0 = normal(&mut x_rng, m * group.outputs(), 2.0);
    let s = step(client, &Step::chain(&vec![0; m], 0, m, limit).unwrap());
    let y = upload_f32(client, &y0);
    group.run(client, &upload_f32(client, &x), &y, &s).unwrap();
    (read_f32(client, y), group.launches())
}

/// The norm folded into a group's products (`MatrixGroup::with_norm`) gives what the norm
/// launched apart and the product from its normed rows give, within f32 rounding, in every f32
/// form of every epilogue (q | k | v with biases, gate | up, a residual added in place, lane
/// teams included); each row's bits depend on that row alone (a row of 16 equals the same row
/// alone, bit for bit: what lets a verification pass equal decoding); a split group gives the
/// bits of an unsplit one; the head, over the last rows, takes them from their offset; and what
/// the fold cannot take is refused.
#[test]
fn a_folded_norm_equals_the_norm_launched_apart() {
    use mars_kernels::gpu::{Acts, outputs_agree};
    let client = client();
    let max = client.properties().memory.max_page_size;
    let mut rng = ChaCha8Rng::seed_from_u64(33);
    let cols = cols_for(WeightType::Q4K, 512);
    let ws = [
        random_matrix(WeightType::Q4K, 13, cols, &mut rng),
        random_matrix(WeightType::Q6K, 7, cols, &mut rng),
        random_matrix(WeightType::Q4K, 13, cols, &mut rng),
        random_matrix(WeightType::Q8_0, 13, cols, &mut rng),
    ];
    let bias = normal(&mut rng, 35, 1.0);
    // Weights around 1, as a model's norms are, some negative.
    let g: Vec<f32> = normal(&mut rng, cols, 1.0)
        .iter()
        .map(|v| v + 0.5)
        .collect();
    let eps = 1e-6;
    let norm = Norm::new(&client, &g, eps).unwrap();
    let upload = |i: usize, bound: u64| {
        let w = &ws[i];
        GpuMatrix::upload(&client, w.ty(), w.rows(), w.cols(), w.blocks(), bound).unwrap()
    };
    // One row of activations, drawn from its own seed: the same row whatever the pass.
    let row = |r: usize| normal(&mut ChaCha8Rng::seed_from_u64(100 + r as u64), cols, 3.0);
    // Rows `rows` through `group` (y from each row's drawn values, read by Add): folded, or
    // the norm apart and the product from its rows.
    let run = |group: &MatrixGroup, rows: &[usize], folded: bool| {
        let m = rows.len();
        let x: Vec<f32> = rows.iter().flat_map(|&r| row(r)).collect();
        let n = group.outputs();
        let y0: Vec<f32> = rows
            .iter()
            .flat_map(|&r| normal(&mut ChaCha8Rng::seed_from_u64(200 + r as u64), n, 2.0))
            .collect();
        let s = step(&client, &Step::chain(&vec![0; m], 0, m, 1).unwrap());
        let (xh, y) = (upload_f32(&client, &x), upload_f32(&client, &y0));
        if folded {
            assert!(group.folds_norm(&s));
            group.run_normed(&client, &xh, &y, &s).unwrap();
        } else {
            let h = client.empty(m * cols * 4);
            norm.run(&client, &xh, &h, &s, false).unwrap();
            group.run(&client, &h, &y, &s).unwrap();
        }
        read_f32(&client, y)
    };
    // Q4_K and Q6_K (lane teams), a SwiGLU of Q4_K beside Q8_0 (no lanes), Q6_K alone (lane and
    // wide teams), a SwiGLU of Q4_K (lane and wide teams).
    let cases: [(&[usize], Epilogue); 4] = [
        (&[0, 1, 2], Epilogue::Store),
        (&[0, 3], Epilogue::SwiGlu),
        (&[1], Epilogue::Add),
        (&[0, 2], Epilogue::SwiGlu),
    ];
    let mut forms_run = 0;
    for (members, epilogue) in cases {
        let total: usize = members.iter().map(|&i| ws[i].rows()).sum();
        let b = (epilogue == Epilogue::Store).then_some(&bias[..total]);
        let gs = members.iter().map(|&i| upload(i, max)).collect();
        let group = MatrixGroup::new(&client, gs, epilogue, b, Rows::All).unwrap();
        for form in group.forms().into_iter().filter(|f| f.acts == Acts::F32) {
            let apart = group.with_form(&client, form).unwrap();
            let folded = apart.with_norm_as(&client, &g, eps, true).unwrap();
            assert_eq!(folded.form(), form);
            let what = format!("{members:?} {epilogue:?} {}", form.name());
            let sixteen: Vec<usize> = (0..16).collect();
            let want = run(&apart, &sixteen, false);
            let got = run(&folded, &sixteen, true);
            assert!(
                outputs_agree(&got, &want, 1e-5),
                "{what}: {got:?} vs {want:?}"
            );
            let n = folded.outputs();
            for (rows, at) in [(&[5usize][..], 5), (&[3, 9, 15, 0, 1], 2)] {
                let r = rows[at % rows.len()];
                let part = run(&folded, rows, true);
                let i = at % rows.len();
                assert_eq!(
                    bits(&part[i * n..(i + 1) * n]),
                    bits(&got[r * n..(r + 1) * n]),
                    "{what}: row {r} among {rows:?}"
                );
            }
            forms_run += 1;
        }
        // Split into parts of a few rows each: the bits of the unsplit group.
        let small = |i: usize| ((3 + i) * ws[i].blocks().len() / ws[i].rows() + 4) as u64;
        let gs = members.iter().map(|&i| upload(i, small(i))).collect();
        let split = MatrixGroup::new(&client, gs, epilogue, b, Rows::All)
            .unwrap()
            .with_norm_as(&client, &g, eps, true)
            .unwrap();
        assert!(split.launches() > 1);
        let whole = group.with_norm_as(&client, &g, eps, true).unwrap();
        let rows = [4, 11, 2];
        assert_eq!(
            bits(&run(&split, &rows, true)),
            bits(&run(&whole, &rows, true)),
            "{members:?} {epilogue:?} split"
        );
    }
    // Quarter teams; lane and wide teams where every type has them; each of the three also a
    // workgroup an output but for a SwiGLU; fan 1 and 4.
    assert_eq!(forms_run, 8 + 2 + 12 + 6);

    // Refused: weights of another width, a bad epsilon, the last rows alone (the head); and a
    // step in 8-bit activations does not fold (its norm writes them).
    let group = MatrixGroup::new(
        &client,
        vec![upload(0, max)],
        Epilogue::Store,
        None,
        Rows::All,
    )
    .unwrap();
    assert!(group.with_norm_as(&client, &g[1..], eps, true).is_err());
    assert!(group.with_norm_as(&client, &g, f32::NAN, true).is_err());
    assert!(group.with_norm_as(&client, &g, -1.0, true).is_err());
    let head = MatrixGroup::new(
        &client,
        vec![upload(0, max)],
        Epilogue::Store,
        None,
        Rows::Tail,
    )
    .unwrap();
    // The head over the last 2 of 5 rows, folded: x holds all 5, the product takes rows 3, 4
    // (as the norm apart over the last rows and the product from them give), and row 4 has
    // the bits it has as the one row of a step.
    let folded_head = head.with_norm_as(&client, &g, eps, true).unwrap();
    let five: Vec<f32> = (0..5).flat_map(row).collect();
    let s5 = step(&client, &Step::chain(&[0; 5], 0, 2, 13).unwrap());
    let (x5, y2) = (upload_f32(&client, &five), client.empty(2 * 13 * 4));
    folded_head.run_normed(&client, &x5, &y2, &s5).unwrap();
    let h2 = client.empty(2 * cols * 4);
    norm.run(&client, &x5, &h2, &s5, true).unwrap();
    let want = client.empty(2 * 13 * 4);
    head.run(&client, &h2, &want, &s5).unwrap();
    let (got, want) = (read_f32(&client, y2), read_f32(&client, want));
    assert!(
        outputs_agree(&got, &want, 1e-5),
        "head: {got:?} vs {want:?}"
    );
    let s1 = step(&client, &Step::chain(&[0], 0, 1, 13).unwrap());
    let y1 = client.empty(13 * 4);
    folded_head
        .run_normed(&client, &upload_f32(&client, &row(4)), &y1, &s1)
        .unwrap();
    assert_eq!(bits(&read_f32(&client, y1)), bits(&got[13..]), "head row 4");
    let mut q8 = upload(0, max);
    q8.set_acts(Acts::Q8);
    let q8 = MatrixGroup::new(&client, vec![q8], Epilogue::Store, None, Rows::All)
        .unwrap()
        .with_norm_as(&client, &g, eps, true)
        .unwrap();
    let s = step(&client, &Step::chain(&[0], 0, 1, 1).unwrap());
    let (x, y) = (upload_f32(&client, &row(0)), client.empty(13 * 4));
    assert!(!q8.folds_norm(&s));
    // Held but not folded (a CPU adapter's rule): never taken.
    let apart = group.with_norm_as(&client, &g, eps, false).unwrap();
    assert!(!apart.folds_norm(&s));
    assert!(apart.run_normed(&client, &x, &y, &s).is_err());
    assert!(q8.run_normed(&client, &x, &y, &s).is_err());
}
