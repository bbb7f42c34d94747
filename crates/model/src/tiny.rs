//! A tiny Llama with random weights, written as a real GGUF file by the project's own writer:
//! for backend-parity tests (CPU, native GPU, browser) and demos that must run on a software GPU.

use mars_formats::{GgmlType, GgufWriter, Result, Value};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use crate::config::{Architecture, LlamaConfig};
use crate::tensors::{BlockTensors, Named, OUTPUT, OUTPUT_NORM, TOKEN_EMBD};

/// The tiny model's hyper-parameters: 2 layers, width 64, 4 heads over 2 KV heads, and a
/// 257-token byte-level vocabulary (256 bytes and `<|endoftext|>`).
pub fn tiny_config() -> LlamaConfig {
    LlamaConfig {
        architecture: Architecture::Llama,
        vocab_size: 257,
        d_model: 64,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        d_ff: 128,
        rope_theta: 10_000.0,
        rms_eps: 1e-5,
        context_length: 512,
        qkv_bias: false,
        qk_norm: false,
        tied_embeddings: false,
    }
}

/// GPT-2's byte-to-character map: printable bytes stand for themselves, the rest are shifted
/// past U+0100, so that every byte is a visible one-character token.
fn byte_token(b: u8) -> String {
    let printable = |b: u8| {
        (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    if printable(b) {
        return char::from(b).to_string();
    }
    let shift = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + shift)
        .map(String::from)
        .unwrap_or_default()
}

/// The tiny model as GGUF bytes: weights drawn from `seed` (Q/K/V/O and FFN in F32, the
/// embedding in F16 so that a dequantizing path is exercised), with tokenizer metadata.
///
/// # Errors
/// Only if the writer rejects a tensor, which would be a bug in this function.
pub fn tiny_gguf(seed: u64) -> Result<Vec<u8>> {
    build(seed, false)
}

/// The same tiny model with its matrices quantized as GGUF files store them: Q/O and the FFN
/// down projection Q8_0, K and the FFN gate Q4_1, V and the FFN up Q5_0, the output head
/// Q8_0 (the embedding stays F16): a small file on which every matrix path that reads blocks
/// (the CPU kernels, the GPU kernels) meets the f32 reference over the same dequantized values.
///
/// # Errors
/// As [`tiny_gguf`].
pub fn tiny_gguf_quantized(seed: u64) -> Result<Vec<u8>> {
    build(seed, true)
}

/// Rows of 32-value blocks of `values` (a whole number of blocks) in `ty`: Q8_0, Q4_1 or Q5_0
/// by round-to-nearest, F32 as is.
fn quantize(values: &[f32], ty: GgmlType) -> Vec<u8> {
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    let mut out = Vec::new();
    if ty == GgmlType::F32 {
        return values.iter().flat_map(|v| v.to_le_bytes()).collect();
    }
    for block in values.chunks_exact(32) {
        match ty {
            GgmlType::Q8_0 => {
                let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                out.extend(f16(d));
                out.extend(
                    block
                        .iter()
                        .map(|v| (v * id).round().clamp(-127.0, 127.0) as i8 as u8),
                );
            }
            GgmlType::Q4_1 => {
                let min = block.iter().fold(f32::INFINITY, |a, &v| a.min(v));
                let max = block.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                let d = (max - min) / 15.0;
                let id = if d > 0.0 { 1.0 / d } else { 0.0 };
                let q: Vec<u8> = block
                    .iter()
                    .map(|v| ((v - min) * id).round().clamp(0.0, 15.0) as u8)
                    .collect();
                out.extend(f16(d));
                out.extend(f16(min));
                out.extend((0..16).map(|j| q[j] | (q[j + 16] << 4)));
            }
            _ => {
                // Q5_0: d = the signed value of largest magnitude / −16, q = x / d + 16.
                let m = block
                    .iter()
                    .fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let d = m / -16.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q: Vec<u32> = block
                    .iter()
                    .map(|v| (v * id + 16.0).round().clamp(0.0, 31.0) as u32)
                    .collect();
                let qh = q
                    .iter()
                    .enumerate()
                    .fold(0u32, |h, (j, &v)| h | (((v >> 4) & 1) << j));
                out.extend(f16(d));
                out.extend(qh.to_le_bytes());
                out.extend((0..16).map(|j| ((q[j] & 15) | ((q[j + 16] & 15) << 4)) as u8));
            }
        }
    }
    out
}

fn build(seed: u64, quantized: bool) -> Result<Vec<u8>> {
    let c = tiny_config();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut random = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| ((rng.next_u32() as f32 / u32::MAX as f32) * 2.0 - 1.0) * scale)
            .collect()
    };
    let d = c.d_model as u64;
    let mut w = GgufWriter::new();
    let u32v = |v: usize| Value::U32(v as u32);
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("general.name", Value::String("mars-tiny".into()))
        .meta("llama.block_count", u32v(c.n_layers))
        .meta("llama.context_length", u32v(c.context_length))
        .meta("llama.embedding_length", u32v(c.d_model))
        .meta("llama.feed_forward_length", u32v(c.d_ff))
        .meta("llama.attention.head_count", u32v(c.n_heads))
        .meta("llama.attention.head_count_kv", u32v(c.n_kv_heads))
        .meta("llama.rope.freq_base", Value::F32(c.rope_theta))
        .meta(
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(c.rms_eps),
        )
        .meta("tokenizer.ggml.model", Value::String("gpt2".into()))
        .meta("tokenizer.ggml.pre", Value::String("default".into()));
    let mut tokens: Vec<Value> = (0..=255u8).map(|b| Value::String(byte_token(b))).collect();
    tokens.push(Value::String("<|endoftext|>".into()));
    let mut types = vec![Value::I32(1); 256];
    types.push(Value::I32(3));
    w.meta("tokenizer.ggml.tokens", Value::Array(8, tokens))
        .meta("tokenizer.ggml.token_type", Value::Array(5, types))
        .meta("tokenizer.ggml.merges", Value::Array(8, Vec::new()))
        .meta("tokenizer.ggml.bos_token_id", u32v(256))
        .meta("tokenizer.ggml.eos_token_id", u32v(256));

    let add = |w: &mut GgufWriter, name: String, dims: &[u64], values: Vec<f32>| -> Result<()> {
        w.tensor_f32(name, dims, &values).map(|_| ())
    };
    // A matrix in `ty` when quantized (F32 otherwise).
    let add_matrix = |w: &mut GgufWriter,
                      name: String,
                      dims: &[u64],
                      values: Vec<f32>,
                      ty: GgmlType|
     -> Result<()> {
        let ty = if quantized { ty } else { GgmlType::F32 };
        w.tensor(name, dims, ty, quantize(&values, ty)).map(|_| ())
    };
    let embedding: Vec<u8> = random((c.vocab_size as u64 * d) as usize, 1.0)
        .into_iter()
        .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    w.tensor(
        TOKEN_EMBD,
        &[d, c.vocab_size as u64],
        GgmlType::F16,
        embedding,
    )?;
    // The shape in GGUF's order (innermost first).
    let dims = |t: &Named| -> Vec<u64> { t.shape.iter().rev().map(|&x| x as u64).collect() };
    for i in 0..c.n_layers {
        let t = BlockTensors::of(&c, i);
        // Norms near 1; matrices scaled by 1/√fan-in, each layer mixing the legacy types.
        for (t, ty) in [
            (&t.attn_norm, None),
            (&t.wq, Some(GgmlType::Q8_0)),
            (&t.wk, Some(GgmlType::Q4_1)),
            (&t.wv, Some(GgmlType::Q5_0)),
            (&t.wo, Some(GgmlType::Q8_0)),
            (&t.ffn_norm, None),
            (&t.w_gate, Some(GgmlType::Q4_1)),
            (&t.w_up, Some(GgmlType::Q5_0)),
            (&t.w_down, Some(GgmlType::Q8_0)),
        ] {
            let n = t.shape.iter().product();
            match ty {
                None => add(
                    &mut w,
                    t.name.clone(),
                    &dims(t),
                    random(n, 0.5).iter().map(|x| 1.0 + x).collect(),
                )?,
                Some(ty) => {
                    let scale = 1.0 / (t.shape[1] as f32).sqrt();
                    add_matrix(&mut w, t.name.clone(), &dims(t), random(n, scale), ty)?;
                }
            }
        }
    }
    // A separate output matrix: with a tied one the logit of the current token dominates
    // (|e|² against random dot products) and random weights just repeat the last byte. Scale
    // 0.6 gives logits of standard deviation ~3, so that sampling spreads over a few tokens.
    add_matrix(
        &mut w,
        OUTPUT.into(),
        &[d, c.vocab_size as u64],
        random((d * c.vocab_size as u64) as usize, 0.6),
        GgmlType::Q8_0,
    )?;
    add(&mut w, OUTPUT_NORM.into(), &[d], vec![1.0; d as usize])?;
    Ok(w.to_bytes())
}
