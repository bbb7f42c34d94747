//! Any bytes: the GGUF reader returns a file or a typed error, and every tensor it accepts can be
//! dequantized without panicking (sizes were checked against the bytes that remain). The same
//! bytes as a download's first part (`parse_header` with a claimed length from the input) give a
//! header or a typed error, and the header's tensor table equals the whole file's.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let claimed = data
        .iter()
        .take(8)
        .fold(0u64, |n, &b| n << 8 | u64::from(b));
    let _ = mars_formats::Gguf::parse_header(data, claimed);
    if let (Ok(h), Ok(g)) = (
        mars_formats::Gguf::parse_header(data, data.len() as u64),
        mars_formats::Gguf::parse(data),
    ) {
        assert_eq!(h.tensors, g.tensors);
    }
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
