//! ggml storage types and their dequantization to f32.
//!
//! Each quantized type stores blocks of 32 (legacy) or 256 (k-quants) values with f16 scales.
//! The arithmetic below follows ggml's reference dequantizers operation for operation, in f32,
//! so the output is bit-identical to `gguf.quants.dequantize` (checked against committed
//! vectors made by `tests/data/quant/make_vectors.py`).

use half::{bf16, f16};

use crate::error::{FormatError, Result};

/// A ggml tensor type the reader knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 32 × 4-bit, one f16 scale.
    Q4_0,
    /// 32 × 4-bit, f16 scale and minimum.
    Q4_1,
    /// 32 × 5-bit, one f16 scale.
    Q5_0,
    /// 32 × 5-bit, f16 scale and minimum.
    Q5_1,
    /// 32 × 8-bit, one f16 scale.
    Q8_0,
    /// 32 × 8-bit with a precomputed sum (an activation type; read, not dequantized).
    Q8_1,
    /// 256-value k-quant, 2-bit (read, not dequantized).
    Q2K,
    /// 256-value k-quant, 3-bit (read, not dequantized).
    Q3K,
    /// 256-value k-quant, 4-bit with 6-bit sub-block scales and minimums.
    Q4K,
    /// 256-value k-quant, 5-bit.
    Q5K,
    /// 256-value k-quant, 6-bit with 8-bit sub-block scales.
    Q6K,
    /// 256-value k-quant, 8-bit (read, not dequantized).
    Q8K,
    /// bfloat16.
    BF16,
}

impl GgmlType {
    /// The type for a ggml type id, if this reader knows it.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    /// The ggml type id.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2K => 10,
            Self::Q3K => 11,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::Q8K => 15,
            Self::BF16 => 30,
        }
    }

    /// Values per block.
    pub fn block_size(self) -> u64 {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::Q8_1 => 32,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q8_1 => 36,
            Self::Q2K => 84,
            Self::Q3K => 110,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::Q8K => 292,
        }
    }

    /// Whether [`GgmlType::dequantize`] reads this type (a loader refuses the others from the
    /// tensor table, before reading any data).
    pub fn can_dequantize(self) -> bool {
        !matches!(self, Self::Q8_1 | Self::Q2K | Self::Q3K | Self::Q8K)
    }

    /// Dequantizes `n` values from `bytes`.
    ///
    /// # Errors
    /// [`FormatError::TooLarge`] when `bytes` does not hold exactly `n` values of this type, or
    /// [`FormatError::BadTensorType`] for a type that is read but not dequantized.
    pub fn dequantize(self, bytes: &[u8], n: u64) -> Result<Vec<f32>> {
        let block = self.block_size();
        let expected = (n / block).checked_mul(self.type_size());
        if !n.is_multiple_of(block) || expected != Some(bytes.len() as u64) {
            return Err(FormatError::TooLarge {
                field: format!("{self} data for {n} values"),
                value: bytes.len() as u64,
                limit: expected.unwrap_or(0),
            });
        }
        let mut out = Vec::with_capacity(n as usize);
        let blocks = bytes.chunks_exact(self.type_size() as usize);
        match self {
            Self::F32 => out.extend(blocks.map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            Self::F16 => out.extend(blocks.map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())),
            Self::BF16 => out.extend(blocks.map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())),
            Self::Q4_0 => blocks.for_each(|b| q4_0(b, &mut out)),
            Self::Q4_1 => blocks.for_each(|b| q4_1(b, &mut out)),
            Self::Q5_0 => blocks.for_each(|b| q5_0(b, &mut out)),
            Self::Q5_1 => blocks.for_each(|b| q5_1(b, &mut out)),
            Self::Q8_0 => blocks.for_each(|b| q8_0(b, &mut out)),
            Self::Q4K => blocks.for_each(|b| q4_k(b, &mut out)),
            Self::Q5K => blocks.for_each(|b| q5_k(b, &mut out)),
            Self::Q6K => blocks.for_each(|b| q6_k(b, &mut out)),
            Self::Q8_1 | Self::Q2K | Self::Q3K | Self::Q8K => {
                return Err(FormatError::BadTensorType {
                    name: format!("({self} is not dequantized)"),
                    type_id: self.id(),
                });
            }
        }
        Ok(out)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q8K => "Q8_K",
            Self::BF16 => "BF16",
        };
        f.write_str(name)
    }
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Q4_0: d, then 16 bytes; low nibbles are values 0..16, high nibbles 16..32; x = (q − 8)·d.
fn q4_0(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    out.extend(qs.iter().map(|&q| (i32::from(q & 0x0F) - 8) as f32 * d));
    out.extend(qs.iter().map(|&q| (i32::from(q >> 4) - 8) as f32 * d));
}

