//! In headless Chromium on WebGPU (SwiftShader in CI): the tiny model gives the logits flex
//! computes natively (the fixtures that crates/model's tests keep in step with flex), with f32
//! weights and with quantized matrices as GGUF blocks run by the WGSL kernels, and the engine's
//! greedy strict speculation emits the target-only tokens there on both paths.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use mars_engine::{
    AnyDrafter, DecodeConfig, Decoder, Drafter, ModelDrafter, NgramDrafter, PLAIN_TOKENS_A_READ,
};
use mars_formats::{Gguf, Tokenizer};
use mars_model::tiny::{tiny_gguf, tiny_gguf_quantized};
use mars_model::{KvType, Llama, LoadOptions, WeightPath, gpu_counts};
use mars_verify::{Mode, Sampling, VerifyConfig};
use wasm_bindgen_test::*;

mod common;
use common::{TOLERANCE, device, log};

wasm_bindgen_test_configure!(run_in_browser);

/// The same with the GPU path's f16 KV cache (keys and values to 11 significant bits): 1.3e-3
/// on lavapipe natively (crates/model/tests/backends.rs), the bound as there.
const KV_F16_TOLERANCE: f32 = 5e-3;

#[wasm_bindgen_test]
async fn tiny_model_logits_match_flex() {
    check_fixture(
        include_str!("../../model/tests/data/tiny_logits.json"),
        tiny_gguf,
        LoadOptions::default(),
        TOLERANCE,
    )
    .await;
}

/// The quantized twin with its matrices as GGUF blocks in WebGPU buffers (the WGSL kernels on
/// an adapter without shader-f16) against flex's f32 forward over the dequantized values, with
/// either KV cache.
#[wasm_bindgen_test]
async fn quantized_tiny_model_on_gpu_blocks_matches_flex() {
    for (kv, tolerance) in [(KvType::F32, TOLERANCE), (KvType::F16, KV_F16_TOLERANCE)] {
        check_fixture(
            include_str!("../../model/tests/data/tiny_q_logits.json"),
            tiny_gguf_quantized,
            LoadOptions::with_weights(WeightPath::GpuBlocks {
                subgroups: None,
                kv,
            }),
            tolerance,
        )
        .await;
    }
}

