//! # roofline-report
//!
//! Roofline charts rendered to SVG strings (stable ids/classes/`data-*` attributes so a web page can make
//! them interactive) and JSON reading/writing of sweep results ([`DualPoint`] lists).
//!
//! Work in progress: PNG output (plotters bitmap backend with a bundled font), CSV, bar charts and the
//! markdown report are not written yet.

use std::fmt::Write as _;

mod png;
pub use png::roofline_png;

use roofline_core::{DualPoint, HardwareProfile};
use serde::{Deserialize, Serialize};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// CSV reading or writing failed.
    #[error("csv: {0}")]
    Csv(#[from] csv::Error),
    /// A CSV row could not be turned into a point.
    #[error("csv row {row}: {msg}")]
    Row {
        /// 1-based data row.
        row: usize,
        /// What was wrong.
        msg: String,
    },
    /// The plotting backend failed.
    #[error("draw: {0}")]
    Draw(String),
    /// Nothing to draw.
    #[error("nothing to plot: {0}")]
    Empty(String),
}

/// What to draw on a roofline chart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChartSpec {
    /// Hardware whose roofs are drawn.
    pub hardware: HardwareProfile,
    /// Points (prediction plus optional measurement).
    pub points: Vec<DualPoint>,
    /// Title override; default names the hardware and its source.
    #[serde(default)]
    pub title: Option<String>,
    /// Pixel width.
    #[serde(default = "default_w")]
    pub width: u32,
    /// Pixel height.
    #[serde(default = "default_h")]
    pub height: u32,
}

fn default_w() -> u32 {
    1000
}
fn default_h() -> u32 {
    700
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Renders a log-log roofline chart (x = FLOP/byte, y = TFLOP/s) as an SVG document.
///
/// Each roof is `<g class="roof" data-format="CLASS" data-peak-tflops=.. data-ridge-ai=..>`; each point is
/// `<g class="point" data-label=.. data-time-us=.. data-ai=.. data-bound=..>` with a hollow predicted circle and,
/// when measured, a filled circle joined by a line.
pub fn roofline_svg(spec: &ChartSpec) -> Result<String, ReportError> {
    let hw = &spec.hardware;
    let roofs: Vec<_> = hw.peak_tflops.iter().collect();
    if roofs.is_empty() {
        return Err(ReportError::Empty(format!("hardware {} has no compute peaks", hw.key)));
    }
    let bw_tb = hw.memory_bandwidth_gb_s / 1000.0;
    let (w, h) = (spec.width as f64, spec.height as f64);
    let (l, r, t, b) = (80.0, w - 160.0, 50.0, h - 60.0);
    let (x0, x1) = (0.1f64.log10(), 10000f64.log10());
    let ymax = roofs.iter().map(|(_, p)| *p).fold(1.0, f64::max) * 2.0;
    let (y0, y1) = ((bw_tb * 0.1 / 2.0).log10(), ymax.log10());
    let px = |ai: f64| l + (ai.max(1e-9).log10() - x0) / (x1 - x0) * (r - l);
    let py = |tf: f64| b - (tf.max(1e-12).log10() - y0) / (y1 - y0) * (b - t);
    let title = spec.title.clone().unwrap_or_else(|| format!("{} ({})", hw.name, hw.source));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/><text id="title" x="{}" y="25" text-anchor="middle" font-size="16">{}</text><rect id="plot-area" x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="black"/><text id="x-label" x="{}" y="{}" text-anchor="middle" font-size="13">Arithmetic intensity (FLOP/byte)</text><text id="y-label" transform="translate(20,{}) rotate(-90)" text-anchor="middle" font-size="13">Throughput (TFLOP/s)</text>"#,
        w / 2.0,
        esc(&title),
        r - l,
        b - t,
        (l + r) / 2.0,
        h - 15.0,
        (t + b) / 2.0
    );
    for (i, (class, peak)) in roofs.iter().enumerate() {
        let ridge = peak / bw_tb;
        let xs = 10f64.powf(x0);
        let color = [
            "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf",
        ][i % 10];
        let _ = write!(
            s,
            r#"<g class="roof" data-format="{n}" data-peak-tflops="{peak}" data-ridge-ai="{ridge:.3}"><polyline fill="none" stroke="{color}" stroke-width="2" points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}"/><circle class="ridge" cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/><text class="roof-label" x="{:.1}" y="{:.1}" font-size="11" fill="{color}">{n} {peak} TFLOP/s, ridge {ridge:.0}</text></g>"#,
            px(xs),
            py(xs * bw_tb),
            px(ridge),
            py(*peak),
            r,
            py(*peak),
            px(ridge),
            py(*peak),
            r + 5.0,
            py(*peak) + 4.0,
            n = class.name()
        );
    }
    let best = spec
        .points
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.prediction.time_us.total_cmp(&b.1.prediction.time_us))
        .map(|(i, _)| i);
    for (i, p) in spec.points.iter().enumerate() {
        let pr = &p.prediction;
        let ai = pr.arithmetic_intensity;
        let tf = pr.flops as f64 / pr.time_us / 1e6;
        let (cx, cy) = (px(ai), py(tf));
        let is_best = best == Some(i);
        let _ = write!(
            s,
            r#"<g class="point{}" id="point-{i}" data-label="{}" data-time-us="{:.3}" data-ai="{:.3}" data-bound="{}"><circle class="predicted" cx="{cx:.1}" cy="{cy:.1}" r="{}" fill="none" stroke="black" stroke-width="{}"/>"#,
            if is_best { " best" } else { "" },
            esc(&p.label),
            pr.time_us,
            ai,
            pr.bound.as_str(),
            if is_best { 7 } else { 5 },
            if is_best { 3.0 } else { 1.5 }
        );
        if let Some(m) = &p.measurement {
            let my = py(m.tflops);
            let _ = write!(
                s,
                r#"<line x1="{cx:.1}" y1="{cy:.1}" x2="{cx:.1}" y2="{my:.1}" stroke="gray"/><circle class="measured" data-time-us="{:.3}" cx="{cx:.1}" cy="{my:.1}" r="5" fill="black"/>"#,
                m.time_us
            );
        }
        let _ = write!(
            s,
            r#"<text class="point-label" x="{:.1}" y="{:.1}" font-size="10">{}</text></g>"#,
            cx + 8.0,
            cy - 6.0 - (i % 3) as f64 * 11.0,
            esc(&p.label)
        );
    }
    s.push_str("</svg>\n");
    Ok(s)
}

