//! What `compare` and `bench` print and write: the totals table, the side-by-side text, and
//! bench's per-category markdown.

use std::fmt::Write as _;

use mars_verify::Mode;

use super::{PromptResult, Settings, Totals};

pub fn mode_label(m: Mode) -> String {
    match m {
        Mode::Strict => "strict".into(),
        Mode::Paper { theta } => format!("MARS θ={theta}"),
        Mode::Margin { rho } => format!("MARS ρ={rho}"),
    }
}

/// One line naming the run's settings.
pub fn settings_line(s: &Settings) -> String {
    format!(
        "drafter {} · k={} · T={} · {} · max {} tokens · seed {} · chat {}",
        s.drafter,
        s.k,
        s.sampling.temperature,
        mode_label(s.mars),
        s.max_tokens,
        s.seed,
        s.chat
    )
}

/// The three methods' totals as a markdown table.
pub fn table(settings: &Settings, t: &Totals) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} prompts · {}", t.prompts, settings_line(settings));
    let _ = writeln!(
        out,
        "| method | tokens | tok/s | speedup | τ | relaxed | NLL | agreement |\n|---|---|---|---|---|---|---|---|"
    );
    for (name, m) in [
        ("target only".to_string(), &t.target),
        ("strict".to_string(), &t.strict),
        (mode_label(settings.mars), &t.mars),
    ] {
        let s = &m.summary;
        let _ = writeln!(
            out,
            "| {name} | {} | {:.1} | {:.2}× | {:.2} | {:.1} % | {:.3} | {:.1} % |",
            s.tokens,
            s.tokens_per_second,
            m.speedup,
            s.tau,
            100.0 * s.relaxed_share,
            s.nll,
            100.0 * m.agreement
        );
    }
    out
}

/// Bench's table: one row per category and one for all prompts.
pub fn bench_markdown(settings: &Settings, cats: &[(String, Totals)], all: &Totals) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "{}\n", settings_line(settings));
    let _ = writeln!(
        md,
        "| category | n | target tok/s | strict speedup | strict τ | MARS speedup | MARS τ | MARS relaxed | NLL target / strict / MARS | MARS agreement | strict agreement |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (name, t) in cats
        .iter()
        .map(|(c, t)| (c.as_str(), t))
        .chain([("all", all)])
    {
        let _ = writeln!(
            md,
            "| {name} | {} | {:.1} | {:.2}× | {:.2} | {:.2}× | {:.2} | {:.1} % | {:.3} / {:.3} / {:.3} | {:.1} % | {:.1} % |",
            t.prompts,
            t.target.summary.tokens_per_second,
            t.strict.speedup,
            t.strict.summary.tau,
            t.mars.speedup,
            t.mars.summary.tau,
            100.0 * t.mars.summary.relaxed_share,
            t.target.summary.nll,
            t.strict.summary.nll,
            t.mars.summary.nll,
            100.0 * t.mars.agreement,
            100.0 * t.strict.agreement,
        );
    }
    md
}

/// Wraps `text` to `width` columns (characters), keeping line breaks.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        for word in para.split(' ') {
            let need = line.chars().count() + usize::from(!line.is_empty()) + word.chars().count();
            if need > width && !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
            while line.chars().count() > width {
                let head: String = line.chars().take(width).collect();
                line = line.chars().skip(width).collect();
                lines.push(head);
            }
        }
        lines.push(line);
    }
    lines
}

pub fn side_by_side(r: &PromptResult, mars: Mode) -> String {
    const W: usize = 38;
    let cols = [
        ("target only".to_string(), &r.target),
        ("strict".to_string(), &r.strict),
        (mode_label(mars), &r.mars),
    ];
    let wrapped: Vec<Vec<String>> = cols.iter().map(|(_, m)| wrap(&m.output.text, W)).collect();
    let rows = wrapped.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "prompt: {}", r.prompt.replace('\n', " "));
    let header: Vec<String> = cols
        .iter()
        .map(|(name, m)| {
            format!(
                "{name} · {:.1} tok/s · τ {:.2} · {} relaxed",
                m.output.summary.tokens_per_second, m.output.summary.tau, m.output.summary.relaxed
            )
        })
        .collect();
    let _ = writeln!(out, "{}", pad_row(&header, W));
    let _ = writeln!(out, "{}", pad_row(&vec!["-".repeat(W); 3], W));
    for i in 0..rows {
        let row: Vec<String> = wrapped
            .iter()
            .map(|w| w.get(i).cloned().unwrap_or_default())
            .collect();
        let _ = writeln!(out, "{}", pad_row(&row, W));
    }
    out
}

fn pad_row(cells: &[String], width: usize) -> String {
    cells
        .iter()
        .map(|c| {
            let c: String = c.chars().take(width).collect();
            let pad = width.saturating_sub(c.chars().count());
            format!("{c}{}", " ".repeat(pad))
        })
        .collect::<Vec<_>>()
        .join(" │ ")
}
