//! The engine's error type: every variant names the numbers at fault.

/// Why decoding could not start or continue.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The model failed (shapes, context overflow, readback).
    #[error(transparent)]
    Model(#[from] mars_model::ModelError),
    /// The verifier refused its input.
    #[error(transparent)]
    Verify(#[from] mars_verify::VerifyError),
    /// A file or tokenizer problem.
    #[error(transparent)]
    Format(#[from] mars_formats::FormatError),
    /// The prompt is empty.
    #[error("the prompt has no tokens")]
    EmptyPrompt,
    /// The prompt leaves no room to generate in the cache.
    #[error(
        "the prompt has {prompt} tokens but the context holds {capacity}: at most {capacity} fit"
    )]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Cache capacity.
        capacity: usize,
    },
    /// The draft and target tokenizers disagree.
    #[error(
        "the draft model's tokenizer differs from the target's at id {id}: target {target:?}, draft {draft:?}"
    )]
    TokenizerMismatch {
        /// First mismatching id.
        id: u32,
        /// The target's token at `id` (None: beyond its vocabulary).
        target: Option<String>,
        /// The drafter's token at `id`.
        draft: Option<String>,
    },
    /// A drafter proposed a token the target cannot score.
    #[error(
        "drafter proposed token {token} at draft position {position}, target vocabulary is {vocab}"
    )]
    DraftOutOfVocab {
        /// Index in the draft.
        position: usize,
        /// The id.
        token: u32,
        /// Target vocabulary size.
        vocab: usize,
    },
    /// A drafter returned rows of the wrong size.
    #[error(
        "drafter returned {len} probabilities for {k} tokens, expected k * vocab = {k} * {vocab}"
    )]
    DraftProbsShape {
        /// Values returned.
        len: usize,
        /// Draft length.
        k: usize,
        /// Target vocabulary.
        vocab: usize,
    },
    /// A tree draft whose parent list does not cover its tokens.
    #[error("drafter returned {parents} parent links for {tokens} tree tokens")]
    DraftTreeShape {
        /// Links returned.
        parents: usize,
        /// Tokens verified.
        tokens: usize,
    },
    /// A drafter specification could not be parsed.
    #[error("drafter {spec:?}: {why}")]
    DrafterSpec {
        /// The spec as given.
        spec: String,
        /// What is expected.
        why: &'static str,
    },
    /// A run names a draft model that was not loaded.
    #[error("the draft model {name:?} is not loaded: load it before the run")]
    DraftModelNotLoaded {
        /// Where the spec says it comes from.
        name: String,
    },
    /// The file's tokenizer has more tokens than the model's vocabulary.
    #[error("the tokenizer has {tokenizer} tokens but the model's vocabulary is {model}")]
    VocabMismatch {
        /// Tokens of the tokenizer.
        tokenizer: usize,
        /// Rows of the model's embedding.
        model: usize,
    },
    /// A chat prompt (the default) was asked of a model file without a chat template.
    #[error(
        "chat: the model file has no tokenizer.chat_template; give it the prompt as raw text \
         (the CLI's --raw, the page's chat box unticked)"
    )]
    NoChatTemplate,
    /// The GPU device could not be opened.
    #[error("opening the GPU device: {0}")]
    Device(String),
    /// The backend was not compiled into this build.
    #[error("backend {backend} is not compiled into this build")]
    BackendUnavailable {
        /// The backend asked for.
        backend: &'static str,
    },
    /// The tuning table could not be read or written (`mars tune`, a GPU's first use).
    #[error("the tuning table {path}: {why}")]
    TuneCache {
        /// The file.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// A configuration value is out of range.
    #[error("{field} = {value}: {why}")]
    Config {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        why: &'static str,
    },
}

/// Result with [`EngineError`].
pub type Result<T> = std::result::Result<T, EngineError>;
