//! The session layer the CLI and the page share: the defaults, the drafter syntax, the resolved
//! settings of a run, and a loaded target (model, tokenizer, chat template) that turns them into
//! decoders. Everything a front end does between "the user chose these settings" and "step the
//! loop" happens here once, so the native binary and the browser cannot drift apart.
//! Over 800 lines, a fifth of them unit tests: the defaults, presets and settings are one table
//! the front ends read, and its checks live beside it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use mars_formats::{ChatTemplate, Gguf, LayerSpec, Message, Tokenizer};
use mars_model::{Device, Llama, LoadOptions};
use mars_verify::{Mode, Sampling, VerifyConfig};
use serde::{Deserialize, Serialize};

use crate::decoder::{DecodeConfig, Decoder, Prefill};
use crate::drafter::{AnyDrafter, ModelDrafter, NgramDrafter, check_same_tokenizer};
use crate::error::{EngineError, Result};

/// The defaults of every front end: the CLI's flags and the page's initial field values both
/// come from [`DEFAULTS`] (the page through the worker's `ready` event).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Defaults {
    /// The draft's shape: k draft tokens per step, a chain, the whole vocabulary (flattened:
    /// the page reads `k`, `branch`, … beside the other defaults).
    #[serde(flatten)]
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
    /// Sampling temperature (0: greedy).
    pub temperature: f32,
    /// Nucleus mass (1: off).
    pub top_p: f32,
    /// Seed of the sampling generators.
    pub seed: u64,
    /// The page's initial prompt (the first preset's).
    pub prompt: &'static str,
    /// One-click starting points, the first one the page's pre-selected preset.
    pub presets: &'static [Preset],
}

/// A starting point a front end offers in one click: a drafter with the settings it was
/// measured fastest at, and the prompts it suits. Which model files it runs on is the front
/// end's business (a URL on the page, the model cache in the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Preset {
    /// Stable name (the page's `?preset=`).
    pub id: &'static str,
    /// What it is, in a few words.
    pub name: &'static str,
    /// What it shows, and what it costs.
    pub what: &'static str,
    /// The drafter in [`DrafterSpec`] syntax; `model` where the front end supplies the draft
    /// model's `model:<path or URL>`.
    pub drafter: &'static str,
    /// The draft's shape it was measured fastest at (flattened: the page reads `k`, `tree`, …).
    #[serde(flatten)]
    pub shape: DraftShape,
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
        drafter: "ngram",
        shape: DraftShape::CHAIN,
        prompts: COPY_PROMPTS,
    },
    Preset {
        id: "qwen-coder",
        name: "Qwen2.5-Coder 1.5B · 0.5B draft",
        what: "coding, a separate draft model",
        drafter: "model",
        shape: DraftShape {
            k: 3,
            draft_vocab: Some(32_768),
            ..DraftShape::CHAIN
        },
        prompts: CODING_PROMPTS,
    },
    Preset {
        id: "smollm-layers",
        name: "SmolLM2-135M · layer skip",
        what: "open chat, the model's first 24 of 30 layers drafting: slower than plain \
               decoding here (each draft token costs 0.8 of a target step)",
        drafter: "layers:first:24",
        shape: DraftShape::CHAIN,
        prompts: CHAT_PROMPTS,
    },
    Preset {
        id: "qwen-coder-tree",
        name: "Qwen2.5-Coder 1.5B · 0.5B draft · token tree",
        what: "coding, the draft model's token tree (up to 16 nodes, 8 deep, each path at least \
               30 % likely under the draft) verified in one pass: about 5 tokens a step where \
               its chain keeps 3; on a CPU each node is a row, and the chain of 3 stays faster",
        drafter: "model",
        shape: DraftShape {
            k: 8,
            draft_vocab: Some(32_768),
            tree: 16,
            branch: 4,
            tree_min_p: 0.3,
        },
        prompts: CODING_PROMPTS,
    },
];

/// The draft's shape: a chain of `k` tokens or a token tree, and the ids a model drafter
/// proposes. The one list of these fields: [`DEFAULTS`] and every [`Preset`] hold one, the CLI's
/// flags are this type (feature `clap`: `--k`, `--draft-vocab`, `--tree`, `--branch`,
/// `--tree-min-p`), eval's journal records it, and [`RunSettings::with_shape`] /
/// [`RunSettings::shape`] put it into a run and read it back.
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

    /// [`RunSettings::default`] with this preset's drafter, k, vocabulary limit and tree; `draft_model`
    /// is the `model:` source where the preset drafts with a separate model.
    ///
    /// # Errors
    /// A preset with a draft model and none given.
    pub fn settings(&self, draft_model: Option<&str>) -> Result<RunSettings> {
        let drafter = match (self.drafter, draft_model) {
            ("model", Some(source)) => DrafterSpec::Model(source.to_string()),
            ("model", None) => {
                return Err(EngineError::DraftModelNotLoaded {
                    name: self.id.to_string(),
                });
            }
            (spec, _) => spec.parse()?,
        };
        Ok(RunSettings {
            drafter,
            ..RunSettings::default()
        }
        .with_shape(self.shape))
    }
}

