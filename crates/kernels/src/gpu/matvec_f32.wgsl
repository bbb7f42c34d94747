// matmul.wgsl's products in its f32 form (included in its main): lane or wide teams'
// super-blocks, or 32-value groups decoded to f32 and met by the rows' f32 activations (see
// matmul.wgsl).
    var qs: array<vec4<f32>, 8u * OUTS>;
    let x_row = n_in / 4u; // vec4s a row of x
    // Lane teams: lane li of super-blocks t / 16, + TEAM / 16, … (one a step in 16-thread
    // teams, four in whole-workgroup ones); its first vec4 in a super-block's 64: values
    // 32·2c + 8·(li % 4).
    let li = t % 16u;
    let xl = 16u * (li / 4u) + 2u * (li % 4u);
    for (var b = t / 16u; b < end && LANE_TEAMS && !WIDE; b += TEAM / 16u) {
        for (var u = 0u; u < OUTS; u++) { // unroll
            lane(outs_at[u].x, outs_at[u].y, b, li);
            for (var k = 0u; k < 4u; k++) { // unroll
                qs[u * 8u + k] = q[k];
            }
        }
        if NORMED {
            // The lane's vec4s of the row: b · 64 + xl, + 1, + 8, + 9 (as the rows' below).
            let gb = b * 64u + xl;
            let g0 = norm_weights(g_at, gb);
            let g1 = norm_weights(g_at, gb + 1u);
            let g2 = norm_weights(g_at, gb + 8u);
            let g3 = norm_weights(g_at, gb + 9u);
            for (var u = 0u; u < OUTS; u++) { // unroll
                qs[u * 8u] *= g0;
                qs[u * 8u + 1u] *= g1;
                qs[u * 8u + 2u] *= g2;
                qs[u * 8u + 3u] *= g3;
            }
        }
        for (var r = 0u; r < ROWS; r++) { // unroll
            if r < m {
                // Sub-block 2c's 8 values, then 2c + 1's (32 values, 8 vec4s, on).
                let xb = (x0 + row0 + r) * x_row + b * 64u + xl;
                let x0 = x[xb];
                let x1 = x[xb + 1u];
                let x2 = x[xb + 8u];
                let x3 = x[xb + 9u];
                if NORMED {
                    ss[r] += dot(x0, x0) + dot(x1, x1) + dot(x2, x2) + dot(x3, x3);
                }
                for (var u = 0u; u < OUTS; u++) { // unroll
                    let v = 8u * u;
                    acc[u * ROWS + r] += dot(x0, qs[v]) + dot(x1, qs[v + 1u])
                        + dot(x2, qs[v + 2u]) + dot(x3, qs[v + 3u]);
                }
            }
        }
    }
    for (var g = t; g < end && !LANE_TEAMS && !WIDE; g += TEAM) {
        for (var u = 0u; u < OUTS; u++) { // unroll
            load(outs_at[u].x, outs_at[u].y, g);
            // The group's 32 weights as f32, once for all rows.
            for (var k = 0u; k < 4u; k++) { // unroll
                qs[u * 8u + k] = q[k] * s0 + vec4<f32>(mn);
                qs[u * 8u + k + 4u] = q[k + 4u] * s1 + vec4<f32>(mn);
            }
        }
        if NORMED {
            for (var k = 0u; k < 8u; k++) { // unroll
                let gk = norm_weights(g_at, g * 8u + k);
                for (var u = 0u; u < OUTS; u++) { // unroll
                    qs[u * 8u + k] *= gk;
                }
            }
        }
        // Each row is then 8 dot products an output, each activation loaded once for the
        // team's OUTS outputs, with nothing per row that a single row would not also do.
        for (var r = 0u; r < ROWS; r++) { // unroll
            if r < m {
                let xb = (x0 + row0 + r) * x_row + g * 8u;
                var sums: array<f32, OUTS>;
                for (var k = 0u; k < 8u; k++) { // unroll
                    let xk = x[xb + k];
                    if NORMED {
                        ss[r] += dot(xk, xk);
                    }
                    for (var u = 0u; u < OUTS; u++) { // unroll
                        sums[u] += dot(xk, qs[u * 8u + k]);
                    }
                }
                for (var u = 0u; u < OUTS; u++) { // unroll
                    acc[u * ROWS + r] += sums[u];
                }
            }
        }
    }
    // Wide teams: lane wi of super-blocks t / 8, + TEAM / 8, … (two a step in 16-thread teams,
    // eight in whole-workgroup ones); its values are vec4s xw .. xw + 3 (the first run) and
    // xw + WIDE_GAP .. + 3 (the second) of the super-block's 64.
    let wi = t % 8u;
    let xw = wide_lo(wi);
    for (var b = t / 8u; b < end && WIDE; b += TEAM / 8u) {
        wide_outputs(b, wi);
        // The lane's 32 weights an output as f32 (integers), once for all rows.
        var wf: array<vec4<f32>, 8u * OUTS>;
        for (var u = 0u; u < OUTS; u++) { // unroll
            for (var k = 0u; k < 4u; k++) { // unroll
                wf[8u * u + k] = byte_values(wlos[u][k]);
                wf[8u * u + k + 4u] = byte_values(whis[u][k]);
            }
        }
        var gs: array<vec4<f32>, 8>;
        if NORMED {
            for (var k = 0u; k < 4u; k++) { // unroll
                gs[k] = norm_weights(g_at, b * 64u + xw + k);
                gs[k + 4u] = norm_weights(g_at, b * 64u + xw + WIDE_GAP + k);
            }
        }
        for (var r = 0u; r < ROWS; r++) { // unroll
            if r < m {
                let xb = (x0 + row0 + r) * x_row + b * 64u + xw;
                var xs: array<vec4<f32>, 8>;
                for (var k = 0u; k < 4u; k++) { // unroll
                    xs[k] = x[xb + k];
                    xs[k + 4u] = x[xb + WIDE_GAP + k];
                }
                if NORMED {
                    for (var k = 0u; k < 8u; k++) { // unroll
                        ss[r] += dot(xs[k], xs[k]);
                        xs[k] *= gs[k];
                    }
                }
                // Σ x of each run, for the minimums.
                var lo_x = 0.0;
                var hi_x = 0.0;
                for (var k = 0u; k < 4u; k++) { // unroll
                    lo_x += dot(xs[k], vec4<f32>(1.0));
                    hi_x += dot(xs[k + 4u], vec4<f32>(1.0));
                }
                for (var u = 0u; u < OUTS; u++) { // unroll
                    var lo = 0.0;
                    var hi = 0.0;
                    for (var k = 0u; k < 4u; k++) { // unroll
                        lo += dot(xs[k], wf[8u * u + k]);
                        hi += dot(xs[k + 4u], wf[8u * u + k + 4u]);
                    }
                    let w = wss[u];
                    acc[u * ROWS + r] += w.x * lo - w.y * lo_x + w.z * hi - w.w * hi_x;
                }
            }
        }
    }
