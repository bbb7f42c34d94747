//! On aarch64 (CI runs it under qemu, `tests/run.sh`, once with the dot-product extension and
//! once on a CPU without it): each NEON micro-kernel gives the scalar kernel's results bit for
//! bit, for every weight type and row count; the scalar kernel is held to the exact product
//! (matmul.rs, which runs there too with the NEON kernels among the kernels), so the NEON paths
//! inherit that bound.
#![cfg(target_arch = "aarch64")]
#![allow(clippy::unwrap_used)]

mod common;

use common::equals_scalar_bit_for_bit;
use mars_kernels::{Isa, MAX_ROWS};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

/// `sdot` where the CPU reports the extension, plain NEON where it does not; the fastest is
/// chosen. `MARS_TEST_DOTPROD` (`tests/run.sh` sets it from the CPU qemu emulates) says which
/// to expect, so that a run meant for one kernel cannot pass on the other.
#[test]
fn the_fastest_neon_kernel_is_chosen() {
    let dot = std::arch::is_aarch64_feature_detected!("dotprod");
    let expected: &[Isa] = if dot {
        &[Isa::Scalar, Isa::Neon, Isa::NeonDot]
    } else {
        &[Isa::Scalar, Isa::Neon]
    };
    assert_eq!(Isa::available(), expected);
    assert_eq!(Some(&Isa::detect()), expected.last());
    if let Ok(want) = std::env::var("MARS_TEST_DOTPROD") {
        assert_eq!(want == "1", dot, "MARS_TEST_DOTPROD={want}");
    }
}

#[test]
fn neon_equals_scalar_bit_for_bit_for_every_type_and_row_count() {
    // Odd sizes for the legacy types (not a multiple of 256), whole super-blocks for K; a
    // one-block matrix's last block ends its buffer, so a load past a block would be caught.
    let shapes = [(37, 544), (3, 32)];
    for isa in Isa::available().into_iter().filter(|&i| i != Isa::Scalar) {
        let mut rng = ChaCha8Rng::seed_from_u64(29);
        equals_scalar_bit_for_bit(isa, 2, &shapes, &[1, 2, 5, 7, MAX_ROWS], &mut rng);
    }
}
