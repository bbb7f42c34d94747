//! The conformance fixtures of the vLLM plugin (`integrations/vllm`), made by this crate.
//!
//! The plugin re-implements the verification rule in torch ops over vLLM's batched tensors; this
//! file is where the two meet. It builds a fixed set of verification steps (logits, drafts,
//! drafter rows, modes), runs this crate's verifier on each, and compares the result with the
//! committed `integrations/vllm/tests/fixtures/verify_cases.json`, which the plugin's pytest
//! suite replays. A change to the verifier's behaviour fails here until the fixtures are
//! regenerated (`MARS_BLESS=1 cargo test -p mars-verify --test vllm_fixtures`), so the plugin's
//! tests always check against what this crate does now.
//!
//! Greedy steps carry the exact verdict. Sampling steps carry the histogram of emitted token
//! sequences over `SAMPLES` seeds; the plugin is held to it by a two-sample chi-square test.
#![cfg(not(target_arch = "wasm32"))]
// A failed unwrap is how a test reports broken setup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use mars_verify::{DraftProbs, Mode, Sampling, Verifier, VerifyInput};
use serde_json::{Value, json};

/// Seeds per sampling case: enough that a 5 % difference in a category of mass 0.1 is a
/// chi-square failure, few enough that the JSON stays small (one histogram per case).
const SAMPLES: u64 = 20_000;

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../integrations/vllm/tests/fixtures/verify_cases.json")
}

/// The mode as the plugin spells it (`MARS_VLLM_MODE` syntax).
fn mode_str(mode: Mode) -> String {
    match mode {
        Mode::Strict => "strict".into(),
        Mode::Paper { theta } => format!("theta:{theta}"),
        Mode::Margin { rho } => format!("rho:{rho}"),
    }
}

struct Case {
    name: String,
    vocab: usize,
    /// Raw logits, `[k + 1, vocab]`.
    logits: Vec<f32>,
    draft: Vec<u32>,
    /// Drafter rows `[k, vocab]`, or one-hot (an n-gram drafter) when `None`.
    q: Option<Vec<f32>>,
    temperature: f32,
    mode: Mode,
}

/// The cases: greedy ones with ties, negative rows and guards; sampling ones at two
/// temperatures, one-hot and full drafter rows, in all three modes.
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let modes = [
        Mode::Strict,
        Mode::Paper { theta: 0.9 },
        Mode::Paper { theta: 0.6 },
        Mode::Margin { rho: 0.3 },
    ];
    let mut rng = rng(2026);
    // Greedy: integer logits make exact ties (lowest id wins), ranges cover z1 ≤ 0 (the paper's
    // ratio is guarded there) and logits around zero.
    for c in 0..48 {
        let vocab = 3 + below(&mut rng, 10);
        let k = 1 + below(&mut rng, 4);
        let (lo, hi) = [(0.0, 6.0), (-6.0, 6.0), (-9.0, -1.0), (5.0, 9.0)][c % 4];
        let logits: Vec<f32> = (0..(k + 1) * vocab)
            .map(|_| {
                let v = uniform_f32(&mut rng, lo, hi);
                if c % 3 == 0 { v.round() } else { v }
            })
            .collect();
        let draft = logits
            .chunks_exact(vocab)
            .take(k)
            .map(|row| ranking(row)[below(&mut rng, 3.min(vocab))] as u32)
            .collect();
        out.push(Case {
            name: format!("greedy-{c}"),
            vocab,
            logits,
            draft,
            q: None,
            temperature: 0.0,
            mode: modes[c % modes.len()],
        });
    }
    // Sampling: continuous logits (no ties, so vLLM's and this crate's orderings agree).
    for c in 0..16 {
        let vocab = 4 + below(&mut rng, 6);
        let k = 1 + below(&mut rng, 3);
        let temperature = [1.0, 0.7][c % 2];
        let logits = logits(&mut rng, (k + 1) * vocab, 0.5, 4.0);
        let full = (c / 2) % 2 == 1;
        let mut q = Vec::new();
        let draft = logits
            .chunks_exact(vocab)
            .take(k)
            .map(|row| {
                let dist = random_dist(&mut rng, vocab);
                let token = if below(&mut rng, 3) > 0 {
                    ranking(row)[below(&mut rng, 3)]
                } else {
                    draw(&dist, &mut rng)
                };
                q.extend(to_f32(&dist));
                token as u32
            })
            .collect();
        out.push(Case {
            name: format!("sample-{c}"),
            vocab,
            logits,
            draft,
            q: full.then_some(q),
            temperature,
            mode: modes[(c / 4) % modes.len()],
        });
    }
    out
}

