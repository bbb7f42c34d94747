// One 32-value group of a Q5_K row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + (g / 8u) * 176u;
    let j = g % 8u;
    k_scales(off, j);
    let base = off + 48u + 32u * (j / 2u);
    let shift = 4u * (j % 2u);
    for (var k = 0u; k < 8u; k++) { // unroll
        q[k] = nibbles(aligned_at(base + 4u * k), shift) + byte_bits(aligned_at(off + 16u + 4u * k), j);
    }
}
