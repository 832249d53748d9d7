//! Host tests of the weight-only engine: launch plans (`plan.rs`), the reference error check and the
//! measurement record, the rows checked, and every kernel compiling without spills where NVRTC is present.

use super::*;

#[test]
fn xreg_8bit_takes_two_chunks_where_that_avoids_split_k() {
    use WoFormat::*;
    for f in [Fp8E4M3, Int8] {
        assert_eq!(LaunchPlan::xreg_unroll(f, 1, 14336), 2);
        let p = LaunchPlan::new(Variant::XReg, f, 1, 4096, 14336, 132, Tuning::default());
        assert_eq!((p.unroll, p.splits, p.warps), (2, 1, 14), "{p:?}");
        // K = 4096 fits 8 warps of one chunk; M = 2 keeps one chunk; an explicit unroll wins.
        assert_eq!((LaunchPlan::xreg_unroll(f, 1, 4096), LaunchPlan::xreg_unroll(f, 2, 14336)), (1, 1));
        let t = Tuning { unroll: Some(1), ..Tuning::default() };
        assert_eq!(LaunchPlan::new(Variant::XReg, f, 1, 4096, 14336, 132, t).unroll, 1);
    }
    // The engine's choice follows: x in registers for 8-bit down_proj at M = 1 (one wide CTA, no
    // stages) and up to 16384 rows at K = 4096 (three cp.async stages), split-K above, tensor cores from
    // M = 2.
    let cases = [
        (1, 4096, 14336, Variant::XReg, 0),
        (1, 1024, 4096, Variant::XReg, 3),
        (1, 6144, 4096, Variant::XReg, 3),
        (1, 14336, 4096, Variant::XReg, 3),
        (1, 28672, 4096, Variant::SplitK, 0),
        (1, 128256, 4096, Variant::SplitK, 0),
        (2, 4096, 14336, Variant::XMma, 0),
        (2, 6144, 4096, Variant::XMma, 0),
    ];
    for (m, n, k, v, stages) in cases {
        for f in [Fp8E4M3, Int8] {
            assert_eq!(Variant::best_for(f, XDtype::F16, m, n, k), v, "{f:?} {m}x{n}x{k}");
            let p = LaunchPlan::new(v, f, m, n, k, 132, Tuning::default());
            assert_eq!(p.stages, stages, "{f:?} {m}x{n}x{k}: {p:?}");
        }
    }
    // Inside a decode step the staged plan loses (its CTAs start their weights cold): split-K there,
    // x in registers only for the wide down_proj plan.
    for f in [Fp8E4M3, Int8] {
        assert_eq!(Variant::best_in_step(f, XDtype::F16, 1, 4096), Variant::SplitK);
        assert_eq!(Variant::best_in_step(f, XDtype::F16, 1, 14336), Variant::XReg);
        assert_eq!(Variant::best_in_step(f, XDtype::F16, 2, 14336), Variant::XMma);
    }
    // On sm_90+ with fast memory (the H200: 132 SMs, 4.9 TB/s) the ring takes FP8 / INT8 at M = 1 from 4 row
    // steps a CTA, through the x-in-registers engine, split-K's large N included, with FP16 or BF16 x (session 48);
    // not before Hopper, on the H100's memory, at M = 2, or at 1024 rows (one step a CTA).
    const H200: (u32, u32, f64) = (132, 90, 4917.0);
    for f in [Fp8E4M3, Int8] {
        assert_eq!(Variant::best_on(f, XDtype::F16, 1, 28672, 4096, (132, 90, 3352.0)), Variant::SplitK);
    }
    for f in [Fp8E4M3, Int8] {
        for (n, k) in [(28672, 4096), (128256, 4096), (14336, 4096), (4096, 14336)] {
            assert_eq!(Variant::best_on(f, XDtype::F16, 1, n, k, H200), Variant::XReg, "{f:?} {n}x{k}");
        }
        assert_eq!(Variant::best_on(f, XDtype::F16, 1, 28672, 4096, (108, 80, 2039.0)), Variant::SplitK);
        assert_eq!(Variant::best_on(f, XDtype::Bf16, 1, 28672, 4096, H200), Variant::XReg);
        // Two rows of BF16 x on the ring too (session 50); FP16 x, three rows and the H100's memory: the tensor cores.
        assert_eq!(Variant::best_on(f, XDtype::Bf16, 2, 28672, 4096, H200), Variant::XReg);
        assert_eq!(Variant::best_on(f, XDtype::F16, 2, 28672, 4096, H200), Variant::XMma);
        assert_eq!(Variant::best_on(f, XDtype::Bf16, 3, 28672, 4096, H200), Variant::XMma);
        assert_eq!(Variant::best_on(f, XDtype::Bf16, 2, 28672, 4096, (132, 90, 3352.0)), Variant::XMma);
        assert_eq!(Variant::best_on(f, XDtype::F16, 1, 1024, 4096, H200), Variant::XReg);
        assert!(!super::ring::auto(f, 1024, 4096, 132));
    }
    assert_eq!(Variant::best_on(Int4G128, XDtype::F16, 1, 28672, 4096, H200), Variant::XReg);
    // The 4-bit formats at M = 2 on the H200 (session 50, `ring::auto_rows`): the ring for two rows of x where a CTA
    // takes 8 row steps or more (or streams them in K parts) with two slots a consumer class, NF4 wherever the ring
    // takes the shape at M = 1; at M = 3 and on the H100's memory the tensor cores.
    for f in [Int4G128, Nf4, Mxfp4, Nvfp4] {
        for (n, k) in [(14336, 4096), (4096, 14336), (28672, 4096)] {
            for x in XDtype::ALL {
                assert_eq!(Variant::best_on(f, x, 2, n, k, H200), Variant::XReg, "{f:?} {x:?} 2x{n}x{k}");
            }
            // Three rows on the tensor-core ring where a CTA takes up to 24 row steps (NF4: 128) at K = 4096
            // (sessions 57, 58), else the bulk ring.
            let three = if k == 4096 && (n == 14336 || f == Nf4) { Variant::XReg } else { Variant::XMma };
            assert_eq!(Variant::best_on(f, XDtype::F16, 3, n, k, H200), three, "{f:?} 3x{n}x{k}");
            assert_eq!(Variant::best_on(f, XDtype::F16, 2, n, k, (132, 90, 3352.0)), Variant::XMma);
        }
        // Few row steps a CTA: two rows on the tensor-core ring (session 57).
        assert_eq!(Variant::best_on(f, XDtype::F16, 2, 4096, 4096, H200), Variant::XReg, "{f:?} 2x4096x4096");
        for (n, k) in [(512, 4096), (3072, 3072), (2048, 2048), (1024, 4096)] {
            assert_eq!(Variant::best_on(f, XDtype::F16, 2, n, k, H200), Variant::XReg, "{f:?} 2x{n}x{k}");
            assert!(super::ring::plans_mma(f, (2, n, k), 132, H200.2), "{f:?} 2x{n}x{k}");
        }
        assert!(!super::ring::plans_mma(f, (2, 4096, 2560), 132, H200.2), "{f:?} K = 2560: no ring");
    }
    // In a decode step the same (Llama-3.1-8B's down_proj on the ring for two rows), but the tensor-core ring's shapes
    // (its o_proj) are model-bench's to give; one row of 4-bit weights keeps `best_in_step`.
    for f in [Int4G128, Nf4, Mxfp4, Nvfp4] {
        assert_eq!(Variant::best_in_step_on(f, XDtype::F16, 2, 4096, 14336, H200), Variant::XReg, "{f:?}");
        assert_eq!(Variant::best_in_step_on(f, XDtype::F16, 2, 4096, 4096, H200), Variant::XMma, "{f:?}");
        assert_eq!(Variant::best_in_step_on(f, XDtype::F16, 2, 4096, 14336, (132, 90, 3352.0)), Variant::XMma);
        assert_eq!(
            Variant::best_in_step_on(f, XDtype::F16, 1, 4096, 4096, H200),
            Variant::best_in_step(f, XDtype::F16, 1, 4096)
        );
    }
    // The LM head at K = 4096: INT4's staged tables leave the ring 3 slots for two rows of x; MXFP4, NVFP4 and NF4
    // stream their scales on fast memory and keep theirs.
    for (f, v) in [(Int4G128, Variant::XMma), (Mxfp4, Variant::XReg), (Nvfp4, Variant::XReg), (Nf4, Variant::XReg)] {
        assert_eq!(Variant::best_on(f, XDtype::F16, 2, 128256, 4096, H200), v, "{f:?}");
    }
    // FP16 at M = 1 on fast memory (session 44): the x-in-registers engine, the ring up to K = 8192 at any N, its
    // x-in-registers kernel to K = 16384 (with BF16 x the ring alone, session 48); split-K beyond, on the H100's
    // memory, and at M = 2. In a
    // decode step the same (FP8 / INT8 keep `best_in_step`). BF16 weights (session 45) with FP16 or BF16 x: the
    // ring, up to its K = 15360; split-K beyond.
    for (n, k) in [(1024, 4096), (14336, 4096), (128256, 4096), (4096, 8192), (4096, 14336)] {
        assert_eq!(Variant::best_on(Fp16, XDtype::F16, 1, n, k, H200), Variant::XReg, "{n}x{k}");
        assert_eq!(Variant::best_in_step_on(Fp16, XDtype::F16, 1, n, k, H200), Variant::XReg, "{n}x{k}");
    }
    assert_eq!(Variant::best_on(Fp16, XDtype::F16, 1, 8192, 28672, H200), Variant::SplitK);
    assert_eq!(Variant::best_on(Fp16, XDtype::F16, 1, 14336, 4096, (132, 90, 3352.0)), Variant::SplitK);
    assert_eq!(Variant::best_on(Fp16, XDtype::Bf16, 1, 14336, 4096, H200), Variant::XReg);
    assert_eq!(Variant::best_on(Fp16, XDtype::Bf16, 1, 4096, 16384, H200), Variant::SplitK);
    for x in XDtype::ALL {
        for (n, k) in [(1024, 4096), (14336, 4096), (128256, 4096), (4096, 8192), (4096, 14336)] {
            assert_eq!(Variant::best_on(Bf16, x, 1, n, k, H200), Variant::XReg, "{x:?} {n}x{k}");
        }
        assert_eq!(Variant::best_on(Bf16, x, 1, 4096, 16384, H200), Variant::SplitK);
        assert_eq!(Variant::best_on(Bf16, x, 1, 14336, 4096, (132, 90, 3352.0)), Variant::SplitK);
    }
    assert_eq!(Variant::best_on(Fp16, XDtype::F16, 2, 14336, 4096, H200), Variant::best(Fp16, XDtype::F16, 2));
    assert_eq!(Variant::best_in_step_on(Fp8E4M3, XDtype::F16, 1, 4096, 4096, H200), Variant::SplitK);
    // Measured with FP16 activations only: BF16 keeps split-K; an explicit stage count wins.
    assert_eq!(Variant::best_for(Fp8E4M3, XDtype::Bf16, 1, 6144, 4096), Variant::SplitK);
    let t = Tuning { stages: Some(0), ..Tuning::default() };
    assert_eq!(LaunchPlan::new(Variant::XReg, Int8, 1, 6144, 4096, 132, t).stages, 0);
    for (n, k) in [(4096, 4096), (14336, 4096), (4096, 14336)] {
        let v = Variant::best_for(Int4G128, XDtype::F16, 1, n, k);
        assert_eq!(v, Variant::best(Int4G128, XDtype::F16, 1));
        assert_eq!(LaunchPlan::new(v, Int4G128, 1, n, k, 132, Tuning::default()).stages, 0);
    }
    // 4-bit K = 14336 is one 14-warp CTA at one chunk already; 16-bit never takes two.
    assert_eq!((LaunchPlan::xreg_unroll(Int4G128, 1, 14336), LaunchPlan::xreg_unroll(Fp16, 1, 14336)), (1, 1));
}

