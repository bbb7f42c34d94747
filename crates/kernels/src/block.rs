//! Weight blocks as GGUF stores them, and a matrix of them kept packed.
//!
//! Legacy ggml blocks hold 32 values (little-endian):
//! - `Q8_0` (34 bytes): f16 scale d, 32 × i8 q; value = d·q.
//! - `Q4_0` (18 bytes): f16 scale d, 16 bytes of nibbles; byte j holds value j in its low nibble
//!   and value j + 16 in its high nibble; value = d·(q − 8).
//! - `Q4_1` (20 bytes): f16 scale d, f16 minimum m, 16 bytes of nibbles laid out as Q4_0;
//!   value = d·q + m.
//! - `Q5_0` (22 bytes): f16 scale d, 32 fifth bits (u32), nibbles as Q4_0; value = d·(q − 16).
//! - `Q5_1` (24 bytes): f16 scale d, f16 minimum m, 32 fifth bits, nibbles; value = d·q + m.
//!
//! K-quant super-blocks hold 256 values as 8 sub-blocks of 32 with small integer scales under
//! one f16 d, so the kernels meet a whole super-block in integers against activations quantized
//! per 256 values (`quantize`), and turn to floats once per super-block:
//! - `Q4_K` (144 bytes): f16 d, f16 dmin, 12 bytes of 6-bit scales and minimums, 128 bytes of
//!   nibbles (32 bytes per pair of sub-blocks: low nibbles the first, high the second);
//!   value = d·sc·q − dmin·m.
//! - `Q5_K` (176 bytes): as Q4_K, with 32 bytes of fifth bits after the scales (bit j of byte l
//!   belongs to value l of sub-block j) before the nibbles.
//! - `Q6_K` (210 bytes): 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 i8 scales
//!   (one per 16 values), f16 d at the end; value = d·sc·(q − 32).
//!
//! 16-bit floats (`F16`, `BF16`) are kept as stored, 2 bytes a value, taken 32 values (64 bytes)
//! at a time like a block without scale, and meet the activations unquantized (f32): rounding
//! activations to 8 bits would throw away the precision a 16-bit file keeps.

use half::f16;

/// Values per block of every type here.
pub const BLOCK: usize = 32;

/// Blocks a run in GPU memory for the types held in runs ([`WeightType::gpu_row_bytes`]): 8
/// f16 d's fill 16 bytes.
pub const GPU_RUN: usize = 8;

/// A weight block type the kernels multiply directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightType {
    /// 8-bit, one f16 scale.
    Q8_0,
    /// 4-bit, one f16 scale, offset 8.
    Q4_0,
    /// 4-bit, f16 scale and minimum.
    Q4_1,
    /// 5-bit, one f16 scale, offset 16.
    Q5_0,
    /// 5-bit, f16 scale and minimum.
    Q5_1,
    /// 4-bit K-quant: 256-value super-blocks, 6-bit scales and minimums per 32.
    Q4K,
    /// 5-bit K-quant: as Q4_K with a fifth bit per value.
    Q5K,
    /// 6-bit K-quant: 256-value super-blocks, 8-bit scales per 16.
    Q6K,
    /// IEEE half precision, against f32 activations.
    F16,
    /// bfloat16 (the top half of an f32), against f32 activations.
    BF16,
}

