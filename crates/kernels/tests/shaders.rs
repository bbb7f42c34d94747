//! Every WGSL kernel as wgpu turns it into each native backend's language, without a GPU: parsed
//! and validated by naga (the translator inside wgpu, same version), then written as SPIR-V
//! (Vulkan), MSL (Metal) and HLSL (D3D12) with the settings wgpu uses. lavapipe only runs the
//! SPIR-V path, so this is what keeps a kernel that Metal or D3D12 would refuse at pipeline
//! creation from landing unseen. Where `MARS_SPIRV_VAL` names Khronos's `spirv-val` (the test
//! command installs it), every SPIR-V module is also checked by it for Vulkan 1.3 — the
//! matrix-unit tiles above all, which no adapter here can run.
//!
//! The workgroup-memory form must validate with nothing beyond [`BASELINE`] (it is what an
//! adapter without subgroups, and the browser, runs) and translate for D3D12's oldest shader
//! model that wgpu targets (5.1, FXC) and MSL 1.2; the subgroup form must validate with only the
//! `SUBGROUP` capability besides, and translate for shader model 6.0 (wgpu offers subgroups on
//! D3D12 only from there) and MSL 2.1 (wgpu offers them on Metal by GPU family, Mac2 / Apple7,
//! whose systems have newer MSL). Translation is naga's part; the platform compilers (DXC, FXC,
//! Metal's) do not run here. A mutated kernel (an undeclared identifier; a subgroup call
//! validated without the capability; f16 unpacking without its capability) is refused, so the
//! check can fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_kernels::gpu::{
    Acts, Epilogue, Fan, GpuType, Reduce, RowPass, Shader, Team, TileForm, TilePhase, UnitShape,
    UnitTile, embed_source, matmul_source, matmul_source_with, row_bound, tile_source,
};
use mars_kernels::{KvType, MAX_ROWS, WeightType};
use naga::back::{hlsl, msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

/// What wgpu grants every device: `unpack2x16float` (core WGSL, which the kernels decode f16
/// block scales with) is naga's `SHADER_FLOAT16_IN_FLOAT32`, granted from the downlevel flag
/// `SHADER_F16_IN_F32`, which wgpu 30 sets on every backend, withdrawing it only on llvmpipe
/// without `SHADER_F16` (lavapipe here has it).
const BASELINE: Capabilities = Capabilities::SHADER_FLOAT16_IN_FLOAT32;

/// Both fans of a matmul (outputs a team).
const FANS: [Fan; 2] = [Fan::One, Fan::Four];

/// Parses and validates `source` with `caps`, naming `what` in any error.
fn validate(
    what: &str,
    source: &str,
    caps: Capabilities,
) -> Result<(naga::Module, ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("{what}: WGSL parse: {}", e.emit_to_string(source)))?;
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| format!("{what}: validation: {}", e.emit_to_string(source)))?;
    Ok((module, info))
}

/// SPIR-V as wgpu writes it for a Vulkan 1.3 device (every GPU card this project has met): SPIR-V
/// 1.6 (wgpu-hal picks the device's highest).
fn spirv_options() -> spv::Options<'static> {
    spv::Options {
        lang_version: (1, 6),
        ..spv::Options::default()
    }
}

/// Checks `words` with Khronos's validator, `spirv-val` of SPIRV-Tools, where `MARS_SPIRV_VAL`
/// names it (tests/setup.sh installs 2025.5 and the test command sets it): the rules a Vulkan
/// 1.3 driver is written against, which naga's own validation of the WGSL does not apply to the
/// SPIR-V it writes. Without the variable the check is skipped (said once on stderr). The
/// validator runs beside the translations that follow (a few at a time); [`khronos_verdicts`]
/// waits for them.
fn khronos(what: &str, words: &[u32]) -> Result<(), String> {
    let Some(run) = Validation::start(what, words)? else {
        return Ok(());
    };
    let mut pending = PENDING.lock().unwrap();
    pending.push_back(run);
    // Two at a time beside the translation: this machine's cores.
    while pending.len() > 2 {
        let oldest = pending.pop_front().unwrap();
        oldest.verdict()?;
    }
    Ok(())
}

