//! The KV cache: preallocated per layer, with a cursor, so that rolling back a rejected draft is
//! O(1).

use std::ops::Range;

use burn::tensor::Tensor;

use crate::error::{ModelError, Result};
use crate::llama::Llama;

/// Per-layer keys and values, preallocated to a capacity, with a cursor: appending writes at the
/// cursor, rolling back a rejected draft just moves it (O(1), nothing is copied or freed).
#[derive(Debug, Clone)]
pub struct KvCache {
    keys: Vec<Tensor<4>>,   // per layer: [1, n_kv_heads, capacity, head_dim]
    values: Vec<Tensor<4>>, // per layer: [1, n_kv_heads, capacity, head_dim]
    len: usize,
    capacity: usize,
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
}

impl KvCache {
    /// Writes keys and values `[1, n_kv_heads, t, head_dim]` of `layer` at `positions` and
    /// returns the layer's whole key and value tensors `[1, n_kv_heads, capacity, head_dim]`.
    /// The cursor does not move: [`KvCache::advance`] does, once every layer is written.
    pub(crate) fn write(
        &mut self,
        layer: usize,
        positions: Range<usize>,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>) {
        let [_, nkv, _, hd] = k.dims();
        let at = [0..1, 0..nkv, positions, 0..hd];
        // Take the cache tensors out (a cheap handle stands in) so that slice_assign holds the
        // only reference and can write in place instead of copying the whole cache each step.
        let keys = std::mem::replace(&mut self.keys[layer], k.clone()).slice_assign(at.clone(), k);
        let values = std::mem::replace(&mut self.values[layer], v.clone()).slice_assign(at, v);
        self.keys[layer] = keys.clone();
        self.values[layer] = values.clone();
        (keys, values)
    }

    /// Moves the cursor to `len` after a forward pass wrote positions up to it.
    pub(crate) fn advance(&mut self, len: usize) {
        self.len = len;
    }
}

impl Llama {
    /// An empty KV cache for up to `capacity` tokens (at most the model's context length).
    ///
    /// # Errors
    /// [`ModelError::ContextOverflow`] when `capacity` exceeds the context length.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        let c = self.config();
        if capacity > c.context_length {
            return Err(ModelError::ContextOverflow {
                cached: 0,
                new: capacity,
                capacity: c.context_length,
            });
        }
        let zeros = || Tensor::<4>::zeros([1, c.n_kv_heads, capacity, c.head_dim], self.device());
        Ok(KvCache {
            keys: (0..c.n_layers).map(|_| zeros()).collect(),
            values: (0..c.n_layers).map(|_| zeros()).collect(),
            len: 0,
            capacity,
        })
    }
}
