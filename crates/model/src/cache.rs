//! The KV cache: preallocated per layer, with a cursor, so that rolling back a rejected draft is
//! O(1).

use crate::backend::LayerCache;
use crate::cpu::CpuCache;
use crate::error::{ModelError, Result};
#[cfg(any(feature = "wgpu", feature = "webgpu"))]
use crate::gpu::GpuCache;
use crate::reference::ReferenceCache;

/// Per-layer keys and values, preallocated to a capacity, with a cursor: appending writes at the
/// cursor, rolling back a rejected draft just moves it (O(1), nothing is copied or freed).
#[derive(Debug, Clone)]
pub struct KvCache {
    store: Store,
    len: usize,
    capacity: usize,
}

/// Where the entries live: the back-end's own cache, one entry per block of the model that
/// made it.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    /// burn tensors, per layer `[1, n_kv_heads, capacity, head_dim]`.
    Reference(ReferenceCache),
    /// host vectors, per layer `[capacity, n_kv_heads * head_dim]`.
    Cpu(CpuCache),
    /// GPU buffers, per layer `[2, n_kv_heads, capacity, head_dim]`.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    Gpu(GpuCache),
}

impl KvCache {
    /// Tokens currently cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most tokens the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every token after the first `len` (rolls back a rejected draft).
    ///
    /// # Errors
    /// [`ModelError::TruncateBeyondLength`] when `len` exceeds the cached length.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            return Err(ModelError::TruncateBeyondLength {
                len: self.len,
                to: len,
            });
        }
        self.len = len;
        Ok(())
    }

    /// After a token tree's forward pass wrote its rows at `base..`, keeps the rows
    /// `base + rows[d]` (an accepted path, root first) at `base + d` and forgets the rest:
    /// O(path length) copies per layer, nothing where the path is already in place.
    ///
    /// # Errors
    /// [`ModelError::KeepRows`] for rows that do not increase or lie past the cached length.
    pub fn keep_rows(&mut self, base: usize, rows: &[usize]) -> Result<()> {
        let increasing = rows.windows(2).all(|w| w[0] < w[1]);
        let inside = rows
            .last()
            .is_none_or(|&r| base.checked_add(r).is_some_and(|at| at < self.len));
        if !increasing || !inside {
            return Err(ModelError::KeepRows {
                base,
                rows: rows.to_vec(),
                len: self.len,
            });
        }
        // Increasing rows are at or after their destinations, so copying root first never
        // overwrites a row still to be read.
        let moves: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .filter(|&(d, &r)| r != d)
            .map(|(d, &r)| (base + r, base + d))
            .collect();
        match &mut self.store {
            Store::Reference(cache) => cache.move_rows(&moves)?,
            Store::Cpu(cache) => cache.move_rows(&moves)?,
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Store::Gpu(cache) => cache.move_rows(&moves)?,
        }
        self.len = base + rows.len();
        Ok(())
    }
}

impl KvCache {
    /// An empty cache of `capacity` rows over a back-end's store.
    pub(crate) fn new(store: Store, capacity: usize) -> Self {
        Self {
            store,
            len: 0,
            capacity,
        }
    }

    /// The back-end's store, for a forward pass to write.
    pub(crate) fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// Moves the cursor to `len` after a forward pass wrote positions up to it.
    pub(crate) fn advance(&mut self, len: usize) {
        self.len = len;
    }
}