/// A `spirv-val` run under way.
struct Validation {
    what: String,
    path: std::path::PathBuf,
    child: std::process::Child,
}

impl Validation {
    /// `spirv-val` started on `words` (their non-buffer layouts dropped), or `None` where
    /// `MARS_SPIRV_VAL` is unset.
    fn start(what: &str, words: &[u32]) -> Result<Option<Self>, String> {
        static NOTED: std::sync::Once = std::sync::Once::new();
        let Some(bin) = std::env::var_os("MARS_SPIRV_VAL") else {
            NOTED.call_once(|| eprintln!("MARS_SPIRV_VAL unset: spirv-val skipped"));
            return Ok(None);
        };
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("mars-shader-{}-{n}.spv", std::process::id()));
        let bytes: Vec<u8> = without_array_strides(words, true)
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        std::fs::write(&path, bytes).map_err(|e| format!("{what}: {}: {e}", path.display()))?;
        let child = std::process::Command::new(&bin)
            .args(["--target-env", "vulkan1.3"])
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{what}: running {}: {e}", bin.to_string_lossy()))?;
        Ok(Some(Self {
            what: what.to_string(),
            path,
            child,
        }))
    }

    fn verdict(self) -> Result<(), String> {
        let out = self.child.wait_with_output();
        let _ = std::fs::remove_file(&self.path);
        let out = out.map_err(|e| format!("{}: spirv-val: {e}", self.what))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}: spirv-val: {}{}",
                self.what,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

static PENDING: std::sync::Mutex<std::collections::VecDeque<Validation>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// Waits for every `spirv-val` run under way, the first refusal an error.
fn khronos_verdicts() -> Result<(), String> {
    let pending: Vec<Validation> = PENDING.lock().unwrap().drain(..).collect();
    pending.into_iter().try_for_each(Validation::verdict)
}

/// `words` without the explicit layouts SPIR-V 1.4 and later forbid outside buffers
/// (`fixed_only`: the `ArrayStride` of fixed-size arrays and the member `Offset`s of structs
/// that are not a buffer's block), or without every array's stride (a mutation the validator
/// must refuse). naga lays out every array and struct type, also those of private, function
/// and workgroup variables (VUID-StandaloneSpirv-None-10684, enforced by SPIRV-Tools since 2025;
/// drivers accept it, and every wgpu program on a Vulkan 1.3 device carries it). The kernels'
/// buffers are blocks over runtime arrays, whose layouts stay, so the validator checks the rest.
fn without_array_strides(words: &[u32], fixed_only: bool) -> Vec<u32> {
    const OP_DECORATE: u32 = 71;
    const OP_MEMBER_DECORATE: u32 = 72;
    const OP_TYPE_ARRAY: u32 = 28;
    const ARRAY_STRIDE: u32 = 6;
    const OFFSET: u32 = 35;
    const BLOCK: u32 = 2;
    // Instructions after the 5-word header: word 0 is (word count << 16) | opcode.
    let instructions = || {
        let mut at = 5;
        std::iter::from_fn(move || {
            let count = (*words.get(at)? >> 16) as usize;
            let ins = words.get(at..at + count.max(1))?;
            at += count.max(1);
            Some(ins)
        })
    };
    let ids = |op: u32, decoration: Option<u32>| -> std::collections::HashSet<u32> {
        instructions()
            .filter(|ins| {
                ins[0] & 0xffff == op && decoration.is_none_or(|d| ins.get(2) == Some(&d))
            })
            .filter_map(|ins| ins.get(1).copied())
            .collect()
    };
    let fixed = ids(OP_TYPE_ARRAY, None);
    let blocks = ids(OP_DECORATE, Some(BLOCK));
    let mut out = words[..5].to_vec();
    for ins in instructions() {
        let (op, target) = (ins[0] & 0xffff, ins.get(1).copied().unwrap_or(0));
        let dropped = if op == OP_DECORATE && ins.get(2) == Some(&ARRAY_STRIDE) {
            !fixed_only || fixed.contains(&target)
        } else {
            fixed_only
                && op == OP_MEMBER_DECORATE
                && ins.get(3) == Some(&OFFSET)
                && !blocks.contains(&target)
        };
        if !dropped {
            out.extend_from_slice(ins);
        }
    }
    out
}

