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
    // Both sub-blocks' scales and minimums at once (k_scales' products, two at a time).
    let dm = unpack2x16float(aligned_at(off));
    let sm = scale_min_pair(vec3<u32>(aligned_at(off + 4u), aligned_at(off + 8u), aligned_at(off + 12u)), c);
    let sa = dm.x * f32(sm & 0xffu);
    let ma = -dm.y * f32((sm >> 16u) & 0xffu);
    let sb = dm.x * f32((sm >> 8u) & 0xffu);
    let mb = -dm.y * f32(sm >> 24u);
    q[0] = nibbles(w0, 0u) * sa + vec4<f32>(ma);
    q[1] = nibbles(w1, 0u) * sa + vec4<f32>(ma);
    q[2] = nibbles(w0, 4u) * sb + vec4<f32>(mb);
    q[3] = nibbles(w1, 4u) * sb + vec4<f32>(mb);
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
// multiple of 16): its 16 bytes of quants (bytes 16i .. 16i + 16 of the 128), whose low nibbles
// are values 16·(i % 2) .. + 16 of sub-block 2c (`wlo`) and high nibbles the same of 2c + 1
// (`whi`), c = i / 2, and their scales in `wsc` = (d·sc, dmin·m of 2c, d·sc, dmin·m of 2c + 1),
// from the super-block's first 16 bytes (d, dmin, the 12 scale bytes): two vec4 loads, the
// first one the same for the super-block's 8 lanes.
fn load_wide(rb: u32, b: u32, i: u32) {
    let v = (rb + b * 144u) >> 4u;
    let h = vec_at(v);
    let wq = vec_at(v + 1u + i);
    let m4 = vec4<u32>(0x0f0f0f0fu);
    wlo = wq & m4;
    whi = (wq >> vec4<u32>(4u)) & m4;
    let dm = unpack2x16float(h.x);
    // (sc, sc', m, m') of sub-blocks 2c and 2c + 1, c = i / 2.
    let sm = scale_min_pair(h.yzw, i / 2u);
    wsc = vec4<f32>(dm.x * f32(sm & 0xffu), dm.y * f32((sm >> 16u) & 0xffu),
        dm.x * f32((sm >> 8u) & 0xffu), dm.y * f32(sm >> 24u));
}
