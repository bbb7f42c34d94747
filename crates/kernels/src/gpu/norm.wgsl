// RMSNorm of rows of x: y[r, i] = x[r', i] / sqrt(mean_i x[r', i]² + eps) · g[i], one workgroup
// per output row r (the dispatch's width: the forward's rows, or its last `tail` rows, r' =
// rows − tail + r). The sum of squares is taken in a fixed order per row (256 strided partial
// sums, then a fixed tree), so a row's result does not depend on the rows beside it. 256
// threads, not 64: a decode's norm is one workgroup, and on an H100 the 64-thread form took
// 14 µs a launch (each thread 14 dependent loads of a 896-wide row; the H100's, in
// docs/lab/journal-2026-11.md).

@group(0) @binding(0) var<storage, read_write> x: array<f32>; // [rows, d]
@group(0) @binding(1) var<storage, read_write> g: array<f32>; // [d]
@group(0) @binding(2) var<storage, read_write> y: array<f32>; // [rows or tail, d]
// [d, eps (f32 bits), tail (1: the last s[1] rows of x, 0: every row)]
@group(0) @binding(3) var<storage, read_write> p: array<u32>;
@group(0) @binding(4) var<storage, read_write> s: array<u32>; // step (step.rs)

var<workgroup> part: array<f32, 256>;

// Where the product after the norm multiplies 8-bit activations (`Norm::run_q8`): the normed
// rows also quantized into `xq` (q8.wgsl), each value the bits written to y; else empty.
{{q8}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let d = p[0];
    let eps = bitcast<f32>(p[1]);
    var src = wg.x;
    if p[2] != 0u {
        src = s[0] - s[1] + wg.x;
    }
    let xb = src * d;
    var sum = 0.0;
    for (var i = lid; i < d; i += 256u) {
        let v = x[xb + i];
        sum += v * v;
    }
    part[lid] = sum;
    workgroupBarrier();
    for (var step = 128u; step > 0u; step >>= 1u) {
        if lid < step {
            part[lid] += part[lid + step];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(part[0] / f32(d) + eps);
    let yb = wg.x * d;
    for (var i = lid; i < d; i += 256u) {
        y[yb + i] = x[xb + i] * inv * g[i];
    }
{{q8_rows}}
}
