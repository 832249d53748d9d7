//! GPU test of the engine's answer to a ring build that spills registers (`GpuError::Spills`). The NVRTC a
//! user has can allocate registers otherwise than the one the spill tests ran (NVRTC 13.0 spilled a build
//! 12.9 did not, session 55), so a spill must not make a default call fail: the engine runs it on its other
//! kernels (from 2 rows `measure` takes the bulk ring instead of the ring for several rows of x), correct against the f64
//! reference, and the kernel line says why, while a call that asks for the ring (`ring = true`) gets the spill
//! as its error. The spill is forced: every ring build here is compiled for three CTAs an SM
//! (`-DRW_MINB=3` through `ROOFLINE_NVRTC_EXTRA`, 37 registers a thread at K = 4096), which no other kernel
//! reads. The variable is set before anything compiles, and this file is a test binary of its own, so no
//! other test sees it. Model-bench's linears take the same fallback (from 2 rows the bulk ring, where the step's
//! default had asked for the ring: `ring::in_step`). Run on a GPU machine: `cargo test -p roofline-gpu --release --test spill_fallback_gpu
//! -- --ignored --nocapture`.

use roofline_core::Format;
use roofline_gpu::model_bench::{AttnKernel, BenchConfig, KvFormat};
use roofline_gpu::weight_only::{Tuning, WeightOnlyOptions, WoFormat, XDtype};
use roofline_gpu::{Gpu, GpuError, TimingConfig};

/// Every ring build of this process spills (set once, before any test compiles a kernel).
fn force_spills() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("ROOFLINE_NVRTC_EXTRA", "-DRW_MINB=3"));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_spilling_ring_build_falls_back_by_default_and_fails_when_asked_for() {
    force_spills();
    let gpu = Gpu::open(0).unwrap();
    let cfg = TimingConfig { warmup: 2, min_runs: 5, max_runs: 20, budget_ms: 100.0, ..Default::default() };
    // 16 rows (the tensor-core ring's one-step CTAs) and one row (the M = 1 ring) at a shape the default gives
    // the ring on the H200 and H100; both x types.
    for (format, m, n, k) in [(Format::INT4_G128, 16, 1024, 4096), (Format::NVFP4, 1, 14336, 4096)] {
        for x in [XDtype::F16, XDtype::Bf16] {
            let opts = WeightOnlyOptions { x, ..WeightOnlyOptions::default() };
            let r = gpu
                .measure_weight_only_with(format, m, n, k, &cfg, &opts)
                .unwrap_or_else(|e| panic!("{format} {x:?} {m}x{n}x{k}, default: {e}"));
            println!(
                "{format} {x:?} {m}x{n}x{k}: {:.2} us, rel. error {:.1e}, {}",
                r.stats.median_us, r.rel_error, r.kernel
            );
            assert!(r.rel_error <= 1e-3, "{format} {x:?} {m}x{n}x{k}: rel. error {}", r.rel_error);
            assert!(!r.kernel.contains("wo_ring"), "{format} {x:?} {m}x{n}x{k} ran the spilling ring: {}", r.kernel);
            assert!(
                r.kernel.contains("spills registers"),
                "{format} {x:?} {m}x{n}x{k}: the kernel line does not say why"
            );
            // From 9 rows `measure` takes the bulk ring (tensor cores), not the engine's x-in-registers fallback.
            if m > 3 {
                assert!(r.kernel.contains("wo_mma"), "{format} {x:?} {m}x{n}x{k}: not the bulk ring: {}", r.kernel);
            }
            assert_eq!(r.spill_bytes.unwrap_or(0), 0, "{format} {x:?} {m}x{n}x{k}: {}", r.kernel);

            let forced = WeightOnlyOptions { tuning: Tuning { ring: Some(true), ..Tuning::default() }, ..opts };
            match gpu.measure_weight_only_with(format, m, n, k, &cfg, &forced) {
                Err(GpuError::Spills { what, bytes, .. }) => {
                    println!("  ring = true: {what} spills {bytes} bytes");
                    assert!(bytes > 0);
                }
                Err(e) => panic!("{format} {x:?} {m}x{n}x{k}, ring = true: not the spill but {e}"),
                Ok(r) => panic!("{format} {x:?} {m}x{n}x{k}, ring = true: ran ({})", r.kernel),
            }
        }
    }
}

/// A decode step at batch 16 whose linears' tensor-core ring builds all spill: each linear the step's default gave
/// that ring (K = 4096, so that `-DRW_MINB=3` leaves too few registers) runs on the bulk ring instead, says so in
/// the progress lines, and passes the step's checks; asked for with `ring=true`, the spill is the error.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn model_bench_linears_fall_back_from_a_spilling_ring_build() {
    force_spills();
    let gpu = Gpu::open(0).unwrap();
    let cfg = BenchConfig {
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        intermediate: 2816,
        vocab: 4096,
        layers: 2,
        layers_built: 1,
        batch: 16,
        seq: 64,
        weights: WoFormat::Int4G128,
        rope_theta: 500_000.0,
        fuse: true,
        attention: AttnKernel::Auto,
        kv: KvFormat::F16,
        checkpoint: None,
        moe: None,
        gemv: Default::default(),
        ffn: Default::default(),
        qkv: Default::default(),
    };
    let mut lines = Vec::new();
    let r = gpu.model_bench(&cfg, |l| lines.push(l.to_string())).unwrap_or_else(|e| panic!("default: {e}"));
    let spilled: Vec<&String> = lines.iter().filter(|l| l.contains("spills registers")).collect();
    println!("step {:.1} us; {spilled:?}", r.step_us);
    for o in &r.ops {
        println!("  {:<14} {:>8.2} us", o.name, o.time_us);
    }
    // qkv (6144x4096), o_proj (4096x4096) and gate_up (5632x4096) take the tensor-core ring at 16 rows by default.
    for name in ["qkv_proj", "o_proj", "gate_up_proj"] {
        assert!(
            spilled.iter().any(|l| l.starts_with(name) && l.contains("bulk ring")),
            "{name}: no fallback line in {lines:?}"
        );
    }
    let l = r.linear_rel_errors;
    for e in [l.qkv, l.o_proj] {
        assert!(e.is_some_and(|e| e < 1e-2), "{l:?}");
    }
    assert!(l.lm_head < 1e-2, "{l:?}");
    assert!(r.ffn_rel_error.is_some_and(|e| e < 1e-2), "FFN {:?}", r.ffn_rel_error);
    assert!(r.attention_rel_error < 1e-2, "attention {}", r.attention_rel_error);

    let forced = BenchConfig { gemv: "ring=true".parse().unwrap(), ..cfg };
    match gpu.model_bench(&forced, |_| {}) {
        Err(GpuError::Spills { what, bytes, .. }) => println!("ring = true: {what} spills {bytes} bytes"),
        Err(e) => panic!("ring = true: not the spill but {e}"),
        Ok(r) => panic!("ring = true: ran ({:.1} us)", r.step_us),
    }
}