/// The one copy of the defaults.
pub const DEFAULTS: Defaults = Defaults {
    shape: DraftShape::CHAIN,
    mars: Mode::DEFAULT,
    drafter: "ngram",
    max_tokens: 64,
    generate_max_tokens: 128,
    temperature: 0.0,
    top_p: 1.0,
    seed: 0,
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

/// The settings of a run, resolved once from flags or from the page's request and validated.
/// Nothing downstream reads a raw flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// The drafter of strict and MARS runs.
    pub drafter: DrafterSpec,
    /// Draft tokens per step.
    pub k: usize,
    /// The MARS mode (built by [`Mode::resolve`] at the edge).
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
    #[serde(default)]
    pub system: Option<String>,
    /// A model drafter (draft model or layer skip) proposes only token ids below this;
    /// `None`: the whole vocabulary. Its output head then runs on those rows only
    /// ([`Llama::with_vocab_limit`]); verification stays exact. Prompt lookup ignores it.
    #[serde(default)]
    pub draft_vocab: Option<usize>,
    /// Token trees of at most this many nodes (k their depth), verified in one target pass;
    /// 0: chains of k. Prompt lookup branches over several earlier matches, a model drafter
    /// expands its most probable nodes (EAGLE-2); every weight path runs them.
    #[serde(default)]
    pub tree: usize,
    /// A model drafter's tree: children per expanded node and nodes expanded per depth.
    #[serde(default = "default_branch")]
    pub branch: usize,
    /// A model drafter's tree keeps only nodes whose path's draft probability is at least this
    /// (0: the budget decides alone), and stops growing where none reaches it. A floor without
    /// such a tree (a chain, prompt lookup) is refused by [`RunSettings::validate`].
    #[serde(default)]
    pub tree_min_p: f32,
}

fn default_branch() -> usize {
    DEFAULTS.shape.branch
}

impl Default for RunSettings {
    fn default() -> Self {
        let shape = DEFAULTS.shape;
        Self {
            // DEFAULTS.drafter is the one copy; a unit test proves it parses, so the fallback
            // is never taken.
            drafter: DEFAULTS.drafter.parse().unwrap_or(DrafterSpec::Ngram),
            k: shape.k,
            mars: DEFAULTS.mars,
            sampling: Sampling {
                temperature: DEFAULTS.temperature,
                top_k: None,
                top_p: DEFAULTS.top_p,
            },
            max_tokens: DEFAULTS.max_tokens,
            seed: DEFAULTS.seed,
            chat: true,
            system: None,
            draft_vocab: shape.draft_vocab,
            tree: shape.tree,
            branch: shape.branch,
            tree_min_p: shape.tree_min_p,
        }
    }
}

