//! `roofline model`: a whole model from its config.json, op by op, on a hardware profile.

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use roofline_core::model::{analyze_model, render, ModelConfig, ModelRequest};
use roofline_core::recommend::Phase;
use roofline_core::Format;

use super::{parse_format, parse_size};
use crate::hw_args::HwArgs;
use crate::output::{print_json, table};

/// Flags of `roofline model`.
#[derive(Debug, ClapArgs)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  roofline model list\n  roofline model --config llama-3.1-8b --hw h100 --phase decode --batch 1 --seq 1024\n  roofline model --config llama-3.1-8b --weights int4_g128 --kv fp8          # W4A16 + FP8 KV cache\n  roofline model --config deepseek-v3 --hw gb200 --weights nvfp4 --batch 128 --by-op\n  roofline model --config deepseek-v3 --hw h100 --weights fp8 --batch 64 --plot dsv3.png   # op placement chart\n  roofline model --config llama-3.1-70b --tp 4 --by-layer\n  roofline model --config ./my-model/config.json --phase prefill --seq 4096 --json"
)]
pub struct Args {
    #[command(subcommand)]
    pub sub: Option<Sub>,
    /// A model preset (`roofline model list`) or a Hugging Face config.json file.
    #[arg(long, value_name = "PRESET|FILE", required = true)]
    pub config: Option<String>,
    /// decode (one new token per sequence, context --seq) or prefill (--seq prompt tokens).
    #[arg(long, default_value = "decode")]
    pub phase: Phase,
    /// Sequences in the batch.
    #[arg(long, default_value = "1", value_parser = parse_size, allow_hyphen_values = true)]
    pub batch: u64,
    /// Context length (decode) or prompt length (prefill).
    #[arg(long, default_value = "1024", value_parser = parse_size, allow_hyphen_values = true)]
    pub seq: u64,
    /// Tensor-parallel GPUs (weights and heads split; two all-reduces per layer over the interconnect).
    #[arg(long, default_value = "1", value_parser = parse_size, allow_hyphen_values = true)]
    pub tp: u64,
    /// Weight format of the linear layers (int4_g128, fp8, nvfp4, ...).
    #[arg(long, default_value = "bf16", value_parser = parse_format)]
    pub weights: Format,
    /// Activation format (also embeddings, norms, LM head, router).
    #[arg(long, default_value = "bf16", value_parser = parse_format)]
    pub activations: Format,
    /// KV-cache format.
    #[arg(long, default_value = "bf16", value_parser = parse_format)]
    pub kv: Format,
    /// Predict a fused engine: norms inside the next linear, residual adds inside the linear before, RoPE
    /// inside the attention (their bytes stay, their launch and start-up costs go; `--by-op` shows where).
    #[arg(long)]
    pub fused: bool,
    /// One row per op (per layer group), with its share of the step.
    #[arg(long, conflicts_with = "by_layer")]
    pub by_op: bool,
    /// Time per layer group, broken down by op kind.
    #[arg(long)]
    pub by_layer: bool,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON (the same document `POST /api/model` returns).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print one CSV record per op.
    #[arg(long)]
    pub csv: bool,
    /// Also draw every op on the roofline (kernel placement chart) into this .svg or .png file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,
}

/// Subcommands of `roofline model`.
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// The embedded model presets.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Loads a preset or a config.json file.
pub fn load_config(spec: &str) -> Result<ModelConfig> {
    let path = std::path::Path::new(spec);
    if spec.ends_with(".json") || path.is_file() {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {spec}"))?;
        return ModelConfig::from_json(&text).with_context(|| format!("in {spec}"));
    }
    ModelConfig::preset(spec).map_err(Into::into)
}

/// Runs `roofline model`.
pub fn run(args: Args) -> Result<()> {
    if let Some(Sub::List { json }) = args.sub {
        return list(json);
    }
    let spec = args
        .config
        .as_deref()
        .context("--config is required (a preset from `roofline model list` or a config.json)")?;
    let cfg = load_config(spec)?;
    let hw = args.hw.resolve()?;
    let req = ModelRequest {
        phase: args.phase,
        batch: args.batch,
        seq: args.seq,
        tp: args.tp,
        weights: args.weights,
        activations: args.activations,
        kv: args.kv,
        roles: Default::default(),
        fused: args.fused,
    };
    let report = analyze_model(&cfg, &req, &hw)?;
    if let Some(path) = &args.plot {
        let spec = super::plot::model_chart(&report, &hw)?;
        super::plot::write_chart(&spec, super::plot::Chart::Roofline, path)?;
    }
    if args.json {
        return print_json(&report);
    }
    if args.csv {
        print!("{}", render::to_csv(&report));
    } else if args.by_layer {
        print!("{}", render::render_by_layer(&report));
    } else {
        print!("{}", render::render_by_op(&report));
    }
    Ok(())
}

fn list(json: bool) -> Result<()> {
    let presets = ModelConfig::presets()?;
    if json {
        return print_json(
            &presets.iter().map(|(k, c)| serde_json::json!({"key": k, "config": c})).collect::<Vec<_>>(),
        );
    }
    let mut t = table(&["Preset", "Name", "Type", "Layers", "Hidden", "Heads", "KV heads", "Experts", "Attention"]);
    for (key, c) in presets {
        t.add_row(vec![
            key,
            c.name.clone(),
            c.model_type.clone(),
            c.layers.to_string(),
            c.hidden.to_string(),
            c.heads.to_string(),
            c.kv_heads.to_string(),
            c.moe.map_or("-".into(), |m| format!("{} (top {})", m.experts, m.top_k)),
            match c.attention {
                roofline_core::model::Attention::Gqa => "GQA/MHA".into(),
                roofline_core::model::Attention::Mla(_) => "MLA".to_string(),
            },
        ]);
    }
    println!("{t}");
    Ok(())
}
