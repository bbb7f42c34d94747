//! Tuning by measurement: which form ([`Team`] and [`Fan`]) each of a model's matrix groups
//! runs fastest in on one adapter, timed there, and the table that keeps the answers.
//!
//! Why: the rules that choose a form ([`Team::for_group`], [`Fan::for_matrix`]) were measured
//! on lavapipe and on one H200; another GPU (another vendor, another subgroup size, another
//! memory system) may rank the forms otherwise, and each form gives the same row-independent
//! contract. So a GPU's groups are timed once in every form they can take, at one row (a
//! decoding step) and at a verification pass's rows, the fastest at one row and the fastest at
//! a pass kept apart ([`Form::pass`]) — the group's own form kept where it is within a few
//! percent of the fastest (`mars_model::KEEP_MARGIN`), so that noise does not move it — keyed by
//! the adapter (name, back-end, driver) and the group's shape ([`MatrixGroup::shape_key`]). On
//! a card each product is timed with its weights out of the cache ([`Evict`]), as a forward
//! meets them.
//!
//! The same for a long prefill: with its team and fan chosen, a group over every row is timed
//! over [`PREFILL_ROWS_TIMED`] rows in the mat-vec form, in f32 tiles, and in tiles on the matrix
//! units where the adapter has them, each kind of tiles split along the inputs by the rule and,
//! where the rule splits the group, unsplit ([`super::Splits`]: how many workgroups pay depends
//! on the GPU's size), each form's outputs first checked against the current form's
//! ([`outputs_agree`]).
//!
//! The table is text, a line an entry, so that a user can read and delete what their GPU chose:
//! `adapter<TAB>shape<TAB>form<TAB>ms for one row<TAB>ms for a pass<TAB>ms for a prefill`, under
//! a first line naming the timing method and the kernels' build ([`TABLE_HEADER`]): a table
//! another build wrote is read as empty, so its shapes are timed anew.

use super::{Acts, Fan, Result, Team, TileForm, UnitShape, UnitTile};
use super::{Client, MatrixGroup, Step, StepBuffer};
use crate::KernelError;
use std::collections::BTreeMap;

/// A mat-vec product's team, fan and activations: what a group's passes of more than one row
/// take where they differ from its one-row steps ([`Form::pass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatVec {
    /// Threads an output.
    pub team: Team,
    /// Outputs a team.
    pub fan: Fan,
    /// The activations the products multiply.
    pub acts: Acts,
}

impl MatVec {
    /// `wide/1/q8`: [`Form::name`]'s first three parts.
    pub fn name(self) -> String {
        format!(
            "{}/{}/{}",
            self.team.name(),
            self.fan.outputs(),
            self.acts.name()
        )
    }

    /// The mat-vec form `team/fan/acts` names (acts optional: f32).
    fn parse(team: &str, fan: &str, acts: &str) -> Option<Self> {
        let acts = Acts::parse(acts)?;
        let team = Team::parse(team)?;
        let fan = match fan {
            "1" => Fan::One,
            "4" => Fan::Four,
            _ => return None,
        };
        Some(Self { team, fan, acts })
    }
}

/// A group's team, fan and activations for one-row steps and, where they differ, for passes of
/// more rows, and how it multiplies a long prefill: what [`Tuning`] chooses between.
///
/// Why two mat-vec forms: on an H200 no one form was fastest at both (the 7B shape, 2026-12-04:
/// wide teams on f32 activations took a one-row pass in 9.2 ms and a 5-row one in 69; the
/// tuned 8-bit forms 12.5 and 13.5), and a decoding step is one row where a verification pass
/// is k + 1. The price: a row's bits in a pass of several rows are the pass form's, not a
/// one-row step's (within the forms' rounding of each other), so greedy strict speculation
/// equals target-only decoding up to near-ties where the two forms differ; each form keeps the
/// row contract (a row's result independent of the rows beside it) over its own row counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Form {
    /// Threads an output.
    pub team: Team,
    /// Outputs a team.
    pub fan: Fan,
    /// The activations the mat-vec products multiply.
    pub acts: Acts,
    /// Passes of more than one row (verification, a short prompt, a long prefill's mat-vec
    /// form) in this mat-vec form; `None`: the one-row form's.
    pub pass: Option<MatVec>,
    /// A long prefill's products in tiles of this form, or (`None`) in the mat-vec form.
    pub prefill: Option<TileForm>,
    /// Whether those tiles split along the inputs where [`super::Splits::rule`] splits the
    /// group (`false`: every tile workgroup walks all of them; always `true` without tiles).
    pub split: bool,
}