impl WeightType {
    /// Bytes per block of [`BLOCK`] values.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::F16 | Self::BF16 => 2 * BLOCK,
        }
    }

    /// Bytes of a row of `blocks` blocks as the GPU kernels hold it. Q6_K's and the types
    /// whose blocks are 4k + 2 bytes (Q4_0, Q5_0, Q8_0) are rearranged at upload
    /// ([`WeightType::hold_run`]) into runs of [`GPU_RUN`] blocks, each run its blocks' f16 d's
    /// first (16 bytes; a shorter last run's padded to 16), then the rest of each block, so that
    /// every block's quants start on 16 bytes: one aligned load a word (a vec4 load where the
    /// binding is read as vec4s), where in the file's layout a block of 4k + 2 bytes starts 2
    /// bytes into a word every other block, and Q4_0's, Q5_0's and Q8_0's decoders read a
    /// window of words and shifted each pair into place (7 loads for a Q5_0 block). A run of 8
    /// keeps the file's bytes; a shorter last run adds 6 to 26 bytes (Q5_0's 28-block rows of
    /// 896 values, a 0.5B's: 8 bytes of 616). Q4_1, Q5_1 and the other
    /// K-quants are whole words a block and keep their bytes.
    pub const fn gpu_row_bytes(self, blocks: usize) -> usize {
        match self {
            _ if self.held_in_runs() => {
                let (runs, rest) = (blocks / GPU_RUN, blocks % GPU_RUN);
                let tail = if rest == 0 { 0 } else { self.run_bytes(rest) };
                runs * self.run_bytes(GPU_RUN) + tail
            }
            _ => blocks * self.block_bytes(),
        }
    }

    /// Bytes of a run of `r` (1 ..= [`GPU_RUN`]) blocks in GPU memory, for the types held in
    /// runs: 16 bytes of d's, then Q6_K's 208 other bytes a block, Q4_0's 16 bytes of nibbles,
    /// Q8_0's 32 bytes of quants, or Q5_0's blocks four at a time, their fifth bits (16 bytes,
    /// a word each: padded where fewer than four) then their nibbles (16 bytes each). Any other
    /// type: its blocks' bytes.
    pub const fn run_bytes(self, r: usize) -> usize {
        match self {
            Self::Q6K => 16 + 208 * r,
            Self::Q4_0 => 16 + 16 * r,
            Self::Q8_0 => 16 + 32 * r,
            Self::Q5_0 => {
                16 + 80 * (r / 4)
                    + if r.is_multiple_of(4) {
                        0
                    } else {
                        16 + 16 * (r % 4)
                    }
            }
            _ => r * self.block_bytes(),
        }
    }

    /// Whether rows of this type are rearranged into runs in GPU memory
    /// ([`WeightType::gpu_row_bytes`]).
    pub const fn held_in_runs(self) -> bool {
        matches!(self, Self::Q6K | Self::Q4_0 | Self::Q5_0 | Self::Q8_0)
    }

    /// Appends to `out` the run of whole blocks `run` (as stored in a file: 1 ..= [`GPU_RUN`]
    /// of them) as the GPU holds it ([`WeightType::run_bytes`]): their d's (bytes 208..210 of a
    /// Q6_K block, 0..2 of the others), zeros to 16 bytes, then the rest of each block in order
    /// (Q5_0: a quad's fifth-bit words, zeros to 16 bytes, then its nibbles). Nothing for a type
    /// not held in runs.
    pub fn hold_run(self, run: &[u8], out: &mut Vec<u8>) {
        if !self.held_in_runs() {
            return;
        }
        let size = self.block_bytes();
        let blocks = run.chunks_exact(size);
        let start = out.len();
        let d_at = if self == Self::Q6K { size - 2 } else { 0 };
        for block in blocks.clone() {
            out.extend_from_slice(&block[d_at..d_at + 2]);
        }
        out.resize(start + 16, 0);
        match self {
            Self::Q6K => blocks.for_each(|b| out.extend_from_slice(&b[..size - 2])),
            Self::Q5_0 => {
                for quad in run.chunks(4 * size) {
                    let at = out.len();
                    for block in quad.chunks_exact(size) {
                        out.extend_from_slice(&block[2..6]);
                    }
                    out.resize(at + 16, 0);
                    for block in quad.chunks_exact(size) {
                        out.extend_from_slice(&block[6..]);
                    }
                }
            }
            _ => blocks.for_each(|b| out.extend_from_slice(&b[2..])),
        }
    }

    /// `stored` bytes of whole rows of `cols` values of this type, as the GPU holds them
    /// ([`WeightType::gpu_row_bytes`]); `stored` itself where `cols` is not a whole number of
    /// blocks (the loader refuses such a matrix by name).
    pub const fn gpu_bytes(self, stored: u64, cols: u64) -> u64 {
        let values = self.block_values() as u64;
        if cols == 0 || !cols.is_multiple_of(values) {
            return stored;
        }
        let blocks = cols / values;
        let row = blocks * self.block_bytes() as u64;
        stored / row * self.gpu_row_bytes(blocks as usize) as u64
    }

    /// Values per block (a row is a whole number of them).
    pub const fn block_values(self) -> usize {
        match self {
            Self::Q8_0 | Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 => BLOCK,
            Self::F16 | Self::BF16 => BLOCK,
            Self::Q4K | Self::Q5K | Self::Q6K => 256,
        }
    }

    /// Whether this is a K-quant (256-value super-blocks, met by activations quantized per 256
    /// values).
    pub const fn is_k(self) -> bool {
        matches!(self, Self::Q4K | Self::Q5K | Self::Q6K)
    }

    /// Whether this is a 16-bit float type (multiplied against unquantized activations).
    pub const fn is_float(self) -> bool {
        matches!(self, Self::F16 | Self::BF16)
    }

    /// Values that share one activation scale when this type is multiplied: 32 for the legacy
    /// types, 256 for K-quants, `None` for the 16-bit floats (activations stay f32). The error
    /// bound (crate docs) is taken over these groups.
    pub const fn act_group(self) -> Option<usize> {
        if self.is_float() {
            None
        } else {
            Some(self.block_values())
        }
    }

    /// Every type, for tests and benchmarks.
    pub const ALL: [Self; 10] = [
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::F16,
        Self::BF16,
    ];
}

