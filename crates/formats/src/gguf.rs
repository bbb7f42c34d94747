//! GGUF v2/v3: a reader over bytes (the same path for a file, a download or a browser
//! `ArrayBuffer`) and a writer. Over 800 lines: the reader and the writer share the format's
//! value and type tables, and the reader's checks are the format's contract, kept in one place.
//!
//! The reader trusts nothing in the file: every count and size is checked against the bytes that
//! remain and against caps before anything is allocated, and every tensor's byte range is checked
//! against the data section before a caller can touch it.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use crate::error::{FormatError, Result};
use crate::quant::GgmlType;

const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest string accepted (the longest real ones are chat templates, a few KiB).
const MAX_STRING: u64 = 1 << 24;
/// Longest tensor name accepted (ggml's own limit is 64).
const MAX_NAME: u64 = 256;
/// Most elements in one metadata array (a 256k vocabulary's token list fits many times).
const MAX_ARRAY: u64 = 1 << 26;
/// Deepest nesting of arrays.
const MAX_DEPTH: u32 = 4;
/// Most dimensions of a tensor.
const MAX_DIMS: u32 = 4;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// GGUF type 0.
    U8(u8),
    /// GGUF type 1.
    I8(i8),
    /// GGUF type 2.
    U16(u16),
    /// GGUF type 3.
    I16(i16),
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 5.
    I32(i32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 7.
    Bool(bool),
    /// GGUF type 8.
    String(String),
    /// GGUF type 9: the element type id and the elements.
    Array(u32, Vec<Value>),
    /// GGUF type 10.
    U64(u64),
    /// GGUF type 11.
    I64(i64),
    /// GGUF type 12.
    F64(f64),
}

impl Value {
    /// The GGUF type id.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(..) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    /// A short name of the type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(..) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// The value as a non-negative integer, whatever integer type stores it.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, whatever float type stores it.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }
}

/// One entry of the tensor table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions, innermost first (ggml's `ne`): a `[out, in]` matrix is stored as `[in, out]`.
    pub dims: Vec<u64>,
    /// Storage type.
    pub dtype: GgmlType,
    /// Offset in the data section.
    pub offset: u64,
    /// Number of elements (product of `dims`).
    pub n_elements: u64,
    /// Number of bytes in the data section.
    pub n_bytes: u64,
}

