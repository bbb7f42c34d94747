//! GGUF files not held in memory: parsed from a `ReadAt` source (the browser's `Blob`, read a
//! slice at a time) and from a download's first bytes (`parse_header`), against the same file
//! parsed in memory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;

use mars_formats::{FormatError, GgmlType, Gguf, GgufWriter, ReadAt, Value};

/// A file in memory behind `ReadAt`, recording every read as (offset, len).
struct Counted {
    bytes: Vec<u8>,
    reads: RefCell<Vec<(u64, usize)>>,
    /// Fail every read at or past this offset (a file that went away mid-load).
    fail_from: Option<u64>,
}

impl Counted {
    fn new(bytes: Vec<u8>) -> Self {
        Self {
            bytes,
            reads: RefCell::new(Vec::new()),
            fail_from: None,
        }
    }
}

impl ReadAt for Counted {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> mars_formats::Result<()> {
        self.reads.borrow_mut().push((offset, buf.len()));
        if self
            .fail_from
            .is_some_and(|f| offset + buf.len() as u64 > f)
        {
            return Err(FormatError::Read {
                offset,
                len: buf.len() as u64,
                why: "gone".into(),
            });
        }
        let start = usize::try_from(offset).unwrap();
        buf.copy_from_slice(&self.bytes[start..start + buf.len()]);
        Ok(())
    }
}

