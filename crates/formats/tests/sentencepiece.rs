//! The llama SentencePiece tokenizer built from GGUF metadata gives llama.cpp's token ids on
//! llama.cpp's own test strings (vocabulary-only GGUF and expected ids from llama.cpp's
//! repository, see data/tokenizer/README.md), and decodes them back to the input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use mars_formats::{Gguf, Tokenizer};

#[test]
fn llama_spm_ids_equal_llama_cpp() {
    let bytes = include_bytes!("data/tokenizer/llama-spm.gguf");
    let g = Gguf::parse(bytes).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(tok.vocab_size(), 32000);
    assert_eq!((tok.bos, tok.eos, tok.add_bos), (Some(1), Some(2), true));
    let inputs: Vec<&str> = include_str!("data/tokenizer/llama-spm.inp")
        .split("\n__ggml_vocab_test__\n")
        .collect();
    let outputs: Vec<Vec<u32>> = include_str!("data/tokenizer/llama-spm.out")
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert!(inputs.len() >= 30, "{}", inputs.len());
    let mut mismatches = Vec::new();
    for (text, expected) in inputs.iter().zip(&outputs) {
        let ids = tok.encode(text, false).unwrap();
        if &ids != expected {
            mismatches.push(format!("{text:?}: got {ids:?}, llama.cpp {expected:?}"));
        }
        assert_eq!(tok.decode(&ids).unwrap(), *text, "round trip");
    }
    assert!(
        mismatches.is_empty(),
        "{} of {}:\n{}",
        mismatches.len(),
        inputs.len(),
        mismatches.join("\n")
    );
    // Streaming shows each piece's own spaces (the first word keeps its "▁" as a space) and
    // never splits a character (the llama emoji is four byte-fallback tokens).
    for text in ["Hello world", " this is 🦙.cpp", "нещо на Български"] {
        let ids = tok.encode(text, false).unwrap();
        let mut stream = tok.stream();
        let mut shown = String::new();
        for &id in &ids {
            if let Some(piece) = stream.push(id).unwrap() {
                assert!(!piece.contains('\u{FFFD}'), "{piece:?}");
                shown.push_str(&piece);
            }
        }
        shown.extend(stream.finish().unwrap());
        assert_eq!(shown, format!(" {text}"));
    }
    // With BOS, as llama.cpp prompts a SentencePiece model.
    assert_eq!(tok.encode("Hello world", true).unwrap(), [1, 15043, 3186]);
}
