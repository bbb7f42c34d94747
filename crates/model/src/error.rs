//! Errors of the model crate.

/// Why a model could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file's metadata or tensors could not be read.
    #[error(transparent)]
    Format(#[from] mars_formats::FormatError),
    /// A packed CPU kernel refused its input.
    #[error(transparent)]
    Kernel(#[from] mars_kernels::KernelError),
    /// The architecture or a feature of it is outside what this crate implements.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// Hyper-parameters are inconsistent.
    #[error("invalid model configuration: {0}")]
    Config(String),
    /// A tensor has the wrong shape for the configuration.
    #[error("tensor {name:?} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor.
        name: String,
        /// Its shape (row-major, outermost first).
        found: Vec<usize>,
        /// The shape the configuration implies.
        expected: Vec<usize>,
    },
    /// A prompt or draft would run past the KV cache.
    #[error("context overflow: {cached} cached + {new} new tokens > capacity {capacity}")]
    ContextOverflow {
        /// Tokens already in the cache.
        cached: usize,
        /// Tokens being added.
        new: usize,
        /// The cache's capacity.
        capacity: usize,
    },
    /// A cache was asked to grow by truncation.
    #[error("cannot truncate the KV cache from {len} to {to}: truncation only shrinks it")]
    TruncateBeyondLength {
        /// Current length.
        len: usize,
        /// Requested length.
        to: usize,
    },
    /// A token id is outside the vocabulary.
    #[error("token id {token} at position {position} is outside the vocabulary ({vocab})")]
    TokenOutOfVocab {
        /// Position in the input.
        position: usize,
        /// The id.
        token: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// The model would not fit the device.
    #[error("the model needs {needed} bytes for {what}, the device allows {limit}")]
    TooBigForDevice {
        /// What does not fit.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes allowed.
        limit: u64,
    },
    /// Reading results back from the device failed.
    #[error("reading tensor data back from the device failed: {0}")]
    Readback(String),
    /// `forward` was called with no tokens.
    #[error("no input tokens")]
    EmptyInput,
    /// A KV cache made by another model: of the other kind (burn tensors vs packed blocks), or
    /// with another number of layers.
    #[error(
        "the KV cache was made by another model (burn tensors vs packed CPU blocks, or another layer count)"
    )]
    CacheKind,
    /// A token tree whose row `row` names a parent that is not an earlier row, or whose parent
    /// list is not one per token (`row` is then the list's length).
    #[error(
        "tree row {row}: parent {parent:?} is not an earlier row (or parents is not one per token)"
    )]
    TreeParent {
        /// The row.
        row: usize,
        /// The parent given.
        parent: Option<usize>,
    },
    /// Rows to keep in the KV cache that are not increasing or lie past what it holds.
    #[error("cannot keep cache rows {rows:?} after {base}: they must increase and lie below {len}")]
    KeepRows {
        /// The first tree row's position.
        base: usize,
        /// The rows, relative to `base`.
        rows: Vec<usize>,
        /// Tokens cached.
        len: usize,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, ModelError>;
