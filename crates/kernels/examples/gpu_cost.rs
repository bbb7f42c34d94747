//! The WGSL matmul alone on wgpu (lavapipe without a GPU): milliseconds per call for m = 1, 2,
//! 5, 8, 16 rows on SmolLM2-135M's, Qwen2.5-1.5B's and Qwen2.5-0.5B's shapes, and each m
//! against one row — what a verification pass of m rows costs in the kernel, without the rest of
//! the forward pass; once with the partial sums meeting through workgroup memory and once
//! through subgroup shuffles as wide as the device's smallest subgroup (forced where
//! `Reduce::detect` would not pick it, as on lavapipe).
//!   cargo run --release -p mars-kernels --features gpu --example gpu_cost
//!
//! With arguments `SHAPE M CALLS [FAN]` (SHAPE 0 to 6 in the order below; FAN 1 or 4 outputs a
//! team, else the device's; the subgroup form) it only makes `CALLS` calls of `M` rows after one
//! warm-up call, timing nothing: for counting the shader's instructions under valgrind
//! (tests/bench/bench.sh gpu-instructions divides them by `CALLS + 1`).
//!
//! With the argument `stream [N]` it measures what the GPU itself sustains on the large models'
//! shapes instead (Qwen2.5-7B's and -32B's matrices, and a small one for the cost of a launch):
//! 40 calls enqueued back to back and read once, so neither a launch's host time nor a read
//! sits between them, for 1, 5 and 16 rows, each team and fan (lane teams for Q4_K and Q6_K),
//! each with f32 and 8-bit activations (`Acts`; not in lane teams): milliseconds a call, the
//! weights' GB/s, and m rows against one, then the same with a read of 128 MiB before each call
//! (the tuning's `Evict`: the weights out of the GPU's cache, as a forward meets them, where
//! back to back a matrix that fits the cache is read from it); and first, for each matrix, a
//! plain read of its bytes (`read_through`: coalesced, every word once), the ceiling a kernel reading them reaches on
//! this device through this runtime. Last, the rows reduced over the Qwen vocabulary (151,936
//! logits): the verifier's summary (greedy and drawn) and a top-40 sampler's rows, for 1 and 5
//! rows, in the adapter's chunks against one chunk a row (one workgroup a row, as before the
//! chunks); and attention over an f16 cache at the 0.5B's and the 7B's head shapes, 1 and 5
//! rows after 128, 1,024 and 4,096 positions, in one workgroup a head and split by key blocks,
//! then in a card's shape (split past 256 keys) after RoPE's own launch and with RoPE folded in
//! (`attention`: these rows alone, 10 calls a batch).
//!
//! `MARS_GPU_ROBUST=off` runs it all on a Vulkan device without the driver's bounds checks.
//!
//! With the argument `launch` (and first in `stream`, after its warm-up) it times a launch
//! itself: 2,000 launches of a one-workgroup kernel (a 16-byte read: 3 bindings) and of the
//! 512 × 512 Q4_K product for one row (a one-matrix product's 5 bindings), enqueued back to back
//! and read once — the wall time a launch, the time the caller spends enqueueing one (CubeCL's
//! channel takes 32 tasks a batch and makes the caller wait while its runtime thread is behind),
//! the CPU time a launch of CubeCL's runtime thread (`DS*`, where wgpu records and submits; on
//! lavapipe the shaders run there too) and of every thread (Linux: `/proc/self/task/*`; a
//! waiting caller spins, so this counts it). Enqueueing as slow as the wall time, with the
//! runtime thread busy as long, says the host bounds a launch (the runtime and driver recording
//! it); enqueueing far faster says the device does (a launch's start and the barrier before
//! it): which of the two a forward of ~200 launches needs cut.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use cubecl::wgpu::WgpuDevice;
use mars_kernels::gpu::{
    Acts, Attention, Draw, EVICT_BYTES, Epilogue, Evict, Fan, GpuMatrix, MatrixGroup, ReadThrough,
    Reduce, Rope, Rows, SUMMARY_WORDS, Step, StepBuffer, Summary, Team, TopRows, direct,
    read_blocking, read_through, time_group, upload_f32,
};
use mars_kernels::{Heads, KvType, QMatrix, WeightType};

