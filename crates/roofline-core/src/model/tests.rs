//! Whole-model tests with hand-derived numbers.

use super::*;
use crate::hardware::HardwareProfile;

fn h100() -> HardwareProfile {
    HardwareProfile::preset("h100").unwrap()
}

fn fp16(phase: Phase, batch: u64, seq: u64) -> ModelRequest {
    ModelRequest {
        phase,
        batch,
        seq,
        tp: 1,
        weights: Format::FP16,
        activations: Format::FP16,
        kv: Format::FP16,
        roles: RoleSchemes::default(),
        fused: false,
    }
}

#[test]
fn every_preset_parses() {
    let presets = ModelConfig::presets().unwrap();
    assert!(presets.len() >= 7);
    for (key, cfg) in presets {
        for phase in [Phase::Decode, Phase::Prefill] {
            let r = analyze_model(&cfg, &fp16(phase, 1, 128), &h100()).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(r.totals.time_us > 0.0, "{key}");
        }
    }
}

#[test]
fn llama3_8b_weights_flops_and_s_cross() {
    let cfg = ModelConfig::preset("llama-3.1-8b").unwrap();
    let r = analyze_model(&cfg, &fp16(Phase::Decode, 1, 1), &h100()).unwrap();
    // Parameters by hand: embed + head 2 * 128256 * 4096; per layer q,k,v,o = 4096*(4096+2*1024) + 4096*4096,
    // mlp 3 * 4096 * 14336, norms 2 * 4096; final norm 4096.
    let per_layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096;
    let params: u64 = 2 * 128_256 * 4096 + 32 * per_layer + 4096;
    assert_eq!(r.totals.params, params);
    assert!((params as f64 / 8.03e9 - 1.0).abs() < 0.005, "{params}");
    assert_eq!(r.totals.weight_bytes, 2 * params);
    assert!((r.totals.weight_bytes as f64 / (8.03e9 * 2.0) - 1.0).abs() < 0.005);
    // Decode FLOPs per token ~ 2 x params (embedding is a lookup, so 2 x non-embedding params + attention).
    let ratio = r.totals.flops as f64 / (2.0 * params as f64);
    assert!((0.9..1.01).contains(&ratio), "flops/token over 2 params = {ratio}");
    // KV per token: 32 layers x 2 (K,V) x 8 heads x 128 x 2 bytes = 131072 B.
    assert_eq!(r.totals.kv_bytes_per_token, 131_072);
    // S_cross = weight bytes read per step / (B * KV bytes per token): all weights but the embedding table
    // (a lookup reads only B rows) are read each step.
    let read = 2 * (params - 128_256 * 4096);
    assert_eq!(r.totals.weight_bytes_read, read);
    let s_cross = read as f64 / 131_072.0;
    assert!((r.totals.s_cross_tokens - s_cross).abs() < 1e-6);
    assert!((s_cross - 114_516.0).abs() < 1.0, "{s_cross}");
    // Against all weights (embedding table included, as quick estimates do): 2 * params / 131072 = ~122.5k.
    let all = 2.0 * params as f64 / 131_072.0;
    assert!((r.totals.s_cross_all_weights_tokens - all).abs() < 1e-6);
    assert!((all - 122_560.0).abs() < 100.0, "{all}");
    // S_cross falls as 1/B.
    let r8 = analyze_model(&cfg, &fp16(Phase::Decode, 8, 1), &h100()).unwrap();
    assert!((r8.totals.s_cross_tokens * 8.0 - s_cross).abs() < 1e-6);
}

#[test]
fn decode_is_memory_bound_and_tokens_per_s_follow_bytes() {
    let cfg = ModelConfig::preset("llama-3.1-8b").unwrap();
    let hw = h100();
    let r = analyze_model(&cfg, &fp16(Phase::Decode, 1, 1024), &hw).unwrap();
    let floor_us = r.totals.bytes as f64 / (hw.memory_bandwidth_gb_s * 1e3);
    assert!(r.totals.time_us >= floor_us * 0.999);
    assert!(r.ops.iter().filter(|o| o.kind == OpKind::Linear).all(|o| o.prediction.bound == Bound::Memory));
    let int4 = ModelRequest { weights: Format::INT4_G128, ..fp16(Phase::Decode, 1, 1024) };
    let r4 = analyze_model(&cfg, &int4, &hw).unwrap();
    let speedup = r4.totals.tokens_per_s / r.totals.tokens_per_s;
    assert!(speedup > 3.0 && speedup < 4.0, "{speedup}");
}

#[test]
fn prefill_reports_ttft_and_is_compute_bound() {
    let cfg = ModelConfig::preset("llama-3.1-8b").unwrap();
    let r = analyze_model(&cfg, &fp16(Phase::Prefill, 1, 2048), &h100()).unwrap();
    assert!(r.totals.ttft_ms.unwrap() > 0.0);
    let qkv = r.ops.iter().find(|o| o.name == "qkv_proj").unwrap();
    assert_eq!(qkv.prediction.bound, Bound::Compute);
    assert_eq!(qkv.prediction.flops, 2 * 2048 * 6144 * 4096);
}

