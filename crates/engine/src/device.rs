//! Opening the device a model runs on, once per process (or page), for the CLI and the browser
//! alike: burn's flex backend on the CPU, or wgpu (Vulkan/Metal/DX12 natively, WebGPU in the
//! browser), with the limits the loader checks before it allocates anything.

use std::cell::RefCell;

use mars_model::{AdapterFacts, Device, DeviceLimits, KvType, LoadOptions, WeightPath};

use crate::error::{EngineError, Result};

/// Where a model runs: the one device type of every front end (the CLI's `--device`, the
/// page's `backend` field, which says `webgpu` for [`Backend::Wgpu`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// wgpu on a hardware adapter, else the CPU (a CPU adapter such as lavapipe, or none),
    /// said with the run.
    // The rule is `auto_choice` (a link here would show in `--help` as markup).
    #[default]
    Auto,
    /// The CPU: GGUF blocks on mars-kernels (with `--kernels f32`, burn's flex backend).
    Cpu,
    /// wgpu: Vulkan, Metal or DX12 (lavapipe where there is no GPU); WebGPU in the browser.
    #[serde(alias = "webgpu")]
    Wgpu,
}

/// The user's choice of matrix path; [`OpenDevice::weights`] resolves it for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum WeightChoice {
    /// GGUF blocks kept as stored (the default): mars-kernels on the CPU (a row-independent
    /// forward pass), WGSL kernels reading the blocks from GPU buffers on wgpu.
    #[default]
    Packed,
    /// Weights dequantized to f32 (burn's matmuls): the reference the packed path is measured
    /// against (4–8× the memory, slower, logits batch-dependent in the last bits on the CPU).
    F32,
}

/// What a GPU adapter offers the block kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuCaps {
    /// Why the block kernels cannot run on this adapter (`None`: they can).
    pub blocks_unsupported: Option<String>,
    /// The adapter's smallest subgroup where it offers subgroups.
    pub subgroups: Option<u32>,
    /// The adapter's name, API and driver: what the tuning table keys its choices by
    /// (`crate::tune`), the same adapter under another driver tuning anew.
    pub identity: String,
    /// Whether it runs on the CPU (lavapipe, SwiftShader): its forms are the rules' (measured
    /// there), never timed at load.
    pub software: bool,
    /// The matrix units a long prefill's tiles can run on, in each shape the adapter holds
    /// (its blocks in the narrow tile and, where it fits, the wide one), none where it has
    /// none (`mars_model::adapter_matrix_units`).
    pub matrix_units: Vec<mars_model::UnitShape>,
    /// Bytes a tuning reads before each timed product to empty the GPU's cache
    /// (`mars_model::EVICT_BYTES` on a card, 0 on a CPU adapter, whose cache is the CPU's).
    pub evict_bytes: usize,
}

impl GpuCaps {
    /// An adapter known by its identity alone: block kernels supported, no subgroups, no
    /// matrix units (the rules' plainest forms), products timed back to back (a CPU adapter
    /// stands in for it): the adapters the tuning tests key their tables by, where no such
    /// adapter is at hand.
    pub fn plain(identity: &str, software: bool) -> Self {
        Self {
            blocks_unsupported: None,
            subgroups: None,
            identity: identity.into(),
            software,
            matrix_units: Vec::new(),
            evict_bytes: 0,
        }
    }
}

/// The rule of [`Backend::Auto`], one copy for every front end: wgpu on a hardware adapter that
/// runs the block kernels, else the CPU, with why in words. A CPU adapter (lavapipe,
/// SwiftShader) runs the same model many times slower than the CPU kernels (docs/performance.md,
/// 2 cores: the 0.5B decodes at ~1 tok/s on lavapipe, 71.8 on the packed CPU path).
pub fn auto_choice(adapter: Option<&AdapterFacts>) -> (Backend, String) {
    match adapter {
        None => (Backend::Cpu, "no GPU adapter".into()),
        Some(a) if a.software => (
            Backend::Cpu,
            format!(
                "the GPU adapter, {}, is software: it runs on the CPU, slower than the CPU kernels",
                a.name
            ),
        ),
        Some(a) => match a.blocks_unsupported {
            Some(why) => (Backend::Cpu, format!("{}: {why}", a.name)),
            None => (Backend::Wgpu, format!("a GPU adapter: {}", a.name)),
        },
    }
}