#[test]
fn x_in_shared_memory_from_m2_where_it_measured_faster() {
    use WoFormat::*;
    // (format, M, N, K, x in shared memory by default): session 27's sweep (`x_smem_default`).
    let cases = [
        (Nf4, 2, 14336, 4096, true),
        (Nf4, 2, 4096, 4096, true),
        (Nf4, 2, 1024, 4096, false),
        (Nf4, 3, 1024, 4096, true),
        (Int4G128, 2, 14336, 4096, true),
        (Int4G128, 4, 4096, 14336, true),
        (Int4G128, 4, 6144, 4096, false),
        (Int4G128, 4, 4096, 4096, false),
        (Mxfp4, 6, 1024, 4096, true),
        (Nvfp4, 8, 128256, 4096, true),
        (Fp8E4M3, 2, 14336, 4096, false),
        (Fp8E4M3, 4, 4096, 14336, false),
        (Int8, 6, 6144, 4096, true),
        (Fp8E4M3, 8, 4096, 4096, false), // 8-bit weights take no bulk rings at 4096 x 4096
        (Fp16, 8, 14336, 4096, false),
        (Int4G128, 1, 14336, 4096, false),
        (Fp8E4M3, 16, 4096, 4096, false),
        (Int4G128, 16, 4096, 4096, true),
    ];
    for (f, m, n, k, want) in cases {
        let p = LaunchPlan::new(Variant::best(f, XDtype::F16, m), f, m, n, k, 132, Tuning::default());
        assert_eq!(p.x_smem, want, "{f:?} {m}x{n}x{k}: {p:?}");
        // x in shared memory at M <= 8 always streams the weights through bulk rings (measured so).
        if m <= 8 && p.x_smem {
            assert!(p.bulk, "{f:?} {m}x{n}x{k}: {p:?}");
        }
    }
    // Without bulk rings (below sm_90) M <= 8 keeps x stationary.
    let t = Tuning { bulk: Some(false), ..Tuning::default() };
    assert!(!LaunchPlan::new(Variant::XMma, Nf4, 8, 14336, 4096, 132, t).x_smem);
}

#[test]
fn xreg_plans_cover_k_and_rows() {
    for f in WoFormat::ALL {
        for (m, n, k) in
            [(1, 4096, 4096), (1, 1000, 4096), (2, 14336, 4096), (1, 4096, 14336), (1, 128256, 4096), (3, 8, 128)]
        {
            let p = LaunchPlan::new(Variant::XReg, f, m, n, k, 132, Tuning::default());
            if !LaunchPlan::xreg_fits(f, m, 1) {
                assert!(!p.xreg, "{f:?} M={m} falls back to split-K");
                continue;
            }
            assert!(p.xreg);
            let kc = (k * f.bits() / 128) as u32;
            // every K slice of 32 chunks belongs to one warp of one split, no split empty
            assert!(p.splits * p.chunks_per_split >= kc && (p.splits - 1) * p.chunks_per_split < kc, "{p:?}");
            assert!((1..=16).contains(&p.warps), "{p:?}");
            // rows: multiples of 8 (aligned transposed scale loads), every row covered, counters suffice
            assert!(p.rows_per_cta % 8 == 0 && p.rows_per_cta <= XREG_MAX_RPC);
            assert!(p.blocks_n * p.rows_per_cta >= n as u32);
            assert!(p.blocks_n as usize <= n.div_ceil(4) + 1);
            // partial sums, and the cp.async stages where the plan has them (8-bit M = 1 up to 16384
            // rows: within the 227 KB a CTA may opt in to on sm_90)
            let stages = p.warps * p.stages * LaunchPlan::xreg_stage_bytes(p.rows_per_warp, p.unroll);
            assert_eq!(p.smem_bytes, p.warps * m as u32 * p.rows_per_cta * 4 + stages);
            assert_eq!(p.stages, LaunchPlan::xreg_stages_default(f, m, n, k), "{f:?} {m}x{n}x{k}");
            assert!(p.smem_bytes <= if p.stages == 0 { 48 * 1024 } else { 227 * 1024 }, "{p:?}");
            // refitted to any occupancy: still every row, one wave
            for ctas in [132, 396, 1000] {
                let q = p.with_rows_per_cta(n, m, LaunchPlan::xreg_rows_per_cta(n, p.splits, ctas));
                assert!(q.blocks_n * q.rows_per_cta >= n as u32 && q.rows_per_cta % 8 == 0);
                let most = ctas.div_ceil(q.splits).max(n.div_ceil(XREG_MAX_RPC as usize) as u32) + 1;
                assert!(q.blocks_n <= most, "{q:?} for {ctas} CTAs");
                // The balanced grid: the kernel's shares (wo_xreg's row0 / nrow) tile the rows in order,
                // none larger than the shared-memory stride, at most `ctas` CTAs in all.
                let b = p.with_balanced_grid(n, m, (ctas / p.splits).max(1));
                assert!(b.rows_per_cta % 8 == 0 && b.rows_per_cta <= XREG_MAX_RPC, "{b:?}");
                assert!(b.blocks_n * b.splits <= ctas.max(b.splits) || b.rows_per_cta == XREG_MAX_RPC, "{b:?}");
                let r = b.rows_per_warp as usize;
                let units = n.div_ceil(r);
                let (g, mut next) = (b.blocks_n as usize, 0usize);
                let (mut small, mut large) = (usize::MAX, 0usize);
                for cta in 0..g {
                    let (per, extra) = (units / g, units % g);
                    let row0 = (cta * per + cta.min(extra)) * r;
                    let nrow = ((per + usize::from(cta < extra)) * r).min(n.saturating_sub(row0));
                    assert_eq!(row0, next, "{b:?}");
                    assert!(nrow <= b.rows_per_cta as usize, "{b:?}");
                    next = row0 + nrow;
                    small = small.min(nrow);
                    large = large.max(nrow);
                }
                assert_eq!(next, n, "{b:?}");
                // Even: shares differ by one row group, except the last one's remainder of N.
                assert!(large - small <= 2 * r || g == 1, "{b:?}: {small}..{large}");
            }
        }
    }
    // M x C x EPC <= 64 values of x per lane
    assert!(LaunchPlan::xreg_fits(WoFormat::Int4G128, 2, 1) && !LaunchPlan::xreg_fits(WoFormat::Int4G128, 3, 1));
    assert!(LaunchPlan::xreg_fits(WoFormat::Fp16, 8, 1) && !LaunchPlan::xreg_fits(WoFormat::Fp16, 8, 2));
    let t = Tuning { rows_per_cta: Some(12), ..Tuning::default() };
    assert!(t.check().is_err());
    assert!(Tuning { rows: Some(3), ..Tuning::default() }.check().is_err());
}

