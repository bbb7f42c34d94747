//! Causal grouped-query attention over an f32 KV cache on the CPU, one (query row, head) at a
//! time, so that a row's result depends on its position and the cache only, never on how many
//! rows share the call.
//!
//! A batched attention (one matmul over all rows, a mask for the future) sums in an order that
//! depends on the batch's shape; with 8-bit activations downstream, those last-bit differences
//! grow to tenths of a logit, and greedy strict speculation (rows verified 5 at a time) drifts
//! from target-only decoding (rows one at a time). Here every (row, head) pair is computed by the
//! same loop whatever the batch: scores in position order, a max-subtracted softmax, the
//! weighted sum of values in position order. Pairs run in parallel; the split changes nothing.
//!
//! The loop is plain Rust shaped for vectors — dot products in 16 lanes folded as a tree, four
//! keys scored together, the exponential of `activation`, 16 to 64 output values summed in
//! registers across the positions — and compiled again for AVX2 and AVX-512. Rust never fuses
//! a multiply and an add, so every build gives the same bits (tested). Against the earlier
//! loop (8-lane dot products one key at a time, libm's `expf`, the output summed in memory):
//! 1.9× faster at 16 rows on one thread, 2.2× on two (1.5B shape, 64 positions:
//! `cargo run --release -p mars-kernels --example attention_cost 2`, both builds in one run).

use rayon::prelude::*;

use crate::error::{KernelError, Result};
#[cfg(target_arch = "x86_64")]
use crate::kernels::Isa;
use crate::kernels::Kernels;

/// The attention's head layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (query head h reads KV head h / (heads / kv_heads)).
    pub kv_heads: usize,
    /// Values per head.
    pub head_dim: usize,
}

/// How a GPU KV cache stores its keys and values (the CPU cache is f32). f16 halves the
/// cache (a 32B's 64 layers × 8 KV heads × 128 dims at 32K positions: 8 GiB instead of 16), as
/// llama.cpp's default does; attention still sums in f32. f32 keeps the values the layer made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// Two values a 32-bit word (WGSL's `pack2x16float`, core on every adapter).
    #[default]
    F16,
    /// The values as computed.
    F32,
}

impl KvType {
    /// Bytes a value.
    pub fn bytes(self) -> usize {
        match self {
            Self::F16 => 2,
            Self::F32 => 4,
        }
    }

    /// The name reports and flags use: `f16` or `f32`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::F32 => "f32",
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = KernelError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f16" => Ok(Self::F16),
            "f32" => Ok(Self::F32),
            _ => Err(KernelError::Unknown {
                what: "KV cache type",
                value: s.to_string(),
                expected: "f16, f32",
            }),
        }
    }
}

impl Heads {
    fn check(&self) -> Result<()> {
        if self.heads == 0
            || self.kv_heads == 0
            || self.head_dim == 0
            || !self.heads.is_multiple_of(self.kv_heads)
        {
            return Err(KernelError::Shape {
                what: "query heads (a positive multiple of the KV heads)",
                expected: self.kv_heads,
                found: self.heads,
            });
        }
        Ok(())
    }
}

/// Below this many multiply-adds a call stays on the calling thread (a pool hand-off costs
/// microseconds).
const PARALLEL_WORK: usize = 1 << 15;

impl Kernels {
    /// `out[r, h] = Σ_{j ≤ start + r} softmax_j(q[r, h] · k[j, h'] / √hd) · v[j, h']` with
    /// h' = h / group.
    ///
    /// - `q`: `[t, heads, head_dim]`, the rows at positions `start .. start + t`;
    /// - `keys`, `values`: `[≥ start + t, kv_heads, head_dim]`, positions `0 .. start + t` filled;
    /// - `out`: `[t, heads, head_dim]`.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a head layout that does not divide, or slices of the wrong
    /// length.
    pub fn attention(
        &self,
        heads: Heads,
        start: usize,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        self.attention_over(heads, start, q, keys, values, None, out)
    }

    /// [`Kernels::attention`] for a token tree: tree row r (at cache row `start + r`) attends to
    /// the cache's first `start` positions, then to its ancestors root first, then to itself —
    /// the keys a chain forward over its path would see, in the same order, so its result is
    /// that chain's bit for bit. `parents` lists every row of the tree (`None` for a root, a row
    /// that follows the cache directly, else an earlier row); `q` holds its last rows (all of
    /// them, or those a later call adds to a tree whose earlier rows are already cached, as a
    /// drafter growing a tree a depth at a time does).
    ///
    /// # Errors
    /// As [`Kernels::attention`], and [`KernelError::Shape`] for more query rows than `parents`
    /// lists or a parent that is not an earlier row.
    #[allow(clippy::too_many_arguments)] // the attention's operands and the tree
    pub fn attention_tree(
        &self,
        heads: Heads,
        start: usize,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        parents: &[Option<usize>],
        out: &mut [f32],
    ) -> Result<()> {
        let mut paths: Vec<Vec<usize>> = Vec::with_capacity(parents.len());
        for (r, &parent) in parents.iter().enumerate() {
            let mut path: Vec<usize> = match parent {
                None => Vec::new(),
                Some(p) if p < r => paths[p].clone(),
                Some(p) => {
                    return Err(KernelError::Shape {
                        what: "a tree row's parent (an earlier row)",
                        expected: r,
                        found: p,
                    });
                }
            };
            path.push(r);
            paths.push(path);
        }
        let rows = q.len() / (heads.heads * heads.head_dim).max(1);
        let first = paths.len().checked_sub(rows).ok_or(KernelError::Shape {
            what: "tree parents (at least one per query row)",
            expected: rows,
            found: paths.len(),
        })?;
        self.attention_over(heads, start, q, keys, values, Some(&paths[first..]), out)
    }

