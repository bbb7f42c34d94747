//! Cost of `[1, t, in] @ [1, in, out]` on flex by t (the projection shapes of SmolLM2-135M):
//! `cargo run --release -p mars-model --example matmul_cost`.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use mars_model::{Device, Tensor, read_f32};

fn main() {
    let device = Device::flex();
    for (din, dout) in [(576usize, 1536usize), (576, 49152)] {
        let w = Tensor::<3>::ones([1, din, dout], &device); // [1, in, out]
        let wt = Tensor::<3>::ones([1, dout, din], &device); // [1, out, in]
        for t in [1usize, 2, 5, 8] {
            let x = Tensor::<3>::ones([1, t, din], &device); // [1, t, in]
            read_f32(x.clone().matmul(w.clone())).unwrap();
            let reps = 20;
            let start = Instant::now();
            for _ in 0..reps {
                read_f32(x.clone().matmul(w.clone())).unwrap();
            }
            let a = start.elapsed().as_secs_f64() * 1e3 / f64::from(reps);
            let start = Instant::now();
            for _ in 0..reps {
                read_f32(x.clone().matmul(wt.clone().swap_dims(1, 2))).unwrap();
            }
            let b = start.elapsed().as_secs_f64() * 1e3 / f64::from(reps);
            let start = Instant::now();
            for _ in 0..reps {
                read_f32(wt.clone().matmul(x.clone().swap_dims(1, 2)).swap_dims(1, 2)).unwrap();
            }
            let c = start.elapsed().as_secs_f64() * 1e3 / f64::from(reps);
            let start = Instant::now();
            for _ in 0..reps {
                let rows: Vec<Tensor<3>> = (0..t)
                    .map(|i| x.clone().slice([0..1, i..i + 1, 0..din]).matmul(w.clone()))
                    .collect();
                read_f32(Tensor::cat(rows, 1)).unwrap();
            }
            let d = start.elapsed().as_secs_f64() * 1e3 / f64::from(reps);
            println!(
                "[{din} -> {dout}] t={t}: x@W {a:6.2} ms, x@Wtᵀ {b:6.2} ms, (Wt@xᵀ)ᵀ {c:6.2} ms, rows {d:6.2} ms"
            );
        }
    }
}
