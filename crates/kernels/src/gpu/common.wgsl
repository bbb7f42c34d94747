// Shared by the GPU kernels that decode weights: one 32-value group of a weight row decoded into
// `q` (its values as f32, in order: integers for the block types) with the scales that apply:
// value l = s0 · q[l] + mn for l < 16, s1 · q[l] + mn for l ≥ 16 (only Q6_K has s0 ≠ s1). Block
// scales are f16 decoded with `unpack2x16float`, core WGSL: no `shader-f16` needed. The byte
// reads are in reader.wgsl, one copy per weight binding; the decoders of each type in decode/.

var<private> q: array<vec4<f32>, 8>;
// The same group as 8-bit integers, four to a word (value l in byte l % 4 of qi[l / 4]), for
// matmul.wgsl's 8-bit form: `load_i8`, written by every block type's decoder (whose
// `load_group` mod.rs makes from it: `group_from_i8`).
var<private> qi: array<u32, 8>;
// A wide team's lane's 32 values of a super-block (`load_wide`, decode/q4_k.wgsl and q6_k.wgsl):
// two runs of 16, a value (unsigned, under 64) a byte, and their scales: value = wsc.x·q − wsc.y
// in `wlo`, wsc.z·q − wsc.w in `whi`.
var<private> wlo: vec4<u32>;
var<private> whi: vec4<u32>;
var<private> wsc: vec4<f32>;
var<private> s0: f32;
var<private> s1: f32;
var<private> mn: f32;

// The 4 bytes of `v` as f32 (bytes 0–3 in order): a word's bytes packed with integer
// operations, then converted, one conversion a value.
fn byte_values(v: u32) -> vec4<f32> {
    return vec4<f32>(f32(v & 0xffu), f32((v >> 8u) & 0xffu), f32((v >> 16u) & 0xffu), f32(v >> 24u));
}

// The 4 nibbles at bit `shift` of each byte of `v`.
fn nibbles(v: u32, shift: u32) -> vec4<f32> {
    return byte_values((v >> shift) & 0x0f0f0f0fu);
}

// Four 6-bit values (0 .. 63), a byte each, as the signed bytes v − 32 (Q6_K's values):
// v + 96 stays under 256 (no carry between bytes) and is 128 + (v − 32) from 32 on, 96 + v
// below; flipping bit 7 makes each the two's complement byte of v − 32.
fn q6_signed(v: u32) -> u32 {
    return (v + 0x60606060u) ^ 0x80808080u;
}

// Bits 0–3 of `x` (x < 16) at bit 4 of bytes 0–3: four values' fifth bits, for 8-bit integers.
// x · 0x204081 is x + x·2⁷ + x·2¹⁴ + x·2²¹, four copies that do not overlap, so bit i of x
// lands at bit 8i of the one shifted 7i.
fn fifth_bytes(x: u32) -> u32 {
    return ((x * 0x204081u) & 0x01010101u) << 4u;
}


{{readers}}
