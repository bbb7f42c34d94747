//! Speculative decoding for mars: drafters behind one trait and one decoding loop, the same code
//! natively (driven by a blocking executor) and in the browser (awaited in a Web Worker).
//!
//! A step: the drafter proposes up to k tokens (with its distributions), the target scores the
//! last accepted token plus the draft in one forward pass (k + 1 rows of logits), `mars-verify`
//! decides how many to keep (strict or MARS), and every cache rolls back to the kept prefix.
//!
//! Front ends (the CLI, the browser worker) go through the session layer: [`Backend::open`]
//! for the device, [`Target`] for a loaded model, [`Choices`] resolved into settings
//! (defaults in [`DEFAULTS`], drafters in [`DrafterSpec`] syntax), then [`Target::race`]: one
//! prompt's prefill, from which each method runs ([`Race::run`], [`Race::decoder`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod decoder;
mod device;
mod drafter;
mod error;
pub mod memory;
mod race;
mod readback;
mod session;
mod settings;
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
pub mod tune;

pub use decoder::{
    DecodeConfig, Decoder, GpuCost, PLAIN_TOKENS_A_READ, Prefill, RunSummary, StepRecord,
    StopReason, TokenKind, TokenRecord, TreeNode,
};
pub use device::{Backend, GpuCaps, OpenDevice, WeightChoice, Weights, auto_choice, cores};
pub use drafter::{
    AnyDrafter, ChainedDraft, Draft, DraftRandom, Drafter, ModelDrafter, NgramDrafter,
    check_same_tokenizer,
};
pub use error::{EngineError, Result};
pub use mars_formats::{LayerSpec, Message, conversation};
pub use mars_model::AdapterFacts;
pub use race::{MethodOutput, Race};
pub use session::{ModelInfo, Target};
pub use settings::{
    CHAT_PROMPTS, Choices, DEFAULTS, Defaults, DraftShape, DrafterSpec, Method, PRESETS, Preset,
    Resolved, RunSettings,
};

/// Where mars keeps what it fetches and what it measures natively, the one rule for every
/// front end and for the fetch scripts (`tests/fetch-*.sh`): `$var` where set, else
/// `~/.cache/mars/<name>`, the home being [`std::env::home_dir`]'s — `HOME` on Unix, the user's
/// profile folder on Windows, where Git Bash's `HOME` points, so the scripts run there and a
/// native `mars` find the same files. `None` without a home.
#[cfg(not(target_family = "wasm"))]
pub fn cache_path(var: &str, name: &str) -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Some(p.into());
    }
    Some(std::env::home_dir()?.join(".cache").join("mars").join(name))
}
