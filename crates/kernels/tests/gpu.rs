//! The WGSL kernels on wgpu (lavapipe where there is no GPU): every weight type × m ∈ {1, 5,
//! 16} against an exact f64 product over the project's dequantization, within the f32 rounding
//! bound (activations stay f32 on the GPU); a row's result independent of the rows beside it,
//! bit for bit, also across the 16-row launches of a longer call; a matrix split into parts equal to the whole; the embedding lookup equal to the
//! dequantized rows; the subgroup reduction equal to the workgroup one bit for bit; bad calls
//! refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "common/gpu.rs"]
mod gpu_common;
use gpu_common::{client, read_f32};

use common::{bits, cols_for, dequantized, random_matrix, random_x, rows_binding};
use cubecl::client::Client;
use cubecl::server::Handle;
use mars_kernels::gpu::{
    Epilogue, Fan, GpuMatrix, MatrixGroup, Reduce, Rows, Step, StepBuffer, Team, TileForm,
    UnitShape, UnitTile,
};
use mars_kernels::{KernelError, QMatrix, WeightType};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

fn max_binding(client: &Client) -> u64 {
    client.properties().memory.max_page_size
}

fn upload(client: &Client, w: &QMatrix, max: u64) -> GpuMatrix {
    GpuMatrix::upload(client, w.ty(), w.rows(), w.cols(), w.blocks(), max).unwrap()
}

fn f32_handle(client: &Client, v: &[f32]) -> Handle {
    let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
    client.create_from_slice(&bytes)
}

fn matmul(client: &Client, w: &GpuMatrix, x: &[f32], m: usize) -> Vec<f32> {
    let xh = f32_handle(client, x);
    let y = client.empty(m * w.rows() * 4);
    w.matmul(client, &xh, &y, m).unwrap();
    read_f32(client, y)
}

/// A step of `m` rows, a part of a long prefill: its products over every row run in their
/// group's prefill form.
fn tile_step(client: &Client, m: usize) -> StepBuffer {
    StepBuffer::new(
        client,
        &Step::chain(&vec![0; m], 0, m, 1 << 20)
            .unwrap()
            .long_prefill(),
    )
}

/// `members` as one group with `epilogue` (and `bias`) over `m` rows of `x`, in tiles of `form`,
/// each workgroup walking at most `span` groups of 32 inputs where given
/// (else the rule's split).
fn tiled_in(
    (form, span): (TileForm, Option<usize>),
    client: &Client,
    members: Vec<GpuMatrix>,
    epilogue: Epilogue,
    bias: Option<&[f32]>,
    x: &[f32],
    m: usize,
) -> Vec<f32> {
    let mut members = members;
    members[0].set_prefill(Some(form));
    if let Some(span) = span {
        members[0].set_tile_span(span);
    }
    let group = MatrixGroup::new(client, members, epilogue, bias, Rows::All).unwrap();
    let y = client.empty(m * group.outputs() * 4);
    group
        .run(client, &f32_handle(client, x), &y, &tile_step(client, m))
        .unwrap();
    read_f32(client, y)
}

/// The exact product and, per output, the f32 rounding bound: products and sums in f32 over
/// `cols` terms (a thread's running sum over its groups, 8-term dot products, a 16-way tree)
/// lose at most ~(cols / 16 + 24) ulps of Σ|w·x|; held with a factor of 4.
fn exact_and_bound(wd: &[f32], x: &[f32], shape: (usize, usize, usize)) -> (Vec<f64>, Vec<f64>) {
    exact_and_bound_over(wd, x, shape, shape.2 / 16 + 24)
}

/// [`exact_and_bound`] for a form whose sums take `depth` roundings in a row.
fn exact_and_bound_over(
    wd: &[f32],
    x: &[f32],
    (m, out, cols): (usize, usize, usize),
    depth: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut exact = vec![0f64; m * out];
    let mut bound = vec![0f64; m * out];
    let ulps = 4.0 * depth as f64 * f64::from(f32::EPSILON) / 2.0;
    for r in 0..m {
        let xr = &x[r * cols..(r + 1) * cols];
        for o in 0..out {
            let wo = &wd[o * cols..(o + 1) * cols];
            let (mut sum, mut magnitude) = (0f64, 0f64);
            for (&wi, &xi) in wo.iter().zip(xr) {
                sum += f64::from(wi) * f64::from(xi);
                magnitude += (f64::from(wi) * f64::from(xi)).abs();
            }
            exact[r * out + o] = sum;
            bound[r * out + o] = ulps * magnitude + 1e-30;
        }
    }
    (exact, bound)
}

#[test]
fn every_type_and_row_count_is_within_the_f32_rounding_bound() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // Odd output counts (not a multiple of the 4 rows a workgroup takes), inputs not a multiple
    // of 256 where the type allows; 7 outputs over 4,096 inputs take a workgroup an output
    // (`Team::Whole`).
    for (out, cols) in [(37, 96), (5, 32), (130, 288), (7, 4096)] {
        for ty in WeightType::ALL {
            let cols = cols_for(ty, cols);
            let w = random_matrix(ty, out, cols, &mut rng);
            let wd = dequantized(&w);
            let gw = upload(&client, &w, max);
            for m in [1, 5, 16] {
                let x = random_x(m, cols, &mut rng);
                let (exact, bound) = exact_and_bound(&wd, &x, (m, out, cols));
                let y = matmul(&client, &gw, &x, m);
                let mut nmse = (0f64, 0f64);
                for i in 0..m * out {
                    let err = (f64::from(y[i]) - exact[i]).abs();
                    assert!(
                        err <= bound[i],
                        "{ty:?} m={m} out={out} in={cols} [{i}]: {} vs exact {} (error {err:.3e} > bound {:.3e})",
                        y[i],
                        exact[i],
                        bound[i]
                    );
                    nmse.0 += err * err;
                    nmse.1 += exact[i] * exact[i];
                }
                assert!(
                    nmse.0 / nmse.1 < 5e-4,
                    "{ty:?} m={m}: NMSE {}",
                    nmse.0 / nmse.1
                );
            }
        }
    }
}

