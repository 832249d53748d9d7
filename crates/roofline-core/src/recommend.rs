//! The auto-quantizer: rank quantization schemes for one GEMM on one hardware profile, under a memory limit
//! and an accuracy tolerance, and name the winner, the runner-up and the roofline reason.
//!
//! Candidates are *schemes* (weight-only W8A16/W4A16, native W8A8/W4A4, the 16-bit baseline), each with the
//! quantization method that produces it and a documented accuracy prior (see `docs/RECOMMEND.md`).

use std::fmt;
use std::fmt::Write as _;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::format::Format;
use crate::hardware::{ComputeClass, HardwareProfile};
use crate::op::Gemm;
use crate::predict::{predict, Bound, Prediction};
use crate::scheme::Scheme;

/// Inference phase: decode (a few tokens per step, GEMV-like) or prefill (whole prompts, GEMM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Token-by-token generation: M is the batch of sequences (small).
    Decode,
    /// Prompt processing: M is batch x sequence length (large).
    Prefill,
}

impl Phase {
    /// The default phase of a GEMM with `m` rows: decode when `m <= 16`, prefill otherwise.
    pub fn from_m(m: u64) -> Phase {
        if m <= DECODE_MAX_M {
            Phase::Decode
        } else {
            Phase::Prefill
        }
    }

    /// `decode` or `prefill`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Decode => "decode",
            Phase::Prefill => "prefill",
        }
    }
}

/// Largest M treated as decode when no phase is given.
pub const DECODE_MAX_M: u64 = 16;

impl FromStr for Phase {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "decode" | "generate" | "gen" => Ok(Phase::Decode),
            "prefill" | "prompt" => Ok(Phase::Prefill),
            _ => Err(CoreError::invalid("phase", s, "decode or prefill")),
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a candidate's weights (and activations) are produced from an FP16/BF16 checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantMethod {
    /// No quantization (the 16-bit baseline).
    None,
    /// Post-training quantization, round-to-nearest (per-channel/per-group scales; SmoothQuant-style
    /// activation smoothing for W8A8 INT8).
    Ptq,
    /// Activation-aware weight quantization (Lin et al., 2024).
    Awq,
    /// GPTQ second-order weight rounding (Frantar et al., 2023).
    Gptq,
    /// Cast to FP8 E4M3 with per-tensor (or per-channel) scales, FP8 tensor cores.
    NativeFp8,
    /// Quantize weights and activations to a block-scaled FP4 format, FP4 tensor cores.
    NativeFp4,
}

impl QuantMethod {
    /// The method's name as printed and serialized (`ptq`, `awq`, `native_fp4`).
    pub fn as_str(self) -> &'static str {
        match self {
            QuantMethod::None => "none",
            QuantMethod::Ptq => "ptq",
            QuantMethod::Awq => "awq",
            QuantMethod::Gptq => "gptq",
            QuantMethod::NativeFp8 => "native_fp8",
            QuantMethod::NativeFp4 => "native_fp4",
        }
    }
}

impl fmt::Display for QuantMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Kind of candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateKind {
    /// FP16/BF16 weights and activations.
    Baseline,
    /// Low-bit weights, 16-bit activations, dequantized in registers (needs a mixed-precision kernel).
    WeightOnly,
    /// Weights and activations in the same low-bit format on tensor cores of that format.
    Native,
}

/// An accuracy tolerance on the priors' scale: the expected relative increase of WikiText-2 perplexity, in
/// percent, of 7B-70B Llama-class models (see `docs/RECOMMEND.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AccuracyTolerance {
    /// At most 0.5 % (8-bit schemes only).
    Lossless,
    /// At most 2 %.
    Low,
    /// At most 5 % (the good 4-bit schemes).
    Medium,
    /// At most 10 %.
    High,
    /// No limit.
    Any,
    /// An explicit limit in percent.
    Percent(f64),
}

impl AccuracyTolerance {
    /// The limit in percent of perplexity increase (`f64::INFINITY` for [`AccuracyTolerance::Any`]).
    pub fn limit_pct(self) -> f64 {
        match self {
            AccuracyTolerance::Lossless => 0.5,
            AccuracyTolerance::Low => 2.0,
            AccuracyTolerance::Medium => 5.0,
            AccuracyTolerance::High => 10.0,
            AccuracyTolerance::Any => f64::INFINITY,
            AccuracyTolerance::Percent(p) => p,
        }
    }
}

