//! The GPU back-end ([`WeightPath::GpuBlocks`](crate::WeightPath::GpuBlocks)): every matrix as its
//! GGUF blocks (or the file's f32 values) in GPU buffers, and a Llama block as eight launches of
//! mars-kernels' fused WGSL kernels (`mars_kernels::gpu`) on the CubeCL client burn's wgpu device
//! runs on: RMSNorm, q | k | v (with Qwen2's biases), RoPE with the KV-cache write (Qwen3's
//! head norms before it), attention over the cache, o with the residual added in place,
//! RMSNorm, gate | up with SiLU(gate)·up, down with the residual. On GPU cards decoding and
//! verification take five: the norms folded into q | k | v and gate | up, RoPE and the cache
//! write into attention (and the final norm into the head). The embedding lookup comes
//! before the blocks, the final norm and the head (on the logit rows only) after. A forward pass
//! uploads one step buffer (token ids, positions, tree masks) and launches the rest; shapes are
//! in parameter buffers made at load. Every kernel treats a row the same whatever rows are
//! beside it, so a row's logits do not depend on the batch, and a token tree's row equals the
//! chain over its path, bit for bit.

use std::sync::Arc;

use burn::backend::Cube;
use burn::tensor::{Device, Tensor};
use cubecl::server::Handle;
use mars_kernels::gpu::{
    Attention, CopyRows, Draw, Epilogue, Form, GpuMatrix, GpuType, Heads, KvType, Link, MAX_TOP,
    MatrixGroup, Norm, PART_PAD, Reduce, Rope, Rows, SUMMARY_WORDS, Slot, Step, StepBuffer,
    Summary, TileForm, TopRows, clone_buffer, link_ids, output_buffer,
};

use crate::backend::{Backend, LayerCache, Pass, Reads, rope_tables};
use crate::config::{LlamaConfig, RopeStyle};
use crate::error::{ModelError, Result};
use crate::path::AdapterFacts;
use crate::tensors::{BlockTensors, Named, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};
use crate::weights::{Weights, freq_factors, packable_stored, read};
use mars_verify::{RowDraw, RowSummary, RowTop, SampleKeys};

/// Largest part a matrix is uploaded in (and later multiplied as, one launch per part): a
/// loader reading from a file not held in memory (the page's `Blob`) holds one part at a time,
/// so this bounds the wasm heap a load needs beyond the tokenizer; the Qwen2.5 embedding
/// (151,936 × 1,536 as Q6_K, 191 MB) goes in three parts, a 32B's gate and up (27,648 × 5,120
/// as Q4_K, 80 MB each) in two each, launched part beside part.
pub(crate) const LOAD_PART_BYTES: u64 = 64 << 20;

/// The CubeCL client behind a burn wgpu device, found once per model load.
#[derive(Clone)]
pub(crate) struct GpuTarget {
    client: cubecl::client::Client,
    /// How the kernels' partial sums meet on this device.
    reduce: Reduce,
    /// The largest part a matrix is uploaded in: [`LOAD_PART_BYTES`], or less where the
    /// runtime's pages or the device's bindings are smaller.
    part_bytes: u64,
}

impl GpuTarget {
    /// Read off a one-value tensor: the one handle burn gives to its runtime. `subgroups`: the
    /// adapter's smallest subgroup where it offers subgroups ([`WeightPath::GpuBlocks`]).
    ///
    /// # Errors
    /// [`ModelError::Unsupported`] for a device that is not wgpu.
    ///
    /// [`WeightPath::GpuBlocks`]: crate::WeightPath::GpuBlocks
    /// `max_binding`: the device's largest binding where the caller knows it
    /// ([`DeviceLimits::max_buffer_bytes`](crate::DeviceLimits)).
    pub(crate) fn of(
        device: &Device,
        subgroups: Option<u32>,
        max_binding: Option<u64>,
    ) -> Result<Self> {
        let client = client_of(device)?;
        let reduce = match subgroups {
            Some(_) => Reduce::for_subgroups(subgroups),
            None => Reduce::detect(&client),
        };
        let part_bytes = client
            .properties()
            .memory
            .max_page_size
            .min(LOAD_PART_BYTES)
            .min(max_binding.unwrap_or(u64::MAX));
        Ok(Self {
            client,
            reduce,
            part_bytes,
        })
    }
}

/// The adapter's smallest subgroup where it offers subgroups (wgpu's `SUBGROUP`, reported by
/// Vulkan, Metal and D3D12 adapters, lavapipe's included; wgpu's WebGPU backend reports none),
/// for [`WeightPath::GpuBlocks`](crate::WeightPath::GpuBlocks); `None` without them
/// or with a size the kernels cannot use (not a power of two of at least 2).
pub fn subgroup_lanes(adapter: &burn::backend::wgpu::wgpu::Adapter) -> Option<u32> {
    use burn::backend::wgpu::wgpu::Features;
    let min = adapter.get_info().subgroup_min_size;
    let usable = Reduce::for_subgroups(Some(min)) != Reduce::Workgroup;
    (adapter.features().contains(Features::SUBGROUP) && usable).then_some(min)
}

/// [`AdapterFacts`] of the adapter wgpu gives first (high performance, as CubeCL's default
/// device picks it), asked of its own wgpu instance before CubeCL opens the device; `None` where
/// there is none.
pub async fn first_adapter() -> Option<AdapterFacts> {
    use burn::backend::wgpu::wgpu;
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .ok()?;
    let info = adapter.get_info();
    Some(AdapterFacts {
        name: format!("{} ({:?})", info.name, info.backend),
        software: adapter_software(&adapter),
        blocks_unsupported: blocks_unsupported(&adapter),
    })
}

