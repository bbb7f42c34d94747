// attention.wgsl with RoPE folded in (`Attention::with_rope`: decoding and verification on GPU
// cards, a launch a layer fewer): `q` holds the pass's q | k | v rows as the product wrote them,
// [rows, (n_heads + 2 n_kv) · head_dim / 4] vec4s. Each workgroup ropes its own query, and the
// keys of the pass's rows (cache rows s[3] .. s[3] + rows, at most 16) into workgroup memory
// (`prepare`: the threads share them, a vec4 each), as cache words (`KvWord`, rounded to the
// cache's type); this pass's keys and values are read from there and from the rows, never from
// the cache, which this same launch writes: the workgroup of each key head's first query head
// and block 0 stores its row's key words and value (`store_rows`). A key then reads the same
// bits whether this pass or a later one reads it, in the same order: a pass's rows stay
// independent, a tree row equals the chain over its path, and both launch shapes give the same
// bits. Against rope.wgsl the roped values agree within f32 rounding (its head norm sums in
// another order), not bit for bit.
//
// p: [n_heads, n_kv, head_dim, scale (f32 bits), halves (0 | 1), eps (f32 bits), head norms (0 | 1)]
@group(0) @binding(5) var<storage, read_write> cs: array<f32>; // [context, head_dim / 2, 2]: cos, sin
@group(0) @binding(6) var<storage, read_write> hn: array<f32>; // [2, head_dim]: q_norm, k_norm

// This pass's keys are read from `fresh` and the rows, in the block that holds them.
const FRESH_KEYS: bool = true;

// The pass's keys as cache words, [rows ≤ 16, HD4]: 4 KiB for f16 words at head_dim 128, the
// most `with_rope` folds (WebGPU's 16 KiB of workgroup memory hold the rest of attention's).
var<workgroup> fresh: array<KvWord, 16u * HD4>;

// Vec4 `i` of head `head` of the pass's row `row`: query heads, then key heads, then value
// heads.
fn qkv4(row: u32, head: u32, i: u32) -> vec4<f32> {
    return q[(row * (p[0] + 2u * p[1]) + head) * HD4 + i];
}

// Qwen3's per-head RMSNorm: 1 / rms of the head, or 1 where the model norms no heads.
fn head_inv(row: u32, head: u32) -> f32 {
    if p[6] == 0u {
        return 1.0;
    }
    var sum = 0.0;
    for (var i = 0u; i < HD4; i++) { // unroll
        let v = qkv4(row, head, i);
        sum += dot(v, v);
    }
    return 1.0 / sqrt(sum / f32(4u * HD4) + bitcast<f32>(p[5]));
}

// Vec4 `i` of the head norm's weights `norm` (0: q_norm, 1: k_norm).
fn norm4(norm: u32, i: u32) -> vec4<f32> {
    let at = norm * 4u * HD4 + 4u * i;
    return vec4<f32>(hn[at], hn[at + 1u], hn[at + 2u], hn[at + 3u]);
}

// Vec4 `i` of a head normed by 1 / rms `inv` and weights `norm` where the model norms heads,
// and turned by its row's position, as rope.wgsl turns it: a pair (a, b) of dimensions becomes
// (a·cos − b·sin, a·sin + b·cos), with (a, b) = (d, d + head_dim / 2) for halves (vec4s i and
// i + HD4 / 2: head_dim a multiple of 8, which `with_rope` checks) and (2d, 2d + 1) for
// interleaved pairs (within the vec4).
fn roped4(row: u32, head: u32, i: u32, inv: f32, norm: u32) -> vec4<f32> {
    let pos = s[8u + s[0] + 4u * row];
    let half = 2u * HD4;
    let normed = p[6] != 0u;
    if p[4] != 0u {
        let h4 = HD4 / 2u;
        let lo = i % h4;
        var a = qkv4(row, head, lo);
        var b = qkv4(row, head, lo + h4);
        if normed {
            a = a * inv * norm4(norm, lo);
            b = b * inv * norm4(norm, lo + h4);
        }
        let t = (pos * half + 4u * lo) * 2u;
        let c = vec4<f32>(cs[t], cs[t + 2u], cs[t + 4u], cs[t + 6u]);
        let sn = vec4<f32>(cs[t + 1u], cs[t + 3u], cs[t + 5u], cs[t + 7u]);
        if i < h4 {
            return a * c - b * sn;
        }
        return a * sn + b * c;
    }
    var x = qkv4(row, head, i);
    if normed {
        x = x * inv * norm4(norm, i);
    }
    let t = (pos * half + 2u * i) * 2u;
    let c0 = cs[t];
    let s0 = cs[t + 1u];
    let c1 = cs[t + 2u];
    let s1 = cs[t + 3u];
    return vec4<f32>(x.x * c0 - x.y * s0, x.x * s0 + x.y * c0, x.z * c1 - x.w * s1, x.z * s1 + x.w * c1);
}

fn query4(r: u32, h: u32, i: u32) -> vec4<f32> {
    return roped4(r, h, i, head_inv(r, h), 0u);
}

// The keys of the pass's rows up to row r (all it can see: a tree row's ancestors come before
// it, step.rs) in query head h's key head, roped, as cache words into `fresh`, a vec4 a thread
// (before the barrier that follows the queries' loads).
fn prepare(r: u32, h: u32, lid: u32) {
    let head = p[0] + h / (p[0] / p[1]);
    for (var e = lid; e < (r + 1u) * HD4; e += WG) {
        let row = e / HD4;
        fresh[e] = kv_word(roped4(row, head, e % HD4, head_inv(row, head), 1u));
    }
}

// Row r's key words and value of key head g into the cache, by one workgroup of the launch: the
// first query head of the group, block 0 (every row has one).
fn store_rows(r: u32, h: u32, z: u32, lid: u32, kb: u32, vb: u32) {
    let group = p[0] / p[1];
    if h % group != 0u || z != 0u || lid >= HD4 {
        return;
    }
    let at = (s[3] + r) * HD4 + lid;
    kv[kb + at] = fresh[r * HD4 + lid];
    kv[vb + at] = kv_word(qkv4(r, p[0] + p[1] + h / group, lid));
}

// As attention_keys.wgsl's, this pass's keys (in a block that holds them: `in_block`) read
// from `fresh`: the same words, in the same order, as a later pass reads from the cache.
fn key_dot(j: u32, kb: u32, in_block: bool) -> f32 {
    var d = 0.0;
    if in_block && j >= s[3] {
        let at = (j - s[3]) * HD4;
        for (var i = 0u; i < HD4; i++) { // unroll
            d += dot(qs[i], kv_values(fresh[at + i]));
        }
        return d;
    }
    let at = kb + j * HD4;
    for (var i = 0u; i < HD4; i++) { // unroll
        d += dot(qs[i], kv4(at + i));
    }
    return d;
}

fn value4(j: u32, g: u32, vb: u32, c: u32, in_block: bool) -> vec4<f32> {
    if in_block && j >= s[3] {
        return kv_values(kv_word(qkv4(j - s[3], p[0] + p[1] + g, c)));
    }
    return kv4(vb + j * HD4 + c);
}
