//! Engine invariants on the project-made tiny model (2 layers, byte vocabulary, flex backend):
//! greedy strict speculation reproduces target-only greedy for every drafter and k, caches sit
//! at the accepted length after every step, seeds reproduce runs, and strict sampling's first
//! token follows the target's distribution.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use mars_engine::{
    AnyDrafter, DecodeConfig, Decoder, Draft, DraftShape, EngineError, Method, ModelDrafter,
    NgramDrafter, PLAIN_TOKENS_A_READ, RunSettings, StopReason, Target, TokenKind,
    check_same_tokenizer,
};
use mars_formats::{Gguf, GgufWriter, Tokenizer, Value};
use mars_model::tiny::tiny_gguf;
use mars_model::{Device, Llama, LoadOptions, WeightPath};
use mars_verify::{Mode, Sampler, Sampling, VerifyConfig};
use statrs::distribution::{ChiSquared, ContinuousCDF};

mod common;

struct Tiny {
    bytes: Vec<u8>,
    model: Llama,
    tokenizer: Arc<Tokenizer>,
    options: LoadOptions,
}

fn tiny() -> Tiny {
    tiny_with(LoadOptions::default())
}

/// The tiny model on the packed CPU path: its f32 weights converted to Q8_0 at load, its F16
/// embedding kept as stored.
fn tiny_packed() -> Tiny {
    let t = tiny_with(LoadOptions::with_weights(WeightPath::CpuPacked {
        threads: 2,
    }));
    assert!(t.model.weight_path().threads().is_some());
    assert_eq!(
        t.model.converted().len(),
        2 * 7 + 1,
        "every matrix and the head (f32), not the F16 embedding"
    );
    t
}

