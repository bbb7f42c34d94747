// A buffer read once at the adapter's full width, for measurement: the ceiling a kernel that
// reads the same bytes can reach on this device through this runtime (gpu_cost's `stream`
// table holds the matmul against it), and the eviction a tuning runs before each timed product
// (tune.rs's `Evict`). Thread i XORs vec4s i, i + threads, … and writes its word when
// i < outs or when the word equals `mark`: so the reads cannot be dropped, and with outs = 0
// (an eviction, `out` being the timed product's output, bound so that the two launches are
// ordered) a write happens only where the data happens to meet the mark. With outs = threads
// the words' XOR is the buffer's.

@group(0) @binding(0) var<storage, read_write> w: array<vec4<u32>>; // [n]
@group(0) @binding(1) var<storage, read_write> out: array<u32>;     // [max(outs, 1)]
@group(0) @binding(2) var<storage, read_write> p: array<u32>;       // [n, threads, groups_x, outs, mark]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i0 = (wg.x + wg.y * p[2]) * 256u + lid;
    let threads = p[1];
    if i0 >= threads {
        return;
    }
    var a = vec4<u32>(0u);
    for (var i = i0; i < p[0]; i += threads) {
        a ^= w[i];
    }
    let f = a.x ^ a.y ^ a.z ^ a.w;
    if i0 < p[3] || f == p[4] {
        out[min(i0, max(p[3], 1u) - 1u)] = f;
    }
}
