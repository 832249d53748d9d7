//! `roofline recommend`: the fastest scheme (format + method) for a GEMM shape under constraints.

use anyhow::Result;
use clap::Args as ClapArgs;
use roofline_core::recommend::{recommend, render_recommend, AccuracyTolerance, Phase, RecommendRequest};

use super::parse_size;
use crate::hw_args::HwArgs;
use crate::output::print_json;
use roofline_core::model::plan::{recommend_model, render_plan, PlanRequest};
use roofline_core::model::ModelRequest;

/// Flags of `roofline recommend`.
#[derive(Debug, ClapArgs)]
#[command(
    after_help = "Examples:\n  roofline recommend --hw seed-gb10                         # decode GEMV: INT4 weight-only (AWQ)\n  roofline recommend --hw b200 --m 2048                     # prefill: NVFP4 on FP4 tensor cores\n  roofline recommend --hw h100 --memory-limit-gb 0.01       # force a format that fits\n  roofline recommend --hw h100 --max-accuracy-loss low --json"
)]
pub struct Args {
    #[command(flatten)]
    pub shape: super::ShapeArgs,
    /// Independent products sharing one weight matrix.
    #[arg(long, default_value = "1", value_parser = parse_size, allow_hyphen_values = true)]
    pub batch: u64,
    /// decode or prefill (default: decode when M <= 16).
    #[arg(long)]
    pub phase: Option<Phase>,
    /// Weight memory available for this op, GB: the fastest scheme that fits wins.
    #[arg(long, value_name = "GB")]
    pub memory_limit_gb: Option<f64>,
    /// Accuracy tolerance: a class (lossless 0.5, low 2, medium 5, high 10, any) or a number, in percent
    /// perplexity increase (the scale of the documented priors, docs/RECOMMEND.md).
    #[arg(long, value_name = "CLASS|PCT")]
    pub max_accuracy_loss: Option<AccuracyTolerance>,
    /// Offer weight-only (mixed-precision) kernels: yes by default on GPU presets, no on a custom ASIC.
    #[arg(long)]
    pub weight_only: Option<bool>,
    /// Model-level plan for this model (preset or config.json): a scheme per layer type (attention, FFN,
    /// experts, LM head) and a KV-cache format; --batch is then sequences and --seq the context.
    #[arg(long, value_name = "PRESET|FILE")]
    pub config: Option<String>,
    /// Context (decode) or prompt (prefill) length, with --config.
    #[arg(long, default_value = "1024", value_parser = parse_size, allow_hyphen_values = true, requires = "config")]
    pub seq: u64,
    /// Tensor-parallel GPUs, with --config.
    #[arg(long, default_value = "1", value_parser = parse_size, allow_hyphen_values = true, requires = "config")]
    pub tp: u64,
    /// Baseline activation format, with --config (default BF16).
    #[arg(long, default_value = "bf16", value_parser = super::parse_format, requires = "config")]
    pub activations: roofline_core::Format,
    /// Measured accuracy losses (`roofline eval ppl --accuracy-out FILE`, or its `--json` report): a
    /// weight-only candidate with the same weight format and method uses the measured loss, not its prior.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub accuracy: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON: every candidate with its numbers, so a script can re-rank.
    #[arg(long)]
    pub json: bool,
}

/// Runs `roofline recommend`.
pub fn run(args: Args) -> Result<()> {
    let hw = args.hw.resolve()?;
    if let Some(gb) = args.memory_limit_gb {
        if !(gb.is_finite() && gb > 0.0) {
            anyhow::bail!("invalid --memory-limit-gb {gb}: must be a finite number > 0 (GB)");
        }
    }
    if let Some(spec) = &args.config {
        let cfg = super::model::load_config(spec)?;
        let plan_req = PlanRequest {
            model: ModelRequest {
                phase: args.phase.unwrap_or(Phase::Decode),
                batch: args.batch,
                seq: args.seq,
                tp: args.tp,
                activations: args.activations,
                ..ModelRequest::default()
            },
            memory_limit_gb: args.memory_limit_gb,
            max_accuracy_loss_pct: args.max_accuracy_loss.map(AccuracyTolerance::limit_pct),
            weight_only: args.weight_only,
        };
        let plan = recommend_model(&cfg, &plan_req, &hw)?;
        return if args.json {
            print_json(&plan)
        } else {
            print!("{}", render_plan(&plan));
            Ok(())
        };
    }
    let req = RecommendRequest {
        batch: args.batch,
        phase: args.phase,
        memory_limit_gb: args.memory_limit_gb,
        max_accuracy_loss_pct: args.max_accuracy_loss.map(AccuracyTolerance::limit_pct),
        weight_only: args.weight_only,
        measured_accuracy: match &args.accuracy {
            Some(p) => read_accuracy(p)?,
            None => Vec::new(),
        },
        ..RecommendRequest::new(args.shape.m, args.shape.n, args.shape.k)
    };
    let report = recommend(&req, &hw)?;
    if args.json {
        print_json(&report)
    } else {
        print!("{}", render_recommend(&report));
        Ok(())
    }
}

/// Reads measured accuracy losses: a JSON array of `MeasuredAccuracy`, or a whole `roofline eval ppl --json`
/// report.
fn read_accuracy(p: &std::path::Path) -> Result<Vec<roofline_core::recommend::MeasuredAccuracy>> {
    use anyhow::Context;
    let body = std::fs::read_to_string(p).with_context(|| format!("cannot read --accuracy '{}'", p.display()))?;
    if let Ok(v) = serde_json::from_str::<Vec<roofline_core::recommend::MeasuredAccuracy>>(&body) {
        return Ok(v);
    }
    let report: roofline_eval::eval::PplReport = serde_json::from_str(&body).with_context(|| {
        format!(
            "--accuracy '{}' is neither a list of measured losses (eval ppl --accuracy-out) nor an eval ppl --json report",
            p.display()
        )
    })?;
    Ok(report.measured_accuracy())
}
