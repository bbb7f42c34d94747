//! A GPU tunes itself: each matrix-group shape of a model timed once per adapter in every form
//! it can take (`Llama::time_forms`), the fastest kept in a table on disk and applied at every
//! later load (`Llama::with_forms`). `mars tune` prints the whole measurement; a load on a GPU
//! card times the shapes the table lacks (a few seconds, once); a CPU adapter (lavapipe) keeps
//! the rules' forms, measured there, unless `mars tune` was run on it.
//!
//! The table: natively `MARS_TUNE_CACHE` where set, else `~/.cache/mars/tune.tsv` (beside the
//! models: [`crate::cache_path`]; `mars_model::Tuning`'s text, a line a choice); in the browser the
//! page keeps the same text in its storage and hands it to the worker with each load
//! ([`with_table`], the one tuning both front ends run). `MARS_TUNE=off` skips it, as does a
//! form forced with `MARS_GPU_TEAM`, `MARS_GPU_TILES` or `MARS_GPU_ACTS`: the rules' (or the
//! forced) forms, nothing timed or read. A card times each product after a read that empties
//! its cache (`GpuCaps::evict_bytes`): `MARS_TUNE_EVICT=off` times them back to back.

#[cfg(not(target_family = "wasm"))]
use std::path::{Path, PathBuf};

use mars_model::{GroupTiming, Llama, Tuned, Tuning};

use crate::device::GpuCaps;
#[cfg(not(target_family = "wasm"))]
use crate::device::OpenDevice;
#[cfg(not(target_family = "wasm"))]
use crate::error::EngineError;
use crate::error::Result;
use crate::session::Target;

/// Milliseconds each timing of a load's tuning aims at: a few seconds for a model's five shapes,
/// six team and fan forms and three prefill forms on an H200, where a product takes well under
/// a millisecond (a 128-row prefill's, a few).
pub const LOAD_BUDGET_MS: f64 = 15.0;

/// Rows of the verification pass a load times: the default chain's k drafts and the last token.
pub const PASS_ROWS: usize = crate::settings::DraftShape::CHAIN.k + 1;

/// Where the table lives (see the module docs); `None` without a home to put it in.
#[cfg(not(target_family = "wasm"))]
pub fn cache_path() -> Option<PathBuf> {
    crate::cache_path("MARS_TUNE_CACHE", "tune.tsv")
}

