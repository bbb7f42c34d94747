// y = x · Wᵀ over the rows of x, for a group of up to three weight matrices that read the same
// activations (q | k | v of an attention block, gate | up of a SwiGLU, or one matrix alone),
// each stored as GGUF blocks in its own binding (w0, w1, w2) and of its own type. The group's
// outputs are numbered through its matrices in order: matrix 0 holds outputs 0 .. first_1,
// matrix 1 first_1 .. first_2, matrix 2 first_2 .. outputs.
//
// A workgroup of 64 threads computes OUTS · 64 / TEAM outputs for up to ROWS rows of x (rows
// row0 .. row0 + m, row0 = ROWS · workgroup z): a team of TEAM threads per OUTS consecutive
// outputs (TEAM 16, or the whole workgroup for a matrix of few outputs and long rows: `Team` in
// mod.rs; OUTS 1 on GPUs, 4 on CPU adapters: `Fan`), thread t taking groups t, t + TEAM, … of 32
// values of each weight row, each decoded once and applied to every row, each activation it
// loads applied to the team's OUTS outputs. An output's sum is the same whatever OUTS is, and
// each row's sum is taken in the same order whatever m and ROWS are (the team's partials meet
// in a fixed tree), so a row's result does not depend on the rows beside it. The number of rows is
// read at run time from the forward's step buffer (s[rows_at]); ROWS is only a bound (1, 2, 4, 8 or
// 16: the power of two at or above a call's rows, at most 16), so that loops over rows unroll (the
// loops marked for it are copied out before compiling: unroll.rs) and the sums stay in
// registers: five pipelines a kind (and fan) at most, none per token.
//
// The tree halves the team TEAM / 2, …, 2, 1 lanes at a time: lane t < step adds lane
// t + step. Halvings of at least LANES lanes go through workgroup memory, a barrier each; the
// smaller ones, where the adapter has subgroups of at least LANES invocations, through
// `subgroupShuffleXor` (lane t's partner t ^ step is t + step for t < step: the same sums in the
// same order, so the same bits). LANES = 1: workgroup memory only, every adapter.
//
// Lane teams (LANE_TEAMS, `Team::Lanes`, Q4_K and Q6_K matrices only): the team's 16 threads
// share each 256-value super-block instead of taking 32-value groups of their own: lane t reads
// 8-byte runs of quants beside its neighbours' (the team's loads cover the block's quants
// contiguously: Q4_K's once, Q6_K's twice, its lanes splitting each byte's halves), the 8 values 64c + 8·(t % 4) .. and the 8 values 32 on (c = t / 4), and the
// activations those 16 values meet; each lane sums over every super-block of the row, and the
// tree is the same.
// A row's sum is again in a fixed order whatever the rows and fan (the form's own bits).
// With the whole workgroup on an output (TEAM 64, `Team::WholeLanes`) its four 16-lane quarters
// take super-blocks t / 16, + 4, …: a thread walks a quarter of the row's steps.
//
// Wide teams (WIDE, `Team::Wide`, groups of Q4_K or of Q6_K matrices, the weights bound as
// vec4s): the team's 16 threads take two super-blocks a step, 8 lanes each, every lane loading
// its quants 16 bytes at a time (`load_wide`: Q4_K's lane i the 16 bytes 16i .. 16i + 16, values
// 16·(i % 2) .. + 16 of sub-blocks 2c and 2c + 1, c = i / 2, and the super-block's 16 bytes of
// scales; Q6_K's 16 bytes of low nibbles, 16 of high bit pairs and the 16 scales), so that a
// team's loads cover its super-blocks contiguously (llama.cpp's Vulkan mat-vec, and every fast
// mat-vec on NVIDIA, moves 16 bytes a load). A lane's 32 values are two runs of 16 under one
// scale each, at vec4s wide_lo(i) and wide_lo(i) + WIDE_GAP of the super-block's activations
// (the type's geometry, compiled in: `wide_geometry` in mod.rs). Each run's sum is taken as
// Σ x·q, scaled once by its scale, less its minimum·Σ x; with 8-bit activations a run is half
// a quantized block, one vec4: Q4_K's minimum (the whole sub-block's) is added by the lane of
// the block's first half from the activations' s (the whole block's), Q6_K's values become
// q − 32 (no minimum). Its own bits again, in a fixed order whatever the rows and fan. With
// the whole workgroup on an output (TEAM 64, `Team::WholeWide`) it takes eight super-blocks a
// step instead of two.
//
// A norm folded in (NORMED, f32 activations only): x holds the rows before their RMSNorm, and the
// product is of the normed rows, g · x / rms(x). Each team's threads also sum the squares of
// the activations they load (the team loads each row's every value once, in a fixed order) and
// scale their decoded weights by g; the squares meet in the same tree as the sums, and each
// row's sums are multiplied by 1 / sqrt(mean square + eps), as norm.wgsl computes it (x holds
// every row of the pass; the head, over the last rows, reads them from their offset). The
// norm's launch and its normed rows are spared; a row's result still depends on that row
// alone (its own bits, within f32 rounding of the norm launched apart: not the same bits).
//
// What the sums become (EPILOGUE, compiled in):
// 0 (store): y = sum (+ bias[y_offset + o] where has_bias), and in the output head (`limited`)
//   −inf for outputs at or past the step's logit limit (a vocabulary-limited drafter) without
//   computing them;
// 1 (add): y += sum, the residual added in place (each output is written by one thread);
// 2 (SwiGLU): matrices gate and up of equal rows; a workgroup computes gate and up of 2 · OUTS
//   consecutive outputs j and writes y[y_offset + j] = silu(gate_j) · up_j.
//
// A matrix too large for one binding is split by output rows into parts (mod.rs), each launched
// on its own with y_offset its first output in the group (for a SwiGLU, a range of rows inside
// one part of gate and one of up, each from its base byte):
// the team, fan and tree are the group's, so every output has the bits of an unsplit launch.
//
// The products (matvec_*.wgsl, `Acts` in mod.rs): f32 activations met by weights decoded to f32
// (matvec_f32.wgsl: every adapter, every type), or activations quantized to 8 bits per 32 values
// (quant.wgsl) met by weights decoded to 8-bit integers in integer dot products of four
// (matvec_q8.wgsl: block types only; `x` is then the quantized blocks, `vec4<u32>`). A row's
// quantization depends on that row alone, so rows stay independent in both. In one-row steps
// the 8-bit form may quantize its row itself instead (matvec_own.wgsl, `Acts::Q8Own`: x is then
// the f32 rows, before their norm where OWN_NORMED), with the same bits as the launch before it
// would have written: one launch a product, where the 8-bit form takes two and a norm three.

