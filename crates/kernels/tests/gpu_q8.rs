//! The matmul kernel's 8-bit form (`Acts::Q8`: activations quantized per 32 values by
//! quant.wgsl, weights decoded to 8-bit integers, integer dot products of four) on wgpu
//! (lavapipe where there is no GPU): every block type within the bound its quantization
//! allows of the exact f64 product over unrounded activations; a row's bits independent of the
//! rows beside it and of the fan; a group (q | k | v, a split matrix, the head's last rows)
//! each output the bits of its matrix alone; a norm that quantizes its rows for the product
//! after it gives the product the bits of a separate quantization, and so does a product that
//! quantizes its own row; float weights refused the form.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "common/gpu.rs"]
mod gpu_common;
use gpu_common::{client, read_f32};

use common::{bits, cols_for, dequantized, random_matrix, random_x, rows_binding};
use cubecl::client::Client;
use cubecl::server::Handle;
use mars_kernels::gpu::{
    Acts, Epilogue, Fan, GpuMatrix, GpuType, MatrixGroup, Norm, Rows, Step, StepBuffer, Team,
};
use mars_kernels::{QMatrix, WeightType};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

/// The block types of integer values: the ones the form takes.
fn q8_types() -> impl Iterator<Item = WeightType> {
    WeightType::ALL
        .into_iter()
        .filter(|&ty| Acts::q8_for(&[ty.into()]))
}

fn f32_handle(client: &Client, v: &[f32]) -> Handle {
    let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
    client.create_from_slice(&bytes)
}

/// `w` on the device in the 8-bit form, split into parts of at most `max` bytes.
fn upload_q8(client: &Client, w: &QMatrix, max: u64) -> GpuMatrix {
    let mut gw = GpuMatrix::upload(client, w.ty(), w.rows(), w.cols(), w.blocks(), max).unwrap();
    gw.set_acts(Acts::Q8);
    gw
}

fn max_binding(client: &Client) -> u64 {
    client.properties().memory.max_page_size
}

/// `group` over a step of `m` rows whose last `tail` are the logit rows, `x` holding the rows
/// its product reads (all `m`, or the `tail` for the head).
fn run(client: &Client, group: &MatrixGroup, x: &[f32], (m, tail): (usize, usize)) -> Vec<f32> {
    let step = StepBuffer::new(client, &Step::chain(&vec![0; m], 0, tail, 1 << 20).unwrap());
    let rows = if group.rows() == Rows::Tail { tail } else { m };
    let y = client.empty(rows * group.outputs() * 4);
    group
        .run(client, &f32_handle(client, x), &y, &step)
        .unwrap();
    read_f32(client, y)
}

fn matmul(client: &Client, w: &GpuMatrix, x: &[f32], m: usize) -> Vec<f32> {
    let group =
        MatrixGroup::new(client, vec![w.clone()], Epilogue::Store, None, Rows::All).unwrap();
    assert_eq!(group.form().acts, Acts::Q8);
    run(client, &group, x, (m, m))
}

/// The exact product over the unrounded activations and, per output, what quantizing them may
/// move it by: each activation by at most half its block's step d = max|x| / 127 (times
/// 1 + 2⁻¹⁰ for the f32 division that rounds it), so Σ|w|·d/2 over the row; plus the f32
/// roundings of the form's few float operations a group (d·(s0·Σ + s1·Σ) + mn·s) and of the
/// team's sums, over magnitudes of at most 3·max|w| a block (a block's |s·q| and |mn| are at
/// most twice and once its largest |w|, with the minimums' 6-bit rounding) times Σ|x|.
fn exact_and_bound(
    wd: &[f32],
    x: &[f32],
    (m, out, cols): (usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let mut exact = vec![0f64; m * out];
    let mut bound = vec![0f64; m * out];
    let ulps = 4.0 * (cols / 32 + 24) as f64 * f64::from(f32::EPSILON);
    for r in 0..m {
        let xr = &x[r * cols..(r + 1) * cols];
        for o in 0..out {
            let wo = &wd[o * cols..(o + 1) * cols];
            let (mut sum, mut moved, mut magnitude) = (0f64, 0f64, 0f64);
            for (wb, xb) in wo.chunks(32).zip(xr.chunks(32)) {
                let step = xb.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs())) / 127.0;
                let wmax = wb.iter().fold(0f64, |a, &v| a.max(f64::from(v).abs()));
                for (&wi, &xi) in wb.iter().zip(xb) {
                    sum += f64::from(wi) * f64::from(xi);
                    moved += f64::from(wi).abs() * step / 2.0 * (1.0 + 1.0 / 1024.0);
                    magnitude += 3.0 * wmax * f64::from(xi).abs();
                }
            }
            exact[r * out + o] = sum;
            bound[r * out + o] = moved + ulps * magnitude + 1e-30;
        }
    }
    (exact, bound)
}

