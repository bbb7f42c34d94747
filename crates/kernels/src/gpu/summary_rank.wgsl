// A summary's first launch (summary.wgsl): each chunk's best two and first bad id.

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, vocab]
// [vocab, row_from (the first row of z summarised), the bits of −inf, CHUNK, chunks a row]
@group(0) @binding(1) var<storage, read_write> p: array<u32>;
@group(0) @binding(2) var<storage, read_write> part: array<u32>;   // [rows, chunks, PART]

{{common}}

// One workgroup a chunk (x) of a row (y).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let vocab = p[0];
    let ninf = bitcast<f32>(p[2]);
    let chunk = p[3];
    let base = (p[1] + wg.y) * vocab;
    let end = min((wg.x + 1u) * chunk, vocab);
    var v1 = ninf;
    var i1 = NONE;
    var v2 = ninf;
    var i2 = NONE;
    var bad = NONE;
    for (var i = wg.x * chunk + lid; i < end; i += THREADS) {
        let v = z[base + i];
        let b = bitcast<u32>(v);
        // NaN or +inf: every exponent bit set, and not −inf.
        if (b & 0x7f800000u) == 0x7f800000u && b != 0xff800000u {
            bad = min(bad, i);
        } else if before(v, i, v1, i1) {
            v2 = v1;
            i2 = i1;
            v1 = v;
            i1 = i;
        } else if before(v, i, v2, i2) {
            v2 = v;
            i2 = i;
        }
    }
    v1s[lid] = v1;
    i1s[lid] = i1;
    v2s[lid] = v2;
    i2s[lid] = i2;
    bads[lid] = bad;
    reduce_top(lid);
    if lid == 0u {
        let o = (wg.y * p[4] + wg.x) * PART;
        part[o] = bitcast<u32>(v1s[0]);
        part[o + 1u] = i1s[0];
        part[o + 2u] = bitcast<u32>(v2s[0]);
        part[o + 3u] = i2s[0];
        part[o + 4u] = bads[0];
    }
}
