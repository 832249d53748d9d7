//! GPU commands: `roofline gpu info`, `roofline calibrate`, `roofline measure`.

use anyhow::{Context, Result};
use clap::Args;
use roofline_core::{predict, DualPoint, Format, Gemm, Scheme};
use roofline_gpu::weight_only::GemvOverride;
use roofline_gpu::{gemm_scheme, Gpu, KernelKind, PowerMeter, TimingConfig, GEMM_FORMATS};

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
    after_help = "Writes a hardware profile measured on this GPU; use it everywhere with --hw FILE:\n  roofline calibrate --output h100-measured.toml\n  roofline predict --hw h100-measured.toml\n\nIt measures: the copy bandwidth (a 1 GiB device-to-device copy, bytes read + written), the launch overhead (back-to-back memsets), the memory start-up latency (copies of 8 to 256 MiB), the read-stream bandwidth and latency (a read-only kernel from 8 MiB to 1 GiB, fitted by a line: a decode GEMV only reads, so its roof is this one, 5-9% above the copy on an H200) and the dense GEMM peaks per format (8192^3), each the median of gated samples (`roofline measure --help`). With the read stream in the profile, predictions price read bytes at the read rate and written bytes so that a copy keeps its measured time."
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
#[command(
    after_help = "Dense GEMMs run through cuBLASLt: FP32, TF32, FP16, BF16, FP8_E4M3 (BF16 output), FP8_E5M2 (E5M2
weights x E4M3 activations) and INT8 (INT32 output). The prediction is for the same scheme and bytes.

Timing: CUDA events around samples of back-to-back launches over rotating inputs larger than the L2, after a
warm-up; the median of 100-1000 samples. Each sample's launches are all enqueued before the GPU runs the first
(the stream waits at a host gate), so the time is the GPU's and not the host's launch rate; the kernel line says
how many launches a sample held and the host's time to enqueue one (ROOFLINE_TIMING_GATE=0: ungated, to compare).

Examples:
  roofline measure --m 4096 --n 4096 --k 4096 --precision fp16 --hw h100
  roofline measure --m 8192 --n 8192 --k 8192 -p fp8 --hw h100-measured.toml --power
  roofline measure --m 1 --n 4096 --k 4096 -p int8 --json
  roofline measure --m 1 --n 14336 --k 4096 --weights INT4_G128 --activations bf16 --hw h200
  roofline measure --m 16 --n 14336 --k 4096 --weights NF4 --activations bf16 --gemv xf16=false"
)]
pub struct MeasureArgs {
    #[command(flatten)]
    pub shape: super::ShapeArgs,
    /// Precision of a dense cuBLASLt GEMM: FP32, TF32, FP16, BF16, FP8_E4M3, FP8_E5M2 or INT8.
    #[arg(long, short = 'p', default_value = "fp16", value_parser = parse_format)]
    pub precision: Format,
    /// Weight-only instead: weights in this format (FP16, BF16, FP8_E4M3, INT8, INT4_G128, NF4, MXFP4,
    /// NVFP4) on roofline's own GEMV kernels, activations in --activations; M <= 16.
    #[arg(long, value_parser = parse_format)]
    pub weights: Option<Format>,
    /// Activation (and output) format with --weights: FP16 or BF16.
    #[arg(long, default_value = "fp16", value_parser = parse_format)]
    pub activations: Format,
    /// With --weights: the GEMV kernel variant and launch plan instead of the measured defaults
    /// (`key=value` pairs; --help lists the keys).
    #[arg(long, value_name = "KEY=VALUE,...", default_value = "", long_help = super::gemv_help(
        "With --weights: run the weight-only GEMV with this kernel variant and launch plan instead of the \
         measured defaults",
        "--gemv variant=xmma,x_smem=true,split_k=4"
    ))]
    pub gemv: GemvOverride,
    /// With --weights: also time the GEMV replayed from a CUDA graph (64 or more launches over the rotating
    /// weight sets, captured once), as serving engines launch a decode step; printed as a row of its own.
    #[arg(long)]
    pub graph: bool,
    /// GPU index.
    #[arg(long, default_value = "0")]
    pub device: usize,
    /// Hardware profile the prediction uses (a datasheet preset or a calibrated TOML file).
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON (a DualPoint: prediction, measurement).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub power: super::telemetry::PowerArgs,
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

