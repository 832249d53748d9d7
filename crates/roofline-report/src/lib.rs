//! # roofline-report
//!
//! Charts, reports and sweep files from predictions and measurements ([`DualPoint`]s):
//!
//! - [`roofline_svg`] / [`roofline_png`]: the log-log roofline (one roof per compute format, ridge points marked
//!   and labelled, predicted points hollow, measured filled and joined to them, best starred, legend beside).
//! - [`bars_svg`] / [`bars_png`]: time per format for one shape (predicted, measured beside it, bound, best).
//! - [`report_markdown`]: limits with ridge points, kernel placement, bottlenecks per phase, opportunities.
//! - [`write_csv`] / [`read_csv`] / [`write_json`] / [`read_json`]: the sweep's files.
//!
//! Both charts are computed once as a [`Scene`] (pixel layout, labels placed greedily so that no two overlap:
//! [`roofline_layout`], [`bars_layout`]) and then written as SVG (stable classes and `data-*` attributes) or
//! rasterized to PNG with plotters' bitmap backend and the bundled DejaVu Sans (no system fonts, no fontconfig).

use std::fmt::Write as _;

mod bars;
mod place;
mod png;
mod roofline;
mod scene;
mod text;

pub use bars::{bars_layout, BarsLayout};
pub use place::BoxF;
pub use roofline::{roofline_layout, LabelBox, LabelKind, RooflineLayout};
pub use scene::{Anchor, Item, Rgb, Scene};

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
    /// Writing a file failed.
    #[error("writing {path}: {msg}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        msg: String,
    },
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
    /// Pixel height (grown when the legend needs more room).
    #[serde(default = "default_h")]
    pub height: u32,
    /// Mark the fastest point of each shape (off for a model's operators, which are not alternatives).
    #[serde(default = "yes")]
    pub mark_best: bool,
}

impl ChartSpec {
    /// A chart of `points` on `hardware` at the default size, best points marked, default title.
    pub fn new(hardware: HardwareProfile, points: Vec<DualPoint>) -> Self {
        ChartSpec { hardware, points, title: None, width: default_w(), height: default_h(), mark_best: true }
    }
}

fn default_w() -> u32 {
    1100
}
fn default_h() -> u32 {
    720
}
fn yes() -> bool {
    true
}

/// Renders a log-log roofline chart (x = FLOP/byte, y = TFLOP/s) as an SVG document.
///
/// Each compute roof is `<g class="roof" data-format="CLASS" data-peak-tflops=.. data-ridge-ai=..>` (flat line
/// and ridge point); each point is `<g class="point" id="point-I" data-label=.. data-time-us=.. data-ai=..
/// data-bound=..>` with a hollow predicted circle and, when measured, a filled circle joined by a line
/// (`data-measured-us`); the best point has class `point best`. Labels are placed by [`roofline_layout`] so that
/// none overlaps another label, a roof label or a marker.
pub fn roofline_svg(spec: &ChartSpec) -> Result<String, ReportError> {
    Ok(roofline_layout(spec)?.scene.to_svg())
}

/// Renders the roofline chart of `spec` as PNG bytes (bundled font, no system fonts).
pub fn roofline_png_bytes(spec: &ChartSpec) -> Result<Vec<u8>, ReportError> {
    png::render(&roofline_layout(spec)?.scene)
}

/// Renders the roofline chart of `spec` to a PNG file at `path`.
pub fn roofline_png(spec: &ChartSpec, path: &std::path::Path) -> Result<(), ReportError> {
    write_file(path, &roofline_png_bytes(spec)?)
}

/// Renders the time-per-format bar chart of `spec` as an SVG document (see [`bars_layout`]).
pub fn bars_svg(spec: &ChartSpec) -> Result<String, ReportError> {
    Ok(bars_layout(spec)?.scene.to_svg())
}

/// Renders the time-per-format bar chart of `spec` as PNG bytes.
pub fn bars_png_bytes(spec: &ChartSpec) -> Result<Vec<u8>, ReportError> {
    png::render(&bars_layout(spec)?.scene)
}