/// Writes points as pretty JSON (the sweep's JSON format: an array of [`DualPoint`]).
pub fn write_json(points: &[DualPoint]) -> Result<String, ReportError> {
    Ok(serde_json::to_string_pretty(points)?)
}

/// Reads points from JSON written by [`write_json`].
pub fn read_json(text: &str) -> Result<Vec<DualPoint>, ReportError> {
    Ok(serde_json::from_str(text)?)
}

/// Writes the markdown report: hardware limits with ridge points, kernel placement table, bottleneck summary and
/// the kernels under 70% of their roof. `chart_file` (an SVG written beside the .md) is embedded when given.
pub fn report_markdown(hw: &HardwareProfile, points: &[DualPoint], chart_file: Option<&str>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Roofline report: {}\n\nHardware source: {}\n", hw.name, hw.source);
    let _ = writeln!(s, "## Hardware limits\n\nMemory bandwidth: {} GB/s\n", hw.memory_bandwidth_gb_s);
    let _ = writeln!(s, "| Compute | Peak (TFLOP/s) | Ridge (FLOP/byte) |\n|---|---:|---:|");
    for (c, peak) in hw.peak_tflops.iter() {
        let ridge = hw.ridge_ai(c).map(|r| format!("{r:.1}")).unwrap_or_else(|| "-".into());
        let _ = writeln!(s, "| {} | {peak} | {ridge} |", c.name());
    }
    if let Some(f) = chart_file {
        let _ = writeln!(s, "\n![roofline]({f})");
    }
    let _ = writeln!(
        s,
        "\n## Kernel placement\n\n| Kernel | Op | AI (FLOP/byte) | Bound | Attainable (TFLOP/s) | Measured (TFLOP/s) | % of roof |\n|---|---|---:|---|---:|---:|---:|"
    );
    for p in points {
        let g = &p.gemm;
        let pr = &p.prediction;
        let meas = p.measurement.as_ref().map(|m| format!("{:.2}", m.tflops)).unwrap_or_else(|| "-".into());
        let frac = p.fraction_of_roof().map(|f| format!("{:.0}%", f * 100.0)).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "| {} | {}x{}x{} (batch {}) | {:.2} | {} | {:.2} | {meas} | {frac} |",
            p.label,
            g.m,
            g.n,
            g.k,
            g.batch,
            pr.arithmetic_intensity,
            pr.bound.as_str(),
            pr.attainable_tflops
        );
    }
    let mem = points.iter().filter(|p| p.prediction.bound == roofline_core::Bound::Memory).count();
    let _ = writeln!(
        s,
        "\n## Bottlenecks\n\n{mem} of {} kernels are memory-bound, {} compute-bound.",
        points.len(),
        points.len() - mem
    );
    let _ = writeln!(s, "\n## Optimization opportunities (under 70% of roof)\n");
    let low: Vec<_> = points.iter().filter(|p| p.fraction_of_roof().is_some_and(|f| f < 0.7)).collect();
    if low.is_empty() {
        let _ = writeln!(s, "None among measured kernels.");
    }
    for p in low {
        let _ = writeln!(s, "- {}: {:.0}% of roof", p.label, p.fraction_of_roof().unwrap_or(0.0) * 100.0);
    }
    s
}