/// Runs `roofline gpu gpcs`: the GPCs' SMs (`roofline_gpu::sm_map`), a row a GPC.
pub fn gpcs(args: InfoArgs) -> Result<()> {
    let gpu = Gpu::open(args.device)?;
    let map = roofline_gpu::sm_map::map_gpcs(&gpu)?;
    if args.json {
        return print_json(&map);
    }
    println!(
        "{}: {} SMs in {} groups that share a GPC (thread-block clusters of {:?} CTAs; a cluster never leaves its GPC)",
        gpu.name,
        gpu.sm_count,
        map.gpcs.len(),
        map.cluster_sizes
    );
    let mut t = table(&["GPC", "SMs", "SM indices (%smid)"]);
    for (i, g) in map.gpcs.iter().enumerate() {
        let sms: Vec<String> = g.iter().map(u32::to_string).collect();
        t.add_row(vec![i.to_string(), g.len().to_string(), sms.join(" ")]);
    }
    println!("{t}");
    if !map.unseen.is_empty() {
        println!("SMs no CTA ran on (each listed alone): {:?}", map.unseen);
    }
    let pairs = map.gpcs.iter().filter(|g| g.len() <= 2).count();
    if pairs > 0 && map.gpcs.len() > pairs {
        println!(
            "note: {pairs} groups of 1-2 SMs never met the rest of their GPC in a cluster (the hardware placed every \
             cluster elsewhere); each likely belongs to a larger group, which would make {} GPCs",
            map.gpcs.len() - pairs
        );
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
    if args.weights.is_none() && args.gemv != GemvOverride::default() {
        anyhow::bail!("--gemv {} sets the weight-only GEMV kernel: it needs --weights FORMAT", args.gemv);
    }
    if args.weights.is_none() && args.graph {
        anyhow::bail!("--graph times the weight-only GEMVs replayed from a CUDA graph: it needs --weights FORMAT");
    }
    let (scheme, kind) = match args.weights {
        Some(w) => (Scheme::weight_only(w, args.activations), KernelKind::WeightOnly),
        None => {
            if !GEMM_FORMATS.contains(&args.precision) {
                anyhow::bail!("{}", no_dense_kernel(args.precision));
            }
            (gemm_scheme(args.precision), KernelKind::CublasLt)
        }
    };
    let gemm = Gemm::new(args.shape.m, args.shape.n, args.shape.k, scheme)?;
    let prediction = predict(&gemm, &hw)?;
    let gpu = Gpu::open(args.device)?;
    let mut meter = args.power.meter(args.device)?;
    let cfg = TimingConfig { power_ms: args.power.power_ms, graph: args.graph, ..TimingConfig::default() };
    let meter_ref = meter.as_mut().map(|m| m as &mut dyn PowerMeter);
    let m = gpu.measure_with(&gemm, Some(kind), &cfg, meter_ref, &args.gemv)?;
    let point = DualPoint { label: scheme.label(), gemm, prediction, measurement: Some(m) };
    if args.json {
        let mut v = serde_json::to_value(&point)?;
        if let (Some(obj), Some(summary)) = (v.as_object_mut(), meter.as_ref().and_then(|m| m.last.as_ref())) {
            obj.insert("power_summary".into(), serde_json::to_value(summary)?);
        }
        return print_json(&v);
    }
    let (p, meas) = (&point.prediction, point.measurement.as_ref().context("measurement")?);
    println!(
        "{} {}x{}x{} on {} (prediction: {} [{}])",
        point.gemm.scheme.label(),
        args.shape.m,
        args.shape.n,
        args.shape.k,
        meas.device,
        hw.name,
        hw.source
    );
    println!("kernel: {}", meas.kernel);
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
            "{} (min {}, max {}, {} samples)",
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
    if let Some(g) = meas.graph_us {
        let tflops = p.flops as f64 / (g * 1e6);
        let gb_s = p.bytes as f64 / (g * 1e3);
        t.add_row(vec![
            "CUDA-graph replay".into(),
            sig3(g),
            sig3(tflops),
            sig3(gb_s),
            format!("{:.1}%", 100.0 * gb_s / p.bandwidth_gb_s),
            format!("{:.1}%", 100.0 * tflops / p.peak_tflops),
            String::new(),
        ]);
    }
    println!("{t}");
    println!("error (measured - predicted) / measured: {:+.1}%", 100.0 * point.error().unwrap_or(f64::NAN));
    if let (Some(pw), Some(s)) = (meas.power.as_ref(), meter.as_ref().and_then(|m| m.last.as_ref())) {
        println!(
            "power: mean {:.0} W, peak {:.0} W over {:.2} s; energy per run {}; {} TFLOP/s per W, {} GB/s per W",
            pw.mean_power_w,
            pw.peak_power_w,
            s.duration_s,
            fmt_energy(pw.energy_per_run_j),
            sig3(pw.tflops_per_w),
            sig3(pw.gb_s_per_w)
        );
        let counter = s.energy_j_counter.map_or("no counter".into(), |c| format!("{c:.1} J counter"));
        let agree = s.agreement.map_or(String::new(), |a| format!(" (agreement {:.1}%)", 100.0 * a));
        println!("energy: {:.1} J sampled, {counter}{agree}", s.energy_j_sampled);
        println!(
            "clocks: SM {}-{} MHz, memory {}-{} MHz, {}-{} C{}",
            opt(s.sm_clock_min_mhz),
            opt(s.sm_clock_max_mhz),
            opt(s.mem_clock_min_mhz),
            opt(s.mem_clock_max_mhz),
            opt(s.temperature_min_c),
            opt(s.temperature_max_c),
            if pw.clocks_dropped {
                format!("; CLOCKS DROPPED (throttle: {}) - do not trust this point", s.throttle_reasons_seen.join(", "))
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// Why a precision has no dense GEMM here, and what to do instead.
fn no_dense_kernel(p: Format) -> String {
    let dense = GEMM_FORMATS.map(|f| f.to_string()).join(", ");
    match p {
        Format::NVFP4 | Format::MXFP4 | Format::MXFP6_E2M3 | Format::MXFP6_E3M2 => format!(
            "--precision {p}: a native {p} GEMM (both operands on FP4/FP6 tensor cores) needs a Blackwell GPU \
             (sm_100 or newer); Hopper and older have no such units, so it can only be predicted here \
             (`roofline predict -p {p} --hw b200`). On this GPU, measure {p} weights with FP16 activations: \
             `roofline measure --weights {p}`. Measured dense GEMM formats: {dense}"
        ),
        _ => format!(
            "--precision {p}: measured dense GEMM formats are {dense}; low-bit weights run weight-only: `roofline measure --weights {p}`"
        ),
    }
}

fn opt(v: Option<u32>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

/// Joules per run in a readable unit.
pub fn fmt_energy(j: f64) -> String {
    if j >= 1.0 {
        format!("{j:.3} J")
    } else if j >= 1e-3 {
        format!("{:.3} mJ", j * 1e3)
    } else {
        format!("{:.3} uJ", j * 1e6)
    }
}
