//! In headless Chromium on WebGPU (SwiftShader in CI), the kernel shapes a GPU card runs: tiles
//! for a long prefill, the norms and RoPE folded into the products and attention, attention
//! split by key blocks past 256 keys, row reductions over chunks. SwiftShader is a CPU adapter,
//! so a page on it runs the CPU adapters' shapes; this binary (a browser session of its own)
//! makes every shape a card's (`mars_kernels::gpu::use_card_shapes`), so that Chrome's WGSL
//! compiler — whose uniformity analysis naga, the native check, lacks — builds each of them, and
//! their logits are held to flex's f32 forward and their greedy strict speculation to
//! target-only. And a model in Q4_K_M's types, whose groups a card runs in wide teams (f32
//! activations for one row, 8-bit ones for a pass) and whose every form the page's tuning
//! checks in the browser.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use mars_engine::{AnyDrafter, DecodeConfig, Decoder, ModelDrafter, PLAIN_TOKENS_A_READ};
use mars_formats::{Gguf, Tokenizer};
use mars_model::tiny::{tiny_gguf_k_quants, tiny_gguf_quantized};
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

/// The model in `bytes` on WebGPU in a card's shapes (GGUF blocks, an f16 cache), and the
/// reference: every weight dequantized to f32 on flex (the packed CPU path would add its 8-bit
/// activations' error).
async fn on_a_card_and_on_flex(bytes: &[u8]) -> (Llama, Llama) {
    mars_kernels::gpu::use_card_shapes();
    let g = Gguf::parse(bytes).unwrap();
    let gpu = Llama::from_gguf(
        &g,
        &device().await,
        LoadOptions::with_weights(WeightPath::GpuBlocks {
            subgroups: None,
            kv: KvType::F16,
        }),
    )
    .unwrap();
    let cpu = Llama::from_gguf(&g, &Device::flex(), LoadOptions::default()).unwrap();
    (gpu, cpu)
}

#[wasm_bindgen_test]
async fn a_cards_kernel_shapes_run_in_the_browser() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let (gpu, cpu) = on_a_card_and_on_flex(&bytes).await;
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
    let tokenizer = Arc::new(Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap());
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

/// Largest |Δ logit| against flex's f32 forward for a pass on 8-bit activations, as a share of
/// the largest |logit|: each 32 values rounded to max|x| / 127 (natively on lavapipe, the same
/// forms forced: 0.55 % over this model's passes).
const Q8_SHARE: f32 = 1e-2;

/// A model in Q4_K_M's types ([`tiny_gguf_k_quants`]) in a card's forms: its Q4_K-only and
/// Q6_K-only groups decode a row in wide teams on f32 activations, the norm folded in, and
/// take a pass of several rows in wide teams on 8-bit ones (`MatrixGroup::card_form`); the
/// mixed q | k | v of the second layer keeps the rules' form. Chrome's compiler builds each,
/// with one output a team (the rule for this model's small matrices) and with four (the rule
/// for a 7B's), one-row logits within f32 rounding of flex's forward and a pass's within the
/// 8-bit rounding. (The tuning's other forms: a form Chrome refused would give outputs that
/// disagree with the group's, and a tuning never chooses those.)
#[wasm_bindgen_test]
async fn a_k_quant_models_card_forms_run_in_the_browser() {
    let (gpu, cpu) = on_a_card_and_on_flex(&tiny_gguf_k_quants(7).unwrap()).await;
    // Every wide group in wide f32 teams for one row, wide 8-bit ones for passes.
    let forms = gpu.group_forms();
    let wide: Vec<_> = forms
        .iter()
        .filter(|f| f.form.team == mars_model::Team::Wide)
        .collect();
    assert!(
        wide.len() >= 4
            && wide.iter().all(|f| f.form.acts == mars_model::Acts::F32
                && f.form.pass.is_some_and(|p| p.acts == mars_model::Acts::Q8)),
        "{forms:?}"
    );
    // The same model with four outputs a team in both of every wide group's forms.
    let four = gpu
        .with_forms(&|shape| {
            let f = forms.iter().find(|f| f.shape == shape)?.form;
            let fan = mars_model::Fan::Four;
            (f.team == mars_model::Team::Wide).then_some(mars_model::Form {
                fan,
                pass: f.pass.map(|p| mars_model::MatVec { fan, ..p }),
                ..f
            })
        })
        .unwrap();
    for (model, outputs) in [(&gpu, 1), (&four, 4)] {
        let (mut gc, mut cc) = (model.new_cache(64).unwrap(), cpu.new_cache(64).unwrap());
        let worst = |a: &[f32], b: &[f32]| {
            assert_eq!(a.len(), b.len());
            a.iter().zip(b).fold(0f32, |w, (x, y)| w.max((x - y).abs()))
        };
        // A prompt a row at a time: one-row steps alone.
        let mut one_row = 0f32;
        for i in 0..16u32 {
            let t = [(i * 37 + 11) % 257];
            one_row = one_row.max(worst(
                &read(model, &t, &mut gc).await,
                &read(&cpu, &t, &mut cc).await,
            ));
        }
        let pass = [1u32, 2, 3, 4, 5];
        let want = read(&cpu, &pass, &mut cc).await;
        let largest = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let q8 = worst(&read(model, &pass, &mut gc).await, &want);
        log(&format!(
            "K-quant card forms, {outputs} output(s) a team, on WebGPU vs flex: {one_row:.2e} (one-row steps), {q8:.2e} of {largest:.1} (an 8-bit pass)"
        ));
        assert!(one_row < TOLERANCE, "{outputs}: {one_row}");
        assert!(q8 < Q8_SHARE * largest, "{outputs}: {q8} of {largest}");
    }
}
