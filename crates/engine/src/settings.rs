//! A run's settings, from what a front end was given to what a run takes, in three types
//! (ripgrep's low and high arguments):
//! - [`Choices`]: every field optional, what the CLI's flags, the page's JSON and a [`Preset`]
//!   say; layered with [`Choices::over`] (flags over a preset, say);
//! - [`RunSettings`]: every field set, the fields [`DEFAULTS`] gives where no layer chose;
//! - [`Resolved`]: checked, made only by [`Choices::resolve`] or [`RunSettings::resolve`] (the
//!   one place settings are validated), and what a run takes.
//!
//! The defaults, the presets and the drafter syntax live here too, the one copy the CLI and
//! the page (through the worker's `ready` event) read. Over 800 lines, a third of them unit
//! tests: the defaults, the presets and the three types are one table the front ends read, and
//! its checks live beside it.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use mars_formats::{LayerSpec, Message};
use mars_verify::{Mode, Sampling, VerifyConfig};
use serde::{Deserialize, Serialize};

use crate::decoder::{DecodeConfig, PLAIN_TOKENS_A_READ};
use crate::error::{EngineError, Result};

/// The defaults of every front end: the CLI's flags and the page's initial field values both
/// come from [`DEFAULTS`] (the page through the worker's `ready` event).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Defaults {
    /// The draft's shape: k draft tokens per step, a chain, the whole vocabulary.
    pub shape: DraftShape,
    /// The MARS mode a race or comparison uses unless θ or ρ is given.
    pub mars: Mode,
    /// The drafter, in [`DrafterSpec`] syntax: prompt lookup, which costs next to nothing
    /// where it finds no match and pays where the answer repeats the prompt (see [`PRESETS`]
    /// for the measurements; layer skip, the earlier default, costs more than it saves).
    pub drafter: &'static str,
    /// Tokens per method in a comparison or race.
    pub max_tokens: usize,
    /// Tokens of `mars generate`, which streams one answer and can afford a longer one.
    pub generate_max_tokens: usize,
    /// Target and drafter sampling: greedy.
    pub sampling: Sampling,
    /// Seed of the sampling generators.
    pub seed: u64,
    /// Prompts are a user's turn in the model's chat template (the models this project runs
    /// are instruct models; raw text is the CLI's `--raw`, the page's unticked "chat").
    pub chat: bool,
    /// The page's initial prompt (the first preset's).
    pub prompt: &'static str,
    /// One-click starting points, the first one the page's pre-selected preset.
    pub presets: &'static [Preset],
}

/// A starting point a front end offers in one click: a drafter with the settings it was
/// measured fastest at, and the prompts it suits. Which model files it runs on is the front
/// end's business (a URL on the page, the model cache in the CLI).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preset {
    /// Stable name (the page's `?preset=`).
    pub id: &'static str,
    /// What it is, in a few words.
    pub name: &'static str,
    /// What it shows, and what it costs.
    pub what: &'static str,
    /// What it sets, over [`DEFAULTS`]. Its drafter is `model` where the front end supplies
    /// the draft model ([`Preset::choices`]).
    pub choices: Choices,
    /// Prompts it suits, the page's first.
    pub prompts: &'static [&'static str],
}

/// Copy-and-edit prompts: the answer repeats the prompt, where prompt lookup drafts well. The
/// first is the page's and `cargo run`'s first race, a task SmolLM2-135M completes (greedy,
/// chat: the paragraph word for word; tests/cli.rs checks it); it fails the other two (the
/// cats stay cats, the misspellings stay), which stay as harder prompts.
const COPY_PROMPTS: &[&str] = &[
    "Repeat this paragraph exactly, then say nothing else:\n\nThe old lighthouse stood at the \
     edge of the cliff. Every night its beam swept across the dark water, warning the ships \
     that passed along the rocky coast.",
    "Repeat this text, replacing every \"cat\" with \"dog\":\n\nThe cat sat on the mat. The cat \
     looked at the other cat, and the other cat looked back at the cat on the mat.",
    "Correct the spelling in this sentence and repeat it: \"The quick brwon fox jumpd over the \
     lazy dgo, and then the quick brwon fox ran into the forrest.\"",
];

