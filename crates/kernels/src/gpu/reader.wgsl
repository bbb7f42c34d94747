// The reads of GGUF block bytes from the weight binding `w` (u32 words), included once per
// weight binding of a kernel: the kernel source renames `w` and every function here (and the
// type's `load_group`, in decode/) with the binding's suffix, so a kernel over several matrices
// of different types reads each through its own copy.

// The weight buffer carries one word of padding past its last block, so the word after the
// last block's last exists: the window the Q4_0, Q5_0, Q8_0 and Q6_K decoders load (a block of
// 4k + 2 bytes ends 2 bytes into a word or at one's end, so that word is at most the padding).
// Those types read words that start 0 or 2 bytes in through `funnel` (common.wgsl), without a
// branch.

// The 4 bytes at byte offset `off`, a multiple of 4: one load (types whose blocks are whole
// words: Q4_1, Q5_1, Q4_K, Q5_K, F16, BF16, F32).
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
    if j < 4u {
        return vec2<f32>(f32(scale_byte(q, j) & 63u), f32(scale_byte(q, j + 4u) & 63u));
    }
    let a = scale_byte(q, j + 4u);
    let sc = (a & 15u) | ((scale_byte(q, j - 4u) >> 6u) << 4u);
    let m = (a >> 4u) | ((scale_byte(q, j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

fn scale_byte(q: vec3<u32>, k: u32) -> u32 {
    return (q[k / 4u] >> ((k % 4u) * 8u)) & 0xffu;
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