/// An opened device and what the loader may use of it.
#[derive(Debug, Clone)]
pub struct OpenDevice {
    /// Where it runs ([`Backend::Cpu`] or [`Backend::Wgpu`]: [`Backend::Auto`] resolved).
    pub backend: Backend,
    /// Why, where [`Backend::Auto`] chose it.
    pub chosen: Option<String>,
    /// The burn device.
    pub device: Device,
    /// Limits checked before weights are allocated.
    pub limits: DeviceLimits,
    /// The GPU adapter's name, for reports (`None` on the CPU).
    pub adapter: Option<String>,
    /// What the GPU adapter offers (`None` on the CPU).
    pub gpu: Option<GpuCaps>,
}

thread_local! {
    // burn's wgpu runtime can be initialised once per process; every later model (a draft
    // model, a reload) shares the first device.
    static WGPU: RefCell<Option<OpenDevice>> = const { RefCell::new(None) };
}

impl Backend {
    /// Opens the device (the wgpu one only the first time) with its limits: on the CPU the
    /// available RAM (Linux); on wgpu the adapter's largest buffer and, where its driver reports
    /// it ([`crate::memory::free_memory`]: NVIDIA, AMD on Linux), its free memory (browsers and
    /// other adapters report none, so a failed allocation surfaces as an error there).
    ///
    /// # Errors
    /// [`EngineError::Device`] when no adapter can be had; [`EngineError::BackendUnavailable`]
    /// when the backend was not compiled in.
    pub async fn open(self) -> Result<OpenDevice> {
        // `auto` looks at the adapter once; opening wgpu then reuses what it saw.
        let (backend, chosen, seen) = match self {
            Self::Auto => {
                let adapter = first_adapter().await;
                let (backend, why) = auto_choice(adapter.as_ref());
                (backend, Some(why), adapter)
            }
            other => (other, None, None),
        };
        let open = match backend {
            Self::Cpu | Self::Auto => open_cpu(),
            Self::Wgpu => match WGPU.with(|w| w.borrow().clone()) {
                Some(open) => Ok(open),
                None => {
                    let open = open_wgpu(seen).await?;
                    WGPU.with(|w| *w.borrow_mut() = Some(open.clone()));
                    Ok(open)
                }
            },
        }?;
        Ok(OpenDevice { chosen, ..open })
    }

    /// What [`Backend::Auto`] would choose here, and why, without opening anything (a front
    /// end that picks its work by the device it will run on).
    pub async fn auto() -> (Backend, String) {
        auto_choice(first_adapter().await.as_ref())
    }

    /// Its name as the CLI and reports write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Cpu => "cpu",
            Self::Wgpu => "wgpu",
        }
    }
}

/// The adapter [`Backend::Auto`] looks at.
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
async fn first_adapter() -> Option<AdapterFacts> {
    mars_model::first_adapter().await
}

/// A build without wgpu has no adapter to look at.
#[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
async fn first_adapter() -> Option<AdapterFacts> {
    None
}

/// The CPU: burn's flex device (the f32 reference path's), with the packed kernels beside it.
#[cfg(feature = "flex")]
fn open_cpu() -> Result<OpenDevice> {
    Ok(OpenDevice {
        backend: Backend::Cpu,
        chosen: None,
        device: Device::flex(),
        limits: DeviceLimits {
            max_buffer_bytes: None,
            max_total_bytes: available_memory(),
        },
        adapter: None,
        gpu: None,
    })
}

/// Cores this process may use (logical cores: the standard library does not tell physical
/// ones apart; on the project's 2-core machine they are the same).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// A resolved weight path and what the front end should tell the user about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weights {
    /// The path.
    pub path: WeightPath,
    /// Said to the user where the choice was adjusted (threads clamped to the cores, the block
    /// kernels unavailable on this adapter).
    pub notes: Vec<String>,
}

impl OpenDevice {
    /// The one place a user's matrix choice becomes a [`WeightPath`] on this device: packed
    /// blocks on the CPU kernels with `threads` threads (default: one per core; more than
    /// [`cores`] is clamped, with a note), GGUF blocks on a GPU (f32 with a note where the
    /// adapter cannot run the block kernels, with its subgroups where it has them, its KV
    /// cache `kv`, f16 by default), or f32.
    ///
    /// # Errors
    /// [`EngineError::Config`] for 0 threads, threads on any path but the packed CPU one, or
    /// a KV cache type on any path but the GPU kernels.
    pub fn weights(
        &self,
        choice: WeightChoice,
        threads: Option<usize>,
        kv: Option<KvType>,
    ) -> Result<Weights> {
        let weights = self.weights_for(choice, threads, kv.unwrap_or_default())?;
        match (kv, weights.path) {
            (Some(kv), path) if path.kv().is_none() => Err(EngineError::Config {
                field: "kv_cache",
                value: kv.name().into(),
                why: "the KV cache type applies to the GPU kernels only (the CPU's and the f32 \
                      path's caches are f32)",
            }),
            _ => Ok(weights),
        }
    }

