// A top-c's second launch (top.wgsl): the row's z1 from its chunks' best values, then each
// chunk's sum of exp((z − z1) / T).

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, stride]

{{common}}

// One workgroup a chunk (x) of a row (y).
@compute @workgroup_size({{threads}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let stride = p[0];
    let inv_t = bitcast<f32>(p[2]);
    let ninf = bitcast<f32>(p[3]);
    let chunk = p[4];
    let chunks = p[5];
    let base = wg.y * stride;
    let o0 = wg.y * chunks * PART;
    // z1: the largest of the chunks' best values (−inf for a chunk with none).
    var m = ninf;
    for (var c = lid; c < chunks; c += THREADS) {
        m = max(m, bitcast<f32>(part[o0 + c * PART + 1u]));
    }
    sums[lid] = m;
    workgroupBarrier();
    for (var step = THREADS / 2u; step > 0u; step >>= 1u) {
        if lid < step {
            sums[lid] = max(sums[lid], sums[lid + step]);
        }
        workgroupBarrier();
    }
    let mx = sums[0];
    // Every thread has read sums[0] before it holds sums again.
    workgroupBarrier();
    var sum = 0.0;
    let end = min((wg.x + 1u) * chunk, p[1]);
    for (var i = wg.x * chunk + lid; i < end; i += THREADS) {
        let v = z[base + i];
        if v > -3.0e38 && v <= mx {
            sum += exp((v - mx) * inv_t);
        }
    }
    sums[lid] = sum;
    add_sums(lid);
    if lid == 0u {
        part[o0 + wg.x * PART + 2u * C + 1u] = bitcast<u32>(sums[0]);
    }
}
