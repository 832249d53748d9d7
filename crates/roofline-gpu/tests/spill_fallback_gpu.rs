//! GPU test of the engine's answer to a ring build that spills registers (`GpuError::Spills`). The NVRTC a
//! user has can allocate registers otherwise than the one the spill tests ran (NVRTC 13.0 spilled a build
//! 12.9 did not, session 55), so a spill must not make a default call fail: the engine runs it on its other
//! kernels (from 9 rows `measure` takes the bulk ring instead of the tensor-core ring), correct against the f64
//! reference, and the kernel line says why, while a call that asks for the ring (`ring = true`) gets the spill
//! as its error. The spill is forced: every ring build here is compiled for three CTAs an SM
//! (`-DRW_MINB=3` through `ROOFLINE_NVRTC_EXTRA`, 37 registers a thread at K = 4096), which no other kernel
//! reads. The variable is set before anything compiles, and this file is a test binary of its own, so no
//! other test sees it. Run on a GPU machine: `cargo test -p roofline-gpu --release --test spill_fallback_gpu
//! -- --ignored --nocapture`.

use roofline_core::Format;
use roofline_gpu::weight_only::{Tuning, WeightOnlyOptions, XDtype};
use roofline_gpu::{Gpu, GpuError, TimingConfig};

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_spilling_ring_build_falls_back_by_default_and_fails_when_asked_for() {
    std::env::set_var("ROOFLINE_NVRTC_EXTRA", "-DRW_MINB=3");
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
