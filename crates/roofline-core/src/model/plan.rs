//! Model-level quantization plan: a scheme per layer type (attention projections, FFN, experts, LM head) and
//! a KV-cache format, chosen by the op-level recommender on each type's representative GEMM, with the
//! whole-model speedup and memory checked by [`analyze_model`].

use serde::{Deserialize, Serialize};

use super::{analyze_model, expected_experts, Attention, ModelConfig, ModelRequest, Role, RoleScheme, Totals};
use crate::error::CoreError;
use crate::format::Format;
use crate::hardware::HardwareProfile;
use crate::recommend::{recommend, Phase, QuantMethod, RecommendCandidate, RecommendRequest};

/// Above this accuracy tolerance (percent) the LM head may be quantized too; at or below it (and when no
/// tolerance is given) it stays in the activation format, as the most sensitive layer.
pub const LM_HEAD_TOLERANCE_PCT: f64 = 5.0;

/// Prior accuracy cost of an FP8 E4M3 KV cache, percent perplexity increase (per-tensor scaled FP8 KV
/// caches are reported near-lossless in vLLM and TensorRT-LLM evaluations; see docs/RECOMMEND.md).
pub const FP8_KV_PRIOR_PCT: f64 = 0.1;

/// A model-level recommendation request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlanRequest {
    /// Phase, batch, context, TP and the baseline (activation) format; `weights`/`kv` are ignored.
    pub model: ModelRequest,
    /// Memory per GPU available for weights + KV cache, GB.
    #[serde(default)]
    pub memory_limit_gb: Option<f64>,
    /// Accuracy tolerance, percent perplexity increase (the priors' scale).
    #[serde(default)]
    pub max_accuracy_loss_pct: Option<f64>,
    /// Whether weight-only kernels may be used (default: the op-level recommender's).
    #[serde(default)]
    pub weight_only: Option<bool>,
}

/// The choice for one layer type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolePlan {
    /// Layer type.
    pub role: Role,
    /// The representative GEMM `M x N x K` the choice was made on.
    pub shape: [u64; 3],
    /// Chosen candidate (`W4A16 INT4_G128`, `FP16`, ...).
    pub candidate: String,
    /// Quantization method to apply.
    pub method: QuantMethod,
    /// Formats.
    pub scheme: RoleScheme,
    /// Prior accuracy cost, percent.
    pub accuracy_prior_pct: f64,
    /// Op-level speedup vs the 16-bit baseline on the representative GEMM.
    pub op_speedup: f64,
    /// Why.
    pub reason: String,
}

/// A model-level plan and its predicted effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelPlan {
    /// Model name.
    pub model: String,
    /// Hardware key.
    pub hardware: String,
    /// One entry per layer type present in the model.
    pub roles: Vec<RolePlan>,
    /// KV-cache format.
    pub kv: Format,
    /// Why that KV format.
    pub kv_reason: String,
    /// Totals of the all-16-bit baseline.
    pub baseline: Totals,
    /// Totals with the plan applied.
    pub planned: Totals,
    /// Baseline step time over planned step time.
    pub speedup: f64,
    /// `1 - planned memory / baseline memory` (weights + KV).
    pub memory_saved: f64,
    /// Whether the plan fits the memory limit (or the hardware memory when no limit is given).
    pub fits: Option<bool>,
    /// When it does not fit: by how many GB per GPU.
    pub shortfall_gb: Option<f64>,
    /// The plan as a request `analyze_model` accepts (for `roofline model --json` style detail).
    pub request: ModelRequest,
}

fn pick(cands: &[RecommendCandidate], smallest: bool) -> Option<&RecommendCandidate> {
    let feasible = cands.iter().filter(|c| c.within_accuracy);
    if smallest {
        feasible.min_by_key(|c| c.weight_bytes)
    } else {
        cands.iter().find(|c| c.rank == Some(1))
    }
}

