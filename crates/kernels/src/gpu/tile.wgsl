// The product of a long prefill (more than 16 rows: `Step::long_prefill`, in the group's prefill
// form: `GpuMatrix::set_prefill`), y = x · Wᵀ over the
// same groups, bindings, parameters (group.wgsl; groups_x counting this form's workgroups) and
// epilogues as matmul.wgsl, in workgroup tiles: a
// workgroup of 128 threads computes BM = 32 rows × BN = 64 outputs (a SwiGLU's: 32 of gate and
// the same 32 of up), walking the inputs one 32-value group at a time. Each step, threads 0..63
// decode their output's group into workgroup memory (one decode for all 32 rows, where the
// mat-vec kernel decodes it once per 16), threads 64..127 copy the rows' 32 inputs there, and
// then every thread multiplies 4 rows by 4 outputs out of workgroup memory: 8 loads for 16
// dot products, where the mat-vec kernel loads an activation from storage for every 4 FMAs of
// one output. Why: on an H200 a 7B's prefill in the mat-vec form ran at 0.09× llama.cpp's
// (docs/performance.md); those loads are the likely bound (counted, not profiled).
//
// The contract this form keeps and the one it does not: each (row, output) sum runs over the
// inputs in one fixed order (group by group, a value at a time, from 0), so a row's result
// does not depend on the rows beside it or on how many rows the pass has, bit for bit, among
// passes in this form; it is within the f32 rounding bound of the exact product, but it is not
// the mat-vec kernel's bits (that sums in 16 interleaved partials and a tree). Only prefills
// take it, a whole prefill at once (`Llama::forward_last`), so decoding and verification — whose
// rows must equal each other's — never meet it.
//
// Thread t holds rows 4·(t / 16) .. + 4 of the tile and its columns t % 16 + 16·i (i < 4): a
// SwiGLU's gate j and up j (columns j and 32 + j) are then in one thread. Tile rows are 9 vec4s
// apart in workgroup memory (8 and one unused) so that 16 threads reading 16 columns' same
// vec4 touch different banks.
//
// Split along the inputs (split-K, PHASE 1 and 2: `Splits`, where a launch has too few
// workgroups of outputs for the GPU): workgroup z = tile · splits + split walks groups
// split · p[19] .. + p[19] and writes its 32 × 64 sums to y as partials [split][row][output];
// then a launch of PHASE 2 over the tiles adds each (row, output)'s partials in split order
// from 0 and applies the epilogue. The count is fixed by the matrix's shape, so a row's
// bits still never depend on the rows beside it or on the pass's length; not the bits of
// the unsplit walk.
//
// On matrix units (UNITS, `TileForm::Units`: wgpu's cooperative matrices, native Vulkan and
// Metal): the tiles are f16 in workgroup memory and each of the 128 / lanes subgroups
// multiplies a run of blocks of one block row of the 32 × 64 tile (`UnitShape`: on NVIDIA 4
// subgroups of 32, two 16 × 16 blocks each; on lavapipe 16 of 8, two 8 × 8 blocks each; a
// subgroup taken as lanes consecutive invocations, as drivers form them in a 1-D workgroup)
// with f16 products into f32 blocks, which go through workgroup memory to the threads' 4 × 4
// before the same epilogue. Another
// contract: weights and activations rounded to f16 (relative 2⁻¹¹ each) and sums in the
// hardware's order; a row still never meets another.
//
// Larger tiles (VR × VC of the 32 × 64 ones in a workgroup): on the matrix units the tall
// (`UnitTile::Tall`, 2 × 1, 64 × 64) and the wide (`UnitTile::Wide`, 2 × 2, 64 × 128), and the
// f32 tiles' tall one (`TileForm::TallVectors`, 2 × 1, each thread 8 rows × 4 outputs). Threads
// 0 .. TN decode a column's group each step and the others copy the rows' inputs (in the wide
// tile every thread does both); on the units each subgroup multiplies a rectangle of blocks;
// at the end the 32 × 64 tiles go one at a time (vr, vc) to the threads' 4 × 4 and the same
// epilogue or partials, as the tile (row tile 2·z + vr, column workgroup VC·wgi + vc) would.
// Each output is the narrow tile's multiply-adds in its order, so its bits are the narrow
// form's. Why: a 32 × 64 tile's step decodes 2,048 weights for 4 products of 16 × 16 × 16 a
// subgroup (NAK: 0.66 instructions a multiply-add, mostly the decode); the wide one decodes
// 4,096 for 16 (llama.cpp's matrix-unit tiles are 64 × 64 to 128 × 256).
{{enables}}
const EPILOGUE: u32 = {{epilogue}}u;
// 0: the whole walk and the epilogue; 1: a split's partial sums; 2: the partials added, the
// epilogue.
const PHASE: u32 = {{phase}}u;
const BM: u32 = 32u;
const BN: u32 = 64u;
const PAD: u32 = 9u;
// Tiles of BM × BN a workgroup takes, along the rows and the outputs (1 × 1 but in the larger
// tiles above: 2 × 1 tall, 2 × 2 wide), how many, and its rows and outputs.
const VR: u32 = {{vr}}u;
const VC: u32 = {{vc}}u;
const VT: u32 = {{vt}}u;
const TM: u32 = BM * VR;
const TN: u32 = BN * VC;
// Threads that copy the rows' inputs each step (those that decode no column, or all where
// every thread decodes one), and the vec4s each copies (TM · 8 / LOADERS).
const LOADERS: u32 = {{loaders}}u;
const X_EACH: u32 = {{x_each}}u;
// The groups this workgroup walks, [first, end): read from storage (which WGSL's uniformity
// analysis counts as varying), so passed through workgroupUniformLoad before the loop whose
// barriers need every invocation to agree on its count (Chrome's WebGPU refuses the module
// otherwise; naga does not check).
var<workgroup> walk: vec2<u32>;