/// How many shapes `main` knows (the largest SHAPE argument is one less).
const SHAPES: usize = 7;

fn main() {
    // `MARS_GPU_ROBUST=off`: the device without the driver's bounds checks, as the engine
    // opens it under that switch, so that the stream table can be taken both ways.
    #[cfg(any(windows, target_os = "linux", target_os = "android"))]
    let setup = pollster::block_on(mars_kernels::gpu::setup_without_robustness()).unwrap();
    #[cfg(not(any(windows, target_os = "linux", target_os = "android")))]
    let setup: Option<cubecl::wgpu::WgpuSetup> = None;
    let robustness = if setup.is_some() {
        "off (MARS_GPU_ROBUST=off)"
    } else {
        "wgpu's"
    };
    println!("device robustness: {robustness}");
    let (device, setup) = match setup {
        Some(setup) => (
            cubecl::wgpu::try_init_device(setup.clone(), Default::default()).unwrap(),
            setup,
        ),
        None => {
            let device = WgpuDevice::default();
            let setup = cubecl::wgpu::init_setup::<cubecl::wgpu::AutoGraphicsApi>(
                &device,
                Default::default(),
            );
            (device, setup)
        }
    };
    let client = cubecl::Device::Wgpu(device).client();
    // Launches as the engine makes them: direct unless MARS_GPU_LAUNCH=cubecl, submitted every
    // 32 (the engine's on a card).
    if direct::wanted().unwrap() {
        direct::register(&client, setup.device.clone(), setup.queue.clone(), 32);
    }
    println!(
        "launches: {}",
        if direct::is_direct(&client) {
            "direct (gpu::direct)"
        } else {
            "CubeCL's"
        }
    );
    let max = client.properties().memory.max_page_size;
    let lanes = client.properties().hardware.plane_size_min.min(16);
    println!(
        "detected: {:?}; subgroups of at least {lanes}",
        Reduce::detect(&client)
    );
    let forms = [Reduce::Workgroup, Reduce::Subgroup { lanes }];
    if std::env::args().nth(1).as_deref() == Some("attention") {
        // The stream table's attention rows alone.
        attention(&client, 10);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("launch") {
        launches(&client, max, &setup);
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("stream") {
        // `stream N`: the first N shapes only (a rehearsal on lavapipe takes the small one).
        let n = std::env::args().nth(2).and_then(|n| n.parse().ok());
        stream(&client, max, n.unwrap_or(usize::MAX), &setup);
        return;
    }
    let args: Vec<usize> = match std::env::args().skip(1).map(|a| a.parse()).collect() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("usage: gpu_cost [SHAPE M CALLS] (whole numbers): {e}");
            std::process::exit(2);
        }
    };
    if !matches!(args.len(), 0 | 3 | 4)
        || args.first().is_some_and(|&shape| shape >= SHAPES)
        || args.get(1).is_some_and(|&m| !(1..=16).contains(&m))
        || args.get(3).is_some_and(|&f| !matches!(f, 1 | 4))
    {
        eprintln!("usage: gpu_cost [SHAPE M CALLS [FAN]] with SHAPE 0-6, M 1-16 and FAN 1 or 4");
        std::process::exit(2);
    }
    // (name, type, out, in)
    let shapes = [
        ("SmolLM2 FFN up, Q4_1", WeightType::Q4_1, 1536, 576),
        ("SmolLM2 head, Q8_0", WeightType::Q8_0, 49_152, 576),
        ("Qwen2.5-1.5B FFN up, Q4_K", WeightType::Q4K, 8960, 1536),
        ("Qwen2.5-0.5B FFN up, Q5_0", WeightType::Q5_0, 4864, 896),
        ("Qwen2.5-0.5B head, Q8_0", WeightType::Q8_0, 151_936, 896),
        ("Qwen2.5-0.5B FFN down, Q4_K", WeightType::Q4K, 896, 4864),
        ("Qwen2.5-0.5B FFN down, Q6_K", WeightType::Q6K, 896, 4864),
    ];
    for (index, (name, ty, out, cols)) in shapes.into_iter().enumerate() {
        if let [shape, ..] = args[..]
            && shape != index
        {
            continue;
        }
        let w = matrix(ty, out, cols);
        let mut gw = GpuMatrix::upload(&client, ty, out, cols, w.blocks(), max).unwrap();
        if let [_, m, calls, ..] = args[..] {
            gw.set_reduce(Reduce::Subgroup { lanes }).unwrap();
            match args.get(3) {
                Some(1) => gw.set_fan(Fan::One),
                Some(_) => gw.set_fan(Fan::Four),
                None => {}
            }
            let x: Vec<u8> = (0..m * cols)
                .flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes())
                .collect();
            let xh = client.create_from_slice(&x);
            let y = client.empty(m * out * 4);
            for _ in 0..=calls {
                gw.matmul(&client, &xh, &y, m).unwrap();
                read_blocking(&client, y.clone()).unwrap();
            }
            println!("{name}: {calls} calls of {m} rows after a warm-up");
            continue;
        }
        for reduce in forms {
            gw.set_reduce(reduce).unwrap();
            let mut one = 0.0;
            let mut line = format!("{name} [{out} x {cols}], {reduce:?}:");
            for m in [1usize, 2, 5, 8, 16] {
                let x: Vec<u8> = (0..m * cols)
                    .flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes())
                    .collect();
                let xh = client.create_from_slice(&x);
                let y = client.empty(m * out * 4);
                // Warm-up (compiles the shader), then the median of 9 timed calls.
                gw.matmul(&client, &xh, &y, m).unwrap();
                read_blocking(&client, y.clone()).unwrap();
                let mut times: Vec<f64> = (0..9)
                    .map(|_| {
                        let t = Instant::now();
                        gw.matmul(&client, &xh, &y, m).unwrap();
                        read_blocking(&client, y.clone()).unwrap();
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                times.sort_by(f64::total_cmp);
                let ms = times[4];
                if m == 1 {
                    one = ms;
                }
                line += &format!("  m={m}: {ms:.2} ms ({:.2}x)", ms / one);
            }
            println!("{line}");
        }
    }
}

