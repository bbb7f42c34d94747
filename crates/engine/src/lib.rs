//! Speculative decoding for mars: drafters behind one trait and one decoding loop, the same code
//! natively (driven by a blocking executor) and in the browser (awaited in a Web Worker).
//!
//! A step: the drafter proposes up to k tokens (with its distributions), the target scores the
//! last accepted token plus the draft in one forward pass (k + 1 rows of logits), `mars-verify`
//! decides how many to keep (strict or MARS), and every cache rolls back to the kept prefix.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod decoder;
mod drafter;
mod error;
mod layers;

pub use decoder::{
    DecodeConfig, Decoder, Prefill, RunSummary, StepRecord, StopReason, TokenKind, TokenRecord,
};
pub use drafter::{AnyDrafter, Draft, Drafter, ModelDrafter, NgramDrafter, check_same_tokenizer};
pub use error::{EngineError, Result};
pub use layers::LayerSpec;
