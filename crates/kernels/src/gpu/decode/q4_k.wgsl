// One 32-value group of a Q4_K row: load_i8(rb, g) sets qi, s0, s1 and mn (common.wgsl;
// load_group is made from it).
// Lane `i` (of a 16-lane team, matmul.wgsl's lane teams) of super-block `b`: q[0], q[1] the
// values 8·(i % 4) .. + 8 of sub-block 2c, q[2], q[3] the same of 2c + 1 (c = i / 4), scaled
// (value = d·sc·q − dmin·m), from the 8 bytes of quants at 32c + 8·(i % 4), which hold both.
fn load_lane(rb: u32, b: u32, i: u32) {
    let off = rb + b * 144u;
    let c = i / 4u;
    let at = off + 16u + 32u * c + 8u * (i % 4u);
    let w0 = aligned_at(at);
    let w1 = aligned_at(at + 4u);
    k_scales(off, 2u * c);
    q[0] = nibbles(w0, 0u) * s0 + vec4<f32>(mn);
    q[1] = nibbles(w1, 0u) * s0 + vec4<f32>(mn);
    k_scales(off, 2u * c + 1u);
    q[2] = nibbles(w0, 4u) * s0 + vec4<f32>(mn);
    q[3] = nibbles(w1, 4u) * s0 + vec4<f32>(mn);
}


// The group as 8-bit integers: qi[k] the nibbles of values 4k .. 4k + 3, a byte each.
fn load_i8(rb: u32, g: u32) {
    let off = rb + (g / 8u) * 144u;
    let j = g % 8u;
    k_scales(off, j);
    let base = off + 16u + 32u * (j / 2u);
    let shift = 4u * (j % 2u);
    for (var k = 0u; k < 8u; k++) { // unroll
        qi[k] = (aligned_at(base + 4u * k) >> shift) & 0x0f0f0f0fu;
    }
}

// Lane `i` (of 8, matmul.wgsl's wide teams) of super-block `b` of the row at byte `rb` (a
// multiple of 16): its 16 bytes of quants in `wq` (bytes 16i .. 16i + 16 of the 128, in which
// the low nibbles are values 16·(i % 2) .. + 16 of sub-block 2c and the high nibbles the same
// of 2c + 1, c = i / 2) and their scales in `wsc` = (d·sc, dmin·m of 2c, d·sc, dmin·m of
// 2c + 1), from the super-block's first 16 bytes (d, dmin, the 12 scale bytes): two vec4 loads,
// the first one the same for the super-block's 8 lanes.
fn load_wide(rb: u32, b: u32, i: u32) {
    let v = (rb + b * 144u) >> 4u;
    let h = vec_at(v);
    wq = vec_at(v + 1u + i);
    let dm = unpack2x16float(h.x);
    let c = i / 2u;
    let lo = scale_min_words(h.yzw, 2u * c);
    let hi = scale_min_words(h.yzw, 2u * c + 1u);
    wsc = vec4<f32>(dm.x * lo.x, dm.y * lo.y, dm.x * hi.x, dm.y * hi.y);
}
