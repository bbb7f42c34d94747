//! The report of a finished run: per-method totals against strict and target-only, the
//! markdown table, and the pass@1-against-speed plot (eval.svg).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use mars_engine::{Method, RunSummary};
use mars_verify::Mode;

use super::sandbox::Verdict;
use super::{EvalRecord, KEEP_OF_STRICT, MethodReport, ProblemRecord};

/// Bootstrap resamples behind each 95 % interval.
const RESAMPLES: usize = 4000;

/// Per-method totals with their intervals, speedups against target-only and verdict changes
/// against strict.
pub(super) fn report(
    methods: &[(String, Method, Mode)],
    records: &[ProblemRecord],
) -> Vec<MethodReport> {
    let passed = |r: &ProblemRecord, i: usize| r.attempts[i].outcome.verdict == Verdict::Passed;
    let n = records.len().max(1) as f64;
    let strict_passed = records.iter().filter(|r| passed(r, 1)).count();
    let intervals = intervals(methods.len(), records);
    let several_seeds = records.iter().any(|r| r.seed != records[0].seed);
    let answer_name = |r: &ProblemRecord| {
        if several_seeds {
            format!("{} (seed {})", r.task_id, r.seed)
        } else {
            r.task_id.clone()
        }
    };
    let mut out: Vec<MethodReport> = methods
        .iter()
        .enumerate()
        .map(|(i, (label, method, mode))| {
            let mut summary = RunSummary::empty(None);
            for r in records {
                summary.merge(&r.attempts[i].summary);
            }
            summary.drafter = records
                .first()
                .and_then(|r| r.attempts[i].summary.drafter.clone());
            let count = records.iter().filter(|r| passed(r, i)).count();
            let ids = |cond: &dyn Fn(&ProblemRecord) -> bool| {
                records
                    .iter()
                    .filter(|r| cond(r))
                    .map(answer_name)
                    .collect::<Vec<_>>()
            };
            MethodReport {
                method: label.clone(),
                mode: (*method == Method::Mars).then_some(*mode),
                passed: count,
                pass_at_1: count as f64 / n,
                pass_at_1_ci: intervals[i].0,
                of_strict: if strict_passed > 0 {
                    count as f64 / strict_passed as f64
                } else {
                    f64::NAN
                },
                of_strict_ci: intervals[i].1,
                speedup: 0.0,
                won: ids(&|r| passed(r, i) && !passed(r, 1)),
                lost: ids(&|r| !passed(r, i) && passed(r, 1)),
                summary,
            }
        })
        .collect();
    let base = out[0].summary.tokens_per_second;
    for m in &mut out {
        m.speedup = if base > 0.0 {
            m.summary.tokens_per_second / base
        } else {
            0.0
        };
    }
    out
}

