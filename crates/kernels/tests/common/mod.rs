//! Test helpers shared by the CPU and GPU kernel tests: random GGUF blocks of every type,
//! activations, and the exact dequantization the results are held against.
#![allow(dead_code, clippy::unwrap_used)]

use half::f16;
use mars_formats::GgmlType;
use mars_kernels::{BLOCK, Isa, Kernels, QActs, QMatrix, WeightType};
use rand_chacha::ChaCha8Rng;
use rand_core::Rng;

pub fn ggml(ty: WeightType) -> GgmlType {
    match ty {
        WeightType::Q8_0 => GgmlType::Q8_0,
        WeightType::Q4_0 => GgmlType::Q4_0,
        WeightType::Q4_1 => GgmlType::Q4_1,
        WeightType::Q5_0 => GgmlType::Q5_0,
        WeightType::Q5_1 => GgmlType::Q5_1,
        WeightType::Q4K => GgmlType::Q4K,
        WeightType::Q5K => GgmlType::Q5K,
        WeightType::Q6K => GgmlType::Q6K,
        WeightType::F16 => GgmlType::F16,
        WeightType::BF16 => GgmlType::BF16,
    }
}

/// `cols` for the legacy types (odd shapes: not a multiple of 256), the next multiple of 256
/// for K-quants (their rows are whole 256-value super-blocks).
pub fn cols_for(ty: WeightType, cols: usize) -> usize {
    cols.next_multiple_of(ty.block_values())
}

/// A binding limit that holds `rows` rows of `w` as the GPU stores them (with the padding word
/// every part carries): a matrix uploaded under it is split into parts of `rows` rows.
pub fn rows_binding(w: &QMatrix, rows: usize) -> u64 {
    let ty = w.ty();
    (rows * ty.gpu_row_bytes(w.cols() / ty.block_values()) + 4) as u64
}

pub fn uniform(rng: &mut ChaCha8Rng) -> f32 {
    (rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32
}

/// Random blocks: every quantized bit random (all values possible, Q8_0's −128 included, every
/// K-quant scale and minimum), the f16 fields finite and of varied size (Q4_1's minimums
/// negative).
pub fn random_matrix(ty: WeightType, rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> QMatrix {
    let nb = rows * cols / ty.block_values();
    let bb = ty.block_bytes();
    let mut data = Vec::with_capacity(nb * bb);
    for _ in 0..nb {
        let start = data.len();
        data.extend((0..bb).map(|_| rng.next_u32() as u8));
        let block = &mut data[start..];
        let mut put = |at: usize, v: f32| {
            block[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
        };
        match ty {
            WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q5_0 => {
                put(0, 0.001 + 0.05 * uniform(rng));
            }
            WeightType::Q4_1 | WeightType::Q5_1 => {
                put(0, 0.001 + 0.05 * uniform(rng));
                put(2, -0.4 * uniform(rng));
            }
            // Scales up to 63 and minimums up to 63 multiply these.
            WeightType::Q4K | WeightType::Q5K => {
                put(0, 0.0001 + 0.002 * uniform(rng));
                put(2, 0.0001 + 0.002 * uniform(rng));
            }
            // i8 scales up to ±128 multiply this one.
            WeightType::Q6K => put(208, 0.0001 + 0.001 * uniform(rng)),
            // Every value a finite float of varied sign and size.
            WeightType::F16 | WeightType::BF16 => {
                for at in (0..bb).step_by(2) {
                    let v = (uniform(rng) * 2.0 - 1.0) * [0.001f32, 0.05, 2.0][at % 3];
                    let bytes = if ty == WeightType::F16 {
                        f16::from_f32(v).to_le_bytes()
                    } else {
                        half::bf16::from_f32(v).to_le_bytes()
                    };
                    block[at..at + 2].copy_from_slice(&bytes);
                }
            }
        }
    }
    QMatrix::new(ty, rows, cols, data).unwrap()
}

/// Activations with blocks of very different magnitudes, as real hidden states have.
pub fn random_x(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| {
            let block_scale = [0.01f32, 1.0, 8.0][(i / BLOCK) % 3];
            (uniform(rng) * 2.0 - 1.0) * block_scale
        })
        .collect()
}

/// The matrix dequantized row by row (bit-exact with mars-formats: tested in matmul.rs).
pub fn dequantized(w: &QMatrix) -> Vec<f32> {
    let mut out = vec![0f32; w.rows() * w.cols()];
    for (r, row) in out.chunks_exact_mut(w.cols()).enumerate() {
        w.dequantize_row(r, row).unwrap();
    }
    out
}

/// Each value's bit pattern, for bit-for-bit comparisons.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Asserts that `isa` on `threads` gives the scalar kernel's results bit for bit for every
/// weight type, each of `shapes` (outputs, inputs: the inputs rounded up to whole blocks of the
/// type) and each row count of `rows` (what the 128-bit kernels promise, `v128.rs`).
pub fn equals_scalar_bit_for_bit(
    isa: Isa,
    threads: usize,
    shapes: &[(usize, usize)],
    rows: &[usize],
    rng: &mut ChaCha8Rng,
) {
    let scalar = Kernels::with_isa(Isa::Scalar, 1).unwrap();
    let simd = Kernels::with_isa(isa, threads).unwrap();
    for ty in WeightType::ALL {
        for &(out, cols) in shapes {
            let cols = cols_for(ty, cols);
            let w = random_matrix(ty, out, cols, rng);
            for &m in rows {
                let x = random_x(m, cols, rng);
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
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{isa:?} {ty:?}, {out} × {cols}, m = {m}"
                );
            }
        }
    }
}
