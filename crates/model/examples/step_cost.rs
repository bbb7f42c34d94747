//! Cost of one forward pass by number of new tokens (what a verification step of k + 1 tokens
//! costs relative to one decoding step): `cargo run --release -p mars-model --example step_cost
//! -- MODEL.gguf`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use mars_formats::Gguf;
use mars_model::{Device, Llama, LoadOptions, read_f32};

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: step_cost MODEL.gguf");
    let bytes = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let model = Llama::from_gguf(&g, &Device::flex(), LoadOptions::default()).unwrap();
    let prompt: Vec<u32> = (0..64).map(|i| 100 + i * 7).collect();
    let mut cache = model.new_cache(512).unwrap();
    read_f32(model.forward(&prompt, &mut cache).unwrap()).unwrap();
    for t in [1usize, 2, 3, 5, 8, 9, 16] {
        let tokens: Vec<u32> = (0..t as u32).map(|i| 200 + i).collect();
        let reps = 10;
        let start = Instant::now();
        for _ in 0..reps {
            read_f32(model.forward(&tokens, &mut cache).unwrap()).unwrap();
            cache.truncate(64).unwrap();
        }
        let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(reps);
        println!("{t:>2} tokens: {ms:7.2} ms ({:.2} ms/token)", ms / t as f64);
    }
}
