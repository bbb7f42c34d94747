//! Token-tree checks shared by the model's tests (the packed CPU path in `tree.rs`, wgpu in
//! `backends.rs`): a tree row against the chain over its path.
#![allow(clippy::unwrap_used, dead_code)]

use mars_model::Llama;

/// A tree of 13 rows over the root (the last accepted token, row 0): branches at the root and
/// below it, and a path of depth 5.
pub const PARENTS: [Option<usize>; 13] = [
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

pub fn path_to(r: usize) -> Vec<usize> {
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

/// Equal bit for bit (`tolerance` `None`: the packed CPU path's contract), or within
/// `tolerance` (burn paths, whose sums are ordered by the tensor shapes).
fn same(a: &[f32], b: &[f32], tolerance: Option<f32>, what: &str) {
    match tolerance {
        None => assert_eq!(bits(a), bits(b), "{what}"),
        Some(tol) => {
            assert_eq!(a.len(), b.len(), "{what}");
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(worst <= tol, "{what}: max |Δ logit| {worst:e}");
        }
    }
}

/// One pass over the tree, the tree grown in two calls, and a kept path continued, each against
/// the chain over the same tokens.
pub fn check(model: &Llama, prompt: &[u32], tokens: &[u32], tolerance: Option<f32>) {
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
        same(
            &tree[r * vocab..(r + 1) * vocab],
            &chain[(ids.len() - 1) * vocab..],
            tolerance,
            &format!("row {r}, path {path:?}"),
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
    same(&first, &tree[..5 * vocab], tolerance, "grown: first rows");
    same(&rest, &tree[5 * vocab..], tolerance, "grown: the rest");
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
    same(
        &after_tree,
        &after_chain,
        tolerance,
        &format!("after keeping {path:?}"),
    );
}
