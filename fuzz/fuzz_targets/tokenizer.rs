//! Any bytes: as a GGUF, the tokenizer built from its metadata; otherwise as a tokenizer.json.
//! Building returns a tokenizer or a typed error; a built one encodes and decodes its own input.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mars_formats::{Gguf, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let tokenizer = match Gguf::parse(data) {
        Ok(g) => Tokenizer::from_gguf(&g),
        Err(_) => Tokenizer::from_json(data),
    };
    if let Ok(t) = tokenizer {
        let text = String::from_utf8_lossy(&data[..data.len().min(256)]);
        if let Ok(ids) = t.encode(&text, true) {
            let _ = t.decode(&ids);
            let mut stream = t.stream();
            for id in ids {
                let _ = stream.push(id);
            }
            let _ = stream.finish();
        }
        let _ = t.decode(&[u32::MAX, 0, 1]);
    }
});
