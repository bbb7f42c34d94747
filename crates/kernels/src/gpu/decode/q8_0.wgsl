// One 32-value group of a Q8_0 row as 8-bit integers: load_i8(rb, g) sets qi (the block's own
// bytes), s0, s1 and mn (common.wgsl; load_group is made from it). In GPU memory a row is held
// in runs of 8 blocks, each run its blocks' f16 d's (16 bytes) and then their 32 bytes of
// quants (`WeightType::hold_run`): a block's quants start on 16 bytes, two vec4s.
fn load_i8(rb: u32, g: u32) {
    let run = rb + 272u * (g / 8u);
    let j = g % 8u;
    s0 = unpack2x16float(aligned_at(run + 4u * (j / 2u)) >> (16u * (j & 1u))).x;
    s1 = s0;
    mn = 0.0;
    let v = (run + 16u + 32u * j) >> 4u;
    let a = vec_at(v);
    let b = vec_at(v + 1u);
    qi[0] = a.x;
    qi[1] = a.y;
    qi[2] = a.z;
    qi[3] = a.w;
    qi[4] = b.x;
    qi[5] = b.y;
    qi[6] = b.z;
    qi[7] = b.w;
}
