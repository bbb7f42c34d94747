//! How often a draft model's sampled draft is kept under each rule: the p/q test of the CPU
//! path (1 − TV(p, q) a position) against the Gumbel-max coupling of the GPU path, where the
//! draft is drawn with the target's noise and kept iff it is the target's draw
//! (`mars_verify::noise::coupled_acceptance`). Both are exact expectations from the two models'
//! rows, so no sampling noise enters the comparison.
//!
//! For each chat prompt, the target samples a continuation (target-only, packed CPU); then each
//! model scores prompt and continuation in one pass, and every generated position's p and q
//! (softmax of the logits at T) give the two rates. Prints one line per prompt and the pooled
//! means.
//!
//! ```text
//! cargo run --release -p mars-engine --example coupling -- TARGET.gguf DRAFT.gguf \
//!     [prompts = 6] [tokens = 48] [temperature = 1] [threads = 2]
//! ```
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::error::Error;
use std::sync::Arc;

use mars_engine::{
    AnyDrafter, Backend, CHAT_PROMPTS, DecodeConfig, Decoder, PLAIN_TOKENS_A_READ, RunSettings,
    Target, WeightChoice,
};
use mars_formats::Gguf;
use mars_model::Llama;
use mars_verify::noise::coupled_acceptance;
use mars_verify::{Mode, Sampling, VerifyConfig};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> Result<T, Box<dyn Error>> {
    match args.get(i) {
        Some(v) => v
            .parse()
            .map_err(|_| format!("argument {i}: cannot parse {v:?}").into()),
        None => Ok(default),
    }
}

/// softmax(z / T) in f64, `[vocab]`.
fn softmax(z: &[f32], t: f64) -> Vec<f64> {
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut p: Vec<f64> = z
        .iter()
        .map(|&v| ((f64::from(v) - f64::from(max)) / t).exp())
        .collect();
    let sum: f64 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= sum);
    p
}

/// The logits of every row of `ids` after a fresh cache, `[ids.len(), vocab]`.
fn rows(model: &Llama, ids: &[u32]) -> Result<Vec<f32>, Box<dyn Error>> {
    let mut cache = model.new_cache(ids.len())?;
    Ok(model.forward(ids, &mut cache)?.read()?)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(target_path), Some(draft_path)) = (args.first(), args.get(1)) else {
        return Err("usage: coupling TARGET.gguf DRAFT.gguf [seeds] [tokens] [T] [threads]".into());
    };
    let seeds: u64 = arg(&args, 2, 4)?;
    let tokens: usize = arg(&args, 3, 64)?;
    let t: f32 = arg(&args, 4, 1.0)?;
    let threads: usize = arg(&args, 5, 2)?;
    if !(t.is_finite() && t > 0.0) {
        return Err(format!("temperature {t}: a finite positive number").into());
    }
    let open = pollster::block_on(Backend::Cpu.open())?;
    let weights = open.weights(WeightChoice::Packed, Some(threads), None)?;
    let options = open.options(weights.path, None);
    let bytes = std::fs::read(target_path)?;
    let target = Target::from_gguf(&Gguf::parse(&bytes)?, &open.device, options)?;
    drop(bytes);
    let bytes = std::fs::read(draft_path)?;
    let draft = target.draft_model(&Gguf::parse(&bytes)?, &open.device, options)?;
    drop(bytes);
    let vocab = target.model().config().vocab_size;
    let sampling = Sampling::with_temperature(t);
    let (mut pq_all, mut coupled_all, mut n_all) = (0.0, 0.0, 0usize);
    println!("prompt  seed  positions  p/q test (1 - TV)  coupled  coupled / p/q");
    for (i, seed) in (0..CHAT_PROMPTS.len()).flat_map(|i| (0..seeds).map(move |s| (i, s))) {
        let ids = target.prompt_ids(CHAT_PROMPTS[i], &RunSettings::default())?;
        let config = DecodeConfig {
            k: 0,
            verify: VerifyConfig {
                sampling,
                mode: Mode::Strict,
            },
            max_tokens: tokens,
            seed,
            capacity: Some(ids.len() + tokens + 1),
            tokens_a_read: PLAIN_TOKENS_A_READ,
        };
        let context = pollster::block_on(async {
            let tokenizer = Arc::clone(target.tokenizer());
            let mut dec =
                Decoder::<AnyDrafter>::new(target.model(), tokenizer, None, &config, &ids).await?;
            while dec.step().await?.is_some() {}
            Ok::<_, mars_engine::EngineError>(dec.context().to_vec())
        })?;
        // Row r predicts token r + 1: the generated tokens are predicted by rows
        // ids.len() − 1 .. context.len() − 1.
        let scored = &context[..context.len() - 1];
        let zp = rows(target.model(), scored)?; // [scored, target logits]
        let zq = rows(&draft, scored)?; // [scored, draft logits]
        let (tp, tq) = (zp.len() / scored.len(), zq.len() / scored.len());
        let (mut pq, mut coupled, mut n) = (0.0, 0.0, 0usize);
        for r in ids.len() - 1..scored.len() {
            // Both over the target's ids (a draft's extra ids are never proposed).
            let p = softmax(&zp[r * tp..r * tp + vocab], f64::from(t));
            let q = softmax(&zq[r * tq..r * tq + vocab.min(tq)], f64::from(t));
            let mut q = q;
            q.resize(vocab, 0.0);
            let tv: f64 = p.iter().zip(&q).map(|(a, b)| (a - b).abs()).sum::<f64>() / 2.0;
            pq += 1.0 - tv;
            coupled += coupled_acceptance(&p, &q);
            n += 1;
        }
        println!(
            "{i:>6}  {seed:>4}  {n:>9}  {:>17.4}  {:>7.4}  {:>13.4}",
            pq / n as f64,
            coupled / n as f64,
            coupled / pq
        );
        pq_all += pq;
        coupled_all += coupled;
        n_all += n;
    }
    println!(
        "{:>6}  {:>4}  {n_all:>9}  {:>17.4}  {:>7.4}  {:>13.4}",
        "all",
        "",
        pq_all / n_all as f64,
        coupled_all / n_all as f64,
        coupled_all / pq_all
    );
    Ok(())
}