impl Form {
    /// `quarter/1/f32/matvec`, `whole/4/q8/tiles`, `lanes/1/f32/units` (16 × 16 blocks on
    /// subgroups of 32), `wide/1/f32/units-8x8-8` (8 × 8 on 8), `wide/1/f32/units-wide` (the
    /// wide tile; `units-tall`, the tall), `quarter/4/f32/tiles-unsplit`, …: the table's and
    /// `mars tune`'s name.
    pub fn name(self) -> String {
        let prefill = match self.prefill {
            None => "matvec".to_string(),
            Some(TileForm::Vectors) => "tiles".to_string(),
            Some(TileForm::TallVectors) => "tiles-tall".to_string(),
            Some(TileForm::Units(shape)) => {
                let tile = match shape.tile_kind() {
                    UnitTile::Narrow => "",
                    UnitTile::Tall => "-tall",
                    UnitTile::Wide => "-wide",
                };
                let narrow = UnitShape::new(shape.size(), shape.subgroup());
                if narrow == Some(UnitShape::CARD) {
                    format!("units{tile}")
                } else {
                    let n = shape.size();
                    format!("units{tile}-{n}x{n}-{}", shape.subgroup())
                }
            }
        };
        let unsplit = if self.prefill.is_some() && !self.split {
            "-unsplit"
        } else {
            ""
        };
        let pass = self
            .pass
            .filter(|&p| p != self.one_row())
            .map_or(String::new(), |p| format!(";{}", p.name()));
        format!("{}/{prefill}{unsplit}{pass}", self.one_row().name())
    }

    /// The one-row steps' mat-vec form.
    pub fn one_row(self) -> MatVec {
        MatVec {
            team: self.team,
            fan: self.fan,
            acts: self.acts,
        }
    }

    /// The mat-vec form of passes of more than one row.
    pub fn pass_form(self) -> MatVec {
        self.pass.unwrap_or(self.one_row())
    }

    /// The same form with `one` for one-row steps (and for passes where it had no pass form).
    pub fn with_one_row(self, one: MatVec) -> Self {
        Self {
            team: one.team,
            fan: one.fan,
            acts: one.acts,
            pass: Some(self.pass_form()).filter(|&p| p != one),
            ..self
        }
    }

    /// The form [`Form::name`] wrote (`wide/1/f32/units;wide/1/q8`: passes in their own form),
    /// or a name without its activations (`quarter/1/matvec`: f32, a table written before they
    /// were a choice).
    ///
    /// # Errors
    /// [`KernelError::Unknown`] for any other text.
    pub fn parse(text: &str) -> Result<Self> {
        let unknown = || KernelError::Unknown {
            what: "form",
            value: text.to_string(),
            expected: "quarter, whole, lanes or wide, then /1 or /4, then /f32 or /q8, then /matvec, \
                       /tiles, /units or /units-NxN-LANES (tiles and units with -unsplit or not), \
                       then, for passes in a form of their own, ;TEAM/FAN/ACTS",
        };
        let (text, pass) = match text.split_once(';') {
            Some((form, pass)) => {
                let parts: Vec<&str> = pass.split('/').collect();
                let [team, fan, acts] = parts[..] else {
                    return Err(unknown());
                };
                (
                    form,
                    Some(MatVec::parse(team, fan, acts).ok_or_else(unknown)?),
                )
            }
            None => (text, None),
        };
        let parts: Vec<&str> = text.split('/').collect();
        let (team, fan, acts, prefill) = match parts[..] {
            [team, fan, prefill] => (team, fan, "f32", prefill),
            [team, fan, acts, prefill] => (team, fan, acts, prefill),
            _ => return Err(unknown()),
        };
        let MatVec { team, fan, acts } = MatVec::parse(team, fan, acts).ok_or_else(unknown)?;
        let (prefill, split) = match prefill.strip_suffix("-unsplit") {
            Some(tiles) if tiles != "matvec" => (tiles, false),
            Some(_) => return Err(unknown()),
            None => (prefill, true),
        };
        let prefill = match prefill {
            "matvec" => None,
            "tiles" => Some(TileForm::Vectors),
            "tiles-tall" => Some(TileForm::TallVectors),
            other => {
                // units, units-wide, units-8x8-8, units-tall-8x8-8, …
                let rest = other.strip_prefix("units").ok_or_else(unknown)?;
                let (tile, rest) = [("-tall", UnitTile::Tall), ("-wide", UnitTile::Wide)]
                    .into_iter()
                    .find_map(|(word, tile)| Some((tile, rest.strip_prefix(word)?)))
                    .unwrap_or((UnitTile::Narrow, rest));
                let narrow = if rest.is_empty() {
                    Some(UnitShape::CARD)
                } else {
                    rest.strip_prefix('-')
                        .and_then(|rest| rest.split_once('-'))
                        .and_then(|(block, lanes)| {
                            let (m, n) = block.split_once('x')?;
                            (m == n).then_some(())?;
                            UnitShape::new(n.parse().ok()?, lanes.parse().ok()?)
                        })
                };
                let shape = narrow.and_then(|shape| shape.in_tile(tile));
                Some(TileForm::Units(shape.ok_or_else(unknown)?))
            }
        };
        let one = MatVec { team, fan, acts };
        Ok(Self {
            team,
            fan,
            acts,
            pass: pass.filter(|&p| p != one),
            prefill,
            split,
        })
    }
}