{{group}}

{{shared}}

{{common}}

// Column `c` of workgroup `wgi`: its group output (a SwiGLU's gate j or up j, at first_1 + j)
// and its index j among the outputs written (the output itself but in a SwiGLU).
fn column(wgi: u32, c: u32, first_1: u32) -> vec2<u32> {
    if EPILOGUE == 2u {
        let j = wgi * (BN / 2u) + c % (BN / 2u);
        return vec2<u32>((c / (BN / 2u)) * first_1 + j, j);
    }
    let o = wgi * BN + c;
    return vec2<u32>(o, o);
}

// Copier `loader`'s share of the step's inputs into workgroup memory: of TM rows × 8 vec4s,
// X_EACH for each of the LOADERS threads (4 each for 64 threads in a 32 × 64 tile, 8 in a tall
// one, 4 for all 128 in the wide one), from vec4 `at` (the tile's first row, the step's group)
// on, rows `x_row` vec4s apart; rows past the pass's `m` read as 0.
fn copy_x(loader: u32, m: u32, at: u32, x_row: u32) {
    for (var j = 0u; j < X_EACH; j++) { // unroll
        let e = loader + LOADERS * j;
        let r = e / 8u;
        let kk = e % 8u;
        var v = vec4<f32>(0.0);
        if r < m {
            v = x[at + r * x_row + kk];
        }
        put_x(r, kk, v);
    }
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let n_in = pw(0);
    // Every binding read, whatever the group's size (see matmul.wgsl).
    if n_in == 0u {
        y[0] = f32({{w_any}});
    }
    let y_stride = pw(1);
    let y_offset = pw(2);
    let outputs = pw(3);
    // The grid's width: the parameters' where a workgroup is one tile, the launch's where it
    // is several (the parameters count tiles).
    let groups_x = select(pw(4), nwg.x, VC > 1u);
    let first_1 = pw(7);
    let first_2 = pw(8);
    let n_groups = n_in / 32u;
    // Groups a split walks (every group where the launch is not split: p[19] ≥ n_groups).
    let per = max(pw(19), 1u);
    let splits = (n_groups + per - 1u) / per;
    var tile = wg.z;
    var split = 0u;
    if PHASE == 1u {
        tile = wg.z / splits;
        split = wg.z % splits;
    }
    let rows = s[pw(5)];
    let row0 = tile * TM;
    let m = min(TM, rows - row0);
    let limit = s[2];
    let wgi = wg.x + wg.y * groups_x;
    let x_row = n_in / 4u;
    let tr = lid / 16u;
    let tc = lid % 16u;
    // The column this thread decodes (threads 0 .. TN).
    let mine = column(VC * wgi + (lid % TN) / BN, lid % BN, first_1);
    let decodes = lid < TN && live(mine.x, mine.y, outputs, y_offset, limit, first_1);
    var at = vec2<u32>(0u);
    if decodes {
        at = row_at(mine.x, first_1, first_2);
    }
    // acc[4a + i]: tile row 4·tr + a, column tc + 16·i.
    var acc: array<f32, 16>;
{{blocks}}
    if PHASE != 2u {
    if lid == 0u {
        let first = split * per;
        walk = vec2<u32>(first, min(first + per, n_groups));
    }
    let span = workgroupUniformLoad(&walk);
    for (var g = span.x; g < span.y; g++) {
        if lid < TN {
            if decodes {
                load(at.x, at.y, g);
                for (var k = 0u; k < 4u; k++) { // unroll
                    put_w(lid, k, q[k] * s0 + vec4<f32>(mn));
                    put_w(lid, k + 4u, q[k + 4u] * s1 + vec4<f32>(mn));
                }
            } else {
                for (var k = 0u; k < 8u; k++) { // unroll
                    put_w(lid, k, vec4<f32>(0.0));
                }
            }
            if TN == 128u {
                copy_x(lid, m, row0 * x_row + g * 8u, x_row);
            }
        } else {
            copy_x(lid - TN, m, row0 * x_row + g * 8u, x_row);
        }
        workgroupBarrier();
{{multiply}}
        workgroupBarrier();
    }
    }
    // Each BM × BN tile of the workgroup's (one but in the larger tiles): its products into acc
    // (the matrix units', or the tall f32 tile's), then its partials or its epilogue, as a workgroup of that one tile.
    for (var v = 0u; v < VT; v++) { // unroll
        let vr = v / VC;
        let vc = v % VC;
        let row0 = row0 + vr * BM;
        let m = min(BM, m - min(m, vr * BM));
        let wgi = VC * wgi + vc;
        if PHASE != 2u {
{{gather}}
        }
        if PHASE != 0u {
            // Partials [split][row][output]: this split's sums written, or each (row, output)'s
            // added in split order from 0.
            let plane = rows * outputs;
            for (var a = 0u; a < 4u; a++) { // unroll
                for (var i = 0u; i < 4u; i++) { // unroll
                    let c = column(wgi, tc + 16u * i, first_1);
                    let r = 4u * tr + a;
                    if r < m && live(c.x, c.y, outputs, y_offset, limit, first_1) {
                        let e = (row0 + r) * outputs + c.x;
                        if PHASE == 1u {
                            y[split * plane + e] = acc[4u * a + i];
                        } else {
                            var v = 0.0;
                            for (var k = 0u; k < splits; k++) {
                                let f = k * plane + e;
                                v += x[f / 4u][f % 4u];
                            }
                            acc[4u * a + i] = v;
                        }
                    }
                }
            }
        }
        if PHASE != 1u {
            for (var a = 0u; a < 4u; a++) { // unroll
                let r = 4u * tr + a;
                if r < m {
                    let yr = (row0 + r) * y_stride + y_offset;
                    if EPILOGUE == 2u {
                        // Gate j (columns tc, tc + 16) meets up j (columns tc + 32, tc + 48).
                        for (var i = 0u; i < 2u; i++) { // unroll
                            let j = column(wgi, tc + 16u * i, first_1).y;
                            if j < first_1 {
                                let gate = acc[4u * a + i];
                                let up = acc[4u * a + i + 2u];
                                y[yr + j] = gate / (1.0 + exp(-gate)) * up;
                            }
                        }
                    } else {
                        for (var i = 0u; i < 4u; i++) { // unroll
                            let o = column(wgi, tc + 16u * i, first_1).x;
                            if EPILOGUE == 0u && o < outputs {
                                var v = bitcast<f32>(pw(12)); // −inf past the logit limit
                                if live(o, o, outputs, y_offset, limit, first_1) {
                                    v = acc[4u * a + i];
                                    if pw(6) != 0u {
                                        v += value(y_offset + o);
                                    }
                                }
                                y[yr + o] = v;
                            } else if EPILOGUE == 1u && o < outputs {
                                y[yr + o] = y[yr + o] + acc[4u * a + i];
                            }
                        }
                    }
                }
            }
        }
    }
}
