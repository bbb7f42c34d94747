// A top-c's last launch (top.wgsl): a row's chunks merged into its words.

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, stride]
// [rows, 2C + 3]: C × (id (0xffffffff: none), value bits), sum bits, bad id, bad value bits
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

{{common}}

// One workgroup a row (x); thread t merges chunks t, t + THREADS, … in order.
@compute @workgroup_size({{threads}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let stride = p[0];
    let ninf = bitcast<f32>(p[3]);
    let chunks = p[5];
    let base = wg.x * stride;
    let o0 = wg.x * chunks * PART;
    var lv: array<f32, C>;
    var li: array<u32, C>;
    for (var j = 0u; j < C; j++) {
        lv[j] = ninf;
        li[j] = NONE;
    }
    var bad = NONE;
    var sum = 0.0;
    for (var c = lid; c < chunks; c += THREADS) {
        let o = o0 + c * PART;
        // This thread's list and chunk c's, both in order, merged.
        var ma: array<f32, C>;
        var mi: array<u32, C>;
        var x = 0u;
        var y = 0u;
        for (var j = 0u; j < C; j++) {
            let vy = bitcast<f32>(part[o + 2u * y + 1u]);
            let iy = part[o + 2u * y];
            if y < C && iy != NONE && (x >= C || before(vy, iy, lv[x], li[x])) {
                ma[j] = vy;
                mi[j] = iy;
                y += 1u;
            } else {
                ma[j] = lv[x];
                mi[j] = li[x];
                x += 1u;
            }
        }
        lv = ma;
        li = mi;
        bad = min(bad, part[o + 2u * C]);
        sum += bitcast<f32>(part[o + 2u * C + 1u]);
    }
    for (var j = 0u; j < C; j++) {
        vs[lid * C + j] = lv[j];
        ids[lid * C + j] = li[j];
    }
    bads[lid] = bad;
    sums[lid] = sum;
    merge_lists(lid);
    add_sums(lid);
    if lid == 0u {
        let o = wg.x * (2u * C + 3u);
        for (var j = 0u; j < C; j++) {
            out[o + 2u * j] = ids[j];
            out[o + 2u * j + 1u] = bitcast<u32>(vs[j]);
        }
        out[o + 2u * C] = bitcast<u32>(sums[0]);
        let b = bads[0];
        out[o + 2u * C + 1u] = b;
        var bv = 0u;
        if b != NONE {
            bv = bitcast<u32>(z[base + b]);
        }
        out[o + 2u * C + 2u] = bv;
    }
}
