// One 32-value group of a Q8_0 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
// A block is 34 bytes, so it starts at 0 or 2 bytes into a word: its words are loaded once,
// 10 from the word it starts in, and shifted to start at its first byte (b[j] = bytes 4j ..
// 4j + 3) without a branch; every later read is a constant index.
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 34u;
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    var win: array<u32, 10>;
    for (var k = 0u; k < 10u; k++) { // unroll
        win[k] = w[i + k];
    }
    var b: array<u32, 9>;
    for (var k = 0u; k < 9u; k++) { // unroll
        b[k] = funnel(win[k], win[k + 1u], sh);
    }
    s0 = unpack2x16float(b[0]).x;
    s1 = s0;
    mn = 0.0;
    for (var k = 0u; k < 8u; k++) { // unroll
        let v = bitcast<i32>(funnel(b[k], b[k + 1u], 16u)); // bytes 2 + 4k ..
        q[k] = vec4<f32>(f32(extractBits(v, 0u, 8u)), f32(extractBits(v, 8u, 8u)),
            f32(extractBits(v, 16u, 8u)), f32(extractBits(v, 24u, 8u)));
    }
}
