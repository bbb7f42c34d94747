//! The real draft/target pair on the packed CPU path: Qwen2.5-Coder-1.5B-Instruct (target) with
//! Qwen2.5-Coder-0.5B-Instruct as its draft model, both Q4_K_M (Q4_K, Q6_K, Q5_0 and Q8_0 blocks
//! kept packed). Greedy strict speculation emits exactly the target-only tokens (a row's logits
//! do not depend on the batch), and the draft model's tokens are mostly kept on code. Fetched
//! by `tests/setup.sh` (`tests/fetch-pair.sh`); without the files these tests fail and say how
//! to get them, unless `MARS_SKIP_MODEL_TESTS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use mars_engine::{AnyDrafter, DecodeConfig, ModelDrafter, TokenKind, check_same_tokenizer};
use mars_formats::{ChatTemplate, Gguf, Message, Tokenizer};
use mars_model::{Device, Llama, LoadOptions, WeightPath};
use mars_verify::{Mode, Sampling, VerifyConfig};

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
    let g = Gguf::parse(&target_bytes).unwrap();
    let target = Llama::from_gguf(&g, &device, options).unwrap();
    assert_eq!(target.weight_path(), options.weights);
    assert!(target.converted().is_empty(), "{:?}", target.converted());
    let tokenizer = Arc::new(Tokenizer::from_gguf(&g).unwrap());
    let template = ChatTemplate::new(
        g.get_str("tokenizer.chat_template").unwrap(),
        "",
        "<|im_end|>",
    )
    .unwrap();
    let dg = Gguf::parse(&draft_bytes).unwrap();
    check_same_tokenizer(&tokenizer, &Tokenizer::from_gguf(&dg).unwrap()).unwrap();
    let draft = Llama::from_gguf(&dg, &device, options).unwrap();
    assert!(draft.converted().is_empty(), "{:?}", draft.converted());
    drop((target_bytes, draft_bytes));

    let prompt = tokenizer
        .encode(
            &template
                .render(
                    &[Message::new(
                        "user",
                        "Write a Python function that returns the n-th Fibonacci number.",
                    )],
                    true,
                )
                .unwrap(),
            false,
        )
        .unwrap();
    let config = |k: usize| DecodeConfig {
        k,
        verify: VerifyConfig {
            sampling: Sampling::GREEDY,
            mode: Mode::Strict,
        },
        max_tokens: 24,
        seed: 0,
        capacity: None,
    };
    let (reference, stop, _) = common::run(&target, tokenizer.clone(), None, &config(0), &prompt);
    assert_eq!(reference.len(), 24, "{stop:?}");
    let text = tokenizer.decode(&reference).unwrap();
    assert!(text.contains("def "), "{text:?}");
    let vocab = target.config().vocab_size;
    let capacity = prompt.len() + 64;
    // Proposing only the first 32,768 ids (the head's first rows) changes the drafts, never
    // the output.
    let limited = draft.with_vocab_limit(32_768).unwrap();
    let drafter = AnyDrafter::Model(Box::new(
        ModelDrafter::new(
            limited,
            capacity,
            Sampling::GREEDY,
            vocab,
            "0.5B ids < 32768",
        )
        .unwrap(),
    ));
    let (out, s, _) = common::run(
        &target,
        tokenizer.clone(),
        Some(drafter),
        &config(4),
        &prompt,
    );
    assert_eq!(
        out, reference,
        "strict with the vocabulary-limited 0.5B draft"
    );
    assert_eq!(s, stop);
    let drafter = AnyDrafter::Model(Box::new(
        ModelDrafter::new(draft, capacity, Sampling::GREEDY, vocab, "0.5B").unwrap(),
    ));
    let (out, s, records) = common::run(&target, tokenizer, Some(drafter), &config(4), &prompt);
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
