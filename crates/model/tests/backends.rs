//! One model, several backends: the project-made tiny model gives the same logits on flex (CPU)
//! and on wgpu (lavapipe's Vulkan here, a real GPU elsewhere). The browser (WebGPU) half of
//! this check belongs to the web crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_formats::{Gguf, Tokenizer};
use mars_model::tiny::{tiny_config, tiny_gguf};
use mars_model::{Device, Llama, LoadOptions, read_f32};

/// Largest difference allowed between backends: f32 sums in another order, over 2 layers.
const TOLERANCE: f32 = 1e-4;

fn logits(device: &Device, bytes: &[u8], tokens: &[u32]) -> Vec<f32> {
    let g = Gguf::parse(bytes).unwrap();
    let model = Llama::from_gguf(&g, device, LoadOptions::default()).unwrap();
    assert_eq!(model.config(), &tiny_config());
    let mut cache = model.new_cache(32).unwrap();
    // A prompt, then two single-token steps: batched and incremental paths both compared.
    let mut out = read_f32(model.forward(&tokens[..6], &mut cache).unwrap()).unwrap();
    for &t in &tokens[6..] {
        out.extend(read_f32(model.forward(&[t], &mut cache).unwrap()).unwrap());
    }
    out
}

#[test]
fn tiny_model_has_a_working_tokenizer() {
    let bytes = tiny_gguf(1).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let text = "héllo, wörld! 👋";
    let ids = tok.encode(text, false).unwrap();
    assert_eq!(ids.len(), text.len(), "one token per byte");
    assert_eq!(tok.decode(&ids).unwrap(), text);
    assert_eq!(tok.stop_ids, vec![256]);
}

#[test]
fn flex_and_wgpu_agree() {
    let bytes = tiny_gguf(7).unwrap();
    let tokens = [72, 101, 108, 108, 111, 32, 119, 111];
    let cpu = logits(&Device::flex(), &bytes, &tokens);
    let gpu_device = Device::wgpu_options()
        .init()
        .expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
    let gpu = logits(&gpu_device, &bytes, &tokens);
    assert_eq!(cpu.len(), gpu.len());
    assert_eq!(cpu.len(), 8 * 257);
    let worst = cpu
        .iter()
        .zip(&gpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = cpu.iter().map(|v| v.abs()).fold(0f32, f32::max);
    eprintln!("flex vs wgpu: max |Δ logit| = {worst:.2e} (logits up to {scale:.2})");
    assert!(worst < TOLERANCE, "{worst}");
}

/// The tokens and seed of the cross-platform fixture: the browser test (crates/web) runs the
/// same tiny model on WebGPU and compares with these flex logits.
const FIXTURE_SEED: u64 = 7;
const FIXTURE_TOKENS: [u32; 8] = [72, 101, 108, 108, 111, 32, 119, 111];

/// The committed fixture equals what flex computes now (so the browser test can never compare
/// against stale numbers). `MARS_WRITE_FIXTURES=1` rewrites it.
#[test]
fn browser_fixture_matches_flex() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_logits.json");
    let bytes = tiny_gguf(FIXTURE_SEED).unwrap();
    let cpu = logits(&Device::flex(), &bytes, &FIXTURE_TOKENS);
    if std::env::var_os("MARS_WRITE_FIXTURES").is_some() {
        let json = serde_json::json!({
            "seed": FIXTURE_SEED,
            "tokens": FIXTURE_TOKENS,
            "prefill": 6,
            "logits": cpu,
        });
        std::fs::write(path, serde_json::to_string(&json).unwrap()).unwrap();
    }
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let stored: Vec<f32> = serde_json::from_value(fixture["logits"].clone()).unwrap();
    assert_eq!(stored.len(), cpu.len());
    let worst = stored
        .iter()
        .zip(&cpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < TOLERANCE, "fixture is stale: {worst}");
}

/// Models that do not fit are refused before allocation, naming what and both sizes.
#[test]
fn too_big_for_the_device_is_refused_up_front() {
    let bytes = tiny_gguf(1).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let c = tiny_config();
    let embedding = 4 * (c.vocab_size * c.d_model) as u64;
    let err = Llama::from_gguf(
        &g,
        &Device::flex(),
        LoadOptions {
            max_buffer_bytes: Some(embedding - 1),
            max_total_bytes: None,
            cpu_threads: None,
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the model needs {embedding} bytes for the embedding matrix, the device allows {}",
            embedding - 1
        )
    );
    let err = Llama::from_gguf(
        &g,
        &Device::flex(),
        LoadOptions {
            max_buffer_bytes: Some(embedding),
            max_total_bytes: Some(c.weight_bytes()),
            cpu_threads: None,
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("the weights in f32"), "{err}");
    // Exactly enough is enough.
    let rope = 4 * (c.context_length * c.head_dim) as u64;
    Llama::from_gguf(
        &g,
        &Device::flex(),
        LoadOptions {
            max_buffer_bytes: Some(embedding),
            max_total_bytes: Some(c.weight_bytes() + rope),
            cpu_threads: None,
        },
    )
    .unwrap();
}
