// The blocks' partials of a split attention (attention.wgsl, SPLIT 1) folded in order into each
// (query head, row)'s output: the bits the one-workgroup form writes.

const WG: u32 = 256u;     // keys a block

@group(0) @binding(0) var<storage, read_write> part: array<vec4<f32>>;   // attention.wgsl's
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;    // [rows, n_heads · head_dim / 4]
// [n_heads, n_kv, head_dim, scale (f32 bits)] (attention.wgsl's)
@group(0) @binding(2) var<storage, read_write> p: array<u32>;
@group(0) @binding(3) var<storage, read_write> s: array<u32>;   // step (step.rs)

{{fold}}

// One workgroup a (head x, row y); lane c folds dimensions 4c .. 4c + 4.
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let nh = p[0];
    let hd4 = p[2] / 4u;
    let h = wg.x;
    let r = wg.y;
    if lid < hd4 {
        let blocks = (visible_keys(r) + WG - 1u) / WG;
        var f = Fold(0.0, 0.0, vec4<f32>(0.0));
        for (var b = 0u; b < blocks; b++) {
            let at = partial_at(r, h, b, nh, hd4);
            let ml = part[at + hd4];
            f = fold(f, b == 0u, Fold(ml.x, ml.y, part[at + lid]));
        }
        out[(r * nh + h) * hd4 + lid] = f.acc / f.l;
    }
}
