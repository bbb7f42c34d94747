// The 8-bit form that quantizes its own row (matmul.wgsl's module scope where `Acts::Q8Own`; its
// loop in matvec_own.wgsl): a chunk of the row's blocks in workgroup memory, read by
// matvec_q8.wgsl's loops through `xq`.

// One chunk of 2,048 values (64 blocks, 16 of q8.wgsl's chunks of four): 2,560 bytes.
var<workgroup> xw: array<vec4<u32>, 160>;
// The row's 256 partial sums of squares where a norm is folded in (norm.wgsl's, in its order).
var<workgroup> squares: array<f32, 256>;
// The row's chunks, through workgroup memory: the loop over them holds barriers, and a count
// read from storage is varying to WGSL's uniformity analysis (as tile.wgsl's `walk`).
var<workgroup> own_chunks: u32;
// The chunk's first vec4 as matvec_q8.wgsl numbers a row's blocks.
var<private> xw_base: u32;

// Vec4 `i` of the row's quantized blocks (matvec_q8.wgsl's numbering), from the chunk in
// workgroup memory.
fn xq(i: u32) -> vec4<u32> {
    return xw[i - xw_base];
}

{{q8_block}}
