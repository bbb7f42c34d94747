//! Cost of one forward pass by number of new tokens (what a verification step of k + 1 tokens
//! costs relative to one decoding step): `cargo run --release -p mars-model --example step_cost
//! -- MODEL.gguf [ROWS…]` (rows per pass: 1 2 3 5 8 9 16 unless given; `STEP_REPS` passes each, 10
//! unless set — many passes of one row count make a profile of that pass). The packed CPU path
//! on `STEP_THREADS` threads (default: one per core); `STEP_THREADS=0` runs the f32 reference.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use mars_formats::Gguf;
use mars_model::{Device, Llama, LoadOptions, WeightPath};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: step_cost MODEL.gguf [ROWS…]");
    let mut rows: Vec<usize> = args.map(|a| a.parse().expect("ROWS: 1…16")).collect();
    if rows.is_empty() {
        rows = vec![1, 2, 3, 5, 8, 9, 16];
    }
    let reps: u32 = std::env::var("STEP_REPS").map_or(10, |r| r.parse().expect("STEP_REPS"));
    let bytes = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let threads = std::env::var("STEP_THREADS").map_or_else(
        |_| std::thread::available_parallelism().map_or(1, usize::from),
        |t| t.parse().expect("STEP_THREADS"),
    );
    let options = LoadOptions::with_weights(if threads > 0 {
        WeightPath::CpuPacked { threads }
    } else {
        WeightPath::F32
    });
    let model = Llama::from_gguf(&g, &Device::flex(), options).unwrap();
    let prompt: Vec<u32> = (0..64).map(|i| 100 + i * 7).collect();
    let mut cache = model.new_cache(512).unwrap();
    model.forward(&prompt, &mut cache).unwrap().read().unwrap();
    for t in rows {
        let tokens: Vec<u32> = (0..t as u32).map(|i| 200 + i).collect();
        // The mean says what a run of passes costs; the fastest pass is steadier on a noisy
        // machine (other load only ever adds time).
        let (mut total, mut fastest) = (0f64, f64::INFINITY);
        for _ in 0..reps {
            let start = Instant::now();
            model.forward(&tokens, &mut cache).unwrap().read().unwrap();
            let ms = start.elapsed().as_secs_f64() * 1e3;
            (total, fastest) = (total + ms, fastest.min(ms));
            cache.truncate(64).unwrap();
        }
        let ms = total / f64::from(reps);
        println!(
            "{t:>2} tokens: {ms:7.2} ms ({:.2} ms/token), fastest {fastest:7.2} ms",
            ms / t as f64
        );
    }
}
