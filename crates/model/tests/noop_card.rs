//! A GPU card's configuration checked without a card: the tiny model on wgpu's no-op backend
//! dressed as one (`mars_model::noop_card`), where wgpu validates every pipeline and launch as
//! on a card and runs nothing. lavapipe, where the other GPU tests run, is a CPU adapter with
//! subgroups of 8, so it never builds what a card builds: the folded norms and RoPE, attention
//! split by key blocks, a long prefill's tiles, shuffles across 32 lanes. Here those kernels
//! are compiled (naga's WGSL validation, the card's limits) and launched through CubeCL and
//! wgpu-core; what they compute is the lavapipe tests' concern (the no-op backend computes
//! nothing).
#![cfg(feature = "wgpu")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mars_formats::Gguf;
use mars_model::tiny::{tiny_config, tiny_gguf_quantized};
use mars_model::{
    Device, KvType, Llama, LoadOptions, SUBMIT_EVERY_GPU, WeightPath, gpu_counts, noop_card,
    subgroup_lanes,
};

#[test]
fn a_cards_configuration_builds_and_launches() {
    let setup = pollster::block_on(noop_card()).unwrap();
    let lanes = subgroup_lanes(&setup.adapter);
    assert_eq!(lanes, Some(32), "the no-op card's subgroups");
    let device = Device::wgpu_options()
        .tasks_max(SUBMIT_EVERY_GPU)
        .setup(setup)
        .init()
        .unwrap();
    let bytes = tiny_gguf_quantized(3).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let weights = WeightPath::GpuBlocks {
        subgroups: lanes,
        kv: KvType::F16,
    };
    let model = Llama::from_gguf(&g, &device, LoadOptions::with_weights(weights)).unwrap();
    let layers = tiny_config().n_layers as u64;
    let mut cache = model.new_cache(400).unwrap();
    // A prompt past the tiles' threshold and past one 256-key block: its passes in tiles.
    let prompt: Vec<u32> = (0..300).map(|i| i % 250).collect();
    let before = gpu_counts();
    let logits = model.forward_last(&prompt, &mut cache).unwrap();
    pollster::block_on(logits.summaries_async(None)).unwrap();
    let prefill = gpu_counts().since(&before);
    assert!(prefill.pipelines > 0 && prefill.reads == 1, "{prefill:?}");
    // A decoded row: the card's five launches a layer (q | k | v with its norm, attention with
    // RoPE and the cache write, o, gate | up with its norm, down) and the split's merge past
    // 256 keys, the embedding and the head with the final norm; the summary's three after.
    let before = gpu_counts();
    let logits = model.forward(&[7], &mut cache).unwrap();
    let forward = gpu_counts().since(&before);
    assert_eq!(forward.launches, 2 + 6 * layers, "{forward:?}");
    pollster::block_on(logits.summaries_async(None)).unwrap();
    // A verification pass of 5 rows and a tree of 5 nodes, as decoding sends them.
    let logits = model.forward(&[1, 2, 3, 4, 5], &mut cache).unwrap();
    pollster::block_on(logits.summaries_async(None)).unwrap();
    cache.truncate(301).unwrap();
    let parents = [None, Some(0), Some(0), Some(1), Some(2)];
    let logits = model
        .forward_tree(&[1, 2, 3, 4, 5], &parents, &mut cache)
        .unwrap();
    pollster::block_on(logits.summaries_async(None)).unwrap();
    // Built once: another pass of as many rows compiles nothing.
    cache.truncate(301).unwrap();
    let before = gpu_counts();
    let logits = model.forward(&[9, 10, 11, 12, 13], &mut cache).unwrap();
    pollster::block_on(logits.summaries_async(None)).unwrap();
    assert_eq!(gpu_counts().since(&before).pipelines, 0);
}
