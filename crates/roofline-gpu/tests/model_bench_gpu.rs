//! GPU test of the decode-step benchmark (run on a GPU machine: `cargo test -p roofline-gpu --release --
//! --ignored`): a small Llama-shaped model in every weight format and at several batch sizes runs, its
//! attention (and the KV append) matches the CPU f64 reference, and the per-op times add up; fused and
//! unfused steps.

use roofline_gpu::bench_weights::{head_matrices, layer_matrices};
use roofline_gpu::model_bench::{AttnKernel, BenchConfig, KvFormat, MoeShape, QkvKernel};
use roofline_gpu::weight_only::WoFormat;
use roofline_gpu::Gpu;

fn small(weights: WoFormat, batch: usize, seq: usize, fuse: bool) -> BenchConfig {
    with_attention(weights, batch, seq, fuse, AttnKernel::Auto)
}

/// The small test model; `ROOFLINE_TEST_GEMV` (a `--gemv` override such as `pdl=false`) reruns every test with
/// other weight-only launch settings (session 28 tried `pdl=false` this way while chasing a PDL race).
fn with_attention(weights: WoFormat, batch: usize, seq: usize, fuse: bool, attention: AttnKernel) -> BenchConfig {
    BenchConfig {
        hidden: 1024,
        heads: 8,
        kv_heads: 2,
        intermediate: 2816,
        vocab: 4096,
        layers: 4,
        layers_built: 2,
        batch,
        seq,
        weights,
        rope_theta: 500_000.0,
        fuse,
        attention,
        kv: KvFormat::F16,
        checkpoint: None,
        moe: None,
        gemv: std::env::var("ROOFLINE_TEST_GEMV").unwrap_or_default().parse().expect("ROOFLINE_TEST_GEMV"),
        ffn: Default::default(),
        qkv: Default::default(),
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn small_llama_step_runs_in_every_format_and_checks_attention() {
    let gpu = Gpu::open(0).unwrap();
    let mut cases: Vec<(WoFormat, usize, usize, bool)> = WoFormat::ALL.iter().map(|&f| (f, 1, 1000, true)).collect();
    for f in [WoFormat::Fp16, WoFormat::Int4G128, WoFormat::Nf4] {
        cases.extend([(f, 1, 1, true), (f, 3, 333, true), (f, 16, 64, true)]);
    }
    for f in [WoFormat::Fp16, WoFormat::Int4G128] {
        cases.extend([(f, 1, 1000, false), (f, 3, 15, false)]);
    }
    // 8-bit weights with Llama-3.1-8B's intermediate size: down_proj (K = 14336) on an engine of its own
    // (x in registers, `Variant::best_for`), SwiGLU fused into it, the FFN checked.
    let mut configs: Vec<BenchConfig> = cases.iter().map(|&(w, b, s, f)| small(w, b, s, f)).collect();
    for f in [WoFormat::Fp8E4M3, WoFormat::Int8] {
        configs.extend([true, false].map(|fuse| BenchConfig { intermediate: 14336, ..small(f, 1, 1000, fuse) }));
    }
    for cfg in configs {
        {
            let (weights, batch, seq, fuse) = (cfg.weights, cfg.batch, cfg.seq, cfg.fuse);
            let r = gpu.model_bench(&cfg, |_| {}).unwrap_or_else(|e| panic!("{weights:?} B={batch} S={seq}: {e}"));
            assert!(r.attention_rel_error < 1e-2, "{weights:?} B={batch} S={seq}: {}", r.attention_rel_error);
            // The fused step checks the last layer's FFN (fused kernel or GEMVs) against the CPU too.
            match r.ffn_rel_error {
                Some(e) => assert!(fuse && e < 1e-2, "{weights:?} B={batch} S={seq}: FFN {e:.2e}"),
                None => assert!(!fuse, "{weights:?} B={batch} S={seq}: the fused step's FFN went unchecked"),
            }
            // ... and its qkv and o_proj; the LM head is checked in every step.
            let l = r.linear_rel_errors;
            for e in [l.qkv, l.o_proj] {
                assert_eq!(e.is_some(), fuse, "{weights:?} B={batch} S={seq}: {l:?}");
                assert!(e.is_none_or(|e| e < 1e-2), "{weights:?} B={batch} S={seq}: {l:?}");
            }
            assert!(l.lm_head < 1e-2, "{weights:?} B={batch} S={seq}: {l:?}");
            assert!(r.step_us > 0.0 && r.ops_sum_us > 0.0);
            assert_eq!(r.layers_built, 2);
            // The step scales two built layers to four: every per-layer op counts four times.
            assert!(r.ops.iter().any(|o| o.kind == "attention" && o.count == 4), "{:?}", r.ops);
            // Fused: no norm or RoPE kernel of their own, and they are listed as fused.
            assert_eq!(r.ops.iter().any(|o| o.kind == "norm"), !fuse, "{:?}", r.ops);
            assert_eq!(r.fused.iter().any(|f| f.name == "rotary_emb"), fuse, "{:?}", r.fused);
            let tps = r.tokens_per_s(batch);
            assert!((tps - batch as f64 * 1e6 / r.step_us).abs() < 1e-6 * tps.max(1.0));
            println!(
                "{weights:?} B={batch:>2} S={seq:>4} fuse={fuse}: step {:8.1} us, ops sum {:8.1} us, attention err {:.1e}, FFN err {:.1e}, {l:?}",
                r.step_us, r.ops_sum_us, r.attention_rel_error, r.ffn_rel_error.unwrap_or(f64::NAN)
            );
        }
    }
}

/// The qkv projection inside the cluster attention (`--qkv fused`) for the three 4-bit formats it takes,
/// FP16 and FP8 caches, a context of one position and of 1000, and the Llama-3.1-8B head layout (32 q heads
/// over 8 KV heads): model_bench checks its qkv rows against the GEMV's and its attention against the CPU.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn qkv_inside_the_attention_matches_the_gemv() {
    let gpu = Gpu::open(0).unwrap();
    if gpu.compute_capability.0 < 9 {
        eprintln!("skipped: the fused qkv + attention kernel needs sm_90+");
        return;
    }
    let mut cases = Vec::new();
    for weights in [WoFormat::Int4G128, WoFormat::Mxfp4, WoFormat::Nvfp4] {
        for kv in [KvFormat::F16, KvFormat::Fp8E4M3] {
            for seq in [1, 1000] {
                cases.push((weights, kv, seq, 1024, 8, 2));
            }
        }
    }
    cases.push((WoFormat::Int4G128, KvFormat::F16, 700, 4096, 32, 8));
    for (weights, kv, seq, hidden, heads, kv_heads) in cases {
        let cfg = BenchConfig {
            kv,
            hidden,
            heads,
            kv_heads,
            layers_built: 1,
            qkv: QkvKernel::Fused,
            ..small(weights, 1, seq, true)
        };
        let r = gpu.model_bench(&cfg, |_| {}).unwrap_or_else(|e| panic!("{weights:?} {kv:?} S={seq} D={hidden}: {e}"));
        let q = r.qkv_rel_error.expect("the projection ran inside the attention");
        assert!(
            q < 1e-2 && r.attention_rel_error < 1e-2,
            "{weights:?} {kv:?} S={seq}: qkv {q}, attention {}",
            r.attention_rel_error
        );
        assert!(r.attention_kernel.starts_with("attn_qkv"), "{}", r.attention_kernel);
        assert!(!r.ops.iter().any(|o| o.name == "qkv_proj"), "{:?}", r.ops);
        assert!(r.fused.iter().any(|f| f.name == "qkv_proj" && f.into == "attention"), "{:?}", r.fused);
        assert!(r.fused.iter().any(|f| f.name == "input_layernorm" && f.into == "attention"), "{:?}", r.fused);
        println!(
            "{weights:?} {kv:?} S={seq:>4} D={hidden}: qkv err {q:.1e}, attention err {:.1e}, attention row {:.2} us, {}",
            r.attention_rel_error,
            r.ops.iter().find(|o| o.name == "attention").map_or(0.0, |o| o.time_us),
            r.attention_kernel
        );
        // The same step with the GEMV: no fused projection.
        let g = gpu.model_bench(&BenchConfig { qkv: QkvKernel::Gemv, ..cfg }, |_| {}).unwrap();
        assert!(g.qkv_rel_error.is_none() && g.ops.iter().any(|o| o.name == "qkv_proj"));
    }
    // Where it does not apply, `fused` is an error that says why; the default is the GEMV.
    let fp16 = BenchConfig { qkv: QkvKernel::Fused, ..small(WoFormat::Fp16, 1, 10, true) };
    assert!(gpu.model_bench(&fp16, |_| {}).unwrap_err().to_string().contains("--qkv fused"));
    let batch3 = BenchConfig { qkv: QkvKernel::Fused, ..small(WoFormat::Int4G128, 3, 10, true) };
    assert!(gpu.model_bench(&batch3, |_| {}).unwrap_err().to_string().contains("batch"));
    let r = gpu.model_bench(&small(WoFormat::Int4G128, 1, 10, true), |_| {}).unwrap();
    assert!(r.qkv_rel_error.is_none());
}

/// MoE steps (Mixtral-like top-2 of 8, and Qwen-MoE-like top-4 of 16 with shared experts) in a 4-bit and the
/// FP16 format, at B = 1 (no gather) and B = 5 (tokens gathered per expert, experts taking different numbers of
/// tokens): the routing, one expert's output and the combine are checked against the CPU inside `model_bench`.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn moe_step_routes_checks_and_times_its_experts() {
    let gpu = Gpu::open(0).unwrap();
    let mixtral = MoeShape { experts: 8, top_k: 2, expert_intermediate: 1408, shared_intermediate: 0 };
    let qwen = MoeShape { experts: 16, top_k: 4, expert_intermediate: 512, shared_intermediate: 2048 };
    for (moe, weights, batch) in [
        (mixtral, WoFormat::Int4G128, 1),
        (mixtral, WoFormat::Fp16, 5),
        (qwen, WoFormat::Int4G128, 5),
        (qwen, WoFormat::Nf4, 1),
    ] {
        let cfg = BenchConfig { moe: Some(moe), intermediate: 0, ..small(weights, batch, 300, true) };
        let r = gpu.model_bench(&cfg, |_| {}).unwrap_or_else(|e| panic!("{moe:?} {weights:?} B={batch}: {e}"));
        let c = r.moe.as_ref().expect("a MoE step reports its routing check");
        assert!(c.router_rel_error < 1e-2 && c.expert_rel_error < 1e-2 && c.combine_rel_error < 2e-3, "{c:?}");
        assert_eq!(c.experts_per_layer.len(), 2);
        for experts in &c.experts_per_layer {
            // At least top_k distinct experts (one token picks top_k distinct ones), at most all of them.
            assert!(experts.len() >= moe.top_k && experts.len() <= moe.experts.min(batch * moe.top_k), "{experts:?}");
            assert!(experts.windows(2).all(|w| w[0] < w[1]), "{experts:?}");
        }
        for name in ["router_gate", "topk_routing", "experts_gate_up", "experts_down", "residual_add"] {
            assert!(r.ops.iter().any(|o| o.name == name && o.count == 4 && o.time_us > 0.0), "{name}: {:?}", r.ops);
        }
        assert_eq!(r.ops.iter().any(|o| o.name == "shared_experts_down"), moe.shared_intermediate > 0);
        assert!(!r.ops.iter().any(|o| o.name == "gate_up_proj"));
        // The attention's residual add runs in o_proj; the FFN's is the combine kernel.
        assert!(r.fused.iter().any(|f| f.name == "residual_add" && f.after.as_deref() == Some("o_proj")));
        println!(
            "MoE top-{} of {} (shared {}) {weights:?} B={batch}: step {:.1} us, experts {:?}, router err {:.1e}, expert err {:.1e}, combine err {:.1e}",
            moe.top_k, moe.experts, moe.shared_intermediate, r.step_us, c.experts_per_layer, c.router_rel_error,
            c.expert_rel_error, c.combine_rel_error
        );
    }
}

