//! Whole-model analysis: a decoder-only transformer's ops for one phase, each predicted on a hardware
//! profile, and the totals (time per token, TTFT, weight and KV-cache memory, KV crossover, TP traffic).
//!
//! Formulas: docs/THEORY.md. Conventions: `T` tokens processed in the step (decode: `B`; prefill: `B·S`),
//! activations and outputs in the activation format, weights in the weight format except embeddings, the
//! LM head, norms and the MoE router, which stay in the activation format (as serving engines keep them).

mod config;
mod fusion;
pub mod plan;
pub mod render;

use serde::{Deserialize, Serialize};

pub use config::{Attention, Mla, Mlp, ModelConfig, Moe, SUPPORTED};

use crate::error::CoreError;
use crate::format::Format;
use crate::hardware::HardwareProfile;
use crate::op::{Gemm, OpCost};
use crate::predict::{predict_cost, Bound, Prediction};
use crate::recommend::Phase;
use crate::scheme::{Execution, Scheme};

/// What to analyze: the phase, sizes and formats per role.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Decode (one new token per sequence, context `seq`) or prefill (`seq` prompt tokens).
    pub phase: Phase,
    /// Sequences in the batch.
    pub batch: u64,
    /// Context length (decode) or prompt length (prefill).
    pub seq: u64,
    /// Tensor-parallel degree (GPUs).
    pub tp: u64,
    /// Format of the linear layers' weights.
    pub weights: Format,
    /// Format of activations (and of embeddings, norms, LM head and router weights).
    pub activations: Format,
    /// Format of the KV cache.
    pub kv: Format,
    /// Per-layer-type schemes overriding `weights`/`activations` (a quantization plan).
    #[serde(default)]
    pub roles: RoleSchemes,
    /// Predict a fused engine: each norm inside the next linear, each residual add inside the linear
    /// before it, RoPE inside the attention; those ops keep their bytes and FLOPs but pay no launch
    /// overhead or memory start-up latency (`OpRow::fused_into` names the host).
    #[serde(default)]
    pub fused: bool,
}

/// A (weights, activations) pair for one layer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleScheme {
    /// Weight format.
    pub weights: Format,
    /// Activation format the layer's GEMMs take (native W8A8/W4A4 quantize activations too).
    pub activations: Format,
}

/// Per-layer-type overrides; `None` = the request's `weights` and `activations`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleSchemes {
    /// Attention projections (QKV, MLA projections, o_proj, absorbed BMMs).
    #[serde(default)]
    pub attention: Option<RoleScheme>,
    /// Dense FFN and shared experts.
    #[serde(default)]
    pub ffn: Option<RoleScheme>,
    /// Routed experts.
    #[serde(default)]
    pub experts: Option<RoleScheme>,
    /// LM head (default: kept in the activation format).
    #[serde(default)]
    pub lm_head: Option<RoleScheme>,
}

/// The layer types a plan assigns schemes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Attention projections.
    Attention,
    /// Dense FFN.
    Ffn,
    /// Routed experts.
    Experts,
    /// LM head.
    LmHead,
}

impl ModelRequest {
    /// The scheme of a role's GEMMs: override, else the request's formats (the LM head defaults to the
    /// activation format, as serving engines keep it).
    pub fn scheme_for(&self, role: Role) -> Scheme {
        let (o, default_w) = match role {
            Role::Attention => (self.roles.attention, self.weights),
            Role::Ffn => (self.roles.ffn, self.weights),
            Role::Experts => (self.roles.experts, self.weights),
            Role::LmHead => (self.roles.lm_head, self.activations),
        };
        let rs = o.unwrap_or(RoleScheme { weights: default_w, activations: self.activations });
        Scheme { weights: rs.weights, activations: rs.activations, output: self.activations }
    }
}

impl Default for ModelRequest {
    fn default() -> Self {
        ModelRequest {
            phase: Phase::Decode,
            batch: 1,
            seq: 1024,
            tp: 1,
            weights: Format::BF16,
            activations: Format::BF16,
            kv: Format::BF16,
            roles: RoleSchemes::default(),
            fused: false,
        }
    }
}