#[test]
fn every_type_is_within_its_quantization_bound_and_rows_stay_independent() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    // Odd output counts; 7 outputs over 4,096 inputs take a workgroup an output
    // (`Team::Whole`).
    for (out, cols) in [(37, 96), (130, 288), (7, 4096)] {
        for ty in q8_types() {
            let cols = cols_for(ty, cols);
            let w = random_matrix(ty, out, cols, &mut rng);
            let wd = dequantized(&w);
            let mut gw = upload_q8(&client, &w, max);
            let x = random_x(16, cols, &mut rng);
            let all = matmul(&client, &gw, &x, 16);
            let (exact, bound) = exact_and_bound(&wd, &x, (16, out, cols));
            let (mut err2, mut exact2) = (0f64, 0f64);
            for i in 0..16 * out {
                let err = (f64::from(all[i]) - exact[i]).abs();
                assert!(
                    err <= bound[i],
                    "{ty:?} out={out} in={cols} [{i}]: {} vs exact {} (error {err:.3e} > bound {:.3e})",
                    all[i],
                    exact[i],
                    bound[i]
                );
                err2 += err * err;
                exact2 += exact[i] * exact[i];
            }
            // 8 bits a value: a relative squared error of the order of 1e-5, as llama.cpp's.
            assert!(err2 / exact2 < 1e-3, "{ty:?}: NMSE {}", err2 / exact2);
            // And the quantized form ran: the f32 form's outputs differ.
            let mut f32_form = gw.clone();
            f32_form.set_acts(Acts::F32);
            let group = MatrixGroup::new(&client, vec![f32_form], Epilogue::Store, None, Rows::All);
            let unrounded = run(&client, &group.unwrap(), &x, (16, 16));
            assert_ne!(bits(&unrounded), bits(&all), "{ty:?}");
            // A row's bits do not depend on the rows beside it (nor on the 16-row launch or
            // the quantization launch's rows): 1, 5 rows, and row 3 alone.
            for m in [1, 5] {
                let some = matmul(&client, &gw, &x[..m * cols], m);
                assert_eq!(bits(&some), bits(&all[..m * out]), "{ty:?} {cols}: m = {m}");
            }
            let alone = matmul(&client, &gw, &x[3 * cols..4 * cols], 1);
            assert_eq!(bits(&alone), bits(&all[3 * out..4 * out]), "{ty:?}: row 3");
            // Four outputs a team give each output the bits of one.
            if cols <= 288 {
                gw.set_fan(Fan::Four);
                let four = matmul(&client, &gw, &x[..5 * cols], 5);
                assert_eq!(bits(&four), bits(&all[..5 * out]), "{ty:?}: fan of four");
            }
        }
    }
}

/// Wide teams in the 8-bit form (each lane's two runs half a quantized block each, one vec4;
/// Q4_K's minimum's term from the first half's lane, Q6_K's values made q − 32): within the
/// quantization bound for 1 to 16 super-blocks a row (Q6_K's runs of 8 whole and cut short),
/// their own bits (not the quarter teams'), a row's bits independent of the rows beside it and
/// of the fan, and a SwiGLU of two Q4_K or two Q6_K matrices within f32 rounding of its
/// products.
#[test]
fn wide_teams_are_within_the_bound_and_keep_the_row_contracts() {
    wide_team_contracts(Team::Wide);
}