/// Plans a quantization scheme per layer type for `cfg` on `hw`.
pub fn recommend_model(cfg: &ModelConfig, req: &PlanRequest, hw: &HardwareProfile) -> Result<ModelPlan, CoreError> {
    let base = ModelRequest { weights: req.model.activations, kv: req.model.activations, ..req.model };
    let (b, s) = (base.batch, base.seq);
    let t = match base.phase {
        Phase::Decode => b,
        Phase::Prefill => b.saturating_mul(s),
    };
    let h = cfg.hidden;
    let tp = base.tp.max(1);
    let mut shapes: Vec<(Role, [u64; 3])> = Vec::new();
    let attn_n = match cfg.attention {
        Attention::Gqa => (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim / tp,
        Attention::Mla(m) => {
            m.q_lora_rank.unwrap_or(cfg.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim))
                + m.kv_lora_rank
                + m.qk_rope_head_dim
        }
    };
    shapes.push((Role::Attention, [t, attn_n.max(1), h]));
    let dense_layers = cfg.moe.map_or(cfg.layers, |m| m.first_dense_layers.min(cfg.layers));
    if dense_layers > 0 || cfg.moe.is_some_and(|m| m.shared_experts > 0) {
        let i = if dense_layers > 0 {
            cfg.intermediate
        } else {
            cfg.moe.map_or(0, |m| m.shared_experts * m.shared_intermediate)
        };
        shapes.push((Role::Ffn, [t, (2 * i / tp).max(1), h]));
    }
    if let Some(m) = cfg.moe {
        let touched = expected_experts(m.experts, m.top_k, t);
        let per_expert = ((t * m.top_k) as f64 / touched).round().max(1.0) as u64;
        shapes.push((Role::Experts, [per_expert, (2 * m.expert_intermediate / tp).max(1), h]));
    }
    shapes.push((Role::LmHead, [b, cfg.vocab.div_ceil(tp), h]));

    let run = |smallest: bool| -> Result<(Vec<RolePlan>, ModelRequest), CoreError> {
        let mut roles = Vec::new();
        let mut plan_req = ModelRequest { kv: base.kv, ..base };
        for (role, [m, n, k]) in &shapes {
            let rreq = RecommendRequest {
                phase: Some(base.phase),
                max_accuracy_loss_pct: req.max_accuracy_loss_pct,
                weight_only: req.weight_only,
                ..RecommendRequest::new(*m, *n, *k)
            };
            let report = recommend(&rreq, hw)?;
            let keep_head =
                *role == Role::LmHead && req.max_accuracy_loss_pct.is_none_or(|p| p <= LM_HEAD_TOLERANCE_PCT);
            let chosen = if keep_head {
                report.candidates.iter().find(|c| c.method == QuantMethod::None)
            } else {
                pick(&report.candidates, smallest)
            };
            let Some(c) = chosen.or_else(|| report.candidates.iter().find(|c| c.method == QuantMethod::None)) else {
                return Err(CoreError::Unsupported(format!("no scheme for the {role:?} GEMM on {}", hw.name)));
            };
            let scheme = RoleScheme { weights: c.scheme.weights, activations: c.scheme.activations };
            let reason = if keep_head {
                format!(
                    "kept at {}: the LM head is the most accuracy-sensitive layer and the tolerance is at most {LM_HEAD_TOLERANCE_PCT}% (or not given)",
                    c.scheme.weights
                )
            } else if smallest {
                format!("smallest weights within the accuracy tolerance, to meet the memory limit ({})", report.reason)
            } else {
                report.reason.clone()
            };
            match role {
                Role::Attention => plan_req.roles.attention = Some(scheme),
                Role::Ffn => plan_req.roles.ffn = Some(scheme),
                Role::Experts => plan_req.roles.experts = Some(scheme),
                Role::LmHead => plan_req.roles.lm_head = Some(scheme),
            }
            roles.push(RolePlan {
                role: *role,
                shape: [*m, *n, *k],
                candidate: c.name.clone(),
                method: c.method,
                scheme,
                accuracy_prior_pct: c.accuracy_loss_pct(),
                op_speedup: c.speedup_vs_fp16,
                reason,
            });
        }
        // Weights of the roles without an override (none here) follow the attention choice.
        plan_req.weights = plan_req.roles.attention.map_or(base.weights, |r| r.weights);
        Ok((roles, plan_req))
    };

    let kv_ok =
        req.max_accuracy_loss_pct.is_none_or(|p| p >= FP8_KV_PRIOR_PCT) && base.activations.effective_bits() > 8.0;
    let (kv, kv_reason) = if kv_ok {
        (
            Format::FP8_E4M3,
            format!("FP8 KV halves the cache ({}x{} context) and its reads at a ~{FP8_KV_PRIOR_PCT}% prior cost", b, s),
        )
    } else {
        (base.activations, "kept in the activation format: the tolerance is below the FP8 KV prior".to_string())
    };

    let baseline = analyze_model(cfg, &base, hw)?;
    let limit = req.memory_limit_gb.or(hw.memory_gb);
    let (mut roles, mut plan_req) = run(false)?;
    plan_req.kv = kv;
    let mut planned = analyze_model(cfg, &plan_req, hw)?;
    if limit.is_some_and(|l| planned.totals.memory_per_gpu_gb > l) {
        let (r2, mut q2) = run(true)?;
        q2.kv = kv;
        roles = r2;
        plan_req = q2;
        planned = analyze_model(cfg, &plan_req, hw)?;
    }
    let mem = |t: &Totals| t.memory_per_gpu_gb;
    let fits = limit.map(|l| mem(&planned.totals) <= l);
    Ok(ModelPlan {
        model: cfg.name.clone(),
        hardware: hw.key.clone(),
        roles,
        kv,
        kv_reason,
        speedup: baseline.totals.time_us / planned.totals.time_us,
        memory_saved: 1.0 - mem(&planned.totals) / mem(&baseline.totals),
        fits,
        shortfall_gb: limit.and_then(|l| (mem(&planned.totals) > l).then(|| mem(&planned.totals) - l)),
        baseline: baseline.totals,
        planned: planned.totals,
        request: plan_req,
    })
}

