// One 32-value group of a Q4_0 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 18u;
    s0 = f16_at(off);
    s1 = s0;
    mn = -8.0 * s0;
    for (var k = 0u; k < 4u; k++) {
        let v = word_at(off + 2u + 4u * k);
        q[k] = nibbles(v, 0u);
        q[k + 4u] = nibbles(v, 4u);
    }
}