/// Random access to a file that is not held in memory whole (a browser `Blob` read slice by
/// slice, a file on disk): the loader reads the header, then each tensor once, so that a model
/// larger than the memory at hand can still be loaded tensor by tensor.
pub trait ReadAt {
    /// The file's length in bytes.
    fn len(&self) -> u64;

    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset .. offset + buf.len()` (the caller keeps the range
    /// within [`ReadAt::len`]).
    ///
    /// # Errors
    /// [`FormatError::Read`] when the underlying file cannot be read.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
}

/// Where the data section's bytes are.
#[derive(Clone, Copy)]
enum Data<'a> {
    /// In memory, from the data section's start to the end of the file.
    Bytes(&'a [u8]),
    /// Read on demand; the data section starts at byte `start` of the source.
    Source { source: &'a dyn ReadAt, start: u64 },
    /// Not available: only the header was parsed (see [`Gguf::parse_header`]).
    Absent,
}

impl std::fmt::Debug for Data<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Self::Source { source, start } => {
                write!(f, "Source({} bytes, data at {start})", source.len())
            }
            Self::Absent => f.write_str("Absent"),
        }
    }
}

/// A parsed GGUF file: its header, and access to tensor data held in memory, read on demand
/// from a [`ReadAt`] source, or (after [`Gguf::parse_header`]) not at all.
#[derive(Debug, Clone)]
pub struct Gguf<'a> {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata, by key.
    pub metadata: BTreeMap<String, Value>,
    /// The tensor table, in file order.
    pub tensors: Vec<TensorInfo>,
    /// Alignment of the data section and of every tensor in it.
    pub alignment: u64,
    data: Data<'a>,
    /// Bytes from the data section's start to the end of the file.
    data_len: u64,
}

/// The header as read from its bytes, before the data section is attached.
struct Header {
    version: u32,
    metadata: BTreeMap<String, Value>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    /// Byte offset of the data section.
    data_start: u64,
}

/// How much of a file is read at first when parsing from a [`ReadAt`] source; doubled until
/// the header fits (SmolLM2's header is ~1.6 MB, a 150k-token vocabulary's ~7 MB).
const FIRST_HEADER_READ: u64 = 4 << 20;

/// A bounded cursor over the file (or its first bytes): every read checks the bytes that
/// remain.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The whole file's length (≥ `bytes.len()`): counts are capped by what the file can hold,
    /// so that a prefix that ends early says "more needed" rather than "too large".
    file_len: u64,
}

/// Room to reserve for `count` entries read from a file, of which the bytes at hand can hold
/// `held`: any more are read (or found missing) one at a time.
fn capacity(count: u64, held: u64) -> usize {
    usize::try_from(count.min(held)).unwrap_or(0)
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// Bytes left in the whole file: the bound for counts read from it.
    fn remaining_in_file(&self) -> u64 {
        self.file_len.saturating_sub(self.pos as u64)
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available {
            return Err(FormatError::UnexpectedEof {
                what,
                offset: self.pos as u64,
                needed: n,
                available,
            });
        }
        // n ≤ available ≤ usize::MAX, so the cast is lossless.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &'static str, cap: u64) -> Result<String> {
        let offset = self.pos as u64;
        let len = self.u64(what)?;
        if len > cap {
            return Err(FormatError::TooLarge {
                field: format!("{what} length at byte {offset}"),
                value: len,
                limit: cap,
            });
        }
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| FormatError::BadUtf8 {
            field: what,
            offset,
        })
    }

    fn value(&mut self, key: &str, type_id: u32, depth: u32) -> Result<Value> {
        Ok(match type_id {
            0 => Value::U8(self.array::<1>("u8 value")?[0]),
            1 => Value::I8(i8::from_le_bytes(self.array("i8 value")?)),
            2 => Value::U16(u16::from_le_bytes(self.array("u16 value")?)),
            3 => Value::I16(i16::from_le_bytes(self.array("i16 value")?)),
            4 => Value::U32(self.u32("u32 value")?),
            5 => Value::I32(i32::from_le_bytes(self.array("i32 value")?)),
            6 => Value::F32(f32::from_le_bytes(self.array("f32 value")?)),
            7 => Value::Bool(self.array::<1>("bool value")?[0] != 0),
            8 => Value::String(self.string("string value", MAX_STRING)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(FormatError::NestingTooDeep {
                        key: key.to_string(),
                        limit: MAX_DEPTH,
                    });
                }
                let item_type = self.u32("array item type")?;
                let min_size =
                    min_value_size(item_type).ok_or_else(|| FormatError::BadValueType {
                        key: key.to_string(),
                        value_type: item_type,
                    })?;
                let len = self.u64("array length")?;
                // Each item needs at least min_size bytes: a count the file cannot hold is
                // refused before anything is allocated for it.
                let limit = (self.remaining_in_file() / min_size).min(MAX_ARRAY);
                if len > limit {
                    return Err(FormatError::TooLarge {
                        field: format!("{key} array length"),
                        value: len,
                        limit,
                    });
                }
                // Reserved for the items the bytes at hand can hold: a header read from a
                // download's first part is checked against the file's claimed length, which
                // bounds the count but not what reserving it would allocate.
                let mut items = Vec::with_capacity(capacity(len, self.remaining() / min_size));
                for _ in 0..len {
                    items.push(self.value(key, item_type, depth + 1)?);
                }
                Value::Array(item_type, items)
            }
            10 => Value::U64(self.u64("u64 value")?),
            11 => Value::I64(i64::from_le_bytes(self.array("i64 value")?)),
            12 => Value::F64(f64::from_le_bytes(self.array("f64 value")?)),
            _ => {
                return Err(FormatError::BadValueType {
                    key: key.to_string(),
                    value_type: type_id,
                });
            }
        })
    }
}

/// The fewest bytes a value of this type occupies (strings: their length field).
fn min_value_size(type_id: u32) -> Option<u64> {
    Some(match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => return None,
    })
}

impl<'a> Gguf<'a> {
    /// Parses a whole GGUF file held in memory.
    ///
    /// # Errors
    /// A [`FormatError`] naming the first field at fault: bad magic or version, counts the file
    /// cannot hold, empty or duplicate keys and tensor names, bad alignment, bad dimensions or
    /// types, and tensors that are misaligned, overlap, or run past the end of the file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let h = Header::read(bytes, bytes.len() as u64)?;
        let data = match usize::try_from(h.data_start) {
            Ok(start) if start <= bytes.len() => &bytes[start..],
            _ => &[],
        };
        Self::with_data(h, Data::Bytes(data), data.len() as u64)
    }

    /// Parses a file's header from its first bytes (`prefix`) and the file's full length,
    /// without its tensor data: every check [`Gguf::parse`] makes, so that a download can be
    /// refused before it finishes. Tensor data cannot be read from the result.
    ///
    /// # Errors
    /// As [`Gguf::parse`]; [`FormatError::UnexpectedEof`] where the header runs past `prefix`
    /// (more of the file is needed: its `offset + needed` says how much at least).
    pub fn parse_header(prefix: &[u8], file_len: u64) -> Result<Gguf<'static>> {
        let h = Header::read(prefix, file_len.max(prefix.len() as u64))?;
        let data_len = file_len.saturating_sub(h.data_start);
        Gguf::with_data(h, Data::Absent, data_len)
    }

    /// Parses a file read on demand from `source`: the header first (its first bytes, more
    /// until it fits), then each tensor's bytes only when asked for. Checks as [`Gguf::parse`].
    ///
    /// # Errors
    /// As [`Gguf::parse`], and [`FormatError::Read`] from the source.
    pub fn parse_from(source: &'a dyn ReadAt) -> Result<Self> {
        let len = source.len();
        let mut want = FIRST_HEADER_READ.min(len);
        loop {
            let mut prefix = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
            source.read_at(0, &mut prefix)?;
            match Header::read(&prefix, len) {
                Ok(h) => {
                    let data_len = len.saturating_sub(h.data_start);
                    let start = h.data_start;
                    return Self::with_data(h, Data::Source { source, start }, data_len);
                }
                // The header runs past what was read: read more, unless that was the file.
                Err(FormatError::UnexpectedEof { .. }) if want < len => {
                    want = want.saturating_mul(2).min(len);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Checks every tensor's byte range against the data section and attaches it.
    fn with_data(h: Header, data: Data<'a>, data_len: u64) -> Result<Self> {
        let Header {
            version,
            metadata,
            tensors,
            alignment,
            data_start: _,
        } = h;
        let mut ranges: Vec<(u64, u64, &str)> = Vec::with_capacity(tensors.len());
        for t in &tensors {
            let end = t.offset.checked_add(t.n_bytes).filter(|&e| e <= data_len);
            let Some(end) = end else {
                return Err(FormatError::TensorOutOfBounds {
                    name: t.name.clone(),
                    offset: t.offset,
                    end: t.offset.saturating_add(t.n_bytes),
                    data_len,
                });
            };
            ranges.push((t.offset, end, &t.name));
        }
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            if pair[1].0 < pair[0].1 {
                return Err(FormatError::OverlappingTensors {
                    first: pair[0].2.to_string(),
                    second: pair[1].2.to_string(),
                });
            }
        }
        Ok(Self {
            version,
            metadata,
            tensors,
            alignment,
            data,
            data_len,
        })
    }
}

impl Header {
    /// Reads the header (magic to the end of the tensor table) from the first bytes of a file
    /// of `file_len` bytes.
    fn read(bytes: &[u8], file_len: u64) -> Result<Self> {
        let mut r = Reader {
            bytes,
            pos: 0,
            file_len,
        };
        let magic: [u8; 4] = r.array("magic")?;
        if magic != MAGIC {
            return Err(FormatError::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(FormatError::BadVersion { version });
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor entry at
        // least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
        let kv_limit = r.remaining_in_file() / 13;
        if n_kv > kv_limit {
            return Err(FormatError::TooLarge {
                field: "metadata count".into(),
                value: n_kv,
                limit: kv_limit,
            });
        }
        let tensor_limit = r.remaining_in_file() / 32;
        if n_tensors > tensor_limit {
            return Err(FormatError::TooLarge {
                field: "tensor count".into(),
                value: n_tensors,
                limit: tensor_limit,
            });
        }

        let mut metadata = BTreeMap::new();
        for index in 0..n_kv {
            let key = r.string("metadata key", MAX_STRING)?;
            if key.is_empty() {
                return Err(FormatError::EmptyKey { index });
            }
            let type_id = r.u32("metadata value type")?;
            let value = r.value(&key, type_id, 0)?;
            if metadata.contains_key(&key) {
                return Err(FormatError::DuplicateKey { key });
            }
            metadata.insert(key, value);
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
            Some(Value::U32(a)) => {
                return Err(FormatError::BadAlignment {
                    found: a.to_string(),
                });
            }
            Some(other) => {
                return Err(FormatError::BadAlignment {
                    found: format!("a {}", other.type_name()),
                });
            }
        };

        let mut tensors = Vec::with_capacity(capacity(n_tensors, r.remaining() / 32));
        let mut names = HashSet::new();
        for index in 0..n_tensors {
            let name = r.string("tensor name", MAX_NAME)?;
            if name.is_empty() {
                return Err(FormatError::EmptyTensorName { index });
            }
            let n_dims = r.u32("tensor n_dims")?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(FormatError::BadDims { name, n_dims });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(r.u64("tensor dimension")?);
            }
            if dims.contains(&0) {
                return Err(FormatError::ZeroDim { name, dims });
            }
            // Element counts must fit in i64, as ggml's own arithmetic assumes.
            let n_elements = dims
                .iter()
                .try_fold(1u64, |acc, &d| {
                    acc.checked_mul(d).filter(|&n| n <= i64::MAX as u64)
                })
                .ok_or_else(|| FormatError::TooLarge {
                    field: format!("{name} element count {dims:?}"),
                    value: u64::MAX,
                    limit: i64::MAX as u64,
                })?;
            let type_id = r.u32("tensor type")?;
            let dtype = GgmlType::from_id(type_id).ok_or_else(|| FormatError::BadTensorType {
                name: name.clone(),
                type_id,
            })?;
            let (block, type_size) = (dtype.block_size(), dtype.type_size());
            if !dims[0].is_multiple_of(block) {
                return Err(FormatError::BadBlockShape {
                    name,
                    dtype: dtype.to_string(),
                    ne0: dims[0],
                    block,
                });
            }
            let n_bytes = (n_elements / block).checked_mul(type_size).ok_or_else(|| {
                FormatError::TooLarge {
                    field: format!("{name} byte size"),
                    value: u64::MAX,
                    limit: u64::MAX,
                }
            })?;
            let offset = r.u64("tensor offset")?;
            if !offset.is_multiple_of(alignment) {
                return Err(FormatError::MisalignedTensor {
                    name,
                    offset,
                    alignment,
                });
            }
            if !names.insert(name.clone()) {
                return Err(FormatError::DuplicateTensor { name });
            }
            tensors.push(TensorInfo {
                name,
                dims,
                dtype,
                offset,
                n_elements,
                n_bytes,
            });
        }

        // The data section starts at the next multiple of the alignment.
        let data_start = (r.pos as u64).div_ceil(alignment).saturating_mul(alignment);
        Ok(Self {
            version,
            metadata,
            tensors,
            alignment,
            data_start,
        })
    }
}

impl<'a> Gguf<'a> {
    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| FormatError::MissingKey {
            key: key.to_string(),
        })
    }

    fn wrong(key: &str, expected: &'static str, found: &Value) -> FormatError {
        FormatError::WrongType {
            key: key.to_string(),
            expected,
            found: found.type_name().to_string(),
        }
    }

    /// A required non-negative integer, stored as any integer type.
    ///
    /// # Errors
    /// [`FormatError::MissingKey`] or [`FormatError::WrongType`].
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| Self::wrong(key, "a non-negative integer", v))
    }

    /// A required float, stored as f32 or f64.
    ///
    /// # Errors
    /// [`FormatError::MissingKey`] or [`FormatError::WrongType`].
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| Self::wrong(key, "a float", v))
    }

    /// A required string.
    ///
    /// # Errors
    /// [`FormatError::MissingKey`] or [`FormatError::WrongType`].
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            other => Err(Self::wrong(key, "a string", other)),
        }
    }

    /// A required array of strings.
    ///
    /// # Errors
    /// [`FormatError::MissingKey`] or [`FormatError::WrongType`].
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        match self.require(key)? {
            Value::Array(_, items) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.as_str()),
                    other => Err(Self::wrong(key, "an array of strings", other)),
                })
                .collect(),
            other => Err(Self::wrong(key, "an array of strings", other)),
        }
    }

    /// A tensor's table entry.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A tensor's raw bytes: borrowed from a file in memory, read from a [`ReadAt`] source.
    ///
    /// # Errors
    /// As [`Gguf::tensor_range`].
    pub fn tensor_bytes(&self, info: &TensorInfo) -> Result<Cow<'a, [u8]>> {
        self.tensor_range(info, 0..info.n_bytes)
    }

    /// Bytes `within` a tensor's data (offsets relative to the tensor's start), for a loader
    /// that takes a large tensor a part at a time. A source's bytes come back owned, in a
    /// buffer with `extra` spare capacity (so that a caller can pad them without a copy).
    ///
    /// # Errors
    /// [`FormatError::TensorOutOfBounds`] for a range outside the tensor or the data section,
    /// [`FormatError::NoTensorData`] after [`Gguf::parse_header`], and the source's
    /// [`FormatError::Read`].
    pub fn tensor_range(&self, info: &TensorInfo, within: Range<u64>) -> Result<Cow<'a, [u8]>> {
        self.tensor_range_with(info, within, 0)
    }

    /// As [`Gguf::tensor_range`], with `extra` bytes of spare capacity in an owned result.
    ///
    /// # Errors
    /// As [`Gguf::tensor_range`].
    pub fn tensor_range_with(
        &self,
        info: &TensorInfo,
        within: Range<u64>,
        extra: usize,
    ) -> Result<Cow<'a, [u8]>> {
        // parse() checked offset + n_bytes ≤ data_len for every table entry; an entry made by
        // hand, or a range past the tensor, is refused here by name rather than panicking.
        let out_of_bounds = || FormatError::TensorOutOfBounds {
            name: info.name.clone(),
            offset: info.offset.saturating_add(within.start),
            end: info.offset.saturating_add(within.end),
            data_len: self.data_len,
        };
        if within.start > within.end || within.end > info.n_bytes {
            return Err(out_of_bounds());
        }
        let start = info
            .offset
            .checked_add(within.start)
            .ok_or_else(out_of_bounds)?;
        let end = info
            .offset
            .checked_add(within.end)
            .ok_or_else(out_of_bounds)?;
        if end > self.data_len {
            return Err(out_of_bounds());
        }
        match self.data {
            Data::Bytes(data) => {
                let (Ok(s), Ok(e)) = (usize::try_from(start), usize::try_from(end)) else {
                    return Err(out_of_bounds());
                };
                data.get(s..e).map(Cow::Borrowed).ok_or_else(out_of_bounds)
            }
            Data::Source {
                source,
                start: data_start,
            } => {
                let len = usize::try_from(end - start).map_err(|_| out_of_bounds())?;
                let at = data_start.checked_add(start).ok_or_else(out_of_bounds)?;
                let mut buf = Vec::new();
                buf.try_reserve_exact(len.saturating_add(extra))
                    .map_err(|_| FormatError::TooLarge {
                        field: format!("{} bytes to read", info.name),
                        value: len as u64,
                        limit: isize::MAX as u64,
                    })?;
                buf.resize(len, 0);
                source.read_at(at, &mut buf)?;
                Ok(Cow::Owned(buf))
            }
            Data::Absent => Err(FormatError::NoTensorData {
                name: info.name.clone(),
            }),
        }
    }

    /// A tensor dequantized to f32, in storage order (innermost dimension fastest).
    ///
    /// # Errors
    /// [`FormatError::MissingTensor`], or the dequantizer's error for an unsupported type.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self
            .tensor(name)
            .ok_or_else(|| FormatError::MissingTensor {
                name: name.to_string(),
            })?;
        info.dtype
            .dequantize(&self.tensor_bytes(info)?, info.n_elements)
    }
}

impl Gguf<'_> {
    /// A new file holding only the transformer blocks `layers` (renumbered 0.., in that order)
    /// with every other tensor and all metadata, and `{arch}.block_count` set to the new count:
    /// a self-speculative draft model written out as a real file. Tensor bytes are copied as
    /// stored (still quantized).
    ///
    /// # Errors
    /// [`FormatError::LayerSubset`] for an empty, repeated or out-of-range layer;
    /// [`FormatError::MissingKey`] without `general.architecture` / `{arch}.block_count`.
    pub fn with_layers(&self, layers: &[usize]) -> Result<Vec<u8>> {
        let arch = self.get_str("general.architecture")?;
        let count_key = format!("{arch}.block_count");
        let n_layers = usize::try_from(self.get_u64(&count_key)?).unwrap_or(usize::MAX);
        crate::layers::check_layer_subset(layers, n_layers)?;
        let new_index: std::collections::HashMap<usize, usize> = layers
            .iter()
            .enumerate()
            .map(|(new, &old)| (old, new))
            .collect();
        let mut w = GgufWriter::new();
        for (key, value) in &self.metadata {
            let value = if *key == count_key {
                Value::U32(
                    u32::try_from(layers.len()).map_err(|_| FormatError::LayerSubset {
                        layers: layers.to_vec(),
                        n_layers,
                        why: "too many layers",
                    })?,
                )
            } else {
                value.clone()
            };
            w.meta(key.clone(), value);
        }
        for t in &self.tensors {
            // Block tensors are `blk.<i>.<rest>`; everything else is kept as is.
            let name = match t.name.strip_prefix("blk.").and_then(|r| r.split_once('.')) {
                Some((i, rest)) => match i.parse::<usize>().ok().map(|i| new_index.get(&i)) {
                    Some(Some(new)) => format!("blk.{new}.{rest}"),
                    Some(None) => continue,
                    None => t.name.clone(),
                },
                None => t.name.clone(),
            };
            w.tensor(name, &t.dims, t.dtype, self.tensor_bytes(t)?.into_owned())?;
        }
        Ok(w.to_bytes())
    }
}

/// Builds a GGUF v3 file: the project's own writer, for tiny test models and for layer subsets
/// written out as draft models.
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry (kept in insertion order).
    pub fn meta(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        self.metadata.push((key.into(), value));
        self
    }

    /// Adds a tensor from raw bytes of `dtype` with `dims` innermost first.
    ///
    /// # Errors
    /// [`FormatError::TooLarge`] when `bytes` does not hold exactly the tensor.
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        dtype: GgmlType,
        bytes: Vec<u8>,
    ) -> Result<&mut Self> {
        let name = name.into();
        let n: u64 = dims.iter().product();
        let expected = n / dtype.block_size() * dtype.type_size();
        if bytes.len() as u64 != expected || !n.is_multiple_of(dtype.block_size()) {
            return Err(FormatError::TooLarge {
                field: format!("{name} bytes"),
                value: bytes.len() as u64,
                limit: expected,
            });
        }
        self.tensors.push((name, dims.to_vec(), dtype, bytes));
        Ok(self)
    }

    /// Adds an f32 tensor.
    ///
    /// # Errors
    /// [`FormatError::TooLarge`] when `values` does not match `dims`.
    pub fn tensor_f32(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        values: &[f32],
    ) -> Result<&mut Self> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, GgmlType::F32, bytes)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let alignment = self
            .metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .filter(|a| a.is_power_of_two())
            .unwrap_or(DEFAULT_ALIGNMENT) as usize;
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for (name, dims, dtype, bytes) in &self.tensors {
            write_string(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&dtype.id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + bytes.len()).next_multiple_of(alignment);
        }
        let data_start = out.len().next_multiple_of(alignment);
        out.resize(data_start, 0);
        for ((_, _, _, bytes), &at) in self.tensors.iter().zip(&offsets) {
            out.resize(data_start + at, 0);
            out.extend_from_slice(bytes);
        }
        out
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => write_string(out, s),
        Value::Array(item_type, items) => {
            out.extend_from_slice(&item_type.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item);
            }
        }
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}
