// What matmul.wgsl and tile.wgsl share: the bindings of a group's product, its parameters, and
// the reads of a group's weight rows (included as {{group}}; EPILOGUE is the including kernel's).

// Every binding is read_write: the runtime sub-allocates buffers from shared pages, and WebGPU
// refuses one buffer bound read-only and read-write in the same dispatch (and one bound twice
// for writing).
// The weights as words, or in wide teams (matmul.wgsl's WIDE) as vec4s of words, so that a
// lane's 16 bytes are one load (every row of those types starts at a multiple of 16 bytes):
// matrix i in binding i as wi, blocks [rows_i, rb_i] + pad, as many bindings as the group has
// matrices (a binding costs the host time at every launch: a one-matrix product binds one).
{{weights}}
// [rows, n_in / 4] as vec4<f32>; in matmul.wgsl's 8-bit form quant.wgsl's blocks, as vec4<u32>
@group(0) @binding({{b_x}}) var<storage, read_write> x: array<{{x}}>;
@group(0) @binding({{b_y}}) var<storage, read_write> y: array<f32>;       // [rows, y_stride]
// The launch's constants, fixed at upload: PARAM_WORDS words of parameters, [n_in, y_stride,
// y_offset, outputs, groups_x, rows_at, has_bias, first_1, first_2, rb_0, rb_1, rb_2, the bits
// of −inf (a WGSL constant cannot be infinite), the byte where each matrix's first row starts
// in its binding: base_0, base_1, base_2 (0 but for a SwiGLU whose gate and up are split at
// different rows), limited (1: the output head, whose outputs at or past the step's logit
// limit are −inf; 0: any other product), where a norm is folded in the first of its weights
// among the values below and its epsilon's bits (else 0, 0), the groups a split tile walks
// (tile.wgsl; else 0)], then the group's values as f32 bits (`value`): [group outputs] of
// biases where has_bias, then where a norm is folded in (matmul.wgsl's NORMED) its weights g,
// [n_in], starting on a vec4 (`norm_values` in mod.rs). One binding, not a binding for the
// parameters and one for the values: a binding costs the host at every launch. Bound as vec4s
// of words, padded to whole ones, so that a folded norm's weights load four at a time (`pw`
// reads a word).
@group(0) @binding({{b_p}}) var<storage, read_write> p: array<vec4<u32>>;
// The forward's step buffer (step.rs): [rows, tail rows, logit limit, …].
@group(0) @binding({{b_s}}) var<storage, read_write> s: array<u32>;

// Words of parameters before the values (mars-kernels' `PARAM_WORDS`).
const PARAM_WORDS: u32 = {{param_words}}u;

// Word `i` of the constants.
fn pw(i: u32) -> u32 {
    return p[i >> 2u][i & 3u];
}

// Value `i` of the constants' f32 values (biases, then a folded norm's weights).
fn value(i: u32) -> f32 {
    return bitcast<f32>(pw(PARAM_WORDS + i));
}

// Decodes group `g` of the row at byte `rb` of matrix `sub`.
fn load(sub: u32, rb: u32, g: u32) {
{{dispatch}}
}

// The binding and the first byte of group output `o`'s weight row.
fn row_at(o: u32, first_1: u32, first_2: u32) -> vec2<u32> {
    var sub = 0u;
    var local = o;
    if o >= first_2 {
        sub = 2u;
        local = o - first_2;
    } else if o >= first_1 {
        sub = 1u;
        local = o - first_1;
    }
    return vec2<u32>(sub, pw(13u + sub) + local * pw(9u + sub));
}

// Whether output `o` (the `j`th of a SwiGLU's gate or up) is computed: inside the group, and
// for a store before the step's logit limit (past it the output is −inf without a product).
fn live(o: u32, j: u32, outputs: u32, y_offset: u32, limit: u32, first_1: u32) -> bool {
    if EPILOGUE == 2u {
        return j < first_1;
    }
    return o < outputs && (EPILOGUE != 0u || pw(16) == 0u || y_offset + o < limit);
}
