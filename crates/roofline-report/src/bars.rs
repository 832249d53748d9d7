//! Layout of the time-per-format bar chart: one row per point (format), predicted time as a light bar, measured
//! time as a solid bar beside it, the bound in the bar's colour and words, the fastest row starred.

use serde::Serialize;

use crate::roofline::{best_points, display_names, PALETTE};
use crate::scene::{Anchor, Item, Rgb, Scene, BLACK, GREY, GRID};
use crate::text::text_width;
use crate::{ChartSpec, ReportError};

/// One bar row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BarRow {
    /// Point label (format or scheme).
    pub label: String,
    /// Predicted time, microseconds.
    pub predicted_us: f64,
    /// Measured time, microseconds.
    pub measured_us: Option<f64>,
    /// `memory` or `compute`.
    pub bound: String,
    /// Fastest row of its shape.
    pub best: bool,
}

/// The computed bar chart.
#[derive(Debug, Clone)]
pub struct BarsLayout {
    /// What to draw.
    pub scene: Scene,
    /// The rows, top to bottom.
    pub rows: Vec<BarRow>,
}

fn tint(c: Rgb, f: f64) -> Rgb {
    let m = |v: u8| (v as f64 + (255.0 - v as f64) * f).round() as u8;
    Rgb(m(c.0), m(c.1), m(c.2))
}

fn nice_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} us")
    } else if v >= 10.0 {
        format!("{v:.1} us")
    } else {
        format!("{v:.2} us")
    }
}

fn text(x: f64, y: f64, s: String, size: f64, color: Rgb, anchor: Anchor, class: &'static str) -> Item {
    Item::Text { x, y, text: s, size, color, anchor, vertical: false, class }
}

