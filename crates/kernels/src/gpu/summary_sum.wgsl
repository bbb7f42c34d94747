// A summary's second launch (summary.wgsl): the row's z1 from its chunks' ranks, then each
// chunk's sums of exp(z − z1) and exp((z − z1) / T) and its best Gumbel-max score.

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, vocab]
// [vocab, row_from (the first row of z summarised), the bits of −inf, CHUNK, chunks a row]
@group(0) @binding(1) var<storage, read_write> p: array<u32>;
@group(0) @binding(2) var<storage, read_write> part: array<u32>;   // [rows, chunks, PART]
@group(0) @binding(3) var<storage, read_write> s: array<u32>;   // the forward's step words
// [3]: 1 to draw (0: greedy), the bits of 1 / T (1 when greedy), the seed's key
// (mars_verify::noise::seed_key). Row r's key is mix(seed key ^ (its input's position + 1)):
// the context index of the token it predicts, read from the step words.
@group(0) @binding(4) var<storage, read_write> keys: array<u32>;

const IDS: u32 = {{ids_at}}u;

{{common}}

// One workgroup a chunk (x) of a row (y).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let vocab = p[0];
    let ninf = bitcast<f32>(p[2]);
    let chunk = p[3];
    let chunks = p[4];
    let base = (p[1] + wg.y) * vocab;
    load_top(wg.y * chunks * PART, chunks, lid, ninf);
    reduce_top(lid);
    let mx = v1s[0];
    let draw = keys[0] == 1u;
    let inv_t = bitcast<f32>(keys[1]);
    // The summarised rows are the forward's last `tail` (step words 0 and 1).
    let forward_row = s[0] - s[1] + wg.y;
    let key = mix(keys[2] ^ (s[IDS + s[0] + 4u * forward_row] + 1u));
    let salt = mix(key ^ 0x9e3779b9u);
    var sum = 0.0;
    var sumt = 0.0;
    var gv = ninf;
    var gi = NONE;
    let end = min((wg.x + 1u) * chunk, vocab);
    for (var i = wg.x * chunk + lid; i < end; i += THREADS) {
        let v = z[base + i];
        // −inf and the bad values add nothing (a row with a bad value is refused anyway).
        if v > -3.0e38 && v <= mx {
            sum += exp(v - mx);
            if draw {
                let x = (v - mx) * inv_t;
                sumt += exp(x);
                let g = x + gumbel(key, salt, i);
                if before(g, i, gv, gi) {
                    gv = g;
                    gi = i;
                }
            }
        }
    }
    sums[lid] = sum;
    sumts[lid] = sumt;
    gvs[lid] = gv;
    gis[lid] = gi;
    reduce_sums(lid);
    if lid == 0u {
        let o = (wg.y * chunks + wg.x) * PART;
        part[o + 5u] = bitcast<u32>(sums[0]);
        part[o + 6u] = bitcast<u32>(sumts[0]);
        part[o + 7u] = bitcast<u32>(gvs[0]);
        part[o + 8u] = gis[0];
    }
}
