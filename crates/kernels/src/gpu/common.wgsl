// Shared by the GPU kernels: GGUF block bytes read from u32 words, and one 32-value group of a
// weight row decoded into `q` (its integer values as f32, in order) with the scales that apply:
// value l = s0 · q[l] + mn for l < 16, s1 · q[l] + mn for l ≥ 16 (only Q6_K has s0 ≠ s1).
// Block scales are f16 decoded with `unpack2x16float`, core WGSL: no `shader-f16` needed.

var<private> q: array<vec4<f32>, 8>;
var<private> s0: f32;
var<private> s1: f32;
var<private> mn: f32;

// The 4 bytes at byte offset `off` (any alignment), little-endian. The weight buffer carries one
// word of padding past its last block, so `w[i + 1]` exists.
fn word_at(off: u32) -> u32 {
    let i = off >> 2u;
    let s = (off & 3u) * 8u;
    if s == 0u {
        return w[i];
    }
    return (w[i] >> s) | (w[i + 1u] << (32u - s));
}

fn f16_at(off: u32) -> f32 {
    return unpack2x16float(word_at(off)).x;
}

fn byte_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

// The 4 nibbles at bit `shift` of each byte of `v`.
fn nibbles(v: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(
        f32((v >> shift) & 15u),
        f32((v >> (shift + 8u)) & 15u),
        f32((v >> (shift + 16u)) & 15u),
        f32((v >> (shift + 24u)) & 15u),
    );
}

// Bits `start .. start + 4` of `h`, times 16 (a fifth bit of four consecutive values).
fn fifth_bits(h: u32, start: u32) -> vec4<f32> {
    return vec4<f32>(
        f32((h >> start) & 1u),
        f32((h >> (start + 1u)) & 1u),
        f32((h >> (start + 2u)) & 1u),
        f32((h >> (start + 3u)) & 1u),
    ) * 16.0;
}

// Bit `j` of each byte of `h`, times 16 (Q5_K's fifth bits of four consecutive values).
fn byte_bits(h: u32, j: u32) -> vec4<f32> {
    return vec4<f32>(
        f32((h >> j) & 1u),
        f32((h >> (j + 8u)) & 1u),
        f32((h >> (j + 16u)) & 1u),
        f32((h >> (j + 24u)) & 1u),
    ) * 16.0;
}

// Q4_K / Q5_K: the 6-bit scale and minimum of sub-block j from the 12 scale bytes at `off`.
fn scale_min_k4(off: u32, j: u32) -> vec2<f32> {
    if j < 4u {
        return vec2<f32>(f32(byte_at(off + j) & 63u), f32(byte_at(off + j + 4u) & 63u));
    }
    let a = byte_at(off + j + 4u);
    let sc = (a & 15u) | ((byte_at(off + j - 4u) >> 6u) << 4u);
    let m = (a >> 4u) | ((byte_at(off + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

// Q4_K / Q5_K: the scales of sub-block j of the super-block at `off` (f16 d and dmin, then the
// 12 scale bytes): value = d·sc·q − dmin·m.
fn k_scales(off: u32, j: u32) {
    let dm = unpack2x16float(word_at(off));
    let sm = scale_min_k4(off + 4u, j);
    s0 = dm.x * sm.x;
    s1 = s0;
    mn = -dm.y * sm.y;
}

{{load_group}}
