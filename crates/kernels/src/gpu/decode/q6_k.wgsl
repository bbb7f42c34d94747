// One 32-value group of a Q6_K row: load_i8(rb, g) sets qi, s0, s1 and mn (common.wgsl;
// load_group is made from it). In GPU memory a row is held in runs of 8 super-blocks, each run
// its blocks' f16 d's (16 bytes) and then their other 208 bytes (128 of low nibbles, 64 of high
// bit pairs, 16 scales), rearranged at upload (`WeightType::gpu_row_bytes`): every block and
// each of its three parts start on 16 bytes, so a word of quants is one load, and a wide
// team's lane takes each part's 16 bytes in one vec4 load.

// Byte of super-block `b`'s 208 bytes (no d) in the row at byte `rb`.
fn q6_at(rb: u32, b: u32) -> u32 {
    return rb + 1680u * (b / 8u) + 16u + 208u * (b % 8u);
}

// Super-block `b`'s d: half b % 2 of word (b % 8) / 2 of its run.
fn q6_d(rb: u32, b: u32) -> f32 {
    let w = aligned_at(rb + 1680u * (b / 8u) + 4u * ((b % 8u) / 2u));
    return unpack2x16float(w >> (16u * (b & 1u))).x;
}

fn load_i8(rb: u32, g: u32) {
    let off = q6_at(rb, g / 8u);
    let j = g % 8u;
    let half = j / 4u;
    let part = j % 4u;
    let d = q6_d(rb, g / 8u);
    // The group's two 8-bit scales, bytes 2·part and 2·part + 1 of the half's 8 (sc[8·half ..]).
    let sw = aligned_at(off + 192u + 8u * half + 4u * (part / 2u)) >> (16u * (part % 2u));
    let sv = bitcast<i32>(sw);
    s0 = d * f32(extractBits(sv, 0u, 8u));
    s1 = d * f32(extractBits(sv, 8u, 8u));
    mn = 0.0;
    // Word indices of the low-bit run (32 bytes at 64·half + 32·(part & 1)) and the high-bit run
    // (at 128 + 32·half).
    let li = (off + 64u * half + 32u * (part & 1u)) >> 2u;
    let ls = 4u * (part >> 1u);
    let hi = (off + 128u + 32u * half) >> 2u;
    let hs = 2u * part;
    for (var k = 0u; k < 8u; k++) { // unroll
        let v = ((word_at(li + k) >> ls) & 0x0f0f0f0fu) | (((word_at(hi + k) >> hs) & 0x03030303u) << 4u);
        qi[k] = q6_signed(v);
    }
}

// Lane `i` (of a 16-lane team, matmul.wgsl's lane teams) of super-block `b`: q[0], q[1] the
// values 64c + 8m .. + 8, q[2], q[3] the values 64c + 32 + 8m .. + 8 (c = i / 4, m = i % 4),
// scaled (value = d·sc·(q − 32)). In ggml's layout half n = c / 2 of the block holds values
// 128n + l (l < 32) in ql[64n + l]'s low nibble and qh[32n + l]'s bits 0–1, + 32 in
// ql[64n + 32 + l]'s low nibble and bits 2–3, + 64 and + 96 the same bytes' high nibbles and
// bits 4–5, 6–7; value 128n + v has scale sc[8n + v / 16]. So lane i reads 8 bytes at each of
// ql[64n + 8m], ql[64n + 32 + 8m] and qh[32n + 8m], its nibble and bit pairs chosen by c % 2,
// and two scales: lanes c = 2n and 2n + 1 read the same bytes (low and high halves), so a team
// reads the block's 192 bytes of quants twice, the second time from the cache.
fn load_lane(rb: u32, b: u32, i: u32) {
    let off = q6_at(rb, b);
    let c = i / 4u;
    let m = i % 4u;
    let n = c / 2u;
    let upper = 4u * (c % 2u);
    let d = q6_d(rb, b);
    // Scales sc[8n + upper + m / 2] and the one 2 on: bytes m / 2 and m / 2 + 2 of one word.
    let sv = bitcast<i32>(aligned_at(off + 192u + 8u * n + upper) >> (8u * (m / 2u)));
    let sa = d * f32(extractBits(sv, 0u, 8u));
    let sb = d * f32(extractBits(sv, 16u, 8u));
    // Word indices of the three 8-byte runs.
    let la = (off + 64u * n + 8u * m) >> 2u;
    let lb = la + 8u;
    let hq = (off + 128u + 32u * n + 8u * m) >> 2u;
    for (var k = 0u; k < 2u; k++) { // unroll
        // Four 6-bit values a word, a byte each: nibbles at bit `upper`, bit pairs above them.
        let h = word_at(hq + k) >> upper;
        let va = ((word_at(la + k) >> upper) & 0x0f0f0f0fu) | ((h & 0x03030303u) << 4u);
        let vb = ((word_at(lb + k) >> upper) & 0x0f0f0f0fu) | (((h >> 2u) & 0x03030303u) << 4u);
        q[k] = (byte_values(va) - vec4<f32>(32.0)) * sa;
        q[k + 2u] = (byte_values(vb) - vec4<f32>(32.0)) * sb;
    }
}

// Lane `i` (of 8, matmul.wgsl's wide teams) of super-block `b` of the row at byte `rb` (a
// multiple of 16). With n = i / 4, a = i % 4: ql bytes 64n + 16a .. + 16 hold, in their low
// nibbles, values 128n + 16a .. + 16 (low bit pairs from qh bytes 32n + 16·(a % 2) .. + 16 at
// bit 2·(a / 2)) and, in their high nibbles, the values 64 on (bit pairs 4 higher): `wlo` and
// `whi`, a value (0 .. 63) a byte, with scales sc[8n + a] and sc[8n + 4 + a] in `wsc` =
// (d·sc, 32·d·sc, d·sc', 32·d·sc'), value = d·sc·q − 32·d·sc. One vec4 load each of quants,
// high bits (the same for lanes a and a + 2) and scales, one word for d.
fn load_wide(rb: u32, b: u32, i: u32) {
    let v = q6_at(rb, b) >> 4u;
    let n = i / 4u;
    let a = i % 4u;
    let ql = vec_at(v + 4u * n + a);
    // The lane's bit pairs moved to bits 0–1 (its low values') and 4–5 (its high values') of
    // each byte: where a value's high bits go, 4 up for the low values, in place for the high.
    let qh = vec_at(v + 8u + 2u * n + (a % 2u)) >> vec4<u32>(2u * (a / 2u));
    let m4 = vec4<u32>(0x0f0f0f0fu);
    let m6 = vec4<u32>(0x30303030u);
    wlo = (ql & m4) | ((qh << vec4<u32>(4u)) & m6);
    whi = ((ql >> vec4<u32>(4u)) & m4) | (qh & m6);
    // Words 2n and 2n + 1 of the scales hold sc[8n ..] and sc[8n + 4 ..]: byte a of each,
    // sign-extended (shifted to the top, then arithmetically down).
    let scales = vec_at(v + 12u);
    let sw = select(scales.xy, scales.zw, n == 1u);
    let sc = vec2<f32>(bitcast<vec2<i32>>(sw << vec2<u32>(24u - 8u * a)) >> vec2<u32>(24u));
    let d = q6_d(rb, b);
    wsc = vec4<f32>(d * sc.x, 32.0 * d * sc.x, d * sc.y, 32.0 * d * sc.y);
}
