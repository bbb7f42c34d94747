//! Writes the seed corpus under `corpus/<target>/`: a tiny valid GGUF with tokenizer metadata and
//! one tensor of each storage family, a safetensors file, and a tokenizer.json. Small on purpose:
//! libFuzzer mutates from them.
use std::fs;

use mars_formats::{GgmlType, GgufWriter, Value};

fn gguf() -> Result<Vec<u8>, mars_formats::FormatError> {
    let s = |v: &str| Value::String(v.into());
    let tokens: Vec<Value> = ["<s>", "a", "b", "ab", "Ġ", "Ġa", "<|im_end|>"]
        .iter()
        .map(|t| s(t))
        .collect();
    let types = vec![
        Value::I32(3),
        Value::I32(1),
        Value::I32(1),
        Value::I32(1),
        Value::I32(1),
        Value::I32(1),
        Value::I32(3),
    ];
    let mut w = GgufWriter::new();
    w.meta("general.architecture", s("llama"))
        .meta("llama.block_count", Value::U32(1))
        .meta("tokenizer.ggml.model", s("gpt2"))
        .meta("tokenizer.ggml.pre", s("smollm"))
        .meta("tokenizer.ggml.tokens", Value::Array(8, tokens))
        .meta("tokenizer.ggml.token_type", Value::Array(5, types))
        .meta(
            "tokenizer.ggml.merges",
            Value::Array(8, vec![s("a b"), s("Ġ a")]),
        )
        .meta("tokenizer.ggml.bos_token_id", Value::U32(0))
        .meta("tokenizer.ggml.eos_token_id", Value::U32(6));
    w.tensor_f32("f32", &[4, 2], &[0.5, -1.0, 2.0, 3.0, 0.0, 1.0, -2.0, 4.0])?;
    w.tensor("f16", &[4], GgmlType::F16, vec![0, 60, 0, 188, 0, 0, 0, 64])?;
    // One block each of a legacy and a k-quant type (bytes arbitrary but the right size).
    w.tensor("q8_0", &[32], GgmlType::Q8_0, (0..34u8).collect())?;
    w.tensor("q4_k", &[256], GgmlType::Q4K, (0..144u8).collect())?;
    Ok(w.to_bytes())
}

fn safetensors() -> Vec<u8> {
    let header = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"__metadata__":{"format":"pt"}}"#;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend_from_slice(&1.5f32.to_le_bytes());
    out.extend_from_slice(&(-2.0f32).to_le_bytes());
    out.extend_from_slice(&[0, 60, 0, 188]);
    out
}

/// A one-layer Llama as HF stores it (F32, d = 8, two heads, FFN 16, 8 tokens) and its
/// `config.json`, framed as the `model` target reads a safetensors input: form byte 1, the
/// file's context, the JSON's length, the JSON, the file.
fn model_safetensors() -> Vec<u8> {
    let config = r#"{"model_type":"llama","vocab_size":8,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":2,"rms_norm_eps":1e-5,"max_position_embeddings":64}"#;
    let layer = |t: &str| format!("model.layers.0.{t}");
    let tensors: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![8, 8]),
        ("model.norm.weight".into(), vec![8]),
        (layer("input_layernorm.weight"), vec![8]),
        (layer("post_attention_layernorm.weight"), vec![8]),
        (layer("self_attn.q_proj.weight"), vec![8, 8]),
        (layer("self_attn.k_proj.weight"), vec![8, 8]),
        (layer("self_attn.v_proj.weight"), vec![8, 8]),
        (layer("self_attn.o_proj.weight"), vec![8, 8]),
        (layer("mlp.gate_proj.weight"), vec![16, 8]),
        (layer("mlp.up_proj.weight"), vec![16, 8]),
        (layer("mlp.down_proj.weight"), vec![8, 16]),
    ];
    let (mut entries, mut data) = (Vec::new(), Vec::new());
    for (name, shape) in tensors {
        let n: usize = shape.iter().product();
        let start = data.len();
        data.extend((0..n).flat_map(|i| (i as f32 / n as f32 - 0.5).to_le_bytes()));
        entries.push(format!(
            r#""{name}":{{"dtype":"F32","shape":{shape:?},"data_offsets":[{start},{}]}}"#,
            data.len()
        ));
    }
    let header = format!("{{{}}}", entries.join(","));
    let mut out = vec![1, 0];
    out.extend((config.len() as u16).to_le_bytes());
    out.extend(config.as_bytes());
    out.extend((header.len() as u64).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// A `kernels` input: type index, 3 output rows, `values` / 32 blocks of width, 2 activation
/// rows; then 3 rows of one `bytes`-byte block each (scale 1.0 as f16 at the front: an even first
/// byte, so the target takes the exact size), then a few
/// activations.
fn kernel_seed(ty: u8, bytes: usize, values: usize) -> Vec<u8> {
    let blocks = u8::try_from(values / 32 - 1).unwrap_or(0);
    let ty_index = match ty {
        12 => 5, // Q4_K in WeightType::ALL
        _ => 3,  // Q5_0
    };
    let mut out = vec![ty_index, 2, blocks, 1];
    for row in 0..3u8 {
        let mut block: Vec<u8> = (0..bytes)
            .map(|i| (i as u8).wrapping_mul(7) ^ row)
            .collect();
        block[..2].copy_from_slice(&[0, 60]);
        out.extend(block);
    }
    for v in [0.5f32, -1.25, 3.0, 0.0, -0.75, 2.5] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

const TOKENIZER_JSON: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":0,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},"post_processor":null,"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"vocab":{"<s>":0,"a":1,"b":2,"ab":3,"Ġ":4,"Ġa":5},"merges":["a b","Ġ a"]}}"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gguf = gguf()?;
    mars_formats::Gguf::parse(&gguf)?;
    // The tiny Q4_K_M-typed model's header alone (its 0.9 MB of data would slow every
    // mutation): the target reads it as a download's first part.
    let tiny = mars_model::tiny::tiny_gguf_k_quants(0)?;
    let parsed = mars_formats::Gguf::parse(&tiny)?;
    let data = parsed
        .tensors
        .iter()
        .map(|t| t.offset + t.n_bytes)
        .max()
        .unwrap_or(0);
    let tiny = tiny[..tiny.len() - usize::try_from(data)?].to_vec();
    mars_formats::Gguf::parse_header(&tiny, u64::MAX)?;
    for (dir, name, bytes) in [
        ("gguf", "tiny.gguf", gguf.clone()),
        ("tokenizer", "tiny.gguf", gguf),
        (
            "tokenizer",
            "tokenizer.json",
            TOKENIZER_JSON.as_bytes().to_vec(),
        ),
        ("safetensors", "tiny.safetensors", safetensors()),
        ("kernels", "q4_k.bin", kernel_seed(12, 144, 256)),
        ("kernels", "q5_0.bin", kernel_seed(3, 22, 32)),
        // The `model` target's GGUF inputs: form 0 (no limits) and 2 (limits of 2^0 bytes),
        // the file's context, then the tiny Q4_K_M-typed model's header.
        ("model", "tiny.gguf", [&[0, 0][..], &tiny].concat()),
        ("model", "tiny-limited.gguf", [&[2, 0][..], &tiny].concat()),
        ("model", "tiny.safetensors", model_safetensors()),
    ] {
        fs::create_dir_all(format!("corpus/{dir}"))?;
        fs::write(format!("corpus/{dir}/{name}"), bytes)?;
    }
    Ok(())
}