/// Lane teams (16 lanes sharing each Q4_K or Q6_K super-block): within the f32 bound of the
/// exact product for 1, 5 and 16 rows, a row's bits independent of the rows beside it and of
/// the fan, and in a gate | up SwiGLU group and a q | k | v group with biases (Q4_K, Q4_K, Q6_K:
/// a Q4_K_M file's v), each output the bits of its matrix alone in the same form (plus its
/// bias; SiLU(gate)·up within f32 rounding).
#[test]
fn lane_teams_are_exact_to_f32_and_keep_the_row_contracts() {
    a_team_is_exact_to_f32_and_keeps_the_row_contracts(
        Team::Lanes,
        &[WeightType::Q4K, WeightType::Q6K],
        &[(WeightType::Q4K, WeightType::Q6K)],
    );
}

/// Wide teams (8 lanes a Q4_K or Q6_K super-block, 16 bytes a load, the weights bound as
/// vec4s): the same contracts, over one super-block a row (half the team idle) and over nine
/// (an odd number: the team takes two a step; Q6_K's run of 8 and a run of one), in groups of
/// Q4_K matrices and of Q6_K ones.
#[test]
fn wide_teams_are_exact_to_f32_and_keep_the_row_contracts() {
    a_team_is_exact_to_f32_and_keeps_the_row_contracts(
        Team::Wide,
        &[WeightType::Q4K, WeightType::Q6K],
        &[
            (WeightType::Q4K, WeightType::Q4K),
            (WeightType::Q6K, WeightType::Q6K),
        ],
    );
}

/// Lane and wide teams with the whole workgroup on an output (four or eight super-blocks a
/// step, one block of a row or nine: most of the workgroup idle, then a step left over): the
/// same contracts; a SwiGLU group asked for them runs in the 16-thread team (its gate and up
/// meet inside a workgroup), within f32 rounding of the outputs alone.
#[test]
fn whole_workgroup_lane_and_wide_teams_are_exact_to_f32_and_keep_the_row_contracts() {
    a_team_is_exact_to_f32_and_keeps_the_row_contracts(
        Team::WholeLanes,
        &[WeightType::Q4K, WeightType::Q6K],
        &[(WeightType::Q4K, WeightType::Q6K)],
    );
    a_team_is_exact_to_f32_and_keeps_the_row_contracts(
        Team::WholeWide,
        &[WeightType::Q4K, WeightType::Q6K],
        &[
            (WeightType::Q4K, WeightType::Q4K),
            (WeightType::Q6K, WeightType::Q6K),
        ],
    );
}

