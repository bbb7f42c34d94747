// One 32-value group of a Q5_1 row: load_i8(rb, g) sets qi, s0, s1 and mn (common.wgsl;
// load_group is made from it): the values 0 .. 31, qi[k] the low nibbles of bytes 8 + 4k ..
// 11 + 4k with fifth bits 4k .. 4k + 3, qi[k + 4] their high nibbles with fifth bits 16 + 4k ..,
// a value a byte, packed with integer operations.
fn load_i8(rb: u32, g: u32) {
    let off = rb + g * 24u;
    let dm = unpack2x16float(aligned_at(off));
    s0 = dm.x;
    s1 = dm.x;
    mn = dm.y;
    let h = aligned_at(off + 4u);
    for (var k = 0u; k < 4u; k++) { // unroll
        let v = aligned_at(off + 8u + 4u * k);
        qi[k] = (v & 0x0f0f0f0fu) | fifth_bytes((h >> (4u * k)) & 15u);
        qi[k + 4u] = ((v >> 4u) & 0x0f0f0f0fu) | fifth_bytes((h >> (16u + 4u * k)) & 15u);
    }
}
