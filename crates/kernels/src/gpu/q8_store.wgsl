// q8.wgsl's blocks written to storage (included by quant.wgsl, and by norm.wgsl where the product
// after it takes them), in q8.wgsl's chunks of four.

@group(0) @binding({{q8_binding}}) var<storage, read_write> xq: array<vec4<u32>>; // [⌈rows · n_in / 128⌉ · 10]

{{q8_block}}

// Block `b`'s 32 values `v` quantized into `xq`.
fn put_q8(v: array<vec4<f32>, 8>, b: u32) {
    let q = q8_block(v);
    let c = (b >> 2u) * 10u;
    let i = b & 3u;
    xq[c + 2u * i] = q.lo;
    xq[c + 2u * i + 1u] = q.hi;
    let at = c + 8u + (i >> 1u);
    let comp = 2u * (i & 1u);
    xq[at][comp] = bitcast<u32>(q.d);
    xq[at][comp + 1u] = bitcast<u32>(q.s);
}
