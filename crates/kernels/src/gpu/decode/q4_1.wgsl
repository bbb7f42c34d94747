// One 32-value group of a Q4_1 row as 8-bit integers: load_i8(rb, g) sets qi (the nibbles of
// values 4k .. 4k + 3 in qi[k], a byte each), s0, s1 and mn (common.wgsl; load_group is made
// from it).
fn load_i8(rb: u32, g: u32) {
    let off = rb + g * 20u;
    let dm = unpack2x16float(aligned_at(off));
    s0 = dm.x;
    s1 = dm.x;
    mn = dm.y;
    for (var k = 0u; k < 4u; k++) { // unroll
        let v = aligned_at(off + 4u + 4u * k);
        qi[k] = v & 0x0f0f0f0fu;
        qi[k + 4u] = (v >> 4u) & 0x0f0f0f0fu;
    }
}
