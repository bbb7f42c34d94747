//! Model file formats for mars, with no model code: the same parsing runs natively and in the
//! browser (wasm32), over bytes from a file, a download or an `ArrayBuffer`.
//!
//! - [`gguf`]: a GGUF v2/v3 reader hardened against hostile files, and a writer.
//! - [`quant`]: ggml types and bit-exact dequantization to f32.
//! - [`safetensors`]: HF safetensors tensors as f32.
//! - [`tokenizer`]: HF `tokenizers` built from GGUF metadata or `tokenizer.json`, and streaming.
//! - [`chat`]: chat templates in a sandboxed minijinja.
//! - [`layers`]: layer subsets (the rule, and the `first:N` / `every:S` / list syntax).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chat;
mod error;
pub mod gguf;
pub mod layers;
pub mod quant;
pub mod safetensors;
pub mod tokenizer;

pub use chat::{ChatTemplate, Message, check_conversation, conversation};
pub use error::{FormatError, Result};
pub use gguf::{Gguf, GgufWriter, ReadAt, TensorInfo, Value};
pub use layers::{LayerSpec, check_layer_subset};
pub use quant::GgmlType;
pub use safetensors::SafetensorsFile;
pub use tokenizer::{PRE_NAMES, PreRule, StreamDecoder, Tokenizer, pre_rule};
