//! The GGUF reader against hostile files: one case per defect in llama.cpp's HANDCRAFTED list,
//! each built byte by byte here, plus a valid tiny file truncated at every offset.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

use mars_formats::{FormatError, GgmlType, Gguf, GgufWriter, Value};

/// Raw GGUF bytes, field by field, so that any field can be made wrong.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// A key with a u32 value.
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor table entry.
    fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    /// Pads to the alignment and appends `n` data bytes.
    fn data(&mut self, alignment: usize, n: usize) -> &mut Self {
        let start = self.0.len().next_multiple_of(alignment);
        self.0.resize(start + n, 0x3c);
        self
    }
    fn parse(&self) -> Result<usize, FormatError> {
        Gguf::parse(&self.0).map(|g| g.tensors.len())
    }
}

/// A valid file: 2 keys, 2 F32 tensors of 8 and 4 values.
fn valid() -> Raw {
    let mut r = Raw::header(3, 2, 2);
    r.kv_u32("general.alignment", 32)
        .str("general.name")
        .u32(8)
        .str("tiny");
    r.tensor("a", &[8], 0, 0).tensor("b", &[2, 2], 0, 32);
    r.data(32, 32 + 16);
    r
}

#[test]
fn a_valid_file_parses() {
    assert_eq!(valid().parse(), Ok(2));
    // An empty file with only a header is valid too (llama.cpp's HANDCRAFTED_HEADER_EMPTY).
    assert_eq!(Raw::header(3, 0, 0).parse(), Ok(0));
    assert_eq!(Raw::header(2, 0, 0).parse(), Ok(0));
}

#[test]
fn header_defects() {
    let mut r = valid();
    r.0[0] = b'X';
    assert!(matches!(r.parse(), Err(FormatError::BadMagic { .. })));
    assert_eq!(
        Raw::header(1, 0, 0).parse(),
        Err(FormatError::BadVersion { version: 1 })
    );
    assert_eq!(
        Raw::header(4, 0, 0).parse(),
        Err(FormatError::BadVersion { version: 4 })
    );
    assert!(
        matches!(Raw::header(3, u64::MAX, 0).parse(), Err(FormatError::TooLarge { field, .. }) if field == "tensor count")
    );
    assert!(
        matches!(Raw::header(3, 0, 1 << 40).parse(), Err(FormatError::TooLarge { field, .. }) if field == "metadata count")
    );
}

#[test]
fn key_value_defects() {
    // Bad key size: a length far past the end of the file.
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 40).u32(4).u32(0);
    assert!(matches!(
        r.parse(),
        Err(FormatError::TooLarge { .. } | FormatError::UnexpectedEof { .. })
    ));
    let mut r = Raw::header(3, 0, 1);
    r.u64(100).u32(4).u32(0);
    assert!(matches!(
        r.parse(),
        Err(FormatError::UnexpectedEof {
            what: "metadata key",
            ..
        })
    ));
    // Empty key.
    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("", 1);
    assert_eq!(r.parse(), Err(FormatError::EmptyKey { index: 0 }));
    // Duplicate key.
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert_eq!(
        r.parse(),
        Err(FormatError::DuplicateKey { key: "k".into() })
    );
    // Bad value type.
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    assert_eq!(
        r.parse(),
        Err(FormatError::BadValueType {
            key: "k".into(),
            value_type: 13
        })
    );
    // An array claiming more items than the file holds is refused before allocation.
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(9).u32(4).u64(1 << 60);
    assert!(matches!(r.parse(), Err(FormatError::TooLarge { .. })));
    // Arrays nested too deep.
    let mut r2 = Raw::header(3, 0, 1);
    r2.str("k").u32(9);
    for _ in 0..6 {
        r2.u32(9).u64(1);
    }
    r2.u32(4).u64(1).u32(7);
    assert!(matches!(
        r2.parse(),
        Err(FormatError::NestingTooDeep { .. })
    ));
    // A string that is not UTF-8.
    let mut r = Raw::header(3, 0, 1);
    r.u64(2);
    r.0.extend_from_slice(&[0xff, 0xfe]);
    r.u32(4).u32(0);
    assert!(matches!(r.parse(), Err(FormatError::BadUtf8 { .. })));
}

