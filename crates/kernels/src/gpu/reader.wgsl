// The reads of GGUF block bytes from the weight binding `w` (u32 words), included once per
// weight binding of a kernel: the kernel source renames `w` and every function here (and the
// type's `load_group`, in decode/) with the binding's suffix, so a kernel over several matrices
// of different types reads each through its own copy.

// The 4 bytes at byte offset `off`, a multiple of 4: one load (every type as the GPU holds it:
// Q4_0, Q5_0, Q8_0 and Q6_K rearranged into runs of blocks, `WeightType::gpu_row_bytes`).
fn aligned_at(off: u32) -> u32 {
    return word_at(off >> 2u);
}

// Word `i` of the binding (declared as words, or as vec4s of them in wide teams).
{{word_at}}

fn byte_at(off: u32) -> u32 {
    return (word_at(off >> 2u) >> ((off & 3u) * 8u)) & 0xffu;
}

// Q4_K / Q5_K: the 6-bit scale and minimum of sub-block j from the 12 scale bytes at `off`.
fn scale_min_k4(off: u32, j: u32) -> vec2<f32> {
    return scale_min_words(vec3<u32>(aligned_at(off), aligned_at(off + 4u), aligned_at(off + 8u)), j);
}

// The same from the 12 scale bytes as three words (bytes 4k .. 4k + 3 in word k).
fn scale_min_words(q: vec3<u32>, j: u32) -> vec2<f32> {
    let sm = scale_min_pair(q, j / 2u) >> (8u * (j & 1u));
    return vec2<f32>(f32(sm & 0xffu), f32((sm >> 16u) & 0xffu));
}

// The 6-bit scales and minimums of sub-blocks 2c and 2c + 1 (c < 4) from the three words, one a
// byte: (sc, sc', m, m'), without a branch or an indexed word, so that lanes of different c
// stay on one path. Sub-blocks 0–3 keep the low 6 bits of bytes 0–7 (scales, then minimums);
// 4–7 a nibble of bytes 8–11 (scale low, minimum high) and, above it, the top 2 bits of the
// byte 4 before (scales: bytes 0–3; minimums: 4–7). Pair c reads bytes 2v, 2v + 1 of each word
// (v = c % 2): l = (b[2v], b[2v+1], b[4+2v], b[5+2v]), e = (b[8+2v], b[9+2v]).
fn scale_min_pair(q: vec3<u32>, c: u32) -> u32 {
    let h = 16u * (c & 1u);
    let l = ((q.x >> h) & 0xffffu) | (((q.y >> h) & 0xffffu) << 16u);
    let e = (q.z >> h) & 0xffffu;
    let high = (((e << 12u) | e) & 0x0f0f0f0fu) | ((l & 0xc0c0c0c0u) >> 2u);
    return select(l & 0x3f3f3f3fu, high, c >= 2u);
}

// Q4_K / Q5_K: the scales of sub-block j of the super-block at `off` (f16 d and dmin, then the
// 12 scale bytes): value = d·sc·q − dmin·m.
fn k_scales(off: u32, j: u32) {
    let dm = unpack2x16float(aligned_at(off));
    let sm = scale_min_k4(off + 4u, j);
    s0 = dm.x * sm.x;
    s1 = s0;
    mn = -dm.y * sm.y;
}
