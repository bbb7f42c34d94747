// q8.wgsl's blocks written to storage (included by quant.wgsl, and by norm.wgsl where the product
// after it takes them), in q8.wgsl's chunks of four.

@group(0) @binding({{q8_binding}}) var<storage, read_write> xq: array<vec4<u32>>; // [⌈rows · n_in / 128⌉ · 10]

{{q8_block}}
