//! The shape of a prefill tile on the matrix units ([`UnitShape`]): plain data, compiled with
//! or without the GPU kernels, so that a front end can carry what an adapter offers whatever
//! back-ends it was built with.

/// Rows a tile workgroup computes (tile.wgsl's BM).
pub const TILE_ROWS: usize = 32;

/// Outputs a tile workgroup computes (tile.wgsl's BN; a SwiGLU's half of them).
pub const TILE_OUTPUTS: usize = 64;

/// The blocks a subgroup multiplies on the matrix units and the subgroup's size: what a
/// `gpu::TileForm::Units` kernel is written for. The 32 × 64 tile is 8 blocks of 16 × 16 or 32 of
/// 8 × 8 among a workgroup's 128 / `subgroup` subgroups, each taking a run of whole blocks
/// of one block row: so 16 × 16 blocks on subgroups of 16, 32 or 64 lanes, 8 × 8 on 8, 16 or
/// 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnitShape {
    /// The side of a square block of f16 operands (M = N = K): 8 or 16.
    size: u32,
    /// Lanes a subgroup, fixed on the adapter.
    subgroup: u32,
}

impl UnitShape {
    /// NVIDIA's (and the first form's): 16 × 16 × 16 blocks on subgroups of 32.
    pub const CARD: Self = Self {
        size: 16,
        subgroup: 32,
    };

    /// Blocks of `size` on subgroups of `subgroup` lanes, where a tile divides among them
    /// (see the type); `None` otherwise.
    pub fn new(size: u32, subgroup: u32) -> Option<Self> {
        let blocks = (TILE_ROWS as u32 / size.max(1)) * (TILE_OUTPUTS as u32 / size.max(1));
        let subgroups = 128 / subgroup.max(1);
        let valid = matches!(size, 8 | 16)
            && matches!(subgroup, 8 | 16 | 32 | 64)
            && blocks.is_multiple_of(subgroups)
            && blocks / subgroups >= 1
            && blocks / subgroups <= TILE_OUTPUTS as u32 / size;
        valid.then_some(Self { size, subgroup })
    }

    /// The side of a block.
    pub fn size(self) -> u32 {
        self.size
    }

    /// Lanes a subgroup.
    pub fn subgroup(self) -> u32 {
        self.subgroup
    }

    /// The blocks each subgroup multiplies, side by side in one block row.
    pub fn blocks_a_subgroup(self) -> u32 {
        let blocks = (TILE_ROWS as u32 / self.size) * (TILE_OUTPUTS as u32 / self.size);
        blocks / (128 / self.subgroup)
    }

    /// The shape `MARS_GPU_TILES=units` takes on a device whose subgroups have `subgroup`
    /// lanes, where none was read from the adapter: 16 × 16 where it divides, else 8 × 8.
    pub fn for_subgroup(subgroup: u32) -> Option<Self> {
        Self::new(16, subgroup).or_else(|| Self::new(8, subgroup))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_is_one_whose_tile_divides_among_the_subgroups() {
        let valid: Vec<(u32, u32)> = (0..=128)
            .flat_map(|n| (0..=256).map(move |lanes| (n, lanes)))
            .filter(|&(n, lanes)| UnitShape::new(n, lanes).is_some())
            .collect();
        assert_eq!(
            valid,
            [(8, 8), (8, 16), (8, 32), (16, 16), (16, 32), (16, 64)]
        );
        // Every block of the tile is a subgroup's, once.
        for (n, lanes) in valid {
            let shape = UnitShape::new(n, lanes).unwrap();
            let blocks = (TILE_ROWS as u32 / n) * (TILE_OUTPUTS as u32 / n);
            assert_eq!(
                shape.blocks_a_subgroup() * (128 / lanes),
                blocks,
                "{shape:?}"
            );
        }
        assert_eq!(UnitShape::new(16, 32), Some(UnitShape::CARD));
    }

    #[test]
    fn a_forced_shape_takes_sixteen_where_it_divides() {
        assert_eq!(UnitShape::for_subgroup(32), Some(UnitShape::CARD));
        assert_eq!(UnitShape::for_subgroup(8), UnitShape::new(8, 8));
        assert_eq!(UnitShape::for_subgroup(64), UnitShape::new(16, 64));
        assert_eq!(UnitShape::for_subgroup(4), None);
        assert_eq!(UnitShape::for_subgroup(128), None);
    }
}
