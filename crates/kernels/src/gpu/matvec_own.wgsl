// matmul.wgsl's products in the 8-bit form that quantizes its own row (`Acts::Q8Own`; one-row
// steps only, ROWS 1: passes of more rows share one quantization, quant.wgsl's or a norm's).
// Each workgroup quantizes the row itself, a chunk of 2,048 values at a time into workgroup
// memory (a block a thread, q8.wgsl's arithmetic), then runs matvec_q8.wgsl's loops over that
// chunk: no launch before the product, no quantized row in memory. Where a norm is folded in
// (OWN_NORMED: x holds the rows before it), the row's 1/rms first, as norm.wgsl computes it —
// 256 strided partial sums of squares, four a thread here, in its fixed tree — and each value
// x · inv · g, as norm_q8.wgsl quantizes it. So every block has the bits a norm's or
// quant.wgsl's launch writes, and each lane meets the blocks in matvec_q8.wgsl's order: the
// outputs are the 8-bit form's, bit for bit.
    // The row's first vec4 in x (where a norm is folded in, the row's place among the step's).
    let xr = (x0 + row0) * (n_in / 4u);
    var inv = 1.0;
    if OWN_NORMED {
        for (var j = 0u; j < 4u; j++) {
            var sum = 0.0;
            for (var i = lid + 64u * j; i < n_in; i += 256u) {
                let v = x[xr + (i >> 2u)][i & 3u];
                sum += v * v;
            }
            squares[lid + 64u * j] = sum;
        }
        workgroupBarrier();
        for (var step = 128u; step > 0u; step >>= 1u) {
            for (var j = 0u; j < 2u; j++) {
                let k = lid + 64u * j;
                if k < step {
                    squares[k] += squares[k + step];
                }
            }
            workgroupBarrier();
        }
        inv = 1.0 / sqrt(squares[0] / f32(n_in) + bitcast<f32>(pw(18)));
    }
    if lid == 0u {
        own_chunks = (n_groups + 63u) / 64u;
    }
    let chunks = workgroupUniformLoad(&own_chunks);
    for (var ch = 0u; ch < chunks; ch++) {
        let bi = 64u * ch + lid;
        if bi < n_groups {
            var v: array<vec4<f32>, 8>;
            for (var k = 0u; k < 8u; k++) { // unroll
                v[k] = x[xr + 8u * bi + k];
                if OWN_NORMED {
                    v[k] = v[k] * inv * norm_weights(g_at, 8u * bi + k);
                }
            }
            put_q8(v, lid);
        }
        workgroupBarrier();
        xw_base = 160u * ch;
        // The chunk's groups and super-blocks: each lane's first in it is its first in the row
        // shifted by whole steps (64 groups: a multiple of every team's stride; 8 super-blocks:
        // of a wide team's two or eight a step).
        let lo_g = 64u * ch;
        let hi_g = min(lo_g + 64u, end);
        let lo_b = 8u * ch;
        let hi_b = min(lo_b + 8u, end);
{{q8_products}}
        workgroupBarrier();
    }