/// What the table keeps for one adapter and group shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuned {
    /// The fastest form.
    pub form: Form,
    /// Its milliseconds a product of one row.
    pub one_row_ms: f64,
    /// Its milliseconds a product of a verification pass's rows.
    pub pass_ms: f64,
    /// Its milliseconds a product of a long prefill's rows ([`PREFILL_ROWS_TIMED`]; `None` for
    /// a group that never meets one, the head: `-` in the text).
    pub prefill_ms: Option<f64>,
}

/// Rows of the long prefill a tuning times (a pass of a 128-token prompt).
pub const PREFILL_ROWS_TIMED: usize = 128;

/// The first line of a table this build writes: how its times were taken, and a fingerprint of
/// the kernels' sources (`build.rs`: every file of `gpu/` and `units.rs`). A table whose first
/// line differs was timed by another build, whose kernels ran at other speeds and whose forms
/// may have been others (before 2026-12-04's evening each product was timed back to back with
/// its weights in the GPU's cache and one form chosen by the sum of a row's cost and a pass's,
/// which on an H200 chose forms that decoded a 7B 0.69× as fast as the wide teams it passed
/// over; the matrix units' tall and wide tiles came after the last header written by hand):
/// it is set aside unread, its form names perhaps this build's no longer, so that a load times
/// its shapes anew.
pub const TABLE_HEADER: &str = concat!(
    "# mars tune 5, kernels ",
    env!("MARS_KERNELS_FINGERPRINT"),
    " (each product timed after its weights left the GPU's cache): adapter, group shape, \
     chosen form, ms for one row, for a pass, for a prefill"
);

/// Chosen forms by adapter and group shape (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tuning {
    entries: BTreeMap<(String, String), Tuned>,
}

