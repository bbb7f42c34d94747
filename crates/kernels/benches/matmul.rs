//! One matmul per weight type and row count, at the shapes of SmolLM2-135M's FFN
//! (1536 × 576) and of a 1.5B model's (8960 × 1536): `cargo bench -p mars-kernels`. The ratio
//! of an m-row call to a one-row call is the figure that decides whether verification is cheap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use half::f16;
use mars_kernels::{Isa, Kernels, Layout, QActs, QMatrix, WeightType};

fn matrix(ty: WeightType, rows: usize, cols: usize) -> QMatrix {
    let nb = rows * cols / ty.block_values();
    let mut data = Vec::with_capacity(nb * ty.block_bytes());
    for b in 0..nb {
        let start = data.len();
        data.extend_from_slice(&f16::from_f32(0.01).to_le_bytes());
        while data.len() < start + ty.block_bytes() {
            data.push((b * 31 + data.len() * 7) as u8);
        }
    }
    QMatrix::new(ty, rows, cols, data).unwrap()
}

fn bench(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (name, rows, cols) in [("135M ffn", 1536, 576usize), ("1.5B ffn", 8960, 1536)] {
        // K-quant rows are whole 256-value super-blocks: 576 is not.
        for ty in WeightType::ALL
            .into_iter()
            .filter(|ty| cols.is_multiple_of(ty.block_values()))
        {
            let w = matrix(ty, rows, cols);
            for isa in Isa::available() {
                let k = Kernels::with_isa(isa, threads).unwrap();
                // As the model loads it: Q4_K / Q6_K in 16-row tiles on AVX-512 ("tiles"), the
                // file's rows otherwise; on AVX-512 the rows too, for the comparison.
                let prepared = k.prepare(w.clone());
                let mut layouts = vec![(prepared.layout(), prepared)];
                if layouts[0].0 != w.layout() {
                    layouts.push((w.layout(), w.clone()));
                }
                for (layout, w) in &layouts {
                    for m in [1, 2, 5, 8, 16] {
                        let x: Vec<f32> = (0..m * cols)
                            .map(|i| ((i % 13) as f32 - 6.0) * 0.1)
                            .collect();
                        let mut acts = QActs::default();
                        let mut y = vec![0f32; m * rows];
                        let label = if *layout == Layout::Tiles {
                            " tiles"
                        } else {
                            ""
                        };
                        c.bench_function(&format!("{name} {ty:?} {isa:?}{label} m={m}"), |b| {
                            b.iter(|| {
                                acts.quantize_for(&x, m, cols, k.forms(w)).unwrap();
                                k.matmul(w, &acts, &mut y).unwrap();
                            });
                        });
                    }
                }
            }
        }
    }
}

/// How a one-row call's output rows are split across two threads: the kernels' persistent
/// rayon pool (what `Kernels::matmul` does), or `std::thread::scope` spawning the second
/// thread per call, each half through `Kernels::matmul_rows` on one thread. A decode step makes
/// ~200 such calls of tens to hundreds of microseconds, so the split's own cost matters:
/// `cargo bench -p mars-kernels -- split`.
fn split(c: &mut Criterion) {
    let pool = Kernels::new(2).unwrap();
    let one = Kernels::new(1).unwrap();
    for (name, ty, rows, cols) in [
        ("135M attn q", WeightType::Q4_1, 576, 576usize),
        ("135M ffn up", WeightType::Q4_1, 1536, 576),
        ("1.5B ffn up", WeightType::Q4K, 8960, 1536),
    ] {
        let w = matrix(ty, rows, cols);
        let x: Vec<f32> = (0..cols).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect();
        let mut acts = QActs::default();
        acts.quantize(&x, 1, cols).unwrap();
        let mut y = vec![0f32; rows];
        c.bench_function(&format!("split {name} rayon pool"), |b| {
            b.iter(|| pool.matmul(&w, &acts, &mut y).unwrap());
        });
        c.bench_function(&format!("split {name} scoped threads"), |b| {
            b.iter(|| {
                let half = rows / 2;
                let (a, rest) = y.split_at_mut(half);
                std::thread::scope(|s| {
                    s.spawn(|| one.matmul_rows(&w, half..rows, &acts, rest).unwrap());
                    one.matmul_rows(&w, 0..half, &acts, a).unwrap();
                });
            });
        });
    }
}

criterion_group!(benches, bench, split);
criterion_main!(benches);
