//! Opening the device a model runs on, once per process (or page), for the CLI and the browser
//! alike: burn's flex backend on the CPU, or wgpu (Vulkan/Metal/DX12 natively, WebGPU in the
//! browser), with the limits the loader checks before it allocates anything.

use std::cell::RefCell;

use mars_model::{Device, LoadOptions};

use crate::error::{EngineError, Result};

/// Which burn backend runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// burn's flex backend on the CPU.
    Cpu,
    /// wgpu: Vulkan, Metal or DX12 natively (lavapipe where there is no GPU), WebGPU in the
    /// browser.
    Wgpu,
}

/// An opened device and what the loader may use of it.
#[derive(Debug, Clone)]
pub struct OpenDevice {
    /// The burn device.
    pub device: Device,
    /// Limits checked before weights are allocated.
    pub limits: LoadOptions,
    /// The GPU adapter's name, for reports (`None` on the CPU).
    pub adapter: Option<String>,
    /// What the front end should tell the user about the device (the block kernels unavailable
    /// on this adapter), if anything.
    pub note: Option<String>,
}

thread_local! {
    // burn's wgpu runtime can be initialised once per process; every later model (a draft
    // model, a reload) shares the first device.
    static WGPU: RefCell<Option<OpenDevice>> = const { RefCell::new(None) };
}

impl Backend {
    /// Opens the device (the wgpu one only the first time) with its limits: on the CPU the
    /// available RAM (Linux), on wgpu the adapter's largest buffer (browsers and wgpu report no
    /// device memory, so a failed allocation surfaces as an error there).
    ///
    /// # Errors
    /// [`EngineError::Device`] when no adapter can be had; [`EngineError::BackendUnavailable`]
    /// when the backend was not compiled in.
    pub async fn open(self) -> Result<OpenDevice> {
        match self {
            Self::Cpu => open_cpu(),
            Self::Wgpu => {
                if let Some(open) = WGPU.with(|w| w.borrow().clone()) {
                    return Ok(open);
                }
                let open = open_wgpu().await?;
                WGPU.with(|w| *w.borrow_mut() = Some(open.clone()));
                Ok(open)
            }
        }
    }
}

/// On the CPU, weights are f32 unless the front end asks for the packed kernels
/// ([`OpenDevice::with_packed_kernels`]): packed logits are not yet independent of the batch
/// (flex's attention sums in another order for another shape, and 8-bit activation rounding
/// amplifies that), so greedy strict speculation would not equal target-only decoding there.
#[cfg(feature = "flex")]
fn open_cpu() -> Result<OpenDevice> {
    Ok(OpenDevice {
        device: Device::flex(),
        limits: LoadOptions {
            max_buffer_bytes: None,
            max_total_bytes: available_memory(),
            cpu_threads: None,
            gpu_blocks: false,
            gpu_subgroups: None,
        },
        adapter: None,
        note: None,
    })
}

/// Cores this process may use (logical cores: the standard library does not tell physical
/// ones apart; on the project's 2-core machine they are the same).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

impl OpenDevice {
    /// On the CPU, keeps quantized GGUF matrices packed and runs them on mars-kernels with
    /// `threads` threads (no effect on a GPU): 0 is an error; more than [`cores`] is clamped to
    /// the core count (more threads than cores only take turns), and the returned note says so.
    ///
    /// # Errors
    /// [`EngineError::Config`] for 0.
    pub fn with_packed_kernels(mut self, threads: usize) -> Result<(Self, Option<String>)> {
        if threads == 0 {
            return Err(EngineError::Config {
                field: "threads",
                value: "0".into(),
                why: "at least 1 thread",
            });
        }
        let cores = cores();
        let note = (threads > cores)
            .then(|| format!("threads = {threads} is more than the {cores} cores: using {cores}"));
        if self.adapter.is_none() {
            self.limits.cpu_threads = Some(threads.min(cores));
        }
        Ok((self, note))
    }
}

impl OpenDevice {
    /// On a GPU, uploads every weight as f32 instead of GGUF blocks: the reference path the
    /// block kernels are measured against (no effect on the CPU, where `with_packed_kernels`
    /// decides).
    #[must_use]
    pub fn with_f32_weights(mut self) -> Self {
        self.limits.gpu_blocks = false;
        self
    }
}

#[cfg(not(feature = "flex"))]
fn open_cpu() -> Result<OpenDevice> {
    Err(EngineError::BackendUnavailable { backend: "cpu" })
}

#[cfg(any(feature = "wgpu", feature = "webgpu"))]
async fn open_wgpu() -> Result<OpenDevice> {
    let (device, setup) = Device::wgpu_options()
        .init_with_setup_async()
        .await
        .map_err(|e| EngineError::Device(e.to_string()))?;
    let limits = setup.adapter.limits();
    let info = setup.adapter.get_info();
    let unsupported = mars_model::blocks_unsupported(&setup.adapter);
    Ok(OpenDevice {
        device,
        limits: LoadOptions {
            max_buffer_bytes: Some(
                limits
                    .max_storage_buffer_binding_size
                    .min(limits.max_buffer_size),
            ),
            max_total_bytes: None,
            cpu_threads: None,
            // GGUF blocks in GPU buffers by default (where the adapter can run the kernels);
            // `with_f32_weights` for the reference.
            gpu_blocks: unsupported.is_none(),
            gpu_subgroups: mars_model::subgroup_lanes(&setup.adapter),
        },
        adapter: Some(format!("{} ({:?})", info.name, info.backend)),
        note: unsupported.map(|why| format!("note: {why}")),
    })
}

#[cfg(not(any(feature = "wgpu", feature = "webgpu")))]
async fn open_wgpu() -> Result<OpenDevice> {
    Err(EngineError::BackendUnavailable { backend: "wgpu" })
}

/// `MemAvailable` from /proc/meminfo (Linux), the budget for weights on the CPU backend; `None`
/// where it cannot be read (then nothing is checked up front).
#[cfg(feature = "flex")]
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