impl Tuning {
    /// The table `text` holds ([`Tuning::to_text`]'s form); blank lines and lines starting with
    /// `#` are skipped. Empty, unread, where its first line is not [`TABLE_HEADER`] (a table
    /// another build timed).
    ///
    /// # Errors
    /// [`KernelError::Tuning`] naming the line and field of anything else that does not parse.
    pub fn parse(text: &str) -> Result<Self> {
        let mut tuning = Self::default();
        if text.lines().next().map(|l| l.trim_end_matches('\r')) != Some(TABLE_HEADER) {
            return Ok(tuning);
        }
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| KernelError::Tuning { line: i + 1, why };
            let fields: Vec<&str> = line.split('\t').collect();
            let [adapter, shape, form, one, pass, prefill] = fields[..] else {
                return Err(bad(format!("{} fields, expected 6", fields.len())));
            };
            let form = Form::parse(form).map_err(|e| bad(e.to_string()))?;
            let ms = |what: &str, v: &str| match v.parse::<f64>() {
                Ok(ms) if ms.is_finite() && ms >= 0.0 => Ok(ms),
                _ => Err(bad(format!(
                    "{what} = {v:?}: not a finite count of milliseconds"
                ))),
            };
            tuning.insert(
                adapter,
                shape,
                Tuned {
                    form,
                    one_row_ms: ms("one row", one)?,
                    pass_ms: ms("pass", pass)?,
                    // `-`: no prefill (the head).
                    prefill_ms: match prefill {
                        "-" => None,
                        v => Some(ms("prefill", v)?),
                    },
                },
            );
        }
        Ok(tuning)
    }

    /// The table as text, [`TABLE_HEADER`] then one line an entry (tabs in names replaced by
    /// spaces).
    pub fn to_text(&self) -> String {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        let mut text = format!("{TABLE_HEADER}\n");
        for ((adapter, shape), t) in &self.entries {
            let prefill = t
                .prefill_ms
                .map_or("-".to_string(), |ms| format!("{ms:.4}"));
            text += &format!(
                "{}\t{}\t{}\t{:.4}\t{:.4}\t{prefill}\n",
                clean(adapter),
                clean(shape),
                t.form.name(),
                t.one_row_ms,
                t.pass_ms,
            );
        }
        text
    }

    /// What was chosen for `shape` on `adapter`.
    pub fn get(&self, adapter: &str, shape: &str) -> Option<Tuned> {
        self.entries
            .get(&(adapter.to_string(), shape.to_string()))
            .copied()
    }

    /// Records (or replaces) the choice for `shape` on `adapter`.
    pub fn insert(&mut self, adapter: &str, shape: &str, tuned: Tuned) {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        self.entries.insert((clean(adapter), clean(shape)), tuned);
    }

    /// Entries in all.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The activations a timing multiplies: small values of both signs (no overflow in any form),
/// the same for every form, so that their outputs can be compared ([`group_output`]).
fn probe_x(rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.01)
        .collect()
}

/// A group's product over `rows` rows, with the step it runs in.
struct Probe {
    x: super::Handle,
    y: super::Handle,
    step: StepBuffer,
}

impl Probe {
    /// `rows` rows, as a part of a long prefill where `long`.
    fn new(client: &Client, group: &MatrixGroup, rows: usize, long: bool) -> Result<Self> {
        let rows = rows.max(1);
        let x = super::upload_f32(client, &probe_x(rows, group.cols()));
        // Zeros: an `Add` group adds into y (a residual), so its outputs start from the same.
        let y = super::upload_f32(client, &vec![0.0; (rows * group.outputs()).max(1)]);
        let ids = vec![0u32; rows];
        let mut step = Step::chain(&ids, 0, rows, group.outputs())?;
        if long {
            step = step.long_prefill();
        }
        let step = StepBuffer::new(client, &step);
        Ok(Self { x, y, step })
    }

    fn run(&self, client: &Client, group: &MatrixGroup) -> Result<()> {
        group.run(client, &self.x, &self.y, &self.step)
    }

    /// The product as a forward launches it: with the group's norm folded in where this form
    /// takes it (a card's f32 forms), so that a timing counts the fold's work; the outputs
    /// forms are compared by stay [`Probe::run`]'s, the same function in every form.
    fn run_as_forward(&self, client: &Client, group: &MatrixGroup) -> Result<()> {
        if group.folds_norm(&self.step) {
            return group.run_normed(client, &self.x, &self.y, &self.step);
        }
        self.run(client, group)
    }

    /// Milliseconds a call of `calls` back to back, read once: each call the eviction where
    /// there is one, then the product where `product`.
    async fn batch(
        &self,
        client: &Client,
        group: &MatrixGroup,
        evict: Option<&Evict>,
        calls: usize,
        product: bool,
    ) -> Result<f64> {
        // std's Instant natively, `performance.now()` in the browser (where std's panics).
        use web_time::Instant;
        let t = Instant::now();
        for _ in 0..calls {
            if let Some(e) = evict {
                e.run(client, &self.y)?;
            }
            if product {
                self.run_as_forward(client, group)?;
            }
        }
        self.read(client).await?;
        Ok(t.elapsed().as_secs_f64() * 1e3 / calls.max(1) as f64)
    }

    /// The outputs, awaited: the browser cannot block on the GPU, so one async read serves
    /// both (natively driven by a blocking executor).
    async fn read(&self, client: &Client) -> Result<Vec<u8>> {
        super::read(client, self.y.clone()).await
    }
}

