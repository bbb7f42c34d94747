//! The attention kernel alone at a 1.5B Qwen2.5 layer's shape (12 query heads, 2 KV heads of
//! 128 values) over a 64-position context, for 1, 5 and 16 query rows (decode and
//! verification): the median time of a layer's call and of the 28 layers of a pass.
//!   cargo run --release -p mars-kernels --example attention_cost [THREADS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use mars_kernels::{Heads, Kernels};

const HEADS: Heads = Heads {
    heads: 12,
    kv_heads: 2,
    head_dim: 128,
};
const LAYERS: usize = 28;
const CONTEXT: usize = 64;

fn main() {
    let threads: usize = std::env::args().nth(1).map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        |a| a.parse().expect("THREADS"),
    );
    let k = Kernels::new(threads).unwrap();
    let (q_row, kv_row) = (
        HEADS.heads * HEADS.head_dim,
        HEADS.kv_heads * HEADS.head_dim,
    );
    println!("{:?} kernels, {threads} threads", k.isa());
    for t in [1usize, 5, 16] {
        let q: Vec<f32> = (0..t * q_row)
            .map(|i| ((i % 17) as f32 - 8.0) * 0.05)
            .collect(); // [t, heads, head_dim]
        let kv: Vec<f32> = (0..(CONTEXT + t) * kv_row)
            .map(|i| ((i % 19) as f32 - 9.0) * 0.05)
            .collect(); // [positions, kv_heads, head_dim]
        let mut out = vec![0f32; q.len()]; // [t, heads, head_dim]
        let reps = 200;
        // All the calls inside one pool region, as a forward pass makes them.
        let mut times: Vec<f64> = k.run(|| {
            (0..reps)
                .map(|_| {
                    let start = Instant::now();
                    k.attention(HEADS, CONTEXT, &q, &kv, &kv, &mut out).unwrap();
                    start.elapsed().as_secs_f64()
                })
                .collect()
        });
        times.sort_by(f64::total_cmp);
        let median = times[reps / 2];
        println!(
            "{t:2} rows: {:.1} µs a layer, {:.2} ms a pass of {LAYERS} layers",
            median * 1e6,
            median * 1e3 * LAYERS as f64
        );
    }
}
