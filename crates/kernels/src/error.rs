//! The kernels' error type: every variant names the numbers at fault.

/// Why a kernel could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// A size is not what the operation needs.
    #[error("{what}: expected {expected}, found {found}")]
    Shape {
        /// Which size.
        what: &'static str,
        /// What the operation needs.
        expected: usize,
        /// What it got.
        found: usize,
    },
    /// The row length is not a whole number of blocks.
    #[error("a row of {cols} values is not a whole number of {block}-value blocks")]
    RaggedRow {
        /// Values per row.
        cols: usize,
        /// Values per block.
        block: usize,
    },
    /// A size computed from the shape does not fit in memory addresses.
    #[error("{what} overflows: {rows} rows × {cols} columns")]
    Overflow {
        /// Which size.
        what: &'static str,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// More rows in one call than the micro-kernel holds.
    #[error("{rows} activation rows in one call, at most {max}")]
    TooManyRows {
        /// Rows given.
        rows: usize,
        /// The most one call takes.
        max: usize,
    },
    /// A value that is not a finite number where one is needed.
    #[error("{what}: value {index} is {value}, not finite")]
    NotFinite {
        /// Which values.
        what: &'static str,
        /// Where the first one is.
        index: usize,
        /// The value (NaN or an infinity).
        value: f32,
    },
    /// The activations were quantized without the form this matrix's kernel reads.
    #[error(
        "the activations lack the form a {ty:?} matrix needs on the {isa:?} kernel (quantize them for Kernels::forms)"
    )]
    MissingForm {
        /// The matrix's type.
        ty: crate::WeightType,
        /// The micro-kernel.
        isa: crate::Isa,
    },
    /// A GPU buffer larger than the adapter binds at once.
    #[error("{what}: {bytes} bytes, over the adapter's largest storage binding ({limit} bytes)")]
    TooLarge {
        /// What would not fit.
        what: String,
        /// Its size.
        bytes: u64,
        /// The adapter's limit.
        limit: u64,
    },
    /// The GPU could not do what was asked (a read back that failed).
    #[error("the GPU device: {0}")]
    Device(String),
    /// A kernel the device would not make (wgpu refused its pipeline, and so did CubeCL; or,
    /// launched through CubeCL, CubeCL could not build it): what its launch should have written
    /// was never computed.
    #[error("the GPU device refused kernel `{kernel}`: {reason}")]
    Refused {
        /// The kernel's name (where the launch went through CubeCL, which names none of ours:
        /// "(a launch through CubeCL)").
        kernel: String,
        /// wgpu's and CubeCL's errors.
        reason: String,
    },
    /// A name that is none of a setting's values.
    #[error("{what} = {value:?}: expected one of {expected}")]
    Unknown {
        /// The setting.
        what: &'static str,
        /// The name given.
        value: String,
        /// The names it takes.
        expected: &'static str,
    },
    /// A line of a tuning table that does not parse (`gpu::Tuning::parse`).
    #[error("tuning table, line {line}: {why}")]
    Tuning {
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A thread count of 0, or a pool that could not start.
    #[error("threads = {threads}: {why}")]
    Threads {
        /// The count asked for.
        threads: usize,
        /// What went wrong.
        why: String,
    },
}

/// Result with [`KernelError`].
pub type Result<T> = std::result::Result<T, KernelError>;
