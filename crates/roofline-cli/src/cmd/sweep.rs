//! `roofline sweep` and `roofline compare`: grids of shapes x precisions, predicted (and measured on a GPU),
//! with the prediction error.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use roofline_core::{predict, DualPoint, Format, Gemm, HardwareProfile, Scheme};
use roofline_gpu::weight_only::GemvOverride;
use roofline_gpu::{gemm_scheme, Gpu, GpuError, KernelKind, PowerMeter, TimingConfig, GEMM_FORMATS};
use roofline_report::{write_csv, write_json};

use super::parse_format;
use crate::hw_args::HwArgs;
use crate::output::{sig3, table};

/// Shapes of the Llama-3-8B linear layers (N, K): QKV, O, gate+up, down.
const LLAMA_NK: [(u64, u64); 4] = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)];

/// Batch sizes of the `batch` shape set: the decode regime of the weight-only kernels (M <= 16).
const BATCH_M: [u64; 6] = [1, 2, 4, 8, 12, 16];

/// Flags of `roofline sweep`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  roofline sweep --hw h100 --shapes llama                         # prediction only\n  roofline sweep --hw measured.toml --shapes llama --measure      # on a GPU: DualPoints with errors\n  roofline sweep --shapes decode -p fp16 -p fp8 -p int4 --out-dir results/\n  roofline sweep --shapes batch --weight-only --measure           # how each format's GEMVs scale with the batch"
)]
pub struct SweepArgs {
    /// Shape set: decode (M=1, 16 on 4096x4096 .. 128256x4096), batch (M in 1, 2, 4, 8, 12, 16 on the
    /// Llama-3-8B layers and its LM head), prefill (M=512..8192 on 4096x4096), llama (M in 1, 16, 128,
    /// 1024, 4096 on the Llama-3-8B layers), or a file of `M N K` lines. Measured, every N x K timed at M =
    /// 1 and at other M <= 16 also gets a batch-scaling table: each M's time over M = 1's.
    #[arg(long, default_value = "llama")]
    pub shapes: String,
    /// Precisions (repeatable); default FP16, BF16, FP8_E4M3, INT8. Dense formats (FP32, TF32, FP16, BF16,
    /// FP8, INT8) are swept as cuBLASLt GEMMs; low-bit formats as weight-only with --activations.
    #[arg(long = "precision", short = 'p', value_parser = parse_format)]
    pub precisions: Vec<Format>,
    /// Measure every point on the GPU (needs an NVIDIA GPU; without it the sweep fails, without this flag
    /// it is prediction only).
    #[arg(long)]
    pub measure: bool,
    /// Sweep every precision as weight-only (weights in the format, activations in --activations;
    /// roofline's own GEMV kernels, M <= 16) instead of dense cuBLASLt GEMMs.
    #[arg(long)]
    pub weight_only: bool,
    /// Activations (and outputs) of the weight-only schemes: FP16 or BF16. With BF16 the weight-only
    /// defaults take BF16 weights for FP16's, and the "vs" columns compare with them.
    #[arg(long, default_value = "fp16", value_parser = parse_format)]
    pub activations: Format,
    /// With --measure: also time every weight-only GEMV replayed from a CUDA graph (the CSV's graph_us,
    /// `measurement.graph_us` in the JSON, the table's Graph columns).
    #[arg(long, requires = "measure")]
    pub graph: bool,
    #[command(flatten)]
    pub power: super::telemetry::PowerArgs,
    /// Folder for sweep.csv and sweep.json.
    #[arg(long, default_value = "results")]
    pub out_dir: PathBuf,
    /// GPU index.
    #[arg(long, default_value = "0")]
    pub device: usize,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Also score the measured points against this profile (preset key or TOML file; repeatable), e.g. the
    /// datasheet preset when --hw is a calibrated profile: prints its error summary beside the main one.
    #[arg(long)]
    pub contrast: Vec<String>,
    /// Re-score a previous sweep (its sweep.json or .csv) instead of measuring: the measured times are kept,
    /// the predictions are recomputed with --hw (and --contrast). Writes nothing.
    #[arg(long, conflicts_with = "measure")]
    pub rescore: Option<PathBuf>,
}

