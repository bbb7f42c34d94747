// attention.wgsl's reads when RoPE ran before it (rope.wgsl): the queries roped in `q`, every
// visible key and value in the cache.

// Vec4 `i` of row r's query head h.
fn query4(r: u32, h: u32, i: u32) -> vec4<f32> {
    return q[(r * p[0] + h) * HD4 + i];
}

// No key of this pass is read apart from the cache.
const FRESH_KEYS: bool = false;

// Nothing to prepare or store: rope.wgsl wrote this pass's keys and values.
fn prepare(r: u32, h: u32, lid: u32) {}
fn store_rows(r: u32, h: u32, z: u32, lid: u32, kb: u32, vb: u32) {}

// The score of cache row j's key (key head at kb) against the query in `qs`, unscaled: head_dim
// / 4 vec4 loads, independent, so a GPU keeps them in flight together. `fresh`: whether the
// block may hold this pass's keys (never here).
fn key_dot(j: u32, kb: u32, fresh: bool) -> f32 {
    var d = 0.0;
    let at = kb + j * HD4;
    for (var i = 0u; i < HD4; i++) { // unroll
        d += dot(qs[i], kv4(at + i));
    }
    return d;
}

// Dimensions 4c .. 4c + 4 of cache row j's value (value head g at vb).
fn value4(j: u32, g: u32, vb: u32, c: u32, fresh: bool) -> vec4<f32> {
    return kv4(vb + j * HD4 + c);
}
