// One 32-value group of a Q5_K row: load_i8(rb, g) sets qi, s0, s1 and mn (common.wgsl;
// load_group is made from it): the values 0 .. 31, a byte each, the nibble of quant byte 4k + i
// of the group's pair with bit j of high byte 4k + i (j the group in its super-block) above it.
fn load_i8(rb: u32, g: u32) {
    let off = rb + (g / 8u) * 176u;
    let j = g % 8u;
    k_scales(off, j);
    let base = off + 48u + 32u * (j / 2u);
    let shift = 4u * (j % 2u);
    for (var k = 0u; k < 8u; k++) { // unroll
        let h = (aligned_at(off + 16u + 4u * k) >> j) & 0x01010101u;
        qi[k] = ((aligned_at(base + 4u * k) >> shift) & 0x0f0f0f0fu) | (h << 4u);
    }
}
