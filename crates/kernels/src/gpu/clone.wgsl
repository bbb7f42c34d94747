// dst[i] = src[i] for i < n: a KV cache cloned on the device (a race's methods each continue
// from one prefill).

@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read_write> p: array<u32>; // [n, groups_x]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wg.x + wg.y * p[1]) * 256u + lid;
    if i < p[0] {
        dst[i] = src[i];
    }
}