fn tiny_with(options: LoadOptions) -> Tiny {
    let bytes = tiny_gguf(3).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let model = Llama::from_gguf(&g, &Device::flex(), options).unwrap();
    let tokenizer = Arc::new(Tokenizer::from_gguf(&g).unwrap());
    Tiny {
        bytes,
        model,
        tokenizer,
        options,
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    LayerSkip,
    File,
    Ngram,
}

fn drafter(t: &Tiny, kind: Kind, sampling: Sampling, capacity: usize) -> AnyDrafter {
    match kind {
        Kind::LayerSkip => AnyDrafter::Model(Box::new(
            ModelDrafter::new(
                t.model.with_layers(&[0]).unwrap(),
                capacity,
                sampling,
                257,
                "layers 0",
            )
            .unwrap(),
        )),
        Kind::File => {
            // The same layer subset written out as its own GGUF and loaded like any draft model.
            let sub = Gguf::parse(&t.bytes).unwrap().with_layers(&[0]).unwrap();
            let g = Gguf::parse(&sub).unwrap();
            check_same_tokenizer(&t.tokenizer, &Tokenizer::from_gguf(&g).unwrap()).unwrap();
            let model = Llama::from_gguf(&g, &Device::flex(), t.options).unwrap();
            assert_eq!(model.config().n_layers, 1);
            AnyDrafter::Model(Box::new(
                ModelDrafter::new(model, capacity, sampling, 257, "file").unwrap(),
            ))
        }
        Kind::Ngram => AnyDrafter::Ngram(NgramDrafter::default()),
    }
}

fn config(k: usize, sampling: Sampling, mode: Mode, max_tokens: usize, seed: u64) -> DecodeConfig {
    DecodeConfig {
        k,
        verify: VerifyConfig { sampling, mode },
        max_tokens,
        seed,
        capacity: None,
        tokens_a_read: PLAIN_TOKENS_A_READ,
    }
}

fn run_tiny(
    t: &Tiny,
    tokenizer: Arc<Tokenizer>,
    drafter: Option<AnyDrafter>,
    config: &DecodeConfig,
    prompt: &[u32],
) -> (Vec<u32>, StopReason, Vec<TokenKind>) {
    let (out, stop, records) = common::run(&t.model, tokenizer, drafter, config, prompt);
    (out, stop, common::kinds(&records))
}

fn prompt(t: &Tiny) -> Vec<u32> {
    // Repetitive text so that prompt lookup finds matches.
    t.tokenizer
        .encode("the cat sat on the mat; the cat sat on the", false)
        .unwrap()
}

#[test]
fn greedy_strict_speculation_equals_target_only() {
    greedy_strict_equals_target_only(&tiny());
}

#[test]
fn greedy_strict_speculation_equals_target_only_on_the_packed_path() {
    greedy_strict_equals_target_only(&tiny_packed());
}

fn greedy_strict_equals_target_only(t: &Tiny) {
    let p = prompt(t);
    let strict = |k| config(k, Sampling::GREEDY, Mode::Strict, 40, 0);
    let (reference, stop, kinds) = run_tiny(t, t.tokenizer.clone(), None, &strict(0), &p);
    assert_eq!(stop, StopReason::Budget);
    assert_eq!(reference.len(), 40);
    assert!(kinds.iter().all(|k| *k == TokenKind::Target));
    let mut distinct = reference.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() >= 5,
        "degenerate reference text {reference:?}"
    );

    // An end-of-sequence run: make the 12th generated token a stop token (its first occurrence).
    let eos_at = (10..reference.len())
        .find(|&i| !reference[..i].contains(&reference[i]))
        .unwrap();
    let mut eos_tok = (*t.tokenizer).clone();
    eos_tok.stop_ids = vec![reference[eos_at]];
    let eos_tok = Arc::new(eos_tok);

    let mut accepted_any = false;
    for kind in [Kind::LayerSkip, Kind::File, Kind::Ngram] {
        for k in [1, 4, 8] {
            // Budget.
            let d = drafter(t, kind, Sampling::GREEDY, 512);
            let (out, stop, kinds) = run_tiny(t, t.tokenizer.clone(), Some(d), &strict(k), &p);
            assert_eq!(out, reference, "{kind:?} k={k}");
            assert_eq!(stop, StopReason::Budget);
            accepted_any |= kinds.contains(&TokenKind::Exact);
            assert!(!kinds.contains(&TokenKind::Relaxed), "strict never relaxes");

            // EOS.
            let d = drafter(t, kind, Sampling::GREEDY, 512);
            let (out, stop, _) = run_tiny(t, eos_tok.clone(), Some(d), &strict(k), &p);
            assert_eq!(out, reference[..=eos_at], "{kind:?} k={k} eos");
            assert_eq!(
                stop,
                StopReason::Eos {
                    token: reference[eos_at]
                }
            );

            // Context edge: room for 17 generated tokens.
            let mut c = strict(k);
            c.capacity = Some(p.len() + 16);
            let d = drafter(t, kind, Sampling::GREEDY, p.len() + 16);
            let (out, stop, _) = run_tiny(t, t.tokenizer.clone(), Some(d), &c, &p);
            assert_eq!(out, reference[..17], "{kind:?} k={k} context edge");
            assert_eq!(
                stop,
                StopReason::ContextLimit {
                    context: p.len() + 17,
                    capacity: p.len() + 16
                }
            );
        }
    }
    assert!(
        accepted_any,
        "no drafter ever had a token accepted: the test would be vacuous"
    );
}

/// The path the front ends take: `Target` (loaded from the file), settings naming the drafter in
/// `DrafterSpec` syntax, one `Target::race` whose prefill every method clones. Greedy strict
/// equals target-only for each drafter `Target::drafter` builds, a vocabulary-limited one
/// included, on both CPU weight paths.
#[test]
fn the_race_gives_target_only_tokens_for_every_drafter_spec() {
    for weights in [WeightPath::F32, WeightPath::CpuPacked { threads: 2 }] {
        let options = LoadOptions::with_weights(weights);
        let (target, draft) = target_and_draft_file(options);
        let base = RunSettings {
            chat: false,
            max_tokens: 32,
            ..RunSettings::default()
        };
        let race = pollster::block_on(target.race(
            "the cat sat on the mat; the cat sat on the",
            &base.clone().resolve().unwrap(),
            Some(&draft),
        ))
        .unwrap();
        let (reference, stop, _) = common::race(&race, &base, Method::Target);
        assert_eq!((reference.len(), stop), (32, StopReason::Budget));
        let mut kept = 0;
        for (drafter, draft_vocab) in [
            ("ngram", None),
            ("layers:0", None),
            ("layers:0", Some(200)),
            ("model:layer0.gguf", None),
        ] {
            let settings = RunSettings {
                drafter: drafter.parse().unwrap(),
                shape: DraftShape {
                    draft_vocab,
                    ..DraftShape::CHAIN
                },
                ..base.clone()
            };
            let (out, _, records) = common::race(&race, &settings, Method::Strict);
            assert_eq!(out, reference, "{weights:?} {drafter} {draft_vocab:?}");
            kept += common::kinds(&records)
                .iter()
                .filter(|k| **k == TokenKind::Exact)
                .count();
        }
        assert!(
            kept > 0,
            "{weights:?}: no draft kept, the test would be vacuous"
        );
    }
}