/// Open chat prompts, `mars compare`'s built-in ones.
pub const CHAT_PROMPTS: &[&str] = &[
    "Write a short poem about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three tips for writing clean Python code.",
];

/// The presets, measured on this project's CPU (2 cores, packed kernels, greedy, one process
/// per row; docs/performance.md has the commands):
/// - prompt lookup on SmolLM2-135M over [`COPY_PROMPTS`], k = 4: strict 1.51–1.53×, MARS
///   1.53–1.68× plain decoding (two runs);
/// - the Qwen2.5-Coder pair (1.5B target, 0.5B draft) on coding prompts, k = 3, ids < 32768:
///   strict 1.56×, MARS 1.62× (`tests/bench/bench.sh pair`);
/// - layer skip over SmolLM2's first 24 of 30 layers on open chat, k = 4: strict 0.27×,
///   MARS 0.29× (τ 1.4: each drafted token costs 24/30 of a target step);
/// - the pair with a 16-node token tree (depth 5, 4 children), Spec-Bench coding: τ 4.36 against
///   the chain's 3.12 (docs/mars.md#token-trees), but 0.40× plain decoding on a 2-core AVX2
///   CPU, where a pass of 16 rows costs ~6× one row; it is there for a GPU, where it does not.
pub const PRESETS: &[Preset] = &[
    Preset {
        id: "smollm-lookup",
        name: "SmolLM2-135M · prompt lookup",
        what: "an edit task: the answer copies the prompt, so drafts come from it",
        choices: Choices {
            drafter: Some(Cow::Borrowed("ngram")),
            ..Choices::NONE
        },
        prompts: COPY_PROMPTS,
    },
    Preset {
        id: "qwen-coder",
        name: "Qwen2.5-Coder 1.5B · 0.5B draft",
        what: "coding, a separate draft model",
        choices: Choices {
            drafter: Some(Cow::Borrowed("model")),
            shape: Some(DraftShape {
                k: 3,
                draft_vocab: Some(32_768),
                ..DraftShape::CHAIN
            }),
            ..Choices::NONE
        },
        prompts: CODING_PROMPTS,
    },
    Preset {
        id: "smollm-layers",
        name: "SmolLM2-135M · layer skip",
        what: "open chat, the model's first 24 of 30 layers drafting: slower than plain \
               decoding here (each draft token costs 0.8 of a target step)",
        choices: Choices {
            drafter: Some(Cow::Borrowed("layers:first:24")),
            ..Choices::NONE
        },
        prompts: CHAT_PROMPTS,
    },
    Preset {
        id: "qwen-coder-tree",
        name: "Qwen2.5-Coder 1.5B · 0.5B draft · token tree",
        what: "coding, the draft model's token tree (up to 16 nodes, 8 deep, each path at least \
               30 % likely under the draft) verified in one pass: about 5 tokens a step where \
               its chain keeps 3; on a CPU each node is a row, and the chain of 3 stays faster",
        choices: Choices {
            drafter: Some(Cow::Borrowed("model")),
            shape: Some(DraftShape {
                k: 8,
                draft_vocab: Some(32_768),
                tree: 16,
                branch: 4,
                tree_min_p: 0.3,
            }),
            ..Choices::NONE
        },
        prompts: CODING_PROMPTS,
    },
];