/// Blocks of varied bytes with small f16 scales (the values do not matter for speed).
fn matrix(ty: WeightType, out: usize, cols: usize) -> QMatrix {
    let n = out * cols / ty.block_values() * ty.block_bytes();
    let bytes: Vec<u8> = (0..n)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 & 0x3b)
        .collect();
    QMatrix::new(ty, out, cols, bytes).unwrap()
}

/// The `stream` table (see the header).
fn stream(
    client: &cubecl::client::Client,
    max: u64,
    shapes_run: usize,
    setup: &cubecl::wgpu::WgpuSetup,
) {
    const CALLS: usize = 40;
    let shapes = [
        ("small (launch cost), Q4_K", WeightType::Q4K, 512, 512),
        ("7B q, Q4_K", WeightType::Q4K, 3584, 3584),
        ("7B FFN gate, Q4_K", WeightType::Q4K, 18_944, 3584),
        ("7B FFN down, Q6_K", WeightType::Q6K, 3584, 18_944),
        ("7B FFN down, Q4_K", WeightType::Q4K, 3584, 18_944),
        ("32B FFN gate (part), Q4_K", WeightType::Q4K, 13_824, 5120),
        ("32B FFN down, Q4_K", WeightType::Q4K, 5120, 27_648),
    ];
    let lanes = client.properties().hardware.plane_size_min.min(16);
    // A GPU starts slow and raises its clocks under load: a second of the largest matrix first,
    // so the table's first rows are not timed at idle clocks (on an H200 without it, a 7B's q
    // took 0.134 ms a call while the 5× larger gate measured after it took 0.103).
    let (_, ty, out, cols) = shapes[shapes.len().min(shapes_run) - 1];
    let warm =
        GpuMatrix::upload(client, ty, out, cols, matrix(ty, out, cols).blocks(), max).unwrap();
    let xh = client.create_from_slice(&vec![0u8; cols * 4]);
    let y = client.empty(out * 4);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 1.0 {
        for _ in 0..CALLS {
            warm.matmul(client, &xh, &y, 1).unwrap();
        }
        read_blocking(client, y.clone()).unwrap();
    }
    launches(client, max, setup);
    // The same products each after a read of 128 MiB (the tuning's eviction): weights out of
    // the cache, as a forward meets them, where back to back a matrix that fits the cache
    // (a 7B's q: 7 MB) is read from it.
    let evict = Evict::new(client, EVICT_BYTES).unwrap();
    println!(
        "| matrix | team, activations | fan | rows | ms a call | GB/s of weights | vs 1 row | ms, weights cold | GB/s cold |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, ty, out, cols) in shapes.into_iter().take(shapes_run) {
        let w = matrix(ty, out, cols);
        let bytes = w.blocks().len() as f64;
        // The ceiling: the same bytes read once, coalesced (a call uploads its 12-byte
        // parameters, as no matmul call does: a read's time is, if anything, high).
        let read_bytes = w.blocks().len() / 16 * 16;
        let raw = client.create_from_slice(&w.blocks()[..read_bytes]);
        read_blocking(client, read_through(client, &raw, read_bytes).unwrap()).unwrap();
        let ms = median_of_batches(client, CALLS, || {
            read_through(client, &raw, read_bytes).unwrap()
        });
        println!(
            "| {name} [{out} x {cols}] | read alone | - | - | {ms:.3} | {:.1} | - | - | - |",
            read_bytes as f64 / ms / 1e6
        );
        // Lane and wide teams (in 16 threads and whole workgroups) where the type has them
        // (Q4_K, Q6_K).
        let teams: Vec<Team> = Team::ALL
            .into_iter()
            .filter(|t| !t.lanes() || Team::lanes_for(&[ty.into()]))
            .filter(|t| !t.wide() || Team::wide_for(&[ty.into()]))
            .collect();
        // Each team with f32 activations, and with 8-bit ones but with lane teams' loads.
        let forms = teams.iter().flat_map(|&team| {
            let q8 = (!team.lanes()).then_some((team, Acts::Q8));
            [Some((team, Acts::F32)), q8].into_iter().flatten()
        });
        for (team, acts) in forms {
            for fan in [Fan::One, Fan::Four] {
                let mut gw = GpuMatrix::upload(client, ty, out, cols, w.blocks(), max).unwrap();
                gw.set_acts(acts);
                if lanes >= 2 {
                    gw.set_reduce(Reduce::Subgroup { lanes }).unwrap();
                }
                gw.set_team(team);
                gw.set_fan(fan);
                let mut one = 0.0;
                // The group made once: a call then uploads nothing.
                let group =
                    MatrixGroup::new(client, vec![gw.clone()], Epilogue::Store, None, Rows::All)
                        .unwrap();
                for m in [1usize, 5, 16] {
                    // CALLS back to back, read once, the median of three batches.
                    let time = |evict| {
                        pollster::block_on(time_group(
                            client,
                            &group,
                            (m, false),
                            f64::INFINITY,
                            evict,
                        ))
                        .unwrap()
                    };
                    let ms = time(None);
                    let cold = time(Some(&evict));
                    if m == 1 {
                        one = ms;
                    }
                    // A product shorter than the reads' spread can time at 0: no rate then.
                    let cold_rate = if cold > 0.0 {
                        format!("{:.1}", bytes / cold / 1e6)
                    } else {
                        "-".into()
                    };
                    println!(
                        "| {name} [{out} x {cols}] | {team:?}, {} | {fan:?} | {m} | {ms:.3} | {:.1} | {:.2}x | {cold:.3} | {cold_rate} |",
                        acts.name(),
                        bytes / ms / 1e6,
                        ms / one,
                    );
                }
            }
        }
    }
    rows_reduced(client, CALLS);
    attention(client, CALLS);
}

