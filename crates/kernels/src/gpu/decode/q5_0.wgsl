// One 32-value group of a Q5_0 row: load_i8(rb, g) sets qi, s0, s1 and mn (common.wgsl;
// load_group is made from it). Its bytes are read from `blk` (block_at, reader.wgsl): the
// values 0 .. 31 (the minimum in mn), qi[k] the low nibbles of bytes 6 + 4k .. 9 + 4k with
// fifth bits 4k .. 4k + 3, qi[k + 4] their high nibbles with fifth bits 16 + 4k .., a value a
// byte, packed with integer operations.
fn load_i8(rb: u32, g: u32) {
    let off = rb + g * 22u;
    block_at(off);
    s0 = unpack2x16float(blk[0]).x;
    s1 = s0;
    mn = -16.0 * s0;
    let h = funnel(blk[0], blk[1], 16u); // bytes 2 .. 5
    for (var k = 0u; k < 4u; k++) { // unroll
        let v = funnel(blk[1u + k], blk[2u + k], 16u); // bytes 6 + 4k ..
        qi[k] = (v & 0x0f0f0f0fu) | fifth_bytes((h >> (4u * k)) & 15u);
        qi[k + 4u] = ((v >> 4u) & 0x0f0f0f0fu) | fifth_bytes((h >> (16u + 4u * k)) & 15u);
    }
}
