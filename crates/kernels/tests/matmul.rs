//! Every micro-kernel × weight type × m ∈ {1, 2, 5, 8, 16} against an exact f64 product over
//! the project's bit-exact dequantization (mars-formats), held to the bound the 8-bit
//! activation rounding explains (see the crate docs); a row's result independent of the rows
//! beside it and of the thread count, bit for bit; bad shapes refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_kernels::{BLOCK, Isa, KernelError, Kernels, Layout, Product, QActs, QMatrix, WeightType};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

mod common;
use common::*;

/// The exact product and, per output, the bound the activation rounding explains (`group`
/// values share an activation scale: `WeightType::act_group`; `None`: activations not rounded,
/// f32 accumulation only).
fn exact_and_bound(
    wd: &[f32],
    x: &[f32],
    (m, out, cols): (usize, usize, usize),
    group: Option<usize>,
) -> (Vec<f64>, Vec<f64>) {
    let (group, rounded) = match group {
        Some(g) => (g, true),
        None => (BLOCK, false),
    };
    let mut exact = vec![0f64; m * out];
    let mut bound = vec![0f64; m * out];
    for r in 0..m {
        let xr = &x[r * cols..(r + 1) * cols];
        for o in 0..out {
            let wo = &wd[o * cols..(o + 1) * cols];
            let (mut sum, mut step, mut magnitude) = (0f64, 0f64, 0f64);
            for (wb, xb) in wo.chunks_exact(group).zip(xr.chunks_exact(group)) {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
                let w_abs: f64 = wb.iter().map(|&v| f64::from(v).abs()).sum();
                if rounded {
                    step += f64::from(amax) / 254.0 * w_abs;
                }
                for (&wi, &xi) in wb.iter().zip(xb) {
                    sum += f64::from(wi) * f64::from(xi);
                    magnitude += (f64::from(wi) * f64::from(xi)).abs();
                }
            }
            exact[r * out + o] = sum;
            // 1 % slack on the rounding step (the reciprocal scale is itself rounded), and f32
            // accumulation relative to the magnitude of the terms.
            bound[r * out + o] = 1.01 * step + 2e-6 * magnitude + 1e-7;
        }
    }
    (exact, bound)
}

/// `w` in every layout it has: as stored, and (Q4_K) in tiles, which the AVX-512 kernel runs
/// with its tile kernel and every other kernel reads back as rows.
fn layouts(w: &QMatrix) -> Vec<QMatrix> {
    let tiled = w.clone().into_tiles();
    if tiled.layout() == Layout::Rows {
        vec![w.clone()]
    } else {
        vec![w.clone(), tiled]
    }
}

#[test]
fn dequantize_row_equals_the_formats_dequantization_bit_for_bit() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for ty in WeightType::ALL {
        let cols = 3 * ty.block_values();
        let w = random_matrix(ty, 3, cols, &mut rng);
        let n = w.row_bytes();
        for r in 0..3 {
            let reference = ggml(ty)
                .dequantize(&w.blocks()[r * n..(r + 1) * n], cols as u64)
                .unwrap();
            for w in layouts(&w) {
                let mut row = vec![0f32; cols];
                w.dequantize_row(r, &mut row).unwrap();
                assert_eq!(
                    bits(&row),
                    bits(&reference),
                    "{ty:?} {:?} row {r}",
                    w.layout()
                );
            }
        }
    }
}

