//! Where a loaded model's resident memory goes: `RssAnon` after each loading step and after a
//! forward pass, against the file's size: `cargo run --release -p mars-model --example memory
//! -- MODEL.gguf [THREADS]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mars_formats::{Gguf, Tokenizer};
use mars_model::{Device, Llama, LoadOptions, WeightPath};

fn rss_anon() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: memory MODEL.gguf [THREADS]");
    let threads = args.next().map_or(1, |t| t.parse().unwrap());
    let file_mb = std::fs::metadata(&path).unwrap().len() as f64 / (1024.0 * 1024.0);
    let say = |step: &str| println!("{step:<28} RssAnon {:8.1} MiB", rss_anon());
    println!("file {file_mb:.1} MiB");
    say("start");
    let bytes = std::fs::read(&path).unwrap();
    say("file read");
    let g = Gguf::parse(&bytes).unwrap();
    say("parsed");
    let tokenizer = Tokenizer::from_gguf(&g).unwrap();
    say("tokenizer");
    let options = LoadOptions::with_weights(WeightPath::CpuPacked { threads });
    let model = Llama::from_gguf(&g, &Device::flex(), options).unwrap();
    say("model");
    drop(g);
    drop(bytes);
    say("file dropped");
    let mut cache = model.new_cache(512).unwrap();
    let prompt: Vec<u32> = (0..16).map(|i| 100 + i * 7).collect();
    // As the engine prefills: only the last position's logits.
    model
        .forward_last(&prompt, &mut cache)
        .unwrap()
        .read()
        .unwrap();
    say("prefill 16");
    for t in 0..8u32 {
        model
            .forward(&[300 + t], &mut cache)
            .unwrap()
            .read()
            .unwrap();
    }
    say("8 decode steps");
    let used = rss_anon();
    println!(
        "model + runtime {used:.1} MiB = {:.3} x file (tokenizer {} tokens)",
        used / file_mb,
        tokenizer.vocab_size()
    );
}