/// `group`'s outputs over `rows` rows of the probe activations (as a part of a long prefill
/// where `long`): what a tuning compares each form's against the current form's before it
/// times it, so that a form a driver miscompiles is never chosen.
///
/// # Errors
/// The kernels' error for a group that cannot run, or a failed read.
pub async fn group_output(
    client: &Client,
    group: &MatrixGroup,
    rows: usize,
    long: bool,
) -> Result<Vec<f32>> {
    let probe = Probe::new(client, group, rows, long)?;
    probe.run(client, group)?;
    let bytes = probe.read(client).await?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// Whether two forms' outputs agree: every value within `tolerance` of the largest magnitude
/// in `want` (forms differ in the order their partial sums meet — 1e-3 holds that — and on the
/// matrix units in operands rounded to f16, 2⁻¹¹ each; a miscompiled form is off by far more).
pub fn outputs_agree(got: &[f32], want: &[f32], tolerance: f32) -> bool {
    // The finite values' scale: a −inf (a masked logit) must match, not widen the bound.
    let scale = want
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(1e-6);
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= tolerance * scale || (g.is_infinite() && g == w))
}

/// Bytes an [`Evict`] reads before each timed product on a GPU card: more than the last-level
/// cache of the GPUs this project meets (50 MB on an H100 or H200, 72 MB on an RTX 4090, 96 MB
/// of Infinity Cache on an RX 7900 XTX), and the largest binding every WebGPU adapter offers.
pub const EVICT_BYTES: usize = 128 << 20;

/// A buffer read at full width before each timed product, so that the product meets its
/// weights as a forward does: out of the GPU's cache. Timed back to back, a group whose weights
/// fit the cache (a 0.5B's every group, a 7B's q | k | v and o at 9 and 7 MB) is read from the
/// cache, not from memory, which can favour the forms that compute least over those that read
/// memory best: in a forward each group's weights were pushed out by the layers between.
#[derive(Debug)]
pub struct Evict {
    buffer: super::Handle,
    read: super::ReadThrough,
}

impl Evict {
    /// An eviction of `bytes` (a multiple of 16, at least 16).
    ///
    /// # Errors
    /// [`KernelError::Shape`] for a size that is not whole vec4s.
    pub fn new(client: &Client, bytes: usize) -> Result<Self> {
        Ok(Self {
            read: super::ReadThrough::evicting(client, bytes)?,
            buffer: client.empty(bytes),
        })
    }

    /// Enqueues the read, bound to `after` (the timed product's output: the launch after it
    /// waits for it, as a product waits for the one before it in a forward).
    fn run(&self, client: &Client, after: &super::Handle) -> Result<()> {
        self.read.run_into(client, &self.buffer, after)
    }
}

