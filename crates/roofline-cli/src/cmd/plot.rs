//! `roofline plot` and `roofline report`: roofline charts (SVG/PNG) and markdown reports.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use roofline_core::model::{analyze_model, ModelReport, ModelRequest};
use roofline_core::recommend::Phase;
use roofline_core::{predict_report, DualPoint, Format, Gemm, HardwareProfile, PredictRequest, Scheme};
use roofline_report::{
    bars_png, bars_svg, phase_of, read_csv, read_json, report_markdown, roofline_png, roofline_svg, ChartSpec,
    ReportImage,
};

use super::{parse_format, parse_size};
use crate::hw_args::HwArgs;

/// Flags of `roofline plot`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  roofline plot --hw seed-gb10 --output decode.png                 # 1x4096x4096, every native format\n  roofline plot --hw seed-gb10 --m 2048 --output prefill.svg\n  roofline plot --hw h100 --bars --m 2048 --output bars.png          # time per format\n  roofline plot --hw h100 --bars --input sweep.csv --output b.svg    # with measured bars\n  roofline plot --hw h100 --by-phase --output h100.png              # h100-decode.png and h100-prefill.png\n  roofline plot --hw h100 --input sweep.csv --output measured.svg   # predicted vs measured points\n  roofline plot --hw gb200 --config deepseek-v3 --weights nvfp4 --output dsv3.png   # every op of a model"
)]
pub struct PlotArgs {
    #[command(flatten)]
    pub shape: super::ShapeArgs,
    /// Formats to place (repeatable); default every format the hardware computes natively.
    #[arg(long = "precision", short = 'p', value_parser = parse_format)]
    pub precisions: Vec<Format>,
    /// One chart per phase: decode (M=1) and prefill (M=2048); writes NAME-decode.EXT and NAME-prefill.EXT.
    #[arg(long, conflicts_with_all = ["input", "config"])]
    pub by_phase: bool,
    /// A time-per-format bar chart of the shape (or of --input's points: predicted, measured beside it) instead
    /// of the roofline.
    #[arg(long, conflicts_with = "config")]
    pub bars: bool,
    /// Points from a sweep's CSV or JSON (DualPoints: predicted and measured).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Place every op of this model (preset or config.json) on the roofline (decode, --batch, --seq).
    #[arg(long, value_name = "PRESET|FILE")]
    pub config: Option<String>,
    /// Weight format of the model's linear layers (with --config).
    #[arg(long, default_value = "bf16", value_parser = parse_format)]
    pub weights: Format,
    /// Batch (with --config).
    #[arg(long, default_value = "1", value_parser = parse_size)]
    pub batch: u64,
    /// Context length (with --config).
    #[arg(long, default_value = "1024", value_parser = parse_size)]
    pub seq: u64,
    /// Phase (with --config).
    #[arg(long, default_value = "decode")]
    pub phase: Phase,
    /// Output file: .svg or .png.
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub hw: HwArgs,
}

/// Flags of `roofline report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A sweep's CSV or JSON of DualPoints.
    #[arg(long)]
    pub input: PathBuf,
    /// Markdown file to write; the charts are written beside it: NAME.{svg,png} (all points), NAME-decode and
    /// NAME-prefill (when both phases are present) and NAME-PHASE-bars (when a phase holds one shape).
    #[arg(long, short)]
    pub output: PathBuf,
    #[command(flatten)]
    pub hw: HwArgs,
}

fn shape_points(hw: &HardwareProfile, m: u64, n: u64, k: u64, precisions: &[Format]) -> Result<Vec<DualPoint>> {
    let req = PredictRequest { m, n, k, batch: 1, schemes: precisions.iter().map(|f| Scheme::uniform(*f)).collect() };
    let report = predict_report(&req, hw)?;
    report
        .rows
        .into_iter()
        .map(|r| {
            Ok(DualPoint {
                label: r.label,
                gemm: Gemm::new(m, n, k, r.scheme)?,
                prediction: r.prediction,
                measurement: None,
            })
        })
        .collect()
}

fn load_points(path: &Path, hw: &HardwareProfile) -> Result<Vec<DualPoint>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let points = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => read_json(&text)?,
        Some("csv") => read_csv(&text, hw)?,
        _ => bail!("--input {}: expected a .csv or .json file", path.display()),
    };
    Ok(points)
}

/// Which picture to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chart {
    /// The log-log roofline.
    Roofline,
    /// Time per format.
    Bars,
}

