//! The step buffer: what one forward pass tells every kernel it launches, written to the GPU
//! once per forward (one small write, no parameters uploaded per launch).
//!
//! Layout, in u32 words:
//! - `[0]` rows of this forward, `[1]` the last rows that get logits (`tail`), `[2]` the logit
//!   limit (outputs of the output head at or past it are −inf), `[3]` the cache row of the
//!   first row (`start`: the cache's length before the forward), `[4]` the cache's capacity
//!   (rows per head in its buffers); `[5]` how many of the last rows take their id from a
//!   chain of row summaries on the GPU ([`LINKED`]; 0: every id is the host's), `[6]` the
//!   chain row of the first of them, `[7]` the chain row this forward's summaries go to
//!   ([`Link`]: a greedy draft chained on the device, read back once a step);
//! - `[8 .. 8 + rows]` the token ids ([`IDS`]);
//! - `[8 + rows + 4r ..]` row r's position (RoPE), `lo` and the two words of its tree mask:
//!   row r sees cache rows `0..lo` and `lo + b` for every bit b set in the mask.

use crate::error::{KernelError, Result};

/// Where the token ids start in the step buffer.
pub const IDS: usize = 8;

/// Where the step's [`Link`] starts in the step buffer (three words).
pub const LINKED: usize = 5;

/// A forward's place in a chain of row summaries kept on the GPU: its last `ids` rows take as
/// their token that of chain rows `ids_from..` (the draw where the row was drawn, else the best
/// id), and its logit rows' summaries go to chain rows `summaries_at..`. A drafter chains its
/// drafts this way, and the target takes them, so that a step reads back once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Link {
    /// Chain row whose token the first linked row takes.
    pub ids_from: usize,
    /// Rows (the forward's last) whose ids come from the chain.
    pub ids: usize,
    /// Chain row of the first logit row's summary.
    pub summaries_at: usize,
}

/// Most rows of a token tree the GPU's attention can tell apart (one 64-bit mask a row).
pub const MAX_TREE_ROWS: usize = 64;

/// One forward's step words (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    words: Vec<u32>,
    rows: usize,
    tail: usize,
    long_prefill: bool,
}

fn word(what: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| KernelError::Shape {
        what,
        expected: u32::MAX as usize,
        found: v,
    })
}

impl Step {
    fn header(ids: &[u32], tail: usize, limit: usize, start: usize) -> Result<Vec<u32>> {
        let rows = ids.len();
        if rows == 0 || tail == 0 || tail > rows {
            return Err(KernelError::Shape {
                what: "rows of a forward (at least 1) and its logit rows (1 to rows)",
                expected: rows.max(1),
                found: tail,
            });
        }
        let mut words = Vec::with_capacity(IDS + 5 * rows);
        words.extend([
            word("rows", rows)?,
            word("tail", tail)?,
            word("logit limit", limit)?,
            word("start", start)?,
            word("capacity", start + rows)?,
            0,
            0,
            0,
        ]);
        words.extend_from_slice(ids);
        Ok(words)
    }

    /// A chain: `ids` at cache rows and positions `start..`, each row seeing every row before
    /// it and itself; logits for the last `tail` rows, for outputs below `limit`.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for no rows, a tail of 0 or past the rows, or a count past u32.
    pub fn chain(ids: &[u32], start: usize, tail: usize, limit: usize) -> Result<Self> {
        let mut words = Self::header(ids, tail, limit, start)?;
        for r in 0..ids.len() {
            let pos = word("position", start + r)?;
            words.extend([pos, pos + 1, 0, 0]);
        }
        Ok(Self {
            words,
            rows: ids.len(),
            tail,
            long_prefill: false,
        })
    }

    /// The last `ids.len()` rows of a token tree whose rows start at cache row `base`
    /// (`parents` lists every row of the tree, the new ones last; the earlier ones are cached at
    /// `base..start`): row r sits at position `base` + its depth and sees the cache before
    /// `base`, its ancestors and itself, so its attention equals the chain's over its path.
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a parent list that does not end with these rows, a parent
    /// that is not an earlier row, or a tree of more than [`MAX_TREE_ROWS`] rows.
    pub fn tree(
        ids: &[u32],
        base: usize,
        parents: &[Option<usize>],
        tail: usize,
        limit: usize,
    ) -> Result<Self> {
        let n = parents.len();
        if n > MAX_TREE_ROWS || ids.len() > n {
            return Err(KernelError::Shape {
                what: "rows of a token tree on the GPU",
                expected: MAX_TREE_ROWS.min(n.max(ids.len())),
                found: n.max(ids.len()),
            });
        }
        let first = n - ids.len();
        let mut words = Self::header(ids, tail, limit, base + first)?;
        let mut depth = Vec::with_capacity(n);
        let mut mask = Vec::<u64>::with_capacity(n);
        for (a, &p) in parents.iter().enumerate() {
            match p {
                None => {
                    depth.push(0);
                    mask.push(1 << a);
                }
                Some(p) if p < a => {
                    depth.push(depth[p] + 1);
                    mask.push(mask[p] | 1 << a);
                }
                Some(p) => {
                    return Err(KernelError::Shape {
                        what: "a tree row's parent (an earlier row)",
                        expected: a,
                        found: p,
                    });
                }
            }
        }
        let lo = word("tree base", base)?;
        for a in first..n {
            let pos = word("position", base + depth[a])?;
            words.extend([pos, lo, mask[a] as u32, (mask[a] >> 32) as u32]);
        }
        Ok(Self {
            words,
            rows: ids.len(),
            tail,
            long_prefill: false,
        })
    }