/// Opens burn's wgpu device (once a process): one copy for the engine and the examples. CubeCL
/// submits its recorded launches every `tasks_max` of them (32 by default) and before every
/// read back; a forward is five to eight launches a layer plus a few and ends in a read: one
/// submit a forward on a CPU adapter, 32 launches a submit on a GPU ([`submit_every_on`] for
/// the adapter `seen` before, else [`submit_every`]; both measured). `CUBECL_WGPU_MAX_TASKS`,
/// where set, still decides. Natively, where `WGPU_NOOP_BACKEND=1`, the device is wgpu's no-op
/// backend dressed as a card ([`noop_card`]); where `MARS_GPU_ROBUST=off` on Vulkan, a device
/// without the driver's bounds checks
/// ([`mars_kernels::gpu::setup_without_robustness`]). The kernels then launch straight into
/// wgpu, their bind groups kept ([`mars_kernels::gpu::direct`]; natively `MARS_GPU_LAUNCH=cubecl`
/// launches through CubeCL), submitted as often as CubeCL would; natively, where
/// `MARS_GPU_PROFILE=FILE`, each direct launch's device time goes to FILE
/// ([`mars_kernels::gpu::direct::profile`]).
///
/// # Errors
/// What wgpu or CubeCL refused, in words (no adapter, no device, a setup refused, a
/// `MARS_GPU_LAUNCH` it does not know, a profile the device cannot take).
pub async fn open_wgpu(
    seen: Option<&AdapterFacts>,
) -> std::result::Result<(Device, burn::backend::wgpu::WgpuSetup), String> {
    #[cfg(all(feature = "wgpu", not(target_family = "wasm")))]
    let noop = noop_setup().await.map_err(|e| e.to_string())?;
    #[cfg(not(all(feature = "wgpu", not(target_family = "wasm"))))]
    let noop: Option<burn::backend::wgpu::WgpuSetup> = None;
    #[cfg(all(
        feature = "wgpu",
        any(windows, target_os = "linux", target_os = "android")
    ))]
    let unrobust = match noop {
        Some(_) => None,
        None => mars_kernels::gpu::setup_without_robustness().await?,
    };
    #[cfg(not(all(
        feature = "wgpu",
        any(windows, target_os = "linux", target_os = "android")
    )))]
    let unrobust: Option<burn::backend::wgpu::WgpuSetup> = None;
    let mut options = Device::wgpu_options();
    let tasks = match seen {
        _ if noop.is_some() => SUBMIT_EVERY_GPU,
        Some(adapter) => submit_every_on(Some(adapter)),
        None => submit_every().await,
    };
    // CubeCL reads the variable itself where it is set; the direct launches submit as often.
    let submit_every = match std::env::var("CUBECL_WGPU_MAX_TASKS") {
        Ok(v) => v.parse().unwrap_or(tasks),
        Err(_) => {
            options = options.tasks_max(tasks);
            tasks
        }
    };
    let opened = match noop.or(unrobust) {
        Some(setup) => options.setup(setup.clone()).init().map(|d| (d, setup)),
        None => options.init_with_setup_async().await,
    };
    let (device, setup) = opened.map_err(|e| e.to_string())?;
    if mars_kernels::gpu::direct::wanted()? {
        let client = client_of(&device).map_err(|e| e.to_string())?;
        mars_kernels::gpu::direct::register(
            &client,
            setup.device.clone(),
            setup.queue.clone(),
            submit_every,
        );
        // A per-launch profile of the device's time (tests/bench/gpu-profile.sh).
        #[cfg(not(target_family = "wasm"))]
        if let Some(path) = std::env::var_os("MARS_GPU_PROFILE") {
            mars_kernels::gpu::direct::profile(&client, std::path::Path::new(&path))
                .map_err(|e| format!("MARS_GPU_PROFILE: {e}"))?;
        }
    }
    Ok((device, setup))
}

/// wgpu's no-op backend dressed as a GPU card, where `WGPU_NOOP_BACKEND=1` (wgpu's own switch):
/// every launch is validated, recorded and submitted as on a card, and nothing runs (buffers
/// exist, reads return what they hold). What a run then takes is the host's side of the card
/// configuration alone — CubeCL's runtime and wgpu-core, without a driver — the half of a
/// GPU's launch cost that a machine without a GPU can measure and profile (`bench.sh
/// gpu-host`). A discrete adapter with subgroups of 32, as NVIDIA's, and wgpu's features but the
/// experimental ones (the cooperative matrices among them). `None` where the
/// switch is off; an error where wgpu gives no adapter or device.
///
/// # Errors
/// [`ModelError::Unsupported`] naming what wgpu refused.
#[cfg(all(feature = "wgpu", not(target_family = "wasm")))]
async fn noop_setup() -> Result<Option<burn::backend::wgpu::WgpuSetup>> {
    if std::env::var("WGPU_NOOP_BACKEND").as_deref() != Ok("1") {
        return Ok(None);
    }
    noop_card().await.map(Some)
}

/// [`noop_setup`]'s card, whatever the environment says (a test's).
///
/// # Errors
/// [`ModelError::Unsupported`] naming what wgpu refused.
#[cfg(all(feature = "wgpu", not(target_family = "wasm")))]
pub async fn noop_card() -> Result<burn::backend::wgpu::WgpuSetup> {
    use burn::backend::wgpu::wgpu;
    // Every feature but the experimental ones (which a device grants only with an `unsafe`
    // opt-in) and mappable primary buffers (which CubeCL declines on every card).
    let features = wgpu::Features::all()
        .iter_names()
        .filter(|(name, _)| !name.starts_with("EXPERIMENTAL_"))
        .fold(wgpu::Features::empty(), |all, (_, f)| all | f)
        - wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
    descriptor.backends = wgpu::Backends::NOOP;
    descriptor.backend_options.noop = wgpu::NoopBackendOptions {
        enable: true,
        features: Some(features),
        device_type: Some(wgpu::DeviceType::DiscreteGpu),
        subgroup_min_size: Some(32),
        subgroup_max_size: Some(32),
        // WebGPU's defaults, raised where a Vulkan card's are (wgpu-core sizes its tables by
        // the limits: the backend's own, "unlimited", fail there).
        limits: Some(wgpu::Limits {
            max_storage_buffers_per_shader_stage: 16,
            max_storage_buffer_binding_size: u64::from(u32::MAX) & !3,
            max_buffer_size: 1 << 40,
            max_compute_workgroup_storage_size: 48 << 10,
            max_immediate_size: 128,
            ..wgpu::Limits::default()
        }),
    };
    let instance = wgpu::Instance::new(descriptor);
    let refused = |what: &str, e: &dyn std::fmt::Display| {
        ModelError::Unsupported(format!("wgpu's no-op backend: {what}: {e}"))
    };
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions::default())
        .await
        .map_err(|e| refused("no adapter", &e))?;
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            required_features: adapter.features(),
            required_limits: adapter.limits(),
            ..Default::default()
        })
        .await
        .map_err(|e| refused("no device", &e))?;
    Ok(burn::backend::wgpu::WgpuSetup {
        instance,
        adapter,
        device,
        queue,
        backend: wgpu::Backend::Noop,
    })
}

/// Whether `adapter` runs on the CPU (lavapipe, llvmpipe, SwiftShader, WARP: wgpu's
/// `DeviceType::Cpu`).
pub fn adapter_software(adapter: &burn::backend::wgpu::wgpu::Adapter) -> bool {
    adapter.get_info().device_type == burn::backend::wgpu::wgpu::DeviceType::Cpu
}

/// The adapter's name, API and driver, e.g. "NVIDIA H200 (Vulkan) NVIDIA 580.159.04": what the
/// tuning table keys a GPU's chosen forms by, so that another driver tunes anew.
pub fn adapter_identity(adapter: &burn::backend::wgpu::wgpu::Adapter) -> String {
    let info = adapter.get_info();
    format!(
        "{} ({:?}) {} {}",
        info.name, info.backend, info.driver, info.driver_info
    )
    .trim()
    .to_string()
}