/// `team` over matrices of each of `types`, and in groups of each of `groups`' (type, type of
/// the third matrix: a q | k | v's v).
fn a_team_is_exact_to_f32_and_keeps_the_row_contracts(
    team: Team,
    types: &[WeightType],
    groups: &[(WeightType, WeightType)],
) {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let in_parts = |w: &QMatrix, fan, max| {
        let mut g = upload(&client, w, max);
        g.set_team(team);
        g.set_fan(fan);
        g
    };
    let lanes = |w: &QMatrix, fan| in_parts(w, fan, max);
    let shapes = [(37, 256), (9, 2304)];
    for (ty, (out, cols)) in types.iter().flat_map(|&ty| shapes.map(|s| (ty, s))) {
        let w = random_matrix(ty, out, cols, &mut rng);
        let wd = dequantized(&w);
        let x = random_x(16, cols, &mut rng);
        let (exact, bound) = exact_and_bound(&wd, &x, (16, out, cols));
        let one = matmul(&client, &lanes(&w, Fan::One), &x, 16);
        let quarter = matmul(&client, &upload(&client, &w, max), &x, 16);
        for i in 0..16 * out {
            let err = (f64::from(one[i]) - exact[i]).abs();
            assert!(
                err <= bound[i],
                "{ty:?} {team:?} [{i}]: {} vs {}",
                one[i],
                exact[i]
            );
        }
        // Its own bits: another order of sums than the 32-value groups', and with the whole
        // workgroup on an output over more than one super-block another than its 16-thread
        // team's (over one, the other lanes add zeros: the same bits).
        assert_ne!(
            bits(&one),
            bits(&quarter),
            "{ty:?}: the {team:?} form did not run"
        );
        if team.in_quarters() != team && cols > 256 {
            let mut g = upload(&client, &w, max);
            g.set_team(team.in_quarters());
            assert_ne!(
                bits(&matmul(&client, &g, &x, 16)),
                bits(&one),
                "{ty:?}: {team:?} ran as its 16-thread team"
            );
        }
        assert_eq!(
            bits(&matmul(&client, &lanes(&w, Fan::Four), &x, 16)),
            bits(&one),
            "{ty:?}: four outputs a team"
        );
        for m in [1, 5] {
            let some = matmul(&client, &lanes(&w, Fan::One), &x[..m * cols], m);
            assert_eq!(bits(&some), bits(&one[..m * out]), "{ty:?}: m = {m} vs 16");
        }
        // Split into parts of 7 rows' bytes a binding: the bits of the unsplit matrix.
        let parts = in_parts(&w, Fan::One, rows_binding(&w, 7));
        assert!(parts.parts().len() > 1);
        assert_eq!(
            bits(&matmul(&client, &parts, &x, 16)),
            bits(&one),
            "{ty:?}: split"
        );
    }
    // Groups: gate | up and q | k | v (with biases), 3 rows.
    for &(ty, v_type) in groups {
        let cols = 512;
        let x = random_x(3, cols, &mut rng);
        let xh = f32_handle(&client, &x);
        let ws: Vec<QMatrix> = [(24, ty), (8, ty), (8, v_type)]
            .iter()
            .map(|&(o, ty)| random_matrix(ty, o, cols, &mut rng))
            .collect();
        let alone: Vec<Vec<f32>> = ws
            .iter()
            .map(|w| matmul(&client, &lanes(w, Fan::One), &x, 3))
            .collect();
        let step = StepBuffer::new(&client, &Step::chain(&[0; 3], 0, 3, 1 << 20).unwrap());
        let bias: Vec<f32> = (0..40).map(|i| i as f32 * 0.25 - 3.0).collect();
        let qkv = MatrixGroup::new(
            &client,
            ws.iter().map(|w| lanes(w, Fan::One)).collect(),
            Epilogue::Store,
            Some(&bias),
            Rows::All,
        )
        .unwrap();
        let y = client.empty(3 * 40 * 4);
        qkv.run(&client, &xh, &y, &step).unwrap();
        let y = read_f32(&client, y);
        each_output_is_its_matrix_alone(&y, (3, 40), &ws, &alone, &bias, &format!("{ty:?} qkv"));
        let up = random_matrix(ty, 24, cols, &mut rng);
        let up_alone = matmul(&client, &lanes(&up, Fan::One), &x, 3);
        let swiglu = MatrixGroup::new(
            &client,
            vec![lanes(&ws[0], Fan::One), lanes(&up, Fan::One)],
            Epilogue::SwiGlu,
            None,
            Rows::All,
        )
        .unwrap();
        let y = client.empty(3 * 24 * 4);
        swiglu.run(&client, &xh, &y, &step).unwrap();
        let y = read_f32(&client, y);
        for i in 0..3 * 24 {
            let (g, u) = (f64::from(alone[0][i]), f64::from(up_alone[i]));
            let want = g / (1.0 + (-g).exp()) * u;
            assert!(
                (f64::from(y[i]) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{ty:?} swiglu [{i}]: {} vs {want}",
                y[i]
            );
        }
    }
}

/// Each output of a group's `rows` rows (`stride` outputs a row) has the bits of its matrix's
/// output alone (`alone`, by matrix) plus its bias.
fn each_output_is_its_matrix_alone(
    y: &[f32],
    (rows, stride): (usize, usize),
    ws: &[QMatrix],
    alone: &[Vec<f32>],
    bias: &[f32],
    what: &str,
) {
    let mut first = 0;
    for (k, w) in ws.iter().enumerate() {
        for r in 0..rows {
            for o in 0..w.rows() {
                let want = alone[k][r * w.rows() + o] + bias[first + o];
                assert_eq!(
                    y[r * stride + first + o].to_bits(),
                    want.to_bits(),
                    "{what} {k} {r} {o}"
                );
            }
        }
        first += w.rows();
    }
}

#[test]
fn a_rows_result_does_not_depend_on_the_rows_beside_it() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    // Quarter teams for every type; whole-workgroup teams (4,096 inputs) for two.
    let wide = [WeightType::Q4K, WeightType::Q6K].map(|ty| (ty, 4096));
    for (ty, cols) in WeightType::ALL.iter().map(|&ty| (ty, 256)).chain(wide) {
        let cols = cols_for(ty, cols);
        let w = random_matrix(ty, 21, cols, &mut rng);
        let gw = upload(&client, &w, max);
        let x = random_x(16, cols, &mut rng);
        let all = matmul(&client, &gw, &x, 16);
        for m in [1, 2, 5, 8] {
            let some = matmul(&client, &gw, &x[..m * cols], m);
            assert_eq!(
                bits(&some),
                bits(&all[..m * 21]),
                "{ty:?} {cols}: m = {m} vs 16"
            );
        }
        // Row 3 alone equals row 3 of the 16.
        let alone = matmul(&client, &gw, &x[3 * cols..4 * cols], 1);
        assert_eq!(
            bits(&alone),
            bits(&all[3 * 21..4 * 21]),
            "{ty:?} {cols}: row 3 alone"
        );
    }
}

