// Attention of each row's query heads over the keys it may see, in one pass with an online
// softmax. One workgroup per (query head, row); the key / value head is the query head's group
// (grouped-query attention). Row r sees, from the step buffer's per-row entry (step.rs), the
// first `lo` cache rows, then the cache rows lo + b for each bit b set in its 64-bit tree mask
// (its ancestors and itself in a token tree; none in a chain, where lo = start + r + 1).
//
// The visible keys are taken in order, 64 a block: thread i scores the block's key i, the block's
// maximum rescales the running sums, every thread then adds the block's weighted values for its
// own dimensions. The blocks are cut from the list of visible keys, not from cache rows, so a
// row's result depends only on the keys it sees and their order: a tree row equals the chain
// over its path bit for bit, and a row equals itself computed beside any other rows.

const NEG: f32 = -3.0e38; // below every score; exp(NEG − m) is 0 for any real maximum m
const DIMS: u32 = 4u;     // head_dim ≤ 256: up to 4 output dimensions a thread

@group(0) @binding(0) var<storage, read_write> q: array<f32>;   // [rows, n_heads · head_dim]
@group(0) @binding(1) var<storage, read_write> kv: array<f32>;  // [2, n_kv, capacity, head_dim]
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // [rows, n_heads · head_dim]
// [n_heads, n_kv, head_dim, scale (f32 bits)]
@group(0) @binding(3) var<storage, read_write> p: array<u32>;
@group(0) @binding(4) var<storage, read_write> s: array<u32>;   // step (step.rs)

var<workgroup> qs: array<f32, 256>;
var<workgroup> sc: array<f32, 64>;
var<workgroup> pw: array<f32, 64>;
var<workgroup> js: array<u32, 64>;
var<workgroup> visible: u32;

// The cache row of visible key k: k itself below lo, else lo plus the position of the
// (k − lo)-th set bit of the mask (mlo: bits 0..32, mhi: 32..64).
fn key_row(k: u32, lo: u32, mlo: u32, mhi: u32) -> u32 {
    if k < lo {
        return k;
    }
    var n = k - lo;
    var m = mlo;
    var base = 0u;
    let c = countOneBits(mlo);
    if n >= c {
        n -= c;
        m = mhi;
        base = 32u;
    }
    for (var i = 0u; i < n; i++) {
        m &= m - 1u;
    }
    return lo + base + countTrailingZeros(m);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let nh = p[0];
    let nkv = p[1];
    let hd = p[2];
    let cap = s[4];
    let scale = bitcast<f32>(p[3]);
    let h = wg.x;
    let r = wg.y;
    let e = 8u + s[0] + 4u * r;
    let lo = s[e + 1u];
    let mlo = s[e + 2u];
    let mhi = s[e + 3u];
    if lid == 0u {
        visible = lo + countOneBits(mlo) + countOneBits(mhi);
    }
    let qb = (r * nh + h) * hd;
    for (var i = lid; i < hd; i += 64u) {
        qs[i] = q[qb + i];
    }
    // A barrier, and the count as a value every invocation agrees on (the loop below has
    // barriers in it).
    let n = workgroupUniformLoad(&visible);
    let g = h / (nh / nkv);
    let kb = g * cap * hd;
    let vb = (nkv + g) * cap * hd;
    var m = NEG;
    var l = 0.0;
    var acc: array<f32, DIMS>;
    for (var b0 = 0u; b0 < n; b0 += 64u) {
        let k = b0 + lid;
        var score = NEG;
        var j = 0u;
        if k < n {
            j = key_row(k, lo, mlo, mhi);
            let at = kb + j * hd;
            var d = 0.0;
            for (var i = 0u; i < hd; i++) {
                d += qs[i] * kv[at + i];
            }
            score = d * scale;
        }
        sc[lid] = score;
        js[lid] = j;
        workgroupBarrier();
        var best = NEG;
        for (var i = 0u; i < 64u; i++) {
            best = max(best, sc[i]);
        }
        let m_new = max(m, best);
        let corr = exp(m - m_new);
        pw[lid] = exp(score - m_new);
        workgroupBarrier();
        let count = min(64u, n - b0);
        var bl = 0.0;
        for (var i = 0u; i < count; i++) {
            bl += pw[i];
        }
        l = l * corr + bl;
        for (var c = 0u; c < DIMS; c++) {
            let d = lid + 64u * c;
            if d < hd {
                var a = acc[c] * corr;
                for (var i = 0u; i < count; i++) {
                    a += pw[i] * kv[vb + js[i] * hd + d];
                }
                acc[c] = a;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    for (var c = 0u; c < DIMS; c++) {
        let d = lid + 64u * c;
        if d < hd {
            out[qb + d] = acc[c] / l;
        }
    }
}
