//! Sampling settings and the verification mode.

use serde::{Deserialize, Serialize};

use crate::error::{Result, VerifyError};

/// The paper's threshold on the logit ratio z2/z1 (the authors' code uses 0.9).
pub const PAPER_THETA: f32 = 0.9;

/// The project's default θ, chosen by data: of the relaxed settings measured on HumanEval
/// (Qwen2.5-Coder-1.5B-Instruct with its 0.5B draft, greedy; docs/evaluation.md), the
/// one with the highest speedup whose pass@1 stays ≥ 99 % of strict's. The paper's 0.9 kept
/// 92–96 % there and stays an explicit option ([`Mode::PAPER`]).
pub const DEFAULT_THETA: f32 = 0.95;

/// Default threshold on the probability ratio p2/p1 for margin mode: relax only where the
/// runner-up is at least half as likely as the top token. Conservative on purpose; see
/// [`Mode::Margin`] for how it relates to θ.
pub const DEFAULT_RHO: f32 = 0.5;

/// How the target's logits are turned into the distribution p that verification compares
/// against. The drafter must have used the same settings for its q, or strict sampling is not
/// lossless with respect to *this* p.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Softmax temperature. 0 means greedy: the target's choice is its argmax and p is one-hot.
    /// At 0, top-k / top-p still apply to the model's own softmax (T = 1): they never change the
    /// argmax, but decide whether the runner-up is live for a MARS relaxation, and the reported
    /// margin probabilities are that softmax.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (ties broken by the lower id). `None` = off.
    #[serde(default)]
    pub top_k: Option<u32>,
    /// Keep the smallest set of most likely tokens whose mass reaches `top_p`. 1 = off.
    #[serde(default = "one")]
    pub top_p: f32,
}

fn one() -> f32 {
    1.0
}

impl Sampling {
    /// Greedy decoding: temperature 0, no filters.
    pub const GREEDY: Self = Self {
        temperature: 0.0,
        top_k: None,
        top_p: 1.0,
    };

    /// Plain sampling at `temperature` with no filters.
    pub const fn with_temperature(temperature: f32) -> Self {
        Self {
            temperature,
            top_k: None,
            top_p: 1.0,
        }
    }

    /// True at temperature 0.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// The temperature p is taken at: T, or 1 when greedy (margins are the model's softmax).
    pub fn effective_temperature(&self) -> f32 {
        if self.is_greedy() {
            1.0
        } else {
            self.temperature
        }
    }

    /// Whether a row's [`crate::RowSummary`] holds all a step needs (no top-k / top-p, which
    /// need the row's sorted mass): greedy, or sampling by the row's Gumbel-max draw.
    pub fn summaries_suffice(&self) -> bool {
        self.top_k.is_none() && self.top_p >= 1.0
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`VerifyError::Temperature`], [`VerifyError::TopP`] or [`VerifyError::TopK`] naming the
    /// value at fault.
    pub fn validate(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return Err(VerifyError::Temperature {
                value: self.temperature,
            });
        }
        if !self.top_p.is_finite() || self.top_p <= 0.0 || self.top_p > 1.0 {
            return Err(VerifyError::TopP { value: self.top_p });
        }
        if self.top_k == Some(0) {
            return Err(VerifyError::TopK { value: 0 });
        }
        Ok(())
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self::GREEDY
    }
}

/// Which verification rule decides whether a draft token is kept.
///
/// Both MARS modes share one acceptance rule at a *relaxed* position: the draft token is kept iff
/// it is the target's top-1 or top-2 token (after temperature, top-k and top-p) and its processed
/// probability is not 0; a rejected relaxed position takes its correction from p itself (the
/// authors' choice), not from the residual. Everywhere else the strict rule applies. The modes
/// differ only in *where* they relax.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Mode {
    #[default]
    /// Lossless speculative verification (greedy match, or min(1, p/q) with residual resampling).
    Strict,
    /// The paper's rule (arXiv 2601.15498): relax iff z2 / z1 > θ, with z1 ≥ z2 the target's
    /// top-2 *processed logits* (logits / T; raw logits at T = 0).
    ///
    /// Guarded: no relaxation when z1 ≤ 0 or either logit is not finite. The ratio is only a
    /// measure of closeness when both logits are positive: with z1 ≤ 0 it is ≥ 1 for any gap
    /// (z1 = −1, z2 = −100 gives 100), and −inf (a filtered runner-up) or an overflowing
    /// logit / T makes it NaN or ±inf. The ratio is also not shift-invariant: adding a constant
    /// to every logit leaves p unchanged but moves z2 / z1, which is why [`Mode::Margin`] exists.
    Paper {
        /// Relax where z2 / z1 > θ. θ > 1 never relaxes (z2 ≤ z1).
        theta: f32,
    },
    /// Shift-invariant margin: relax iff p2 / p1 ≥ ρ, with p1 ≥ p2 the target's top-2 processed
    /// probabilities (softmax at T = 1 when greedy). Since p2 / p1 = exp(z2 − z1), this is the
    /// logit-gap bound z1 − z2 ≤ −ln ρ (times T on raw logits).
    ///
    /// Relation to θ: for z1 > 0, z2 / z1 > θ ⇔ z1 − z2 < (1 − θ)·z1. The paper's rule is a
    /// gap bound that grows with the size of the top logit, i.e. ρ_equiv = exp(−(1 − θ)·z1).
    /// At θ = 0.9 a model whose top logit is 24 relaxes up to a gap of 2.4 nats (ρ ≈ 0.09);
    /// the same θ on a model whose logits sit near 5 relaxes only up to 0.5 nats (ρ ≈ 0.61).
    Margin {
        /// Relax where p2 / p1 ≥ ρ. ρ > 1 never relaxes (p2 ≤ p1).
        rho: f32,
    },
}