/// The `stream` table's attention rows (see the header).
fn attention(client: &cubecl::client::Client, calls: usize) {
    println!();
    println!(
        "| attention, f16 cache | positions | rows | ms a call, one workgroup a head | split by 256 keys | card's shape: RoPE launch + attention | RoPE folded in |"
    );
    println!("|---|---|---|---|---|---|---|");
    let shapes = [
        ("0.5B (14 / 2 heads of 64)", 14, 2, 64),
        ("7B (28 / 4 heads of 128)", 28, 4, 128),
    ];
    for (name, heads, kv_heads, head_dim) in shapes {
        let shape = Heads {
            heads,
            kv_heads,
            head_dim,
        };
        let attn = Attention::new(client, (shape, KvType::F16)).unwrap();
        // A RoPE table over every position timed (the angles do not matter for speed).
        let half = head_dim / 2;
        let angles: Vec<f32> = (0..(4096 + 5) * half).map(|i| i as f32 * 1e-3).collect();
        let (cos, sin): (Vec<f32>, Vec<f32>) = angles.iter().map(|a| (a.cos(), a.sin())).unzip();
        let rope = Rope::new(client, (shape, KvType::F16), (&cos, &sin), true, 1e-6).unwrap();
        let roped = attn.with_rope_as(client, &rope, true).unwrap();
        for context in [128usize, 1024, 4096] {
            for rows in [1usize, 5] {
                let capacity = context + rows;
                // f16 pairs of small varied values (the values do not matter for speed).
                let words = shape.cache_bytes(capacity, KvType::F16).unwrap() / 4;
                let kv: Vec<u8> = (0..words)
                    .flat_map(|i| {
                        (0x2c00_2c00u32 ^ ((i as u32 * 2_654_435_761) >> 22 & 0x3ff_03ff))
                            .to_le_bytes()
                    })
                    .collect();
                let kv = client.create_from_slice(&kv);
                let q: Vec<u8> = (0..rows * heads * head_dim)
                    .flat_map(|i| ((i % 13) as f32 * 0.05).to_le_bytes())
                    .collect();
                let q = client.create_from_slice(&q);
                let step = Step::chain(&vec![0; rows], context, rows, 1)
                    .and_then(|s| s.with_capacity(capacity))
                    .unwrap();
                let step = StepBuffer::new(client, &step);
                let ms = [false, true].map(|split| {
                    median_of_batches(client, calls, || {
                        let out = client.empty(rows * heads * head_dim * 4);
                        attn.run_as(client, (&q, &kv, &out), &step, split).unwrap();
                        out
                    })
                });
                // The q | k | v rows RoPE starts from, and a card's choice of shape.
                let qkv: Vec<u8> = (0..rows * (heads + 2 * kv_heads) * head_dim)
                    .flat_map(|i| ((i % 11) as f32 * 0.05).to_le_bytes())
                    .collect();
                let qkv = client.create_from_slice(&qkv);
                let split = context > 256;
                let apart = median_of_batches(client, calls, || {
                    let (roped_q, out) = (
                        client.empty(rows * heads * head_dim * 4),
                        client.empty(rows * heads * head_dim * 4),
                    );
                    rope.run(client, &qkv, &roped_q, &kv, &step).unwrap();
                    attn.run_as(client, (&roped_q, &kv, &out), &step, split)
                        .unwrap();
                    out
                });
                let folded = median_of_batches(client, calls, || {
                    let out = client.empty(rows * heads * head_dim * 4);
                    roped
                        .run_roped_as(client, (&qkv, &kv, &out), &step, split)
                        .unwrap();
                    out
                });
                println!(
                    "| {name} | {context} | {rows} | {:.3} | {:.3} | {apart:.3} | {folded:.3} |",
                    ms[0], ms[1]
                );
            }
        }
    }
}