/// Header of the sweep CSV (see [`write_csv`]).
pub const CSV_HEADER: [&str; 15] = [
    "label",
    "m",
    "n",
    "k",
    "batch",
    "weights",
    "activations",
    "output",
    "flops",
    "bytes",
    "ai",
    "bound",
    "predicted_us",
    "measured_us",
    "error",
];

/// Writes points as CSV with columns
/// `label,m,n,k,batch,weights,activations,output,flops,bytes,ai,bound,predicted_us,measured_us,error`.
/// `weights/activations/output` are canonical format names; `ai` is FLOP/byte; `bound` is `memory|compute`;
/// `measured_us` and `error` (`(measured - predicted) / measured`) are empty when not measured.
pub fn write_csv(points: &[DualPoint]) -> Result<String, ReportError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER)?;
    for p in points {
        let g = &p.gemm;
        let pr = &p.prediction;
        w.write_record([
            p.label.clone(),
            g.m.to_string(),
            g.n.to_string(),
            g.k.to_string(),
            g.batch.to_string(),
            g.scheme.weights.to_string(),
            g.scheme.activations.to_string(),
            g.scheme.output.to_string(),
            pr.flops.to_string(),
            pr.bytes.to_string(),
            pr.arithmetic_intensity.to_string(),
            pr.bound.as_str().to_string(),
            pr.time_us.to_string(),
            p.measurement.as_ref().map(|m| m.time_us.to_string()).unwrap_or_default(),
            p.error().map(|e| e.to_string()).unwrap_or_default(),
        ])?;
    }
    let bytes = w.into_inner().map_err(|e| ReportError::Row { row: 0, msg: e.to_string() })?;
    String::from_utf8(bytes).map_err(|e| ReportError::Row { row: 0, msg: e.to_string() })
}

