//! Cost of one forward pass by number of new tokens (what a verification step of k + 1 tokens
//! costs relative to one decoding step): `cargo run --release -p mars-model --example step_cost
//! -- MODEL.gguf [ROWS…]` (rows per pass: 1 2 3 5 8 9 16 unless given; `STEP_REPS` passes each, 10
//! unless set — many passes of one row count make a profile of that pass), each after the same
//! `STEP_PROMPT` tokens (64 unless set). The packed CPU path
//! on `STEP_THREADS` threads (default: one per core); `STEP_THREADS=0` runs the f32 reference.
//!
//! `STEP_DEVICE=wgpu` runs the GPU path instead (GGUF blocks on wgpu, f16 cache), each pass
//! followed by its rows' summaries read back, as decoding and verification read them, and says
//! the launches a pass and the time a launch. With `WGPU_NOOP_BACKEND=1` wgpu's no-op backend
//! stands in for a card (`mars_model::open_wgpu`): the card's configuration is launched and
//! nothing runs, so the times are the host's side alone — CubeCL's runtime and wgpu-core
//! recording and submitting the launches — measurable, and profilable (perf, callgrind), on a
//! machine without a GPU (`bench.sh gpu-host`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use mars_formats::Gguf;
use mars_model::{Device, KvType, Llama, LoadOptions, WeightPath, gpu_counts};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: step_cost MODEL.gguf [ROWS…]");
    let mut rows: Vec<usize> = args.map(|a| a.parse().expect("ROWS: 1…16")).collect();
    if rows.is_empty() {
        rows = vec![1, 2, 3, 5, 8, 9, 16];
    }
    let reps: u32 = std::env::var("STEP_REPS").map_or(10, |r| r.parse().expect("STEP_REPS"));
    let bytes = std::fs::read(&path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let threads = std::env::var("STEP_THREADS").map_or_else(
        |_| std::thread::available_parallelism().map_or(1, usize::from),
        |t| t.parse().expect("STEP_THREADS"),
    );
    let gpu = std::env::var("STEP_DEVICE").as_deref() == Ok("wgpu");
    let (device, weights) = if gpu {
        let (device, lanes) = open_wgpu();
        let blocks = WeightPath::GpuBlocks {
            subgroups: lanes,
            kv: KvType::F16,
        };
        (device, blocks)
    } else if threads > 0 {
        (Device::flex(), WeightPath::CpuPacked { threads })
    } else {
        (Device::flex(), WeightPath::F32)
    };
    let model = Llama::from_gguf(&g, &device, LoadOptions::with_weights(weights)).unwrap();
    // A pass and what is read after it: the rows' summaries on the GPU (40 bytes a row), the
    // logits on the CPU.
    let pass = |tokens: &[u32], cache: &mut mars_model::KvCache| {
        let logits = model.forward(tokens, cache).unwrap();
        if gpu {
            pollster::block_on(logits.summaries_async(None)).unwrap();
        } else {
            logits.read().unwrap();
        }
    };
    // `STEP_PROMPT` tokens before the passes (64 unless set): the depth they attend over.
    let depth: usize = std::env::var("STEP_PROMPT").map_or(64, |p| p.parse().expect("STEP_PROMPT"));
    let prompt: Vec<u32> = (0..depth as u32).map(|i| 100 + (i * 7) % 1000).collect();
    let mut cache = model.new_cache(depth + 64).unwrap();
    pass(&prompt, &mut cache);
    for t in rows {
        let tokens: Vec<u32> = (0..t as u32).map(|i| 200 + i).collect();
        // The mean says what a run of passes costs; the fastest pass is steadier on a noisy
        // machine (other load only ever adds time).
        let (mut total, mut fastest) = (0f64, f64::INFINITY);
        let before = gpu_counts();
        for _ in 0..reps {
            let start = Instant::now();
            pass(&tokens, &mut cache);
            let ms = start.elapsed().as_secs_f64() * 1e3;
            (total, fastest) = (total + ms, fastest.min(ms));
            cache.truncate(depth).unwrap();
        }
        let ms = total / f64::from(reps);
        let counts = gpu_counts().since(&before);
        let per_pass = |n: u64| n as f64 / f64::from(reps);
        let launches = per_pass(counts.launches);
        let per_launch = if launches > 0.0 {
            format!(
                "; {launches:.0} launches a pass, {:.1} µs a launch; its direct launches made \
                 {:.1} bind groups, resolved {:.1} buffers, left {:.1} to CubeCL",
                ms * 1e3 / launches,
                per_pass(counts.bind_groups),
                per_pass(counts.resolved),
                per_pass(counts.fallbacks),
            )
        } else {
            String::new()
        };
        println!(
            "{t:>2} tokens: {ms:7.2} ms ({:.2} ms/token), fastest {fastest:7.2} ms{per_launch}",
            ms / t as f64
        );
    }
}

/// The wgpu device as the engine opens it (wgpu's no-op card where `WGPU_NOOP_BACKEND=1`) and
/// the adapter's smallest subgroup where the kernels can use it.
fn open_wgpu() -> (Device, Option<u32>) {
    let (device, setup) = pollster::block_on(mars_model::open_wgpu(None)).unwrap();
    (device, mars_model::subgroup_lanes(&setup.adapter))
}