/// [`RunSettings`] after [`RunSettings::resolve`]: the only way to make one, and what a run
/// takes ([`Target::race`], [`crate::Race::decoder`]), so that settings are checked once, where
/// a front end turns its flags or its JSON into them, and nothing runs on unchecked ones. Reads
/// as the settings it holds.
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
    /// 0, a tree without branches, a tree floor without a model drafter's tree); the verifier's
    /// error for the sampling settings or the MARS mode.
    pub fn resolve(self) -> Result<Resolved> {
        self.validate()?;
        Ok(Resolved(self))
    }

    fn validate(&self) -> Result<()> {
        if self.k == 0 {
            return Err(EngineError::Config {
                field: "k",
                value: "0".into(),
                why: "at least 1 draft token per step",
            });
        }
        check_max_tokens(self.max_tokens)?;
        if self.draft_vocab == Some(0) {
            return Err(EngineError::Config {
                field: "draft_vocab",
                value: "0".into(),
                why: "a drafter needs at least one token id to propose",
            });
        }
        if self.tree > 0 && self.branch == 0 {
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
        crate::drafter::check_min_p(self.tree_min_p)?;
        // A floor prunes a model drafter's tree; anywhere else it would be ignored without a
        // word, so a run that asks for one without such a tree is refused instead.
        if self.tree_min_p > 0.0 && (self.tree == 0 || self.drafter == DrafterSpec::Ngram) {
            return Err(EngineError::Config {
                field: "tree_min_p",
                value: self.tree_min_p.to_string(),
                why: "a floor prunes a model drafter's tree: needs tree > 0 and a draft model or layer skip",
            });
        }
        self.sampling.validate()?;
        self.mars.validate()?;
        Ok(())
    }

    /// These settings with the draft's shape `shape`.
    #[must_use]
    pub fn with_shape(self, shape: DraftShape) -> Self {
        let DraftShape {
            k,
            draft_vocab,
            tree,
            branch,
            tree_min_p,
        } = shape;
        Self {
            k,
            draft_vocab,
            tree,
            branch,
            tree_min_p,
            ..self
        }
    }

    /// The draft's shape of these settings.
    pub fn shape(&self) -> DraftShape {
        DraftShape {
            k: self.k,
            draft_vocab: self.draft_vocab,
            tree: self.tree,
            branch: self.branch,
            tree_min_p: self.tree_min_p,
        }
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
        match (&self.drafter, self.draft_vocab) {
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
            k: if method == Method::Target { 0 } else { self.k },
            verify: VerifyConfig {
                sampling: self.sampling,
                mode: self.mode(method),
            },
            max_tokens: self.max_tokens,
            seed: self.seed,
            capacity: Some(capacity),
        }
    }
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

/// Model facts a front end shows and checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    /// `general.name`, else the architecture.
    pub name: String,
    /// Layers.
    pub n_layers: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Context length.
    pub context_length: usize,
    /// Whether the file has a chat template.
    pub chat_template: bool,
}

/// A loaded target: model, tokenizer and chat template from one GGUF file, on one device.
#[derive(Debug)]
pub struct Target {
    model: Llama,
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
    info: ModelInfo,
}

/// Tokenizer and chat template of a parsed GGUF.
fn tokenizer_of(g: &Gguf<'_>) -> Result<(Tokenizer, Option<ChatTemplate>)> {
    let tokenizer = Tokenizer::from_gguf(g)?;
    let template = match g.get_str("tokenizer.chat_template") {
        Ok(source) => {
            let name = |id: Option<u32>| id.and_then(|i| tokenizer.token(i)).unwrap_or_default();
            Some(ChatTemplate::new(
                source,
                &name(tokenizer.bos),
                &name(tokenizer.eos),
            )?)
        }
        Err(_) => None,
    };
    Ok((tokenizer, template))
}

/// A model's facts for the page and the reports; refuses a tokenizer larger than the model's
/// vocabulary.
fn model_info(
    g: &Gguf<'_>,
    c: &mars_model::LlamaConfig,
    tokenizer: &Tokenizer,
    chat_template: bool,
) -> Result<ModelInfo> {
    if tokenizer.vocab_size() > c.vocab_size {
        return Err(EngineError::VocabMismatch {
            tokenizer: tokenizer.vocab_size(),
            model: c.vocab_size,
        });
    }
    Ok(ModelInfo {
        name: g
            .get_str("general.name")
            .unwrap_or(c.architecture.as_str())
            .to_string(),
        n_layers: c.n_layers,
        vocab: c.vocab_size,
        context_length: c.context_length,
        chat_template,
    })
}

impl Target {
    /// Loads a target from a parsed GGUF onto `device`, checking `options`' limits first.
    ///
    /// # Errors
    /// A malformed or unsupported file, a tokenizer larger than the model's vocabulary, or a
    /// model too large for the device.
    pub fn from_gguf(g: &Gguf<'_>, device: &Device, options: LoadOptions) -> Result<Self> {
        let (tokenizer, template) = tokenizer_of(g)?;
        let model = Llama::from_gguf(g, device, options)?;
        let info = model_info(g, model.config(), &tokenizer, template.is_some())?;
        Ok(Self {
            model,
            tokenizer: Arc::new(tokenizer),
            template,
            info,
        })
    }

    /// Everything [`Target::from_gguf`] checks before reading tensor data (tokenizer, chat
    /// template, configuration, tensor table, the device's limits), from a header alone
    /// ([`Gguf::parse_header`]): a download can be refused before it finishes.
    ///
    /// # Errors
    /// As [`Target::from_gguf`], short of errors in the tensor data itself.
    pub fn check_gguf(g: &Gguf<'_>, options: LoadOptions) -> Result<ModelInfo> {
        let (tokenizer, template) = tokenizer_of(g)?;
        let config = Llama::check_gguf(g, options)?;
        model_info(g, &config, &tokenizer, template.is_some())
    }