/// The tiny model as a target, and its layer 0 written out as its own GGUF and loaded as a
/// draft model (`model:layer0.gguf` in a drafter spec).
fn target_and_draft_file(options: LoadOptions) -> (Target, Llama) {
    let bytes = tiny_gguf(3).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let target = Target::from_gguf(&g, &Device::flex(), options).unwrap();
    let sub = g.with_layers(&[0]).unwrap();
    let draft = target
        .draft_model(&Gguf::parse(&sub).unwrap(), &Device::flex(), options)
        .unwrap();
    (target, draft)
}

/// Prompt lookup's token trees on the packed path: greedy strict over trees emits target-only's
/// tokens with the caches at the accepted length after every step (a kept path moved into
/// place), branched trees were really verified, and MARS and sampling runs over trees finish.
#[test]
fn prompt_lookup_trees_give_target_only_tokens() {
    let options = LoadOptions::with_weights(WeightPath::CpuPacked { threads: 2 });
    let bytes = tiny_gguf(3).unwrap();
    let target =
        Target::from_gguf(&Gguf::parse(&bytes).unwrap(), &Device::flex(), options).unwrap();
    // A prompt with several continuations of "the ": trees branch there.
    let prompt = "the cat sat; the dog ran; the cat ran; the dog sat; the cat sat; the";
    let base = RunSettings {
        chat: false,
        max_tokens: 40,
        ..RunSettings::default()
    };
    let race =
        pollster::block_on(target.race(prompt, &base.clone().resolve().unwrap(), None)).unwrap();
    let (reference, _, _) = common::race(&race, &base, Method::Target);
    for (k, tree) in [(4, 8), (3, 16), (2, 5)] {
        let settings = RunSettings {
            shape: DraftShape {
                k,
                tree,
                ..DraftShape::CHAIN
            },
            ..base.clone()
        };
        let mut branched = 0;
        let out = pollster::block_on(async {
            let mut dec = race
                .decoder(&settings.clone().resolve().unwrap(), Method::Strict)
                .await
                .unwrap();
            while let Some(step) = dec.step().await.unwrap() {
                branched += usize::from(step.tree);
                assert_eq!(dec.target_cache_len(), dec.context().len() - 1);
                assert!(step.drafted <= tree);
            }
            dec.generated().to_vec()
        });
        assert_eq!(out, reference, "k {k}, tree {tree}");
        assert!(
            branched > 0,
            "k {k}, tree {tree}: no step verified a branched tree"
        );
        for mars in [Mode::Paper { theta: 0.5 }, Mode::Margin { rho: 0.2 }] {
            for sampling in [Sampling::GREEDY, Sampling::with_temperature(1.0)] {
                let s = RunSettings {
                    mars,
                    sampling,
                    ..settings.clone()
                };
                // MARS and sampling may reach the stop token (the tiny model's logits differ
                // by instruction set, so which tokens come does too): a run ends at the
                // budget or at a stop token, never short of both.
                let (out, stop, _) = common::race(&race, &s, Method::Mars);
                match stop {
                    StopReason::Budget => assert_eq!(out.len(), 40, "{mars:?} {sampling:?}"),
                    StopReason::Eos { token } => {
                        assert!(out.len() <= 40 && out.last() == Some(&token));
                    }
                    other => panic!("{mars:?} {sampling:?}: stopped by {other:?}"),
                }
            }
        }
    }
    // The f32 weight path runs trees too (a tree mask on burn tensors): the same tokens as its
    // own target-only run.
    let f32_target = Target::from_gguf(
        &Gguf::parse(&bytes).unwrap(),
        &Device::flex(),
        LoadOptions::default(),
    )
    .unwrap();
    let tree = RunSettings {
        shape: DraftShape {
            tree: 8,
            ..DraftShape::CHAIN
        },
        ..base
    };
    let f32_race =
        pollster::block_on(f32_target.race(prompt, &tree.clone().resolve().unwrap(), None))
            .unwrap();
    let (f32_reference, _, _) = common::race(&f32_race, &tree, Method::Target);
    let (f32_out, _, _) = common::race(&f32_race, &tree, Method::Strict);
    assert_eq!(f32_out, f32_reference, "f32 path, tree 8");
}

