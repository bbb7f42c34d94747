// One 32-value group of a Q4_0 row as 8-bit integers: load_i8(rb, g) sets qi (the nibbles of
// values 4k .. 4k + 3 in qi[k], a byte each), s0, s1 and mn (common.wgsl; load_group is made
// from it). Its bytes are read from `blk` (block_at, reader.wgsl).
fn load_i8(rb: u32, g: u32) {
    let off = rb + g * 18u;
    block_at(off);
    s0 = unpack2x16float(blk[0]).x;
    s1 = s0;
    mn = -8.0 * s0;
    for (var k = 0u; k < 4u; k++) { // unroll
        let v = funnel(blk[k], blk[k + 1u], 16u);
        qi[k] = v & 0x0f0f0f0fu;
        qi[k + 4u] = (v >> 4u) & 0x0f0f0f0fu;
    }
}
