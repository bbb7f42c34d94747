// One 32-value group of a Q4_1 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 20u;
    let dm = unpack2x16float(aligned_at(off));
    s0 = dm.x;
    s1 = dm.x;
    mn = dm.y;
    for (var k = 0u; k < 4u; k++) { // unroll
        let v = aligned_at(off + 4u + 4u * k);
        q[k] = nibbles(v, 0u);
        q[k + 4u] = nibbles(v, 4u);
    }
}