/// Flags of `roofline compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub shape: super::ShapeArgs,
    /// Precisions (repeatable); default FP16, BF16, FP8_E4M3, INT8.
    #[arg(long = "precision", short = 'p', value_parser = parse_format)]
    pub precisions: Vec<Format>,
    /// GPU index.
    #[arg(long, default_value = "0")]
    pub device: usize,
    #[command(flatten)]
    pub hw: HwArgs,
    #[command(flatten)]
    pub power: super::telemetry::PowerArgs,
    /// Weight-only schemes (weights in the format, activations in --activations) on roofline's GEMV kernels:
    /// the seeds' decode table (FP16, FP8, INT8, NVFP4, INT4, MXFP4, NF4 by default).
    #[arg(long)]
    pub weight_only: bool,
    /// Activations (and outputs) of the weight-only schemes: FP16 or BF16 (BF16 weights then stand in
    /// for FP16's in the default table and the "vs" columns).
    #[arg(long, default_value = "fp16", value_parser = parse_format)]
    pub activations: Format,
    /// With --weight-only: every format's GEMV with this kernel variant and launch plan instead of the
    /// measured defaults (`key=value` pairs; --help lists the keys).
    #[arg(long, value_name = "KEY=VALUE,...", default_value = "", long_help = super::gemv_help(
        "With --weight-only: run every format's GEMV with this kernel variant and launch plan instead of the \
         measured defaults (a configuration a variant does not take falls back as in the tuning tables)",
        "--gemv variant=xmma,x_smem=true,split_k=4"
    ))]
    pub gemv: GemvOverride,
    /// With --weight-only: also time every GEMV replayed from a CUDA graph (64 or more launches over the
    /// rotating weight sets, captured once), as serving engines launch a decode step: columns "Graph (us)"
    /// and "% of BW graph".
    #[arg(long)]
    pub graph: bool,
}

fn shapes(spec: &str) -> Result<Vec<(u64, u64, u64)>> {
    Ok(match spec {
        "llama" => {
            [1, 16, 128, 1024, 4096].iter().flat_map(|&m| LLAMA_NK.iter().map(move |&(n, k)| (m, n, k))).collect()
        }
        "decode" => [1, 16]
            .iter()
            .flat_map(|&m| [(4096, 4096), (14336, 4096), (4096, 14336), (128_256, 4096)].map(|(n, k)| (m, n, k)))
            .collect(),
        "batch" => BATCH_M
            .iter()
            .flat_map(|&m| LLAMA_NK.iter().chain(&[(128_256, 4096)]).map(move |&(n, k)| (m, n, k)))
            .collect(),
        "prefill" => [512, 1024, 2048, 4096, 8192].iter().map(|&m| (m, 4096, 4096)).collect(),
        path => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--shapes {path}: not decode, batch, prefill, llama, or a readable file"))?;
            text.lines()
                .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .enumerate()
                .map(|(i, l)| {
                    let v: Vec<u64> = l
                        .split_whitespace()
                        .map(str::parse)
                        .collect::<Result<_, _>>()
                        .with_context(|| format!("{path} line {}: expected `M N K`", i + 1))?;
                    match v.as_slice() {
                        [m, n, k] if *m > 0 && *n > 0 && *k > 0 => Ok((*m, *n, *k)),
                        _ => bail!("{path} line {}: expected three integers >= 1 `M N K`", i + 1),
                    }
                })
                .collect::<Result<_>>()?
        }
    })
}

