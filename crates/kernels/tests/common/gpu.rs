//! Helpers shared by the GPU kernel tests (`gpu.rs`, `gpu_layer.rs`): the wgpu client (lavapipe
//! without a GPU) and reading a buffer back as f32.
#![allow(dead_code, clippy::unwrap_used)]

use cubecl::client::Client;
use cubecl::server::Handle;
use cubecl::wgpu::WgpuDevice;

/// The default wgpu device's CubeCL client.
pub fn client() -> Client {
    cubecl::Device::Wgpu(WgpuDevice::default()).client()
}

/// `h`'s bytes read back as little-endian f32.
pub fn read_f32(client: &Client, h: Handle) -> Vec<f32> {
    let bytes = client.read_one(h).unwrap();
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
