//! The shape of a prefill tile on the matrix units ([`UnitShape`]) and how a tile launch splits
//! its inputs ([`Splits`]): plain data, compiled with or without the GPU kernels, so that a front
//! end can carry what an adapter offers, and the memory check count what a prefill takes,
//! whatever back-ends it was built with.

/// Rows a tile workgroup computes (tile.wgsl's BM).
pub const TILE_ROWS: usize = 32;

/// Outputs a tile workgroup computes (tile.wgsl's BN; a SwiGLU's half of them).
pub const TILE_OUTPUTS: usize = 64;

/// Workgroups a tile launch aims at for every 32 rows, its column workgroups times its splits:
/// a 128-token prefill then has ≥ 1,024 (~8 a multiprocessor on a 132-SM H200, enough warps to
/// hide a step's loads), where a 7B's FFN down in 32 × 64 tiles has 224 walking 592 groups each
/// (its o and q | k | v 224 and 288 walking 112). A reckoning, not a measurement (the GPU
/// bundle's `teams` stage times it against `MARS_GPU_TILE_SPLIT=off`).
pub const TILE_SPLIT_AIM: usize = 256;

/// Fewest 32-value groups a split walks (its partials are written and read again once).
pub const TILE_SPLIT_MIN_GROUPS: usize = 16;

/// Workgroups of tile.wgsl over a launch's `outputs` (a SwiGLU's gate and up: half of them
/// each, 32 of each a workgroup).
pub fn tile_columns(outputs: usize, swiglu: bool) -> usize {
    if swiglu {
        (outputs / 2).div_ceil(TILE_OUTPUTS / 2)
    } else {
        outputs.div_ceil(TILE_OUTPUTS)
    }
}

/// How a long prefill's tile launch divides its inputs among workgroups (split-K): `count`
/// workgroups along the inputs for each tile, each walking `groups` 32-value groups (the last
/// what remains), each writing its partial sums, then a launch adding them in split order and
/// applying the epilogue. Fixed by the matrix's shape (never by the pass's rows), so a row's
/// bits stay independent of the rows beside it and of the pass's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Splits {
    /// Workgroups along the inputs (1: one walks them all, no partials).
    pub count: usize,
    /// 32-value groups each walks.
    pub groups: usize,
}

impl Splits {
    /// Splits whose every workgroup walks at most `span` 32-value groups of `cols` inputs
    /// (`span` 0 taken as 1).
    pub fn of_span(cols: usize, span: usize) -> Self {
        let n = cols / 32;
        let groups = span.clamp(1, n.max(1));
        Self {
            count: n.div_ceil(groups).max(1),
            groups,
        }
    }

    /// One workgroup over every input.
    pub fn none(cols: usize) -> Self {
        Self::of_span(cols, cols / 32)
    }

    /// The rule: enough splits that the column workgroups times the splits reach
    /// [`TILE_SPLIT_AIM`], each walking at least [`TILE_SPLIT_MIN_GROUPS`] groups.
    pub fn rule(cols: usize, outputs: usize, swiglu: bool) -> Self {
        let n = cols / 32;
        let count = TILE_SPLIT_AIM
            .div_ceil(tile_columns(outputs, swiglu).max(1))
            .min(n / TILE_SPLIT_MIN_GROUPS)
            .max(1);
        Self::of_span(cols, n.div_ceil(count))
    }

    /// f32 values of partial sums a row takes over `outputs` (none where not split).
    pub fn partials(self, outputs: usize) -> usize {
        if self.count > 1 {
            self.count.saturating_mul(outputs)
        } else {
            0
        }
    }
}

/// Which tile a matrix-unit workgroup takes: tile.wgsl's 32 × 64, or 2 × 1 or 2 × 2 of them
/// (64 × 64, 64 × 128), each output the same blocks in the same order in every one, so the
/// narrow tile's bits in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnitTile {
    /// 32 rows × 64 outputs (8 blocks of 16 × 16 or 32 of 8 × 8).
    Narrow,
    /// 64 rows × 64 outputs: each decoded weight meets 64 rows.
    Tall,
    /// 64 rows × 128 outputs: each decoded weight meets 64 rows and each copied input 128
    /// outputs.
    Wide,
}

impl UnitTile {
    /// Every tile, narrow first.
    pub const ALL: [Self; 3] = [Self::Narrow, Self::Tall, Self::Wide];