/// Launches CubeCL records before it submits them, for the adapter wgpu picks first
/// ([`first_adapter`]): 512 on a CPU adapter (lavapipe, SwiftShader, Chrome's fallback adapter),
/// where a forward in one submit decoded ~15 % faster than in CubeCL's 32 a submit (9 submits a
/// token), and 32 on a GPU, where the host records the rest of the forward while the GPU runs
/// what was submitted: on an H100 a forward in one submit decoded the 0.5B's shapes at 138–142
/// tok/s, 32 a submit at 213–216 (docs/lab/journal-2026-11.md, the H100). The runtime's
/// options are fixed when it opens; an adapter that cannot be had gives the CPU's number
/// (CubeCL will then fail to open it too).
pub async fn submit_every() -> usize {
    submit_every_on(first_adapter().await.as_ref())
}

/// [`submit_every`] for an adapter already looked at ([`first_adapter`]).
pub fn submit_every_on(adapter: Option<&AdapterFacts>) -> usize {
    match adapter {
        Some(a) if !a.software => SUBMIT_EVERY_GPU,
        _ => SUBMIT_EVERY_CPU,
    }
}

/// [`submit_every`] on a CPU adapter.
pub const SUBMIT_EVERY_CPU: usize = 512;
/// [`submit_every`] on a GPU.
pub const SUBMIT_EVERY_GPU: usize = 32;

/// Why the block kernels cannot run on `adapter`, or `None` where they can. They decode f16
/// block scales with `unpack2x16float` (core WGSL), which wgpu grants through the downlevel flag
/// `SHADER_F16_IN_F32`: every backend sets it (the browser's included), but wgpu withdraws it on
/// llvmpipe without `shader-f16`, where creating the kernels' pipelines would fail.
pub fn blocks_unsupported(adapter: &burn::backend::wgpu::wgpu::Adapter) -> Option<&'static str> {
    use burn::backend::wgpu::wgpu::DownlevelFlags;
    let flags = adapter.get_downlevel_capabilities().flags;
    (!flags.contains(DownlevelFlags::SHADER_F16_IN_F32)).then_some(
        "the adapter cannot unpack f16 values in shaders (wgpu's SHADER_F16_IN_F32: llvmpipe \
         without shader-f16), so the GGUF block kernels cannot run: weights go to it as f32",
    )
}

/// A tuned form's outputs, or `None` where the device refused one of its kernels: the tuning
/// then counts the form as disagreeing and goes on to the next, where any other error ends it.
fn refused_as_none(
    output: std::result::Result<Vec<f32>, mars_kernels::KernelError>,
) -> Result<Option<Vec<f32>>> {
    match output {
        Ok(output) => Ok(Some(output)),
        Err(mars_kernels::KernelError::Refused { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn client_of(device: &Device) -> Result<cubecl::client::Client> {
    let probe = Tensor::<1>::zeros([1], device)
        .try_into_primitive::<Cube>()
        .map_err(|e| {
            ModelError::Unsupported(format!("GGUF blocks on the GPU need a wgpu device: {e:?}"))
        })?;
    Ok(probe.client.clone())
}

/// The CubeCL client a model's buffers live on (its own type: the client has no `Debug`).
#[derive(Clone)]
pub(crate) struct Client(cubecl::client::Client);

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cubecl::client::Client")
    }
}

impl std::ops::Deref for Client {
    type Target = cubecl::client::Client;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The most rows a timed pass takes (the kernels' mat-vec bound).
pub(crate) const MAX_PASS_ROWS: usize = 16;

/// A distinct shape of a model's matrix groups and the form its groups run in
/// (`Llama::group_forms`).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupForm {
    /// What the groups do: `qkv`, `o`, `gate+up`, `down` or `head`.
    pub role: &'static str,
    /// `MatrixGroup::shape_key`: what the tuning table keys.
    pub shape: String,
    /// Groups of this shape in the model.
    pub groups: usize,
    /// The form they run in.
    pub form: Form,
}

/// A form's measured cost on one group shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FormTime {
    /// The form.
    pub form: Form,
    /// Whether its outputs agreed with the current form's (within the order of f32 sums:
    /// `mars_kernels::gpu::outputs_agree`); the times are NaN where not: it was
    /// not timed.
    pub agrees: bool,
    /// Milliseconds a product of one row.
    pub one_row_ms: f64,
    /// Milliseconds a product of a verification pass's rows.
    pub pass_ms: f64,
}

/// A prefill form's measured cost on one group shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillTime {
    /// The form: the fastest team and fan, with this prefill form.
    pub form: Form,
    /// Whether its outputs agreed with the mat-vec form's (NaN ms where not: not timed).
    pub agrees: bool,
    /// Milliseconds a product of `mars_kernels::gpu::PREFILL_ROWS_TIMED` rows.
    pub ms: f64,
}

/// One group shape timed in every form it can take (`Llama::time_forms`).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupTiming {
    /// The shape, and the form its groups ran in when timed.
    pub shape: GroupForm,
    /// Each team and fan's cost.
    pub times: Vec<FormTime>,
    /// Each prefill form's cost in the fastest team and fan (none for the head).
    pub prefill: Vec<PrefillTime>,
}

/// How much faster than a group's own form (the rules', a card's wide forms) a timed form must
/// be to replace it: more than a timing's spread between rounds, so that noise never moves a
/// group off the form it had (on an H200 the 2026-12-04 lease's rounds of one form agreed
/// within ~1–3 %).
pub const KEEP_MARGIN: f64 = 0.05;

impl GroupTiming {
    /// The form with the least cost of a one-row step (decoding, drafting) among those whose
    /// outputs agreed, ties to the earlier form; the group's own one-row form where it is
    /// within [`KEEP_MARGIN`] of that least, or where the least is 0 (nothing measured).
    pub fn best_one_row(&self) -> Option<FormTime> {
        self.fastest_or_own(|f| f.one_row_ms, self.shape.form.one_row())
    }

    /// The form with the least cost of a verification pass's rows among those whose outputs
    /// agreed, ties to the earlier form, or the group's own pass form within [`KEEP_MARGIN`]
    /// of it: the form of the group's passes of more than one row, chosen apart from the
    /// one-row form (`Form::pass`).
    pub fn best_pass(&self) -> Option<FormTime> {
        self.fastest_or_own(|f| f.pass_ms, self.shape.form.pass_form())
    }

    fn fastest_or_own(
        &self,
        cost: impl Fn(&FormTime) -> f64,
        own: mars_kernels::gpu::MatVec,
    ) -> Option<FormTime> {
        let agreeing = || self.times.iter().copied().filter(|f| f.agrees);
        let fastest = agreeing().min_by(|a, b| cost(a).total_cmp(&cost(b)))?;
        // A product timed at 0 (shorter than the evictions' spread, `time_group`) measured
        // nothing: it moves no group off its own form.
        match agreeing().find(|f| f.form.one_row() == own) {
            Some(kept)
                if cost(&fastest) <= 0.0 || cost(&fastest) >= cost(&kept) * (1.0 - KEEP_MARGIN) =>
            {
                Some(kept)
            }
            _ => Some(fastest),
        }
    }

