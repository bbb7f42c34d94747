//! Dequantization is bit-exact against the reference (`gguf.quants.dequantize`), using the
//! vectors committed beside `tests/data/quant/make_vectors.py`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use mars_formats::{FormatError, GgmlType};

macro_rules! vector {
    ($name:literal) => {
        (
            &include_bytes!(concat!("data/quant/", $name, ".bin"))[..],
            &include_bytes!(concat!("data/quant/", $name, ".f32"))[..],
        )
    };
}

fn check(dtype: GgmlType, (raw, expected): (&[u8], &[u8])) {
    let want: Vec<u32> = expected
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let got = dtype.dequantize(raw, want.len() as u64).unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // Compare bits: -0.0 vs 0.0 or a last-ulp difference is a failure.
        assert_eq!(
            g.to_bits(),
            *w,
            "{dtype} value {i}: got {g}, reference {}",
            f32::from_bits(*w)
        );
    }
}

#[test]
fn legacy_quants_match_the_reference_bit_for_bit() {
    check(GgmlType::Q4_0, vector!("Q4_0"));
    check(GgmlType::Q4_1, vector!("Q4_1"));
    check(GgmlType::Q5_0, vector!("Q5_0"));
    check(GgmlType::Q5_1, vector!("Q5_1"));
    check(GgmlType::Q8_0, vector!("Q8_0"));
}

#[test]
fn k_quants_match_the_reference_bit_for_bit() {
    check(GgmlType::Q4K, vector!("Q4_K"));
    check(GgmlType::Q5K, vector!("Q5_K"));
    check(GgmlType::Q6K, vector!("Q6_K"));
}

#[test]
fn float_types_match_the_reference_bit_for_bit() {
    check(GgmlType::F32, vector!("F32"));
    check(GgmlType::F16, vector!("F16"));
    check(GgmlType::BF16, vector!("BF16"));
}

#[test]
fn wrong_sizes_and_unsupported_types_are_errors() {
    let (raw, _) = vector!("Q4_0");
    assert!(matches!(
        GgmlType::Q4_0.dequantize(&raw[..17], 32),
        Err(FormatError::TooLarge { .. })
    ));
    assert!(matches!(
        GgmlType::Q4_0.dequantize(raw, 33),
        Err(FormatError::TooLarge { .. })
    ));
    assert!(matches!(
        GgmlType::Q4_0.dequantize(raw, u64::MAX),
        Err(FormatError::TooLarge { .. })
    ));
    assert!(matches!(
        GgmlType::Q2K.dequantize(&[0; 84], 256),
        Err(FormatError::BadTensorType { .. })
    ));
}