/// Both fused attention kernels (the cluster one where the GPU has clusters, with an FP16 and an FP8 KV cache)
/// on group sizes 1, 3, 4 and 8,
/// short and long contexts (one and several iterations per cluster CTA, empty CTA ranges at S = 1) and batch
/// sizes that change the cluster size.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn fused_attention_kernels_match_the_reference_on_every_group_size() {
    let gpu = Gpu::open(0).unwrap();
    let mut kernels = vec![(AttnKernel::Splits, KvFormat::F16)];
    if gpu.compute_capability.0 >= 9 {
        kernels.extend([(AttnKernel::Cluster, KvFormat::F16), (AttnKernel::Cluster, KvFormat::Fp8E4M3)]);
    }
    // (hidden, heads, kv heads): GQA 1, 3, 4, 8.
    let shapes = [(1024, 8, 8), (768, 6, 2), (1024, 8, 2), (1024, 8, 1)];
    for (attention, kv) in kernels {
        for (hidden, heads, kv_heads) in shapes {
            for (batch, seq) in [(1, 1), (1, 1000), (1, 4000), (5, 77), (16, 300)] {
                let cfg = BenchConfig {
                    hidden,
                    heads,
                    kv_heads,
                    intermediate: 1024,
                    vocab: 1000,
                    layers: 1,
                    layers_built: 1,
                    kv,
                    ..with_attention(WoFormat::Fp16, batch, seq, true, attention)
                };
                let what = format!("{attention:?} {kv:?} GQA {} B={batch} S={seq}", heads / kv_heads);
                let r = gpu.model_bench(&cfg, |_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(r.attention_rel_error < 1e-2, "{what}: {}", r.attention_rel_error);
                let name = if attention == AttnKernel::Cluster { "attn_cluster" } else { "attn_rope" };
                assert!(r.attention_kernel.starts_with(name), "{what}: {}", r.attention_kernel);
                let t = r.ops.iter().find(|o| o.kind == "attention").map_or(0.0, |o| o.time_us);
                println!("{what}: {} attention {t:.2} us, err {:.1e}", r.attention_kernel, r.attention_rel_error);
            }
        }
    }
}

