//! Shared by the engine's tests: a run that asserts the rollback invariant after every step.
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::Arc;

use mars_engine::{AnyDrafter, DecodeConfig, Decoder, StopReason, TokenKind, TokenRecord};
use mars_formats::Tokenizer;
use mars_model::Llama;

/// Runs to the end, asserting after every step that the target's cache holds exactly the
/// accepted context minus its last token and that the drafter's holds no rejected token;
/// returns the generated tokens, the stop reason and every token record.
pub fn run(
    model: &Llama,
    tokenizer: Arc<Tokenizer>,
    drafter: Option<AnyDrafter>,
    config: &DecodeConfig,
    prompt: &[u32],
) -> (Vec<u32>, StopReason, Vec<TokenRecord>) {
    pollster::block_on(async {
        let mut dec = Decoder::new(model, tokenizer, drafter, config, prompt)
            .await
            .unwrap();
        let mut records = Vec::new();
        while let Some(step) = dec.step().await.unwrap() {
            let ctx = dec.context().len();
            assert_eq!(dec.target_cache_len(), ctx - 1, "target cache after a step");
            if let Some(len) = dec.drafter_cache_len() {
                // A drafter never holds a token past the accepted context; after a rejection it
                // sits exactly at it. (After a fully kept draft it is one short: it never fed
                // its own last proposal, and the next draft feeds it with the new token.)
                assert!(len < ctx, "drafter cache {len}, context {ctx}");
                if step.correction {
                    assert_eq!(len, ctx - 1, "drafter cache after a rejection, {step:?}");
                }
            }
            assert!(step.drafted <= config.k);
            records.extend(step.tokens.iter().copied());
        }
        (
            dec.generated().to_vec(),
            dec.stop_reason().unwrap(),
            records,
        )
    })
}

/// The kinds of a run's tokens.
pub fn kinds(records: &[TokenRecord]) -> Vec<TokenKind> {
    records.iter().map(|r| r.kind).collect()
}
