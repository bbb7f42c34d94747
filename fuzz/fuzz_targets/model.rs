//! Any bytes as a model's description, as a user's file reaches the loader: a GGUF (whole, or a
//! download's first part as the page checks it) or an HF `config.json` beside a safetensors
//! file. The configuration, every check a load makes before it reads tensor data and the memory
//! a load would ask, on each weight path and context, give a result or a typed error: never a
//! panic, an overflow, or an allocation or loop sized by a number the file states rather than
//! the bytes it holds (libFuzzer's memory and time limits catch those).
//!
//! Input: byte 0 picks the form (even: GGUF, odd: safetensors) and whether the device states
//! limits (bit 1: a largest buffer and a total of 2^(byte 0 / 4 mod 48) bytes); byte 1 the
//! context a run asks (0: the file's; else 2^(byte 1 mod 40)). GGUF: the rest is the file. Safetensors: 2 bytes of
//! the JSON's length (little-endian), the JSON, then the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mars_formats::{Gguf, SafetensorsFile};
use mars_model::weights::{HfWeights, Weights};
use mars_model::{DeviceLimits, KvType, Llama, LoadOptions, MemoryNeeds, WeightPath};

/// Every weight path a load can take.
const PATHS: [WeightPath; 4] = [
    WeightPath::F32,
    WeightPath::CpuPacked { threads: 1 },
    WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::F16,
    },
    WeightPath::GpuBlocks {
        subgroups: Some(32),
        kv: KvType::F32,
    },
];

/// Tensors the loader asks a source for by name, in GGUF's names (layer 0 and one far past any
/// file's last layer).
const NAMES: [&str; 9] = [
    "token_embd.weight",
    "output.weight",
    "output_norm.weight",
    "blk.0.attn_q.weight",
    "blk.0.attn_k.weight",
    "blk.0.attn_q.bias",
    "blk.0.attn_k.bias",
    "blk.0.ffn_down.weight",
    "blk.4294967296.attn_norm.weight",
];

fuzz_target!(|data: &[u8]| {
    let [form, context, rest @ ..] = data else {
        return;
    };
    let context = (*context != 0).then(|| 1usize << (context % 40));
    let limit = (form & 2 != 0).then(|| 1u64 << (form / 4 % 48));
    let options = |weights| LoadOptions {
        weights,
        limits: DeviceLimits {
            max_buffer_bytes: limit,
            max_total_bytes: limit,
        },
        context,
    };
    if form % 2 == 0 {
        for g in [
            Gguf::parse(rest),
            Gguf::parse_header(rest, u64::MAX),
            Gguf::parse_header(rest, rest.len() as u64),
        ]
        .into_iter()
        .flatten()
        {
            for path in PATHS {
                let _ = Llama::check_gguf(&g, options(path));
                let _ = Llama::memory_needs(&g, options(path)).map(|n| n.total());
            }
        }
    } else if let [lo, hi, rest @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(rest.len());
        let (json, file) = rest.split_at(len);
        let (Ok(json), Ok(file)) = (std::str::from_utf8(json), SafetensorsFile::parse(file)) else {
            return;
        };
        let Ok(w) = HfWeights::new(file, json) else {
            return;
        };
        for name in NAMES {
            let _ = w.f32_tensor(name);
        }
        for path in PATHS {
            let _ = MemoryNeeds::of(w.config(), &w, options(path)).map(|n| n.total());
        }
    }
});