/// 95 % percentile intervals of each method's pass@1 and of its pass@1 relative to strict's
/// (method 1), by a bootstrap over problems: a resample draws problems with replacement and
/// takes every answer of a drawn problem (all its seeds, all methods) together, so the seeds of
/// a problem, and the methods that share a seed, stay paired, and the interval reflects how
/// much the verdict depends on which problems were asked. The generator is seeded: a report is
/// reproducible. An interval is NaN where it is undefined (no answers; strict passing nothing).
pub(super) fn intervals(methods: usize, records: &[ProblemRecord]) -> Vec<([f64; 2], [f64; 2])> {
    use rand_core::{Rng as _, SeedableRng as _};
    // Per problem (in first-seen order): passes per method, and answers.
    let mut problems: Vec<(&str, Vec<u64>, u64)> = Vec::new();
    for r in records {
        let at = match problems.iter().position(|(id, _, _)| *id == r.task_id) {
            Some(at) => at,
            None => {
                problems.push((&r.task_id, vec![0; methods], 0));
                problems.len() - 1
            }
        };
        let (_, passes, answers) = &mut problems[at];
        for (n, a) in passes.iter_mut().zip(&r.attempts) {
            *n += u64::from(a.outcome.verdict == Verdict::Passed);
        }
        *answers += 1;
    }
    let nan = [f64::NAN; 2];
    if problems.is_empty() || methods < 2 {
        return vec![(nan, nan); methods];
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut pass = vec![Vec::with_capacity(RESAMPLES); methods];
    let mut ratio = vec![Vec::with_capacity(RESAMPLES); methods];
    let count = problems.len() as u64;
    for _ in 0..RESAMPLES {
        let mut passes = vec![0u64; methods];
        let mut answers = 0u64;
        for _ in 0..count {
            // Uniform in 0..count (multiply-shift: no modulo bias worth a thought at 2^64).
            let at = ((u128::from(rng.next_u64()) * u128::from(count)) >> 64) as usize;
            let (_, p, a) = &problems[at];
            for (n, x) in passes.iter_mut().zip(p) {
                *n += x;
            }
            answers += a;
        }
        for m in 0..methods {
            pass[m].push(passes[m] as f64 / answers as f64);
            if passes[1] > 0 {
                ratio[m].push(passes[m] as f64 / passes[1] as f64);
            }
        }
    }
    let percentiles = |mut v: Vec<f64>| {
        if v.is_empty() {
            return nan;
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
        [at(0.025), at(0.975)]
    };
    pass.into_iter()
        .zip(ratio)
        .map(|(p, r)| (percentiles(p), percentiles(r)))
        .collect()
}

/// `x %` with its interval, `[lo–hi]`, when the interval is known.
fn percent_with(x: f64, ci: [f64; 2]) -> String {
    if ci.iter().all(|v| v.is_finite()) {
        format!(
            "{:.1} % [{:.1}–{:.1}]",
            100.0 * x,
            100.0 * ci[0],
            100.0 * ci[1]
        )
    } else {
        format!("{:.1} %", 100.0 * x)
    }
}

pub(super) fn markdown(r: &EvalRecord) -> String {
    let mut s = String::new();
    let seeds = match r.seeds.as_slice() {
        [one] => format!("seed {one}"),
        [first, .., last] => format!("seeds {first}–{last} (paired)"),
        [] => "no seed".to_string(),
    };
    let _ = writeln!(
        s,
        "HumanEval · {} problems · {} · drafter {} · k={} · T={} · max {} tokens · {seeds}",
        r.problems, r.model, r.drafter, r.k, r.temperature, r.max_tokens
    );
    let _ = writeln!(s, "sandbox: {}\n", r.isolation);
    let _ = writeln!(
        s,
        "| method | pass@1 [95 % interval] | of strict [95 % interval] | speedup | τ | tok/s | relaxed | moved mass | won / lost vs strict |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for m in &r.methods {
        // With several seeds the lists run long: counts here, the answers in eval.json.
        let changes = |v: &[String]| {
            if v.is_empty() {
                "—".to_string()
            } else if r.seeds.len() > 1 {
                v.len().to_string()
            } else {
                v.join(", ")
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} ({}/{}) | {} | {:.2}× | {:.2} | {:.1} | {:.1} % | {:.2} | {} / {} |",
            m.method,
            percent_with(m.pass_at_1, m.pass_at_1_ci),
            m.passed,
            r.answers,
            percent_with(m.of_strict, m.of_strict_ci),
            m.speedup,
            m.summary.tau,
            m.summary.tokens_per_second,
            100.0 * m.summary.relaxed_share,
            m.summary.ledger.distance,
            changes(&m.won),
            changes(&m.lost),
        );
    }
    let _ = writeln!(
        s,
        "\nDefault rule (highest speedup with pass@1 ≥ {:.0} % of strict's): {}",
        100.0 * KEEP_OF_STRICT,
        r.default_choice
            .as_deref()
            .unwrap_or("no relaxed setting qualifies")
    );
    s
}

/// eval.svg: pass@1 against speedup, one point per method, each named in the legend (the points
/// of the relaxed settings sit within a few percent of each other, where labels beside them
/// would overlap), the axes fitted to the points, and the defaults' bar (99 % of strict's pass@1)
/// drawn as a dashed line.
pub(super) fn plot(path: &Path, r: &EvalRecord) -> Result<()> {
    use plotters::prelude::*;
    const GREY: RGBColor = RGBColor(140, 140, 140);
    const ORANGE: RGBColor = RGBColor(230, 120, 0);
    const PURPLE: RGBColor = RGBColor(128, 50, 160);
    const TEAL: RGBColor = RGBColor(0, 128, 128);
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("plotting: {e}");
    let root = SVGBackend::new(path, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let xs = r.methods.iter().map(|m| m.speedup);
    let ys = r.methods.iter().map(|m| 100.0 * m.pass_at_1);
    let (lo_x, hi_x) = xs.fold((1.0f64, 1.0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (lo_y, hi_y) = ys.fold((100.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let pad_x = 0.1 * (hi_x - lo_x).max(0.1);
    let x_range = (lo_x - pad_x).max(0.0)..hi_x + pad_x;
    let y_range = (lo_y - 5.0).max(0.0)..(hi_y + 5.0).min(100.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "HumanEval pass@1 against speedup · {} · k = {}",
                file_names(&r.drafter),
                r.k
            ),
            ("sans-serif", 14),
        )
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(x_range.clone(), y_range)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("speedup over target-only")
        .y_desc("pass@1 (%)")
        .draw()
        .map_err(|e| err(&e))?;
    if let Some(strict) = r.methods.iter().find(|m| m.method == "strict") {
        let bar = 99.0 * strict.pass_at_1;
        chart
            .draw_series(DashedLineSeries::new(
                [(x_range.start, bar), (x_range.end, bar)],
                6,
                4,
                GREY.into(),
            ))
            .map_err(|e| err(&e))?
            .label("99 % of strict's pass@1 (the defaults' bar)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], GREY));
    }
    let palette = [BLACK, BLUE, RED, ORANGE, PURPLE, TEAL, GREEN, MAGENTA, CYAN];
    for (i, m) in r.methods.iter().enumerate() {
        let color = palette[i % palette.len()];
        let at = (m.speedup, 100.0 * m.pass_at_1);
        chart
            .draw_series([Circle::new(at, 5, color.filled())])
            .map_err(|e| err(&e))?
            .label(format!(
                "{}: {:.1} %, {:.2}×",
                m.method,
                100.0 * m.pass_at_1,
                m.speedup
            ))
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// `s` with every path in it cut to its file name (the plot's caption has room for names only).
pub(super) fn file_names(s: &str) -> String {
    s.split(' ')
        .map(|w| w.rsplit('/').next().unwrap_or(w))
        .collect::<Vec<_>>()
        .join(" ")
}
