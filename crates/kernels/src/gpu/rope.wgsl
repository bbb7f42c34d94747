// After the q | k | v product: RoPE on each query and key head (optionally after a per-head
// RMSNorm, Qwen3's q_norm / k_norm), queries to q, keys and values into the layer's cache at
// the rows this forward writes (cache row start + r). One workgroup per (head, row): heads
// 0 .. n_heads are query heads, n_heads .. n_heads + n_kv key heads (which also copy their value
// head). Row r rotates by its position, s's per-row entry: start + r in a chain, the tree's
// base plus the row's depth in a token tree.
//
// A pair (a, b) of a head's dimensions turns by pos · freq_i: a' = a·cos − b·sin,
// b' = a·sin + b·cos, with (a, b) = (2i, 2i + 1) for interleaved pairs (GGUF llama) and
// (i, i + head_dim / 2) for halves (qwen2, qwen3). The cache takes dimensions in adjacent pairs
// (one f16 word, KvType), so a key head's rotated values meet in workgroup memory first.

@group(0) @binding(0) var<storage, read_write> qkv: array<f32>; // [rows, (n_heads + 2 n_kv) · head_dim]
@group(0) @binding(1) var<storage, read_write> qo: array<f32>;  // [rows, n_heads · head_dim]
{{kv}}
@group(0) @binding(3) var<storage, read_write> cs: array<f32>;  // [context, head_dim / 2, 2]: cos, sin
@group(0) @binding(4) var<storage, read_write> hn: array<f32>;  // [2, head_dim]: q_norm, k_norm
// [n_heads, n_kv, head_dim, halves (0 | 1), eps (f32 bits)]
@group(0) @binding(5) var<storage, read_write> p: array<u32>;
@group(0) @binding(6) var<storage, read_write> s: array<u32>;   // step (step.rs)

// Qwen3's per-head RMSNorm, compiled in (a barrier must not depend on a buffer's value).
const HEAD_NORM: bool = {{head_norm}};

var<workgroup> part: array<f32, 64>;
var<workgroup> key: array<f32, 256>; // a key head's rotated values (head_dim ≤ 256)

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let nh = p[0];
    // The norm weights read whether or not HEAD_NORM uses them (a layout derived from the
    // shader keeps only the bindings it uses; nh is never 0).
    if nh == 0u {
        qo[0] = hn[0];
    }
    let nkv = p[1];
    let hd = p[2];
    let cap = s[4];
    let halves = p[3] != 0u;
    let head = wg.x;
    let r = wg.y;
    let rows = s[0];
    let pos = s[8u + rows + 4u * r];
    let crow = s[3] + r;
    let width = (nh + 2u * nkv) * hd;
    let is_q = head < nh;
    var src = r * width + head * hd;
    var norm = 0u;
    if !is_q {
        norm = hd;
    }
    // Qwen3: RMSNorm over the head first (a fixed-order sum, as norm.wgsl).
    var inv = 1.0;
    if HEAD_NORM {
        var sum = 0.0;
        for (var i = lid; i < hd; i += 64u) {
            let v = qkv[src + i];
            sum += v * v;
        }
        part[lid] = sum;
        workgroupBarrier();
        for (var step = 32u; step > 0u; step >>= 1u) {
            if lid < step {
                part[lid] += part[lid + step];
            }
            workgroupBarrier();
        }
        inv = 1.0 / sqrt(part[0] / f32(hd) + bitcast<f32>(p[4]));
    }
    let half = hd / 2u;
    for (var i = lid; i < half; i += 64u) {
        var a = i;
        var b = i + half;
        if !halves {
            a = 2u * i;
            b = 2u * i + 1u;
        }
        var xa = qkv[src + a];
        var xb = qkv[src + b];
        if HEAD_NORM {
            xa = xa * inv * hn[norm + a];
            xb = xb * inv * hn[norm + b];
        }
        let c = cs[(pos * half + i) * 2u];
        let sn = cs[(pos * half + i) * 2u + 1u];
        let ra = xa * c - xb * sn;
        let rb = xa * sn + xb * c;
        if is_q {
            let dst = (r * nh + head) * hd;
            qo[dst + a] = ra;
            qo[dst + b] = rb;
        } else {
            key[a] = ra;
            key[b] = rb;
        }
    }
    // Every rotated value is in `key` before any is stored (outside the branch on the head,
    // which WGSL's uniformity analysis cannot see is the whole workgroup's).
    workgroupBarrier();
    if !is_q {
        // The key, then the value head beside it as it is, in pairs of dimensions.
        let g = head - nh;
        let kdst = (g * cap + crow) * hd;
        let vsrc = r * width + (nh + nkv + g) * hd;
        let vdst = ((nkv + g) * cap + crow) * hd;
        for (var w = lid; w < half; w += 64u) {
            store2(kdst, w, vec2<f32>(key[2u * w], key[2u * w + 1u]));
            store2(vdst, w, vec2<f32>(qkv[vsrc + 2u * w], qkv[vsrc + 2u * w + 1u]));
        }
    }
}