    /// Loads a separate draft model for this target from a parsed GGUF: its tokenizer must be
    /// the target's (the first differing id is named).
    ///
    /// # Errors
    /// As [`Target::from_gguf`], and [`EngineError::TokenizerMismatch`].
    pub fn draft_model(
        &self,
        g: &Gguf<'_>,
        device: &Device,
        options: LoadOptions,
    ) -> Result<Llama> {
        let (tokenizer, _) = tokenizer_of(g)?;
        check_same_tokenizer(&self.tokenizer, &tokenizer)?;
        Ok(Llama::from_gguf(g, device, options)?)
    }

    /// What [`Target::draft_model`] checks before reading tensor data, from a header alone.
    ///
    /// # Errors
    /// As [`Target::draft_model`], short of errors in the tensor data itself.
    pub fn check_draft(&self, g: &Gguf<'_>, options: LoadOptions) -> Result<()> {
        let (tokenizer, _) = tokenizer_of(g)?;
        check_same_tokenizer(&self.tokenizer, &tokenizer)?;
        Llama::check_gguf(g, options)?;
        Ok(())
    }

    /// The model.
    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// The model's facts.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The prompt's token ids as `settings` say: raw text (a BOS only if the model asks for
    /// one), or with `chat` a user turn, after `system` where set, rendered by the model's chat
    /// template.
    ///
    /// # Errors
    /// As [`Target::conversation_ids`], or [`EngineError::EmptyPrompt`] when the raw text
    /// tokenizes to nothing.
    pub fn prompt_ids(&self, prompt: &str, settings: &RunSettings) -> Result<Vec<u32>> {
        if settings.chat {
            return self.conversation_ids(&settings.messages(&[], prompt));
        }
        let ids = self.tokenizer.encode(prompt, true)?;
        if ids.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        Ok(ids)
    }

    /// A conversation's token ids ([`mars_formats::conversation`] reads one), rendered by the
    /// model's chat template (which writes any BOS itself) up to the assistant's next turn.
    ///
    /// # Errors
    /// A conversation [`mars_formats::check_conversation`] refuses,
    /// [`EngineError::NoChatTemplate`], a template or tokenizer failure, or
    /// [`EngineError::EmptyPrompt`] when it tokenizes to nothing.
    pub fn conversation_ids(&self, messages: &[Message]) -> Result<Vec<u32>> {
        mars_formats::check_conversation(messages)?;
        let template = self.template.as_ref().ok_or(EngineError::NoChatTemplate)?;
        let text = template.render(messages, true)?;
        let ids = self.tokenizer.encode(&text, false)?;
        if ids.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        Ok(ids)
    }

    /// The cache a run needs: the prompt plus `max_tokens`, at most the context length.
    pub fn capacity(&self, prompt_len: usize, max_tokens: usize) -> usize {
        prompt_len
            .saturating_add(max_tokens)
            .min(self.info.context_length)
    }

    /// A fresh drafter for one run (its cache starts empty). `draft_model` is the loaded model a
    /// [`DrafterSpec::Model`] names: front ends load files their own way (a path with a
    /// progress bar, bytes in the browser) and pass the result.
    ///
    /// # Errors
    /// A layer spec the model cannot run, [`EngineError::DraftModelNotLoaded`], or a drafter
    /// that cannot be built for `capacity`.
    pub fn drafter(
        &self,
        settings: &RunSettings,
        draft_model: Option<&Llama>,
        capacity: usize,
    ) -> Result<AnyDrafter> {
        let (spec, vocab) = (&settings.drafter, self.info.vocab);
        let model = match spec {
            DrafterSpec::Ngram => {
                return Ok(AnyDrafter::Ngram(
                    NgramDrafter::default().with_tree(settings.tree),
                ));
            }
            DrafterSpec::Layers(layers) => self
                .model
                .with_layers(&layers.layers(self.info.n_layers)?)?,
            DrafterSpec::Model(source) => draft_model
                .ok_or_else(|| EngineError::DraftModelNotLoaded {
                    name: source.clone(),
                })?
                .clone(),
        };
        let model = match settings.draft_vocab {
            Some(ids) => model.with_vocab_limit(ids)?,
            None => model,
        };
        Ok(AnyDrafter::Model(Box::new(
            ModelDrafter::new(
                model,
                capacity,
                settings.sampling,
                vocab,
                settings.drafter_label(),
            )?
            .with_tree(settings.tree, settings.branch)?
            .with_min_p(settings.tree_min_p)?,
        )))
    }

