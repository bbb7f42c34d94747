// After the q | k | v product: RoPE on each query and key head (optionally after a per-head
// RMSNorm, Qwen3's q_norm / k_norm), queries to q, keys and values into the layer's cache at
// the rows this forward writes (cache row start + r). One workgroup per (head, row): heads
// 0 .. n_heads are query heads, n_heads .. n_heads + n_kv key heads (which also copy their value
// head). Row r rotates by its position, s's per-row entry: start + r in a chain, the tree's
// base plus the row's depth in a token tree.
//
// A pair (a, b) of a head's dimensions turns by pos · freq_i: a' = a·cos − b·sin,
// b' = a·sin + b·cos, with (a, b) = (2i, 2i + 1) for interleaved pairs (GGUF llama) and
// (i, i + head_dim / 2) for halves (qwen2, qwen3).

@group(0) @binding(0) var<storage, read_write> qkv: array<f32>; // [rows, (n_heads + 2 n_kv) · head_dim]
@group(0) @binding(1) var<storage, read_write> qo: array<f32>;  // [rows, n_heads · head_dim]
@group(0) @binding(2) var<storage, read_write> kv: array<f32>;  // [2, n_kv, capacity, head_dim]
@group(0) @binding(3) var<storage, read_write> cs: array<f32>;  // [context, head_dim / 2, 2]: cos, sin
@group(0) @binding(4) var<storage, read_write> hn: array<f32>;  // [2, head_dim]: q_norm, k_norm
// [n_heads, n_kv, head_dim, halves (0 | 1), eps (f32 bits)]
@group(0) @binding(5) var<storage, read_write> p: array<u32>;
@group(0) @binding(6) var<storage, read_write> s: array<u32>;   // step (step.rs)

// Qwen3's per-head RMSNorm, compiled in (a barrier must not depend on a buffer's value).
const HEAD_NORM: bool = {{head_norm}};

var<workgroup> part: array<f32, 64>;

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
            let dst = ((head - nh) * cap + crow) * hd;
            kv[dst + a] = ra;
            kv[dst + b] = rb;
        }
    }
    if !is_q {
        // The value head beside this key head, copied as it is.
        let g = head - nh;
        let vsrc = r * width + (nh + nkv + g) * hd;
        let dst = ((nkv + g) * cap + crow) * hd;
        for (var i = lid; i < hd; i += 64u) {
            kv[dst + i] = qkv[vsrc + i];
        }
    }
}