/// What an op is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// A linear layer (GEMM/GEMV against weights).
    Linear,
    /// Attention over the KV cache (scores, softmax, weighted sum; fused as FlashAttention does).
    Attention,
    /// RMSNorm / LayerNorm.
    Norm,
    /// Residual add, activation function, RoPE, routing.
    Elementwise,
    /// Routed experts of a MoE layer.
    Experts,
    /// Embedding lookup.
    Embedding,
    /// Tensor-parallel all-reduce.
    Communication,
}

/// One op of the model (per instance), and how many times it runs per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRow {
    /// Kernel name (`q_proj`, `fused_qkv_a_proj`, `mla_decode_attention`, ...).
    pub name: String,
    /// Layer group (`layers 0-31`, `dense layers 0-2`, `moe layers 3-60`, `model`).
    pub group: String,
    /// What it is.
    pub kind: OpKind,
    /// Instances per step (layers in the group).
    pub count: u64,
    /// Weight bytes read by one instance (0 for ops without weights).
    pub weight_bytes: u64,
    /// The prediction of one instance.
    pub prediction: Prediction,
    /// `prediction.time_us * count`.
    pub total_time_us: f64,
    /// The op whose kernel does this op's work in a fused engine (see [`ModelRequest::fused`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fused_into: Option<String>,
}

/// Whole-model totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Predicted time of the step (all layers, embedding, LM head, communication), microseconds.
    pub time_us: f64,
    /// Mean time per decoder layer, microseconds.
    pub time_per_layer_us: f64,
    /// Decode: tokens generated per second (`batch / step time`). Prefill: prompt tokens per second.
    pub tokens_per_s: f64,
    /// Prefill: time to first token, milliseconds.
    pub ttft_ms: Option<f64>,
    /// FLOPs of the step.
    pub flops: u64,
    /// Bytes of the step.
    pub bytes: u64,
    /// Parameters (weight elements) of the whole model.
    pub params: u64,
    /// Bytes of all weights in their formats (every expert included), whole model.
    pub weight_bytes: u64,
    /// Weight bytes actually read in this step (touched experts only).
    pub weight_bytes_read: u64,
    /// KV-cache bytes per token (all layers), whole model.
    pub kv_bytes_per_token: u64,
    /// KV-cache bytes at `seq` for the whole batch.
    pub kv_bytes_at_seq: u64,
    /// Weights + KV cache per GPU, GB.
    pub memory_per_gpu_gb: f64,
    /// The hardware's memory, GB (if known).
    pub hardware_memory_gb: Option<f64>,
    /// Whether weights + KV fit (None if the hardware memory is unknown).
    pub fits: Option<bool>,
    /// Hardware memory minus need, GB (negative: short by that much).
    pub headroom_gb: Option<f64>,
    /// Context length at which KV reads per decode step equal the weight bytes actually read per step (the
    /// embedding table, a lookup, excluded; touched experts only), at this batch size.
    pub s_cross_tokens: f64,
    /// The same crossover against all weight bytes of the model (the convention of quick estimates, which
    /// counts the embedding table as if it were streamed; Llama-3-8B FP16: ~122k at B=1).
    pub s_cross_all_weights_tokens: f64,
    /// Time spent in tensor-parallel all-reduces, microseconds.
    pub comm_time_us: f64,
    /// `comm_time_us / time_us`.
    pub comm_share: f64,
}

/// The answer of [`analyze_model`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelReport {
    /// Model name.
    pub model: String,
    /// Hardware key.
    pub hardware: String,
    /// Hardware name.
    pub hardware_name: String,
    /// The request.
    pub request: ModelRequest,
    /// Ops, in execution order, one row per op of each layer group.
    pub ops: Vec<OpRow>,
    /// Totals.
    pub totals: Totals,
}

/// Element bytes of `rows x cols` in format `f` (exact storage, scales included).
fn st(f: Format, rows: u64, cols: u64) -> Result<u64, CoreError> {
    f.storage_bytes(rows, cols)
}

struct Builder<'a> {
    hw: &'a HardwareProfile,
    req: ModelRequest,
    /// tokens in the step
    t: u64,
    ops: Vec<OpRow>,
    group: String,
    count: u64,
    act_exec: Execution,
}

