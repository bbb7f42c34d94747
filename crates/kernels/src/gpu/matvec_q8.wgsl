// matmul.wgsl's products in its 8-bit form (included in its main): each 32-value group of
// a weight row decoded once to packed 8-bit integers with its scales (value l = s0·q_l + mn for
// l < 16, s1·q_l + mn after), then met by each row's quantized group (quant.wgsl: x_l ≈ d·x̂_l,
// s = d·Σx̂) in eight integer dot products of four: the group's sum is
// d·(s0·Σ_{l<16} q_l·x̂_l + s1·Σ_{l≥16} q_l·x̂_l) + mn·s, exact integers until that one line, and
// each row's in the same order whatever the rows beside it.
//
// The blocks are read through `xq` (x's in this form; workgroup memory's in the form that
// quantizes its own row, matvec_own.wgsl, which runs these loops over one chunk of the row at a
// time) and the loops walk groups [lo_g, hi_g) and super-blocks [lo_b, hi_b): the whole row here
// (matmul.wgsl sets them), a chunk there, each lane's steps in the same order either way.
    var qw: array<u32, 8u * OUTS>;
    var sc: array<vec3<f32>, OUTS>;
    for (var g = lo_g + t; g < hi_g && !WIDE; g += TEAM) {
        for (var u = 0u; u < OUTS; u++) { // unroll
            // Here a dead output keeps its branch (matmul.wgsl's `outs_live`): without it
            // lavapipe's compiler fused this form's scale arithmetic otherwise in a group than
            // in its matrix alone (one output a ulp apart, `gpu_q8`'s group test).
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
                let xa = xq(c + 2u * i);
                let xb = xq(c + 2u * i + 1u);
                let ds = xq(c + 8u + (i >> 1u));
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
    // Wide teams: lane wi's runs are halves of quantized blocks wide_lo(wi) / 8 and WIDE_GAP / 8
    // blocks on of super-block b (values 16·(wi % 2) .. + 16 of each, one vec4; both blocks in
    // one chunk of 4: quant.wgsl), their values made signed bytes once for all rows (wide_i8).
    let wi = t % 8u;
    let hf = wi % 2u;
    let first = wide_lo(wi) / 8u;
    // A row's quantized blocks are a multiple of 8 (whole super-blocks), so where each run's
    // block sits in its chunk of 4 is the lane's alone.
    let i = first & 3u;
    let ih = i + WIDE_GAP / 8u;
    // A quantized block's s covers both halves of it, so of its two lanes the first alone
    // subtracts the minimums: the other's are made 0 once a step (× 1.0 keeps them exactly),
    // not skipped behind a branch for every row and output (on NVIDIA's NAK a structured branch
    // each: ~6 instructions to the 2 it guards).
    let keep = select(0.0, 1.0, hf == 0u);
    // A quantized row is n_groups / 4 chunks of 10 vec4s (n_groups a multiple of 8 in wide
    // teams: whole super-blocks), so a run's chunk is the row's first plus the run's own, and
    // a row's address one add from row 0's (the flat block index shifted per row, as the
    // other form takes it, cost NAK ~8 instructions a row and step).
    let x_chunks = (n_groups >> 2u) * 10u;
    // Super-blocks t / 8, + TEAM / 8, … (two a step in 16-thread teams, eight in whole ones).
    for (var b = lo_b + t / 8u; b < hi_b && WIDE; b += TEAM / 8u) {
        let cb = ((8u * b + first) >> 2u) * 10u;
        wide_outputs(b, wi);
        for (var u = 0u; u < OUTS; u++) { // unroll
            wlos[u] = wide_i8(wlos[u]);
            whis[u] = wide_i8(whis[u]);
            if WIDE_MINS {
                wss[u] = wss[u] * vec4<f32>(1.0, keep, 1.0, keep);
            }
        }
        for (var r = 0u; r < ROWS; r++) { // unroll
            if r < m {
                let c = (row0 + r) * x_chunks + cb;
                let xa = xq(c + 2u * i + hf);
                let xb = xq(c + 2u * ih + hf);
                // Each block's (d, s): blocks 2k and 2k + 1 of a chunk share a vec4.
                var dl: vec2<u32>;
                var dh: vec2<u32>;
                if WIDE_GAP == 8u {
                    // Q4_K: blocks 2c and 2c + 1, one vec4.
                    let ds = xq(c + 8u + (i >> 1u));
                    dl = ds.xy;
                    dh = ds.zw;
                } else {
                    let a = xq(c + 8u + (i >> 1u));
                    let e = xq(c + 8u + (ih >> 1u));
                    dl = select(a.xy, a.zw, (i & 1u) != 0u);
                    dh = select(e.xy, e.zw, (ih & 1u) != 0u);
                }
                for (var u = 0u; u < OUTS; u++) { // unroll
                    let wl = wlos[u];
                    let wh = whis[u];
                    let lo = dot4I8Packed(wl.x, xa.x) + dot4I8Packed(wl.y, xa.y)
                        + dot4I8Packed(wl.z, xa.z) + dot4I8Packed(wl.w, xa.w);
                    let hi = dot4I8Packed(wh.x, xb.x) + dot4I8Packed(wh.y, xb.y)
                        + dot4I8Packed(wh.z, xb.z) + dot4I8Packed(wh.w, xb.w);
                    let sc = wss[u];
                    var v = bitcast<f32>(dl.x) * sc.x * f32(lo) + bitcast<f32>(dh.x) * sc.z * f32(hi);
                    if WIDE_MINS {
                        v -= sc.y * bitcast<f32>(dl.y) + sc.w * bitcast<f32>(dh.y);
                    }
                    acc[u * ROWS + r] += v;
                }
            }
        }
    }
