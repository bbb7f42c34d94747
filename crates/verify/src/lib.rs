//! Verification for speculative decoding: strict (lossless) and MARS (margin-aware, lossy by
//! design, with a ledger of how far it moved).
//!
//! A drafter proposes k tokens; the target scores the k + 1 positions in one forward pass; this
//! crate decides how many draft tokens to keep and which token comes next.
//!
//! - **Strict.** Greedy keeps a draft token iff it is the target's argmax. Sampling keeps it with
//!   probability min(1, p(x)/q(x)) and on rejection samples from norm(max(0, p − q)); the output
//!   is distributed exactly as the target's (Leviathan et al. 2023; Chen et al. 2023).
//! - **MARS** (Margin-Aware Speculative Verification, arXiv 2601.15498). Where the target is
//!   undecided between its top two tokens, it keeps a draft token iff it is one of those two.
//!   "Undecided" is either the paper's logit ratio z2/z1 > θ ([`Mode::Paper`], guarded where the
//!   ratio is meaningless) or a shift-invariant probability ratio p2/p1 ≥ ρ ([`Mode::Margin`]).
//!   Every relaxed position is entered in a [`Ledger`].
//! - **Trees** ([`Verifier::verify_tree`], [`tree`]): a draft tree scored in one target pass,
//!   walked from the root — greedy strict follows the argmax child; sampling strict is lossless
//!   multi-draft speculative sampling (each sibling tested against the residual of the ones
//!   before); MARS keeps the first sibling in the target's top-2 where the criterion holds, as
//!   the released code does over EAGLE trees.
//!
//! The crate has no model code and no burn dependency, and builds for `wasm32-unknown-unknown`
//! so the browser runs exactly the same verifier.
//!
//! ```
//! use mars_verify::{DraftProbs, Mode, Sampling, VerifyConfig, Verifier, VerifyInput};
//! use rand_core::SeedableRng;
//!
//! // vocab 3, k = 1: the target prefers token 0 at position 0 and token 2 at position 1.
//! let logits = [2.0, 1.9, 0.0, /* row 1 */ 0.0, 0.0, 5.0];
//! let input = VerifyInput {
//!     target_logits: &logits,
//!     vocab: 3,
//!     draft_tokens: &[1],
//!     draft_probs: DraftProbs::OneHot,
//! };
//! let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
//!
//! let strict = VerifyConfig { sampling: Sampling::GREEDY, mode: Mode::Strict };
//! let verdict = Verifier::new(strict)?.verify(&input, &mut rng)?;
//! assert_eq!((verdict.accepted, verdict.next.token), (0, 0)); // runner-up rejected
//!
//! let mars = VerifyConfig { sampling: Sampling::GREEDY, mode: Mode::PAPER };
//! let verdict = Verifier::new(mars)?.verify(&input, &mut rng)?;
//! assert_eq!((verdict.accepted, verdict.next.token), (1, 2)); // 1.9 / 2.0 > 0.9: kept
//! assert!(verdict.ledger.distance > 0.0); // and the ledger says what it cost
//! # Ok::<(), mars_verify::VerifyError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Lets the unit tests share tests/common, which names this crate as an external user would.
#[cfg(test)]
extern crate self as mars_verify;

/// The integration tests' slow f64 reference, shared so there is one definition of "right".
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod test_reference;

mod config;
mod dist;
mod error;
pub mod noise;
mod sample;
pub mod tree;
mod verify;

pub use config::{DEFAULT_RHO, DEFAULT_THETA, Mode, PAPER_THETA, Sampling, VerifyConfig};
pub use dist::{RowDraw, RowSummary};
pub use error::{Result, VerifyError};
pub use noise::SampleKeys;
pub use sample::{RowTop, Sampler};
pub use tree::{TreeDraftProbs, TreeInput, TreeVerdict};
pub use verify::{
    Candidate, Decision, DraftProbs, Ledger, Margin, NextKind, NextToken, PositionRecord, Verdict,
    Verifier, VerifyInput, verify,
};
