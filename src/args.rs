//! The command line's flags, in groups every subcommand shares, and the one place they are
//! resolved into settings (ripgrep's low/high args): nothing downstream reads a raw flag.
//! Defaults come from [`mars_engine::DEFAULTS`], the same values the page starts from.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use mars_engine::{Backend, Choices, DEFAULTS, DraftShape, Resolved, WeightChoice};
use mars_verify::Sampling;

/// Where the model comes from and where it runs.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// GGUF model file.
    #[arg(long)]
    pub model: PathBuf,
    /// Where the model runs: auto takes a GPU adapter where there is one (the run's first
    /// lines say which and why), else the CPU.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub device: Backend,
    #[command(flatten)]
    pub kernels: KernelArgs,
}

/// How a prompt reaches the model: a user turn of the model's chat template (the default,
/// the engine's and the page's), or raw text.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ChatArgs {
    /// Wrap each prompt as a user turn with the model's chat template (the default).
    #[arg(long, conflicts_with = "raw")]
    pub chat: bool,
    /// Give each prompt to the model as raw text, no chat template (a base model, or a model
    /// file without a template).
    #[arg(long)]
    pub raw: bool,
    /// A system message before each user turn.
    #[arg(long, conflicts_with = "raw")]
    pub system: Option<String>,
}

impl ChatArgs {
    /// What the flags choose: chat on, off, or the default. `needs_chat` where the subcommand
    /// renders a conversation whatever the flags say (`--messages`; clap refuses `--raw`
    /// beside it).
    pub fn choices(&self, needs_chat: bool) -> Choices {
        let chat = match (self.chat || needs_chat, self.raw) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        Choices {
            chat,
            system: self.system.clone().map(Into::into),
            ..Choices::NONE
        }
    }
}

/// A conversation to continue instead of one prompt: OpenAI's message shape.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MessagesArgs {
    /// A JSON file of messages (`[{"role", "content"}, ...]`, or a chat-completion request
    /// body with `messages`), system first if any, the user's turn last; rendered by the model's
    /// chat template.
    #[arg(long, conflicts_with_all = ["prompt", "system", "raw"])]
    pub messages: Option<PathBuf>,
}

impl MessagesArgs {
    /// The file's conversation, if one was named.
    ///
    /// # Errors
    /// An unreadable file, or a message list the formats crate refuses (the field named).
    pub fn read(&self) -> Result<Option<Vec<mars_engine::Message>>> {
        let Some(path) = &self.messages else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --messages {}", path.display()))?;
        let messages = mars_engine::conversation(&text)
            .with_context(|| format!("--messages {}", path.display()))?;
        Ok(Some(messages))
    }
}

/// Kernel settings, shared by every subcommand that loads a model.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KernelArgs {
    /// Matrix path (default: packed, on both devices).
    #[arg(long, value_enum)]
    pub kernels: Option<WeightChoice>,
    /// Threads of the packed CPU kernels (default: one per core; more than the cores is
    /// clamped, with a message).
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// The cache settings of [`KernelArgs`], alone where a subcommand takes no others (`mars tune`
/// times the GPU's packed kernels only).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CacheArgs {
    /// The GPU kernels' KV cache: f16 (default: half the memory, as llama.cpp) or f32.
    #[arg(long, value_name = "f16|f32")]
    pub kv_cache: Option<mars_model::KvType>,
    /// The longest prompt plus generation a run may hold (default 4096, llama.cpp's; at most
    /// the model's context length): sizes the RoPE tables and every cache, and what the load's
    /// memory check reserves a KV cache and step buffers for.
    #[arg(long, value_name = "POSITIONS")]
    pub context: Option<usize>,
}

/// The context a run may hold unless `--context` says otherwise (llama.cpp's default).
pub const DEFAULT_CONTEXT: usize = 4096;

impl KernelArgs {
    /// The user's choice, resolved for a device by [`mars_engine::OpenDevice::weights`].
    pub fn choice(&self) -> WeightChoice {
        self.kernels.unwrap_or_default()
    }

    /// `--context`, or [`DEFAULT_CONTEXT`].
    pub fn context(&self) -> usize {
        self.cache.context.unwrap_or(DEFAULT_CONTEXT)
    }
}

/// Sampling settings shared by every decoding subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = DEFAULTS.sampling.temperature)]
    pub temperature: f32,
    /// Keep only the k most likely tokens (unset: off).
    #[arg(long)]
    pub top_k: Option<u32>,
    /// Nucleus sampling mass (1: off).
    #[arg(long, default_value_t = DEFAULTS.sampling.top_p)]
    pub top_p: f32,
    /// Seed of the sampling generator (ChaCha8: the same stream on every platform).
    #[arg(long, default_value_t = DEFAULTS.seed)]
    pub seed: u64,
}

impl SamplingArgs {
    /// The sampling settings as given (unchecked: the verifier or [`Choices::resolve`] checks
    /// them).
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
        }
    }

    /// The sampling settings and the seed as a run's choices.
    pub fn choices(&self) -> Choices {
        Choices {
            sampling: Some(self.sampling()),
            seed: Some(self.seed),
            ..Choices::NONE
        }
    }
}

/// The MARS thresholds. Both at once is an error ([`mars_verify::Mode::resolve`], the one rule
/// the page's mode field goes through too, when [`Choices::resolve`] runs).
#[derive(Debug, Clone, clap::Args)]
pub struct RuleArgs {
    /// MARS, paper mode: relax where z2/z1 > θ (the authors use 0.9; without either flag MARS
    /// runs paper mode at θ = 0.95, the setting HumanEval chose: docs/evaluation.md).
    #[arg(long)]
    pub theta: Option<f32>,
    /// MARS, margin mode: relax where p2/p1 ≥ ρ.
    #[arg(long)]
    pub rho: Option<f32>,
}

