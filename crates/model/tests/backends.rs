//! One model, several backends: the project-made tiny model gives the same logits on flex (CPU)
//! and on wgpu (lavapipe's Vulkan here, a real GPU elsewhere). The browser (WebGPU) half of
//! this check belongs to the web crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mars_formats::{Gguf, Tokenizer};
use mars_model::tiny::{
    tiny_config, tiny_gguf, tiny_gguf_k_quants, tiny_gguf_quantized, tiny_k_config,
};
use mars_model::{Device, DeviceLimits, KvType, Llama, LoadOptions, TILES_ABOVE, WeightPath};

#[path = "support/diff.rs"]
mod diff;
#[path = "support/tree.rs"]
mod tree;
use diff::max_diff;

/// Largest difference allowed between backends: f32 sums in another order, over 2 layers.
const TOLERANCE: f32 = 1e-4;
/// The same with the GPU's f16 KV cache: keys and values rounded to 11 significant bits
/// (relative 2^-11) move the tiny model's logits (up to ~9) by 1.3e-3 on lavapipe; the bound
/// leaves 4x.
const KV_F16_TOLERANCE: f32 = 5e-3;
/// The same with one group shape's activations quantized to 8 bits (each moved by up to half a
/// step of max|x| / 127 per 32 values): the tiny model's logits moved by 0.017–0.049 on
/// lavapipe (the head's the most); the bound leaves 2x.
const Q8_TOLERANCE: f32 = 0.1;

fn logits(device: &Device, bytes: &[u8], tokens: &[u32]) -> Vec<f32> {
    logits_with(device, bytes, tokens, LoadOptions::default())
}

fn logits_with(device: &Device, bytes: &[u8], tokens: &[u32], options: LoadOptions) -> Vec<f32> {
    let g = Gguf::parse(bytes).unwrap();
    let model = Llama::from_gguf(&g, device, options).unwrap();
    assert_eq!(model.weight_path(), options.weights);
    assert!(
        [tiny_config(), tiny_k_config()].contains(model.config()),
        "{:?}",
        model.config()
    );
    let mut cache = model.new_cache(32).unwrap();
    // A prompt, then two single-token steps: batched and incremental paths both compared.
    let mut out = model
        .forward(&tokens[..6], &mut cache)
        .unwrap()
        .read()
        .unwrap();
    for &t in &tokens[6..] {
        out.extend(model.forward(&[t], &mut cache).unwrap().read().unwrap());
    }
    out
}

#[test]
fn tiny_model_has_a_working_tokenizer() {
    let bytes = tiny_gguf(1).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let text = "héllo, wörld! 👋";
    let ids = tok.encode(text, false).unwrap();
    assert_eq!(ids.len(), text.len(), "one token per byte");
    assert_eq!(tok.decode(&ids).unwrap(), text);
    assert_eq!(tok.stop_ids, vec![256]);
}

#[test]
fn flex_and_wgpu_agree() {
    let bytes = tiny_gguf(7).unwrap();
    let tokens = [72, 101, 108, 108, 111, 32, 119, 111];
    let cpu = logits(&Device::flex(), &bytes, &tokens);
    let gpu = logits(&wgpu(), &bytes, &tokens);
    assert_eq!(cpu.len(), gpu.len());
    assert_eq!(cpu.len(), 8 * 257);
    let worst = cpu
        .iter()
        .zip(&gpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let scale = cpu.iter().map(|v| v.abs()).fold(0f32, f32::max);
    eprintln!("flex vs wgpu: max |Δ logit| = {worst:.2e} (logits up to {scale:.2})");
    assert!(worst < TOLERANCE, "{worst}");
}

/// The wgpu device, initialised once per process (burn's runtime allows one).
fn wgpu() -> Device {
    wgpu_and_subgroups().0
}

/// The wgpu device and its adapter's smallest subgroup, where it has subgroups. Opened as the
/// engine opens it (`open_wgpu`), so `MARS_GPU_ROBUST=off` runs these tests on a device without
/// the driver's bounds checks (a CI step: every kernel in bounds).
fn wgpu_and_subgroups() -> (Device, Option<u32>) {
    let (device, lanes, _, _) = opened();
    (device.clone(), *lanes)
}

/// The one wgpu device of the process, its adapter's smallest subgroup, its wgpu device and
/// the matrix units' shapes its adapter lists (`adapter_matrix_units`).
type Opened = (
    Device,
    Option<u32>,
    burn::backend::wgpu::wgpu::Device,
    Vec<mars_model::UnitShape>,
);

fn opened() -> &'static Opened {
    static DEVICE: std::sync::OnceLock<Opened> = std::sync::OnceLock::new();
    DEVICE.get_or_init(|| {
        let (device, setup) = pollster::block_on(mars_model::open_wgpu(None))
            .expect("a wgpu adapter (lavapipe: apt mesa-vulkan-drivers)");
        let lanes = mars_model::subgroup_lanes(&setup.adapter);
        let units = mars_model::adapter_matrix_units(&setup.adapter);
        (device, lanes, setup.device, units)
    })
}