    /// Causal attention (`paths` `None`) or tree attention (`paths[r]`: the rows, relative to
    /// `start`, that row r sees after the cache, itself last).
    #[allow(clippy::too_many_arguments)]
    fn attention_over(
        &self,
        heads: Heads,
        start: usize,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        paths: Option<&[Vec<usize>]>,
        out: &mut [f32],
    ) -> Result<()> {
        heads.check()?;
        let hd = heads.head_dim;
        let q_row = heads.heads * hd;
        let kv_row = heads.kv_heads * hd;
        if !q.len().is_multiple_of(q_row) || out.len() != q.len() {
            return Err(KernelError::Shape {
                what: "query and output values (rows × heads × head_dim)",
                expected: q.len().div_ceil(q_row) * q_row,
                found: out.len(),
            });
        }
        let t = q.len() / q_row;
        // Rows after the cache that must be filled: the query rows, or in a tree every row up to
        // the last (each path ends at its own row, the largest it names).
        let after = paths.map_or(t, |p| {
            p.iter()
                .filter_map(|path| path.last())
                .max()
                .map_or(0, |&r| r + 1)
        });
        let end = start.checked_add(after).ok_or(KernelError::Overflow {
            what: "attended positions",
            rows: after,
            cols: start,
        })?;
        let filled = end.checked_mul(kv_row).ok_or(KernelError::Overflow {
            what: "cached values",
            rows: end,
            cols: kv_row,
        })?;
        for (what, found) in [("cached keys", keys.len()), ("cached values", values.len())] {
            if found < filled {
                return Err(KernelError::Shape {
                    what,
                    expected: filled,
                    found,
                });
            }
        }
        if let Some(paths) = paths
            && paths.len() != t
        {
            return Err(KernelError::Shape {
                what: "tree parents (one per query row)",
                expected: t,
                found: paths.len(),
            });
        }
        let group = heads.heads / heads.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let one = |pair: usize, o: &mut [f32], scores: &mut Vec<f32>| {
            let (r, h) = (pair / heads.heads, pair % heads.heads);
            let path = paths.map(|p| p[r].as_slice());
            let cache = Cache {
                keys,
                values,
                row: kv_row,
                at: (h / group) * hd,
                len: start + path.map_or(r + 1, <[usize]>::len),
                prefix: start,
                path,
            };
            self.pair_wide(&q[pair * hd..(pair + 1) * hd], &cache, scale, scores, o);
        };
        let work = t * heads.heads * end * hd;
        match self.pool() {
            Some(pool) if work >= PARALLEL_WORK => pool.install(|| {
                out.par_chunks_mut(hd).enumerate().for_each_init(
                    || Vec::with_capacity(end),
                    |scores, (pair, o)| one(pair, o, scores),
                );
            }),
            _ => {
                let mut scores = Vec::with_capacity(end);
                for (pair, o) in out.chunks_mut(hd).enumerate() {
                    one(pair, o, &mut scores);
                }
            }
        }
        Ok(())
    }
}

/// The cached keys and values one (row, head) pair attends to: the j-th of `len` positions is
/// cache row j (causal), or past `prefix` the tree row `prefix + path[j − prefix]`; its `hd`
/// values start at `cache row · row + at` in each.
struct Cache<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    row: usize,
    at: usize,
    len: usize,
    prefix: usize,
    path: Option<&'a [usize]>,
}

impl Cache<'_> {
    #[inline(always)]
    fn cache_row(&self, j: usize) -> usize {
        match self.path {
            Some(path) if j >= self.prefix => self.prefix + path[j - self.prefix],
            _ => j,
        }
    }

    fn key(&self, j: usize, hd: usize) -> &[f32] {
        &self.keys[self.cache_row(j) * self.row + self.at..][..hd]
    }

    fn value(&self, j: usize, hd: usize) -> &[f32] {
        &self.values[self.cache_row(j) * self.row + self.at..][..hd]
    }
}

/// Lanes of a dot product's or a sum's partial sums. The same in every build, so every build
/// adds in one order.
const LANES: usize = 16;

/// Keys scored together: their sums are independent, so the compiler interleaves them (one
/// key's dot product alone is a chain of dependent additions).
const KEYS: usize = 4;

/// `LANES` partial sums folded as a tree (lane l with lane l + 8, then + 4, + 2, + 1).
#[inline(always)]
fn fold(mut w: [f32; LANES]) -> f32 {
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for l in 0..n {
            w[l] += w[l + n];
        }
    }
    w[0]
}

