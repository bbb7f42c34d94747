// matmul.wgsl's products in its 8-bit form (included in its main): each 32-value group of
// a weight row decoded once to packed 8-bit integers with its scales (value l = s0·q_l + mn for
// l < 16, s1·q_l + mn after), then met by each row's quantized group (quant.wgsl: x_l ≈ d·x̂_l,
// s = d·Σx̂) in eight integer dot products of four: the group's sum is
// d·(s0·Σ_{l<16} q_l·x̂_l + s1·Σ_{l≥16} q_l·x̂_l) + mn·s, exact integers until that one line, and
// each row's in the same order whatever the rows beside it.
    var qw: array<u32, 8u * OUTS>;
    var sc: array<vec3<f32>, OUTS>;
    for (var g = t; g < end; g += TEAM) {
        for (var u = 0u; u < OUTS; u++) { // unroll
            let o = o0 + u;
            if live(o, j0 + u, outputs, y_offset, limit, first_1) {
                let at = row_at(o, first_1, first_2);
                load_q8(at.x, at.y, g);
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
