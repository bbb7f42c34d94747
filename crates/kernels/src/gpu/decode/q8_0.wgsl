// One 32-value group of a Q8_0 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
// Its bytes are read from `blk` (block_at, reader.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 34u;
    block_at(off);
    s0 = unpack2x16float(blk[0]).x;
    s1 = s0;
    mn = 0.0;
    for (var k = 0u; k < 8u; k++) { // unroll
        let v = bitcast<i32>(funnel(blk[k], blk[k + 1u], 16u)); // bytes 2 + 4k ..
        q[k] = vec4<f32>(f32(extractBits(v, 0u, 8u)), f32(extractBits(v, 8u, 8u)),
            f32(extractBits(v, 16u, 8u)), f32(extractBits(v, 24u, 8u)));
    }
}

// The same group as 8-bit integers (matmul.wgsl's 8-bit form): the block's own bytes.
fn load_i8(rb: u32, g: u32) {
    let off = rb + g * 34u;
    block_at(off);
    s0 = unpack2x16float(blk[0]).x;
    s1 = s0;
    mn = 0.0;
    for (var k = 0u; k < 8u; k++) { // unroll
        qi[k] = funnel(blk[k], blk[k + 1u], 16u); // bytes 2 + 4k ..
    }
}
