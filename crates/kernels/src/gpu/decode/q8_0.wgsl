// One 32-value group of a Q8_0 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 34u;
    s0 = f16_at(off);
    s1 = s0;
    mn = 0.0;
    for (var k = 0u; k < 8u; k++) {
        let v = bitcast<i32>(word_at(off + 2u + 4u * k));
        q[k] = vec4<f32>(f32(extractBits(v, 0u, 8u)), f32(extractBits(v, 8u, 8u)),
            f32(extractBits(v, 16u, 8u)), f32(extractBits(v, 24u, 8u)));
    }
}