impl Builder<'_> {
    fn push(&mut self, name: &str, kind: OpKind, cost: OpCost, exec: &Execution, weight_bytes: u64) {
        let prediction = predict_cost(cost, exec, self.hw);
        self.ops.push(OpRow {
            name: name.to_string(),
            group: self.group.clone(),
            kind,
            count: self.count,
            weight_bytes,
            total_time_us: prediction.time_us * self.count as f64,
            prediction,
            fused_into: None,
        });
    }

    /// The scheme and its execution for a role's GEMMs.
    fn role(&self, role: Role) -> Result<(Scheme, Execution), CoreError> {
        let scheme = self.req.scheme_for(role);
        Ok((scheme, scheme.execution(self.hw)?))
    }

    /// A linear layer `T x n x k` of the given role.
    fn linear(&mut self, name: &str, n: u64, k: u64, role: Role) -> Result<(), CoreError> {
        let (scheme, exec) = self.role(role)?;
        let gemm = Gemm::new(self.t, n, k, scheme)?;
        let wb = st(scheme.weights, n, k)?;
        self.push(name, OpKind::Linear, gemm.cost()?, &exec, wb);
        Ok(())
    }

    /// A linear layer kept in the activation format (MoE router).
    fn linear_act(&mut self, name: &str, n: u64, k: u64) -> Result<(), CoreError> {
        let a = self.req.activations;
        let scheme = Scheme::weight_only(a, a);
        let gemm = Gemm::new(self.t, n, k, scheme)?;
        let exec = scheme.execution(self.hw)?;
        self.push(name, OpKind::Linear, gemm.cost()?, &exec, st(a, n, k)?);
        Ok(())
    }

    /// Per-head batched products with per-head weights (absorbed MLA BMMs).
    fn bmm(&mut self, name: &str, heads: u64, n: u64, k: u64) -> Result<(), CoreError> {
        let (scheme, exec) = self.role(Role::Attention)?;
        let gemm = Gemm::batched(heads, self.t, n, k, false, scheme)?;
        let wb = st(scheme.weights, n, k)? * heads;
        self.push(name, OpKind::Linear, gemm.cost()?, &exec, wb);
        Ok(())
    }

    /// An op of the activation format moving `bytes`, `written` of them stored.
    fn elementwise(&mut self, name: &str, kind: OpKind, flops: u64, bytes: u64, written: u64) {
        let exec = self.act_exec.clone();
        self.push(name, kind, OpCost { flops, bytes, written }, &exec, 0);
    }

    /// RMSNorm/LayerNorm over `rows x width`: read + write activations, read the weight (and bias).
    fn norm(&mut self, name: &str, rows: u64, width: u64, layer_norm: bool) -> Result<(), CoreError> {
        let a = self.req.activations;
        let params = if layer_norm { 2 } else { 1 };
        let weight = st(a, params, width)?;
        let out = st(a, rows, width)?;
        let bytes = 2 * out + weight;
        let exec = self.act_exec.clone();
        self.push(name, OpKind::Norm, OpCost { flops: 4 * rows * width, bytes, written: out }, &exec, weight);
        Ok(())
    }

    fn residual(&mut self, rows: u64, width: u64) -> Result<(), CoreError> {
        let out = st(self.req.activations, rows, width)?;
        self.elementwise("residual_add", OpKind::Elementwise, rows * width, 3 * out, out);
        Ok(())
    }

    fn all_reduce(&mut self, name: &str, hidden: u64) -> Result<f64, CoreError> {
        let tp = self.req.tp;
        if tp <= 1 {
            return Ok(0.0);
        }
        let link = self.hw.interconnect_gb_s.ok_or_else(|| {
            CoreError::invalid(
                "interconnect_gb_s",
                "missing",
                "a GPU-to-GPU bandwidth in the hardware profile for --tp > 1",
            )
        })?;
        let bytes = st(self.req.activations, self.t, hidden)?;
        // Ring all-reduce: each GPU sends and receives 2(N-1)/N of the buffer, at the per-direction bandwidth
        // (vendors quote both directions summed).
        let time_us = 2.0 * (tp - 1) as f64 / tp as f64 * bytes as f64 / (link / 2.0 * 1e3);
        let prediction = Prediction {
            flops: 0,
            bytes,
            arithmetic_intensity: 0.0,
            compute: self.act_exec.compute,
            mode: self.act_exec.mode,
            peak_tflops: self.act_exec.peak_tflops,
            bandwidth_gb_s: link / 2.0,
            ridge_ai: f64::INFINITY,
            time_memory_us: time_us,
            time_compute_us: 0.0,
            overhead_us: 0.0,
            time_us,
            bound: Bound::Memory,
            attainable_tflops: 0.0,
            note: Some(format!("ring all-reduce over {tp} GPUs at {} GB/s per direction", link / 2.0)),
        };
        self.ops.push(OpRow {
            name: name.to_string(),
            group: self.group.clone(),
            kind: OpKind::Communication,
            count: self.count,
            weight_bytes: 0,
            total_time_us: time_us * self.count as f64,
            prediction,
            fused_into: None,
        });
        Ok(time_us * self.count as f64)
    }
}

