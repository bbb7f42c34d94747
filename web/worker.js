// The inference worker: loads the wasm module trunk built (no-modules target) and hands the
// message loop to Rust (mars-web's worker_main). If loading fails, the page hears why.
/* global wasm_bindgen */

// Watch every GPU device the engine opens: a lost device (driver reset, GPU removed, or
// destroyed) is reported to the page as such, whatever the Rust side was doing at the time.
// `debug_lose_device` destroys them, so that tests can check the page's recovery.
const devices = [];
if (self.GPUAdapter) {
  const requestDevice = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (...args) {
    const device = await requestDevice.apply(this, args);
    devices.push(device);
    device.lost.then((info) => postMessage({
      type: "error",
      kind: "device_lost",
      message: `The GPU device was lost (${info.reason || "unknown"}): ${info.message || "no details"}`,
    }));
    return device;
  };
}
self.addEventListener("message", (e) => {
  if (e.data && e.data.type === "debug_lose_device") {
    e.stopImmediatePropagation();
    for (const d of devices) d.destroy();
  }
});

importScripts("./mars-web.js");
wasm_bindgen({ module_or_path: "./mars-web_bg.wasm" })
  .then(() => wasm_bindgen.worker_main())
  .catch((e) => postMessage({ type: "error", kind: "engine", message: "loading the engine failed: " + e }));
