//! The largest difference between two runs' logits, shared by the model's tests.
#![allow(dead_code)]

/// max |a − b| over equal-length slices.
///
/// # Panics
/// Where the lengths differ.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}
