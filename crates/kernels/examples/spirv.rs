//! Writes the SPIR-V that a Vulkan card compiles for the mat-vec forms (as wgpu writes it for a
//! Vulkan 1.3 device, loops unbounded as the kernels are compiled), so that a GPU driver's own
//! compiler can be asked what it makes of them without that GPU: `tests/bench/gpu-isa.sh` compiles
//! each with a Mesa driver on a device that is not there (RADV's AMD compiler, or NVK's NAK for
//! an NVIDIA card) and counts the instructions of the inner loop per weight, beside llama.cpp's
//! Vulkan mat-vec shaders.
//!   cargo run --release -p mars-kernels --features gpu --example spirv -- OUT_DIR
//! Writes `OUT_DIR/<name>.spv` and `OUT_DIR/forms.tsv` (name, type, team, outputs a team,
//! activations, rows, weights a thread takes each pass of the inner loop for one row, over the
//! team's outputs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

use mars_kernels::gpu::{
    Acts, Epilogue, Fan, GpuType, Reduce, Team, TileForm, TilePhase, matmul_source_with,
    tile_source,
};
use mars_kernels::{UnitShape, UnitTile, WeightType};
use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};

/// Weights a thread takes each pass of the kernel's inner loop, an output (matmul.wgsl): a
/// 32-value group (quarter and whole teams, either activations), half a lane's 32 (lane teams
/// take 16 values of a super-block a pass), or a wide lane's 32 nibbles of a super-block.
fn weights_a_pass(team: Team) -> usize {
    if team.lanes() { 16 } else { 32 }
}

/// Every form a Q4_K_M or Q5_0 / Q8_0 model's matrices can take: type, team, fan, activations,
/// the row bound (1, 8 for a 5-row verification, 16) and whether the norm before the product
/// is folded into it (as a card runs q | k | v and gate | up: f32 activations, one-row steps
/// and 8-row passes; the 8-bit form that quantizes its own row: one-row steps alone, with and
/// without a norm).
fn forms() -> Vec<(WeightType, Team, Fan, Acts, usize, bool)> {
    let types = [
        WeightType::Q4K,
        WeightType::Q6K,
        WeightType::Q8_0,
        WeightType::Q5_0,
    ];
    let teams = Team::ALL;
    let mut out = Vec::new();
    for (ty, team) in types
        .into_iter()
        .flat_map(|ty| teams.map(|team| (ty, team)))
    {
        let gty = GpuType::from(ty);
        if (team.lanes() && !Team::lanes_for(&[gty])) || (team.wide() && !Team::wide_for(&[gty])) {
            continue;
        }
        for (fan, acts) in [Fan::One, Fan::Four]
            .into_iter()
            .flat_map(|f| [(f, Acts::F32), (f, Acts::Q8), (f, Acts::Q8Own)])
        {
            if acts.is_q8() && (team.lanes() || !Acts::q8_for(&[gty])) {
                continue;
            }
            if acts == Acts::Q8Own {
                out.extend([false, true].map(|normed| (ty, team, fan, acts, 1, normed)));
                continue;
            }
            out.extend([1, 8, 16].map(|rows| (ty, team, fan, acts, rows, false)));
            if acts == Acts::F32 {
                out.extend([1, 8].map(|rows| (ty, team, fan, acts, rows, true)));
            }
        }
    }
    out
}

/// `source` parsed, validated with `caps` and written as SPIR-V.
fn spirv(
    source: &str,
    caps: Capabilities,
    options: &spv::Options,
    pipeline: &spv::PipelineOptions,
) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(source).unwrap();
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap();
    spv::write_vec(&module, &info, options, Some(pipeline)).unwrap()
}