/// A model drafter's EAGLE-2 trees (layer skip and a draft-model file) on the packed path and
/// the f32 path: greedy strict emits target-only's tokens with both caches checked after every
/// step, branched trees were verified and drafts kept, and MARS and sampling runs finish.
#[test]
fn model_drafter_trees_give_target_only_tokens() {
    for weights in [WeightPath::CpuPacked { threads: 2 }, WeightPath::F32] {
        model_drafter_trees(LoadOptions::with_weights(weights));
    }
}

fn model_drafter_trees(options: LoadOptions) {
    let (target, draft) = target_and_draft_file(options);
    let base = RunSettings {
        chat: false,
        max_tokens: 40,
        ..RunSettings::default()
    };
    let prompt = "the cat sat on the mat; the dog sat on the";
    let race =
        pollster::block_on(target.race(prompt, &base.clone().resolve().unwrap(), Some(&draft)))
            .unwrap();
    let (reference, _, _) = common::race(&race, &base, Method::Target);
    for drafter in ["layers:0", "model:layer0.gguf"] {
        for (k, tree, branch, tree_min_p) in [
            (4, 8, 2, 0.0),
            (3, 16, 4, 0.0),
            (5, 12, 3, 0.0),
            (2, 3, 1, 0.0),
            (5, 16, 4, 0.05),
        ] {
            let settings = RunSettings {
                drafter: drafter.parse().unwrap(),
                shape: DraftShape {
                    k,
                    draft_vocab: None,
                    tree,
                    branch,
                    tree_min_p,
                },
                ..base.clone()
            };
            let what = format!(
                "{:?} {drafter} k {k} tree {tree} branch {branch} min p {tree_min_p}",
                options.weights
            );
            let (mut branched, mut kept) = (0, 0);
            let out = pollster::block_on(async {
                let mut dec = race
                    .decoder(&settings.clone().resolve().unwrap(), Method::Strict)
                    .await
                    .unwrap();
                while let Some(step) = dec.step().await.unwrap() {
                    let ctx = dec.context().len();
                    assert_eq!(dec.target_cache_len(), ctx - 1, "{what}");
                    let cached = dec.drafter_cache_len().unwrap();
                    assert!(
                        cached < ctx,
                        "{what}: drafter cache {cached}, context {ctx}"
                    );
                    assert!(step.drafted <= tree, "{what}");
                    branched += usize::from(step.tree && step.drafted > k);
                    kept += step.accepted_exact;
                }
                dec.generated().to_vec()
            });
            assert_eq!(out, reference, "{what}");
            assert!(kept > 0, "{what}: no draft kept");
            if branch > 1 {
                assert!(branched > 0, "{what}: no tree wider than a chain");
            }
            for mars in [Mode::Paper { theta: 0.5 }, Mode::Margin { rho: 0.2 }] {
                for sampling in [Sampling::GREEDY, Sampling::with_temperature(1.0)] {
                    let s = RunSettings {
                        mars,
                        sampling,
                        ..settings.clone()
                    };
                    let (out, _, _) = common::race(&race, &s, Method::Mars);
                    assert_eq!(out.len(), 40, "{what} {mars:?} {sampling:?}");
                }
            }
        }
    }
    let zero = RunSettings {
        drafter: "layers:0".parse().unwrap(),
        shape: DraftShape {
            tree: 4,
            branch: 0,
            ..DraftShape::CHAIN
        },
        ..base
    };
    assert!(matches!(
        zero.resolve(),
        Err(EngineError::Config {
            field: "branch",
            ..
        })
    ));
    // A system message is rendered by the chat template: without chat it would be dropped.
    let system = RunSettings {
        chat: false,
        system: Some("Be brief.".into()),
        ..RunSettings::default()
    };
    assert!(matches!(
        system.resolve(),
        Err(EngineError::Config {
            field: "system",
            ..
        })
    ));
}

