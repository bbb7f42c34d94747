// One 32-value group of a Q8_0 row as 8-bit integers: load_i8(rb, g) sets qi (the block's own
// bytes), s0, s1 and mn (common.wgsl; load_group is made from it). Its bytes are read from
// `blk` (block_at, reader.wgsl).
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
