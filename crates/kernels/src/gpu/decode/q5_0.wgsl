// One 32-value group of a Q5_0 row: load_group(rb, g) sets q, s0, s1 and mn (common.wgsl).
// A block is 22 bytes, so it starts at 0 or 2 bytes into a word: its words are loaded once,
// 7 from the word it starts in, and shifted to start at its first byte (b[j] = bytes 4j ..
// 4j + 3) without a branch; every later read is a constant index.
fn load_group(rb: u32, g: u32) {
    let off = rb + g * 22u;
    let i = off >> 2u;
    let sh = (off & 3u) * 8u;
    var win: array<u32, 7>;
    for (var k = 0u; k < 7u; k++) { // unroll
        win[k] = w[i + k];
    }
    var b: array<u32, 6>;
    for (var k = 0u; k < 6u; k++) { // unroll
        b[k] = funnel(win[k], win[k + 1u], sh);
    }
    s0 = unpack2x16float(b[0]).x;
    s1 = s0;
    mn = -16.0 * s0;
    let h = funnel(b[0], b[1], 16u); // bytes 2 .. 5
    for (var k = 0u; k < 4u; k++) { // unroll
        let v = funnel(b[1u + k], b[2u + k], 16u); // bytes 6 + 4k ..
        q[k] = nibbles(v, 0u) + fifth_bits(h, 4u * k);
        q[k + 4u] = nibbles(v, 4u) + fifth_bits(h, 16u + 4u * k);
    }
}
