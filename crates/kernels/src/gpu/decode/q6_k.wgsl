// One 32-value group of a Q6_K row: load_i8(rb, g) sets qi, s0, s1 and mn (common.wgsl;
// load_group is made from it). A super-block is 212 bytes in GPU memory (the file's 210 and two
// of padding, added at upload: `WeightType::gpu_block_bytes`), so with rows of whole words every
// block, its runs of low and high bits and its f16 d at bytes 208..209 start on a word: a word
// of quants is one load. Each byte's 6-bit value v (0 .. 63) becomes v − 32 as a signed byte
// without a carry between bytes: below 32 (bit 5 clear) it is v + 224, bits 5–7 set over the
// low five; from 32 on, the low five alone.
fn load_i8(rb: u32, g: u32) {
    let off = rb + (g / 8u) * 212u;
    let j = g % 8u;
    let half = j / 4u;
    let part = j % 4u;
    let d = unpack2x16float(aligned_at(off + 208u)).x;
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
        let t = ~v & 0x20202020u;
        qi[k] = (v & 0x1f1f1f1fu) | t | (t << 1u) | (t << 2u);
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
    let off = rb + b * 212u;
    let c = i / 4u;
    let m = i % 4u;
    let n = c / 2u;
    let upper = 4u * (c % 2u);
    let d = unpack2x16float(aligned_at(off + 208u)).x;
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
