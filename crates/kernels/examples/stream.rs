//! The matrix calls of a decode step alone: Qwen2.5-Coder-1.5B-Instruct Q4_K_M's 28 layers
//! (Q4_K, with attn_v and ffn_down in Q6_K in the 14 layers where the file has them; q/k/v and
//! gate/up batched as the model batches them, then o and down) and its Q6_K output head, ~1 GB
//! that streams from memory once per step, with nothing else between the calls. Prints the weight bandwidth per
//! step (bytes ÷ time) for m = 1, 5 and 16 rows (or the row counts given) — what the kernels
//! and the pool reach without the rest of the forward pass, to hold against a plain read of
//! memory and against llama.cpp — and, on a CPU with AVX-512 VNNI, the compute floor of each
//! row count: its multiply-adds at the peak rate of `vpdpbusd` measured on the same threads
//! (8-bit products can go no faster there), as a time and as a multiple of the one-row step.
//!   cargo run --release -p mars-kernels --example stream [THREADS] [STEPS] [ROWS…]
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
    let mut row_counts: Vec<usize> = args.map(|a| a.parse().expect("ROWS")).collect();
    if row_counts.is_empty() {
        row_counts = vec![1, 5, 16];
    }
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
    // Multiply-adds per row: each weight value meets each row once.
    let macs = (LAYERS * (2 * D * D + 2 * KV * D + 3 * FF * D) + VOCAB * D) as f64;
    println!(
        "{LAYERS} layers and the head, {:.0} MB of weights, {:.2} G multiply-adds a row, {threads} threads",
        bytes as f64 / 1e6,
        macs / 1e9
    );
    let peak = vnni::peak(threads);
    if let Some(peak) = peak {
        println!(
            "vpdpbusd peak on {threads} threads: {:.0} G multiply-adds/s",
            peak / 1e9
        );
    }
    let mut one_row = None;
    for &m in &row_counts {
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
        if m == 1 {
            one_row = Some(times[steps / 2]);
        }
        if let Some(peak) = peak {
            let floor = m as f64 * macs / peak;
            print!("        compute floor {:.2} ms", floor * 1e3);
            if let Some(one) = one_row {
                print!(
                    " = {:.2}× the one-row median; measured {:.2}×",
                    floor / one,
                    times[steps / 2] / one
                );
            }
            println!();
        }
    }
}

/// The rate of `vpdpbusd` (64 multiply-adds of u8 × i8 into i32 lanes) on this CPU.
mod vnni {
    use std::time::Instant;

    /// Multiply-adds per second of `threads` threads each running a loop of independent
    /// `vpdpbusd` (12 accumulators, more than its latency × throughput), or `None` without
    /// AVX-512 VNNI.
    pub fn peak(threads: usize) -> Option<f64> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512bw")
        {
            const ITERS: usize = 20_000_000;
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        // SAFETY: the features the function needs were detected above.
                        s.spawn(|| std::hint::black_box(unsafe { x86::dpbusd_loop(ITERS) }));
                    }
                });
                best = best.min(t.elapsed().as_secs_f64());
            }
            return Some((threads * ITERS * x86::ACCUMULATORS * 64) as f64 / best);
        }
        let _ = threads;
        None
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::{
            __m512i, _mm512_add_epi32, _mm512_dpbusd_epi32, _mm512_reduce_add_epi32,
            _mm512_set1_epi8, _mm512_setzero_si512,
        };

        pub const ACCUMULATORS: usize = 12;

        /// `iters` rounds of one `vpdpbusd` into each of the accumulators; the result keeps
        /// the work from being optimized away.
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
        pub fn dpbusd_loop(iters: usize) -> i32 {
            let a = _mm512_set1_epi8(std::hint::black_box(1));
            let b = _mm512_set1_epi8(std::hint::black_box(-1));
            let mut acc: [__m512i; ACCUMULATORS] = [_mm512_setzero_si512(); ACCUMULATORS];
            for _ in 0..iters {
                for x in &mut acc {
                    *x = _mm512_dpbusd_epi32(*x, a, b);
                }
            }
            let sum = acc
                .iter()
                .fold(_mm512_setzero_si512(), |s, &x| _mm512_add_epi32(s, x));
            _mm512_reduce_add_epi32(sum)
        }
    }
}