#[test]
fn plans_fill_the_gpu_and_cover_k() {
    for variant in [Variant::SplitK, Variant::Rows4, Variant::RowPerWarp, Variant::Mma] {
        for f in WoFormat::ALL {
            for (m, n, k) in [(1, 4096, 4096), (1, 1000, 4096), (16, 14336, 4096), (1, 4096, 14336), (3, 8, 128)] {
                let p = LaunchPlan::new(variant, f, m, n, k, 132, Tuning::default());
                // CUDA cores: 16-byte chunks per row; tensor cores: 64-K tiles.
                let kc = if variant == Variant::Mma { (k / 64) as u32 } else { (k * f.bits() / 128) as u32 };
                // the splits cover every chunk exactly once, none empty
                assert!(p.splits * p.chunks_per_split >= kc, "{p:?}");
                assert!((p.splits - 1) * p.chunks_per_split < kc, "{p:?}");
                if variant != Variant::Mma {
                    assert_eq!(p.chunks_per_split % 32, 0);
                }
                assert!(p.blocks_n * p.warps * p.rows_per_warp >= n as u32);
                // the counters buffer (ceil(N/4) + 1) is large enough
                assert!(p.blocks_n as usize <= n.div_ceil(4) + 1);
                if variant == Variant::RowPerWarp && !p.stage {
                    assert_eq!(p.splits, 1);
                }
                // staged x and scales fit in the default 48 KB of dynamic shared memory
                assert_eq!(p.stage, f == WoFormat::Nf4 && m <= 4 && variant != Variant::Mma, "{f:?} {p:?}");
                assert!(p.smem_bytes <= 48 * 1024, "{p:?}");
                assert_eq!(p.smem_bytes > 0, p.stage);
            }
        }
    }
    // a forced split-K never asks for more than 16 warps per CTA
    for variant in [Variant::XReg, Variant::XMma] {
        let t = Tuning { split_k: Some(1), ..Tuning::default() };
        let p = LaunchPlan::new(variant, WoFormat::Fp16, 1, 4096, 14336, 132, t);
        assert!(p.warps <= 16, "{variant:?} {p:?}");
        let p = LaunchPlan::new(variant, WoFormat::Int4G128, 1, 4096, 14336, 132, t);
        assert!(p.warps <= 16 && p.splits * p.chunks_per_split >= 14336 / 64, "{variant:?} {p:?}");
    }
    // XMma's partial sums fit in 47 KB of shared memory at every M and split, leaving the rest of the
    // default 48 KB to static shared memory (M = 16 once asked for 512 KB, and exactly 48 KB failed too)
    for m in [1, 4, 8, 16] {
        for split_k in [None, Some(1), Some(2)] {
            for unroll in [2, 4, 8] {
                let t = Tuning { split_k, unroll: Some(unroll), x_smem: Some(false), ..Tuning::default() };
                for (n, k) in [(14336, 4096), (4096, 14336), (4096, 4096), (128256, 4096)] {
                    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, m, n, k, 132, t);
                    assert!(p.smem_bytes <= 47 * 1024, "M={m} {n}x{k} {t:?}: {p:?}");
                    assert!(p.blocks_n * p.rows_per_cta * 16 >= n as u32, "{p:?}");
                }
            }
        }
    }
    // XMma with x in shared memory: the staged columns of a split fit the opted-in shared memory (with bulk
    // rings, beside them), the splits cover K with none empty (the kernel derives the split from gridDim.y
    // the same way), every row tile has a CTA, and the counters buffer holds one per CTA along N
    for f in WoFormat::ALL {
        for m in [1, 3, 8, 9, 16] {
            for split_k in [None, Some(1), Some(2), Some(7)] {
                for bulk in [false, true] {
                    for (unroll, stages) in [(None, None), (Some(8), Some(6))] {
                        let t = Tuning {
                            x_smem: Some(true),
                            split_k,
                            bulk: Some(bulk),
                            unroll,
                            stages,
                            ..Tuning::default()
                        };
                        for (n, k) in [(14336, 4096), (4096, 14336), (13, 384), (128256, 4096), (1000, 8192)] {
                            let p = LaunchPlan::new(Variant::XMma, f, m, n, k, 132, t);
                            let kt = (k / 64) as u32;
                            assert!(p.x_smem && p.xreg && p.rows_per_warp == nvrtc::MMA_ROWS, "{p:?}");
                            assert_eq!(p.bulk, bulk);
                            let rows_x = m.div_ceil(8) as u32 * 8;
                            let x_bytes = rows_x * (p.chunks_per_split * 64 + 8) * 2;
                            if bulk {
                                let ring = LaunchPlan::xb_ring_bytes(f, p.warps, p.stages, p.unroll);
                                assert!((2..=6).contains(&p.stages), "{p:?}");
                                // the parking table after the rings wherever it fits, and through it
                                // the clustered reduction of 2..=8 splits; the plan without clusters
                                // keeps the table (the workspace adds the splits)
                                let unparked = x_bytes.div_ceil(128) * 128 + ring;
                                let fits = unparked + p.park_bytes(m) <= XB_SMEM_BYTES;
                                assert_eq!(p.park, fits, "{f:?} M={m} {n}x{k}: {p:?}");
                                let park = if p.park { p.park_bytes(m) } else { 0 };
                                // NF4's code-pair table in front where it fits: 64 copies, else 32, else
                                // 16, else none (never 8 unless asked for)
                                let table = LaunchPlan::nf4_table_bytes(p.nf4_table);
                                assert_eq!(p.smem_bytes, table + unparked + park, "{p:?}");
                                assert!(f == WoFormat::Nf4 || p.nf4_table == 0, "{p:?}");
                                assert!([0, 16, 32, 64].contains(&p.nf4_table), "{p:?}");
                                let more = LaunchPlan::nf4_table_bytes(p.nf4_table.max(8) * 2);
                                assert!(
                                    p.nf4_table == 64 || f != WoFormat::Nf4 || unparked + park + more > XB_SMEM_BYTES,
                                    "{p:?}"
                                );
                                assert!(p.smem_bytes <= XB_SMEM_BYTES, "{f:?} M={m} {n}x{k}: {p:?}");
                                assert!(!p.cluster || p.park, "{p:?}");
                                assert!(!p.cluster || (2..=MAX_CLUSTER_SPLITS).contains(&p.splits), "{p:?}");
                                let flat = p.without_cluster();
                                assert!(!flat.cluster && flat.smem_bytes == p.smem_bytes && flat.park == p.park);
                                if (2..=MAX_CLUSTER_SPLITS).contains(&p.splits) && fits {
                                    assert!(p.cluster, "{f:?} M={m} {n}x{k}: {p:?}");
                                }
                            } else {
                                assert!(p.smem_bytes <= XK_SMEM_BYTES, "{f:?} M={m} {n}x{k}: {p:?}");
                                assert_eq!(p.smem_bytes, x_bytes);
                                let words = mma::words_per_tile(f) as u32;
                                assert!(p.unroll * words <= 8 || unroll.is_some(), "at most 32 registers in flight");
                            }
                            assert_eq!(p.chunks_per_split, kt.div_ceil(p.splits), "{p:?}");
                            assert!((p.splits - 1) * p.chunks_per_split < kt, "{p:?}");
                            assert!(p.blocks_n * p.rows_per_cta * 16 >= n as u32, "{p:?}");
                            assert!(p.blocks_n as usize <= n.div_ceil(4) + 1);
                        }
                    }
                }
            }
        }
    }
    // Registers: M = 16 at K = 4096: 2 splits of 32 tiles (66 KB), 14 row tiles per CTA (one each for 14
    // of the 16 warps); at K = 14336 8 splits (5 of 47 tiles would fit, 9 would give 3 warps two row tiles)
    let t = Tuning { x_smem: Some(true), bulk: Some(false), ..Tuning::default() };
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, t);
    assert_eq!((p.splits, p.chunks_per_split, p.warps, p.unroll, p.rows_per_cta), (2, 32, 16, 8, 14));
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Fp8E4M3, 16, 4096, 14336, 132, t);
    assert_eq!((p.splits, p.unroll, p.rows_per_cta), (8, 4, 16));
    // 6144 rows: 5 splits of 13 tiles, 15 row tiles per CTA (2 splits would leave 10 of 16 warps idle)
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 6144, 4096, 132, t);
    assert_eq!((p.splits, p.rows_per_cta), (5, 15));
    // Bulk rings (the default for 4-bit weights): 16 warps, one CTA per SM, 2 slots of 4 tiles
    // (INT4: 2 KB of codes and 3 scale columns, 2304 bytes) a warp; one split of 64 tiles, 7 row tiles a CTA
    // shared by its warps through the parking table (16 x (7 x 16 + 4) floats), against 14 row tiles in 2
    // splits (a tile more a warp, and the cluster's sum)
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, Tuning::default());
    assert!(p.x_smem && p.bulk && !p.cluster && p.park, "{p:?}");
    assert_eq!((p.splits, p.chunks_per_split, p.warps, p.unroll, p.stages, p.rows_per_cta), (1, 64, 16, 4, 2, 7));
    let park = 16 * (7 * 16 + 4) * 4;
    assert_eq!(p.smem_bytes, (16 * (64 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 2304 + park);
    assert!(LaunchPlan::xb_shares(7, 16) && LaunchPlan::xb_shares(14, 16) && !LaunchPlan::xb_shares(15, 16));
    assert!(!p.multicast && p.blocks_n == 128 && p.cluster_dims() == (1, 1), "{p:?}");
    // asked for, in one split the CTAs go in pairs sharing x's copies: 128 CTAs, 64 clusters of two along
    // N; an odd count gets a partner without row tiles (1000 rows: 63 row tiles, one a CTA, 64 CTAs)
    let t = Tuning { multicast: Some(true), ..Tuning::default() };
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, t);
    assert!(p.multicast && p.blocks_n == 128 && p.cluster_dims() == (2, 1), "{p:?}");
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 1000, 4096, 132, t);
    assert!(p.multicast && p.splits == 1 && p.rows_per_cta == 1 && p.blocks_n == 64, "{p:?}");
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 1000, 4096, 132, Tuning::default());
    assert!(!p.multicast && p.blocks_n == 63, "{p:?}");
    // NF4's code-pair table in front: in one split 32 copies need slots of 2 tiles at 16x14336x4096 (beside
    // the default rings the rest takes 208,384 bytes of 224 KB); 16 copies fit the default rings when asked
    // for 16. By default (7 row tiles a CTA in one split) two clustered splits: room for the default slots
    // and 64 copies.
    let nf4 = |t: Tuning| LaunchPlan::new(Variant::XMma, WoFormat::Nf4, 16, 14336, 4096, 132, t);
    let p = nf4(Tuning::default());
    assert_eq!((p.nf4_table, p.unroll, p.stages, p.splits), (64, 4, 2, 2), "{p:?}");
    assert!(p.cluster && p.cluster_dims() == (1, 2) && p.rows_per_cta == 14, "{p:?}");
    let two = (16 * (32 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 2176 + 16 * (14 * 16 + 4) * 4;
    assert_eq!(p.smem_bytes, two + 64 * 1024);
    let p = nf4(Tuning { split_k: Some(1), ..Tuning::default() });
    assert_eq!((p.nf4_table, p.unroll, p.stages, p.splits), (32, 2, 2, 1), "{p:?}");
    let rest = (16 * (64 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 1152 + park;
    assert_eq!(p.smem_bytes, rest + 32 * 1024);
    let p = nf4(Tuning { nf4_table: Some(16), ..Tuning::default() });
    assert_eq!((p.nf4_table, p.unroll), (16, 4), "{p:?}");
    let rest = (16 * (64 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 2176 + park;
    assert_eq!(p.smem_bytes, rest + 16 * 1024);
    let p = nf4(Tuning { nf4_table: Some(32), ..Tuning::default() });
    assert_eq!((p.nf4_table, p.unroll), (16, 4), "asked for 32, the most that fit: {p:?}");
    let one = Tuning { split_k: Some(1), ..Tuning::default() };
    let p = nf4(Tuning { unroll: Some(4), ..one });
    assert_eq!((p.nf4_table, p.unroll), (16, 4), "slots asked for stay: {p:?}");
    let p = nf4(Tuning { unroll: Some(4), ..Tuning::default() });
    assert_eq!((p.nf4_table, p.unroll, p.splits), (64, 4, 2), "the splits were not asked for: {p:?}");
    let p = nf4(Tuning { nf4_table: Some(0), ..Tuning::default() });
    assert_eq!((p.nf4_table, p.unroll), (0, 4), "{p:?}");
    let p = nf4(Tuning::default());
    assert_eq!(p.key(WoFormat::Nf4, XDtype::F16, 16, 90).nf4_table, 64);
    assert_eq!(p.key(WoFormat::Nf4, XDtype::F16, 16, 80).nf4_table, 0, "bulk rings are sm_90+");
    // two splits from NF4_TWO_SPLITS_ROWS row tiles a CTA (11008 rows: 6), M > 8 only (x of 8 rows leaves
    // room for the default slots in one split); 64 copies wherever they fit (not beside all of x of 16 rows)
    for (m, n, splits, unroll, copies) in
        [(16, 8192, 1, 2, 32), (16, 11008, 2, 4, 64), (9, 28672, 2, 4, 64), (8, 14336, 1, 4, 64)]
    {
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Nf4, m, n, 4096, 132, Tuning::default());
        assert_eq!(
            (p.nf4_table, p.splits, p.unroll, p.cluster),
            (copies, splits, unroll, splits == 2),
            "{m}x{n}: {p:?}"
        );
    }
    // K = 14336 (8 splits): 64 copies beside the default slots
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Nf4, 16, 4096, 14336, 132, Tuning::default());
    assert_eq!((p.nf4_table, p.unroll), (64, 4), "{p:?}");
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, Tuning::default());
    assert_eq!(p.nf4_table, 0);
    for (n, k) in [(4096, 4096), (28672, 4096), (4096, 14336), (1000, 4096)] {
        for m in 9..=16 {
            let p = LaunchPlan::new(Variant::XMma, WoFormat::Nf4, m, n, k, 132, Tuning::default());
            assert!(p.smem_bytes <= XB_SMEM_BYTES, "{m}x{n}x{k}: {p:?}");
        }
    }
    // the small shapes in one split too (session 19's rule took 8 and 5), long K as session 19 (x's columns
    // need 3 splits at K = 14336, where the table does not fit: 8 splits of whole row tiles)
    for (n, k, splits) in [(4096, 4096, 1), (6144, 4096, 1), (1024, 4096, 1), (28672, 4096, 1), (4096, 14336, 8)] {
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Mxfp4, 16, n, k, 132, Tuning::default());
        assert_eq!(p.splits, splits, "{n}x{k}: {p:?}");
    }
    // 8-bit codes leave x room for half of K: 2 splits summed through a cluster (its parking table)
    let t = Tuning { bulk: Some(true), ..Tuning::default() };
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Fp8E4M3, 16, 14336, 4096, 132, t);
    assert_eq!((p.x_smem, p.bulk, p.unroll, p.stages), (true, true, 2, 4));
    assert!(p.splits == 2 && p.cluster && p.park && !p.multicast && p.cluster_dims() == (1, 2), "{p:?}");
    // the default: x in shared memory above M = 8 for the 4-bit formats (through bulk rings), and for 8-bit
    // weights above 4096 x 4096 (through bulk rings), at every size when asked for bulk rings, without
    // them from K = 8192; NVFP4 without them from K = 8192; at M <= 8 only with bulk rings (see
    // `x_in_shared_memory_from_m2_where_it_measured_faster`)
    for (f, m, k, bulk, want, want_bulk) in [
        (WoFormat::Int4G128, 16, 4096, None, true, true),
        (WoFormat::Nf4, 9, 4096, None, true, true),
        (WoFormat::Nvfp4, 16, 4096, None, true, true),
        (WoFormat::Int4G128, 8, 4096, None, true, true),
        (WoFormat::Int4G128, 4, 4096, None, false, false),
        (WoFormat::Int4G128, 8, 4096, Some(false), false, false),
        (WoFormat::Fp8E4M3, 16, 4096, None, false, false),
        (WoFormat::Fp8E4M3, 16, 4096, Some(true), true, true),
        (WoFormat::Fp8E4M3, 16, 14336, None, true, true),
        (WoFormat::Int8, 16, 14336, Some(false), true, false),
        (WoFormat::Nvfp4, 16, 4096, Some(false), false, false),
        (WoFormat::Nvfp4, 12, 14336, Some(false), true, false),
        (WoFormat::Fp16, 16, 14336, None, false, false),
    ] {
        let p = LaunchPlan::new(Variant::XMma, f, m, 4096, k, 132, Tuning { bulk, ..Tuning::default() });
        assert_eq!((p.x_smem, p.bulk), (want, want_bulk), "{f:?} M={m} K={k}");
    }
    let p = LaunchPlan::new(
        Variant::XMma,
        WoFormat::Int4G128,
        8,
        14336,
        4096,
        132,
        Tuning { x_smem: Some(true), bulk: Some(false), ..Tuning::default() },
    );
    // M = 8: all of K = 4096 would fit one split (7 row tiles per CTA); two splits halve the warps' time
    assert_eq!((p.splits, p.smem_bytes), (2, 8 * (32 * 64 + 8) * 2));
    let t = Tuning { x_smem: Some(true), split_k: Some(1), ..Tuning::default() };
    assert_eq!(LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 8, 14336, 4096, 132, t).splits, 1);
    // XMma's grid (both kernels): at most one wave of CTAs over all the K splits when the caps allow it
    for m in [3, 8, 16] {
        for (n, k) in [(14336, 4096), (4096, 14336), (6144, 4096), (28672, 4096), (128256, 4096)] {
            for x_smem in [None, Some(true)] {
                let t = Tuning { x_smem, ..Tuning::default() };
                let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, m, n, k, 132, t);
                let target = 132 * (16 / p.warps).max(1);
                let row_tiles = (n as u32).div_ceil(16);
                if row_tiles.div_ceil((target / p.splits).max(1)) <= p.rows_per_cta {
                    assert!(p.blocks_n * p.splits <= target, "M={m} {n}x{k} {x_smem:?}: {p:?}");
                }
            }
        }
    }
    assert_eq!(LaunchPlan::split_tiles_per_cta(256, 7, 132, 32), 15);
    assert!(256u32.div_ceil(LaunchPlan::split_tiles_per_cta(256, 7, 132, 32)) * 7 <= 132);
    // XMma's grid: one wave when the shared-memory cap allows it, otherwise whole waves of equal CTAs
    assert_eq!(LaunchPlan::balanced_tiles_per_cta(1792, 264, 11), 7);
    // FP16 8x14336x4096 (896 row tiles x 4 splits, cap 11): 11 made 328 CTAs (1.24 waves); 7 makes 512
    assert_eq!(LaunchPlan::balanced_tiles_per_cta(3584, 264, 11), 7);
    for units in [1, 100, 1792, 3584, 9000, 128256 / 16 * 4] {
        for cap in [1, 5, 11, 32] {
            let r = LaunchPlan::balanced_tiles_per_cta(units, 264, cap);
            assert!((1..=cap).contains(&r));
            let ctas = units.div_ceil(r);
            // never more waves than the cap forces
            assert!(ctas.div_ceil(264) <= units.div_ceil(264 * cap).max(1), "{units} {cap}: {r}");
        }
    }
    let t = Tuning { tile_reduce: Some(false), ..Tuning::default() };
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Fp16, 8, 14336, 4096, 132, t);
    assert_eq!((p.unroll, p.splits, p.rows_per_cta), (2, 4, 7), "{p:?}");
    // Reduced after every row tile: one wave at M = 16 (896 row tiles x 4 splits over 264 CTAs), two row
    // tiles of partial sums in shared memory
    let t = Tuning { tile_reduce: Some(true), split_k: Some(4), x_smem: Some(false), ..Tuning::default() };
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, t);
    assert_eq!((p.splits, p.rows_per_cta, p.blocks_n * p.splits), (4, 14, 256), "{p:?}");
    assert_eq!(p.smem_bytes, 8 * 16 * 2 * 20 * 4);
    assert!(p.key(WoFormat::Int4G128, XDtype::F16, 16, 90).options().contains(&"-DTRED=1".to_string()));
    // The defaults (session 10 tuning table): reduced after every row tile above M = 8 in CTAs of 16 warps
    // (x14336x4096: 2 K splits, 128 CTAs of 14 row tiles), from M = 8 for 16-bit weights; not at M <= 8
    // for 4- and 8-bit weights. Session 11: INT4 and NF4 (and MXFP4) stage x in shared memory instead
    // (session 18: with bulk rings, by default, 8-bit weights too; here without them).
    for f in [WoFormat::Fp16, WoFormat::Fp8E4M3, WoFormat::Int4G128, WoFormat::Nf4] {
        let regs = Tuning { bulk: Some(false), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, f, 16, 14336, 4096, 132, regs);
        let four = f.bits() == 4;
        assert_eq!(p.x_smem, four, "{f:?} {p:?}");
        // 8-bit weights: the sums added with shared-memory atomics instead
        let eight = f == WoFormat::Fp8E4M3;
        assert_eq!((p.tile_reduce, p.atomic_reduce), (!eight && !four, eight), "{f:?} {p:?}");
        if four {
            assert_eq!((p.unroll, p.warps, p.splits), (8, 16, 2), "{f:?} {p:?}");
            assert!(p.blocks_n * p.splits <= 132, "{f:?} {p:?}");
        } else {
            let g = (p.unroll, p.warps, p.splits, p.rows_per_cta, p.blocks_n);
            assert_eq!(g, (2, 16, 2, 14, 64), "{f:?} {p:?}");
        }
        // (x stationary: since session 27 the default at this shape stages x in shared memory from M = 2
        // to 8 for most formats, `x_in_shared_memory_from_m2_where_it_measured_faster`)
        let stationary = Tuning { x_smem: Some(false), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, f, 8, 14336, 4096, 132, stationary);
        assert_eq!(p.tile_reduce, f == WoFormat::Fp16, "{f:?} {p:?}");
        assert_eq!(p.warps, 8, "{f:?} {p:?}");
        let p = LaunchPlan::new(Variant::XMma, f, 3, 14336, 4096, 132, stationary);
        assert!(!p.tile_reduce, "{f:?} {p:?}");
    }
    // Added with shared-memory atomics: one [M][rows + 4] table per CTA, within the 47 KB at every M
    for m in [1usize, 3, 8, 16] {
        for (n, k) in [(14336, 4096), (4096, 14336), (128256, 4096)] {
            let t = Tuning { atomic_reduce: Some(true), x_smem: Some(false), ..Tuning::default() };
            let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, m, n, k, 132, t);
            assert!(p.atomic_reduce && !p.tile_reduce, "{p:?}");
            assert_eq!(p.smem_bytes, m as u32 * (p.rows_per_cta * 16 + 4) * 4, "{p:?}");
            assert!(p.smem_bytes <= 47 * 1024 && p.blocks_n * p.rows_per_cta * 16 >= n as u32, "{p:?}");
            let opts = p.key(WoFormat::Int4G128, XDtype::F16, m, 90).options();
            assert!(opts.contains(&"-DTRED=2".to_string()));
        }
    }
    // K = 14336 at M = 16: 7 K splits of 16 warps reducing per row tile (the tuning table's 2-split
    // configuration); with x in shared memory (INT4's default) 8 splits of 28 tiles
    let t = Tuning { x_smem: Some(false), ..Tuning::default() };
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 4096, 14336, 132, t);
    assert_eq!((p.warps, p.splits), (16, 7), "{p:?}");
    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 4096, 14336, 132, Tuning::default());
    assert_eq!((p.warps, p.splits, p.chunks_per_split, p.x_smem), (16, 8, 28, true), "{p:?}");
    // small N on a big GPU splits K; large N does not
    let small = LaunchPlan::new(Variant::SplitK, WoFormat::Fp16, 1, 1000, 4096, 132, Tuning::default());
    assert!(small.splits > 1 && small.blocks_n * small.splits >= 132, "{small:?}");
    let big = LaunchPlan::new(Variant::SplitK, WoFormat::Int4G128, 1, 14336, 4096, 132, Tuning::default());
    assert_eq!(big.splits, 1);
    assert_eq!(
        LaunchPlan::new(
            Variant::SplitK,
            WoFormat::Fp16,
            1,
            1000,
            4096,
            132,
            Tuning { split_k: Some(2), ..Tuning::default() }
        )
        .splits,
        2
    );
}