fn verifier_of(case: &Case) -> Verifier {
    verifier(Sampling::with_temperature(case.temperature), case.mode)
}

fn input(case: &Case) -> VerifyInput<'_> {
    VerifyInput {
        target_logits: &case.logits,
        vocab: case.vocab,
        draft_tokens: &case.draft,
        draft_probs: case
            .q
            .as_deref()
            .map_or(DraftProbs::OneHot, DraftProbs::Full),
    }
}

fn key(tokens: &[u32]) -> String {
    tokens
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn fixtures() -> Value {
    let cases: Vec<Value> = cases()
        .iter()
        .map(|case| {
            let mut v = verifier_of(case);
            let mut base = json!({
                "name": case.name,
                "vocab": case.vocab,
                "logits": case.logits,
                "draft": case.draft,
                "draft_probs": case.q,
                "temperature": case.temperature,
                "mode": mode_str(case.mode),
            });
            let expect = if case.temperature == 0.0 {
                let verdict = v.verify(&input(case), &mut rng(0)).unwrap();
                json!({
                    "accepted": verdict.accepted,
                    "emitted": verdict.emitted(&case.draft),
                    "relaxed": verdict.positions.iter().map(|p| p.relaxed).collect::<Vec<_>>(),
                    "relaxed_accepts": verdict.ledger.relaxed_accepts,
                    "distance": verdict.ledger.distance,
                })
            } else {
                let mut histogram = BTreeMap::<String, u64>::new();
                let mut relaxed_positions = 0u64;
                let mut distance = 0.0f64;
                for seed in 0..SAMPLES {
                    let verdict = v.verify(&input(case), &mut rng(seed)).unwrap();
                    *histogram
                        .entry(key(&verdict.emitted(&case.draft)))
                        .or_default() += 1;
                    relaxed_positions += u64::from(verdict.ledger.relaxed_positions);
                    distance += verdict.ledger.distance;
                }
                json!({
                    "samples": SAMPLES,
                    "histogram": histogram,
                    "mean_relaxed_positions": relaxed_positions as f64 / SAMPLES as f64,
                    "mean_distance": distance / SAMPLES as f64,
                })
            };
            base["expect"] = expect;
            base
        })
        .collect();
    json!({
        "about": "Made by crates/verify/tests/vllm_fixtures.rs from mars-verify; regenerate with \
                  MARS_BLESS=1 cargo test -p mars-verify --test vllm_fixtures",
        // The plugin's copies of the crate's constants are checked against these.
        "constants": {
            "paper_theta": mars_verify::PAPER_THETA,
            "default_theta": mars_verify::DEFAULT_THETA,
            "default_rho": mars_verify::DEFAULT_RHO,
            "default_mode": mode_str(Mode::DEFAULT),
        },
        "cases": cases,
    })
}

#[test]
fn committed_fixtures_are_what_this_crate_does() {
    let made = serde_json::to_string_pretty(&fixtures()).unwrap() + "\n";
    let path = fixture_path();
    if std::env::var_os("MARS_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &made).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == made,
        "{} differs from what mars-verify does now: regenerate it with MARS_BLESS=1 and rerun \
         the plugin's tests (bash integrations/vllm/test.sh)",
        path.display()
    );
}

#[test]
fn the_fixtures_exercise_every_outcome() {
    // A fixture set that never relaxes, never rejects or never keeps all drafts would let a
    // plugin pass while getting those paths wrong.
    let mut seen = BTreeMap::<String, usize>::new();
    for case in &cases() {
        let verdict = verifier_of(case).verify(&input(case), &mut rng(0)).unwrap();
        let greedy = if case.temperature == 0.0 {
            "greedy"
        } else {
            "sample"
        };
        for (what, hit) in [
            ("relaxed-accept", verdict.ledger.relaxed_accepts > 0),
            ("relaxed", verdict.ledger.relaxed_positions > 0),
            ("all-kept", verdict.accepted == case.draft.len()),
            ("rejected", verdict.accepted < case.draft.len()),
            (
                "guarded",
                matches!(case.mode, Mode::Paper { .. })
                    && verdict
                        .positions
                        .iter()
                        .any(|p| p.margin.logit_ratio.is_none()),
            ),
        ] {
            if hit {
                *seen.entry(format!("{greedy}-{what}")).or_default() += 1;
            }
        }
    }
    for want in [
        "greedy-relaxed-accept",
        "greedy-all-kept",
        "greedy-rejected",
        "greedy-guarded",
        "sample-relaxed",
        "sample-relaxed-accept",
        "sample-rejected",
        "sample-all-kept",
    ] {
        assert!(
            seen.get(want).copied().unwrap_or(0) > 0,
            "no case shows {want}: {seen:?}"
        );
    }
}