/// Writes `module` for Vulkan, Metal and D3D12 at the given MSL version and shader model.
fn translate(
    what: &str,
    module: &naga::Module,
    info: &ModuleInfo,
    msl_version: (u8, u8),
    shader_model: hlsl::ShaderModel,
) -> Result<(), String> {
    let entry = (naga::ShaderStage::Compute, "main".to_string());
    let words = spv::write_vec(
        module,
        info,
        &spirv_options(),
        Some(&spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: "main".to_string(),
        }),
    )
    .map_err(|e| format!("{what}: SPIR-V: {e}"))?;
    assert_eq!(
        words.first(),
        Some(&0x0723_0203),
        "{what}: SPIR-V magic number"
    );
    khronos(what, &words)?;

    let options = msl::Options {
        lang_version: msl_version,
        ..msl::Options::default()
    };
    let pipeline = msl::PipelineOptions {
        entry_point: Some(entry.clone()),
        ..msl::PipelineOptions::default()
    };
    let (text, _) = msl::write_string(module, info, &options, &pipeline)
        .map_err(|e| format!("{what}: MSL {msl_version:?}: {e}"))?;
    assert!(
        text.contains("kernel void"),
        "{what}: no MSL kernel in\n{text}"
    );

    let options = hlsl::Options {
        shader_model,
        ..hlsl::Options::default()
    };
    let pipeline = hlsl::PipelineOptions {
        entry_point: Some(entry),
    };
    let mut text = String::new();
    hlsl::Writer::new(&mut text, &options, &pipeline)
        .write(module, info, None)
        .map_err(|e| format!("{what}: HLSL {shader_model:?}: {e}"))?;
    assert!(
        ["16", "32", "64", "128", "256"]
            .iter()
            .any(|n| text.contains(&format!("[numthreads({n}, 1, 1)]"))),
        "{what}: no HLSL entry in\n{text}"
    );
    Ok(())
}

/// Checks `shader` with the baseline (workgroup memory) or with subgroups.
fn check(what: &str, source: &str, subgroups: bool) {
    // Every loop marked for unrolling was unrolled (`unroll.rs` leaves one it cannot copy).
    assert!(
        !source.contains("// unroll"),
        "{what}: a marked loop left rolled"
    );
    let (caps, msl, sm) = if subgroups {
        (
            BASELINE | Capabilities::SUBGROUP,
            (2, 1),
            hlsl::ShaderModel::V6_0,
        )
    } else {
        (BASELINE, (1, 2), hlsl::ShaderModel::V5_1)
    };
    let (module, info) = validate(what, source, caps).unwrap();
    translate(what, &module, &info, msl, sm).unwrap();
}

/// Every shape the matrix-unit tiles are written for ([`UnitShape::new`]), in the narrow tile
/// and in the tall and the wide ([`UnitTile`]).
fn unit_shapes() -> Vec<UnitShape> {
    (8..=16)
        .flat_map(|n| [8, 16, 32, 64].map(|lanes| UnitShape::new(n, lanes)))
        .flatten()
        .flat_map(|shape| UnitTile::ALL.map(|tile| shape.in_tile(tile)))
        .flatten()
        .collect()
}