/// The cost of a launch (see the header): a one-workgroup read and a small matrix product,
/// 2,000 launches a batch, the median batch by wall time.
fn launches(client: &cubecl::client::Client, max: u64, setup: &cubecl::wgpu::WgpuSetup) {
    const LAUNCHES: usize = 2000;
    let src = client.create_from_slice(&[0u8; 16]);
    let read = ReadThrough::new(client, 16).unwrap();
    let (ty, out, cols) = (WeightType::Q4K, 512, 512);
    let w = GpuMatrix::upload(client, ty, out, cols, matrix(ty, out, cols).blocks(), max).unwrap();
    let group = MatrixGroup::new(client, vec![w], Epilogue::Store, None, Rows::All).unwrap();
    let x = upload_f32(client, &vec![0.5; cols]);
    let y = upload_f32(client, &vec![0.0; out]);
    let step = StepBuffer::new(client, &Step::chain(&[0], 0, 1, out).unwrap());
    println!();
    println!(
        "| {LAUNCHES} launches, read once | µs a launch | µs enqueueing one | µs CPU a launch, runtime thread | all threads |"
    );
    println!("|---|---|---|---|---|");
    let kinds: [(&str, &dyn Fn() -> cubecl::server::Handle); 2] = [
        ("one workgroup, 3 bindings (16-byte read)", &|| {
            read.run(client, &src).unwrap();
            read.out.clone()
        }),
        ("512 x 512 Q4_K product, 1 row, 5 bindings", &|| {
            group.run(client, &x, &y, &step).unwrap();
            y.clone()
        }),
    ];
    // Direct launches (where the client makes them), then the same through CubeCL's launch.
    let ways = if direct::is_direct(client) {
        vec!["direct", "CubeCL"]
    } else {
        vec!["CubeCL"]
    };
    for way in ways {
        if way == "CubeCL" {
            direct::unregister(client);
        }
        for (name, run) in &kinds {
            launch_rows(client, &format!("{name}, {way}"), run);
        }
    }
    if direct::wanted().unwrap() {
        direct::register(client, setup.device.clone(), setup.queue.clone(), 32);
    }
}

