//! Kernels for GPUs (wgpu natively, WebGPU in the browser): GGUF blocks uploaded as they are
//! stored (u32 words; Q6_K's rows rearranged so that every block starts on 16 bytes,
//! [`GpuType::gpu_row_bytes`]) and
//! dequantized inside the kernel, f32 accumulation, and the rest of a
//! Llama block as a few fused kernels, so that a forward pass is a handful of launches a layer.
//! Over 800 lines: the matrix kernel's host side (its types, teams, parts, groups and launches)
//! is one unit; the other kernels' host sides are `layer.rs` and `step.rs`.
//!
//! The kernels are WGSL, launched through CubeCL's runtime (the one burn-wgpu runs on), so the
//! same text runs natively and in the browser, and the burn model hands its buffers straight to
//! them. Why WGSL rather than `#[cube]` kernels: the browser path must avoid `shader-f16` (f16
//! block scales are decoded with core WGSL's `unpack2x16float`) and must not need subgroups
//! (partial sums meet through workgroup memory, or through subgroup shuffles where the adapter
//! has them: [`Reduce`], the same bits either way), and the byte-level reads of 18-, 22- and
//! 34-byte blocks are plain shifts here; written by hand, what runs on SwiftShader is exactly
//! what was reviewed.
//!
//! The kernels:
//! - [`Matmul`](Shader::Matmul): `y[m, out] = x[m, in] · W[out, in]ᵀ` over the rows of x (16 a
//!   workgroup, a prefill's longer inputs in one launch), for one matrix or a group that shares
//!   x ([`MatrixGroup`]: q | k | v with their biases, gate | up with SiLU(gate)·up computed in
//!   the kernel), the residual added in place by the o and down products. Each 32-value group
//!   of a weight row is decoded once and met by every row. Each row's sum is taken in an order
//!   that does not depend on the rows beside it (tested bit for bit), which keeps greedy strict
//!   speculation equal to target-only decoding.
//! - [`Embed`](Shader::Embed): rows of W dequantized for the forward's token ids.
//! - RMSNorm, RoPE with the KV-cache write, attention over the cache (online softmax,
//!   grouped-query, chains and token trees), the logits' top-2 summary, and a token tree's
//!   accepted rows moved into place: `layer.rs`.
//!
//! Nothing a kernel needs that changes from token to token is compiled into it or uploaded per
//! launch: rows, positions, token ids and tree masks are in one [`Step`] buffer written once per
//! forward; shapes fixed by the model are in parameter buffers made at load.
//!
//! Every launch, upload and read goes through the crate's counters ([`crate::gpu_counts`]:
//! `launch`, `upload`, `read` here), so what a step costs a GPU is counted, not estimated.
//!
//! A matrix larger than the adapter's largest storage binding is split by output rows
//! ([`split_rows`]); each part is its own buffer and launch, writing its own columns of `y`.
//!
//! Error bound: activations stay f32 here (no 8-bit rounding), so against an exact product over
//! the dequantized weights the only error is f32 rounding of products and sums: at most
//! ~`(n_in / 16 + 24) · 2⁻²⁴ · Σ|W·x|` per output, which the tests hold with a margin.

// Launches straight into wgpu, their bind groups kept.
pub mod direct;
mod layer;
// A Vulkan device without the driver's bounds checks (`MARS_GPU_ROBUST=off`): where wgpu runs
// on Vulkan natively.
#[cfg(any(windows, target_os = "linux", target_os = "android"))]
mod robust;
mod step;
mod tune;
mod unroll;

use core::ops::Range;
use std::borrow::Cow;

use cubecl::bytes::Bytes;
use cubecl::client::Client;
use cubecl::ir::settings::Dim3;
use cubecl::ir::{ElemType, UIntKind};
use cubecl::prelude::BufferIOAttr;
use cubecl::prelude::KernelId;
use cubecl::prelude::{AddressType, CubeCount, ExecutionMode, KernelSettings, Scope};
use cubecl::server::{Handle, KernelArguments};
use cubecl::{CubeKernel, PrecompiledSource};

pub use layer::{
    Attention, CopyRows, Draw, Heads, KvType, MAX_TOP, Norm, ReadThrough, Rope, RowPass,
    SUMMARY_WORDS, Summary, TopRows, clone_buffer, link_ids, read_through,
};
#[cfg(any(windows, target_os = "linux", target_os = "android"))]
pub use robust::{open_without_robustness, robustness2_enabled, setup_without_robustness};
pub use step::{IDS, LINKED, Link, MAX_TREE_ROWS, Step};
pub use tune::{
    EVICT_BYTES, Evict, Form, MatVec, PREFILL_ROWS_TIMED, Tuned, Tuning, group_output,
    outputs_agree, time_group,
};

use crate::block::{GPU_RUN, WeightType};
use crate::counts::{Kind, counted_launch, counted_read, counted_upload};
use crate::error::{KernelError, Result};
use crate::quantize::MAX_ROWS;
pub use crate::units::{Splits, TILE_ROWS, UnitShape, UnitTile};
use crate::units::{TILE_OUTPUTS, tile_columns};

const COMMON: &str = include_str!("common.wgsl");
const READER: &str = include_str!("reader.wgsl");
const MATMUL: &str = include_str!("matmul.wgsl");
const MATVEC_F32: &str = include_str!("matvec_f32.wgsl");
const MATVEC_Q8: &str = include_str!("matvec_q8.wgsl");
const QUANT: &str = include_str!("quant.wgsl");
const Q8: &str = include_str!("q8.wgsl");
const Q8_STORE: &str = include_str!("q8_store.wgsl");
const MATVEC_OWN: &str = include_str!("matvec_own.wgsl");
const OWN: &str = include_str!("own.wgsl");
const NORM_Q8: &str = include_str!("norm_q8.wgsl");
const TILE: &str = include_str!("tile.wgsl");
const GROUP: &str = include_str!("group.wgsl");
const EMBED: &str = include_str!("embed.wgsl");
const NORM: &str = include_str!("norm.wgsl");
const ROPE: &str = include_str!("rope.wgsl");
const ATTENTION: &str = include_str!("attention.wgsl");
const ATTENTION_FOLD: &str = include_str!("attention_fold.wgsl");
const ATTENTION_MERGE: &str = include_str!("attention_merge.wgsl");
const ATTENTION_KEYS: &str = include_str!("attention_keys.wgsl");
const ATTENTION_ROPE: &str = include_str!("attention_rope.wgsl");
const SUMMARY: &str = include_str!("summary.wgsl");
const SUMMARY_RANK: &str = include_str!("summary_rank.wgsl");
const SUMMARY_SUM: &str = include_str!("summary_sum.wgsl");
const SUMMARY_END: &str = include_str!("summary_end.wgsl");
const TOP: &str = include_str!("top.wgsl");
const TOP_RANK: &str = include_str!("top_rank.wgsl");
const TOP_SUM: &str = include_str!("top_sum.wgsl");
const TOP_END: &str = include_str!("top_end.wgsl");
const COPY: &str = include_str!("copy.wgsl");
const CLONE: &str = include_str!("clone.wgsl");
const READ: &str = include_str!("read.wgsl");
const LINK: &str = include_str!("link.wgsl");

/// Threads per workgroup of [`Shader::Embed`] (one per 32-value group).
const EMBED_THREADS: usize = 64;
/// Workgroups per dispatch dimension that every WebGPU adapter allows.
const MAX_GROUPS_PER_DIM: usize = 65_535;
/// The bits of −inf, which WGSL cannot write as a constant (kernels read it from a buffer).
const NEG_INF_BITS: u32 = 0xff80_0000;

/// How a matrix's values are stored on the GPU: a GGUF block type, or plain f32 (a file's f32
/// matrices, kept exact), which the kernels read 32 values at a time like a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuType {
    /// GGUF blocks of this type.
    Blocks(WeightType),
    /// f32 values.
    F32,
}

impl From<WeightType> for GpuType {
    fn from(ty: WeightType) -> Self {
        Self::Blocks(ty)
    }
}

impl GpuType {
    /// Every type the kernels read.
    pub fn all() -> impl Iterator<Item = Self> {
        WeightType::ALL
            .into_iter()
            .map(Self::Blocks)
            .chain(std::iter::once(Self::F32))
    }

    /// Values per block (32 for f32).
    pub const fn block_values(self) -> usize {
        match self {
            Self::Blocks(ty) => ty.block_values(),
            Self::F32 => 32,
        }
    }

    /// Bytes per block as stored in a file (128 for 32 f32 values).
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Blocks(ty) => ty.block_bytes(),
            Self::F32 => 128,
        }
    }

    /// Bytes of a row of `blocks` blocks in GPU memory ([`WeightType::gpu_row_bytes`]: Q6_K's,
    /// Q4_0's, Q5_0's and Q8_0's in runs of 8, their d's first).
    pub const fn gpu_row_bytes(self, blocks: usize) -> usize {
        match self {
            Self::Blocks(ty) => ty.gpu_row_bytes(blocks),
            Self::F32 => 128 * blocks,
        }
    }

    /// Whether a block's quants start on 16 bytes and its rows are whole vec4s in GPU memory,
    /// where a mat-vec team's lane takes a block: the 4k + 2-byte types held in runs
    /// ([`WeightType::held_in_runs`]; Q6_K's lanes take parts of super-blocks).
    fn quants_in_vec4s(self) -> bool {
        matches!(
            self,
            Self::Blocks(WeightType::Q4_0 | WeightType::Q5_0 | WeightType::Q8_0)
        )
    }

    /// Whole rows of `blocks` blocks a row as stored, in the layout GPU memory holds
    /// ([`GpuType::gpu_row_bytes`]), with `spare` bytes of capacity left; `None` where the
    /// layouts are the same. The types held in runs ([`WeightType::held_in_runs`]: Q6_K, Q4_0,
    /// Q5_0, Q8_0): each run of [`GPU_RUN`] blocks (or fewer, at a row's end) as
    /// [`WeightType::hold_run`] lays it out.
    fn restrided(self, rows: &[u8], blocks: usize, spare: usize) -> Option<Vec<u8>> {
        let Self::Blocks(ty) = self else {
            return None;
        };
        let (stored, held) = (blocks * ty.block_bytes(), ty.gpu_row_bytes(blocks));
        if !ty.held_in_runs() || stored == 0 {
            return None;
        }
        let mut out = Vec::with_capacity(rows.len() / stored * held + spare);
        for row in rows.chunks_exact(stored) {
            for run in row.chunks(GPU_RUN * ty.block_bytes()) {
                ty.hold_run(run, &mut out);
            }
        }
        Some(out)
    }
}

/// The WGSL that decodes one 32-value group of `ty` (`fn load_group(rb: u32, g: u32)`, setting
/// `q`, `s0`, `s1`, `mn`, or `fn load_i8` setting `qi` instead, from which [`reader`] makes
/// `load_group`; see common.wgsl): one file per type in `decode/`.
fn load_group(ty: GpuType) -> &'static str {
    let GpuType::Blocks(ty) = ty else {
        return include_str!("decode/f32.wgsl");
    };
    match ty {
        WeightType::Q8_0 => include_str!("decode/q8_0.wgsl"),
        WeightType::Q4_0 => include_str!("decode/q4_0.wgsl"),
        WeightType::Q4_1 => include_str!("decode/q4_1.wgsl"),
        WeightType::Q5_0 => include_str!("decode/q5_0.wgsl"),
        WeightType::Q5_1 => include_str!("decode/q5_1.wgsl"),
        WeightType::Q4K => include_str!("decode/q4_k.wgsl"),
        WeightType::Q5K => include_str!("decode/q5_k.wgsl"),
        WeightType::Q6K => include_str!("decode/q6_k.wgsl"),
        WeightType::F16 => include_str!("decode/f16.wgsl"),
        WeightType::BF16 => include_str!("decode/bf16.wgsl"),
    }
}

/// The functions reader.wgsl and a decoder define, each renamed per weight binding.
const READER_FNS: [&str; 14] = [
    "aligned_at",
    "word_at",
    "vec_at",
    "byte_at",
    "scale_min_k4",
    "scale_min_words",
    "scale_min_pair",
    "k_scales",
    "load_group",
    "load_lane",
    "load_wide",
    "load_i8",
    "q6_at",
    "q6_d",
];

/// reader.wgsl's word reads of a weight binding declared as words, or (`wide`: [`Team::Wide`])
/// as vec4s of them.
fn word_reads(wide: bool) -> &'static str {
    if wide {
        "fn word_at(i: u32) -> u32 {
    return w[i >> 2u][i & 3u];
}

fn vec_at(i: u32) -> vec4<u32> {
    return w[i];
}"
    } else {
        "fn word_at(i: u32) -> u32 {
    return w[i];
}

fn vec_at(i: u32) -> vec4<u32> {
    return vec4<u32>(w[4u * i], w[4u * i + 1u], w[4u * i + 2u], w[4u * i + 3u]);
}"
    }
}

/// Where a wide team's lane finds its two runs of 16 values among a super-block's 64 vec4s of
/// activations (`wide_lo`, `WIDE_GAP`), whether its minimums come from a quantized block's s
/// (`WIDE_MINS`) and how its values become signed bytes for the 8-bit form (`wide_i8`), for a
/// group of `types` (matmul.wgsl's wide teams; a wide group's matrices are of one type,
/// [`Team::wide_for`]). Q4_K's lane i: values 64c + 16h .. + 16 and 32 on (c = i / 2,
/// h = i % 2), under one sub-block's scale and minimum each, unsigned nibbles; Q6_K's: values
/// 128n + 16a .. + 16 and 64 on (n = i / 4, a = i % 4), under one scale each, q − 32. Other
/// groups never run the wide loop and take Q4_K's.
fn wide_geometry(types: &[GpuType]) -> &'static str {
    if types.first() == Some(&GpuType::Blocks(WeightType::Q6K)) {
        "fn wide_lo(wi: u32) -> u32 {
    return 32u * (wi / 4u) + 4u * (wi % 4u);
}
const WIDE_GAP: u32 = 16u;
const WIDE_MINS: bool = false;
fn wide_i8(v: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(q6_signed(v.x), q6_signed(v.y), q6_signed(v.z), q6_signed(v.w));
}"
    } else {
        "fn wide_lo(wi: u32) -> u32 {
    return 16u * (wi / 2u) + 4u * (wi % 2u);
}
const WIDE_GAP: u32 = 8u;
const WIDE_MINS: bool = true;
fn wide_i8(v: vec4<u32>) -> vec4<u32> {
    return v;
}"
    }
}

/// group.wgsl for a group of `matrices` (1 to 3) with its weight bindings declared as words, or
/// (`wide`) as vec4s of them, one a matrix and the others after them, and the expression that
/// reads every weight binding (matmul.wgsl and tile.wgsl bind each one).
fn group_parts(wide: bool, matrices: usize) -> (String, String) {
    let wtype = if wide { "vec4<u32>" } else { "u32" };
    let weights: Vec<String> = (0..matrices)
        .map(|i| format!("@group(0) @binding({i}) var<storage, read_write> w{i}: array<{wtype}>;"))
        .collect();
    let word = if wide { "[0].x" } else { "[0]" };
    let any: Vec<String> = (0..matrices).map(|i| format!("w{i}{word}")).collect();
    let text = GROUP
        .replace("{{weights}}", &weights.join("\n"))
        .replace("{{b_x}}", &matrices.to_string())
        .replace("{{b_y}}", &(matrices + 1).to_string())
        .replace("{{b_p}}", &(matrices + 2).to_string())
        .replace("{{b_s}}", &(matrices + 3).to_string())
        .replace("{{param_words}}", &PARAM_WORDS.to_string());
    (text, any.join(" ^ "))
}

/// `load_group` for a decoder that writes 8-bit integers (`load_i8`: every block type): each
/// byte sign-extended and converted, the values its f32 form multiplies (integers, exact in
/// f32). Core WGSL: `extractBits`, no language extension.
fn group_from_i8() -> String {
    format!(
        "
fn load_group(rb: u32, g: u32) {{
    load_i8(rb, g);
    for (var k = 0u; k < 8u; k++) {{ {MARK}
        let v = bitcast<i32>(qi[k]);
        q[k] = vec4<f32>(f32(extractBits(v, 0u, 8u)), f32(extractBits(v, 8u, 8u)),
            f32(extractBits(v, 16u, 8u)), f32(extractBits(v, 24u, 8u)));
    }}
}}",
        MARK = unroll::MARKER,
    )
}

/// The byte reads and the decoder of `ty` for weight binding `b`: the binding is `w{b}` and
/// every function gets the suffix `_{b}`, so a kernel can read matrices of different types
/// from different bindings (WGSL has no pointer to a storage buffer as an argument).
fn reader(ty: GpuType, b: usize, wide: bool) -> String {
    let decoder = load_group(ty);
    // The 8-bit form takes block types only (`Acts::q8_for`), each of which has a `load_i8`
    // (made into its `load_group` here); f32, f16 and bf16 have a `load_group` alone.
    let extra = if decoder.contains("fn load_group(") {
        String::new()
    } else {
        group_from_i8()
    };
    let mut text = format!("{READER}\n{decoder}{extra}").replace("{{word_at}}", word_reads(wide));
    text = binding_renamed(&text, b);
    for f in READER_FNS {
        text = text.replace(&format!("{f}("), &format!("{f}_{b}("));
    }
    text
}

/// `text` with every index into the weight binding `w` (`w[`, not the end of a longer name such
/// as `raw[`) made an index into binding `w{b}`.
fn binding_renamed(text: &str, b: usize) -> String {
    let renamed = format!("w{b}[");
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(at) = rest.find("w[") {
        let ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if ident { "w[" } else { &renamed });
        rest = &rest[at + 2..];
    }
    out.push_str(rest);
    out
}

/// common.wgsl with one reader per weight binding, binding b reading `types[b]` (through vec4
/// words where `wide`).
fn common(types: &[GpuType], wide: bool) -> String {
    let readers: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(b, &ty)| reader(ty, b, wide))
        .collect();
    COMMON.replace("{{readers}}", &readers.join("\n"))
}

/// How the 16 partial sums of a matmul team meet (see matmul.wgsl): both give the same sums in
/// the same order, so the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduce {
    /// Through workgroup memory, a barrier per halving: every adapter.
    Workgroup,
    /// Halvings of fewer than `lanes` (a power of two, 2…16: the adapter's smallest subgroup,
    /// at most the team) through subgroup shuffles, the rest through workgroup memory. Needs
    /// a device with subgroups of at least `lanes` invocations laid out along the workgroup's
    /// invocation index (as Vulkan, Metal and D3D12 drivers do for a one-dimensional
    /// workgroup).
    Subgroup {
        /// Lanes a shuffle may span.
        lanes: u32,
    },
}

impl Reduce {
    /// The faster form `client`'s device runs: subgroups where CubeCL found them (native
    /// GPUs: wgpu's WebGPU backend has no subgroups, and CubeCL leaves them off on CPU
    /// adapters), else workgroup memory.
    pub fn detect(client: &Client) -> Self {
        let props = client.properties();
        let ops = props
            .features
            .plane
            .contains(cubecl::ir::features::Plane::Ops);
        Self::for_subgroups(ops.then_some(props.hardware.plane_size_min))
    }

