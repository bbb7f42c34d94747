//! In the browser (wasm32 with simd128, run by wasm-bindgen-test-runner in headless Chromium):
//! the WebAssembly SIMD micro-kernel gives the scalar kernel's results bit for bit, for every
//! weight type and row count; the scalar kernel is held to the exact product natively
//! (matmul.rs), so the page's CPU path inherits that bound.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{equals_scalar_bit_for_bit, random_matrix, random_x};
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
    // Odd sizes for the legacy types (not a multiple of 256), whole super-blocks for K.
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    equals_scalar_bit_for_bit(
        Isa::Simd128,
        1,
        &[(37, 544)],
        &[1, 2, 5, MAX_ROWS],
        &mut rng,
    );
}

/// A benchmark, not a check (ignored; run with `cargo test -p mars-kernels --release --target
/// wasm32-unknown-unknown --test wasm -- --include-ignored rows_cost`): what a pass of m rows
/// costs the page's one wasm thread against one row, on the Qwen2.5-Coder-1.5B's FFN shapes
/// (gate/up 8960 × 1536 Q4_K, down 1536 × 8960 Q6_K): the bound on speculation in the browser
/// without a GPU. Prints the medians of 5 runs after a warm-up.
#[wasm_bindgen_test]
#[ignore]
fn rows_cost() {
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let k = Kernels::with_isa(Isa::Simd128, 1).unwrap();
    for (ty, out, cols) in [(WeightType::Q4K, 8960, 1536), (WeightType::Q6K, 1536, 8960)] {
        let w = random_matrix(ty, out, cols, &mut rng);
        // Warm-up: the browser compiles wasm in tiers, the first calls in its baseline tier.
        let x = random_x(MAX_ROWS, cols, &mut rng);
        let mut acts = QActs::default();
        acts.quantize(&x, MAX_ROWS, cols).unwrap();
        let mut y = vec![0f32; MAX_ROWS * out];
        for _ in 0..20 {
            k.matmul(&w, &acts, &mut y).unwrap();
        }
        let mut one = 0.0;
        for m in [1, 2, 4, 8, MAX_ROWS] {
            let x = random_x(m, cols, &mut rng);
            let mut acts = QActs::default();
            acts.quantize(&x, m, cols).unwrap();
            let mut y = vec![0f32; m * out];
            let mut ms: Vec<f64> = (0..5)
                .map(|_| {
                    let t = web_time::Instant::now();
                    k.matmul(&w, &acts, &mut y).unwrap();
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            ms.sort_by(f64::total_cmp);
            if m == 1 {
                one = ms[2];
            }
            console_log!(
                "rows cost {ty:?} {out}x{cols}: {m} rows {:.2} ms, {:.2}x one row",
                ms[2],
                ms[2] / one
            );
        }
    }
}