/// The draft's shape: a chain of `k` tokens or a token tree, and the ids a model drafter
/// proposes. The one list of these fields: [`DEFAULTS`], [`Choices`] and [`RunSettings`] hold
/// one, the CLI's flags are this type (feature `clap`: `--k`, `--draft-vocab`, `--tree`,
/// `--branch`, `--tree-min-p`), and eval's journal records it.
// The field comments are the CLI's help text, so they name flags, not items.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct DraftShape {
    /// Draft tokens per step.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = DraftShape::CHAIN.k))]
    pub k: usize,
    /// A model drafter proposes only token ids below N (its output head runs on those rows
    /// only; verification stays exact); default: the whole vocabulary.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub draft_vocab: Option<usize>,
    /// Token trees of at most N nodes (k their depth) verified in one target pass; 0: chains.
    /// Prompt lookup branches over earlier matches, a model drafter expands its most probable
    /// nodes (EAGLE-2).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = DraftShape::CHAIN.tree))]
    pub tree: usize,
    /// A model drafter's tree: children per expanded node, and nodes expanded per depth.
    #[cfg_attr(feature = "clap", arg(long, value_name = "B", default_value_t = DraftShape::CHAIN.branch))]
    pub branch: usize,
    /// A model drafter's tree keeps only nodes whose path's draft probability is at least P, and
    /// stops growing where none reaches it (0: the node budget decides alone). Needs `--tree`
    /// and a draft model or layer skip.
    #[cfg_attr(feature = "clap", arg(long, value_name = "P", default_value_t = DraftShape::CHAIN.tree_min_p))]
    pub tree_min_p: f32,
}

impl DraftShape {
    /// The default: a chain of 4 over the whole vocabulary (a tree, when asked for, gets 4
    /// children a node).
    pub const CHAIN: Self = Self {
        k: 4,
        draft_vocab: None,
        tree: 0,
        branch: 4,
        tree_min_p: 0.0,
    };
}

/// The pair's coding prompts (`cargo run`'s race on the pair: the domain it was measured on).
const CODING_PROMPTS: &[&str] = &[
    "Write a Python function `is_palindrome(s: str) -> bool` that ignores case and \
     non-alphanumeric characters. Answer with code only.",
    "Write a Python function `merge_sorted(a: list[int], b: list[int]) -> list[int]` that \
     merges two sorted lists in linear time. Answer with code only.",
    "Write a Python function `word_counts(text: str) -> dict[str, int]` that counts each \
     lower-cased word, ignoring punctuation. Answer with code only.",
];

impl Preset {
    /// The preset called `id`.
    pub fn by_id(id: &str) -> Option<&'static Preset> {
        PRESETS.iter().find(|p| p.id == id)
    }

    /// What the preset chooses, with `draft_model` as its `model:` source where it drafts with
    /// a separate model.
    ///
    /// # Errors
    /// A preset with a draft model and none given.
    pub fn choices(&self, draft_model: Option<&str>) -> Result<Choices> {
        let mut choices = self.choices.clone();
        if choices.drafter.as_deref() == Some("model") {
            let source = draft_model.ok_or_else(|| EngineError::DraftModelNotLoaded {
                name: self.id.to_string(),
            })?;
            choices.drafter = Some(format!("model:{source}").into());
        }
        Ok(choices)
    }
}

/// The one copy of the defaults.
pub const DEFAULTS: Defaults = Defaults {
    shape: DraftShape::CHAIN,
    mars: Mode::DEFAULT,
    drafter: "ngram",
    max_tokens: 64,
    generate_max_tokens: 128,
    sampling: Sampling::GREEDY,
    seed: 0,
    chat: true,
    prompt: COPY_PROMPTS[0],
    presets: PRESETS,
};

/// What proposes the draft tokens, in one syntax shared by the CLI's `--draft` and the page's
/// drafter field: `layers:<spec>` (self-speculative layer skip, see [`LayerSpec`]), `ngram`
/// (prompt lookup), or `model:<path or URL>` (a separate model with the target's tokenizer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrafterSpec {
    /// The target's own layers `spec`, sharing its weights.
    Layers(LayerSpec),
    /// Prompt lookup.
    Ngram,
    /// A separate draft model, named by where it comes from.
    Model(String),
}

impl FromStr for DrafterSpec {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        if s == "ngram" {
            return Ok(Self::Ngram);
        }
        if let Some(spec) = s.strip_prefix("layers:") {
            return Ok(Self::Layers(spec.parse()?));
        }
        if let Some(source) = s.strip_prefix("model:") {
            if source.is_empty() {
                return Err(EngineError::DrafterSpec {
                    spec: s.into(),
                    why: "model: needs a path or URL after the colon",
                });
            }
            return Ok(Self::Model(source.into()));
        }
        Err(EngineError::DrafterSpec {
            spec: s.into(),
            why: "expected layers:<spec>, ngram or model:<path or URL>",
        })
    }
}

