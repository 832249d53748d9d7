//! GPU commands: `roofline gpu info`, `roofline calibrate`, `roofline measure`.

use anyhow::{Context, Result};
use clap::Args;
use roofline_core::{predict, DualPoint, Format, Gemm, Scheme};
use roofline_gpu::{Gpu, TimingConfig};

use super::parse_format;
use crate::hw_args::HwArgs;
use crate::output::{print_json, sig3, table};

/// Flags of `roofline gpu info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// GPU index.
    #[arg(long, default_value = "0")]
    pub device: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `roofline calibrate`.
#[derive(Debug, Args)]
#[command(
    after_help = "Writes a hardware profile measured on this GPU; use it everywhere with --hw FILE:\n  roofline calibrate --output h100-measured.toml\n  roofline predict --hw h100-measured.toml"
)]
pub struct CalibrateArgs {
    /// GPU index.
    #[arg(long, default_value = "0")]
    pub device: usize,
    /// Where to write the profile (TOML); default: print it.
    #[arg(long, short)]
    pub output: Option<std::path::PathBuf>,
}

/// Flags of `roofline measure`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  roofline measure --m 4096 --n 4096 --k 4096 --precision fp16 --hw h100")]
pub struct MeasureArgs {
    #[command(flatten)]
    pub shape: super::ShapeArgs,
    /// Precision (FP16, BF16, FP32 are measured today).
    #[arg(long, short = 'p', default_value = "fp16", value_parser = parse_format)]
    pub precision: Format,
    /// GPU index.
    #[arg(long, default_value = "0")]
    pub device: usize,
    /// Hardware profile the prediction uses (a datasheet preset or a calibrated TOML file).
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON (a DualPoint: prediction, measurement).
    #[arg(long)]
    pub json: bool,
}

/// Runs `roofline gpu info`.
pub fn info(args: InfoArgs) -> Result<()> {
    let gpu = Gpu::open(args.device)?;
    let v = serde_json::json!({
        "name": gpu.name,
        "compute_capability": format!("{}.{}", gpu.compute_capability.0, gpu.compute_capability.1),
        "sm_count": gpu.sm_count,
        "l2_bytes": gpu.l2_bytes,
        "smem_per_sm_bytes": gpu.smem_per_sm,
        "memory_bytes": gpu.total_mem,
        "clock_mhz": gpu.clock_mhz,
    });
    if args.json {
        return print_json(&v);
    }
    for (k, val) in v.as_object().into_iter().flatten() {
        println!("{k:<20} {val}");
    }
    Ok(())
}

/// Runs `roofline calibrate`.
pub fn calibrate(args: CalibrateArgs) -> Result<()> {
    let gpu = Gpu::open(args.device)?;
    let profile = gpu.calibrate(|step| eprintln!("calibrate: {step} ..."))?;
    let text = profile.to_toml();
    match args.output {
        Some(path) => {
            std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// Runs `roofline measure`.
pub fn measure(args: MeasureArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    let gemm =
        Gemm::new(args.shape.m, args.shape.n, args.shape.k, Scheme::weight_only(args.precision, args.precision))?;
    let prediction = predict(&gemm, &hw)?;
    let gpu = Gpu::open(args.device)?;
    let size = |v: u64| usize::try_from(v).context("size does not fit this machine");
    let m = gpu.measure_gemm(
        size(args.shape.m)?,
        size(args.shape.n)?,
        size(args.shape.k)?,
        args.precision,
        &TimingConfig::default(),
    )?;
    let point = DualPoint { label: args.precision.to_string(), gemm, prediction, measurement: Some(m) };
    if args.json {
        return print_json(&point);
    }
    let (p, meas) = (&point.prediction, point.measurement.as_ref().context("measurement")?);
    println!(
        "{} {}x{}x{} on {} (prediction: {} [{}])",
        args.precision, args.shape.m, args.shape.n, args.shape.k, meas.device, hw.name, hw.source
    );
    let mut t = table(&["", "Time us", "TFLOP/s", "GB/s", "% peak BW", "% peak compute", "Bound"]);
    t.add_row(vec![
        "predicted".into(),
        sig3(p.time_us),
        sig3(p.attainable_tflops),
        sig3(p.bytes as f64 / (p.time_us * 1e3)),
        "-".into(),
        "-".into(),
        p.bound.as_str().into(),
    ]);
    t.add_row(vec![
        "measured".into(),
        format!(
            "{} (min {}, max {}, {} runs)",
            sig3(meas.time_us),
            sig3(meas.time_us_min),
            sig3(meas.time_us_max),
            meas.runs
        ),
        sig3(meas.tflops),
        sig3(meas.bandwidth_gb_s),
        format!("{:.1}%", 100.0 * meas.bandwidth_gb_s / p.bandwidth_gb_s),
        format!("{:.1}%", 100.0 * meas.tflops / p.peak_tflops),
        String::new(),
    ]);
    println!("{t}");
    println!("error (measured - predicted) / measured: {:+.1}%", 100.0 * point.error().unwrap_or(f64::NAN));
    Ok(())
}