/// q · k for `K` keys at once: per key, lane l sums the products of values l, l + 16, … in
/// order, the lanes fold as a tree, and the values past the last whole 16 are added after it
/// in order. Each key's steps are the same whatever `K` and the keys beside it.
#[inline(always)]
fn dots<const K: usize>(q: &[f32], k: [&[f32]; K]) -> [f32; K] {
    let whole = q.len() / LANES * LANES;
    let mut acc = [[0f32; LANES]; K];
    for c in (0..whole).step_by(LANES) {
        let qc = &q[c..c + LANES];
        for (acc, k) in acc.iter_mut().zip(&k) {
            let kc = &k[c..c + LANES];
            for l in 0..LANES {
                acc[l] += qc[l] * kc[l];
            }
        }
    }
    let mut out = [0f32; K];
    for ((out, acc), k) in out.iter_mut().zip(acc).zip(&k) {
        let tail: f32 = q[whole..]
            .iter()
            .zip(&k[whole..])
            .fold(0.0, |s, (a, b)| s + a * b);
        *out = fold(acc) + tail;
    }
    out
}

/// Σ of `x` in `LANES` partial sums (value i into lane i mod 16, in order), folded as a tree.
#[inline(always)]
fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().fold(0.0, |s, v| s + v);
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    fold(acc) + tail
}

/// One (row, head) pair: `o = Σ_j softmax_j(q · k_j · scale) · v_j` over the cache's
/// positions. `CH` output values are summed at a time (kept in registers across the
/// positions); every value's sum runs over the positions in order whatever `CH` is, so the
/// builds below, with their different `CH`, give the same bits.
#[inline(always)]
fn pair<const CH: usize>(q: &[f32], c: &Cache<'_>, scale: f32, s: &mut Vec<f32>, o: &mut [f32]) {
    let hd = q.len();
    s.clear();
    let mut j = 0;
    while j + KEYS <= c.len {
        let k: [&[f32]; KEYS] = std::array::from_fn(|i| c.key(j + i, hd));
        s.extend(dots(q, k).map(|d| d * scale));
        j += KEYS;
    }
    for j in j..c.len {
        s.push(dots(q, [c.key(j, hd)])[0] * scale);
    }
    let max = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    for v in s.iter_mut() {
        // e^(v − max) ≤ 1; below e^−87 (~10⁻³⁸) it is 0 to f32 beside the largest term, 1. A
        // NaN stays NaN (the comparison is false).
        let d = *v - max;
        *v = crate::activation::exp(if d < -87.0 { -87.0 } else { d });
    }
    let inv = 1.0 / sum(s);
    for (ci, oc) in o.chunks_mut(CH).enumerate() {
        let from = ci * CH;
        let mut acc = [0f32; CH];
        if oc.len() == CH {
            for (j, &p) in s.iter().enumerate() {
                let v = &c.value(j, hd)[from..from + CH];
                for l in 0..CH {
                    acc[l] += p * v[l];
                }
            }
        } else {
            for (j, &p) in s.iter().enumerate() {
                let v = &c.value(j, hd)[from..];
                for (a, &v) in acc.iter_mut().zip(v) {
                    *a += p * v;
                }
            }
        }
        for (o, a) in oc.iter_mut().zip(acc) {
            *o = a * inv;
        }
    }
}

/// [`pair`] compiled for AVX-512 (64 output values in four registers). No fused multiply-add
/// is formed (Rust never contracts `a * b + c`), so the bits are the baseline's (tested).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn pair_avx512(q: &[f32], c: &Cache<'_>, scale: f32, s: &mut Vec<f32>, o: &mut [f32]) {
    pair::<64>(q, c, scale, s, o);
}

/// [`pair`] compiled for AVX2 (32 output values in four registers), bit-identical to it.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pair_avx2(q: &[f32], c: &Cache<'_>, scale: f32, s: &mut Vec<f32>, o: &mut [f32]) {
    pair::<32>(q, c, scale, s, o);
}

impl Kernels {
    /// [`pair`] in the widest instruction set of this kernel set's ISA.
    fn pair_wide(&self, q: &[f32], c: &Cache<'_>, scale: f32, s: &mut Vec<f32>, o: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        match self.isa() {
            // SAFETY: `Kernels::with_isa` admits Avx512 only where `x86::avx512_available()`
            // said the CPU has AVX-512 F (and more).
            Isa::Avx512 => unsafe { pair_avx512(q, c, scale, s, o) },
            // SAFETY: `Kernels::with_isa` admits Avx2 and AvxVnni only where
            // `x86::available()` said the CPU has AVX2 (and more).
            Isa::Avx2 | Isa::AvxVnni => unsafe { pair_avx2(q, c, scale, s, o) },
            Isa::Scalar | Isa::Simd128 | Isa::Neon | Isa::NeonDot => pair::<16>(q, c, scale, s, o),
        }
        #[cfg(not(target_arch = "x86_64"))]
        pair::<16>(q, c, scale, s, o);
    }
}
