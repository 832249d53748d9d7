//! `roofline quantize`: a Hugging Face safetensors model -> a compressed-tensors checkpoint vLLM loads.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressStyle};
use roofline_core::model::plan::{recommend_model, PlanRequest};
use roofline_core::model::{ModelConfig, ModelRequest, Role};
use roofline_core::recommend::Phase;
use roofline_core::Format;
use roofline_quant::checkpoint::{quantize_checkpoint, Plan, Scheme};
use serde::Serialize;

use super::parse_size;
use crate::hw_args::HwArgs;
use crate::output::{print_json, table};

/// Flags of `roofline quantize`.
#[derive(Debug, ClapArgs)]
#[command(
    after_help = "Schemes (weight-only, compressed-tensors layout):\n  INT4 (= INT4_G128), INT4_G64, INT4_G32   pack-quantized, asymmetric groups (W4A16_ASYM)\n  INT8                                    pack-quantized, symmetric per channel (W8A16)\n  FP8, FP8_CHANNEL                        float-quantized E4M3, per tensor / per channel\n  NVFP4                                   nvfp4-pack-quantized (NVFP4A16)\n\nExamples:\n  roofline quantize --model ./Llama-3.2-1B --scheme int4 --out ./Llama-3.2-1B-W4A16\n  roofline quantize --model ./Llama-3.2-1B --auto --hw h100 --phase decode --batch 1 --out ./auto --json\n\nThe output loads with `vllm serve ./Llama-3.2-1B-W4A16`."
)]
pub struct Args {
    /// Hugging Face model directory (config.json, model.safetensors or model.safetensors.index.json + shards).
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// Scheme for every linear layer (see below).
    #[arg(long, required_unless_present = "auto", conflicts_with = "auto")]
    pub scheme: Option<String>,
    /// New output directory (written under a temporary name next to it, renamed when complete).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Take the scheme of each layer type from the recommender (`roofline model` plan) for --hw/--phase/--batch.
    #[arg(long)]
    pub auto: bool,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Phase the plan optimizes (with --auto).
    #[arg(long, default_value = "decode")]
    pub phase: Phase,
    /// Sequences in the batch (with --auto).
    #[arg(long, default_value = "1", value_parser = parse_size)]
    pub batch: u64,
    /// Context or prompt length (with --auto).
    #[arg(long, default_value = "1024", value_parser = parse_size)]
    pub seq: u64,
    /// Accuracy tolerance for the plan, percent perplexity increase (with --auto).
    #[arg(long)]
    pub max_accuracy_loss_pct: Option<f64>,
    /// Keep lm_head in the model dtype (the default, also over an --auto plan that quantizes it).
    #[arg(long, conflicts_with = "quantize_lm_head")]
    pub keep_lm_head: bool,
    /// Quantize lm_head too.
    #[arg(long)]
    pub quantize_lm_head: bool,
    /// Print the per-layer report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Which plan role a module belongs to (by its Hugging Face name).
fn role_of(module: &str) -> Role {
    let m = module.to_ascii_lowercase();
    if m == "lm_head" || m.ends_with(".lm_head") {
        Role::LmHead
    } else if m.contains(".experts.") {
        Role::Experts
    } else if m.contains("attn") || m.contains("attention") {
        Role::Attention
    } else {
        Role::Ffn
    }
}

#[derive(Debug, Serialize)]
struct AutoChoice {
    role: Role,
    candidate: String,
    weights: Format,
    scheme: Option<String>,
    note: Option<String>,
}

/// Runs `roofline quantize`.
pub fn run(a: Args) -> Result<()> {
    if !a.model.join("config.json").is_file() {
        bail!("{}: no config.json (expected a Hugging Face model directory)", a.model.display());
    }
    let mut notes = Vec::new();
    let mut auto = Vec::new();
    let (fixed, roles, plan_lm_head) = if a.auto {
        let text = std::fs::read_to_string(a.model.join("config.json"))?;
        let cfg = ModelConfig::from_json(&text).with_context(|| format!("{}/config.json", a.model.display()))?;
        let hw = a.hw.resolve()?;
        let req = PlanRequest {
            model: ModelRequest {
                phase: a.phase,
                batch: a.batch,
                seq: a.seq,
                tp: 1,
                weights: Format::BF16,
                activations: Format::BF16,
                kv: Format::BF16,
                roles: Default::default(),
                fused: false,
            },
            memory_limit_gb: None,
            max_accuracy_loss_pct: a.max_accuracy_loss_pct,
            weight_only: None,
        };
        let plan = recommend_model(&cfg, &req, &hw)?;
        let mut roles = BTreeMap::new();
        for rp in &plan.roles {
            let (scheme, note) = Scheme::from_format(rp.scheme.weights);
            if let Some(n) = &note {
                notes.push(n.clone());
            }
            if rp.scheme.activations != Format::BF16 && scheme.is_some() {
                notes.push(format!(
                    "{:?}: the plan's {} also quantizes activations; the checkpoint is weight-only",
                    rp.role, rp.candidate
                ));
            }
            auto.push(AutoChoice {
                role: rp.role,
                candidate: rp.candidate.clone(),
                weights: rp.scheme.weights,
                scheme: scheme.map(Scheme::name),
                note,
            });
            roles.insert(format!("{:?}", rp.role), scheme);
        }
        let lm = roles.get("LmHead").copied().flatten().is_some();
        (None, roles, lm)
    } else {
        let s = a.scheme.as_deref().context("--scheme or --auto is required")?;
        (Some(Scheme::parse(s)?), BTreeMap::new(), false)
    };
    let quantize_lm_head = a.quantize_lm_head || (plan_lm_head && !a.keep_lm_head);
    let scheme_for = |module: &str, _rows: usize, _cols: usize| -> Option<Scheme> {
        if let Some(s) = fixed {
            return Some(s);
        }
        let role = role_of(module);
        match roles.get(&format!("{role:?}")) {
            Some(s) => *s,
            // a layer type the plan does not list (e.g. lm_head when --quantize-lm-head): the FFN's scheme
            None => roles.get("Ffn").copied().flatten(),
        }
    };
    let plan = Plan { scheme_for: &scheme_for, quantize_lm_head };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} tensors  {elapsed}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = quantize_checkpoint(&a.model, &a.out, &plan, &mut |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(p.name.to_string());
    });
    bar.finish_and_clear();
    let mut report = report?;
    report.notes.extend(notes);
    if a.json {
        return print_json(&serde_json::json!({"report": report, "auto": auto}));
    }
    for c in &auto {
        println!(
            "plan {:?}: {} -> {}",
            c.role,
            c.candidate,
            c.scheme.clone().unwrap_or_else(|| "kept (not quantized)".into())
        );
    }
    let mut t =
        table(&["Tensor", "Scheme", "Shape", "SQNR dB", "Rel. Frobenius", "Max abs err", "Bytes in", "Bytes out"]);
    for l in &report.layers {
        t.add_row(vec![
            l.name.clone(),
            l.scheme.clone(),
            format!("{} x {}", l.rows, l.cols),
            format!("{:.2}", l.metrics.sqnr_db),
            format!("{:.3e}", l.metrics.rel_frobenius),
            format!("{:.3e}", l.metrics.max_abs),
            l.bytes_in.to_string(),
            l.bytes_out.to_string(),
        ]);
    }
    println!("{t}");
    println!(
        "{} linear weights quantized, {} tensors kept, {} files copied; tensors {} -> {} bytes ({:.1}%)",
        report.layers.len(),
        report.kept.len(),
        report.copied_files.len(),
        report.total_bytes_in,
        report.total_bytes_out,
        100.0 * report.total_bytes_out as f64 / report.total_bytes_in.max(1) as f64
    );
    for n in &report.notes {
        println!("note: {n}");
    }
    println!("wrote {}", report.out.display());
    Ok(())
}
