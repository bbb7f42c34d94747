// One 32-value group of an f32 row (a file's f32 matrix, kept exact): load_group(rb, g) sets q,
// s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 128u;
    s0 = 1.0;
    s1 = 1.0;
    mn = 0.0;
    for (var k = 0u; k < 8u; k++) { // unroll
        let at = off + 16u * k;
        q[k] = vec4<f32>(bitcast<f32>(aligned_at(at)), bitcast<f32>(aligned_at(at + 4u)),
            bitcast<f32>(aligned_at(at + 8u)), bitcast<f32>(aligned_at(at + 12u)));
    }
}