/// [`launches`]'s row for `run`.
fn launch_rows(
    client: &cubecl::client::Client,
    name: &str,
    run: &dyn Fn() -> cubecl::server::Handle,
) {
    const LAUNCHES: usize = 2000;
    {
        // Warm: the pipelines compiled, the memory pools grown.
        for _ in 0..100 {
            run();
        }
        read_blocking(client, run()).unwrap();
        let mut batches: Vec<[f64; 4]> = (0..3)
            .map(|_| {
                let cpu0 = thread_cpu_ns();
                let t = Instant::now();
                let mut last = None;
                for _ in 0..LAUNCHES {
                    last = Some(run());
                }
                let enqueued = t.elapsed().as_secs_f64();
                read_blocking(client, last.unwrap()).unwrap();
                let wall = t.elapsed().as_secs_f64();
                let cpu1 = thread_cpu_ns();
                let (all, runtime) = cpu_delta(&cpu0, &cpu1);
                let per = |s: f64| s * 1e6 / LAUNCHES as f64;
                [per(wall), per(enqueued), per(runtime), per(all)]
            })
            .collect();
        batches.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let [wall, enqueued, runtime, all] = batches[1];
        if all.is_nan() {
            println!("| {name} | {wall:.1} | {enqueued:.1} | not read here | - |");
        } else {
            println!("| {name} | {wall:.1} | {enqueued:.1} | {runtime:.1} | {all:.1} |");
        }
    }
}

