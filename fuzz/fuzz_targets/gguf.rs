//! Any bytes: the GGUF reader returns a file or a typed error, and every tensor it accepts can be
//! dequantized without panicking (sizes were checked against the bytes that remain).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = mars_formats::Gguf::parse(data) {
        for key in g.metadata.keys() {
            let _ = g.get_u64(key);
            let _ = g.get_f64(key);
            let _ = g.get_str(key);
            let _ = g.get_str_array(key);
        }
        for t in &g.tensors {
            // Caps what one input may allocate, so the fuzzer explores rather than swaps.
            if t.n_elements <= 1 << 20 {
                let _ = g.tensor_f32(&t.name);
            }
        }
    }
});