/// Renders the time-per-format bar chart of `spec` to a PNG file at `path`.
pub fn bars_png(spec: &ChartSpec, path: &std::path::Path) -> Result<(), ReportError> {
    write_file(path, &bars_png_bytes(spec)?)
}

fn write_file(path: &std::path::Path, bytes: &[u8]) -> Result<(), ReportError> {
    std::fs::write(path, bytes).map_err(|e| ReportError::Io { path: path.display().to_string(), msg: e.to_string() })
}

/// Writes points as pretty JSON (the sweep's JSON format: an array of [`DualPoint`]).
pub fn write_json(points: &[DualPoint]) -> Result<String, ReportError> {
    Ok(serde_json::to_string_pretty(points)?)
}

/// Reads points from JSON written by [`write_json`].
pub fn read_json(text: &str) -> Result<Vec<DualPoint>, ReportError> {
    Ok(serde_json::from_str(text)?)
}

/// Largest M (tokens per GEMM) counted as decode in the report's per-phase analysis; larger M is prefill.
pub const DECODE_MAX_M: u64 = 64;

/// The phase of a point for the report: `decode` when `gemm.m <= DECODE_MAX_M`, else `prefill`.
pub fn phase_of(p: &DualPoint) -> &'static str {
    if p.gemm.m <= DECODE_MAX_M {
        "decode"
    } else {
        "prefill"
    }
}

/// A picture embedded in the markdown report (a file written beside the .md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportImage {
    /// `decode` or `prefill` (shown in that phase's section), anything else is shown after the limits table.
    pub section: String,
    /// Alt text.
    pub caption: String,
    /// File name relative to the .md.
    pub file: String,
}