const ROWS: u32 = {{rows}}u;
const LANES: u32 = {{lanes}}u;
const EPILOGUE: u32 = {{epilogue}}u;
const TEAM: u32 = {{team}}u;
const TEAMS: u32 = 64u / TEAM;
const OUTS: u32 = {{outs}}u;
const ACC: u32 = {{acc}}u;
const LANE_TEAMS: bool = {{lane_teams}};
const WIDE: bool = {{wide}};
const NORMED: bool = {{normed}};
const OWN_NORMED: bool = {{own_normed}};

{{group}}

// 64 · ROWS · OUTS values: at most 16 KiB (16 rows, a fan of 4), WebGPU's default limit.
var<workgroup> partial: array<f32, 64u * ACC>;

{{common}}

{{wide_geometry}}

{{acts_decls}}

// Where NORMED: the folded norm's weights for vec4 `i` of a row (4 i .. 4 i + 3), one load; `at`
// is the vec4 where they start (`g_at` in main: the weights start on a vec4 of the constants,
// `norm_values` in mod.rs).
fn norm_weights(at: u32, i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(p[at + i]);
}

// Lane `i`'s 16 values of super-block `b` of the row at byte `rb` of matrix `sub` (lane teams;
// empty in the other form, where it is never called).
fn lane(sub: u32, rb: u32, b: u32, i: u32) {
{{lane_dispatch}}
}

// Lane `i` of 8's quants and scales of super-block `b` of the row at byte `rb` of matrix `sub`
// (`wq`, `wsc`: wide teams; empty in the other forms, where it is never called).
fn wide(sub: u32, rb: u32, b: u32, i: u32) {
{{wide_dispatch}}
}

// Each of the team's outputs from `o0`: whether it is live and its weight row (binding, first
// byte), found once before the loops over the row (`live`, `row_at`), which read them each step.
// A dead output (past the matrix, the logit limit or a SwiGLU's half: after the live ones) reads
// output 0's row, in bounds, and its sums are never written out: its loads and decoding need no
// branch (on NVIDIA's NAK a structured branch an output and step kept its address and scale
// arithmetic from being shared between outputs).
var<private> outs_live: array<bool, OUTS>;
var<private> outs_at: array<vec2<u32>, OUTS>;

// Wide teams: lane `wi`'s values and scales of super-block `b` for each of the team's outputs
// (a dead output's those of output 0), as both products read them.
var<private> wlos: array<vec4<u32>, OUTS>;
var<private> whis: array<vec4<u32>, OUTS>;
var<private> wss: array<vec4<f32>, OUTS>;

fn wide_outputs(b: u32, wi: u32) {
    for (var u = 0u; u < OUTS; u++) { // unroll
        wide(outs_at[u].x, outs_at[u].y, b, wi);
        wlos[u] = wlo;
        whis[u] = whi;
        wss[u] = wsc;
    }
}

