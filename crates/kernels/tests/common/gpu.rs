//! Helpers shared by the GPU kernel tests (`gpu.rs`, `gpu_layer.rs`): the wgpu client (lavapipe
//! without a GPU), launching directly as the engine's does (`MARS_GPU_LAUNCH=cubecl`: through
//! CubeCL), and reading a buffer back as f32.
#![allow(dead_code, clippy::unwrap_used)]

use cubecl::client::Client;
use cubecl::server::Handle;
use std::sync::OnceLock;

use cubecl::wgpu::{WgpuDevice, wgpu};
use mars_kernels::gpu::direct;

/// The default wgpu device's CubeCL client, its launches direct unless `MARS_GPU_LAUNCH=cubecl`
/// (submitted every 32, CubeCL's default).
pub fn client() -> Client {
    static SETUP: OnceLock<(wgpu::Device, wgpu::Queue)> = OnceLock::new();
    let (device, queue) = SETUP.get_or_init(|| {
        let setup = cubecl::wgpu::init_setup::<cubecl::wgpu::AutoGraphicsApi>(
            &WgpuDevice::default(),
            Default::default(),
        );
        (setup.device, setup.queue)
    });
    let client = cubecl::Device::Wgpu(WgpuDevice::default()).client();
    if direct::wanted().unwrap() {
        direct::register(&client, device.clone(), queue.clone(), 32);
    }
    client
}

/// `h`'s bytes read back as little-endian f32.
pub fn read_f32(client: &Client, h: Handle) -> Vec<f32> {
    let bytes = mars_kernels::gpu::read_blocking(client, h).unwrap();
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