/// `MARS_GPU_ROBUST=off` gives a device without VK_EXT_robustness2, and without it the device
/// is wgpu's, with it where the driver has it (lavapipe has): so the CI step that runs these
/// tests with the switch runs every kernel on the device it names.
#[test]
fn the_robustness_switch_opens_the_device_it_names() {
    let (_, _, device, _) = opened();
    let Some(robust2) = mars_kernels::gpu::robustness2_enabled(device) else {
        return eprintln!("not a Vulkan device: nothing to check");
    };
    let off = std::env::var("MARS_GPU_ROBUST").as_deref() == Ok("off");
    assert_eq!(
        robust2,
        !off,
        "MARS_GPU_ROBUST={:?}",
        std::env::var("MARS_GPU_ROBUST")
    );
}

/// Quantized matrices (Q8_0, Q4_1, Q5_0) and an F16 embedding as GGUF blocks on wgpu, run by
/// the WGSL kernels, against flex's f32 forward over the same values dequantized: activations
/// stay f32 on both, so only the order of f32 sums differs.
#[test]
fn wgpu_blocks_agree_with_flex_over_the_dequantized_weights() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let tokens = [72, 101, 108, 108, 111, 32, 119, 111];
    let cpu = logits(&Device::flex(), &bytes, &tokens);
    let blocks = |kv| {
        LoadOptions::with_weights(WeightPath::GpuBlocks {
            subgroups: None,
            kv,
        })
    };
    let gpu = logits_with(&wgpu(), &bytes, &tokens, blocks(KvType::F32));
    let worst = max_diff(&cpu, &gpu);
    eprintln!("flex f32 vs wgpu blocks: max |Δ logit| = {worst:.2e}");
    assert!(worst < TOLERANCE, "{worst}");
    // The f16 cache (the default) rounds keys and values to 11 significant bits: the logits
    // move by more than the order of sums, within KV_F16_TOLERANCE.
    let half = logits_with(&wgpu(), &bytes, &tokens, blocks(KvType::F16));
    let worst_half = max_diff(&cpu, &half);
    eprintln!("flex f32 vs wgpu blocks, f16 cache: max |Δ logit| = {worst_half:.2e}");
    assert!(worst_half < KV_F16_TOLERANCE, "{worst_half}");
    assert!(
        worst_half > 0.0,
        "the f16 cache changed nothing: was it used?"
    );
    // The kernels' partial sums meeting through subgroup shuffles, where the adapter has
    // subgroups (lavapipe: 8 lanes), give the same logits bit for bit.
    let (device, subgroups) = wgpu_and_subgroups();
    let lanes = subgroups.expect("lavapipe and GPU adapters report subgroups");
    let shuffled = logits_with(
        &device,
        &bytes,
        &tokens,
        LoadOptions::with_weights(WeightPath::GpuBlocks {
            subgroups: Some(lanes),
            kv: KvType::F32,
        }),
    );
    assert_eq!(
        gpu.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        shuffled.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "subgroups of {lanes}"
    );
    // The same file on the f32 path of wgpu agrees too (the blocks are the file's values).
    let f32_gpu = logits(&wgpu(), &bytes, &tokens);
    assert!(max_diff(&cpu, &f32_gpu) < TOLERANCE);
    // A model in Q4_K_M's types (Q4_K and Q6_K, a super-block a row): the same bound.
    let k = tiny_gguf_k_quants(7).unwrap();
    let worst_k = max_diff(
        &logits(&Device::flex(), &k, &tokens),
        &logits_with(&wgpu(), &k, &tokens, blocks(KvType::F32)),
    );
    eprintln!("K-quants, flex f32 vs wgpu blocks: max |Δ logit| = {worst_k:.2e}");
    assert!(worst_k < TOLERANCE, "{worst_k}");
}

/// A device whose bindings are small splits every matrix into parts of a few rows (q | k | v
/// and gate | up then run a launch per part): the logits keep their bits.
#[test]
fn matrices_split_across_bindings_give_the_same_logits() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let tokens = [72, 101, 108, 108, 111, 32, 119, 111];
    let whole = Gguf::parse(&bytes).unwrap();
    // Three rows of the widest block row a part (the load refuses bindings under one row).
    let widest = whole
        .tensors
        .iter()
        .filter(|t| t.dims.len() == 2)
        .map(|t| t.n_bytes / t.dims[1])
        .max()
        .unwrap();
    let options = |limit| LoadOptions {
        weights: WeightPath::GpuBlocks {
            subgroups: None,
            kv: KvType::default(),
        },
        limits: DeviceLimits {
            max_buffer_bytes: limit,
            max_total_bytes: None,
        },
        context: None,
    };
    let bits = |v: Vec<f32>| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let device = wgpu();
    let unsplit = logits_with(&device, &bytes, &tokens, options(None));
    let small = options(Some(3 * widest + 8));
    let split = logits_with(&device, &bytes, &tokens, small);
    assert_eq!(bits(split), bits(unsplit));
    // The binding reached the upload: the head (a matrix like every other) went in parts.
    let launches = |o| {
        Llama::from_gguf(&whole, &device, o)
            .unwrap()
            .gpu_head_launches()
    };
    assert_eq!(launches(options(None)), Some(1));
    assert!(launches(small).is_some_and(|n| n > 1));
}