impl FromStr for AccuracyTolerance {
    type Err = CoreError;
    /// `lossless`, `low`, `medium`, `high`, `any`, or a number of percent (`3`, `3%`, `1.5`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let allowed = "lossless (0.5), low (2), medium (5), high (10), any, or a percentage >= 0 such as 3 or 3%";
        match t.as_str() {
            "lossless" | "none" => Ok(AccuracyTolerance::Lossless),
            "low" => Ok(AccuracyTolerance::Low),
            "medium" => Ok(AccuracyTolerance::Medium),
            "high" => Ok(AccuracyTolerance::High),
            "any" => Ok(AccuracyTolerance::Any),
            _ => match t.trim_end_matches('%').trim().parse::<f64>() {
                Ok(p) if p.is_finite() && p >= 0.0 => Ok(AccuracyTolerance::Percent(p)),
                _ => Err(CoreError::invalid("max_accuracy_loss", s, allowed)),
            },
        }
    }
}

/// A request for an op-level recommendation: the input of `roofline recommend --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecommendRequest {
    /// Rows of activations/output (tokens).
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Independent products sharing one weight matrix (default 1).
    #[serde(default = "one")]
    pub batch: u64,
    /// Phase; `None` = decode when `m <= 16`, prefill otherwise.
    #[serde(default)]
    pub phase: Option<Phase>,
    /// Limit on the op's weight memory, GB; `None` = no limit.
    #[serde(default)]
    pub memory_limit_gb: Option<f64>,
    /// Limit on the accuracy prior, percent perplexity increase; `None` = no limit.
    #[serde(default)]
    pub max_accuracy_loss_pct: Option<f64>,
    /// Whether weight-only (mixed-precision) kernels may be used; `None` = yes on GPU presets, no on a custom
    /// accelerator (it runs what its datasheet lists).
    #[serde(default)]
    pub weight_only: Option<bool>,
    /// Measured accuracy costs (`roofline eval ppl --accuracy-out`): a weight-only candidate whose weight
    /// format and method match one uses the measured loss instead of its prior, in the tolerance and in ties.
    #[serde(default)]
    pub measured_accuracy: Vec<MeasuredAccuracy>,
}

/// An accuracy cost measured on a real model: the perplexity increase of weights in `weights` made by
/// `method`, relative to the 16-bit baseline (activations left at full precision, so it applies to
/// weight-only candidates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredAccuracy {
    /// Weight format.
    pub weights: Format,
    /// Method that produced the weights (`awq`, `ptq`).
    pub method: QuantMethod,
    /// Perplexity increase over the baseline, percent.
    pub loss_pct: f64,
    /// What was measured (model, text, perplexities).
    pub source: String,
}

fn one() -> u64 {
    1
}

impl RecommendRequest {
    /// A request for an `m x n x k` GEMM with no constraints.
    pub fn new(m: u64, n: u64, k: u64) -> Self {
        RecommendRequest {
            m,
            n,
            k,
            batch: 1,
            phase: None,
            memory_limit_gb: None,
            max_accuracy_loss_pct: None,
            weight_only: None,
            measured_accuracy: Vec::new(),
        }
    }
}

/// A candidate not offered on this hardware, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotOffered {
    /// Candidate name (`W4A4 NVFP4`).
    pub name: String,
    /// Why it is not offered (`no FP4 tensor cores`).
    pub reason: String,
}

/// One ranked candidate with every number a script needs to re-rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecommendCandidate {
    /// Candidate name (`W4A16 INT4_G128`, `W4A4 NVFP4`, `FP16`).
    pub name: String,
    /// Baseline, weight-only or native.
    pub kind: CandidateKind,
    /// Operand formats.
    pub scheme: Scheme,
    /// Method that produces the weights.
    pub method: QuantMethod,
    /// Prior accuracy cost, percent WikiText-2 perplexity increase.
    pub accuracy_prior_pct: f64,
    /// Where the prior comes from.
    pub accuracy_source: String,
    /// A measured accuracy cost, when one is available (filled by the quantization tooling).
    pub measured_accuracy_loss_pct: Option<f64>,
    /// The roofline prediction.
    pub prediction: Prediction,
    /// Predicted time, microseconds (copy of `prediction.time_us`).
    pub time_us: f64,
    /// Baseline time over this time.
    pub speedup_vs_fp16: f64,
    /// Bytes of the weights in this scheme (scales included).
    pub weight_bytes: u64,
    /// `1 - weight_bytes / baseline weight bytes`, as a fraction.
    pub memory_saved: f64,
    /// Whether the weights fit the memory limit (`true` without a limit).
    pub fits_memory: bool,
    /// Whether the accuracy cost is within the tolerance (`true` without one).
    pub within_accuracy: bool,
    /// Rank among feasible candidates (1 = winner); `None` when infeasible.
    pub rank: Option<usize>,
}

impl RecommendCandidate {
    /// The accuracy cost used for decisions: the measured one when present, else the prior.
    pub fn accuracy_loss_pct(&self) -> f64 {
        self.measured_accuracy_loss_pct.unwrap_or(self.accuracy_prior_pct)
    }

    /// Whether it satisfies every constraint.
    pub fn feasible(&self) -> bool {
        self.fits_memory && self.within_accuracy
    }
}

