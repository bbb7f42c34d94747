//! bench.svg: speedup over target-only and τ per category, strict and MARS side by side.

use std::path::Path;

use anyhow::Result;

use super::report::mode_label;
use super::{Settings, Totals};

/// Two panels: speedup over target-only and τ, per category, strict and MARS side by side.
pub fn plot(path: &Path, cats: &[(String, Totals)], settings: &Settings) -> Result<()> {
    use plotters::prelude::*;
    let n = cats.len();
    let root = SVGBackend::new(path, (120 + 70 * n as u32, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(360);
    let title = format!(
        "{} · k={} · T={} · {}",
        settings.drafter,
        settings.k,
        settings.sampling.temperature,
        mode_label(settings.mars)
    );
    for (area, metric, label) in [
        (&top, 0, "speedup vs target-only"),
        (&bottom, 1, "τ (tokens per target pass)"),
    ] {
        let value = |t: &Totals, mars: bool| {
            let m = if mars { &t.mars } else { &t.strict };
            if metric == 0 {
                m.speedup
            } else {
                m.summary.tau
            }
        };
        let max = cats
            .iter()
            .flat_map(|(_, t)| [value(t, false), value(t, true)])
            .fold(1.0f64, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(
                if metric == 0 { title.as_str() } else { "" },
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(70)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..n as f64, 0f64..max)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n.max(1))
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                cats.get(i).map(|(c, _)| c.clone()).unwrap_or_default()
            })
            .y_desc(label)
            .draw()
            .map_err(plot_err)?;
        for (mars, color) in [(false, BLUE), (true, RED)] {
            let bars = cats.iter().enumerate().map(|(i, (_, t))| {
                let x0 = i as f64 + if mars { 0.5 } else { 0.1 };
                Rectangle::new([(x0, 0.0), (x0 + 0.4, value(t, mars))], color.filled())
            });
            chart
                .draw_series(bars)
                .map_err(plot_err)?
                .label(if mars {
                    mode_label(settings.mars)
                } else {
                    "strict".into()
                })
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        if metric == 0 {
            chart
                .draw_series(LineSeries::new([(0.0, 1.0), (n as f64, 1.0)], BLACK))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

fn plot_err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e}")
}