    /// The fastest one-row form with the fastest pass form as its passes' (no pass form where
    /// they are the same), with the shape's prefill form.
    pub fn best(&self) -> Option<Form> {
        let one = self.best_one_row()?.form;
        let pass = self.best_pass()?.form;
        Some(Form {
            pass: Some(pass.one_row()).filter(|&p| p != one.one_row()),
            prefill: self.shape.form.prefill,
            split: self.shape.form.split,
            ..one
        })
    }

    /// The fastest prefill form among those whose outputs agreed, ties to the earlier (the
    /// mat-vec form first); `None` for a shape without a prefill (the head).
    pub fn best_prefill(&self) -> Option<PrefillTime> {
        self.prefill
            .iter()
            .copied()
            .filter(|p| p.agrees)
            .min_by(|a, b| a.ms.total_cmp(&b.ms))
    }

    /// The form to keep: [`GroupTiming::best`] with the fastest prefill form (timed in it).
    pub fn chosen(&self) -> Option<Form> {
        let best = self.best()?;
        Some(self.best_prefill().map_or(best, |p| p.form))
    }
}

/// One decoder block's kernels and weights.
#[derive(Debug, Clone)]
pub(crate) struct GpuLayer {
    attn_norm: Norm,
    qkv: MatrixGroup,
    rope: Rope,
    attention: Attention,
    o: MatrixGroup,
    ffn_norm: Norm,
    gate_up: MatrixGroup,
    down: MatrixGroup,
}

/// A model on the GPU path (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct GpuModel {
    client: Client,
    embedding: GpuMatrix,
    layers: Vec<Arc<GpuLayer>>,
    out_norm: Norm,
    lm_head: MatrixGroup,
    summary: Summary,
    tops: TopCache,
    draws: DrawCache,
    copy: CopyRows,
    heads: Heads,
    kv: KvType,
    /// Tensors converted to Q8_0 at load (no kernel takes their type), as "name (type)".
    converted: Arc<Vec<String>>,
    /// The passes' own buffers, kept from one pass to the next ([`Scratch`]).
    scratch: ScratchSlot,
}