#[test]
fn reference_error_catches_wrong_outputs() {
    let (m, n, k) = (2, 3, 8);
    let x = random_f32(m * k, 1);
    let w = random_f32(n * k, 2);
    let exact: Vec<u16> = (0..m * n)
        .map(|o| {
            let (i, j) = (o / n, o % n);
            f16::from_f32((0..k).map(|l| x[i * k + l] * w[j * k + l]).sum()).to_bits()
        })
        .collect();
    let rows: Vec<usize> = (0..n).collect();
    assert!(reference_error(&x, &w, &exact, m, n, k, &rows, XDtype::F16).unwrap() < 1e-3);
    let mut bad = exact.clone();
    bad[4] = f16::from_f32(f16::from_bits(bad[4]).to_f32() * 1.5 + 0.1).to_bits();
    assert!(reference_error(&x, &w, &bad, m, n, k, &rows, XDtype::F16).unwrap() > 1e-3);
    bad[4] = f16::NAN.to_bits();
    assert!(reference_error(&x, &w, &bad, m, n, k, &rows, XDtype::F16).is_err());
}

/// NF4 with BF16 x on the bulk rings without `Tuning::xf16` (session 48): the table of hi and lo pairs in half the
/// f16 table's copies, 2 tiles in flight at M <= 8 (4 spill), and the byte permutes where the table's builds spill
/// (fused at M > 8, 16 copies at M > 8); FP16 x keeps its plan and table.
#[test]
fn nf4_bf16_takes_the_pair_table_where_it_compiles_without_spills() {
    let (f, v) = (WoFormat::Nf4, Variant::XMma);
    for m in [2usize, 4, 8, 16] {
        let h = LaunchPlan::new_x(v, f, XDtype::F16, m, 14336, 4096, 132, Tuning::default());
        // (the BF16 decodes: `Tuning::xf16` off, as in the fused builds by default)
        let off = Tuning { xf16: Some(false), ..Tuning::default() };
        let b = LaunchPlan::new_x(v, f, XDtype::Bf16, m, 14336, 4096, 132, off);
        assert!(h.bulk && b.bulk && h.nf4_table == 64, "{h:?}");
        assert_eq!(b.unroll, if m <= 8 { 2 } else { h.unroll }, "M={m}");
        assert_eq!(h.key(f, XDtype::F16, m, 90).nf4_table, 64);
        assert_eq!(b.key(f, XDtype::Bf16, m, 90).nf4_table, 32, "M={m}");
        let fused = LaunchPlan { fuse: true, ..b }.key(f, XDtype::Bf16, m, 90).nf4_table;
        assert_eq!(fused, if m > 8 { 0 } else { 32 }, "M={m}");
        let short = LaunchPlan { nf4_table: 32, ..b }.key(f, XDtype::Bf16, m, 90).nf4_table;
        assert_eq!(short, if m > 8 { 0 } else { 16 }, "M={m}");
    }
    // An explicit unroll wins.
    let t = Tuning { unroll: Some(4), xf16: Some(false), ..Tuning::default() };
    assert_eq!(LaunchPlan::new_x(v, f, XDtype::Bf16, 2, 14336, 4096, 132, t).unroll, 4);
}

