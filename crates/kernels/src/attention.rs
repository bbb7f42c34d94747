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

use rayon::prelude::*;

use crate::error::{KernelError, Result};
use crate::matmul::Kernels;

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
        let end = start.checked_add(t).ok_or(KernelError::Overflow {
            what: "attended positions",
            rows: t,
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
        let group = heads.heads / heads.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let one = |pair: usize, o: &mut [f32], scores: &mut Vec<f32>| {
            let (r, h) = (pair / heads.heads, pair % heads.heads);
            let len = start + r + 1;
            let kv = (h / group) * hd;
            let qv = &q[pair * hd..(pair + 1) * hd];
            scores.clear();
            scores.extend((0..len).map(|j| dot(qv, &keys[j * kv_row + kv..][..hd]) * scale));
            let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
            let mut sum = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            o.fill(0.0);
            for (j, &p) in scores.iter().enumerate() {
                for (oi, &vi) in o.iter_mut().zip(&values[j * kv_row + kv..][..hd]) {
                    *oi += p * vi;
                }
            }
            let inv = 1.0 / sum;
            for oi in o.iter_mut() {
                *oi *= inv;
            }
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

/// Σ a·b with eight independent lanes (which the compiler vectorizes) folded in a fixed order:
/// the same inputs give the same bits on every call.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}
