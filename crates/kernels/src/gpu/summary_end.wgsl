// A summary's last launch (summary.wgsl): a row's chunks merged into its summary words.

@group(0) @binding(0) var<storage, read_write> z: array<f32>;   // [rows, vocab]
// [at + rows, 10]: top1, z1 bits, top2 (0xffffffff: none), z2 bits, sum bits, bad id, bad
// value bits, drawn id (0xffffffff: none), its logit bits, the sum at T bits; row r's summary goes to row at + r, `at` the step's link word (step.rs: 0, or a chain
// row where a step keeps its summaries until its one read)
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
// [vocab, row_from (the first row of z summarised), the bits of −inf, CHUNK, chunks a row]
@group(0) @binding(2) var<storage, read_write> p: array<u32>;
@group(0) @binding(3) var<storage, read_write> s: array<u32>;   // the forward's step words
@group(0) @binding(4) var<storage, read_write> part: array<u32>;   // [rows, chunks, PART]

const SUMMARIES_AT: u32 = {{summaries_at}}u;
const WORDS: u32 = {{summary_words}}u;

{{common}}

// The bits of the row's value at `id`, 0 for none.
fn value_bits(base: u32, id: u32) -> u32 {
    if id == NONE {
        return 0u;
    }
    return bitcast<u32>(z[base + id]);
}

// One workgroup a row (x); thread c takes chunk c.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let vocab = p[0];
    let ninf = bitcast<f32>(p[2]);
    let chunks = p[4];
    let base = (p[1] + wg.x) * vocab;
    let o0 = wg.x * chunks * PART;
    load_top(o0, chunks, lid, ninf);
    if lid < chunks {
        let o = o0 + lid * PART;
        sums[lid] = bitcast<f32>(part[o + 5u]);
        sumts[lid] = bitcast<f32>(part[o + 6u]);
        gvs[lid] = bitcast<f32>(part[o + 7u]);
        gis[lid] = part[o + 8u];
    } else {
        sums[lid] = 0.0;
        sumts[lid] = 0.0;
        gvs[lid] = ninf;
        gis[lid] = NONE;
    }
    reduce_top(lid);
    reduce_sums(lid);
    if lid == 0u {
        let o = (s[SUMMARIES_AT] + wg.x) * WORDS;
        out[o] = i1s[0];
        out[o + 1u] = bitcast<u32>(v1s[0]);
        var top2 = i2s[0];
        if !(v2s[0] > ninf) {
            top2 = NONE;
        }
        out[o + 2u] = top2;
        out[o + 3u] = bitcast<u32>(v2s[0]);
        out[o + 4u] = bitcast<u32>(sums[0]);
        let b = bads[0];
        out[o + 5u] = b;
        out[o + 6u] = value_bits(base, b);
        let d = gis[0];
        out[o + 7u] = d;
        out[o + 8u] = value_bits(base, d);
        out[o + 9u] = bitcast<u32>(sumts[0]);
    }
}