impl GpuModel {
    /// Uploads the weights of `c` from `g` to `device`: each matrix as stored where the
    /// kernels take its type (f32 matrices as f32), else converted once to Q8_0.
    ///
    /// # Errors
    /// Missing or mis-shaped tensors; [`ModelError::Unsupported`] for a device that is not wgpu;
    /// the kernels' error for a shape they cannot run.
    pub(crate) fn load(
        c: &LlamaConfig,
        g: &dyn Weights,
        device: &Device,
        (subgroups, kv): (Option<u32>, KvType),
        max_binding: Option<u64>,
    ) -> Result<Self> {
        let target = GpuTarget::of(device, subgroups, max_binding)?;
        let client = target.client.clone();
        let (d, hd, v) = (c.d_model, c.head_dim, c.vocab_size);
        let mut converted = Vec::new();
        let mut matrix = |name: &str, (rows, cols): (usize, usize)| -> Result<GpuMatrix> {
            upload_matrix(g, name, (rows, cols), &target, &mut converted)
        };
        let embedding = matrix(TOKEN_EMBD, (v, d))?;
        let head = if c.tied_embeddings {
            embedding.clone()
        } else {
            matrix(OUTPUT, (v, d))?
        };
        let mut uploads = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let t = BlockTensors::of(c, i);
            let mut m = |n: &Named| matrix(&n.name, n.dims());
            uploads.push((
                [m(&t.wq)?, m(&t.wk)?, m(&t.wv)?],
                m(&t.wo)?,
                [m(&t.w_gate)?, m(&t.w_up)?],
                m(&t.w_down)?,
            ));
        }
        let heads = Heads {
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            head_dim: hd,
        };
        let (cos, sin) = rope_tables(c, freq_factors(g, hd)?.as_deref());
        let halves = c.rope_style() == RopeStyle::Halves;
        let rope = Rope::new(&client, (heads, kv), (&cos, &sin), halves, c.rms_eps)?;
        let attention = Attention::new(&client, (heads, kv))?;
        let vector = |n: &Named| read(g, &n.name, &n.shape);
        let mut layers = Vec::with_capacity(c.n_layers);
        for (i, (qkv, o, gate_up, down)) in uploads.into_iter().enumerate() {
            let t = BlockTensors::of(c, i);
            let bias = match (&t.bq, &t.bk, &t.bv) {
                (Some(q), Some(k), Some(v)) => Some([vector(q)?, vector(k)?, vector(v)?].concat()),
                _ => None,
            };
            let rope = match (&t.q_norm, &t.k_norm) {
                (Some(q), Some(k)) => rope.with_head_norms(&client, &vector(q)?, &vector(k)?)?,
                _ => rope.clone(),
            };
            let group = |m: Vec<GpuMatrix>, e, b: Option<&[f32]>| {
                MatrixGroup::new(&client, m, e, b, Rows::All)
            };
            // The norms before q | k | v and gate | up also folded into those products, which
            // take them wherever they multiply f32 rows in the mat-vec form (decoding and
            // verification): two launches a layer fewer ([`MatrixGroup::with_norm`]); the
            // norms' own launches stay for the other steps.
            let (attn_norm, ffn_norm) = (vector(&t.attn_norm)?, vector(&t.ffn_norm)?);
            let qkv = group(qkv.to_vec(), Epilogue::Store, bias.as_deref())?;
            let gate_up = group(gate_up.to_vec(), Epilogue::SwiGlu, None)?;
            layers.push(Arc::new(GpuLayer {
                attn_norm: Norm::new(&client, &attn_norm, c.rms_eps)?,
                qkv: qkv.with_norm(&client, &attn_norm, c.rms_eps)?,
                // RoPE also folded into attention in decoding and verification on cards
                // ([`Attention::with_rope`]): a launch a layer fewer.
                attention: attention.with_rope(&client, &rope)?,
                rope,
                o: group(vec![o], Epilogue::Add, None)?,
                ffn_norm: Norm::new(&client, &ffn_norm, c.rms_eps)?,
                gate_up: gate_up.with_norm(&client, &ffn_norm, c.rms_eps)?,
                down: group(vec![down], Epilogue::Add, None)?,
            }));
        }
        let out_norm = read(g, OUTPUT_NORM, &[d])?;
        Ok(Self {
            embedding,
            layers,
            out_norm: Norm::new(&client, &out_norm, c.rms_eps)?,
            // The final norm folded into the head likewise (it reads the logit rows from x).
            lm_head: MatrixGroup::new(&client, vec![head], Epilogue::Store, None, Rows::Tail)?
                .with_norm(&client, &out_norm, c.rms_eps)?,
            summary: Summary::new(&client, v)?,
            tops: TopCache::default(),
            draws: DrawCache::default(),
            copy: CopyRows::new(&client, (heads, kv))?,
            scratch: ScratchSlot::default(),
            heads,
            kv,
            converted: Arc::new(converted),
            client: Client(client),
        })
    }

    /// The same model with a long prefill's products in tiles or not (`Llama::with_prefill_tiles`).
    ///
    /// # Errors
    /// The kernels' error for a group that cannot be remade.
    pub(crate) fn with_tiles(&self, tiles: Option<TileForm>) -> Result<Self> {
        self.remade(&|g| {
            (g.rows() == Rows::All).then_some(Form {
                prefill: tiles,
                ..g.form()
            })
        })
    }

    /// Every matrix group with its role, layer by layer, then the head.
    fn groups(&self) -> Vec<(&'static str, &MatrixGroup)> {
        let mut groups: Vec<(&'static str, &MatrixGroup)> = self
            .layers
            .iter()
            .flat_map(|l| {
                [
                    ("qkv", &l.qkv),
                    ("o", &l.o),
                    ("gate+up", &l.gate_up),
                    ("down", &l.down),
                ]
            })
            .collect();
        groups.push(("head", &self.lm_head));
        groups
    }

    /// The model's distinct group shapes, each with its role, how many groups have it and the
    /// form they run in.
    pub(crate) fn group_forms(&self) -> Vec<GroupForm> {
        let mut shapes: Vec<GroupForm> = Vec::new();
        for (role, g) in self.groups() {
            let shape = g.shape_key();
            match shapes.iter_mut().find(|s| s.shape == shape) {
                Some(s) => s.groups += 1,
                None => shapes.push(GroupForm {
                    role,
                    shape,
                    groups: 1,
                    form: g.form(),
                }),
            }
        }
        shapes
    }

    /// Times one group of each distinct shape in every form it can take, at one row and at
    /// `pass_rows` rows, then, in the fastest of those, a long prefill's product in every
    /// prefill form (the matrix units' in the adapter's shape where `units`); each timing
    /// within about `budget_ms`, each product after a read of `evict_bytes` where that is not 0
    /// (its weights out of the cache, as in a forward: `mars_kernels::gpu::time_group`). A form
    /// whose outputs disagree with the current form's (a driver's miscompile) is reported and
    /// never timed or chosen.
    pub(crate) async fn time_forms(
        &self,
        pass_rows: usize,
        budget_ms: f64,
        units: &[mars_kernels::UnitShape],
        evict_bytes: usize,
    ) -> Result<Vec<GroupTiming>> {
        use mars_kernels::gpu::{
            Acts, Evict, PREFILL_ROWS_TIMED, group_output, outputs_agree, time_group,
        };
        let client = &self.client;
        let evict = match evict_bytes {
            0 => None,
            bytes => Some(Evict::new(client, bytes)?),
        };
        let evict = evict.as_ref();
        let mut timings = Vec::new();
        for shape in self.group_forms() {
            let Some((_, group)) = self
                .groups()
                .into_iter()
                .find(|(_, g)| g.shape_key() == shape.shape)
            else {
                continue;
            };
            // Operands rounded to f16 on the matrix units (2⁻¹¹ each) or activations to 8 bits
            // (half a step of max|x| / 127 each), in the form timed or the one it is checked
            // against, with room for the sums.
            let rough =
                |form: Form| matches!(form.prefill, Some(TileForm::Units(_))) || form.acts.is_q8();
            // Checked against the group's one-row form over a pass's rows.
            let reference = group.with_form(
                client,
                Form {
                    pass: None,
                    ..group.form()
                },
            )?;
            let tolerance = |form: Form, against: Form| {
                if rough(form) || rough(against) || against.pass.is_some_and(|p| p.acts.is_q8()) {
                    1e-2
                } else {
                    1e-3
                }
            };
            let mut times: Vec<FormTime> = Vec::new();
            let want = group_output(client, &reference, pass_rows, false).await?;
            let forms = group.forms();
            // A one-row reference only where a form is checked at one row.
            let want_one = if forms.iter().any(|f| f.acts == Acts::Q8Own) {
                group_output(client, &reference, 1, false).await?
            } else {
                Vec::new()
            };
            for form in forms {
                let g = group.with_form(client, form)?;
                // The 8-bit form that quantizes its own row runs its kernel in one-row steps
                // alone (a pass is the 8-bit form's), so it is checked at one row, and its pass
                // is the 8-bit form's of the same team and fan, timed just before it.
                let own = form.acts == Acts::Q8Own;
                let (rows, want) = if own {
                    (1, &want_one)
                } else {
                    (pass_rows, &want)
                };
                let agrees = refused_as_none(group_output(client, &g, rows, false).await)?
                    .is_some_and(|got| {
                        outputs_agree(&got, want, tolerance(form, reference.form()))
                    });
                let q8_pass = times
                    .iter()
                    .find(|t| {
                        own && t.agrees
                            && t.form
                                == Form {
                                    acts: Acts::Q8,
                                    ..form
                                }
                    })
                    .map(|t| t.pass_ms);
                let (one, pass) = if agrees {
                    let one = time_group(client, &g, (1, false), budget_ms, evict).await?;
                    let pass = match q8_pass {
                        Some(ms) => ms,
                        None => {
                            time_group(client, &g, (pass_rows, false), budget_ms, evict).await?
                        }
                    };
                    (one, pass)
                } else {
                    (f64::NAN, f64::NAN)
                };
                times.push(FormTime {
                    form,
                    agrees,
                    one_row_ms: one,
                    pass_ms: pass,
                });
            }
            let mut timing = GroupTiming {
                shape,
                times,
                prefill: Vec::new(),
            };
            // The prefill forms in the fastest mat-vec forms (a tile kernel has neither; a long
            // prefill in the mat-vec form takes the pass form).
            let chosen = timing.best().unwrap_or(group.form());
            let base = group.with_form(client, chosen)?;
            if group.rows() == Rows::All {
                let rows = PREFILL_ROWS_TIMED;
                let want = group_output(client, &base, rows, false).await?;
                // The device's workgroup memory, for the tiles that need more than WebGPU's 16 KiB.
                let room = client.properties().hardware.max_shared_memory_size;
                for form in base.prefill_forms(units, room) {
                    let g = base.with_form(client, form)?;
                    let agrees = refused_as_none(group_output(client, &g, rows, true).await)?
                        .is_some_and(|got| {
                            outputs_agree(&got, &want, tolerance(form, base.form()))
                        });
                    let ms = if agrees {
                        time_group(client, &g, (rows, true), budget_ms, evict).await?
                    } else {
                        f64::NAN
                    };
                    timing.prefill.push(PrefillTime { form, agrees, ms });
                }
            }
            timings.push(timing);
        }
        Ok(timings)
    }

    /// The same model (the same buffers) with each group whose shape `choose` names a form for
    /// in that form, the others as they are.
    pub(crate) fn with_forms(&self, choose: &dyn Fn(&str) -> Option<Form>) -> Result<Self> {
        self.remade(&|g| choose(&g.shape_key()))
    }

    /// The same model with each group for which `choose` names a form remade in it.
    fn remade(&self, choose: &dyn Fn(&MatrixGroup) -> Option<Form>) -> Result<Self> {
        let client = &self.client;
        let remake = |g: &MatrixGroup| -> Result<MatrixGroup> {
            match choose(g) {
                Some(form) if form != g.form() => Ok(g.with_form(client, form)?),
                _ => Ok(g.clone()),
            }
        };
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            layers.push(Arc::new(GpuLayer {
                qkv: remake(&l.qkv)?,
                o: remake(&l.o)?,
                gate_up: remake(&l.gate_up)?,
                down: remake(&l.down)?,
                ..GpuLayer::clone(l)
            }));
        }
        Ok(Self {
            layers,
            lm_head: remake(&self.lm_head)?,
            ..self.clone()
        })
    }

    /// Launches the head's product takes (one per part of a split matrix).
    pub(crate) fn head_launches(&self) -> usize {
        self.lm_head.launches()
    }

    /// An empty chain of `rows` row summaries (see [`GpuChain`]).
    pub(crate) fn chain(&self, rows: usize) -> Result<GpuChain> {
        let bytes =
            rows.checked_mul(SUMMARY_WORDS * 4)
                .ok_or(mars_kernels::KernelError::Overflow {
                    what: "summary chain bytes",
                    rows,
                    cols: SUMMARY_WORDS,
                })?;
        Ok(GpuChain {
            client: self.client.clone(),
            handle: output_buffer(&self.client, bytes),
            rows,
        })
    }

    /// [`Backend::forward`] with, where `link` is given, the last `link.ids` ids (placeholders
    /// in the pass's tokens) taken on the device from the chain, and the logits' summaries
    /// going to it at `link.summaries_at` ([`Link`]).
    ///
    /// # Errors
    /// [`ModelError::CacheKind`] for a cache of another model; the kernels' error for a tree
    /// too large for the GPU's masks, a chain too short for the link or a shape they cannot run.
    pub(crate) fn forward_linked(
        &self,
        c: &LlamaConfig,
        pass: &Pass<'_>,
        cache: &mut GpuCache,
        link: Option<(&GpuChain, Link)>,
    ) -> Result<GpuLogits> {
        let (tokens, start, tree) = (pass.tokens, pass.start, pass.tree);
        let (tail, limit) = (pass.rows, pass.logit_ids);
        if cache.layers.len() != self.layers.len() {
            return Err(ModelError::CacheKind);
        }
        let client = &self.client;
        let step = match tree {
            None => Step::chain(tokens, start, tail, limit)?,
            Some((base, parents)) => Step::tree(tokens, base, parents, tail, limit)?,
        };
        let mut step = step.with_capacity(cache.capacity)?;
        if pass.long_prefill {
            step = step.long_prefill();
        }
        if let Some((chain, l)) = link {
            if l.summaries_at
                .checked_add(tail)
                .is_none_or(|e| e > chain.rows)
            {
                return Err(ModelError::Config(format!(
                    "summary chain of {} rows: {tail} summaries at row {} do not fit",
                    chain.rows, l.summaries_at
                )));
            }
            step = step.with_link(l)?;
        }
        let step = StepBuffer::new(client, &step);
        if let Some((chain, _)) = link {
            link_ids(client, &step, &chain.handle)?;
        }
        let kv = cache.unique()?;
        let t = tokens.len();
        let scratch = self.scratch.take(client, c, (t, tail));
        let Scratch {
            x,
            h,
            qkv,
            qo,
            att,
            ff,
            last,
            ..
        } = &scratch;
        self.embedding.embed(client, &step, x)?;
        // A norm and the product after it: folded into the product where it takes it (f32
        // rows in the mat-vec form); where the product multiplies 8-bit activations the norm
        // writes them too, sparing the product its own quantizing launch.
        let normed = |norm: &Norm, group: &MatrixGroup, (x, h, y): (&Handle, &Handle, &Handle)| {
            if group.folds_norm(&step) {
                return group.run_normed(client, x, y, &step);
            }
            let tail = group.rows() == Rows::Tail;
            let hq = group.quantized_room(client, &step);
            match &hq {
                Some(hq) => norm.run_q8(client, (x, h, hq), &step, tail)?,
                None => norm.run(client, x, h, &step, tail)?,
            }
            group.run_from(client, (h, hq.as_ref()), y, &step)
        };
        for (layer, kv) in self.layers.iter().zip(kv.iter()) {
            normed(&layer.attn_norm, &layer.qkv, (x, h, qkv))?;
            if layer.attention.folds_rope(&step) {
                layer.attention.run_roped(client, (qkv, kv, att), &step)?;
            } else {
                layer.rope.run(client, qkv, qo, kv, &step)?;
                layer.attention.run(client, qo, kv, att, &step)?;
            }
            layer.o.run(client, att, x, &step)?;
            normed(&layer.ffn_norm, &layer.gate_up, (x, h, ff))?;
            layer.down.run(client, ff, x, &step)?;
        }
        // [tail, vocab]: its own buffer, as it leaves with the logits (a kept one where the
        // launches go direct, so the head's and the summaries' bind groups are found again).
        let logits = output_buffer(client, tail * c.vocab_size * 4);
        normed(&self.out_norm, &self.lm_head, (x, last, &logits))?;
        self.scratch.put(scratch);
        Ok(GpuLogits {
            client: client.clone(),
            handle: logits,
            rows: tail,
            vocab: c.vocab_size,
            summary: self.summary.clone(),
            tops: self.tops.clone(),
            draws: self.draws.clone(),
            step,
        })
    }
}