/// A prefill in passes of a few rows (`Llama::with_prefill_rows`, `PREFILL_ROWS` by default)
/// gives the last row's logits and a cache the next step reads exactly as one pass does, bit
/// for bit, on the packed CPU path and on wgpu's blocks (a row's results never depend on the
/// rows beside it); on the f32 path within the order of f32 sums. A refused input leaves the
/// cache untouched.
#[test]
fn a_prefill_in_passes_equals_one_pass() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    // 20 tokens: passes of 3 rows end in a pass of 2.
    let tokens: Vec<u32> = (0..20).map(|i| (i * 37 + 11) % 257).collect();
    let gpu = LoadOptions::with_weights(WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::default(),
    });
    for (device, options, exact) in [
        (
            Device::flex(),
            LoadOptions::with_weights(WeightPath::CpuPacked { threads: 2 }),
            true,
        ),
        (wgpu(), gpu, true),
        (Device::flex(), LoadOptions::default(), false),
    ] {
        // Tiles where an adapter is a card; lavapipe's own choice is the mat-vec form.
        let model = Llama::from_gguf(&g, &device, options)
            .unwrap()
            .with_prefill_tiles(true)
            .unwrap();
        let run = |m: &Llama| {
            let mut cache = m.new_cache(32).unwrap();
            let mut out = m.forward_last(&tokens, &mut cache).unwrap().read().unwrap();
            assert_eq!(cache.len(), tokens.len());
            // The next step reads every cached row.
            out.extend(m.forward(&[42], &mut cache).unwrap().read().unwrap());
            out
        };
        let whole = run(&model);
        let passes = run(&model.with_prefill_rows(3).unwrap());
        // 20 tokens are a long prefill (over `TILES_ABOVE`): on the GPU its products run in
        // tiles, every pass of it, within f32 rounding of the mat-vec form that a forward over
        // every row (a verification's) takes.
        let mut cache = model.new_cache(32).unwrap();
        let rows = model.forward(&tokens, &mut cache).unwrap().read().unwrap();
        let vocab = model.config().vocab_size;
        assert!(tokens.len() > TILES_ABOVE);
        assert!(
            max_diff(&whole[..vocab], &rows[rows.len() - vocab..]) < TOLERANCE,
            "{:?}: a long prefill against a forward",
            options.weights
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        if matches!(options.weights, WeightPath::GpuBlocks { .. }) {
            assert_ne!(
                bits(&whole[..vocab]),
                bits(&rows[rows.len() - vocab..]),
                "the long prefill did not run in tiles"
            );
        }
        if exact {
            assert_eq!(bits(&passes), bits(&whole), "{:?}", options.weights);
        } else {
            assert!(
                max_diff(&passes, &whole) < TOLERANCE,
                "{:?}",
                options.weights
            );
        }
        // Past the cache: refused before the first pass, the cache as it was.
        let chunked = model.with_prefill_rows(3).unwrap();
        let mut cache = chunked.new_cache(16).unwrap();
        assert!(chunked.forward_last(&tokens, &mut cache).is_err());
        assert_eq!(cache.len(), 0);
    }
    assert!(
        Llama::from_gguf(&g, &Device::flex(), LoadOptions::default())
            .unwrap()
            .with_prefill_rows(0)
            .is_err()
    );
}

/// A vocabulary-limited model on wgpu's blocks masks the output head alone: with a limit below
/// the width of q | k | v (128 outputs in the tiny model), the logits below it are the full
/// model's, bit for bit, and the rest −inf, in a forward and in a long prefill.
#[test]
fn a_vocab_limit_masks_only_the_output_head_on_wgpu() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let options = LoadOptions::with_weights(WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::default(),
    });
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &wgpu(), options)
        .unwrap()
        .with_prefill_tiles(true)
        .unwrap();
    let limit = 100;
    let limited = model.with_vocab_limit(limit).unwrap();
    let vocab = model.config().vocab_size;
    for n in [5, TILES_ABOVE + 3] {
        let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 29 + 3) % 257).collect();
        let run = |m: &Llama| {
            let mut cache = m.new_cache(32).unwrap();
            let mut out = m.forward_last(&tokens, &mut cache).unwrap().read().unwrap();
            out.extend(m.forward(&[42, 7], &mut cache).unwrap().read().unwrap());
            out
        };
        let (full, part) = (run(&model), run(&limited));
        for (i, (f, p)) in full.iter().zip(&part).enumerate() {
            if i % vocab < limit {
                assert_eq!(f.to_bits(), p.to_bits(), "{n} tokens: logit {i}");
            } else {
                assert_eq!(*p, f32::NEG_INFINITY, "{n} tokens: logit {i}");
            }
        }
    }
}

/// Token trees on wgpu, GGUF blocks and f32: the tree mask and tree positions give each row the
/// chain's logits over its path (to within the order of f32 sums), grown in two calls too, and
/// a kept path goes on as the chain does.
#[test]
fn a_tree_row_matches_the_chain_over_its_path_on_wgpu() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let tokens: Vec<u32> = (0..13).map(|i| 40 + 7 * i).collect();
    for options in [
        LoadOptions::with_weights(WeightPath::GpuBlocks {
            subgroups: None,
            kv: KvType::default(),
        }),
        LoadOptions::default(),
    ] {
        let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &wgpu(), options).unwrap();
        tree::check(&model, &[1, 2, 3, 4, 5, 6, 7], &tokens, Some(TOLERANCE));
    }
}

/// The tokens and seed of the cross-platform fixture: the browser test (crates/web) runs the
/// same tiny model on WebGPU and compares with these flex logits.
const FIXTURE_SEED: u64 = 7;
const FIXTURE_TOKENS: [u32; 8] = [72, 101, 108, 108, 111, 32, 119, 111];