fn main() {
    let out = std::path::PathBuf::from(std::env::args().nth(1).expect("OUT_DIR"));
    std::fs::create_dir_all(&out).unwrap();
    // What a card's subgroups give (`Reduce::for_subgroups`: at most the 16-thread team).
    let reduce = Reduce::Subgroup { lanes: 16 };
    let caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32 | Capabilities::SUBGROUP;
    // ISA_CHECKED=1: as wgpu's safe `create_shader_module` writes them for a Vulkan device with
    // robust buffer access (the direct launches' pipelines, `gpu::direct`): every loop's bound
    // emulated, indices into arrays clamped.
    let checked = std::env::var("ISA_CHECKED").as_deref() == Ok("1");
    let mut options = spv::Options {
        lang_version: (1, 6),
        // The kernels compile unchecked (`gpu::compile_mode`): no emulated loop counter.
        force_loop_bounding: checked,
        // As the launches create their pipelines (`gpu::direct`, and CubeCL's): no zeroing of
        // workgroup memory at a workgroup's start.
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        ..spv::Options::default()
    };
    if checked {
        options.bounds_check_policies.index = naga::proc::BoundsCheckPolicy::Restrict;
    }
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".to_string(),
    };
    let mut table = String::from("name\ttype\tteam\touts\tacts\trows\tweights_a_pass\n");
    for (ty, team, fan, acts, rows, normed) in forms() {
        let gty = GpuType::from(ty);
        let form = (team, fan, acts);
        let source = matmul_source_with(&[gty], rows, reduce, Epilogue::Store, form, normed);
        if std::env::var("SPIRV_DUMP").is_ok() {
            std::fs::write(out.join("last.wgsl"), &source).unwrap();
        }
        let words = spirv(&source, caps, &options, &pipeline);
        let outs = fan.outputs();
        let acts = format!("{}{}", acts.name(), if normed { "normed" } else { "" });
        let name = format!("{ty:?}-{team:?}-{outs}-{acts}-r{rows}").to_lowercase();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(out.join(format!("{name}.spv")), bytes).unwrap();
        let per_pass = weights_a_pass(team) * outs;
        writeln!(
            table,
            "{name}\t{ty:?}\t{team:?}\t{outs}\t{acts}\t{rows}\t{per_pass}"
        )
        .unwrap();
    }
    // A long prefill's tiles (tile.wgsl): a step is one 32-value group, 32 rows by 64 outputs
    // a workgroup of 128 threads (512 multiply-adds a thread: f32 tiles 4 rows by 4 outputs, the
    // matrix units' two 16 × 16 blocks a subgroup of 32, a card's shape), so "weights a pass"
    // 128 and "rows" 4: the counts are a multiply-add's; the tall tiles, f32 and on the units,
    // 64 rows by 64 outputs (1,024 a thread: f32 8 rows by 4 outputs, the units four blocks a
    // subgroup): "rows" 8; the wide one 64 by 128
    // (2,048, eight blocks): "rows" 16. The units' SPIR-V needs the cooperative matrices'
    // capability and f16 (the device's features).
    let units_caps = caps | Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16;
    let [tall, wide] = [UnitTile::Tall, UnitTile::Wide].map(|t| {
        UnitShape::CARD
            .in_tile(t)
            .expect("16 x 16 blocks on 32 lanes divide")
    });
    for ty in [WeightType::Q4K, WeightType::Q6K] {
        for (form, label, caps, rows) in [
            (TileForm::Vectors, "f32", caps, 4),
            (TileForm::TallVectors, "f32-tall", caps, 8),
            (TileForm::Units(UnitShape::CARD), "units16", units_caps, 4),
            (TileForm::Units(tall), "units16-tall", units_caps, 8),
            (TileForm::Units(wide), "units16-wide", units_caps, 16),
        ] {
            let source = tile_source(&[ty.into()], Epilogue::Store, form, TilePhase::Whole);
            let words = spirv(&source, caps, &options, &pipeline);
            let name = format!("{ty:?}-tiles-{label}").to_lowercase();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            std::fs::write(out.join(format!("{name}.spv")), bytes).unwrap();
            writeln!(table, "{name}\t{ty:?}\ttiles\t4\t{label}\t{rows}\t128").unwrap();
        }
    }
    std::fs::write(out.join("forms.tsv"), table).unwrap();
    eprintln!("wrote {}", out.display());
}
