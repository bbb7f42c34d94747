//! The one error type of this crate: every variant names the field, the value and, for files,
//! the byte offset, so that a user handed a broken or hostile model file learns what is wrong.

/// Why a model file, tokenizer or template was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FormatError {
    /// The file ended before a field could be read.
    #[error(
        "unexpected end of file reading {what} at byte {offset}: needs {needed} bytes, {available} left"
    )]
    UnexpectedEof {
        /// The field being read.
        what: &'static str,
        /// Byte offset of the field.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// A file read on demand (a browser `Blob`, a file on disk) could not be read.
    #[error("reading {len} bytes at byte {offset} failed: {why}")]
    Read {
        /// Byte offset of the read.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// The reader's own message.
        why: String,
    },
    /// Only the file's header was parsed: its tensor data cannot be read.
    #[error("tensor {name}: only the file's header was read, not its data")]
    NoTensorData {
        /// The tensor.
        name: String,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A GGUF version this reader does not support (2 and 3 are).
    #[error("unsupported GGUF version {version} (supported: 2, 3)")]
    BadVersion {
        /// The version in the header.
        version: u32,
    },
    /// A count or size read from the file exceeds what the file can hold or a safety cap.
    #[error("{field} = {value} is too large (limit {limit})")]
    TooLarge {
        /// The field.
        field: String,
        /// The value read.
        value: u64,
        /// The bound it broke.
        limit: u64,
    },
    /// A string is not UTF-8.
    #[error("{field} at byte {offset} is not valid UTF-8")]
    BadUtf8 {
        /// The field.
        field: &'static str,
        /// Byte offset of the string.
        offset: u64,
    },
    /// A metadata key is empty.
    #[error("metadata key #{index} is empty")]
    EmptyKey {
        /// Index of the key-value pair.
        index: u64,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key {key:?}")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// An unknown metadata value type.
    #[error("metadata {key:?} has unknown value type {value_type}")]
    BadValueType {
        /// The key.
        key: String,
        /// The type id.
        value_type: u32,
    },
    /// Arrays nested deeper than the reader allows.
    #[error("metadata {key:?} nests arrays deeper than {limit}")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// The depth limit.
        limit: u32,
    },
    /// `general.alignment` is not a u32 or not a non-zero power of two.
    #[error("general.alignment must be a non-zero power of two stored as u32, got {found}")]
    BadAlignment {
        /// What was found (value or type).
        found: String,
    },
    /// A tensor name appears twice.
    #[error("duplicate tensor name {name:?}")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// A tensor name is empty.
    #[error("tensor #{index} has an empty name")]
    EmptyTensorName {
        /// Index in the tensor table.
        index: u64,
    },
    /// More than four dimensions.
    #[error("tensor {name:?} has {n_dims} dimensions (1..=4 allowed)")]
    BadDims {
        /// The tensor.
        name: String,
        /// Its dimension count.
        n_dims: u32,
    },
    /// A zero dimension.
    #[error("tensor {name:?} has a zero dimension: {dims:?}")]
    ZeroDim {
        /// The tensor.
        name: String,
        /// Its dimensions.
        dims: Vec<u64>,
    },
    /// An unknown or unsupported ggml type id.
    #[error("tensor {name:?} has unknown ggml type {type_id}")]
    BadTensorType {
        /// The tensor.
        name: String,
        /// The type id.
        type_id: u32,
    },
    /// The innermost dimension is not a multiple of the type's block size.
    #[error(
        "tensor {name:?} of type {dtype} has {ne0} columns, not a multiple of the block size {block}"
    )]
    BadBlockShape {
        /// The tensor.
        name: String,
        /// Its type.
        dtype: String,
        /// Its innermost dimension.
        ne0: u64,
        /// The block size.
        block: u64,
    },
    /// A tensor's offset is not a multiple of the alignment.
    #[error("tensor {name:?} offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// The tensor.
        name: String,
        /// Its offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's bytes lie (partly) past the end of the file.
    #[error(
        "tensor {name:?} needs bytes {offset}..{end} of the data section, which has {data_len}"
    )]
    TensorOutOfBounds {
        /// The tensor.
        name: String,
        /// Start in the data section.
        offset: u64,
        /// End in the data section.
        end: u64,
        /// Length of the data section.
        data_len: u64,
    },
    /// Two tensors' byte ranges overlap.
    #[error("tensors {first:?} and {second:?} overlap in the data section")]
    OverlappingTensors {
        /// One tensor.
        first: String,
        /// The other.
        second: String,
    },
    /// A required metadata key is missing.
    #[error("metadata key {key:?} is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata key holds the wrong type.
    #[error("metadata key {key:?} should be {expected}, found {found}")]
    WrongType {
        /// The key.
        key: String,
        /// The type wanted.
        expected: &'static str,
        /// The type found.
        found: String,
    },
    /// A tensor the caller asked for is not in the file.
    #[error("tensor {name:?} is not in the file")]
    MissingTensor {
        /// The name.
        name: String,
    },
    /// A layer subset that the file cannot provide.
    #[error("layer subset {layers:?} is invalid for a file with {n_layers} blocks: {why}")]
    LayerSubset {
        /// The requested layers.
        layers: Vec<usize>,
        /// Blocks in the model (`{arch}.block_count` of a file).
        n_layers: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// A layer specification could not be parsed or does not fit the model.
    #[error("layer spec {spec:?}: {why}")]
    LayerSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// The tokenizer described by the file could not be built.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template could not be parsed or rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// A conversation (an OpenAI-shaped message list) that cannot be rendered: the field at
    /// fault (`messages[2].role`) and what is wrong with it.
    #[error("{field}: {problem}")]
    Conversation {
        /// The field, as a path into the JSON.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A safetensors file or its config.json is malformed.
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// A config.json field is missing or malformed.
    #[error("config.json: {0}")]
    Config(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, FormatError>;