    /// The form for a device whose smallest subgroup has `smallest` invocations (`None`: no
    /// subgroups): shuffles at most 16 lanes wide (the team), workgroup memory where the size
    /// is not a power of two of at least 2.
    pub fn for_subgroups(smallest: Option<u32>) -> Self {
        match smallest {
            Some(n) if n >= 2 && n.is_power_of_two() => Self::Subgroup { lanes: n.min(16) },
            _ => Self::Workgroup,
        }
    }

    /// `lanes` as the shader takes it: 1 for workgroup memory only.
    fn lanes(self) -> u32 {
        match self {
            Self::Workgroup => 1,
            Self::Subgroup { lanes } => lanes,
        }
    }
}

/// What a matmul does with its sums (see matmul.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `y = sum` (+ a bias), −inf at or past the step's logit limit.
    Store,
    /// `y += sum`: a residual added in place.
    Add,
    /// Two matrices of equal rows, gate and up: `y = silu(gate) · up`.
    SwiGlu,
}

impl Epilogue {
    fn code(self) -> u32 {
        match self {
            Self::Store => 0,
            Self::Add => 1,
            Self::SwiGlu => 2,
        }
    }
}

/// How many of a matmul workgroup's 64 threads share one output (matmul.wgsl's team).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Team {
    /// 16 threads an output, 4 outputs a workgroup: every matrix but the ones below.
    Quarter,
    /// The whole workgroup on one output: a matrix of few outputs and long rows (an FFN's
    /// down projection), whose 16-thread teams would leave a large GPU mostly idle — on an
    /// H100 the 0.5B's down products (896 outputs over 4,864 inputs, 14,336 threads in quarter
    /// teams) took 1.3 ms of a 7.2 ms token (the H100's profile in docs/lab/journal-2026-11.md).
    Whole,
    /// 16 threads an output sharing each 256-value super-block, each reading 8 bytes of quants
    /// beside its neighbours' (matmul.wgsl's lane teams), as llama.cpp's Vulkan mat-vec shares
    /// a K-quant block among 16 threads: groups of Q4_K and Q6_K matrices only
    /// ([`Team::lanes_for`]: every matrix of a Q4_K_M file). No rule chooses it; a tuning
    /// table does where it measured fastest ([`Tuning`]).
    Lanes,
    /// 16 threads an output taking two K-quant super-blocks a step, 8 lanes each, every lane
    /// loading its quants 16 bytes at a time (vec4 loads, the weights bound as vec4s): a Q4_K
    /// lane 16 bytes of quants and the super-block's 16 of scales, 2 loads for 32 weights
    /// where a quarter team's lane takes 12 word loads; a Q6_K lane 16 bytes each of low
    /// nibbles, high bit pairs and scales and a word of d (matmul.wgsl's wide teams). For the
    /// H200's one-row rate (260–450 GB/s of 4.8 TB/s, docs/performance.md). Groups of Q4_K or
    /// of Q6_K matrices ([`Team::wide_for`]); no rule chooses it, a tuning table does where it
    /// measured fastest.
    Wide,
    /// [`Team::Lanes`]' loads with the whole workgroup on an output: its 64 threads take four
    /// super-blocks of the row a step (16 lanes each), as llama.cpp's Vulkan mat-vec puts 128
    /// threads on a pair of outputs where they are few (ggml-vulkan's large workgroups for
    /// K-quants on NVIDIA where m ≤ 8192): a thread walks a quarter of the steps, so a row's
    /// loads are in flight across threads rather than one after another in one; on an H200 a
    /// whole team read a 7B's down 1.35× faster than quarter teams (`Team::for_group`). Not for
    /// a SwiGLU (gate and up meet inside a workgroup: it takes [`Team::Lanes`]); no rule chooses
    /// it, a tuning table does where it measured fastest.
    WholeLanes,
    /// [`Team::Wide`]'s loads with the whole workgroup on an output: eight super-blocks a step
    /// (8 lanes each), as [`Team::WholeLanes`] is to lane teams; a SwiGLU takes [`Team::Wide`].
    WholeWide,
}

impl Team {
    /// The team a group of `outputs` outputs over `cols` inputs gets with `epilogue`: whole
    /// where rows are at least 4,096 long (128 of the kernel's 32-value groups, two a thread)
    /// and outputs fewer than 8,192 (a quarter team's 16 threads an output would then fill
    /// under 131,072 threads: half of a large GPU's), or at least 2,048 long in a matrix of
    /// [`FOUR_ON_GPU`] weights or more (one a GPU gives four outputs a team: on an H200, four
    /// outputs a team, a 7B's Q4_K down took 0.107 ms a row whole against 0.144 in quarters, a
    /// 32B's down 0.178 against 0.305); quarter otherwise and always for a SwiGLU (whose gate
    /// and up meet inside the workgroup). The fan does not choose it: four outputs a team give the bits
    /// of one.
    pub fn for_group(epilogue: Epilogue, outputs: usize, cols: usize) -> Self {
        let long = cols >= 4096 && outputs < 8192
            || cols >= 2048 && outputs.saturating_mul(cols) >= FOUR_ON_GPU;
        if epilogue != Epilogue::SwiGlu && long {
            Self::Whole
        } else {
            Self::Quarter
        }
    }

    /// Threads an output.
    pub fn threads(self) -> usize {
        match self {
            Self::Quarter | Self::Lanes | Self::Wide => 16,
            Self::Whole | Self::WholeLanes | Self::WholeWide => 64,
        }
    }

    /// Whether the team shares each super-block among 16 lanes ([`Team::Lanes`]' loads).
    pub fn lanes(self) -> bool {
        matches!(self, Self::Lanes | Self::WholeLanes)
    }

    /// Whether the team loads 16 bytes a lane ([`Team::Wide`]'s loads).
    pub fn wide(self) -> bool {
        matches!(self, Self::Wide | Self::WholeWide)
    }

    /// The team with the same loads in 16-thread teams: what a SwiGLU group takes in place of a
    /// whole-workgroup team (its gate and up meet inside a workgroup of four teams).
    pub fn in_quarters(self) -> Self {
        match self {
            Self::Whole => Self::Quarter,
            Self::WholeLanes => Self::Lanes,
            Self::WholeWide => Self::Wide,
            team => team,
        }
    }

    /// The name a tuning table and `MARS_GPU_TEAM` give the team.
    pub fn name(self) -> &'static str {
        match self {
            Self::Quarter => "quarter",
            Self::Whole => "whole",
            Self::Lanes => "lanes",
            Self::Wide => "wide",
            Self::WholeLanes => "whole-lanes",
            Self::WholeWide => "whole-wide",
        }
    }

    /// Every team, in [`Team::name`]'s order.
    pub const ALL: [Self; 6] = [
        Self::Quarter,
        Self::Whole,
        Self::Lanes,
        Self::Wide,
        Self::WholeLanes,
        Self::WholeWide,
    ];

    /// The team `name` names ([`Team::name`]).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The team the environment's `MARS_GPU_TEAM` (a [`Team::name`]) forces on every group it
    /// applies to, as [`GpuMatrix::set_team`] does: a measurement knob, so that the GPU bundle
    /// times a whole decode in another form without a rebuild (as `CUBECL_WGPU_MAX_TASKS` sets
    /// the submit interval). Read once; unset or another value: none.
    pub fn forced() -> Option<Self> {
        static FORCED: std::sync::OnceLock<Option<Team>> = std::sync::OnceLock::new();
        *FORCED.get_or_init(|| {
            std::env::var("MARS_GPU_TEAM")
                .ok()
                .and_then(|v| Self::parse(&v))
        })
    }

    /// Whether matrices of `types` can run in [`Team::Lanes`]: every one Q4_K or Q6_K (the
    /// types with a lane decoder).
    pub fn lanes_for(types: &[GpuType]) -> bool {
        types.iter().all(|&ty| {
            matches!(
                ty,
                GpuType::Blocks(WeightType::Q4K) | GpuType::Blocks(WeightType::Q6K)
            )
        })
    }

    /// Whether matrices of `types` can run in [`Team::Wide`]: all Q4_K or all Q6_K (whose rows
    /// and blocks' parts are whole 16-byte vec4s in GPU memory; one type, since a lane's
    /// activations are where the type's geometry puts them: [`wide_geometry`]).
    pub fn wide_for(types: &[GpuType]) -> bool {
        let wide = |ty: &GpuType| {
            matches!(
                ty,
                GpuType::Blocks(WeightType::Q4K) | GpuType::Blocks(WeightType::Q6K)
            )
        };
        types.first().is_some_and(wide) && types.iter().all(|ty| Some(ty) == types.first())
    }

    /// Outputs a workgroup.
    fn outputs(self) -> usize {
        64 / self.threads()
    }
}

/// How many outputs a matmul team computes (matmul.wgsl's OUTS): each activation value a thread
/// loads is applied to all of them, and each output's sum is the same whatever the fan, so the
/// same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fan {
    /// One output a team: a GPU's small matrices (under [`FOUR_ON_GPU`] weights), where more
    /// workgroups keep more of the device busy.
    One,
    /// Four outputs a team: CPU adapters (lavapipe, SwiftShader), which run a workgroup's lanes
    /// as vectors and load storage one lane at a time, so an activation loaded once for four
    /// outputs saves three quarters of those loads: on lavapipe the 0.5B's Q5_0 FFN up (4,864 ×
    /// 896) costs 96.9 M instructions a row against 166.8 M with one (docs/lab/journal-2026-11.md).
    Four,
}

/// Weights from which a GPU's matrix takes [`Fan::Four`]: on an H200 (`gpu_cost stream`,
/// docs/performance.md) four outputs a team took a 7B's FFN gate (18944 × 3584, Q4_K) in
/// 0.095 ms a row against 0.103 with one and 0.200 ms for 5 rows against 0.472, a 32B's down
/// (5120 × 27648) in 0.178 against 0.223 (whole teams); on a 512 × 512 matrix one output a team
/// was faster (0.017 ms against 0.024).
pub const FOUR_ON_GPU: usize = 8 << 20;

/// Whether `client`'s adapter is a GPU card, not a CPU adapter such as lavapipe or SwiftShader
/// (CubeCL's device identity has no physical device for wgpu's CPU adapters): what every
/// kernel shape that differs between the two asks. wgpu's no-op backend counts as a card: it
/// stands in for one when the host's side of a card's launches is measured
/// (`mars_model::open_wgpu`), and wgpu-hal 30 reports it as a CPU adapter whatever device type
/// it is given, so it is known by its name.
pub fn is_card(client: &Client) -> bool {
    if CARD_SHAPES.load(std::sync::atomic::Ordering::Relaxed) {
        return true;
    }
    let identity = &client.properties().identity;
    identity.physical.is_some() || identity.name == NOOP_ADAPTER
}

/// Set by [`use_card_shapes`].
static CARD_SHAPES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every later [`is_card`] answer yes, on any adapter: so that a CPU adapter (SwiftShader
/// in the browser's tests, which no environment variable reaches) builds and runs the kernel
/// shapes a GPU card runs — tiles, folds, split attention, chunked row reductions — and a
/// browser's WGSL compiler checks them (Chrome's runs a uniformity analysis naga lacks). For
/// tests; models loaded before the call keep their shapes.
pub fn use_card_shapes() {
    CARD_SHAPES.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The name wgpu gives its no-op backend's adapter.
pub const NOOP_ADAPTER: &str = "noop wgpu backend";

/// A value a run takes out and puts back when done, so that the next run on the same thread
/// reuses it: GPU buffers the device only needs while a run's launches execute (a forward's
/// activations, a reduction's partials), where each run took new ones from CubeCL's pool.
/// Reuse is safe because nothing of them leaves the run and the device runs a queue's launches
/// in order (the next run's writes come after this run's reads). A run beside another (another
/// thread) finds the slot empty and makes its own; a value put by another thread is not given
/// out (CubeCL gives each thread a stream of its own, and a buffer passed between streams is
/// ordered by CubeCL rather than by one queue). Shared by clones. The same in the browser, where
/// the page's single thread is every run's.
#[derive(Debug)]
pub struct Slot<T>(std::sync::Arc<std::sync::Mutex<Option<(std::thread::ThreadId, T)>>>);

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Self(std::sync::Arc::clone(&self.0))
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self(std::sync::Arc::default())
    }
}

impl<T> Slot<T> {
    /// The value this thread put last, taken out; `None` where there is none.
    pub fn take(&self) -> Option<T> {
        // A poisoned lock only means a run panicked: whatever it held is dropped.
        let kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        kept.and_then(|(thread, v)| (thread == std::thread::current().id()).then_some(v))
    }

    /// Keeps `value` for this thread's next run.
    pub fn put(&self, value: T) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((std::thread::current().id(), value));
    }
}

/// A measurement knob's choice: `Some(true)` where the environment's `var` is `on`,
/// `Some(false)` where it is `off`, else `None` (the rule decides). Knobs let the GPU bundle time
/// both sides of a rule without a rebuild.
fn switch(var: &str, on: &str, off: &str) -> Option<bool> {
    match std::env::var(var) {
        Ok(v) if v == on => Some(true),
        Ok(v) if v == off => Some(false),
        _ => None,
    }
}

impl Fan {
    /// The fan for `client`'s device: [`Fan::Four`] on an adapter that is no card
    /// ([`is_card`]), else [`Fan::One`].
    pub fn detect(client: &Client) -> Self {
        if is_card(client) {
            Self::One
        } else {
            Self::Four
        }
    }

    /// The fan for a `[rows, cols]` matrix on `client`'s device: [`Fan::detect`]'s, four on a
    /// GPU for matrices of at least [`FOUR_ON_GPU`] weights.
    pub fn for_matrix(client: &Client, rows: usize, cols: usize) -> Self {
        match Self::detect(client) {
            Self::One if rows.saturating_mul(cols) >= FOUR_ON_GPU => Self::Four,
            fan => fan,
        }
    }

    /// Outputs a team.
    pub fn outputs(self) -> usize {
        match self {
            Self::One => 1,
            Self::Four => 4,
        }
    }
}

/// The activations a matmul multiplies (matmul.wgsl's products).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Acts {
    /// f32, met by weights decoded to f32: every adapter and type, and what a row's result is
    /// tested against (within f32 rounding of an exact product).
    F32,
    /// Quantized to 8 bits per 32 values by a launch before the product (quant.wgsl), met by
    /// weights decoded to 8-bit integers in integer dot products of four (WGSL's
    /// `dot4I8Packed`: the GPU's own instruction where Vulkan has `shaderIntegerDotProduct`,
    /// else a few integer operations), as llama.cpp's Vulkan mat-vec and mars's CPU kernels
    /// multiply: a quarter of the activation bytes a row and no float conversion of the
    /// weights. Each activation moves by at most half its block's step (max|x| / 254), which
    /// [`Acts::Q8`]'s tests bound. Block types only ([`Acts::q8_for`]), not in lane teams. No
    /// rule chooses it; a tuning table does where it measured fastest ([`Tuning`]), or
    /// `MARS_GPU_ACTS=q8` ([`Acts::forced`]).
    Q8,
    /// [`Acts::Q8`] whose one-row steps quantize their row inside the product (matvec_own.wgsl:
    /// each workgroup a chunk at a time into workgroup memory, and where a norm is folded in its
    /// 1/rms first, as the norm's launch computes it), with the same bits as [`Acts::Q8`]: one
    /// launch a one-row product where [`Acts::Q8`] takes a quantizing launch before it (or a
    /// norm's that writes the 8-bit rows too). Passes of more rows share one quantization as
    /// [`Acts::Q8`]'s do. Why: the H200's 7B decoded at 0.71× in wide 8-bit teams of what wide
    /// f32 teams gave (2026-12-04), with two norms and two quantizing launches a layer more, while
    /// NAK counts the 8-bit products at under half the f32 ones' instructions a weight. Block
    /// types only, not in lane teams; a tuning table or `MARS_GPU_ACTS=q8own` chooses it.
    Q8Own,
}

impl Acts {
    /// Whether matrices of `types` can multiply 8-bit activations: every one a block type of
    /// integer values (16- and 32-bit float weights are no integers).
    pub fn q8_for(types: &[GpuType]) -> bool {
        types.iter().all(|ty| match ty {
            GpuType::Blocks(t) => !matches!(t, WeightType::F16 | WeightType::BF16),
            GpuType::F32 => false,
        })
    }

    /// The activations the environment's `MARS_GPU_ACTS` (`f32`, `q8` or `q8own`) forces on
    /// every group that can take them: a measurement knob, as [`Team::forced`] is. Read once;
    /// unset or another value: none.
    pub fn forced() -> Option<Self> {
        static FORCED: std::sync::OnceLock<Option<Acts>> = std::sync::OnceLock::new();
        *FORCED.get_or_init(|| match std::env::var("MARS_GPU_ACTS").as_deref() {
            Ok("f32") => Some(Self::F32),
            Ok("q8") => Some(Self::Q8),
            Ok("q8own") => Some(Self::Q8Own),
            _ => None,
        })
    }

    /// `f32`, `q8` or `q8own`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Q8 => "q8",
            Self::Q8Own => "q8own",
        }
    }

    /// The name's activations ([`Acts::name`]).
    pub fn parse(name: &str) -> Option<Self> {
        [Self::F32, Self::Q8, Self::Q8Own]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// Whether the products multiply 8-bit activations (in a pass of more than one row, both
    /// 8-bit forms are [`Acts::Q8`]).
    pub fn is_q8(self) -> bool {
        self != Self::F32
    }
}

/// q8.wgsl's blocks written to storage through binding `binding` (quant.wgsl, norm.wgsl).
fn q8_store(binding: u32) -> String {
    Q8_STORE
        .replace("{{q8_binding}}", &binding.to_string())
        .replace("{{q8_block}}", &Q8.replace("{{q8_dst}}", "xq"))
}

/// Bytes of quant.wgsl's blocks for `rows` rows of `cols` values: 160 for each 128 values.
fn quant_bytes(rows: usize, cols: usize) -> usize {
    (rows * cols).div_ceil(128) * 160
}

/// The bound a matmul pipeline is compiled for: the power of two at or above `rows` (at most
/// [`MAX_ROWS`]), so one pipeline serves every call of up to that many rows.
pub fn row_bound(rows: usize) -> usize {
    rows.clamp(1, MAX_ROWS).next_power_of_two()
}