/// The committed fixtures equal what flex computes now (so the browser tests can never compare
/// against stale numbers): the f32 tiny model and its quantized twin. `MARS_WRITE_FIXTURES=1`
/// rewrites them.
#[test]
fn browser_fixture_matches_flex() {
    check_fixture("tiny_logits.json", &tiny_gguf(FIXTURE_SEED).unwrap());
}

#[test]
fn quantized_browser_fixture_matches_flex() {
    check_fixture(
        "tiny_q_logits.json",
        &tiny_gguf_quantized(FIXTURE_SEED).unwrap(),
    );
}

fn check_fixture(name: &str, bytes: &[u8]) {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let cpu = logits(&Device::flex(), bytes, &FIXTURE_TOKENS);
    if std::env::var_os("MARS_WRITE_FIXTURES").is_some() {
        let json = serde_json::json!({
            "seed": FIXTURE_SEED,
            "tokens": FIXTURE_TOKENS,
            "prefill": 6,
            "logits": cpu,
        });
        std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    }
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let stored: Vec<f32> = serde_json::from_value(fixture["logits"].clone()).unwrap();
    assert_eq!(stored.len(), cpu.len());
    let worst = stored
        .iter()
        .zip(&cpu)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < TOLERANCE, "fixture is stale: {worst}");
}

/// Models that do not fit are refused before allocation, naming what and both sizes.
#[test]
fn too_big_for_the_device_is_refused_up_front() {
    let bytes = tiny_gguf(1).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let c = tiny_config();
    let embedding = 4 * (c.vocab_size * c.d_model) as u64;
    let err = Llama::from_gguf(
        &g,
        &Device::flex(),
        LoadOptions {
            weights: WeightPath::F32,
            limits: DeviceLimits {
                max_buffer_bytes: Some(embedding - 1),
                max_total_bytes: None,
            },
            context: None,
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the model needs {embedding} bytes for the embedding matrix, the device allows {}",
            embedding - 1
        )
    );
    let err = Llama::from_gguf(
        &g,
        &Device::flex(),
        LoadOptions {
            weights: WeightPath::F32,
            limits: DeviceLimits {
                max_buffer_bytes: Some(embedding),
                max_total_bytes: Some(c.weight_bytes()),
            },
            context: None,
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("the weights in f32"), "{err}");
    // Exactly enough is enough: the weights, the tables, and a run over the whole context.
    let within = |context: Option<usize>, total: u64| LoadOptions {
        weights: WeightPath::F32,
        limits: DeviceLimits {
            max_buffer_bytes: Some(embedding),
            max_total_bytes: Some(total),
        },
        context,
    };
    let needs = Llama::memory_needs(&g, within(None, 0)).unwrap();
    let rope = 4 * (c.context_length * c.head_dim) as u64;
    let kv = c.kv_bytes_per_token(4) * c.context_length as u64;
    assert_eq!(
        (needs.weights, needs.tables, needs.kv_cache, needs.context),
        (c.weight_bytes(), rope, kv, c.context_length)
    );
    assert!(needs.steps > 0 && needs.total() == c.weight_bytes() + rope + kv + needs.steps);
    Llama::from_gguf(&g, &Device::flex(), within(None, needs.total())).unwrap();
    let err = Llama::from_gguf(&g, &Device::flex(), within(None, needs.total() - 1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("a context of {} positions", c.context_length)),
        "{err}"
    );
    // A shorter context asks for less (tables, cache and steps scale with it) and bounds
    // every cache: what did not fit the whole context fits a quarter of it.
    let quarter = c.context_length / 4;
    let small = Llama::memory_needs(&g, within(Some(quarter), 0)).unwrap();
    assert_eq!(small.context, quarter);
    assert!(small.kv_cache * 4 == kv && small.tables * 4 == rope && small.steps < needs.steps);
    let model = Llama::from_gguf(
        &g,
        &Device::flex(),
        within(Some(quarter), needs.total() - 1),
    )
    .unwrap();
    assert_eq!(model.config().context_length, quarter);
    assert!(model.new_cache(quarter + 1).is_err());
    // Never above the file's, never 0.
    let beyond = Llama::memory_needs(&g, within(Some(4 * c.context_length), 0)).unwrap();
    assert_eq!(beyond.context, c.context_length);
    assert!(Llama::from_gguf(&g, &Device::flex(), within(Some(0), u64::MAX)).is_err());
}

/// A file behind `ReadAt` (as the page's `Blob` is), recording every read's length.
struct Source {
    bytes: Vec<u8>,
    reads: std::cell::RefCell<Vec<usize>>,
}

impl mars_formats::ReadAt for Source {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> mars_formats::Result<()> {
        self.reads.borrow_mut().push(buf.len());
        let start = usize::try_from(offset).unwrap();
        buf.copy_from_slice(&self.bytes[start..start + buf.len()]);
        Ok(())
    }
}

fn run(model: &Llama, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(32).unwrap();
    model.forward(tokens, &mut cache).unwrap().read().unwrap()
}

/// The browser's load: the file read a slice at a time (header, then each tensor once, as it
/// is uploaded) gives the very model a file in memory gives, on wgpu blocks and on the CPU's
/// packed path; no tensor is read twice and no read is larger than the largest tensor.
#[test]
fn a_model_read_a_slice_at_a_time_equals_one_held_in_memory() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let tokens = [72, 101, 108, 108, 111, 32, 119, 111];
    let whole = Gguf::parse(&bytes).unwrap();
    let data: usize = whole.tensors.iter().map(|t| t.n_bytes as usize).sum();
    let largest = whole
        .tensors
        .iter()
        .map(|t| t.n_bytes as usize)
        .max()
        .unwrap();
    for (device, options) in [
        (
            wgpu(),
            LoadOptions::with_weights(WeightPath::GpuBlocks {
                subgroups: None,
                kv: KvType::default(),
            }),
        ),
        (
            Device::flex(),
            LoadOptions::with_weights(WeightPath::CpuPacked { threads: 2 }),
        ),
    ] {
        let expected = run(
            &Llama::from_gguf(&whole, &device, options).unwrap(),
            &tokens,
        );
        let source = Source {
            bytes: bytes.clone(),
            reads: Default::default(),
        };
        let g = Gguf::parse_from(&source).unwrap();
        let header_reads = source.reads.borrow().len();
        let model = Llama::from_gguf(&g, &device, options).unwrap();
        assert_eq!(run(&model, &tokens), expected, "{options:?}");
        let reads = source.reads.borrow();
        let tensor_reads = &reads[header_reads..];
        assert!(tensor_reads.iter().all(|&n| n <= largest), "{reads:?}");
        assert_eq!(tensor_reads.iter().sum::<usize>(), data, "{options:?}");
    }
}