/// The table at `path` (empty where there is no file yet).
///
/// # Errors
/// [`EngineError::TuneCache`] for a file that cannot be read or does not parse (the line
/// named: delete it to tune anew).
#[cfg(not(target_family = "wasm"))]
pub fn read_table(path: &Path) -> Result<Tuning> {
    let err = |why: String| EngineError::TuneCache {
        path: path.display().to_string(),
        why,
    };
    match std::fs::read_to_string(path) {
        Ok(text) => Tuning::parse(&text).map_err(|e| err(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Tuning::default()),
        Err(e) => Err(err(e.to_string())),
    }
}

/// Writes `table` to `path` whole (a temporary file renamed over it, so a reader never sees
/// half a table), making its folder.
///
/// # Errors
/// [`EngineError::TuneCache`] when the folder or file cannot be written.
#[cfg(not(target_family = "wasm"))]
pub fn write_table(path: &Path, table: &Tuning) -> Result<()> {
    let err = |e: std::io::Error| EngineError::TuneCache {
        path: path.display().to_string(),
        why: e.to_string(),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, table.to_text()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Times `model`'s group shapes (every one, or only those `table` lacks for `adapter`) in
/// every form, at one row and `pass_rows` rows and over a long prefill (on the matrix units
/// too where `gpu.matrix_units`), and records each shape's chosen form in `table`; returns the
/// timings.
///
/// # Errors
/// The model's error off the GPU path or from a group that cannot run.
pub async fn tune(
    model: &Llama,
    gpu: &GpuCaps,
    (pass_rows, budget_ms): (usize, f64),
    table: &mut Tuning,
    only_missing: bool,
) -> Result<Vec<GroupTiming>> {
    let adapter = &gpu.identity;
    if only_missing && missing(model, adapter, table) == 0 {
        return Ok(Vec::new());
    }
    // A card's products timed with their weights out of its cache, as a forward meets them
    // (`GpuCaps::evict_bytes`). `MARS_TUNE_EVICT=off` times them back to back, weights in the
    // cache: a measurement knob (the GPU bundle's `teams` stage tunes both ways).
    let warm = std::env::var("MARS_TUNE_EVICT").as_deref() == Ok("off");
    let evict = if warm { 0 } else { gpu.evict_bytes };
    let timings = model
        .time_forms(pass_rows, budget_ms, &gpu.matrix_units, evict)
        .await?;
    for t in &timings {
        if only_missing && table.get(adapter, &t.shape.shape).is_some() {
            continue;
        }
        if let (Some(one), Some(pass), Some(form)) = (t.best_one_row(), t.best_pass(), t.chosen()) {
            table.insert(
                adapter,
                &t.shape.shape,
                Tuned {
                    form,
                    one_row_ms: one.one_row_ms,
                    pass_ms: pass.pass_ms,
                    prefill_ms: t.best_prefill().map(|p| p.ms),
                },
            );
        }
    }
    Ok(timings)
}

/// How many of `model`'s group shapes `table` names no form for on `adapter`: what a load on a
/// GPU card times.
pub fn missing(model: &Llama, adapter: &str, table: &Tuning) -> usize {
    model
        .group_forms()
        .iter()
        .filter(|g| table.get(adapter, &g.shape).is_none())
        .count()
}

/// `model` with the forms `table` holds for `adapter`, and how many of its shapes the table
/// named.
///
/// # Errors
/// The model's error for a form a group cannot take (a table edited by hand).
pub fn apply(model: &Llama, adapter: &str, table: &Tuning) -> Result<(Llama, usize)> {
    let named = model
        .group_forms()
        .iter()
        .filter(|g| table.get(adapter, &g.shape).is_some())
        .count();
    let tuned = model.with_forms(&|shape| table.get(adapter, shape).map(|t| t.form))?;
    Ok((tuned, named))
}

/// What a load does with the table (see the module docs): [`at_load_with`] with the table at
/// [`cache_path`], unless `MARS_TUNE=off` or a form forced with `MARS_GPU_TEAM`,
/// `MARS_GPU_TILES` or `MARS_GPU_ACTS` (what that run measures) says otherwise. Off the GPU path, nothing.
///
/// # Errors
/// As [`at_load_with`].
#[cfg(not(target_family = "wasm"))]
pub async fn at_load(model: Llama, open: &OpenDevice) -> Result<(Llama, Option<String>)> {
    let (Some(gpu), Some(path)) = (&open.gpu, cache_path()) else {
        return Ok((model, None));
    };
    // A form forced for a measurement (`MARS_GPU_TEAM`, `MARS_GPU_TILES`, `MARS_GPU_ACTS`) is
    // what the run is for: no table (whose forms would set the activations over the knob).
    if std::env::var("MARS_TUNE").as_deref() == Ok("off")
        || mars_model::Team::forced().is_some()
        || mars_model::tiles_forced()
        || mars_model::Acts::forced().is_some()
    {
        return Ok((model, None));
    }
    at_load_with(model, gpu, &path).await
}

/// [`with_table`] over the table in the file at `path`, written back whole where the load
/// timed something.
///
/// # Errors
/// As [`with_table`]; a table that cannot be read. A table that cannot be written keeps the
/// choices for this run only, said in the returned line.
#[cfg(not(target_family = "wasm"))]
pub async fn at_load_with(
    model: Llama,
    gpu: &GpuCaps,
    path: &Path,
) -> Result<(Llama, Option<String>)> {
    let mut table = read_table(path)?;
    let (model, timed) = with_table(model, gpu, &mut table).await?;
    let note = match timed {
        Timed::Nothing => None,
        Timed::Failed(why) => Some(why),
        Timed::Shapes(n) => Some(match write_table(path, &table) {
            Ok(()) => tuned_line(
                &gpu.identity,
                n,
                &format!("the choices are in {}", path.display()),
            ),
            Err(e) => format!("tuned the GPU kernels; not saved: {e}"),
        }),
    };
    Ok((model, note))
}

/// The line a front end shows where a load timed `n` group shapes on `adapter`, saying where
/// the choices are `kept`.
pub fn tuned_line(adapter: &str, n: usize, kept: &str) -> String {
    format!(
        "tuned the GPU kernels for {adapter}: {n} group shapes timed in every form, once ({kept})"
    )
}

/// What [`with_table`] timed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timed {
    /// Nothing: the table named every shape, the adapter is a CPU one, or the model has no
    /// groups (off the GPU path).
    Nothing,
    /// This many group shapes, now in the table.
    Shapes(usize),
    /// The tuning failed (a form the driver cannot build): the rules' forms run; why, for
    /// the user.
    Failed(String),
}

/// The one tuning at load, for every front end: on a GPU card the model's group shapes
/// `table` lacks for it are timed (a few seconds, once) and added to `table`; then, on any
/// adapter, the table's forms are applied (a CPU adapter's come only from `mars tune`).
/// The caller keeps the table: a file natively ([`at_load_with`]), the page's storage in the
/// browser.
///
/// # Errors
/// The model's error from applying a form (a table edited by hand). A tuning that fails costs
/// the load nothing: the rules' forms run ([`Timed::Failed`]).
pub async fn with_table(model: Llama, gpu: &GpuCaps, table: &mut Tuning) -> Result<(Llama, Timed)> {
    if model.group_forms().is_empty() {
        return Ok((model, Timed::Nothing));
    }
    let mut timed = Timed::Nothing;
    if !gpu.software {
        match tune(&model, gpu, (PASS_ROWS, LOAD_BUDGET_MS), table, true).await {
            Ok(t) if t.is_empty() => {}
            Ok(t) => timed = Timed::Shapes(t.len()),
            Err(e) => {
                let why = format!("tuning the GPU kernels failed ({e}): the rules' forms run");
                return Ok((model, Timed::Failed(why)));
            }
        }
    }
    let (model, _) = apply(&model, &gpu.identity, table)?;
    Ok((model, timed))
}

/// [`at_load`] for a target.
///
/// # Errors
/// As [`at_load`].
#[cfg(not(target_family = "wasm"))]
pub async fn target_at_load(target: Target, open: &OpenDevice) -> Result<(Target, Option<String>)> {
    let (model, note) = at_load(target.model().clone(), open).await?;
    Ok((target.with_model(model), note))
}

/// [`with_table`] for a target.
///
/// # Errors
/// As [`with_table`].
pub async fn target_with_table(
    target: Target,
    gpu: &GpuCaps,
    table: &mut Tuning,
) -> Result<(Target, Timed)> {
    let (model, timed) = with_table(target.model().clone(), gpu, table).await?;
    Ok((target.with_model(model), timed))
}
