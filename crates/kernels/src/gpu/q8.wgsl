// Activations quantized to 8 bits for matmul.wgsl's 8-bit form (included by quant.wgsl, and by
// norm.wgsl where the product after it takes them), as llama.cpp's Q8_1 with f32 scales and as
// the CPU kernels' per-32 form (quantize.rs): each 32 values of a row, d = max|x| / 127,
// x̂ = round(x / d) ∈ [−127, 127] packed four to a word, s = d·Σx̂ (what a weight block's
// minimum multiplies). A row's blocks depend on that row alone. Blocks are numbered through the
// rows, B = row · n_in / 32 + b, and stored four to a chunk of 10 vec4s (160 bytes for 128
// values): block i's 32 quants in vec4s 2i and 2i + 1, its (d, s) bits in vec4 8 + i / 2 at
// components 2 (i % 2) and 2 (i % 2) + 1.

@group(0) @binding({{q8_binding}}) var<storage, read_write> xq: array<vec4<u32>>; // [⌈rows · n_in / 128⌉ · 10]

// Block `b`'s 32 values `v` quantized into `xq`.
fn put_q8(v: array<vec4<f32>, 8>, b: u32) {
    var top = vec4<f32>(0.0);
    for (var k = 0u; k < 8u; k++) { // unroll
        top = max(top, abs(v[k]));
    }
    let d = max(max(top.x, top.y), max(top.z, top.w)) / 127.0;
    var words: array<u32, 8>;
    var sum = vec4<i32>(0);
    for (var k = 0u; k < 8u; k++) { // unroll
        var q = vec4<i32>(0);
        if d > 0.0 {
            q = vec4<i32>(round(v[k] / d));
        }
        sum += q;
        words[k] = pack4xI8(q);
    }
    let c = (b >> 2u) * 10u;
    let i = b & 3u;
    xq[c + 2u * i] = vec4<u32>(words[0], words[1], words[2], words[3]);
    xq[c + 2u * i + 1u] = vec4<u32>(words[4], words[5], words[6], words[7]);
    let at = c + 8u + (i >> 1u);
    let comp = 2u * (i & 1u);
    xq[at][comp] = bitcast<u32>(d);
    xq[at][comp + 1u] = bitcast<u32>(d * f32(sum.x + sum.y + sum.z + sum.w));
}
