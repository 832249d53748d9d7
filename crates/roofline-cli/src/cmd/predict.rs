//! `roofline predict`: one GEMM/GEMV shape, every format, roofline time.

use anyhow::Result;
use clap::Args as ClapArgs;
use roofline_core::{predict_report, Format, PredictReport, PredictRequest, Scheme};

use super::{parse_format, parse_size};
use crate::hw_args::HwArgs;
use crate::output::{opt, print_json, si, sig3, table, OutputArgs};

/// Flags of `roofline predict`.
#[derive(Debug, ClapArgs)]
#[command(
    after_help = "Examples:\n  roofline predict                               # 1x4096x4096 decode GEMV on gb10, native formats\n  roofline predict --m 2048 --hw h100 --all      # prefill GEMM, every format in the catalog\n  roofline predict --weights int4_g128 --activations fp16   # W4A16 weight-only\n  roofline predict --bandwidth-gb-s 500 --peak FP16=50 --peak INT8=100   # custom ASIC\n  roofline predict --precision fp8 --json"
)]
pub struct Args {
    #[command(flatten)]
    pub shape: super::ShapeArgs,
    /// Independent products sharing one weight matrix.
    #[arg(long, default_value = "1", value_parser = parse_size, allow_hyphen_values = true)]
    pub batch: u64,
    /// Uniform scheme(s): activations and weights in this format, output FP16 (repeatable). Names are
    /// case-insensitive with aliases: fp16, bf16, fp8 (=FP8_E4M3), e5m2, int8, int4, int4_g128, nvfp4 (=fp4),
    /// mxfp4, mxfp6, mxfp8, mxint8, nf4 ... (`roofline formats`). Default: every format the hardware
    /// computes natively.
    #[arg(long = "precision", short = 'p', value_parser = parse_format, conflicts_with_all = ["all", "weights", "activations"])]
    pub precisions: Vec<Format>,
    /// Every format of the catalog, including those the hardware must dequantize (marked as such).
    #[arg(long, conflicts_with_all = ["weights", "activations"])]
    pub all: bool,
    /// Weight format of an explicit scheme (e.g. int4_g128 for W4A16); shown beside the FP16 baseline.
    #[arg(long, value_parser = parse_format)]
    pub weights: Option<Format>,
    /// Activation format of an explicit scheme (default FP16).
    #[arg(long, value_parser = parse_format)]
    pub activations: Option<Format>,
    /// Output format of an explicit scheme (default: the activation format, or FP16 for uniform 8/4-bit).
    #[arg(long, value_parser = parse_format)]
    pub output: Option<Format>,
    #[command(flatten)]
    pub hw: HwArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl Args {
    fn schemes(&self) -> Vec<Scheme> {
        if self.weights.is_some() || self.activations.is_some() || self.output.is_some() {
            let a = self.activations.unwrap_or(Format::FP16);
            let w = self.weights.unwrap_or(a);
            let mut s = if w == a { Scheme::uniform(a) } else { Scheme::weight_only(w, a) };
            if let Some(o) = self.output {
                s.output = o;
            }
            let baseline = Scheme::uniform(Format::FP16);
            return if s == baseline { vec![s] } else { vec![baseline, s] };
        }
        if !self.precisions.is_empty() {
            return self.precisions.iter().copied().map(Scheme::uniform).collect();
        }
        if self.all {
            return Format::ALL.into_iter().map(Scheme::uniform).collect();
        }
        Vec::new()
    }
}

/// Runs `roofline predict`.
pub fn run(args: Args) -> Result<()> {
    let hw = args.hw.resolve()?;
    let req = PredictRequest {
        m: args.shape.m,
        n: args.shape.n,
        k: args.shape.k,
        batch: args.batch,
        schemes: args.schemes(),
    };
    let report = predict_report(&req, &hw)?;
    if args.out.json {
        print_json(&report)
    } else if args.out.csv {
        write_csv(&report)
    } else {
        print_table(&report);
        Ok(())
    }
}

fn print_table(r: &PredictReport) {
    let kind = if r.m == 1 { "GEMV" } else { "GEMM" };
    let batch = if r.batch > 1 { format!(" x batch {}", r.batch) } else { String::new() };
    println!(
        "{kind} M={} N={} K={}{batch} on {} [{}] (source: {})",
        r.m, r.n, r.k, r.hardware_name, r.hardware, r.hardware_source
    );
    let mut t = table(&[
        "",
        "Scheme",
        "Runs as",
        "FLOPs",
        "Bytes",
        "AI",
        "Ridge",
        "Bound",
        "t_mem us",
        "t_comp us",
        "Time us",
        "TFLOP/s",
        "vs FP16",
    ]);
    let mut notes = Vec::new();
    for row in &r.rows {
        let p = &row.prediction;
        let runs_as = match p.mode {
            roofline_core::ExecMode::Native => format!("{} native", p.compute),
            roofline_core::ExecMode::WeightOnly => format!("{} (W dequant)", p.compute),
            roofline_core::ExecMode::Dequantized => format!("{} (emulated)", p.compute),
        };
        if let Some(n) = &p.note {
            notes.push(format!("{}: {n}", row.label));
        }
        t.add_row(vec![
            if row.best { "*".to_string() } else { String::new() },
            row.label.clone(),
            runs_as,
            si(p.flops as f64),
            format!("{}B", si(p.bytes as f64)),
            sig3(p.arithmetic_intensity),
            sig3(p.ridge_ai),
            p.bound.as_str().to_string(),
            sig3(p.time_memory_us),
            sig3(p.time_compute_us),
            sig3(p.time_us),
            sig3(p.attainable_tflops),
            row.speedup_vs_fp16.map_or_else(|| "-".into(), |s| format!("{}x", opt(Some(s)))),
        ]);
    }
    println!("{t}");
    println!("* = fastest. AI = FLOP/byte; ridge = peak / bandwidth; time = max(t_mem, t_comp).");
    for n in notes {
        println!("note: {n}");
    }
}

fn write_csv(r: &PredictReport) -> Result<()> {
    let mut w = csv::Writer::from_writer(std::io::stdout());
    w.write_record([
        "scheme",
        "weights",
        "activations",
        "output",
        "m",
        "n",
        "k",
        "batch",
        "hardware",
        "mode",
        "compute",
        "flops",
        "bytes",
        "ai",
        "ridge_ai",
        "bound",
        "time_memory_us",
        "time_compute_us",
        "time_us",
        "attainable_tflops",
        "speedup_vs_fp16",
        "best",
    ])?;
    for row in &r.rows {
        let p = &row.prediction;
        let s = row.scheme;
        w.write_record([
            row.label.clone(),
            s.weights.to_string(),
            s.activations.to_string(),
            s.output.to_string(),
            r.m.to_string(),
            r.n.to_string(),
            r.k.to_string(),
            r.batch.to_string(),
            r.hardware.clone(),
            serde_json::to_value(p.mode)?.as_str().unwrap_or_default().to_string(),
            p.compute.to_string(),
            p.flops.to_string(),
            p.bytes.to_string(),
            p.arithmetic_intensity.to_string(),
            p.ridge_ai.to_string(),
            p.bound.as_str().to_string(),
            p.time_memory_us.to_string(),
            p.time_compute_us.to_string(),
            p.time_us.to_string(),
            p.attainable_tflops.to_string(),
            row.speedup_vs_fp16.map(|s| s.to_string()).unwrap_or_default(),
            row.best.to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}
