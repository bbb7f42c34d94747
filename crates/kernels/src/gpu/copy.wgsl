// A token tree's accepted path moved into place in one layer's cache: for each move
// (from, to), every key and value head's row `from` copied to row `to`. Moves go root first and
// never read a row an earlier move wrote (KvCache::keep_rows), so they run one after another
// in one workgroup per head.

// [2, n_kv, capacity, words a row]: the values' bits (f16 pairs or f32), moved as they are
@group(0) @binding(0) var<storage, read_write> kv: array<u32>;
@group(0) @binding(1) var<storage, read_write> mv: array<u32>; // [n, capacity, from_0, to_0, …]
// [words a row]
@group(0) @binding(2) var<storage, read_write> p: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cap = mv[1];
    let words = p[0];
    let head = wg.x * cap * words;
    for (var i = 0u; i < mv[0]; i++) {
        let src = head + mv[2u + 2u * i] * words;
        let to = head + mv[3u + 2u * i] * words;
        for (var d = lid; d < words; d += 64u) {
            kv[to + d] = kv[src + d];
        }
    }
}