async fn check_fixture(
    json: &str,
    make: fn(u64) -> mars_formats::Result<Vec<u8>>,
    options: LoadOptions,
    tolerance: f32,
) {
    let fixture: serde_json::Value = serde_json::from_str(json).unwrap();
    let seed = fixture["seed"].as_u64().unwrap();
    let tokens: Vec<u32> = serde_json::from_value(fixture["tokens"].clone()).unwrap();
    let prefill = fixture["prefill"].as_u64().unwrap() as usize;
    let expected: Vec<f32> = serde_json::from_value(fixture["logits"].clone()).unwrap();

    let bytes = make(seed).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let device = device().await;
    let model = Llama::from_gguf(&g, &device, options).unwrap();
    assert_eq!(model.weight_path(), options.weights);
    let mut cache = model.new_cache(32).unwrap();
    let mut got = model
        .forward(&tokens[..prefill], &mut cache)
        .unwrap()
        .read_async()
        .await
        .unwrap();
    for &t in &tokens[prefill..] {
        got.extend(
            model
                .forward(&[t], &mut cache)
                .unwrap()
                .read_async()
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
    log(&format!(
        "WebGPU ({}, KV cache {:?}) vs flex: max |Δ logit| = {worst:.2e}",
        options.weights.name(),
        options.weights.kv()
    ));
    assert!(worst < tolerance, "{worst}");
}

#[wasm_bindgen_test]
async fn greedy_strict_speculation_equals_target_only_on_webgpu() {
    strict_equals_target_only(tiny_gguf(3).unwrap(), LoadOptions::default()).await;
}

#[wasm_bindgen_test]
async fn greedy_strict_speculation_equals_target_only_on_webgpu_blocks() {
    let options = LoadOptions::with_weights(WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::default(),
    });
    strict_equals_target_only(tiny_gguf_quantized(3).unwrap(), options).await;
}

async fn strict_equals_target_only(bytes: Vec<u8>, options: LoadOptions) {
    let g = Gguf::parse(&bytes).unwrap();
    let device = device().await;
    let model = Llama::from_gguf(&g, &device, options).unwrap();
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
        tokens_a_read: PLAIN_TOKENS_A_READ,
    };
    let mut target =
        Decoder::<AnyDrafter>::new(&model, tokenizer.clone(), None, &config(0), &prompt)
            .await
            .unwrap();
    target.run(|_| {}).await.unwrap();
    a_read_a_token_gives(&target, &model, &tokenizer, &config(0), &prompt).await;
    if matches!(model.weight_path(), WeightPath::GpuBlocks { .. }) {
        launches_go_direct(&model, &tokenizer, &config(0), &prompt).await;
    }
    let layer_skip = || {
        ModelDrafter::new(
            model.with_layers(&[0]).unwrap(),
            64,
            Sampling::GREEDY,
            257,
            "layers 0",
        )
        .unwrap()
    };
    let drafter = AnyDrafter::Model(Box::new(layer_skip()));
    let mut spec = Decoder::new(
        &model,
        tokenizer.clone(),
        Some(drafter),
        &config(4),
        &prompt,
    )
    .await
    .unwrap();
    let summary = spec.run(|_| {}).await.unwrap();
    assert_eq!(spec.generated(), target.generated());
    assert_eq!(summary.tokens, 12);
    // Token trees, each verified in one WebGPU pass under a tree mask: the draft model's
    // EAGLE-2 expansion (its own tree passes on WebGPU too) and prompt lookup's matches.
    let trees = [
        AnyDrafter::Model(Box::new(layer_skip().with_tree(8, 2).unwrap())),
        AnyDrafter::Ngram(NgramDrafter::default().with_tree(8)),
    ];
    for drafter in trees {
        let label = drafter.label();
        let mut tree = Decoder::new(
            &model,
            tokenizer.clone(),
            Some(drafter),
            &config(4),
            &prompt,
        )
        .await
        .unwrap();
        let mut branched = 0;
        while let Some(step) = tree.step().await.unwrap() {
            branched += usize::from(step.tree);
        }
        assert_eq!(tree.generated(), target.generated(), "{label}");
        log(&format!("{label}: {branched} tree steps"));
    }
    // Sampling on the GPU blocks path: the layer-skip drafter's chain stays on the device,
    // each draft drawn with the noise the target draws its position with and kept iff it is
    // the target's draw, so strict emits target-only's text for the seed.
    if matches!(model.weight_path(), WeightPath::GpuBlocks { .. }) {
        let sampling = Sampling::with_temperature(1.0);
        let sampled = |k| DecodeConfig {
            verify: VerifyConfig {
                sampling,
                mode: Mode::Strict,
            },
            seed: 5,
            ..config(k)
        };
        let mut target =
            Decoder::<AnyDrafter>::new(&model, tokenizer.clone(), None, &sampled(0), &prompt)
                .await
                .unwrap();
        target.run(|_| {}).await.unwrap();
        a_read_a_token_gives(&target, &model, &tokenizer, &sampled(0), &prompt).await;
        let drafter = ModelDrafter::new(
            model.with_layers(&[0]).unwrap(),
            64,
            sampling,
            257,
            "layers 0",
        )
        .unwrap();
        let drafter = AnyDrafter::Model(Box::new(drafter));
        let mut spec = Decoder::new(&model, tokenizer, Some(drafter), &sampled(4), &prompt)
            .await
            .unwrap();
        let mut kept = 0;
        while let Some(step) = spec.step().await.unwrap() {
            assert_eq!(step.gpu.reads, 1, "{:?}", step.gpu);
            kept += step.accepted_exact;
        }
        assert_eq!(spec.generated(), target.generated(), "a sampled chain");
        log(&format!("sampled chain: {kept} drafts kept"));
    }
}

