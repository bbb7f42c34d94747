//! HF safetensors + config.json load the same model as GGUF: the project-made tiny model is
//! exported to HF's layout (rotate-half Q/K rows, HF names) and loaded back two ways — as
//! `llama` (Q/K permuted to interleaved pairs on load) and as `qwen2` (rotate-half RoPE on the
//! unpermuted weights). All three must give the GGUF model's logits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_formats::{Gguf, SafetensorsFile};
use mars_model::tiny::{tiny_config, tiny_gguf};
use mars_model::{Device, Llama, LoadOptions, ModelError};
use safetensors::tensor::{Dtype, TensorView};
#[path = "support/diff.rs"]
mod diff;
use diff::max_diff;

/// Inverse of the loader's permutation: interleaved row 2i + j of a head goes back to
/// rotate-half row j·(hd/2) + i.
fn to_rotate_half(values: &[f32], rows: usize, cols: usize, heads: usize) -> Vec<f32> {
    let hd = rows / heads;
    let mut out = vec![0f32; values.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let from = h * hd + 2 * i + j;
                let to = h * hd + j * (hd / 2) + i;
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&values[from * cols..(from + 1) * cols]);
            }
        }
    }
    out
}

/// Writes the model in HF's layout. The name table is written out here on purpose rather than
/// taken from the loader: a shared table would let a mapping mistake (gate/up swapped, say)
/// cancel out in the round trip.
fn export_hf(gguf: &Gguf<'_>) -> Vec<u8> {
    let c = tiny_config();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for info in &gguf.tensors {
        let shape: Vec<usize> = info.dims.iter().rev().map(|&d| d as usize).collect();
        let mut values = gguf.tensor_f32(&info.name).unwrap();
        let name = info
            .name
            .replace("token_embd.weight", "model.embed_tokens.weight")
            .replace("output_norm.weight", "model.norm.weight");
        let name = if name == "output.weight" {
            "lm_head.weight".to_string()
        } else {
            name
        };
        let name = if let Some(rest) = name.strip_prefix("blk.") {
            let (layer, tail) = rest.split_once('.').unwrap();
            if tail == "attn_q.weight" {
                values = to_rotate_half(&values, shape[0], shape[1], c.n_heads);
            } else if tail == "attn_k.weight" {
                values = to_rotate_half(&values, shape[0], shape[1], c.n_kv_heads);
            }
            let hf = match tail {
                "attn_norm.weight" => "input_layernorm.weight",
                "ffn_norm.weight" => "post_attention_layernorm.weight",
                "attn_q.weight" => "self_attn.q_proj.weight",
                "attn_k.weight" => "self_attn.k_proj.weight",
                "attn_v.weight" => "self_attn.v_proj.weight",
                "attn_output.weight" => "self_attn.o_proj.weight",
                "ffn_gate.weight" => "mlp.gate_proj.weight",
                "ffn_up.weight" => "mlp.up_proj.weight",
                "ffn_down.weight" => "mlp.down_proj.weight",
                other => panic!("unexpected tensor {other}"),
            };
            format!("model.layers.{layer}.{hf}")
        } else {
            name
        };
        tensors.push((
            name,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, shape, bytes)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn config_json(model_type: &str) -> String {
    let c = tiny_config();
    format!(
        r#"{{"model_type": "{model_type}", "vocab_size": {}, "hidden_size": {}, "intermediate_size": {},
            "num_hidden_layers": {}, "num_attention_heads": {}, "num_key_value_heads": {},
            "rms_norm_eps": {}, "rope_theta": {}, "max_position_embeddings": {}, "tie_word_embeddings": false}}"#,
        c.vocab_size,
        c.d_model,
        c.d_ff,
        c.n_layers,
        c.n_heads,
        c.n_kv_heads,
        c.rms_eps,
        c.rope_theta,
        c.context_length
    )
}

fn run(model: &Llama) -> Vec<f32> {
    let mut cache = model.new_cache(16).unwrap();
    model
        .forward(&[10, 200, 33, 47, 5, 99, 128, 7], &mut cache)
        .unwrap()
        .read()
        .unwrap()
}

#[test]
fn safetensors_llama_and_qwen_layouts_equal_gguf() {
    let bytes = tiny_gguf(11).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    let device = Device::flex();
    let reference = run(&Llama::from_gguf(&gguf, &device, LoadOptions::default()).unwrap());
    let hf = export_hf(&gguf);

    let llama = Llama::from_safetensors(
        SafetensorsFile::parse(&hf).unwrap(),
        &config_json("llama"),
        &device,
        LoadOptions::default(),
    )
    .unwrap();
    let d_llama = max_diff(&reference, &run(&llama));
    let qwen = Llama::from_safetensors(
        SafetensorsFile::parse(&hf).unwrap(),
        &config_json("qwen2"),
        &device,
        LoadOptions::default(),
    )
    .unwrap();
    let d_qwen = max_diff(&reference, &run(&qwen));
    eprintln!("GGUF vs HF-as-llama {d_llama:.2e}, vs HF-as-qwen2 (rotate-half RoPE) {d_qwen:.2e}");
    assert!(d_llama < 1e-5 && d_qwen < 1e-4, "{d_llama} {d_qwen}");

    // Without the permutation the model is a different one: the check above can fail.
    let unpermuted = Llama::from_weights(
        mars_model::LlamaConfig {
            // Llama's RoPE pairing over weights left in Qwen's (rotate-half) layout.
            architecture: mars_model::Architecture::Llama,
            ..qwen.config().clone()
        },
        &mars_model::weights::HfWeights::new(
            SafetensorsFile::parse(&hf).unwrap(),
            &config_json("qwen2"),
        )
        .unwrap(),
        &device,
        LoadOptions::default(),
    )
    .unwrap();
    assert!(max_diff(&reference, &run(&unpermuted)) > 1e-2);
}

#[test]
fn bad_config_and_files_are_named_errors() {
    let hf = export_hf(&Gguf::parse(&tiny_gguf(11).unwrap()).unwrap());
    let load = |json: &str| {
        Llama::from_safetensors(
            SafetensorsFile::parse(&hf).unwrap(),
            json,
            &Device::flex(),
            LoadOptions::default(),
        )
    };
    assert!(matches!(load("{"), Err(ModelError::Config(m)) if m.contains("config.json")));
    assert!(
        matches!(load(&config_json("gpt2")), Err(ModelError::Unsupported(m)) if m.contains("gpt2"))
    );
    let zero_heads =
        config_json("llama").replace("\"num_attention_heads\": 4", "\"num_attention_heads\": 0");
    assert!(matches!(load(&zero_heads), Err(ModelError::Config(_))));
    let scaled = config_json("llama").replace("}", r#", "rope_scaling": {"rope_type": "llama3"}}"#);
    assert!(matches!(load(&scaled), Err(ModelError::Unsupported(m)) if m.contains("rope_scaling")));
    assert!(SafetensorsFile::parse(&hf[..hf.len() / 2]).is_err());
    assert!(SafetensorsFile::parse(b"\xff\xff\xff\xff\xff\xff\xff\xff{}").is_err());
}