    /// The same step as a part of a long prefill: each product over every row runs in its
    /// matrix group's prefill form (tiles where the group has them: tile.wgsl), not bit-equal
    /// to the mat-vec form; a whole prefill takes one form so that its passes give one pass's
    /// bits. The host's choice: nothing changes on the device.
    pub fn long_prefill(mut self) -> Self {
        self.long_prefill = true;
        self
    }

    /// Whether it is a part of a long prefill ([`Step::long_prefill`]).
    pub fn is_long_prefill(&self) -> bool {
        self.long_prefill
    }

    /// The same step over a cache of `capacity` rows (the layout of its buffers; the row count
    /// of the step alone, start + rows, where no cache is read).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a capacity below the rows the step writes.
    pub fn with_capacity(mut self, capacity: usize) -> Result<Self> {
        let end = self.words[3] as usize + self.rows;
        if capacity < end {
            return Err(KernelError::Shape {
                what: "cache rows a forward needs (its start plus its rows)",
                expected: end,
                found: capacity,
            });
        }
        self.words[4] = word("capacity", capacity)?;
        Ok(self)
    }

    /// The same step with its last `link.ids` ids taken on the device from a chain of row
    /// summaries, and its summaries written at `link.summaries_at` (see [`Link`]).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for more linked rows than the step has, or a row past u32.
    pub fn with_link(mut self, link: Link) -> Result<Self> {
        if link.ids > self.rows {
            return Err(KernelError::Shape {
                what: "rows taking their id from a summary chain (at most the step's rows)",
                expected: self.rows,
                found: link.ids,
            });
        }
        self.words[LINKED] = word("linked rows", link.ids)?;
        self.words[LINKED + 1] = word("chain row", link.ids_from)?;
        self.words[LINKED + 2] = word("chain row", link.summaries_at)?;
        Ok(self)
    }

    /// The step's link (all zero without one).
    pub fn link(&self) -> Link {
        Link {
            ids: self.words[LINKED] as usize,
            ids_from: self.words[LINKED + 1] as usize,
            summaries_at: self.words[LINKED + 2] as usize,
        }
    }

    /// The cache capacity the step's kernels address.
    pub fn capacity(&self) -> usize {
        self.words[4] as usize
    }

    /// Rows of the forward.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Rows that get logits (the last ones).
    pub fn tail(&self) -> usize {
        self.tail
    }

    /// The words, as the kernels read them.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The most keys a row of the step sees (`lo` plus its tree mask's bits): how many
    /// 256-key blocks a split attention launches for each row (`Attention::run`).
    pub fn most_visible(&self) -> usize {
        (0..self.rows)
            .filter_map(|r| self.row(r))
            .map(|(_, lo, mask)| lo as usize + mask.count_ones() as usize)
            .max()
            .unwrap_or(0)
    }

    /// Row r's position, `lo` and tree mask (for tests).
    pub fn row(&self, r: usize) -> Option<(u32, u32, u64)> {
        let at = IDS + self.rows + 4 * r;
        let w = self.words.get(at..at + 4)?;
        Some((w[0], w[1], u64::from(w[2]) | u64::from(w[3]) << 32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_sees_what_came_before() {
        let s = Step::chain(&[5, 6, 7], 10, 3, 100).unwrap();
        assert_eq!(
            &s.words()[..IDS + 3],
            &[3, 3, 100, 10, 13, 0, 0, 0, 5, 6, 7]
        );
        assert_eq!(s.clone().with_capacity(20).unwrap().capacity(), 20);
        assert!(s.clone().with_capacity(12).is_err());
        assert_eq!(s.row(0), Some((10, 11, 0)));
        assert_eq!(s.row(2), Some((12, 13, 0)));
        assert_eq!(s.most_visible(), 13);
        assert!(Step::chain(&[], 0, 1, 1).is_err());
        assert!(Step::chain(&[1], 0, 2, 1).is_err());
        let link = Link {
            ids_from: 4,
            ids: 2,
            summaries_at: 6,
        };
        let linked = s.clone().with_link(link).unwrap();
        assert_eq!(&linked.words()[LINKED..IDS], &[2, 4, 6]);
        assert_eq!(linked.link(), link);
        assert_eq!(s.link(), Link::default());
        let too_many = Link { ids: 4, ..link };
        assert!(s.with_link(too_many).is_err());
    }

    #[test]
    fn a_tree_row_sees_its_ancestors() {
        // 0 ─ 1 ─ 3
        //   └ 2
        let parents = [None, Some(0), Some(0), Some(1)];
        let s = Step::tree(&[9, 8, 7, 6], 20, &parents, 4, 50).unwrap();
        assert_eq!(s.words()[3], 20);
        assert_eq!(s.row(0), Some((20, 20, 0b0001)));
        assert_eq!(s.row(2), Some((21, 20, 0b0101)));
        assert_eq!(s.row(3), Some((22, 20, 0b1011)));
        assert_eq!(s.most_visible(), 23);
        // Grown by its last two rows: they start at cache row 22.
        let s = Step::tree(&[7, 6], 20, &parents, 2, 50).unwrap();
        assert_eq!(s.words()[3], 22);
        assert_eq!(s.row(1), Some((22, 20, 0b1011)));
        // Bad parents, too many rows.
        assert!(Step::tree(&[1, 2], 0, &[None, Some(1)], 2, 5).is_err());
        let long: Vec<Option<usize>> = (0usize..65).map(|i| i.checked_sub(1)).collect();
        assert!(Step::tree(&[1], 0, &long, 1, 5).is_err());
    }
}