#[test]
fn moe_expected_experts() {
    assert!((expected_experts(8, 2, 1) - 2.0).abs() < 1e-12);
    // 8 experts, top-2, 4 tokens: 8 * (1 - 0.75^4)
    assert!((expected_experts(8, 2, 4) - 8.0 * (1.0 - 0.75f64.powi(4))).abs() < 1e-12);
    assert!((expected_experts(256, 8, 10_000) - 256.0).abs() < 1e-6);
    let cfg = ModelConfig::preset("mixtral-8x7b").unwrap();
    let r = analyze_model(&cfg, &fp16(Phase::Decode, 1, 1), &h100()).unwrap();
    // ~46.7e9 parameters in Mixtral-8x7B
    assert!((r.totals.params as f64 / 46.7e9 - 1.0).abs() < 0.01, "{}", r.totals.params);
    // one token reads 2 of 8 experts
    let experts: u64 = r.ops.iter().filter(|o| o.kind == OpKind::Experts).map(|o| o.weight_bytes * o.count).sum();
    assert_eq!(experts, 32 * 2 * 3 * 4096 * 14336 * 2);
}

#[test]
fn deepseek_v3_mla_and_moe() {
    let cfg = ModelConfig::preset("deepseek-v3").unwrap();
    let r = analyze_model(&cfg, &fp16(Phase::Decode, 1, 1024), &h100()).unwrap();
    // 671e9 parameters (the MTP module excluded: 61 layers)
    assert!((r.totals.params as f64 / 671e9 - 1.0).abs() < 0.01, "{}", r.totals.params);
    // latent KV: (512 + 64) elements per token per layer
    assert_eq!(r.totals.kv_bytes_per_token, 61 * 576 * 2);
    for name in [
        "fused_qkv_a_proj",
        "q_b_proj",
        "mla_absorb_q_bmm (W_UK)",
        "mla_decode_attention",
        "o_proj",
        "topk_routing",
        "silu_and_mul",
    ] {
        assert!(r.ops.iter().any(|o| o.name == name), "{name}");
    }
    // fused_qkv_a_proj at decode B=1: AI ~ 1 FLOP/byte in FP16, nowhere near the seed's ~7000.
    let a = r.ops.iter().find(|o| o.name == "fused_qkv_a_proj").unwrap();
    assert!(a.prediction.arithmetic_intensity < 1.1);
}

#[test]
fn tensor_parallel_costs_all_reduce() {
    let cfg = ModelConfig::preset("llama-3.1-70b").unwrap();
    let req = ModelRequest { tp: 4, ..fp16(Phase::Decode, 8, 1024) };
    let r = analyze_model(&cfg, &req, &h100()).unwrap();
    assert!(r.totals.comm_time_us > 0.0 && r.totals.comm_share > 0.0 && r.totals.comm_share < 1.0);
    let one = analyze_model(&cfg, &fp16(Phase::Decode, 8, 1024), &h100()).unwrap();
    assert!(r.totals.time_us < one.totals.time_us);
    assert!(one.totals.fits == Some(false), "70B in FP16 does not fit one 80 GB GPU");
    assert!(analyze_model(&cfg, &ModelRequest { tp: 3, ..req }, &h100()).is_err());
}

