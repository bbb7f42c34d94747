// Rows reduced to what choosing a tree's children needs (mars_verify's `Sampler::top_of`), or
// a top-k sampler's row (every value but the best k is out of its distribution): each row's
// best C values (descending, lowest id first among equals, −inf
// never listed) over its first `cols` values, the sum of exp((z − z1) / T) over them, and the
// first NaN or +inf with its value — 2C + 3 words a row read back instead of the row. One
// workgroup per row; each thread keeps its own best C in order, then the lists are merged in a
// fixed order, so a row's result does not depend on the rows beside it.

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, stride]
// [rows, 2C + 3]: C × (id (0xffffffff: none), value bits), sum bits, bad id, bad value bits
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
// [stride, cols, the bits of 1 / T (1 for greedy: the model's own softmax), the bits of −inf]
@group(0) @binding(2) var<storage, read_write> p: array<u32>;

const C: u32 = {{c}}u;
const THREADS: u32 = {{threads}}u;
const NONE: u32 = 0xffffffffu;

var<workgroup> vs: array<f32, {{cells}}>;  // [THREADS, C]
var<workgroup> ids: array<u32, {{cells}}>;
var<workgroup> bads: array<u32, THREADS>;
var<workgroup> sums: array<f32, THREADS>;

// Whether (va, ia) ranks before (vb, ib).
fn before(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    return va > vb || (va == vb && ia < ib);
}

@compute @workgroup_size({{threads}})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let stride = p[0];
    let cols = p[1];
    let inv_t = bitcast<f32>(p[2]);
    let ninf = bitcast<f32>(p[3]);
    let base = wg.x * stride;
    var lv: array<f32, C>;
    var li: array<u32, C>;
    for (var j = 0u; j < C; j++) {
        lv[j] = ninf;
        li[j] = NONE;
    }
    var bad = NONE;
    for (var i = lid; i < cols; i += THREADS) {
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
    workgroupBarrier();
    for (var step = THREADS / 2u; step > 0u; step >>= 1u) {
        if lid < step {
            // Merge the two ordered lists into this thread's best C.
            let a = lid * C;
            let o = (lid + step) * C;
            var ma: array<f32, C>;
            var mi: array<u32, C>;
            var x = 0u;
            var y = 0u;
            for (var j = 0u; j < C; j++) {
                if before(vs[o + y], ids[o + y], vs[a + x], ids[a + x]) {
                    ma[j] = vs[o + y];
                    mi[j] = ids[o + y];
                    y += 1u;
                } else {
                    ma[j] = vs[a + x];
                    mi[j] = ids[a + x];
                    x += 1u;
                }
            }
            for (var j = 0u; j < C; j++) {
                vs[a + j] = ma[j];
                ids[a + j] = mi[j];
            }
            bads[lid] = min(bads[lid], bads[lid + step]);
        }
        workgroupBarrier();
    }
    let mx = vs[0];
    var sum = 0.0;
    for (var i = lid; i < cols; i += THREADS) {
        let v = z[base + i];
        if v > -3.0e38 && v <= mx {
            sum += exp((v - mx) * inv_t);
        }
    }
    sums[lid] = sum;
    workgroupBarrier();
    for (var step = THREADS / 2u; step > 0u; step >>= 1u) {
        if lid < step {
            sums[lid] += sums[lid + step];
        }
        workgroupBarrier();
    }
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