/// `Tuning::producer`: one ring fed by a producer warp where x (in M rows), the ring and the partial sums fit one
/// K split; the per-warp rings elsewhere. Units of 16 warps x 2 tiles (4-bit) or x 1 (8-bit), one tile a warp where
/// two do not divide a row tile; the CTA alone on its SM; NF4 with as many table copies as leave 3 slots.
#[test]
fn producer_ring_plans_fit_the_shared_memory_or_fall_back() {
    let on = Tuning { producer: Some(true), ..Tuning::default() };
    let plan = |f, m, n, k| LaunchPlan::new_x(Variant::XMma, f, XDtype::F16, m, n, k, 132, on);
    for f in [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4, WoFormat::Fp8E4M3, WoFormat::Int8] {
        for (m, n, k) in [(2, 14336, 4096), (16, 14336, 4096), (4, 4096, 14336), (3, 1000, 5120)] {
            let p = plan(f, m, n, k);
            assert!(p.producer && p.bulk && p.x_smem && p.splits == 1, "{f:?} {m}x{n}x{k}: {p:?}");
            assert!((XR_ALONE_SMEM_BYTES..=XB_SMEM_BYTES).contains(&p.smem_bytes), "{f:?} {m}x{n}x{k}: {p:?}");
            assert_eq!(p.threads(), 17 * 32);
            let tiles = (k / 64) as u32;
            assert_eq!(tiles % (p.warps * p.unroll), 0, "{f:?} {m}x{n}x{k}: {p:?}");
            let want = if f.bits() == 4 && tiles % 32 == 0 { 2 } else { 1 };
            assert_eq!(p.unroll, want, "{f:?} {m}x{n}x{k}");
            assert!(p.stages >= 2, "{f:?} {m}x{n}x{k}");
            assert_eq!(p.key(f, XDtype::F16, m, 90).entry(), "wo_mma_xr");
            // NF4's table within the plan's bytes
            if f == WoFormat::Nf4 {
                assert!(p.nf4_table >= 16, "{m}x{n}x{k}: {p:?}");
            }
        }
        // x of 16 rows at K = 14336 leaves no room: the per-warp rings (in K splits)
        let p = plan(f, 16, 4096, 14336);
        assert!(!p.producer && p.bulk, "{f:?}: {p:?}");
        assert_eq!(p.key(f, XDtype::F16, 16, 90).entry(), "wo_mma_xb");
        // K / 64 no multiple of 16 (K = 1536): no units of whole warps
        assert!(!plan(f, 4, 4096, 1536).producer, "{f:?}");
        // an explicit second K split wins
        let two = Tuning { split_k: Some(2), ..on };
        assert!(!LaunchPlan::new_x(Variant::XMma, f, XDtype::F16, 4, 4096, 4096, 132, two).producer);
        // off by default
        assert!(!LaunchPlan::new_x(Variant::XMma, f, XDtype::F16, 4, 4096, 4096, 132, Tuning::default()).producer);
    }
    // 16-bit weights keep their plans
    assert!(!plan(WoFormat::Fp16, 4, 4096, 4096).producer);
}

