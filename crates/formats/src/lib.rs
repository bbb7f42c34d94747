//! Model file formats for mars, with no model code: the same parsing runs natively and in the
//! browser (wasm32), over bytes from a file, a download or an `ArrayBuffer`.
//!
//! - [`gguf`]: a GGUF v2/v3 reader hardened against hostile files, and a writer.
//! - [`quant`]: ggml types and bit-exact dequantization to f32.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
pub mod gguf;
pub mod quant;

pub use error::{FormatError, Result};
pub use gguf::{Gguf, GgufWriter, TensorInfo, Value};
pub use quant::GgmlType;
