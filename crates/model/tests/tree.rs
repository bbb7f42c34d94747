//! Token trees on the packed CPU path (and the f32 path, to within rounding): one forward pass over a tree gives each row — bit for
//! bit — the logits a chain forward over its path gives (the batch-invariance contract,
//! extended to trees), the same when the tree is grown over two calls, and after
//! `KvCache::keep_rows` keeps an accepted path the cache goes on
//! exactly as if that path had been decoded as a chain. On the tiny model and on SmolLM2-135M.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_formats::Gguf;
use mars_model::tiny::tiny_gguf;
use mars_model::{Device, Llama, LoadOptions, ModelError, WeightPath};

#[path = "../../../tests/support/models.rs"]
mod models;

#[path = "support/tree.rs"]
mod tree;

use tree::check;

fn packed() -> LoadOptions {
    LoadOptions::with_weights(WeightPath::CpuPacked { threads: 2 })
}

#[test]
fn a_tree_row_equals_the_chain_over_its_path_on_the_tiny_model() {
    let bytes = tiny_gguf(3).unwrap();
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &Device::flex(), packed()).unwrap();
    let tokens: Vec<u32> = (0..13).map(|i| 40 + 7 * i).collect();
    check(&model, &[1, 2, 3, 4, 5, 6, 7], &tokens, None);
}

/// The burn f32 path (flex) builds a tree mask and tree positions instead: its rows equal the
/// chain's to within the f32 sums' order.
#[test]
fn a_tree_row_matches_the_chain_over_its_path_on_the_f32_path() {
    let bytes = tiny_gguf(3).unwrap();
    let model = Llama::from_gguf(
        &Gguf::parse(&bytes).unwrap(),
        &Device::flex(),
        LoadOptions::default(),
    )
    .unwrap();
    let tokens: Vec<u32> = (0..13).map(|i| 40 + 7 * i).collect();
    check(&model, &[1, 2, 3, 4, 5, 6, 7], &tokens, Some(1e-4));
}

#[test]
fn a_tree_row_equals_the_chain_over_its_path_on_smollm2() {
    let Some(bytes) = models::bytes(models::SMOLLM2) else {
        return;
    };
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &Device::flex(), packed()).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 300 + 11 * i).collect();
    let tokens: Vec<u32> = (0..13).map(|i| 1000 + 97 * i).collect();
    check(&model, &prompt, &tokens, None);
}

#[test]
fn bad_trees_and_paths_are_refused() {
    let bytes = tiny_gguf(3).unwrap();
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &Device::flex(), packed()).unwrap();
    let mut cache = model.new_cache(16).unwrap();
    assert!(matches!(
        model.forward_tree(&[1, 2], &[None, Some(1)], &mut cache),
        Err(ModelError::TreeParent {
            row: 1,
            parent: Some(1)
        })
    ));
    assert!(matches!(
        model.forward_tree(&[1, 2], &[None], &mut cache),
        Err(ModelError::TreeParent { row: 1, .. })
    ));
    assert_eq!(cache.len(), 0, "a refused tree writes nothing");
    // A parent list that does not end with the new rows.
    assert!(matches!(
        model.extend_tree(0, &[1, 2], &[None, Some(0), Some(1)], &mut cache),
        Err(ModelError::TreeParent { row: 3, .. })
    ));
    model
        .forward_tree(&[1, 2, 3], &[None, Some(0), Some(0)], &mut cache)
        .unwrap();
    for rows in [&[0, 0][..], &[2, 1][..], &[0, 3][..]] {
        assert!(matches!(
            cache.clone().keep_rows(0, rows),
            Err(ModelError::KeepRows { .. })
        ));
    }
}
