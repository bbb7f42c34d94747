//! Quantized kernels for GPUs (wgpu natively, WebGPU in the browser): GGUF blocks uploaded as
//! they are stored (u32 words) and dequantized inside the kernel, f32 accumulation.
//!
//! The kernels are WGSL, launched through CubeCL's runtime (the one burn-wgpu runs on), so the
//! same text runs natively and in the browser, and the burn model hands its buffers straight to
//! them. Why WGSL rather than `#[cube]` kernels: the browser path must avoid `shader-f16` (f16
//! block scales are decoded with core WGSL's `unpack2x16float`) and must not need subgroups
//! (partial sums meet through workgroup memory, or through subgroup shuffles where the adapter
//! has them: [`Reduce`], the same bits either way), and the byte-level reads of 18-, 22- and 210-byte blocks are
//! plain shifts here; written by hand, what runs on SwiftShader is exactly what was reviewed.
//!
//! Two kernels:
//! - [`Matmul`]: `y[m, out] = x[m, in] · W[out, in]ᵀ` for m = 1 … [`MAX_ROWS`]
//!   rows a launch (decode and verification; a prefill takes 16 rows a launch), one shader per
//!   (type, m). Each 32-value group of a weight row is decoded once to f32 and met by all m
//!   rows (8 dot products each), so a verification pass reads and decodes the weights once.
//!   Each row's sum is taken in an order that does not depend on m: a row's result is the same
//!   bit for bit whether it is computed alone or beside others (tested), which keeps greedy
//!   strict speculation equal to target-only decoding.
//! - [`Embed`]: rows of W dequantized for a list of token ids (the embedding lookup).
//!
//! A matrix larger than the adapter's largest storage binding is split by output rows
//! ([`split_rows`]); each part is its own buffer and launch, writing its own columns of `y`.
//!
//! Error bound: activations stay f32 here (no 8-bit rounding), so against an exact product over
//! the dequantized weights the only error is f32 rounding of products and sums: at most
//! ~`(n_in / 16 + 24) · 2⁻²⁴ · Σ|W·x|` per output, which the tests hold with a margin.

use core::ops::Range;
use std::borrow::Cow;

use cubecl::bytes::Bytes;
use cubecl::client::Client;
use cubecl::ir::settings::Dim3;
use cubecl::ir::{ElemType, UIntKind};
use cubecl::prelude::KernelId;
use cubecl::prelude::{AddressType, CubeCount, ExecutionMode, KernelSettings, Scope};
use cubecl::server::{Handle, KernelArguments};
use cubecl::{CubeKernel, PrecompiledSource};

use crate::block::WeightType;
use crate::error::{KernelError, Result};
use crate::kernels::MAX_ROWS;

const COMMON: &str = include_str!("common.wgsl");
const MATMUL: &str = include_str!("matmul.wgsl");
const EMBED: &str = include_str!("embed.wgsl");

/// Output rows per workgroup of [`Matmul`] (4 teams of 16 threads).
const ROWS_PER_GROUP: usize = 4;
/// Threads per workgroup of [`Embed`] (one per 32-value group).
const EMBED_THREADS: usize = 64;
/// Workgroups per dispatch dimension that every WebGPU adapter allows.
const MAX_GROUPS_PER_DIM: usize = 65_535;

/// The WGSL that decodes one 32-value group of `ty` at row byte `rb`, group `g`
/// (`fn load_group(rb: u32, g: u32)`, setting `q`, `s0`, `s1`, `mn`; see common.wgsl): one
/// file per type in `decode/`.
fn load_group(ty: WeightType) -> &'static str {
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

fn common(ty: WeightType) -> String {
    COMMON.replace("{{load_group}}", load_group(ty))
}

