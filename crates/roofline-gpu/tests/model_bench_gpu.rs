//! GPU test of the decode-step benchmark (run on a GPU machine: `cargo test -p roofline-gpu --release --
//! --ignored`): a small Llama-shaped model in every weight format and at several batch sizes runs, its
//! attention (and the KV append) matches the CPU f64 reference, and the per-op times add up; fused and
//! unfused steps.

use roofline_gpu::model_bench::{AttnKernel, BenchConfig};
use roofline_gpu::weight_only::WoFormat;
use roofline_gpu::Gpu;

fn small(weights: WoFormat, batch: usize, seq: usize, fuse: bool) -> BenchConfig {
    with_attention(weights, batch, seq, fuse, AttnKernel::Auto)
}

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
    for (weights, batch, seq, fuse) in cases {
        {
            let cfg = small(weights, batch, seq, fuse);
            let r = gpu.model_bench(&cfg, |_| {}).unwrap_or_else(|e| panic!("{weights:?} B={batch} S={seq}: {e}"));
            assert!(r.attention_rel_error < 1e-2, "{weights:?} B={batch} S={seq}: {}", r.attention_rel_error);
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
                "{weights:?} B={batch:>2} S={seq:>4} fuse={fuse}: step {:8.1} us, ops sum {:8.1} us, attention err {:.1e}",
                r.step_us, r.ops_sum_us, r.attention_rel_error
            );
        }
    }
}

/// Both fused attention kernels (the cluster one where the GPU has clusters) on group sizes 1, 3, 4 and 8,
/// short and long contexts (one and several iterations per cluster CTA, empty CTA ranges at S = 1) and batch
/// sizes that change the cluster size.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn fused_attention_kernels_match_the_reference_on_every_group_size() {
    let gpu = Gpu::open(0).unwrap();
    let mut kernels = vec![AttnKernel::Splits];
    if gpu.compute_capability.0 >= 9 {
        kernels.push(AttnKernel::Cluster);
    }
    // (hidden, heads, kv heads): GQA 1, 3, 4, 8.
    let shapes = [(1024, 8, 8), (768, 6, 2), (1024, 8, 2), (1024, 8, 1)];
    for attention in kernels {
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
                    ..with_attention(WoFormat::Fp16, batch, seq, true, attention)
                };
                let what = format!("{attention:?} GQA {} B={batch} S={seq}", heads / kv_heads);
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