#[test]
fn alignment_defects() {
    for bad in [0u32, 3, 48] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", bad);
        assert!(
            matches!(r.parse(), Err(FormatError::BadAlignment { .. })),
            "alignment {bad}"
        );
    }
    // Wrong type: a u64 alignment.
    let mut r = Raw::header(3, 0, 1);
    r.str("general.alignment").u32(10).u64(32);
    assert!(matches!(r.parse(), Err(FormatError::BadAlignment { found }) if found.contains("u64")));
    // Custom alignment honoured: 64 — a tensor at offset 32 is then misaligned.
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 64)
        .tensor("a", &[8], 0, 32)
        .data(64, 64);
    assert!(matches!(
        r.parse(),
        Err(FormatError::MisalignedTensor { alignment: 64, .. })
    ));
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 64)
        .tensor("a", &[8], 0, 0)
        .data(64, 32);
    assert_eq!(r.parse(), Ok(1));
}

#[test]
fn tensor_table_defects() {
    let one = |name: &str, dims: &[u64], type_id: u32, offset: u64, data: usize| {
        let mut r = Raw::header(3, 1, 0);
        r.tensor(name, dims, type_id, offset).data(32, data);
        r.parse()
    };
    assert_eq!(one("a", &[8], 0, 0, 32), Ok(1));
    assert!(matches!(
        one("", &[8], 0, 0, 32),
        Err(FormatError::EmptyTensorName { index: 0 })
    ));
    assert!(matches!(
        one(&"n".repeat(300), &[8], 0, 0, 32),
        Err(FormatError::TooLarge { .. })
    ));
    assert!(matches!(
        one("a", &[], 0, 0, 32),
        Err(FormatError::BadDims { n_dims: 0, .. })
    ));
    assert!(matches!(
        one("a", &[1, 1, 1, 1, 1], 0, 0, 32),
        Err(FormatError::BadDims { n_dims: 5, .. })
    ));
    assert!(matches!(
        one("a", &[8, 0], 0, 0, 32),
        Err(FormatError::ZeroDim { .. })
    ));
    // ne too big: the element count overflows.
    assert!(matches!(
        one("a", &[1 << 32, 1 << 32], 0, 0, 32),
        Err(FormatError::TooLarge { .. })
    ));
    // nbytes too big: fits as elements, but far past the end of the data.
    assert!(matches!(
        one("a", &[1 << 40], 0, 0, 32),
        Err(FormatError::TensorOutOfBounds { .. })
    ));
    assert!(matches!(
        one("a", &[8], 99, 0, 32),
        Err(FormatError::BadTensorType { type_id: 99, .. })
    ));
    // A quantized row that is not a whole number of blocks.
    assert!(matches!(
        one("a", &[33], 2, 0, 64),
        Err(FormatError::BadBlockShape { block: 32, .. })
    ));
    // Bad offset: misaligned, and past the end.
    assert!(matches!(
        one("a", &[8], 0, 7, 64),
        Err(FormatError::MisalignedTensor { offset: 7, .. })
    ));
    assert!(matches!(
        one("a", &[8], 0, 64, 64),
        Err(FormatError::TensorOutOfBounds { .. })
    ));
    assert!(matches!(
        one("a", &[8], 0, u64::MAX - 31, 32),
        Err(FormatError::TensorOutOfBounds { .. })
    ));
    // Not enough data.
    assert!(matches!(
        one("a", &[8], 0, 0, 31),
        Err(FormatError::TensorOutOfBounds {
            end: 32,
            data_len: 31,
            ..
        })
    ));
}