/// The same with the whole workgroup on an output (eight super-blocks a step); a SwiGLU
/// group asked for it runs in 16-thread wide teams.
#[test]
fn whole_workgroup_wide_teams_are_within_the_bound_and_keep_the_row_contracts() {
    wide_team_contracts(Team::WholeWide);
}

fn wide_team_contracts(team: Team) {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let wide = |w: &QMatrix, fan| {
        let mut gw = upload_q8(&client, w, max);
        gw.set_team(team);
        gw.set_fan(fan);
        gw
    };
    let types = [WeightType::Q4K, WeightType::Q6K];
    let shapes = [(37, 256), (9, 2304), (7, 4096)];
    for (ty, (out, cols)) in types.iter().flat_map(|&ty| shapes.map(|s| (ty, s))) {
        let w = random_matrix(ty, out, cols, &mut rng);
        let x = random_x(16, cols, &mut rng);
        let all = matmul(&client, &wide(&w, Fan::One), &x, 16);
        let (exact, bound) = exact_and_bound(&dequantized(&w), &x, (16, out, cols));
        for i in 0..16 * out {
            let err = (f64::from(all[i]) - exact[i]).abs();
            assert!(
                err <= bound[i],
                "{ty:?} {out} x {cols} [{i}]: {} vs exact {} (bound {:.3e})",
                all[i],
                exact[i],
                bound[i]
            );
        }
        let quarter = matmul(&client, &upload_q8(&client, &w, max), &x, 16);
        assert_ne!(
            bits(&quarter),
            bits(&all),
            "{ty:?} {cols}: the {team:?} form did not run"
        );
        if team != Team::Wide && cols > 256 {
            let mut gw = upload_q8(&client, &w, max);
            gw.set_team(Team::Wide);
            assert_ne!(
                bits(&matmul(&client, &gw, &x, 16)),
                bits(&all),
                "{ty:?} {cols}: {team:?} ran as 16-thread wide teams"
            );
        }
        for m in [1, 5] {
            let some = matmul(&client, &wide(&w, Fan::One), &x[..m * cols], m);
            assert_eq!(bits(&some), bits(&all[..m * out]), "{ty:?} {cols}: m = {m}");
        }
        let four = matmul(&client, &wide(&w, Fan::Four), &x, 16);
        assert_eq!(bits(&four), bits(&all), "{ty:?} {cols}: fan of four");
    }
    let cols = 512;
    for ty in types {
        let x = random_x(3, cols, &mut rng);
        let (gate, up) = (
            random_matrix(ty, 24, cols, &mut rng),
            random_matrix(ty, 24, cols, &mut rng),
        );
        let (g, u) = (
            matmul(&client, &wide(&gate, Fan::One), &x, 3),
            matmul(&client, &wide(&up, Fan::One), &x, 3),
        );
        let swiglu = MatrixGroup::new(
            &client,
            vec![wide(&gate, Fan::One), wide(&up, Fan::One)],
            Epilogue::SwiGlu,
            None,
            Rows::All,
        )
        .unwrap();
        assert_eq!(
            (swiglu.form().team, swiglu.form().acts),
            (team.in_quarters(), Acts::Q8)
        );
        let got = run(&client, &swiglu, &x, (3, 3));
        for i in 0..3 * 24 {
            let want = g[i] / (1.0 + (-g[i]).exp()) * u[i];
            assert!(
                (got[i] - want).abs() <= 1e-5 * want.abs().max(1e-3),
                "{ty:?} swiglu [{i}]: {} vs {want}",
                got[i]
            );
        }
    }
}

