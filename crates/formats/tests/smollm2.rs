//! The real SmolLM2-135M-Instruct Q4_1 file: metadata, tokenizer ids against llama.cpp, round
//! trips, streaming and the chat template. The file is fetched by `tests/setup.sh` into
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
fn metadata_and_tensor_table() {
    let Some(bytes) = models::bytes(models::SMOLLM2) else {
        return;
    };
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(g.get_u64("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_u64("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.get_u64("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(g.tensors.len(), 272);
    let embd = g.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.dims, vec![576, 49152]);
    let values = g.tensor_f32("blk.0.attn_q.weight").unwrap();
    assert_eq!(values.len(), 576 * 576);
    assert!(values.iter().all(|v| v.is_finite()));
}

#[test]
fn tokenizer_ids_equal_llama_cpp() {
    let Some(bytes) = models::bytes(models::SMOLLM2) else {
        return;
    };
    let g = Gguf::parse(&bytes).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!((tok.bos, tok.eos, tok.add_bos), (Some(1), Some(2), false));
    let fixture: Fixture =
        serde_json::from_str(include_str!("data/tokenizer/smollm2.json")).unwrap();
    assert!(fixture.cases.len() >= 50);
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

#[test]
fn streaming_never_splits_a_character() {
    let Some(bytes) = models::bytes(models::SMOLLM2) else {
        return;
    };
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let text = "Family: 👨‍👩‍👧‍👦, café, 日本語 and ❤️‍🔥!";
    let ids = tok.encode(text, false).unwrap();
    let mut stream = tok.stream();
    let mut out = String::new();
    let mut chunks = 0;
    for &id in &ids {
        if let Some(piece) = stream.push(id).unwrap() {
            assert!(!piece.contains('\u{FFFD}'), "split character in {piece:?}");
            out.push_str(&piece);
            chunks += 1;
        }
    }
    out.extend(stream.finish().unwrap());
    assert_eq!(out, text);
    assert!(
        chunks < ids.len(),
        "multi-byte characters span several tokens"
    );
}

#[test]
fn chat_template_renders_chatml() {
    let Some(bytes) = models::bytes(models::SMOLLM2) else {
        return;
    };
    let g = Gguf::parse(&bytes).unwrap();
    let source = g.get_str("tokenizer.chat_template").unwrap();
    let template = ChatTemplate::new(source, "<|im_start|>", "<|im_end|>").unwrap();
    let text = template
        .render(&[Message::new("user", "Hi!")], true)
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    );
}
