// Activations quantized to 8 bits for matmul.wgsl's 8-bit forms, as llama.cpp's Q8_1 with f32
// scales and as the CPU kernels' per-32 form (quantize.rs): each 32 values of a row,
// d = max|x| / 127, x̂ = round(x · (1 / d)) ∈ [−127, 127] (ties to even, WGSL's `round`)
// packed four to a word, s = d·Σx̂ (what a weight block's minimum multiplies). One division a
// block, as the CPU kernels and llama.cpp's quantizer take it, not one a value (the products
// that quantize their own row, matvec_own.wgsl, do it once a workgroup). A block whose d is not
// a normal f32 (every value under 127 · 2⁻¹²⁶ in magnitude) quantizes to zeros: 1 / d would be
// infinite, and the block adds under 10⁻³⁵ a weight to any sum. With 1 / d finite,
// |x · (1 / d)| ≤ 127 within rounding, which `round` keeps at 127: no clamp. NAK, the whole
// own-quantizing wide one-row Q4_K kernel (2026-12-06): 715 instructions with a division a
// value behind a branch, 759 with one a block and a clamp and a guard for zeros, 610 as here
// (the block's quantization 289). A row's blocks depend on that row alone. One copy of the
// arithmetic for every kernel that quantizes: quant.wgsl and norm.wgsl write the blocks to
// storage (q8_store.wgsl), the products that quantize their own rows (matvec_own.wgsl) to
// workgroup memory, so a block has the same bits whichever wrote it.
//
// Blocks are numbered through the rows, B = row · n_in / 32 + b, and stored four to a chunk of
// 10 vec4s (160 bytes for 128 values): block i's 32 quants in vec4s 2i and 2i + 1, its (d, s)
// bits in vec4 8 + i / 2 at components 2 (i % 2) and 2 (i % 2) + 1.

struct Q8Block {
    // Quants 0..16 and 16..32, four to a word.
    lo: vec4<u32>,
    hi: vec4<u32>,
    d: f32,
    s: f32,
}

// The block of the 32 values `v`.
fn q8_block(v: array<vec4<f32>, 8>) -> Q8Block {
    var top = vec4<f32>(0.0);
    for (var k = 0u; k < 8u; k++) { // unroll
        top = max(top, abs(v[k]));
    }
    let d = max(max(top.x, top.y), max(top.z, top.w)) / 127.0;
    // The least normal f32, 2⁻¹²⁶.
    let inv = select(0.0, 1.0 / d, d >= 1.17549435e-38);
    var words: array<u32, 8>;
    var sum = vec4<i32>(0);
    for (var k = 0u; k < 8u; k++) { // unroll
        let q = vec4<i32>(round(v[k] * inv));
        sum += q;
        words[k] = pack4xI8(q);
    }
    return Q8Block(
        vec4<u32>(words[0], words[1], words[2], words[3]),
        vec4<u32>(words[4], words[5], words[6], words[7]),
        d,
        d * f32(sum.x + sum.y + sum.z + sum.w),
    );
}

// Block `b`'s 32 values `v` quantized into {{q8_dst}} (q8_store.wgsl's storage, or own.wgsl's
// chunk in workgroup memory, `b` counted from the chunk's start).
fn put_q8(v: array<vec4<f32>, 8>, b: u32) {
    let q = q8_block(v);
    let c = (b >> 2u) * 10u;
    let i = b & 3u;
    {{q8_dst}}[c + 2u * i] = q.lo;
    {{q8_dst}}[c + 2u * i + 1u] = q.hi;
    let at = c + 8u + (i >> 1u);
    let comp = 2u * (i & 1u);
    {{q8_dst}}[at][comp] = bitcast<u32>(q.d);
    {{q8_dst}}[at][comp + 1u] = bitcast<u32>(q.s);
}