/// More than 16 rows (two 16-row workgroups in z, 21 quantized rows): each row the bits of the
/// same row in a 16-row call.
#[test]
fn a_longer_call_keeps_each_rows_bits() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    let cols = 512;
    let w = random_matrix(WeightType::Q4K, 40, cols, &mut rng);
    let gw = upload_q8(&client, &w, max_binding(&client));
    let x = random_x(21, cols, &mut rng);
    let long = matmul(&client, &gw, &x, 21);
    let first = matmul(&client, &gw, &x[..16 * cols], 16);
    let last = matmul(&client, &gw, &x[16 * cols..], 5);
    assert_eq!(bits(&long[..16 * 40]), bits(&first));
    assert_eq!(bits(&long[16 * 40..]), bits(&last));
}

/// A group shares one quantization among its launches and members: q | k | v (Q4_K, Q4_K, Q6_K,
/// a Q4_K_M file's) with biases gives each output its matrix's bits alone plus the bias; a
/// matrix split into parts gives the whole's bits; the head over the step's last rows gives
/// those rows' bits of a product over them alone; a SwiGLU gate | up is within f32 rounding of
/// SiLU(gate)·up from the matrices alone.
#[test]
fn groups_split_matrices_and_the_head_keep_each_outputs_bits() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let cols = 256;
    let (m, tail) = (5, 2);
    let x = random_x(m, cols, &mut rng);
    let mats: Vec<QMatrix> = [
        (WeightType::Q4K, 24),
        (WeightType::Q4K, 8),
        (WeightType::Q6K, 8),
    ]
    .into_iter()
    .map(|(ty, rows)| random_matrix(ty, rows, cols, &mut rng))
    .collect();
    let alone: Vec<Vec<f32>> = mats
        .iter()
        .map(|w| matmul(&client, &upload_q8(&client, w, max), &x, m))
        .collect();
    let bias: Vec<f32> = (0..40).map(|i| i as f32 * 0.25 - 3.0).collect();
    let members: Vec<GpuMatrix> = mats.iter().map(|w| upload_q8(&client, w, max)).collect();
    let qkv = MatrixGroup::new(&client, members, Epilogue::Store, Some(&bias), Rows::All).unwrap();
    assert_eq!(qkv.form().acts, Acts::Q8);
    let got = run(&client, &qkv, &x, (m, m));
    for r in 0..m {
        let mut o = 0;
        for a in &alone {
            let n = a.len() / m;
            for j in 0..n {
                let want = a[r * n + j] + bias[o];
                assert_eq!(
                    got[r * 40 + o].to_bits(),
                    want.to_bits(),
                    "row {r} output {o}"
                );
                o += 1;
            }
        }
    }

    // Split into parts of 7 rows' bytes: 4 parts of the 24-row matrix.
    let w = &mats[0];
    let split = upload_q8(&client, w, rows_binding(w, 7));
    assert_eq!(split.parts().len(), 4);
    assert_eq!(bits(&matmul(&client, &split, &x, m)), bits(&alone[0]));

    // The head: the step's last `tail` rows (its x holds those rows only).
    let head = MatrixGroup::new(
        &client,
        vec![upload_q8(&client, w, max)],
        Epilogue::Store,
        None,
        Rows::Tail,
    )
    .unwrap();
    let last = &x[(m - tail) * cols..];
    let got = run(&client, &head, last, (m, tail));
    assert_eq!(bits(&got), bits(&alone[0][(m - tail) * 24..]));

    // gate | up: SiLU(gate)·up of the two products alone, within f32 rounding.
    let (gate, up) = (&mats[1], &random_matrix(WeightType::Q4K, 8, cols, &mut rng));
    let up_alone = matmul(&client, &upload_q8(&client, up, max), &x, m);
    let swiglu = MatrixGroup::new(
        &client,
        vec![upload_q8(&client, gate, max), upload_q8(&client, up, max)],
        Epilogue::SwiGlu,
        None,
        Rows::All,
    )
    .unwrap();
    assert_eq!(swiglu.form().team, Team::Quarter);
    let got = run(&client, &swiglu, &x, (m, m));
    for (i, (&g, &u)) in alone[1].iter().zip(&up_alone).enumerate() {
        let want = g / (1.0 + (-g).exp()) * u;
        assert!(
            (got[i] - want).abs() <= 1e-5 * want.abs().max(1e-3),
            "[{i}]: {} vs {want}",
            got[i]
        );
    }
}