    fn weights_for(
        &self,
        choice: WeightChoice,
        threads: Option<usize>,
        kv: KvType,
    ) -> Result<Weights> {
        let mut notes = Vec::new();
        let path = match (choice, &self.gpu, threads) {
            (_, _, Some(0)) => {
                return Err(EngineError::Config {
                    field: "threads",
                    value: "0".into(),
                    why: "at least 1 thread",
                });
            }
            (WeightChoice::Packed, None, t) => {
                let cores = cores();
                let wanted = t.unwrap_or(cores);
                if wanted > cores {
                    notes.push(format!(
                        "threads = {wanted} is more than the {cores} cores: using {cores}"
                    ));
                }
                WeightPath::CpuPacked {
                    threads: wanted.min(cores),
                }
            }
            (_, _, Some(t)) => {
                return Err(EngineError::Config {
                    field: "threads",
                    value: t.to_string(),
                    why: "threads apply to the packed CPU kernels only",
                });
            }
            (WeightChoice::Packed, Some(gpu), None) => match &gpu.blocks_unsupported {
                Some(why) => {
                    notes.push(format!("note: {why}"));
                    WeightPath::F32
                }
                None => WeightPath::GpuBlocks {
                    subgroups: gpu.subgroups,
                    kv,
                },
            },
            (WeightChoice::F32, _, None) => WeightPath::F32,
        };
        Ok(Weights { path, notes })
    }

    /// The loader's options for `path` on this device, for runs of at most `context`
    /// positions (`None`: the file's context).
    pub fn options(&self, path: WeightPath, context: Option<usize>) -> LoadOptions {
        LoadOptions {
            weights: path,
            limits: self.limits,
            context,
        }
    }

    /// The loader's options for the default choice (packed blocks, threads per core) and the
    /// file's context: what the page uses.
    pub fn default_options(&self) -> LoadOptions {
        let path = self
            .weights(WeightChoice::Packed, None, None)
            .map_or(WeightPath::F32, |w| w.path);
        self.options(path, None)
    }

    /// Takes what a loaded model needs off the memory left for the next one (a draft model
    /// beside its target), so that the pair is checked against the device together.
    pub fn reserve(&mut self, bytes: u64) {
        self.limits.max_total_bytes = self.limits.max_total_bytes.map(|m| m.saturating_sub(bytes));
    }
}

#[cfg(not(feature = "flex"))]
fn open_cpu() -> Result<OpenDevice> {
    Err(EngineError::BackendUnavailable { backend: "cpu" })
}

#[cfg(any(feature = "wgpu", feature = "webgpu"))]
async fn open_wgpu(seen: Option<AdapterFacts>) -> Result<OpenDevice> {
    let (device, setup) = mars_model::open_wgpu(seen.as_ref())
        .await
        .map_err(EngineError::Device)?;
    let limits = setup.adapter.limits();
    let software = mars_model::adapter_software(&setup.adapter);
    let info = setup.adapter.get_info();
    // The adapter's free memory where its driver reports it (natively: NVML, amdgpu's sysfs).
    let free = crate::memory::free_memory(info.vendor, &info.device_pci_bus_id);
    let memory = free.as_ref().map_or_else(
        || "; device memory not reported, not checked".to_string(),
        |f| {
            format!(
                "; {:.1} GiB free ({})",
                f.bytes as f64 / 1_073_741_824.0,
                f.source
            )
        },
    );
    Ok(OpenDevice {
        backend: Backend::Wgpu,
        chosen: None,
        device,
        limits: DeviceLimits {
            max_buffer_bytes: Some(
                limits
                    .max_storage_buffer_binding_size
                    .min(limits.max_buffer_size),
            ),
            max_total_bytes: free.map(|f| f.bytes),
        },
        adapter: Some(format!("{} ({:?}){memory}", info.name, info.backend)),
        gpu: Some(GpuCaps {
            blocks_unsupported: mars_model::blocks_unsupported(&setup.adapter).map(str::to_string),
            subgroups: mars_model::subgroup_lanes(&setup.adapter),
            identity: mars_model::adapter_identity(&setup.adapter),
            software,
            matrix_units: mars_model::adapter_matrix_units(&setup.adapter),
            evict_bytes: if software { 0 } else { mars_model::EVICT_BYTES },
        }),
    })
}

#[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
async fn open_wgpu(_: Option<AdapterFacts>) -> Result<OpenDevice> {
    Err(EngineError::BackendUnavailable { backend: "wgpu" })
}

