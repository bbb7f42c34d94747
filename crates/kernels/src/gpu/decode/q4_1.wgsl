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

// The same group as 8-bit integers (matmul.wgsl's 8-bit form): qi[k] the nibbles of values
// 4k .. 4k + 3, a byte each, with the same s0, s1 and mn.
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