/// A tree's probability floor keeps the nodes whose path is at least that probable: with a
/// budget that never binds, each floor's tree is the unfloored tree less its less probable
/// nodes (nested as the floor rises, shrinking), a floor no path reaches drafts nothing, and a
/// floor outside [0, 1) is refused by name.
#[test]
fn a_tree_floor_drops_the_improbable_nodes_and_only_those() {
    use mars_engine::Drafter;
    let t = tiny_packed();
    let context = prompt(&t);
    let drafter = |min_p: f32| {
        ModelDrafter::new(
            t.model.with_layers(&[0]).unwrap(),
            256,
            Sampling::GREEDY,
            257,
            "layers 0",
        )
        .unwrap()
        .with_tree(1000, 3)
        .unwrap()
        .with_min_p(min_p)
    };
    // Each node as its path from the root.
    let paths = |min_p: f32| {
        let mut d = drafter(min_p).unwrap();
        let mut rng = mars_engine::DraftRandom::new(0);
        pollster::block_on(async {
            d.prefill(&context).await.unwrap();
            let tree = d.draft(&context, 4, &mut rng).await.unwrap();
            (0..tree.tokens.len())
                .map(|node| node_path(&tree, node))
                .collect::<std::collections::BTreeSet<_>>()
        })
    };
    let all = paths(0.0);
    // Every expanded node's 3 children over 4 depths, 3 expanded a depth: 3 + 3·9 nodes.
    assert_eq!(all.len(), 30);
    let mut last = all.clone();
    let mut sizes = Vec::new();
    for min_p in [0.001, 0.01, 0.05, 0.2, 0.5] {
        let kept = paths(min_p);
        assert!(kept.is_subset(&last), "floor {min_p}");
        // Every prefix of a kept path is kept (a parent is at least as probable).
        for p in &kept {
            assert!(kept.contains(&p[..p.len() - 1]) || p.len() == 1, "{p:?}");
        }
        sizes.push(kept.len());
        last = kept;
    }
    assert!(sizes[0] > sizes[4], "the floor cut nothing: {sizes:?}");
    assert!(paths(0.999_999).is_empty());
    for bad in [1.0, -0.1, f32::NAN, f32::INFINITY] {
        assert!(matches!(
            drafter(bad),
            Err(EngineError::Config {
                field: "tree_min_p",
                ..
            })
        ));
    }
}

/// After a tree step the drafter keeps the accepted path's cached rows in place: its next tree
/// is, bit for bit, the one a fresh drafter fed the same context drafts.
#[test]
fn a_tree_drafter_continues_as_a_fresh_one_after_the_kept_path() {
    use mars_engine::Drafter;
    let t = tiny_packed();
    let context = prompt(&t);
    let fresh = || {
        ModelDrafter::new(
            t.model.with_layers(&[0]).unwrap(),
            128,
            Sampling::GREEDY,
            257,
            "layers 0",
        )
        .unwrap()
        .with_tree(12, 3)
        .unwrap()
    };
    let mut rng = mars_engine::DraftRandom::new(0);
    pollster::block_on(async {
        let mut checked = 0;
        // Keep each node's path in turn (the deepest ones were expanded, the leaves not).
        let mut d = fresh();
        d.prefill(&context).await.unwrap();
        let tree = d.draft(&context, 4, &mut rng).await.unwrap();
        for node in 0..tree.tokens.len() {
            let path = node_path(&tree, node);
            // The verifier kept the path and chose one more token (the new context's last).
            let mut next = context.clone();
            next.extend(&path);
            next.push(b'x'.into());
            let mut d = fresh();
            d.prefill(&context).await.unwrap();
            let again = d.draft(&context, 4, &mut rng).await.unwrap();
            assert_eq!(proposal(&again), proposal(&tree));
            d.rollback(&next[..next.len() - 1]).unwrap();
            let cached = d.cache_len().unwrap();
            assert!(cached < next.len() && cached >= context.len(), "{cached}");
            checked += usize::from(cached > context.len());
            let mut e = fresh();
            e.prefill(&next).await.unwrap();
            assert_eq!(
                proposal(&d.draft(&next, 4, &mut rng).await.unwrap()),
                proposal(&e.draft(&next, 4, &mut rng).await.unwrap()),
                "node {node}, path {path:?}"
            );
        }
        assert!(checked > 0, "no kept path had cached rows");
    });
}

