// A top-c's first launch (top.wgsl): each chunk's best C and first bad id.

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, stride]

{{common}}

// One workgroup a chunk (x) of a row (y).
@compute @workgroup_size({{threads}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let stride = p[0];
    let ninf = bitcast<f32>(p[3]);
    let chunk = p[4];
    let base = wg.y * stride;
    let end = min((wg.x + 1u) * chunk, p[1]);
    var lv: array<f32, C>;
    var li: array<u32, C>;
    for (var j = 0u; j < C; j++) {
        lv[j] = ninf;
        li[j] = NONE;
    }
    var bad = NONE;
    for (var i = wg.x * chunk + lid; i < end; i += THREADS) {
        let v = z[base + i];
        let b = bitcast<u32>(v);
        // NaN or +inf: every exponent bit set, and not −inf.
        if (b & 0x7f800000u) == 0x7f800000u && b != 0xff800000u {
            bad = min(bad, i);
        } else if v > ninf && before(v, i, lv[C - 1u], li[C - 1u]) {
            var j = C - 1u;
            while j > 0u && before(v, i, lv[j - 1u], li[j - 1u]) {
                lv[j] = lv[j - 1u];
                li[j] = li[j - 1u];
                j -= 1u;
            }
            lv[j] = v;
            li[j] = i;
        }
    }
    for (var j = 0u; j < C; j++) {
        vs[lid * C + j] = lv[j];
        ids[lid * C + j] = li[j];
    }
    bads[lid] = bad;
    merge_lists(lid);
    if lid == 0u {
        let o = (wg.y * p[5] + wg.x) * PART;
        for (var j = 0u; j < C; j++) {
            part[o + 2u * j] = ids[j];
            part[o + 2u * j + 1u] = bitcast<u32>(vs[j]);
        }
        part[o + 2u * C] = bads[0];
    }
}
