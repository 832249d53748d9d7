//! `roofline model-bench`: one decode step of a model measured on the GPU, next to `roofline model`'s
//! prediction for the same config, scheme, batch, context and hardware profile.

use anyhow::{bail, Context, Result};
use clap::Args;
use roofline_core::model::{
    analyze_model, Attention, Mlp, ModelConfig, ModelReport, ModelRequest, OpKind, RoleScheme, RoleSchemes,
};
use roofline_core::recommend::Phase;
use roofline_core::Format;
use roofline_gpu::model_bench::{
    AttnKernel, BenchConfig, FfnKernel, KvFormat, MoeShape, OpTime, QkvKernel, StepResult, HEAD_DIM,
};
use roofline_gpu::weight_only::{GemvOverride, WoFormat};
use roofline_gpu::Gpu;

use super::parse_format;
use crate::hw_args::HwArgs;
use crate::output::{print_json, sig3, table};

/// Flags of `roofline model-bench`.
#[derive(Debug, Args)]
#[command(after_help = "Every linear layer runs on roofline's weight-only kernels (FP16 activations; FP16 KV cache,
or FP8 with --kv fp8); the step is captured in a CUDA graph and replayed; weights are random,
of the model's real shapes, or a checkpoint's (--checkpoint). The prediction is `roofline model`
for the same config, scheme, batch and context on --hw (give a profile measured by `roofline
calibrate` for the calibrated prediction).

By default the step is fused as serving engines run it: RMSNorms inside the next linear, residual
adds inside the linear before, RoPE and the KV append inside the attention launch, and, where the
down_proj kernel holds x in registers (4-bit weights, batch <= 2), SwiGLU inside down_proj. The
prediction then counts a fused op's bytes but not the launch and start-up cost a kernel of its own
would pay. --ffn fused runs the whole dense FFN (norm, gate_up, SwiGLU, down, residual add) as one
kernel (4-bit weights: INT4, NF4, MXFP4, NVFP4; batch 1): each CTA owns a slice of the intermediate dimension, so the two
GEMVs share one ramp and one drain; its time shows on gate_up_proj. --no-fuse runs one kernel per op. On sm_90+ the fused attention runs on thread-block
clusters (--attention cluster); --attention splits runs the kernel every GPU has. --qkv fused (4-bit
weights: INT4, MXFP4, NVFP4; batch 1) runs the qkv projection inside the cluster attention: each KV
head's cluster computes its own q, k and v rows, then attends, so a cluster barrier replaces the
kernel boundary; its time shows on the attention row. It is opt-in: on the H100 the fused kernel
cannot start streaming before the FFN's CTAs leave (its CTAs are too large to sit beside them),
which costs more than the boundary saves.

Before anything is timed, one step is checked against f64 CPU references of the quantized weights:
the last layer's attention and KV append, its qkv projection, o_proj and FFN (fused step; o_proj and
the FFN as what they add to the FP16 residual stream, o_proj launched once more on a zeroed stream),
and the LM head, the linears on about 512 sampled rows each. Any of them off by more than 1e-2 is an
error (\"wrong result\"), not a timing.

Each op is timed alone (its launches back to back, rotating over the layers: `Measured us`) and, for
the layers of a dense fused step, in the step (`In step us`: the CUDA graph minus the same graph
without that op, per instance). The two differ where an op overlaps its real neighbours differently
from itself: a kernel whose CTAs cannot be resident beside the previous kernel's starts its loads late.

MoE models (Mixtral, Qwen-MoE): an FP16 router GEMV, a top-k kernel writing each token's experts
and weights on the device, each routed expert's gate_up and down GEMVs (tokens gathered per expert
for batch > 1), the shared experts, and a combine kernel adding the weighted outputs into the
residual stream. The expert launches are fixed to the routing of the checked step (a CUDA graph
cannot follow data-dependent launches; every expert has the same shape, so the time depends only on
how many experts run and how many tokens each takes); the routing, one expert's output and the
combine are checked against the CPU. Large MoE models need --layers (an error says how many fit).

Examples:
  roofline model-bench --config llama-3.1-8b --scheme fp16 --hw h100-measured.toml
  roofline model-bench --config llama-3.1-8b --schemes fp16,fp8,int8,int4,nvfp4,nf4 --layers 8
  roofline model-bench --config ./config.json --scheme int4 --batch 8 --seq 4096 --json
  roofline model-bench --config llama-3.1-8b --schemes fp16,int4 --kv fp8 --seq 8192
  roofline model-bench --checkpoint ./Llama-3.2-1B --schemes fp16,int4
  roofline model-bench --config mixtral-8x7b --schemes fp16,int4 --layers 16
  roofline model-bench --config llama-3.1-8b --scheme int4 --layers 8 --gemv variant=xreg,stages=3
  roofline model-bench --config llama-3.1-8b --schemes int4 --ffn fused   # the FFN as one kernel
  roofline model-bench --config llama-3.1-8b --schemes int4 --qkv fused   # qkv inside the attention")]