/// A number with about four significant digits (`2996`, `50.59`, `0.1234`).
fn num(v: f64) -> String {
    if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn op_text(p: &DualPoint) -> String {
    let g = &p.gemm;
    let kind = if g.m == 1 { "GEMV" } else { "GEMM" };
    let batch = if g.batch > 1 { format!(" x{}", g.batch) } else { String::new() };
    format!("{kind} {}x{}x{}{batch} {}", g.m, g.n, g.k, g.scheme.weights)
}

fn kernel_text(p: &DualPoint) -> String {
    match &p.measurement {
        Some(m) if m.kernel != "unknown" => format!("{} ({})", p.label, m.kernel),
        _ => p.label.clone(),
    }
}

/// Writes the seed-style markdown report: hardware limits with ridge points, kernel placement table (kernel, op,
/// AI, bound, attainable, measured, % of roof), bottleneck analysis per phase (decode: `gemm.m <=`
/// [`DECODE_MAX_M`], prefill otherwise) with its pictures, and the kernels under 70% of their roof.
pub fn report_markdown(hw: &HardwareProfile, points: &[DualPoint], images: &[ReportImage]) -> String {
    use roofline_core::Bound;
    let mut s = String::new();
    let measured = points.iter().filter(|p| p.measurement.is_some()).count();
    let devices: Vec<&str> = {
        let mut d: Vec<&str> =
            points.iter().filter_map(|p| p.measurement.as_ref().map(|m| m.device.as_str())).collect();
        d.sort_unstable();
        d.dedup();
        d
    };
    let _ = writeln!(s, "# Roofline report: {}\n", hw.name);
    let _ = writeln!(
        s,
        "Hardware `{}` (source: {}). {} kernels, {measured} measured{}.\n",
        hw.key,
        hw.source,
        points.len(),
        match devices.as_slice() {
            [] | ["csv"] => String::new(),
            d => format!(" on {}", d.join(", ")),
        }
    );
    let _ = writeln!(s, "## Hardware limits\n");
    let _ = writeln!(s, "| Limit | Value | Ridge point (FLOP/byte) |\n|---|---:|---:|");
    let _ = writeln!(s, "| Memory bandwidth | {} GB/s | - |", num(hw.memory_bandwidth_gb_s));
    for (c, peak) in hw.peak_tflops.iter() {
        let ridge = hw.ridge_ai(c).map(|r| format!("{r:.1}")).unwrap_or_else(|| "-".into());
        let _ = writeln!(s, "| {} peak | {} TFLOP/s | {ridge} |", c.name(), num(peak));
    }
    let _ = writeln!(
        s,
        "\nA kernel whose arithmetic intensity is below the ridge point of its compute format is memory-bound."
    );
    for img in images.iter().filter(|i| i.section != "decode" && i.section != "prefill") {
        let _ = writeln!(s, "\n![{}]({})", img.caption, img.file);
    }
    let _ = writeln!(
        s,
        "\n## Kernel placement\n\n| Kernel | Op | AI (FLOP/byte) | Bound | Attainable (TFLOP/s) | Measured (TFLOP/s) | % of roof |\n|---|---|---:|---|---:|---:|---:|"
    );
    for p in points {
        let pr = &p.prediction;
        let meas = p.measurement.as_ref().map(|m| format!("{:.2}", m.tflops)).unwrap_or_else(|| "-".into());
        let frac = p.fraction_of_roof().map(|f| format!("{:.0}%", f * 100.0)).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {} | {:.2} | {meas} | {frac} |",
            kernel_text(p),
            op_text(p),
            pr.arithmetic_intensity,
            pr.bound.as_str(),
            pr.attainable_tflops
        );
    }
    let _ = writeln!(s, "\n## Bottleneck analysis");
    for (phase, title) in
        [("decode", format!("Decode (M <= {DECODE_MAX_M})")), ("prefill", format!("Prefill (M > {DECODE_MAX_M})"))]
    {
        let ps: Vec<&DualPoint> = points.iter().filter(|p| phase_of(p) == phase).collect();
        if ps.is_empty() {
            continue;
        }
        let _ = writeln!(s, "\n### {title}\n");
        let mem = ps.iter().filter(|p| p.prediction.bound == Bound::Memory).count();
        let _ = writeln!(s, "- {} kernels: {mem} memory-bound, {} compute-bound.", ps.len(), ps.len() - mem);
        // One line per shape: its bound, the fastest format predicted and measured.
        let mut shapes: Vec<(u64, u64, u64, u64)> = Vec::new();
        for p in &ps {
            let k = (p.gemm.m, p.gemm.n, p.gemm.k, p.gemm.batch);
            if !shapes.contains(&k) {
                shapes.push(k);
            }
        }
        for k in shapes {
            let sp: Vec<&&DualPoint> =
                ps.iter().filter(|p| (p.gemm.m, p.gemm.n, p.gemm.k, p.gemm.batch) == k).collect();
            let Some(f) = sp.iter().min_by(|a, b| a.prediction.time_us.total_cmp(&b.prediction.time_us)) else {
                continue;
            };
            let kind = if k.0 == 1 { "GEMV" } else { "GEMM" };
            let batch = if k.3 > 1 { format!(" x{}", k.3) } else { String::new() };
            let mut line = format!(
                "- {kind} {}x{}x{}{batch}: AI {:.1} vs ridge {:.1}, {}-bound; fastest predicted {} {} us",
                k.0,
                k.1,
                k.2,
                f.prediction.arithmetic_intensity,
                f.prediction.ridge_ai,
                f.prediction.bound.as_str(),
                f.label,
                num(f.prediction.time_us)
            );
            let fm = sp
                .iter()
                .filter_map(|p| p.measurement.as_ref().map(|m| (p, m)))
                .min_by(|a, b| a.1.time_us.total_cmp(&b.1.time_us));
            if let Some((p, m)) = fm {
                let _ = write!(
                    line,
                    "; fastest measured {} {} us ({:.0}% of roof)",
                    p.label,
                    num(m.time_us),
                    p.fraction_of_roof().unwrap_or(0.0) * 100.0
                );
            }
            let _ = writeln!(s, "{line}.");
        }
        let fr: Vec<f64> = ps.iter().filter_map(|p| p.fraction_of_roof()).collect();
        if !fr.is_empty() {
            let mean = fr.iter().sum::<f64>() / fr.len() as f64;
            let worst = fr.iter().copied().fold(f64::INFINITY, f64::min);
            let _ = writeln!(
                s,
                "- Measured: {} kernels reach on average {:.0}% of their roof (worst {:.0}%).",
                fr.len(),
                mean * 100.0,
                worst * 100.0
            );
        }
        let lever = if mem * 2 >= ps.len() {
            "Mostly memory-bound: time is bytes moved / bandwidth, so fewer bytes per weight (FP8, INT4, FP4 with \
             their scales) is the lever; compute peaks barely matter here."
        } else {
            "Mostly compute-bound: time is FLOPs / peak of the compute format, so a format with faster tensor cores \
             (FP8, FP4 where native) is the lever; weight-only formats that dequantize to FP16 do not help."
        };
        let _ = writeln!(s, "- {lever}");
        for img in images.iter().filter(|i| i.section == phase) {
            let _ = writeln!(s, "\n![{}]({})", img.caption, img.file);
        }
    }
    let _ = writeln!(s, "\n## Optimization opportunities (under 70% of roof)\n");
    let low: Vec<_> = points.iter().filter(|p| p.fraction_of_roof().is_some_and(|f| f < 0.7)).collect();
    if measured == 0 {
        let _ = writeln!(s, "No measurements in the input (run `roofline sweep --measure` on a GPU to fill them in).");
    } else if low.is_empty() {
        let _ = writeln!(s, "None: every measured kernel reaches at least 70% of its roof.");
    } else {
        let _ = writeln!(
            s,
            "| Kernel | Op | Bound | Roof (us) | Measured (us) | % of roof | Achieved |\n|---|---|---|---:|---:|---:|---|"
        );
        for p in low {
            let Some(m) = &p.measurement else { continue };
            let achieved = match p.prediction.bound {
                Bound::Memory => format!("{} of {} GB/s", num(m.bandwidth_gb_s), num(p.prediction.bandwidth_gb_s)),
                Bound::Compute => format!("{} of {} TFLOP/s", num(m.tflops), num(p.prediction.peak_tflops)),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.0}% | {achieved} |",
                kernel_text(p),
                op_text(p),
                p.prediction.bound.as_str(),
                num(p.prediction.time_us),
                num(m.time_us),
                p.fraction_of_roof().unwrap_or(0.0) * 100.0
            );
        }
    }
    s
}

