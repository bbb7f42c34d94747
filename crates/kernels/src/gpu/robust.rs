//! A Vulkan device without the driver's bounds checks, for the kernels that need none.
//!
//! wgpu opens every Vulkan device with `robustBufferAccess` and, where the driver has
//! `VK_EXT_robustness2`, `robustBufferAccess2` (WebGPU's contract for untrusted shaders). The
//! driver then checks every storage load against its binding: Mesa's NVIDIA compiler (NAK,
//! counted by `bench.sh gpu-isa` with `ISA_DRIVER=nak`) splits each 16-byte load into four
//! checked 4-byte ones and takes 1.8–2.8× the static cycles in the one-row mat-vec loops;
//! llama.cpp creates its mat-vec pipelines with robustness disabled
//! (`VK_EXT_pipeline_robustness`). mars's WGSL kernels stay in bounds by
//! construction (they are compiled unchecked, `compile_mode`), but wgpu has no per-pipeline
//! switch, so the whole device goes without: opened here through wgpu-hal, as wgpu would open it,
//! less the two features, then handed to wgpu. Only where `MARS_GPU_ROBUST=off` asks for it
//! (`mars_model::open_wgpu`): what it buys a real GPU is for a lease to measure (the bundle's
//! `teams` stage, `unrobust` column) before any default rests on it. The risk it takes is the
//! driver's clamping, nothing else: CubeCL compiles every WGSL module without naga's buffer
//! checks on every device (`bounds_checks: false`, cubecl-wgpu's `create_module`; its SPIR-V
//! goes through unchanged), so on this device a kernel that reads past its binding reads
//! undefined values where the driver would have given zero or an in-bounds word. burn's kernels
//! launched in CubeCL's checked mode keep CubeCL's own checks, written into their code; mars's
//! and burn's unchecked ones stay in bounds by construction, as they must on CUDA, which has no
//! such clamping. The model's GPU tests pass on this device (CI, lavapipe, whose code
//! generation checks bounds whatever the device asks, so they show the kernels agree, not that
//! no read strays).

use std::ffi::CStr;

use cubecl::wgpu::wgpu;
use wgpu::hal::api::Vulkan;