/// Writes a 2-layer Llama-shaped checkpoint (config.json + one F32 safetensors file, Hugging Face names, no
/// lm_head: tied to the embedding) with weights scaled like a trained init; with `cfg.moe`, a Mixtral one
/// (router and experts in the `block_sparse_moe` layout instead of the dense FFN).
fn write_checkpoint(dir: &std::path::Path, cfg: &BenchConfig) {
    let (d, f, q, kv, v) = (cfg.hidden, cfg.intermediate, cfg.heads * 128, cfg.kv_heads * 128, cfg.vocab);
    let mut tensors: Vec<(String, Vec<usize>)> =
        vec![("model.embed_tokens.weight".into(), vec![v, d]), ("model.norm.weight".into(), vec![d])];
    for l in 0..cfg.layers {
        let p = format!("model.layers.{l}");
        let mut names = vec![
            ("input_layernorm".to_string(), vec![d]),
            ("post_attention_layernorm".into(), vec![d]),
            ("self_attn.q_proj".into(), vec![q, d]),
            ("self_attn.k_proj".into(), vec![kv, d]),
            ("self_attn.v_proj".into(), vec![kv, d]),
            ("self_attn.o_proj".into(), vec![d, q]),
        ];
        match cfg.moe {
            None => names.extend([
                ("mlp.gate_proj".into(), vec![f, d]),
                ("mlp.up_proj".into(), vec![f, d]),
                ("mlp.down_proj".into(), vec![d, f]),
            ]),
            Some(m) => {
                let ei = m.expert_intermediate;
                names.push(("block_sparse_moe.gate".into(), vec![m.experts, d]));
                for e in 0..m.experts {
                    let x = format!("block_sparse_moe.experts.{e}");
                    names.extend([
                        (format!("{x}.w1"), vec![ei, d]),
                        (format!("{x}.w3"), vec![ei, d]),
                        (format!("{x}.w2"), vec![d, ei]),
                    ]);
                }
            }
        }
        for (name, shape) in names {
            tensors.push((format!("{p}.{name}.weight"), shape));
        }
    }
    let (mut header, mut data) = (Vec::new(), Vec::new());
    for (i, (name, shape)) in tensors.iter().enumerate() {
        let n: usize = shape.iter().product();
        let r = roofline_gpu::random_f32(n, 500 + i as u64);
        let vals: Vec<f32> = if shape.len() == 1 {
            r.iter().map(|x| 1.0 + 0.1 * x).collect()
        } else {
            r.iter().map(|x| x / (shape[1] as f32).sqrt()).collect()
        };
        let start = data.len();
        data.extend(vals.iter().flat_map(|x| x.to_le_bytes()));
        header.push(format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":{shape:?},\"data_offsets\":[{start},{}]}}",
            data.len()
        ));
    }
    let header = format!("{{{}}}", header.join(","));
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend(data);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    let (arch, ffn) = match cfg.moe {
        None => ("\"LlamaForCausalLM\"],\"model_type\":\"llama\"".to_string(), format!("\"intermediate_size\":{f}")),
        Some(m) => (
            "\"MixtralForCausalLM\"],\"model_type\":\"mixtral\"".to_string(),
            format!(
                "\"intermediate_size\":{},\"num_local_experts\":{},\"num_experts_per_tok\":{}",
                m.expert_intermediate, m.experts, m.top_k
            ),
        ),
    };
    let config = format!(
        "{{\"architectures\":[{arch},\"hidden_size\":{d},{ffn},\"num_hidden_layers\":{},\"num_attention_heads\":{},\"num_key_value_heads\":{},\"vocab_size\":{v},\"tie_word_embeddings\":true,\"torch_dtype\":\"float32\"}}",
        cfg.layers, cfg.heads, cfg.kv_heads
    );
    std::fs::write(dir.join("config.json"), config).unwrap();
}

