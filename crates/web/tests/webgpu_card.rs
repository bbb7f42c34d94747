//! In headless Chromium on WebGPU (SwiftShader in CI), the kernel shapes a GPU card runs: tiles
//! for a long prefill, the norms and RoPE folded into the products and attention, attention
//! split by key blocks past 256 keys, row reductions over chunks. SwiftShader is a CPU adapter,
//! so a page on it runs the CPU adapters' shapes; this binary (a browser session of its own)
//! makes every shape a card's (`mars_kernels::gpu::use_card_shapes`), so that Chrome's WGSL
//! compiler — whose uniformity analysis naga, the native check, lacks — builds each of them, and
//! their logits are held to flex's f32 forward and their greedy strict speculation to
//! target-only.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use mars_engine::{AnyDrafter, DecodeConfig, Decoder, ModelDrafter, PLAIN_TOKENS_A_READ};
use mars_formats::{Gguf, Tokenizer};
use mars_model::tiny::tiny_gguf_quantized;
use mars_model::{Device, KvCache, KvType, Llama, LoadOptions, WeightPath};
use mars_verify::{Mode, Sampling, VerifyConfig};
use wasm_bindgen_test::*;

mod common;
use common::{device, log};

wasm_bindgen_test_configure!(run_in_browser);

/// Largest |Δ logit| against flex's f32 forward over the dequantized weights: the f16 KV
/// cache's rounding (5e-3 over a short prompt, webgpu.rs) with room for 300 positions of it.
const TOLERANCE: f32 = 1e-2;

async fn read(model: &Llama, tokens: &[u32], cache: &mut KvCache) -> Vec<f32> {
    model
        .forward(tokens, cache)
        .unwrap()
        .read_async()
        .await
        .unwrap()
}

#[wasm_bindgen_test]
async fn a_cards_kernel_shapes_run_in_the_browser() {
    mars_kernels::gpu::use_card_shapes();
    let bytes = tiny_gguf_quantized(7).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let device = device().await;
    let gpu = Llama::from_gguf(
        &g,
        &device,
        LoadOptions::with_weights(WeightPath::GpuBlocks {
            subgroups: None,
            kv: KvType::F16,
        }),
    )
    .unwrap();
    // The reference: every weight dequantized to f32 on flex (the packed CPU path would add its
    // 8-bit activations' error).
    let cpu = Llama::from_gguf(&g, &Device::flex(), LoadOptions::default()).unwrap();
    // A 300-token prompt (a prefill in tiles: more than TILES_ABOVE rows), then one-row and
    // five-row passes over more than 256 keys (attention split by key blocks, RoPE folded).
    let prompt: Vec<u32> = (0..300).map(|i| (i * 37 + 11) % 257).collect();
    let passes: [&[u32]; 3] = [&[5], &[17], &[1, 2, 3, 4, 5]];
    let mut worst = 0f32;
    let (mut gc, mut cc) = (gpu.new_cache(400).unwrap(), cpu.new_cache(400).unwrap());
    let mut compare = |a: &[f32], b: &[f32]| {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            worst = worst.max((x - y).abs());
        }
    };
    compare(
        &read(&gpu, &prompt, &mut gc).await,
        &read(&cpu, &prompt, &mut cc).await,
    );
    for tokens in passes {
        compare(
            &read(&gpu, tokens, &mut gc).await,
            &read(&cpu, tokens, &mut cc).await,
        );
    }
    log(&format!("card shapes on WebGPU vs flex: {worst:.2e}"));
    assert!(worst < TOLERANCE, "{worst}");

    // Greedy strict speculation equals target-only through the card's summaries (over chunks)
    // and the draft's chain on the device, after the long prompt.
    let tokenizer = Arc::new(Tokenizer::from_gguf(&g).unwrap());
    let config = |k| DecodeConfig {
        k,
        verify: VerifyConfig {
            sampling: Sampling::GREEDY,
            mode: Mode::Strict,
        },
        max_tokens: 12,
        seed: 0,
        capacity: Some(400),
        tokens_a_read: PLAIN_TOKENS_A_READ,
    };
    let mut target = Decoder::<AnyDrafter>::new(&gpu, tokenizer.clone(), None, &config(0), &prompt)
        .await
        .unwrap();
    target.run(|_| {}).await.unwrap();
    let drafter = ModelDrafter::new(
        gpu.with_layers(&[0]).unwrap(),
        400,
        Sampling::GREEDY,
        257,
        "layers 0",
    )
    .unwrap();
    let mut spec = Decoder::new(
        &gpu,
        tokenizer,
        Some(AnyDrafter::Model(Box::new(drafter))),
        &config(4),
        &prompt,
    )
    .await
    .unwrap();
    spec.run(|_| {}).await.unwrap();
    assert_eq!(spec.generated(), target.generated());
}