impl Backend for GpuModel {
    type Cache = GpuCache;
    /// `[rows, vocab]` in a GPU buffer, with the kernels that reduce it there.
    type Logits = GpuLogits;
    /// Rows summarised, reduced to their best c and chained on the device.
    const READS: Reads = Reads {
        summaries: true,
        top: true,
        chain: true,
    };

    fn forward(&self, c: &LlamaConfig, pass: &Pass<'_>, cache: &mut GpuCache) -> Result<GpuLogits> {
        self.forward_linked(c, pass, cache, None)
    }

    fn new_cache(&self, _: &LlamaConfig, capacity: usize) -> Result<GpuCache> {
        let bytes = self.heads.cache_bytes(capacity, self.kv)?;
        Ok(GpuCache {
            layers: Arc::new(
                self.layers
                    .iter()
                    .map(|_| self.client.empty(bytes.max(4)))
                    .collect(),
            ),
            bytes,
            capacity,
            client: self.client.clone(),
            copy: self.copy.clone(),
        })
    }

    fn with_layers(&self, layers: &[usize]) -> Self {
        Self {
            layers: layers.iter().map(|&l| self.layers[l].clone()).collect(),
            ..self.clone()
        }
    }

    fn matrix_bytes(&self) -> u64 {
        let blocks: u64 = self
            .layers
            .iter()
            .map(|l| l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes())
            .sum();
        blocks + self.lm_head.bytes()
    }

    fn converted(&self) -> &[String] {
        &self.converted
    }
}