/// Checks a tile kernel on matrix units (`TileForm::Units`): valid where wgpu grants
/// cooperative matrices and f16 (`EXPERIMENTAL_COOPERATIVE_MATRIX`, `SHADER_F16`), and written
/// as SPIR-V (native Vulkan) and, in 8 × 8 blocks, as Metal's simdgroup matrices (naga writes
/// those in 8 × 8 only, and no HLSL for them).
fn check_units(what: &str, source: &str, shape: UnitShape) {
    assert!(
        !source.contains("// unroll"),
        "{what}: a marked loop left rolled"
    );
    let caps = BASELINE | Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16;
    let (module, info) = validate(what, source, caps).unwrap();
    let words = spv::write_vec(
        &module,
        &info,
        &spirv_options(),
        Some(&spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: "main".to_string(),
        }),
    )
    .map_err(|e| format!("{what} on units: SPIR-V: {e}"))
    .unwrap();
    assert_eq!(words.first(), Some(&0x0723_0203), "{what}: SPIR-V magic");
    khronos(&format!("{what} on units"), &words).unwrap();
    if shape.size() == 8 {
        let pipeline = msl::PipelineOptions {
            entry_point: Some((naga::ShaderStage::Compute, "main".to_string())),
            ..msl::PipelineOptions::default()
        };
        let options = msl::Options {
            lang_version: (2, 3),
            ..msl::Options::default()
        };
        let (text, _) = msl::write_string(&module, &info, &options, &pipeline)
            .map_err(|e| format!("{what} on units: MSL: {e}"))
            .unwrap();
        assert!(
            text.contains("simdgroup_multiply_accumulate"),
            "{what}: no simdgroup matrices in\n{text}"
        );
    }
}

/// Row bounds every matmul form is checked at.
const BOUNDS: [usize; 5] = [1, 2, 4, 8, 16];

/// The K-quant types of lane and wide teams.
fn k_quants() -> (GpuType, GpuType) {
    (
        GpuType::from(WeightType::Q4K),
        GpuType::from(WeightType::Q6K),
    )
}