/// Expected number of distinct experts hit when `tokens` tokens each pick `top_k` of `experts`
/// (uniform routing): `E · (1 - (1 - k/E)^T)`, at least `k` and at most `E`.
pub fn expected_experts(experts: u64, top_k: u64, tokens: u64) -> f64 {
    let e = experts as f64;
    let p_miss = (1.0 - top_k as f64 / e).powf(tokens as f64);
    (e * (1.0 - p_miss)).clamp(top_k.min(experts) as f64, e)
}

fn div(x: u64, tp: u64) -> u64 {
    x.div_ceil(tp).max(1)
}

/// Analyzes one step of `cfg` for `req` on `hw`.
pub fn analyze_model(cfg: &ModelConfig, req: &ModelRequest, hw: &HardwareProfile) -> Result<ModelReport, CoreError> {
    for (field, v) in [("batch", req.batch), ("seq", req.seq), ("tp", req.tp)] {
        if v == 0 {
            return Err(CoreError::invalid(field, 0, "an integer >= 1"));
        }
    }
    if cfg.heads % req.tp != 0 {
        return Err(CoreError::invalid(
            "tp",
            req.tp,
            format!("a divisor of the model's {} attention heads", cfg.heads),
        ));
    }
    let (b, s, tp) = (req.batch, req.seq, req.tp);
    let t = match req.phase {
        Phase::Decode => b,
        Phase::Prefill => b.checked_mul(s).ok_or(CoreError::Overflow { what: "tokens" })?,
    };
    let a = req.activations;
    let act_exec = Scheme::uniform(a).execution(hw)?;
    let mut bld = Builder { hw, req: *req, t, ops: Vec::new(), group: "model".into(), count: 1, act_exec };
    let h = cfg.hidden;

    // Embedding (and learned positions): gather T rows.
    let embed_rows = st(a, t, h)?;
    bld.elementwise("embedding", OpKind::Embedding, 0, 2 * embed_rows, embed_rows);

    let dense_layers = cfg.moe.map_or(cfg.layers, |m| m.first_dense_layers.min(cfg.layers));
    let groups: Vec<(String, u64, bool)> = if cfg.moe.is_some() {
        let mut g = Vec::new();
        if dense_layers > 0 {
            g.push((format!("dense layers 0-{}", dense_layers - 1), dense_layers, false));
        }
        if cfg.layers > dense_layers {
            g.push((format!("moe layers {}-{}", dense_layers, cfg.layers - 1), cfg.layers - dense_layers, true));
        }
        g
    } else {
        vec![(format!("layers 0-{}", cfg.layers - 1), cfg.layers, false)]
    };

    let mut comm_us = 0.0;
    let mut kv_per_token_layer = 0;
    for (group, count, moe_layer) in groups {
        bld.group = group;
        bld.count = count;
        let heads = cfg.heads / tp;
        bld.norm("input_layernorm", t, h, cfg.layer_norm)?;
        match cfg.attention {
            Attention::Gqa => {
                let kvh = div(cfg.kv_heads, tp);
                let d = cfg.head_dim;
                bld.linear("qkv_proj", (heads + 2 * kvh) * d, h, Role::Attention)?;
                if !cfg.layer_norm {
                    let rope_elems = (heads + kvh) * d;
                    let rope = st(a, t, rope_elems)?;
                    bld.elementwise("rotary_emb", OpKind::Elementwise, 3 * t * rope_elems, 2 * rope, rope);
                }
                // Pairs of (query, key) positions per sequence and head.
                let (q_per_seq, pairs) = match req.phase {
                    Phase::Decode => (1, s),
                    Phase::Prefill => (s, s * (s + 1) / 2),
                };
                let flops = b * heads * pairs * (4 * d + 5);
                let kv_new = b * q_per_seq;
                let kv_read = match req.phase {
                    Phase::Decode => st(req.kv, b * s * kvh * 2, d)?,
                    Phase::Prefill => st(a, b * s * kvh * 2, d)?,
                };
                // Reads q and the cache; writes the output and the new tokens' K and V.
                let written = st(a, t * heads, d)? + st(req.kv, kv_new * kvh * 2, d)?;
                let bytes = st(a, t * heads, d)? + kv_read + written;
                let exec = Scheme { weights: req.kv, activations: a, output: a }.execution(hw)?;
                bld.push("attention", OpKind::Attention, OpCost { flops, bytes, written }, &exec, 0);
                bld.linear("o_proj", h, heads * d, Role::Attention)?;
                kv_per_token_layer = st(req.kv, cfg.kv_heads * 2, d)?;
            }
            Attention::Mla(m) => {
                let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
                let latent = m.kv_lora_rank + m.qk_rope_head_dim;
                match m.q_lora_rank {
                    Some(q) => {
                        bld.linear("fused_qkv_a_proj", q + latent, h, Role::Attention)?;
                        bld.norm("q_a_layernorm", t, q, false)?;
                        bld.norm("kv_a_layernorm", t, m.kv_lora_rank, false)?;
                        bld.linear("q_b_proj", heads * qk, q, Role::Attention)?;
                    }
                    None => {
                        bld.linear("q_proj", heads * qk, h, Role::Attention)?;
                        bld.linear("kv_a_proj_with_mqa", latent, h, Role::Attention)?;
                        bld.norm("kv_a_layernorm", t, m.kv_lora_rank, false)?;
                    }
                }
                let rope_elems = (heads + 1) * m.qk_rope_head_dim;
                let rope = st(a, t, rope_elems)?;
                bld.elementwise("rotary_emb", OpKind::Elementwise, 3 * t * rope_elems, 2 * rope, rope);
                let exec = Scheme { weights: req.kv, activations: a, output: a }.execution(hw)?;
                match req.phase {
                    Phase::Decode => {
                        // Absorbed form: q_nope · W_UK per head, attention over the latent cache, · W_UV.
                        bld.bmm("mla_absorb_q_bmm (W_UK)", heads, m.kv_lora_rank, m.qk_nope_head_dim)?;
                        let flops = b * heads * s * (2 * latent + 2 * m.kv_lora_rank + 5);
                        // Reads the latent cache and q; writes the output and the new token's latent.
                        let written = st(a, b * heads, m.kv_lora_rank)? + st(req.kv, b, latent)?;
                        let bytes = st(req.kv, b * s, latent)? + st(a, b * heads, latent)? + written;
                        let cost = OpCost { flops, bytes, written };
                        bld.push("mla_decode_attention", OpKind::Attention, cost, &exec, 0);
                        bld.bmm("mla_absorb_v_bmm (W_UV)", heads, m.v_head_dim, m.kv_lora_rank)?;
                    }
                    Phase::Prefill => {
                        bld.linear(
                            "kv_b_proj",
                            heads * (m.qk_nope_head_dim + m.v_head_dim),
                            m.kv_lora_rank,
                            Role::Attention,
                        )?;
                        let pairs = s * (s + 1) / 2;
                        let flops = b * heads * pairs * (2 * qk + 2 * m.v_head_dim + 5);
                        // Reads q, k and v; writes the output and the latent cache.
                        let written = st(a, t * heads, m.v_head_dim)? + st(req.kv, t, latent)?;
                        let bytes = st(a, t * heads, qk)? * 2 + st(a, t * heads, m.v_head_dim)? + written;
                        let cost = OpCost { flops, bytes, written };
                        bld.push("mla_prefill_attention", OpKind::Attention, cost, &exec, 0);
                    }
                }
                bld.linear("o_proj", h, heads * m.v_head_dim, Role::Attention)?;
                kv_per_token_layer = st(req.kv, 1, latent)?;
            }
        }
        comm_us += bld.all_reduce("all_reduce (attention)", h)?;
        bld.residual(t, h)?;
        bld.norm("post_attention_layernorm", t, h, cfg.layer_norm)?;
        match (moe_layer, cfg.moe) {
            (true, Some(moe)) => {
                bld.linear_act("router_gate", moe.experts, h)?;
                let logits = t * moe.experts;
                // Reads FP32 logits; writes each token's top-k indices and weights.
                let picks = 8 * t * moe.top_k;
                bld.elementwise("topk_routing", OpKind::Elementwise, 5 * logits, 4 * logits + picks, picks);
                let ei = div(moe.expert_intermediate, tp);
                let touched = expected_experts(moe.experts, moe.top_k, t);
                let routed = t * moe.top_k;
                let (escheme, exec) = bld.role(Role::Experts)?;
                let w = escheme.weights;
                let ea = escheme.activations;
                let gate_up_w = st(w, 2 * ei, h)?;
                let down_w = st(w, h, ei)?;
                let gate_up_out = st(a, routed, 2 * ei)?;
                let gate_up = OpCost {
                    flops: 2 * routed * 2 * ei * h,
                    bytes: (touched * gate_up_w as f64).round() as u64 + st(ea, routed, h)? + gate_up_out,
                    written: gate_up_out,
                };
                bld.push("experts_gate_up", OpKind::Experts, gate_up, &exec, (touched * gate_up_w as f64) as u64);
                let silu_out = st(a, routed, ei)?;
                bld.elementwise("silu_and_mul", OpKind::Elementwise, 4 * routed * ei, 3 * silu_out, silu_out);
                let down_out = st(a, routed, h)?;
                let down = OpCost {
                    flops: 2 * routed * h * ei,
                    bytes: (touched * down_w as f64).round() as u64 + st(ea, routed, ei)? + down_out,
                    written: down_out,
                };
                bld.push("experts_down", OpKind::Experts, down, &exec, (touched * down_w as f64) as u64);
                if moe.shared_experts > 0 {
                    let si = div(moe.shared_experts * moe.shared_intermediate, tp);
                    bld.linear("shared_experts_gate_up", 2 * si, h, Role::Ffn)?;
                    let out = st(a, t, si)?;
                    bld.elementwise("shared_silu_and_mul", OpKind::Elementwise, 4 * t * si, 3 * out, out);
                    bld.linear("shared_experts_down", h, si, Role::Ffn)?;
                }
            }
            _ => {
                let inter = div(cfg.intermediate, tp);
                match cfg.mlp {
                    Mlp::Gated => {
                        bld.linear("gate_up_proj", 2 * inter, h, Role::Ffn)?;
                        let out = st(a, t, inter)?;
                        bld.elementwise("silu_and_mul", OpKind::Elementwise, 4 * t * inter, 3 * out, out);
                        bld.linear("down_proj", h, inter, Role::Ffn)?;
                    }
                    Mlp::Plain => {
                        bld.linear("fc1", inter, h, Role::Ffn)?;
                        let out = st(a, t, inter)?;
                        bld.elementwise("gelu", OpKind::Elementwise, 8 * t * inter, 2 * out, out);
                        bld.linear("fc2", h, inter, Role::Ffn)?;
                    }
                }
            }
        }
        comm_us += bld.all_reduce("all_reduce (ffn)", h)?;
        bld.residual(t, h)?;
    }

    // Final norm and LM head: logits for the last position of each sequence only.
    bld.group = "model".into();
    bld.count = 1;
    let t_saved = bld.t;
    bld.t = b;
    bld.norm("final_norm", b, h, cfg.layer_norm)?;
    bld.linear("lm_head", div(cfg.vocab, tp), h, Role::LmHead)?;
    bld.t = t_saved;

    let ops = bld.ops;
    let time_us: f64 = ops.iter().map(|o| o.total_time_us).sum();
    let flops: u64 = ops.iter().map(|o| o.prediction.flops * o.count).sum();
    let bytes: u64 = ops.iter().map(|o| o.prediction.bytes * o.count).sum();
    let weight_bytes_read: u64 = ops.iter().map(|o| o.weight_bytes * o.count).sum();
    let weight_bytes = weight_total(cfg, req, st)?;
    let kv_bytes_per_token = kv_per_token_layer * cfg.layers;
    let kv_bytes_at_seq = kv_bytes_per_token * b * s;
    let memory_per_gpu_gb = (weight_bytes as f64 + kv_bytes_at_seq as f64) / tp as f64 / 1e9;
    let headroom_gb = hw.memory_gb.map(|m| m - memory_per_gpu_gb);
    let per_step_tokens = match req.phase {
        Phase::Decode => b,
        Phase::Prefill => t,
    };
    let mut report = ModelReport {
        model: cfg.name.clone(),
        hardware: hw.key.clone(),
        hardware_name: hw.name.clone(),
        request: *req,
        totals: Totals {
            time_us,
            time_per_layer_us: ops.iter().filter(|o| o.group != "model").map(|o| o.total_time_us).sum::<f64>()
                / cfg.layers as f64,
            tokens_per_s: per_step_tokens as f64 / (time_us * 1e-6),
            ttft_ms: (req.phase == Phase::Prefill).then_some(time_us / 1e3),
            flops,
            bytes,
            params: weight_total(cfg, req, |_, r, c| Ok(r * c))?,
            weight_bytes,
            weight_bytes_read,
            kv_bytes_per_token,
            kv_bytes_at_seq,
            memory_per_gpu_gb,
            hardware_memory_gb: hw.memory_gb,
            fits: headroom_gb.map(|h| h >= 0.0),
            headroom_gb,
            s_cross_tokens: (weight_bytes_read * tp) as f64 / (b as f64 * kv_bytes_per_token as f64),
            s_cross_all_weights_tokens: weight_bytes as f64 / (b as f64 * kv_bytes_per_token as f64),
            comm_time_us: comm_us,
            comm_share: if time_us > 0.0 { comm_us / time_us } else { 0.0 },
        },
        ops,
    };
    if req.fused {
        report.fuse_standard();
    }
    Ok(report)
}