/// One 32-value sub-block unpacked for the integer kernels: value i = scale[i / 16]·w[i] + min.
/// Signed types (Q8_0, Q5_0, Q6_K) have min 0; unsigned ones (Q4_0, Q4_1, Q5_1, Q4_K, Q5_K) a
/// minimum term.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sub {
    pub(crate) w: [i8; BLOCK],
    pub(crate) scale: [f32; 2],
    pub(crate) min: f32,
}

impl WeightType {
    /// Whether [`Sub::w`] is signed (no minimum term) for this type.
    pub(crate) const fn signed(self) -> bool {
        matches!(self, Self::Q8_0 | Self::Q5_0 | Self::Q6K)
    }
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) in a Q4_K block's 12 scale bytes.
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// A K-quant super-block's 6-bit scales and minimums (Q4_K, Q5_K) from its 12 packed bytes, all
/// at once with word operations: bytes 0..8 are the eight sub-blocks' scales, 8..16 their
/// minimums (what [`scale_min_k4`] gives one at a time).
#[inline(always)]
pub(crate) fn scales_mins_k4(s: &[u8]) -> [u8; 16] {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a, b, c) = (word(0), word(1), word(2));
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    // Sub-blocks 0–3 keep the low 6 bits of bytes 0–3 (scales) and 4–7 (minimums); 4–7 take 4
    // low bits from bytes 8–11 and their top 2 bits from the top bits of bytes 0–3 / 4–7.
    let scales_lo = a & LOW6;
    let scales_hi = (c & LOW4) | (((a >> 6) & LOW2) << 4);
    let mins_lo = b & LOW6;
    let mins_hi = ((c >> 4) & LOW4) | (((b >> 6) & LOW2) << 4);
    let mut out = [0u8; 16];
    for (i, w) in [scales_lo, scales_hi, mins_lo, mins_hi]
        .into_iter()
        .enumerate()
    {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// A K-quant super-block in the integer form the K kernels use: value i (0..256) is
/// `d·sc[i / 16]·q[i] − dmin·mn[i / 16]`, with q unsigned ([`k_quants`]). Q4_K and Q5_K: sc and
/// mn are the sub-block's 6-bit scale and minimum; Q6_K: sc the i8 scale, and its offset of 32
/// folded in as dmin = 32·d, mn = sc (exact: a power-of-two multiple).
pub(crate) struct KScales {
    pub(crate) d: f32,
    pub(crate) dmin: f32,
    pub(crate) sc: [i16; 16],
    pub(crate) mn: [i16; 16],
}

/// The scales of K-quant `block` (its bytes).
pub(crate) fn k_scales(ty: WeightType, block: &[u8]) -> KScales {
    let (mut sc, mut mn) = ([0i16; 16], [0i16; 16]);
    match ty {
        WeightType::Q6K => {
            for (h, s) in sc.iter_mut().enumerate() {
                *s = i16::from(block[192 + h] as i8);
            }
            let d = f16_at(block, 208);
            KScales {
                d,
                dmin: 32.0 * d,
                sc,
                mn: sc,
            }
        }
        _ => {
            let both = scales_mins_k4(&block[4..16]);
            for h in 0..16 {
                sc[h] = i16::from(both[h / 2]);
                mn[h] = i16::from(both[8 + h / 2]);
            }
            KScales {
                d: f16_at(block, 0),
                dmin: f16_at(block, 2),
                sc,
                mn,
            }
        }
    }
}

/// Sub-block `j` (values 32·j..32·j + 32) of K-quant `block`, unsigned: 0..16 (Q4_K), 0..32
/// (Q5_K), 0..64 (Q6_K).
pub(crate) fn k_quants(ty: WeightType, block: &[u8], j: usize) -> [u8; BLOCK] {
    let mut q = [0u8; BLOCK];
    match ty {
        WeightType::Q6K => {
            let (half, quarter) = (j / 4, j % 4);
            let ql = &block[64 * half + 32 * (quarter % 2)..][..32];
            let qh = &block[128 + 32 * half..][..32];
            for (l, v) in q.iter_mut().enumerate() {
                *v =
                    ((ql[l] >> (4 * (quarter / 2))) & 0x0F) | (((qh[l] >> (2 * quarter)) & 3) << 4);
            }
        }
        _ => {
            let nibbles_at = if ty == WeightType::Q5K { 48 } else { 16 };
            let qs = &block[nibbles_at + 32 * (j / 2)..][..32];
            for (v, &b) in q.iter_mut().zip(qs) {
                *v = (b >> (4 * (j % 2))) & 0x0F;
            }
            if ty == WeightType::Q5K {
                for (v, &h) in q.iter_mut().zip(&block[16..48]) {
                    *v |= ((h >> j) & 1) << 4;
                }
            }
        }
    }
    q
}

/// Sub-block `b` (32 values) of a row's blocks `row`, unpacked. The 16-bit float types have
/// no integer form: their callers take [`float_at`] instead (and get zeros here).
#[inline(always)]
pub(crate) fn unpack(ty: WeightType, row: &[u8], b: usize) -> Sub {
    let mut w = [0i8; BLOCK];
    match ty {
        WeightType::F16 | WeightType::BF16 => Sub {
            w,
            scale: [0.0; 2],
            min: 0.0,
        },
        WeightType::Q8_0
        | WeightType::Q4_0
        | WeightType::Q4_1
        | WeightType::Q5_0
        | WeightType::Q5_1 => {
            let block = &row[b * ty.block_bytes()..(b + 1) * ty.block_bytes()];
            let d = f16_at(block, 0);
            let (scale, min) = match ty {
                WeightType::Q8_0 => {
                    for (wi, &q) in w.iter_mut().zip(&block[2..34]) {
                        *wi = q as i8;
                    }
                    (d, 0.0)
                }
                WeightType::Q5_0 => {
                    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
                    for (j, &q) in block[6..22].iter().enumerate() {
                        let h0 = ((qh >> j) & 1) as u8;
                        let h1 = ((qh >> (j + 16)) & 1) as u8;
                        w[j] = ((q & 0x0F) | (h0 << 4)) as i8 - 16;
                        w[j + 16] = ((q >> 4) | (h1 << 4)) as i8 - 16;
                    }
                    (d, 0.0)
                }
                WeightType::Q5_1 => {
                    let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
                    for (j, &q) in block[8..24].iter().enumerate() {
                        let h0 = ((qh >> j) & 1) as u8;
                        let h1 = ((qh >> (j + 16)) & 1) as u8;
                        w[j] = ((q & 0x0F) | (h0 << 4)) as i8;
                        w[j + 16] = ((q >> 4) | (h1 << 4)) as i8;
                    }
                    (d, f16_at(block, 2))
                }
                _ => {
                    let (qs, min) = match ty {
                        WeightType::Q4_1 => (&block[4..20], f16_at(block, 2)),
                        _ => (&block[2..18], -8.0 * d),
                    };
                    for (j, &q) in qs.iter().enumerate() {
                        w[j] = (q & 0x0F) as i8;
                        w[j + 16] = (q >> 4) as i8;
                    }
                    (d, min)
                }
            };
            Sub {
                w,
                scale: [scale; 2],
                min,
            }
        }
        WeightType::Q4K | WeightType::Q5K => {
            let bytes = ty.block_bytes();
            let block = &row[b / 8 * bytes..][..bytes];
            let j = b % 8;
            let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
            let (sc, m) = scale_min_k4(j, &block[4..16]);
            let nibbles_at = if ty == WeightType::Q5K { 48 } else { 16 };
            let qs = &block[nibbles_at + 32 * (j / 2)..][..32];
            let shift = 4 * (j % 2);
            for (wi, &q) in w.iter_mut().zip(qs) {
                *wi = ((q >> shift) & 0x0F) as i8;
            }
            if ty == WeightType::Q5K {
                for (wi, &h) in w.iter_mut().zip(&block[16..48]) {
                    *wi |= (((h >> j) & 1) << 4) as i8;
                }
            }
            let scale = d * f32::from(sc);
            Sub {
                w,
                scale: [scale; 2],
                min: -(dmin * f32::from(m)),
            }
        }
        WeightType::Q6K => {
            let block = &row[b / 8 * 210..][..210];
            let (half, quarter) = ((b % 8) / 4, b % 4);
            let ql = &block[64 * half + 32 * (quarter % 2)..][..32];
            let qh = &block[128 + 32 * half..][..32];
            let (lo_shift, hi_shift) = (4 * (quarter / 2), 2 * quarter);
            for (l, wi) in w.iter_mut().enumerate() {
                let q = ((ql[l] >> lo_shift) & 0x0F) | (((qh[l] >> hi_shift) & 3) << 4);
                *wi = q as i8 - 32;
            }
            let d = f16_at(block, 208);
            let sc = |i: usize| d * f32::from(block[192 + 8 * half + 2 * quarter + i] as i8);
            Sub {
                w,
                scale: [sc(0), sc(1)],
                min: 0.0,
            }
        }
    }
}

/// The f16 at `bytes[at..at + 2]` as f32.
#[inline(always)]
pub(crate) fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// Value `i` of a row of a 16-bit float type (`row` its bytes) as f32 (exact).
#[inline(always)]
pub(crate) fn float_at(ty: WeightType, row: &[u8], i: usize) -> f32 {
    let b = [row[2 * i], row[2 * i + 1]];
    match ty {
        WeightType::BF16 => half::bf16::from_le_bytes(b).to_f32(),
        _ => f16::from_le_bytes(b).to_f32(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_decoded_k4_scales_equal_the_one_at_a_time_decoding() {
        // Every byte value in every position, and a pseudo-random sweep of whole patterns.
        let mut state = 0x9e37_79b9_u32;
        for case in 0..4096u32 {
            let mut s = [0u8; 12];
            for (i, b) in s.iter_mut().enumerate() {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                *b = if case < 256 * 12 && i == (case / 256) as usize {
                    (case % 256) as u8
                } else {
                    (state >> 24) as u8
                };
            }
            let both = scales_mins_k4(&s);
            for j in 0..8 {
                assert_eq!((both[j], both[8 + j]), scale_min_k4(j, &s), "{s:?} j={j}");
            }
        }
    }

    #[test]
    fn k_integer_form_equals_the_unpacked_sub_blocks() {
        // value = d·sc·q − dmin·mn per 16 values, the same numbers `unpack` gives per 32.
        let mut state = 7u32;
        for ty in [WeightType::Q4K, WeightType::Q5K, WeightType::Q6K] {
            let mut block: Vec<u8> = (0..ty.block_bytes())
                .map(|_| {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (state >> 24) as u8
                })
                .collect();
            let d_at = if ty == WeightType::Q6K { 208 } else { 0 };
            block[d_at..d_at + 2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
            if ty != WeightType::Q6K {
                block[2..4].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
            }
            let s = k_scales(ty, &block);
            for j in 0..8 {
                let q = k_quants(ty, &block, j);
                let sub = unpack(ty, &block, j);
                for (i, &qi) in q.iter().enumerate() {
                    let h = 2 * j + i / 16;
                    let from_k =
                        s.d * f32::from(s.sc[h]) * f32::from(qi) - s.dmin * f32::from(s.mn[h]);
                    let from_sub = sub.scale[i / 16] * f32::from(sub.w[i]) + sub.min;
                    assert_eq!(from_k, from_sub, "{ty:?} sub-block {j} value {i}");
                }
            }
        }
    }
}
