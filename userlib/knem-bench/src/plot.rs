//! PNG plots of a report (plotters' bitmap backend, pure Rust: works in a
//! static binary). Text needs a TrueType font found at run time; without
//! one the plot is drawn without any text rather than failing.

use crate::err;
use crate::error::Result;
use crate::report::Record;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::collections::BTreeMap;
use std::path::Path;

/// Where a font may be. `KNEM_BENCH_FONT` comes first.
const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Register a font for "sans-serif"; false when none could be loaded.
fn load_font() -> bool {
    let env = std::env::var("KNEM_BENCH_FONT").ok();
    if env.as_deref() == Some("none") {
        return false;
    }
    for p in env.iter().map(String::as_str).chain(FONTS) {
        if let Ok(bytes) = std::fs::read(p) {
            // plotters keeps the font for the life of the program
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// One chart: a title, axis names, and named (x, y) series.
pub struct Panel {
    /// Title.
    pub title: String,
    /// x axis.
    pub xlabel: String,
    /// y axis.
    pub ylabel: String,
    /// x values are byte sizes (labelled 4K, 1M); else plain counts. The
    /// x axis is always logarithmic.
    pub xsize: bool,
    /// (name, points) in legend order.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

fn group(
    recs: &[&Record],
    key: impl Fn(&Record) -> String,
    xy: impl Fn(&Record) -> Option<(f64, f64)>,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut order: Vec<String> = Vec::new();
    let mut m: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in recs {
        let k = key(r);
        if let Some(p) = xy(r) {
            if !m.contains_key(&k) {
                order.push(k.clone());
            }
            m.entry(k).or_default().push(p);
        }
    }
    order
        .into_iter()
        .map(|k| {
            let mut v = m.remove(&k).unwrap_or_default();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (k, v)
        })
        .collect()
}

/// The charts that describe these records.
pub fn panels(recs: &[Record]) -> Vec<Panel> {
    let mut out = Vec::new();
    let of = |b: &str| -> Vec<&Record> { recs.iter().filter(|r| r.bench == b).collect() };
    for cache in ["hot", "off"] {
        let v: Vec<&Record> = of("pingpong")
            .into_iter()
            .filter(|r| r.cache == cache)
            .collect();
        if !v.is_empty() {
            out.push(Panel {
                title: format!(
                    "pingpong, {} buffers",
                    if cache == "hot" {
                        "cache-hot"
                    } else {
                        "off-cache"
                    }
                ),
                xlabel: "message size (bytes)".into(),
                ylabel: "MiB/s (one way)".into(),
                xsize: true,
                series: group(
                    &v,
                    |r| r.mechanism.clone(),
                    |r| Some((r.size as f64, r.mib_s)),
                ),
            });
        }
    }
    let v = of("contention");
    if !v.is_empty() {
        out.push(Panel {
            title: "one-to-all contention".into(),
            xlabel: "concurrent readers".into(),
            ylabel: "aggregate MiB/s".into(),
            xsize: false,
            series: group(
                &v,
                |r| format!("{} {}", r.mechanism, crate::sizes::fmt_size(r.size)),
                |r| Some((r.param as f64, r.aggregate_mib_s?)),
            ),
        });
    }
    let v = of("region-cost");
    if !v.is_empty() {
        out.push(Panel {
            title: "region cost vs CMA".into(),
            xlabel: "size (bytes)".into(),
            ylabel: "us per operation".into(),
            xsize: true,
            series: group(
                &v,
                |r| r.mechanism.clone(),
                |r| (r.median_us > 0.0).then_some((r.size as f64, r.median_us)),
            ),
        });
    }
    let v = of("live-regions");
    if !v.is_empty() {
        out.push(Panel {
            title: "copy cost with N live regions".into(),
            xlabel: "live regions".into(),
            ylabel: "us per copy".into(),
            xsize: true,
            series: group(
                &v,
                |r| format!("{} {}", r.mechanism, crate::sizes::fmt_size(r.size)),
                |r| Some((r.param as f64, r.median_us)),
            ),
        });
    }
    let v = of("reuse");
    if !v.is_empty() {
        out.push(Panel {
            title: "region reuse vs declare per copy".into(),
            xlabel: "size (bytes)".into(),
            ylabel: "MiB/s".into(),
            xsize: true,
            series: group(
                &v,
                |r| r.mechanism.clone(),
                |r| Some((r.size as f64, r.mib_s)),
            ),
        });
    }
    let v = of("shm-chunk");
    if !v.is_empty() {
        out.push(Panel {
            title: "shm double copy: chunk size".into(),
            xlabel: "chunk (bytes)".into(),
            ylabel: "MiB/s".into(),
            xsize: true,
            series: group(
                &v,
                |r| format!("{} {}", r.cache, crate::sizes::fmt_size(r.size)),
                |r| Some((r.param as f64, r.mib_s)),
            ),
        });
    }
    out
}

fn bounds(p: &Panel) -> Option<(f64, f64, f64, f64)> {
    let pts = p
        .series
        .iter()
        .flat_map(|s| s.1.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && *y > 0.0);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let mut any = false;
    for &(x, y) in pts {
        any = true;
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !any {
        return None;
    }
    if x1 <= x0 {
        x1 = x0 * 2.0 + 1.0;
    }
    Some((x0.max(1e-9) / 1.2, x1 * 1.2, y0 / 1.5, y1 * 1.5))
}

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    p: &Panel,
    text: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let Some((x0, x1, y0, y1)) = bounds(p) else {
        return Ok(());
    };
    let e = |e: &dyn std::fmt::Display| err!("drawing the plot: {e}");
    let mut b = ChartBuilder::on(area);
    b.margin(12);
    if text {
        b.caption(&p.title, ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(60);
    }
    let mut chart = b
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), (y0..y1).log_scale())
        .map_err(|x| e(&x))?;
    let xfmt = |x: &f64| {
        if p.xsize {
            crate::sizes::fmt_size(x.round() as u64)
        } else {
            format!("{x:.0}")
        }
    };
    let yfmt = |y: &f64| {
        if *y >= 10.0 {
            format!("{y:.0}")
        } else {
            format!("{y:.2}")
        }
    };
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc(p.xlabel.as_str())
            .y_desc(p.ylabel.as_str())
            .x_label_formatter(&xfmt)
            .y_label_formatter(&yfmt);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|x| e(&x))?;
    for (i, (name, pts)) in p.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = pts
            .iter()
            .copied()
            .filter(|(_, y)| *y > 0.0 && y.is_finite())
            .collect();
        let s = chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|x| e(&x))?;
        if text {
            s.label(name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(|x| e(&x))?;
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

/// Render `recs` to a PNG at `path`.
pub fn render(recs: &[Record], path: &Path) -> Result<()> {
    if path.extension().and_then(|e| e.to_str()) != Some("png") {
        return Err(err!(
            "--plot {}: the file name must end in .png",
            path.display()
        ));
    }
    if panels(recs).is_empty() {
        return Err(err!("nothing to plot: no records"));
    }
    let text = load_font();
    if !text {
        eprintln!("knem-bench: no TrueType font found (set KNEM_BENCH_FONT or install fonts-dejavu-core): plotting without text");
    }
    render_with(recs, path, text)
}

/// Render with or without text (text needs a registered font).
fn render_with(recs: &[Record], path: &Path, text: bool) -> Result<()> {
    let panels = panels(recs);
    let cols = panels.len().min(2);
    let rows = panels.len().div_ceil(cols);
    let (w, h) = (800 * cols as u32, 560 * rows as u32);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    let e = |x: &dyn std::fmt::Display| err!("writing {}: {x}", path.display());
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let areas = root.split_evenly((rows, cols));
    for (a, p) in areas.iter().zip(&panels) {
        draw(a, p, text)?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs() -> Vec<Record> {
        let mut v = Vec::new();
        for (bench, mech, cache) in [
            ("pingpong", "memcpy", "hot"),
            ("pingpong", "cma-read", "off"),
            ("contention", "cma-read", "hot"),
            ("reuse", "knem-reuse", "hot"),
        ] {
            for (i, size) in [1024u64, 65536, 1 << 20].into_iter().enumerate() {
                v.push(Record {
                    bench: bench.into(),
                    mechanism: mech.into(),
                    cache: cache.into(),
                    size,
                    param: 1 << i,
                    reps: 1,
                    iters: 1,
                    median_us: 1.0 + i as f64,
                    min_us: 1.0,
                    max_us: 2.0,
                    mib_s: 100.0 * (i + 1) as f64,
                    aggregate_mib_s: Some(150.0),
                    vs_memcpy: None,
                    vs_cma: None,
                    vs_base: None,
                });
            }
        }
        v
    }

    #[test]
    fn one_panel_per_bench_and_cache() {
        let p = panels(&recs());
        let titles: Vec<&str> = p.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(titles.len(), 4, "{titles:?}");
        assert!(titles[0].contains("cache-hot") && titles[1].contains("off-cache"));
        assert_eq!(p[0].series[0].1.len(), 3);
    }

    #[test]
    fn draws_png_with_and_without_text() {
        let dir = std::env::temp_dir().join(format!("knem-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.png");
        render_with(&recs(), &f, false).unwrap();
        assert!(std::fs::read(&f).unwrap().starts_with(b"\x89PNG"));
        if load_font() {
            render_with(&recs(), &f, true).unwrap();
        }
        assert!(render(&recs(), &dir.join("a.svg")).is_err());
        assert!(render(&[], &dir.join("b.png")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