/// The engine's fast-memory rule: 8-bit weights with FP16 x take the bulk rings from M = 8 on an H200's bandwidth
/// (not on an H100's, nor 4- or 16-bit weights, nor BF16 x), and the plan then stages x in shared memory.
#[test]
fn eight_bit_weights_take_bulk_rings_from_m_8_on_fast_memory() {
    let (h200, h100) = (4800.0, 3350.0);
    for f in [WoFormat::Fp8E4M3, WoFormat::Int8] {
        assert!(LaunchPlan::bulk_on_fast_memory(f, XDtype::F16, 8, h200));
        assert!(LaunchPlan::bulk_on_fast_memory(f, XDtype::F16, 16, h200));
        assert!(!LaunchPlan::bulk_on_fast_memory(f, XDtype::F16, 6, h200));
        assert!(!LaunchPlan::bulk_on_fast_memory(f, XDtype::F16, 16, h100));
        assert!(!LaunchPlan::bulk_on_fast_memory(f, XDtype::Bf16, 16, h200));
        // what the engine asks for then: x in shared memory, the per-warp rings
        let t = Tuning { bulk: Some(true), ..Tuning::default() };
        let p = LaunchPlan::new_x(Variant::XMma, f, XDtype::F16, 16, 4096, 4096, 132, t);
        assert!(p.x_smem && p.bulk && !p.producer, "{f:?}: {p:?}");
        let x = LaunchPlan::new_x(Variant::XMma, f, XDtype::F16, 16, 4096, 4096, 132, Tuning::default());
        assert!(!x.bulk, "{f:?}: the device-free default stays x stationary: {x:?}");
    }
    for f in [WoFormat::Int4G128, WoFormat::Fp16] {
        assert!(!LaunchPlan::bulk_on_fast_memory(f, XDtype::F16, 16, h200));
    }
}

/// `Tuning::xf16`: BF16 x as scaled f16 on the bulk ring only, for FP8, INT8 and the 4-bit formats, with FP16 x's
/// NF4 table (all its copies) and NVRTC tables; by default for NF4 and FP8 E4M3.
#[test]
fn xf16_takes_bf16_x_to_the_fp16_decodes_on_the_bulk_ring() {
    let on = Tuning { xf16: Some(true), ..Tuning::default() };
    for f in [WoFormat::Fp8E4M3, WoFormat::Int8, WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4] {
        let p = LaunchPlan::new_x(Variant::XMma, f, XDtype::Bf16, 16, 14336, 4096, 132, on);
        assert!(p.bulk && p.xf16, "{f:?}: {p:?}");
        let key = p.key(f, XDtype::Bf16, 16, 90);
        assert!(key.xf16 && key.options().contains(&"-DXF16=1".to_string()), "{f:?}");
        // by default NF4 and FP8 only (measured faster there); not with FP16 x, nor before sm_90
        let default = LaunchPlan::new_x(Variant::XMma, f, XDtype::Bf16, 16, 14336, 4096, 132, Tuning::default());
        assert_eq!(default.xf16, matches!(f, WoFormat::Nf4 | WoFormat::Fp8E4M3), "{f:?}");
        let off = Tuning { xf16: Some(false), ..Tuning::default() };
        assert!(!LaunchPlan::new_x(Variant::XMma, f, XDtype::Bf16, 16, 14336, 4096, 132, off).xf16);
        assert!(!LaunchPlan::new_x(Variant::XMma, f, XDtype::F16, 16, 14336, 4096, 132, on).xf16);
        assert!(!p.key(f, XDtype::Bf16, 16, 80).xf16);
    }
    let nf4 = LaunchPlan::new_x(Variant::XMma, WoFormat::Nf4, XDtype::Bf16, 2, 14336, 4096, 132, on);
    let key = nf4.key(WoFormat::Nf4, XDtype::Bf16, 2, 90);
    // FP16 x's plan: 4 tiles in flight, 64 copies of the f16 pair table, the f16 byte tables (no lo parts)
    assert_eq!((nf4.unroll, key.nf4_table), (4, 64));
    let opts = key.options();
    assert!(!opts.iter().any(|o| o.starts_with("-DNF4_L")), "{opts:?}");
    // not BF16 weights (their MMAs take BF16 as stored), nor a plan without the bulk ring
    let b = LaunchPlan::new_x(Variant::XMma, WoFormat::Bf16, XDtype::Bf16, 16, 14336, 4096, 132, on);
    assert!(!b.xf16);
    let xs = Tuning { bulk: Some(false), ..on };
    assert!(!LaunchPlan::new_x(Variant::XMma, WoFormat::Int4G128, XDtype::Bf16, 16, 14336, 4096, 132, xs).xf16);
    // Fused builds keep the BF16 decodes unless xf16 is asked for; unfused ones keep the default.
    let norm = Fusion { norm_eps: Some(1e-5), ..Fusion::default() };
    assert_eq!(fused_tuning(Tuning::default(), norm).xf16, Some(false));
    assert_eq!(fused_tuning(on, norm).xf16, Some(true));
    assert_eq!(fused_tuning(Tuning::default(), Fusion::default()).xf16, None);
    let fp8 = |t| LaunchPlan::new_x(Variant::XMma, WoFormat::Fp8E4M3, XDtype::Bf16, 16, 14336, 4096, 132, t).xf16;
    assert!(fp8(Tuning::default()) && !fp8(fused_tuning(Tuning::default(), norm)));
}

/// BF16 x as the ring GEMV and `Tuning::xf16` make it f16 (wo_ring.cu, `xb_x_to_f16`): scaled by 2^-e, 2^(e-1) <=
/// max|x| < 2^e, and rounded to f16 to nearest. Over every BF16 value up to max|x|, for maxima across BF16's range:
/// exact from 2^-16 of max|x| up (BF16's 8 significant bits within f16's normal range or its subnormals' 2^-24
/// steps), smaller values within 2^-24 of max|x| (half a subnormal step), and never past f16's range.
#[test]
fn bf16_x_scaled_into_f16_is_exact_from_2_pow_minus_16_of_its_largest_value() {
    use half::bf16;
    for max in [1.0f32, 0.75, 3.0e-3, 1.7e2, 6.0e4, 3.0e38, 1.0e-30, 9.1e-39] {
        let max = bf16::from_f32(max).to_f32();
        let e = max.abs().log2().floor() as i32 + 1; // ilogbf(max) + 1
        let (down, up) = (2f64.powi(-e), 2f64.powi(e));
        assert!((0.5..1.0).contains(&(f64::from(max) * down)), "{max:e}");
        let mut worst_exact = 0.0f64;
        for bits in 0..=u16::MAX {
            let v = bf16::from_bits(bits).to_f32();
            if !v.is_finite() || v.abs() > max {
                continue;
            }
            let scaled = (f64::from(v) * down) as f32; // exact: a power of two within f32's range
            let h = f16::from_f32(scaled);
            assert!(h.is_finite(), "{v:e} under max {max:e}");
            let back = f64::from(h.to_f32()) * up;
            let err = (back - f64::from(v)).abs();
            if f64::from(v.abs()) >= f64::from(max) * 2f64.powi(-16) {
                worst_exact = worst_exact.max(err);
            } else {
                assert!(err <= f64::from(max) * 2f64.powi(-24), "{v:e} under max {max:e}: error {err:e}");
            }
        }
        assert_eq!(worst_exact, 0.0, "max {max:e}");
    }
}

