//! The KV cache: preallocated per layer, with a cursor, so that rolling back a rejected draft is
//! O(1).

use std::ops::Range;

use burn::tensor::Tensor;

use crate::error::{ModelError, Result};
use crate::host::HostLayerCache;
use crate::llama::{Body, Llama};

/// Per-layer keys and values, preallocated to a capacity, with a cursor: appending writes at the
/// cursor, rolling back a rejected draft just moves it (O(1), nothing is copied or freed).
#[derive(Debug, Clone)]
pub struct KvCache {
    store: Store,
    len: usize,
    capacity: usize,
}

/// Where the entries live: burn tensors for the burn path, host vectors for the packed one.
#[derive(Debug, Clone)]
enum Store {
    Tensors {
        keys: Vec<Tensor<4>>,   // per layer: [1, n_kv_heads, capacity, head_dim]
        values: Vec<Tensor<4>>, // per layer: [1, n_kv_heads, capacity, head_dim]
    },
    Host(Vec<HostLayerCache>), // per layer: [capacity, n_kv_heads * head_dim] each
    /// The GPU path's buffers: per layer [2, n_kv_heads, capacity, head_dim].
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    Gpu(crate::gpu::GpuCache),
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
            Store::Host(layers) => {
                for layer in layers {
                    let w = layer.keys.len() / self.capacity; // n_kv_heads * head_dim
                    for &(from, to) in &moves {
                        layer.keys.copy_within(from * w..(from + 1) * w, to * w);
                        layer.values.copy_within(from * w..(from + 1) * w, to * w);
                    }
                }
            }
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Store::Gpu(cache) => cache.move_rows(&moves)?,
            Store::Tensors { keys, values } => {
                for t in keys.iter_mut().chain(values.iter_mut()) {
                    let [_, nkv, _, hd] = t.dims();
                    for &(from, to) in &moves {
                        let row = t.clone().slice([0..1, 0..nkv, from..from + 1, 0..hd]);
                        *t = t
                            .clone()
                            .slice_assign([0..1, 0..nkv, to..to + 1, 0..hd], row);
                    }
                }
            }
        }
        self.len = base + rows.len();
        Ok(())
    }
}

impl KvCache {
    /// Writes keys and values `[1, n_kv_heads, t, head_dim]` of `layer` at `positions` and
    /// returns the layer's whole key and value tensors `[1, n_kv_heads, capacity, head_dim]`.
    /// The cursor does not move: [`KvCache::advance`] does, once every layer is written.
    /// `None` for a cache made by a packed model.
    pub(crate) fn write(
        &mut self,
        layer: usize,
        positions: Range<usize>,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> Option<(Tensor<4>, Tensor<4>)> {
        let Store::Tensors { keys, values } = &mut self.store else {
            return None;
        };
        let (keys, values) = (&mut keys[layer], &mut values[layer]);
        let [_, nkv, _, hd] = k.dims();
        let at = [0..1, 0..nkv, positions, 0..hd];
        // Take the cache tensors out (a cheap handle stands in) so that slice_assign holds the
        // only reference and can write in place instead of copying the whole cache each step.
        let new_keys = std::mem::replace(keys, k.clone()).slice_assign(at.clone(), k);
        let new_values = std::mem::replace(values, v.clone()).slice_assign(at, v);
        *keys = new_keys.clone();
        *values = new_values.clone();
        Some((new_keys, new_values))
    }

    /// The packed model's per-layer entries; `None` for a cache made by another path.
    pub(crate) fn host_layers(&mut self) -> Option<&mut [HostLayerCache]> {
        match &mut self.store {
            Store::Host(layers) => Some(layers),
            _ => None,
        }
    }

    /// The GPU path's buffers; `None` for a cache made by another path.
    #[cfg(any(feature = "wgpu", feature = "webgpu"))]
    pub(crate) fn gpu_layers(&mut self) -> Option<&mut crate::gpu::GpuCache> {
        match &mut self.store {
            Store::Gpu(cache) => Some(cache),
            _ => None,
        }
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
        let store = match &self.body {
            Body::Tensors(_) => {
                let zeros =
                    || Tensor::<4>::zeros([1, c.n_kv_heads, capacity, c.head_dim], self.device());
                Store::Tensors {
                    keys: (0..c.n_layers).map(|_| zeros()).collect(),
                    values: (0..c.n_layers).map(|_| zeros()).collect(),
                }
            }
            #[cfg(any(feature = "wgpu", feature = "webgpu"))]
            Body::Gpu(m) => Store::Gpu(m.new_cache(c.n_layers, capacity)?),
            Body::Host(_) => {
                // capacity ≤ context_length and n_kv_heads × head_dim were checked by validate().
                let len = capacity * c.n_kv_heads * c.head_dim;
                Store::Host(
                    (0..c.n_layers)
                        .map(|_| HostLayerCache {
                            keys: vec![0.0; len],
                            values: vec![0.0; len],
                        })
                        .collect(),
                )
            }
        };
        Ok(KvCache {
            store,
            len: 0,
            capacity,
        })
    }
}
