//! Shared by the engine's tests: runs that assert the rollback invariant after every step,
//! from a decoder built by hand (edge cases: a tokenizer with another stop token, a cache cut
//! short) or, as the front ends do, through [`Target::race`] and [`Race::decoder`].
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::Arc;

use mars_engine::{
    AnyDrafter, DecodeConfig, Decoder, Method, Race, RunSettings, StopReason, TokenKind,
    TokenRecord,
};
use mars_formats::Tokenizer;
use mars_model::Llama;

/// What a checked run returns: the generated tokens, the stop reason and every token record.
pub type Run = (Vec<u32>, StopReason, Vec<TokenRecord>);

/// Runs a decoder built by hand to the end (see [`checked`]).
pub fn run(
    model: &Llama,
    tokenizer: Arc<Tokenizer>,
    drafter: Option<AnyDrafter>,
    config: &DecodeConfig,
    prompt: &[u32],
) -> Run {
    pollster::block_on(async {
        let dec = Decoder::new(model, tokenizer, drafter, config, prompt)
            .await
            .unwrap();
        checked(dec, config.k).await
    })
}

/// Runs `method` of a race to the end, as the front ends build it (see [`checked`]); the
/// visible text `Race::run` gives must be that of the same tokens.
pub fn race(race: &Race<'_>, settings: &RunSettings, method: Method) -> Run {
    let settings = &settings.clone().resolve().unwrap();
    pollster::block_on(async {
        let dec = race.decoder(settings, method).await.unwrap();
        // A tree drafts up to its node budget, a chain up to k.
        let k = if method == Method::Target {
            0
        } else {
            settings.shape.k.max(settings.shape.tree)
        };
        let run = checked(dec, k).await;
        let output = race.run(settings, method, |_| {}).await.unwrap();
        assert_eq!(
            output.ids, run.0,
            "Race::run and a decoder of the same race"
        );
        assert_eq!(output.summary.tokens, run.0.len());
        run
    })
}

/// Steps `dec` to the end, asserting after every step that the target's cache holds exactly
/// the accepted context minus its last token, that the drafter's holds no rejected token, and
/// that no step drafted more than `k` tokens (a tree's nodes).
pub async fn checked(mut dec: Decoder<AnyDrafter>, k: usize) -> Run {
    let mut records = Vec::new();
    while let Some(step) = dec.step().await.unwrap() {
        let ctx = dec.context().len();
        assert_eq!(dec.target_cache_len(), ctx - 1, "target cache after a step");
        if let Some(len) = dec.drafter_cache_len() {
            // A drafter never holds a token past the accepted context; after a rejection it
            // sits exactly at it. (After a fully kept draft it is one short: it never fed
            // its own last proposal, and the next draft feeds it with the new token.)
            assert!(len < ctx, "drafter cache {len}, context {ctx}");
            // (A tree drafter caches only the nodes it expanded: a kept leaf is fed next time.)
            if step.correction && !step.tree {
                assert_eq!(len, ctx - 1, "drafter cache after a rejection, {step:?}");
            }
        }
        assert!(step.drafted <= k);
        // A tree step carries its nodes, for drawing: the kept ones are a path from the root,
        // and they are the tokens the step emitted first.
        assert_eq!(step.tree, !step.nodes.is_empty(), "{step:?}");
        if step.tree {
            assert_eq!(step.nodes.len(), step.drafted);
            let kept: Vec<(usize, &mars_engine::TreeNode)> = step
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.kept)
                .collect();
            for (i, (_, node)) in kept.iter().enumerate() {
                let parent = i.checked_sub(1).map(|p| kept[p].0 as u32);
                assert_eq!(
                    node.parent, parent,
                    "kept nodes are not a path: {:?}",
                    step.nodes
                );
            }
            for ((_, node), token) in kept.iter().zip(&step.tokens) {
                assert_eq!(node.id, token.id, "{step:?}");
            }
        }
        records.extend(step.tokens.iter().copied());
    }
    (
        dec.generated().to_vec(),
        dec.stop_reason().unwrap(),
        records,
    )
}

/// The kinds of a run's tokens.
pub fn kinds(records: &[TokenRecord]) -> Vec<TokenKind> {
    records.iter().map(|r| r.kind).collect()
}