/// Header of the sweep CSV (see [`write_csv`]).
pub const CSV_HEADER: [&str; 16] = [
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
    "graph_us",
];

/// Writes points as CSV with columns
/// `label,m,n,k,batch,weights,activations,output,flops,bytes,ai,bound,predicted_us,measured_us,error,graph_us`.
/// `weights/activations/output` are canonical format names; `ai` is FLOP/byte; `bound` is `memory|compute`;
/// `measured_us` and `error` (`(measured - predicted) / measured`) are empty when not measured, `graph_us`
/// (the time per launch replayed from a CUDA graph, `--graph`) when not timed so.
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
            p.measurement.as_ref().and_then(|m| m.graph_us).map(|t| t.to_string()).unwrap_or_default(),
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
            // `graph_us`: absent in CSVs written before it existed.
            let graph_us = match rec.get(15).map(str::trim).filter(|g| !g.is_empty()) {
                Some(g) => match g.parse::<f64>() {
                    Ok(v) if v.is_finite() && v > 0.0 => Some(v),
                    Ok(v) => return Err(bad(format!("graph_us must be > 0, got {v}"))),
                    Err(e) => return Err(bad(format!("graph_us: {e}"))),
                },
                None => None,
            };
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
                graph_us,
                host_us: None,
            })
        };
        out.push(DualPoint { label: get(0)?.to_string(), gemm, prediction, measurement });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roofline_core::model::{analyze_model, ModelConfig, ModelRequest};
    use roofline_core::{predict_report, Gemm, Measurement, PredictRequest};

    fn shape_spec(hw: &str, m: u64) -> ChartSpec {
        let hw = HardwareProfile::preset(hw).unwrap();
        let req = PredictRequest { m, n: 4096, k: 4096, batch: 1, schemes: vec![] };
        let rep = predict_report(&req, &hw).unwrap();
        let points = rep
            .rows
            .iter()
            .map(|r| DualPoint {
                label: r.label.clone(),
                gemm: Gemm::batched(1, m, 4096, 4096, true, r.scheme).unwrap(),
                prediction: r.prediction.clone(),
                measurement: None,
            })
            .collect();
        ChartSpec::new(hw, points)
    }

    fn spec() -> ChartSpec {
        shape_spec("seed-gb10", 1)
    }

    fn measure(p: &mut DualPoint, factor: f64) {
        let t = p.prediction.time_us * factor;
        p.measurement = Some(Measurement {
            device: "test-gpu".into(),
            time_us: t,
            time_us_min: t,
            time_us_max: t,
            runs: 1,
            tflops: p.prediction.flops as f64 / t / 1e6,
            bandwidth_gb_s: p.prediction.bytes as f64 / t / 1e3,
            kernel: "k".into(),
            power: None,
            graph_us: None,
            host_us: None,
        });
    }

    fn dsv3_spec(batch: u64) -> ChartSpec {
        let hw = HardwareProfile::preset("h100").unwrap();
        let cfg = ModelConfig::preset("deepseek-v3").unwrap();
        let req = ModelRequest { batch, weights: roofline_core::Format::FP8_E4M3, ..ModelRequest::default() };
        let rep = analyze_model(&cfg, &req, &hw).unwrap();
        let points: Vec<DualPoint> = rep
            .ops
            .iter()
            .filter(|o| o.prediction.flops > 0)
            .map(|o| DualPoint {
                label: o.name.clone(),
                gemm: Gemm::new(1, 1, 1, roofline_core::Scheme::uniform(req.activations)).unwrap(),
                prediction: o.prediction.clone(),
                measurement: None,
            })
            .collect();
        let mut s = ChartSpec::new(hw, points);
        s.mark_best = false;
        s
    }

    fn assert_no_overlap(lay: &RooflineLayout, what: &str) {
        for (i, a) in lay.labels.iter().enumerate() {
            for b in &lay.labels[i + 1..] {
                assert!(!a.bbox.overlaps(&b.bbox), "{what}: {:?} overlaps {:?}", a, b);
            }
            // No leader line runs through another label.
            for (j, b) in lay.labels.iter().enumerate() {
                if let (true, Some((p, q))) = (i != j, b.leader) {
                    assert!(!a.bbox.hits_segment(p, q), "{what}: leader of {:?} crosses {:?}", b.text, a.text);
                }
            }
        }
    }

    #[test]
    fn a_read_stream_draws_its_own_dashed_roof() {
        let plain = roofline_svg(&shape_spec("h100", 1)).unwrap();
        assert!(!plain.contains("read-roof"));
        let mut s = shape_spec("h100", 1);
        s.hardware.read_bandwidth_gb_s = Some(s.hardware.memory_bandwidth_gb_s * 1.08);
        let lay = roofline_layout(&s).unwrap();
        let svg = lay.scene.to_svg();
        assert_eq!(svg.matches("class=\"read-roof\"").count(), 1, "{svg}");
        assert!(svg.contains("stroke-dasharray"));
        assert!(lay.labels.iter().any(|l| l.text.starts_with("reads ")), "{:?}", lay.labels);
        assert_no_overlap(&lay, "read roof");
        roofline_png_bytes(&s).unwrap();
    }

    #[test]
    fn svg_has_one_roof_per_class_and_all_points() {
        for (hw, m) in [("seed-gb10", 1), ("seed-gb10", 2048), ("h100", 1), ("h100", 2048)] {
            let s = shape_spec(hw, m);
            let svg = roofline_svg(&s).unwrap();
            assert_eq!(svg.matches(r#"<g class="roof""#).count(), s.hardware.peak_tflops.iter().count());
            for (c, _) in s.hardware.peak_tflops.iter() {
                assert!(svg.contains(&format!(r#"data-format="{}""#, c.name())), "{hw}: roof {}", c.name());
            }
            assert_eq!(svg.matches(r#"<g class="point"#).count(), s.points.len());
            // One hollow predicted marker per point, plus the legend's sample.
            assert_eq!(svg.matches(r##"r="5" fill="#ffffff""##).count(), s.points.len() + 1);
            for p in &s.points {
                assert!(svg.contains(&format!(r#"data-label="{}""#, p.label)));
                // Every name is written somewhere: on the chart or in the key.
                assert!(svg.contains(&p.label), "{hw}: label {}", p.label);
            }
            let tmin = s.points.iter().map(|p| p.prediction.time_us).fold(f64::INFINITY, f64::min);
            let ties = s.points.iter().filter(|p| p.prediction.time_us <= tmin * 1.001).count();
            assert_eq!(svg.matches(r#"<g class="point best""#).count(), ties);
            assert!(svg.contains(&esc_test(&s.hardware.name)) && svg.contains(&esc_test(&s.hardware.source)));
            assert!(svg.contains("Arithmetic intensity (FLOP/byte)") && svg.contains("Throughput (TFLOP/s)"));
        }
    }

    fn esc_test(s: &str) -> String {
        scene::esc(s)
    }

    #[test]
    fn seed_examples_have_no_overlapping_labels_and_label_every_roof_and_ridge() {
        for (hw, m) in [("seed-gb10", 1), ("seed-gb10", 2048), ("h100", 1), ("h100", 2048)] {
            let s = shape_spec(hw, m);
            let lay = roofline_layout(&s).unwrap();
            assert_no_overlap(&lay, hw);
            assert!(!lay.numbered, "{hw} M={m}: the seed examples fit with names");
            let groups = roofline::roof_groups(&s).len();
            assert_eq!(lay.labels.iter().filter(|l| l.kind == LabelKind::Roof).count(), groups, "{hw}");
            assert_eq!(lay.labels.iter().filter(|l| l.kind == LabelKind::Ridge).count(), groups, "{hw}");
            assert_eq!(lay.points_drawn, s.points.len());
            // Every point name appears in exactly one point label.
            for p in &s.points {
                let n = lay
                    .labels
                    .iter()
                    .filter(|l| l.kind == LabelKind::Point)
                    .filter(|l| l.text.split(|c: char| c == ',' || c.is_whitespace()).any(|w| w == p.label))
                    .count();
                assert_eq!(n, 1, "{hw} M={m}: {} in {n} labels", p.label);
            }
        }
    }

    #[test]
    fn measured_points_are_filled_and_joined_and_labels_still_do_not_overlap() {
        let mut s = shape_spec("h100", 1);
        for (i, p) in s.points.iter_mut().enumerate() {
            measure(p, 1.2 + 0.1 * (i % 4) as f64);
        }
        let svg = roofline_svg(&s).unwrap();
        assert_eq!(svg.matches("data-measured-us=").count(), s.points.len());
        assert!(svg.contains("measured (filled)"));
        assert_no_overlap(&roofline_layout(&s).unwrap(), "measured h100");
    }

    #[test]
    fn a_measured_sweep_of_several_shapes_names_each_point_with_its_shape() {
        let hw = HardwareProfile::preset("h100").unwrap();
        let mut points = Vec::new();
        for (i, m) in [1u64, 16, 128, 1024, 4096].into_iter().enumerate() {
            for f in [roofline_core::Format::FP16, roofline_core::Format::BF16] {
                let gemm = Gemm::new(m, 4096, 4096, roofline_core::Scheme::uniform(f)).unwrap();
                let prediction = roofline_core::predict(&gemm, &hw).unwrap();
                let mut p = DualPoint { label: f.to_string(), gemm, prediction, measurement: None };
                measure(&mut p, 1.05 + 0.3 * (i % 3) as f64);
                points.push(p);
            }
        }
        let s = ChartSpec::new(hw, points);
        let lay = roofline_layout(&s).unwrap();
        assert_no_overlap(&lay, "sweep");
        let svg = lay.scene.to_svg();
        for m in [1, 16, 128, 1024, 4096] {
            assert!(svg.contains(&format!("FP16 {m}x4096x4096")), "FP16 at M={m} named with its shape");
        }
        assert_eq!(svg.matches("data-measured-us=").count(), s.points.len());
    }

    #[test]
    fn model_placement_labels_do_not_overlap() {
        for b in [1, 64] {
            let s = dsv3_spec(b);
            let lay = roofline_layout(&s).unwrap();
            assert_no_overlap(&lay, "deepseek-v3");
            assert_eq!(lay.points_drawn, s.points.len());
            let svg = lay.scene.to_svg();
            assert!(!svg.contains("point best"));
            for p in &s.points {
                assert!(svg.contains(&esc_test(&p.label)), "B={b}: {} missing", p.label);
            }
        }
    }

    #[test]
    fn many_points_switch_to_numbered_key() {
        let mut s = shape_spec("h100", 1);
        let base = s.points.clone();
        for m in [2u64, 4, 8, 16, 32, 64, 128, 256, 512, 1024] {
            for p in &base {
                let mut q = p.clone();
                q.label = format!("{}@{m}", p.label);
                q.gemm = Gemm::new(m, 4096, 4096, p.gemm.scheme).unwrap();
                q.prediction = roofline_core::predict(&q.gemm, &s.hardware).unwrap();
                s.points.push(q);
            }
        }
        let lay = roofline_layout(&s).unwrap();
        assert!(lay.numbered);
        assert_no_overlap(&lay, "many");
        let svg = lay.scene.to_svg();
        assert!(svg.contains(">Key<"));
    }

    #[test]
    fn bars_have_one_row_per_format_with_the_fastest_starred() {
        let mut s = spec();
        let lay = bars_layout(&s).unwrap();
        assert_eq!(lay.rows.len(), s.points.len());
        let fastest = s.points.iter().map(|p| p.prediction.time_us).fold(f64::INFINITY, f64::min);
        let best: Vec<_> = lay.rows.iter().filter(|r| r.best).collect();
        assert_eq!(best.len(), s.points.iter().filter(|p| p.prediction.time_us <= fastest * 1.001).count());
        assert!(best.iter().all(|r| r.predicted_us <= fastest * 1.001));
        for (r, p) in lay.rows.iter().zip(&s.points) {
            assert_eq!(r.label, p.label);
            assert_eq!(r.bound, p.prediction.bound.as_str());
            assert!(r.measured_us.is_none());
        }
        let svg = bars_svg(&s).unwrap();
        assert_eq!(svg.matches(r#"<g class="bar"#).count(), s.points.len());
        assert!(svg.contains("memory-bound"));
        // Measured bars appear beside the predicted ones, with % of roof.
        measure(&mut s.points[0], 2.0);
        let lay = bars_layout(&s).unwrap();
        assert_eq!(lay.rows[0].measured_us, Some(s.points[0].prediction.time_us * 2.0));
        let svg = lay.scene.to_svg();
        assert_eq!(svg.matches("data-measured-us=").count(), 1);
        assert!(svg.contains("(50% of roof)"));
        // Speed-up against FP16 of the same shape is written beside each other format.
        let fp8 = lay.rows.iter().position(|r| r.label == "FP8_E4M3").unwrap();
        let fp16 = lay.rows.iter().position(|r| r.label == "FP16").unwrap();
        let ratio = lay.rows[fp16].predicted_us / lay.rows[fp8].predicted_us;
        assert!(svg.contains(&format!("{ratio:.2}x FP16")));
        // Several shapes: shape-qualified names, a logarithmic time axis.
        let mut many = spec();
        many.points.extend(shape_spec("seed-gb10", 2048).points);
        let svg = bars_svg(&many).unwrap();
        assert!(svg.contains("Time per format and shape") && svg.contains("log scale"));
        assert!(svg.contains(">FP16 2048x4096x4096<") && svg.contains(">FP16 1x4096x4096<"));
        // Prefill on H100 is compute-bound for the tensor-core formats.
        let svg = bars_svg(&shape_spec("h100", 2048)).unwrap();
        assert!(svg.contains("compute-bound"));
    }

    #[test]
    fn markdown_has_every_section() {
        let mut pts = spec().points;
        pts.extend(shape_spec("seed-gb10", 2048).points);
        measure(&mut pts[0], 2.0);
        measure(&mut pts[1], 1.1);
        let hw = spec().hardware;
        let images = vec![
            ReportImage { section: "decode".into(), caption: "decode roofline".into(), file: "r-decode.png".into() },
            ReportImage { section: "prefill".into(), caption: "prefill roofline".into(), file: "r-prefill.png".into() },
        ];
        let md = report_markdown(&hw, &pts, &images);
        for h in [
            "## Hardware limits",
            "## Kernel placement",
            "## Bottleneck analysis",
            "### Decode",
            "### Prefill",
            "## Optimization opportunities (under 70% of roof)",
        ] {
            assert!(md.contains(h), "missing {h}");
        }
        let decode = md.find("### Decode").unwrap();
        let prefill = md.find("### Prefill").unwrap();
        let dimg = md.find("![decode roofline](r-decode.png)").unwrap();
        assert!(decode < dimg && dimg < prefill, "decode picture in the decode section");
        assert!(md.find("![prefill roofline](r-prefill.png)").unwrap() > prefill);
        for (c, _) in hw.peak_tflops.iter() {
            let ridge = hw.ridge_ai(c).unwrap();
            assert!(md.contains(&format!("| {} peak | ", c.name())) && md.contains(&format!("{ridge:.1} |")));
        }
        // One table row per kernel, and only the 50% kernel is an opportunity.
        assert!(md.matches("\n| ").count() > pts.len());
        let opp = &md[md.find("## Optimization").unwrap()..];
        assert!(opp.contains(&format!("| {} (k) |", pts[0].label)) && opp.contains("| 50% |"));
        assert!(!opp.contains(&format!("| {} (k) |", pts[1].label)));
        assert!(md.contains("1 measured on test-gpu") || md.contains("2 measured on test-gpu"));
    }

    #[test]
    fn png_is_written_with_png_signature_and_size() {
        let s = spec();
        let bytes = roofline_png_bytes(&s).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!((w, h), (s.width, s.height));
        let path = std::env::temp_dir().join(format!("roofline-report-test-{}.png", std::process::id()));
        bars_png(&s, &path).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(&on_disk[..8], b"\x89PNG\r\n\x1a\n");
        let bw = u32::from_be_bytes(on_disk[16..20].try_into().unwrap());
        assert_eq!(bw, s.width);
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
    fn csv_keeps_the_graph_replay_time_and_reads_older_csvs() {
        let mut s = spec();
        measure(&mut s.points[0], 1.25);
        measure(&mut s.points[1], 1.5);
        if let Some(m) = s.points[0].measurement.as_mut() {
            m.graph_us = Some(m.time_us * 0.9);
        }
        let text = write_csv(&s.points).unwrap();
        let back = read_csv(&text, &s.hardware).unwrap();
        let graph = |p: &DualPoint| p.measurement.as_ref().and_then(|m| m.graph_us);
        let want = graph(&s.points[0]).unwrap();
        assert!((graph(&back[0]).unwrap() - want).abs() <= 1e-9 * want);
        assert_eq!((graph(&back[1]), back[1].measurement.is_some()), (None, true));
        // A CSV without the column (written before it existed) still reads, without graph times.
        let old: String =
            text.lines().map(|l| l.rsplit_once(',').map_or(l, |(head, _)| head).to_string() + "\n").collect();
        let back = read_csv(&old, &s.hardware).unwrap();
        assert!(back.iter().all(|p| graph(p).is_none()) && back[0].measurement.is_some());
        // A bad graph time is an error naming the column.
        let bad = text.replacen(&format!(",{}", want), ",-1", 1);
        assert!(read_csv(&bad, &s.hardware).unwrap_err().to_string().contains("graph_us"));
    }

    #[test]
    fn json_round_trip() {
        let s = spec();
        let back = read_json(&write_json(&s.points).unwrap()).unwrap();
        assert_eq!(back, s.points);
    }
}
