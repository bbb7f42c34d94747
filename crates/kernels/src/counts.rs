//! What the GPU kernels (the `gpu` feature) have asked of the device since the process
//! started: launches by kind, distinct kernels (each compiled into a pipeline once), buffers
//! written from the host and reads back to it. Counted where each is asked, so a step's cost
//! is the difference of two snapshots, not an estimate. Always compiled (zeros without the
//! feature), so callers need no feature of their own to report it.

// The kernels seen, one lookup a launch: Fx where the GPU path has it (std's SipHash cost a
// launch ~200 instructions of the host's ~6.5k, callgrind on the no-op card).
#[cfg(feature = "gpu")]
type HashSet<T> = rustc_hash::FxHashSet<T>;
#[cfg(not(feature = "gpu"))]
type HashSet<T> = std::collections::HashSet<T>;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Kinds of GPU kernel ([`Kind::ALL`]).
pub const KINDS: usize = 8;

/// The kinds of GPU kernel, as [`GpuCounts`] splits launches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Matrix products (with their epilogues).
    Matmul = 0,
    /// Embedding lookups.
    Embed = 1,
    /// RMSNorms.
    Norm = 2,
    /// RoPE and cache writes.
    Rope = 3,
    /// Attention.
    Attention = 4,
    /// Logit summaries.
    Summary = 5,
    /// Tree row moves and cache copies.
    Copy = 6,
    /// Activations quantized to 8 bits for a matrix product.
    Quantize = 7,
}

impl Kind {
    /// Every kind, in [`GpuCounts::by_kind`]'s order.
    pub const ALL: [Self; KINDS] = [
        Self::Matmul,
        Self::Embed,
        Self::Norm,
        Self::Rope,
        Self::Attention,
        Self::Summary,
        Self::Copy,
        Self::Quantize,
    ];

    /// The kind's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Matmul => "matmul",
            Self::Embed => "embed",
            Self::Norm => "norm",
            Self::Rope => "rope",
            Self::Attention => "attention",
            Self::Summary => "summary",
            Self::Copy => "copy",
            Self::Quantize => "quantize",
        }
    }
}

/// What the kernels of this module have asked of the GPU since the process started: counted
/// where it is asked (every launch, upload and read goes through this module), so a step's
/// cost is a difference of two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuCounts {
    /// Kernel launches (dispatches).
    pub launches: u64,
    /// Launches per [`Kind`], in [`Kind::ALL`]'s order.
    pub by_kind: [u64; KINDS],
    /// Distinct kernels launched: each is compiled into a pipeline once, on first use.
    pub pipelines: u64,
    /// Buffers written from the host (each a queue write).
    pub uploads: u64,
    /// Bytes written from the host.
    pub upload_bytes: u64,
    /// Reads back to the host (each waits for the GPU).
    pub reads: u64,
    /// Bytes read back.
    pub read_bytes: u64,
    /// Bind groups made by direct launches (`gpu::direct`; a launch meeting the kernel and the
    /// buffers of an earlier one makes none; CubeCL's launches make one each, not counted).
    pub bind_groups: u64,
    /// Buffers resolved to their wgpu buffers by direct launches (a round trip to CubeCL's
    /// runtime each, once a buffer's life).
    pub resolved: u64,
    /// Buffers direct launches let go of after their owners dropped them.
    pub released: u64,
    /// Launches that went through CubeCL on a client launching directly: a pipeline wgpu
    /// refused (or, in the browser, has not accepted yet), an indirect count, a binding CubeCL
    /// could not resolve.
    pub fallbacks: u64,
}

impl GpuCounts {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &GpuCounts) -> GpuCounts {
        let mut by_kind = [0; KINDS];
        for (i, k) in by_kind.iter_mut().enumerate() {
            *k = self.by_kind[i].saturating_sub(earlier.by_kind[i]);
        }
        GpuCounts {
            launches: self.launches.saturating_sub(earlier.launches),
            by_kind,
            pipelines: self.pipelines.saturating_sub(earlier.pipelines),
            uploads: self.uploads.saturating_sub(earlier.uploads),
            upload_bytes: self.upload_bytes.saturating_sub(earlier.upload_bytes),
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            bind_groups: self.bind_groups.saturating_sub(earlier.bind_groups),
            resolved: self.resolved.saturating_sub(earlier.resolved),
            released: self.released.saturating_sub(earlier.released),
            fallbacks: self.fallbacks.saturating_sub(earlier.fallbacks),
        }
    }
}

