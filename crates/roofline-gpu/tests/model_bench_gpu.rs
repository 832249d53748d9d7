//! GPU test of the decode-step benchmark (run on a GPU machine: `cargo test -p roofline-gpu --release --
//! --ignored`): a small Llama-shaped model in every weight format and at several batch sizes runs, its
//! attention (and the KV append) matches the CPU f64 reference, and the per-op times add up; fused and
//! unfused steps.

use roofline_gpu::model_bench::BenchConfig;
use roofline_gpu::weight_only::WoFormat;
use roofline_gpu::Gpu;

fn small(weights: WoFormat, batch: usize, seq: usize, fuse: bool) -> BenchConfig {
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
