// Rows of activations quantized to 8 bits for matmul.wgsl's 8-bit form where no norm before
// the product wrote them: one thread a 32-value block (q8.wgsl).

@group(0) @binding(0) var<storage, read_write> x: array<vec4<f32>>; // [rows, n_in / 4]
// [n_in, rows_at (the step word holding the rows: 0 every row, 1 the tail), groups_x]
@group(0) @binding(2) var<storage, read_write> p: array<u32>;
@group(0) @binding(3) var<storage, read_write> s: array<u32>; // step (step.rs)

{{q8}}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = (wg.x + wg.y * p[2]) * 64u + lid;
    if b >= s[p[1]] * (p[0] / 32u) {
        return;
    }
    var v: array<vec4<f32>, 8>;
    for (var k = 0u; k < 8u; k++) { // unroll
        v[k] = x[b * 8u + k];
    }
    put_q8(v, b);
}