/// Each thread's CPU time so far, in nanoseconds: (thread id, whether it is CubeCL's runtime
/// thread, named `DS…`, ns); empty where `/proc/self/task` cannot be read (not Linux).
fn thread_cpu_ns() -> Vec<(String, bool, u64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            let ns = stat.split_whitespace().next()?.parse().ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let id = t.file_name().to_string_lossy().into_owned();
            Some((id, comm.starts_with("DS"), ns))
        })
        .collect()
}

/// The seconds of CPU time all threads took between two readings, and the runtime threads'
/// (threads that started between them count from 0); NaN where nothing was read.
fn cpu_delta(before: &[(String, bool, u64)], after: &[(String, bool, u64)]) -> (f64, f64) {
    if after.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    after
        .iter()
        .fold((0.0, 0.0), |(all, runtime), (id, is_runtime, ns)| {
            let was = before
                .iter()
                .find(|(b, ..)| b == id)
                .map_or(0, |(.., n)| *n);
            let d = ns.saturating_sub(was) as f64 / 1e9;
            (all + d, if *is_runtime { runtime + d } else { runtime })
        })
}

/// `calls` launches of `run` back to back and its last output read once: the median of three
/// such batches, in milliseconds a call.
fn median_of_batches(
    client: &cubecl::client::Client,
    calls: usize,
    mut run: impl FnMut() -> cubecl::server::Handle,
) -> f64 {
    let mut times: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let mut last = None;
            for _ in 0..calls {
                last = Some(run());
            }
            read_blocking(client, last.unwrap()).unwrap();
            t.elapsed().as_secs_f64() * 1e3 / calls as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[1]
}

/// The `stream` table's last rows: the summary and a top-40 over a Qwen row of logits.
fn rows_reduced(client: &cubecl::client::Client, calls: usize) {
    const VOCAB: usize = 151_936;
    println!();
    println!("| rows reduced, {VOCAB} logits | chunks a row | rows | ms a call |");
    println!("|---|---|---|---|");
    for rows in [1usize, 5] {
        let z: Vec<u8> = (0..rows * VOCAB)
            .flat_map(|i| (((i * 2_654_435_761) >> 7) as u16 as f32 / 4096.0).to_le_bytes())
            .collect();
        let logits = client.create_from_slice(&z);
        let step = StepBuffer::new(
            client,
            &Step::chain(&vec![0; rows], 0, rows, VOCAB).unwrap(),
        );
        let draw = Draw::new(client, 1.0, 7).unwrap();
        let summaries = [
            Summary::new(client, VOCAB).unwrap(),
            Summary::with_chunk(client, VOCAB, VOCAB.div_ceil(256)).unwrap(),
            Summary::with_chunk(client, VOCAB, VOCAB).unwrap(),
        ];
        for (summary, what) in summaries.iter().zip(["adapter's", "most", "one"]) {
            for (d, name) in [(None, "summary, greedy"), (Some(&draw), "summary, drawn")] {
                let ms = median_of_batches(client, calls, || {
                    let out = client.empty(rows * SUMMARY_WORDS * 4);
                    summary.run(client, &logits, &out, rows, &step, d).unwrap();
                    out
                });
                println!(
                    "| {name} | {} ({what}) | {rows} | {ms:.3} |",
                    summary.chunks()
                );
            }
        }
        let tops = [
            TopRows::new(client, 40, VOCAB, VOCAB, 1.0).unwrap(),
            TopRows::with_chunk(client, (40, VOCAB, VOCAB, 1.0), VOCAB).unwrap(),
        ];
        for (top, what) in tops.iter().zip(["adapter's", "one"]) {
            let ms = median_of_batches(client, calls, || {
                let out = client.empty(rows * top.words() * 4);
                top.run(client, &logits, &out, rows).unwrap();
                out
            });
            println!("| top-40 | {} ({what}) | {rows} | {ms:.3} |", top.chunks());
        }
    }
}
