// Attention of each row's query heads over the keys it may see, with an online softmax over
// blocks of keys. The key / value head is the query head's group (grouped-query attention).
// Row r sees, from the step buffer's per-row entry (step.rs), the first `lo` cache rows, then
// the cache rows lo + b for each bit b set in its 64-bit tree mask (its ancestors and itself in
// a token tree; none in a chain, where lo = start + r + 1).
//
// The visible keys are taken in order, 256 a block. Within a block, thread i scores the block's
// key i (a dot product of head_dim / 4 vec4 loads, independent, so a GPU keeps them in flight
// together), a tree of halvings takes the block's maximum m_b, and for the values the threads
// split into `parts` teams of head_dim / 4 lanes (16 teams of 16 at a head width of 64, 8 of 32
// at 128): lane c of team t adds, for dimensions 4c .. 4c + 4, the weighted values of the
// block's keys t, t + parts, …, so a block costs each thread 256 / parts dependent steps, not
// 256; the teams' sums then meet in team order: the block's (m_b, l_b, acc_b). The blocks are
// folded in order (fold below): out = A / L.
//
// Two launch shapes give the same bits, since both compute each block alike and fold in the
// same order: SPLIT 0, one workgroup a (query head, row) walking its blocks (a prefill, short
// contexts, CPU adapters); SPLIT 1, one workgroup a (query head, row, block) writing the
// block's partial, folded by attention_merge.wgsl (a decode or verification pass over a long
// context on a GPU card, where one workgroup a head would walk thousands of keys alone). The
// blocks are cut from the list of visible keys, not from cache rows, so a row's result
// depends only on the keys it sees and their order: a tree row equals the chain over its path
// bit for bit, and a row equals itself computed beside any other rows, in either shape. (An
// earlier form, one thread a key and a dimension over blocks of 64 keys with 64 threads, was
// right for lavapipe's few wide threads and took ~100 µs a head on an H100 for 140 keys: a
// third of a token, docs/performance.md.)
//
// With RoPE folded in (attention_rope.wgsl), the launch also ropes the queries and writes this
// pass's keys and values to the cache, which rope.wgsl's launch did before it.

const NEG: f32 = -3.0e38; // below every score; exp(NEG − m) is 0 for any real maximum m
const WG: u32 = 256u;     // threads, and keys a block
const SPLIT: bool = {{split}};
// Fours of a head's values (head_dim / 4, compiled in: the loops over them have constant
// bounds, so their loads issue together), and the teams of lanes a workgroup holds.
const HD4: u32 = {{hd4}}u;
const PARTS: u32 = {{parts}}u;

// Queries and outputs [rows, n_heads · head_dim / 4] (with RoPE folded in, `q` holds the q | k | v
// rows instead: attention_rope.wgsl); the cache [2, n_kv, capacity, head_dim / 4] fours of f16 or
// f32 values (KvType), read through kv4 as f32: the sums are f32 either way.
@group(0) @binding(0) var<storage, read_write> q: array<vec4<f32>>;
{{kv}}
// SPLIT 0: the outputs; SPLIT 1: the blocks' partials (attention_merge.wgsl).
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;
// [n_heads, n_kv, head_dim (4 · HD4), scale (f32 bits)]
@group(0) @binding(3) var<storage, read_write> p: array<u32>;
@group(0) @binding(4) var<storage, read_write> s: array<u32>;   // step (step.rs)

{{fold}}

var<workgroup> qs: array<vec4<f32>, 64>;
var<workgroup> sc: array<f32, WG>;         // the block's scores, then its weights
var<workgroup> best: array<f32, WG>;       // the maximum's tree
var<workgroup> js: array<u32, WG>;         // the block's cache rows
var<workgroup> fin: array<vec4<f32>, WG>;  // each team's sums, to meet at the block's end
var<workgroup> fl: array<f32, WG>;         // each team's sum of weights
var<workgroup> visible: u32;

// The reads of queries, keys and values, and the store of this pass's rows:
// attention_keys.wgsl, or attention_rope.wgsl where RoPE is folded in.
{{keys}}

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