/// WGSL that calls binding `sub`'s copy of `call` with `args` (one matrix a binding, each of its
/// own type: see [`reader`]).
fn dispatch(types: &[GpuType], call: &str, args: &str) -> String {
    (0..types.len())
        .map(|b| {
            if b + 1 == types.len() {
                format!("    {{ {call}_{b}({args}); }}")
            } else {
                format!("    if sub == {b}u {{ {call}_{b}({args}); }} else")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The WGSL of a matmul over matrices of `types` (one to three, binding 0, 1, 2), compiled for
/// up to `rows` rows a workgroup, with `reduce`, `epilogue`, `team` (a SwiGLU takes a
/// 16-thread team: [`Team::Quarter`], or [`Team::Lanes`] where the types have lanes), `fan`
/// and `acts` (8-bit activations: block types only, not in lane teams).
pub fn matmul_source(
    types: &[GpuType],
    rows: usize,
    reduce: Reduce,
    epilogue: Epilogue,
    form: (Team, Fan, Acts),
) -> String {
    matmul_source_with(types, rows, reduce, epilogue, form, false)
}

/// [`matmul_source`] with, where `normed`, the RMSNorm before the product folded in (f32
/// activations only: matmul.wgsl's NORMED, [`MatrixGroup::with_norm`]).
pub fn matmul_source_with(
    types: &[GpuType],
    rows: usize,
    reduce: Reduce,
    epilogue: Epilogue,
    (team, fan, acts): (Team, Fan, Acts),
    normed: bool,
) -> String {
    let lanes = reduce.lanes();
    // The team's partial sums meet in a fixed tree (matmul.wgsl); a folded norm's sums of
    // squares after them, in the same tree, through the same workgroup memory.
    let mut tree = team_tree("acc", "ACC", lanes);
    // The 8-bit form that quantizes its own row takes a norm before its products, not in them.
    let own = acts == Acts::Q8Own;
    debug_assert!(!own || rows == 1, "the own-quantizing form is one-row only");
    let (normed, own_normed) = (normed && !own, normed && own);
    if normed {
        tree.push_str(&team_tree("ss", "ROWS", lanes));
        tree.push_str(
            "    let eps = bitcast<f32>(pw(18));
    for (var r = 0u; r < ROWS; r++) { // unroll
        let inv = 1.0 / sqrt(ss[r] / f32(n_in) + eps);
        for (var u = 0u; u < OUTS; u++) { // unroll
            acc[u * ROWS + r] *= inv;
        }
    }
",
        );
    }
    let lane_teams = team.lanes();
    let lane_dispatch = if lane_teams {
        dispatch(types, "load_lane", "rb, b, i")
    } else {
        String::new()
    };
    let wide = team.wide();
    let wide_dispatch = if wide {
        dispatch(types, "load_wide", "rb, b, i")
    } else {
        String::new()
    };
    // The weights read as vec4s of words in wide teams, and wherever every matrix is of a
    // type held in runs of 16-byte-aligned blocks (Q4_0, Q5_0, Q8_0): a block's quants are
    // then one or two 16-byte loads, where NAK issued them a word at a time.
    let vec4_words = wide || types.iter().all(|ty| ty.quants_in_vec4s());
    let (group, w_any) = group_parts(vec4_words, types.len());
    let (x, products, acts_decls) = match acts {
        // The whole row at once (matvec_q8.wgsl's loop bounds), its blocks read from x.
        Acts::Q8 => (
            "vec4<u32>",
            format!(
                "    let lo_g = 0u;\n    let hi_g = end;\n    let lo_b = 0u;\n    let hi_b = end;\n{MATVEC_Q8}"
            ),
            "// Vec4 `i` of the rows' quantized blocks (matvec_q8.wgsl), as quant.wgsl or a norm
// wrote them.
fn xq(i: u32) -> vec4<u32> {
    return x[i];
}"
            .to_string(),
        ),
        Acts::Q8Own => (
            "vec4<f32>",
            MATVEC_OWN.replace("{{q8_products}}", MATVEC_Q8),
            OWN.replace("{{q8_block}}", &Q8.replace("{{q8_dst}}", "xw")),
        ),
        Acts::F32 => ("vec4<f32>", MATVEC_F32.to_string(), String::new()),
    };
    let q8_dispatch = if acts.is_q8() {
        dispatch(types, "load_i8", "rb, g")
    } else {
        String::new()
    };
    let text = MATMUL
        .replace("{{products}}", &products)
        .replace("{{acts_decls}}", &acts_decls)
        .replace("{{group}}", &group)
        .replace("{{w_any}}", &w_any)
        .replace("{{x}}", x)
        .replace("{{common}}", &common(types, vec4_words))
        .replace("{{wide_geometry}}", wide_geometry(types))
        .replace("{{dispatch}}", &dispatch(types, "load_group", "rb, g"))
        .replace("{{lane_dispatch}}", &lane_dispatch)
        .replace("{{q8_dispatch}}", &q8_dispatch)
        .replace("{{lane_teams}}", &lane_teams.to_string())
        .replace("{{wide}}", &wide.to_string())
        .replace("{{wide_dispatch}}", &wide_dispatch)
        .replace("{{rows}}", &rows.to_string())
        .replace("{{lanes}}", &lanes.to_string())
        .replace("{{epilogue}}", &epilogue.code().to_string())
        .replace("{{team}}", &team.threads().to_string())
        .replace("{{outs}}", &fan.outputs().to_string())
        .replace("{{acc}}", &(rows * fan.outputs()).to_string())
        .replace("{{normed}}", &normed.to_string())
        .replace("{{own_normed}}", &own_normed.to_string())
        .replace("{{tree}}", &tree);
    unroll::unroll(&text)
}

/// WGSL summing each of the `count` values of array `v` over a matmul team (matmul.wgsl: lane
/// t < step adds lane t + step, TEAM / 2 … 1): halvings of at least `lanes` lanes through
/// workgroup memory (`partial`, room for 64 · ACC values: `count` is at most ACC), the smaller
/// ones through subgroup shuffles where `lanes` > 1. Lane t's partner t ^ step is t + step for
/// t < step: the same sums in the same order either way, so the same bits.
fn team_tree(v: &str, count: &str, lanes: u32) -> String {
    let mut text = format!(
        "    if LANES < TEAM {{
        for (var a = 0u; a < {count}; a++) {{ // unroll
            partial[a * 64u + lid] = {v}[a];
        }}
        workgroupBarrier();
        for (var step = TEAM / 2u; step >= LANES; step >>= 1u) {{
            if t < step {{
                for (var a = 0u; a < {count}; a++) {{ // unroll
                    partial[a * 64u + lid] += partial[a * 64u + lid + step];
                }}
            }}
            workgroupBarrier();
        }}
        for (var a = 0u; a < {count}; a++) {{ // unroll
            {v}[a] = partial[a * 64u + lid];
        }}
    }}
"
    );
    if lanes > 1 {
        text.push_str(&format!(
            "    for (var step = LANES / 2u; step > 0u; step >>= 1u) {{
        for (var a = 0u; a < {count}; a++) {{ // unroll
            {v}[a] += subgroupShuffleXor({v}[a], step);
        }}
    }}
"
        ));
    }
    text
}

/// How a long prefill's tiles are multiplied (tile.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TileForm {
    /// f32 dot products out of workgroup memory: every adapter.
    Vectors,
    /// The same in a tall tile, 64 rows × 64 outputs (2 × 1 of the 32 × 64: each thread 8 rows
    /// by 4 outputs), so each decoded weight meets 64 rows and each step's 12 loads of
    /// workgroup memory feed 32 dot products, where the narrow tile's 8 feed 16; each output
    /// the same multiply-adds in the same order, so the narrow tile's bits. 18 KiB of workgroup
    /// memory: where the device holds it (natively every card; in the browser where the
    /// adapter offers more than WebGPU's 16 KiB), a form the tuning times.
    TallVectors,
    /// The matrix units through wgpu's cooperative matrices (f16 products into f32, in blocks
    /// of the shape the adapter offers): native Vulkan where the adapter has
    /// `VK_KHR_cooperative_matrix`, Metal's 8 × 8 simdgroup matrices. Chosen by a tuning table
    /// where it measured fastest and agreed with the mat-vec form ([`Tuning`]; only on an
    /// adapter that has the feature, in its shape: [`adapter_matrix_units`]), or by
    /// `MARS_GPU_TILES=units` ([`tiles_for`]); where the adapter lacks the feature its pipeline
    /// fails to build.
    Units(UnitShape),
}

impl TileForm {
    /// tile.wgsl's 32 × 64 tiles a workgroup takes along the rows and along the outputs: 1 × 1,
    /// or on the matrix units its [`UnitTile`]'s (2 × 1 tall, 2 × 2 wide).
    pub fn tiles(self) -> (usize, usize) {
        match self {
            Self::Units(shape) => {
                let (vr, vc) = shape.tile_kind().tiles();
                (vr as usize, vc as usize)
            }
            Self::Vectors => (1, 1),
            Self::TallVectors => (2, 1),
        }
    }

    /// Workgroup memory its kernel declares (bytes).
    pub fn workgroup_bytes(self) -> u32 {
        match self {
            // ws [64, 9] and xs [32 or 64, 9] vec4s.
            Self::Vectors => (576 + 288) * 16,
            Self::TallVectors => (576 + 576) * 16,
            Self::Units(shape) => shape.workgroup_bytes(),
        }
    }
}

/// The f32 tiles' workgroup memory and its writers for `rows` rows (32 or 64): each of the 64
/// columns' decoded group and each row's 32 inputs, vec4s in rows of PAD (13.5 KiB for 32 rows,
/// under WebGPU's 16; 18 KiB for 64).
fn vectors_memory(rows: u32) -> String {
    format!(
        "// [BN, PAD] vec4: the current group of each column's weight row, decoded (9 KiB).
var<workgroup> ws: array<vec4<f32>, 576>;
// [TM, PAD] vec4: the same 32 inputs of each of the {rows} rows.
var<workgroup> xs: array<vec4<f32>, {}>;

fn put_w(c: u32, k: u32, v: vec4<f32>) {{
    ws[c * PAD + k] = v;
}}

fn put_x(r: u32, k: u32, v: vec4<f32>) {{
    xs[r * PAD + k] = v;
}}",
        rows * 9
    )
}

/// tile.wgsl's form-dependent parts: (enables, workgroup memory and its writers, the
/// accumulators' declarations, one group's products, the products into `acc`).
fn tile_parts(form: TileForm) -> [String; 5] {
    match form {
        TileForm::TallVectors => [
            "",
            vectors_memory(64).as_str(),
            "    // accs[16h + 4a + i]: tile row 32h + 4·tr + a, column tc + 16·i.
    var accs: array<f32, 32>;",
            "        for (var kk = 0u; kk < 8u; kk++) { // unroll
            var xv: array<vec4<f32>, 8>;
            for (var h = 0u; h < 2u; h++) { // unroll
                for (var a = 0u; a < 4u; a++) { // unroll
                    xv[4u * h + a] = xs[(32u * h + 4u * tr + a) * PAD + kk];
                }
            }
            for (var i = 0u; i < 4u; i++) { // unroll
                let wv = ws[(tc + 16u * i) * PAD + kk];
                for (var h = 0u; h < 2u; h++) { // unroll
                    for (var a = 0u; a < 4u; a++) { // unroll
                        // The narrow tile's multiply-adds, in its order.
                        let v = xv[4u * h + a];
                        let s = accs[16u * h + 4u * a + i];
                        accs[16u * h + 4u * a + i] = fma(v.w, wv.w, fma(v.z, wv.z, fma(v.y, wv.y, fma(v.x, wv.x, s))));
                    }
                }
            }
        }",
            "            for (var j = 0u; j < 16u; j++) { // unroll
                acc[j] = accs[16u * v + j];
            }",
        ]
        .map(String::from),
        TileForm::Vectors => [
            "",
            vectors_memory(32).as_str(),
            "",
            "        for (var kk = 0u; kk < 8u; kk++) { // unroll
            var xv: array<vec4<f32>, 4>;
            for (var a = 0u; a < 4u; a++) { // unroll
                xv[a] = xs[(4u * tr + a) * PAD + kk];
            }
            for (var i = 0u; i < 4u; i++) { // unroll
                let wv = ws[(tc + 16u * i) * PAD + kk];
                for (var a = 0u; a < 4u; a++) { // unroll
                    // Four multiply-adds into the sum, a value at a time (a dot product and an
                    // add would be five instructions for four values).
                    let v = xv[a];
                    let s = acc[4u * a + i];
                    acc[4u * a + i] = fma(v.w, wv.w, fma(v.z, wv.z, fma(v.y, wv.y, fma(v.x, wv.x, s))));
                }
            }
        }",
            "",
        ]
        .map(String::from),
        TileForm::Units(shape) => units_parts(shape),
    }
}

/// [`tile_parts`] on the matrix units in `shape`: each subgroup multiplies a rectangle of
/// `shape.blocks_a_subgroup()` blocks of the workgroup's tile (one block row of them in the
/// narrow tile, two in the wide: an A and a B load for each product's row and column), its f32 blocks
/// kept in cooperative matrices across the whole walk over the inputs, stored to workgroup
/// memory at the end for the threads' 4 × 4 (the epilogue's layout): in the wide tile one
/// 32 × 64 tile at a time (tile.wgsl's `vr`, `vc`), each subgroup storing its blocks in it.
fn units_parts(shape: UnitShape) -> [String; 5] {
    let (n, lanes) = (shape.size(), shape.subgroup());
    let (br, bc) = shape.blocks_a_subgroup();
    let (rows, outputs) = shape.tile();
    // Subgroups side by side along the outputs (outputs / n blocks a block row, bc each).
    let across = (outputs / n) / bc;
    let mut declare = format!(
        "    // Subgroup lid / {lanes}'s {br} × {bc} blocks: rows rb .. rb + {}, columns cb .. cb + {}.
    let sg = lid / {lanes}u;
    let rb = {}u * (sg / {across}u);
    let cb = {}u * (sg % {across}u);
",
        n * br,
        n * bc,
        n * br,
        n * bc
    );
    let mut multiply = format!("        for (var kb = 0u; kb < 32u; kb += {n}u) {{\n");
    for i in 0..br {
        multiply.push_str(&format!(
            "            let a{i} = coopLoadT<coop_mat{n}x{n}<f16, A>>(&xs[(rb + {}u) * LD + kb], LD);\n",
            n * i
        ));
    }
    // Before a 32 × 64 tile's blocks overwrite the one before (tall, wide), once its threads have
    // read that one.
    let mut store = String::from(
        "            if v > 0u {
                workgroupBarrier();
            }
",
    );
    for j in 0..bc {
        multiply.push_str(&format!(
            "            let b{j} = coopLoad<coop_mat{n}x{n}<f16, B>>(&ws[(cb + {}u) * LD + kb], LD);\n",
            n * j
        ));
        for i in 0..br {
            declare.push_str(&format!("    var c{i}_{j} = coop_mat{n}x{n}<f32, C>();\n"));
            multiply.push_str(&format!(
                "            c{i}_{j} = coopMultiplyAdd(a{i}, b{j}, c{i}_{j});\n"
            ));
            let (r, c) = (n * i, n * j);
            if shape.tile_kind() != UnitTile::Narrow {
                // The 32 × 64 tile (vr, vc) holds the block where its row and column fall.
                store.push_str(&format!(
                    "            if (rb + {r}u) / 32u == vr && (cb + {c}u) / 64u == vc {{
                coopStoreT(c{i}_{j}, &st[((rb + {r}u) % 32u) * BN + (cb + {c}u) % 64u], BN);
            }}
"
                ));
            } else {
                store.push_str(&format!(
                    "            coopStoreT(c{i}_{j}, &st[(rb + {r}u) * BN + cb + {c}u], BN);\n"
                ));
            }
        }
    }
    multiply.push_str("        }");
    store.push_str(
        "            workgroupBarrier();
            for (var a = 0u; a < 4u; a++) { // unroll
                for (var i = 0u; i < 4u; i++) { // unroll
                    acc[4u * a + i] = st[(4u * tr + a) * BN + tc + 16u * i];
                }
            }",
    );
    let memory = format!(
        "// Tile rows 40 f16 apart: 32 and 8 unused, 80 bytes (a cooperative load's stride is a
// multiple of 16 bytes).
const LD: u32 = 40u;
var<workgroup> ws: array<f16, {}>; // [TN, LD]: each column's group, decoded ({} KiB)
var<workgroup> xs: array<f16, {}>; // [TM, LD]: each row's 32 inputs ({} KiB)
var<workgroup> st: array<f32, 2048>; // [BM, BN]: one 32 × 64 tile's products (8 KiB)

fn put_w(c: u32, k: u32, v: vec4<f32>) {{
    let b = c * LD + 4u * k;
    ws[b] = f16(v.x);
    ws[b + 1u] = f16(v.y);
    ws[b + 2u] = f16(v.z);
    ws[b + 3u] = f16(v.w);
}}

fn put_x(r: u32, k: u32, v: vec4<f32>) {{
    let b = r * LD + 4u * k;
    xs[b] = f16(v.x);
    xs[b + 1u] = f16(v.y);
    xs[b + 2u] = f16(v.z);
    xs[b + 3u] = f16(v.w);
}}",
        outputs * 40,
        outputs * 40 * 2 / 1024,
        rows * 40,
        f64::from(rows * 40 * 2) / 1024.0,
    );
    [
        "enable f16;
enable wgpu_cooperative_matrix;"
            .to_string(),
        memory,
        declare,
        multiply,
        store,
    ]
}

/// Which launch of a long prefill's product a tile kernel is (tile.wgsl's PHASE): the whole walk
/// over the inputs, or, where the launch is split along them ([`Splits`]), a split's partial
/// sums and then their sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TilePhase {
    /// Every input, then the epilogue.
    Whole,
    /// One split's inputs, written as partial sums.
    Part,
    /// The partials added in split order, then the epilogue.
    Sum,
}

impl TilePhase {
    fn code(self) -> u32 {
        match self {
            Self::Whole => 0,
            Self::Part => 1,
            Self::Sum => 2,
        }
    }
}

/// The WGSL of a long prefill's product over matrices of `types` with `epilogue` in `form`
/// (tile.wgsl): 32 rows by 64 outputs a workgroup, out of workgroup memory; `phase` says which
/// launch of it.
pub fn tile_source(
    types: &[GpuType],
    epilogue: Epilogue,
    form: TileForm,
    phase: TilePhase,
) -> String {
    let [enables, shared, blocks, multiply, gather] = tile_parts(form);
    let (group, w_any) = group_parts(false, types.len());
    let (vr, vc) = form.tiles();
    // Threads that copy the inputs: those past the decoding ones, or all 128 where each
    // decodes (tile.wgsl's LOADERS).
    let outputs = vc * TILE_OUTPUTS;
    let loaders = if outputs == 128 { 128 } else { 128 - outputs };
    let text = TILE
        .replace("{{vr}}", &vr.to_string())
        .replace("{{vc}}", &vc.to_string())
        .replace("{{vt}}", &(vr * vc).to_string())
        .replace("{{loaders}}", &loaders.to_string())
        .replace("{{x_each}}", &(vr * TILE_ROWS * 8 / loaders).to_string())
        .replace("{{group}}", &group)
        .replace("{{w_any}}", &w_any)
        .replace("{{x}}", "vec4<f32>")
        .replace("{{enables}}", &enables)
        .replace("{{shared}}", &shared)
        .replace("{{blocks}}", &blocks)
        .replace("{{multiply}}", &multiply)
        .replace("{{gather}}", &gather)
        .replace("{{common}}", &common(types, false))
        .replace("{{dispatch}}", &dispatch(types, "load_group", "rb, g"))
        .replace("{{epilogue}}", &epilogue.code().to_string())
        .replace("{{phase}}", &phase.code().to_string());
    unroll::unroll(&text)
}