impl fmt::Display for DrafterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Layers(spec) => write!(f, "layers:{spec}"),
            Self::Ngram => write!(f, "ngram"),
            Self::Model(source) => write!(f, "model:{source}"),
        }
    }
}

impl Serialize for DrafterSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DrafterSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl DrafterSpec {
    /// A short label for reports: "layer skip first:24", "prompt lookup", "draft model PATH".
    pub fn label(&self) -> String {
        match self {
            Self::Layers(spec) => format!("layer skip {spec}"),
            Self::Ngram => "prompt lookup".into(),
            Self::Model(source) => format!("draft model {source}"),
        }
    }
}

/// A run's settings as a front end or a preset gives them: every field optional, `None` where
/// the layer below ([`Choices::over`]) and finally [`DEFAULTS`] decide. The CLI's flags and the
/// page's JSON fill one, a [`Preset`] is one, and [`Choices::resolve`] turns it into the
/// settings a run takes. Values arrive as typed, unchecked: the drafter as its text, the MARS
/// thresholds as numbers; resolving parses and checks them once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Choices {
    /// The drafter in [`DrafterSpec`] syntax.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drafter: Option<Cow<'static, str>>,
    /// The draft's shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<DraftShape>,
    /// MARS paper mode at this θ (with `rho` too: refused, never a silent precedence).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theta: Option<f32>,
    /// MARS margin mode at this ρ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rho: Option<f32>,
    /// Target and drafter sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// Tokens per run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// Seed of the verifier's and the drafter's generators.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The prompt as a user's turn in the chat template (`false`: raw text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat: Option<bool>,
    /// A system message before the user's turn (needs chat).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<Cow<'static, str>>,
}

impl Choices {
    /// Nothing chosen: every field from the layers below.
    pub const NONE: Self = Self {
        drafter: None,
        shape: None,
        theta: None,
        rho: None,
        sampling: None,
        max_tokens: None,
        seed: None,
        chat: None,
        system: None,
    };

    /// These choices over `below`: each field this layer leaves `None` comes from `below`.
    /// A MARS threshold counts as one field (θ and ρ are two ways to say the mode), so a layer
    /// that names either replaces both of the layer below.
    #[must_use]
    pub fn over(self, below: Choices) -> Choices {
        let names_mode = self.theta.is_some() || self.rho.is_some();
        Choices {
            drafter: self.drafter.or(below.drafter),
            shape: self.shape.or(below.shape),
            theta: if names_mode { self.theta } else { below.theta },
            rho: if names_mode { self.rho } else { below.rho },
            sampling: self.sampling.or(below.sampling),
            max_tokens: self.max_tokens.or(below.max_tokens),
            seed: self.seed.or(below.seed),
            chat: self.chat.or(below.chat),
            system: self.system.or(below.system),
        }
    }

    /// The settings a run takes: every field not chosen from [`DEFAULTS`], then checked by
    /// [`RunSettings::resolve`]. A system message without a word on chat turns chat on.
    ///
    /// # Errors
    /// A drafter that does not parse, θ and ρ both given, or what [`RunSettings::resolve`]
    /// refuses; each names the field and its value.
    pub fn resolve(self) -> Result<Resolved> {
        let base = RunSettings::default();
        let drafter = match self.drafter {
            Some(text) => text.parse()?,
            None => base.drafter,
        };
        let chat = self.chat.unwrap_or(base.chat || self.system.is_some());
        RunSettings {
            drafter,
            shape: self.shape.unwrap_or(base.shape),
            mars: Mode::resolve(self.theta, self.rho, base.mars)?,
            sampling: self.sampling.unwrap_or(base.sampling),
            max_tokens: self.max_tokens.unwrap_or(base.max_tokens),
            seed: self.seed.unwrap_or(base.seed),
            chat,
            system: self.system.map(Cow::into_owned),
        }
        .resolve()
    }
}

/// Which decoding a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The target alone, one token per forward pass.
    Target,
    /// Speculative, lossless verification.
    Strict,
    /// Speculative, the run's MARS mode.
    Mars,
}