/// Uploads the `[rows, cols]` matrix `name`: a type the kernels take as stored, a part at a
/// time (at most [`LOAD_PART_BYTES`] each: a source not in memory is read one part at a time);
/// f32 (or a source with no stored form) as f32; any other type converted once to Q8_0
/// (noted in `converted`).
fn upload_matrix(
    g: &dyn Weights,
    name: &str,
    (rows, cols): (usize, usize),
    target: &GpuTarget,
    converted: &mut Vec<String>,
) -> Result<GpuMatrix> {
    let client = &target.client;
    let max = target.part_bytes;
    let mut m = if let Some(ty) = packable_stored(g, name, rows, cols)? {
        GpuMatrix::upload_with(client, ty, rows, cols, max, |range| {
            g.stored_bytes(name, range, PART_PAD)
        })?
    } else {
        let stored = g.stored(name)?;
        let values = read(g, name, &[rows, cols])?;
        if stored
            .as_ref()
            .is_none_or(|s| s.ty == mars_formats::GgmlType::F32)
        {
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            GpuMatrix::upload(client, GpuType::F32, rows, cols, &bytes, max)?
        } else {
            let ty = stored.map_or_else(String::new, |s| format!("{:?}", s.ty));
            converted.push(format!("{name} ({ty})"));
            let w = mars_kernels::QMatrix::quantize_q8_0(rows, cols, &values)?;
            GpuMatrix::upload(client, w.ty(), rows, cols, w.blocks(), max)?
        }
    };
    m.set_reduce(target.reduce)?;
    Ok(m)
}

/// A model's KV cache on the GPU: one buffer a layer, `[2, n_kv, capacity, head_dim]` f32.
/// Clones share the buffers until one of them is written (copy on write, on the device), as
/// burn's tensors do: a race's methods each continue from one prefill.
#[derive(Debug, Clone)]
pub(crate) struct GpuCache {
    layers: Arc<Vec<Handle>>,
    bytes: usize,
    capacity: usize,
    client: Client,
    copy: CopyRows,
}

impl GpuCache {
    /// The layers' buffers, copied first if another cache shares them.
    fn unique(&mut self) -> Result<&[Handle]> {
        if Arc::strong_count(&self.layers) > 1 {
            let copies = self
                .layers
                .iter()
                .map(|h| clone_buffer(&self.client, h, self.bytes))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            self.layers = Arc::new(copies);
        }
        Ok(&self.layers)
    }
}

impl LayerCache for GpuCache {
    /// One upload, one launch a layer.
    fn move_rows(&mut self, moves: &[(usize, usize)]) -> Result<()> {
        if moves.is_empty() {
            return Ok(());
        }
        let list = self.copy.moves(&self.client, moves, self.capacity)?;
        let (client, copy) = (self.client.clone(), self.copy.clone());
        for kv in self.unique()? {
            copy.run(&client, kv, &list)?;
        }
        Ok(())
    }
}

/// Row summaries a step keeps on the GPU until it reads them all at once: a draft model's
/// rows, each row's token (its best id, or its draw when sampling) the next forward's input,
/// then the target's rows over those drafts (`[rows, SUMMARY_WORDS]` u32).
#[derive(Debug, Clone)]
pub(crate) struct GpuChain {
    client: Client,
    handle: Arc<Handle>,
    rows: usize,
}

impl GpuChain {
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Every row's summary: one read of `rows × 40` bytes.
    pub(crate) async fn read(&self) -> Result<Vec<RowSummary>> {
        let bytes = mars_kernels::gpu::read(&self.client, (*self.handle).clone()).await?;
        Ok(summaries(&bytes, self.rows))
    }
}

/// Summaries as the summary kernel writes them (summary.wgsl), the first `rows`.
fn summaries(bytes: &[u8], rows: usize) -> Vec<RowSummary> {
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    words
        .chunks_exact(SUMMARY_WORDS)
        .take(rows)
        .map(|w| RowSummary {
            top1: w[0],
            z1: f32::from_bits(w[1]),
            top2: (w[2] != u32::MAX).then_some(w[2]),
            z2: f32::from_bits(w[3]),
            sum: f64::from(f32::from_bits(w[4])),
            bad: (w[5] != u32::MAX).then(|| (w[5], f32::from_bits(w[6]))),
            sample: (w[7] != u32::MAX).then(|| RowDraw {
                token: w[7],
                logit: f32::from_bits(w[8]),
                sum: f64::from(f32::from_bits(w[9])),
            }),
        })
        .collect()
}

/// Logits `[rows, vocab]` in a GPU buffer, with the kernel that summarises them and the step
/// of the forward that computed them (where its summaries go in a chain).
#[derive(Debug, Clone)]
pub(crate) struct GpuLogits {
    client: Client,
    /// `[rows, vocab]` f32.
    handle: Arc<Handle>,
    rows: usize,
    vocab: usize,
    summary: Summary,
    tops: TopCache,
    draws: DrawCache,
    step: StepBuffer,
}

/// A pass's own buffers, sized for `rows` rows of the pass and `tail` logit rows: made once and
/// kept from one pass to the next ([`ScratchSlot`]; a larger pass makes them anew at its size),
/// where each pass made its own before. A card's host spends its time a pass on the launches
/// and on taking buffers from CubeCL's pool; with wgpu's no-op backend standing in for a card
/// (`bench.sh gpu-host`), taking buffers, these seven most of them, was ~20 % of its runtime
/// thread's time. None of them leaves the pass (the logits and the step buffer do, and stay
/// per pass).
#[derive(Debug)]
pub(crate) struct Scratch {
    rows: usize,
    tail: usize,
    /// `[rows, d_model]`: the residual stream.
    x: Handle,
    /// `[rows, d_model]`: normed rows (where a product does not take its norm folded).
    h: Handle,
    /// `[rows, q + 2 kv]`: q | k | v.
    qkv: Handle,
    /// `[rows, n_heads · head_dim]`: roped queries (where RoPE has its own launch).
    qo: Handle,
    /// `[rows, n_heads · head_dim]`: attention's output.
    att: Handle,
    /// `[rows, d_ff]`: SiLU(gate) · up.
    ff: Handle,
    /// `[tail, d_model]`: the logit rows normed (where the head does not take its norm folded).
    last: Handle,
}

impl Scratch {
    fn new(client: &Client, c: &LlamaConfig, (rows, tail): (usize, usize)) -> Self {
        let (d, q) = (c.d_model, c.n_heads * c.head_dim);
        let f32s = |n: usize| client.empty((n * 4).max(4));
        Self {
            rows,
            tail,
            x: f32s(rows * d),
            h: f32s(rows * d),
            qkv: f32s(rows * (q + 2 * c.n_kv_heads * c.head_dim)),
            qo: f32s(rows * q),
            att: f32s(rows * q),
            ff: f32s(rows * c.d_ff),
            last: f32s(tail * d),
        }
    }
}

