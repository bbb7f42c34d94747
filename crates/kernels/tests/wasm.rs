//! In the browser (wasm32 with simd128, run by wasm-bindgen-test-runner in headless Chromium):
//! the WebAssembly SIMD micro-kernel gives the scalar kernel's results bit for bit, for every
//! weight type and row count; the scalar kernel is held to the exact product natively
//! (matmul.rs), so the page's CPU path inherits that bound.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{bits, cols_for, random_matrix, random_x};
use mars_kernels::{Isa, Kernels, MAX_ROWS, QActs, WeightType};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
fn the_simd128_kernel_is_built_in() {
    assert_eq!(Isa::detect(), Isa::Simd128);
}

#[wasm_bindgen_test]
fn simd128_equals_scalar_bit_for_bit_for_every_type_and_row_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let scalar = Kernels::with_isa(Isa::Scalar, 1).unwrap();
    let simd = Kernels::with_isa(Isa::Simd128, 1).unwrap();
    for ty in WeightType::ALL {
        // Odd sizes for the legacy types (not a multiple of 256), whole super-blocks for K.
        let (out, cols) = (37, cols_for(ty, 544));
        let w = random_matrix(ty, out, cols, &mut rng);
        for m in [1, 2, 5, MAX_ROWS] {
            let x = random_x(m, cols, &mut rng);
            let mut acts = QActs::default();
            acts.quantize(&x, m, cols).unwrap();
            let mut want = vec![0f32; m * out];
            scalar.matmul(&w, &acts, &mut want).unwrap();
            let mut got = vec![0f32; m * out];
            simd.matmul(&w, &acts, &mut got).unwrap();
            assert!(
                want.iter().all(|v| v.is_finite() && *v != 0.0),
                "{ty:?}: degenerate reference"
            );
            assert_eq!(bits(&got), bits(&want), "{ty:?}, m = {m}");
        }
    }
}
