//! Inputs the fuzzers (fuzz/) found crashing, kept as regression tests: each must now be a
//! typed error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use mars_formats::{FormatError, Tokenizer};

/// A tokenizer.json whose "decoder" object has a syntax error: tokenizers 0.22 panicked.
/// The same with invalid UTF-8 inside the "decoder" object.
#[test]
fn tokenizer_json_with_malformed_text_in_the_decoder() {
    for bytes in [
        &include_bytes!("data/fuzz/tokenizer-decoder-syntax.json")[..],
        &include_bytes!("data/fuzz/tokenizer-decoder-utf8.json")[..],
    ] {
        match Tokenizer::from_json(bytes) {
            Err(FormatError::Tokenizer(msg)) => assert!(msg.contains("not valid JSON"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
}

/// The fuzzers' valid seed still builds, encodes with its merges, and round-trips.
#[test]
fn the_valid_seed_tokenizer_json_builds() {
    let t = Tokenizer::from_json(include_bytes!(
        "../../../fuzz/corpus/tokenizer/tokenizer.json"
    ))
    .unwrap();
    let ids = t.encode("ab a", false).unwrap();
    assert_eq!(ids, [3, 5], "\"ab\" and \"Ġa\" are merges of the seed");
    assert_eq!(t.decode(&ids).unwrap(), "ab a");
    assert_eq!(t.bos, Some(0));
}
