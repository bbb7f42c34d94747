//! The rows-cost curve of one projection: today's flex f32 matmul (`[1, m, in] @ [1, in, out]`,
//! what `Linear` runs) beside mars-kernels on the same shape with the weights kept as GGUF
//! blocks, for m = 1, 2, 4, 5, 8, 16, each relative to its own m = 1, measured in one run:
//! `cargo run --release -p mars-model --example kernel_cost [THREADS]`.
//! Shapes: SmolLM2-135M's FFN up (1536 × 576, Q4_1 in its GGUF), its tied output head
//! (49152 × 576, Q8_0), and Qwen2.5-1.5B's FFN up (8960 × 1536).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use half::f16;
use mars_kernels::{BLOCK, Kernels, QActs, QMatrix, WeightType};
use mars_model::{Device, Tensor, read_f32};

/// Median milliseconds of `f` over `reps` runs after one warm-up.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut ms: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms[reps / 2]
}

fn blocks(ty: WeightType, rows: usize, cols: usize) -> QMatrix {
    let mut data = Vec::with_capacity(rows * cols / BLOCK * ty.block_bytes());
    for b in 0..rows * cols / BLOCK {
        let start = data.len();
        data.extend_from_slice(&f16::from_f32(0.01).to_le_bytes());
        while data.len() < start + ty.block_bytes() {
            data.push((b * 31 + data.len() * 7) as u8);
        }
    }
    QMatrix::new(ty, rows, cols, data).unwrap()
}

fn main() {
    let threads = std::env::args()
        .nth(1)
        .map(|t| t.parse().expect("THREADS"))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let kernels = Kernels::new(threads).unwrap();
    let device = Device::flex();
    println!(
        "mars-kernels: {:?} micro-kernel, {threads} threads; flex: f32, its own threading",
        kernels.isa()
    );
    println!("| shape | type | m | flex f32 ms | ×(m=1) | kernels ms | ×(m=1) | flex / kernels |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, ty, out, din) in [
        ("135M ffn up", WeightType::Q4_1, 1536usize, 576usize),
        ("135M head", WeightType::Q8_0, 49152, 576),
        ("1.5B ffn up", WeightType::Q4_1, 8960, 1536),
    ] {
        let w = Tensor::<3>::ones([1, din, out], &device); // [1, in, out]
        let q = blocks(ty, out, din); // [out, in] blocks
        let (mut flex1, mut kern1) = (0.0, 0.0);
        for m in [1usize, 2, 4, 5, 8, 16] {
            let x: Vec<f32> = (0..m * din)
                .map(|i| ((i % 13) as f32 - 6.0) * 0.1)
                .collect();
            let xt = Tensor::<3>::from_data(
                burn::tensor::TensorData::new(x.clone(), [1, m, din]),
                &device,
            ); // [1, m, in]
            let reps = if out > 10_000 { 9 } else { 41 };
            let flex = time(reps, || {
                read_f32(xt.clone().matmul(w.clone())).unwrap();
            });
            let mut acts = QActs::default();
            let mut y = vec![0f32; m * out];
            let kern = time(reps, || {
                acts.quantize(&x, m, din).unwrap();
                kernels.matmul(&q, &acts, &mut y).unwrap();
            });
            if m == 1 {
                (flex1, kern1) = (flex, kern);
            }
            println!(
                "| {name} {out}×{din} | {ty:?} | {m} | {flex:.3} | {:.2} | {kern:.3} | {:.2} | {:.1}× |",
                flex / flex1,
                kern / kern1,
                flex / kern
            );
        }
    }
}
