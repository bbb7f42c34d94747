//! The direct launches (`gpu::direct`) on wgpu (lavapipe where there is no GPU): a product
//! launched directly gives CubeCL's launch's bits; a launch meeting the kernel and the buffers
//! of an earlier one makes no bind group; a step's words go to a kept buffer that the next
//! step takes once the last is dropped, a pass's outputs likewise; a buffer its owner dropped
//! is let go after a submit, its bind groups with it; a profiled launch writes its device time.
//! One test in a process of its own: it switches the client between
//! the two ways of launching, which no other test may see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/gpu.rs"]
mod gpu_common;
use gpu_common::{client, read_f32};

use common::{random_matrix, random_x};
use mars_kernels::gpu::{
    Epilogue, GpuMatrix, MatrixGroup, Rows, Step, StepBuffer, direct, output_buffer, upload_f32,
};
use mars_kernels::{WeightType, gpu_counts};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

#[test]
fn direct_launches_keep_their_bind_groups_and_give_cubecls_bits() {
    let client = client();
    if !direct::is_direct(&client) {
        return eprintln!("MARS_GPU_LAUNCH=cubecl: nothing direct to check");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (out, cols, rows) = (96, 512, 3);
    let w = random_matrix(WeightType::Q4K, out, cols, &mut rng);
    let max = client.properties().memory.max_page_size;
    let w = GpuMatrix::upload(&client, w.ty(), out, cols, w.blocks(), max).unwrap();
    let group = MatrixGroup::new(&client, vec![w], Epilogue::Store, None, Rows::All).unwrap();
    let x = upload_f32(&client, &random_x(rows, cols, &mut rng));
    let y = client.empty(rows * out * 4);
    let step = |client: &cubecl::client::Client| {
        StepBuffer::new(client, &Step::chain(&[1, 2, 3], 0, rows, out).unwrap())
    };

    // The first run makes its bind groups; the same run again makes none.
    let s = step(&client);
    group.run(&client, &x, &y, &s).unwrap();
    let first = read_f32(&client, y.clone());
    let before = gpu_counts();
    group.run(&client, &x, &y, &s).unwrap();
    let again = read_f32(&client, y.clone());
    let after = gpu_counts();
    assert!(after.launches > before.launches, "{before:?} -> {after:?}");
    assert_eq!(
        after.bind_groups, before.bind_groups,
        "{before:?} -> {after:?}"
    );
    assert_eq!(after.fallbacks, 0, "a launch left to CubeCL: {after:?}");
    assert_eq!(first, again);

    // A new step of the same size, the last one dropped: the same kept buffer, so the same
    // bind groups. While a step lives, the next one takes another buffer.
    drop(s);
    let s2 = step(&client);
    let s3 = step(&client);
    group.run(&client, &x, &y, &s2).unwrap();
    assert_eq!(read_f32(&client, y.clone()), first);
    assert_eq!(
        gpu_counts().bind_groups,
        after.bind_groups,
        "the kept step buffer came back"
    );
    group.run(&client, &x, &y, &s3).unwrap();
    assert_eq!(read_f32(&client, y.clone()), first);
    assert!(
        gpu_counts().bind_groups > after.bind_groups,
        "a live step's buffer was given to another"
    );

    // An output dropped by its owner is let go after the next submit, with its bind groups.
    let y2 = client.empty(rows * out * 4);
    group.run(&client, &x, &y2, &s2).unwrap();
    let kept = read_f32(&client, y2.clone());
    assert_eq!(kept, first);
    let held = gpu_counts();
    drop(y2);
    group.run(&client, &x, &y, &s2).unwrap();
    read_f32(&client, y.clone());
    let released = gpu_counts();
    assert!(
        released.released > held.released,
        "{held:?} -> {released:?}"
    );

    // A pass's outputs in kept buffers of their exact sizes: one dropped comes back, so the
    // launches writing it find their bind groups again; one held is not handed out twice.
    let bytes = rows * out * 4;
    let o1 = output_buffer(&client, bytes);
    assert_eq!(o1.size_in_used(), bytes as u64);
    group.run(&client, &x, &o1, &s2).unwrap();
    assert_eq!(read_f32(&client, (*o1).clone()), first);
    let made = gpu_counts().bind_groups;
    drop(o1);
    let o2 = output_buffer(&client, bytes);
    group.run(&client, &x, &o2, &s2).unwrap();
    assert_eq!(read_f32(&client, (*o2).clone()), first);
    assert_eq!(gpu_counts().bind_groups, made, "the kept output came back");
    let o3 = output_buffer(&client, bytes);
    group.run(&client, &x, &o3, &s2).unwrap();
    assert_eq!(read_f32(&client, (*o3).clone()), first);
    assert!(
        gpu_counts().bind_groups > made,
        "a held output was handed out again"
    );

    // The same product through CubeCL's launch: the same bits.
    direct::unregister(&client);
    assert!(!direct::is_direct(&client));
    let y3 = client.empty(rows * out * 4);
    group.run(&client, &x, &y3, &step(&client)).unwrap();
    assert_eq!(
        read_f32(&client, y3),
        first,
        "CubeCL's launch against the direct one"
    );
    // And directly again, registered anew, after CubeCL's launch.
    let client = gpu_common::client();
    assert!(direct::is_direct(&client));
    let y4 = client.empty(rows * out * 4);
    group.run(&client, &x, &y4, &step(&client)).unwrap();
    assert_eq!(read_f32(&client, y4), first);

    // Profiled: a line a launch with its kernel's name and a device time, the same bits.
    let path = std::env::temp_dir().join(format!("mars-direct-{}.log", std::process::id()));
    match direct::profile(&client, &path) {
        Err(e) if e.contains("no timestamps") => {
            return eprintln!("no profile to check: {e}");
        }
        other => other.unwrap(),
    }
    let before = gpu_counts();
    let y5 = client.empty(rows * out * 4);
    group.run(&client, &x, &y5, &step(&client)).unwrap();
    group.run(&client, &x, &y5, &step(&client)).unwrap();
    assert_eq!(read_f32(&client, y5), first);
    let launches = gpu_counts().launches - before.launches;
    let log = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len() as u64, launches, "{log}");
    for line in lines {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cells[2], "matmul_store_direct", "{line}");
        let ns: f64 = cells[1].strip_suffix("ns").unwrap().parse().unwrap();
        assert!(ns.is_finite() && ns >= 0.0, "{line}");
    }
}
