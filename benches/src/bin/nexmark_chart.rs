//! `nexmark-chart`: draws the Nexmark table that `nexmark --csv` writes as a
//! PNG: per query, events per CPU-second (start-up excluded) of native
//! Rust, Weir at each parallelism and Flink, as grouped bars on a log
//! scale.
//!
//! ```text
//! target/release/nexmark-chart benches/nexmark/results.csv benches/nexmark/nexmark.png
//! ```
//!
//! Text needs a TrueType font: DejaVu Sans from Debian's `fonts-dejavu-core`
//! by default, or the file `NEXMARK_CHART_FONT` names. Nothing is fetched.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use plotters::prelude::*;
use plotters::style::FontStyle;

const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// One bar: a system at a parallelism, events per CPU-second.
struct Bar {
    series: String,
    rate: f64,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        bail!("usage: nexmark-chart RESULTS.csv OUT.png");
    }
    let font = std::env::var("NEXMARK_CHART_FONT").unwrap_or_else(|_| DEFAULT_FONT.into());
    let bytes = std::fs::read(&font).with_context(|| format!("font {font}"))?;
    // plotters keeps registered fonts for the program's life.
    plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into()))
        .map_err(|_| anyhow::anyhow!("{font} is not a font plotters can read"))?;

    let text = std::fs::read_to_string(&args[1]).with_context(|| args[1].clone())?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().context("empty CSV")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("no column {name}"))
    };
    let (q, sys, p, ev, cpu, scpu) = (
        col("query")?,
        col("system")?,
        col("parallelism")?,
        col("events")?,
        col("cpu_s")?,
        col("startup_cpu_s")?,
    );
    // Queries in the CSV's order; series in a fixed order.
    let mut queries: Vec<String> = Vec::new();
    let mut bars: BTreeMap<String, Vec<Bar>> = BTreeMap::new();
    // The events per query: one number, or the range where queries were
    // run at different sizes.
    let (mut fewest, mut most) = (f64::INFINITY, 0.0f64);
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let query = f[q].to_string();
        if !queries.contains(&query) {
            queries.push(query.clone());
        }
        let events = f[ev].parse::<f64>()?;
        fewest = fewest.min(events);
        most = most.max(events);
        let secs = f[cpu].parse::<f64>()? - f[scpu].parse::<f64>()?;
        bars.entry(query).or_default().push(Bar {
            series: format!("{} p={}", f[sys], f[p]),
            rate: events / secs.max(0.01),
        });
    }
    let mut series: Vec<String> = bars.values().flatten().map(|b| b.series.clone()).collect();
    series.sort_by_key(|s| {
        let rank = ["native", "weir", "flink"]
            .iter()
            .position(|p| s.starts_with(p))
            .unwrap_or(3);
        (rank, s.clone())
    });
    series.dedup();
    let colors = [
        RGBColor(120, 120, 120),
        RGBColor(31, 119, 180),
        RGBColor(100, 170, 230),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
    ];

    let max = bars.values().flatten().map(|b| b.rate).fold(1.0, f64::max);
    let min = bars
        .values()
        .flatten()
        .map(|b| b.rate)
        .fold(f64::MAX, f64::min);
    let (lo, hi) = (min / 2.0, max * 2.0);

    let root = BitMapBackend::new(&args[2], (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    // Query i is centred on x = i: with one label per unit, plotters puts
    // the labels on the integers.
    let n = queries.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Nexmark, {} events: events per CPU-second (start-up excluded)",
                if fewest == most {
                    format!("{:.0} K", most / 1e3)
                } else {
                    format!("{:.0}–{:.0} K", fewest / 1e3, most / 1e3)
                }
            ),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(queries.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() > 0.01 || i < 0.0 {
                return String::new();
            }
            queries.get(i as usize).cloned().unwrap_or_default()
        })
        .y_desc("events / CPU-s")
        .y_label_formatter(&|y| {
            if *y >= 1e6 {
                format!("{:.1} M", y / 1e6)
            } else {
                format!("{:.0} K", y / 1e3)
            }
        })
        .label_style(("sans-serif", 15))
        .draw()?;
    let width = 0.8 / series.len() as f64;
    for (k, name) in series.iter().enumerate() {
        let color = colors[k % colors.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = queries
            .iter()
            .enumerate()
            .filter_map(|(i, query)| {
                let bar = bars[query].iter().find(|b| &b.series == name)?;
                let x0 = i as f64 - 0.4 + k as f64 * width;
                Some(Rectangle::new(
                    [(x0, lo), (x0 + width * 0.9, bar.rate)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    eprintln!("nexmark-chart: wrote {}", args[2]);
    Ok(())
}
