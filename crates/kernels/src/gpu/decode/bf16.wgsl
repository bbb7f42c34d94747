// One 32-value group of a BF16 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 64u;
    s0 = 1.0;
    s1 = 1.0;
    mn = 0.0;
    for (var k = 0u; k < 8u; k++) { // unroll
        let a = aligned_at(off + 8u * k);
        let b = aligned_at(off + 8u * k + 4u);
        q[k] = vec4<f32>(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xffff0000u),
            bitcast<f32>(b << 16u), bitcast<f32>(b & 0xffff0000u));
    }
}