/// `reference_error` reads a kernel's error before its outputs are rounded, the same for FP16 and BF16 y: outputs
/// `exact + e` (e of rms 3e-4 of W x) rounded to either type read 3e-4 within sampling noise, where the distance to
/// the rounded reference reads several times that with BF16's coarse step; a wrong rounding (truncation) is
/// caught with BF16 y.
#[test]
fn reference_error_reads_the_kernels_error_before_rounding() {
    let (m, n, k) = (4, 1024, 64);
    let x = random_f32(m * k, 3);
    let w = random_f32(n * k, 4);
    let exact: Vec<f64> = (0..m * n)
        .map(|o| (0..k).map(|l| f64::from(x[(o / n) * k + l]) * f64::from(w[(o % n) * k + l])).sum())
        .collect();
    let rms = (exact.iter().map(|v| v * v).sum::<f64>() / exact.len() as f64).sqrt();
    let rows: Vec<usize> = (0..n).collect();
    let eps = 3e-4;
    // Uniform in [-1, 1) has rms 1/sqrt(3).
    let noise: Vec<f64> = random_f32(m * n, 5).iter().map(|u| f64::from(*u) * 3f64.sqrt() * eps * rms).collect();
    for xt in [XDtype::F16, XDtype::Bf16] {
        let (to, from) = (to_bits(xt), from_bits(xt));
        let noisy: Vec<u16> = exact.iter().zip(&noise).map(|(v, e)| to((v + e) as f32)).collect();
        let got = reference_error(&x, &w, &noisy, m, n, k, &rows, xt).unwrap();
        assert!((0.75 * eps..1.25 * eps).contains(&got), "{xt:?}: {got:.3e}");
        let rounded: Vec<u16> = exact.iter().map(|v| to(*v as f32)).collect();
        assert_eq!(reference_error(&x, &w, &rounded, m, n, k, &rows, xt).unwrap(), 0.0);
        // Against the rounded reference: about sqrt(e step).
        let norm = exact.iter().map(|v| v * v).sum::<f64>();
        let flips = noisy.iter().zip(&rounded).map(|(a, b)| (f64::from(from(*a)) - f64::from(from(*b))).powi(2));
        let vs_rounded = (flips.sum::<f64>() / norm).sqrt();
        if xt == XDtype::Bf16 {
            assert!(vs_rounded > 2.5 * eps, "{vs_rounded:.3e}");
            // Truncation toward zero instead of rounding to nearest: half a step on average, caught.
            let cut: Vec<u16> =
                exact.iter().map(|v| half::bf16::from_bits(((*v as f32).to_bits() >> 16) as u16).to_bits()).collect();
            assert!(reference_error(&x, &w, &cut, m, n, k, &rows, xt).unwrap() > 1e-3);
        }
    }
}

#[test]
fn measurement_conversion_keeps_time_and_counts_flops() {
    let w = WeightOnlyMeasurement {
        format: Format::NVFP4,
        x: XDtype::F16,
        m: 2,
        n: 1000,
        k: 4096,
        stats: TimingStats {
            median_us: 10.0,
            min_us: 9.0,
            max_us: 12.0,
            runs: 50,
            inner: 8,
            host_us: 3.0,
            gated: true,
            redone: 0,
        },
        bytes: 2_000_000,
        bandwidth_gb_s: 200.0,
        rel_error: 1e-4,
        plan: LaunchPlan::new(Variant::SplitK, WoFormat::Nvfp4, 2, 1000, 4096, 132, Tuning::default()),
        registers: Some(80),
        spill_bytes: Some(0),
        sets: 4,
        kernel: "k".into(),
        graph: Some(TimingStats {
            median_us: 8.5,
            min_us: 8.0,
            max_us: 9.0,
            runs: 20,
            inner: 64,
            host_us: 0.1,
            gated: true,
            redone: 0,
        }),
    };
    let m = w.to_measurement("H100");
    assert_eq!((m.time_us, m.time_us_min, m.time_us_max, m.runs), (10.0, 9.0, 12.0, 50));
    assert_eq!((m.graph_us, m.host_us), (Some(8.5), Some(3.0)));
    assert!((m.tflops - 2.0 * 2.0 * 1000.0 * 4096.0 / 10e6).abs() < 1e-12);
    assert_eq!(m.bandwidth_gb_s, 200.0);
    assert_eq!(m.device, "H100");
}

#[test]
fn check_rows_cover_the_ends() {
    let r = check_rows(16, 128_256, 4096);
    assert!(r.contains(&0) && r.contains(&128_255) && r.len() < 2000);
    assert_eq!(check_rows(1, 100, 128), (0..100).collect::<Vec<_>>());
}

#[test]
fn xreg_multiplies_in_f16x2_where_the_h100_measured_it_faster() {
    let plan = |f, m, n, k, t| LaunchPlan::new(Variant::XReg, f, m, n, k, 132, t);
    let d = Tuning::default();
    for (f, n, k, want) in [
        (WoFormat::Mxfp4, 4096, 4096, true),
        (WoFormat::Mxfp4, 128_256, 4096, true),
        (WoFormat::Nvfp4, 4096, 4096, false),
        (WoFormat::Nvfp4, 6144, 4096, true),
        (WoFormat::Nvfp4, 128_256, 4096, true),
        (WoFormat::Nvfp4, 4096, 14336, true),
        (WoFormat::Int4G128, 4096, 4096, true),
        (WoFormat::Int4G128, 6144, 4096, false),
        (WoFormat::Int4G128, 4096, 14336, true),
        // Llama-3-70B's LM head where `XReg` runs it (the ring takes it by default since session 33)
        (WoFormat::Int4G128, 128_256, 8192, true),
        (WoFormat::Int4G128, 128_256, 4096, false),
        (WoFormat::Nf4, 4096, 14336, true),
        (WoFormat::Nf4, 14336, 4096, false),
        (WoFormat::Nf4, 128_256, 4096, true),
        (WoFormat::Int8, 4096, 4096, false),
    ] {
        let p = plan(f, 1, n, k, d);
        assert_eq!(p.xh, want, "{f:?} 1x{n}x{k}");
        // FP16 x only; the key compiles it in (-DXH=1)
        assert_eq!(p.key(f, XDtype::F16, 1, 90).xh, want);
        assert!(!p.key(f, XDtype::Bf16, 1, 90).xh);
        assert!(p.key(f, XDtype::F16, 1, 90).options().contains(&format!("-DXH={}", u8::from(want))));
    }
    // M = 2 never; a tuning asks for it or against it
    assert!(!plan(WoFormat::Mxfp4, 2, 4096, 4096, d).xh);
    assert!(plan(WoFormat::Nf4, 1, 4096, 4096, Tuning { xh: Some(true), ..d }).xh);
    assert!(!plan(WoFormat::Nf4, 1, 4096, 14336, Tuning { xh: Some(false), ..d }).xh);
    assert!(!plan(WoFormat::Mxfp4, 1, 4096, 4096, Tuning { xh: Some(false), ..d }).xh);
}

/// Compiles every kernel variant through NVRTC for sm_90 (and sm_80 where the format allows) and checks
/// that ptxas reports no spills. Skips with a message when libnvrtc cannot be loaded; the `#[ignore]`d
/// twin below requires it.
#[test]
fn kernels_compile_without_spills() {
    if let Err(e) = nvrtc_available() {
        eprintln!("SKIPPED kernels_compile_without_spills: {e}");
        return;
    }
    compile_all(false);
}

/// Every format x activation type x variant x M in {1, 2, 3, 4, 8, 16} (about 200 kernels, minutes).
#[test]
#[ignore = "needs libnvrtc (runs on the GPU machine); compiles the full matrix"]
fn kernels_compile_without_spills_nvrtc_required() {
    nvrtc_available().expect("libnvrtc must be loadable for this test");
    compile_all(true);
}

/// Local memory per thread of `entry` in `cubin` as the driver of GPU 0 reports it (spills, when ptxas's log says
/// nothing); `None` without a GPU.
fn driver_local_bytes(cubin: &[u8], entry: &str) -> Option<u32> {
    static CTX: std::sync::OnceLock<Option<Arc<cudarc::driver::CudaContext>>> = std::sync::OnceLock::new();
    let ctx = CTX.get_or_init(|| crate::Gpu::open(0).ok().map(|g| g.ctx.clone())).as_ref()?;
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin.to_vec())).ok()?;
    let f = module.load_function(entry).ok()?;
    f.local_size_bytes().ok().and_then(|b| u32::try_from(b).ok())
}

