// Rows reduced to what choosing a tree's children needs (mars_verify's `Sampler::top_of`), or
// a top-k sampler's row (every value but the best k is out of its distribution): each row's
// best C values (descending, lowest id first among equals, −inf never listed) over its first
// `cols` values, the sum of exp((z − z1) / T) over them, and the first NaN or +inf with its
// value — 2C + 3 words a row read back instead of the row.
//
// Three launches, as summary.wgsl's and for its reason (one workgroup over a 150K row keeps a
// card waiting on its loads): a row is cut into chunks of CHUNK values. top_rank.wgsl ranks
// each chunk, each thread keeping its own best C in order, the lists merged in a fixed order;
// top_sum.wgsl takes z1 from the chunks' best values and sums each chunk against it;
// top_end.wgsl merges the chunks (thread t the chunks t, t + THREADS, … in order, then a fixed
// tree) and writes the row's words. So a row's result does not depend on the rows beside it,
// and its ranks not on the chunking.
//
// A chunk's partial in `part` ([rows, chunks, 2C + 2] words): its best C as (id (0xffffffff:
// none), value bits), its first bad id, then (top_sum.wgsl) its sum's bits.

const C: u32 = {{c}}u;
const THREADS: u32 = {{threads}}u;
const NONE: u32 = 0xffffffffu;
const PART: u32 = 2u * C + 2u;

// [stride, cols, the bits of 1 / T (1 for greedy: the model's own softmax), the bits of −inf,
// CHUNK, chunks a row]
@group(0) @binding({{p_binding}}) var<storage, read_write> p: array<u32>;
@group(0) @binding({{part_binding}}) var<storage, read_write> part: array<u32>;

var<workgroup> vs: array<f32, {{cells}}>;  // [THREADS, C]
var<workgroup> ids: array<u32, {{cells}}>;
var<workgroup> bads: array<u32, THREADS>;
var<workgroup> sums: array<f32, THREADS>;

// Whether (va, ia) ranks before (vb, ib).
fn before(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
    return va > vb || (va == vb && ia < ib);
}

// The threads' lists in vs / ids and first bad ids in bads merged into thread 0's, pairwise
// in a fixed order (every list already in order).
fn merge_lists(lid: u32) {
    workgroupBarrier();
    for (var step = THREADS / 2u; step > 0u; step >>= 1u) {
        if lid < step {
            let a = lid * C;
            let o = (lid + step) * C;
            var ma: array<f32, C>;
            var mi: array<u32, C>;
            var x = 0u;
            var y = 0u;
            for (var j = 0u; j < C; j++) {
                if before(vs[o + y], ids[o + y], vs[a + x], ids[a + x]) {
                    ma[j] = vs[o + y];
                    mi[j] = ids[o + y];
                    y += 1u;
                } else {
                    ma[j] = vs[a + x];
                    mi[j] = ids[a + x];
                    x += 1u;
                }
            }
            for (var j = 0u; j < C; j++) {
                vs[a + j] = ma[j];
                ids[a + j] = mi[j];
            }
            bads[lid] = min(bads[lid], bads[lid + step]);
        }
        workgroupBarrier();
    }
}

// The threads' sums added into thread 0's in a fixed tree.
fn add_sums(lid: u32) {
    workgroupBarrier();
    for (var step = THREADS / 2u; step > 0u; step >>= 1u) {
        if lid < step {
            sums[lid] += sums[lid + step];
        }
        workgroupBarrier();
    }
}