/// A GPU with the settings each measurement uses.
struct Bench<'a> {
    gpu: &'a Gpu,
    meter: Option<super::telemetry::NvmlMeter>,
    cfg: TimingConfig,
    /// Weight-only kernel and plan overrides (`--gemv`).
    gemv: GemvOverride,
}

/// The scheme a precision is swept as: the dense cuBLASLt scheme where there is one, else (or always with
/// `weight_only`) weight-only: weights in the format, `activations` (FP16 or BF16), the decode regime's
/// low-bit path.
fn sweep_scheme(p: Format, weight_only: bool, activations: Format) -> Scheme {
    if GEMM_FORMATS.contains(&p) && !weight_only {
        gemm_scheme(p)
    } else {
        Scheme::weight_only(p, activations)
    }
}

/// `--activations`: the weight-only kernels take FP16 or BF16.
fn check_activations(a: Format) -> Result<()> {
    if a == Format::FP16 || a == Format::BF16 {
        Ok(())
    } else {
        bail!("--activations {a}: the weight-only schemes take FP16 or BF16 activations")
    }
}

fn points(
    hw: &HardwareProfile,
    grid: &[(u64, u64, u64)],
    precisions: &[Format],
    weight_only: bool,
    activations: Format,
    mut bench: Option<Bench<'_>>,
) -> Result<Vec<DualPoint>> {
    let mut out = Vec::new();
    let total = grid.len() * precisions.len();
    let bar = if bench.is_some() { ProgressBar::new(total as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed_precise}, eta {eta}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for (&(m, n, k), &p) in grid.iter().flat_map(|s| precisions.iter().map(move |p| (s, p))) {
        let gemm = Gemm::new(m, n, k, sweep_scheme(p, weight_only, activations))?;
        let prediction = predict(&gemm, hw)?;
        let measurement = match bench.as_mut() {
            Some(b) => {
                bar.set_message(format!("{p} {m}x{n}x{k}"));
                let meter = b.meter.as_mut().map(|m| m as &mut dyn PowerMeter);
                let kind = weight_only.then_some(KernelKind::WeightOnly);
                let r = b.gpu.measure_with(&gemm, kind, &b.cfg, meter, &b.gemv);
                bar.inc(1);
                match r {
                    Ok(meas) => Some(meas),
                    Err(GpuError::Unsupported(why)) => {
                        // A hidden bar (output not a terminal) drops println: the reason goes to stderr then.
                        let line = format!("{p} {m}x{n}x{k}: not measured ({why})");
                        if bar.is_hidden() {
                            eprintln!("{line}");
                        } else {
                            bar.println(line);
                        }
                        None
                    }
                    Err(e) => return Err(e).with_context(|| format!("measuring {p} {m}x{n}x{k}")),
                }
            }
            None => None,
        };
        out.push(DualPoint { label: p.to_string(), gemm, prediction, measurement });
    }
    bar.finish_and_clear();
    Ok(out)
}

fn error_summary(points: &[DualPoint]) -> Option<(f64, f64)> {
    let mut errs: Vec<f64> = points.iter().filter_map(|p| p.error().map(f64::abs)).collect();
    if errs.is_empty() {
        return None;
    }
    errs.sort_by(f64::total_cmp);
    let pick = |q: f64| errs[((errs.len() - 1) as f64 * q).round() as usize];
    Some((pick(0.5), pick(0.9)))
}

/// The 16-bit weights the "vs" columns compare with: FP16, or BF16 where the points have BF16 weights with
/// BF16 activations and no FP16 weights (a weight-only table with BF16 activations).
fn speedup_base(points: &[DualPoint]) -> Format {
    let has = |w: Format, a: Option<Format>| {
        points.iter().any(|p| p.gemm.scheme.weights == w && a.is_none_or(|a| p.gemm.scheme.activations == a))
    };
    if !has(Format::FP16, None) && has(Format::BF16, Some(Format::BF16)) {
        Format::BF16
    } else {
        Format::FP16
    }
}

/// Predicted and measured speed-up of `p` over the `base` point (16-bit weights, [`speedup_base`]) of the
/// same shape, when there is one.
fn speedup(points: &[DualPoint], p: &DualPoint, base: Format) -> (Option<f64>, Option<f64>) {
    let same = |q: &&DualPoint| q.gemm.m == p.gemm.m && q.gemm.n == p.gemm.n && q.gemm.k == p.gemm.k;
    let Some(base) = points.iter().filter(same).find(|q| q.gemm.scheme.weights == base) else {
        return (None, None);
    };
    let pred = base.prediction.time_us / p.prediction.time_us;
    let meas = match (&base.measurement, &p.measurement) {
        (Some(b), Some(m)) => Some(b.time_us / m.time_us),
        _ => None,
    };
    (Some(pred), meas)
}

fn print_points(points: &[DualPoint], hw: &HardwareProfile) {
    // CUDA-graph replay columns where any point was timed so (`compare --weight-only --graph`).
    let graph = points.iter().any(|p| p.measurement.as_ref().is_some_and(|m| m.graph_us.is_some()));
    // A read-calibrated profile prices each op's reads and writes apart: its "% of BW" is of that op's
    // roof, and the copy bandwidth's share is shown beside it.
    let read = hw.read_bandwidth_gb_s.is_some();
    let base = speedup_base(points);
    let (vs_pred, vs_meas) = (format!("vs {base} pred"), format!("vs {base} meas"));
    let mut header = vec![
        "Precision",
        "M x N x K",
        "Predicted (us)",
        "Measured (us)",
        "Error",
        "Bottleneck",
        vs_pred.as_str(),
        vs_meas.as_str(),
        "GB/s meas",
        if read { "% of roof" } else { "% of BW" },
    ];
    if read {
        header.push("% of copy BW");
    }
    if graph {
        header.extend(["Graph (us)", "% of BW graph"]);
    }
    let mut t = table(&header);
    for p in points {
        let g = &p.gemm;
        let (sp, sm) = speedup(points, p, base);
        let mut row = vec![
            p.gemm.scheme.label(),
            format!("{}x{}x{}", g.m, g.n, g.k),
            sig3(p.prediction.time_us),
            p.measurement.as_ref().map_or("-".into(), |m| sig3(m.time_us)),
            p.error().map_or("-".into(), |e| format!("{:+.1}%", 100.0 * e)),
            p.prediction.bound.as_str().to_string(),
            sp.map_or("-".into(), |v| format!("{v:.2}x")),
            sm.map_or("-".into(), |v| format!("{v:.2}x")),
            p.measurement.as_ref().map_or("-".into(), |m| format!("{:.0}", m.bandwidth_gb_s)),
            // Of the bandwidth the prediction streams this op at: with a `roofline calibrate` profile, the
            // measured copy bandwidth, or the read stream's rate for an op that only reads.
            p.measurement
                .as_ref()
                .map_or("-".into(), |m| format!("{:.0}%", 100.0 * m.bandwidth_gb_s / p.prediction.bandwidth_gb_s)),
        ];
        if read {
            row.push(
                p.measurement
                    .as_ref()
                    .map_or("-".into(), |m| format!("{:.0}%", 100.0 * m.bandwidth_gb_s / hw.memory_bandwidth_gb_s)),
            );
        }
        if graph {
            let g = p.measurement.as_ref().and_then(|m| m.graph_us);
            row.push(g.map_or("-".into(), sig3));
            // The op's counted bytes over the graph time, of the profile's bandwidth.
            row.push(g.map_or("-".into(), |g| {
                format!("{:.0}%", 100.0 * p.prediction.bytes as f64 / (g * 1e3) / p.prediction.bandwidth_gb_s)
            }));
        }
        t.add_row(row);
    }
    println!("{t}");
    if let Some((med, p90)) = error_summary(points) {
        let n = points.iter().filter(|p| p.measurement.is_some()).count();
        println!("|error| over {n} measured points: median {:.1}%, p90 {:.1}%", 100.0 * med, 100.0 * p90);
    }
}

/// The batch-scaling table of measured `points`: a row per precision and N x K measured at M = 1 and at
/// another M <= 16, its M = 1 time and, for each other M, the time and its ratio to M = 1 (a GEMV's weights
/// dominate its bytes, so on the memory roof the ratio stays near 1). `None` when no row has both.
fn batch_scaling(points: &[DualPoint]) -> Option<comfy_table::Table> {
    let measured = |p: &&DualPoint| p.measurement.is_some() && p.gemm.m <= 16;
    let mut ms: Vec<u64> = points.iter().filter(measured).map(|p| p.gemm.m).filter(|&m| m > 1).collect();
    ms.sort_unstable();
    ms.dedup();
    let time = |base: &DualPoint, m: u64| {
        points
            .iter()
            .filter(measured)
            .find(|q| q.gemm.m == m && (q.gemm.n, q.gemm.k) == (base.gemm.n, base.gemm.k) && q.label == base.label)
            .and_then(|q| q.measurement.as_ref().map(|x| x.time_us))
    };
    // Rows in the order their M = 1 points come.
    let rows: Vec<&DualPoint> =
        points.iter().filter(measured).filter(|b| b.gemm.m == 1 && ms.iter().any(|&m| time(b, m).is_some())).collect();
    if rows.is_empty() {
        return None;
    }
    let mut header = vec!["Precision".to_string(), "N x K".into(), "M = 1 (us)".into()];
    header.extend(ms.iter().map(|m| format!("M = {m} (us, / M = 1)")));
    let mut t = table(&header.iter().map(String::as_str).collect::<Vec<_>>());
    for b in rows {
        let t1 = b.measurement.as_ref().map_or(f64::NAN, |x| x.time_us);
        let mut row = vec![b.gemm.scheme.label(), format!("{}x{}", b.gemm.n, b.gemm.k), sig3(t1)];
        row.extend(ms.iter().map(|&m| time(b, m).map_or("-".into(), |tm| format!("{} ({:.2}x)", sig3(tm), tm / t1))));
        t.add_row(row);
    }
    Some(t)
}

fn default_precisions(p: &[Format], weight_only: bool, activations: Format) -> Vec<Format> {
    if p.is_empty() && weight_only {
        // the 16-bit weights of the activations' own format first (the "vs" columns' base)
        let w16 = if activations == Format::BF16 { Format::BF16 } else { Format::FP16 };
        vec![w16, Format::FP8_E4M3, Format::INT8, Format::NVFP4, Format::INT4_G128, Format::MXFP4, Format::NF4]
    } else if p.is_empty() {
        vec![Format::FP16, Format::BF16, Format::FP8_E4M3, Format::INT8]
    } else {
        p.to_vec()
    }
}

/// The same points predicted on another profile (measurements kept).
fn repredict(points: &[DualPoint], hw: &HardwareProfile) -> Result<Vec<DualPoint>> {
    points.iter().map(|p| Ok(DualPoint { prediction: predict(&p.gemm, hw)?, ..p.clone() })).collect::<Result<_>>()
}

/// Prints the error summary of `points` on each contrast profile.
fn print_contrasts(points: &[DualPoint], contrast: &[String]) -> Result<()> {
    for key in contrast {
        let hw = crate::hw_args::load(key)?;
        if let Some((med, p90)) = error_summary(&repredict(points, &hw)?) {
            println!("|error| on {} [{}]: median {:.1}%, p90 {:.1}%", hw.name, hw.source, 100.0 * med, 100.0 * p90);
        }
    }
    Ok(())
}

/// Runs `roofline sweep`.
pub fn sweep(args: SweepArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    if let Some(path) = &args.rescore {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let old = if path.extension().is_some_and(|e| e == "csv") {
            roofline_report::read_csv(&text, &hw)?
        } else {
            roofline_report::read_json(&text)?
        };
        let pts = repredict(&old, &hw)?;
        println!("{} points of {} re-scored on {} ({})", pts.len(), path.display(), hw.name, hw.source);
        print_points(&pts, &hw);
        if let Some(t) = batch_scaling(&pts) {
            println!("Batch scaling (measured):\n{t}");
        }
        return print_contrasts(&pts, &args.contrast);
    }
    check_activations(args.activations)?;
    let grid = shapes(&args.shapes)?;
    let gpu = if args.measure { Some(Gpu::open(args.device)?) } else { None };
    let bench = match gpu.as_ref() {
        Some(gpu) => Some(Bench {
            gpu,
            meter: args.power.meter(args.device)?,
            cfg: TimingConfig {
                budget_ms: 500.0,
                power_ms: args.power.power_ms,
                graph: args.graph,
                ..TimingConfig::default()
            },
            gemv: GemvOverride::default(),
        }),
        None => None,
    };
    let precisions = default_precisions(&args.precisions, args.weight_only, args.activations);
    let pts = points(&hw, &grid, &precisions, args.weight_only, args.activations, bench)?;
    std::fs::create_dir_all(&args.out_dir).with_context(|| format!("creating {}", args.out_dir.display()))?;
    let csv = args.out_dir.join("sweep.csv");
    let json = args.out_dir.join("sweep.json");
    std::fs::write(&csv, write_csv(&pts)?).with_context(|| format!("writing {}", csv.display()))?;
    std::fs::write(&json, write_json(&pts)?).with_context(|| format!("writing {}", json.display()))?;
    println!("{} points on {} ({}); wrote {} and {}", pts.len(), hw.name, hw.source, csv.display(), json.display());
    print_points(&pts, &hw);
    if let Some(t) = batch_scaling(&pts) {
        println!("Batch scaling (measured):\n{t}");
    }
    print_contrasts(&pts, &args.contrast)
}

/// Runs `roofline compare`: the seed-style table for one shape, measured on this GPU.
pub fn compare(args: CompareArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    if !args.weight_only && args.gemv != GemvOverride::default() {
        bail!("--gemv {} sets the weight-only GEMV kernel: it needs --weight-only", args.gemv);
    }
    if !args.weight_only && args.graph {
        bail!("--graph times the weight-only GEMVs replayed from a CUDA graph: it needs --weight-only");
    }
    check_activations(args.activations)?;
    let gpu = Gpu::open(args.device)?;
    let s = args.shape;
    let bench = Bench {
        gpu: &gpu,
        meter: args.power.meter(args.device)?,
        cfg: TimingConfig { power_ms: args.power.power_ms, graph: args.graph, ..TimingConfig::default() },
        gemv: args.gemv,
    };
    let precisions = default_precisions(&args.precisions, args.weight_only, args.activations);
    let pts = points(&hw, &[(s.m, s.n, s.k)], &precisions, args.weight_only, args.activations, Some(bench))?;
    println!("{}x{}x{} on {} (prediction: {} [{}])", s.m, s.n, s.k, gpu.name, hw.name, hw.source);
    if args.gemv != GemvOverride::default() {
        println!("weight-only GEMVs: --gemv {} (instead of the measured defaults)", args.gemv);
    }
    print_points(&pts, &hw);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_activations_take_bf16_weights_as_the_16_bit_base() {
        let wo = default_precisions(&[], true, Format::BF16);
        assert_eq!(wo[0], Format::BF16);
        assert!(!wo.contains(&Format::FP16));
        assert_eq!(default_precisions(&[], true, Format::FP16)[0], Format::FP16);
        assert_eq!(default_precisions(&[Format::NF4], true, Format::BF16), vec![Format::NF4]);
        assert!(check_activations(Format::BF16).is_ok() && check_activations(Format::FP8_E4M3).is_err());
        let hw = HardwareProfile::preset("h100").unwrap();
        let pts = |act: Format, ps: &[Format]| points(&hw, &[(1, 4096, 4096)], ps, true, act, None).unwrap();
        let bf = pts(Format::BF16, &wo);
        assert!(bf.iter().all(|p| p.gemm.scheme.activations == Format::BF16 && p.gemm.scheme.output == Format::BF16));
        assert_eq!(speedup_base(&bf), Format::BF16);
        let int4 = bf.iter().find(|p| p.gemm.scheme.weights == Format::INT4_G128).unwrap();
        let (pred, meas) = speedup(&bf, int4, Format::BF16);
        assert!(pred.is_some_and(|v| v > 3.0) && meas.is_none(), "{pred:?}");
        // FP16 weights present: the base stays FP16 whatever the activations
        assert_eq!(speedup_base(&pts(Format::BF16, &[Format::FP16, Format::BF16])), Format::FP16);
        assert_eq!(speedup_base(&pts(Format::FP16, &default_precisions(&[], true, Format::FP16))), Format::FP16);
    }

    #[test]
    fn shape_sets() {
        assert_eq!(shapes("llama").unwrap().len(), 20);
        assert_eq!(shapes("decode").unwrap()[0], (1, 4096, 4096));
        let batch = shapes("batch").unwrap();
        assert_eq!(batch.len(), 30);
        assert_eq!((batch[0], batch[4], batch[29]), ((1, 6144, 4096), (1, 128_256, 4096), (16, 128_256, 4096)));
        assert!(shapes("/nonexistent").is_err());
    }

    #[test]
    fn batch_scaling_divides_each_m_by_m1() {
        let hw = HardwareProfile::preset("h100").unwrap();
        let point = |p: Format, m: u64, n: u64, t: Option<f64>| {
            let gemm = Gemm::new(m, n, 4096, Scheme::weight_only(p, Format::FP16)).unwrap();
            let measurement = t.map(|time_us| roofline_core::Measurement {
                device: "test".into(),
                time_us,
                time_us_min: time_us,
                time_us_max: time_us,
                runs: 1,
                tflops: 0.0,
                bandwidth_gb_s: 0.0,
                kernel: "test".into(),
                power: None,
                graph_us: None,
                host_us: None,
            });
            DualPoint { label: p.to_string(), prediction: predict(&gemm, &hw).unwrap(), gemm, measurement }
        };
        let int4 = Format::INT4_G128;
        let pts = vec![
            point(int4, 1, 14336, Some(13.0)),
            point(Format::NF4, 1, 14336, Some(13.5)),
            point(int4, 8, 14336, Some(15.6)),
            point(int4, 16, 14336, Some(17.55)),
            point(Format::NF4, 16, 14336, None), // not measured: no NF4 row
            point(int4, 1, 4096, Some(5.0)),     // no other M: no row
            point(int4, 128, 14336, Some(40.0)), // beyond the decode regime: no column
        ];
        let t = batch_scaling(&pts).expect("a table").to_string();
        assert!(
            t.contains("M = 8 (us, / M = 1)") && t.contains("M = 16 (us, / M = 1)") && !t.contains("M = 128"),
            "{t}"
        );
        assert!(t.contains("15.6 (1.20x)") && t.contains("17.6 (1.35x)"), "{t}");
        assert!(t.contains("14336x4096") && !t.contains("4096x4096"), "{t}");
        assert_eq!(t.lines().filter(|l| l.contains("NF4")).count(), 0, "{t}");
        // Predictions only, or M = 1 alone: nothing to show.
        let unmeasured: Vec<DualPoint> = pts.iter().map(|p| DualPoint { measurement: None, ..p.clone() }).collect();
        assert!(batch_scaling(&unmeasured).is_none());
        assert!(batch_scaling(&pts[..2]).is_none());
    }
}