/// Computes the bar chart of `spec`'s points (best marked when `spec.mark_best`). The height follows the number
/// of rows (at least `spec.height` is not required: the chart is as tall as its rows need).
pub fn bars_layout(spec: &ChartSpec) -> Result<BarsLayout, ReportError> {
    let hw = &spec.hardware;
    let idx: Vec<usize> = (0..spec.points.len())
        .filter(|&i| {
            let t = spec.points[i].prediction.time_us;
            t.is_finite() && t > 0.0
        })
        .collect();
    if idx.is_empty() {
        return Err(ReportError::Empty("no point with a positive predicted time".into()));
    }
    let best = if spec.mark_best { best_points(&spec.points) } else { Vec::new() };
    let star = if crate::text::has_glyph('★') { "★ " } else { "best: " };
    let names = display_names(&spec.points);
    let rows: Vec<BarRow> = idx
        .iter()
        .map(|&i| {
            let p = &spec.points[i];
            BarRow {
                label: names[i].clone(),
                predicted_us: p.prediction.time_us,
                measured_us: p.measurement.as_ref().map(|m| m.time_us).filter(|t| t.is_finite() && *t > 0.0),
                bound: p.prediction.bound.as_str().to_string(),
                best: best.contains(&i),
            }
        })
        .collect();
    let any_measured = rows.iter().any(|r| r.measured_us.is_some());
    // Speed-up against FP16 of the same shape, when FP16 is among the points.
    let shape = |i: usize| {
        let g = &spec.points[i].gemm;
        (g.m, g.n, g.k, g.batch)
    };
    let base: Vec<Option<f64>> = idx
        .iter()
        .map(|&i| {
            idx.iter()
                .find(|&&j| shape(j) == shape(i) && spec.points[j].label.eq_ignore_ascii_case("FP16"))
                .map(|&j| spec.points[j].prediction.time_us)
        })
        .collect();
    let w = spec.width.max(500) as f64;
    let row_h = if any_measured { 34.0 } else { 24.0 };
    let label_w = rows
        .iter()
        .map(|r| text_width(&format!("{}{}", if r.best { star } else { "" }, r.label), 12.0))
        .fold(0.0, f64::max);
    let value = |n: usize, r: &BarRow, measured: bool| -> String {
        if measured {
            let m = r.measured_us.unwrap_or(0.0);
            format!("{} measured ({:.0}% of roof)", fmt_us(m), r.predicted_us / m * 100.0)
        } else {
            let speed = match base[n] {
                Some(b) if !spec.points[idx[n]].label.eq_ignore_ascii_case("FP16") => {
                    format!(", {:.2}x FP16", b / r.predicted_us)
                }
                _ => String::new(),
            };
            format!("{} {}-bound{speed}", fmt_us(r.predicted_us), r.bound)
        }
    };
    let value_w = rows
        .iter()
        .enumerate()
        .flat_map(|(n, r)| [Some(value(n, r, false)), r.measured_us.map(|_| value(n, r, true))])
        .flatten()
        .map(|s| text_width(&s, 11.0))
        .fold(0.0, f64::max);
    let (l, r) = (label_w + 24.0, w - value_w - 24.0);
    if r - l < 120.0 {
        return Err(ReportError::Draw(format!("width {w} too small for the labels")));
    }
    let t = 84.0;
    let b = t + rows.len() as f64 * row_h + 6.0;
    let h = b + 52.0;
    let tmax = rows.iter().flat_map(|r| [Some(r.predicted_us), r.measured_us]).flatten().fold(0.0, f64::max);
    let tmin = rows.iter().flat_map(|r| [Some(r.predicted_us), r.measured_us]).flatten().fold(f64::INFINITY, f64::min);
    // Linear time axis, or logarithmic when the times span more than 30x (several shapes).
    let log = tmax / tmin > 30.0;
    let step = nice_step(tmax);
    let (lo, hi) = if log {
        (10f64.powf(tmin.log10().floor()), 10f64.powf(tmax.log10().ceil()))
    } else {
        (0.0, (tmax / step).ceil() * step)
    };
    let px = |us: f64| {
        if log {
            l + (us.log10() - lo.log10()) / (hi.log10() - lo.log10()) * (r - l)
        } else {
            l + us / hi * (r - l)
        }
    };

    let mut items = Vec::new();
    let shape = spec.points[idx[0]].gemm;
    let one_shape = idx.iter().all(|&i| {
        let g = &spec.points[i].gemm;
        (g.m, g.n, g.k, g.batch) == (shape.m, shape.n, shape.k, shape.batch)
    });
    let title = spec.title.clone().unwrap_or_else(|| {
        if !one_shape {
            return format!("Time per format and shape on {} (source: {})", hw.name, hw.source);
        }
        format!(
            "Time per format, M={} N={} K={}{} on {} (source: {})",
            shape.m,
            shape.n,
            shape.k,
            if shape.batch > 1 { format!(" batch {}", shape.batch) } else { String::new() },
            hw.name,
            hw.source
        )
    });
    let tsize = (16.0 * (w - 20.0) / text_width(&title, 16.0).max(1.0)).clamp(10.0, 16.0);
    items.push(text(w / 2.0, 28.0, title, tsize, BLACK, Anchor::Middle, "title"));

    // Legend row.
    let (mem, comp) = (PALETTE[0], PALETTE[1]);
    let mut lx = l;
    let mut legend = Vec::new();
    let mut swatch = |lx: &mut f64, fill: Rgb, stroke: Rgb, s: &str| {
        legend.push(Item::Rect { x: *lx, y: 46.0, w: 18.0, h: 11.0, fill: Some(fill), stroke: Some((stroke, 1.0)) });
        legend.push(text(*lx + 24.0, 56.0, s.to_string(), 12.0, BLACK, Anchor::Start, "legend"));
        *lx += 24.0 + text_width(s, 12.0) + 18.0;
    };
    swatch(&mut lx, tint(mem, 0.55), mem, "predicted, memory-bound");
    swatch(&mut lx, tint(comp, 0.55), comp, "predicted, compute-bound");
    if any_measured {
        swatch(&mut lx, GREY, GREY, "measured");
    }
    if !best.is_empty() {
        legend.push(text(lx, 56.0, format!("{star}fastest"), 12.0, BLACK, Anchor::Start, "legend"));
    }
    items.push(Item::Group { class: "legend".into(), id: None, data: vec![], items: legend });

    // Grid and axis.
    let mut grid = Vec::new();
    let ticks: Vec<f64> = if log {
        let (d0, d1) = (lo.log10().round() as i32, hi.log10().round() as i32);
        (d0..=d1).flat_map(|d| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(d))).filter(|v| *v <= hi * 1.0001).collect()
    } else {
        (0..).map(|i| i as f64 * step).take_while(|v| *v <= hi + step * 0.01).collect()
    };
    for v in ticks {
        let x = px(v);
        grid.push(Item::Line { pts: vec![(x, t), (x, b)], color: GRID, width: 1.0, dash: false });
        grid.push(text(x, b + 17.0, format!("{}", (v * 1000.0).round() / 1000.0), 12.0, BLACK, Anchor::Middle, "tick"));
    }
    items.push(Item::Group { class: "grid".into(), id: None, data: vec![], items: grid });
    items.push(Item::Line { pts: vec![(l, t), (l, b)], color: BLACK, width: 1.0, dash: false });
    items.push(Item::Line { pts: vec![(l, b), (r, b)], color: BLACK, width: 1.0, dash: false });
    items.push(text(
        (l + r) / 2.0,
        h - 14.0,
        if log { "Time per call (microseconds, log scale)" } else { "Time per call (microseconds)" }.into(),
        13.0,
        BLACK,
        Anchor::Middle,
        "x-label",
    ));

    for (n, row) in rows.iter().enumerate() {
        let y = t + n as f64 * row_h + 4.0;
        let c = if row.bound == "compute" { comp } else { mem };
        let bh = if any_measured { 12.0 } else { 16.0 };
        let mut it = vec![text(
            l - 8.0,
            y + if any_measured { 18.0 } else { 12.5 },
            format!("{}{}", if row.best { star } else { "" }, row.label),
            12.0,
            BLACK,
            Anchor::End,
            "bar-label",
        )];
        let stroke = if row.best { (BLACK, 2.0) } else { (c, 1.0) };
        it.push(Item::Rect {
            x: l,
            y,
            w: px(row.predicted_us) - l,
            h: bh,
            fill: Some(tint(c, 0.55)),
            stroke: Some(stroke),
        });
        it.push(text(
            px(row.predicted_us) + 6.0,
            y + bh - 2.0,
            value(n, row, false),
            11.0,
            BLACK,
            Anchor::Start,
            "value",
        ));
        let mut data = vec![
            ("label", row.label.clone()),
            ("predicted-us", format!("{:.3}", row.predicted_us)),
            ("bound", row.bound.clone()),
        ];
        if let Some(m) = row.measured_us {
            let my = y + bh + 2.0;
            it.push(Item::Rect { x: l, y: my, w: px(m) - l, h: bh, fill: Some(c), stroke: Some(stroke) });
            it.push(text(px(m) + 6.0, my + bh - 2.0, value(n, row, true), 11.0, BLACK, Anchor::Start, "value"));
            data.push(("measured-us", format!("{m:.3}")));
        }
        items.push(Item::Group {
            class: if row.best { "bar best".into() } else { "bar".into() },
            id: Some(format!("bar-{n}")),
            data,
            items: it,
        });
    }
    Ok(BarsLayout { scene: Scene { width: w, height: h, items }, rows })
}
