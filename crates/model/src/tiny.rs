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

/// The K-quant tiny model's hyper-parameters ([`tiny_gguf_k_quants`]): the tiny model widened
/// to 256 (a K-quant super-block a row at least), 4 heads of 64 over 2 KV heads, an FFN of 512.
pub fn tiny_k_config() -> LlamaConfig {
    LlamaConfig {
        d_model: 256,
        head_dim: 64,
        d_ff: 512,
        ..tiny_config()
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
    build(seed, Kind::F32)
}

/// The same tiny model with its matrices quantized as GGUF files store them: Q/O and the FFN
/// down projection Q8_0, K and the FFN gate Q4_1, V and the FFN up Q5_0, the output head
/// Q8_0 (the embedding stays F16): a small file on which every matrix path that reads blocks
/// (the CPU kernels, the GPU kernels) meets the f32 reference over the same dequantized values.
///
/// # Errors
/// As [`tiny_gguf`].
pub fn tiny_gguf_quantized(seed: u64) -> Result<Vec<u8>> {
    build(seed, Kind::Legacy)
}

/// A tiny model in the types of a Q4_K_M file ([`tiny_k_config`]'s shape): q, k, o, gate and
/// up Q4_K, down and the output head Q6_K, v Q4_K in the first layer and Q6_K in the second
/// (llama.cpp's Q4_K_M gives some layers' v more bits, so a q | k | v group mixes the two), the
/// embedding F16: where the GPU's wide teams (Q4_K or Q6_K groups alone) and K-quant tiles run.
///
/// # Errors
/// As [`tiny_gguf`].
pub fn tiny_gguf_k_quants(seed: u64) -> Result<Vec<u8>> {
    build(seed, Kind::KQuants)
}

/// Which of the tiny models [`build`] writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    F32,
    Legacy,
    KQuants,
}

/// `values` (whole 256-value super-blocks) in Q4_K: per 32 values a 6-bit scale and minimum
/// (round to nearest, the block's least value or 0 as its minimum), each super-block's f16
/// scales of those; the quants packed as llama.cpp's `dequantize_row_q4_K` reads them.
fn quantize_q4_k(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / 256 * 144);
    for sb in values.chunks_exact(256) {
        // Each 32 values' step and (non-negative) offset: x ≈ step · q − offset, q in 0..=15.
        let mut steps = [0f32; 8];
        let mut offsets = [0f32; 8];
        for (j, sub) in sb.chunks_exact(32).enumerate() {
            let min = sub.iter().fold(0f32, |a, &v| a.min(v));
            let max = sub.iter().fold(min, |a, &v| a.max(v));
            steps[j] = (max - min) / 15.0;
            offsets[j] = -min;
        }
        let d = steps.iter().fold(0f32, |a, &v| a.max(v)) / 63.0;
        let dmin = offsets.iter().fold(0f32, |a, &v| a.max(v)) / 63.0;
        // f16 as stored, so that the 6-bit codes round against the scales the file holds.
        let (d, dmin) = (half::f16::from_f32(d), half::f16::from_f32(dmin));
        let six = |v: f32, by: half::f16| {
            let by = by.to_f32();
            if by > 0.0 {
                (v / by).round().clamp(0.0, 63.0) as u8
            } else {
                0
            }
        };
        let sc: Vec<u8> = steps.iter().map(|&v| six(v, d)).collect();
        let m: Vec<u8> = offsets.iter().map(|&v| six(v, dmin)).collect();
        let mut scales = [0u8; 12];
        for j in 0..4 {
            scales[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            scales[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
            scales[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
        }
        let q: Vec<u8> = sb
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let step = d.to_f32() * f32::from(sc[i / 32]);
                let offset = dmin.to_f32() * f32::from(m[i / 32]);
                if step > 0.0 {
                    ((v + offset) / step).round().clamp(0.0, 15.0) as u8
                } else {
                    0
                }
            })
            .collect();
        out.extend(d.to_le_bytes());
        out.extend(dmin.to_le_bytes());
        out.extend(scales);
        // Each 64 values: 32 bytes, the first 32 values in the low nibbles, the next in the high.
        for chunk in q.chunks_exact(64) {
            out.extend((0..32).map(|l| chunk[l] | (chunk[l + 32] << 4)));
        }
    }
    out
}