/// How a matrix uploaded to `client`'s device multiplies a long prefill ([`Step::long_prefill`])
/// until a tuning table says otherwise ([`Tuning`]): in [`TileForm::Vectors`] on a GPU card; in
/// the mat-vec form (`None`) on a CPU adapter, which runs a workgroup's lanes as vectors and
/// reaches workgroup memory one lane at a time (on lavapipe a 128-token prefill of SmolLM2 ran at
/// 3.3–3.4 tok/s in tiles, 4.2–4.5 in the mat-vec form). The environment's `MARS_GPU_TILES`
/// (`on`, `tall`, `off`, `units`, `units-tall` or `units-wide`) overrides it (`tall`: the
/// f32 tall tile where the device's workgroup memory holds it, else the narrow): a measurement knob, as
/// [`Team::forced`] is, so that the GPU bundle times every form without a rebuild. Read once.
/// `units` takes the shape [`UnitShape::for_subgroup`] gives the device's subgroup size
/// (NVIDIA's 16 × 16 on 32 lanes; a tuning takes the adapter's own list instead,
/// [`adapter_matrix_units`]), `units-tall` and `units-wide` its tall or wide tile where the
/// device's workgroup memory holds it (else the narrow one).
pub fn tiles_for(client: &Client) -> Option<TileForm> {
    match forced_tiles() {
        Some(Forced::Vectors) => Some(TileForm::Vectors),
        Some(Forced::TallVectors) => {
            let room = client.properties().hardware.max_shared_memory_size;
            let tall = TileForm::TallVectors;
            Some(if tall.workgroup_bytes() as usize <= room {
                tall
            } else {
                TileForm::Vectors
            })
        }
        Some(Forced::Units(tile)) => {
            let hardware = &client.properties().hardware;
            let lanes = hardware.plane_size_max;
            let shape = (hardware.plane_size_min == lanes)
                .then(|| UnitShape::for_subgroup(lanes))
                .flatten()
                .unwrap_or(UnitShape::CARD);
            let fits =
                |s: &UnitShape| hardware.max_shared_memory_size >= s.workgroup_bytes() as usize;
            Some(TileForm::Units(
                shape.in_tile(tile).filter(fits).unwrap_or(shape),
            ))
        }
        Some(Forced::Off) => None,
        None => is_card(client).then_some(TileForm::Vectors),
    }
}

/// The span `MARS_GPU_TILE_SPLIT` forces on every tile launch ([`GpuMatrix::set_tile_span`]):
/// `off` unsplit, a count of inputs (rounded down to whole 32-value groups, at least one) that
/// each workgroup walks at most; unset, [`Splits::rule`]. A measurement knob, as
/// `MARS_GPU_TILES` is. Read once.
fn forced_tile_span() -> Option<usize> {
    static FORCED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| match std::env::var("MARS_GPU_TILE_SPLIT").as_deref() {
        Ok("off") => Some(usize::MAX),
        Ok(n) => n.parse::<usize>().ok().map(|n| (n / 32).max(1)),
        Err(_) => None,
    })
}

/// Whether `MARS_GPU_TILES` forces a prefill form ([`tiles_for`]).
pub fn tiles_forced() -> bool {
    forced_tiles().is_some()
}

/// What `MARS_GPU_TILES` forces.
#[derive(Debug, Clone, Copy)]
enum Forced {
    Vectors,
    TallVectors,
    Units(UnitTile),
    Off,
}

/// The prefill form `MARS_GPU_TILES` forces, where it does.
fn forced_tiles() -> Option<Forced> {
    static FORCED: std::sync::OnceLock<Option<Forced>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| match std::env::var("MARS_GPU_TILES").as_deref() {
        Ok("on") => Some(Forced::Vectors),
        Ok("tall") => Some(Forced::TallVectors),
        Ok("units") => Some(Forced::Units(UnitTile::Narrow)),
        Ok("units-tall") => Some(Forced::Units(UnitTile::Tall)),
        Ok("units-wide") => Some(Forced::Units(UnitTile::Wide)),
        Ok("off") => Some(Forced::Off),
        _ => None,
    })
}

/// The shape [`TileForm::Units`] takes on `adapter`, where it has what the form needs: wgpu's
/// cooperative matrices (on Vulkan `VK_KHR_cooperative_matrix`; Metal's simdgroup matrices)
/// of f16 products into f32 on subgroups, 16 × 16 × 16 or else 8 × 8 × 8, f16 in shaders, and
/// one subgroup size that a tile divides among ([`UnitShape::new`]; `fixed_lanes`); then the
/// same blocks in the tall and the wide tile ([`UnitTile`]) where the adapter's workgroup
/// memory holds them (a device opened with the adapter's limits, as CubeCL
/// and `open_without_robustness` open theirs natively). A tuning times the matrix units only
/// where there are some.
pub fn adapter_matrix_units(adapter: &cubecl::wgpu::wgpu::Adapter) -> Vec<UnitShape> {
    let Some(shape) = adapter_narrow_units(adapter) else {
        return Vec::new();
    };
    let room = adapter.limits().max_compute_workgroup_storage_size;
    UnitTile::ALL
        .into_iter()
        .filter_map(|tile| shape.in_tile(tile))
        .filter(|s| s.workgroup_bytes() <= room)
        .collect()
}

/// [`adapter_matrix_units`]'s narrow shape, where the adapter has one.
fn adapter_narrow_units(adapter: &cubecl::wgpu::wgpu::Adapter) -> Option<UnitShape> {
    use cubecl::wgpu::wgpu;
    let info = adapter.get_info();
    let features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16;
    let apple_silicon = cfg!(all(target_vendor = "apple", target_arch = "aarch64"));
    let metal = info.backend == wgpu::Backend::Metal;
    let lanes = fixed_lanes(
        info.subgroup_min_size,
        info.subgroup_max_size,
        metal && apple_silicon,
    )?;
    if !adapter.features().contains(features) {
        return None;
    }
    let offers = |n: u32| {
        adapter.cooperative_matrix_properties().iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (n, n, n)
                && p.ab_type == wgpu::CooperativeScalarType::F16
                && p.cr_type == wgpu::CooperativeScalarType::F32
        })
    };
    [16, 8]
        .into_iter()
        .filter(|&n| offers(n))
        .find_map(|n| UnitShape::new(n, lanes))
}

/// The one subgroup size a kernel written for it can count on: the adapter's where its least
/// and most agree; 32 on Apple silicon's GPUs under Metal, where wgpu reports 4..64 for every
/// device but the simdgroups are 32 wide (CubeCL takes 32 there too); else none.
fn fixed_lanes(min: u32, max: u32, apple_gpu: bool) -> Option<u32> {
    if apple_gpu {
        Some(32)
    } else {
        (min == max).then_some(min)
    }
}

/// The WGSL of the embedding lookup for `ty`.
pub fn embed_source(ty: GpuType) -> String {
    unroll::unroll(
        &EMBED
            .replace("{{common}}", &common(&[ty], false))
            .replace("{{ids_at}}", &IDS.to_string()),
    )
}

/// A stable small code per type, for kernel cache keys.
const fn type_code(ty: GpuType) -> u8 {
    let GpuType::Blocks(ty) = ty else {
        return 10;
    };
    match ty {
        WeightType::Q8_0 => 0,
        WeightType::Q4_0 => 1,
        WeightType::Q4_1 => 2,
        WeightType::Q5_0 => 3,
        WeightType::Q5_1 => 4,
        WeightType::Q4K => 5,
        WeightType::Q5K => 6,
        WeightType::Q6K => 7,
        WeightType::F16 => 8,
        WeightType::BF16 => 9,
    }
}

/// Every kernel of this module with what it is compiled for: one pipeline per distinct value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Shader {
    /// The matmul over matrices of these types.
    Matmul {
        /// Each matrix's type, binding 0 first (shared: a launch clones it).
        types: std::sync::Arc<[GpuType]>,
        /// Rows a workgroup holds ([`row_bound`]).
        rows: usize,
        /// How partial sums meet.
        reduce: Reduce,
        /// What the sums become.
        epilogue: Epilogue,
        /// Threads an output.
        team: Team,
        /// Outputs a team.
        fan: Fan,
        /// The activations it multiplies.
        acts: Acts,
        /// The RMSNorm before it folded in (f32 activations: [`MatrixGroup::with_norm`]).
        normed: bool,
    },
    /// Rows of activations quantized to 8 bits for [`Acts::Q8`] (quant.wgsl).
    Quant,
    /// A long prefill's product over matrices of these types (tile.wgsl).
    Tile {
        /// Each matrix's type, binding 0 first.
        types: std::sync::Arc<[GpuType]>,
        /// What the sums become.
        epilogue: Epilogue,
        /// How the tiles are multiplied ([`TileForm::Vectors`] for [`TilePhase::Sum`], which
        /// multiplies nothing).
        form: TileForm,
        /// Which launch of the product.
        phase: TilePhase,
    },
    /// The embedding lookup.
    Embed(GpuType),
    /// RMSNorm of rows, and with `q8` the normed rows quantized for the product after it.
    Norm {
        /// Whether it writes 8-bit activations too ([`Norm::run_q8`]).
        q8: bool,
    },
    /// RoPE and the cache write, with Qwen3's per-head norm or without.
    Rope {
        /// Whether the heads are RMS-normalised first.
        head_norm: bool,
        /// How the cache stores values.
        kv: KvType,
    },
    /// Attention over the cache.
    Attention {
        /// How the cache stores values.
        kv: KvType,
        /// One workgroup a 256-key block, each writing its partial, not one a (head, row).
        split: bool,
        /// Values a head (a multiple of 4, at most 256).
        head_dim: usize,
        /// RoPE and the cache write folded in ([`Attention::with_rope`]).
        roped: bool,
    },
    /// A split attention's partials folded into its outputs.
    AttentionMerge,
    /// A launch of the logits' top-2 summary.
    Summary(RowPass),
    /// A tree drafter's rows reduced to their best `c`.
    Top {
        /// Values kept a row.
        c: usize,
        /// Which of its launches.
        pass: RowPass,
    },
    /// A tree's accepted rows moved into place.
    Copy,
    /// A buffer copied whole.
    Clone,
    /// A buffer read once at full width (a measurement's ceiling).
    Read,
    /// A step's linked ids taken from a summary chain.
    Link,
}

impl Shader {
    /// The kernel's WGSL, its marked loops unrolled (`unroll.rs`).
    pub fn source(&self) -> String {
        unroll::unroll(&self.template())
    }

    /// The kernel's WGSL as written, its templates filled.
    fn template(&self) -> String {
        match self {
            Self::Matmul {
                types,
                rows,
                reduce,
                epilogue,
                team,
                fan,
                acts,
                normed,
            } => matmul_source_with(
                types,
                *rows,
                *reduce,
                *epilogue,
                (*team, *fan, *acts),
                *normed,
            ),
            Self::Quant => QUANT.replace("{{q8}}", &q8_store(1)),
            Self::Tile {
                types,
                epilogue,
                form,
                phase,
            } => tile_source(types, *epilogue, *form, *phase),
            Self::Embed(ty) => embed_source(*ty),
            Self::Norm { q8 } => {
                let (decl, rows) = if *q8 {
                    (q8_store(5), NORM_Q8)
                } else {
                    (String::new(), "")
                };
                NORM.replace("{{q8}}", &decl).replace("{{q8_rows}}", rows)
            }
            Self::Rope { head_norm, kv } => ROPE
                .replace("{{head_norm}}", &head_norm.to_string())
                .replace("{{kv}}", kv_store(*kv)),
            Self::Attention {
                kv,
                split,
                head_dim,
                roped,
            } => ATTENTION
                .replace(
                    "{{keys}}",
                    if *roped {
                        ATTENTION_ROPE
                    } else {
                        ATTENTION_KEYS
                    },
                )
                .replace("{{kv}}", kv_load(*kv))
                .replace("{{split}}", &split.to_string())
                .replace("{{hd4}}", &(head_dim / 4).to_string())
                .replace("{{parts}}", &(256 / (head_dim / 4).max(1)).to_string())
                .replace("{{fold}}", ATTENTION_FOLD),
            Self::AttentionMerge => ATTENTION_MERGE.replace("{{fold}}", ATTENTION_FOLD),
            Self::Summary(pass) => match pass {
                RowPass::Rank => SUMMARY_RANK,
                RowPass::Sum => SUMMARY_SUM,
                RowPass::End => SUMMARY_END,
            }
            .replace("{{common}}", SUMMARY)
            .replace("{{summaries_at}}", &(LINKED + 2).to_string())
            .replace("{{ids_at}}", &IDS.to_string())
            .replace("{{summary_words}}", &SUMMARY_WORDS.to_string()),
            Self::Top { c, pass } => {
                let threads = layer::top_threads(*c);
                let (stage, p_binding, part_binding) = match pass {
                    RowPass::Rank => (TOP_RANK, 1, 2),
                    RowPass::Sum => (TOP_SUM, 1, 2),
                    RowPass::End => (TOP_END, 2, 3),
                };
                stage
                    .replace("{{common}}", TOP)
                    .replace("{{p_binding}}", &p_binding.to_string())
                    .replace("{{part_binding}}", &part_binding.to_string())
                    .replace("{{c}}", &c.to_string())
                    .replace("{{threads}}", &threads.to_string())
                    .replace("{{cells}}", &(threads * c.max(&1)).to_string())
            }
            Self::Copy => COPY.to_string(),
            Self::Clone => CLONE.to_string(),
            Self::Read => READ.to_string(),
            Self::Link => LINK
                .replace("{{ids_at}}", &IDS.to_string())
                .replace("{{linked_at}}", &LINKED.to_string())
                .replace("{{summary_words}}", &SUMMARY_WORDS.to_string()),
        }
    }

    /// The bindings the kernel writes, a bit each (bit i: binding i; every other binding it
    /// only reads). A launch declares them to CubeCL (`launch`), whose runtime then does the
    /// work it does for a written buffer (claiming it for a failure, then releasing the claim)
    /// for these alone: it cannot see into a hand-written kernel, and takes every binding it
    /// is not told about as written (~0.8k instructions a binding; 14 % of a launch's work in a
    /// one-row forward, counted under callgrind on wgpu's no-op backend: `bench.sh gpu-host`).
    /// The shaders test holds each kernel's mask to what naga finds its WGSL writes.
    pub fn writes(&self) -> u32 {
        match self {
            // y, after x, after a weight binding a matrix (group.wgsl).
            Self::Matmul { types, .. } | Self::Tile { types, .. } => 1 << (types.len() + 1),
            // xq.
            Self::Quant => 1 << 1,
            // out.
            Self::Embed(_) => 1 << 2,
            // y, and xq where it quantizes.
            Self::Norm { q8 } => (1 << 2) | if *q8 { 1 << 5 } else { 0 },
            // qo, kv.
            Self::Rope { .. } => (1 << 1) | (1 << 2),
            // out, and the cache where it ropes the pass's keys into it.
            Self::Attention { roped, .. } => (1 << 2) | if *roped { 1 << 1 } else { 0 },
            // out.
            Self::AttentionMerge => 1 << 1,
            // part; the summary rows.
            Self::Summary(RowPass::Rank | RowPass::Sum) => 1 << 2,
            Self::Summary(RowPass::End) => 1 << 1,
            Self::Top {
                pass: RowPass::Rank | RowPass::Sum,
                ..
            } => 1 << 2,
            Self::Top {
                pass: RowPass::End, ..
            } => 1 << 1,
            // kv (rows moved within it).
            Self::Copy => 1,
            // dst, out.
            Self::Clone | Self::Read => 1 << 1,
            // the step's ids.
            Self::Link => 1,
        }
    }

    /// Its kind, as the counters name it.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Matmul { .. } | Self::Tile { .. } => Kind::Matmul,
            Self::Quant => Kind::Quantize,
            Self::Embed(_) => Kind::Embed,
            Self::Norm { .. } => Kind::Norm,
            Self::Rope { .. } => Kind::Rope,
            Self::Attention { .. } | Self::AttentionMerge => Kind::Attention,
            Self::Summary(_) | Self::Top { .. } => Kind::Summary,
            Self::Copy | Self::Clone | Self::Link | Self::Read => Kind::Copy,
        }
    }

    /// A compact key for CubeCL's compilation cache.
    fn key(&self) -> (u8, u64) {
        let code = match self {
            Self::Matmul {
                types,
                rows,
                reduce,
                epilogue,
                team,
                fan,
                acts,
                normed,
            } => {
                let mut k = 0u64;
                for &ty in types.iter() {
                    k = k * 16 + 1 + u64::from(type_code(ty));
                }
                // 8-bit activations quantized in the product in bit 18, wide teams' loads in
                // bit 17, 8-bit activations in bit 16, a folded norm in bit 15, lane teams'
                // loads in bit 14, the fan in bit 13, rows ≤ 16 in bits 8..13, a
                // whole-workgroup team in bit 7, lanes ≤ 16 in bits 2..7.
                (k << 19)
                    | (u64::from(*acts == Acts::Q8Own) << 18)
                    | (u64::from(team.wide()) << 17)
                    | (u64::from(*acts == Acts::Q8) << 16)
                    | (u64::from(*normed) << 15)
                    | (u64::from(*fan == Fan::Four) << 13)
                    | ((*rows as u64) << 8)
                    | (u64::from(team.threads() == 64) << 7)
                    | (u64::from(team.lanes()) << 14)
                    | (u64::from(reduce.lanes()) << 2)
                    | u64::from(epilogue.code())
            }
            Self::Tile {
                types,
                epilogue,
                form,
                phase,
            } => {
                // Bit 15 apart from every matmul key (bit 15 is never set in one).
                let mut k = 0u64;
                for &ty in types.iter() {
                    k = k * 16 + 1 + u64::from(type_code(ty));
                }
                (k << 20)
                    | (u64::from(phase.code()) << 16)
                    | (1 << 15)
                    | match form {
                        TileForm::Vectors => 0,
                        // No units flag (bit 2); the tall tile's code in bits 18 and 19.
                        TileForm::TallVectors => UnitTile::Tall.code() << 18,
                        // The shape in bits 2..14: a flag, then the block's side and the lanes;
                        // the tile in bits 18 and 19 (the phase takes bits 16 and 17).
                        TileForm::Units(shape) => {
                            1 << 2
                                | (u64::from(shape.size()) << 3)
                                | (u64::from(shape.subgroup()) << 8)
                                | (shape.tile_kind().code() << 18)
                        }
                    }
                    | u64::from(epilogue.code())
            }
            Self::Embed(ty) => u64::from(type_code(*ty)),
            Self::Rope { head_norm, kv } => {
                u64::from(*head_norm) | (u64::from(*kv == KvType::F32) << 1)
            }
            Self::Attention {
                kv,
                split,
                head_dim,
                roped,
            } => {
                // head_dim ≤ 256 in bits 2..11.
                u64::from(*kv == KvType::F32)
                    | (u64::from(*split) << 1)
                    | ((*head_dim as u64) << 2)
                    | (u64::from(*roped) << 12)
            }
            Self::AttentionMerge => 4,
            Self::Norm { q8 } => u64::from(*q8),
            Self::Copy | Self::Quant => 0,
            Self::Summary(pass) => *pass as u64,
            // Past the summary's three.
            Self::Top { c, pass } => 3 + 3 * *c as u64 + *pass as u64,
            Self::Clone => 1,
            Self::Link => 2,
            Self::Read => 3,
        };
        (self.kind() as u8, code)
    }
}

