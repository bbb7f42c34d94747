//! Token trees on the packed CPU path: one forward pass over a tree gives each row — bit for
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

/// A tree of 13 rows over the root (the last accepted token, row 0): branches at the root and
/// below it, and a path of depth 5.
const PARENTS: [Option<usize>; 13] = [
    None,
    Some(0),
    Some(0),
    Some(0),
    Some(1),
    Some(4),
    Some(2),
    Some(5),
    Some(7),
    Some(6),
    Some(1),
    Some(3),
    Some(8),
];

fn path_to(r: usize) -> Vec<usize> {
    let mut path = vec![r];
    while let Some(p) = PARENTS[*path.last().unwrap()] {
        path.push(p);
    }
    path.reverse();
    path
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn check(model: &Llama, prompt: &[u32], tokens: &[u32]) {
    let vocab = model.config().vocab_size;
    let mut cache = model.new_cache(prompt.len() + 32).unwrap();
    model.forward(prompt, &mut cache).unwrap();
    let base = cache.len();
    let tree = model
        .forward_tree(tokens, &PARENTS, &mut cache)
        .unwrap()
        .read()
        .unwrap();
    assert_eq!(tree.len(), tokens.len() * vocab);
    assert_eq!(cache.len(), base + tokens.len());
    for r in 0..tokens.len() {
        let path = path_to(r);
        let ids: Vec<u32> = path.iter().map(|&j| tokens[j]).collect();
        let mut chain_cache = model.new_cache(prompt.len() + 32).unwrap();
        model.forward(prompt, &mut chain_cache).unwrap();
        let chain = model
            .forward(&ids, &mut chain_cache)
            .unwrap()
            .read()
            .unwrap();
        assert_eq!(
            bits(&tree[r * vocab..(r + 1) * vocab]),
            bits(&chain[(ids.len() - 1) * vocab..]),
            "row {r}, path {path:?}"
        );
    }
    // The same tree grown in two calls, as a drafter grows one a depth at a time: the rows'
    // logits are the one-call ones.
    let mut grown = model.new_cache(prompt.len() + 32).unwrap();
    model.forward(prompt, &mut grown).unwrap();
    let first = model
        .extend_tree(base, &tokens[..5], &PARENTS[..5], &mut grown)
        .unwrap()
        .read()
        .unwrap();
    let rest = model
        .extend_tree(base, &tokens[5..], &PARENTS, &mut grown)
        .unwrap()
        .read()
        .unwrap();
    assert_eq!(bits(&first), bits(&tree[..5 * vocab]));
    assert_eq!(bits(&rest), bits(&tree[5 * vocab..]));
    // Keep the deepest path and decode two more tokens: as the chain does.
    let path = path_to(12);
    cache.keep_rows(base, &path).unwrap();
    assert_eq!(cache.len(), base + path.len());
    let mut chain_cache = model.new_cache(prompt.len() + 32).unwrap();
    model.forward(prompt, &mut chain_cache).unwrap();
    let ids: Vec<u32> = path.iter().map(|&j| tokens[j]).collect();
    model.forward(&ids, &mut chain_cache).unwrap();
    let next = [tokens[3], tokens[1]];
    let after_tree = model.forward(&next, &mut cache).unwrap().read().unwrap();
    let after_chain = model
        .forward(&next, &mut chain_cache)
        .unwrap()
        .read()
        .unwrap();
    assert_eq!(
        bits(&after_tree),
        bits(&after_chain),
        "after keeping {path:?}"
    );
}

fn packed() -> LoadOptions {
    LoadOptions::with_weights(WeightPath::CpuPacked { threads: 2 })
}

#[test]
fn a_tree_row_equals_the_chain_over_its_path_on_the_tiny_model() {
    let bytes = tiny_gguf(3).unwrap();
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &Device::flex(), packed()).unwrap();
    let tokens: Vec<u32> = (0..13).map(|i| 40 + 7 * i).collect();
    check(&model, &[1, 2, 3, 4, 5, 6, 7], &tokens);
}

#[test]
fn a_tree_row_equals_the_chain_over_its_path_on_smollm2() {
    let Some(bytes) = models::bytes(models::SMOLLM2) else {
        return;
    };
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &Device::flex(), packed()).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 300 + 11 * i).collect();
    let tokens: Vec<u32> = (0..13).map(|i| 1000 + 97 * i).collect();
    check(&model, &prompt, &tokens);
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
    // Off the packed path trees are refused, not run wrongly.
    let f32_model = Llama::from_gguf(
        &Gguf::parse(&bytes).unwrap(),
        &Device::flex(),
        LoadOptions::default(),
    )
    .unwrap();
    let mut cache = f32_model.new_cache(16).unwrap();
    assert!(matches!(
        f32_model.forward_tree(&[1, 2], &[None, Some(0)], &mut cache),
        Err(ModelError::Unsupported(_))
    ));
}
