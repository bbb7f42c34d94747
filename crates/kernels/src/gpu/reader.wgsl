// The reads of GGUF block bytes from the weight binding `w` (u32 words), included once per
// weight binding of a kernel: the kernel source renames `w` and every function here (and the
// type's `load_group`, in decode/) with the binding's suffix, so a kernel over several matrices
// of different types reads each through its own copy.

// The weight buffer carries one word of padding past its last block, so the word after the
// last block's last exists: the window the Q4_0, Q5_0 and Q8_0 decoders load (a block of
// 4k + 2 bytes ends 2 bytes into a word or at one's end, so that word is at most the padding).
// Those types read words that start 0 or 2 bytes in through `funnel` (common.wgsl), without a
// branch.

// The 4 bytes at byte offset `off`, a multiple of 4: one load (types whose blocks are whole
// words: Q4_1, Q5_1, Q4_K, Q5_K, F16, BF16, F32, and Q6_K as the GPU holds it, 212 bytes).
fn aligned_at(off: u32) -> u32 {
    return word_at(off >> 2u);
}

// Word `i` of the binding (declared as words, or as vec4s of them in wide teams).
{{word_at}}

// Q4_0, Q5_0, Q8_0 (blocks of 4k + 2 bytes, so starting 0 or 2 bytes into a word): the block at
// byte `off` into `blk`, blk[j] = its bytes 4j .. 4j + 3, its words loaded once (one more than
// it spans, from the word it starts in) and shifted into place without a branch; the decoder
// then reads constant indices. Filled in only for those types (`reader` in mod.rs).
{{block_at}}

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