/// rope.wgsl's cache binding and `store2`, which writes dimensions 2w and 2w + 1 of the cache
/// row starting at value `row`.
fn kv_store(kv: KvType) -> &'static str {
    match kv {
        KvType::F16 => {
            "@group(0) @binding(2) var<storage, read_write> kv: array<u32>; // [2, n_kv, capacity, head_dim / 2]: f16 pairs
fn store2(row: u32, w: u32, v: vec2<f32>) {
    kv[row / 2u + w] = pack2x16float(v);
}"
        }
        KvType::F32 => {
            "@group(0) @binding(2) var<storage, read_write> kv: array<f32>; // [2, n_kv, capacity, head_dim]
fn store2(row: u32, w: u32, v: vec2<f32>) {
    kv[row + 2u * w] = v.x;
    kv[row + 2u * w + 1u] = v.y;
}"
        }
    }
}

/// attention.wgsl's cache binding, a cache word of four values (`KvWord`, `kv_word` to make
/// one, `kv_values` to read one: RoPE folded in, attention_rope.wgsl, writes them) and `kv4`,
/// which reads dimensions 4i .. 4i + 4 of the cache (i counted in fours from the buffer's
/// start).
fn kv_load(kv: KvType) -> &'static str {
    match kv {
        KvType::F16 => {
            "@group(0) @binding(1) var<storage, read_write> kv: array<vec2<u32>>; // [2, n_kv, capacity, head_dim / 4]: 4 f16
alias KvWord = vec2<u32>;
fn kv_word(v: vec4<f32>) -> KvWord {
    return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
}
fn kv_values(w: KvWord) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
fn kv4(i: u32) -> vec4<f32> {
    return kv_values(kv[i]);
}"
        }
        KvType::F32 => {
            "@group(0) @binding(1) var<storage, read_write> kv: array<vec4<f32>>; // [2, n_kv, capacity, head_dim / 4]
alias KvWord = vec4<f32>;
fn kv_word(v: vec4<f32>) -> KvWord {
    return v;
}
fn kv_values(w: KvWord) -> vec4<f32> {
    return w;
}
fn kv4(i: u32) -> vec4<f32> {
    return kv_values(kv[i]);
}"
        }
    }
}

/// How every kernel of this module is compiled: unchecked, so that wgpu does not bound each
/// loop with a 64-bit counter and a second exit (naga's `force_loop_bounding`, which CubeCL asks
/// for in its checked mode: an emulated 64-bit decrement and a branch an iteration in every
/// loop, the matmul's and attention's hot ones included, and an exit that keeps a driver from
/// unrolling them; gfx-rs/wgpu#7698 reports a compute pass going from 0.1 to 10 ms with it).
/// What it guards against, a loop that never ends, these kernels cannot reach: every loop
/// counts up to a bound the host validated as a buffer size, far from u32's end. Bounds checks
/// stay off either way (CubeCL turns wgpu's off for WGSL). `MARS_GPU_LOOP_BOUND=on` compiles
/// them checked: a measurement knob, so that the GPU bundle times both. Read once.
fn mode() -> ExecutionMode {
    static MODE: std::sync::OnceLock<ExecutionMode> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("MARS_GPU_LOOP_BOUND").as_deref() {
        Ok("on") => ExecutionMode::Checked,
        _ => ExecutionMode::Unchecked,
    })
}

fn definition() -> cubecl::prelude::KernelDefinition {
    // A hand-written kernel has no IR; the definition only keys the compilation cache.
    let settings = KernelSettings::new(Dim3::new_single(), mode(), AddressType::U32);
    cubecl::prelude::KernelDefinition {
        body: Scope::root(settings.clone()),
        settings,
        info: Default::default(),
    }
}

impl cubecl::prelude::KernelMetadata for Shader {
    /// What CubeCL's profile labels the kernel by (then `_` and a hash of its id): what it
    /// computes, a product by its epilogue, so that a profile tells q | k | v (store) from o and
    /// down (add) and gate | up (swiglu) without counting launches (tests/bench/gpu-profile.sh).
    fn name(&self) -> &'static str {
        let by_epilogue = |e: &Epilogue, names: [&'static str; 3]| match e {
            Epilogue::Store => names[0],
            Epilogue::Add => names[1],
            Epilogue::SwiGlu => names[2],
        };
        match self {
            Self::Matmul { epilogue, .. } => {
                by_epilogue(epilogue, ["matmul_store", "matmul_add", "matmul_swiglu"])
            }
            Self::Tile {
                phase: TilePhase::Part,
                ..
            } => "tile_part",
            Self::Tile {
                epilogue,
                phase: TilePhase::Sum,
                ..
            } => by_epilogue(
                epilogue,
                ["tile_sum_store", "tile_sum_add", "tile_sum_swiglu"],
            ),
            Self::Tile { epilogue, .. } => {
                by_epilogue(epilogue, ["tile_store", "tile_add", "tile_swiglu"])
            }
            Self::Quant => "quantize",
            Self::Embed(_) => "embed",
            Self::Norm { .. } => "norm",
            Self::Rope { .. } => "rope",
            Self::Attention { roped: true, .. } => "attention_roped",
            Self::Attention { .. } => "attention",
            Self::AttentionMerge => "attention_merge",
            Self::Summary(_) => "summary",
            Self::Top { .. } => "top",
            Self::Copy => "copy",
            Self::Clone => "clone",
            Self::Read => "read",
            Self::Link => "link",
        }
    }

    fn id(&self) -> KernelId {
        KernelId::new::<Self>().info(self.key()).mode(mode())
    }

    fn address_type(&self) -> ElemType {
        ElemType::UInt(UIntKind::U32)
    }
}

impl CubeKernel for Shader {
    fn define(&self) -> cubecl::prelude::KernelDefinition {
        definition()
    }

    fn source(&self) -> Option<PrecompiledSource> {
        Some(PrecompiledSource {
            source: Shader::source(self),
            entrypoint_name: "main".to_string(),
            lang: "wgsl",
        })
    }
}

/// A launch's buffers, binding 0 first.
#[derive(Debug, Default)]
pub(crate) struct Bindings(Vec<Handle>);

impl Bindings {
    pub(crate) fn new() -> Self {
        Self(Vec::with_capacity(8))
    }

    /// `handle` as the next binding.
    pub(crate) fn with(mut self, handle: &Handle) -> Self {
        self.0.push(handle.clone());
        self
    }

    /// `handles` as the next bindings, in order.
    pub(crate) fn with_all<'a>(mut self, handles: impl IntoIterator<Item = &'a Handle>) -> Self {
        self.0.extend(handles.into_iter().cloned());
        self
    }
}

/// Launches `shader` (counted): recorded straight into wgpu where the client launches
/// directly ([`direct`]), else through CubeCL, telling it which bindings the kernel writes.
fn launch(client: &Client, shader: Shader, count: CubeCount, bindings: Bindings) {
    // Its key once: a product's folds its types and every field of its form.
    let key = shader.key();
    counted_launch(shader.kind(), key);
    let refused = match direct::launch(client, &shader, key, &count, &bindings.0) {
        direct::Launched::Direct | direct::Launched::Dropped => return,
        direct::Launched::ToCubecl => None,
        direct::Launched::Refused(error) => Some(error),
    };
    let writes = shader.writes();
    // Where wgpu refused the pipeline, what CubeCL makes of it is checked on the outputs: a
    // launch neither makes would otherwise leave them as they were, and the direct launches
    // that read them next (CubeCL's error travels only with its own buffers) would carry on
    // with that as data (a forced matrix-unit tile on a device without them: empty text at
    // 3x the speed, 2026-12-07).
    let name = cubecl::prelude::KernelMetadata::name(&shader);
    let written: Vec<Handle> = match refused {
        Some(_) => (bindings.0.iter().enumerate())
            .filter(|(i, _)| writes >> i & 1 == 1)
            .map(|(_, h)| h.clone())
            .collect(),
        None => Vec::new(),
    };
    let args =
        bindings
            .0
            .into_iter()
            .enumerate()
            .fold(KernelArguments::new(), |args, (i, handle)| {
                let io = match writes >> i & 1 {
                    1 => BufferIOAttr::ReadWrite,
                    _ => BufferIOAttr::ReadOnly,
                };
                args.with_buffer_io(handle.binding(), io)
            });
    client.launch(Box::new(shader), count, args);
    // Natively CubeCL answers at once (its launch validates the pipeline it makes). In the
    // browser a kernel wgpu refused is never CubeCL's (`direct::Launched::Dropped`).
    #[cfg(not(target_family = "wasm"))]
    if let Some(error) = refused
        && let Err(cubecl) = client.check(written.iter())
    {
        // wgpu's error says why; CubeCL's repeats it at length, so its first line only.
        let cubecl = cubecl.to_string();
        let cubecl = cubecl.lines().next().unwrap_or_default();
        direct::fail(client, name, format!("{error} (CubeCL's launch: {cubecl})"));
    }
    #[cfg(target_family = "wasm")]
    let _ = (refused, name, written);
}

/// A new GPU buffer holding `bytes` (counted as an upload).
pub fn upload(client: &Client, bytes: &[u8]) -> Handle {
    counted_upload(bytes.len());
    client.create_from_slice(bytes)
}

/// [`upload`] of u32 words.
pub fn upload_words(client: &Client, words: &[u32]) -> Handle {
    upload(client, &u32_bytes(words))
}

/// [`upload`] of f32 values.
pub fn upload_f32(client: &Client, values: &[f32]) -> Handle {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    upload(client, &bytes)
}

/// A buffer of `bytes` bytes (at least 4) for outputs that leave with a pass (its logits,
/// their summaries), its contents undefined: a kept one where the client launches directly
/// ([`direct::kept_output`]; free again once the `Arc` is dropped), so that a pass's launches
/// find the bind groups of the last pass's, else a new one.
pub fn output_buffer(client: &Client, bytes: usize) -> std::sync::Arc<Handle> {
    direct::kept_output(client, bytes)
        .unwrap_or_else(|| std::sync::Arc::new(client.empty(bytes.max(4))))
}