/// The answer to a [`RecommendRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecommendReport {
    /// Hardware key.
    pub hardware: String,
    /// Hardware name.
    pub hardware_name: String,
    /// Shape.
    pub m: u64,
    /// Shape.
    pub n: u64,
    /// Shape.
    pub k: u64,
    /// Batch.
    pub batch: u64,
    /// Phase used (given or derived from M).
    pub phase: Phase,
    /// Memory limit applied, GB.
    pub memory_limit_gb: Option<f64>,
    /// Accuracy limit applied, percent.
    pub max_accuracy_loss_pct: Option<f64>,
    /// Whether weight-only candidates were offered.
    pub weight_only: bool,
    /// Name of the baseline candidate (`FP16`, or `BF16` when the hardware has no FP16 rate).
    pub baseline: String,
    /// Every offered candidate, ranked ones first in rank order, then the infeasible ones by time.
    pub candidates: Vec<RecommendCandidate>,
    /// Candidates not offered on this hardware, with the reason.
    pub not_offered: Vec<NotOffered>,
    /// Winner's name; `None` when no candidate meets the constraints.
    pub winner: Option<String>,
    /// Runner-up's name.
    pub runner_up: Option<String>,
    /// One-sentence reason in roofline terms (or why nothing fits).
    pub reason: String,
    /// When nothing fits the memory limit: how many GB the smallest candidate is over it.
    pub memory_shortfall_gb: Option<f64>,
}

impl RecommendReport {
    /// The winning candidate.
    pub fn winner(&self) -> Option<&RecommendCandidate> {
        self.winner.as_ref().and_then(|w| self.candidate(w))
    }

    /// The runner-up candidate.
    pub fn runner_up(&self) -> Option<&RecommendCandidate> {
        self.runner_up.as_ref().and_then(|w| self.candidate(w))
    }

    /// A candidate by name.
    pub fn candidate(&self, name: &str) -> Option<&RecommendCandidate> {
        self.candidates.iter().find(|c| c.name == name)
    }
}

/// Two candidates whose times differ by less than this fraction are tied; the tie goes to the lower
/// accuracy cost, then to the smaller weights.
pub const TIE_FRACTION: f64 = 0.02;

/// A candidate definition: the scheme and its prior.
struct Def {
    name: String,
    kind: CandidateKind,
    scheme: Scheme,
    method: QuantMethod,
    prior_pct: f64,
    source: &'static str,
    needs: Option<ComputeClass>,
}

const SRC_BASELINE: &str = "baseline (unquantized)";
const SRC_W8: &str = "LLM.int8() (Dettmers et al. 2022) and SmoothQuant (Xiao et al. 2023): 8-bit weight-only RTN \
                      is within noise of FP16";
const SRC_FP8: &str = "FP8 Formats for Deep Learning (Micikevicius et al. 2022); vLLM/TensorRT-LLM FP8 W8A8 \
                       reports: <0.5% perplexity increase";
const SRC_INT8: &str = "SmoothQuant (Xiao et al. 2023): W8A8 INT8 with smoothing, ~1% perplexity increase on Llama";
const SRC_AWQ: &str = "AWQ (Lin et al. 2024), Llama-2-7B WikiText-2: FP16 5.47 -> INT4 g128 5.60 (+2.4%); \
                       GPTQ g128 similar (+3%)";
const SRC_NF4: &str = "QLoRA (Dettmers et al. 2023): NF4 RTN beats INT4/FP4 RTN but trails AWQ/GPTQ; ~4% prior";
const SRC_NVFP4_W: &str = "NVIDIA NVFP4 introduction (2025) and Egiazarian et al. 2025 (FP4 microscaling PTQ): \
                           NVFP4 weight RTN ~3-4% perplexity increase";
const SRC_MXFP4_W: &str = "OCP Microscaling (Rouhani et al. 2023) and Egiazarian et al. 2025: MXFP4's E8M0 \
                           power-of-two scale per 32 loses roughly twice NVFP4's accuracy";
const SRC_NVFP4_A: &str = "NVIDIA NVFP4 (2025): W4A4 NVFP4 PTQ within ~1% on downstream tasks for large models, \
                           more for 7B-class; ~5% perplexity prior";
const SRC_MXFP4_A: &str = "OCP Microscaling (Rouhani et al. 2023): direct-cast W4A4 MXFP4 degrades noticeably \
                           without fine-tuning; ~12% prior";