/// How the 16 partial sums of a [`Matmul`] team meet (see matmul.wgsl): both give the same
/// sums in the same order, so the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// The WGSL of [`Matmul`] for `ty`, `rows` activation rows and `reduce`.
pub fn matmul_source(ty: WeightType, rows: usize, reduce: Reduce) -> String {
    let lanes = reduce.lanes();
    let shuffles = if lanes > 1 {
        "    for (var step = LANES / 2u; step > 0u; step >>= 1u) {
        for (var r = 0u; r < ROWS; r++) {
            acc[r] += subgroupShuffleXor(acc[r], step);
        }
    }"
    } else {
        ""
    };
    MATMUL
        .replace("{{common}}", &common(ty))
        .replace("{{rows}}", &rows.to_string())
        .replace("{{lanes}}", &lanes.to_string())
        .replace("{{shuffles}}", shuffles)
}

/// The WGSL of [`Embed`] for `ty`.
pub fn embed_source(ty: WeightType) -> String {
    EMBED.replace("{{common}}", &common(ty))
}

/// A stable small code per type, for kernel cache keys.
const fn type_code(ty: WeightType) -> u32 {
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

fn definition() -> cubecl::prelude::KernelDefinition {
    // A hand-written kernel has no IR; the definition only keys the compilation cache.
    let settings =
        KernelSettings::new(Dim3::new_single(), ExecutionMode::Checked, AddressType::U32);
    cubecl::prelude::KernelDefinition {
        body: Scope::root(settings.clone()),
        settings,
        info: Default::default(),
    }
}

/// The quantized matmul kernel for one weight type and row count (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Matmul {
    ty: WeightType,
    rows: usize,
    reduce: Reduce,
}

impl cubecl::prelude::KernelMetadata for Matmul {
    fn id(&self) -> KernelId {
        KernelId::new::<Self>().info((type_code(self.ty), self.rows, self.reduce.lanes()))
    }

    fn address_type(&self) -> ElemType {
        ElemType::UInt(UIntKind::U32)
    }
}

impl CubeKernel for Matmul {
    fn define(&self) -> cubecl::prelude::KernelDefinition {
        definition()
    }

    fn source(&self) -> Option<PrecompiledSource> {
        Some(PrecompiledSource {
            source: matmul_source(self.ty, self.rows, self.reduce),
            entrypoint_name: "main".to_string(),
            lang: "wgsl",
        })
    }
}

/// The embedding lookup kernel for one weight type (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Embed {
    ty: WeightType,
}

impl cubecl::prelude::KernelMetadata for Embed {
    fn id(&self) -> KernelId {
        KernelId::new::<Self>().info(type_code(self.ty))
    }

    fn address_type(&self) -> ElemType {
        ElemType::UInt(UIntKind::U32)
    }
}

impl CubeKernel for Embed {
    fn define(&self) -> cubecl::prelude::KernelDefinition {
        definition()
    }