// Team `team`'s share of a block's weighted values (lane c's dimensions 4c .. 4c + 4 of value
// head g at vb): its keys team, team + PARTS, … below `count`, four a step, their loads first,
// then added in key order (a dependent load a key would leave a GPU thread waiting on each in
// turn); `fresh` as for value4; `head` = (g, vb, c). In `acc` and `l` (the weights' sum).
fn block_values(team: u32, count: u32, head: vec3<u32>, fresh: bool) -> Fold {
    let g = head.x;
    let vb = head.y;
    let c = head.z;
    var a = vec4<f32>(0.0);
    var l = 0.0;
    var i = team;
    for (; i + 3u * PARTS < count; i += 4u * PARTS) {
        let w = vec4<f32>(sc[i], sc[i + PARTS], sc[i + 2u * PARTS], sc[i + 3u * PARTS]);
        let v0 = value4(js[i], g, vb, c, fresh);
        let v1 = value4(js[i + PARTS], g, vb, c, fresh);
        let v2 = value4(js[i + 2u * PARTS], g, vb, c, fresh);
        let v3 = value4(js[i + 3u * PARTS], g, vb, c, fresh);
        a += w.x * v0;
        a += w.y * v1;
        a += w.z * v2;
        a += w.w * v3;
        l += w.x;
        l += w.y;
        l += w.z;
        l += w.w;
    }
    for (; i < count; i += PARTS) {
        let w = sc[i];
        a += w * value4(js[i], g, vb, c, fresh);
        l += w;
    }
    return Fold(0.0, l, a);
}

// SPLIT 0: one workgroup a (head x, row y); SPLIT 1: a (head x, row y, block z).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let nh = p[0];
    let nkv = p[1];
    let cap = s[4];
    let scale = bitcast<f32>(p[3]);
    let h = wg.x;
    let r = wg.y;
    let e = 8u + s[0] + 4u * r;
    let lo = s[e + 1u];
    let mlo = s[e + 2u];
    let mhi = s[e + 3u];
    if lid == 0u {
        visible = visible_keys(r);
    }
    let qb = (r * nh + h) * HD4;
    if lid < HD4 {
        qs[lid] = query4(r, h, lid);
    }
    prepare(r, h, lid);
    // A barrier, and the count as a value every invocation agrees on (the loops below have
    // barriers in them).
    let n = workgroupUniformLoad(&visible);
    let g = h / (nh / nkv);
    let kb = g * cap * HD4;
    let vb = (nkv + g) * cap * HD4;
    store_rows(r, h, wg.z, lid, kb, vb);
    let team = lid / HD4;
    let c = lid % HD4;
    let lane = team < PARTS;
    var first = 0u;
    var end = n;
    if SPLIT {
        // This workgroup's block alone; none past the row's keys (its row has fewer blocks
        // than the step's longest).
        first = wg.z * WG;
        end = min(first + WG, n);
    }
    var f = Fold(NEG, 0.0, vec4<f32>(0.0));
    for (var b0 = first; b0 < end; b0 += WG) {
        // Whether this block holds keys of this pass's rows (with RoPE folded in): visible key
        // k is such a key exactly where k ≥ s[3] (the keys before are cache rows 0 .. s[3]), so
        // only a row's last block does, and every other block reads the cache alone.
        let fresh = FRESH_KEYS && b0 + WG > s[3];
        let k = b0 + lid;
        var score = NEG;
        var j = 0u;
        if k < n {
            j = key_row(k, lo, mlo, mhi);
            // Constant arguments, so that the blocks before the last run the cache-only loop,
            // with no branch a key between its loads (a GPU keeps them in flight together).
            if fresh {
                score = key_dot(j, kb, true) * scale;
            } else {
                score = key_dot(j, kb, false) * scale;
            }
        }
        js[lid] = j;
        best[lid] = score;
        workgroupBarrier();
        for (var step = WG / 2u; step > 0u; step >>= 1u) {
            if lid < step {
                best[lid] = max(best[lid], best[lid + step]);
            }
            workgroupBarrier();
        }
        let m = best[0];
        sc[lid] = exp(score - m);
        workgroupBarrier();
        var sums = Fold(0.0, 0.0, vec4<f32>(0.0));
        if lane {
            let count = min(WG, n - b0);
            // As for the scores: constant arguments, the branch only in the last block.
            if fresh {
                sums = block_values(team, count, vec3<u32>(g, vb, c), true);
            } else {
                sums = block_values(team, count, vec3<u32>(g, vb, c), false);
            }
        }
        fin[lid] = sums.acc;
        fl[lid] = sums.l;
        workgroupBarrier();
        if lid < HD4 {
            var acc = vec4<f32>(0.0);
            var weight = 0.0;
            for (var t = 0u; t < PARTS; t++) {
                acc += fin[t * HD4 + lid];
                weight += fl[t * HD4 + lid];
            }
            if SPLIT {
                let at = partial_at(r, h, wg.z, nh, HD4);
                out[at + lid] = acc;
                if lid == 0u {
                    out[at + HD4] = vec4<f32>(m, weight, 0.0, 0.0);
                }
            } else {
                f = fold(f, b0 == 0u, Fold(m, weight, acc));
            }
        }
        // Every thread has read best[0], sc, js, fin and fl before the next block writes them.
        workgroupBarrier();
    }
    if !SPLIT && lid < HD4 {
        out[qb + lid] = f.acc / f.l;
    }
}