/// `values` (whole 256-value super-blocks) in Q6_K: per 16 values an 8-bit signed scale, each
/// super-block's f16 scale of those, 6-bit quants (4 low bits in `ql`, 2 high in `qh`) as
/// llama.cpp's `dequantize_row_q6_K` reads them.
fn quantize_q6_k(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() / 256 * 210);
    for sb in values.chunks_exact(256) {
        // Each 16 values' step: x ≈ step · q, q in −32..=31.
        let steps: Vec<f32> = sb
            .chunks_exact(16)
            .map(|sub| sub.iter().fold(0f32, |a, &v| a.max(v.abs())) / 31.0)
            .collect();
        let d = half::f16::from_f32(steps.iter().fold(0f32, |a, &v| a.max(v)) / 127.0);
        let sc: Vec<i8> = steps
            .iter()
            .map(|&v| {
                if d.to_f32() > 0.0 {
                    (v / d.to_f32()).round().clamp(-128.0, 127.0) as i8
                } else {
                    0
                }
            })
            .collect();
        // Stored unsigned: q + 32 in 0..=63.
        let q: Vec<u8> = sb
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let step = d.to_f32() * f32::from(sc[i / 16]);
                let q = if step != 0.0 { (v / step).round() } else { 0.0 };
                (q.clamp(-32.0, 31.0) + 32.0) as u8
            })
            .collect();
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        // Each 128 values: 64 bytes of ql, 32 of qh; values l, l + 32, l + 64, l + 96.
        for (n, half) in q.chunks_exact(128).enumerate() {
            for l in 0..32 {
                let [a, b, c, e] = [half[l], half[l + 32], half[l + 64], half[l + 96]];
                ql[64 * n + l] = (a & 15) | ((c & 15) << 4);
                ql[64 * n + l + 32] = (b & 15) | ((e & 15) << 4);
                qh[32 * n + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
            }
        }
        out.extend(ql);
        out.extend(qh);
        out.extend(sc.iter().map(|&s| s as u8));
        out.extend(d.to_le_bytes());
    }
    out
}

/// Rows of blocks of `values` (a whole number of blocks) in `ty`: Q8_0, Q4_1, Q5_0, Q4_K or
/// Q6_K by round-to-nearest, F32 as is.
fn quantize(values: &[f32], ty: GgmlType) -> Vec<u8> {
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    let mut out = Vec::new();
    match ty {
        GgmlType::F32 => return values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::Q4K => return quantize_q4_k(values),
        GgmlType::Q6K => return quantize_q6_k(values),
        _ => {}
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

fn build(seed: u64, kind: Kind) -> Result<Vec<u8>> {
    let c = if kind == Kind::KQuants {
        tiny_k_config()
    } else {
        tiny_config()
    };
    let quantized = kind != Kind::F32;
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
        // Norms near 1; matrices scaled by 1/√fan-in, each layer mixing the legacy types (or
        // Q4_K_M's).
        let types = match kind {
            Kind::KQuants => {
                let v = if i == 0 { GgmlType::Q4K } else { GgmlType::Q6K };
                let q4 = GgmlType::Q4K;
                [q4, q4, v, q4, q4, q4, GgmlType::Q6K]
            }
            _ => {
                use GgmlType::{Q4_1, Q5_0, Q8_0};
                [Q8_0, Q4_1, Q5_0, Q8_0, Q4_1, Q5_0, Q8_0]
            }
        };
        for (t, ty) in [
            (&t.attn_norm, None),
            (&t.wq, Some(types[0])),
            (&t.wk, Some(types[1])),
            (&t.wv, Some(types[2])),
            (&t.wo, Some(types[3])),
            (&t.ffn_norm, None),
            (&t.w_gate, Some(types[4])),
            (&t.w_up, Some(types[5])),
            (&t.w_down, Some(types[6])),
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
        if kind == Kind::KQuants {
            GgmlType::Q6K
        } else {
            GgmlType::Q8_0
        },
    )?;
    add(&mut w, OUTPUT_NORM.into(), &[d], vec![1.0; d as usize])?;
    Ok(w.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The K-quant writers round-trip through the GGUF reader's dequantization (llama.cpp's
    /// layout): within a step of each value, so the quants and their scales are where the
    /// reader looks for them (a misplaced nibble or scale is off by the values' whole range).
    #[test]
    fn k_quants_round_trip_through_the_reader() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        // 8 super-blocks of values in ±1, one of them all positive and one all zero.
        let mut values: Vec<f32> = (0..2048)
            .map(|_| (rng.next_u32() as f32 / u32::MAX as f32) * 2.0 - 1.0)
            .collect();
        values[256..512].iter_mut().for_each(|v| *v = v.abs());
        values[512..768].iter_mut().for_each(|v| *v = 0.0);
        // Q4_K: 15 steps over a 32-value block's range (≤ 2), its 6-bit scale and offset
        // rounded: within ~a step (2 / 15) of each value. Q6_K: 63 steps over ±max.
        for (ty, bound) in [(GgmlType::Q4K, 0.14), (GgmlType::Q6K, 0.035)] {
            let bytes = quantize(&values, ty);
            assert_eq!(bytes.len() as u64, 8 * ty.type_size(), "{ty:?}");
            let back = ty.dequantize(&bytes, values.len() as u64).unwrap();
            let worst = values
                .iter()
                .zip(&back)
                .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
            assert!(worst < bound, "{ty:?}: {worst}");
            assert!(back[512..768].iter().all(|&v| v == 0.0), "{ty:?}");
        }
    }
}