    /// The 32 × 64 tiles it holds along the rows and along the outputs.
    pub fn tiles(self) -> (u32, u32) {
        match self {
            Self::Narrow => (1, 1),
            Self::Tall => (2, 1),
            Self::Wide => (2, 2),
        }
    }

    /// A small stable code (kernel cache keys).
    pub fn code(self) -> u64 {
        match self {
            Self::Narrow => 0,
            Self::Tall => 1,
            Self::Wide => 2,
        }
    }
}

/// The blocks a subgroup multiplies on the matrix units, the subgroup's size and the tile's:
/// what a `gpu::TileForm::Units` kernel is written for. The narrow tile is tile.wgsl's 32 × 64;
/// the tall one 64 × 64 and the wide one 64 × 128, two or four such tiles in one workgroup
/// ([`UnitTile`]), so that each decoded weight meets 64 rows instead of 32 and each step's
/// products are two or four times as many for the same or twice the decode, as llama.cpp's
/// matrix-unit tiles are 64 × 64 to 128 × 256. Either way the blocks go among a workgroup's
/// 128 / `subgroup` subgroups, each taking a rectangle of whole blocks (a run of one block row
/// in the narrow tile, of two in the others: `blocks_a_subgroup`): so 16 × 16 blocks on
/// subgroups of 16, 32 or 64 lanes, 8 × 8 on 8, 16 or 32, in every tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnitShape {
    /// The side of a square block of f16 operands (M = N = K): 8 or 16.
    size: u32,
    /// Lanes a subgroup, fixed on the adapter.
    subgroup: u32,
    /// The workgroup's tile.
    tile: UnitTile,
}

impl UnitShape {
    /// NVIDIA's (and the first form's): 16 × 16 × 16 blocks on subgroups of 32, the narrow tile.
    pub const CARD: Self = Self {
        size: 16,
        subgroup: 32,
        tile: UnitTile::Narrow,
    };

    /// Blocks of `size` on subgroups of `subgroup` lanes in the narrow tile, where it divides
    /// among them (see the type); `None` otherwise.
    pub fn new(size: u32, subgroup: u32) -> Option<Self> {
        Self {
            size,
            subgroup,
            tile: UnitTile::Narrow,
        }
        .valid()
    }

    /// The same blocks and subgroups in `tile`, where it divides among them.
    pub fn in_tile(self, tile: UnitTile) -> Option<Self> {
        Self { tile, ..self }.valid()
    }

    /// `self` where its tile divides among its subgroups, each a rectangle of whole blocks
    /// ([`Self::blocks_a_subgroup`]).
    fn valid(self) -> Option<Self> {
        let (size, subgroup) = (self.size, self.subgroup);
        if !matches!(size, 8 | 16) || !matches!(subgroup, 8 | 16 | 32 | 64) {
            return None;
        }
        let (rows, outputs) = self.tile();
        let (block_rows, block_cols) = (rows / size, outputs / size);
        let subgroups = 128 / subgroup;
        let blocks = block_rows * block_cols;
        let br = self.block_rows();
        let valid = blocks.is_multiple_of(subgroups)
            && (blocks / subgroups).is_multiple_of(br)
            && block_rows.is_multiple_of(br)
            && (blocks / subgroups / br) >= 1
            && block_cols.is_multiple_of(blocks / subgroups / br);
        valid.then_some(self)
    }

    /// Block rows a subgroup's rectangle spans: one in the narrow tile, two in the others (in
    /// the wide tile on NVIDIA's shape, two A loads and four B loads for eight products of a
    /// 16 × 16 × 16 step, where one row of eight would take one and eight, and eight B
    /// fragments' registers).
    fn block_rows(self) -> u32 {
        if self.tile == UnitTile::Narrow { 1 } else { 2 }
    }

    /// The side of a block.
    pub fn size(self) -> u32 {
        self.size
    }

    /// Lanes a subgroup.
    pub fn subgroup(self) -> u32 {
        self.subgroup
    }

    /// The workgroup's tile.
    pub fn tile_kind(self) -> UnitTile {
        self.tile
    }

    /// The tile's rows and outputs: 32 × 64, 64 × 64 or 64 × 128.
    pub fn tile(self) -> (u32, u32) {
        let (vr, vc) = self.tile.tiles();
        (vr * TILE_ROWS as u32, vc * TILE_OUTPUTS as u32)
    }

