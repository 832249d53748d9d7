//! `roofline bench ...`: how fast roofline itself computes.

use std::hint::black_box;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, Subcommand};
use roofline_core::model::{analyze_model, ModelRequest};
use roofline_core::recommend::Phase;
use roofline_core::{predict_cost, Format, Gemm, Scheme};

use crate::hw_args::HwArgs;
use crate::output::{print_json, si, table};

/// Subcommands of `roofline bench`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// GEMM predictions per second on one core (counts + roofline for varying shapes).
    Predict(PredictArgs),
    /// Whole-model analyses per second (config parsed once, analysis timed), per preset and phase.
    Model(ModelArgs),
}

/// Flags of `roofline bench model`.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Model presets to time.
    #[arg(long = "config", default_values = ["llama-3.1-8b", "deepseek-v3"])]
    pub configs: Vec<String>,
    /// Analyses per timed round.
    #[arg(long, default_value = "2000")]
    pub iterations: u32,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `roofline bench predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Predictions per timed round.
    #[arg(long, default_value = "10000000")]
    pub iterations: u64,
    /// Timed rounds (the median is reported).
    #[arg(long, default_value = "5")]
    pub rounds: u32,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `roofline bench ...`.
pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Predict(args) => bench_predict(args),
        Command::Model(args) => bench_model(args),
    }
}

fn bench_predict(args: PredictArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    let formats = [Format::FP16, Format::FP8_E4M3, Format::INT4_G128, Format::NVFP4, Format::MXFP4];
    let execs: Vec<_> = formats.iter().map(|f| Scheme::uniform(*f).execution(&hw)).collect::<Result<_, _>>()?;
    let schemes: Vec<_> = formats.iter().map(|f| Scheme::uniform(*f)).collect();
    let mut rates = Vec::new();
    let mut checksum = 0.0;
    for _ in 0..args.rounds.max(1) {
        let start = Instant::now();
        for i in 0..args.iterations {
            // Vary the shape and format every call so nothing is hoisted out of the loop.
            let j = (i % 5) as usize;
            let m = 1 + (i & 4095);
            let gemm = Gemm { m, n: 4096 + (i & 7) * 128, k: 4096, batch: 1, weights_shared: true, scheme: schemes[j] };
            let cost = black_box(&gemm).cost()?;
            checksum += black_box(predict_cost(cost, &execs[j], &hw)).time_us;
        }
        rates.push(args.iterations as f64 / start.elapsed().as_secs_f64());
    }
    black_box(checksum);
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let (min, max) = (rates[0], rates[rates.len() - 1]);
    if args.json {
        return print_json(&serde_json::json!({
            "benchmark": "gemm_predictions_single_core",
            "iterations_per_round": args.iterations,
            "rounds": rates.len(),
            "predictions_per_s_median": median,
            "predictions_per_s_min": min,
            "predictions_per_s_max": max,
            "ns_per_prediction": 1e9 / median,
        }));
    }
    let mut t = table(&["Benchmark", "Median /s", "Min /s", "Max /s", "ns / prediction"]);
    t.add_row(vec![
        "GEMM count + roofline, 1 core".to_string(),
        si(median),
        si(min),
        si(max),
        format!("{:.1}", 1e9 / median),
    ]);
    println!("{t}");
    Ok(())
}

fn bench_model(args: ModelArgs) -> Result<()> {
    let hw = args.hw.resolve()?;
    let mut rows = Vec::new();
    for spec in &args.configs {
        let cfg = super::model::load_config(spec)?;
        for (phase, seq) in [(Phase::Decode, 1024), (Phase::Prefill, 1024)] {
            let req = ModelRequest { phase, seq, ..ModelRequest::default() };
            analyze_model(&cfg, &req, &hw)?; // warm-up
            let mut times = Vec::new();
            for _ in 0..5 {
                let start = Instant::now();
                for _ in 0..args.iterations {
                    black_box(analyze_model(black_box(&cfg), black_box(&req), &hw)?);
                }
                times.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(args.iterations.max(1)));
            }
            times.sort_by(f64::total_cmp);
            rows.push((spec.clone(), phase, times[times.len() / 2]));
        }
    }
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(m, p, us)| serde_json::json!({"model": m, "phase": p.to_string(), "us_per_analysis_median": us}))
            .collect();
        return print_json(&v);
    }
    let mut t = table(&["Model", "Phase", "us / analysis (median of 5)", "analyses / s"]);
    for (m, p, us) in rows {
        t.add_row(vec![m, p.to_string(), format!("{us:.2}"), si(1e6 / us)]);
    }
    println!("{t}");
    Ok(())
}