    /// A decoder for `method` that starts from `prefill` (front ends go through
    /// [`crate::Race::decoder`], which clones one prefill per method).
    ///
    /// # Errors
    /// As [`Target::drafter`] and [`Decoder::from_prefill`].
    pub(crate) async fn decoder(
        &self,
        settings: &Resolved,
        method: Method,
        prefill: Prefill,
        draft_model: Option<&Llama>,
    ) -> Result<Decoder<AnyDrafter>> {
        let capacity = prefill.capacity();
        let drafter = match method {
            Method::Target => None,
            Method::Strict | Method::Mars => Some(self.drafter(settings, draft_model, capacity)?),
        };
        Decoder::from_prefill(
            &self.model,
            self.tokenizer.clone(),
            drafter,
            &settings.decode_config(method, capacity),
            prefill,
        )
        .await
    }
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
        for bad in [
            RunSettings { k: 0, ..s.clone() },
            RunSettings {
                max_tokens: 0,
                ..s.clone()
            },
            RunSettings {
                mars: Mode::Paper { theta: f32::NAN },
                ..s.clone()
            },
            RunSettings {
                sampling: Sampling::with_temperature(-1.0),
                ..s.clone()
            },
            RunSettings {
                draft_vocab: Some(0),
                ..s.clone()
            },
            // A floor with nothing to prune: a chain, or prompt lookup's tree.
            RunSettings {
                drafter: DrafterSpec::Layers(LayerSpec::First(2)),
                tree_min_p: 0.3,
                ..s.clone()
            },
            RunSettings {
                drafter: DrafterSpec::Ngram,
                tree: 16,
                tree_min_p: 0.3,
                ..s.clone()
            },
        ] {
            assert!(bad.clone().resolve().is_err(), "{bad:?}");
        }
        let limited = RunSettings {
            drafter: DrafterSpec::Layers(LayerSpec::First(24)),
            draft_vocab: Some(32_768),
            ..s.clone()
        };
        limited.clone().resolve().unwrap();
        RunSettings {
            tree: 16,
            tree_min_p: 0.3,
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
        // The page sends exactly this shape.
        let json = serde_json::json!({
            "drafter": "ngram", "k": 3, "mars": {"mode": "margin", "rho": 0.4},
            "sampling": {"temperature": 0.0, "top_p": 1.0}, "max_tokens": 8, "seed": 1,
            "chat": false
        });
        let parsed: RunSettings = serde_json::from_value(json).unwrap();
        assert_eq!(parsed.drafter, DrafterSpec::Ngram);
        assert_eq!(parsed.mars, Mode::Margin { rho: 0.4 });
        assert_eq!(parsed.draft_vocab, None);
        let bad = serde_json::json!({"drafter": "layers:x", "k": 3, "mars": {"mode": "strict"},
            "sampling": {"temperature": 0.0}, "max_tokens": 8, "seed": 1, "chat": false});
        let e = serde_json::from_value::<RunSettings>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("layers:x") || e.contains("\"x\""), "{e}");
    }

    #[test]
    fn presets_resolve_to_valid_settings_and_the_first_is_the_default() {
        let ids: Vec<&str> = PRESETS.iter().map(|p| p.id).collect();
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(!ids[..i].contains(&p.id), "preset id {} twice", p.id);
            assert!(!p.prompts.is_empty(), "{} has no prompt", p.id);
            let s = p.settings(Some("draft.gguf")).unwrap();
            s.clone().resolve().unwrap();
            assert_eq!(s.shape(), p.shape);
            // The page reads a preset's shape as flat fields beside its drafter.
            let json = serde_json::to_value(p).unwrap();
            assert_eq!(json["k"], p.shape.k);
            assert_eq!(json["tree"], p.shape.tree);
            assert!(json.get("shape").is_none(), "{json}");
            assert_eq!(Preset::by_id(p.id), Some(p));
        }
        // A preset drafting with a model needs one.
        let pair = Preset::by_id("qwen-coder").unwrap();
        assert!(pair.settings(None).is_err());
        assert_eq!(
            pair.settings(Some("d.gguf")).unwrap().drafter,
            DrafterSpec::Model("d.gguf".into())
        );
        // The page pre-selects the first preset: the engine's defaults are its drafter and
        // prompt, so a front end's untouched fields and that preset agree.
        assert_eq!(DEFAULTS.drafter, PRESETS[0].drafter);
        assert_eq!(DEFAULTS.prompt, PRESETS[0].prompts[0]);
        assert_eq!(DEFAULTS.shape, PRESETS[0].shape);
        assert_eq!(
            serde_json::to_value(DEFAULTS).unwrap()["branch"],
            DEFAULTS.shape.branch
        );
    }
}