/// Float weights (and lane teams) never take the form: a group asked for it stays f32, and
/// remaking a group in a form it cannot take is refused.
#[test]
fn float_weights_and_lane_teams_stay_f32() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let cols = 256;
    for ty in [WeightType::F16, WeightType::BF16] {
        assert!(!Acts::q8_for(&[ty.into()]));
        let w = random_matrix(ty, 8, cols, &mut rng);
        let gw = upload_q8(&client, &w, max_binding(&client));
        let group = MatrixGroup::new(&client, vec![gw], Epilogue::Store, None, Rows::All).unwrap();
        assert_eq!(group.form().acts, Acts::F32, "{ty:?}");
        assert!(group.forms().iter().all(|f| f.acts == Acts::F32), "{ty:?}");
    }
    assert!(!Acts::q8_for(&[GpuType::F32]));
    let w = random_matrix(WeightType::Q4K, 8, cols, &mut rng);
    let mut gw = upload_q8(&client, &w, max_binding(&client));
    gw.set_team(Team::Lanes);
    let group = MatrixGroup::new(&client, vec![gw], Epilogue::Store, None, Rows::All).unwrap();
    assert_eq!(
        (group.form().team, group.form().acts),
        (Team::Lanes, Acts::F32)
    );
    let q8_lanes = mars_kernels::gpu::Form {
        acts: Acts::Q8,
        ..group.form()
    };
    assert!(!group.forms().contains(&q8_lanes));
    assert!(group.with_form(&client, q8_lanes).is_err());
}

/// A norm that writes its rows quantized (`Norm::run_q8`) gives the product after it the bits a
/// separate quantizing launch gives, over every row and over the last rows (the head's); a
/// product in the f32 form asks for no room.
#[test]
fn a_norm_that_quantizes_gives_the_products_bits() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(25);
    let (d, m, tail) = (512, 5, 2);
    let g: Vec<f32> = (0..d).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
    let norm = Norm::new(&client, &g, 1e-5).unwrap();
    let x = f32_handle(&client, &random_x(m, d, &mut rng));
    let step = StepBuffer::new(
        &client,
        &Step::chain(&vec![0; m], 0, tail, 1 << 20).unwrap(),
    );
    let w = random_matrix(WeightType::Q6K, 19, d, &mut rng);
    for rows in [Rows::All, Rows::Tail] {
        let tail_rows = rows == Rows::Tail;
        let n = if tail_rows { tail } else { m };
        let group = MatrixGroup::new(
            &client,
            vec![upload_q8(&client, &w, max)],
            Epilogue::Store,
            None,
            rows,
        )
        .unwrap();
        let h = client.empty(n * d * 4);
        let (y_apart, y_fused) = (client.empty(n * 19 * 4), client.empty(n * 19 * 4));
        norm.run(&client, &x, &h, &step, tail_rows).unwrap();
        group.run(&client, &h, &y_apart, &step).unwrap();
        let h2 = client.empty(n * d * 4);
        let hq = group.quantized_room(&client, &step).unwrap();
        norm.run_q8(&client, (&x, &h2, &hq), &step, tail_rows)
            .unwrap();
        group
            .run_from(&client, (&h2, Some(&hq)), &y_fused, &step)
            .unwrap();
        let apart = read_f32(&client, y_apart);
        assert_eq!(bits(&read_f32(&client, y_fused)), bits(&apart), "{rows:?}");
        assert_eq!(
            bits(&read_f32(&client, h2)),
            bits(&read_f32(&client, h)),
            "{rows:?}"
        );
    }
    let mut f32_form = upload_q8(&client, &w, max);
    f32_form.set_acts(Acts::F32);
    let group =
        MatrixGroup::new(&client, vec![f32_form], Epilogue::Store, None, Rows::All).unwrap();
    assert!(group.quantized_room(&client, &step).is_none());
}

