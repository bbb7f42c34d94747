// One 32-value group of a Q4_0 row as 8-bit integers: load_i8(rb, g) sets qi (the nibbles of
// values 4k .. 4k + 3 in qi[k], a byte each), s0, s1 and mn (common.wgsl; load_group is made
// from it). In GPU memory a row is held in runs of 8 blocks, each run its blocks' f16 d's (16
// bytes) and then their 16 bytes of nibbles (`WeightType::hold_run`): one vec4 a block.
fn load_i8(rb: u32, g: u32) {
    let run = rb + 144u * (g / 8u);
    let j = g % 8u;
    s0 = unpack2x16float(aligned_at(run + 4u * (j / 2u)) >> (16u * (j & 1u))).x;
    s1 = s0;
    mn = -8.0 * s0;
    let v = vec_at((run + 16u + 16u * j) >> 4u);
    for (var k = 0u; k < 4u; k++) { // unroll
        qi[k] = v[k] & 0x0f0f0f0fu;
        qi[k + 4u] = (v[k] >> 4u) & 0x0f0f0f0fu;
    }
}