/// The shapes of the synthetic checkpoint: 2 layers, 2 q heads and 1 KV head of 128, FFN 512, vocabulary 512.
fn tiny(seq: usize) -> BenchConfig {
    BenchConfig {
        hidden: 256,
        heads: 2,
        kv_heads: 1,
        intermediate: 512,
        vocab: 512,
        ..small(WoFormat::Fp16, 1, seq, true)
    }
}

/// The host side of `--checkpoint` without a GPU: the synthetic checkpoint opens, and every layer's matrices,
/// the tied LM head and the embedding row come back with the config's shapes.
#[test]
fn synthetic_checkpoint_reads_back() {
    let dir = std::env::temp_dir().join(format!("roofline-mb-ckpt-host-{}", std::process::id()));
    let cfg = tiny(10);
    write_checkpoint(&dir, &cfg);
    let src = roofline_quant::checkpoint::SourceModel::open(&dir).unwrap();
    for l in 0..cfg.layers {
        let m = layer_matrices(&src, &cfg, l).unwrap();
        assert_eq!(m.qkv.len(), (2 + 2) * 128 * 256);
        assert_eq!((m.o.len(), m.gate_up.len(), m.down.len()), (256 * 256, 2 * 512 * 256, 256 * 512));
        assert!(m.norm_in.iter().all(|g| (0.85..1.15).contains(g)));
    }
    assert!(layer_matrices(&src, &cfg, cfg.layers).is_err());
    let h = head_matrices(&src, &cfg, 1).unwrap();
    assert_eq!((h.lm_head.len(), h.embedding.len()), (512 * 256, 256));
    std::fs::remove_dir_all(&dir).ok();
}