pub struct ModelBenchArgs {
    /// Model preset (`roofline model list`) or a config.json (Llama-family or Mixtral/Qwen-MoE, head_dim 128). Default
    /// with --checkpoint: its config.json.
    #[arg(long, value_name = "PRESET|FILE", required_unless_present = "checkpoint")]
    pub config: Option<String>,
    /// Run a Hugging Face checkpoint's weights (a directory with config.json and safetensors, F32/F16/BF16;
    /// Llama-family tensor names, MoE experts in the Mixtral or Qwen3-MoE layout, no shared experts),
    /// quantized on the host to each scheme, instead of random weights of the same shapes. With --layers N,
    /// its first N layers. The KV cache stays random (no prefill).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<std::path::PathBuf>,
    /// Weight format of every linear layer: FP16, BF16, FP8_E4M3, INT8, INT4 (= INT4_G128), NF4, MXFP4, NVFP4.
    #[arg(long, value_parser = parse_format, conflicts_with = "schemes")]
    pub scheme: Option<Format>,
    /// Several schemes, compared (comma-separated): speed-up over FP16 measured vs predicted.
    #[arg(long, value_delimiter = ',', value_parser = parse_format)]
    pub schemes: Vec<Format>,
    /// Tokens decoded together (1..=16).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Context already in the KV cache.
    #[arg(long, default_value_t = 1024)]
    pub seq: usize,
    /// Build only this many layers and scale the step to the model's layer count (default: all).
    #[arg(long)]
    pub layers: Option<usize>,
    /// RoPE base (does not change the time; Llama 3 uses 500000).
    #[arg(long, default_value_t = 500_000.0)]
    pub rope_theta: f32,
    /// One kernel per op instead of the fused step (RMSNorms folded into the next linear, residual adds
    /// into the linear before, RoPE and KV append into the attention launch): shows what fusion buys.
    #[arg(long)]
    pub no_fuse: bool,
    /// The fused step's attention kernel: `cluster` (a thread-block cluster of up to 16 CTAs per KV head
    /// merging through distributed shared memory, sm_90+), `splits` (a CTA per 16 positions, the last one
    /// merging from global memory, any GPU) or `auto` (cluster where the GPU has clusters).
    #[arg(long, value_enum, default_value_t = AttnArg::Auto)]
    pub attention: AttnArg,
    /// KV cache format: fp16, or fp8 (E4M3 codes with one scale for K and one for V, read by the cluster
    /// attention kernel: fused step, sm_90+). The prediction reads the KV in the same format.
    #[arg(long, value_enum, default_value_t = KvArg::Fp16)]
    pub kv: KvArg,
    /// How the fused step runs a dense FFN: `fused` (one kernel: RMSNorm, gate_up, SwiGLU, down and the
    /// residual add; INT4 g128, NF4, MXFP4 or NVFP4 weights, batch 1, hidden a multiple of 1024 up to 6144;
    /// an error elsewhere), `gemv` (gate_up and down as two GEMVs) or `auto` (fused where it applies and is
    /// the faster on the H100: INT4, MXFP4, NVFP4; else two GEMVs; the default).
    #[arg(long, value_enum, default_value_t = FfnArg::Auto)]
    pub ffn: FfnArg,
    /// How the fused step runs the qkv projection: `gemv` (its own GEMV; the default) or `fused` (inside the
    /// cluster attention's launch, a cluster per KV head computing its q, k and v rows; INT4 g128, MXFP4 or
    /// NVFP4 weights, batch 1, sm_90+, hidden 1024 to 8192, at most 8 q heads per KV head; an error
    /// elsewhere; slower than the GEMV on the H100).
    #[arg(long, value_enum, default_value_t = QkvArg::Gemv)]
    pub qkv: QkvArg,
    /// Run every weight-only GEMV of the step with this kernel variant and launch plan instead of the
    /// measured defaults (`key=value` pairs; --help lists the keys).
    #[arg(long, value_name = "KEY=VALUE,...", default_value = "", long_help = gemv_help())]
    pub gemv: GemvOverride,
    /// GPU index.
    #[arg(long, default_value = "0")]
    pub device: usize,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--gemv`'s long help for model-bench.
fn gemv_help() -> String {
    super::gemv_help(
        "Run every weight-only GEMV of the step (not the MoE router) with this kernel variant and launch plan \
         instead of the measured defaults",
        "--gemv variant=xreg,stages=4 (weights through shared memory, 3 steps ahead)",
    )
}

/// `--kv` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KvArg {
    /// FP16 values.
    Fp16,
    /// FP8 E4M3 codes, per-tensor scales.
    Fp8,
}

impl KvArg {
    fn kernel(self) -> KvFormat {
        match self {
            KvArg::Fp16 => KvFormat::F16,
            KvArg::Fp8 => KvFormat::Fp8E4M3,
        }
    }

    fn format(self) -> Format {
        match self {
            KvArg::Fp16 => Format::FP16,
            KvArg::Fp8 => Format::FP8_E4M3,
        }
    }
}

/// `--ffn` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FfnArg {
    /// Fused where the kernel applies, two GEMVs elsewhere.
    Auto,
    /// One fused kernel (an error where it does not apply).
    Fused,
    /// Two GEMVs.
    Gemv,
}

impl From<FfnArg> for FfnKernel {
    fn from(a: FfnArg) -> Self {
        match a {
            FfnArg::Auto => FfnKernel::Auto,
            FfnArg::Fused => FfnKernel::Fused,
            FfnArg::Gemv => FfnKernel::Gemv,
        }
    }
}

/// `--qkv` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QkvArg {
    /// Its own GEMV.
    Gemv,
    /// Inside the attention (an error where it does not apply).
    Fused,
}

impl From<QkvArg> for QkvKernel {
    fn from(a: QkvArg) -> Self {
        match a {
            QkvArg::Gemv => QkvKernel::Gemv,
            QkvArg::Fused => QkvKernel::Fused,
        }
    }
}

/// `--attention` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AttnArg {
    /// Cluster on sm_90+, splits before.
    Auto,
    /// Thread-block clusters (sm_90+).
    Cluster,
    /// Split CTAs merged through global memory (any GPU).
    Splits,
}

impl From<AttnArg> for AttnKernel {
    fn from(a: AttnArg) -> Self {
        match a {
            AttnArg::Auto => AttnKernel::Auto,
            AttnArg::Cluster => AttnKernel::Cluster,
            AttnArg::Splits => AttnKernel::Splits,
        }
    }
}

/// A benchmarked scheme with its prediction (the measured step's fusions applied: an op that ran inside
/// another kernel counts only its roofline time, see `OpRow::fuse_into`).
#[derive(Debug, serde::Serialize)]
struct Row {
    scheme: Format,
    measured: StepResult,
    predicted: ModelReport,
    /// Ops measured more than 25% off their prediction, each with where its time goes (see `misses`).
    misses: Vec<String>,
}

/// The prediction for the kernels the measured step ran: every op it ran inside another kernel is marked
/// so (its launch and start-up costs leave the total). An op name the prediction lacks is an error: the two
/// sides would no longer describe the same step.
fn join_fusions(mut predicted: ModelReport, measured: &StepResult) -> Result<ModelReport> {
    for op in &measured.fused {
        let found = match &op.after {
            Some(after) => predicted.fuse_after(&op.name, after, &op.into),
            None => predicted.fuse(&op.name, &op.into),
        };
        if !found {
            bail!("the measured step fused `{}`, an op `roofline model` does not list", op.name);
        }
    }
    Ok(predicted)
}

/// The weight-only kernel format of a scheme.
fn wo_format(f: Format) -> Result<WoFormat> {
    WoFormat::from_format(f).map_err(|e| anyhow::anyhow!("--scheme {f}: {e}"))
}

fn bench_config(cfg: &ModelConfig, a: &ModelBenchArgs, f: Format) -> Result<BenchConfig> {
    let size = |v: u64| usize::try_from(v).context("size does not fit this machine");
    let moe = match cfg.moe {
        Some(m) if m.first_dense_layers > 0 => bail!(
            "{}: MoE models with dense first layers are not benchmarked yet; `roofline model` predicts them",
            cfg.name
        ),
        Some(m) => Some(MoeShape {
            experts: size(m.experts)?,
            top_k: size(m.top_k)?,
            expert_intermediate: size(m.expert_intermediate)?,
            shared_intermediate: size(m.shared_experts * m.shared_intermediate)?,
        }),
        None => None,
    };
    if matches!(cfg.attention, Attention::Mla(_)) {
        bail!("{}: MLA attention is not benchmarked yet (GQA only); `roofline model` predicts it", cfg.name);
    }
    if cfg.mlp != Mlp::Gated || cfg.layer_norm {
        bail!("{}: only SwiGLU + RMSNorm (Llama-family) models are benchmarked", cfg.name);
    }
    if cfg.head_dim as usize != HEAD_DIM {
        bail!("{}: head_dim {} (the decode attention kernel is written for {HEAD_DIM})", cfg.name, cfg.head_dim);
    }
    let b = BenchConfig {
        hidden: size(cfg.hidden)?,
        heads: size(cfg.heads)?,
        kv_heads: size(cfg.kv_heads)?,
        intermediate: size(cfg.intermediate)?,
        vocab: size(cfg.vocab)?,
        layers: size(cfg.layers)?,
        layers_built: a.layers.unwrap_or(size(cfg.layers)?),
        batch: a.batch,
        seq: a.seq,
        weights: wo_format(f)?,
        rope_theta: a.rope_theta,
        fuse: !a.no_fuse,
        attention: a.attention.into(),
        kv: a.kv.kernel(),
        checkpoint: a.checkpoint.clone(),
        moe,
        gemv: a.gemv,
        ffn: a.ffn.into(),
        qkv: a.qkv.into(),
    };
    b.validate()?;
    Ok(b)
}

fn predict(
    cfg: &ModelConfig,
    a: &ModelBenchArgs,
    f: Format,
    hw: &roofline_core::HardwareProfile,
) -> Result<ModelReport> {
    let req = ModelRequest {
        phase: Phase::Decode,
        batch: a.batch as u64,
        seq: a.seq as u64,
        weights: f,
        activations: Format::FP16,
        kv: a.kv.format(),
        // The bench quantizes the LM head with the other linears; predict the same.
        roles: RoleSchemes {
            lm_head: Some(RoleScheme { weights: f, activations: Format::FP16 }),
            ..RoleSchemes::default()
        },
        ..ModelRequest::default()
    };
    Ok(analyze_model(cfg, &req, hw)?)
}

fn kind_name(k: OpKind) -> &'static str {
    match k {
        OpKind::Linear | OpKind::Experts => "linear",
        OpKind::Attention => "attention",
        OpKind::Norm => "norm",
        _ => "elementwise",
    }
}

/// Runs `roofline model-bench`.
pub fn run(a: ModelBenchArgs) -> Result<()> {
    let spec = match (&a.config, &a.checkpoint) {
        (Some(c), _) => c.clone(),
        (None, Some(dir)) => dir.join("config.json").to_string_lossy().into_owned(),
        (None, None) => bail!("--config or --checkpoint is required"),
    };
    let cfg = super::model::load_config(&spec)?;
    let hw = a.hw.resolve()?;
    let schemes: Vec<Format> = match (a.scheme, a.schemes.is_empty()) {
        (Some(f), _) => vec![f],
        (None, false) => a.schemes.clone(),
        (None, true) => vec![Format::FP16],
    }
    .into_iter()
    // A bare INT4 means the group-wise INT4 the kernels (and serving engines) run.
    .map(|f| if f == Format::INT4 { Format::INT4_G128 } else { f })
    .collect();
    // Validate everything before touching the GPU.
    let plans = schemes
        .iter()
        .map(|&f| Ok((f, bench_config(&cfg, &a, f)?, predict(&cfg, &a, f, &hw)?)))
        .collect::<Result<Vec<_>>>()?;
    let gpu = Gpu::open(a.device)?;
    let mut rows = Vec::new();
    for (f, bc, predicted) in plans {
        eprintln!(
            "model-bench: {} {f} B={} S={} ({} of {} layers built)",
            cfg.name, bc.batch, bc.seq, bc.layers_built, bc.layers
        );
        let measured = gpu.model_bench(&bc, |step| eprintln!("  {step} ..."))?;
        let predicted = join_fusions(predicted, &measured)?;
        let why = misses(&predicted, &measured, MISS_FRACTION);
        rows.push(Row { scheme: f, measured, predicted, misses: why });
    }
    if a.json {
        return print_json(&rows);
    }
    if a.gemv != GemvOverride::default() {
        println!("weight-only GEMVs: --gemv {} (instead of the measured defaults)", a.gemv);
    }
    for r in &rows {
        print_row(&cfg, &hw, a.batch, r);
    }
    if rows.len() > 1 {
        print_comparison(&rows, a.batch);
    }
    Ok(())
}

fn print_row(cfg: &ModelConfig, hw: &roofline_core::HardwareProfile, batch: usize, r: &Row) {
    let m = &r.measured;
    let p = &r.predicted;
    println!(
        "{} decode B={batch} S={} weights {} ({}) on every linear incl. lm_head (FP16 activations, {} KV), {} step, on {} | prediction: {} [{}]",
        cfg.name,
        p.request.seq,
        r.scheme,
        m.weights,
        p.request.kv,
        if m.fused.iter().any(|f| f.name == "rotary_emb") { "fused" } else { "unfused" },
        m.device,
        hw.name,
        hw.source
    );
    let in_step = m.ops.iter().any(|o| o.in_step_us.is_some());
    let mut head = vec!["Op", "Kind", "x", "Predicted us", "Measured us", "Error", "% of roof"];
    if in_step {
        head.push("In step us");
    }
    let mut t = table(&head);
    let mut by_kind: Vec<(&str, f64, f64)> = Vec::new();
    for op in &p.ops {
        let meas = measured_op(op, m);
        let pred = with_fused(p, op).time_us;
        if let Some(o) = meas {
            let k = kind_name(op.kind);
            match by_kind.iter_mut().find(|(n, _, _)| *n == k) {
                Some(e) => {
                    e.1 += pred * op.count as f64;
                    e.2 += o.time_us * o.count as f64;
                }
                None => by_kind.push((k, pred * op.count as f64, o.time_us * o.count as f64)),
            }
        }
        t.add_row(op_cells(op, pred, meas, in_step));
    }
    println!("{t}");
    if in_step {
        println!(
            "(in step: what one instance adds to the CUDA-graph step, the graph minus the graph without the op; it counts the op's overlap with its real neighbours, which `Measured` (the op launched back to back with itself) does not)"
        );
    }
    if p.ops.iter().any(|o| o.fused_into.is_some()) {
        println!("(a row's prediction includes the ops that run inside its kernel, marked `in <op>`)");
    }
    let err = (m.step_us - p.totals.time_us) / m.step_us;
    println!(
        "step: measured {} us (CUDA graph, {} replays; sum of per-op times {} us), predicted {} us, error {:+.1}%",
        sig3(m.step_us),
        m.replays,
        sig3(m.ops_sum_us),
        sig3(p.totals.time_us),
        100.0 * err
    );
    println!(
        "tokens/s: measured {:.1}, predicted {:.1}; attention ({}) + KV append check vs CPU f64: rel. error {:.1e}",
        m.tokens_per_s(batch),
        p.totals.tokens_per_s,
        m.attention_kernel,
        m.attention_rel_error
    );
    if let Some(e) = m.qkv_rel_error {
        println!("qkv projection inside the attention vs the qkv GEMV on the same x: rel. error {e:.1e}");
    }
    if let Some(e) = m.ffn_rel_error {
        println!(
            "last layer's FFN (what it adds to the residual stream) vs CPU f64 of its quantized weights: rel. error {}",
            stream_error(e)
        );
    }
    let l = &m.linear_rel_errors;
    let attn_linears = match (l.qkv, l.o_proj) {
        (Some(q), Some(o)) => {
            format!("last layer's qkv_proj {q:.1e}, o_proj (what it adds to the stream) {o:.1e}, ")
        }
        _ => String::new(),
    };
    println!(
        "{attn_linears}lm_head {:.1e}: rel. error vs CPU f64 of the quantized weights (~512 sampled rows each)",
        l.lm_head
    );
    if let Some(c) = &m.moe {
        let mut per_layer: Vec<String> = c.experts_per_layer.iter().take(4).map(|e| format!("{e:?}")).collect();
        if c.experts_per_layer.len() > 4 {
            per_layer.push("...".into());
        }
        println!(
            "MoE: experts run per layer (routed in the checked step; every expert has the same shape, so the timed launches and the graph replay these) {}; last layer vs CPU f64: router logits {:.1e}, one expert's gate_up {:.1e}, combine {:.1e}",
            per_layer.join(" "),
            c.router_rel_error,
            c.expert_rel_error,
            c.combine_rel_error
        );
    }
    let kinds: Vec<String> =
        by_kind.iter().map(|(k, pred, meas)| format!("{k} {:+.1}%", 100.0 * (meas - pred) / meas)).collect();
    println!("error per op type (time-weighted): {}", kinds.join(", "));
    if !r.misses.is_empty() {
        println!("ops measured more than {:.0}% off the prediction, and why:", 100.0 * MISS_FRACTION);
        for line in &r.misses {
            println!("  {line}");
        }
    }
    println!();
}

/// One row of the per-op table: the op, its prediction `pred` (us, with the ops inside its kernel), and what
/// was measured of it (`meas`: alone, and with `in_step` its share of the step), or where it ran.
fn op_cells(op: &roofline_core::model::OpRow, pred: f64, meas: Option<&OpTime>, in_step: bool) -> Vec<String> {
    let (meas_s, err_s, roof_s) = match meas {
        Some(o) => (
            sig3(o.time_us),
            format!("{:+.1}%", 100.0 * (o.time_us - pred) / o.time_us),
            format!("{:.0}%", 100.0 * pred / o.time_us),
        ),
        None => match &op.fused_into {
            Some(host) => (format!("in {host}"), "-".into(), "-".into()),
            None => ("-".into(), "-".into(), "-".into()),
        },
    };
    let mut row =
        vec![op.name.clone(), kind_name(op.kind).into(), op.count.to_string(), sig3(pred), meas_s, err_s, roof_s];
    if in_step {
        row.push(meas.and_then(|o| o.in_step_us).map_or_else(|| "-".into(), sig3));
    }
    row
}

/// The measured time of a predicted op: the measured op of its name, unless the step ran it inside another
/// kernel (a MoE step measures one `residual_add`, the combine, and fuses the other into o_proj).
fn measured_op<'a>(op: &roofline_core::model::OpRow, m: &'a StepResult) -> Option<&'a OpTime> {
    if op.fused_into.is_some() {
        return None;
    }
    m.ops.iter().find(|o| o.name == op.name)
}

/// A measured op's predicted time, bytes and compute time with the ops the step ran inside its kernel added
/// (those of its layer group whose `fused_into` names it, per instance of the op): the fused FFN's
/// gate_up_proj row measures the whole FFN, so its prediction must cover the FFN too.
struct HostPrediction {
    time_us: f64,
    bytes: f64,
    time_compute_us: f64,
}

fn with_fused(p: &ModelReport, op: &roofline_core::model::OpRow) -> HostPrediction {
    let pr = &op.prediction;
    let mut h = HostPrediction { time_us: pr.time_us, bytes: pr.bytes as f64, time_compute_us: pr.time_compute_us };
    let per = |o: &roofline_core::model::OpRow| o.count as f64 / op.count.max(1) as f64;
    for o in p.ops.iter().filter(|o| o.group == op.group && o.fused_into.as_deref() == Some(op.name.as_str())) {
        h.time_us += o.prediction.time_us * per(o);
        h.bytes += o.prediction.bytes as f64 * per(o);
        h.time_compute_us += o.prediction.time_compute_us * per(o);
    }
    h
}

/// Relative error above which `misses` explains an op (the criterion: 25%).
const MISS_FRACTION: f64 = 0.25;

/// For every measured op whose time is off the prediction by more than `fraction` (of the measured time),
/// a line that says where its time goes: the prediction's parts (bytes at the roof bandwidth, FLOPs at the
/// peak, the fixed launch and start-up cost) against the bandwidth the measured time implies. An op whose
/// bytes take less than its fixed costs is latency-bound (the kernel's chain of dependent steps, which the
/// roofline does not model); otherwise it is a kernel below its roof.
fn misses(p: &ModelReport, m: &StepResult, fraction: f64) -> Vec<String> {
    let mut out = Vec::new();
    for op in &p.ops {
        let Some(meas) = measured_op(op, m) else { continue };
        let pr = &op.prediction;
        let host = with_fused(p, op);
        let err = (meas.time_us - host.time_us) / meas.time_us;
        if err.abs() <= fraction || out.iter().any(|l: &String| l.starts_with(&format!("{}:", op.name))) {
            continue;
        }
        let achieved = host.bytes / (meas.time_us * 1e3);
        // The prediction's parts: moving the bytes at the roof bandwidth, the FLOPs at the peak, and the fixed
        // costs (memory start-up latency and launch overhead) the rest of its time.
        let transfer = host.bytes / (pr.bandwidth_gb_s * 1e3);
        let work = transfer.max(host.time_compute_us);
        let fixed = (host.time_us - work).max(0.0);
        let parts = format!(
            "{}: measured {} us vs predicted {} us ({:+.0}%): {:.2} MB take {} us at {:.0} GB/s, FLOPs {} us, fixed costs {} us; measured, its bytes move at {:.0} GB/s ({:.0}% of the roof)",
            op.name,
            sig3(meas.time_us),
            sig3(host.time_us),
            100.0 * err,
            host.bytes / 1e6,
            sig3(transfer),
            pr.bandwidth_gb_s,
            sig3(host.time_compute_us),
            sig3(fixed),
            achieved,
            100.0 * achieved / pr.bandwidth_gb_s
        );
        let reason = if err < 0.0 {
            "faster than predicted: the roof or the fixed costs in the profile are too pessimistic for this kernel"
        } else if work < fixed {
            "latency-bound: its bytes are a small part of its time; the rest is the kernel's chain of dependent steps, which the roofline does not model"
        } else if pr.bound == roofline_core::predict::Bound::Compute {
            "compute-bound kernel below the profile's peak"
        } else {
            "memory-bound kernel below the roof bandwidth at this size (`roofline compare --weight-only` at its shape shows the kernel alone)"
        };
        out.push(format!("{parts}: {reason}"));
    }
    out
}

fn print_comparison(rows: &[Row], batch: usize) {
    let base = rows.iter().find(|r| r.scheme == Format::FP16).or(rows.first());
    let mut t = table(&["Scheme", "Measured tok/s", "Predicted tok/s", "Error", "Speed-up meas", "Speed-up pred"]);
    for r in rows {
        let (ms, ps) = (r.measured.tokens_per_s(batch), r.predicted.totals.tokens_per_s);
        let (bm, bp) = base.map_or((ms, ps), |b| (b.measured.tokens_per_s(batch), b.predicted.totals.tokens_per_s));
        t.add_row(vec![
            r.scheme.to_string(),
            format!("{ms:.1}"),
            format!("{ps:.1}"),
            format!("{:+.1}%", 100.0 * (ps - ms) / ps),
            format!("{:.2}x", ms / bm),
            format!("{:.2}x", ps / bp),
        ]);
    }
    println!("{t}");
}

/// An error of what a block adds to the FP16 residual stream, as model-bench measures it (beyond the stream's
/// own rounding, which is taken out): 0 means within that rounding, said so rather than printed as "0.0e0".
fn stream_error(e: f64) -> String {
    if e == 0.0 {
        "within the stream's FP16 rounding".into()
    } else {
        format!("{e:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roofline_gpu::model_bench::{FusedOp, LinearErrors, OpTime};

    #[test]
    fn a_stream_error_of_zero_reads_as_within_the_rounding() {
        assert_eq!(stream_error(0.0), "within the stream's FP16 rounding");
        assert_eq!(stream_error(2.5e-3), "2.5e-3");
        assert_eq!(stream_error(f64::NAN), "NaN");
    }

    fn step(fused: &[(&str, &str)]) -> StepResult {
        StepResult {
            device: "test".into(),
            step_us: 1.0,
            ops_sum_us: 1.0,
            replays: 1,
            layers_built: 32,
            ops: Vec::new(),
            fused: fused.iter().map(|(n, i)| FusedOp { name: (*n).into(), into: (*i).into(), after: None }).collect(),
            attention_rel_error: 0.0,
            qkv_rel_error: None,
            ffn_rel_error: None,
            linear_rel_errors: LinearErrors { qkv: None, o_proj: None, lm_head: 0.0 },
            attention_kernel: "test".into(),
            weights: "random".into(),
            moe: None,
        }
    }

    #[test]
    fn moe_steps_join_the_prediction_row_by_row() {
        let cfg = super::super::model::load_config("mixtral-8x7b").unwrap();
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: ModelBenchArgs,
        }
        let a = <Cli as clap::Parser>::try_parse_from(["x", "--config", "mixtral-8x7b", "--layers", "8"]).unwrap().a;
        let b = bench_config(&cfg, &a, Format::INT4_G128).unwrap();
        assert_eq!(b.moe, Some(MoeShape { experts: 8, top_k: 2, expert_intermediate: 14336, shared_intermediate: 0 }));
        // The MoE step's list: the attention's residual add in o_proj, the FFN's measured (the combine).
        let (_, hw) = llama_on_measured_h100();
        let plain = predict(&cfg, &a, Format::INT4_G128, &hw).unwrap();
        let mut m =
            step(&[("input_layernorm", "qkv_proj"), ("post_attention_layernorm", "router_gate, experts_gate_up")]);
        m.fused.push(FusedOp { name: "residual_add".into(), into: "o_proj".into(), after: Some("o_proj".into()) });
        m.ops = vec![OpTime {
            name: "residual_add".into(),
            kind: "elementwise".into(),
            count: 32,
            time_us: 3.0,
            in_step_us: None,
        }];
        let joined = join_fusions(plain, &m).unwrap();
        let adds: Vec<&roofline_core::model::OpRow> = joined.ops.iter().filter(|o| o.name == "residual_add").collect();
        assert_eq!(adds.len(), 2);
        assert_eq!(adds[0].fused_into.as_deref(), Some("o_proj"));
        assert!(measured_op(adds[0], &m).is_none());
        assert_eq!(measured_op(adds[1], &m).map(|o| o.time_us), Some(3.0));
        // Dense first layers (DeepSeek) are refused with a reason, not a panic.
        let ds = super::super::model::load_config("deepseek-v3").unwrap();
        assert!(bench_config(&ds, &a, Format::INT4_G128).is_err());
    }

    #[test]
    fn a_host_row_predicts_the_ops_fused_into_it() {
        // The fused FFN step: down_proj, SwiGLU and the norm run inside gate_up_proj's kernel.
        let (cfg, hw) = llama_on_measured_h100();
        let req = ModelRequest { weights: Format::INT4_G128, ..ModelRequest::default() };
        let plain = analyze_model(&cfg, &req, &hw).unwrap();
        let m = step(&[
            ("input_layernorm", "qkv_proj"),
            ("rotary_emb", "attention"),
            ("residual_add", "o_proj, gate_up_proj"),
            ("post_attention_layernorm", "gate_up_proj"),
            ("silu_and_mul", "gate_up_proj"),
            ("down_proj", "gate_up_proj"),
            ("final_norm", "lm_head"),
        ]);
        let p = join_fusions(plain, &m).unwrap();
        let row = |name: &str| p.ops.iter().find(|o| o.name == name).unwrap();
        let own = |name: &str| row(name).prediction.time_us;
        let want = own("gate_up_proj") + own("down_proj") + own("silu_and_mul") + own("post_attention_layernorm");
        let host = with_fused(&p, row("gate_up_proj"));
        assert!((host.time_us - want).abs() < 1e-9, "{} vs {want}", host.time_us);
        let bytes = row("gate_up_proj").prediction.bytes + row("down_proj").prediction.bytes;
        assert!(host.bytes > bytes as f64);
        // Unchanged for a row nothing runs inside.
        assert_eq!(with_fused(&p, row("o_proj")).time_us, own("o_proj"));
        // Measured at the whole FFN's prediction, gate_up_proj is not a miss.
        let mut m = m;
        m.ops = vec![OpTime {
            name: "gate_up_proj".into(),
            kind: "linear".into(),
            count: 32,
            time_us: want,
            in_step_us: None,
        }];
        assert!(misses(&p, &m, MISS_FRACTION).is_empty());
    }

    #[test]
    fn op_rows_show_the_share_of_the_step_beside_the_time_alone() {
        let (cfg, hw) = llama_on_measured_h100();
        let m = step(&[("input_layernorm", "qkv_proj"), ("rotary_emb", "attention")]);
        let p = join_fusions(analyze_model(&cfg, &ModelRequest::default(), &hw).unwrap(), &m).unwrap();
        let row = |name: &str| p.ops.iter().find(|o| o.name == name).unwrap();
        let t = |time_us: f64, in_step_us: Option<f64>| OpTime {
            name: "qkv_proj".into(),
            kind: "linear".into(),
            count: 32,
            time_us,
            in_step_us,
        };
        let qkv = row("qkv_proj");
        // Measured alone at twice the prediction, 8 us of the step: error +50%, half the roof, the share.
        let cells = op_cells(qkv, 5.0, Some(&t(10.0, Some(8.0))), true);
        assert_eq!(cells[3..], ["5.00", "10.0", "+50.0%", "50%", "8.00"]);
        // No share measured (the final ops, MoE steps): a dash; no column when no op has one.
        assert_eq!(op_cells(qkv, 5.0, Some(&t(10.0, None)), true).last().map(String::as_str), Some("-"));
        assert_eq!(op_cells(qkv, 5.0, Some(&t(10.0, Some(8.0))), false).len(), 7);
        // An op run inside another kernel says where.
        let norm = op_cells(row("input_layernorm"), 0.01, None, true);
        assert_eq!(norm[4..], ["in qkv_proj", "-", "-", "-"]);
    }

    /// Llama-3.1-8B and the calibrated H100 profile the benchmarks use.
    fn llama_on_measured_h100() -> (ModelConfig, roofline_core::HardwareProfile) {
        let cfg = super::super::model::load_config("llama-3.1-8b").unwrap();
        let hw = roofline_core::HardwareProfile::from_toml(
            include_str!("../../../../bench/results/h100-measured.toml"),
            "h100-measured.toml",
        )
        .unwrap();
        (cfg, hw)
    }

    #[test]
    fn ops_off_by_more_than_a_quarter_are_explained() {
        let (cfg, hw) = llama_on_measured_h100();
        let req = ModelRequest { weights: Format::INT4_G128, fused: true, ..ModelRequest::default() };
        let p = analyze_model(&cfg, &req, &hw).unwrap();
        let pred = |name: &str| p.ops.iter().find(|o| o.name == name).unwrap().prediction.time_us;
        let op = |name: &str, t: f64| OpTime {
            name: name.into(),
            kind: "x".into(),
            count: 32,
            time_us: t,
            in_step_us: None,
        };
        let mut m = step(&[]);
        // attention twice its prediction (latency: 4.2 MB of KV is ~1.4 us, the fixed costs ~3.1 us), gate_up
        // 1.5 times (a memory-bound kernel below the roof), qkv within 10%, down_proj 30% faster.
        m.ops = vec![
            op("attention", 2.0 * pred("attention")),
            op("gate_up_proj", 1.5 * pred("gate_up_proj")),
            op("qkv_proj", 1.1 * pred("qkv_proj")),
            op("down_proj", 0.7 * pred("down_proj")),
        ];
        let why = misses(&p, &m, MISS_FRACTION);
        println!("{}", why.join("\n"));
        assert_eq!(why.len(), 3, "{why:#?}");
        assert!(
            why[0].starts_with("attention:") && why[0].contains("+50%") && why[0].contains("latency-bound"),
            "{}",
            why[0]
        );
        assert!(why[1].starts_with("gate_up_proj:") && why[1].contains("below the roof bandwidth"), "{}", why[1]);
        // 30% faster: -43% of the measured time.
        assert!(why[2].starts_with("down_proj:") && why[2].contains("faster than predicted"), "{}", why[2]);
        // 67% of the roof for gate_up measured at 1.5x its prediction's memory-bound time (+ fixed costs).
        assert!(why[1].contains("% of the roof"));
    }

    #[test]
    fn measured_fusions_join_the_prediction() {
        let (cfg, hw) = llama_on_measured_h100();
        let req = ModelRequest {
            weights: Format::INT4_G128,
            activations: Format::FP16,
            kv: Format::FP16,
            ..ModelRequest::default()
        };
        let plain = analyze_model(&cfg, &req, &hw).unwrap();
        // The fused step's list equals the standard fused-engine prediction, op for op.
        let fused_step = step(&[
            ("input_layernorm", "qkv_proj"),
            ("rotary_emb", "attention"),
            ("residual_add", "o_proj, down_proj"),
            ("post_attention_layernorm", "gate_up_proj"),
            ("final_norm", "lm_head"),
        ]);
        let joined = join_fusions(plain.clone(), &fused_step).unwrap();
        let standard = analyze_model(&cfg, &ModelRequest { fused: true, ..req }, &hw).unwrap();
        assert!((joined.totals.time_us - standard.totals.time_us).abs() < 1e-6);
        assert!(joined.totals.time_us < plain.totals.time_us);
        // The unfused step fuses only the residual adds (into the norm kernels).
        let unfused =
            join_fusions(plain.clone(), &step(&[("residual_add", "input_layernorm, post_attention_layernorm")]))
                .unwrap();
        let adds = plain.ops.iter().filter(|o| o.name == "residual_add").count() as f64;
        let fixed = hw.launch_overhead_us.unwrap() + hw.memory_latency_us.unwrap();
        assert!((plain.totals.time_us - unfused.totals.time_us - adds * 32.0 * fixed).abs() < 1e-6);
        // SwiGLU computed by down_proj as it loads x: one more op loses its fixed costs.
        let mut with_silu: Vec<(&str, &str)> = fused_step.fused.iter().map(|f| (&*f.name, &*f.into)).collect();
        with_silu.push(("silu_and_mul", "down_proj"));
        let silu = join_fusions(plain.clone(), &step(&with_silu)).unwrap();
        let silu_ops = plain.ops.iter().filter(|o| o.name == "silu_and_mul").count() as f64;
        assert!((joined.totals.time_us - silu.totals.time_us - silu_ops * 32.0 * fixed).abs() < 1e-6);
        // An op the prediction does not know is an error, not a silent mismatch.
        assert!(join_fusions(plain, &step(&[("mystery_op", "qkv_proj")])).is_err());
    }
}