/// Each of `types`: its embedding, its matmul in every row bound, fan, epilogue and quarter or
/// whole team with both reductions (8-bit activations where it takes them), its groups (gate |
/// up beside a Q6_K up, q | k | v of three types, the norm folded in), its tiles (on the matrix
/// units too). Returns the kernels checked.
fn types_translate(types: &[GpuType]) -> usize {
    let mut checked = 0;
    let bounds = BOUNDS;
    for &ty in types {
        check(&format!("embed {ty:?}"), &embed_source(ty), false);
        checked += 1;
        for (rows, fan) in bounds.into_iter().flat_map(|r| FANS.map(|f| (r, f))) {
            for (epilogue, team) in [
                (Epilogue::Store, Team::Quarter),
                (Epilogue::Add, Team::Quarter),
                (Epilogue::Add, Team::Whole),
            ] {
                let what = format!("matmul {ty:?} x {rows} rows, {epilogue:?}, {team:?}, {fan:?}");
                check(
                    &what,
                    &matmul_source(
                        &[ty],
                        rows,
                        Reduce::Workgroup,
                        epilogue,
                        (team, fan, Acts::F32),
                    ),
                    false,
                );
                checked += 1;
                for lanes in [2, 4, 8, 16] {
                    let reduce = Reduce::Subgroup { lanes };
                    let form = (team, fan, Acts::F32);
                    let source = matmul_source(&[ty], rows, reduce, epilogue, form);
                    check(&format!("{what}, subgroups of {lanes}"), &source, true);
                    checked += 1;
                }
                // 8-bit activations (block types): both reductions.
                if Acts::q8_for(&[ty]) {
                    for (reduce, subgroups) in [
                        (Reduce::Workgroup, false),
                        (Reduce::Subgroup { lanes: 16 }, true),
                    ] {
                        let form = (team, fan, Acts::Q8);
                        let source = matmul_source(&[ty], rows, reduce, epilogue, form);
                        check(&format!("{what}, q8, {reduce:?}"), &source, subgroups);
                        checked += 1;
                    }
                }
            }
        }
        // Groups: gate | up of this type beside a Q6_K up; q | k | v of three types.
        for fan in FANS {
            let form = (Team::Quarter, fan, Acts::F32);
            let gate_up = [ty, WeightType::Q6K.into()];
            let source = matmul_source(&gate_up, 4, Reduce::Workgroup, Epilogue::SwiGlu, form);
            check(&format!("SwiGLU {ty:?} | Q6_K, {fan:?}"), &source, false);
            let types = [ty, WeightType::Q4K.into(), GpuType::F32];
            let reduce = Reduce::Subgroup { lanes: 8 };
            let source = matmul_source(&types, 16, reduce, Epilogue::Store, form);
            check(&format!("q | k | v {types:?}, {fan:?}"), &source, true);
            checked += 2;
            // The norm folded in: both groups, both reductions, 16 rows (the most sums).
            for (reduce, subgroups) in [(Reduce::Workgroup, false), (reduce, true)] {
                let normed = |types: &[GpuType], epilogue| {
                    matmul_source_with(types, 16, reduce, epilogue, form, true)
                };
                let what = format!("{types:?}, {fan:?}, {reduce:?}, norm folded");
                check(
                    &format!("SwiGLU {what}"),
                    &normed(&gate_up, Epilogue::SwiGlu),
                    subgroups,
                );
                check(
                    &format!("q | k | v {what}"),
                    &normed(&types, Epilogue::Store),
                    subgroups,
                );
                checked += 2;
            }
            if Acts::q8_for(&[ty]) {
                let form = (Team::Quarter, fan, Acts::Q8);
                let source = matmul_source(&gate_up, 4, Reduce::Workgroup, Epilogue::SwiGlu, form);
                check(
                    &format!("SwiGLU {ty:?} | Q6_K, {fan:?}, q8"),
                    &source,
                    false,
                );
                let types = [ty, WeightType::Q4K.into(), WeightType::Q8_0.into()];
                let source = matmul_source(&types, 16, reduce, Epilogue::Store, form);
                check(&format!("q | k | v {types:?}, {fan:?}, q8"), &source, true);
                checked += 2;
            }
        }
        // Tiles (a long prefill's form): alone stored or added, beside a Q6_K up, and first of
        // a q | k | v.
        for (types, epilogue) in [
            (&[ty][..], Epilogue::Store),
            (&[ty], Epilogue::Add),
            (&[ty, WeightType::Q6K.into()], Epilogue::SwiGlu),
            (&[ty, WeightType::Q4K.into(), GpuType::F32], Epilogue::Store),
        ] {
            // Each launch of it: whole, a split's partials, their sum (multiplying nothing).
            for phase in [TilePhase::Whole, TilePhase::Part, TilePhase::Sum] {
                let what = format!("tiles {types:?}, {epilogue:?}, {phase:?}");
                check(
                    &what,
                    &tile_source(types, epilogue, TileForm::Vectors, phase),
                    false,
                );
                checked += 1;
                if phase == TilePhase::Sum {
                    continue;
                }
                for shape in unit_shapes() {
                    let source = tile_source(types, epilogue, TileForm::Units(shape), phase);
                    check_units(&format!("{what} in {shape:?}"), &source, shape);
                }
                checked += 1;
            }
        }
    }
    checked
}

/// The block types in two halves, one a test (the test harness runs them side by side).
fn half_of_the_types(second: bool) -> Vec<GpuType> {
    GpuType::all()
        .enumerate()
        .filter(|(i, _)| (i % 2 == 1) == second)
        .map(|(_, ty)| ty)
        .collect()
}

