//! Layer subsets, in one place: the rule for a subset of a model's blocks (used when a subset is
//! written out as a GGUF file and when one runs in memory), and the `first:N` / `every:S` /
//! `0-7,29` syntax a self-speculative drafter is chosen by.

use std::fmt;
use std::str::FromStr;

use crate::error::{FormatError, Result};

/// Checks that `layers` is a usable subset of `n_layers` blocks: not empty, every index in
/// range, none repeated. The one rule for a subset written as a file and one run in memory.
///
/// # Errors
/// [`FormatError::LayerSubset`] naming the layers, the depth and what is wrong.
pub fn check_layer_subset(layers: &[usize], n_layers: usize) -> Result<()> {
    let bad = |why| {
        Err(FormatError::LayerSubset {
            layers: layers.to_vec(),
            n_layers,
            why,
        })
    };
    if layers.is_empty() {
        return bad("no layers");
    }
    let mut seen = vec![false; n_layers];
    for &l in layers {
        match seen.get_mut(l) {
            None => return bad("a layer index is out of range"),
            Some(true) => return bad("a layer is repeated"),
            Some(slot) => *slot = true,
        }
    }
    Ok(())
}

/// Which layers a self-speculative drafter runs: `first:N`, `every:S` (layers 0, S, 2S, …, plus
/// the last layer, which feeds the final norm the model was trained with), or an explicit list
/// such as `0-7,20,29`. [`LayerSpec::layers`] resolves it for a model depth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerSpec {
    /// The first `n` layers.
    First(usize),
    /// Every `s`-th layer from 0, and the last layer.
    Every(usize),
    /// Exactly these layers, ascending.
    List(Vec<usize>),
}

impl LayerSpec {
    /// The layer indices for a model with `n_layers` layers.
    ///
    /// # Errors
    /// [`FormatError::LayerSpec`] when the spec asks for no layers, every layer (no speed-up is
    /// possible), or a layer the model does not have.
    pub fn layers(&self, n_layers: usize) -> Result<Vec<usize>> {
        let err = |why: String| FormatError::LayerSpec {
            spec: self.to_string(),
            why,
        };
        let layers: Vec<usize> = match self {
            Self::First(n) => (0..*n).collect(),
            Self::Every(s) => {
                let mut v: Vec<usize> = (0..n_layers).step_by((*s).max(1)).collect();
                if n_layers > 0 && v.last() != Some(&(n_layers - 1)) {
                    v.push(n_layers - 1);
                }
                v
            }
            Self::List(v) => v.clone(),
        };
        if layers.is_empty() {
            return Err(err("selects no layers".into()));
        }
        if let Some(&l) = layers.iter().find(|&&l| l >= n_layers) {
            return Err(err(format!(
                "layer {l} does not exist (the model has {n_layers})"
            )));
        }
        if layers.len() >= n_layers {
            return Err(err(format!(
                "selects all {n_layers} layers: the drafter would cost as much as the target"
            )));
        }
        check_layer_subset(&layers, n_layers)?;
        Ok(layers)
    }
}

impl FromStr for LayerSpec {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<Self> {
        let err = |why: &str| FormatError::LayerSpec {
            spec: s.to_string(),
            why: why.to_string(),
        };
        let number = |t: &str| t.trim().parse::<usize>().map_err(|_| err("not a number"));
        if let Some(n) = s.strip_prefix("first:") {
            let n = number(n)?;
            return if n == 0 {
                Err(err("first:0 selects no layers"))
            } else {
                Ok(Self::First(n))
            };
        }
        if let Some(step) = s.strip_prefix("every:") {
            let step = number(step)?;
            return if step < 2 {
                Err(err("every:S needs S >= 2"))
            } else {
                Ok(Self::Every(step))
            };
        }
        let mut layers = Vec::new();
        for part in s.split(',') {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (number(a)?, number(b)?);
                    if a > b {
                        return Err(err("a range runs backwards"));
                    }
                    layers.extend(a..=b);
                }
                None => layers.push(number(part)?),
            }
        }
        if layers.windows(2).any(|w| w[0] >= w[1]) {
            return Err(err("layers must be ascending and distinct"));
        }
        Ok(Self::List(layers))
    }
}

impl fmt::Display for LayerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::First(n) => write!(f, "first:{n}"),
            Self::Every(s) => write!(f, "every:{s}"),
            Self::List(v) => {
                let parts: Vec<String> = v.iter().map(ToString::to_string).collect();
                write!(f, "{}", parts.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn specs_parse_and_resolve() {
        let spec: LayerSpec = "first:4".parse().unwrap();
        assert_eq!(spec.layers(30).unwrap(), [0, 1, 2, 3]);
        let spec: LayerSpec = "every:4".parse().unwrap();
        assert_eq!(spec.layers(10).unwrap(), [0, 4, 8, 9]);
        let spec: LayerSpec = "0-2,7".parse().unwrap();
        assert_eq!(spec.layers(8).unwrap(), [0, 1, 2, 7]);
        assert_eq!(spec.to_string(), "0,1,2,7");
        for bad in ["first:0", "every:1", "3-1", "2,1", "x", "1,,2", ""] {
            assert!(bad.parse::<LayerSpec>().is_err(), "{bad}");
        }
        assert!("first:8".parse::<LayerSpec>().unwrap().layers(8).is_err());
        assert!("9".parse::<LayerSpec>().unwrap().layers(8).is_err());
        assert!(check_layer_subset(&[0, 2], 3).is_ok());
        for (bad, why) in [
            (&[][..], "no layers"),
            (&[3], "out of range"),
            (&[1, 1], "repeated"),
        ] {
            let e = check_layer_subset(bad, 3).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