/// Q4_1: d, m, 16 bytes; x = q·d + m.
fn q4_1(b: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qs = &b[4..20];
    out.extend(qs.iter().map(|&q| f32::from(q & 0x0F) * d + m));
    out.extend(qs.iter().map(|&q| f32::from(q >> 4) * d + m));
}

/// The fifth bits of Q5 values j and j + 16, from the 32-bit `qh`.
fn q5_high(qh: u32, j: usize) -> (u8, u8) {
    let low = (((qh >> j) << 4) & 0x10) as u8;
    let high = ((qh >> (j + 12)) & 0x10) as u8;
    (low, high)
}

/// Q5_0: d, qh (32 fifth bits), 16 bytes; x = (q − 16)·d.
fn q5_0(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    let mut hi = [0f32; 16];
    for (j, &q) in qs.iter().enumerate() {
        let (h0, h1) = q5_high(qh, j);
        out.push((i32::from((q & 0x0F) | h0) - 16) as f32 * d);
        hi[j] = (i32::from((q >> 4) | h1) - 16) as f32 * d;
    }
    out.extend_from_slice(&hi);
}

/// Q5_1: d, m, qh, 16 bytes; x = q·d + m.
fn q5_1(b: &[u8], out: &mut Vec<f32>) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    let mut hi = [0f32; 16];
    for (j, &q) in qs.iter().enumerate() {
        let (h0, h1) = q5_high(qh, j);
        out.push(f32::from((q & 0x0F) | h0) * d + m);
        hi[j] = f32::from((q >> 4) | h1) * d + m;
    }
    out.extend_from_slice(&hi);
}

/// Q8_0: d, 32 signed bytes; x = q·d.
fn q8_0(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 0);
    out.extend(b[2..34].iter().map(|&q| f32::from(q as i8) * d));
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) packed in the 12 `scales` bytes of
/// Q4_K / Q5_K.
fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Q4_K: d, dmin, 12 scale bytes, 128 bytes of nibbles; 8 sub-blocks of 32 with
/// x = d·scale·q − dmin·min.
fn q4_k(b: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    for (pair, q) in b[16..144].chunks_exact(32).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * pair, scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, scales);
        let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, min2) = (d * f32::from(sc2), dmin * f32::from(m2));
        out.extend(q.iter().map(|&v| d1 * f32::from(v & 0x0F) - min1));
        out.extend(q.iter().map(|&v| d2 * f32::from(v >> 4) - min2));
    }
}

/// Q5_K: like Q4_K plus 32 bytes holding each value's fifth bit.
fn q5_k(b: &[u8], out: &mut Vec<f32>) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    for (pair, ql) in b[48..176].chunks_exact(32).enumerate() {
        let (sc1, m1) = scale_min_k4(2 * pair, scales);
        let (sc2, m2) = scale_min_k4(2 * pair + 1, scales);
        let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, min2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let (bit1, bit2) = (1u8 << (2 * pair), 2u8 << (2 * pair));
        out.extend(ql.iter().zip(qh).map(|(&v, &h)| {
            d1 * f32::from((v & 0x0F) + if h & bit1 != 0 { 16 } else { 0 }) - min1
        }));
        out.extend(
            ql.iter().zip(qh).map(|(&v, &h)| {
                d2 * f32::from((v >> 4) + if h & bit2 != 0 { 16 } else { 0 }) - min2
            }),
        );
    }
}

/// Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 signed scales, d; two halves
/// of 128 values, x = d·scale·(q − 32).
fn q6_k(b: &[u8], out: &mut Vec<f32>) {
    let d = f16_at(b, 208);
    let start = out.len();
    out.resize(start + 256, 0.0);
    let y = &mut out[start..];
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = i32::from((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i32::from((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let s = |i: usize| f32::from(sc[i] as i8);
            y[l] = d * s(is) * q1 as f32;
            y[l + 32] = d * s(is + 2) * q2 as f32;
            y[l + 64] = d * s(is + 4) * q3 as f32;
            y[l + 96] = d * s(is + 6) * q4 as f32;
        }
    }
}