/// The team reduction through subgroup shuffles gives the workgroup-memory reduction's bits,
/// for m ∈ {1, 5, 16}, with the narrowest shuffles (three halvings in workgroup memory) and the
/// widest the device's subgroups allow. The reduction follows the per-type decoding, so three
/// types stand for all (each pipeline takes ~1 s to compile on lavapipe). lavapipe has
/// subgroups of 8, which CubeCL leaves off on CPU adapters, so `detect` picks workgroup memory
/// there and the test forces the subgroup form; the device has the feature, as CubeCL asks for
/// every feature the adapter offers.
#[test]
fn the_subgroup_reduction_equals_the_workgroup_reduction_bit_for_bit() {
    let client = client();
    let max = max_binding(&client);
    let smallest = client.properties().hardware.plane_size_min;
    assert!(
        smallest >= 2 && smallest.is_power_of_two(),
        "this device reports subgroups of {smallest}: nothing to test"
    );
    let widths = [2, smallest.min(16)];
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    // Quarter teams (1,024 inputs), and a whole-workgroup team (4,096: two halvings more in
    // workgroup memory before the shuffles).
    let cases = [
        (WeightType::Q8_0, 1024, 37, &[1, 5, 16][..]),
        (WeightType::Q4K, 1024, 37, &[1, 5, 16]),
        (WeightType::Q6K, 1024, 37, &[1, 5, 16]),
        (WeightType::Q4K, 4096, 7, &[1, 5]),
    ];
    for (ty, cols, out, rows) in cases {
        // Enough groups that every lane of a team holds a partial sum, and an odd output count.
        let cols = cols_for(ty, cols);
        let w = random_matrix(ty, out, cols, &mut rng);
        let mut gw = upload(&client, &w, max);
        for &m in rows {
            let x = random_x(m, cols, &mut rng);
            gw.set_reduce(Reduce::Workgroup).unwrap();
            let want = matmul(&client, &gw, &x, m);
            for &lanes in &widths {
                gw.set_reduce(Reduce::Subgroup { lanes }).unwrap();
                let got = matmul(&client, &gw, &x, m);
                assert_eq!(bits(&got), bits(&want), "{ty:?} {cols} m={m} lanes={lanes}");
            }
        }
    }
    // Lanes that are not a power of two in 2…16 are refused.
    let w = random_matrix(WeightType::Q8_0, 4, 64, &mut rng);
    let mut gw = upload(&client, &w, max);
    for lanes in [0, 1, 3, 32] {
        assert!(
            gw.set_reduce(Reduce::Subgroup { lanes }).is_err(),
            "{lanes}"
        );
    }
}