    fn source(&self) -> Option<PrecompiledSource> {
        Some(PrecompiledSource {
            source: embed_source(self.ty),
            entrypoint_name: "main".to_string(),
            lang: "wgsl",
        })
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
    ty: WeightType,
    rows: usize,
    cols: usize,
    max_bytes: u64,
) -> Result<Vec<Range<usize>>> {
    let row_bytes = row_bytes(ty, cols)?;
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

fn row_bytes(ty: WeightType, cols: usize) -> Result<usize> {
    if cols == 0 || !cols.is_multiple_of(ty.block_values()) {
        return Err(KernelError::RaggedRow {
            cols,
            block: ty.block_values(),
        });
    }
    Ok(cols / ty.block_values() * ty.block_bytes())
}

/// Spare bytes a part's buffer needs for [`padded_words`]' padding (up to 3 to a whole word,
/// then one word).
pub const PART_PAD: usize = 8;

/// Block bytes as the kernels read them: the bytes, zero-padded to a whole number of u32 words
/// plus one word (an unaligned read of a part's last bytes reads one word past them).
pub fn padded_words(blocks: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.len() + PART_PAD);
    out.extend_from_slice(blocks);
    out.resize(blocks.len().div_ceil(4) * 4 + 4, 0);
    out
}

/// One part of a weight matrix on the GPU: its blocks (see [`padded_words`]) and the
/// parameters [`Matmul`] and [`Embed`] read.
#[derive(Debug, Clone)]
pub struct GpuPart {
    /// The part's padded block bytes.
    pub weights: Handle,
    /// The output rows of the whole matrix this part holds.
    pub rows: Range<usize>,
    /// [`Matmul`]'s parameters for the launch of rows 0..16, made once at upload: decode and
    /// verification launch only that one, so a step uploads no parameters.
    first_launch: Handle,
}

/// [`Matmul`]'s parameters: `[out_rows, n_in, row_bytes, y_stride, y_offset, groups_x, row0]`.
fn matmul_params(
    part: &Range<usize>,
    cols: usize,
    row_bytes: usize,
    rows: usize,
    row0: usize,
) -> [u32; 7] {
    let (gx, _) = grid(part.len().div_ceil(ROWS_PER_GROUP));
    [part.len(), cols, row_bytes, rows, part.start, gx, row0].map(|v| v as u32)
}

/// A `[rows, cols]` matrix of GGUF blocks in GPU memory, split by output rows where needed.
#[derive(Debug, Clone)]
pub struct GpuMatrix {
    ty: WeightType,
    rows: usize,
    cols: usize,
    parts: Vec<GpuPart>,
    reduce: Reduce,
}

impl GpuMatrix {
    /// Uploads `blocks` (a `[rows, cols]` matrix of `ty`, rows of whole blocks) to `client`,
    /// split into parts of at most `max_binding` bytes.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a size that does not match the shape, and as [`split_rows`].
    pub fn upload(
        client: &Client,
        ty: WeightType,
        rows: usize,
        cols: usize,
        blocks: &[u8],
        max_binding: u64,
    ) -> Result<Self> {
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
        ty: WeightType,
        rows: usize,
        cols: usize,
        max_binding: u64,
        mut read: impl FnMut(Range<u64>) -> std::result::Result<Cow<'b, [u8]>, E>,
    ) -> std::result::Result<Self, E> {
        let rb = row_bytes(ty, cols)?;
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
            let padded = match data {
                Cow::Owned(mut v) => {
                    v.resize(expected.div_ceil(4) * 4 + 4, 0);
                    v
                }
                Cow::Borrowed(b) => padded_words(b),
            };
            parts.push(GpuPart {
                // `create` takes the buffer as is (`create_from_slice` would copy it twice).
                weights: client.create(Bytes::from_bytes_vec(padded)),
                first_launch: client
                    .create_from_slice(&u32_bytes(&matmul_params(&range, cols, rb, rows, 0))),
                rows: range,
            });
        }
        Ok(Self {
            ty,
            rows,
            cols,
            parts,
            reduce: Reduce::detect(client),
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

    /// The block type.
    pub fn ty(&self) -> WeightType {
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

    /// Bytes of blocks a full product reads.
    pub fn bytes(&self) -> u64 {
        (self.rows * self.ty.block_bytes() * (self.cols / self.ty.block_values())) as u64
    }

    /// Enqueues `y[t, rows] = x[t, cols] · Wᵀ` on `client`: `x` holds `t` f32 rows of `cols`
    /// values, `y` room for `t` f32 rows of [`GpuMatrix::rows`] values (both contiguous). Rows
    /// go [`MAX_ROWS`] at a time (a prefill reads the weights once per 16 rows); each row's
    /// result is the same whichever launch computes it.
    ///
    /// # Errors
    /// [`KernelError::TooManyRows`] for t = 0, [`KernelError::Shape`] for buffers smaller than
    /// the shapes need.
    pub fn matmul(&self, client: &Client, x: &Handle, y: &Handle, t: usize) -> Result<()> {
        if t == 0 {
            return Err(KernelError::TooManyRows {
                rows: 0,
                max: MAX_ROWS,
            });
        }
        self.check_size("x", x, t * self.cols * 4)?;
        self.check_size("y", y, t * self.rows * 4)?;
        let rb = row_bytes(self.ty, self.cols)?;
        for row0 in (0..t).step_by(MAX_ROWS) {
            let m = (t - row0).min(MAX_ROWS);
            for part in &self.parts {
                let (gx, gy) = grid(part.rows.len().div_ceil(ROWS_PER_GROUP));
                let params = if row0 == 0 {
                    part.first_launch.clone()
                } else {
                    let p = matmul_params(&part.rows, self.cols, rb, self.rows, row0);
                    client.create_from_slice(&u32_bytes(&p))
                };
                client.launch(
                    Box::new(Matmul {
                        ty: self.ty,
                        rows: m,
                        reduce: self.reduce,
                    }),
                    CubeCount::Static(gx as u32, gy as u32, 1),
                    KernelArguments::new()
                        .with_buffer(part.weights.clone().binding())
                        .with_buffer(x.clone().binding())
                        .with_buffer(y.clone().binding())
                        .with_buffer(params.binding()),
                );
            }
        }
        Ok(())
    }

    /// Enqueues the lookup of `n_ids` rows: `ids` holds u32 row indices (each below
    /// [`GpuMatrix::rows`]; the caller checks them), `out` room for `n_ids` f32 rows of
    /// [`GpuMatrix::cols`] values.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for buffers of the wrong size or more ids than one dispatch takes.
    pub fn embed(&self, client: &Client, ids: &Handle, out: &Handle, n_ids: usize) -> Result<()> {
        self.check_size("ids", ids, n_ids * 4)?;
        self.check_size("out", out, n_ids * self.cols * 4)?;
        if n_ids == 0 || n_ids > MAX_GROUPS_PER_DIM {
            return Err(KernelError::Shape {
                what: "token ids in one lookup (at most 65,535)",
                expected: n_ids.clamp(1, MAX_GROUPS_PER_DIM),
                found: n_ids,
            });
        }
        let rb = row_bytes(self.ty, self.cols)?;
        let gx = (self.cols / 32).div_ceil(EMBED_THREADS);
        for part in &self.parts {
            let params = [part.rows.len(), self.cols, rb, part.rows.start, n_ids].map(|v| v as u32);
            let params = client.create_from_slice(u32_bytes(&params).as_slice());
            client.launch(
                Box::new(Embed { ty: self.ty }),
                CubeCount::Static(gx as u32, n_ids as u32, 1),
                KernelArguments::new()
                    .with_buffer(part.weights.clone().binding())
                    .with_buffer(ids.clone().binding())
                    .with_buffer(out.clone().binding())
                    .with_buffer(params.binding()),
            );
        }
        Ok(())
    }

    fn check_size(&self, what: &'static str, handle: &Handle, want: usize) -> Result<()> {
        let have = usize::try_from(handle.size()).unwrap_or(usize::MAX);
        if have < want {
            return Err(KernelError::Shape {
                what,
                expected: want,
                found: have,
            });
        }
        Ok(())
    }
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
    fn split_keeps_parts_under_the_limit() {
        // 151,936 × 1,536 Q6_K (the Qwen2.5-1.5B head): 191 MB, over WebGPU's default 128 MiB.
        let parts = split_rows(WeightType::Q6K, 151_936, 1_536, 128 << 20).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].start, 0);
        assert_eq!(parts.last().unwrap().end, 151_936);
        for p in &parts {
            assert!((p.len() * 6 * 210 + 4) as u64 <= 128 << 20);
        }
        assert!(split_rows(WeightType::Q8_0, 4, 64, 50).is_err());
        assert!(split_rows(WeightType::Q4K, 4, 100, 1 << 20).is_err());
    }

    #[test]
    fn grid_stays_within_a_dimension() {
        assert_eq!(grid(10), (10, 1));
        let (x, y) = grid(200_000);
        assert!(x <= MAX_GROUPS_PER_DIM && x * y >= 200_000);
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
