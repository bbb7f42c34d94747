//! The real Qwen2.5-Coder-0.5B-Instruct Q4_K_M file (the draft of the project's draft/target
//! pair; the 1.5B shares its tokenizer): gpt2 BPE with the qwen2 pre-tokenizer against
//! llama.cpp's ids (its own qwen2 test strings, code, CJK and whitespace runs), round trips,
//! and the ChatML template. Fetched by `tests/setup.sh` (`tests/fetch-pair.sh`) into
//! `~/.cache/mars/models` (or `$MARS_MODEL_DIR`); without it these tests fail and say how to get
//! it, unless `MARS_SKIP_MODEL_TESTS=1`.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_formats::{ChatTemplate, Gguf, Message, Tokenizer};

#[path = "../../../tests/support/models.rs"]
mod models;

#[derive(serde::Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}
#[derive(serde::Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

#[test]
fn tokenizer_ids_equal_llama_cpp() {
    let Some(bytes) = models::bytes(models::QWEN_DRAFT) else {
        return;
    };
    let g = Gguf::parse(&bytes).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert!(!tok.add_bos, "Qwen2 adds no BOS");
    let fixture: Fixture = serde_json::from_str(include_str!("data/tokenizer/qwen2.json")).unwrap();
    assert!(fixture.cases.len() >= 100);
    for case in &fixture.cases {
        let ids = tok.encode(&case.text, true).unwrap();
        assert_eq!(ids, case.ids, "{:?}", case.text);
        assert_eq!(
            tok.decode(&ids).unwrap(),
            case.text,
            "round trip of {:?}",
            case.text
        );
    }
}

/// Every `tokenizer.ggml.pre` name llama.cpp reads as Qwen2's rule (a DeepSeek-R1 Qwen distill
/// says `deepseek-r1-qwen`) tokenizes as `qwen2` does: the Qwen file with its name rewritten
/// gives llama.cpp's ids; a name mars lacks is refused, naming it and the ones it has.
#[test]
fn qwen2_rule_names_give_llama_cpp_ids() {
    let Some(bytes) = models::bytes(models::QWEN_DRAFT) else {
        return;
    };
    let fixture: Fixture = serde_json::from_str(include_str!("data/tokenizer/qwen2.json")).unwrap();
    let mut g = Gguf::parse(&bytes).unwrap();
    let names: Vec<&str> = mars_formats::PRE_NAMES
        .iter()
        .filter(|(_, rule)| *rule == mars_formats::PreRule::Qwen2)
        .map(|(n, _)| *n)
        .collect();
    assert!(names.contains(&"deepseek-r1-qwen"), "{names:?}");
    for name in names {
        g.metadata.insert(
            "tokenizer.ggml.pre".into(),
            mars_formats::Value::String(name.into()),
        );
        let tok = Tokenizer::from_gguf(&g).unwrap();
        for case in &fixture.cases {
            assert_eq!(
                tok.encode(&case.text, true).unwrap(),
                case.ids,
                "{name}: {:?}",
                case.text
            );
        }
    }
    g.metadata.insert(
        "tokenizer.ggml.pre".into(),
        mars_formats::Value::String("qwen35".into()),
    );
    let err = Tokenizer::from_gguf(&g).unwrap_err().to_string();
    assert!(
        err.contains("\"qwen35\"") && err.contains("deepseek-r1-qwen"),
        "{err}"
    );
}

#[test]
fn chat_template_renders_chatml() {
    let Some(bytes) = models::bytes(models::QWEN_DRAFT) else {
        return;
    };
    let g = Gguf::parse(&bytes).unwrap();
    let source = g.get_str("tokenizer.chat_template").unwrap();
    let template = ChatTemplate::new(source, "", "<|im_end|>").unwrap();
    let text = template
        .render(&[Message::new("user", "Hi!")], true)
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful \
         assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    );
}