/// The device and queue of `adapter` (a Vulkan one) with robustBufferAccess and
/// robustBufferAccess2 off, every other feature and limit as CubeCL asks of wgpu (the adapter's
/// features less mappable primary buffers, its limits, the experimental features on).
///
/// # Errors
/// Where the adapter is not Vulkan's, or the driver or wgpu refuses the device: the reason.
pub fn open_without_robustness(
    adapter: &wgpu::Adapter,
) -> Result<(wgpu::Device, wgpu::Queue), String> {
    let features = adapter.features() - wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
    let limits = adapter.limits();
    let memory_hints = wgpu::MemoryHints::MemoryUsage;
    let open = {
        // SAFETY: the guard lives only inside this block, and nothing it hands out is destroyed
        // here; the device made from it is handed to wgpu below, which owns it from then on.
        let hal = unsafe { adapter.as_hal::<Vulkan>() }
            .ok_or_else(|| format!("{} is not a Vulkan adapter", adapter.get_info().name))?;
        let robustness2: &CStr = ash::ext::robustness2::NAME;
        // Every extension wgpu would enable but VK_EXT_robustness2 (whose feature struct would
        // turn robustBufferAccess2 on): so the features computed from the list leave it out.
        let extensions: Vec<&'static CStr> = hal
            .required_device_extensions(features)
            .into_iter()
            .filter(|e| *e != robustness2)
            .collect();
        let mut wanted = hal.physical_device_features(&extensions, features);
        let core = ash::vk::PhysicalDeviceFeatures {
            robust_buffer_access: ash::vk::FALSE,
            ..wanted.get_core()
        };
        let names: Vec<*const std::ffi::c_char> = extensions.iter().map(|e| e.as_ptr()).collect();
        // Queue family 0, as wgpu-hal opens its devices.
        let priorities = [1.0f32];
        let families = [ash::vk::DeviceQueueCreateInfo::default()
            .queue_family_index(0)
            .queue_priorities(&priorities)];
        let info = ash::vk::DeviceCreateInfo::default()
            .queue_create_infos(&families)
            .enabled_extension_names(&names);
        // wgpu-hal's feature chain, then the core features without robustBufferAccess in place
        // of its own (`enabled_features` replaces the pointer the chain set).
        let info = wanted.add_to_device_create(info).enabled_features(&core);
        let instance = hal.shared_instance().raw_instance();
        // SAFETY: the physical device is this adapter's; `info` and everything it points to
        // (extension names, queue infos, the feature chain, `core`) outlive the call.
        let raw = unsafe { instance.create_device(hal.raw_physical_device(), &info, None) }
            .map_err(|e| format!("vkCreateDevice without robustness: {e}"))?;
        // SAFETY: `raw` was created from this adapter with queue family 0, these extensions and
        // the features `physical_device_features` gave for them, robustBufferAccess and
        // VK_EXT_robustness2 aside (outside wgpu-hal's documented contract: it takes robustness
        // from the adapter's capabilities, so where a module asks for naga's buffer checks it
        // leaves them to the driver, which here does none; CubeCL's modules ask for none on any
        // device: the module's note); with no drop callback wgpu-hal owns `raw` and destroys it
        // with the device.
        unsafe {
            hal.device_from_raw(
                raw,
                None,
                &extensions,
                features,
                &limits,
                &memory_hints,
                0,
                0,
            )
        }
        .map_err(|e| format!("wgpu-hal refused the device: {e}"))?
    };
    let descriptor = wgpu::DeviceDescriptor {
        label: Some("mars: no robustness"),
        required_features: features,
        required_limits: limits,
        memory_hints,
        trace: wgpu::Trace::Off,
        // SAFETY: as CubeCL requests its devices: the experimental features (cooperative
        // matrices, passthrough shaders) are used only where the adapter reports them.
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
    };
    // SAFETY: `open` was made from this adapter's hal adapter, with exactly `features`.
    unsafe { adapter.create_device_from_hal(open, &descriptor) }.map_err(|e| e.to_string())
}

/// Whether `device` runs with VK_EXT_robustness2 (robustBufferAccess2): `Some(true)` as wgpu
/// opens a Vulkan device whose driver has it, `Some(false)` as [`open_without_robustness`]
/// opens it; `None` off Vulkan. What a test reads to know which device it runs on.
pub fn robustness2_enabled(device: &wgpu::Device) -> Option<bool> {
    // SAFETY: the guard is read and dropped here; nothing it refers to is destroyed.
    let hal = unsafe { device.as_hal::<Vulkan>() }?;
    Some(
        hal.enabled_device_extensions()
            .contains(&ash::ext::robustness2::NAME),
    )
}

/// Where `MARS_GPU_ROBUST=off`: a CubeCL setup on the Vulkan adapter CubeCL's default device
/// would take (high performance), its device from [`open_without_robustness`]; `None` where
/// the switch is not set. The one opening of the switch: the engine's (`mars_model::open_wgpu`)
/// and `gpu_cost`'s.
///
/// # Errors
/// What wgpu or the driver refused, in words.
pub async fn setup_without_robustness() -> Result<Option<cubecl::wgpu::WgpuSetup>, String> {
    if std::env::var("MARS_GPU_ROBUST").as_deref() != Ok("off") {
        return Ok(None);
    }
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("MARS_GPU_ROBUST=off: no Vulkan adapter: {e}"))?;
    let (device, queue) =
        open_without_robustness(&adapter).map_err(|e| format!("MARS_GPU_ROBUST=off: {e}"))?;
    Ok(Some(cubecl::wgpu::WgpuSetup {
        instance,
        adapter,
        device,
        queue,
        backend: wgpu::Backend::Vulkan,
    }))
}