/// RAM a load may take on the CPU, the budget of its memory check: Linux's MemAvailable,
/// macOS's free and reclaimable pages, Windows' available physical memory (sysinfo's one call
/// for the three). `None` where the system reports none (then nothing is checked up front).
#[cfg(all(feature = "flex", not(target_arch = "wasm32")))]
fn available_memory() -> Option<u64> {
    let mut system = sysinfo::System::new();
    system.refresh_memory();
    Some(system.available_memory()).filter(|&bytes| bytes > 0)
}

/// A browser reports no memory to a page.
#[cfg(all(feature = "flex", target_arch = "wasm32"))]
fn available_memory() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU's budget is the system's: on Linux some of MemTotal (the CI's machines and the
    /// project's run Linux; macOS and Windows are compiled, not run).
    #[cfg(all(feature = "flex", target_os = "linux"))]
    #[test]
    fn the_cpu_budget_is_what_the_system_reports() {
        let total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map(|kib| kib * 1024);
        let available = available_memory();
        assert!(
            matches!((available, total), (Some(a), Some(t)) if a > 0 && a <= t),
            "{available:?} of {total:?}"
        );
    }

    fn adapter(
        name: &str,
        software: bool,
        blocks_unsupported: Option<&'static str>,
    ) -> AdapterFacts {
        AdapterFacts {
            name: name.into(),
            software,
            blocks_unsupported,
        }
    }

    #[test]
    fn auto_takes_a_hardware_adapter_and_the_cpu_otherwise() {
        let (b, why) = auto_choice(Some(&adapter("NVIDIA H200 (Vulkan)", false, None)));
        assert_eq!(b, Backend::Wgpu);
        assert!(why.contains("NVIDIA H200"), "{why}");
        let (b, why) = auto_choice(Some(&adapter(
            "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)",
            true,
            None,
        )));
        assert_eq!(b, Backend::Cpu);
        assert!(
            why.contains("llvmpipe") && why.contains("runs on the CPU"),
            "{why}"
        );
        let (b, why) = auto_choice(Some(&adapter(
            "old GPU (Gl)",
            false,
            Some("no f16 unpacking"),
        )));
        assert_eq!(b, Backend::Cpu);
        assert!(why.contains("no f16 unpacking"), "{why}");
        assert_eq!(auto_choice(None), (Backend::Cpu, "no GPU adapter".into()));
    }

    /// The KV cache type is the GPU kernels' alone: f16 unless asked, refused by name on any
    /// other path (the CPU's, the f32 reference's, a GPU's that cannot run the kernels).
    #[cfg(feature = "flex")]
    #[test]
    fn the_kv_cache_type_is_the_gpu_kernels_alone() {
        let open = |gpu: Option<Option<&str>>| OpenDevice {
            backend: Backend::Cpu,
            chosen: None,
            device: Device::flex(),
            limits: DeviceLimits::default(),
            adapter: None,
            gpu: gpu.map(|unsupported| GpuCaps {
                blocks_unsupported: unsupported.map(str::to_string),
                subgroups: None,
                identity: "test adapter".into(),
                software: true,
                matrix_units: Vec::new(),
                evict_bytes: 0,
            }),
        };
        let gpu = open(Some(None));
        let kv = |o: &OpenDevice, choice, kv| o.weights(choice, None, kv).map(|w| w.path.kv());
        assert_eq!(
            kv(&gpu, WeightChoice::Packed, None).unwrap(),
            Some(KvType::F16)
        );
        assert_eq!(
            kv(&gpu, WeightChoice::Packed, Some(KvType::F32)).unwrap(),
            Some(KvType::F32)
        );
        for (o, choice) in [
            (&gpu, WeightChoice::F32),
            (&open(None), WeightChoice::Packed),
            (&open(Some(Some("no f16 unpacking"))), WeightChoice::Packed),
        ] {
            assert_eq!(kv(o, choice, None).unwrap(), None);
            let err = kv(o, choice, Some(KvType::F16)).unwrap_err();
            assert!(
                matches!(
                    err,
                    EngineError::Config {
                        field: "kv_cache",
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn backends_read_and_write_by_name() {
        for b in [Backend::Auto, Backend::Cpu, Backend::Wgpu] {
            let json = serde_json::to_string(&b).unwrap();
            assert_eq!(json, format!("\"{}\"", b.name()));
            assert_eq!(serde_json::from_str::<Backend>(&json).unwrap(), b);
        }
        assert_eq!(
            serde_json::from_str::<Backend>("\"webgpu\"").unwrap(),
            Backend::Wgpu
        );
    }
}