/// The per-type kernels' count for `types` (see [`types_translate`]).
fn types_count(types: &[GpuType]) -> usize {
    let blocks = types.iter().filter(|&&ty| Acts::q8_for(&[ty])).count();
    types.len() * (1 + 2 * (5 * 3 * 5 + 2 + 4) + 5 * 4) + blocks * 2 * (5 * 3 * 2 + 2)
}

#[test]
fn every_kernel_of_half_the_types_translates_for_vulkan_metal_and_d3d12() {
    assert!(BOUNDS.iter().all(|&r| row_bound(r) == r) && row_bound(MAX_ROWS) == 16);
    let types = half_of_the_types(false);
    assert_eq!(types_translate(&types), types_count(&types));
    khronos_verdicts().unwrap();
}

#[test]
fn every_kernel_of_the_other_types_translates_for_vulkan_metal_and_d3d12() {
    let types = half_of_the_types(true);
    assert_eq!(types_translate(&types), types_count(&types));
    khronos_verdicts().unwrap();
}

#[test]
fn every_team_of_k_quants_translates_for_vulkan_metal_and_d3d12() {
    let mut checked = 0;
    let bounds = BOUNDS;
    let (k4, k6) = k_quants();
    // Lane teams (Q4_K and Q6_K groups only): every row bound and epilogue, both reductions,
    // a Q4_K_M q | k | v (v in Q6_K) among them; with the whole workgroup on an output, every
    // epilogue but a SwiGLU's.
    for (rows, fan) in bounds.into_iter().flat_map(|r| FANS.map(|f| (r, f))) {
        for (types, epilogue) in [
            (&[k4][..], Epilogue::Store),
            (&[k6], Epilogue::Store),
            (&[k6], Epilogue::Add),
            (&[k4, k4], Epilogue::SwiGlu),
            (&[k4, k4, k6], Epilogue::Store),
        ] {
            for (reduce, subgroups) in [
                (Reduce::Workgroup, false),
                (Reduce::Subgroup { lanes: 16 }, true),
            ] {
                for team in [Team::Lanes, Team::WholeLanes] {
                    if team == Team::WholeLanes && epilogue == Epilogue::SwiGlu {
                        continue;
                    }
                    let form = (team, fan, Acts::F32);
                    let source = matmul_source(types, rows, reduce, epilogue, form);
                    let what = format!(
                        "{team:?} {types:?}, {rows} rows, {epilogue:?}, {fan:?}, {reduce:?}"
                    );
                    check(&what, &source, subgroups);
                    let source = matmul_source_with(types, rows, reduce, epilogue, form, true);
                    check(&format!("{what}, norm folded"), &source, subgroups);
                    checked += 2;
                }
            }
        }
    }
    // Wide teams (groups of Q4_K or of Q6_K, the weights bound as vec4s): every row bound, the
    // three epilogues (with the whole workgroup on an output, every one but a SwiGLU's), both
    // activations, both reductions, the norm folded in the f32 form.
    for (rows, fan) in bounds.into_iter().flat_map(|r| FANS.map(|f| (r, f))) {
        for (types, epilogue) in [
            (&[k4][..], Epilogue::Store),
            (&[k4], Epilogue::Add),
            (&[k4, k4], Epilogue::SwiGlu),
            (&[k4, k4, k4], Epilogue::Store),
            (&[k6], Epilogue::Add),
            (&[k6, k6], Epilogue::SwiGlu),
            (&[k6, k6, k6], Epilogue::Store),
        ] {
            for (reduce, subgroups) in [
                (Reduce::Workgroup, false),
                (Reduce::Subgroup { lanes: 16 }, true),
            ] {
                for team in [Team::Wide, Team::WholeWide] {
                    if team == Team::WholeWide && epilogue == Epilogue::SwiGlu {
                        continue;
                    }
                    let what = format!(
                        "{team:?} {types:?}, {rows} rows, {epilogue:?}, {fan:?}, {reduce:?}"
                    );
                    for acts in [Acts::F32, Acts::Q8] {
                        let form = (team, fan, acts);
                        let source = matmul_source(types, rows, reduce, epilogue, form);
                        check(&format!("{what}, {acts:?}"), &source, subgroups);
                        checked += 1;
                    }
                    let form = (team, fan, Acts::F32);
                    let source = matmul_source_with(types, rows, reduce, epilogue, form, true);
                    check(&format!("{what}, norm folded"), &source, subgroups);
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(
        checked,
        5 * 2 * (5 + 4) * 2 * 2 + 5 * 2 * (7 + 5) * 2 * 3,
        "forms checked"
    );
    khronos_verdicts().unwrap();
}

/// Every kernel but the products and the embedding, each form of it.
fn other_kernels() -> Vec<Shader> {
    [
        Shader::Norm { q8: false },
        Shader::Norm { q8: true },
        Shader::Rope {
            head_norm: false,
            kv: KvType::F16,
        },
        Shader::Rope {
            head_norm: true,
            kv: KvType::F16,
        },
        Shader::Rope {
            head_norm: false,
            kv: KvType::F32,
        },
        Shader::Attention {
            kv: KvType::F16,
            split: false,
            head_dim: 64,
            roped: false,
        },
        Shader::Attention {
            kv: KvType::F32,
            split: false,
            head_dim: 128,
            roped: false,
        },
        Shader::Attention {
            kv: KvType::F16,
            split: true,
            head_dim: 96,
            roped: false,
        },
        Shader::Attention {
            kv: KvType::F16,
            split: true,
            head_dim: 64,
            roped: true,
        },
        Shader::Attention {
            kv: KvType::F16,
            split: false,
            head_dim: 128,
            roped: true,
        },
        Shader::AttentionMerge,
        Shader::Summary(RowPass::Rank),
        Shader::Summary(RowPass::Sum),
        Shader::Summary(RowPass::End),
        Shader::Copy,
        Shader::Clone,
        Shader::Link,
        Shader::Read,
        Shader::Quant,
    ]
    .into_iter()
    .chain([1, 4, 8, 16, 32, 64].into_iter().flat_map(|c| {
        [RowPass::Rank, RowPass::Sum, RowPass::End].map(|pass| Shader::Top { c, pass })
    }))
    .collect()
}

#[test]
fn every_other_kernel_translates_for_vulkan_metal_and_d3d12() {
    let mut checked = 0;
    for shader in other_kernels() {
        check(&format!("{shader:?}"), &shader.source(), false);
        checked += 1;
    }
    assert_eq!(checked, 37);
    khronos_verdicts().unwrap();
}

/// The bindings `source`'s entry point writes, by naga's analysis: bit i for binding i.
fn written_by(what: &str, source: &str) -> u32 {
    let (module, info) = validate(what, source, Capabilities::all()).unwrap();
    let main = info.get_entry_point(0);
    module
        .global_variables
        .iter()
        .filter_map(|(h, var)| {
            let at = var.binding.as_ref()?.binding;
            main[h]
                .contains(naga::valid::GlobalUse::WRITE)
                .then_some(1u32 << at)
        })
        .fold(0, |all, b| all | b)
}

/// What CubeCL is told a launch writes (`Shader::writes`; every other binding declared read
/// only, so its runtime skips its written-buffer bookkeeping for them) is what the kernel's
/// WGSL writes: a binding written but declared read only would leave a failed launch's output
/// unclaimed, one declared but never written wastes the saving.
#[test]
fn every_kernel_declares_the_bindings_it_writes() {
    let (k4, k6) = k_quants();
    let q8_0 = GpuType::from(WeightType::Q8_0);
    let mut shaders = other_kernels();
    for (types, epilogue) in [
        (&[k4][..], Epilogue::Store),
        (&[k6], Epilogue::Add),
        (&[k4, k6], Epilogue::SwiGlu),
        (&[k4, k4, q8_0], Epilogue::Store),
    ] {
        for (team, acts, normed) in [
            (Team::Quarter, Acts::F32, false),
            (Team::Quarter, Acts::F32, true),
            (Team::Quarter, Acts::Q8, false),
            (Team::Wide, Acts::F32, true),
        ] {
            if team == Team::Wide && types.contains(&q8_0) {
                continue;
            }
            shaders.push(Shader::Matmul {
                types: types.into(),
                rows: 4,
                reduce: Reduce::Workgroup,
                epilogue,
                team,
                fan: Fan::Four,
                acts,
                normed,
            });
        }
        for phase in [TilePhase::Whole, TilePhase::Part, TilePhase::Sum] {
            shaders.push(Shader::Tile {
                types: types.into(),
                epilogue,
                form: TileForm::Vectors,
                phase,
            });
        }
        for shape in UnitTile::ALL.map(|t| UnitShape::CARD.in_tile(t).unwrap()) {
            shaders.push(Shader::Tile {
                types: types.into(),
                epilogue,
                form: TileForm::Units(shape),
                phase: TilePhase::Whole,
            });
        }
    }
    shaders.push(Shader::Embed(k4));
    let mut wrong = Vec::new();
    for shader in &shaders {
        let found = written_by(&format!("{shader:?}"), &shader.source());
        if found != shader.writes() {
            wrong.push(format!(
                "{shader:?}: declares {:#b}, writes {found:#b}",
                shader.writes()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The others, 4 × 4 mat-vec forms less one, 4 × (3 f32 tile phases and the units' narrow,
    // tall and wide tiles), the embedding.
    assert_eq!(shaders.len(), 37 + 4 * 4 - 1 + 4 * 6 + 1);
}

#[test]
fn a_broken_kernel_is_refused() {
    let good = matmul_source(
        &[WeightType::Q4K.into()],
        8,
        Reduce::Workgroup,
        Epilogue::Store,
        (Team::Quarter, Fan::One, Acts::F32),
    );
    assert!(validate("good", &good, BASELINE).is_ok());
    // An identifier the kernel never declares.
    let broken = good.replacen("+= sums[u];", "+= summs[u];", 1);
    assert_ne!(broken, good);
    let err = validate("broken", &broken, BASELINE).unwrap_err();
    assert!(err.contains("summ"), "{err}");
    // The subgroup form on a device without subgroups: what an adapter without the feature
    // would refuse, and why the engine picks the form from the adapter.
    let shuffles = matmul_source(
        &[WeightType::Q4K.into()],
        8,
        Reduce::Subgroup { lanes: 8 },
        Epilogue::Store,
        (Team::Quarter, Fan::Four, Acts::F32),
    );
    let err = validate("shuffles", &shuffles, BASELINE).unwrap_err();
    assert!(err.to_lowercase().contains("subgroup"), "{err}");
    // And f16 unpacking where a device lacks it (llvmpipe without `SHADER_F16`).
    let err = validate("unpacking", &good, Capabilities::empty()).unwrap_err();
    assert!(err.contains("SHADER_FLOAT16_IN_FLOAT32"), "{err}");
    // Khronos's validator, where it runs: the good kernel's SPIR-V passes; the same SPIR-V with
    // its buffers' strides dropped too (a storage buffer must be laid out) is refused.
    if std::env::var_os("MARS_SPIRV_VAL").is_some() {
        let (module, info) = validate("good", &good, BASELINE).unwrap();
        let words = spv::write_vec(&module, &info, &spirv_options(), None).unwrap();
        let unlaid = without_array_strides(&words, false);
        assert!(unlaid.len() < words.len());
        let verdict =
            |what, words: &[u32]| Validation::start(what, words).unwrap().unwrap().verdict();
        verdict("good", &words).unwrap();
        let err = verdict("unlaid", &unlaid).unwrap_err();
        assert!(err.contains("stride"), "{err}");
    }
}
