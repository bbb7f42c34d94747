//! The matrix calls of a decode step alone: Qwen2.5-Coder-1.5B-Instruct Q4_K_M's 28 layers
//! (Q4_K, with attn_v and ffn_down in Q6_K in the 14 layers where the file has them; q/k/v and
//! gate/up batched as the model batches them, then o and down) and its Q6_K output head, ~1 GB
//! that streams from memory once per step, with nothing else between the calls. Prints the weight bandwidth per
//! step (bytes ÷ time) for m = 1 and 5 rows — what the kernels and the pool reach without the
//! rest of the forward pass, to hold against a plain read of memory and against llama.cpp.
//!   cargo run --release -p mars-kernels --example stream [THREADS] [STEPS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use mars_kernels::{Kernels, Product, QActs, QMatrix, WeightType};

const LAYERS: usize = 28;
const D: usize = 1536; // d_model
const KV: usize = 256; // n_kv_heads · head_dim
const FF: usize = 8960; // d_ff

/// The layers whose attn_v and ffn_down the file stores in Q6_K.
const Q6K_LAYERS: [usize; 14] = [0, 1, 5, 6, 7, 8, 9, 10, 13, 16, 19, 21, 24, 27];
const VOCAB: usize = 151_936;

fn matrix(k: &Kernels, ty: WeightType, rows: usize, cols: usize, seed: usize) -> QMatrix {
    let n = rows * cols / ty.block_values() * ty.block_bytes();
    // Varied bytes with small f16 scales (the values do not matter for speed).
    let bytes: Vec<u8> = (0..n)
        .map(|i| ((i + seed).wrapping_mul(2_654_435_761) >> 13) as u8 & 0x3b)
        .collect();
    k.prepare(QMatrix::new(ty, rows, cols, bytes).unwrap())
}

struct Layer {
    q: QMatrix,    // [D, D]
    k: QMatrix,    // [KV, D]
    v: QMatrix,    // [KV, D]
    o: QMatrix,    // [D, D]
    gate: QMatrix, // [FF, D]
    up: QMatrix,   // [FF, D]
    down: QMatrix, // [D, FF]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        |a| a.parse().expect("THREADS"),
    );
    let steps: usize = args.next().map_or(20, |a| a.parse().expect("STEPS"));
    let k = Kernels::new(threads).unwrap();
    let layers: Vec<Layer> = (0..LAYERS)
        .map(|l| {
            let (q4, vd) = (
                WeightType::Q4K,
                if Q6K_LAYERS.contains(&l) {
                    WeightType::Q6K
                } else {
                    WeightType::Q4K
                },
            );
            Layer {
                q: matrix(&k, q4, D, D, 7 * l),
                k: matrix(&k, q4, KV, D, 7 * l + 1),
                v: matrix(&k, vd, KV, D, 7 * l + 2),
                o: matrix(&k, q4, D, D, 7 * l + 3),
                gate: matrix(&k, q4, FF, D, 7 * l + 4),
                up: matrix(&k, q4, FF, D, 7 * l + 5),
                down: matrix(&k, vd, D, FF, 7 * l + 6),
            }
        })
        .collect();
    let head = matrix(&k, WeightType::Q6K, VOCAB, D, 1); // [vocab, D]
    let bytes: usize = layers
        .iter()
        .map(|l| {
            [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                .map(QMatrix::bytes)
                .iter()
                .sum::<usize>()
        })
        .sum::<usize>()
        + head.bytes();
    println!(
        "{LAYERS} layers and the head, {:.0} MB of weights, {threads} threads",
        bytes as f64 / 1e6
    );
    for m in [1usize, 5] {
        let x_d: Vec<f32> = (0..m * D).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect(); // [m, D]
        let x_ff: Vec<f32> = (0..m * FF).map(|i| ((i % 11) as f32 - 5.0) * 0.1).collect(); // [m, FF]
        let (mut a_d, mut a_ff) = (QActs::default(), QActs::default());
        let forms = k.forms(&layers[0].q) | k.forms(&head);
        a_d.quantize_for(&x_d, m, D, forms).unwrap();
        a_ff.quantize_for(&x_ff, m, FF, forms).unwrap();
        let (mut q, mut kk, mut v) = (vec![0f32; m * D], vec![0f32; m * KV], vec![0f32; m * KV]);
        let (mut g, mut u, mut o) = (vec![0f32; m * FF], vec![0f32; m * FF], vec![0f32; m * D]);
        let mut logits = vec![0f32; m * VOCAB]; // [m, vocab]
        let mut times = Vec::new();
        for _ in 0..steps {
            let t = Instant::now();
            k.run(|| {
                for l in &layers {
                    k.matmul_batch(
                        &a_d,
                        &mut [
                            Product {
                                w: &l.q,
                                rows: 0..D,
                                y: &mut q,
                            },
                            Product {
                                w: &l.k,
                                rows: 0..KV,
                                y: &mut kk,
                            },
                            Product {
                                w: &l.v,
                                rows: 0..KV,
                                y: &mut v,
                            },
                        ],
                    )
                    .unwrap();
                    k.matmul(&l.o, &a_d, &mut o).unwrap();
                    k.matmul_batch(
                        &a_d,
                        &mut [
                            Product {
                                w: &l.gate,
                                rows: 0..FF,
                                y: &mut g,
                            },
                            Product {
                                w: &l.up,
                                rows: 0..FF,
                                y: &mut u,
                            },
                        ],
                    )
                    .unwrap();
                    k.matmul(&l.down, &a_ff, &mut o).unwrap();
                }
                k.matmul(&head, &a_d, &mut logits).unwrap();
            });
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let gbs = |s: f64| bytes as f64 / s / 1e9;
        println!(
            "m = {m}: median {:.2} ms ({:.1} GB/s), fastest {:.2} ms ({:.1} GB/s)",
            times[steps / 2] * 1e3,
            gbs(times[steps / 2]),
            times[0] * 1e3,
            gbs(times[0])
        );
    }
}
