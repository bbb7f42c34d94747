// What attention.wgsl and attention_merge.wgsl share: a row's visible keys, the partials'
// layout, and the fold of its blocks, so that both launch shapes give the same bits.

// A block's, or the blocks so far: the maximum score, the sum of weights exp(score − m), and
// (one lane's four dimensions of) the weighted values' sum.
struct Fold {
    m: f32,
    l: f32,
    acc: vec4<f32>,
}

// The blocks so far `f` and the next block `b`, in that order; the first block as it is.
fn fold(f: Fold, first: bool, b: Fold) -> Fold {
    if first {
        return b;
    }
    let m = max(f.m, b.m);
    let ca = exp(f.m - m);
    let cb = exp(b.m - m);
    return Fold(m, f.l * ca + b.l * cb, f.acc * ca + b.acc * cb);
}

// The keys row r sees: lo, then the bits of its tree mask.
fn visible_keys(r: u32) -> u32 {
    let e = 8u + s[0] + 4u * r;
    return s[e + 1u] + countOneBits(s[e + 2u]) + countOneBits(s[e + 3u]);
}

// Where block b of (row r, head h) keeps its partial: head_dim / 4 vec4s of acc, then (m, l),
// [rows, n_heads, blocks of the step's row that sees most keys, head_dim / 4 + 1].
fn partial_at(r: u32, h: u32, b: u32, nh: u32, hd4: u32) -> u32 {
    var most = 0u;
    for (var i = 0u; i < s[0]; i++) {
        most = max(most, visible_keys(i));
    }
    let blocks = (most + WG - 1u) / WG;
    return ((r * nh + h) * blocks + b) * (hd4 + 1u);
}
