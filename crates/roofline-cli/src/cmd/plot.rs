//! `roofline plot` and `roofline report`: roofline charts (SVG/PNG) and markdown reports.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use roofline_core::model::{analyze_model, ModelRequest};
use roofline_core::recommend::Phase;
use roofline_core::{predict_report, DualPoint, Format, Gemm, HardwareProfile, PredictRequest, Scheme};
use roofline_report::{read_csv, read_json, report_markdown, roofline_png, roofline_svg, ChartSpec};

use super::{parse_format, parse_size};
use crate::hw_args::HwArgs;

/// Flags of `roofline plot`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  roofline plot --hw seed-gb10 --output decode.png                 # 1x4096x4096, every native format\n  roofline plot --hw seed-gb10 --m 2048 --output prefill.svg\n  roofline plot --hw h100 --by-phase --output h100.png              # h100-decode.png and h100-prefill.png\n  roofline plot --hw h100 --input sweep.csv --output measured.svg   # predicted vs measured points\n  roofline plot --hw gb200 --config deepseek-v3 --weights nvfp4 --output dsv3.png   # every op of a model"
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
    /// Markdown file to write; the chart is written beside it as NAME.svg and NAME.png.
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

fn write_chart(spec: &ChartSpec, path: &Path) -> Result<()> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            std::fs::write(path, roofline_svg(spec)?).with_context(|| format!("writing {}", path.display()))?
        }
        Some("png") => roofline_png(spec, path)?,
        _ => bail!("--output {}: expected a .svg or .png file name", path.display()),
    }
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Runs `roofline plot`.
pub fn plot(args: PlotArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    let spec =
        |points, title: Option<String>| ChartSpec { hardware: hw.clone(), points, title, width: 1000, height: 700 };
    if args.by_phase {
        let stem = args.output.file_stem().and_then(|s| s.to_str()).unwrap_or("roofline");
        let ext = args.output.extension().and_then(|s| s.to_str()).unwrap_or("svg");
        for (phase, m) in [("decode", 1), ("prefill", 2048)] {
            let points = shape_points(&hw, m, args.shape.n, args.shape.k, &args.precisions)?;
            let title = format!("{} ({}) - {phase} {m}x{}x{}", hw.name, hw.source, args.shape.n, args.shape.k);
            write_chart(&spec(points, Some(title)), &args.output.with_file_name(format!("{stem}-{phase}.{ext}")))?;
        }
        return Ok(());
    }
    let (points, title) = if let Some(input) = &args.input {
        (load_points(input, &hw)?, None)
    } else if let Some(cfg) = &args.config {
        let cfg = super::model::load_config(cfg)?;
        let req = ModelRequest {
            phase: args.phase,
            batch: args.batch,
            seq: args.seq,
            weights: args.weights,
            ..ModelRequest::default()
        };
        let report = analyze_model(&cfg, &req, &hw)?;
        let points = report
            .ops
            .iter()
            .filter(|o| o.prediction.flops > 0)
            .map(|o| {
                Ok(DualPoint {
                    label: o.name.clone(),
                    gemm: Gemm::new(1, 1, 1, Scheme::uniform(req.activations))?,
                    prediction: o.prediction.clone(),
                    measurement: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        (
            points,
            Some(format!(
                "{} {} B={} S={} on {} ({})",
                report.model, args.phase, args.batch, args.seq, hw.name, hw.source
            )),
        )
    } else {
        (shape_points(&hw, args.shape.m, args.shape.n, args.shape.k, &args.precisions)?, None)
    };
    if points.is_empty() {
        bail!("nothing to plot");
    }
    write_chart(&spec(points, title), &args.output)
}

/// Runs `roofline report`.
pub fn report(args: ReportArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    let points = load_points(&args.input, &hw)?;
    let stem = args.output.file_stem().and_then(|s| s.to_str()).unwrap_or("report").to_string();
    let spec = ChartSpec { hardware: hw.clone(), points: points.clone(), title: None, width: 1000, height: 700 };
    let svg = args.output.with_file_name(format!("{stem}.svg"));
    write_chart(&spec, &svg)?;
    write_chart(&spec, &args.output.with_file_name(format!("{stem}.png")))?;
    let md = report_markdown(&hw, &points, Some(&format!("{stem}.png")));
    std::fs::write(&args.output, md).with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!("wrote {}", args.output.display());
    Ok(())
}