/// The settings of a run, every field set. Made from [`Choices`] (or written out in full by a
/// test) and checked by [`RunSettings::resolve`]; nothing downstream reads a raw flag.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSettings {
    /// The drafter of strict and MARS runs.
    pub drafter: DrafterSpec,
    /// The draft's shape: k, the drafter's vocabulary limit, the token tree.
    pub shape: DraftShape,
    /// The MARS mode.
    pub mars: Mode,
    /// Target and drafter sampling.
    pub sampling: Sampling,
    /// Tokens per run.
    pub max_tokens: usize,
    /// Seed of the verifier's and the drafter's generators.
    pub seed: u64,
    /// Wrap the prompt as a user turn in the model's chat template.
    pub chat: bool,
    /// With `chat`: a system message before the user's turn.
    pub system: Option<String>,
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            // DEFAULTS.drafter is the one copy; a unit test proves it parses, so the fallback
            // is never taken.
            drafter: DEFAULTS.drafter.parse().unwrap_or(DrafterSpec::Ngram),
            shape: DEFAULTS.shape,
            mars: DEFAULTS.mars,
            sampling: DEFAULTS.sampling,
            max_tokens: DEFAULTS.max_tokens,
            seed: DEFAULTS.seed,
            chat: DEFAULTS.chat,
            system: None,
        }
    }
}

/// [`RunSettings`] after [`RunSettings::resolve`]: the only way to make one, and what a run
/// takes ([`crate::Target::race`], [`crate::Race::decoder`]), so that settings are checked
/// once, where a front end turns its flags or its JSON into them, and nothing runs on unchecked
/// ones. Reads as the settings it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Resolved(RunSettings);

impl std::ops::Deref for Resolved {
    type Target = RunSettings;

    fn deref(&self) -> &RunSettings {
        &self.0
    }
}

impl Resolved {
    /// The same settings with another MARS mode (a method raced beside the run's own), the
    /// mode checked as [`RunSettings::resolve`] checks it.
    ///
    /// # Errors
    /// The verifier's error for the mode.
    pub fn with_mars(&self, mars: Mode) -> Result<Self> {
        mars.validate()?;
        Ok(Self(RunSettings {
            mars,
            ..self.0.clone()
        }))
    }

    /// The same settings with another token budget (a warm-up's short run), checked as
    /// [`RunSettings::resolve`] checks it.
    ///
    /// # Errors
    /// [`EngineError::Config`] for a budget of 0.
    pub fn with_max_tokens(&self, max_tokens: usize) -> Result<Self> {
        check_max_tokens(max_tokens)?;
        Ok(Self(RunSettings {
            max_tokens,
            ..self.0.clone()
        }))
    }

    /// The same settings with another seed (every seed is valid).
    #[must_use]
    pub fn with_seed(&self, seed: u64) -> Self {
        Self(RunSettings {
            seed,
            ..self.0.clone()
        })
    }

    /// The settings, to change and resolve again.
    pub fn into_inner(self) -> RunSettings {
        self.0
    }
}

impl RunSettings {
    /// Checks every field and returns the settings a run takes: the one place settings are
    /// validated.
    ///
    /// # Errors
    /// [`EngineError::Config`] naming the field and its value (k, max_tokens or draft_vocab of
    /// 0, a tree without branches, a tree floor without a model drafter's tree, a system
    /// message without chat); the verifier's error for the sampling settings or the MARS mode.
    pub fn resolve(self) -> Result<Resolved> {
        self.validate()?;
        Ok(Resolved(self))
    }

