//! Any bytes: the safetensors reader (8-byte length + JSON header + data) returns a file or a
//! typed error, and converting an accepted tensor to f32 never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = mars_formats::SafetensorsFile::parse(data) {
        for name in file.names() {
            let _ = file.tensor_f32(name);
        }
    }
});