/// Every weight of the model (all experts), unsharded, measured by `st`: exact storage bytes, or elements
/// (parameters) with `|_, r, c| Ok(r * c)`.
fn weight_total(
    cfg: &ModelConfig,
    req: &ModelRequest,
    st: impl Fn(Format, u64, u64) -> Result<u64, CoreError>,
) -> Result<u64, CoreError> {
    let (w, a, h) = (req.weights, req.activations, cfg.hidden);
    let mut per_layer_attn = 0;
    match cfg.attention {
        Attention::Gqa => {
            per_layer_attn += st(w, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim, h)?;
            per_layer_attn += st(w, h, cfg.heads * cfg.head_dim)?;
        }
        Attention::Mla(m) => {
            let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
            let latent = m.kv_lora_rank + m.qk_rope_head_dim;
            per_layer_attn += match m.q_lora_rank {
                Some(q) => st(w, q + latent, h)? + st(w, cfg.heads * qk, q)? + st(a, 1, q)?,
                None => st(w, cfg.heads * qk, h)? + st(w, latent, h)?,
            };
            per_layer_attn += st(w, cfg.heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank)?;
            per_layer_attn += st(a, 1, m.kv_lora_rank)?;
            per_layer_attn += st(w, h, cfg.heads * m.v_head_dim)?;
        }
    }
    let norms = st(a, if cfg.layer_norm { 4 } else { 2 }, h)?;
    let dense_ffn = match cfg.mlp {
        Mlp::Gated => st(w, 2 * cfg.intermediate, h)? + st(w, h, cfg.intermediate)?,
        Mlp::Plain => st(w, cfg.intermediate, h)? + st(w, h, cfg.intermediate)?,
    };
    let (dense_layers, moe_layers, moe_ffn) = match cfg.moe {
        Some(m) => {
            let expert = st(w, 2 * m.expert_intermediate, h)? + st(w, h, m.expert_intermediate)?;
            let si = m.shared_experts * m.shared_intermediate;
            let shared = if si > 0 { st(w, 2 * si, h)? + st(w, h, si)? } else { 0 };
            let dense = m.first_dense_layers.min(cfg.layers);
            (dense, cfg.layers - dense, m.experts * expert + shared + st(a, m.experts, h)?)
        }
        None => (cfg.layers, 0, 0),
    };
    let embed = st(a, cfg.vocab + cfg.learned_positions.unwrap_or(0), h)?;
    let head = if cfg.tie_embeddings { 0 } else { st(a, cfg.vocab, h)? };
    Ok(cfg.layers * (per_layer_attn + norms)
        + dense_layers * dense_ffn
        + moe_layers * moe_ffn
        + embed
        + head
        + st(a, 1, h)?)
}

#[cfg(test)]
mod tests;