    fn validate(&self) -> Result<()> {
        let shape = &self.shape;
        if shape.k == 0 {
            return Err(EngineError::Config {
                field: "k",
                value: "0".into(),
                why: "at least 1 draft token per step",
            });
        }
        check_max_tokens(self.max_tokens)?;
        if shape.draft_vocab == Some(0) {
            return Err(EngineError::Config {
                field: "draft_vocab",
                value: "0".into(),
                why: "a drafter needs at least one token id to propose",
            });
        }
        if shape.tree > 0 && shape.branch == 0 {
            return Err(EngineError::Config {
                field: "branch",
                value: "0".into(),
                why: "a tree needs at least one child per node",
            });
        }
        if self.system.is_some() && !self.chat {
            return Err(EngineError::Config {
                field: "system",
                value: "set".into(),
                why: "a system message is rendered by the chat template: needs chat",
            });
        }
        crate::drafter::check_min_p(shape.tree_min_p)?;
        // A floor prunes a model drafter's tree; anywhere else it would be ignored without a
        // word, so a run that asks for one without such a tree is refused instead.
        if shape.tree_min_p > 0.0 && (shape.tree == 0 || self.drafter == DrafterSpec::Ngram) {
            return Err(EngineError::Config {
                field: "tree_min_p",
                value: shape.tree_min_p.to_string(),
                why: "a floor prunes a model drafter's tree: needs tree > 0 and a draft model or layer skip",
            });
        }
        self.sampling.validate()?;
        self.mars.validate()?;
        Ok(())
    }

    /// The conversation a chat run renders: the system message if set, the earlier turns
    /// (`history`, oldest first), then `prompt` as the user's turn.
    pub fn messages(&self, history: &[Message], prompt: &str) -> Vec<Message> {
        let mut out = Vec::with_capacity(history.len() + 2);
        if let Some(system) = &self.system {
            out.push(Message::new("system", system.as_str()));
        }
        out.extend_from_slice(history);
        out.push(Message::new("user", prompt));
        out
    }

    /// The drafter's label for reports, with its vocabulary limit where one applies.
    pub fn drafter_label(&self) -> String {
        match (&self.drafter, self.shape.draft_vocab) {
            (DrafterSpec::Ngram, _) | (_, None) => self.drafter.label(),
            (spec, Some(ids)) => format!("{}, ids < {ids}", spec.label()),
        }
    }

    /// The verification mode of `method`.
    pub fn mode(&self, method: Method) -> Mode {
        match method {
            Method::Target | Method::Strict => Mode::Strict,
            Method::Mars => self.mars,
        }
    }

    /// The loop's configuration for `method` with a cache of `capacity` tokens.
    pub fn decode_config(&self, method: Method, capacity: usize) -> DecodeConfig {
        DecodeConfig {
            k: if method == Method::Target {
                0
            } else {
                self.shape.k
            },
            verify: VerifyConfig {
                sampling: self.sampling,
                mode: self.mode(method),
            },
            max_tokens: self.max_tokens,
            seed: self.seed,
            capacity: Some(capacity),
            tokens_a_read: tokens_a_read(),
        }
    }
}

/// Target-only decoding's tokens a read on a GPU: [`PLAIN_TOKENS_A_READ`], or the whole number
/// of at least 1 in `MARS_TOKENS_A_READ` where it is set (natively: a measurement's knob, as the
/// kernels' `MARS_GPU_*`, so the GPU bundle times one read a token beside the chained reads
/// without a rebuild).
fn tokens_a_read() -> usize {
    std::env::var("MARS_TOKENS_A_READ")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(PLAIN_TOKENS_A_READ)
}