/// A plain-text rendering of a plan.
pub fn render_plan(p: &ModelPlan) -> String {
    use std::fmt::Write as _;
    let mut s = format!("{} on {}: quantization plan\n", p.model, p.hardware);
    let _ = writeln!(
        s,
        "{:<10} {:<20} {:<11} {:>7} {:>7}  {:<22} reason",
        "layer", "scheme", "method", "acc_%", "op x", "GEMM MxNxK"
    );
    for r in &p.roles {
        let _ = writeln!(
            s,
            "{:<10} {:<20} {:<11} {:>7.2} {:>6.2}x  {:<22} {}",
            format!("{:?}", r.role).to_lowercase(),
            r.candidate,
            r.method.as_str(),
            r.accuracy_prior_pct,
            r.op_speedup,
            format!("{}x{}x{}", r.shape[0], r.shape[1], r.shape[2]),
            r.reason
        );
    }
    let _ = writeln!(s, "{:<10} {:<20} {}", "kv cache", p.kv.name(), p.kv_reason);
    let _ = writeln!(
        s,
        "model: {:.1} us -> {:.1} us per step ({:.2}x), {:.2} -> {:.2} GB per GPU ({:.0}% saved)",
        p.baseline.time_us,
        p.planned.time_us,
        p.speedup,
        p.baseline.memory_per_gpu_gb,
        p.planned.memory_per_gpu_gb,
        100.0 * p.memory_saved
    );
    match (p.fits, p.shortfall_gb) {
        (Some(false), Some(g)) => {
            let _ =
                writeln!(s, "does NOT fit the memory limit: short by {g:.2} GB per GPU even with the smallest schemes");
        }
        (Some(true), _) => {
            let _ = writeln!(s, "fits the memory limit");
        }
        _ => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(tol: Option<f64>, limit: Option<f64>) -> PlanRequest {
        PlanRequest {
            model: ModelRequest { activations: Format::FP16, ..ModelRequest::default() },
            memory_limit_gb: limit,
            max_accuracy_loss_pct: tol,
            weight_only: None,
        }
    }

    #[test]
    fn llama_decode_plan_quantizes_weights_and_keeps_head() {
        let cfg = ModelConfig::preset("llama-3.1-8b").unwrap();
        let hw = HardwareProfile::preset("h100").unwrap();
        let p = recommend_model(&cfg, &req(None, None), &hw).unwrap();
        let attn = p.roles.iter().find(|r| r.role == Role::Attention).unwrap();
        assert!(attn.scheme.weights.effective_bits() < 5.0, "{attn:?}");
        let head = p.roles.iter().find(|r| r.role == Role::LmHead).unwrap();
        assert_eq!(head.scheme.weights, Format::FP16);
        assert!(p.speedup > 2.5 && p.speedup < 4.0, "{}", p.speedup);
        assert!(p.memory_saved > 0.5);
        assert_eq!(p.kv, Format::FP8_E4M3);
        // A relaxed tolerance lets the LM head be quantized too, and the model gets faster still.
        let relaxed = recommend_model(&cfg, &req(Some(20.0), None), &hw).unwrap();
        let head = relaxed.roles.iter().find(|r| r.role == Role::LmHead).unwrap();
        assert_ne!(head.scheme.weights, Format::FP16);
        assert!(relaxed.speedup > p.speedup);
    }

    #[test]
    fn strict_tolerance_keeps_eight_bit() {
        let cfg = ModelConfig::preset("llama-3.1-8b").unwrap();
        let hw = HardwareProfile::preset("h100").unwrap();
        let p = recommend_model(&cfg, &req(Some(0.5), None), &hw).unwrap();
        for r in &p.roles {
            assert!(r.accuracy_prior_pct <= 0.5, "{r:?}");
        }
    }

    #[test]
    fn memory_limit_forces_smaller_and_reports_shortfall() {
        let cfg = ModelConfig::preset("llama-3.1-70b").unwrap();
        let hw = HardwareProfile::preset("h100").unwrap();
        let fits = recommend_model(&cfg, &req(Some(5.0), Some(48.0)), &hw).unwrap();
        assert_eq!(fits.fits, Some(true), "{}", fits.planned.memory_per_gpu_gb);
        let too_small = recommend_model(&cfg, &req(None, Some(10.0)), &hw).unwrap();
        assert_eq!(too_small.fits, Some(false));
        assert!(too_small.shortfall_gb.unwrap() > 20.0);
    }

    #[test]
    fn moe_plan_has_experts() {
        let cfg = ModelConfig::preset("deepseek-v3").unwrap();
        let hw = HardwareProfile::preset("b200").unwrap();
        let mut r = req(None, None);
        r.model.activations = Format::BF16;
        r.model.batch = 64;
        let p = recommend_model(&cfg, &r, &hw).unwrap();
        assert!(p.roles.iter().any(|r| r.role == Role::Experts));
        assert!(p.speedup > 1.0);
    }
}
