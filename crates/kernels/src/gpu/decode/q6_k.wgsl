// One 32-value group of a Q6_K row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
fn load_group(rb: u32, g: u32) {
    let off = rb + (g / 8u) * 210u;
    let j = g % 8u;
    let half = j / 4u;
    let part = j % 4u;
    let d = f16_at(off + 208u);
    let sc = off + 192u + 8u * half + 2u * part;
    s0 = d * f32(extractBits(bitcast<i32>(byte_at(sc)), 0u, 8u));
    s1 = d * f32(extractBits(bitcast<i32>(byte_at(sc + 1u)), 0u, 8u));
    mn = 0.0;
    let ql = off + 64u * half + 32u * (part & 1u);
    let ls = 4u * (part >> 1u);
    let qh = off + 128u + 32u * half;
    let hs = 2u * part;
    for (var k = 0u; k < 8u; k++) { // unroll
        let l = word_at(ql + 4u * k);
        let h = word_at(qh + 4u * k);
        var v = vec4<f32>(0.0);
        for (var b = 0u; b < 4u; b++) { // unroll
            let lo = (l >> (8u * b + ls)) & 15u;
            let hi = (h >> (8u * b + hs)) & 3u;
            v[b] = f32(lo | (hi << 4u)) - 32.0;
        }
        q[k] = v;
    }
}