fn check_max_tokens(max_tokens: usize) -> Result<()> {
    if max_tokens == 0 {
        return Err(EngineError::Config {
            field: "max_tokens",
            value: "0".into(),
            why: "at least 1 token",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn drafter_specs_round_trip() {
        for text in [
            "layers:first:24",
            "layers:every:4",
            "layers:0,1,2,7",
            "ngram",
            "model:a:b.gguf",
        ] {
            let spec: DrafterSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
        }
        assert_eq!(
            "model:https://x/y.gguf".parse::<DrafterSpec>().unwrap(),
            DrafterSpec::Model("https://x/y.gguf".into())
        );
        for bad in [
            "",
            "layers",
            "layers:first:0",
            "model:",
            "draft.gguf",
            "Ngram",
        ] {
            assert!(bad.parse::<DrafterSpec>().is_err(), "{bad}");
        }
        // The default drafter is valid syntax and is what RunSettings starts from.
        let default: DrafterSpec = DEFAULTS.drafter.parse().unwrap();
        assert_eq!(default, RunSettings::default().drafter);
        assert_eq!(default, DrafterSpec::Ngram);
    }

    #[test]
    fn settings_validate_and_choose_the_mode() {
        let s = RunSettings::default();
        s.clone().resolve().unwrap();
        assert_eq!(s.mode(Method::Target), Mode::Strict);
        assert_eq!(s.mode(Method::Strict), Mode::Strict);
        assert_eq!(s.mode(Method::Mars), DEFAULTS.mars);
        assert_eq!(s.decode_config(Method::Target, 9).k, 0);
        assert_eq!(s.decode_config(Method::Strict, 9).k, DEFAULTS.shape.k);
        let shaped = |shape: DraftShape| RunSettings { shape, ..s.clone() };
        let chain = DraftShape::CHAIN;
        for (field, bad) in [
            ("k", shaped(DraftShape { k: 0, ..chain })),
            (
                "max_tokens",
                RunSettings {
                    max_tokens: 0,
                    ..s.clone()
                },
            ),
            (
                "theta",
                RunSettings {
                    mars: Mode::Paper { theta: f32::NAN },
                    ..s.clone()
                },
            ),
            (
                "temperature",
                RunSettings {
                    sampling: Sampling::with_temperature(-1.0),
                    ..s.clone()
                },
            ),
            (
                "draft_vocab",
                shaped(DraftShape {
                    draft_vocab: Some(0),
                    ..chain
                }),
            ),
            (
                "branch",
                shaped(DraftShape {
                    tree: 8,
                    branch: 0,
                    ..chain
                }),
            ),
            (
                "system",
                RunSettings {
                    chat: false,
                    system: Some("be brief".into()),
                    ..s.clone()
                },
            ),
            // A floor with nothing to prune: a chain, or prompt lookup's tree.
            (
                "tree_min_p",
                RunSettings {
                    drafter: DrafterSpec::Layers(LayerSpec::First(2)),
                    ..shaped(DraftShape {
                        tree_min_p: 0.3,
                        ..chain
                    })
                },
            ),
            (
                "tree_min_p",
                shaped(DraftShape {
                    tree: 16,
                    tree_min_p: 0.3,
                    ..chain
                }),
            ),
        ] {
            let e = bad.clone().resolve().unwrap_err().to_string();
            assert!(e.contains(field), "{bad:?}: {e}");
        }
        let limited = RunSettings {
            drafter: DrafterSpec::Layers(LayerSpec::First(24)),
            shape: DraftShape {
                draft_vocab: Some(32_768),
                ..chain
            },
            ..s.clone()
        };
        limited.clone().resolve().unwrap();
        RunSettings {
            shape: DraftShape {
                tree: 16,
                tree_min_p: 0.3,
                ..limited.shape
            },
            ..limited.clone()
        }
        .resolve()
        .unwrap();
        assert_eq!(limited.drafter_label(), "layer skip first:24, ids < 32768");
        let ngram = RunSettings {
            drafter: DrafterSpec::Ngram,
            ..limited
        };
        assert_eq!(ngram.drafter_label(), "prompt lookup");
    }

    #[test]
    fn choices_layer_and_resolve_once() {
        // Nothing chosen: the defaults.
        assert_eq!(
            Choices::NONE.resolve().unwrap(),
            RunSettings::default().resolve().unwrap()
        );
        assert_eq!(Choices::default(), Choices::NONE);
        // Each field of the upper layer wins where set; the rest falls through.
        let flags = Choices {
            shape: Some(DraftShape {
                k: 6,
                ..DraftShape::CHAIN
            }),
            seed: Some(7),
            ..Choices::NONE
        };
        let preset = Preset::by_id("qwen-coder").unwrap().choices(Some("d.gguf"));
        let run = flags.clone().over(preset.unwrap()).resolve().unwrap();
        assert_eq!(run.shape.k, 6);
        assert_eq!(
            run.shape.draft_vocab, None,
            "the flags' shape replaces the preset's"
        );
        assert_eq!(run.seed, 7);
        assert_eq!(run.drafter, DrafterSpec::Model("d.gguf".into()));
        assert_eq!(run.max_tokens, DEFAULTS.max_tokens);
        // θ and ρ are one field: a layer naming ρ replaces the θ below it instead of clashing.
        let theta = Choices {
            theta: Some(0.8),
            ..Choices::NONE
        };
        let rho = Choices {
            rho: Some(0.4),
            ..Choices::NONE
        };
        assert_eq!(
            rho.clone().over(theta.clone()).resolve().unwrap().mars,
            Mode::Margin { rho: 0.4 }
        );
        assert_eq!(
            Choices::NONE.over(theta).resolve().unwrap().mars,
            Mode::Paper { theta: 0.8 }
        );
        // Both in one layer: refused, naming both.
        let both = Choices {
            theta: Some(0.8),
            ..rho
        };
        let e = both.resolve().unwrap_err().to_string();
        assert!(e.contains("0.8") && e.contains("0.4"), "{e}");
        // A system message turns chat on unless chat is refused in so many words.
        let system = Choices {
            system: Some("be brief".into()),
            ..Choices::NONE
        };
        assert!(system.clone().resolve().unwrap().chat);
        let raw = Choices {
            chat: Some(false),
            ..system
        };
        assert!(raw.resolve().unwrap_err().to_string().contains("system"));
        let bad = Choices {
            drafter: Some("layers:x".into()),
            ..Choices::NONE
        };
        let e = bad.resolve().unwrap_err().to_string();
        assert!(e.contains("layers:x") || e.contains("\"x\""), "{e}");
    }

    #[test]
    fn the_pages_json_is_choices() {
        // The page sends every field it shows (the shape whole, θ or ρ by its mode field).
        let json = serde_json::json!({
            "drafter": "ngram",
            "shape": {"k": 3, "draft_vocab": null, "tree": 0, "branch": 4, "tree_min_p": 0.0},
            "rho": 0.4, "sampling": {"temperature": 0.0, "top_k": null, "top_p": 1.0},
            "max_tokens": 8, "seed": 1, "chat": false
        });
        let choices: Choices = serde_json::from_value(json).unwrap();
        let run = choices.resolve().unwrap();
        assert_eq!(run.drafter, DrafterSpec::Ngram);
        assert_eq!(run.mars, Mode::Margin { rho: 0.4 });
        assert_eq!(run.shape.k, 3);
        assert!(!run.chat);
        // A field the engine does not know is refused, not dropped.
        let typo = serde_json::json!({"drafter": "ngram", "kk": 3});
        let e = serde_json::from_value::<Choices>(typo)
            .unwrap_err()
            .to_string();
        assert!(e.contains("kk"), "{e}");
        // What a preset sets, and nothing else, goes to the page.
        let json = serde_json::to_value(Preset::by_id("smollm-lookup").unwrap()).unwrap();
        assert_eq!(json["choices"], serde_json::json!({"drafter": "ngram"}));
    }

    #[test]
    fn presets_resolve_to_valid_settings_and_the_first_is_the_default() {
        let ids: Vec<&str> = PRESETS.iter().map(|p| p.id).collect();
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(!ids[..i].contains(&p.id), "preset id {} twice", p.id);
            assert!(!p.prompts.is_empty(), "{} has no prompt", p.id);
            let run = p.choices(Some("draft.gguf")).unwrap().resolve().unwrap();
            assert_eq!(run.shape, p.choices.shape.unwrap_or(DEFAULTS.shape));
            assert_eq!(Preset::by_id(p.id), Some(p));
        }
        // A preset drafting with a model needs one.
        let pair = Preset::by_id("qwen-coder").unwrap();
        assert!(pair.choices(None).is_err());
        // The page pre-selects the first preset: it is the engine's defaults with their
        // prompt, so a front end's untouched fields and that preset agree.
        assert_eq!(
            PRESETS[0].choices(None).unwrap().resolve().unwrap(),
            Choices::NONE.resolve().unwrap()
        );
        assert_eq!(DEFAULTS.prompt, PRESETS[0].prompts[0]);
    }
}