    /// Workgroup memory the kernel declares (bytes): the decoded weights of its outputs and the
    /// inputs of its rows, a 32-value group each in f16 rows of 40, and one 32 × 64 tile of
    /// f32 products at a time: 15.5 KiB narrow (under WebGPU's 16), 18 KiB tall, 23 KiB wide
    /// (under every native Vulkan card's 32–64 KiB).
    pub fn workgroup_bytes(self) -> u32 {
        let (rows, outputs) = self.tile();
        (rows + outputs) * 40 * 2 + (TILE_ROWS * TILE_OUTPUTS * 4) as u32
    }

    /// The blocks each subgroup multiplies: a rectangle of (block rows, block columns), side by
    /// side in one block row in the narrow tile.
    pub fn blocks_a_subgroup(self) -> (u32, u32) {
        let (rows, outputs) = self.tile();
        let blocks = (rows / self.size) * (outputs / self.size);
        let br = self.block_rows();
        (br, blocks / (128 / self.subgroup) / br)
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
        // Every block of each tile is a subgroup's, once: the subgroups' rectangles tile it.
        for shape in valid
            .iter()
            .filter_map(|&(n, lanes)| UnitShape::new(n, lanes))
        {
            for tile in UnitTile::ALL {
                let shape = shape
                    .in_tile(tile)
                    .expect("every shape divides in every tile");
                let n = shape.size();
                let (rows, outputs) = shape.tile();
                let (br, bc) = shape.blocks_a_subgroup();
                assert_eq!(br, if tile == UnitTile::Narrow { 1 } else { 2 });
                assert!((rows / n).is_multiple_of(br) && (outputs / n).is_multiple_of(bc));
                assert_eq!(
                    (rows / n / br) * (outputs / n / bc),
                    128 / shape.subgroup(),
                    "{shape:?}"
                );
            }
        }
        assert_eq!(UnitShape::new(16, 32), Some(UnitShape::CARD));
        assert_eq!(UnitShape::CARD.tile(), (32, 64));
        assert_eq!(UnitShape::CARD.blocks_a_subgroup(), (1, 2));
        let [tall, wide] =
            [UnitTile::Tall, UnitTile::Wide].map(|t| UnitShape::CARD.in_tile(t).unwrap());
        assert_eq!((tall.tile(), tall.blocks_a_subgroup()), ((64, 64), (2, 2)));
        assert_eq!((wide.tile(), wide.blocks_a_subgroup()), ((64, 128), (2, 4)));
        assert_eq!(
            [UnitShape::CARD, tall, wide].map(UnitShape::workgroup_bytes),
            [15_872, 18_432, 23_552]
        );
    }

    #[test]
    fn splits_cover_every_group_once_and_follow_the_rule() {
        for cols in [32, 256, 896, 3584, 4864, 18944, 27648] {
            for span in [0, 1, 2, 7, 16, 100, 10_000] {
                let s = Splits::of_span(cols, span);
                let n = cols / 32;
                // Every split walks at least one group and the last is not empty.
                assert!(s.groups >= 1 && s.count >= 1, "{cols} {span}: {s:?}");
                assert!(
                    (s.count - 1) * s.groups < n && s.count * s.groups >= n,
                    "{s:?}"
                );
                assert!(s.groups <= span.max(1) || s.count == 1, "{s:?}");
            }
        }
        // A 7B (Qwen2.5 shapes): q | k | v 4 splits, o 5, gate | up none, down 5; a 0.5B's down 9.
        assert_eq!(Splits::rule(3584, 4608, false).count, 4);
        assert_eq!(Splits::rule(3584, 3584, false).count, 5);
        assert_eq!(Splits::rule(3584, 2 * 18944, true).count, 1);
        let down = Splits::rule(18944, 3584, false);
        assert_eq!((down.count, down.groups), (5, 119));
        assert_eq!(Splits::rule(4864, 896, false).count, 9);
        // Too few groups to split, and the partials' room.
        assert_eq!(Splits::rule(256, 64, false), Splits::none(256));
        assert_eq!(Splits::none(256).partials(64), 0);
        assert_eq!(down.partials(3584), 5 * 3584);
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