/// The kernels launch straight into WebGPU with their bind groups kept (`gpu::direct`), none
/// left to CubeCL (the launches of pipelines the browser has yet to answer for, in submits of
/// their own: `webgpu_tune.rs`, whose forms are new): a second target-only run makes bind
/// groups (for its new KV cache: it goes direct, and CubeCL's launches make none that count)
/// for few of its launches (its step words, scratch and outputs are the kept buffers of the
/// first run's), and gives the same tokens.
async fn launches_go_direct(
    model: &Llama,
    tokenizer: &Arc<Tokenizer>,
    config: &DecodeConfig,
    prompt: &[u32],
) {
    let start = gpu_counts();
    let mut first = Decoder::<AnyDrafter>::new(model, tokenizer.clone(), None, config, prompt)
        .await
        .unwrap();
    first.run(|_| {}).await.unwrap();
    let before = gpu_counts();
    let mut again = Decoder::<AnyDrafter>::new(model, tokenizer.clone(), None, config, prompt)
        .await
        .unwrap();
    again.run(|_| {}).await.unwrap();
    let d = gpu_counts().since(&before);
    assert_eq!(again.generated(), first.generated());
    assert!(d.bind_groups > 0, "no direct launch in the browser: {d:?}");
    let both = gpu_counts().since(&start);
    assert_eq!(both.fallbacks, 0, "launches left to CubeCL: {both:?}");
    assert!(
        d.bind_groups * 4 < d.launches,
        "bind groups not kept: {d:?}"
    );
    log(&format!(
        "direct launches: {} launches, {} bind groups made",
        d.launches, d.bind_groups
    ));
}

/// Target-only decoding reading back each token before its next pass gives the tokens of
/// `chained`, the same run's (`config`) where the target chains its passes on the device (on
/// the GPU blocks path: each pass fed the token the one before drew there, one read every
/// [`PLAIN_TOKENS_A_READ`] tokens, which the steps' reads show).
async fn a_read_a_token_gives(
    chained: &Decoder<AnyDrafter>,
    model: &Llama,
    tokenizer: &Arc<Tokenizer>,
    config: &DecodeConfig,
    prompt: &[u32],
) {
    let each = DecodeConfig {
        tokens_a_read: 1,
        ..config.clone()
    };
    let mut dec = Decoder::<AnyDrafter>::new(model, tokenizer.clone(), None, &each, prompt)
        .await
        .unwrap();
    dec.run(|_| {}).await.unwrap();
    assert_eq!(dec.generated(), chained.generated());
    let (reads, forwards) = (
        chained.summary().gpu.reads,
        chained.summary().target_forwards,
    );
    if matches!(model.weight_path(), WeightPath::GpuBlocks { .. }) {
        assert_eq!(dec.summary().gpu.reads, dec.summary().tokens as u64);
        assert_eq!(reads, forwards.div_ceil(PLAIN_TOKENS_A_READ) as u64);
    }
}

/// The page's "Runs on: auto" is the engine's rule: a hardware adapter → WebGPU, a software one
/// (SwiftShader, as CI's) → the CPU with why, no adapter → the CPU with the page's reason.
#[wasm_bindgen_test]
fn the_pages_auto_choice_is_the_engines_rule() {
    use mars_engine::Backend;
    use mars_web::{SeenAdapter, choose};
    let seen = |name: &str, software| SeenAdapter {
        name: name.into(),
        software,
    };
    let (b, why) = choose(Some(seen("nvidia hopper", false)), None);
    assert_eq!(b, Backend::Wgpu);
    assert!(why.contains("nvidia hopper"), "{why}");
    let (b, why) = choose(Some(seen("google swiftshader", true)), None);
    assert_eq!(b, Backend::Cpu);
    assert!(
        why.contains("swiftshader") && why.contains("software"),
        "{why}"
    );
    let (b, why) = choose(None, Some("this browser has no WebGPU".into()));
    assert_eq!(
        (b, why.as_str()),
        (Backend::Cpu, "this browser has no WebGPU")
    );
    assert_eq!(choose(None, None).0, Backend::Cpu);
}