/// A file whose header is larger than the first read (a 150k-token vocabulary's is ~7 MB), with
/// tensors of several types.
fn big_header_file() -> Vec<u8> {
    let tokens = (0..300_000)
        .map(|i| Value::String(format!("token-{i:07}")))
        .collect();
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("tokenizer.ggml.tokens", Value::Array(8, tokens));
    let values: Vec<f32> = (0..64 * 3).map(|i| i as f32 * 0.25 - 7.0).collect();
    w.tensor_f32("a", &[64, 3], &values).unwrap();
    let q: Vec<u8> = (0..34 * 8).map(|i| (i * 7 % 251) as u8).collect();
    w.tensor("b", &[32, 8], GgmlType::Q8_0, q).unwrap();
    // 4 MB of data: the header's growing reads stay short of the file.
    let big: Vec<f32> = (0..1 << 20).map(|i| (i % 1000) as f32).collect();
    w.tensor_f32("big", &[1 << 20], &big).unwrap();
    w.tensor_f32("c", &[5], &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
    w.to_bytes()
}

#[test]
fn a_file_read_on_demand_equals_the_file_in_memory() {
    let bytes = big_header_file();
    let whole = Gguf::parse(&bytes).unwrap();
    let source = Counted::new(bytes.clone());
    let g = Gguf::parse_from(&source).unwrap();
    assert_eq!(g.metadata, whole.metadata);
    assert_eq!(g.tensors, whole.tensors);
    // The header was read from the start, growing until it fit (more than one read here:
    // this header is larger than the first read), and no tensor data was read with it.
    let header_reads = source.reads.borrow().clone();
    assert!(header_reads.len() > 1, "{header_reads:?}");
    assert!(header_reads.iter().all(|&(offset, _)| offset == 0));
    assert!(
        header_reads
            .iter()
            .all(|&(_, len)| (len as u64) < bytes.len() as u64)
    );
    let data_start = data_start(&whole, bytes.len());
    source.reads.borrow_mut().clear();
    for t in &g.tensors {
        assert_eq!(g.tensor_bytes(t).unwrap(), whole.tensor_bytes(t).unwrap());
        assert_eq!(
            g.tensor_f32(&t.name).unwrap(),
            whole.tensor_f32(&t.name).unwrap()
        );
    }
    // Each tensor access read exactly that tensor's bytes.
    for &(offset, len) in source.reads.borrow().iter() {
        assert!(
            g.tensors
                .iter()
                .any(|t| offset == data_start + t.offset && len as u64 == t.n_bytes),
            "a read of {len} bytes at {offset} is no tensor's"
        );
    }
}

/// Where the data section starts: the writer puts no padding after the last tensor.
fn data_start(g: &Gguf<'_>, file_len: usize) -> u64 {
    let end = g
        .tensors
        .iter()
        .map(|t| t.offset + t.n_bytes)
        .max()
        .unwrap();
    file_len as u64 - end
}

#[test]
fn a_tensor_is_read_a_part_at_a_time() {
    let bytes = big_header_file();
    let whole = Gguf::parse(&bytes).unwrap();
    let source = Counted::new(bytes.clone());
    let g = Gguf::parse_from(&source).unwrap();
    let b = g.tensor("b").unwrap().clone();
    let all = whole.tensor_bytes(&b).unwrap();
    source.reads.borrow_mut().clear();
    let part = g.tensor_range_with(&b, 34..136, 8).unwrap();
    assert_eq!(&part[..], &all[34..136]);
    // Owned, with the spare capacity asked for (a GPU upload pads it in place), read in one
    // read of just that range.
    assert!(
        matches!(part, std::borrow::Cow::Owned(ref v) if v.len() == 102 && v.capacity() >= 110)
    );
    let at = data_start(&whole, bytes.len()) + b.offset + 34;
    assert_eq!(source.reads.borrow().as_slice(), &[(at, 102)]);
    // In memory, the same range is borrowed from the file.
    assert!(matches!(
        whole.tensor_range(&b, 34..136).unwrap(),
        std::borrow::Cow::Borrowed(_)
    ));
    // Ranges outside the tensor are refused by name, never read.
    // A reversed range too (start 10, end 5), as a caller's arithmetic might produce.
    let (start, end) = (10, 5);
    for bad in [0..b.n_bytes + 1, start..end, b.n_bytes + 1..b.n_bytes + 2] {
        match g.tensor_range(&b, bad.clone()) {
            Err(FormatError::TensorOutOfBounds { name, .. }) => assert_eq!(name, "b"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn a_source_that_fails_mid_load_is_an_error_naming_the_read() {
    let bytes = big_header_file();
    let mut source = Counted::new(bytes.clone());
    source.fail_from = Some(bytes.len() as u64 - 8);
    let g = Gguf::parse_from(&source).unwrap();
    let c = g.tensor("c").unwrap();
    match g.tensor_bytes(c) {
        Err(FormatError::Read { len, why, .. }) => assert!(len == 20 && why == "gone"),
        other => panic!("{other:?}"),
    }
    // A source that fails in the header fails the parse.
    source.fail_from = Some(0);
    assert!(matches!(
        Gguf::parse_from(&source),
        Err(FormatError::Read { offset: 0, .. })
    ));
}

#[test]
fn a_download_prefix_is_checked_or_says_how_much_more_it_needs() {
    let bytes = big_header_file();
    let whole = Gguf::parse(&bytes).unwrap();
    let len = bytes.len() as u64;
    // Grow the prefix as a download would, each time to what the error asks for (at least).
    let mut have = 1000usize;
    let mut rounds = 0;
    let g = loop {
        rounds += 1;
        assert!(rounds < 64, "the prefix never sufficed");
        match Gguf::parse_header(&bytes[..have], len) {
            Ok(g) => break g,
            Err(FormatError::UnexpectedEof { offset, needed, .. }) => {
                let need = usize::try_from(offset + needed).unwrap();
                assert!(need > have, "asks for {need} with {have} in hand");
                have = need.max(have * 2).min(bytes.len());
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(g.metadata, whole.metadata);
    assert_eq!(g.tensors, whole.tensors);
    // Only the header: the data cannot be read from it.
    let a = g.tensor("a").unwrap();
    assert!(matches!(
        g.tensor_bytes(a),
        Err(FormatError::NoTensorData { .. })
    ));
    // A download shorter than its tensors (the Content-Length is the file's) is refused from
    // the header alone, naming the tensor.
    match Gguf::parse_header(&bytes[..have], len - 1) {
        Err(FormatError::TensorOutOfBounds { name, .. }) => assert_eq!(name, "c"),
        other => panic!("{other:?}"),
    }
    // Garbage is refused at once, whatever the length.
    assert!(matches!(
        Gguf::parse_header(b"NOTAGGUF and more", 1 << 40),
        Err(FormatError::BadMagic { .. })
    ));
}

/// A download's first part is checked against the length the server claims, which bounds the
/// counts a header states (a tensor entry takes 32 bytes, an array item its type's size) but
/// not what reserving room for them would allocate: a 60-byte prefix of a file claimed to be
/// 2^64 − 1 bytes long, stating 2^58 tensors or an array of 2^26 strings, is read entry by entry
/// (found by the `model` fuzz target: before, the reader reserved 2^58 table entries and the
/// process aborted).
#[test]
fn counts_a_claimed_length_allows_reserve_only_what_the_prefix_holds() {
    let mut tensors = b"GGUF".to_vec();
    tensors.extend(3u32.to_le_bytes());
    tensors.extend((1u64 << 58).to_le_bytes());
    tensors.extend(0u64.to_le_bytes());
    tensors.extend([0; 40]);
    let mut array = b"GGUF".to_vec();
    array.extend(3u32.to_le_bytes());
    array.extend(0u64.to_le_bytes());
    array.extend(1u64.to_le_bytes());
    array.extend(1u64.to_le_bytes());
    array.extend(b"a");
    array.extend(9u32.to_le_bytes()); // an array
    array.extend(8u32.to_le_bytes()); // of strings
    array.extend((1u64 << 26).to_le_bytes());
    array.extend([0; 20]);
    // The prefixes' zeros read as an empty tensor name and as empty strings until they end.
    assert!(matches!(
        Gguf::parse_header(&tensors, u64::MAX),
        Err(FormatError::EmptyTensorName { index: 0 })
    ));
    assert!(matches!(
        Gguf::parse_header(&array, u64::MAX),
        Err(FormatError::UnexpectedEof { .. })
    ));
}
