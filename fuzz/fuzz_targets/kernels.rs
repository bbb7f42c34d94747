//! Any bytes as a weight matrix and activations: `QMatrix::new` accepts or refuses them with a
//! typed error, and an accepted matrix multiplies on every kernel this CPU runs without a panic,
//! each activation row's result bit-identical whether it is multiplied alone or among all m
//! rows (the property that keeps greedy strict speculation equal to target-only decoding; any
//! NaN equals any NaN), for the matrix as given and as the kernel set prepares it (Q4_K / Q6_K
//! in 16-row tiles on AVX-512); and SwiGLU's SiLU·up over the same floats gives the same bits
//! on every ISA's build.
//!
//! Layout of an input: byte 0 picks the type, byte 1 the output rows (1–64), byte 2 the input
//! width in 32-value blocks (1–24), byte 3 the activation rows (1–16); then the weight bytes
//! (the matrix needs exactly rows × blocks × block bytes; short or long data must be refused),
//! then little-endian f32 activations, cycled to fill m × cols (NaN and ±inf included).
#![no_main]
use libfuzzer_sys::fuzz_target;
use mars_kernels::{Isa, Kernels, QActs, QMatrix, WeightType};

fuzz_target!(|data: &[u8]| {
    let [ty, out, blocks, m, rest @ ..] = data else {
        return;
    };
    let ty = WeightType::ALL[usize::from(*ty) % WeightType::ALL.len()];
    let out = usize::from(*out % 64) + 1;
    let cols = (usize::from(*blocks % 24) + 1) * 32;
    let m = usize::from(*m % 16) + 1;
    // The exact size when the row holds whole blocks of the type; a byte more or less otherwise
    // (the constructor must refuse it) by the low bit of the weight's first byte.
    let exact =
        (cols % ty.block_values() == 0).then(|| out * cols / ty.block_values() * ty.block_bytes());
    let want = match (exact, rest.first()) {
        (Some(n), Some(b)) if b & 1 == 1 => n + 1,
        (Some(n), _) => n,
        (None, _) => rest.len().min(4096),
    };
    if rest.len() < want {
        return;
    }
    let (w_bytes, x_bytes) = rest.split_at(want);
    let Ok(w) = QMatrix::new(ty, out, cols, w_bytes.to_vec()) else {
        return;
    };
    assert_eq!(Some(want), exact, "a matrix of the wrong size was accepted");
    let floats: Vec<f32> = x_bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if floats.is_empty() {
        return;
    }
    let x: Vec<f32> = floats.iter().copied().cycle().take(m * cols).collect();
    let mut all = QActs::default();
    all.quantize(&x, m, cols).unwrap();
    for (isa, w) in Isa::available().into_iter().flat_map(|isa| {
        let k = Kernels::with_isa(isa, 1).unwrap();
        [(isa, w.clone()), (isa, k.prepare(w.clone()))]
    }) {
        let k = Kernels::with_isa(isa, 1).unwrap();
        let mut y = vec![0f32; m * out];
        k.matmul(&w, &all, &mut y).unwrap();
        let mut one = QActs::default();
        for r in 0..m {
            one.quantize(&x[r * cols..(r + 1) * cols], 1, cols).unwrap();
            let mut yr = vec![0f32; out];
            k.matmul(&w, &one, &mut yr).unwrap();
            let same = yr
                .iter()
                .zip(&y[r * out..(r + 1) * out])
                // NaN is NaN: its sign and payload follow operand order, which the compiler may
                // commute differently per instantiation.
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            assert!(
                same,
                "{isa:?} {ty:?} {:?}: row {r} alone differs from it among {m} rows: {yr:?} vs {:?}",
                w.layout(),
                &y[r * out..(r + 1) * out]
            );
        }
    }
    let (gate, up) = x.split_at(x.len() / 2); // m × cols is even (cols is a multiple of 32)
    let mut want = gate.to_vec();
    let scalar = Kernels::with_isa(Isa::Scalar, 1).unwrap();
    scalar.silu_mul(&mut want, up).unwrap();
    for isa in Isa::available() {
        let mut got = gate.to_vec();
        Kernels::with_isa(isa, 1).unwrap().silu_mul(&mut got, up).unwrap();
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        assert!(same, "{isa:?}: SiLU·up differs from the scalar build");
    }
});