/// Where a model keeps its [`Scratch`] between passes (a [`Slot`], shared by its clones: a
/// layer-skip drafter's passes run on the same queue as its model's).
#[derive(Debug, Clone, Default)]
pub(crate) struct ScratchSlot(Slot<Scratch>);

impl ScratchSlot {
    /// The kept buffers where they hold `rows` rows and `tail` logit rows, else new ones as
    /// large as both (so that passes of 1 and k + 1 rows settle on one size).
    fn take(&self, client: &Client, c: &LlamaConfig, (rows, tail): (usize, usize)) -> Scratch {
        match self.0.take() {
            Some(s) if s.rows >= rows && s.tail >= tail => s,
            Some(s) => Scratch::new(client, c, (s.rows.max(rows), s.tail.max(tail))),
            None => Scratch::new(client, c, (rows, tail)),
        }
    }

    fn put(&self, scratch: Scratch) {
        self.0.put(scratch);
    }
}

/// Small per-model parameter buffers by what they were made for: a top-c reduction's (by c,
/// stride, columns and 1 / T bits) or a run's draw (by seed and temperature bits), uploaded once
/// instead of at every tree depth or sampled forward (a model uses one or two of each).
#[derive(Debug)]
pub(crate) struct Kept<K, V>(Arc<std::sync::Mutex<Vec<(K, V)>>>);

impl<K, V> Clone for Kept<K, V> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<K: PartialEq, V: Clone> Kept<K, V> {
    /// Most kept; past it the oldest is dropped.
    const MOST: usize = 8;

    /// The value kept for `key`, else `make`'s, kept.
    fn get(&self, key: K, make: impl FnOnce() -> Result<V>) -> Result<V> {
        // A poisoned lock only means another thread panicked mid-push: the list is still whole.
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, v)) = kept.iter().find(|(k, _)| *k == key) {
            return Ok(v.clone());
        }
        let v = make()?;
        if kept.len() == Self::MOST {
            kept.remove(0);
        }
        kept.push((key, v.clone()));
        Ok(v)
    }
}

/// A model's top-c reductions: by (c, stride, columns, 1 / T bits).
pub(crate) type TopCache = Kept<(usize, usize, usize, u32), TopRows>;

/// A model's draws: by (seed, T bits).
pub(crate) type DrawCache = Kept<(u64, u32), Draw>;

impl GpuLogits {
    pub(crate) fn dims(&self) -> (usize, usize) {
        (self.rows, self.vocab)
    }

    fn values(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    /// Every value, read back without blocking.
    pub(crate) async fn read_async(self) -> Result<Vec<f32>> {
        let bytes = mars_kernels::gpu::read(&self.client, (*self.handle).clone()).await?;
        let mut v = Self::values(&bytes);
        v.truncate(self.rows * self.vocab);
        Ok(v)
    }

    /// Each row's summary, drawn where `sample` says: one launch and one read of `rows × 40`
    /// bytes (the draw's words uploaded once a run and temperature).
    pub(crate) async fn summaries_async(
        &self,
        sample: Option<&SampleKeys>,
    ) -> Result<Vec<RowSummary>> {
        let draw = self.draw(sample)?;
        let own = self.step.link().summaries_at + self.rows;
        let out = output_buffer(&self.client, own * SUMMARY_WORDS * 4);
        self.summary.run(
            &self.client,
            &self.handle,
            &out,
            self.rows,
            &self.step,
            draw.as_ref(),
        )?;
        let bytes = mars_kernels::gpu::read(&self.client, (*out).clone()).await?;
        let at = self.step.link().summaries_at * SUMMARY_WORDS * 4;
        Ok(summaries(&bytes[at.min(bytes.len())..], self.rows))
    }

    /// The summary kernel's draw words for `sample` (`None`: greedy), uploaded once a run.
    fn draw(&self, sample: Option<&SampleKeys>) -> Result<Option<Draw>> {
        let Some(s) = sample else {
            return Ok(None);
        };
        let key = (s.seed, s.temperature.to_bits());
        let draw = self.draws.get(key, || {
            let seed_key = mars_verify::noise::seed_key(s.seed);
            Ok(Draw::new(&self.client, s.temperature, seed_key)?)
        })?;
        Ok(Some(draw))
    }

    /// Each row's best `c` of its first `cols` values at `temperature` (top.wgsl): one launch and
    /// one read of `rows × (2c + 3)` words; `None` where the kernel cannot (c past
    /// [`MAX_TOP`], no finite 1 / T).
    pub(crate) async fn top_async(
        &self,
        c: usize,
        cols: usize,
        temperature: f32,
    ) -> Result<Option<Vec<RowTop>>> {
        if !(1..=MAX_TOP).contains(&c) || !(1.0 / temperature).is_finite() {
            return Ok(None);
        }
        let cols = cols.min(self.vocab);
        let key = (c, self.vocab, cols, temperature.to_bits());
        let top = self.tops.get(key, || {
            Ok(TopRows::new(
                &self.client,
                c,
                self.vocab,
                cols,
                temperature,
            )?)
        })?;
        let out = output_buffer(&self.client, self.rows * top.words() * 4);
        top.run(&self.client, &self.handle, &out, self.rows)?;
        let bytes = mars_kernels::gpu::read(&self.client, (*out).clone()).await?;
        let words: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Some(
            words
                .chunks_exact(top.words())
                .take(self.rows)
                .map(|w| RowTop {
                    best: w[..2 * c]
                        .chunks_exact(2)
                        .filter(|p| p[0] != u32::MAX)
                        .map(|p| (p[0], f32::from_bits(p[1])))
                        .collect(),
                    sum: f64::from(f32::from_bits(w[2 * c])),
                    bad: (w[2 * c + 1] != u32::MAX)
                        .then(|| (w[2 * c + 1], f32::from_bits(w[2 * c + 2]))),
                })
                .collect(),
        ))
    }

    /// Enqueues each row's summary into `chain`, at the row the forward's link named (0
    /// without one), drawn where `sample` says; nothing is read.
    pub(crate) fn summarize_into(
        &self,
        chain: &GpuChain,
        sample: Option<&SampleKeys>,
    ) -> Result<()> {
        let draw = self.draw(sample)?;
        self.summary.run(
            &self.client,
            &self.handle,
            &chain.handle,
            self.rows,
            &self.step,
            draw.as_ref(),
        )?;
        Ok(())
    }

    /// Every value, blocking until the GPU is done (native code only).
    #[cfg(not(target_family = "wasm"))]
    pub(crate) fn read(self) -> Result<Vec<f32>> {
        let bytes = mars_kernels::gpu::read_blocking(&self.client, (*self.handle).clone())?;
        let mut v = Self::values(&bytes);
        v.truncate(self.rows * self.vocab);
        Ok(v)
    }

    /// Waits until the device has computed them (one read of the first summary: a timing then
    /// covers the work, not just its submission).
    pub(crate) async fn wait(self) -> Result<()> {
        let first = GpuLogits { rows: 1, ..self };
        first.summaries_async(None).await.map(drop)
    }
}
