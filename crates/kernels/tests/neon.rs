//! On aarch64 (CI runs it under qemu, `tests/run.sh`): the NEON micro-kernel gives the scalar
//! kernel's results bit for bit, for every weight type and row count; the scalar kernel is held
//! to the exact product (matmul.rs, which runs there too with NEON among the kernels), so the
//! NEON path inherits that bound.
#![cfg(target_arch = "aarch64")]
#![allow(clippy::unwrap_used)]

mod common;

use common::equals_scalar_bit_for_bit;
use mars_kernels::{Isa, MAX_ROWS};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

#[test]
fn the_neon_kernel_is_chosen() {
    assert_eq!(Isa::available(), [Isa::Scalar, Isa::Neon]);
    assert_eq!(Isa::detect(), Isa::Neon);
}

#[test]
fn neon_equals_scalar_bit_for_bit_for_every_type_and_row_count() {
    // Odd sizes for the legacy types (not a multiple of 256), whole super-blocks for K; a
    // one-block matrix's last block ends its buffer, so a load past a block would be caught.
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let shapes = [(37, 544), (3, 32)];
    equals_scalar_bit_for_bit(Isa::Neon, 2, &shapes, &[1, 2, 5, 7, MAX_ROWS], &mut rng);
}