/// A copy of the tiny quantized file with one tensor dropped or reshaped.
fn edited(drop: &str, reshape: Option<(&str, Vec<u64>)>) -> Vec<u8> {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let mut w = mars_formats::GgufWriter::new();
    for (k, v) in &g.metadata {
        w.meta(k.clone(), v.clone());
    }
    for t in g.tensors.iter().filter(|t| t.name != drop) {
        let dims = match &reshape {
            Some((name, dims)) if *name == t.name => dims.clone(),
            _ => t.dims.clone(),
        };
        let n: u64 = dims.iter().product();
        let len = (n / t.dtype.block_size() * t.dtype.type_size()) as usize;
        let data = g.tensor_bytes(t).unwrap();
        w.tensor(t.name.clone(), &dims, t.dtype, data[..len].to_vec())
            .unwrap();
    }
    w.to_bytes()
}

/// What a download's first bytes can tell: the header alone passes the checks the load makes
/// before reading data, and refuses, by name, a missing or mis-shaped tensor and a block row
/// larger than the adapter binds (the page stops the download on these).
#[test]
fn a_header_alone_is_checked_as_the_load_checks_it() {
    let blocks = |limit: Option<u64>| LoadOptions {
        weights: WeightPath::GpuBlocks {
            subgroups: None,
            kv: KvType::default(),
        },
        limits: DeviceLimits {
            max_buffer_bytes: limit,
            max_total_bytes: None,
        },
        context: None,
    };
    let bytes = tiny_gguf_quantized(7).unwrap();
    let whole = Gguf::parse(&bytes).unwrap();
    let header_len = bytes.len()
        - whole
            .tensors
            .iter()
            .map(|t| t.n_bytes as usize)
            .sum::<usize>();
    let g = Gguf::parse_header(&bytes[..header_len], bytes.len() as u64).unwrap();
    assert_eq!(Llama::check_gguf(&g, blocks(None)).unwrap(), tiny_config());
    // The widest block row as the GPU holds it (the down projection's, d_ff values, or the
    // others', d_model): Q8_0's and Q5_0's rearranged into runs of 8 blocks, where a shorter
    // last run takes a few bytes more than the file's (`WeightType::gpu_row_bytes`).
    let row = |t: &mars_formats::TensorInfo| {
        use mars_formats::GgmlType;
        use mars_kernels::WeightType;
        let ty = match t.dtype {
            GgmlType::Q8_0 => WeightType::Q8_0,
            GgmlType::Q4_1 => WeightType::Q4_1,
            GgmlType::Q5_0 => WeightType::Q5_0,
            GgmlType::F16 => WeightType::F16,
            other => panic!("the tiny quantized model has no {other:?} matrix"),
        };
        ty.gpu_bytes(t.n_bytes, t.dims[0]) / t.dims[1]
    };
    let widest = whole
        .tensors
        .iter()
        .filter(|t| t.dims.len() == 2)
        .max_by_key(|t| row(t))
        .unwrap();
    let needed = row(widest);
    Llama::check_gguf(&g, blocks(Some(needed + 8))).unwrap();
    let err = Llama::check_gguf(&g, blocks(Some(needed + 7))).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("a row of") && message.contains(&needed.to_string()),
        "{message}"
    );
    assert!(matches!(
        err,
        mars_model::ModelError::TooBigForDevice { .. }
    ));

    let missing = edited("blk.1.ffn_up.weight", None);
    let g = Gguf::parse_header(&missing, missing.len() as u64).unwrap();
    let err = Llama::check_gguf(&g, blocks(None)).unwrap_err().to_string();
    assert!(err.contains("blk.1.ffn_up.weight"), "{err}");

    let c = tiny_config();
    let wrong = vec![c.d_model as u64, c.d_ff as u64 - 32];
    let reshaped = edited("", Some(("blk.0.ffn_gate.weight", wrong)));
    let g = Gguf::parse_header(&reshaped, reshaped.len() as u64).unwrap();
    match Llama::check_gguf(&g, blocks(None)).unwrap_err() {
        mars_model::ModelError::TensorShape { name, .. } => {
            assert_eq!(name, "blk.0.ffn_gate.weight");
        }
        other => panic!("{other}"),
    }
}

