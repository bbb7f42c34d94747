//! wasm-bindgen glue for mars in the browser. Nothing here decides anything: the session layer,
//! the loop and the drafters are `mars-engine`, the model is `mars-model`, the rules are
//! `mars-verify`. This crate has one entry point, [`worker_main`], which runs inside the page's
//! Web Worker (the page stays responsive) and speaks a typed message protocol: [`Request`]s in,
//! [`Event`]s out.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod worker;
pub use worker::{
    BlobSource, ErrorKind, Event, Request, SeenAdapter, choose, wasm_bytes, worker_main,
};