/// The 8-bit form that quantizes its own row (`Acts::Q8Own`) gives the 8-bit form's bits: in
/// one-row steps its own kernel (the row quantized a chunk of 2,048 values at a time in
/// workgroup memory) against a quantizing launch before the product, and in a pass of five rows
/// the 8-bit form's kernel; with a norm folded in, against a norm that writes the 8-bit rows
/// (`Norm::run_q8`), over every row and over the last (the head's). Every team it takes, one
/// and four outputs a team, rows of one chunk, of a chunk and a bit and of two, each epilogue a
/// forward gives it (q | k | v's store with biases, o's and down's residual add, gate | up's
/// SwiGLU), and a matrix launched in parts.
#[test]
fn a_product_that_quantizes_its_own_row_gives_the_8_bit_forms_bits() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(27);
    let step_of = |m: usize, tail: usize| {
        StepBuffer::new(
            &client,
            &Step::chain(&vec![0; m], 0, tail, 1 << 20).unwrap(),
        )
    };
    let cases = [
        (WeightType::Q4K, Team::Wide, 2304),
        (WeightType::Q4K, Team::WholeWide, 4096),
        (WeightType::Q6K, Team::Wide, 4096),
        (WeightType::Q6K, Team::Quarter, 512),
        (WeightType::Q5_0, Team::Quarter, 896),
        (WeightType::Q8_0, Team::Whole, 2304),
    ];
    for (ty, team, cols) in cases {
        for fan in [Fan::One, Fan::Four] {
            let out = 19;
            let w = random_matrix(ty, out, cols, &mut rng);
            let up = random_matrix(ty, out, cols, &mut rng);
            let bias: Vec<f32> = (0..out).map(|i| i as f32 * 0.25 - 2.0).collect();
            let member = |w: &QMatrix, acts| {
                let mut gw = upload_q8(&client, w, max);
                gw.set_team(team);
                gw.set_fan(fan);
                gw.set_acts(acts);
                gw
            };
            let group = |acts, epilogue, rows| {
                let (members, bias) = match epilogue {
                    Epilogue::SwiGlu => (vec![member(&w, acts), member(&up, acts)], None),
                    Epilogue::Store => (vec![member(&w, acts)], Some(&bias[..])),
                    Epilogue::Add => (vec![member(&w, acts)], None),
                };
                MatrixGroup::new(&client, members, epilogue, bias, rows).unwrap()
            };
            for epilogue in [Epilogue::Store, Epilogue::Add, Epilogue::SwiGlu] {
                let (q8, own) = (
                    group(Acts::Q8, epilogue, Rows::All),
                    group(Acts::Q8Own, epilogue, Rows::All),
                );
                assert_eq!(own.form().acts, Acts::Q8Own, "{ty:?} {team:?}");
                let outs = own.outputs();
                for m in [1, 5] {
                    let x = random_x(m, cols, &mut rng);
                    // The residual an Add group adds into.
                    let start: Vec<f32> = (0..m * outs).map(|i| (i % 5) as f32 - 2.0).collect();
                    let step = step_of(m, m);
                    let mut got = Vec::new();
                    for g in [&q8, &own] {
                        let y = f32_handle(&client, &start);
                        g.run(&client, &f32_handle(&client, &x), &y, &step).unwrap();
                        got.push(read_f32(&client, y));
                    }
                    assert!(got[0].iter().all(|v| v.is_finite()));
                    assert_eq!(
                        bits(&got[1]),
                        bits(&got[0]),
                        "{ty:?} {team:?} {fan:?} {cols} {epilogue:?}: m = {m}"
                    );
                }
            }
            // A matrix over a binding's size, launched part by part (a 32B's gate and up):
            // each part's launch quantizes the row itself.
            let parts = |acts| {
                let mut gw = upload_q8(&client, &w, rows_binding(&w, 7));
                gw.set_team(team);
                gw.set_fan(fan);
                gw.set_acts(acts);
                MatrixGroup::new(&client, vec![gw], Epilogue::Store, None, Rows::All).unwrap()
            };
            let (q8, own) = (parts(Acts::Q8), parts(Acts::Q8Own));
            assert_eq!(own.launches(), 3, "{ty:?} {team:?}");
            let x = random_x(1, cols, &mut rng);
            assert_eq!(
                bits(&run(&client, &own, &x, (1, 1))),
                bits(&run(&client, &q8, &x, (1, 1))),
                "{ty:?} {team:?} {fan:?} {cols}: in parts"
            );
            // A norm folded in: q | k | v over a one-row step, the head over a pass's last row.
            let g: Vec<f32> = (0..cols).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
            let eps = 1e-6;
            let norm = Norm::new(&client, &g, eps).unwrap();
            for (rows, m) in [(Rows::All, 1), (Rows::Tail, 5)] {
                let tail_rows = rows == Rows::Tail;
                let step = step_of(m, 1);
                let x = f32_handle(&client, &random_x(m, cols, &mut rng));
                let q8 = group(Acts::Q8, Epilogue::Store, rows);
                let own = group(Acts::Q8Own, Epilogue::Store, rows)
                    .with_norm_as(&client, &g, eps, false)
                    .unwrap();
                assert!(own.folds_norm(&step), "{ty:?} {rows:?}");
                let h = client.empty(cols * 4);
                let hq = q8.quantized_room(&client, &step).unwrap();
                assert!(own.quantized_room(&client, &step).is_none());
                norm.run_q8(&client, (&x, &h, &hq), &step, tail_rows)
                    .unwrap();
                let (apart, fused) = (client.empty(out * 4), client.empty(out * 4));
                q8.run_from(&client, (&h, Some(&hq)), &apart, &step)
                    .unwrap();
                own.run_normed(&client, &x, &fused, &step).unwrap();
                assert_eq!(
                    bits(&read_f32(&client, fused)),
                    bits(&read_f32(&client, apart)),
                    "{ty:?} {team:?} {fan:?} {cols} normed {rows:?}"
                );
            }
        }
    }
}

