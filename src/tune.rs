//! `mars tune`: times a model's matrix groups on the GPU in every form they can take, prints
//! the table, and records the fastest form of each shape for this adapter (the engine's
//! `tune` module: later loads apply it).

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use mars_engine::{Backend, tune};

use crate::args::{CacheArgs, KernelArgs};
use crate::load;

#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// GGUF model file.
    #[arg(long)]
    pub model: PathBuf,
    /// Draft tokens a step (the verification pass timed has k + 1 rows).
    #[arg(long, default_value_t = tune::PASS_ROWS - 1)]
    pub k: usize,
    /// Milliseconds each timing aims at (each form of each shape is timed twice).
    #[arg(long, default_value_t = 100.0)]
    pub budget_ms: f64,
    /// Where the table goes (default: the engine's, `MARS_TUNE_CACHE` or the user's cache).
    #[arg(long)]
    pub table: Option<PathBuf>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

pub fn run_tune(args: &TuneArgs) -> Result<()> {
    ensure!(
        (1..=15).contains(&args.k),
        "--k {}: a pass of 2 to 16 rows is timed (k from 1 to 15)",
        args.k
    );
    ensure!(
        args.budget_ms.is_finite() && args.budget_ms > 0.0,
        "--budget-ms {}: expected a positive number",
        args.budget_ms
    );
    let path = match &args.table {
        Some(p) => p.clone(),
        None => tune::cache_path().context("no home folder for the cache: give --table")?,
    };
    // Only the GPU's packed kernels are tuned: no `--kernels` or `--threads` to refuse later.
    let kernels = KernelArgs {
        cache: args.cache.clone(),
        ..KernelArgs::default()
    };
    let (target, open) = load::target_untuned(&args.model, Backend::Wgpu, &kernels)?;
    let gpu = open
        .gpu
        .as_ref()
        .context("tuning needs the GPU (wgpu) path")?;
    let mut table = tune::read_table(&path)?;
    let rows = args.k + 1;
    let timings = pollster::block_on(tune::tune(
        target.model(),
        gpu,
        (rows, args.budget_ms),
        &mut table,
        false,
    ))?;
    println!("adapter: {}", gpu.identity);
    println!("| group | shape | groups | form | ms, 1 row | ms, {rows} rows | {rows} rows / 1 | |");
    println!("|---|---|---|---|---|---|---|---|");
    for t in &timings {
        let one = t.best_one_row().map(|b| b.form);
        let pass = t.best_pass().map(|b| b.form);
        let rule = (t.shape.form.one_row(), t.shape.form.pass_form());
        for f in &t.times {
            // Which the tuning chose, and the rule's, for one-row steps and for passes.
            let mut marks = Vec::new();
            for (chosen, rule, what) in [
                (Some(f.form) == one, f.form.one_row() == rule.0, "one row"),
                (Some(f.form) == pass, f.form.one_row() == rule.1, "passes"),
            ] {
                match (chosen, rule) {
                    (true, true) => marks.push(format!("chosen for {what} (the rule's too)")),
                    (true, false) => marks.push(format!("chosen for {what}")),
                    (false, true) => marks.push(format!("the rule's for {what}")),
                    (false, false) => {}
                }
            }
            let mark = marks.join("; ");
            if !f.agrees {
                println!(
                    "| {} | {} | {} | {} | - | - | - | outputs disagree with the rule's: not timed |",
                    t.shape.role,
                    t.shape.shape,
                    t.shape.groups,
                    f.form.name()
                );
                continue;
            }
            println!(
                "| {} | {} | {} | {} | {:.4} | {:.4} | {:.2}x | {mark} |",
                t.shape.role,
                t.shape.shape,
                t.shape.groups,
                f.form.name(),
                f.one_row_ms,
                f.pass_ms,
                f.pass_ms / f.one_row_ms.max(1e-9)
            );
        }
    }
    println!(
        "\n| group | shape | prefill form | ms, {} rows | |\n|---|---|---|---|---|",
        mars_model::PREFILL_ROWS_TIMED
    );
    for t in &timings {
        let best = t.best_prefill().map(|b| b.form);
        for p in &t.prefill {
            let ms = if p.agrees {
                format!("{:.4}", p.ms)
            } else {
                "- (outputs disagree: not timed)".to_string()
            };
            let mark = match (Some(p.form) == best, p.form.prefill == t.shape.form.prefill) {
                (true, true) => "chosen (the rule's too)",
                (true, false) => "chosen",
                (false, true) => "the rule's",
                (false, false) => "",
            };
            println!(
                "| {} | {} | {} | {ms} | {mark} |",
                t.shape.role,
                t.shape.shape,
                p.form.name()
            );
        }
    }
    // What a forward's products take in the rule's forms and in the chosen ones (each shape's
    // time by its count of groups; norms, attention and launches between them aside).
    // Each timing's one-row cost from `one`'s form and pass cost from `pass`'s.
    let sum =
        |one: &dyn Fn(&mars_model::GroupTiming) -> Option<mars_model::FormTime>,
         pass: &dyn Fn(&mars_model::GroupTiming) -> Option<mars_model::FormTime>| {
            timings.iter().fold((0.0, 0.0), |(a, b), t| {
                let n = t.shape.groups as f64;
                (
                    a + one(t).map_or(0.0, |f| n * f.one_row_ms),
                    b + pass(t).map_or(0.0, |f| n * f.pass_ms),
                )
            })
        };
    let find = |t: &mars_model::GroupTiming, m: mars_model::MatVec| {
        t.times.iter().copied().find(|f| f.form.one_row() == m)
    };
    let rule = sum(&|t| find(t, t.shape.form.one_row()), &|t| {
        find(t, t.shape.form.pass_form())
    });
    let chosen = sum(&|t| t.best_one_row(), &|t| t.best_pass());
    println!(
        "products of a forward, ms (1 row / {rows} rows): the rule's forms {:.3} / {:.3}, \
         the chosen {:.3} / {:.3}",
        rule.0, rule.1, chosen.0, chosen.1
    );
    tune::write_table(&path, &table)?;
    println!("recorded in {}", path.display());
    Ok(())
}
