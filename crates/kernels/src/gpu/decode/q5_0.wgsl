// One 32-value group of a Q5_0 row: load_i8(rb, g) sets qi, s0, s1 and mn (common.wgsl;
// load_group is made from it): the values 0 .. 31 (the minimum in mn), qi[k] the low nibbles
// of nibble bytes 4k .. 4k + 3 with fifth bits 4k .. 4k + 3, qi[k + 4] their high nibbles with
// fifth bits 16 + 4k .., a value a byte, packed with integer operations. In GPU memory a row
// is held in runs of 8 blocks, each run its blocks' f16 d's (16 bytes) and then its blocks
// four at a time, their fifth bits (a word each) and then their nibbles (16 bytes each)
// (`WeightType::hold_run`): a block's fifth bits are one load and its nibbles one vec4.
fn load_i8(rb: u32, g: u32) {
    let run = rb + 176u * (g / 8u);
    let j = g % 8u;
    s0 = unpack2x16float(aligned_at(run + 4u * (j / 2u)) >> (16u * (j & 1u))).x;
    s1 = s0;
    mn = -16.0 * s0;
    let quad = run + 16u + 80u * (j / 4u);
    let h = aligned_at(quad + 4u * (j % 4u));
    let v = vec_at((quad + 16u + 16u * (j % 4u)) >> 4u);
    for (var k = 0u; k < 4u; k++) { // unroll
        qi[k] = (v[k] & 0x0f0f0f0fu) | fifth_bytes((h >> (4u * k)) & 15u);
        qi[k + 4u] = ((v[k] >> 4u) & 0x0f0f0f0fu) | fifth_bytes((h >> (16u + 4u * k)) & 15u);
    }
}