// Group `g` of the row at byte `rb` of matrix `sub` as 8-bit integers (`qi`, s0, s1, mn: the
// 8-bit form; empty in the f32 form, where it is never called).
fn load_q8(sub: u32, rb: u32, g: u32) {
{{q8_dispatch}}
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n_in = pw(0);
    // Every weight binding read, whatever the form: a pipeline layout derived from the shader
    // keeps only the bindings it uses, and the launch binds each (n_in is never 0).
    if n_in == 0u {
        y[0] = f32({{w_any}});
    }
    let y_stride = pw(1);
    let y_offset = pw(2);
    let outputs = pw(3);
    let groups_x = pw(4);
    let first_1 = pw(7);
    let first_2 = pw(8);
    let row0 = wg.z * ROWS;
    let m = min(ROWS, s[pw(5)] - row0);
    // The row of x that row 0 reads: x holds the rows before their norm where NORMED or
    // OWN_NORMED, every row of the pass, so a group over the last rows (the head) starts that
    // many rows in; otherwise x holds the group's rows alone.
    var x0 = 0u;
    if NORMED || OWN_NORMED {
        x0 = s[0] - s[pw(5)];
    }
    let limit = s[2];
    let team = lid / TEAM;
    let t = lid % TEAM;
    let wgi = wg.x + wg.y * groups_x;
    // The team's first output (it computes OUTS consecutive ones).
    var o0: u32;
    var j0 = 0u;
    if EPILOGUE == 2u {
        j0 = (2u * wgi + (team & 1u)) * OUTS;
        o0 = (team >> 1u) * first_1 + j0;
    } else {
        o0 = (wgi * TEAMS + team) * OUTS;
    }
    var acc: array<f32, ACC>;
    // Each row's sum of squares where NORMED (the team's share, then the row's).
    var ss: array<f32, ROWS>;
    let n_groups = n_in / 32u;
    // Outputs are live in a prefix of the team's (past the matrix, the logit limit or a
    // SwiGLU's half, so are the ones after): a team with none skips the rows. The loop runs
    // over 32-value groups, or in lane and wide teams over 256-value super-blocks.
    var end = n_groups;
    if LANE_TEAMS || WIDE {
        end = n_in / 256u;
    }
    for (var u = 0u; u < OUTS; u++) { // unroll
        outs_live[u] = live(o0 + u, j0 + u, outputs, y_offset, limit, first_1);
        outs_at[u] = row_at(o0 + u, first_1, first_2);
        if !outs_live[u] {
            outs_at[u] = outs_at[0];
        }
    }
    if !outs_live[0] {
        end = 0u;
    }
    // The folded norm's first vec4 of weights, read once here: NAK reloaded the parameter at
    // every step of the loop, and the loads of g waited on it (a trip to memory of its own).
    let g_at = (PARAM_WORDS + pw(17)) / 4u;
{{products}}
{{tree}}
    if EPILOGUE == 0u {
        for (var u = 0u; u < OUTS; u++) { // unroll
            let o = o0 + u;
            if t == 0u && o < outputs {
                let at = y_offset + o;
                let is_live = live(o, 0u, outputs, y_offset, limit, first_1);
                for (var r = 0u; r < ROWS; r++) { // unroll
                    if r < m {
                        var v = bitcast<f32>(pw(12)); // −inf past the logit limit
                        if is_live {
                            v = acc[u * ROWS + r];
                            if pw(6) != 0u {
                                v += value(at);
                            }
                        }
                        y[(row0 + r) * y_stride + at] = v;
                    }
                }
            }
        }
    } else if EPILOGUE == 1u {
        for (var u = 0u; u < OUTS; u++) { // unroll
            let o = o0 + u;
            if t == 0u && live(o, 0u, outputs, y_offset, limit, first_1) {
                for (var r = 0u; r < ROWS; r++) { // unroll
                    if r < m {
                        let at = (row0 + r) * y_stride + y_offset + o;
                        y[at] = y[at] + acc[u * ROWS + r];
                    }
                }
            }
        }
    } else {
        // Gate (teams 0, 1) meets up (teams 2, 3) through workgroup memory.
        workgroupBarrier();
        if t == 0u {
            for (var a = 0u; a < ACC; a++) { // unroll
                if a % ROWS < m {
                    partial[team * ACC + a] = acc[a];
                }
            }
        }
        workgroupBarrier();
        if t == 0u && team < 2u {
            for (var u = 0u; u < OUTS; u++) { // unroll
                let j = j0 + u;
                if j < first_1 {
                    for (var r = 0u; r < ROWS; r++) { // unroll
                        if r < m {
                            let gate = partial[team * ACC + u * ROWS + r];
                            let up = partial[(team + 2u) * ACC + u * ROWS + r];
                            y[(row0 + r) * y_stride + y_offset + j] = gate / (1.0 + exp(-gate)) * up;
                        }
                    }
                }
            }
        }
    }
}