/// The step on a checkpoint's weights (`--checkpoint`): fused and unfused, FP16 and 4-bit, its attention checked
/// as with random weights; a checkpoint that does not fit the config is an error naming the tensor.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn checkpoint_weights_run_and_check() {
    let gpu = Gpu::open(0).unwrap();
    let dir = std::env::temp_dir().join(format!("roofline-mb-ckpt-{}", std::process::id()));
    let base = tiny(100);
    write_checkpoint(&dir, &base);
    for (weights, fuse) in [(WoFormat::Fp16, true), (WoFormat::Int4G128, true), (WoFormat::Int4G128, false)] {
        let cfg = BenchConfig { weights, fuse, checkpoint: Some(dir.clone()), ..base.clone() };
        let r = gpu.model_bench(&cfg, |_| {}).unwrap_or_else(|e| panic!("{weights:?} fuse={fuse}: {e}"));
        assert!(r.attention_rel_error < 1e-2, "{weights:?}: {}", r.attention_rel_error);
        // The fused step checks the last layer's FFN on the checkpoint's weights too.
        assert_eq!(r.ffn_rel_error.is_some(), fuse, "{weights:?} fuse={fuse}: {:?}", r.ffn_rel_error);
        let l = r.linear_rel_errors;
        assert_eq!((l.qkv.is_some(), l.o_proj.is_some()), (fuse, fuse), "{weights:?} fuse={fuse}: {l:?}");
        assert!(l.lm_head < 1e-2 && l.qkv.is_none_or(|e| e < 1e-2) && l.o_proj.is_none_or(|e| e < 1e-2), "{l:?}");
        assert!(r.weights.starts_with("checkpoint"), "{}", r.weights);
        println!(
            "checkpoint {weights:?} fuse={fuse}: step {:.1} us, attention err {:.1e}",
            r.step_us, r.attention_rel_error
        );
    }
    let wrong = BenchConfig { intermediate: 1024, checkpoint: Some(dir.clone()), ..base };
    let e = gpu.model_bench(&wrong, |_| {}).unwrap_err().to_string();
    assert!(e.contains("gate_proj"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The tiny shapes with a Mixtral-style MoE FFN: top-2 of 4 experts of 256.
fn tiny_moe(seq: usize) -> BenchConfig {
    let moe = MoeShape { experts: 4, top_k: 2, expert_intermediate: 256, shared_intermediate: 0 };
    BenchConfig { moe: Some(moe), intermediate: 0, ..tiny(seq) }
}

/// The host side of a MoE `--checkpoint`: the synthetic Mixtral checkpoint's config parses to the same shapes,
/// and every layer's router and experts read back.
#[test]
fn synthetic_moe_checkpoint_reads_back() {
    use roofline_gpu::bench_weights::{expert_matrices, router_matrix, MoeLayout};
    let dir = std::env::temp_dir().join(format!("roofline-mb-moe-host-{}", std::process::id()));
    let cfg = tiny_moe(10);
    write_checkpoint(&dir, &cfg);
    let parsed =
        roofline_core::model::ModelConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).unwrap())
            .unwrap();
    let m = parsed.moe.expect("a Mixtral config is MoE");
    assert_eq!((m.experts, m.top_k, m.expert_intermediate, m.shared_experts), (4, 2, 256, 0));
    let src = roofline_quant::checkpoint::SourceModel::open(&dir).unwrap();
    let g = vec![1.0f32; 256];
    for l in 0..cfg.layers {
        assert!(layer_matrices(&src, &cfg, l).unwrap().gate_up.is_empty());
        assert_eq!(MoeLayout::detect(&src, l).unwrap(), MoeLayout::Mixtral);
        assert_eq!(router_matrix(&src, &cfg, MoeLayout::Mixtral, l, &g).unwrap().len(), 4 * 256);
        for e in 0..4 {
            let (gu, dn) = expert_matrices(&src, &cfg, MoeLayout::Mixtral, l, e, &g).unwrap();
            assert_eq!((gu.len(), dn.len()), (2 * 256 * 256, 256 * 256));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A MoE step on a checkpoint's weights: routing, one expert's gate_up (re-read from the checkpoint) and the
/// combine checked against the CPU, at B = 1 and B = 3.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn moe_checkpoint_runs_and_checks() {
    let gpu = Gpu::open(0).unwrap();
    let dir = std::env::temp_dir().join(format!("roofline-mb-moe-ckpt-{}", std::process::id()));
    let base = tiny_moe(100);
    write_checkpoint(&dir, &base);
    for (weights, batch) in [(WoFormat::Fp16, 1), (WoFormat::Int4G128, 3)] {
        let cfg = BenchConfig { weights, batch, checkpoint: Some(dir.clone()), ..base.clone() };
        let r = gpu.model_bench(&cfg, |_| {}).unwrap_or_else(|e| panic!("{weights:?} B={batch}: {e}"));
        let c = r.moe.as_ref().expect("MoE check");
        assert!(c.router_rel_error < 1e-2 && c.expert_rel_error < 1e-2 && c.combine_rel_error < 2e-3, "{c:?}");
        assert!(r.weights.starts_with("checkpoint"), "{}", r.weights);
        println!("MoE checkpoint {weights:?} B={batch}: step {:.1} us, {c:?}", r.step_us);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn bad_configs_are_errors_not_panics() {
    let gpu = Gpu::open(0).unwrap();
    for cfg in [
        small(WoFormat::Fp16, 0, 10, true),
        small(WoFormat::Fp16, 17, 10, true),
        small(WoFormat::Fp16, 1, 20_000, false),
    ] {
        assert!(gpu.model_bench(&cfg, |_| {}).is_err(), "{cfg:?}");
    }
}

/// The step's checks hold while other threads run steps on the same GPU at once (as the server's measurements
/// and this test binary do): INT4 and FP16, fused and unfused, each step checked (its LM head too), twice per
/// thread. `ROOFLINE_STRESS_GEMV` (a `--gemv` override, e.g. `pdl=false`) and `ROOFLINE_STRESS_ROUNDS` for probes.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn checks_hold_under_concurrent_steps() {
    let gemv: roofline_gpu::weight_only::GemvOverride =
        std::env::var("ROOFLINE_STRESS_GEMV").unwrap_or_default().parse().expect("ROOFLINE_STRESS_GEMV");
    let rounds: usize = std::env::var("ROOFLINE_STRESS_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(2);
    let configs: Vec<BenchConfig> = [(WoFormat::Int4G128, false), (WoFormat::Int4G128, true), (WoFormat::Fp16, false)]
        .into_iter()
        .flat_map(|(w, fuse)| (0..2).map(move |_| BenchConfig { gemv, ..small(w, 1, 1000, fuse) }))
        .collect();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|cfg| {
                scope.spawn(move || {
                    let gpu = Gpu::open(0).unwrap();
                    (0..rounds)
                        .filter_map(|round| match gpu.model_bench(cfg, |_| {}) {
                            Ok(r) => {
                                println!(
                                    "{:?} fuse={} round {round}: lm_head {:.1e}",
                                    cfg.weights, cfg.fuse, r.linear_rel_errors.lm_head
                                );
                                None
                            }
                            Err(e) => Some(format!("{:?} fuse={} round {round}: {e}", cfg.weights, cfg.fuse)),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} steps failed:\n{}",
        failures.len(),
        configs.len() * rounds,
        failures.join("\n")
    );
}