/// A block of zeros and a block of subnormal values give finite outputs within the bound of the
/// exact product, the same bits whether a launch before the product or the product itself
/// quantized the row. (What q8.wgsl's guard on a subnormal d prevents — 1 / d infinite, a NaN
/// converted to an integer — this cannot see on lavapipe, which flushes subnormals, nor would
/// its outputs show it anywhere: such a block's quants are multiplied by its d.)
#[test]
fn zero_and_subnormal_blocks_quantize_to_finite_values() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(29);
    let cols = 96;
    let mut x = random_x(1, cols, &mut rng);
    x[..32].fill(0.0);
    for (i, v) in x[32..64].iter_mut().enumerate() {
        *v = f32::from_bits(1 + 997 * i as u32) * if i % 2 == 0 { 1.0 } else { -1.0 };
        assert!(v.is_subnormal() || *v == 0.0);
    }
    let w = random_matrix(WeightType::Q8_0, 19, cols, &mut rng);
    let (exact, bound) = exact_and_bound(&dequantized(&w), &x, (1, 19, cols));
    let mut got = Vec::new();
    for acts in [Acts::Q8, Acts::Q8Own] {
        let mut gw = upload_q8(&client, &w, max);
        gw.set_acts(acts);
        let group = MatrixGroup::new(&client, vec![gw], Epilogue::Store, None, Rows::All).unwrap();
        assert_eq!(group.form().acts, acts);
        got.push(run(&client, &group, &x, (1, 1)));
    }
    for (i, (&g, e)) in got[0].iter().zip(&exact).enumerate() {
        assert!(
            (f64::from(g) - e).abs() <= bound[i],
            "[{i}]: {g} vs exact {e} (bound {:.3e})",
            bound[i]
        );
    }
    assert_eq!(bits(&got[1]), bits(&got[0]));
}