/// `full`: every M and activation type; otherwise M in {1, 3, 16} with FP16 x, and with BF16 x where the
/// tensor cores take it (BF16 weights at M = 3 and 16, the formats decoded to BF16 at M = 16, NF4's table plan
/// of M <= 8 at M = 2), M = 1 with BF16 x.
fn compile_all(full: bool) {
    // Every key first (the default plan, and the other pipelining choice at M = 1 and 16), then all of
    // them compiled in parallel: NVRTC is thread-safe and the full matrix is hundreds of kernels.
    let mut keys = Vec::new();
    // `ROOFLINE_TEST_FORMATS` / `ROOFLINE_TEST_X` (comma-separated names, as the GPU tests take them): a part.
    let formats = WoFormat::ALL.into_iter().filter(|f| env_list_names("ROOFLINE_TEST_FORMATS", f.format().name()));
    for f in formats {
        for x in XDtype::ALL.into_iter().filter(|x| env_list_names("ROOFLINE_TEST_X", x.name())) {
            for variant in
                [Variant::SplitK, Variant::Rows4, Variant::RowPerWarp, Variant::Mma, Variant::XReg, Variant::XMma]
            {
                for m in [1usize, 2, 3, 4, 8, 9, 16] {
                    // (BF16 x at M = 3 and 16 with BF16 weights, the tensor cores' BF16 operands as stored, and
                    // at M = 16 with the formats whose decode makes BF16.)
                    let at_m = match x {
                        XDtype::F16 => m == 3 || m == 16,
                        XDtype::Bf16 => {
                            (f == WoFormat::Bf16 && m == 3)
                                || (mma::supports(f, x) && m == 16)
                                || (f == WoFormat::Nf4 && m == 2)
                        }
                    };
                    if !(full || m == 1 || at_m) {
                        continue;
                    }
                    if matches!(variant, Variant::Mma | Variant::XMma) && !mma::supports(f, x) {
                        continue;
                    }
                    let default = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, Tuning::default());
                    // The fused RMSNorm / residual-add build of the default plan too.
                    let mut plans = vec![default, LaunchPlan { fuse: true, ..default }];
                    if default.xreg && default.rows_per_warp != nvrtc::MMA_ROWS {
                        plans.push(LaunchPlan { fuse: true, silu: true, ..default });
                    }
                    if m == 1 || m == 16 {
                        let other = Tuning { pipeline: Some(!default.pipeline), ..Tuning::default() };
                        plans.push(LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, other));
                    }
                    // The other product arithmetic of the x-in-registers kernel at M = 1 (4-bit weights),
                    // plain and fused, at K = 4096 and 14336 (one CTA over K).
                    if m == 1 && variant == Variant::XReg && f.bits() == 4 {
                        for k in [4096, 14336] {
                            let d = LaunchPlan::new_x(variant, f, x, m, 4096, k, 132, Tuning::default());
                            let t = Tuning { xh: Some(!d.xh), ..Tuning::default() };
                            let p = LaunchPlan::new_x(variant, f, x, m, 4096, k, 132, t);
                            plans.extend([
                                p,
                                LaunchPlan { fuse: true, ..p },
                                LaunchPlan { fuse: true, silu: true, ..p },
                            ]);
                            if k != 4096 {
                                plans.push(d);
                            }
                        }
                    }
                    // XMma reducing after every row tile, plain and fused.
                    if variant == Variant::XMma {
                        let t = Tuning { tile_reduce: Some(true), ..Tuning::default() };
                        let p = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, t);
                        plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                        // and in CTAs of 16 warps (2 K splits of 14336 at M = 16: the tuning table's case)
                        let t = Tuning { split_k: Some(2), ..t };
                        plans.push(LaunchPlan::new_x(variant, f, x, m, 4096, 14336, 132, t));
                        // the sums added with shared-memory atomics, plain and fused
                        let t = Tuning { atomic_reduce: Some(true), ..Tuning::default() };
                        let p = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, t);
                        plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                        // x in shared memory, row tiles streamed along K, plain and fused
                        let t = Tuning { x_smem: Some(true), ..Tuning::default() };
                        let p = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, t);
                        plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                        // and the weights through bulk-copy rings, plain and fused, in one K split (also
                        // with CTA pairs sharing x's copies) and in two summed through a cluster
                        let t = Tuning { x_smem: Some(true), bulk: Some(true), ..Tuning::default() };
                        for split_k in [Some(1), Some(2)] {
                            let p = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, Tuning { split_k, ..t });
                            assert_eq!(p.cluster, p.splits > 1, "{f:?} M={m}: {p:?}");
                            plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                        }
                        // BF16 x rewritten as scaled f16 for FP16 x's decodes (`Tuning::xf16`), plain and fused, and
                        // without it (the BF16 decodes: the fused builds' default where it is NF4's and FP8's)
                        if x == XDtype::Bf16 && f.bits() <= 8 {
                            let off = Tuning { xf16: Some(false), ..Tuning::default() };
                            let p = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, off);
                            plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            for split_k in [Some(1), Some(2)] {
                                let t = Tuning { split_k, xf16: Some(true), ..t };
                                let p = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, t);
                                plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            }
                        }
                        // a producer warp streaming one ring (`Tuning::producer`, 4- and 8-bit weights), plain and
                        // fused, in units of 32 tiles and of 16 (K = 3072), NF4 with its table
                        if f.bits() <= 8 {
                            let pt = Tuning { producer: Some(true), ..Tuning::default() };
                            for k in [4096, 3072] {
                                let p = LaunchPlan::new_x(variant, f, x, m, 4096, k, 132, pt);
                                assert!(p.producer, "{f:?} {x:?} M={m} K={k}: {p:?}");
                                plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            }
                        }
                        let t = Tuning { split_k: Some(1), multicast: Some(true), ..t };
                        let p = LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, t);
                        // (16-bit weights leave x room for half of K only: two splits, no pairs)
                        assert_eq!(p.multicast, p.splits == 1, "{f:?} M={m}: {p:?}");
                        if p.multicast {
                            plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                        }
                    }
                    if variant == Variant::XReg && default.xreg {
                        let staged = Tuning { stages: Some(3), ..Tuning::default() };
                        plans.push(LaunchPlan::new_x(variant, f, x, m, 4096, 4096, 132, staged));
                    }
                    for p in plans {
                        for arch in [90u32, 80] {
                            if arch < f.min_arch() || (arch == 80 && (m != 1 || variant != Variant::SplitK)) {
                                continue;
                            }
                            let key = p.key(f, x, m, arch);
                            keys.push((key, variant));
                        }
                    }
                }
            }
        }
    }
    precompile(&keys.iter().map(|(key, _)| *key).collect::<Vec<_>>());
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (key, variant) in &keys {
        let c = compile(key).unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert!(!c.cubin.is_empty());
        // NVRTC does not always return ptxas's statistics, and a log without them says nothing of spills: CUDA
        // 13.0's leaves it empty for three FP16 builds, every time (session 44: compiled again four times each; the
        // likely cause of session 42's unexplained FAILED). There the driver's local memory per thread decides, as
        // `load_checked` takes it, where a GPU is present.
        match c.spill_bytes.or_else(|| driver_local_bytes(&c.cubin, key.entry())) {
            Some(0) => {}
            Some(b) => failures.push(format!("{key:?} spills ({b} bytes):\n{}", c.log)),
            None => failures.push(format!("{key:?}: no ptxas statistics in NVRTC's log and no GPU to ask:\n{}", c.log)),
        }
        report.push(format!(
            "sm_{} {:<9} x={} {variant:?} M={:<2} R={} U={} W={} PF={} SX={} XR={}{}{}{}{}{}: {} registers, {} spill bytes, {} stack bytes",
            key.arch,
            key.format.format().name(),
            key.x.name(),
            key.m,
            key.rows_per_warp,
            key.unroll,
            key.warps,
            u8::from(key.pipeline),
            u8::from(key.stage),
            u8::from(key.xreg),
            if key.tile_reduce { " TRED" } else { "" },
            if key.xh { " XH" } else { "" },
            if key.multicast { " XB+XMC" } else if key.bulk { " XB" } else { "" },
            if key.silu { " FUSE+SILU" } else if key.fuse { " FUSE" } else { "" },
            if key.nf4_table > 0 { format!(" NF4_TAB={}", key.nf4_table) } else { String::new() },
            c.registers.unwrap_or(0),
            c.spill_bytes.unwrap_or(0),
            c.stack_bytes.unwrap_or(0)
        ));
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{} kernels spill:\n{}", failures.len(), failures.join("\n"));
    // In the machine code of every kernel built with programmatic dependent launch, no coherent load (what
    // an earlier kernel writes) ahead of griddepcontrol.wait (ARCHITECTURE.md, roofline-gpu; session 28).
    let mut seen = std::collections::HashSet::new();
    let pdl: Vec<KernelKey> =
        keys.iter().map(|(key, _)| *key).filter(|key| key.pdl && key.arch >= 90 && seen.insert(*key)).collect();
    // cuobjdump takes ~0.4 s a kernel: every core disassembles a share.
    let sass_of = |key: &KernelKey| {
        let c = compile(key).unwrap_or_else(|e| panic!("{key:?}: {e}"));
        nvrtc::disassemble(&c.cubin).unwrap_or_else(|e| panic!("{key:?}: {e}"))
    };
    let checked = match pdl.first().map(sass_of) {
        Some(None) | None => {
            eprintln!("SKIPPED the load-order check: no cuobjdump (scripts/fetch-cuda-tools.sh installs one)");
            0
        }
        Some(Some(_)) => {
            let found: Vec<String> = nvrtc::par_map(&pdl, |key| {
                let sass = sass_of(key).unwrap_or_else(|| panic!("{key:?}: cuobjdump went away"));
                let loads = nvrtc::loads_before_wait(&sass);
                assert!(!loads.is_empty(), "{key:?}: a PDL build without griddepcontrol.wait");
                loads.iter().filter(|l| l.coherent > 0).map(|l| format!("{key:?}: {l:?}")).collect::<Vec<_>>()
            })
            .into_iter()
            .flatten()
            .collect();
            failures.extend(found);
            pdl.len()
        }
    };
    assert!(
        failures.is_empty(),
        "{} kernels load before griddepcontrol.wait what an earlier kernel writes:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("load order checked in the SASS of {checked} PDL kernels");
    // the cache returns the same image
    let key = KernelKey {
        format: WoFormat::Int4G128,
        x: XDtype::F16,
        m: 1,
        rows_per_warp: 2,
        unroll: 4,
        warps: 4,
        pipeline: false,
        min_blocks: 1,
        stage: false,
        grouped: false,
        xreg: false,
        pdl: true,
        stages: 0,
        fuse: false,
        silu: false,
        tile_reduce: false,
        atomic_reduce: false,
        x_smem: false,
        xh: false,
        bulk: false,
        cluster: false,
        multicast: false,
        nf4_table: 0,
        xf16: false,
        producer: false,
        arch: 90,
    };
    assert!(Arc::ptr_eq(&compile(&key).unwrap(), &compile(&key).unwrap()));
    assert!(compile(&KernelKey { m: 17, ..key }).is_err());
    assert!(compile(&KernelKey { format: WoFormat::Fp8E4M3, arch: 80, ..key }).is_err());
}
