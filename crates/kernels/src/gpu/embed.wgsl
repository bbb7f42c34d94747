// out[i, :] = W[ids[i] - row_base, :] dequantized, for the ids this part of W holds
// (row_base ≤ id < row_base + rows); other ids are left for the part that holds them. One
// thread per group of 32 values. The ids are the forward's, in its step buffer (step.rs).

// Every binding is read_write: the runtime sub-allocates buffers from shared pages, and WebGPU
// refuses one buffer bound read-only and read-write in the same dispatch.
@group(0) @binding(0) var<storage, read_write> w0: array<u32>;         // blocks, [rows, row_bytes] + pad
@group(0) @binding(1) var<storage, read_write> s: array<u32>;          // step: [n_ids, …], ids at IDS
@group(0) @binding(2) var<storage, read_write> out: array<f32>;        // [n_ids, n_in]
// [rows, n_in, row_bytes, row_base]
@group(0) @binding(3) var<storage, read_write> p: array<u32>;

const IDS: u32 = {{ids_at}}u;

{{common}}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let rows = p[0];
    let n_in = p[1];
    let row_bytes = p[2];
    let row_base = p[3];
    let n_ids = s[0];
    let g = gid.x;
    let i = gid.y;
    if g >= n_in / 32u || i >= n_ids {
        return;
    }
    let id = s[IDS + i];
    if id < row_base || id - row_base >= rows {
        return;
    }
    load_group_0((id - row_base) * row_bytes, g);
    let base = i * n_in + g * 32u;
    for (var k = 0u; k < 8u; k++) {
        var sc = s0;
        if k >= 4u {
            sc = s1;
        }
        let v = sc * q[k] + vec4<f32>(mn);
        out[base + 4u * k] = v.x;
        out[base + 4u * k + 1u] = v.y;
        out[base + 4u * k + 2u] = v.z;
        out[base + 4u * k + 3u] = v.w;
    }
}