/// A tuning's choice at each row count: the form of least cost, or the group's own form where
/// that least is within `KEEP_MARGIN` of its cost or 0 (and only then).
fn assert_choice(t: &mars_model::GroupTiming) {
    type Cost = fn(&mars_model::FormTime) -> f64;
    let (one, pass): (Cost, Cost) = (|f| f.one_row_ms, |f| f.pass_ms);
    for (chosen, own, cost) in [
        (t.best_one_row().unwrap(), t.shape.form.one_row(), one),
        (t.best_pass().unwrap(), t.shape.form.pass_form(), pass),
    ] {
        let agreeing = || t.times.iter().filter(|f| f.agrees);
        let least = agreeing().map(cost).fold(f64::INFINITY, f64::min);
        match agreeing().find(|f| f.form.one_row() == own).map(cost) {
            Some(o) if least <= 0.0 || least >= o * (1.0 - mars_model::KEEP_MARGIN) => {
                assert_eq!(chosen.form.one_row(), own, "{t:?}");
            }
            _ => assert_eq!(cost(&chosen), least, "{t:?}"),
        }
    }
}

/// Every form a matrix group can take on wgpu's blocks (what `mars tune` times and chooses
/// between) keeps the forward's contract: the logits within f32 rounding of the rules' forms,
/// and each row's bits the same in a pass of five rows as in a pass of its own (decoding and
/// verification agree). Timing covers each shape once, in each of its forms, and the choice is
/// the least cost unless the group's own form is within `KEEP_MARGIN` of it; a form a group
/// cannot take is refused by name.
#[test]
fn every_form_a_group_can_take_keeps_the_contract() {
    let bytes = tiny_gguf_quantized(7).unwrap();
    let options = LoadOptions::with_weights(WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::default(),
    });
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &wgpu(), options).unwrap();
    let shapes = model.group_forms();
    let layers = model.config().n_layers;
    assert_eq!(
        shapes.iter().map(|s| s.groups).sum::<usize>(),
        4 * layers + 1,
        "{shapes:?}"
    );
    let timings = pollster::block_on(model.time_forms(5, 1.0, &[], 0)).unwrap();
    assert_eq!(timings.len(), shapes.len());
    let tokens: Vec<u32> = (0..5).map(|i| (i * 41 + 17) % 257).collect();
    let rule = run(&model, &tokens);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for t in &timings {
        // Quarter teams with one and four outputs at least; whole teams but for a SwiGLU; each
        // with f32 and both 8-bit forms' activations (the tiny model's types are all integer
        // blocks).
        let swiglu = t.shape.role == "gate+up";
        assert_eq!(t.times.len(), if swiglu { 6 } else { 12 }, "{t:?}");
        // The form that quantizes its own row passes as the 8-bit form of its team and fan,
        // whose pass time it takes.
        for own in t
            .times
            .iter()
            .filter(|f| f.form.acts == mars_model::Acts::Q8Own)
        {
            let q8 = t.times.iter().find(|f| {
                f.form
                    == mars_model::Form {
                        acts: mars_model::Acts::Q8,
                        ..own.form
                    }
            });
            assert_eq!(q8.map(|f| f.pass_ms), Some(own.pass_ms), "{t:?}");
        }
        // Every group but the head meets a prefill: the mat-vec form and f32 tiles (the tall
        // ones too where the device's workgroup memory holds them), all agreeing (no matrix
        // units asked for), the chosen form the fastest of them.
        if t.shape.role == "head" {
            assert!(t.prefill.is_empty(), "{t:?}");
        } else {
            use mars_model::TileForm;
            let forms: Vec<_> = t.prefill.iter().map(|p| p.form.prefill).collect();
            assert_eq!(forms[..2], [None, Some(TileForm::Vectors)], "{t:?}");
            assert!(
                forms[2..].is_empty() || forms[2..] == [Some(TileForm::TallVectors)],
                "{t:?}"
            );
            assert!(t.prefill.iter().all(|p| p.agrees && p.ms > 0.0), "{t:?}");
            let fastest = t.best_prefill().unwrap();
            assert!(t.prefill.iter().all(|p| fastest.ms <= p.ms), "{t:?}");
            assert_eq!(t.chosen(), Some(fastest.form));
        }
        // The one-row form and the pass form each the fastest at their rows (or the group's own).
        assert_choice(t);
        let (one, pass) = (t.best_one_row().unwrap(), t.best_pass().unwrap());
        let best = t.best().unwrap();
        assert_eq!(
            (best.one_row(), best.pass_form()),
            (one.form.one_row(), pass.form.one_row())
        );
        each_form_keeps_the_contract(&model, t, &tokens, &rule);
    }
    // A form with passes of their own: one-row steps take the one-row form's bits, passes of
    // more rows the pass form's, every row of them as in that form alone.
    let one_row = mars_model::MatVec {
        team: mars_model::Team::Quarter,
        fan: mars_model::Fan::One,
        acts: mars_model::Acts::F32,
    };
    let passes = mars_model::MatVec {
        team: mars_model::Team::Quarter,
        fan: mars_model::Fan::Four,
        acts: mars_model::Acts::Q8,
    };
    let alone = |m: mars_model::MatVec, pass: Option<mars_model::MatVec>| {
        model
            .with_forms(&|s| {
                let form = shapes.iter().find(|g| g.shape == s)?.form;
                Some(mars_model::Form {
                    team: m.team,
                    fan: m.fan,
                    acts: m.acts,
                    pass,
                    ..form
                })
            })
            .unwrap()
    };
    let (split, in_one, in_pass) = (
        alone(one_row, Some(passes)),
        alone(one_row, None),
        alone(passes, None),
    );
    assert!(
        split
            .group_forms()
            .iter()
            .all(|g| g.form.pass == Some(passes))
    );
    assert!(
        split.group_forms()[0]
            .form
            .name()
            .ends_with(";quarter/4/q8")
    );
    let pass = run(&split, &tokens);
    assert_eq!(bits(&pass), bits(&run(&in_pass, &tokens)));
    assert!(max_diff(&pass, &rule) < Q8_TOLERANCE);
    let (mut cache, mut one_cache) = (split.new_cache(32).unwrap(), in_one.new_cache(32).unwrap());
    for &id in &tokens {
        let row = split.forward(&[id], &mut cache).unwrap().read().unwrap();
        let want = in_one
            .forward(&[id], &mut one_cache)
            .unwrap()
            .read()
            .unwrap();
        assert_eq!(bits(&row), bits(&want));
    }
    let gate_up = shapes.iter().find(|s| s.role == "gate+up").unwrap();
    let whole = mars_model::Form {
        team: mars_model::Team::Whole,
        fan: mars_model::Fan::One,
        acts: mars_model::Acts::F32,
        pass: None,
        prefill: None,
        split: true,
    };
    let err = model
        .with_forms(&|s| (s == gate_up.shape).then_some(whole))
        .unwrap_err();
    assert!(err.to_string().contains("whole/1/f32/matvec"), "{err}");
    assert!(pollster::block_on(model.time_forms(5, f64::NAN, &[], 0)).is_err());
    // The eviction reaches the timing (timed with it: gpu_layer.rs); one that is not whole
    // vec4s is refused by name, before anything is timed.
    let err = pollster::block_on(model.time_forms(5, 1.0, &[], 10)).unwrap_err();
    assert!(err.to_string().contains("vec4s"), "{err}");
}

