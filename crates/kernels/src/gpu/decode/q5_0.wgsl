// One 32-value group of a Q5_0 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 22u;
    s0 = f16_at(off);
    s1 = s0;
    mn = -16.0 * s0;
    let h = word_at(off + 2u);
    for (var k = 0u; k < 4u; k++) {
        let v = word_at(off + 6u + 4u * k);
        q[k] = nibbles(v, 0u) + fifth_bits(h, 4u * k);
        q[k + 4u] = nibbles(v, 4u) + fifth_bits(h, 16u + 4u * k);
    }
}
