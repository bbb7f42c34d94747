    // The row's 32-value blocks, a thread each: the values y holds, quantized (q8.wgsl).
    let per_row = d / 32u;
    for (var b = lid; b < per_row; b += 256u) {
        var v: array<vec4<f32>, 8>;
        for (var k = 0u; k < 8u; k++) { // unroll
            let i = 32u * b + 4u * k;
            let xs = vec4<f32>(x[xb + i], x[xb + i + 1u], x[xb + i + 2u], x[xb + i + 3u]);
            v[k] = xs * inv * vec4<f32>(g[i], g[i + 1u], g[i + 2u], g[i + 3u]);
        }
        put_q8(v, wg.x * per_row + b);
    }