fn definitions(act: Format) -> Vec<Def> {
    let a = act.name();
    let wo = |w: Format, method, prior, source| Def {
        name: format!("W{}A16 {}", if w.effective_bits() < 6.0 { 4 } else { 8 }, w.name()),
        kind: CandidateKind::WeightOnly,
        scheme: Scheme::weight_only(w, act),
        method,
        prior_pct: prior,
        source,
        needs: None,
    };
    let native = |f: Format, bits: u32, method, prior, source, class| Def {
        name: format!("W{bits}A{bits} {}", f.name()),
        kind: CandidateKind::Native,
        scheme: Scheme::uniform(f),
        method,
        prior_pct: prior,
        source,
        needs: Some(class),
    };
    vec![
        Def {
            name: a.to_string(),
            kind: CandidateKind::Baseline,
            scheme: Scheme::uniform(act),
            method: QuantMethod::None,
            prior_pct: 0.0,
            source: SRC_BASELINE,
            needs: None,
        },
        wo(Format::INT8, QuantMethod::Ptq, 0.2, SRC_W8),
        wo(Format::FP8_E4M3, QuantMethod::Ptq, 0.2, SRC_FP8),
        wo(Format::INT4_G128, QuantMethod::Awq, 2.5, SRC_AWQ),
        wo(Format::NF4, QuantMethod::Ptq, 4.0, SRC_NF4),
        wo(Format::NVFP4, QuantMethod::Ptq, 3.5, SRC_NVFP4_W),
        wo(Format::MXFP4, QuantMethod::Ptq, 7.0, SRC_MXFP4_W),
        native(Format::FP8_E4M3, 8, QuantMethod::NativeFp8, 0.3, SRC_FP8, ComputeClass::FP8),
        native(Format::INT8, 8, QuantMethod::Ptq, 1.0, SRC_INT8, ComputeClass::INT8),
        native(Format::NVFP4, 4, QuantMethod::NativeFp4, 5.0, SRC_NVFP4_A, ComputeClass::FP4),
        native(Format::MXFP4, 4, QuantMethod::NativeFp4, 12.0, SRC_MXFP4_A, ComputeClass::FP4),
    ]
}

/// Whether weight-only kernels are assumed by default: yes on GPU presets (Marlin, AWQ, bitsandbytes kernels
/// exist), no on a custom accelerator, which runs what its datasheet lists.
pub fn weight_only_default(hw: &HardwareProfile) -> bool {
    !(hw.key == "custom" || hw.source.starts_with("user"))
}

/// The 16-bit activation format of `hw`: FP16 when it has an FP16 rate, else BF16 when it has one, else FP16.
fn baseline_format(hw: &HardwareProfile) -> Format {
    if hw.peak(ComputeClass::FP16).is_none() && hw.peak(ComputeClass::BF16).is_some() {
        Format::BF16
    } else {
        Format::FP16
    }
}

