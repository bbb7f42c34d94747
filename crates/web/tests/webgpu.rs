//! In headless Chromium on WebGPU (SwiftShader in CI): the tiny model gives the logits flex
//! computes natively (the fixture that crates/model's tests keep in step with flex), and the
//! engine's greedy strict speculation emits the target-only tokens there too.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use mars_engine::{AnyDrafter, DecodeConfig, Decoder, ModelDrafter};
use mars_formats::{Gguf, Tokenizer};
use mars_model::tiny::tiny_gguf;
use mars_model::{Device, Llama, LoadOptions, read_f32_async};
use mars_verify::{Mode, Sampling, VerifyConfig};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// Largest |Δ logit| allowed between WebGPU and flex (logits up to ~10; f32 sums in another
/// order, two layers).
const TOLERANCE: f32 = 1e-3;

/// burn's WebGPU runtime can be initialised once per page; the tests share it.
async fn device() -> Device {
    thread_local! {
        static DEVICE: std::cell::RefCell<Option<Device>> = const { std::cell::RefCell::new(None) };
    }
    if let Some(d) = DEVICE.with(|d| d.borrow().clone()) {
        return d;
    }
    let d = Device::wgpu_options()
        .init_async()
        .await
        .expect("WebGPU adapter (Chromium flags in webdriver.json)");
    DEVICE.with(|slot| *slot.borrow_mut() = Some(d.clone()));
    d
}

#[wasm_bindgen_test]
async fn tiny_model_logits_match_flex() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../../model/tests/data/tiny_logits.json")).unwrap();
    let seed = fixture["seed"].as_u64().unwrap();
    let tokens: Vec<u32> = serde_json::from_value(fixture["tokens"].clone()).unwrap();
    let prefill = fixture["prefill"].as_u64().unwrap() as usize;
    let expected: Vec<f32> = serde_json::from_value(fixture["logits"].clone()).unwrap();

    let bytes = tiny_gguf(seed).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let device = device().await;
    let model = Llama::from_gguf(&g, &device, LoadOptions::default()).unwrap();
    let mut cache = model.new_cache(32).unwrap();
    let mut got = read_f32_async(model.forward(&tokens[..prefill], &mut cache).unwrap())
        .await
        .unwrap();
    for &t in &tokens[prefill..] {
        got.extend(
            read_f32_async(model.forward(&[t], &mut cache).unwrap())
                .await
                .unwrap(),
        );
    }
    assert_eq!(got.len(), expected.len());
    let worst = got
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    web_sys_log(&format!("WebGPU vs flex: max |Δ logit| = {worst:.2e}"));
    assert!(worst < TOLERANCE, "{worst}");
}

fn web_sys_log(s: &str) {
    wasm_bindgen_test::console_log!("{s}");
}

#[wasm_bindgen_test]
async fn greedy_strict_speculation_equals_target_only_on_webgpu() {
    let bytes = tiny_gguf(3).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let device = device().await;
    let model = Llama::from_gguf(&g, &device, LoadOptions::default()).unwrap();
    let tokenizer = Arc::new(Tokenizer::from_gguf(&g).unwrap());
    let prompt = tokenizer
        .encode("the cat sat on the mat; the cat", false)
        .unwrap();
    let config = |k| DecodeConfig {
        k,
        verify: VerifyConfig {
            sampling: Sampling::GREEDY,
            mode: Mode::Strict,
        },
        max_tokens: 12,
        seed: 0,
        capacity: Some(64),
    };
    let mut target =
        Decoder::<AnyDrafter>::new(&model, tokenizer.clone(), None, &config(0), &prompt)
            .await
            .unwrap();
    target.run(|_| {}).await.unwrap();
    let drafter = AnyDrafter::Model(Box::new(
        ModelDrafter::new(
            model.with_layers(&[0]).unwrap(),
            64,
            Sampling::GREEDY,
            257,
            "layers 0",
        )
        .unwrap(),
    ));
    let mut spec = Decoder::new(&model, tokenizer, Some(drafter), &config(4), &prompt)
        .await
        .unwrap();
    let summary = spec.run(|_| {}).await.unwrap();
    assert_eq!(spec.generated(), target.generated());
    assert_eq!(summary.tokens, 12);
}