/// Each of `t`'s forms (all agreeing with the group's own, all timed) on `model`'s group of that
/// shape: logits within the bound of `rule` (the model in its own forms) over `tokens` in one
/// pass, and each row after the same prefix in a one-row step the pass's bits.
fn each_form_keeps_the_contract(
    model: &Llama,
    t: &mars_model::GroupTiming,
    tokens: &[u32],
    rule: &[f32],
) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let vocab = model.config().vocab_size;
    // The bounds are the legacy tiny model's, whose logits reach ~9; rounding moves a logit in
    // proportion to the products behind it, so a model of larger logits (the K-quant model's
    // reach ~20: its 8-bit head moved them by 0.11) gets the bounds in proportion.
    let largest = (rule.iter().fold(0f32, |m, x| m.max(x.abs())) / 9.0).max(1.0);
    for f in &t.times {
        assert!(f.agrees && f.one_row_ms > 0.0 && f.pass_ms > 0.0, "{t:?}");
        let formed = model
            .with_forms(&|s| (s == t.shape.shape).then_some(f.form))
            .unwrap();
        let now = formed.group_forms();
        let mine = now.iter().find(|s| s.shape == t.shape.shape).unwrap();
        assert_eq!(mine.form, f.form);
        let pass = run(&formed, tokens);
        let tolerance = if f.form.acts.is_q8() {
            Q8_TOLERANCE
        } else {
            TOLERANCE
        };
        assert!(
            max_diff(&pass, rule) < tolerance * largest,
            "{} in {}",
            t.shape.role,
            f.form.name()
        );
        let mut cache = formed.new_cache(32).unwrap();
        for (i, &id) in tokens.iter().enumerate() {
            let row = formed.forward(&[id], &mut cache).unwrap().read().unwrap();
            assert_eq!(
                bits(&row),
                bits(&pass[i * vocab..(i + 1) * vocab]),
                "{} in {}: row {i}",
                t.shape.role,
                f.form.name()
            );
        }
    }
}