/// Writes the chart of `spec` as SVG or PNG (by `path`'s extension).
pub(crate) fn write_chart(spec: &ChartSpec, chart: Chart, path: &Path) -> Result<()> {
    match (path.extension().and_then(|e| e.to_str()), chart) {
        (Some("svg"), Chart::Roofline) => {
            std::fs::write(path, roofline_svg(spec)?).with_context(|| format!("writing {}", path.display()))?
        }
        (Some("svg"), Chart::Bars) => {
            std::fs::write(path, bars_svg(spec)?).with_context(|| format!("writing {}", path.display()))?
        }
        (Some("png"), Chart::Roofline) => roofline_png(spec, path)?,
        (Some("png"), Chart::Bars) => bars_png(spec, path)?,
        _ => bail!("--output {}: expected a .svg or .png file name", path.display()),
    }
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn shape_title(hw: &HardwareProfile, m: u64, n: u64, k: u64) -> String {
    let phase = if m == 1 { "decode" } else { "prefill" };
    format!("{phase} M={m} N={n} K={k} on {} (source: {})", hw.name, hw.source)
}

/// Every operator of a model analysis as a point (ops without FLOPs, such as embedding lookups, cannot sit on
/// the log-log chart and are left out).
pub(crate) fn model_points(report: &ModelReport) -> Result<Vec<DualPoint>> {
    report
        .ops
        .iter()
        .filter(|o| o.prediction.flops > 0 && o.prediction.time_us > 0.0)
        .map(|o| {
            Ok(DualPoint {
                label: o.name.clone(),
                gemm: Gemm::new(1, 1, 1, Scheme::uniform(report.request.activations))?,
                prediction: o.prediction.clone(),
                measurement: None,
            })
        })
        .collect()
}

/// The kernel-placement chart of a model analysis: every operator on the roofline, no "best" mark.
pub(crate) fn model_chart(report: &ModelReport, hw: &HardwareProfile) -> Result<ChartSpec> {
    let points = model_points(report)?;
    if points.is_empty() {
        bail!("the model has no operator with FLOPs to plot");
    }
    let r = &report.request;
    let mut spec = ChartSpec::new(hw.clone(), points);
    spec.mark_best = false;
    spec.title = Some(format!(
        "{} {} B={} S={} weights {}: operators on {} (source: {})",
        report.model, r.phase, r.batch, r.seq, r.weights, hw.name, hw.source
    ));
    Ok(spec)
}

/// Runs `roofline plot`.
pub fn plot(args: PlotArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    let chart = if args.bars { Chart::Bars } else { Chart::Roofline };
    let (n, k) = (args.shape.n, args.shape.k);
    if args.by_phase {
        let stem = args.output.file_stem().and_then(|s| s.to_str()).unwrap_or("roofline");
        let ext = args.output.extension().and_then(|s| s.to_str()).unwrap_or("svg");
        for (phase, m) in [("decode", 1), ("prefill", 2048)] {
            let mut spec = ChartSpec::new(hw.clone(), shape_points(&hw, m, n, k, &args.precisions)?);
            spec.title = Some(shape_title(&hw, m, n, k));
            if chart == Chart::Bars {
                spec.title = None;
            }
            write_chart(&spec, chart, &args.output.with_file_name(format!("{stem}-{phase}.{ext}")))?;
        }
        return Ok(());
    }
    let spec = if let Some(input) = &args.input {
        ChartSpec::new(hw.clone(), load_points(input, &hw)?)
    } else if let Some(cfg) = &args.config {
        let cfg = super::model::load_config(cfg)?;
        let req = ModelRequest {
            phase: args.phase,
            batch: args.batch,
            seq: args.seq,
            weights: args.weights,
            ..ModelRequest::default()
        };
        model_chart(&analyze_model(&cfg, &req, &hw)?, &hw)?
    } else {
        let m = args.shape.m;
        let mut spec = ChartSpec::new(hw.clone(), shape_points(&hw, m, n, k, &args.precisions)?);
        if chart == Chart::Roofline {
            spec.title = Some(shape_title(&hw, m, n, k));
        }
        spec
    };
    if spec.points.is_empty() {
        bail!("nothing to plot");
    }
    write_chart(&spec, chart, &args.output)
}

/// Runs `roofline report`: the markdown, and beside it the roofline of every point (NAME.svg/.png), one per phase
/// when both phases are present (NAME-decode, NAME-prefill), and a time-per-format bar chart per phase that holds
/// one shape (NAME-PHASE-bars).
pub fn report(args: ReportArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    let points = load_points(&args.input, &hw)?;
    if points.is_empty() {
        bail!("--input {}: no points", args.input.display());
    }
    let stem = args.output.file_stem().and_then(|s| s.to_str()).unwrap_or("report").to_string();
    if let Some(dir) = args.output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let phases: Vec<&str> =
        ["decode", "prefill"].into_iter().filter(|ph| points.iter().any(|p| phase_of(p) == *ph)).collect();
    let mut images = Vec::new();
    // The overview: every point on one roofline (NAME.svg/.png); in the phase's section when there is one phase.
    let mut all = ChartSpec::new(hw.clone(), points.clone());
    all.title = Some(format!("{} (source: {})", hw.name, hw.source));
    for ext in ["svg", "png"] {
        write_chart(&all, Chart::Roofline, &args.output.with_file_name(format!("{stem}.{ext}")))?;
    }
    images.push(ReportImage {
        section: if phases.len() == 1 { phases[0].into() } else { "overview".into() },
        caption: "roofline, all kernels".into(),
        file: format!("{stem}.png"),
    });
    for phase in phases.iter().copied() {
        let ps: Vec<DualPoint> = points.iter().filter(|p| phase_of(p) == phase).cloned().collect();
        let one_shape = ps.iter().all(|p| {
            let (a, b) = (&p.gemm, &ps[0].gemm);
            (a.m, a.n, a.k, a.batch) == (b.m, b.n, b.k, b.batch)
        });
        let mut spec = ChartSpec::new(hw.clone(), ps);
        if phases.len() > 1 {
            spec.title = Some(format!("{phase}: {} (source: {})", hw.name, hw.source));
            for ext in ["svg", "png"] {
                write_chart(&spec, Chart::Roofline, &args.output.with_file_name(format!("{stem}-{phase}.{ext}")))?;
            }
            images.push(ReportImage {
                section: phase.into(),
                caption: format!("{phase} roofline"),
                file: format!("{stem}-{phase}.png"),
            });
        }
        if one_shape && spec.points.len() > 1 {
            spec.title = None;
            for ext in ["svg", "png"] {
                write_chart(&spec, Chart::Bars, &args.output.with_file_name(format!("{stem}-{phase}-bars.{ext}")))?;
            }
            images.push(ReportImage {
                section: phase.into(),
                caption: format!("{phase} time per format"),
                file: format!("{stem}-{phase}-bars.png"),
            });
        }
    }
    let md = report_markdown(&hw, &points, &images);
    std::fs::write(&args.output, md).with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!("wrote {}", args.output.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_chart_places_every_op_with_flops_and_marks_no_best() {
        let hw = HardwareProfile::preset("h100").unwrap();
        let cfg = super::super::model::load_config("deepseek-v3").unwrap();
        let report = analyze_model(&cfg, &ModelRequest::default(), &hw).unwrap();
        let spec = model_chart(&report, &hw).unwrap();
        let with_flops = report.ops.iter().filter(|o| o.prediction.flops > 0).count();
        assert_eq!(spec.points.len(), with_flops);
        assert!(with_flops < report.ops.len(), "the embedding lookup has no FLOPs and is left out");
        assert!(!spec.mark_best);
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("m.svg");
        write_chart(&spec, Chart::Roofline, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert_eq!(text.matches(r#"<g class="point""#).count(), with_flops);
        assert!(text.contains("DeepSeek-V3") && text.contains(&hw.name));
    }

    #[test]
    fn bars_chart_is_written_as_svg_and_png() {
        let hw = HardwareProfile::preset("seed-gb10").unwrap();
        let points = shape_points(&hw, 1, 4096, 4096, &[]).unwrap();
        let n = points.len();
        let spec = ChartSpec::new(hw, points);
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("b.svg");
        write_chart(&spec, Chart::Bars, &svg).unwrap();
        assert_eq!(std::fs::read_to_string(&svg).unwrap().matches(r#"<g class="bar"#).count(), n);
        let png = dir.path().join("b.png");
        write_chart(&spec, Chart::Bars, &png).unwrap();
        assert_eq!(&std::fs::read(&png).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
        assert!(write_chart(&spec, Chart::Bars, &dir.path().join("b.gif")).is_err());
    }
}