#[test]
fn a_matrix_split_into_parts_equals_the_whole() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for ty in [WeightType::Q4_1, WeightType::Q6K, WeightType::Q5_0] {
        let cols = cols_for(ty, 256);
        let w = random_matrix(ty, 50, cols, &mut rng);
        let whole = upload(&client, &w, max_binding(&client));
        // A limit of 7 rows' bytes: 8 parts, the last one short.
        let limit = rows_binding(&w, 7);
        let split = upload(&client, &w, limit);
        assert_eq!(whole.parts().len(), 1);
        assert_eq!(split.parts().len(), 8);
        let x = random_x(5, cols, &mut rng);
        assert_eq!(
            bits(&matmul(&client, &split, &x, 5)),
            bits(&matmul(&client, &whole, &x, 5)),
            "{ty:?}"
        );

        let ids = [0u32, 49, 7, 6, 23];
        let step = StepBuffer::new(&client, &Step::chain(&ids, 0, 1, 50).unwrap());
        let wd = dequantized(&w);
        for gw in [&whole, &split] {
            let out = client.empty(ids.len() * cols * 4);
            gw.embed(&client, &step, &out).unwrap();
            let rows = read_f32(&client, out);
            for (i, &id) in ids.iter().enumerate() {
                let want = &wd[id as usize * cols..(id as usize + 1) * cols];
                let got = &rows[i * cols..(i + 1) * cols];
                for (g, e) in got.iter().zip(want) {
                    // value = s·q + mn in f32, against the CPU's own rounding of the same terms.
                    assert!(
                        (g - e).abs() <= 1e-6 * e.abs().max(1.0),
                        "{ty:?} id {id}: {g} vs {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_calls_are_errors() {
    let client = client();
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let w = random_matrix(WeightType::Q8_0, 4, 64, &mut rng);
    let gw = upload(&client, &w, max_binding(&client));
    let x = f32_handle(&client, &[0.0; 64]);
    let y = client.empty(4 * 4);
    assert!(matches!(
        gw.matmul(&client, &x, &y, 0),
        Err(KernelError::Shape { .. })
    ));
    // x holds one row, not two.
    assert!(matches!(
        gw.matmul(&client, &x, &y, 2),
        Err(KernelError::Shape { what: "x", .. })
    ));
    // Blocks that do not match the shape; a row over the binding limit.
    assert!(
        GpuMatrix::upload(&client, WeightType::Q8_0, 4, 64, &w.blocks()[1..], 1 << 20).is_err()
    );
    assert!(matches!(
        GpuMatrix::upload(&client, WeightType::Q8_0, 4, 64, w.blocks(), 40),
        Err(KernelError::TooLarge { .. })
    ));
}

/// A team of four outputs (CPU adapters) gives each output the bits a team of one gives (GPUs),
/// for every type and row count, with an output count that leaves the last team part empty.
#[test]
fn four_outputs_a_team_give_the_bits_of_one() {
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    for ty in WeightType::ALL {
        let cols = cols_for(ty, 512);
        let w = random_matrix(ty, 37, cols, &mut rng);
        let mut gw = upload(&client, &w, max);
        for m in [1, 5, 16, 21] {
            let x = random_x(m, cols, &mut rng);
            gw.set_fan(Fan::One);
            let one = matmul(&client, &gw, &x, m);
            gw.set_fan(Fan::Four);
            let four = matmul(&client, &gw, &x, m);
            assert_eq!(bits(&four), bits(&one), "{ty:?} m={m}");
        }
    }
}

/// The tall f32 tile (64 rows × 64 outputs, `TileForm::TallVectors`): each output the narrow
/// tile's multiply-adds in its order, so its bits, over every type, rows, splits and epilogue
/// ([`larger_tiles_give_the_narrow_bits`]), where the device's workgroup memory holds it
/// (lavapipe's does).
#[test]
fn the_tall_f32_tile_gives_the_narrow_tiles_bits() {
    let client = client();
    let room = client.properties().hardware.max_shared_memory_size;
    let tall = TileForm::TallVectors;
    assert!(
        tall.workgroup_bytes() as usize <= room,
        "{} bytes of workgroup memory",
        room
    );
    larger_tiles_give_the_narrow_bits(&client, TileForm::Vectors, tall);
}

/// Tiles (a long prefill's form, tile.wgsl): every type within the f32 bound of the exact
/// product (its sums are one running sum of 4-value dot products: cols / 4 + 4 roundings);
/// a row's bits independent of the rows beside it and of its place in the pass (a row in the
/// second 32-row tile equals it first in a shorter pass); a matrix split into parts, q | k | v
/// with biases, an added residual and gate | up each the bits of their matrices alone in tiles
/// (SiLU(gate)·up within f32 rounding); and another order of sums than the mat-vec form's.
#[test]
fn tiles_are_within_the_f32_bound_and_keep_their_row_contract() {
    tiles_keep_their_contracts(None);
}

/// Tiles split along the inputs (split-K: [`mars_kernels::gpu::Splits`]; each workgroup walking
/// 3 groups of 32 inputs, so the matrices below split in 3 to 6, the last split shorter): every
/// contract of the unsplit tiles above, and not their bits (the splits ran).
#[test]
fn split_tiles_keep_the_contracts_of_tiles() {
    tiles_keep_their_contracts(Some(3));
    // A group the rule splits (1,024 inputs, 64 outputs: 16 splits of 2 groups would be
    // too short, so 2 of 16) offers its tiles unsplit too, a tuning's choice: that form gives
    // unsplit tiles' bits, and the split form back the rule's.
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let (out, cols, m) = (64, 1024, 33);
    let w = random_matrix(WeightType::Q4K, out, cols, &mut rng);
    let x = random_x(m, cols, &mut rng);
    assert_eq!(mars_kernels::Splits::rule(cols, out, false).count, 2);
    let mut gw = upload(&client, &w, max);
    gw.set_prefill(Some(TileForm::Vectors));
    let group =
        MatrixGroup::new(&client, vec![gw.clone()], Epilogue::Store, None, Rows::All).unwrap();
    let forms = group.prefill_forms(&[], 0);
    let names: Vec<String> = forms.iter().map(|f| f.name()).collect();
    assert!(
        names.iter().any(|n| n.ends_with("/tiles-unsplit")),
        "{names:?}"
    );
    assert!(names.iter().any(|n| n.ends_with("/tiles")), "{names:?}");
    let unsplit_form = forms.iter().find(|f| !f.split).copied().unwrap();
    let run = |g: &MatrixGroup| {
        let y = client.empty(m * out * 4);
        g.run(
            &client,
            &f32_handle(&client, &x),
            &y,
            &tile_step(&client, m),
        )
        .unwrap();
        read_f32(&client, y)
    };
    let unsplit = group.with_form(&client, unsplit_form).unwrap();
    assert!(!unsplit.form().split);
    assert_eq!(
        bits(&run(&unsplit)),
        bits(&unsplit_tiled(&client, vec![gw], &x, m))
    );
    let back = unsplit.with_form(&client, group.form()).unwrap();
    assert!(back.form().split);
    assert_eq!(bits(&run(&back)), bits(&run(&group)));
    assert_ne!(
        bits(&run(&group)),
        bits(&run(&unsplit)),
        "the rule's split did not run"
    );
}

/// The tiles' contracts with each workgroup walking at most `span` groups of inputs (`None`: the
/// rule, which splits none of these small matrices).
fn tiles_keep_their_contracts(span: Option<usize>) {
    let client = client();
    let tiled = |members: Vec<GpuMatrix>, epilogue, bias, x: &[f32], m| {
        tiled_in(
            (TileForm::Vectors, span),
            &client,
            members,
            epilogue,
            bias,
            x,
            m,
        )
    };
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    for (out, cols) in [(70, 288), (5, 64)] {
        for ty in WeightType::ALL {
            let cols = cols_for(ty, cols);
            let w = random_matrix(ty, out, cols, &mut rng);
            let wd = dequantized(&w);
            let gw = upload(&client, &w, max);
            let m = 40;
            let x = random_x(m, cols, &mut rng);
            // A split's partials add one rounding each.
            let (exact, bound) =
                exact_and_bound_over(&wd, &x, (m, out, cols), cols / 4 + 4 + cols / 32);
            let all = tiled(vec![gw.clone()], Epilogue::Store, None, &x, m);
            if span.is_some() && out > 8 {
                assert_ne!(
                    bits(&all),
                    bits(&unsplit_tiled(&client, vec![gw.clone()], &x, m)),
                    "{ty:?}: the split did not run"
                );
            }
            for i in 0..m * out {
                let err = (f64::from(all[i]) - exact[i]).abs();
                assert!(
                    err <= bound[i],
                    "{ty:?} tiles out={out} in={cols} [{i}]: {} vs exact {} ({err:.3e} > {:.3e})",
                    all[i],
                    exact[i],
                    bound[i]
                );
            }
            // Rows 23..40 (the first tile's last 9 and the second's 8) as a pass of their own,
            // and row 0 alone.
            let late = tiled(vec![gw.clone()], Epilogue::Store, None, &x[23 * cols..], 17);
            assert_eq!(bits(&late), bits(&all[23 * out..]), "{ty:?}: rows 23..40");
            let first = tiled(vec![gw.clone()], Epilogue::Store, None, &x, 1);
            assert_eq!(bits(&first), bits(&all[..out]), "{ty:?}: row 0 alone");
            if out > 8 {
                assert_ne!(
                    bits(&matmul(&client, &gw, &x[..16 * cols], 16)),
                    bits(&all[..16 * out]),
                    "{ty:?}: tiles did not run"
                );
            }
        }
    }
    // A matrix in 8 parts (7 rows' bytes a part) equals the whole.
    let cols = 256;
    let w = random_matrix(WeightType::Q6K, 50, cols, &mut rng);
    let x = random_x(20, cols, &mut rng);
    let split = upload(&client, &w, rows_binding(&w, 7));
    assert_eq!(split.parts().len(), 8);
    let whole = tiled(
        vec![upload(&client, &w, max)],
        Epilogue::Store,
        None,
        &x,
        20,
    );
    assert_eq!(
        bits(&tiled(vec![split], Epilogue::Store, None, &x, 20)),
        bits(&whole),
        "parts"
    );
    // Groups over 33 rows: q | k | v of three types with biases, o added to a residual, and
    // gate | up (80 outputs each: two workgroups, the second half empty).
    let m = 33;
    let x = random_x(m, cols, &mut rng);
    let ws: Vec<QMatrix> = [
        (72, WeightType::Q4K),
        (8, WeightType::Q8_0),
        (8, WeightType::Q6K),
    ]
    .iter()
    .map(|&(o, ty)| random_matrix(ty, o, cols, &mut rng))
    .collect();
    let alone: Vec<Vec<f32>> = ws
        .iter()
        .map(|w| tiled(vec![upload(&client, w, max)], Epilogue::Store, None, &x, m))
        .collect();
    let bias: Vec<f32> = (0..88).map(|i| i as f32 * 0.25 - 3.0).collect();
    let members = || ws.iter().map(|w| upload(&client, w, max)).collect();
    let y = tiled(members(), Epilogue::Store, Some(&bias), &x, m);
    each_output_is_its_matrix_alone(&y, (m, 88), &ws, &alone, &bias, "qkv");
    let residual: Vec<f32> = (0..m * 72).map(|i| (i % 13) as f32 - 6.0).collect();
    let mut w0 = upload(&client, &ws[0], max);
    w0.set_prefill(Some(TileForm::Vectors));
    if let Some(span) = span {
        w0.set_tile_span(span);
    }
    let group = MatrixGroup::new(&client, vec![w0], Epilogue::Add, None, Rows::All).unwrap();
    let y = f32_handle(&client, &residual);
    group
        .run(
            &client,
            &f32_handle(&client, &x),
            &y,
            &tile_step(&client, m),
        )
        .unwrap();
    let y = read_f32(&client, y);
    for i in 0..m * 72 {
        assert_eq!(
            y[i].to_bits(),
            (residual[i] + alone[0][i]).to_bits(),
            "add [{i}]"
        );
    }
    let gate = random_matrix(WeightType::Q4K, 80, cols, &mut rng);
    let up = random_matrix(WeightType::Q5_0, 80, cols, &mut rng);
    let [g1, u1] =
        [&gate, &up].map(|w| tiled(vec![upload(&client, w, max)], Epilogue::Store, None, &x, m));
    let y = tiled(
        vec![upload(&client, &gate, max), upload(&client, &up, max)],
        Epilogue::SwiGlu,
        None,
        &x,
        m,
    );
    assert_eq!(y.len(), m * 80);
    for i in 0..m * 80 {
        let (g, u) = (f64::from(g1[i]), f64::from(u1[i]));
        let want = g / (1.0 + (-g).exp()) * u;
        assert!(
            (f64::from(y[i]) - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "swiglu [{i}]: {} vs {want}",
            y[i]
        );
    }
}

/// `members` stored in unsplit tiles.
fn unsplit_tiled(client: &Client, members: Vec<GpuMatrix>, x: &[f32], m: usize) -> Vec<f32> {
    tiled_in(
        (TileForm::Vectors, Some(usize::MAX)),
        client,
        members,
        Epilogue::Store,
        None,
        x,
        m,
    )
}

/// The matrix units' shapes on wgpu's high-performance adapter (the one CubeCL's default device
/// opens), where it has what [`TileForm::Units`] needs (`adapter_matrix_units`): the narrow
/// tile first, then the wide one where it fits.
fn matrix_units() -> Vec<UnitShape> {
    use cubecl::wgpu::wgpu;
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .ok()
    .map(|adapter| mars_kernels::gpu::adapter_matrix_units(&adapter))
    .unwrap_or_default()
}

/// `larger` (a tall or wide tile's outputs) bit for bit `narrow`'s, or the first that differs.
fn same_bits(narrow: &[f32], larger: &[f32], what: &str) {
    assert_eq!(narrow.len(), larger.len(), "{what}");
    if let Some(i) = (0..narrow.len()).find(|&i| narrow[i].to_bits() != larger[i].to_bits()) {
        panic!(
            "{what}: {} against narrow {} at [{i}]",
            larger[i], narrow[i]
        );
    }
}

/// A tall or wide tile on the matrix units against the narrow one of the same blocks: each product
/// is the same blocks along the inputs in the same order, so the bits must agree, over rows
/// that fill no tile, one and a bit, and several large ones (40, 100, 133), outputs that leave
/// a large tile's second half empty or partly live, every type, unsplit and split (partials
/// from 2 × 1 or 2 × 2 tiles, summed by 32 × 64), and every epilogue: a biased q | k | v group
/// of three matrices, the same group added to a residual, a SwiGLU (gate j and up j in one
/// 32 × 64 tile of the large one's).
fn larger_tiles_give_the_narrow_bits(client: &Client, narrow: TileForm, larger: TileForm) {
    let max = max_binding(client);
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let both = |members: &dyn Fn() -> Vec<GpuMatrix>,
                epilogue: Epilogue,
                bias: Option<&[f32]>,
                x: &[f32],
                m: usize,
                span: Option<usize>,
                what: &str| {
        let [a, b] = [narrow, larger]
            .map(|form| tiled_in((form, span), client, members(), epilogue, bias, x, m));
        same_bits(&a, &b, &format!("{what}, span {span:?}"));
    };
    for (i, ty) in WeightType::ALL.into_iter().enumerate() {
        let (out, cols) = ([70, 130, 64][i % 3], cols_for(ty, 256));
        let w = random_matrix(ty, out, cols, &mut rng);
        let m = [40, 100, 133][i % 3];
        let x = random_x(m, cols, &mut rng);
        for span in [None, Some(3)] {
            let what = format!("{ty:?}, {out} outputs, {m} rows");
            both(
                &|| vec![upload(client, &w, max)],
                Epilogue::Store,
                None,
                &x,
                m,
                span,
                &what,
            );
        }
    }
    let cols = 256;
    let m = 70;
    let x = random_x(m, cols, &mut rng);
    let qkv: Vec<_> = [
        (64, WeightType::Q4K),
        (16, WeightType::Q6K),
        (56, WeightType::Q8_0),
    ]
    .iter()
    .map(|&(o, ty)| random_matrix(ty, o, cols, &mut rng))
    .collect();
    let bias: Vec<f32> = (0..136).map(|i| i as f32 * 0.25 - 3.0).collect();
    let members = || qkv.iter().map(|w| upload(client, w, max)).collect();
    let residual: Vec<f32> = (0..m * 136).map(|i| (i % 13) as f32 - 6.0).collect();
    for span in [None, Some(3)] {
        both(
            &members,
            Epilogue::Store,
            Some(&bias),
            &x,
            m,
            span,
            "q | k | v",
        );
        let [a, b] = [narrow, larger].map(|form| {
            let mut members: Vec<GpuMatrix> = members();
            members[0].set_prefill(Some(form));
            if let Some(span) = span {
                members[0].set_tile_span(span);
            }
            let group = MatrixGroup::new(client, members, Epilogue::Add, None, Rows::All).unwrap();
            let y = f32_handle(client, &residual);
            group
                .run(client, &f32_handle(client, &x), &y, &tile_step(client, m))
                .unwrap();
            read_f32(client, y)
        });
        same_bits(&a, &b, &format!("a residual added, span {span:?}"));
    }
    let gate = random_matrix(WeightType::Q4K, 80, cols, &mut rng);
    let up = random_matrix(WeightType::Q6K, 80, cols, &mut rng);
    let members = || vec![upload(client, &gate, max), upload(client, &up, max)];
    for span in [None, Some(3)] {
        both(&members, Epilogue::SwiGlu, None, &x, m, span, "swiglu");
    }
}

/// A kernel the device refuses fails the next read, where it would have given whatever its
/// outputs held: the matrix units' tile on an adapter without them (Debian 12's lavapipe, where
/// CI runs this; an adapter with them makes the tile, and the test says so and stops). wgpu
/// refuses its pipeline and the launch goes to CubeCL, which refuses it too; CubeCL's error
/// travels with the buffer it never wrote, but a direct launch reading that buffer writes
/// another, whose read had come back as data (a forced tile form on lavapipe decoded empty
/// text at three times the speed). The read after that, of launches the device makes, is
/// clean: a tuning goes on to its next form. Launched through CubeCL (`MARS_GPU_LAUNCH=cubecl`)
/// the read fails the same way, CubeCL's refusal as ours, naming no kernel.
#[test]
fn a_kernel_the_device_refuses_fails_the_next_read() {
    if !matrix_units().is_empty() {
        return eprintln!("the adapter has matrix units: no kernel here it refuses");
    }
    let client = client();
    let direct = mars_kernels::gpu::direct::is_direct(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let (cols, m) = (256, 40);
    let max = max_binding(&client);
    // w: 256 × 256, its product fed to v: 64 × 256, both Q4_K.
    let w = upload(
        &client,
        &random_matrix(WeightType::Q4K, cols, cols, &mut rng),
        max,
    );
    let v = upload(
        &client,
        &random_matrix(WeightType::Q4K, 64, cols, &mut rng),
        max,
    );
    let x = f32_handle(&client, &random_x(m, cols, &mut rng));
    let step = tile_step(&client, m);
    let group = |mut w: GpuMatrix, form: TileForm| {
        w.set_prefill(Some(form));
        MatrixGroup::new(&client, vec![w], Epilogue::Store, None, Rows::All).unwrap()
    };
    let f32_tiles = group(w.clone(), TileForm::Vectors);
    let units = group(w, TileForm::Units(UnitShape::CARD));
    let then = group(v, TileForm::Vectors);
    // y = x · wᵀ, z = y · vᵀ in f32 tiles, direct: y and z are bound (held) from here on, as a
    // model's kept buffers are from its first pass.
    let y = client.empty(m * cols * 4);
    let z = client.empty(m * 64 * 4);
    f32_tiles.run(&client, &x, &y, &step).unwrap();
    then.run(&client, &y, &z, &step).unwrap();
    let first = mars_kernels::gpu::read_blocking(&client, z.clone()).unwrap();
    assert!(
        first.iter().any(|&b| b != 0),
        "the f32 tiles' outputs are all zero"
    );
    // y again on the matrix units, then z from it: z's read fails, naming the tile.
    units.run(&client, &x, &y, &step).unwrap();
    then.run(&client, &y, &z, &step).unwrap();
    match mars_kernels::gpu::read_blocking(&client, z.clone()) {
        Err(KernelError::Refused { kernel, reason }) => {
            let named = if direct {
                "tile_store"
            } else {
                "(a launch through CubeCL)"
            };
            assert_eq!(kernel, named, "{reason}");
            assert!(reason.contains("cooperative_matrix"), "{reason}");
        }
        other => panic!("a product of the refused tile's outputs read back as {other:?}"),
    }
    // The two in f32 tiles again: read back clean, the first run's bytes. (Through CubeCL the
    // failure stays on the buffers the refused launch claimed, as every output is declared
    // read as well as written, so a launch rewriting y is skipped too; a tuning's forms write
    // buffers of their own.)
    if direct {
        f32_tiles.run(&client, &x, &y, &step).unwrap();
        then.run(&client, &y, &z, &step).unwrap();
        assert_eq!(mars_kernels::gpu::read_blocking(&client, z).unwrap(), first);
    }
}

/// Tiles on matrix units, where the adapter has them (not Debian 12's lavapipe: the test says
/// so and stops; sid's, in 8 × 8 blocks on subgroups of 8: tests/fetch-mesa.sh): every type within the bound of operands rounded to f16 (2⁻¹¹ of each |w·x|, twice,
/// plus the f32 sums), unsplit and split along the inputs, a row's bits independent of the rows
/// beside it, and a SwiGLU group
/// equal to gate and up alone within f32 rounding.
#[test]
fn tiles_on_matrix_units_are_within_the_f16_bound_where_the_adapter_has_them() {
    let shapes = matrix_units();
    let Some(&shape) = shapes.first() else {
        // Where the run says the adapter has them (CI's lavapipe of tests/fetch-mesa.sh), not
        // finding them is the failure, not a skip.
        assert_ne!(
            std::env::var("MARS_EXPECT_MATRIX_UNITS").as_deref(),
            Ok("1"),
            "MARS_EXPECT_MATRIX_UNITS=1 but the adapter offers no matrix units the tiles take"
        );
        eprintln!("no cooperative matrices of f16 into f32 in a shape the tiles take: skipped");
        return;
    };
    eprintln!("matrix units: {shapes:?}");
    let client = client();
    let max = max_binding(&client);
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let units = TileForm::Units(shape);
    let before = mars_kernels::gpu_counts();
    for ty in WeightType::ALL {
        let (out, cols) = (70, cols_for(ty, 512));
        let w = random_matrix(ty, out, cols, &mut rng);
        let wd = dequantized(&w);
        let gw = upload(&client, &w, max);
        let m = 40;
        let x = random_x(m, cols, &mut rng);
        // The f32 sums' share as in tiles, plus 2⁻¹¹ of |w·x| for each of its two operands
        // rounded to f16, held with a factor of 2 (`magnitude`: Σ|w·x| a row and output).
        // A split's partials add one rounding each.
        let (exact, bound) =
            exact_and_bound_over(&wd, &x, (m, out, cols), cols / 4 + 4 + cols / 32);
        let magnitude = exact_and_bound_over(&wd, &x, (m, out, cols), 1).1;
        // Unsplit, and split along the inputs in 3-group spans (split-K).
        for span in [None, Some(3)] {
            let all = tiled_in(
                (units, span),
                &client,
                vec![gw.clone()],
                Epilogue::Store,
                None,
                &x,
                m,
            );
            for i in 0..m * out {
                let sum = magnitude[i] / (2.0 * f64::from(f32::EPSILON));
                let limit = bound[i] + 2.0 * 2.0 * 2f64.powi(-11) * sum;
                let err = (f64::from(all[i]) - exact[i]).abs();
                assert!(
                    err <= limit,
                    "{ty:?} units, span {span:?} [{i}]: {} vs exact {} ({err:.3e} > {limit:.3e})",
                    all[i],
                    exact[i]
                );
            }
            let late = tiled_in(
                (units, span),
                &client,
                vec![gw.clone()],
                Epilogue::Store,
                None,
                &x[23 * cols..],
                17,
            );
            assert_eq!(
                bits(&late),
                bits(&all[23 * out..]),
                "{ty:?}, span {span:?}: rows 23..40"
            );
        }
    }
    let cols = 256;
    let m = 33;
    let x = random_x(m, cols, &mut rng);
    let gate = random_matrix(WeightType::Q4K, 80, cols, &mut rng);
    let up = random_matrix(WeightType::Q6K, 80, cols, &mut rng);
    let [g1, u1] = [&gate, &up].map(|w| {
        let w = vec![upload(&client, w, max)];
        tiled_in((units, None), &client, w, Epilogue::Store, None, &x, m)
    });
    let y = tiled_in(
        (units, None),
        &client,
        vec![upload(&client, &gate, max), upload(&client, &up, max)],
        Epilogue::SwiGlu,
        None,
        &x,
        m,
    );
    for i in 0..m * 80 {
        let (g, u) = (f64::from(g1[i]), f64::from(u1[i]));
        let want = g / (1.0 + (-g).exp()) * u;
        assert!(
            (f64::from(y[i]) - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "units swiglu [{i}]: {} vs {want}",
            y[i]
        );
    }
    // The tall and the wide tile, where the adapter holds them: the narrow tile's bits.
    let tiles: Vec<_> = shapes.iter().map(|s| s.tile_kind()).collect();
    assert_eq!(tiles[0], UnitTile::Narrow, "{shapes:?}");
    assert!(
        tiles[1..].iter().all(|&t| t != UnitTile::Narrow),
        "{shapes:?}"
    );
    for &other in &shapes[1..] {
        larger_tiles_give_the_narrow_bits(&client, TileForm::Units(shape), TileForm::Units(other));
    }
    // Where the launches go direct, the matrix units' kernels went too: wgpu's safe pipelines
    // (natively with their loops bounded) took them, as a card's prefill needs.
    if mars_kernels::gpu::direct::is_direct(&client) {
        let counts = mars_kernels::gpu_counts().since(&before);
        assert!(counts.launches > 0);
        assert_eq!(counts.fallbacks, 0, "{counts:?}");
    }
}
