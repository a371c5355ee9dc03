//! `--plot FILE.png`: committed txn/s against producers, and the EndTxn latency CDF.
//!
//! Text is drawn with plotters' `ab_glyph` backend from a TrueType file found on the system
//! (`TXN_BENCH_FONT`, else DejaVu Sans / Liberation Sans under /usr/share/fonts), so no
//! fontconfig or system font library is needed.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::report::RunResult;

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn load_font() -> anyhow::Result<()> {
    let mut paths: Vec<String> = Vec::new();
    if let Ok(p) = std::env::var("TXN_BENCH_FONT") {
        paths.push(p);
    }
    paths.extend(FONT_CANDIDATES.iter().map(|s| (*s).to_owned()));
    for p in &paths {
        if let Ok(bytes) = std::fs::read(p) {
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Ok(());
            }
        }
    }
    bail!("no usable TrueType font (set TXN_BENCH_FONT=/path/to/font.ttf); tried {paths:?}")
}

fn series_color(i: usize) -> RGBColor {
    const C: [RGBColor; 16] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 0),
        RGBColor(174, 199, 232),
        RGBColor(255, 187, 120),
        RGBColor(152, 223, 138),
        RGBColor(255, 152, 150),
        RGBColor(197, 176, 213),
    ];
    C[i % C.len()]
}

/// Draws `results` into `path` (PNG, 1600x700).
pub(crate) fn plot(results: &[RunResult], path: &Path, title: &str) -> anyhow::Result<()> {
    if results.is_empty() {
        bail!("nothing to plot");
    }
    load_font()?;
    let root = BitMapBackend::new(path, (1600, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let root = root
        .titled(title, ("sans-serif", 26))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (left, right) = root.split_horizontally(800);

    // Series: one per (label, partitions per txn).
    let mut series: BTreeMap<String, Vec<&RunResult>> = BTreeMap::new();
    for r in results {
        series
            .entry(format!("{} ppt={}", r.label, r.partitions_per_txn))
            .or_default()
            .push(r);
    }
    #[allow(clippy::cast_precision_loss)]
    let max_p = results
        .iter()
        .map(|r| r.producers)
        .max()
        .unwrap_or(1)
        .max(2) as f64;
    let max_tps = results
        .iter()
        .map(|r| r.committed_per_s)
        .fold(1.0f64, f64::max);

    let mut chart = ChartBuilder::on(&left)
        .caption("committed txn/s vs producers", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d((0.8f64..max_p * 1.25).log_scale(), 0f64..max_tps * 1.1)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("producers (log)")
        .y_desc("committed txn/s")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, (name, rs)) in series.iter().enumerate() {
        let mut pts: Vec<(f64, f64)> = rs
            .iter()
            .map(|r| {
                #[allow(clippy::cast_precision_loss)]
                let p = r.producers as f64;
                (p, r.committed_per_s)
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = series_color(i);
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 4, c.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    // EndTxn CDF, one line per run.
    let max_ms = results
        .iter()
        .flat_map(|r| r.end_txn_cdf.iter().map(|&(_, us)| us))
        .max()
        .unwrap_or(1000);
    #[allow(clippy::cast_precision_loss)]
    let max_ms = (max_ms as f64 / 1000.0).max(1.0);
    let min_ms = results
        .iter()
        .flat_map(|r| r.end_txn_cdf.iter().map(|&(_, us)| us))
        .min()
        .unwrap_or(10);
    #[allow(clippy::cast_precision_loss)]
    let min_ms = (min_ms as f64 / 1000.0).clamp(0.001, 1.0) * 0.8;
    let mut cdf = ChartBuilder::on(&right)
        .caption("EndTxn latency CDF", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((min_ms..max_ms * 1.2).log_scale(), 0f64..1.0f64)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    cdf.configure_mesh()
        .x_desc("EndTxn latency, ms (log)")
        .y_desc("fraction of EndTxn calls")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut k = 0usize;
    for rs in series.values() {
        for r in rs {
            if r.end_txn_cdf.is_empty() {
                continue;
            }
            let c = series_color(k);
            k += 1;
            #[allow(clippy::cast_precision_loss)]
            let pts: Vec<(f64, f64)> = r
                .end_txn_cdf
                .iter()
                .map(|&(q, us)| ((us as f64 / 1000.0).max(min_ms), q))
                .collect();
            let name = format!("{} ppt={} p={}", r.label, r.partitions_per_txn, r.producers);
            cdf.draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
    }
    cdf.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
