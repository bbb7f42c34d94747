//! The real draft/target pair on the packed CPU path: Qwen2.5-Coder-1.5B-Instruct (target) with
//! Qwen2.5-Coder-0.5B-Instruct as its draft model, both Q4_K_M (Q4_K, Q6_K, Q5_0 and Q8_0 blocks
//! kept packed), run as the front ends run it: `Target`, the pair's preset, `Target::race`.
//! Greedy strict speculation emits exactly the target-only tokens (a row's logits do not depend
//! on the batch), and the draft model's tokens are mostly kept on code. Fetched by
//! `tests/setup.sh` (`tests/fetch-pair.sh`); without the files these tests fail and say how to
//! get them, unless `MARS_SKIP_MODEL_TESTS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_engine::{Choices, DraftShape, Method, Preset, RunSettings, Target, TokenKind};
use mars_formats::Gguf;
use mars_model::{Device, LoadOptions, WeightPath};

mod common;
#[path = "../../../tests/support/models.rs"]
mod models;

#[test]
fn greedy_strict_speculation_with_the_draft_model_equals_target_only() {
    let Some(target_bytes) = models::bytes(models::QWEN_TARGET) else {
        return;
    };
    let Some(draft_bytes) = models::bytes(models::QWEN_DRAFT) else {
        return;
    };
    let options = LoadOptions::with_weights(WeightPath::CpuPacked { threads: 2 });
    let device = Device::flex();
    let target = Target::from_gguf(&Gguf::parse(&target_bytes).unwrap(), &device, options).unwrap();
    assert_eq!(target.model().weight_path(), options.weights);
    assert!(target.model().converted().is_empty());
    // The draft model through the target (same tokenizer, checked).
    let draft = target
        .draft_model(&Gguf::parse(&draft_bytes).unwrap(), &device, options)
        .unwrap();
    assert!(draft.converted().is_empty(), "{:?}", draft.converted());
    drop((target_bytes, draft_bytes));

    // The pair's preset: k = 3, the draft proposing only ids < 32,768 (the head's first rows),
    // which changes the drafts, never the output.
    let preset = Preset::by_id("qwen-coder").unwrap();
    let settings = Choices {
        max_tokens: Some(24),
        ..Choices::NONE
    }
    .over(preset.choices(Some("0.5B")).unwrap())
    .resolve()
    .unwrap()
    .into_inner();
    assert_eq!(
        (settings.shape.k, settings.shape.draft_vocab),
        (3, Some(32_768))
    );
    let race = pollster::block_on(target.race(
        "Write a Python function that returns the n-th Fibonacci number.",
        &settings.clone().resolve().unwrap(),
        Some(&draft),
    ))
    .unwrap();
    let (reference, stop, _) = common::race(&race, &settings, Method::Target);
    assert_eq!(reference.len(), 24, "{stop:?}");
    let text = target.visible_text(&reference).unwrap();
    assert!(text.contains("def "), "{text:?}");
    let (out, s, _) = common::race(&race, &settings, Method::Strict);
    assert_eq!(out, reference, "strict, the pair's preset");
    assert_eq!(s, stop);

    // The whole vocabulary, k = 4.
    let full = RunSettings {
        shape: DraftShape {
            k: 4,
            draft_vocab: None,
            ..settings.shape
        },
        ..settings
    };
    let (out, s, records) = common::race(&race, &full, Method::Strict);
    assert_eq!(out, reference, "strict with the 0.5B draft");
    assert_eq!(s, stop);
    let kept = records
        .iter()
        .filter(|r| r.kind == TokenKind::Exact)
        .count();
    eprintln!("pair, k = 4: {kept} of 24 tokens were kept drafts: {text:?}");
    assert!(
        kept >= 12,
        "the 0.5B draft is usually right on code: {kept} of 24 kept"
    );
}