struct Counters {
    launches: AtomicU64,
    by_kind: [AtomicU64; KINDS],
    uploads: AtomicU64,
    upload_bytes: AtomicU64,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    bind_groups: AtomicU64,
    resolved: AtomicU64,
    released: AtomicU64,
    fallbacks: AtomicU64,
    seen: Mutex<Option<HashSet<(u8, u64)>>>,
}

static COUNTERS: Counters = Counters {
    launches: AtomicU64::new(0),
    by_kind: [const { AtomicU64::new(0) }; KINDS],
    uploads: AtomicU64::new(0),
    upload_bytes: AtomicU64::new(0),
    reads: AtomicU64::new(0),
    read_bytes: AtomicU64::new(0),
    bind_groups: AtomicU64::new(0),
    resolved: AtomicU64::new(0),
    released: AtomicU64::new(0),
    fallbacks: AtomicU64::new(0),
    seen: Mutex::new(None),
};

/// The counts so far (see [`GpuCounts`]).
pub fn gpu_counts() -> GpuCounts {
    let c = &COUNTERS;
    let mut by_kind = [0; KINDS];
    for (i, k) in by_kind.iter_mut().enumerate() {
        *k = c.by_kind[i].load(Ordering::Relaxed);
    }
    let pipelines = c
        .seen
        .lock()
        .map_or(0, |s| s.as_ref().map_or(0, |s| s.len() as u64));
    GpuCounts {
        launches: c.launches.load(Ordering::Relaxed),
        by_kind,
        pipelines,
        uploads: c.uploads.load(Ordering::Relaxed),
        upload_bytes: c.upload_bytes.load(Ordering::Relaxed),
        reads: c.reads.load(Ordering::Relaxed),
        read_bytes: c.read_bytes.load(Ordering::Relaxed),
        bind_groups: c.bind_groups.load(Ordering::Relaxed),
        resolved: c.resolved.load(Ordering::Relaxed),
        released: c.released.load(Ordering::Relaxed),
        fallbacks: c.fallbacks.load(Ordering::Relaxed),
    }
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) fn counted_launch(kind: Kind, key: (u8, u64)) {
    let c = &COUNTERS;
    c.launches.fetch_add(1, Ordering::Relaxed);
    c.by_kind[kind as usize].fetch_add(1, Ordering::Relaxed);
    if let Ok(mut seen) = c.seen.lock() {
        seen.get_or_insert_with(HashSet::default).insert(key);
    }
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) fn counted_upload(bytes: usize) {
    COUNTERS.uploads.fetch_add(1, Ordering::Relaxed);
    COUNTERS
        .upload_bytes
        .fetch_add(bytes as u64, Ordering::Relaxed);
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) fn counted_read(bytes: usize) {
    COUNTERS.reads.fetch_add(1, Ordering::Relaxed);
    COUNTERS
        .read_bytes
        .fetch_add(bytes as u64, Ordering::Relaxed);
}

/// What a direct launch did beside launching (`gpu::direct`).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) enum DirectWork {
    /// A bind group made.
    BindGroup,
    /// A buffer resolved to its wgpu buffer.
    Resolved,
    /// Buffers let go of.
    Released(u64),
    /// A launch left to CubeCL.
    Fallback,
}

#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) fn counted_direct(work: DirectWork) {
    let c = &COUNTERS;
    let (counter, n) = match work {
        DirectWork::BindGroup => (&c.bind_groups, 1),
        DirectWork::Resolved => (&c.resolved, 1),
        DirectWork::Released(n) => (&c.released, n),
        DirectWork::Fallback => (&c.fallbacks, 1),
    };
    counter.fetch_add(n, Ordering::Relaxed);
}
