// One 32-value group of a Q6_K row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
// A super-block is 210 bytes, so it starts 0 or 2 bytes into a word and so do its 32-byte runs of
// low and high bits: each run is read as 9 whole words funnel-shifted by that one amount, with no
// branch to split lanes whose rows start differently (a row of 4864 values is 19 super-blocks,
// 3,990 bytes).
fn load_group(rb: u32, g: u32) {
    let off = rb + (g / 8u) * 210u;
    let sh = (off & 3u) * 8u;
    let j = g % 8u;
    let half = j / 4u;
    let part = j % 4u;
    // d, the f16 at bytes 208..209; the word after exists (the next block or the padding).
    let di = (off + 208u) >> 2u;
    let d = unpack2x16float(funnel(w[di], w[di + 1u], sh)).x;
    let sc = off + 192u + 8u * half + 2u * part;
    s0 = d * f32(extractBits(bitcast<i32>(byte_at(sc)), 0u, 8u));
    s1 = d * f32(extractBits(bitcast<i32>(byte_at(sc + 1u)), 0u, 8u));
    mn = 0.0;
    // Word indices of the low-bit run (32 bytes at 64·half + 32·(part & 1)) and the high-bit run
    // (at 128 + 32·half); the 9th word of each is still inside the super-block.
    let li = (off + 64u * half + 32u * (part & 1u)) >> 2u;
    let ls = 4u * (part >> 1u);
    let hi = (off + 128u + 32u * half) >> 2u;
    let hs = 2u * part;
    for (var k = 0u; k < 8u; k++) { // unroll
        let l = funnel(w[li + k], w[li + k + 1u], sh);
        let h = funnel(w[hi + k], w[hi + k + 1u], sh);
        var v = vec4<f32>(0.0);
        for (var b = 0u; b < 4u; b++) { // unroll
            let lo = (l >> (8u * b + ls)) & 15u;
            let hb = (h >> (8u * b + hs)) & 3u;
            v[b] = f32(lo | (hb << 4u)) - 32.0;
        }
        q[k] = v;
    }
}
