// What verification needs of a row of logits, so that a step reads back a few words a row
// instead of the vocabulary: the best and second-best token (value descending, lowest id first
// among equals, as the host verifier ranks them), the sum of exp(z − z1) over the row, the
// first NaN or +inf with its value (the host refuses such a row), and for a sampling step the
// row's Gumbel-max draw argmax((z − z1) / T + g) with the sum of exp((z − z1) / T), g a pure
// function of the row's key and the id (mars_verify::noise, mirrored here line for line).
//
// Three launches, because one workgroup a row leaves a GPU with one workgroup's worth of loads
// in flight over 150K logits (the Qwen vocabulary took 0.6 ms so on an H100): a row is cut into
// chunks of CHUNK values, one workgroup each. summary_rank.wgsl ranks each chunk; summary_sum.wgsl
// merges the row's ranks to z1 and sums and draws over each chunk against it; summary_end.wgsl
// merges the chunks and writes the row's words. Every merge runs in a fixed order over threads
// and chunks, so a row's summary does not depend on the rows beside it, and each draw's score
// is the host's expression for that id, so the argmax is the host's.
//
// A chunk's partial in `part` ([rows, chunks, PART] words): z1 bits, its id, z2 bits, its id,
// the first bad id; then (summary_sum.wgsl) the sum bits, the sum at T bits, the best draw's
// score bits and its id.

const NONE: u32 = 0xffffffffu;
const PART: u32 = 9u;
const THREADS: u32 = 256u;

var<workgroup> v1s: array<f32, 256>;
var<workgroup> i1s: array<u32, 256>;
var<workgroup> v2s: array<f32, 256>;
var<workgroup> i2s: array<u32, 256>;
var<workgroup> bads: array<u32, 256>;
// The sums and draws (summary_sum.wgsl, summary_end.wgsl).
var<workgroup> sums: array<f32, 256>;
var<workgroup> sumts: array<f32, 256>;
var<workgroup> gvs: array<f32, 256>;
var<workgroup> gis: array<u32, 256>;

// lowbias32 (Chris Wellons): mars_verify::noise::mix.
fn mix(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    return x ^ (x >> 16u);
}

// Standard Gumbel noise of `id` in the row keyed `key` (`salt` = mix(key ^ 0x9e3779b9), once a
// row): mars_verify::noise::gumbel. E = −ln u comes from its series where u is near 1, since
// `log` is only accurate to 2^-21 absolute on [0.5, 2].
fn gumbel(key: u32, salt: u32, id: u32) -> f32 {
    let h = mix(mix(key ^ id) ^ salt);
    let u = f32((h >> 9u) * 2u + 1u) * (1.0 / 16777216.0);
    let v = 1.0 - u;
    var e: f32;
    if v < 0.0625 {
        e = v * (1.0 + v * (0.5 + v * (1.0 / 3.0 + v * (0.25 + v * (0.2 + v * (1.0 / 6.0))))));
    } else {
        e = -log(u);
    }
    return -log(e);
}

// Whether (va, ia) ranks before (vb, ib).
fn before(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    return va > vb || (va == vb && ia < ib);
}

// The workgroup's best two and first bad id, each thread's in v1s.. at `lid`, merged into
// thread 0's in a fixed order (each thread's pair already in order).
fn reduce_top(lid: u32) {
    workgroupBarrier();
    for (var step = THREADS / 2u; step > 0u; step >>= 1u) {
        if lid < step {
            let o = lid + step;
            var a1 = v1s[lid];
            var ia1 = i1s[lid];
            var a2 = v2s[lid];
            var ia2 = i2s[lid];
            let b1 = v1s[o];
            let ib1 = i1s[o];
            let b2 = v2s[o];
            let ib2 = i2s[o];
            // The best two of {a1, a2} ∪ {b1, b2}.
            if before(b1, ib1, a1, ia1) {
                if before(b2, ib2, a1, ia1) {
                    a2 = b2;
                    ia2 = ib2;
                } else {
                    a2 = a1;
                    ia2 = ia1;
                }
                a1 = b1;
                ia1 = ib1;
            } else if before(b1, ib1, a2, ia2) {
                a2 = b1;
                ia2 = ib1;
            }
            v1s[lid] = a1;
            i1s[lid] = ia1;
            v2s[lid] = a2;
            i2s[lid] = ia2;
            bads[lid] = min(bads[lid], bads[o]);
        }
        workgroupBarrier();
    }
}

// Puts the ranks of chunk `lid` of the partials from `o0` on (none past `chunks`) at `lid`.
fn load_top(o0: u32, chunks: u32, lid: u32, ninf: f32) {
    if lid < chunks {
        let o = o0 + lid * PART;
        v1s[lid] = bitcast<f32>(part[o]);
        i1s[lid] = part[o + 1u];
        v2s[lid] = bitcast<f32>(part[o + 2u]);
        i2s[lid] = part[o + 3u];
        bads[lid] = part[o + 4u];
    } else {
        v1s[lid] = ninf;
        i1s[lid] = NONE;
        v2s[lid] = ninf;
        i2s[lid] = NONE;
        bads[lid] = NONE;
    }
}

// The workgroup's sums, sums at T and best draws, each thread's in sums.. at `lid`, met in
// thread 0's in a fixed tree.
fn reduce_sums(lid: u32) {
    workgroupBarrier();
    for (var step = THREADS / 2u; step > 0u; step >>= 1u) {
        if lid < step {
            let o = lid + step;
            sums[lid] += sums[o];
            sumts[lid] += sumts[o];
            if before(gvs[o], gis[o], gvs[lid], gis[lid]) {
                gvs[lid] = gvs[o];
                gis[lid] = gis[o];
            }
        }
        workgroupBarrier();
    }
}
