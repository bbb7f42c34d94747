// The inference worker: loads the wasm module trunk built (no-modules target) and hands the
// message loop to Rust (mars-web's worker_main). If loading fails, the page hears why.
/* global wasm_bindgen */
importScripts("./mars-web.js");
wasm_bindgen({ module_or_path: "./mars-web_bg.wasm" })
  .then(() => wasm_bindgen.worker_main())
  .catch((e) => postMessage({ type: "error", kind: "engine", message: "loading the engine failed: " + e }));
