//! On aarch64 (CI runs it under qemu, `tests/run.sh`): the NEON micro-kernel gives the scalar
//! kernel's results bit for bit, for every weight type and row count; the scalar kernel is held
//! to the exact product (matmul.rs, which runs there too with NEON among the kernels), so the
//! NEON path inherits that bound.
#![cfg(target_arch = "aarch64")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{bits, cols_for, random_matrix, random_x};
use mars_kernels::{Isa, Kernels, MAX_ROWS, QActs, WeightType};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

#[test]
fn the_neon_kernel_is_chosen() {
    assert_eq!(Isa::available(), [Isa::Scalar, Isa::Neon]);
    assert_eq!(Isa::detect(), Isa::Neon);
}

#[test]
fn neon_equals_scalar_bit_for_bit_for_every_type_and_row_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let scalar = Kernels::with_isa(Isa::Scalar, 1).unwrap();
    let neon = Kernels::with_isa(Isa::Neon, 2).unwrap();
    for ty in WeightType::ALL {
        // Odd sizes for the legacy types (not a multiple of 256), whole super-blocks for K; the
        // matrix's last block ends its buffer, so a load past a block would be caught.
        for (out, cols) in [(37, cols_for(ty, 544)), (3, cols_for(ty, 32))] {
            let w = random_matrix(ty, out, cols, &mut rng);
            for m in [1, 2, 5, 7, MAX_ROWS] {
                let x = random_x(m, cols, &mut rng);
                let mut acts = QActs::default();
                acts.quantize(&x, m, cols).unwrap();
                let mut want = vec![0f32; m * out];
                scalar.matmul(&w, &acts, &mut want).unwrap();
                let mut got = vec![0f32; m * out];
                neon.matmul(&w, &acts, &mut got).unwrap();
                assert!(
                    want.iter().all(|v| v.is_finite() && *v != 0.0),
                    "{ty:?}: degenerate reference"
                );
                assert_eq!(bits(&got), bits(&want), "{ty:?}, {out} × {cols}, m = {m}");
            }
        }
    }
}