impl Mode {
    /// The paper's rule at the authors' θ = 0.9.
    pub const PAPER: Self = Self::Paper { theta: PAPER_THETA };

    /// The paper's rule at the project's default θ ([`DEFAULT_THETA`], chosen on HumanEval).
    pub const DEFAULT: Self = Self::Paper {
        theta: DEFAULT_THETA,
    };

    /// Checks θ or ρ.
    ///
    /// # Errors
    /// [`VerifyError::Theta`] or [`VerifyError::Rho`] when the value is NaN, infinite or ≤ 0.
    pub fn validate(&self) -> Result<()> {
        match *self {
            Self::Strict => Ok(()),
            Self::Paper { theta } if !theta.is_finite() || theta <= 0.0 => {
                Err(VerifyError::Theta { value: theta })
            }
            Self::Margin { rho } if !rho.is_finite() || rho <= 0.0 => {
                Err(VerifyError::Rho { value: rho })
            }
            Self::Paper { .. } | Self::Margin { .. } => Ok(()),
        }
    }

    /// The one rule that turns user-facing thresholds into a mode (the CLI's `--theta` /
    /// `--rho`, the page's mode field): `theta` picks [`Mode::Paper`], `rho` picks
    /// [`Mode::Margin`], neither gives `default`, both is an error (never a silent precedence).
    /// The result is validated.
    ///
    /// # Errors
    /// [`VerifyError::ThetaAndRho`] when both are given; [`VerifyError::Theta`] /
    /// [`VerifyError::Rho`] for a value that is not finite and > 0.
    pub fn resolve(theta: Option<f32>, rho: Option<f32>, default: Mode) -> Result<Self> {
        let mode = match (theta, rho) {
            (Some(theta), Some(rho)) => return Err(VerifyError::ThetaAndRho { theta, rho }),
            (Some(theta), None) => Self::Paper { theta },
            (None, Some(rho)) => Self::Margin { rho },
            (None, None) => default,
        };
        mode.validate()?;
        Ok(mode)
    }

    /// True for the two MARS modes.
    pub fn is_mars(&self) -> bool {
        !matches!(self, Self::Strict)
    }
}

/// Everything a verification step needs besides the numbers themselves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct VerifyConfig {
    /// How p is made from the target's logits.
    pub sampling: Sampling,
    /// Strict or one of the MARS modes.
    pub mode: Mode,
}

impl VerifyConfig {
    /// Checks the sampling settings and the mode.
    ///
    /// # Errors
    /// The first field at fault, see [`Sampling::validate`] and [`Mode::validate`].
    pub fn validate(&self) -> Result<()> {
        self.sampling.validate()?;
        self.mode.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_resolves_theta_and_rho() {
        let strict = Mode::Strict;
        assert_eq!(Mode::resolve(None, None, strict), Ok(Mode::Strict));
        assert_eq!(Mode::resolve(None, None, Mode::PAPER), Ok(Mode::PAPER));
        assert_eq!(
            Mode::resolve(Some(0.8), None, strict),
            Ok(Mode::Paper { theta: 0.8 })
        );
        assert_eq!(
            Mode::resolve(None, Some(0.3), Mode::PAPER),
            Ok(Mode::Margin { rho: 0.3 })
        );
        // Both is refused, whatever the default: no hidden precedence.
        assert_eq!(
            Mode::resolve(Some(0.9), Some(0.5), Mode::PAPER),
            Err(VerifyError::ThetaAndRho {
                theta: 0.9,
                rho: 0.5
            })
        );
        // The result is validated, the default too.
        assert_eq!(
            Mode::resolve(Some(f32::NAN), None, strict).map_err(|e| e.to_string()),
            Err("theta must be finite and > 0, got NaN".to_string())
        );
        assert!(Mode::resolve(None, Some(0.0), strict).is_err());
        assert!(Mode::resolve(None, None, Mode::Margin { rho: -1.0 }).is_err());
    }
}