/// Milliseconds one product of `group` over `rows` rows (as a part of a long prefill where
/// `long`; with its norm folded in where the form takes it) takes on `client`'s device: the
/// products enqueued back to back and read once (so that neither a launch's host time nor a
/// read sits between them, as in a forward), the median of three batches, each batch as many
/// products as fit `budget_ms` after one timed call (at least 2, at most 40). With `evict`,
/// each product follows an eviction ([`Evict`]) and each batch is followed by a batch of the
/// evictions alone, the least of the first kind less the least of the second (at least 0): the
/// product with its weights out of the cache. (The eviction also keeps the device the bound: a
/// product shorter than its launch's host time is otherwise timed as the host's.)
///
/// # Errors
/// The kernels' error for a group that cannot run ([`MatrixGroup::run`]), or a failed read.
pub async fn time_group(
    client: &Client,
    group: &MatrixGroup,
    (rows, long): (usize, bool),
    budget_ms: f64,
    evict: Option<&Evict>,
) -> Result<f64> {
    let probe = Probe::new(client, group, rows, long)?;
    // The first call compiles the pipelines: not timed.
    probe.batch(client, group, evict, 1, true).await?;
    let one = probe.batch(client, group, evict, 1, true).await?;
    let calls = ((budget_ms / 3.0 / one.max(1e-3)) as usize).clamp(2, 40);
    let mut times = Vec::with_capacity(3);
    let mut evictions = Vec::with_capacity(3);
    for _ in 0..3 {
        times.push(probe.batch(client, group, evict, calls, true).await?);
        if evict.is_some() {
            evictions.push(probe.batch(client, group, evict, calls, false).await?);
        }
    }
    times.sort_by(f64::total_cmp);
    match evict {
        None => Ok(times[1]),
        // The least of each: whatever else the device or host does only adds to a batch, and
        // a difference of medians can fall below zero where a product is short beside the
        // eviction's spread.
        Some(_) => {
            let least = evictions.iter().copied().fold(f64::INFINITY, f64::min);
            Ok((times[0] - least).max(0.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::TileForm;

    #[test]
    fn forms_round_trip_through_their_names() {
        for team in Team::ALL {
            for fan in [Fan::One, Fan::Four] {
                for acts in [Acts::F32, Acts::Q8, Acts::Q8Own] {
                    for prefill in [
                        None,
                        Some(TileForm::Vectors),
                        Some(TileForm::TallVectors),
                        Some(TileForm::Units(UnitShape::CARD)),
                        Some(TileForm::Units(UnitShape::new(8, 8).unwrap())),
                        Some(TileForm::Units(UnitShape::new(16, 64).unwrap())),
                        Some(TileForm::Units(
                            UnitShape::CARD.in_tile(UnitTile::Wide).unwrap(),
                        )),
                        Some(TileForm::Units(
                            UnitShape::CARD.in_tile(UnitTile::Tall).unwrap(),
                        )),
                        Some(TileForm::Units(
                            UnitShape::new(8, 8)
                                .unwrap()
                                .in_tile(UnitTile::Wide)
                                .unwrap(),
                        )),
                    ] {
                        // Unsplit only with tiles; a pass form of its own or not.
                        for (split, pass) in [true, false].into_iter().zip([
                            None,
                            Some(MatVec {
                                team: Team::Wide,
                                fan: Fan::One,
                                acts: Acts::Q8,
                            }),
                        ]) {
                            let form = Form {
                                team,
                                fan,
                                acts,
                                pass: None,
                                prefill,
                                split: split || prefill.is_none(),
                            };
                            let form = match pass {
                                Some(p) => Form {
                                    pass: Some(p).filter(|&p| p != form.one_row()),
                                    ..form
                                },
                                None => form,
                            };
                            assert_eq!(Form::parse(&form.name()).unwrap(), form);
                            assert_eq!(form.with_one_row(form.one_row()), form);
                        }
                    }
                }
            }
        }
        // A table written before the activations were a choice: f32.
        assert_eq!(
            Form::parse("whole/4/tiles").unwrap(),
            Form {
                team: Team::Whole,
                fan: Fan::Four,
                acts: Acts::F32,
                pass: None,
                prefill: Some(TileForm::Vectors),
                split: true,
            }
        );
        // Passes in a form of their own; one equal to the one-row form is no pass form.
        let form = Form::parse("wide/1/f32/units;wide/4/q8").unwrap();
        assert_eq!(
            (form.one_row().name(), form.pass_form().name()),
            ("wide/1/f32".to_string(), "wide/4/q8".to_string())
        );
        assert_eq!(
            Form::parse("wide/1/f32/units;wide/1/f32").unwrap().pass,
            None
        );
        // A new one-row form keeps the passes' where they had their own.
        let quarter = MatVec {
            team: Team::Quarter,
            fan: Fan::One,
            acts: Acts::F32,
        };
        let moved = form.with_one_row(quarter);
        assert_eq!(
            (moved.one_row(), moved.pass_form(), moved.prefill),
            (quarter, form.pass_form(), form.prefill)
        );
        assert!(
            !Form::parse("wide/1/q8/units-unsplit").unwrap().split
                && Form::parse("wide/1/q8/units").unwrap().split
        );
        for bad in [
            "",
            "quarter",
            "quarter/1",
            "quarter/2/matvec",
            "half/1/tiles",
            "whole//tiles",
            "whole/1/tensor",
            "whole/1/tiles/x",
            "whole/1/q4/tiles",
            "whole/1/q8/tiles/x",
            "whole/1/f32/units-8x8",
            "whole/1/f32/units-8x16-8",
            "whole/1/f32/units-16x16-8",
            "whole/1/f32/units-8x8-64",
            "whole/1/f32/units-4x4-8",
            "whole/1/f32/units-xx-",
            "whole/1/f32/matvec-unsplit",
            "whole/1/f32/tiles-unsplit-unsplit",
            "wide/1/f32/units;wide/1",
            "wide/1/f32/units;half/1/q8",
            "wide/1/f32/units;wide/1/q8;wide/1/q8",
            "wide/1/f32/units;wide/1/q8/units",
            ";wide/1/q8",
        ] {
            assert!(Form::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_table_round_trips_and_names_a_bad_line() {
        let mut t = Tuning::default();
        let tuned = Tuned {
            form: Form {
                team: Team::Lanes,
                fan: Fan::Four,
                acts: Acts::F32,
                pass: Some(MatVec {
                    team: Team::Wide,
                    fan: Fan::One,
                    acts: Acts::Q8,
                }),
                prefill: Some(TileForm::Units(UnitShape::CARD)),
                split: false,
            },
            one_row_ms: 0.125,
            pass_ms: 0.25,
            prefill_ms: Some(2.5),
        };
        let shape = "SwiGlu Q4K:4864+Q4K:4864 x896 in 1";
        t.insert("NVIDIA H200 (Vulkan)\tdriver", shape, tuned);
        let back = Tuning::parse(&t.to_text()).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.get("NVIDIA H200 (Vulkan) driver", shape), Some(tuned));
        assert_eq!(back.get("another adapter", shape), None);
        // A table another build timed, by an earlier method or over other kernels: set aside
        // unread, a form this build no longer has too.
        let old = "# mars tune: adapter, group shape, fastest form, ms for one row, for a pass, \
                   for a prefill\na\tb\tquarter/4/matvec\t0.1\t0.2\t-\n";
        assert_eq!(Tuning::parse(old).unwrap(), Tuning::default());
        assert_eq!(
            Tuning::parse(&old.replace("quarter/4", "eighth/4")).unwrap(),
            Tuning::default()
        );
        let this = |lines: &str| format!("{TABLE_HEADER}\n{lines}");
        let other_kernels = this("a\tb\tquarter/4/matvec\t0.1\t0.2\t-\n").replacen(
            env!("MARS_KERNELS_FINGERPRINT"),
            "0123456789abcdef",
            1,
        );
        assert_ne!(other_kernels, this("a\tb\tquarter/4/matvec\t0.1\t0.2\t-\n"));
        assert_eq!(Tuning::parse(&other_kernels).unwrap(), Tuning::default());
        // This build's table: every line checked, named by its line number.
        let err =
            Tuning::parse(&this("# comment\n\na\tb\tquarter/1/tiles\t0.1\t0.2\n")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("line 4") && text.contains("5 fields"),
            "{err}"
        );
        let err = Tuning::parse(&this("a\tb\tquarter/1/tiles\t0.1\tNaN\t3\n")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("pass") && text.contains("NaN"), "{err}");
        let err = Tuning::parse(&this("a\tb\teighth/1/tiles\t0.1\t0.2\t3\n")).unwrap_err();
        assert!(err.to_string().contains("eighth"), "{err}");
        // The head has no prefill: `-`, which round-trips; NaN is no count.
        let head = Tuning::parse(&this("a\tb\tquarter/4/matvec\t0.1\t0.2\t-\n")).unwrap();
        assert_eq!(head.get("a", "b").unwrap().prefill_ms, None);
        assert_eq!(Tuning::parse(&head.to_text()).unwrap(), head);
        assert!(Tuning::parse(&this("a\tb\tquarter/4/matvec\t0.1\t0.2\tNaN\n")).is_err());
    }
}

#[cfg(test)]
mod agree {
    use super::outputs_agree;

    #[test]
    fn outputs_agree_within_the_order_of_sums_only() {
        let want = [1.0, -200.0, 3.5, f32::NEG_INFINITY];
        let agree = |got: &[f32]| outputs_agree(got, &want, 1e-3);
        assert!(agree(&[1.0001, -200.01, 3.5, f32::NEG_INFINITY]));
        assert!(!agree(&[1.0, -200.0, 3.9, f32::NEG_INFINITY]));
        assert!(outputs_agree(
            &[1.0, -200.0, 3.9, f32::NEG_INFINITY],
            &want,
            1e-2
        ));
        assert!(!agree(&[1.0, -200.0, 3.5, 0.0]));
        assert!(!agree(&[1.0, -200.0, f32::NAN, f32::NEG_INFINITY]));
        assert!(!agree(&[1.0, -200.0, 3.5]));
    }
}