/// Ranks the quantization schemes for one GEMM on `hw` under the request's constraints.
pub fn recommend(req: &RecommendRequest, hw: &HardwareProfile) -> Result<RecommendReport, CoreError> {
    if let Some(l) = req.memory_limit_gb {
        if !(l.is_finite() && l > 0.0) {
            return Err(CoreError::invalid("memory_limit_gb", l, "a finite number > 0"));
        }
    }
    if let Some(l) = req.max_accuracy_loss_pct {
        if l.is_nan() || l < 0.0 {
            return Err(CoreError::invalid("max_accuracy_loss_pct", l, "a number >= 0"));
        }
    }
    for m in &req.measured_accuracy {
        if !m.loss_pct.is_finite() {
            return Err(CoreError::invalid("measured_accuracy.loss_pct", m.loss_pct, "a finite number"));
        }
    }
    let phase = req.phase.unwrap_or_else(|| Phase::from_m(req.m));
    let weight_only = req.weight_only.unwrap_or_else(|| weight_only_default(hw));
    let act = baseline_format(hw);
    let base_gemm = Gemm::batched(req.batch, req.m, req.n, req.k, true, Scheme::uniform(act))?;
    let base = predict(&base_gemm, hw)?;
    let base_w = act.storage_bytes(req.n, req.k)?;
    let limit_bytes = req.memory_limit_gb.map(|g| g * 1e9);
    let acc_limit = req.max_accuracy_loss_pct.unwrap_or(f64::INFINITY);

    let mut candidates = Vec::new();
    let mut not_offered = Vec::new();
    for d in definitions(act) {
        if let Some(class) = d.needs {
            if hw.peak(class).is_none() {
                not_offered.push(NotOffered { name: d.name, reason: hw.unsupported_reason(class) });
                continue;
            }
        }
        if d.kind == CandidateKind::WeightOnly && !weight_only {
            not_offered.push(NotOffered {
                name: d.name,
                reason: "weight-only kernels not assumed on a custom accelerator (enable with weight_only)".into(),
            });
            continue;
        }
        let gemm = Gemm::batched(req.batch, req.m, req.n, req.k, true, d.scheme)?;
        let prediction = predict(&gemm, hw)?;
        let weight_bytes = d.scheme.weights.storage_bytes(req.n, req.k)?;
        let measured = if d.kind == CandidateKind::WeightOnly {
            req.measured_accuracy.iter().find(|m| m.weights == d.scheme.weights && m.method == d.method)
        } else {
            None
        };
        let loss = measured.map_or(d.prior_pct, |m| m.loss_pct);
        candidates.push(RecommendCandidate {
            name: d.name,
            kind: d.kind,
            scheme: d.scheme,
            method: d.method,
            accuracy_prior_pct: d.prior_pct,
            accuracy_source: match measured {
                Some(m) => format!("{}; prior: {}", m.source, d.source),
                None => d.source.to_string(),
            },
            measured_accuracy_loss_pct: measured.map(|m| m.loss_pct),
            time_us: prediction.time_us,
            speedup_vs_fp16: base.time_us / prediction.time_us,
            prediction,
            weight_bytes,
            memory_saved: 1.0 - weight_bytes as f64 / base_w as f64,
            fits_memory: limit_bytes.is_none_or(|l| weight_bytes as f64 <= l),
            within_accuracy: loss <= acc_limit,
            rank: None,
        });
    }
    rank_candidates(&mut candidates);
    let mut report = RecommendReport {
        hardware: hw.key.clone(),
        hardware_name: hw.name.clone(),
        m: req.m,
        n: req.n,
        k: req.k,
        batch: req.batch,
        phase,
        memory_limit_gb: req.memory_limit_gb,
        max_accuracy_loss_pct: req.max_accuracy_loss_pct,
        weight_only,
        baseline: act.name().to_string(),
        winner: None,
        runner_up: None,
        reason: String::new(),
        memory_shortfall_gb: None,
        candidates,
        not_offered,
    };
    report.winner = report.candidates.iter().find(|c| c.rank == Some(1)).map(|c| c.name.clone());
    report.runner_up = report.candidates.iter().find(|c| c.rank == Some(2)).map(|c| c.name.clone());
    report.reason = match report.winner() {
        Some(w) => reason(w, &base, hw, phase),
        None => {
            let smallest = report
                .candidates
                .iter()
                .filter(|c| c.within_accuracy)
                .min_by_key(|c| c.weight_bytes)
                .map(|c| (c.name.clone(), c.weight_bytes));
            match (smallest, limit_bytes) {
                (Some((name, bytes)), Some(l)) if bytes as f64 > l => {
                    let over = (bytes as f64 - l) / 1e9;
                    report.memory_shortfall_gb = Some(over);
                    format!(
                        "no scheme fits {:.3} GB: the smallest within the accuracy tolerance, {name}, needs {:.3} GB \
                         ({over:.3} GB over)",
                        l / 1e9,
                        bytes as f64 / 1e9
                    )
                }
                _ => format!(
                    "no scheme is within the accuracy tolerance of {acc_limit}% and the memory limit; relax \
                     --max-accuracy-loss"
                ),
            }
        }
    };
    Ok(report)
}

/// Orders candidates (feasible first, by the tie-aware rule) and numbers the feasible ones.
fn rank_candidates(cands: &mut Vec<RecommendCandidate>) {
    let mut remaining: Vec<RecommendCandidate> = std::mem::take(cands);
    let mut rank = 1;
    while let Some(best_t) = remaining.iter().filter(|c| c.feasible()).map(|c| c.time_us).min_by(|a, b| a.total_cmp(b))
    {
        let pick = remaining
            .iter()
            .enumerate()
            .filter(|(_, c)| c.feasible() && c.time_us <= best_t * (1.0 + TIE_FRACTION))
            .min_by(|(_, a), (_, b)| {
                a.accuracy_loss_pct()
                    .total_cmp(&b.accuracy_loss_pct())
                    .then(a.weight_bytes.cmp(&b.weight_bytes))
                    .then(a.time_us.total_cmp(&b.time_us))
            })
            .map(|(i, _)| i);
        let Some(i) = pick else { break };
        let mut c = remaining.remove(i);
        c.rank = Some(rank);
        rank += 1;
        cands.push(c);
    }
    remaining.sort_by(|a, b| a.time_us.total_cmp(&b.time_us));
    cands.extend(remaining);
}

fn reason(w: &RecommendCandidate, base: &Prediction, hw: &HardwareProfile, phase: Phase) -> String {
    let ai = base.arithmetic_intensity;
    let ridge = base.ridge_ai;
    if w.kind == CandidateKind::Baseline {
        return format!(
            "{phase}: {} stays fastest within the constraints ({} at AI {ai:.1} vs ridge {ridge:.0})",
            w.name,
            base.bound.as_str()
        );
    }
    match base.bound {
        Bound::Memory => format!(
            "{phase}: memory-bound at AI {ai:.1} vs ridge {ridge:.0}: bytes dominate, {:.2}-bit weights cut time \
             {:.1}x and memory {:.0}%",
            w.scheme.weights.effective_bits(),
            w.speedup_vs_fp16,
            w.memory_saved * 100.0
        ),
        Bound::Compute => format!(
            "{phase}: compute-bound at AI {ai:.0} vs ridge {ridge:.0}: FLOPs dominate, {} tensor cores ({:.0} vs {:.0} \
             TFLOP/s) cut time {:.1}x and memory {:.0}%{}",
            w.prediction.compute,
            w.prediction.peak_tflops,
            base.peak_tflops,
            w.speedup_vs_fp16,
            w.memory_saved * 100.0,
            if hw.peak(w.prediction.compute).is_none() { " (dequantized)" } else { "" }
        ),
    }
}

