// A forward's last `n` token ids taken from a chain of row summaries on the device (step.rs,
// `Link`): row rows − n + j gets chain row `first + j`'s token — its draw (word 7) where the row
// was drawn, else its best id (word 0): mars_verify::RowSummary::token. A drafter's next input
// is its last row's argmax or draw, and the target's inputs are the drafts, without the host
// reading any of them until the step's one read. Runs before the embedding lookup, which reads
// the ids from the step buffer.

@group(0) @binding(0) var<storage, read_write> s: array<u32>;     // step: [rows, …], link at LINKED, ids at IDS
@group(0) @binding(1) var<storage, read_write> chain: array<u32>; // [chain rows, SUMMARY_WORDS]

const IDS: u32 = {{ids_at}}u;
const LINKED: u32 = {{linked_at}}u;
const WORDS: u32 = {{summary_words}}u;
const NONE: u32 = 0xffffffffu;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
    let rows = s[0];
    let n = s[LINKED];
    let first = s[LINKED + 1u];
    for (var j = lid; j < n; j += 64u) {
        let row = (first + j) * WORDS;
        let drawn = chain[row + 7u];
        if drawn != NONE {
            s[IDS + rows - n + j] = drawn;
        } else {
            s[IDS + rows - n + j] = chain[row];
        }
    }
}