#[test]
fn seeds_reproduce_sampling_runs() {
    let t = tiny();
    let p = prompt(&t);
    let sampling = Sampling::with_temperature(1.0);
    for mode in [
        Mode::Strict,
        Mode::Paper { theta: 0.9 },
        Mode::Margin { rho: 0.5 },
    ] {
        let c = config(4, sampling, mode, 24, 42);
        let a = run_tiny(
            &t,
            t.tokenizer.clone(),
            Some(drafter(&t, Kind::LayerSkip, sampling, 512)),
            &c,
            &p,
        );
        let b = run_tiny(
            &t,
            t.tokenizer.clone(),
            Some(drafter(&t, Kind::LayerSkip, sampling, 512)),
            &c,
            &p,
        );
        assert_eq!(a, b, "{mode:?}");
        // The written-out subset is the same drafter: identical runs.
        let f = run_tiny(
            &t,
            t.tokenizer.clone(),
            Some(drafter(&t, Kind::File, sampling, 512)),
            &c,
            &p,
        );
        assert_eq!(a, f, "{mode:?} file drafter");
        let other = config(4, sampling, mode, 24, 43);
        let d = run_tiny(
            &t,
            t.tokenizer.clone(),
            Some(drafter(&t, Kind::LayerSkip, sampling, 512)),
            &other,
            &p,
        );
        assert_ne!(a.0, d.0, "{mode:?}: another seed should give another text");
    }
}

#[test]
fn strict_sampling_first_token_follows_the_target() {
    let t = tiny();
    let p = prompt(&t);
    // Top-8 at T = 1 keeps the histogram to 8 cells, so 3,000 runs resolve it well.
    let sampling = Sampling {
        temperature: 1.0,
        top_k: Some(8),
        top_p: 1.0,
    };
    let mut cache = t.model.new_cache(64).unwrap();
    let logits = t.model.forward(&p, &mut cache).unwrap().read().unwrap();
    let last = &logits[(p.len() - 1) * 257..];
    let mut probs = Vec::new();
    let mut rng = <rand_chacha::ChaCha8Rng as rand_core::SeedableRng>::seed_from_u64(0);
    Sampler::new(sampling)
        .unwrap()
        .sample_with_probs(last, &mut rng, &mut probs)
        .unwrap();

    let runs = 3000u64;
    let mut counts = vec![0u64; 257];
    let mut drafted_first = 0;
    for seed in 0..runs {
        let c = config(4, sampling, Mode::Strict, 5, seed);
        let d = drafter(&t, Kind::LayerSkip, sampling, 64);
        let (out, kinds) = pollster::block_on(async {
            let mut dec = Decoder::new(&t.model, t.tokenizer.clone(), Some(d), &c, &p)
                .await
                .unwrap();
            let step = dec.step().await.unwrap().unwrap();
            assert_eq!(step.drafted, 4);
            (step.tokens[0].id, step.tokens[0].kind)
        });
        counts[out as usize] += 1;
        drafted_first += u64::from(kinds == TokenKind::Exact);
    }
    let mut chi2 = 0.0;
    let mut cells = 0;
    for (id, &c) in counts.iter().enumerate() {
        let expected = runs as f64 * f64::from(probs[id]);
        if expected == 0.0 {
            assert_eq!(c, 0, "token {id} has p = 0 but was emitted");
            continue;
        }
        chi2 += (c as f64 - expected).powi(2) / expected;
        cells += 1;
    }
    let p_value = 1.0 - ChiSquared::new(f64::from(cells - 1)).unwrap().cdf(chi2);
    eprintln!(
        "first token: chi2 = {chi2:.2} over {cells} cells, p = {p_value:.3}; draft kept in {drafted_first}/{runs}"
    );
    assert!(p_value > 1e-3, "chi2 {chi2}, counts {counts:?}");
    // Both paths (kept draft, correction) must have been exercised.
    assert!(drafted_first > 100 && drafted_first < runs - 100);
}