/// [`KernelError::Refused`] for a launch since the last read that neither wgpu nor CubeCL
/// could make (its outputs hold nothing it computed).
fn refusal(client: &Client) -> Result<()> {
    match direct::take_failure(client) {
        Some((kernel, reason)) => Err(KernelError::Refused {
            kernel: kernel.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// CubeCL's error for a read, as ours: [`KernelError::Refused`] where every failure behind it
/// is a kernel the device would not build (CubeCL's `is_refusal`: a launch that went through
/// CubeCL under `MARS_GPU_LAUNCH=cubecl`, so the error names no kernel of ours), so that a
/// tuning drops the form as it drops one refused on the direct way; [`KernelError::Device`]
/// for anything else (a fault, memory, a lost device), which ends it.
fn read_failed(error: cubecl_runtime::server::ServerError) -> KernelError {
    match error.is_refusal() {
        true => KernelError::Refused {
            kernel: "(a launch through CubeCL)".to_string(),
            reason: error.to_string(),
        },
        false => KernelError::Device(format!("{error:?}")),
    }
}

/// Reads `handle` back (counted), without blocking: what the browser needs.
///
/// # Errors
/// [`KernelError::Device`] when the device cannot return the data; [`KernelError::Refused`]
/// when a launch since the last read could not be made (a kernel the device would not build).
pub async fn read(client: &Client, handle: Handle) -> Result<Vec<u8>> {
    direct::settle(client);
    let read = client.read_async(vec![handle]).await;
    // In the browser a refusal arrives later than the launch: the answers to what was
    // recorded are awaited here (already in, as the data came after them), every one of them,
    // so that none is left to fail a later read.
    #[cfg(target_family = "wasm")]
    direct::answers(client).await;
    refusal(client)?;
    let bytes = read.map_err(read_failed)?;
    let bytes: Vec<u8> = bytes
        .into_iter()
        .next()
        .map(|b| b.to_vec())
        .unwrap_or_default();
    counted_read(bytes.len());
    Ok(bytes)
}

/// Reads `handle` back (counted), blocking until the GPU is done: native code only (the
/// browser cannot block; it uses [`read`]).
///
/// # Errors
/// [`KernelError::Device`] when the device cannot return the data; [`KernelError::Refused`]
/// when a launch since the last read could not be made (a kernel the device would not build).
#[cfg(not(target_family = "wasm"))]
pub fn read_blocking(client: &Client, handle: Handle) -> Result<Vec<u8>> {
    direct::settle(client);
    refusal(client)?;
    let bytes = client.read_one(handle).map_err(read_failed)?.to_vec();
    counted_read(bytes.len());
    Ok(bytes)
}

/// The step's words on the GPU (one upload), with its row counts.
#[derive(Debug, Clone)]
pub struct StepBuffer {
    /// The step's words: a kept buffer where the client launches directly
    /// ([`direct::kept_step`]), so a pass's bind groups are the last pass's.
    handle: std::sync::Arc<Handle>,
    rows: usize,
    most_visible: usize,
    tail: usize,
    capacity: usize,
    link: Link,
    long_prefill: bool,
}

impl StepBuffer {
    /// Uploads `step`.
    pub fn new(client: &Client, step: &Step) -> Self {
        let bytes = u32_bytes(step.words());
        let handle = match direct::kept_step(client, &bytes) {
            Some(kept) => {
                counted_upload(bytes.len());
                kept
            }
            None => std::sync::Arc::new(upload(client, &bytes)),
        };
        Self {
            handle,
            rows: step.rows(),
            most_visible: step.most_visible(),
            tail: step.tail(),
            capacity: step.capacity(),
            link: step.link(),
            long_prefill: step.is_long_prefill(),
        }
    }

    /// Its place in a summary chain ([`Link`]; all zero without one).
    pub fn link(&self) -> Link {
        self.link
    }

    /// The cache capacity its kernels address.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Rows of the forward.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Rows that get logits.
    pub fn tail(&self) -> usize {
        self.tail
    }

    /// The most keys a row sees ([`Step::most_visible`]).
    pub fn most_visible(&self) -> usize {
        self.most_visible
    }

    /// Whether it is a part of a long prefill ([`Step::long_prefill`]).
    pub fn is_long_prefill(&self) -> bool {
        self.long_prefill
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}

/// Which of the step's rows a product runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Every row of the forward.
    All,
    /// The last rows, those that get logits.
    Tail,
}

impl Rows {
    fn count(self, step: &StepBuffer) -> usize {
        match self {
            Self::All => step.rows,
            Self::Tail => step.tail,
        }
    }
}

/// Output-row ranges that split a `[rows, cols]` matrix of `ty` into parts of at most
/// `max_bytes` each (plus the word of padding every part carries), so that each part fits one
/// storage binding. One part when the whole matrix fits.
///
/// # Errors
/// [`KernelError::TooLarge`] when one row alone does not fit, [`KernelError::RaggedRow`] when
/// `cols` is not a whole number of blocks.
pub fn split_rows(
    ty: impl Into<GpuType>,
    rows: usize,
    cols: usize,
    max_bytes: u64,
) -> Result<Vec<Range<usize>>> {
    let ty = ty.into();
    let row_bytes = gpu_row_bytes(ty, cols)?;
    let usable = usize::try_from(max_bytes.saturating_sub(4)).unwrap_or(usize::MAX);
    let per_part = usable / row_bytes.max(1);
    if per_part == 0 {
        return Err(KernelError::TooLarge {
            what: format!("a row of {cols} {ty:?} values"),
            bytes: row_bytes as u64,
            limit: max_bytes,
        });
    }
    Ok((0..rows)
        .step_by(per_part)
        .map(|start| start..(start + per_part).min(rows))
        .collect())
}

fn row_bytes(ty: GpuType, cols: usize) -> Result<usize> {
    if cols == 0 || !cols.is_multiple_of(ty.block_values()) {
        return Err(KernelError::RaggedRow {
            cols,
            block: ty.block_values(),
        });
    }
    Ok(cols / ty.block_values() * ty.block_bytes())
}

/// Bytes of a row of `cols` values of `ty` in GPU memory ([`GpuType::gpu_row_bytes`]): the
/// row stride the kernels read.
///
/// # Errors
/// [`KernelError::RaggedRow`] when `cols` is not a whole number of blocks.
pub fn gpu_row_bytes(ty: GpuType, cols: usize) -> Result<usize> {
    Ok(ty.gpu_row_bytes(row_bytes(ty, cols)? / ty.block_bytes()))
}

/// Spare bytes a part's buffer needs for [`padded_words`]' padding (up to 3 to a whole word,
/// then one word).
pub const PART_PAD: usize = 8;

/// Block bytes as the kernels read them: the bytes, zero-padded to a whole number of u32 words
/// plus one word. The word was the window an unaligned read of a 4k + 2-byte block took past a
/// part's last byte; those blocks are held in runs now, read in whole words, and the word stays
/// only because the parts' sizes and the memory check count it (8 bytes a part).
pub fn padded_words(blocks: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() + PART_PAD);
    out.extend_from_slice(blocks);
    out.resize(blocks.len().div_ceil(4) * 4 + 4, 0);
    out
}

/// One part of a weight matrix on the GPU: its blocks (see [`padded_words`]) and the output
/// rows of the whole matrix it holds.
#[derive(Debug, Clone)]
pub struct GpuPart {
    /// The part's padded block bytes.
    pub weights: Handle,
    /// The output rows of the whole matrix this part holds.
    pub rows: Range<usize>,
    /// The embedding lookup's parameters for this part, made at upload.
    embed_params: Handle,
}

/// One matmul launch: its weight bindings, their types, parameters made once, and its
/// workgroups.
#[derive(Debug, Clone)]
struct MatmulLaunch {
    weights: Vec<Handle>,
    types: std::sync::Arc<[GpuType]>,
    params: Handle,
    groups: usize,
    /// Its long-prefill form (`Rows::All` only).
    tiled: Option<Tiled>,
    rows: Rows,
    team: Team,
    fan: Fan,
    acts: Acts,
    /// How it multiplies a long prefill: in tiles of this form, or (`None`) as any other step.
    prefill: Option<TileForm>,
}

/// A launch's long-prefill form (tile.wgsl): its parameters with the tiles' workgroups (and the
/// groups a split walks, word 19), their count, its outputs and how it splits its inputs.
#[derive(Debug, Clone)]
struct Tiled {
    params: Handle,
    groups: usize,
    outputs: usize,
    splits: Splits,
}

/// Words of parameters before the values in a matmul's constants (group.wgsl's `p`, which
/// takes it as its `PARAM_WORDS`): whole vec4s, so that the values start on one.
const PARAM_WORDS: usize = 20;
const _: () = assert!(PARAM_WORDS.is_multiple_of(4));

/// A matmul launch's constants (group.wgsl's `p`, bound as vec4s of words): its parameter
/// `words` padded with zeros to [`PARAM_WORDS`], then the group's `values` (biases, then a
/// folded norm's weights, [`norm_values`]) as f32 bits, padded with zeros to whole vec4s.
///
/// # Errors
/// [`KernelError::Shape`] for more than [`PARAM_WORDS`] words.
fn constants(mut words: Vec<u32>, values: Option<&[f32]>) -> Result<Vec<u32>> {
    if words.len() > PARAM_WORDS {
        return Err(KernelError::Shape {
            what: "a matmul's parameter words",
            expected: PARAM_WORDS,
            found: words.len(),
        });
    }
    words.resize(PARAM_WORDS, 0);
    words.extend(values.unwrap_or_default().iter().map(|v| v.to_bits()));
    words.resize(words.len().next_multiple_of(4), 0);
    Ok(words)
}

/// A group's constant values: its biases, then where a norm is folded in its weights `g`
/// starting on a whole vec4 (the biases padded with zeros to a multiple of 4), so that a lane
/// loads four of them at once (matmul.wgsl's `norm_weights`: on NVIDIA's NAK a lane's 32
/// weights of g a step were 32 four-byte loads, and held 56 registers more); with where `g`
/// starts among them (0 without a norm). `None` where there are neither.
fn norm_values(bias: Option<&[f32]>, g: Option<&[f32]>) -> (Option<Vec<f32>>, usize) {
    let mut values = bias.map(<[f32]>::to_vec);
    let mut at = 0;
    if let Some(g) = g {
        let v = values.get_or_insert_with(Vec::new);
        v.resize(v.len().next_multiple_of(4), 0.0);
        at = v.len();
        v.extend_from_slice(g);
    }
    (values, at)
}

/// What the matmul reads from its parameter buffer (matmul.wgsl): the matrices' output ranges
/// and row bytes, where its outputs go, and which of the step's row counts it runs over.
struct MatmulParams {
    n_in: usize,
    y_stride: usize,
    y_offset: usize,
    outputs: usize,
    groups: usize,
    rows: Rows,
    bias: bool,
    /// The first output of matrices 1 and 2 (`outputs` where there are fewer).
    firsts: [usize; 2],
    row_bytes: [usize; 3],
    /// The byte where each matrix's first row starts in its binding.
    bases: [usize; 3],
    /// Where a folded norm's weights start among the constants' values, and its epsilon's bits.
    norm: (usize, u32),
}

impl MatmulParams {
    fn words(&self) -> Result<Vec<u32>> {
        let (gx, _) = grid(self.groups);
        let values = [
            self.n_in,
            self.y_stride,
            self.y_offset,
            self.outputs,
            gx,
            usize::from(self.rows == Rows::Tail),
            usize::from(self.bias),
            self.firsts[0],
            self.firsts[1],
            self.row_bytes[0],
            self.row_bytes[1],
            self.row_bytes[2],
            NEG_INF_BITS as usize,
            self.bases[0],
            self.bases[1],
            self.bases[2],
            // The logit limit applies to the output head alone: the product over the logit
            // rows.
            usize::from(self.rows == Rows::Tail),
            self.norm.0,
            self.norm.1 as usize,
        ];
        let words = values
            .iter()
            .map(|&v| {
                u32::try_from(v).map_err(|_| KernelError::Shape {
                    what: "a matmul parameter (at most u32::MAX)",
                    expected: u32::MAX as usize,
                    found: v,
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(words)
    }
}

impl MatmulLaunch {
    /// Enqueues the product of the step's rows of `x` into `y` (and the group's biases):
    /// `x` is f32 rows (`.0`), or the same rows quantized (`.1`, for [`Acts::Q8`] outside a
    /// long prefill's tiles: [`MatrixGroup::run`] made them).
    /// `normed`: `x` holds the rows before the group's folded norm ([`MatrixGroup::run_normed`]
    /// checked that this step multiplies f32 rows in the mat-vec form).
    #[allow(clippy::too_many_arguments)] // one launch's bindings
    fn run(
        &self,
        client: &Client,
        (reduce, epilogue, normed): (Reduce, Epilogue, bool),
        x: (&Handle, Option<&Handle>),
        y: &Handle,
        step: &StepBuffer,
    ) -> Result<()> {
        let rows = self.rows.count(step);
        let tiles = self.prefill.filter(|_| step.is_long_prefill());
        // A binding a matrix (group.wgsl), then the rest.
        let bind = |x: &Handle, y: &Handle, params: &Handle| {
            Bindings::new()
                .with_all(&self.weights)
                .with(x)
                .with(y)
                .with(params)
                .with(step.handle())
        };
        if let (Some(t), Some(form)) = (&self.tiled, tiles)
            && t.splits.count > 1
        {
            // Split along the inputs: each split's partials, then their sum and the epilogue.
            let values = t.splits.partials(t.outputs).saturating_mul(rows);
            if u32::try_from(values).is_err() {
                return Err(KernelError::Shape {
                    what: "partial sums of a split tile launch (at most u32::MAX)",
                    expected: u32::MAX as usize,
                    found: values,
                });
            }
            // The partials' workgroups take the form's tiles (2 × 1 or 2 × 2 of 32 × 64 in the
            // larger tiles), their sum's one 32 × 64 tile each.
            let (vr, vc) = form.tiles();
            let tiles_z = rows.div_ceil(TILE_ROWS);
            let z = rows.div_ceil(TILE_ROWS * vr).saturating_mul(t.splits.count);
            if z > MAX_GROUPS_PER_DIM {
                return Err(KernelError::Shape {
                    what: "tiles times splits of a split tile launch (workgroups along z)",
                    expected: MAX_GROUPS_PER_DIM,
                    found: z,
                });
            }
            let partials = client.empty(values.max(1) * 4);
            let (gx, gy) = grid(t.groups.div_ceil(vc));
            let shader = |form, phase| Shader::Tile {
                types: self.types.clone(),
                epilogue,
                form,
                phase,
            };
            launch(
                client,
                shader(form, TilePhase::Part),
                CubeCount::Static(gx as u32, gy as u32, z as u32),
                bind(x.0, &partials, &t.params),
            );
            let (gx, gy) = grid(t.groups);
            launch(
                client,
                shader(TileForm::Vectors, TilePhase::Sum),
                CubeCount::Static(gx as u32, gy as u32, tiles_z as u32),
                bind(&partials, y, &t.params),
            );
            return Ok(());
        }
        let (shader, params, groups, per_z, x) = match (&self.tiled, tiles, x) {
            (Some(t), Some(form), (x, _)) => (
                Shader::Tile {
                    types: self.types.clone(),
                    epilogue,
                    form,
                    phase: TilePhase::Whole,
                },
                &t.params,
                t.groups.div_ceil(form.tiles().1),
                TILE_ROWS * form.tiles().0,
                x,
            ),
            (_, _, (x, quantized)) => {
                let (acts, x) = match (self.acts, quantized) {
                    // A one-row step quantizes its row in the product, from x's f32 rows.
                    (Acts::Q8Own, _) if rows == 1 => (Acts::Q8Own, x),
                    (Acts::Q8 | Acts::Q8Own, Some(q)) => (Acts::Q8, q),
                    // Not the f32 product in its place: a form the tuning chose would not be
                    // the one that ran.
                    (Acts::Q8 | Acts::Q8Own, None) if rows > 0 => {
                        return Err(KernelError::Shape {
                            what: "rows of 8-bit activations for a q8 product (none quantized)",
                            expected: rows,
                            found: 0,
                        });
                    }
                    _ => (Acts::F32, x),
                };
                (
                    Shader::Matmul {
                        types: self.types.clone(),
                        rows: row_bound(rows),
                        reduce,
                        epilogue,
                        team: self.team,
                        fan: self.fan,
                        acts,
                        normed,
                    },
                    &self.params,
                    self.groups,
                    MAX_ROWS,
                    x,
                )
            }
        };
        let (gx, gy) = grid(groups);
        launch(
            client,
            shader,
            CubeCount::Static(gx as u32, gy as u32, rows.div_ceil(per_z) as u32),
            bind(x, y, params),
        );
        Ok(())
    }
}

/// A `[rows, cols]` matrix of GGUF blocks in GPU memory, split by output rows where needed.
#[derive(Debug, Clone)]
pub struct GpuMatrix {
    ty: GpuType,
    rows: usize,
    cols: usize,
    parts: Vec<GpuPart>,
    reduce: Reduce,
    fan: Fan,
    /// A team forced on the groups this matrix leads (benchmarks compare them); else the
    /// group's shape chooses ([`Team::for_group`]).
    team: Option<Team>,
    /// Activations set on the groups this matrix leads; else f32 ([`Acts::forced`] aside).
    acts: Option<Acts>,
    /// How the groups it leads multiply a long prefill: [`tiles_for`] at upload.
    prefill: Option<TileForm>,
    /// 32-value groups a tile workgroup of the groups it leads walks at most (split-K,
    /// [`Splits::of_span`]); `None`: `MARS_GPU_TILE_SPLIT`'s, else [`Splits::rule`].
    tile_span: Option<usize>,
}

impl GpuMatrix {
    /// Uploads `blocks` (a `[rows, cols]` matrix of `ty`, rows of whole blocks) to `client`,
    /// split into parts of at most `max_binding` bytes.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a size that does not match the shape, and as [`split_rows`].
    pub fn upload(
        client: &Client,
        ty: impl Into<GpuType>,
        rows: usize,
        cols: usize,
        blocks: &[u8],
        max_binding: u64,
    ) -> Result<Self> {
        let ty = ty.into();
        let rb = row_bytes(ty, cols)?;
        let total = rows.checked_mul(rb).ok_or(KernelError::Overflow {
            what: "weight bytes",
            rows,
            cols,
        })?;
        if blocks.len() != total {
            return Err(KernelError::Shape {
                what: "weight bytes",
                expected: total,
                found: blocks.len(),
            });
        }
        Self::upload_with(client, ty, rows, cols, max_binding, |range| {
            let (start, end) = (range.start as usize, range.end as usize);
            Ok::<_, KernelError>(Cow::Borrowed(&blocks[start..end]))
        })
    }

    /// As [`GpuMatrix::upload`], with each part's bytes asked of `read` (a byte range of the
    /// whole matrix) only when that part is uploaded: a loader reading from a file not held in
    /// memory holds one part at a time. Bytes handed over owned with [`PART_PAD`] bytes of spare
    /// capacity are padded and uploaded with no copy on the host.
    ///
    /// # Errors
    /// [`KernelError::RaggedRow`] or [`KernelError::TooLarge`] for the shape; `read`'s error;
    /// [`KernelError::Shape`] for a part of the wrong size.
    pub fn upload_with<'b, E: From<KernelError>>(
        client: &Client,
        ty: impl Into<GpuType>,
        rows: usize,
        cols: usize,
        max_binding: u64,
        mut read: impl FnMut(Range<u64>) -> std::result::Result<Cow<'b, [u8]>, E>,
    ) -> std::result::Result<Self, E> {
        let ty = ty.into();
        let rb = row_bytes(ty, cols)?;
        let gpu_rb = gpu_row_bytes(ty, cols)?;
        let mut parts = Vec::new();
        for range in split_rows(ty, rows, cols, max_binding)? {
            let bytes = (range.start as u64 * rb as u64)..(range.end as u64 * rb as u64);
            let expected = range.len() * rb;
            let data = read(bytes)?;
            if data.len() != expected {
                return Err(KernelError::Shape {
                    what: "weight part bytes",
                    expected,
                    found: data.len(),
                }
                .into());
            }
            let padded = match ty.restrided(&data, rb / ty.block_bytes(), PART_PAD) {
                // Held in runs: one copy on the host, a part at a time.
                Some(mut v) => {
                    v.resize(v.len() + 4, 0);
                    v
                }
                None => match data {
                    Cow::Owned(mut v) => {
                        v.resize(expected.div_ceil(4) * 4 + 4, 0);
                        v
                    }
                    Cow::Borrowed(b) => padded_words(b),
                },
            };
            counted_upload(padded.len());
            let embed_params = [range.len(), cols, gpu_rb, range.start].map(|v| v as u32);
            // `create` takes the buffer as is (`create_from_slice` would copy it twice).
            let weights = client.create(Bytes::from_bytes_vec(padded));
            // The runtime holds the part's bytes until their write is submitted, and it submits
            // every `tasks_max` tasks (mars sets 512): flushed now, loading holds one part at a
            // time on the host (the wasm heap's bound in the browser), as with CubeCL's 32.
            client
                .flush()
                .map_err(|e| KernelError::Device(format!("{e:?}")))?;
            parts.push(GpuPart {
                weights,
                embed_params: upload_words(client, &embed_params),
                rows: range,
            });
        }
        Ok(Self {
            ty,
            rows,
            cols,
            parts,
            reduce: Reduce::detect(client),
            fan: Fan::for_matrix(client, rows, cols),
            team: None,
            acts: None,
            prefill: tiles_for(client),
            tile_span: None,
        })
    }

    /// How the kernel's partial sums meet: [`Reduce::detect`] at upload.
    pub fn reduce(&self) -> Reduce {
        self.reduce
    }

    /// This matrix launched with `reduce` instead (tests and benchmarks compare the forms; a
    /// subgroup form on a device without subgroups fails to compile).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for subgroup lanes that are not a power of two in 2…16.
    pub fn set_reduce(&mut self, reduce: Reduce) -> Result<()> {
        if let Reduce::Subgroup { lanes } = reduce
            && !(lanes.is_power_of_two() && (2..=16).contains(&lanes))
        {
            return Err(KernelError::Shape {
                what: "subgroup lanes of a reduction (a power of two, 2 to 16)",
                expected: 16,
                found: lanes as usize,
            });
        }
        self.reduce = reduce;
        Ok(())
    }

    /// Outputs a team computes: [`Fan::detect`] at upload.
    pub fn fan(&self) -> Fan {
        self.fan
    }

    /// This matrix launched with `fan` instead (tests and benchmarks compare the fans).
    pub fn set_fan(&mut self, fan: Fan) {
        self.fan = fan;
    }

    /// The groups this matrix leads launched with `team` instead of the one their shape
    /// chooses (benchmarks compare the teams; each gives its own bits): [`Team::Lanes`] where
    /// the group's types have lanes ([`Team::lanes_for`]), a SwiGLU a 16-thread team, else the
    /// shape's.
    pub fn set_team(&mut self, team: Team) {
        self.team = Some(team);
    }

    /// The groups this matrix leads multiplying `acts` (8-bit ones where the group's types
    /// take them, [`Acts::q8_for`], outside lane teams; else f32).
    pub fn set_acts(&mut self, acts: Acts) {
        self.acts = Some(acts);
    }

    /// The groups this matrix leads multiplying a long prefill in tiles of `form`, or in the
    /// mat-vec form (`None`).
    pub fn set_prefill(&mut self, form: Option<TileForm>) {
        self.prefill = form;
    }

    /// The groups this matrix leads splitting a long prefill's tile launches so that each
    /// workgroup walks at most `span` 32-value groups of the inputs (`usize::MAX`: unsplit),
    /// instead of [`Splits::rule`] (tests split small matrices; benchmarks compare).
    pub fn set_tile_span(&mut self, span: usize) {
        self.tile_span = Some(span);
    }

    /// The block type.
    pub fn ty(&self) -> GpuType {
        self.ty
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The parts, in row order.
    pub fn parts(&self) -> &[GpuPart] {
        &self.parts
    }

    /// Bytes of blocks a full product reads (in GPU memory's layout).
    pub fn bytes(&self) -> u64 {
        (self.rows * self.ty.gpu_row_bytes(self.cols / self.ty.block_values())) as u64
    }

    /// Enqueues `y[t, rows] = x[t, cols] · Wᵀ` on `client`: `x` holds `t` f32 rows of `cols`
    /// values, `y` room for `t` f32 rows of [`GpuMatrix::rows`] values (both contiguous). One
    /// launch per part whatever `t` (16 rows a workgroup); each row's result is the same
    /// whichever launch computes it. Uploads `t` as a step of its own: a forward pass of the
    /// model runs a [`MatrixGroup`] with the forward's step instead.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for t = 0 or buffers smaller than the shapes need.
    pub fn matmul(&self, client: &Client, x: &Handle, y: &Handle, t: usize) -> Result<()> {
        let ids = vec![0; t];
        let step = StepBuffer::new(client, &Step::chain(&ids, 0, t, self.rows)?);
        MatrixGroup::new(client, vec![self.clone()], Epilogue::Store, None, Rows::All)?
            .run(client, x, y, &step)
    }

    /// Enqueues the lookup of the step's token ids (each below [`GpuMatrix::rows`]; the caller
    /// checks them): `out` has room for the step's rows of [`GpuMatrix::cols`] values.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for an output buffer too small or more ids than one dispatch
    /// takes.
    pub fn embed(&self, client: &Client, step: &StepBuffer, out: &Handle) -> Result<()> {
        let n_ids = step.rows();
        check_size("out", out, n_ids * self.cols * 4)?;
        if n_ids > MAX_GROUPS_PER_DIM {
            return Err(KernelError::Shape {
                what: "token ids in one lookup (at most 65,535)",
                expected: MAX_GROUPS_PER_DIM,
                found: n_ids,
            });
        }
        let gx = (self.cols / 32).div_ceil(EMBED_THREADS);
        for part in &self.parts {
            launch(
                client,
                Shader::Embed(self.ty),
                CubeCount::Static(gx as u32, n_ids as u32, 1),
                Bindings::new()
                    .with(&part.weights)
                    .with(step.handle())
                    .with(out)
                    .with(&part.embed_params),
            );
        }
        Ok(())
    }
}

/// Up to three matrices that multiply the same activations in one launch (q | k | v, with
/// their biases; gate | up, with SiLU(gate)·up computed in the kernel), or one matrix (one
/// launch per part), with what the sums become ([`Epilogue`]). Parameters are made once, here;
/// a launch uploads nothing.
#[derive(Debug, Clone)]
pub struct MatrixGroup {
    launches: Vec<MatmulLaunch>,
    epilogue: Epilogue,
    reduce: Reduce,
    cols: usize,
    outputs: usize,
    bytes: u64,
    /// What the group was made of, so that [`MatrixGroup::with_form`] can remake it in another
    /// form (the members' buffers are shared, not copied).
    members: Vec<GpuMatrix>,
    bias_values: Option<std::sync::Arc<[f32]>>,
    rows: Rows,
    form: Form,
    /// quant.wgsl's parameters where the form's activations are 8-bit.
    quant: Option<Handle>,
    /// The room for its 8-bit activations ([`MatrixGroup::quantized_room`]), kept: one buffer
    /// every pass, so the launches binding it find their bind groups made ([`direct`]).
    room: Slot<Handle>,
    /// The RMSNorm folded into its products ([`MatrixGroup::with_norm`]).
    norm: Option<FoldedNorm>,
    /// The same group in the mat-vec form of passes of more than one row, where it differs
    /// from this one's ([`Form::pass`]): the same buffers, its own launches.
    pass: Option<Box<MatrixGroup>>,
}

/// A group's folded RMSNorm: its weights (each launch's constants hold them after the biases), its
/// epsilon, and whether the group's products take it ([`MatrixGroup::with_norm`]'s rule).
#[derive(Debug, Clone)]
struct FoldedNorm {
    g: std::sync::Arc<[f32]>,
    eps: f32,
    fold: bool,
}

impl MatrixGroup {
    /// Groups `members` (each `[rows_i, cols]`, the same cols) whose outputs go, numbered
    /// through the members in order, into a `[rows, outputs]` y (SwiGLU: `[rows, rows_0]`),
    /// computed over the step's `rows`; `bias` (Store only) adds one value per output.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for no member or more than three, widths that differ, a SwiGLU
    /// that is not two members of equal rows, or a bias of the wrong length or with another
    /// epilogue.
    pub fn new(
        client: &Client,
        members: Vec<GpuMatrix>,
        epilogue: Epilogue,
        bias: Option<&[f32]>,
        rows: Rows,
    ) -> Result<Self> {
        let group = Self::build(client, members, epilogue, bias, rows, None)?;
        // In the browser too: Chrome's WGSL compiler builds a card's wide forms on a model of
        // Q4_K_M's types in the browser tests (webgpu_card.rs).
        if !is_card(client) {
            return Ok(group);
        }
        let form = group.card_form();
        if form == group.form() {
            return Ok(group);
        }
        group.with_form(client, form)
    }

    /// The form a GPU card's group takes before any tuning: where its matrices can run in wide
    /// teams ([`Team::wide_for`]: all Q4_K or all Q6_K), one-row steps in wide teams on f32
    /// activations and passes of more rows in wide teams on 8-bit ones; otherwise the rules'.
    /// Measured on an H200 (the 7B shape, 2026-12-04, docs/performance.md): wide f32 teams
    /// decoded at 132.6 tok/s against the rules' 97.8 and wide 8-bit teams at 94.2, while a 5-row
    /// pass took 15.7 ms in wide 8-bit teams against 69.3 in wide f32 ones and 27.6 in the
    /// rules' forms. `MARS_GPU_TEAM` or `MARS_GPU_ACTS` (a form forced on every group, for a
    /// measurement) leaves the rules' form; `MARS_GPU_PASS=same` keeps passes in the one-row
    /// form.
    pub fn card_form(&self) -> Form {
        let form = self.form();
        let types: Vec<GpuType> = self.members.iter().map(GpuMatrix::ty).collect();
        if Team::forced().is_some() || Acts::forced().is_some() || !Team::wide_for(&types) {
            return form;
        }
        let wide = |acts| MatVec {
            team: Team::Wide,
            fan: form.fan,
            acts,
        };
        let same = std::env::var("MARS_GPU_PASS").as_deref() == Ok("same");
        Form {
            team: Team::Wide,
            acts: Acts::F32,
            pass: (!same && Acts::q8_for(&types)).then(|| wide(Acts::Q8)),
            ..form
        }
    }

    /// The same group with the RMSNorm of its input, weights `g` (`cols` values) and `eps`,
    /// folded into its products on GPU cards ([`is_card`]) where they multiply f32 rows in the
    /// mat-vec form ([`MatrixGroup::folds_norm`], run by [`MatrixGroup::run_normed`]): a
    /// forward then launches no norm before it and writes no normed rows. CPU adapters keep the
    /// norm's launch: there each team's extra work (its rows' squares, the weights scaled by g)
    /// cost more than the launch (lavapipe, SmolLM2: decode 4.5 tok/s folded against 4.7–5.2).
    /// The environment's `MARS_GPU_NORM` (`fold` or `apart`) overrides the rule, a
    /// measurement knob as `MARS_GPU_SPLIT` is.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for weights of another width; [`KernelError::Unknown`] for an
    /// epsilon that is not finite and at least 0.
    pub fn with_norm(&self, client: &Client, g: &[f32], eps: f32) -> Result<Self> {
        let fold = switch("MARS_GPU_NORM", "fold", "apart").unwrap_or_else(|| is_card(client));
        self.with_norm_as(client, g, eps, fold)
    }

    /// [`MatrixGroup::with_norm`] folding the norm where `fold`, whatever the adapter (tests
    /// compare the two on any adapter); where not, the group holds it but never takes it.
    ///
    /// # Errors
    /// As [`MatrixGroup::with_norm`].
    pub fn with_norm_as(&self, client: &Client, g: &[f32], eps: f32, fold: bool) -> Result<Self> {
        if g.len() != self.cols {
            return Err(KernelError::Shape {
                what: "norm weights folded into a group (one per input value)",
                expected: self.cols,
                found: g.len(),
            });
        }
        if !eps.is_finite() || eps < 0.0 {
            return Err(KernelError::Unknown {
                what: "norm epsilon",
                value: eps.to_string(),
                expected: "a finite value of at least 0",
            });
        }
        let mut group = Self::build(
            client,
            self.members.clone(),
            self.epilogue,
            self.bias_values.as_deref(),
            self.rows,
            Some(FoldedNorm {
                g: std::sync::Arc::from(g),
                eps,
                fold,
            }),
        )?;
        group.pass = match &self.pass {
            Some(p) => Some(Box::new(p.with_norm_as(client, g, eps, fold)?)),
            None => None,
        };
        Ok(group)
    }

    fn build(
        client: &Client,
        members: Vec<GpuMatrix>,
        epilogue: Epilogue,
        bias: Option<&[f32]>,
        rows: Rows,
        norm: Option<FoldedNorm>,
    ) -> Result<Self> {
        let shape = |what, expected, found| {
            Err(KernelError::Shape {
                what,
                expected,
                found,
            })
        };
        let n = members.len();
        let Some(first) = members.first() else {
            return shape("matrices in a group (1 to 3)", 1, 0);
        };
        if n > 3 {
            return shape("matrices in a group (1 to 3)", 3, n);
        }
        let cols = first.cols;
        if let Some(m) = members.iter().find(|m| m.cols != cols) {
            return shape("input width of a group's matrices", cols, m.cols);
        }
        let total: usize = members.iter().map(GpuMatrix::rows).sum();
        if epilogue == Epilogue::SwiGlu && (n != 2 || members[1].rows != first.rows) {
            return shape(
                "gate and up rows of a SwiGLU",
                first.rows,
                total - first.rows,
            );
        }
        let outputs = if epilogue == Epilogue::SwiGlu {
            first.rows
        } else {
            total
        };
        if let Some(b) = bias
            && (b.len() != total || epilogue != Epilogue::Store)
        {
            return shape(
                "bias values of a group (one per output, Store only)",
                total,
                b.len(),
            );
        }
        let row_bytes: Vec<usize> = members
            .iter()
            .map(|m| gpu_row_bytes(m.ty, m.cols))
            .collect::<Result<_>>()?;
        // One team and fan for the whole group, whichever launches compute it: an output's sum
        // then meets in the same tree, so a split group gives the bits of an unsplit one.
        let types: Vec<GpuType> = members.iter().map(|m| m.ty).collect();
        // A SwiGLU's gate and up meet inside a workgroup of four teams: a whole-workgroup team
        // asked of it gives its 16-thread sibling.
        let asked = first.team.or_else(Team::forced).map(|team| {
            if epilogue == Epilogue::SwiGlu {
                team.in_quarters()
            } else {
                team
            }
        });
        let team = match asked {
            Some(team) if team.lanes() && Team::lanes_for(&types) => team,
            Some(team) if team.wide() && Team::wide_for(&types) => team,
            Some(team @ (Team::Quarter | Team::Whole)) => team,
            _ => Team::for_group(epilogue, outputs, cols),
        };
        let fan = first.fan;
        let acts = match first.acts.or_else(Acts::forced) {
            Some(acts @ (Acts::Q8 | Acts::Q8Own)) if Acts::q8_for(&types) && !team.lanes() => acts,
            _ => Acts::F32,
        };
        // Only products over every row meet a prefill; the head's (the last rows) never does.
        let prefill = first.prefill.filter(|_| rows == Rows::All);
        // A folded norm's weights follow the biases among the constants' values, on a vec4.
        let (vectors, g_at) = norm_values(bias, norm.as_ref().map(|n| &n.g[..]));
        let norm_at = norm.as_ref().map_or((0, 0), |n| (g_at, n.eps.to_bits()));
        let swiglu = epilogue == Epilogue::SwiGlu;
        // One split of the inputs for the whole group, whichever launches compute it (as the
        // team above), from the group's shape.
        let span = first.tile_span.or_else(forced_tile_span);
        let splits = match span {
            Some(span) => Splits::of_span(cols, span),
            None => Splits::rule(cols, total, swiglu),
        };
        // The form's word for it: unsplit only where tiles were asked to be (without tiles
        // there is nothing to split).
        let split = prefill.is_none() || span != Some(usize::MAX);
        let launch = |weights: Vec<Handle>, types: Vec<GpuType>, params: MatmulParams| {
            // Products over every row run in tiles in a long prefill's steps.
            let tiled = if rows == Rows::All {
                let groups = tile_columns(params.outputs, swiglu);
                let outputs = params.outputs;
                let mut words = MatmulParams { groups, ..params }.words()?;
                words.push(
                    u32::try_from(splits.groups).map_err(|_| KernelError::Shape {
                        what: "groups a split of a tile launch walks (at most u32::MAX)",
                        expected: u32::MAX as usize,
                        found: splits.groups,
                    })?,
                );
                Some(Tiled {
                    params: upload_words(client, &constants(words, vectors.as_deref())?),
                    groups,
                    outputs,
                    splits,
                })
            } else {
                None
            };
            Ok::<_, KernelError>(MatmulLaunch {
                weights,
                types: types.into(),
                params: upload_words(client, &constants(params.words()?, vectors.as_deref())?),
                tiled,
                groups: params.groups,
                rows,
                team,
                fan,
                acts,
                prefill,
            })
        };
        let mut launches = Vec::new();
        if n > 1 && members.iter().all(|m| m.parts.len() == 1) {
            // The whole group in one launch, each matrix in its own binding.
            let firsts = [
                first.rows,
                members
                    .get(2)
                    .map_or(total, |_| first.rows + members[1].rows),
            ];
            let groups = if swiglu {
                first.rows.div_ceil(2 * fan.outputs())
            } else {
                total.div_ceil(team.outputs() * fan.outputs())
            };
            let params = MatmulParams {
                n_in: cols,
                y_stride: outputs,
                y_offset: 0,
                outputs: total,
                groups,
                rows,
                bias: bias.is_some(),
                firsts,
                row_bytes: [
                    row_bytes[0],
                    row_bytes[1],
                    row_bytes.get(2).copied().unwrap_or(row_bytes[0]),
                ],
                bases: [0; 3],
                norm: norm_at,
            };
            launches.push(launch(
                members.iter().map(|m| m.parts[0].weights.clone()).collect(),
                members.iter().map(GpuMatrix::ty).collect(),
                params,
            )?);
        } else if swiglu {
            // A gate | up too large for one binding each (a 32B's FFN): a launch per range of
            // rows that lies inside one part of gate and one of up (their parts split at other
            // rows where their types differ), each writing its own outputs of y.
            let up = &members[1];
            let mut cuts: Vec<usize> = first
                .parts
                .iter()
                .chain(&up.parts)
                .map(|p| p.rows.start)
                .chain([first.rows])
                .collect();
            cuts.sort_unstable();
            cuts.dedup();
            let holding = |m: &GpuMatrix, row: usize| {
                m.parts
                    .iter()
                    .find(|p| p.rows.contains(&row))
                    .map(|p| (p.weights.clone(), row - p.rows.start))
            };
            for range in cuts.windows(2) {
                let (start, len) = (range[0], range[1] - range[0]);
                let (Some((g, g_row)), Some((u, u_row))) =
                    (holding(first, start), holding(up, start))
                else {
                    return shape("rows of a SwiGLU's parts", first.rows, start);
                };
                let params = MatmulParams {
                    n_in: cols,
                    y_stride: outputs,
                    y_offset: start,
                    outputs: 2 * len,
                    groups: len.div_ceil(2 * fan.outputs()),
                    rows,
                    bias: false,
                    firsts: [len, 2 * len],
                    row_bytes: [row_bytes[0], row_bytes[1], row_bytes[0]],
                    bases: [g_row * row_bytes[0], u_row * row_bytes[1], 0],
                    norm: norm_at,
                };
                launches.push(launch(vec![g, u], vec![first.ty, up.ty], params)?);
            }
        } else {
            // One matrix, or a group with a matrix too large for one binding: a launch per part
            // of each matrix, each writing its own columns of y (and adding its own biases).
            let mut first_output = 0;
            for (m, &rb) in members.iter().zip(&row_bytes) {
                for part in &m.parts {
                    let len = part.rows.len();
                    let params = MatmulParams {
                        n_in: cols,
                        y_stride: total,
                        y_offset: first_output + part.rows.start,
                        outputs: len,
                        groups: len.div_ceil(team.outputs() * fan.outputs()),
                        rows,
                        bias: bias.is_some(),
                        firsts: [len; 2],
                        row_bytes: [rb; 3],
                        bases: [0; 3],
                        norm: norm_at,
                    };
                    launches.push(launch(vec![part.weights.clone()], vec![m.ty], params)?);
                }
                first_output += m.rows;
            }
        }
        Ok(Self {
            launches,
            epilogue,
            reduce: first.reduce,
            cols,
            outputs,
            bytes: members.iter().map(GpuMatrix::bytes).sum(),
            bias_values: bias.map(std::sync::Arc::from),
            rows,
            form: Form {
                team,
                fan,
                acts,
                pass: None,
                prefill,
                split,
            },
            quant: acts.is_q8().then(|| {
                let at = u32::from(rows == Rows::Tail);
                upload_words(client, &[cols as u32, at, MAX_GROUPS_PER_DIM as u32])
            }),
            members,
            norm,
            pass: None,
            room: Slot::default(),
        })
    }

    /// The team, fan, activations and prefill form its products run in, and its passes' form.
    pub fn form(&self) -> Form {
        Form {
            pass: self.pass.as_ref().map(|p| p.form.one_row()),
            ..self.form
        }
    }

    /// The group a step's products run in: the pass form's for more than one row where the
    /// group has one, else this one.
    fn at(&self, step: &StepBuffer) -> &Self {
        match &self.pass {
            Some(pass) if self.rows.count(step) > 1 => pass,
            _ => self,
        }
    }

    /// Every mat-vec form this group can run in (each for one-row steps and passes alike: a
    /// form's pass may be any other of them): quarter teams, lane teams where every member's
    /// type has a lane decoder ([`Team::lanes_for`]), wide teams where every member is Q4_K or
    /// every one Q6_K ([`Team::wide_for`]), and each of the three with the whole workgroup on an
    /// output but for a SwiGLU (whose gate and up meet inside a workgroup); each with one and
    /// four outputs a team, each with f32 activations and (but with lane teams' loads) 8-bit
    /// ones where the types take them ([`Acts::q8_for`]).
    pub fn forms(&self) -> Vec<Form> {
        let types: Vec<GpuType> = self.members.iter().map(GpuMatrix::ty).collect();
        let swiglu = self.epilogue == Epilogue::SwiGlu;
        let teams = Team::ALL.into_iter().filter(|&team| {
            (team.threads() == 16 || !swiglu)
                && (!team.lanes() || Team::lanes_for(&types))
                && (!team.wide() || Team::wide_for(&types))
        });
        let prefill = self.form.prefill;
        let q8 = Acts::q8_for(&types);
        let mut forms = Vec::new();
        for team in teams {
            for acts in [Acts::F32, Acts::Q8, Acts::Q8Own] {
                if acts.is_q8() && (!q8 || team.lanes()) {
                    continue;
                }
                for fan in [Fan::One, Fan::Four] {
                    forms.push(Form {
                        team,
                        fan,
                        acts,
                        pass: None,
                        prefill,
                        split: self.form.split,
                    });
                }
            }
        }
        forms
    }

    /// Every way this group can multiply a long prefill, with its team and fan: the mat-vec
    /// form and tiles of f32 vectors (the tall tile too where the device's workgroup memory,
    /// `room` bytes, holds it), and tiles on the matrix units in each of the adapter's shapes
    /// (`units`: [`adapter_matrix_units`], the narrow, tall and wide tiles), each kind of tiles split along the inputs
    /// by [`Splits::rule`] and, where that splits this group, unsplit; a group over the last rows
    /// alone (the head) only as it is.
    pub fn prefill_forms(&self, units: &[UnitShape], room: usize) -> Vec<Form> {
        if self.rows != Rows::All {
            return vec![self.form()];
        }
        let total = self.members.iter().map(GpuMatrix::rows).sum();
        let swiglu = self.epilogue == Epilogue::SwiGlu;
        let splits = Splits::rule(self.cols, total, swiglu).count > 1;
        let mut tiles = vec![TileForm::Vectors];
        tiles.extend(Some(TileForm::TallVectors).filter(|t| t.workgroup_bytes() as usize <= room));
        tiles.extend(units.iter().copied().map(TileForm::Units));
        let mut forms = vec![Form {
            prefill: None,
            split: true,
            ..self.form()
        }];
        for tile in tiles {
            for split in [true, false] {
                if split || splits {
                    forms.push(Form {
                        prefill: Some(tile),
                        split,
                        ..self.form()
                    });
                }
            }
        }
        forms
    }

    /// The same group (the same buffers) launched in `form`: each form gives its own bits, the
    /// same for every row count (a row's result never depends on the rows beside it).
    ///
    /// # Errors
    /// [`KernelError::Unknown`] for a form the group cannot take ([`MatrixGroup::forms`], with
    /// any prefill form for a group over every row).
    pub fn with_form(&self, client: &Client, form: Form) -> Result<Self> {
        let candidate = |m: MatVec| Form {
            team: m.team,
            fan: m.fan,
            acts: m.acts,
            pass: None,
            prefill: self.form.prefill,
            split: self.form.split,
        };
        let forms = self.forms();
        let same_prefill = (form.prefill, form.split) == (self.form.prefill, self.form.split);
        let prefill_ok = same_prefill || self.rows == Rows::All;
        if !forms.contains(&candidate(form.one_row()))
            || !forms.contains(&candidate(form.pass_form()))
            || !prefill_ok
        {
            return Err(KernelError::Unknown {
                what: "form of a matrix group",
                value: form.name(),
                expected: "one of the group's forms (no whole teams for a SwiGLU, lanes for \
                           Q4_K and Q6_K only, wide teams for Q4_K or Q6_K alone, 8-bit activations for \
                           block types outside lane teams, the head's prefill form as it is), \
                           for one-row steps and for passes",
            });
        }
        let mut group = self.in_form(client, form.one_row(), form)?;
        if form.pass_form() != form.one_row() {
            group.pass = Some(Box::new(self.in_form(client, form.pass_form(), form)?));
        }
        Ok(group)
    }

    /// The group built with `one`'s team, fan and activations and `form`'s prefill, without a
    /// pass form.
    fn in_form(&self, client: &Client, one: MatVec, form: Form) -> Result<Self> {
        let mut members = self.members.clone();
        for m in &mut members {
            m.set_fan(one.fan);
        }
        members[0].set_team(one.team);
        members[0].set_acts(one.acts);
        members[0].set_prefill(form.prefill);
        // Unsplit, or back to the rule from unsplit (a span a test set stays).
        if !form.split {
            members[0].set_tile_span(usize::MAX);
        } else if members[0].tile_span == Some(usize::MAX) {
            members[0].tile_span = None;
        }
        Self::build(
            client,
            members,
            self.epilogue,
            self.bias_values.as_deref(),
            self.rows,
            self.norm.clone(),
        )
    }

    /// What the group's cost depends on, as [`Tuning`] keys it: the epilogue, each member's
    /// type and outputs, the input width and the parts its launches take (a matrix over the
    /// adapter's binding size runs in several).
    pub fn shape_key(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{:?}:{}", m.ty, m.rows))
            .collect();
        format!(
            "{:?} {} x{} in {}",
            self.epilogue,
            members.join("+"),
            self.cols,
            self.launches.len()
        )
    }

    /// Input values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Which rows of a step its products run over.
    pub fn rows(&self) -> Rows {
        self.rows
    }

    /// Outputs per row of y.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Bytes of blocks one product reads.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Launches per product.
    pub fn launches(&self) -> usize {
        self.launches.len()
    }

    /// Room for this group's 8-bit activations over `step`'s rows where its products multiply
    /// them in that step ([`Acts::Q8`] outside a long prefill's tiles), for a norm before it to
    /// write ([`Norm::run_q8`]) and [`MatrixGroup::run_from`] to take; `None` where they
    /// multiply f32 rows.
    pub fn quantized_room(&self, client: &Client, step: &StepBuffer) -> Option<Handle> {
        let at = self.at(step);
        if !std::ptr::eq(at, self) {
            return at.quantized_room(client, step);
        }
        let tiled = step.is_long_prefill() && self.form.prefill.is_some();
        let rows = self.rows.count(step);
        let own = self.form.acts == Acts::Q8Own && rows == 1;
        if self.quant.is_none() || tiled || rows == 0 || own {
            return None;
        }
        // The kept room where it holds the rows, else a new one (the next pass's too): written
        // and read in queue order, pass after pass, as the scratch buffers are.
        let bytes = quant_bytes(rows, self.cols);
        let room = match self.room.take() {
            Some(room) if room.size() >= bytes as u64 => room,
            _ => client.empty(bytes),
        };
        self.room.put(room.clone());
        Some(room)
    }

    /// Enqueues the product over the step's rows: `x` holds them (`cols` values each), `y`
    /// room for as many rows of [`MatrixGroup::outputs`] values (read as well as written with
    /// [`Epilogue::Add`]). In the 8-bit form the rows are quantized first, by a launch of their
    /// own ([`MatrixGroup::run_from`] takes them quantized by a norm instead).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for buffers smaller than the shapes need.
    pub fn run(&self, client: &Client, x: &Handle, y: &Handle, step: &StepBuffer) -> Result<()> {
        self.run_from(client, (x, None), y, step)
    }

    /// [`MatrixGroup::run`] from `x` and, where given, the same rows already quantized in `xq`
    /// (the room [`MatrixGroup::quantized_room`] gave for this step, filled by
    /// [`Norm::run_q8`]); where not given and the step needs them, they are quantized here.
    ///
    /// # Errors
    /// As [`MatrixGroup::run`], and [`KernelError::Shape`] for an `xq` too small.
    pub fn run_from(
        &self,
        client: &Client,
        (x, xq): (&Handle, Option<&Handle>),
        y: &Handle,
        step: &StepBuffer,
    ) -> Result<()> {
        let at = self.at(step);
        if !std::ptr::eq(at, self) {
            return at.run_from(client, (x, xq), y, step);
        }
        let rows = self.rows.count(step);
        check_size("x", x, rows * self.cols * 4)?;
        check_size("y", y, rows * self.outputs * 4)?;
        let made;
        let quantized = match (xq, &self.quant) {
            (Some(xq), _) => {
                check_size("xq", xq, quant_bytes(rows, self.cols))?;
                Some(xq)
            }
            (None, Some(params)) => {
                made = self.quantized_room(client, step);
                if let Some(xq) = &made {
                    let workgroups = (rows * self.cols / 32).div_ceil(64);
                    let gy = workgroups.div_ceil(MAX_GROUPS_PER_DIM);
                    let gx = workgroups.min(MAX_GROUPS_PER_DIM);
                    launch(
                        client,
                        Shader::Quant,
                        CubeCount::Static(gx as u32, gy as u32, 1),
                        Bindings::new()
                            .with(x)
                            .with(xq)
                            .with(params)
                            .with(step.handle()),
                    );
                }
                made.as_ref()
            }
            (None, None) => None,
        };
        self.launch_all(client, false, (x, quantized), y, step)
    }

    /// Each launch of the product (one a part), `normed` where `x` holds the rows before the
    /// folded norm.
    fn launch_all(
        &self,
        client: &Client,
        normed: bool,
        x: (&Handle, Option<&Handle>),
        y: &Handle,
        step: &StepBuffer,
    ) -> Result<()> {
        for l in &self.launches {
            l.run(client, (self.reduce, self.epilogue, normed), x, y, step)?;
        }
        Ok(())
    }

    /// Whether this step's product takes the group's folded norm ([`MatrixGroup::with_norm`]):
    /// where the group folds it, in steps that multiply f32 rows in the mat-vec form (not
    /// [`Acts::Q8`], not a long prefill's tiles); in [`Acts::Q8Own`]'s one-row steps wherever
    /// the group holds a norm (with the bits of the norm's launch: `MARS_GPU_NORM` does not
    /// apply).
    pub fn folds_norm(&self, step: &StepBuffer) -> bool {
        let at = self.at(step);
        if !std::ptr::eq(at, self) {
            return at.folds_norm(step);
        }
        let tiled = step.is_long_prefill() && self.form.prefill.is_some();
        match self.form.acts {
            Acts::F32 => self.norm.as_ref().is_some_and(|n| n.fold) && !tiled,
            // Its whole point is no launch before it: it takes the norm wherever it has one.
            Acts::Q8Own => self.norm.is_some() && !tiled && self.rows.count(step) == 1,
            Acts::Q8 => false,
        }
    }

    /// The product of the step's rows of `x` normed by the group's folded norm, as a norm
    /// launch into rows h and [`MatrixGroup::run`] from h would give, within f32 rounding (the
    /// fold's own bits, the same for every row count; in [`Acts::Q8Own`] bit for bit), without
    /// the norm's launch or h. `x`
    /// holds every row of the step; a group over the last rows ([`Rows::Tail`]: the head)
    /// multiplies those.
    ///
    /// # Errors
    /// [`KernelError::Shape`] where [`MatrixGroup::folds_norm`] does not hold for this step, and
    /// as [`MatrixGroup::run`].
    pub fn run_normed(
        &self,
        client: &Client,
        x: &Handle,
        y: &Handle,
        step: &StepBuffer,
    ) -> Result<()> {
        let at = self.at(step);
        if !std::ptr::eq(at, self) {
            return at.run_normed(client, x, y, step);
        }
        if !self.folds_norm(step) {
            return Err(KernelError::Shape {
                what: "a folded norm for this step (f32 rows in the mat-vec form: 1; none: 0)",
                expected: 1,
                found: 0,
            });
        }
        // x holds every row of the step (a group over the last rows reads those).
        check_size("x", x, step.rows() * self.cols * 4)?;
        check_size("y", y, self.rows.count(step) * self.outputs * 4)?;
        self.launch_all(client, true, (x, None), y, step)
    }
}

/// The bytes a kernel bound to `handle` may touch: its range, not its allocation. CubeCL rounds
/// an allocation up to the device's alignment (`client.empty(64)` reserved 256 bytes on Chrome's adapter
/// here) and `Handle::size` is that whole allocation, while a launch binds the range asked
/// for; a WebGPU implementation (Dawn in Chrome) keeps every access inside the bound range,
/// dropping writes past it, where native drivers here reach the padding. Sizing by the
/// allocation once let a kept buffer of 64 bytes pass for 180: the browser's chained
/// speculation read dropped partials as NaN (docs/lab/journal-2026-11.md, 2026-12-03).
pub(crate) fn bound_bytes(handle: &Handle) -> usize {
    usize::try_from(handle.size_in_used()).unwrap_or(usize::MAX)
}

fn check_size(what: &'static str, handle: &Handle, want: usize) -> Result<()> {
    let have = bound_bytes(handle);
    if have < want {
        return Err(KernelError::Shape {
            what,
            expected: want,
            found: have,
        });
    }
    Ok(())
}

/// Workgroups (x, y) covering `groups` with x within every adapter's per-dimension limit.
fn grid(groups: usize) -> (usize, usize) {
    if groups <= MAX_GROUPS_PER_DIM {
        (groups.max(1), 1)
    } else {
        let gy = groups.div_ceil(MAX_GROUPS_PER_DIM);
        (groups.div_ceil(gy), gy)
    }
}

fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_products_constants_are_its_parameters_padded_then_its_values_bits() {
        let words = constants(vec![7, 8], Some(&[1.5, -0.0])).unwrap();
        // Whole vec4s: the values' two words and two of padding.
        assert_eq!(words.len(), PARAM_WORDS + 4);
        assert_eq!(&words[..2], &[7, 8]);
        assert!(words[2..PARAM_WORDS].iter().all(|&w| w == 0));
        assert_eq!(words[PARAM_WORDS], 1.5f32.to_bits());
        assert_eq!(words[PARAM_WORDS + 1], 0x8000_0000);
        assert_eq!(&words[PARAM_WORDS + 2..], &[0, 0]);
        // A folded norm's weights start on a vec4 after the biases.
        let g = [2.0, 3.0, 4.0, 5.0];
        assert_eq!(norm_values(None, None), (None, 0));
        assert_eq!(norm_values(Some(&[1.0]), None), (Some(vec![1.0]), 0));
        assert_eq!(norm_values(None, Some(&g)), (Some(g.to_vec()), 0));
        assert_eq!(
            norm_values(Some(&[1.0; 5]), Some(&g)),
            (Some([[1.0; 5].as_slice(), &[0.0; 3], &g].concat()), 8)
        );
        assert_eq!(
            constants(vec![1; PARAM_WORDS], None).unwrap().len(),
            PARAM_WORDS
        );
        assert!(matches!(
            constants(vec![1; PARAM_WORDS + 1], None),
            Err(KernelError::Shape { found: 21, .. })
        ));
    }

    #[test]
    fn only_the_weight_binding_is_renamed() {
        assert_eq!(
            binding_renamed("w[i] + raw[i] + f(w[j]) + w_k[0]", 2),
            "w2[i] + raw[i] + f(w2[j]) + w_k[0]"
        );
    }

    #[test]
    fn kernels_compile_without_loop_bounding() {
        use cubecl::prelude::KernelMetadata;
        // CubeCL's checked mode makes wgpu bound every loop (see `mode`); no kernel takes it
        // unless a measurement asks.
        for shader in [Shader::Summary(RowPass::Rank), Shader::Quant, Shader::Copy] {
            let asked = std::env::var("MARS_GPU_LOOP_BOUND").is_ok_and(|v| v == "on");
            assert_eq!(shader.id().mode == ExecutionMode::Checked, asked);
        }
    }

    #[test]
    fn blocks_of_4k_plus_2_bytes_are_held_in_runs_d_first() {
        // 28 blocks (a 0.5B's 896-value row): three runs of 8 and one of 4, which adds 8 bytes
        // (Q5_0: 16 of d's + 16 of fifth bits + 64 of nibbles, against 88); 16 blocks keep
        // the file's bytes.
        let (q4_0, q5_0, q8_0) = (WeightType::Q4_0, WeightType::Q5_0, WeightType::Q8_0);
        assert_eq!(q5_0.gpu_row_bytes(28), 3 * 176 + 96);
        assert_eq!(q8_0.gpu_row_bytes(28), 3 * 272 + 16 + 4 * 32);
        assert_eq!(q4_0.gpu_row_bytes(28), 3 * 144 + 16 + 4 * 16);
        for ty in [q4_0, q5_0, q8_0] {
            assert_eq!(ty.gpu_row_bytes(16), 16 * ty.block_bytes(), "{ty:?}");
            for r in 1..=GPU_RUN {
                assert_eq!(ty.run_bytes(r) % 16, 0, "{ty:?} run of {r}");
            }
        }
        // Q5_0 runs of 5 and 1: a quad and one block, one block alone.
        assert_eq!(q5_0.run_bytes(5), 16 + 80 + 16 + 16);
        assert_eq!(q5_0.run_bytes(1), 16 + 16 + 16);
        // Two rows of 13 blocks (a run of 8 and one of 5), block j of row r filled with byte
        // 16r + j and its d bytes (0..2) with 0x80 | that.
        let blocks = 13;
        for ty in [q4_0, q5_0, q8_0] {
            let size = ty.block_bytes();
            let mut stored = Vec::new();
            for r in 0..2u8 {
                for j in 0..blocks as u8 {
                    let mut block = vec![16 * r + j; size];
                    block[..2].fill(0x80 | (16 * r + j));
                    stored.extend(block);
                }
            }
            let held = GpuType::Blocks(ty).restrided(&stored, blocks, 0).unwrap();
            let row = ty.gpu_row_bytes(blocks);
            assert_eq!(row, ty.run_bytes(8) + ty.run_bytes(5), "{ty:?}");
            assert_eq!(held.len(), 2 * row, "{ty:?}");
            for r in 0..2usize {
                for j in 0..blocks {
                    let (run, k) = (j / GPU_RUN, j % GPU_RUN);
                    let run_at = r * row + run * ty.run_bytes(GPU_RUN);
                    let tag = (16 * r + j) as u8;
                    assert_eq!(held[run_at + 2 * k..run_at + 2 * k + 2], [0x80 | tag; 2]);
                    // The block's other bytes: Q5_0's fifth bits (4) and nibbles (16) apart.
                    let parts: Vec<(usize, usize)> = match ty {
                        WeightType::Q5_0 => {
                            let quad = run_at + 16 + 80 * (k / 4);
                            vec![(quad + 4 * (k % 4), 4), (quad + 16 + 16 * (k % 4), 16)]
                        }
                        _ => vec![(run_at + 16 + (size - 2) * k, size - 2)],
                    };
                    let (quants, _) = *parts.last().unwrap();
                    assert_eq!(quants % 16, 0, "{ty:?}: block {j} of row {r} on 16 bytes");
                    for (at, len) in parts {
                        assert!(held[at..at + len].iter().all(|&v| v == tag), "{ty:?} {j}");
                    }
                }
                // The short run's d's padded with zeros.
                let last = r * row + ty.run_bytes(GPU_RUN);
                assert!(held[last + 10..last + 16].iter().all(|&v| v == 0), "{ty:?}");
            }
        }
    }

    #[test]
    fn q6k_rows_are_held_in_runs_of_eight_blocks_d_first() {
        let q6k = GpuType::Blocks(WeightType::Q6K);
        // 14 blocks (a 3,584-value row): a run of 8 and one of 6; 16 whole runs (4,096 values).
        assert_eq!(q6k.gpu_row_bytes(14), 16 + 8 * 208 + 16 + 6 * 208);
        assert_eq!(q6k.gpu_row_bytes(16), 16 * 210);
        assert_eq!(WeightType::Q6K.gpu_bytes(3 * 14 * 210, 3584), 3 * 2944);
        assert_eq!(WeightType::Q4K.gpu_bytes(3 * 14 * 144, 3584), 3 * 14 * 144);
        // Two rows of 9 blocks, block j of row r filled with byte 16r + j, its d bytes
        // 208..210 with 0x80 | that.
        let blocks = 9;
        let mut stored = Vec::new();
        for r in 0..2u8 {
            for j in 0..blocks as u8 {
                let mut block = vec![16 * r + j; 210];
                block[208..].fill(0x80 | (16 * r + j));
                stored.extend(block);
            }
        }
        let held = q6k.restrided(&stored, blocks, 0).unwrap();
        let row = q6k.gpu_row_bytes(blocks);
        assert_eq!(
            row,
            WeightType::Q6K.run_bytes(8) + WeightType::Q6K.run_bytes(1)
        );
        assert_eq!(row, 16 + 8 * 208 + 16 + 208);
        assert_eq!(held.len(), 2 * row);
        for r in 0..2usize {
            let at = r * row;
            for j in 0..blocks {
                let (run, k) = (j / 8, j % 8);
                let run_at = at + run * (16 + 8 * 208);
                let tag = (16 * r + j) as u8;
                assert_eq!(held[run_at + 2 * k..run_at + 2 * k + 2], [0x80 | tag; 2]);
                let b = run_at + 16 + 208 * k;
                assert_eq!(b % 16, 0, "block {j} of row {r} on 16 bytes");
                assert!(held[b..b + 208].iter().all(|&v| v == tag));
            }
            // The short run's d's padded with zeros.
            let last = at + 16 + 8 * 208;
            assert!(held[last + 2..last + 16].iter().all(|&v| v == 0));
        }
        assert!(
            GpuType::Blocks(WeightType::Q4K)
                .restrided(&stored, 1, 0)
                .is_none()
        );
    }

    #[test]
    fn split_keeps_parts_under_the_limit() {
        // 151,936 × 1,536 Q6_K (the Qwen2.5-1.5B head): 191 MB, over WebGPU's default 128 MiB.
        let parts = split_rows(WeightType::Q6K, 151_936, 1_536, 128 << 20).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].start, 0);
        assert_eq!(parts.last().unwrap().end, 151_936);
        for p in &parts {
            // A row: one run of 6 blocks, 16 bytes of d's and 6 × 208.
            assert!((p.len() * (16 + 6 * 208) + 4) as u64 <= 128 << 20);
        }
        assert!(split_rows(WeightType::Q8_0, 4, 64, 50).is_err());
        assert!(split_rows(WeightType::Q4K, 4, 100, 1 << 20).is_err());
    }

    #[test]
    fn long_rows_with_few_outputs_take_a_workgroup_an_output() {
        // The 0.5B's and 1.5B's down products; their gate | up (SwiGLU) and heads do not.
        assert_eq!(Team::for_group(Epilogue::Add, 896, 4864), Team::Whole);
        assert_eq!(Team::for_group(Epilogue::Add, 1536, 8960), Team::Whole);
        assert_eq!(Team::for_group(Epilogue::SwiGlu, 4864, 4096), Team::Quarter);
        assert_eq!(
            Team::for_group(Epilogue::Store, 151_936, 896),
            Team::Quarter
        );
        assert_eq!(Team::for_group(Epilogue::Add, 896, 896), Team::Quarter);
        // A 7B's q | k | v and its head: long enough rows in a large matrix.
        assert_eq!(Team::for_group(Epilogue::Store, 4608, 3584), Team::Whole);
        assert_eq!(Team::for_group(Epilogue::Store, 152_064, 3584), Team::Whole);
        assert_eq!(
            Team::for_group(Epilogue::SwiGlu, 18_944, 3584),
            Team::Quarter
        );
        assert_eq!(Team::Whole.outputs() * Team::Whole.threads(), 64);
        assert_eq!(Team::Quarter.outputs() * Team::Quarter.threads(), 64);
    }

    #[test]
    fn grid_stays_within_a_dimension() {
        assert_eq!(grid(10), (10, 1));
        let (x, y) = grid(200_000);
        assert!(x <= MAX_GROUPS_PER_DIM && x * y >= 200_000);
    }

    #[test]
    fn matrix_units_need_one_subgroup_size() {
        assert_eq!(fixed_lanes(32, 32, false), Some(32));
        assert_eq!(fixed_lanes(8, 8, false), Some(8));
        assert_eq!(fixed_lanes(32, 64, false), None);
        assert_eq!(fixed_lanes(4, 64, true), Some(32));
    }

    #[test]
    fn subgroup_sizes_pick_a_reduction() {
        assert_eq!(Reduce::for_subgroups(None), Reduce::Workgroup);
        for n in [0, 1, 3, 6, 24] {
            assert_eq!(Reduce::for_subgroups(Some(n)), Reduce::Workgroup, "{n}");
        }
        for (n, lanes) in [(2, 2), (8, 8), (16, 16), (32, 16), (64, 16)] {
            assert_eq!(
                Reduce::for_subgroups(Some(n)),
                Reduce::Subgroup { lanes },
                "{n}"
            );
        }
    }

    #[test]
    fn padding_adds_a_word() {
        assert_eq!(padded_words(&[1, 2, 3]).len(), 8);
        assert_eq!(padded_words(&[1, 2, 3, 4]).len(), 8);
    }
}
