// matmul.wgsl's products in its 8-bit form (included in its main): each 32-value group of
// a weight row decoded once to packed 8-bit integers with its scales (value l = s0·q_l + mn for
// l < 16, s1·q_l + mn after), then met by each row's quantized group (quant.wgsl: x_l ≈ d·x̂_l,
// s = d·Σx̂) in eight integer dot products of four: the group's sum is
// d·(s0·Σ_{l<16} q_l·x̂_l + s1·Σ_{l≥16} q_l·x̂_l) + mn·s, exact integers until that one line, and
// each row's in the same order whatever the rows beside it.
    var qw: array<u32, 8u * OUTS>;
    var sc: array<vec3<f32>, OUTS>;
    for (var g = t; g < end && !WIDE; g += TEAM) {
        for (var u = 0u; u < OUTS; u++) { // unroll
            if outs_live[u] {
                load_q8(outs_at[u].x, outs_at[u].y, g);
                for (var k = 0u; k < 8u; k++) { // unroll
                    qw[u * 8u + k] = qi[k];
                }
                sc[u] = vec3<f32>(s0, s1, mn);
            } else {
                for (var k = 0u; k < 8u; k++) { // unroll
                    qw[u * 8u + k] = 0u;
                }
                sc[u] = vec3<f32>(0.0);
            }
        }
        for (var r = 0u; r < ROWS; r++) { // unroll
            if r < m {
                // Block (row0 + r, g) of the quantized rows: 4 blocks a chunk of 10 vec4s, the
                // block's quants at 2i, 2i + 1 and its (d, s) in vec4 8 + i / 2 (quant.wgsl).
                let qb = (row0 + r) * n_groups + g;
                let c = (qb >> 2u) * 10u;
                let i = qb & 3u;
                let xa = x[c + 2u * i];
                let xb = x[c + 2u * i + 1u];
                let ds = x[c + 8u + (i >> 1u)];
                let odd = (i & 1u) != 0u;
                let d = bitcast<f32>(select(ds.x, ds.z, odd));
                let sx = bitcast<f32>(select(ds.y, ds.w, odd));
                for (var u = 0u; u < OUTS; u++) { // unroll
                    let v = 8u * u;
                    let lo = dot4I8Packed(qw[v], xa.x) + dot4I8Packed(qw[v + 1u], xa.y)
                        + dot4I8Packed(qw[v + 2u], xa.z) + dot4I8Packed(qw[v + 3u], xa.w);
                    let hi = dot4I8Packed(qw[v + 4u], xb.x) + dot4I8Packed(qw[v + 5u], xb.y)
                        + dot4I8Packed(qw[v + 6u], xb.z) + dot4I8Packed(qw[v + 7u], xb.w);
                    acc[u * ROWS + r] += d * (sc[u].x * f32(lo) + sc[u].y * f32(hi))
                        + sc[u].z * sx;
                }
            }
        }
    }
    // Wide teams: lane wi's halves are those of quantized blocks 8b + 2c and 8b + 2c + 1 of the
    // row (c = wi / 2), each block's values 16·(wi % 2) .. + 16 one vec4 (quant.wgsl: blocks 2c
    // and 2c + 1 share a chunk and their (d, s) vec4, since a row's blocks are a multiple of 8).
    let wi = t % 8u;
    let hf = wi % 2u;
    for (var b = t / 8u; b < end && WIDE; b += 2u) {
        wide_outputs(b, wi);
        for (var r = 0u; r < ROWS; r++) { // unroll
            if r < m {
                let qb = (row0 + r) * n_groups + 8u * b + 2u * (wi / 2u);
                let c = (qb >> 2u) * 10u;
                let i = qb & 3u;
                let xa = x[c + 2u * i + hf];
                let xb = x[c + 2u * i + 2u + hf];
                let ds = x[c + 8u + (i >> 1u)];
                for (var u = 0u; u < OUTS; u++) { // unroll
                    let w = wqs[u];
                    let m4 = 0x0f0f0f0fu;
                    let lo = dot4I8Packed(w.x & m4, xa.x) + dot4I8Packed(w.y & m4, xa.y)
                        + dot4I8Packed(w.z & m4, xa.z) + dot4I8Packed(w.w & m4, xa.w);
                    let hi = dot4I8Packed((w.x >> 4u) & m4, xb.x)
                        + dot4I8Packed((w.y >> 4u) & m4, xb.y)
                        + dot4I8Packed((w.z >> 4u) & m4, xb.z)
                        + dot4I8Packed((w.w >> 4u) & m4, xb.w);
                    let sc = wss[u];
                    var v = bitcast<f32>(ds.x) * sc.x * f32(lo)
                        + bitcast<f32>(ds.z) * sc.z * f32(hi);
                    if hf == 0u {
                        v -= sc.y * bitcast<f32>(ds.y) + sc.w * bitcast<f32>(ds.w);
                    }
                    acc[u * ROWS + r] += v;
                }
            }
        }
    }