#[test]
fn draft_models_with_another_tokenizer_are_refused() {
    let t = tiny();
    let g = Gguf::parse(&t.bytes).unwrap();
    // Rebuild the file with token 65 renamed.
    let mut w = GgufWriter::new();
    for (key, value) in &g.metadata {
        let value = match (key.as_str(), value) {
            ("tokenizer.ggml.tokens", Value::Array(ty, items)) => {
                let mut items = items.clone();
                items[65] = Value::String("not-A".into());
                Value::Array(*ty, items)
            }
            _ => value.clone(),
        };
        w.meta(key.clone(), value);
    }
    for info in &g.tensors {
        w.tensor(
            info.name.clone(),
            &info.dims,
            info.dtype,
            g.tensor_bytes(info).unwrap().into_owned(),
        )
        .unwrap();
    }
    let other = w.to_bytes();
    let other = Tokenizer::from_gguf(&Gguf::parse(&other).unwrap()).unwrap();
    match check_same_tokenizer(&t.tokenizer, &other) {
        Err(EngineError::TokenizerMismatch {
            id: 65,
            target,
            draft,
        }) => {
            assert_eq!(target.as_deref(), Some("A"));
            assert_eq!(draft.as_deref(), Some("not-A"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_requests_are_typed_errors() {
    let t = tiny();
    let c = config(4, Sampling::GREEDY, Mode::Strict, 8, 0);
    pollster::block_on(async {
        let r = Decoder::<AnyDrafter>::new(&t.model, t.tokenizer.clone(), None, &c, &[]).await;
        assert!(matches!(r, Err(EngineError::EmptyPrompt)));
        let mut small = c.clone();
        small.capacity = Some(4);
        let r =
            Decoder::<AnyDrafter>::new(&t.model, t.tokenizer.clone(), None, &small, &[1; 5]).await;
        assert!(matches!(
            r,
            Err(EngineError::PromptTooLong {
                prompt: 5,
                capacity: 4
            })
        ));
        // A prompt exactly filling the cache generates one token, then reports the limit.
        let mut dec =
            Decoder::<AnyDrafter>::new(&t.model, t.tokenizer.clone(), None, &small, &[1; 4])
                .await
                .unwrap();
        let summary = dec.run(|_| {}).await.unwrap();
        assert_eq!(summary.tokens, 1);
        assert_eq!(
            summary.stop,
            Some(StopReason::ContextLimit {
                context: 5,
                capacity: 4
            })
        );
    });
}

/// What a host-side draft proposes (a draft kept on a GPU has none of it yet).
type Proposal<'a> = (&'a [u32], Option<&'a [Option<u32>]>, Option<&'a [f32]>);

/// A tree draft's node as the tokens from the root down to it.
fn node_path(tree: &Draft, node: usize) -> Vec<u32> {
    let parents = tree.parents.as_deref().unwrap();
    let mut path = vec![tree.tokens[node]];
    let mut at = parents[node];
    while let Some(p) = at {
        path.push(tree.tokens[p as usize]);
        at = parents[p as usize];
    }
    path.reverse();
    path
}

fn proposal(d: &Draft) -> Proposal<'_> {
    assert!(d.chained.is_none(), "a host path's draft");
    (&d.tokens, d.parents.as_deref(), d.probs.as_deref())
}