/// Reads a CSV written by [`write_csv`]; predictions are recomputed on `hw` from the shape and formats, and a
/// non-empty `measured_us` becomes a [`Measurement`](roofline_core::Measurement) (device `csv`, kernel `unknown`).
pub fn read_csv(text: &str, hw: &HardwareProfile) -> Result<Vec<DualPoint>, ReportError> {
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let mut out = Vec::new();
    for (i, rec) in rd.records().enumerate() {
        let rec = rec?;
        let row = i + 1;
        let bad = |msg: String| ReportError::Row { row, msg };
        let get = |c: usize| rec.get(c).ok_or_else(|| bad(format!("missing column {}", CSV_HEADER[c])));
        let int = |c: usize| -> Result<u64, ReportError> {
            get(c)?.trim().parse().map_err(|e| bad(format!("{}: {e}", CSV_HEADER[c])))
        };
        let fmt = |c: usize| -> Result<roofline_core::Format, ReportError> {
            get(c)?.trim().parse().map_err(|e| bad(format!("{}: {e}", CSV_HEADER[c])))
        };
        let scheme = roofline_core::Scheme { weights: fmt(5)?, activations: fmt(6)?, output: fmt(7)? };
        let gemm = roofline_core::Gemm::batched(int(4)?, int(1)?, int(2)?, int(3)?, true, scheme)
            .map_err(|e| bad(e.to_string()))?;
        let prediction = roofline_core::predict(&gemm, hw).map_err(|e| bad(e.to_string()))?;
        let measured = get(13)?.trim();
        let measurement = if measured.is_empty() {
            None
        } else {
            let t: f64 = measured.parse().map_err(|e| bad(format!("measured_us: {e}")))?;
            if !t.is_finite() || t <= 0.0 {
                return Err(bad(format!("measured_us must be > 0, got {t}")));
            }
            Some(roofline_core::Measurement {
                device: "csv".into(),
                time_us: t,
                time_us_min: t,
                time_us_max: t,
                runs: 1,
                tflops: prediction.flops as f64 / t / 1e6,
                bandwidth_gb_s: prediction.bytes as f64 / t / 1e3,
                kernel: "unknown".into(),
                power: None,
            })
        };
        out.push(DualPoint { label: get(0)?.to_string(), gemm, prediction, measurement });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roofline_core::{predict_report, PredictRequest};

    fn spec() -> ChartSpec {
        let hw = HardwareProfile::presets().unwrap()[0].clone();
        let req = PredictRequest { m: 1, n: 4096, k: 4096, batch: 1, schemes: vec![] };
        let rep = predict_report(&req, &hw).unwrap();
        let gemm =
            |r: &roofline_core::PredictRow| roofline_core::Gemm::batched(1, 1, 4096, 4096, true, r.scheme).unwrap();
        let points = rep
            .rows
            .iter()
            .map(|r| DualPoint {
                label: r.label.clone(),
                gemm: gemm(r),
                prediction: r.prediction.clone(),
                measurement: None,
            })
            .collect();
        ChartSpec { hardware: hw, points, title: None, width: 1000, height: 700 }
    }

    #[test]
    fn svg_has_one_roof_per_class_and_all_points() {
        let s = spec();
        let svg = roofline_svg(&s).unwrap();
        assert_eq!(svg.matches(r#"<g class="roof""#).count(), s.hardware.peak_tflops.iter().count());
        assert_eq!(svg.matches(r#"<g class="point"#).count(), s.points.len());
        for p in &s.points {
            assert!(svg.contains(&format!(r#"data-label="{}""#, p.label)));
        }
    }

    #[test]
    fn csv_round_trip() {
        let s = spec();
        let text = write_csv(&s.points).unwrap();
        assert!(text.starts_with("label,m,n,k,batch,weights,activations,output,flops,bytes,ai,bound"));
        let back = read_csv(&text, &s.hardware).unwrap();
        assert_eq!(back.len(), s.points.len());
        for (a, b) in back.iter().zip(&s.points) {
            assert_eq!(a.label, b.label);
            assert_eq!(a.gemm, b.gemm);
            assert_eq!(a.prediction, b.prediction);
        }
    }

    #[test]
    fn markdown_lists_slow_kernels() {
        let mut s = spec();
        let slow = s.points[0].prediction.time_us * 2.0;
        s.points[0].measurement = Some(roofline_core::Measurement {
            device: "t".into(),
            time_us: slow,
            time_us_min: slow,
            time_us_max: slow,
            runs: 1,
            tflops: s.points[0].prediction.flops as f64 / slow / 1e6,
            bandwidth_gb_s: 0.0,
            kernel: "k".into(),
            power: None,
        });
        let md = report_markdown(&s.hardware, &s.points, Some("roofline.svg"));
        assert!(md.contains("![roofline](roofline.svg)"));
        assert!(md.contains(&format!("- {}: 50% of roof", s.points[0].label)));
        assert!(md.matches("\n| ").count() >= s.points.len());
    }

    #[test]
    fn png_is_written_with_png_signature() {
        let path = std::env::temp_dir().join(format!("roofline-report-test-{}.png", std::process::id()));
        roofline_png(&spec(), &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(bytes.len() > 1000);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn json_round_trip() {
        let s = spec();
        let back = read_json(&write_json(&s.points).unwrap()).unwrap();
        assert_eq!(back, s.points);
    }
}