#[test]
fn duplicate_and_overlapping_tensors() {
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0)
        .tensor("a", &[8], 0, 32)
        .data(32, 64);
    assert_eq!(
        r.parse(),
        Err(FormatError::DuplicateTensor { name: "a".into() })
    );
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], 0, 0)
        .tensor("b", &[8], 0, 32)
        .data(32, 96);
    assert!(matches!(
        r.parse(),
        Err(FormatError::OverlappingTensors { .. })
    ));
}

#[test]
fn every_truncation_is_an_error_and_none_panics() {
    let bytes = valid().0;
    for len in 0..bytes.len() {
        assert!(
            Gguf::parse(&bytes[..len]).is_err(),
            "truncated at {len} of {} parsed",
            bytes.len()
        );
    }
    assert!(Gguf::parse(&bytes).is_ok());
}

#[test]
fn writer_round_trips() {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("llama.block_count", Value::U32(2))
        .meta(
            "tokens",
            Value::Array(
                8,
                vec![Value::String("a".into()), Value::String("é".into())],
            ),
        )
        .meta("eps", Value::F32(1e-5));
    w.tensor_f32("w", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    w.tensor(
        "q",
        &[32],
        GgmlType::Q8_0,
        [vec![0, 0x3c], vec![1; 32]].concat(),
    )
    .unwrap();
    let bytes = w.to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(g.get_u64("llama.block_count").unwrap(), 2);
    assert_eq!(g.get_str_array("tokens").unwrap(), vec!["a", "é"]);
    assert_eq!(
        g.tensor_f32("w").unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    assert_eq!(g.tensor("w").unwrap().dims, vec![3, 2]);
    assert_eq!(g.tensor_f32("q").unwrap(), vec![1.0; 32]);
    assert!(matches!(
        g.get_u64("eps"),
        Err(FormatError::WrongType { .. })
    ));
    assert!(matches!(
        g.get_str("missing"),
        Err(FormatError::MissingKey { .. })
    ));
    assert!(matches!(
        g.tensor_f32("nope"),
        Err(FormatError::MissingTensor { .. })
    ));
    // Every truncation of a writer-made file fails cleanly too.
    for len in 0..bytes.len() {
        assert!(Gguf::parse(&bytes[..len]).is_err(), "truncated at {len}");
    }
}

/// A layer subset keeps the chosen blocks (renumbered, bytes unchanged), every other tensor and
/// all metadata, and rewrites the block count; bad subsets are typed errors.
#[test]
fn layer_subset_is_a_valid_file() {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("llama.block_count", Value::U32(3))
        .meta("general.name", Value::String("x".into()));
    w.tensor_f32("token_embd.weight", &[2], &[1.0, 2.0])
        .unwrap();
    for i in 0..3 {
        w.tensor_f32(format!("blk.{i}.attn_norm.weight"), &[2], &[i as f32, 0.5])
            .unwrap();
    }
    let bytes = w.to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let sub = g.with_layers(&[2, 0]).unwrap();
    let s = Gguf::parse(&sub).unwrap();
    assert_eq!(s.get_u64("llama.block_count").unwrap(), 2);
    assert_eq!(s.get_str("general.name").unwrap(), "x");
    assert_eq!(s.tensors.len(), 3);
    assert_eq!(s.tensor_f32("blk.0.attn_norm.weight").unwrap(), [2.0, 0.5]);
    assert_eq!(s.tensor_f32("blk.1.attn_norm.weight").unwrap(), [0.0, 0.5]);
    assert!(s.tensor("blk.2.attn_norm.weight").is_none());
    assert_eq!(s.tensor_f32("token_embd.weight").unwrap(), [1.0, 2.0]);
    for layers in [&[][..], &[3], &[1, 1]] {
        assert!(
            matches!(g.with_layers(layers), Err(FormatError::LayerSubset { .. })),
            "{layers:?}"
        );
    }
}