/// A model in Q4_K_M's types in every form its groups can take: lane teams where a group is
/// all Q4_K / Q6_K, wide teams where it is all of one of them, each also with the whole
/// workgroup on an output but in the SwiGLU (whose gate and up meet inside a workgroup), with
/// one and four outputs a team, on f32 and (but with lane teams' loads) 8-bit activations; each
/// keeps the contract ([`each_form_keeps_the_contract`]). Its prefill forms include the matrix
/// units' where the adapter has none (as a driver may refuse a form its adapter lists): their
/// kernels refused, they count as disagreeing, never timed nor chosen, and the tuning goes on
/// through the other forms to its end, the model in the chosen forms then running as before.
#[test]
fn a_k_quant_model_keeps_the_contract_in_every_form() {
    use mars_model::{Team, TileForm, UnitShape};
    // The units of the adapter the tests' device was opened on.
    let adapter_units = &opened().3;
    let (units, refused) = match adapter_units.is_empty() {
        true => (vec![UnitShape::CARD], true),
        false => (adapter_units.clone(), false),
    };
    let bytes = tiny_gguf_k_quants(7).unwrap();
    let options = LoadOptions::with_weights(WeightPath::GpuBlocks {
        subgroups: None,
        kv: KvType::default(),
    });
    let model = Llama::from_gguf(&Gguf::parse(&bytes).unwrap(), &wgpu(), options).unwrap();
    let timings = pollster::block_on(model.time_forms(5, 1.0, &units, 0)).unwrap();
    let tokens: Vec<u32> = (0..5).map(|i| (i * 41 + 17) % 257).collect();
    let rule = run(&model, &tokens);
    let on_units = |f: &mars_model::Form| matches!(f.prefill, Some(TileForm::Units(_)));
    let mut unit_rows = 0;
    for t in &timings {
        for p in &t.prefill {
            let refused = refused && on_units(&p.form);
            unit_rows += usize::from(on_units(&p.form));
            assert!(
                if refused {
                    !p.agrees && p.ms.is_nan()
                } else {
                    p.agrees && p.ms > 0.0
                },
                "{t:?}"
            );
        }
        assert!(
            !(refused && t.chosen().is_some_and(|f| on_units(&f))),
            "{t:?}"
        );
    }
    // Split and unsplit, in each group that meets a prefill.
    assert!(unit_rows >= 2, "{timings:?}");
    let tuned = model
        .with_forms(&|s| timings.iter().find(|t| t.shape.shape == s)?.chosen())
        .unwrap();
    // The chosen forms may take 8-bit activations: the bound scaled as the contract's.
    let largest = (rule.iter().fold(0f32, |m, x| m.max(x.abs())) / 9.0).max(1.0);
    let moved = max_diff(&run(&tuned, &tokens), &rule);
    assert!(moved < Q8_TOLERANCE * largest, "{moved}");
    let teams = |t: &mars_model::GroupTiming| {
        let mut teams: Vec<Team> = t.times.iter().map(|f| f.form.team).collect();
        teams.dedup();
        teams
    };
    for t in &timings {
        let want: &[Team] = match t.shape.role {
            "gate+up" => &[Team::Quarter, Team::Lanes, Team::Wide],
            // The second layer's q | k | v holds a Q6_K v among Q4_K: no wide teams.
            "qkv" if t.shape.shape.contains("Q6K") => {
                &[Team::Quarter, Team::Whole, Team::Lanes, Team::WholeLanes]
            }
            _ => &Team::ALL,
        };
        assert_eq!(teams(t), want, "{t:?}");
        each_form_keeps_the_contract(&model, t, &tokens, &rule);
    }
}

/// The choice at hand: the group's own form stays where the fastest is within `KEEP_MARGIN` of
/// it or timed at 0, the fastest takes over where it is faster by more, and a form whose
/// outputs disagreed is never chosen, however fast it timed.
#[test]
fn a_tuning_keeps_the_own_form_unless_another_is_clearly_faster() {
    use mars_model::{Acts, Fan, Form, FormTime, GroupForm, GroupTiming, Team};
    let form = |team, acts| Form {
        team,
        fan: Fan::One,
        acts,
        pass: None,
        prefill: None,
        split: true,
    };
    let (own, wide, q8) = (
        form(Team::Quarter, Acts::F32),
        form(Team::Wide, Acts::F32),
        form(Team::Wide, Acts::Q8),
    );
    let timing = |times: [(Form, bool, f64, f64); 3]| GroupTiming {
        shape: GroupForm {
            role: "o",
            shape: "a shape".into(),
            groups: 1,
            form: own,
        },
        times: times
            .map(|(form, agrees, one_row_ms, pass_ms)| FormTime {
                form,
                agrees,
                one_row_ms,
                pass_ms,
            })
            .to_vec(),
        prefill: Vec::new(),
    };
    // (times, the one-row choice, the pass choice).
    for (times, one, pass) in [
        // Within 5 %: the own form at both row counts.
        (
            [
                (own, true, 1.00, 2.00),
                (wide, true, 0.97, 1.99),
                (q8, true, 0.99, 1.96),
            ],
            own,
            own,
        ),
        // Faster by more: the fastest at each, apart.
        (
            [
                (own, true, 1.00, 2.00),
                (wide, true, 0.90, 1.99),
                (q8, true, 0.99, 1.50),
            ],
            wide,
            q8,
        ),
        // A form that disagreed is never chosen.
        (
            [
                (own, true, 1.00, 2.00),
                (wide, false, 0.10, 0.10),
                (q8, true, 0.99, 1.50),
            ],
            own,
            q8,
        ),
        // A form timed at 0 (shorter than the evictions' spread) measured nothing.
        (
            [
                (own, true, 1.00, 2.00),
                (wide, true, 0.0, 1.99),
                (q8, true, 0.99, 0.0),
            ],
            own,
            own,
        ),
    ] {
        let t = timing(times);
        let (got_one, got_pass) = (t.best_one_row().unwrap(), t.best_pass().unwrap());
        assert_eq!((got_one.form, got_pass.form), (one, pass), "{t:?}");
        // The kept form: the one-row choice with the pass choice apart where it differs.
        let best = t.best().unwrap();
        assert_eq!(
            (best.one_row(), best.pass_form()),
            (one.one_row(), pass.one_row())
        );
    }
}
