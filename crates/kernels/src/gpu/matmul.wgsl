// y[row0 + r, y_offset + o] = Σ_i x[row0 + r, i] · W[o, i] for r < ROWS rows and o < out_rows,
// with W's rows
// stored as GGUF blocks. A workgroup of 64 threads computes 4 outputs: a team of 16 threads per
// weight row, thread t taking groups t, t + 16, … of 32 values, each decoded once and applied to
// all ROWS rows. Each row's sum is taken in the same order whatever ROWS is (the team's partials
// meet in a fixed tree), so a row's result does not depend on how many rows share the call.
//
// The tree halves the team 8, 4, 2, 1 lanes at a time: lane t < step adds lane t + step. Halvings
// of at least LANES lanes go through workgroup memory, a barrier each; the smaller ones, where
// the adapter has subgroups of at least LANES invocations, through `subgroupShuffleXor` (lane
// t's partner t ^ step is t + step for t < step: the same sums in the same order, so the same
// bits). LANES = 1: workgroup memory only, every adapter.

const ROWS: u32 = {{rows}}u;
const LANES: u32 = {{lanes}}u;
const TEAM: u32 = 16u;
const TEAMS: u32 = 4u;

// Every binding is read_write: the runtime sub-allocates buffers from shared pages, and WebGPU
// refuses one buffer bound read-only and read-write in the same dispatch.
@group(0) @binding(0) var<storage, read_write> w: array<u32>;        // blocks, [out_rows, row_bytes] + pad
@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;  // [rows, n_in / 4]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;  // [rows, y_stride]
// [out_rows, n_in, row_bytes, y_stride, y_offset, groups_x, row0]
@group(0) @binding(3) var<storage, read_write> p: array<u32>;

var<workgroup> partial: array<f32, 64u * ROWS>;

{{common}}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let out_rows = p[0];
    let n_in = p[1];
    let row_bytes = p[2];
    let y_stride = p[3];
    let y_offset = p[4];
    let groups_x = p[5];
    let row0 = p[6];
    let team = lid / TEAM;
    let t = lid % TEAM;
    let o = (wg.x + wg.y * groups_x) * TEAMS + team;
    var acc: array<f32, ROWS>;
    if o < out_rows {
        let rb = o * row_bytes;
        let n_groups = n_in / 32u;
        let x_row = n_in / 4u;
        for (var g = t; g < n_groups; g += TEAM) {
            load_group(rb, g);
            // The group's 32 weights as f32, once for all rows: each row is then 8 dot
            // products, with nothing per row that a single row would not also do.
            for (var k = 0u; k < 4u; k++) {
                q[k] = q[k] * s0 + vec4<f32>(mn);
                q[k + 4u] = q[k + 4u] * s1 + vec4<f32>(mn);
            }
            for (var r = 0u; r < ROWS; r++) {
                let xb = (row0 + r) * x_row + g * 8u;
                var sum = 0.0;
                for (var k = 0u; k < 8u; k++) {
                    sum += dot(x[xb + k], q[k]);
                }
                acc[r] += sum;
            }
        }
    }
    if LANES <= 8u {
        for (var r = 0u; r < ROWS; r++) {
            partial[r * 64u + lid] = acc[r];
        }
        workgroupBarrier();
        for (var step = 8u; step >= LANES; step >>= 1u) {
            if t < step {
                for (var r = 0u; r < ROWS; r++) {
                    partial[r * 64u + lid] += partial[r * 64u + lid + step];
                }
            }
            workgroupBarrier();
        }
        for (var r = 0u; r < ROWS; r++) {
            acc[r] = partial[r * 64u + lid];
        }
    }
{{shuffles}}
    if t == 0u && o < out_rows {
        for (var r = 0u; r < ROWS; r++) {
            y[(row0 + r) * y_stride + y_offset + o] = acc[r];
        }
    }
}