#[test]
fn every_kernel_type_and_row_count_is_within_the_activation_rounding_bound() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // Odd output counts (not a multiple of any tile), inputs not a multiple of 256 where the
    // type allows.
    for (out, cols) in [(37, 64), (5, 32), (130, 288)] {
        for ty in WeightType::ALL {
            let cols = cols_for(ty, cols);
            let w = random_matrix(ty, out, cols, &mut rng);
            let wd = dequantized(&w);
            for m in [1, 2, 5, 8, 16] {
                let x = random_x(m, cols, &mut rng);
                let (exact, bound) = exact_and_bound(&wd, &x, (m, out, cols), ty.act_group());
                let mut acts = QActs::default();
                acts.quantize(&x, m, cols).unwrap();
                for (isa, w) in Isa::available()
                    .into_iter()
                    .flat_map(|isa| layouts(&w).into_iter().map(move |w| (isa, w)))
                {
                    for threads in [1, 2] {
                        let k = Kernels::with_isa(isa, threads).unwrap();
                        let mut y = vec![0f32; m * out];
                        k.matmul(&w, &acts, &mut y).unwrap();
                        let isa = (isa, w.layout());
                        let mut nmse = (0f64, 0f64);
                        for i in 0..m * out {
                            let err = (f64::from(y[i]) - exact[i]).abs();
                            assert!(
                                err <= bound[i],
                                "{isa:?} {ty:?} m={m} out={out} in={cols} threads={threads} [{i}]: \
                                 {} vs exact {} (error {err:.3e} > bound {:.3e})",
                                y[i],
                                exact[i],
                                bound[i]
                            );
                            nmse.0 += err * err;
                            nmse.1 += exact[i] * exact[i];
                        }
                        // llama.cpp's test-backend-ops asks for a normalized MSE below 5e-4.
                        assert!(
                            nmse.0 / nmse.1 < 5e-4,
                            "{isa:?} {ty:?} m={m}: NMSE {}",
                            nmse.0 / nmse.1
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_rows_result_does_not_depend_on_the_rows_beside_it_or_the_threads() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for ty in WeightType::ALL {
        let (out, cols) = (77, cols_for(ty, 128));
        let w = random_matrix(ty, out, cols, &mut rng);
        let x = random_x(16, cols, &mut rng);
        for (isa, w) in Isa::available()
            .into_iter()
            .flat_map(|isa| layouts(&w).into_iter().map(move |w| (isa, w)))
        {
            let one_thread = Kernels::with_isa(isa, 1).unwrap();
            let two_threads = Kernels::with_isa(isa, 2).unwrap();
            let isa = (isa, w.layout());
            let mut acts = QActs::default();
            acts.quantize(&x, 16, cols).unwrap();
            let mut y16 = vec![0f32; 16 * out];
            one_thread.matmul(&w, &acts, &mut y16).unwrap();
            let mut y16_two = vec![0f32; 16 * out];
            two_threads.matmul(&w, &acts, &mut y16_two).unwrap();
            assert_eq!(
                bits(&y16),
                bits(&y16_two),
                "{isa:?} {ty:?}: threads changed a result"
            );
            for m in [1, 5] {
                for start in [0, 16 - m] {
                    acts.quantize(&x[start * cols..(start + m) * cols], m, cols)
                        .unwrap();
                    let mut y = vec![0f32; m * out];
                    two_threads.matmul(&w, &acts, &mut y).unwrap();
                    assert_eq!(
                        bits(&y),
                        bits(&y16[start * out..(start + m) * out]),
                        "{isa:?} {ty:?}: rows {start}..{} alone differ from the same rows among 16",
                        start + m
                    );
                }
            }
        }
    }
}

#[test]
fn simd_and_scalar_agree_within_f32_accumulation() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let (out, cols) = (64, 512);
    for ty in WeightType::ALL {
        let w = random_matrix(ty, out, cols, &mut rng);
        let x = random_x(5, cols, &mut rng);
        let mut acts = QActs::default();
        acts.quantize(&x, 5, cols).unwrap();
        let mut reference = vec![0f32; 5 * out];
        Kernels::with_isa(Isa::Scalar, 1)
            .unwrap()
            .matmul(&w, &acts, &mut reference)
            .unwrap();
        for (isa, w) in Isa::available()
            .into_iter()
            .flat_map(|isa| layouts(&w).into_iter().map(move |w| (isa, w)))
        {
            let mut y = vec![0f32; 5 * out];
            Kernels::with_isa(isa, 1)
                .unwrap()
                .matmul(&w, &acts, &mut y)
                .unwrap();
            let isa = (isa, w.layout());
            // Both sum the same exact integer block products; only the f32 order differs.
            let scale = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (a, b) in y.iter().zip(&reference) {
                assert!(
                    (a - b).abs() <= 1e-5 * scale,
                    "{isa:?} {ty:?}: {a} vs scalar {b}"
                );
            }
        }
    }
}

/// Every type but Q5_K and the 16-bit floats tiles. Every kernel but AVX-512's reads a tiled
/// matrix back as the file's rows, so it gives exactly
/// what it gives for the rows; AVX-512's tile kernel sums the same integer products in another
/// f32 order (the bound test holds it to the exact product).
#[test]
fn a_tiled_matrix_gives_the_rows_results() {
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    for (ty, (out, cols)) in WeightType::ALL
        .into_iter()
        .filter(|&ty| !matches!(ty, WeightType::Q5K | WeightType::F16 | WeightType::BF16))
        .flat_map(|ty| [(ty, (16, 256)), (ty, (37, 512))])
    {
        let w = random_matrix(ty, out, cols, &mut rng);
        let tiled = w.clone().into_tiles();
        assert_eq!(tiled.layout(), Layout::Tiles);
        // Straight from the file's bytes: the same tiles; one byte short refused.
        assert_eq!(
            QMatrix::tiled_from(ty, out, cols, w.blocks()).unwrap(),
            tiled
        );
        assert!(matches!(
            QMatrix::tiled_from(ty, out, cols, &w.blocks()[1..]),
            Err(KernelError::Shape { .. })
        ));
        // Padding rows of the last tile, and Q4_K's decoded scales (148 bytes for 144).
        assert!(
            tiled.bytes() >= w.bytes()
                && tiled.bytes() * 144 <= out.next_multiple_of(16) * w.row_bytes() * 148,
            "{ty:?}"
        );
        for m in [1, 5, 16] {
            let x = random_x(m, cols, &mut rng);
            let mut acts = QActs::default();
            acts.quantize(&x, m, cols).unwrap();
            for isa in Isa::available() {
                let k = Kernels::with_isa(isa, 2).unwrap();
                let (mut a, mut b) = (vec![0f32; m * out], vec![0f32; m * out]);
                k.matmul(&w, &acts, &mut a).unwrap();
                k.matmul(&tiled, &acts, &mut b).unwrap();
                if isa == Isa::Avx512 {
                    let scale = a.iter().fold(0f32, |s, v| s.max(v.abs()));
                    for (p, q) in a.iter().zip(&b) {
                        assert!((p - q).abs() <= 1e-5 * scale, "{ty:?} m={m}: {p} vs {q}");
                    }
                    assert_eq!(k.prepare(w.clone()), tiled);
                } else {
                    assert_eq!(bits(&a), bits(&b), "{isa:?} {ty:?} m={m}");
                    assert_eq!(k.prepare(w.clone()), w);
                }
            }
        }
    }
}

#[test]
fn bad_shapes_and_settings_are_errors() {
    let ty = WeightType::Q4_1;
    assert!(matches!(
        QMatrix::new(ty, 2, 48, vec![0; 100]),
        Err(KernelError::RaggedRow { cols: 48, .. })
    ));
    // One byte short of 2 rows × 2 blocks.
    assert!(matches!(
        QMatrix::new(ty, 2, 64, vec![0; 79]),
        Err(KernelError::Shape {
            expected: 80,
            found: 79,
            ..
        })
    ));
    assert!(matches!(
        QMatrix::new(ty, usize::MAX, 64, vec![]),
        Err(KernelError::Overflow { .. })
    ));
    let w = QMatrix::new(ty, 2, 64, vec![0; 80]).unwrap();
    let k = Kernels::new(1).unwrap();
    let mut acts = QActs::default();
    assert!(acts.quantize(&[0.0; 63], 1, 63).is_err());
    assert!(acts.quantize(&[0.0; 63], 1, 64).is_err());
    acts.quantize(&[0.0; 32], 1, 32).unwrap();
    assert!(matches!(
        k.matmul(&w, &acts, &mut [0.0; 2]),
        Err(KernelError::Shape {
            expected: 64,
            found: 32,
            ..
        })
    ));
    acts.quantize(&vec![0.0; 17 * 64], 17, 64).unwrap();
    assert!(matches!(
        k.matmul(&w, &acts, &mut [0.0; 34]),
        Err(KernelError::TooManyRows { rows: 17, .. })
    ));
    acts.quantize(&[0.0; 64], 1, 64).unwrap();
    assert!(k.matmul(&w, &acts, &mut [0.0; 3]).is_err());
    assert!(Kernels::new(0).is_err());
    let mut row = [0f32; 64];
    assert!(w.dequantize_row(2, &mut row).is_err());
    assert!(w.dequantize_row(0, &mut row[..10]).is_err());
}

/// AVX-VNNI only fuses exact integer steps, so it equals AVX2 bit for bit. (The AVX-512
/// kernels have the same integer sums but add their f32 lanes in another order: they are held
/// to the scalar kernel's tolerance by `simd_and_scalar_agree_within_f32_accumulation`, and to
/// row independence like every kernel.)
#[test]
fn the_vnni_kernels_equal_the_avx2_kernels_bit_for_bit() {
    if !Isa::available().contains(&Isa::AvxVnni) {
        eprintln!("this CPU has no AVX-VNNI: nothing to compare");
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    for ty in WeightType::ALL {
        let (out, cols) = (45, cols_for(ty, 512));
        let w = random_matrix(ty, out, cols, &mut rng);
        for m in [1, 3, 5, 16] {
            let x = random_x(m, cols, &mut rng);
            let mut acts = QActs::default();
            acts.quantize(&x, m, cols).unwrap();
            let run = |isa| {
                let mut y = vec![0f32; m * out];
                Kernels::with_isa(isa, 2)
                    .unwrap()
                    .matmul(&w, &acts, &mut y)
                    .unwrap();
                bits(&y)
            };
            assert_eq!(run(Isa::AvxVnni), run(Isa::Avx2), "{ty:?} m={m}");
        }
    }
}

#[test]
fn a_range_of_weight_rows_equals_those_features_of_a_full_call() {
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    for ty in [
        WeightType::Q8_0,
        WeightType::Q6K,
        WeightType::Q4_1,
        WeightType::Q4K,
    ] {
        let (out, cols) = (53, cols_for(ty, 256));
        let w = random_matrix(ty, out, cols, &mut rng);
        for m in [1, 5] {
            let x = random_x(m, cols, &mut rng);
            let mut acts = QActs::default();
            acts.quantize(&x, m, cols).unwrap();
            for (isa, w) in Isa::available()
                .into_iter()
                .flat_map(|isa| layouts(&w).into_iter().map(move |w| (isa, w)))
            {
                let k = Kernels::with_isa(isa, 2).unwrap();
                let isa = (isa, w.layout());
                let mut full = vec![0f32; m * out];
                k.matmul(&w, &acts, &mut full).unwrap();
                for rows in [0..out, 0..17, 9..10, 40..out] {
                    let n = rows.len();
                    let mut part = vec![0f32; m * n];
                    k.matmul_rows(&w, rows.clone(), &acts, &mut part).unwrap();
                    for r in 0..m {
                        assert_eq!(
                            bits(&part[r * n..(r + 1) * n]),
                            bits(&full[r * out + rows.start..r * out + rows.end]),
                            "{isa:?} {ty:?} m={m} rows {rows:?}"
                        );
                    }
                }
                let mut y = vec![0f32; m * 4];
                for bad in [out..out + 4, 3..3, 50..54] {
                    assert!(
                        matches!(
                            k.matmul_rows(&w, bad.clone(), &acts, &mut y),
                            Err(KernelError::Shape { .. })
                        ),
                        "{bad:?}"
                    );
                }
            }
        }
    }
}

/// Several products of one activation in one `matmul_batch` call (one parallel region: a
/// layer's q/k/v, its gate and up) give each product's `matmul_rows` result bit for bit,
/// whatever their types, layouts and ranges; one bad product fails the call by name.
#[test]
fn a_batch_of_products_equals_each_product_alone() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let cols = 256;
    // Tiled and untiled types (Q5_K stays rows), sizes on and off the 16-row tile.
    let shapes = [
        (WeightType::Q4K, 96),
        (WeightType::Q6K, 21),
        (WeightType::Q5K, 40),
        (WeightType::Q8_0, 16),
        (WeightType::Q4_1, 35),
    ];
    let weights: Vec<QMatrix> = shapes
        .iter()
        .map(|&(ty, out)| random_matrix(ty, out, cols, &mut rng))
        .collect();
    let ranges = [0..96, 3..21, 0..40, 0..16, 16..35];
    for (isa, threads) in Isa::available().into_iter().flat_map(|i| [(i, 1), (i, 2)]) {
        let k = Kernels::with_isa(isa, threads).unwrap();
        let prepared: Vec<QMatrix> = weights.iter().map(|w| k.prepare(w.clone())).collect();
        for m in [1, 5, 16] {
            let x = random_x(m, cols, &mut rng);
            let mut acts = QActs::default();
            acts.quantize(&x, m, cols).unwrap();
            let alone: Vec<Vec<f32>> = prepared
                .iter()
                .zip(&ranges)
                .map(|(w, rows)| {
                    let mut y = vec![0f32; m * rows.len()];
                    k.matmul_rows(w, rows.clone(), &acts, &mut y).unwrap();
                    y
                })
                .collect();
            let mut ys: Vec<Vec<f32>> = ranges.iter().map(|r| vec![0f32; m * r.len()]).collect();
            let mut products: Vec<Product<'_>> = prepared
                .iter()
                .zip(&ranges)
                .zip(&mut ys)
                .map(|((w, rows), y)| Product {
                    w,
                    rows: rows.clone(),
                    y,
                })
                .collect();
            k.matmul_batch(&acts, &mut products).unwrap();
            for ((y, a), (ty, _)) in ys.iter().zip(&alone).zip(shapes) {
                assert_eq!(bits(y), bits(a), "{isa:?} threads={threads} m={m} {ty:?}");
            }
            // A product whose output has the wrong length fails the batch.
            let mut short = vec![0f32; m * 20];
            let mut fine = vec![0f32; m * 96];
            let mut bad = [
                Product {
                    w: &prepared[0],
                    rows: 0..96,
                    y: &mut fine,
                },
                Product {
                    w: &prepared[1],
                    rows: 0..21,
                    y: &mut short,
                },
            ];
            assert!(matches!(
                k.matmul_batch(&acts, &mut bad),
                Err(KernelError::Shape { .. })
            ));
        }
    }
}

/// Activations quantized to only the forms a kernel names ([`Kernels::forms`]) give the same
/// outputs, bit for bit, as those quantized to every form; a form left out is an error naming
/// the type, never a wrong answer or a panic.
#[test]
fn only_the_forms_a_kernel_needs_give_the_same_results_and_a_missing_one_is_refused() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    for ty in WeightType::ALL {
        let (out, cols) = (21, cols_for(ty, 512));
        let w = random_matrix(ty, out, cols, &mut rng);
        let m = 5;
        let x = random_x(m, cols, &mut rng);
        let mut all = QActs::default();
        all.quantize(&x, m, cols).unwrap();
        for (isa, w) in Isa::available()
            .into_iter()
            .flat_map(|isa| layouts(&w).into_iter().map(move |w| (isa, w)))
        {
            let k = Kernels::with_isa(isa, 2).unwrap();
            let need = k.forms(&w);
            let mut some = QActs::default();
            some.quantize_for(&x, m, cols, need).unwrap();
            assert_eq!(some.forms(), need, "{isa:?} {ty:?}");
            let (mut a, mut b) = (vec![0f32; m * out], vec![0f32; m * out]);
            k.matmul(&w, &all, &mut a).unwrap();
            k.matmul(&w, &some, &mut b).unwrap();
            assert_eq!(bits(&a), bits(&b), "{isa:?} {ty:?}");
            // The forms of another type's kernel (a legacy type for a K-quant and back).
            let q8 = random_matrix(WeightType::Q8_0, 1, cols, &mut rng);
            let other = if need == k.forms(&q8) {
                random_matrix(WeightType::Q6K, 1, cols, &mut rng)
            } else {
                q8
            };
            let mut wrong = QActs::default();
            wrong.quantize_for(&x, m, cols, k.forms(&other)).unwrap();
            assert_eq!(
                k.matmul(&w, &wrong, &mut b),
                Err(KernelError::MissingForm { ty, isa }),
                "{isa:?} {ty:?}"
            );
        }
    }
}