impl RuleArgs {
    /// The thresholds as given.
    pub fn choices(&self) -> Choices {
        Choices {
            theta: self.theta,
            rho: self.rho,
            ..Choices::NONE
        }
    }
}

/// The drafter and its draft length.
#[derive(Debug, Clone, clap::Args)]
pub struct DrafterArgs {
    /// The drafter: `layers:SPEC` (layer skip), `ngram` (prompt lookup), `model:PATH` (a
    /// separate draft model), or a bare PATH for `model:PATH`.
    #[arg(long, default_value = DEFAULTS.drafter, conflicts_with = "draft_layers")]
    pub draft: String,
    /// Layer-skip self-drafter, short for `--draft layers:SPEC`: `first:N`, `every:S`, or a
    /// list such as `0-7,29`.
    #[arg(long)]
    pub draft_layers: Option<String>,
    /// The draft's shape (the engine's type: its fields are the flags).
    #[command(flatten)]
    pub shape: DraftShape,
}

impl DrafterArgs {
    /// The drafter (in the shared syntax) and the draft's shape, as given.
    pub fn choices(&self) -> Choices {
        // clap refuses both given, so a `--draft-layers` means `--draft` is its default.
        let drafter = match &self.draft_layers {
            Some(layers) => format!("layers:{layers}"),
            None => drafter_text(&self.draft),
        };
        Choices {
            drafter: Some(drafter.into()),
            shape: Some(self.shape),
            ..Choices::NONE
        }
    }
}

/// A `--draft` value in the shared [`mars_engine::DrafterSpec`] syntax: as given, or a bare
/// path, the one shorthand the CLI keeps (`--draft draft.gguf` for `model:draft.gguf`).
pub fn drafter_text(text: &str) -> String {
    let is_spec = text == "ngram" || text.starts_with("layers:") || text.starts_with("model:");
    if is_spec {
        text.to_string()
    } else {
        format!("model:{text}")
    }
}

/// The flag groups' choices as one checked run: the groups are disjoint, so their order does
/// not matter; [`Choices::resolve`] fills the rest from the defaults and checks it all once.
///
/// # Errors
/// The first field at fault.
pub fn resolve(groups: impl IntoIterator<Item = Choices>) -> Result<Resolved> {
    groups
        .into_iter()
        .fold(Choices::NONE, Choices::over)
        .resolve()
        .context("checking the settings")
}

/// The default model's file name in the model cache directory.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The draft/target pair `tests/fetch-pair.sh` fetches: (target, draft).
pub const PAIR_FILES: (&str, &str) = (
    "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
    "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
);

/// The pair's (target, draft) paths when both are in the model cache.
pub fn pair_in_cache() -> Option<(PathBuf, PathBuf)> {
    let dir = model_dir();
    let (target, draft) = (dir.join(PAIR_FILES.0), dir.join(PAIR_FILES.1));
    (target.is_file() && draft.is_file()).then_some((target, draft))
}

/// Where the model cache lives: `$MARS_MODEL_DIR`, else `~/.cache/mars/models`.
pub fn model_dir() -> PathBuf {
    cache_dir("MARS_MODEL_DIR", "models")
}

/// Where fetched data sets live (HumanEval, Spec-Bench): `$MARS_DATA_DIR`, else
/// `~/.cache/mars/data`.
pub fn data_dir() -> PathBuf {
    cache_dir("MARS_DATA_DIR", "data")
}

/// [`mars_engine::cache_path`]'s folder, else `./.cache/mars/<name>` where there is no home.
fn cache_dir(var: &str, name: &str) -> PathBuf {
    mars_engine::cache_path(var, name)
        .unwrap_or_else(|| PathBuf::from(".cache").join("mars").join(name))
}

/// `--prompts`, or Spec-Bench's prompts in the data cache with a message saying how to fetch
/// them.
///
/// # Errors
/// No `--prompts` and no fetched Spec-Bench.
pub fn prompts_or_spec_bench(prompts: Option<&PathBuf>) -> Result<PathBuf> {
    if let Some(p) = prompts {
        return Ok(p.clone());
    }
    let path = data_dir().join(SPEC_BENCH_FILE);
    if path.is_file() {
        return Ok(path);
    }
    bail!(
        "Spec-Bench's prompts are not in the cache: {} is missing.\n\
         Fetch them with bash tests/fetch-spec-bench.sh, or pass --prompts FILE.jsonl.",
        path.display()
    )
}

/// Spec-Bench's prompts in the data cache (`tests/fetch-spec-bench.sh` writes it).
pub const SPEC_BENCH_FILE: &str = "spec_bench.jsonl";

/// `--model`, or the default model in the cache with a message saying how to fetch it.
///
/// # Errors
/// No `--model` and no cached default model.
pub fn model_or_default(model: Option<&PathBuf>) -> Result<PathBuf> {
    if let Some(p) = model {
        return Ok(p.clone());
    }
    let path = model_dir().join(DEFAULT_MODEL_FILE);
    if path.is_file() {
        return Ok(path);
    }
    bail!(
        "the default model is not in the cache: {} is missing.\n\
         Fetch it with the README's setup command (bash tests/fetch-model.sh fetches just the \
         model), or pass --model PATH.",
        path.display()
    )
}