#[test]
fn config_errors_name_the_field() {
    let err = ModelConfig::from_json(r#"{"model_type":"llama","hidden_size":4096}"#).unwrap_err().to_string();
    assert!(err.contains("num_attention_heads"), "{err}");
    let err = ModelConfig::from_json(r#"{"model_type":"mamba"}"#).unwrap_err().to_string();
    assert!(err.contains("mamba") && err.contains("llama"), "{err}");
    assert!(ModelConfig::from_json("not json").is_err());
    let gpt2 = ModelConfig::preset("gpt2").unwrap();
    let r = analyze_model(&gpt2, &fp16(Phase::Decode, 1, 16), &h100()).unwrap();
    assert!((r.totals.params as f64 / 124.4e6 - 1.0).abs() < 0.01, "{}", r.totals.params);
}

/// A measured-style profile: every kernel pays a launch overhead and a memory start-up latency.
fn h100_measured() -> HardwareProfile {
    HardwareProfile { launch_overhead_us: Some(2.0), memory_latency_us: Some(1.0), ..h100() }
}

#[test]
fn fused_prediction_drops_the_fixed_costs_of_norms_adds_and_rope() {
    let cfg = ModelConfig::presets().unwrap().into_iter().find(|(k, _)| k == "llama-3.1-8b").unwrap().1;
    let hw = h100_measured();
    let plain = analyze_model(&cfg, &fp16(Phase::Decode, 1, 1024), &hw).unwrap();
    let fused = analyze_model(&cfg, &ModelRequest { fused: true, ..fp16(Phase::Decode, 1, 1024) }, &hw).unwrap();
    let host = |name: &str| -> Vec<Option<String>> {
        fused.ops.iter().filter(|o| o.name == name).map(|o| o.fused_into.clone()).collect()
    };
    assert_eq!(host("input_layernorm"), vec![Some("qkv_proj".to_string())]);
    assert_eq!(host("post_attention_layernorm"), vec![Some("gate_up_proj".to_string())]);
    assert_eq!(host("rotary_emb"), vec![Some("attention".to_string())]);
    assert_eq!(host("residual_add"), vec![Some("o_proj".to_string()), Some("down_proj".to_string())]);
    assert_eq!(host("final_norm"), vec![Some("lm_head".to_string())]);
    assert_eq!(host("qkv_proj"), vec![None]);
    assert!(plain.ops.iter().all(|o| o.fused_into.is_none()));
    // Each fused op loses exactly its launch overhead and start-up latency (these ops are memory-bound).
    let saved: f64 = plain
        .ops
        .iter()
        .zip(&fused.ops)
        .filter(|(_, f)| f.fused_into.is_some())
        .map(|(p, f)| {
            assert_eq!((p.prediction.bytes, p.prediction.flops), (f.prediction.bytes, f.prediction.flops));
            assert!((p.prediction.time_us - f.prediction.time_us - 3.0).abs() < 1e-9, "{}", p.name);
            (p.prediction.time_us - f.prediction.time_us) * p.count as f64
        })
        .sum();
    // 2 norms + 2 residual adds + RoPE per layer, and the final norm: 5 x 32 + 1 ops, 3 us each.
    assert!((saved - 3.0 * 161.0).abs() < 1e-6, "{saved}");
    assert!((plain.totals.time_us - fused.totals.time_us - saved).abs() < 1e-6);
    let t = &fused.totals;
    assert!((t.tokens_per_s - 1e6 / t.time_us).abs() < 1e-9 * t.tokens_per_s);
    let layer_us: f64 = fused.ops.iter().filter(|o| o.group != "model").map(|o| o.total_time_us).sum();
    assert!((t.time_per_layer_us - layer_us / 32.0).abs() < 1e-9);
    // A measured engine's own list: unknown names change nothing.
    let mut r = plain.clone();
    assert!(!r.fuse("no_such_op", "qkv_proj"));
    assert_eq!(r, plain);
    assert!(r.fuse("rotary_emb", "attention"));
    assert!((plain.totals.time_us - r.totals.time_us - 3.0 * 32.0).abs() < 1e-6);
}

#[test]
fn fused_prediction_covers_moe_and_mla_models() {
    for key in ["deepseek-v3", "mixtral-8x7b"] {
        let cfg = ModelConfig::presets().unwrap().into_iter().find(|(k, _)| k == key).expect(key).1;
        let hw = h100_measured();
        let plain = analyze_model(&cfg, &fp16(Phase::Decode, 8, 4096), &hw).unwrap();
        let fused = analyze_model(&cfg, &ModelRequest { fused: true, ..fp16(Phase::Decode, 8, 4096) }, &hw).unwrap();
        assert!(fused.totals.time_us < plain.totals.time_us, "{key}");
        // Every norm found a linear after it; the residual adds found a linear or the experts before them.
        assert!(fused.ops.iter().filter(|o| o.kind == OpKind::Norm).all(|o| o.fused_into.is_some()), "{key}");
        assert!(fused.ops.iter().filter(|o| o.name == "residual_add").all(|o| o.fused_into.is_some()), "{key}");
    }
}

#[test]
fn fuse_after_marks_only_the_rows_behind_that_linear() {
    let cfg = ModelConfig::preset("mixtral-8x7b").unwrap();
    let plain = analyze_model(&cfg, &fp16(Phase::Decode, 1, 1024), &h100_measured()).unwrap();
    let mut r = plain.clone();
    // Mixtral's layer has two residual adds: after o_proj and after experts_down.
    assert!(r.fuse_after("residual_add", "o_proj", "o_proj"));
    let adds: Vec<Option<String>> =
        r.ops.iter().filter(|o| o.name == "residual_add").map(|o| o.fused_into.clone()).collect();
    assert_eq!(adds, vec![Some("o_proj".to_string()), None]);
    let add = plain.ops.iter().find(|o| o.name == "residual_add").unwrap();
    let saved = (add.prediction.time_us - add.prediction.without_fixed_costs().time_us) * add.count as f64;
    assert!(saved > 0.0);
    assert!((plain.totals.time_us - r.totals.time_us - saved).abs() < 1e-6);
    // A name or a predecessor the report lacks changes nothing.
    let mut same = plain.clone();
    assert!(!same.fuse_after("residual_add", "gate_up_proj", "x"));
    assert!(!same.fuse_after("no_such_op", "o_proj", "x"));
    assert_eq!(same, plain);
}
