//! Model descriptions that state more than their files hold, as the `model` fuzz target (fuzz/)
//! writes them: every check a load makes before reading tensor data refuses them with a typed
//! error naming the field, without a loop or an allocation sized by the stated number.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_formats::{Gguf, GgufWriter, SafetensorsFile, Value};
use mars_model::weights::{HfWeights, Weights};
use mars_model::{KvType, Llama, LoadOptions, ModelError, WeightPath};
use safetensors::tensor::{Dtype, TensorView};

/// A GGUF header of a Llama with `layers` blocks, 64 wide, and no tensors.
fn header(layers: u64) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", Value::String("llama".into()))
        .meta("llama.block_count", Value::U64(layers))
        .meta("llama.context_length", Value::U64(64))
        .meta("llama.embedding_length", Value::U64(64))
        .meta("llama.feed_forward_length", Value::U64(128))
        .meta("llama.attention.head_count", Value::U64(4))
        .meta("llama.vocab_size", Value::U64(16));
    w.to_bytes()
}

const PATHS: [WeightPath; 3] = [
    WeightPath::F32,
    WeightPath::CpuPacked { threads: 1 },
    WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::F16,
    },
];

/// 2^40 blocks stated, none listed: before, the loader listed every block's tensor names to
/// find the first missing one (and the memory check summed their sizes), and ran out of memory.
#[test]
fn a_block_count_past_the_files_tensors_is_refused_at_once() {
    for layers in [1u64 << 40, 1] {
        let bytes = header(layers);
        let g = Gguf::parse(&bytes).unwrap();
        let expected = format!(
            "n_layers = {layers}, but the file has no blk.{}.attn_norm.weight",
            layers - 1
        );
        for path in PATHS {
            for result in [
                Llama::check_gguf(&g, LoadOptions::with_weights(path)).map(|_| ()),
                Llama::memory_needs(&g, LoadOptions::with_weights(path)).map(|_| ()),
            ] {
                match result {
                    Err(ModelError::Config(m)) => assert_eq!(m, expected),
                    other => panic!("{path:?}: {other:?}"),
                }
            }
        }
    }
}

/// The sizes a configuration implies saturate rather than wrap: a model whose KV cache or
/// weights overflow 64 bits is one no device holds.
#[test]
fn sizes_past_64_bits_saturate() {
    let c = mars_model::LlamaConfig {
        n_layers: 1 << 40,
        n_heads: 1 << 20,
        n_kv_heads: 1 << 20,
        head_dim: 1 << 10,
        d_model: 1 << 30,
        ..mars_model::tiny::tiny_config()
    };
    assert_eq!(c.weight_bytes(), u64::MAX);
    assert_eq!(c.kv_bytes_per_token(2), u64::MAX);
    let small = mars_model::tiny::tiny_config();
    assert_eq!(
        small.kv_bytes_per_token(2),
        (2 * 2 * small.n_layers * small.n_kv_heads * small.head_dim) as u64
    );
}

/// An HF model: a `config.json` stating more layers than the file has is refused naming the
/// count, and a Q projection stored as a scalar comes back as what it is (the loader refuses it
/// by its shape) where it indexed a first dimension that was not there.
#[test]
fn hf_configs_and_tensors_that_state_more_than_the_file_holds() {
    let one = 1f32.to_le_bytes();
    let names = [
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight",
    ];
    let views: Vec<(&str, TensorView<'_>)> = names
        .iter()
        .map(|&n| (n, TensorView::new(Dtype::F32, Vec::new(), &one).unwrap()))
        .collect();
    let file = safetensors::serialize(views, None).unwrap();
    let json = |layers: u64| {
        format!(
            r#"{{"model_type": "llama", "vocab_size": 16, "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": {layers}, "num_attention_heads": 4, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 64}}"#
        )
    };
    match HfWeights::new(SafetensorsFile::parse(&file).unwrap(), &json(1 << 40)) {
        Err(ModelError::Config(m)) => assert_eq!(
            m,
            "n_layers = 1099511627776, but the file has no blk.1099511627775.attn_norm.weight"
        ),
        other => panic!("{other:?}"),
    }
    let w = HfWeights::new(SafetensorsFile::parse(&file).unwrap(), &json(1)).unwrap();
    let q = w.f32_tensor("blk.0.attn_q.weight").unwrap().unwrap();
    assert_eq!(q, (Vec::new(), vec![1.0]));
}
