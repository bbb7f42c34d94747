// What verification needs of a row of logits, so that a step reads back a few words a row
// instead of the vocabulary: the best and second-best token (value descending, lowest id first
// among equals, as the host verifier ranks them), the sum of exp(z − z1) over the row, the
// first NaN or +inf with its value (the host refuses such a row), and for a sampling step the
// row's Gumbel-max draw argmax((z − z1) / T + g) with the sum of exp((z − z1) / T), g a pure
// function of the row's key and the id (mars_verify::noise, mirrored here line for line). One workgroup of 256 threads per
// row; every reduction runs in a fixed order, so a row's summary does not depend on the rows
// beside it.

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, vocab]
// [at + rows, 10]: top1, z1 bits, top2 (0xffffffff: none), z2 bits, sum bits, bad id, bad
// value bits, drawn id (0xffffffff: none), its logit bits, the sum at T bits; row r's summary goes to row at + r, `at` the step's link word (step.rs: 0, or a chain
// row where a step keeps its summaries until its one read)
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
// [vocab, row_from (the first row of z summarised), the bits of −inf]
@group(0) @binding(2) var<storage, read_write> p: array<u32>;
@group(0) @binding(3) var<storage, read_write> s: array<u32>;   // the forward's step words
// [3]: 1 to draw (0: greedy), the bits of 1 / T (1 when greedy), the seed's key
// (mars_verify::noise::seed_key). Row r's key is mix(seed key ^ (its input's position + 1)):
// the context index of the token it predicts, read from the step words.
@group(0) @binding(4) var<storage, read_write> keys: array<u32>;

const SUMMARIES_AT: u32 = {{summaries_at}}u;
const IDS: u32 = {{ids_at}}u;
const WORDS: u32 = {{summary_words}}u;

var<workgroup> v1s: array<f32, 256>;
var<workgroup> i1s: array<u32, 256>;
var<workgroup> v2s: array<f32, 256>;
var<workgroup> i2s: array<u32, 256>;
var<workgroup> bads: array<u32, 256>;
var<workgroup> sums: array<f32, 256>;
var<workgroup> sumts: array<f32, 256>;
var<workgroup> gvs: array<f32, 256>;
var<workgroup> gis: array<u32, 256>;

const NONE: u32 = 0xffffffffu;

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

// The bits of the row's value at `id`, 0 for none.
fn value_bits(base: u32, id: u32) -> u32 {
    if id == NONE {
        return 0u;
    }
    return bitcast<u32>(z[base + id]);
}

// Whether (va, ia) ranks before (vb, ib).
fn before(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    return va > vb || (va == vb && ia < ib);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let vocab = p[0];
    let ninf = bitcast<f32>(p[2]);
    let base = (p[1] + wg.x) * vocab;
    var v1 = ninf;
    var i1 = NONE;
    var v2 = ninf;
    var i2 = NONE;
    var bad = NONE;
    for (var i = lid; i < vocab; i += 256u) {
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
    workgroupBarrier();
    for (var step = 128u; step > 0u; step >>= 1u) {
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
            // The best two of {a1, a2} ∪ {b1, b2}, each pair already in order.
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
    let mx = v1s[0];
    let draw = keys[0] == 1u;
    let inv_t = bitcast<f32>(keys[1]);
    // The summarised rows are the forward's last `tail` (step words 0 and 1).
    let forward_row = s[0] - s[1] + wg.x;
    let key = mix(keys[2] ^ (s[IDS + s[0] + 4u * forward_row] + 1u));
    let salt = mix(key ^ 0x9e3779b9u);
    var sum = 0.0;
    var sumt = 0.0;
    var gv = ninf;
    var gi = NONE;
    for (var i = lid; i < vocab; i += 256u) {
        let v = z[base + i];
        // −inf and the bad values add nothing (a row with a bad value is refused anyway).
        if v > -3.0e38 && v <= mx {
            sum += exp(v - mx);
            if draw {
                let x = (v - mx) * inv_t;
                sumt += exp(x);
                let g = x + gumbel(key, salt, i);
                if before(g, i, gv, gi) {
                    gv = g;
                    gi = i;
                }
            }
        }
    }
    sums[lid] = sum;
    sumts[lid] = sumt;
    gvs[lid] = gv;
    gis[lid] = gi;
    workgroupBarrier();
    for (var step = 128u; step > 0u; step >>= 1u) {
        if lid < step {
            sums[lid] += sums[lid + step];
            sumts[lid] += sumts[lid + step];
            let o = lid + step;
            if before(gvs[o], gis[o], gvs[lid], gis[lid]) {
                gvs[lid] = gvs[o];
                gis[lid] = gis[o];
            }
        }
        workgroupBarrier();
    }
    if lid == 0u {
        let o = (s[SUMMARIES_AT] + wg.x) * WORDS;
        out[o] = i1s[0];
        out[o + 1u] = bitcast<u32>(mx);
        var top2 = i2s[0];
        if !(v2s[0] > ninf) {
            top2 = NONE;
        }
        out[o + 2u] = top2;
        out[o + 3u] = bitcast<u32>(v2s[0]);
        out[o + 4u] = bitcast<u32>(sums[0]);
        let b = bads[0];
        out[o + 5u] = b;
        out[o + 6u] = value_bits(base, b);
        let d = gis[0];
        out[o + 7u] = d;
        out[o + 8u] = value_bits(base, d);
        out[o + 9u] = bitcast<u32>(sumts[0]);
    }
}
