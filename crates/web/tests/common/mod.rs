//! What the browser test binaries share: the one WebGPU device a page may initialise, the
//! bound on f32 logits against flex, the browser console.
#![allow(dead_code)] // each test binary uses part of it

use mars_model::Device;

/// Largest |Δ logit| allowed between WebGPU and flex (logits up to ~10; f32 sums in another
/// order, two layers).
pub const TOLERANCE: f32 = 1e-3;

/// burn's WebGPU runtime can be initialised once per page; the tests share it, opened as the
/// page opens it (`mars_model::open_wgpu`: CubeCL's submit interval for the adapter, the
/// kernels' direct launches registered).
pub async fn device() -> Device {
    thread_local! {
        static DEVICE: std::cell::RefCell<Option<Device>> = const { std::cell::RefCell::new(None) };
    }
    if let Some(d) = DEVICE.with(|d| d.borrow().clone()) {
        return d;
    }
    let (d, _) = mars_model::open_wgpu(None)
        .await
        .expect("WebGPU adapter (Chromium flags in webdriver.json)");
    DEVICE.with(|slot| *slot.borrow_mut() = Some(d.clone()));
    d
}

/// A line in the browser console (shown with `--nocapture`).
pub fn log(s: &str) {
    wasm_bindgen_test::console_log!("{s}");
}