/// Renders a report as a plain-text table with the decision underneath.
pub fn render_recommend(r: &RecommendReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}), {} x {} x {}{}, phase {}",
        r.hardware_name,
        r.hardware,
        r.m,
        r.n,
        r.k,
        if r.batch > 1 { format!(" x batch {}", r.batch) } else { String::new() },
        r.phase
    );
    let mut cons = Vec::new();
    if let Some(l) = r.memory_limit_gb {
        cons.push(format!("memory limit {l} GB"));
    }
    if let Some(l) = r.max_accuracy_loss_pct {
        cons.push(format!("max accuracy loss {l}%"));
    }
    if !cons.is_empty() {
        let _ = writeln!(s, "constraints: {}", cons.join(", "));
    }
    let _ = writeln!(
        s,
        "{:>4}  {:<18} {:<10} {:>10} {:>8} {:>7} {:>12} {:>7} {:>7}  note",
        "rank", "scheme", "method", "time_us", "speedup", "bound", "weights_MB", "saved", "acc_%"
    );
    for c in &r.candidates {
        let mut note = Vec::new();
        if !c.fits_memory {
            note.push("over memory limit");
        }
        if !c.within_accuracy {
            note.push("over accuracy tolerance");
        }
        let _ = writeln!(
            s,
            "{:>4}  {:<18} {:<10} {:>10.2} {:>7.2}x {:>7} {:>12.2} {:>6.1}% {:>7.1}  {}",
            c.rank.map_or("-".to_string(), |r| r.to_string()),
            c.name,
            c.method.as_str(),
            c.time_us,
            c.speedup_vs_fp16,
            c.prediction.bound.as_str(),
            c.weight_bytes as f64 / 1e6,
            c.memory_saved * 100.0,
            c.accuracy_loss_pct(),
            note.join(", ")
        );
    }
    for n in &r.not_offered {
        let _ = writeln!(s, "{:>4}  {:<18} not offered: {}", "-", n.name, n.reason);
    }
    match (r.winner(), r.runner_up()) {
        (Some(w), ru) => {
            let _ = writeln!(
                s,
                "winner: {} ({}), {:.2}x, {:.0}% memory saved",
                w.name,
                w.method,
                w.speedup_vs_fp16,
                w.memory_saved * 100.0
            );
            if let Some(ru) = ru {
                let _ = writeln!(s, "runner-up: {} ({}), {:.2}x", ru.name, ru.method, ru.speedup_vs_fp16);
            }
        }
        (None, _) => {
            let _ = writeln!(s, "winner: none");
        }
    }
    let _ = writeln!(s, "reason: {}", r.reason);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> HardwareProfile {
        HardwareProfile::preset("seed-gb10").unwrap()
    }

    fn asic() -> HardwareProfile {
        HardwareProfile::custom(500.0, &[(ComputeClass::FP16, 50.0), (ComputeClass::INT8, 100.0)]).unwrap()
    }

    /// An H100-like profile (FP16/BF16/FP8/INT8, no FP4), built by hand so the test does not depend on presets.
    fn hopper_like() -> HardwareProfile {
        let mut hw = HardwareProfile::custom(
            3350.0,
            &[
                (ComputeClass::FP16, 989.0),
                (ComputeClass::BF16, 989.0),
                (ComputeClass::FP8, 1979.0),
                (ComputeClass::INT8, 1979.0),
            ],
        )
        .unwrap();
        hw.key = "hopper-like".into();
        hw.name = "Hopper-like test GPU".into();
        hw.source = "test".into();
        hw.unsupported.insert("FP4".into(), "no FP4 tensor cores".into());
        hw
    }

    #[test]
    fn seed_decode_picks_int4_awq_weight_only() {
        let r = recommend(&RecommendRequest::new(1, 4096, 4096), &seed()).unwrap();
        assert_eq!(r.phase, Phase::Decode);
        let w = r.winner().unwrap();
        assert_eq!(w.scheme, Scheme::weight_only(Format::INT4_G128, Format::FP16));
        assert_eq!((w.method, w.kind), (QuantMethod::Awq, CandidateKind::WeightOnly));
        assert!((3.7..=4.0).contains(&w.speedup_vs_fp16), "{}", w.speedup_vs_fp16);
        assert!((w.memory_saved - 0.75).abs() < 0.015, "{}", w.memory_saved);
        assert_eq!(w.prediction.bound, Bound::Memory);
        assert!(r.reason.contains("memory-bound") && r.reason.contains("ridge 200"), "{}", r.reason);
        assert!(r.runner_up.is_some());
        // every candidate is present with its numbers: 11 definitions, all offered on the seed profile
        assert_eq!(r.candidates.len(), 11);
        assert!(r.not_offered.is_empty());
    }

    #[test]
    fn seed_prefill_picks_nvfp4_native() {
        for (m, n, k) in [(2048, 4096, 4096), (4096, 4096, 4096)] {
            let r = recommend(&RecommendRequest::new(m, n, k), &seed()).unwrap();
            assert_eq!(r.phase, Phase::Prefill);
            let w = r.winner().unwrap();
            assert_eq!(w.scheme, Scheme::uniform(Format::NVFP4), "{m}");
            assert_eq!(w.method, QuantMethod::NativeFp4);
            assert!((w.speedup_vs_fp16 - 4.0).abs() < 0.1, "{}", w.speedup_vs_fp16);
            assert!((w.memory_saved - 0.72).abs() < 0.01, "{}", w.memory_saved);
            // MXFP4 runs equally fast but its accuracy prior is worse: the tie goes to NVFP4
            let mx = r.candidate("W4A4 MXFP4").unwrap();
            assert!((mx.time_us - w.time_us).abs() / w.time_us < TIE_FRACTION);
            assert!(r.reason.contains("compute-bound"), "{}", r.reason);
        }
    }

    #[test]
    fn custom_asic_picks_int8_ptq() {
        let r = recommend(&RecommendRequest::new(1, 4096, 4096), &asic()).unwrap();
        let w = r.winner().unwrap();
        assert_eq!(w.scheme, Scheme::uniform(Format::INT8));
        assert_eq!(w.method, QuantMethod::Ptq);
        assert!((w.speedup_vs_fp16 - 2.0).abs() < 0.01, "{}", w.speedup_vs_fp16);
        assert_eq!(r.runner_up.as_deref(), Some("FP16"));
        assert!(r.not_offered.iter().any(|n| n.name == "W4A4 NVFP4"));
        // asking for weight-only kernels explicitly brings the 4-bit weight-only schemes back
        let mut req = RecommendRequest::new(1, 4096, 4096);
        req.weight_only = Some(true);
        let r = recommend(&req, &asic()).unwrap();
        assert_eq!(r.winner().unwrap().scheme.weights, Format::INT4_G128);
    }

    #[test]
    fn memory_limit_forces_four_bit() {
        // prefill on a Hopper-like GPU: FP8 W8A8 is fastest, but 8-bit weights (16.8 MB) exceed a 10 MB limit
        let mut req = RecommendRequest::new(2048, 4096, 4096);
        let hw = hopper_like();
        req.weight_only = Some(true);
        let free = recommend(&req, &hw).unwrap();
        assert_eq!(free.winner().unwrap().scheme, Scheme::uniform(Format::FP8_E4M3));
        req.memory_limit_gb = Some(0.010);
        let r = recommend(&req, &hw).unwrap();
        let w = r.winner().unwrap();
        assert!(w.scheme.weights.effective_bits() < 5.0, "{}", w.name);
        assert!(w.weight_bytes as f64 <= 0.010e9);
        assert!(!r.candidate("W8A8 FP8_E4M3").unwrap().fits_memory);
        // a limit below every scheme: no winner, and the shortfall is reported
        req.memory_limit_gb = Some(0.001);
        let r = recommend(&req, &hw).unwrap();
        assert!(r.winner.is_none());
        let smallest = r.candidates.iter().map(|c| c.weight_bytes).min().unwrap();
        let over = r.memory_shortfall_gb.unwrap();
        assert!((over - (smallest as f64 / 1e9 - 0.001)).abs() < 1e-12, "{over}");
        assert!(r.reason.contains("no scheme fits"), "{}", r.reason);
    }

    #[test]
    fn fp4_not_offered_without_fp4_peak() {
        let r = recommend(&RecommendRequest::new(4096, 4096, 4096), &hopper_like()).unwrap();
        assert!(r.candidates.iter().all(|c| c.scheme.activations.compute_class() != Some(ComputeClass::FP4)));
        let nv = r.not_offered.iter().find(|n| n.name == "W4A4 NVFP4").unwrap();
        assert!(nv.reason.contains("FP4"), "{}", nv.reason);
        assert_eq!(r.winner().unwrap().scheme, Scheme::uniform(Format::FP8_E4M3));
    }

    #[test]
    fn bf16_baseline_when_no_fp16_rate() {
        let hw = HardwareProfile::custom(1000.0, &[(ComputeClass::BF16, 100.0), (ComputeClass::FP8, 200.0)]).unwrap();
        let r = recommend(&RecommendRequest::new(4096, 4096, 4096), &hw).unwrap();
        assert_eq!(r.baseline, "BF16");
        let base = r.candidate("BF16").unwrap();
        assert!((base.speedup_vs_fp16 - 1.0).abs() < 1e-12);
        assert_eq!(r.winner().unwrap().scheme, Scheme::uniform(Format::FP8_E4M3));
        assert_eq!(
            r.not_offered.iter().filter(|n| n.name.starts_with("W4A16") || n.name.starts_with("W8A16")).count(),
            6
        );
    }

    #[test]
    fn accuracy_tolerance_filters() {
        let mut req = RecommendRequest::new(1, 4096, 4096);
        req.max_accuracy_loss_pct = Some(AccuracyTolerance::Lossless.limit_pct());
        let r = recommend(&req, &seed()).unwrap();
        let w = r.winner().unwrap();
        assert!(w.accuracy_prior_pct <= 0.5);
        assert!((w.speedup_vs_fp16 - 2.0).abs() < 0.01);
        assert!(r.candidates.iter().filter(|c| c.rank.is_some()).all(|c| c.accuracy_prior_pct <= 0.5));
        assert_eq!("3%".parse::<AccuracyTolerance>().unwrap(), AccuracyTolerance::Percent(3.0));
        assert_eq!("medium".parse::<AccuracyTolerance>().unwrap().limit_pct(), 5.0);
        assert!("-1".parse::<AccuracyTolerance>().is_err());
        assert!("soft".parse::<AccuracyTolerance>().is_err());
    }

    #[test]
    fn measured_accuracy_replaces_the_prior() {
        // Seed decode: INT4 AWQ wins on its 2.5% prior. A measured 9% loss puts it over a 5% tolerance, so the
        // winner changes; the measured value and its source are reported; a PTQ measurement of the same format
        // does not apply to the AWQ candidate.
        let mut req = RecommendRequest::new(1, 4096, 4096);
        req.max_accuracy_loss_pct = Some(5.0);
        let before = recommend(&req, &seed()).unwrap();
        assert_eq!(before.winner.as_deref(), Some("W4A16 INT4_G128"));
        let m = |w, method, loss_pct| MeasuredAccuracy { weights: w, method, loss_pct, source: "test run".into() };
        req.measured_accuracy = vec![m(Format::INT4_G128, QuantMethod::Ptq, 0.1)];
        let same = recommend(&req, &seed()).unwrap();
        assert_eq!(same.winner().unwrap().measured_accuracy_loss_pct, None, "method must match");
        req.measured_accuracy =
            vec![m(Format::INT4_G128, QuantMethod::Awq, 9.0), m(Format::NF4, QuantMethod::Ptq, 1.5)];
        let after = recommend(&req, &seed()).unwrap();
        let int4 = after.candidate("W4A16 INT4_G128").unwrap();
        assert_eq!(int4.measured_accuracy_loss_pct, Some(9.0));
        assert!(!int4.within_accuracy && int4.rank.is_none());
        assert!(int4.accuracy_source.starts_with("test run; prior:"), "{}", int4.accuracy_source);
        let w = after.winner().unwrap();
        assert_eq!(w.name, "W4A16 NF4", "the measured 1.5% NF4 (prior 4%) takes the 4-bit slot");
        assert_eq!(w.accuracy_loss_pct(), 1.5);
        req.measured_accuracy = vec![m(Format::NF4, QuantMethod::Ptq, f64::NAN)];
        assert!(recommend(&req, &seed()).unwrap_err().to_string().contains("measured_accuracy"));
    }

    #[test]
    fn ranks_are_consistent_and_json_round_trips() {
        let r = recommend(&RecommendRequest::new(16, 4096, 4096), &seed()).unwrap();
        let ranks: Vec<usize> = r.candidates.iter().filter_map(|c| c.rank).collect();
        assert_eq!(ranks, (1..=ranks.len()).collect::<Vec<_>>());
        let json = serde_json::to_string(&r).unwrap();
        let back: RecommendReport = serde_json::from_str(&json).unwrap();
        assert_eq!((back.winner.as_deref(), back.candidates.len()), (r.winner.as_deref(), r.candidates.len()));
        for (a, b) in back.candidates.iter().zip(&r.candidates) {
            assert_eq!((&a.name, a.rank, a.weight_bytes), (&b.name, b.rank, b.weight_bytes));
            assert!((a.time_us - b.time_us).abs() <= 1e-9 * b.time_us);
        }
        let text = render_recommend(&r);
        assert!(text.contains("winner: W4A16 INT4_G128"), "{text}");
        let req: RecommendRequest = serde_json::from_str(r#"{"m":1,"n":8,"k":8}"#).unwrap();
        assert_eq!(req, RecommendRequest::new(1, 8, 8));
        assert!(matches!("x".parse::<Phase>(), Err(CoreError::InvalidValue { .. })));
        let mut bad = RecommendRequest::new(1, 8, 8);
        bad.memory_limit_gb = Some(-1.0);
        assert!(recommend(&bad, &seed()).is_err());
    }
}
