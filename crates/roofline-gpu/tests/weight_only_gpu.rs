//! GPU tests of the weight-only kernels (run on a GPU machine: `cargo test -p roofline-gpu --release --
//! --ignored --nocapture`). Each checks the kernel against the f64 CPU reference of the same quantized
//! weights within 1e-3 relative error.

use half::f16;
use roofline_core::Format;
use roofline_gpu::weight_only::{
    env_list_names, from_bits, mma, precompile, quantize_and_pack, reference_error, to_bits, Fusion, Tuning, Variant,
    WeightOnlyGemv, WeightOnlyMeasurement, WeightOnlyOptions, WoFormat, XDtype,
};
use roofline_gpu::{random_f32, Gpu, TimingConfig};

fn quick() -> TimingConfig {
    TimingConfig { warmup: 3, min_runs: 10, max_runs: 50, budget_ms: 200.0, ..Default::default() }
}

/// The formats the tests run: every one, or those named in `ROOFLINE_TEST_FORMATS` (comma-separated
/// catalog names such as `MXFP4,NVFP4`, to re-check one kernel change in a fraction of the device time).
fn wo_formats() -> Vec<WoFormat> {
    WoFormat::ALL.into_iter().filter(|f| env_list_names("ROOFLINE_TEST_FORMATS", f.format().name())).collect()
}

/// Whether the tests run activations of type `x`: every type, or those named in `ROOFLINE_TEST_X`
/// (comma-separated, `fp16` / `bf16`: a change to one type's kernels re-checked without the other's cases).
fn runs_x(x: XDtype) -> bool {
    env_list_names("ROOFLINE_TEST_X", x.name())
}

fn formats() -> Vec<Format> {
    wo_formats().iter().map(|f| f.format()).collect()
}

/// One weight-only launch of a test: weights and x, work distribution, shape, fusion.
type Call = (WoFormat, XDtype, Variant, Tuning, usize, usize, usize, Fusion);

/// Compiles the kernels of `calls` up front, in parallel: the tests would otherwise compile hundreds of
/// kernels one at a time, most of their run time on the GPU machine. A call the engine refuses is skipped
/// (the test itself reports it).
fn precompile_calls(gpu: &Gpu, calls: &[Call]) {
    let mut keys = std::collections::HashSet::new();
    for &(wf, x, variant, tuning, m, n, k, fusion) in calls {
        let Ok(g) = WeightOnlyGemv::new(gpu, wf, x).and_then(|g| g.with_variant(variant, None).with_tuning(tuning))
        else {
            continue;
        };
        if fusion.silu_x && !g.fuses_silu(m, n, k) {
            continue;
        }
        keys.extend(g.kernel_keys(&[(m, n, k, fusion)]));
    }
    precompile(&keys.into_iter().collect::<Vec<_>>());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_format_matches_the_reference_at_the_issue_shapes() {
    let gpu = Gpu::open(0).unwrap();
    let (major, minor) = gpu.compute_capability;
    println!("{}: {} SMs, L2 {} MB, sm_{major}{minor}", gpu.name, gpu.sm_count, gpu.l2_bytes / 1_000_000);
    // (16, 14336, 4096): issue 11's batch-16 shape, NF4 there in two clustered K splits (`NF4_TWO_SPLITS_ROWS`);
    // (2, 14336, 4096): two rows of x on the ring GEMV where memory is fast (session 50, `ring::auto_rows`).
    let shapes = [
        (1, 4096, 4096),
        (1, 14336, 4096),
        (1, 4096, 14336),
        (2, 14336, 4096),
        (3, 1000, 4096),
        (16, 4096, 4096),
        (16, 14336, 4096),
    ];
    for (m, n, k) in shapes {
        for f in formats() {
            let r = gpu.measure_weight_only(f, m, n, k, &quick()).unwrap_or_else(|e| panic!("{f} {m}x{n}x{k}: {e}"));
            println!(
                "{f:<9} {m:>2}x{n:>5}x{k}: {:8.2} us {:7.1} GB/s rel err {:.2e} {} regs {} spill {:?}",
                r.stats.median_us,
                r.bandwidth_gb_s,
                r.rel_error,
                r.registers.unwrap_or(0),
                r.spill_bytes.unwrap_or(0),
                r.plan
            );
            assert!(r.rel_error <= 1e-3, "{f}: {}", r.rel_error);
            let meas = r.to_measurement(&gpu.name);
            assert!((meas.bandwidth_gb_s - r.bytes as f64 / (meas.time_us * 1e3)).abs() < 1e-6 * meas.bandwidth_gb_s);
            assert!(r.stats.median_us > 0.0 && r.bandwidth_gb_s > 0.0);
            // The ptxas report can be missing from NVRTC's log (seen with NVRTC 13.0 on the H100); the compile
            // test (`kernels_compile_without_spills*`) checks spills on every kernel where the log has it.
            assert_eq!(r.spill_bytes.unwrap_or(0), 0, "{f}: spills");
            let wf = WoFormat::from_format(f).unwrap();
            let weight_bytes = (n * k * wf.bits() / 8) as u64;
            assert!(r.bytes > weight_bytes && r.bytes < weight_bytes * 2, "{f}: {} bytes", r.bytes);
        }
    }
}

/// `TimingConfig::graph`: the GEMV's launches replayed from a CUDA graph, timed per launch, for a ring,
/// an x-in-registers, a split-K and a tensor-core plan; the stream timing is unchanged beside it.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn graph_replay_times_each_launch() {
    let gpu = Gpu::open(0).unwrap();
    let cfg = TimingConfig { graph: true, ..quick() };
    for (f, m, n, k) in [
        (Format::INT4_G128, 1, 14336, 4096),
        (Format::INT4_G128, 1, 4096, 4096),
        (Format::FP16, 1, 4096, 4096),
        (Format::MXFP4, 16, 4096, 4096),
    ] {
        let r = gpu.measure_weight_only(f, m, n, k, &cfg).unwrap_or_else(|e| panic!("{f} {m}x{n}x{k}: {e}"));
        let g = r.graph.unwrap_or_else(|| panic!("{f} {m}x{n}x{k}: no graph timing"));
        println!(
            "{f:<9} {m:>2}x{n:>5}x{k}: stream {:7.2} us, graph {:7.2} us a launch ({} a graph, {} samples)",
            r.stats.median_us, g.median_us, g.inner, g.runs
        );
        assert!(g.median_us > 0.0 && g.min_us <= g.median_us && g.median_us <= g.max_us);
        assert!(g.inner as usize >= r.sets && g.inner % r.sets as u32 == 0 && g.inner >= 64);
        // The same kernels: a graph saves launch work, it cannot make the bytes move twice as fast.
        assert!(g.median_us > 0.5 * r.stats.median_us && g.median_us < 2.0 * r.stats.median_us, "{g:?} {r:?}");
        assert_eq!(r.to_measurement(&gpu.name).graph_us, Some(g.median_us));
    }
    let plain = gpu.measure_weight_only(Format::INT4_G128, 1, 4096, 4096, &quick()).unwrap();
    assert!(plain.graph.is_none());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn variants_and_bf16_activations_match_the_reference() {
    let gpu = Gpu::open(0).unwrap();
    let mut cases: Vec<Call> = Vec::new();
    for wf in wo_formats() {
        for (x, variant, split_k) in [
            (XDtype::Bf16, Variant::SplitK, None),
            (XDtype::F16, Variant::RowPerWarp, None),
            (XDtype::F16, Variant::SplitK, Some(3)),
            (XDtype::Bf16, Variant::SplitK, Some(8)),
            (XDtype::F16, Variant::Mma, None),
            (XDtype::F16, Variant::Mma, Some(3)),
            (XDtype::F16, Variant::XReg, None),
            (XDtype::Bf16, Variant::XReg, None),
            (XDtype::F16, Variant::XReg, Some(3)),
            (XDtype::F16, Variant::XMma, None),
            (XDtype::F16, Variant::XMma, Some(3)),
            // BF16 x on the tensor cores (BF16 operands: BF16 weights as stored, FP8, INT8, INT4, MXFP4 and NVFP4
            // decoded to BF16, NF4 as two BF16 parts); FP16 weights have no tensor-core build with BF16 x (skipped
            // below: the engine runs split-K, covered above).
            (XDtype::Bf16, Variant::Mma, None),
            (XDtype::Bf16, Variant::XMma, None),
            (XDtype::Bf16, Variant::XMma, Some(3)),
        ] {
            if (matches!(variant, Variant::Mma | Variant::XMma) && !mma::supports(wf, x)) || !runs_x(x) {
                continue;
            }
            // XReg also with its weights staged through shared memory (cp.async, 3 steps in flight); XMma with
            // its warps' sums reduced at the end, after every row tile, and added with shared-memory atomics
            // (also with several row tiles per CTA: 48 rows), and with x in shared memory, row tiles streamed
            // along K (one row tile per warp, several, and 2 tiles in flight: the ring wraps mid row tile).
            let stagings: &[Option<u32>] = if variant == Variant::XReg { &[None, Some(3)] } else { &[None] };
            // The sixth field: the weights through bulk-copy rings of that many slots per warp (one row tile
            // per warp, several with 3 tiles a slot (slots end mid scale column), and 2 slots: the ring wraps many
            // times); the seventh: the K splits as clusters summed through distributed shared memory (the
            // default with bulk rings in 3 splits) or through the workspace; the last: the warps sharing the
            // CTA's tiles through a parking table (the default: shares end mid row tile, mid slot with 3 tiles
            // a slot) or owning whole row tiles (no table, no clusters).
            type Reduce = (
                Option<bool>,
                Option<bool>,
                Option<u32>,
                Option<bool>,
                Option<u32>,
                Option<u32>,
                Option<bool>,
                Option<bool>,
            );
            let reduces: &[Reduce] = if variant == Variant::XMma {
                &[
                    (None, None, None, None, None, None, None, None),
                    (Some(false), None, None, None, None, None, None, None),
                    (Some(true), None, None, None, None, None, None, None),
                    (Some(true), None, Some(48), None, None, None, None, None),
                    (None, Some(true), None, None, None, None, None, None),
                    (None, Some(true), Some(48), None, None, None, None, None),
                    (None, None, None, Some(true), None, None, None, None),
                    (None, None, Some(48), Some(true), None, None, None, None),
                    (None, None, Some(400), Some(true), Some(2), None, None, None),
                    (None, None, None, Some(true), None, Some(2), None, None),
                    (None, None, Some(48), Some(true), Some(3), Some(3), None, None),
                    (None, None, Some(400), Some(true), None, Some(2), None, None),
                    (None, None, Some(48), Some(true), Some(3), Some(3), Some(false), None),
                    (None, None, Some(400), Some(true), None, Some(2), Some(false), None),
                    (None, None, Some(48), Some(true), Some(3), Some(3), None, Some(false)),
                    (None, None, Some(400), Some(true), None, Some(2), None, Some(false)),
                ]
            } else {
                &[(None, None, None, None, None, None, None, None)]
            };
            for (m, n, k) in [(1, 1000, 4096), (5, 4096, 1024), (16, 777, 2048), (2, 4100, 3072)] {
                for &stages in stagings {
                    for &(tile_reduce, atomic_reduce, rows_per_cta, x_smem, tiles, bulk, cluster, balance) in reduces {
                        let tuning = Tuning {
                            split_k,
                            stages: bulk.or(stages),
                            bulk: bulk.map(|_| true),
                            cluster,
                            balance,
                            tile_reduce,
                            atomic_reduce,
                            rows_per_cta,
                            x_smem,
                            unroll: tiles,
                            ..Tuning::default()
                        };
                        cases.push((wf, x, variant, tuning, m, n, k, Fusion::default()));
                    }
                }
            }
        }
    }
    precompile_calls(&gpu, &cases);
    for call in cases {
        let r = measure_call(&gpu, call);
        assert!(r.rel_error <= 1e-3);
    }
}

/// `call` (unfused) through the engine's checked measurement (the kernel against the f64 reference), panicking
/// with the call where the engine refuses it.
fn measure_call(gpu: &Gpu, (wf, x, variant, tuning, m, n, k, _): Call) -> WeightOnlyMeasurement {
    let f = wf.format();
    let opts = WeightOnlyOptions { x, variant: Some(variant), tuning, ..Default::default() };
    gpu.measure_weight_only_with(f, m, n, k, &quick(), &opts)
        .unwrap_or_else(|e| panic!("{f} {x:?} {variant:?} {tuning:?} {m}x{n}x{k}: {e}"))
}

/// The bulk ring with a producer warp (`Tuning::producer`, `wo_mma_xr`) for every 4- and 8-bit format with both
/// activation types, M = 2 to 16: units of 32 tiles (K = 4096: two a row tile; N = 1000 ends mid row tile), of 16
/// (K = 3072, 48 tiles: one tile a warp, three units a row tile), one unit a row tile (K = 2048: the most
/// partial-sum buffers), many row tiles a CTA (400 rows: the buffers reused many times) and 2 slots.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn producer_ring_matches_the_reference() {
    let gpu = Gpu::open(0).unwrap();
    let mut cases: Vec<Call> = Vec::new();
    for wf in wo_formats().into_iter().filter(|f| matches!(f.bits(), 4 | 8)) {
        for x in XDtype::ALL.into_iter().filter(|&x| runs_x(x) && mma::supports(wf, x)) {
            for (m, n, k) in [(2, 1000, 4096), (5, 4100, 3072), (16, 777, 2048), (9, 2048, 4096), (3, 520, 14336)] {
                for (rows_per_cta, stages) in [(None, None), (Some(400), None), (Some(48), Some(2))] {
                    let tuning = Tuning { producer: Some(true), rows_per_cta, stages, ..Tuning::default() };
                    cases.push((wf, x, Variant::XMma, tuning, m, n, k, Fusion::default()));
                }
            }
        }
    }
    precompile_calls(&gpu, &cases);
    for call @ (wf, x, _, tuning, m, n, k, _) in cases {
        let f = wf.format();
        let r = measure_call(&gpu, call);
        assert!(r.kernel.contains("wo_mma_xr"), "{f} {x:?} {tuning:?} {m}x{n}x{k}: ran {}", r.kernel);
        assert!(r.rel_error <= 1e-3, "{f} {x:?} {tuning:?} {m}x{n}x{k}: {:.2e}", r.rel_error);
        println!("producer {f} {x:?} {m}x{n}x{k} {:?} {:?}: {:.2e}", tuning.rows_per_cta, tuning.stages, r.rel_error);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_m_and_tiny_odd_shapes_through_the_raw_api() {
    let gpu = Gpu::open(0).unwrap();
    let variants = [Variant::SplitK, Variant::RowPerWarp, Variant::Mma, Variant::XReg, Variant::XMma];
    let mut calls: Vec<Call> = Vec::new();
    for wf in wo_formats() {
        for variant in variants {
            let (n, k) = (13, 3 * wf.k_multiple().max(128));
            let t = Tuning::default();
            calls.extend((1..=16).map(|m| (wf, XDtype::F16, variant, t, m, n, k, Fusion::default())));
        }
    }
    precompile_calls(&gpu, &calls);
    for wf in wo_formats() {
        for variant in variants {
            let gemv = WeightOnlyGemv::new(&gpu, wf, XDtype::F16).unwrap().with_variant(variant, None);
            let (n, k) = (13, 3 * wf.k_multiple().max(128));
            let (packed, wq) = quantize_and_pack(wf, &random_f32(n * k, 9), n, k).unwrap();
            let mut dw = gemv.upload(&packed).unwrap();
            let rows: Vec<usize> = (0..n).collect();
            for m in 1..=16 {
                let xf: Vec<f32> = random_f32(m * k, m as u64).into_iter().map(|v| f16::from_f32(v).to_f32()).collect();
                let xb: Vec<u16> = xf.iter().map(|v| f16::from_f32(*v).to_bits()).collect();
                let x = gemv.htod(&xb).unwrap();
                let mut y = gemv.htod(&vec![f16::NAN.to_bits(); m * n]).unwrap();
                gemv.run(&mut dw, &x, &mut y, m).unwrap();
                let out = gemv.dtoh(&y).unwrap();
                let err = reference_error(&xf, &wq, &out, m, n, k, &rows, XDtype::F16).unwrap();
                assert!(err <= 1e-3, "{wf:?} {variant:?} m={m}: {err}");
            }
            // wrong sizes are errors, not launches
            let x = gemv.htod(&[0u16; 8]).unwrap();
            let mut y = gemv.htod(&[0u16; 8]).unwrap();
            assert!(gemv.run(&mut dw, &x, &mut y, 1).is_err());
            assert!(gemv.run(&mut dw, &x, &mut y, 17).is_err());
        }
    }
}

/// The fused RMSNorm of x (y = rsqrt(mean(x^2) + eps) x W^T) and residual add (y += ...), alone and together,
/// through every kernel family, with K split over CTAs and not, FP16 and BF16 x: against the f64 reference
/// (y0 + inv_rms(x) x Wq^T) within 1e-3; SwiGLU on load (x = silu(gate) * up) where the plan is the
/// x-in-registers kernel, refused elsewhere.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn fused_norm_and_residual_add_match_the_reference() {
    let gpu = Gpu::open(0).unwrap();
    let eps = 1e-5f32;
    // 8-bit at M = 1 on the x-in-registers kernel: weights through three cp.async stages (its default up to
    // 16384 rows, `LaunchPlan::xreg_stages_default`). K = 14336 (4-bit): the x-in-registers plan with 14 warps and no split-K at M = 1 (down_proj's), where
    // every 4-bit format multiplies in f16x2 (`Tuning::xh`; NF4 through its table of code pairs).
    // BF16 at 304 rows: the ring GEMV at M = 1 on the x-in-registers engine (FP32 products, either x).
    let shapes = [
        (WoFormat::Fp16, 300, 1024),
        (WoFormat::Bf16, 304, 1024),
        (WoFormat::Int8, 300, 1024),
        (WoFormat::Fp8E4M3, 300, 1024),
        (WoFormat::Int4G128, 300, 1024),
        (WoFormat::Nf4, 300, 1024),
        (WoFormat::Nvfp4, 300, 1024),
        (WoFormat::Mxfp4, 300, 1024),
        (WoFormat::Int4G128, 100, 14336),
        (WoFormat::Nf4, 100, 14336),
        (WoFormat::Mxfp4, 100, 14336),
        (WoFormat::Nvfp4, 100, 14336),
    ];
    let kinds = [
        (Variant::SplitK, XDtype::F16),
        (Variant::SplitK, XDtype::Bf16),
        (Variant::XReg, XDtype::F16),
        (Variant::XReg, XDtype::Bf16),
        (Variant::Mma, XDtype::F16),
        (Variant::XMma, XDtype::F16),
        // (the tensor cores with BF16 x where they take the format, split-K for FP16 weights)
        (Variant::XMma, XDtype::Bf16),
    ];
    // The tensor cores' bulk ring also with a producer warp (`wo_mma_xr`: 4- and 8-bit weights in one K split;
    // the engine keeps the per-warp rings where x does not fit, M = 16 at K = 14336).
    let producer = Tuning { producer: Some(true), ..Tuning::default() };
    let tunings = [Tuning::default(), producer];
    let silu = Fusion { silu_x: true, ..Fusion::default() };
    let fusions = [
        Fusion { norm_eps: Some(eps), ..Fusion::default() },
        Fusion { add_into_y: true, ..Fusion::default() },
        Fusion { norm_eps: Some(eps), add_into_y: true, ..Fusion::default() },
        silu,
        Fusion { add_into_y: true, ..silu },
    ];
    let kinds: Vec<(Variant, XDtype)> = kinds.into_iter().filter(|&(_, x)| runs_x(x)).collect();
    let only = wo_formats();
    let shapes: Vec<(WoFormat, usize, usize)> = shapes.into_iter().filter(|(f, _, _)| only.contains(f)).collect();
    let mut calls: Vec<Call> = Vec::new();
    for &(wf, n, k) in &shapes {
        for &(variant, xt) in &kinds {
            for split_k in [None, Some(2)] {
                for m in [1usize, 3, 16] {
                    for base in tunings.iter().filter(|t| t.producer.is_none() || variant == Variant::XMma) {
                        let t = Tuning { split_k, ..*base };
                        calls.extend(fusions.iter().map(|&f| (wf, xt, variant, t, m, n, k, f)));
                    }
                }
            }
        }
    }
    precompile_calls(&gpu, &calls);
    for &(wf, n, k) in &shapes {
        let (packed, wq) = quantize_and_pack(wf, &random_f32(n * k, 21), n, k).unwrap();
        let runs = kinds.iter().flat_map(|&(v, xt)| tunings.iter().map(move |t| (v, xt, *t)));
        for (variant, xt, tuning) in runs.filter(|(v, _, t)| t.producer.is_none() || *v == Variant::XMma) {
            // (the producer warp streams one K split)
            for split in if tuning.producer.is_some() { vec![None] } else { vec![None, Some(2)] } {
                let gemv = WeightOnlyGemv::new(&gpu, wf, xt)
                    .unwrap()
                    .with_variant(variant, split)
                    .with_tuning(tuning)
                    .unwrap();
                let mut dw = gemv.upload(&packed).unwrap();
                let (to, from) = (to_bits(xt), from_bits(xt));
                for m in [1usize, 3, 16] {
                    for fusion in fusions {
                        // SwiGLU on load: x is a gate_up row [2K]; only the x-in-registers plans take it.
                        let xk = if fusion.silu_x { 2 * k } else { k };
                        // x far from unit RMS (the norm must matter), y0 of the output's size.
                        let seed = (m * 7 + usize::from(fusion.add_into_y)) as u64;
                        let xb: Vec<u16> = random_f32(m * xk, seed).iter().map(|v| to(3.0 * v)).collect();
                        let y0b: Vec<u16> = random_f32(m * n, seed + 100).iter().map(|v| to(4.0 * v)).collect();
                        let x = gemv.htod(&xb).unwrap();
                        let mut y = gemv.htod(&y0b).unwrap();
                        let ran = gemv.run_fused(gemv.stream(), &mut dw, &x, &mut y, m, fusion);
                        if fusion.silu_x && !gemv.fuses_silu(m, n, k) {
                            assert!(ran.is_err(), "{wf:?} {variant:?} m={m}: SwiGLU on load must be refused");
                            continue;
                        }
                        ran.unwrap();
                        let out = gemv.dtoh(&y).unwrap();
                        let (mut err, mut norm) = (0.0f64, 0.0f64);
                        for i in 0..m {
                            let row: Vec<f64> = xb[i * xk..][..xk].iter().map(|b| f64::from(from(*b))).collect();
                            let xr: Vec<f64> = if fusion.silu_x {
                                (0..k).map(|l| row[l] / (1.0 + (-row[l]).exp()) * row[k + l]).collect()
                            } else {
                                row
                            };
                            let inv = match fusion.norm_eps {
                                Some(e) => {
                                    1.0 / (xr.iter().map(|v| v * v).sum::<f64>() / k as f64 + f64::from(e)).sqrt()
                                }
                                None => 1.0,
                            };
                            for j in 0..n {
                                let acc: f64 = (0..k).map(|l| xr[l] * f64::from(wq[j * k + l])).sum();
                                let base = if fusion.add_into_y { f64::from(from(y0b[i * n + j])) } else { 0.0 };
                                let want = base + inv * acc;
                                let got = f64::from(from(out[i * n + j]));
                                assert!(got.is_finite(), "{wf:?} {variant:?} {xt:?} m={m}: y[{i},{j}] = {got}");
                                err += (got - want).powi(2);
                                norm += want * want;
                            }
                        }
                        let rel = (err / norm).sqrt();
                        let tol = if xt == XDtype::Bf16 { 8e-3 } else { 1e-3 };
                        assert!(
                            rel <= tol,
                            "{wf:?} {variant:?} {xt:?} split {split:?} {tuning:?} m={m} {fusion:?}: {rel:.2e}"
                        );
                    }
                }
                println!("fused {wf:?} {n}x{k} {variant:?} {xt:?} split {split:?} producer {:?}: ok", tuning.producer);
            }
        }
    }
}

/// Not a pass/fail test: the variant table the default plan is chosen from (time and GB/s per format,
/// variant and shape), printed for bench/RESULTS.md. Every run is still checked against the reference.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn variant_table() {
    let gpu = Gpu::open(0).unwrap();
    let cfg = TimingConfig { budget_ms: 300.0, ..Default::default() };
    println!("VT format     shape            SplitK(us GB/s)   Rows4(us GB/s)   RowPerWarp(us GB/s)   Mma(us GB/s)");
    for (m, n, k) in [(1, 4096, 4096), (1, 14336, 4096), (1, 4096, 14336), (16, 14336, 4096)] {
        for f in formats() {
            let mut line = format!("VT {f:<9} {m:>2}x{n:>6}x{k:<6}");
            for variant in [Variant::SplitK, Variant::Rows4, Variant::RowPerWarp, Variant::Mma] {
                let opts = WeightOnlyOptions { variant: Some(variant), ..WeightOnlyOptions::default() };
                match gpu.measure_weight_only_with(f, m, n, k, &cfg, &opts) {
                    Ok(r) => {
                        assert!(r.rel_error <= 1e-3, "{f} {variant:?}: {}", r.rel_error);
                        line.push_str(&format!(
                            "  {:7.2} {:6.0}{}",
                            r.stats.median_us,
                            r.bandwidth_gb_s,
                            if r.spill_bytes == Some(0) { " " } else { "!" }
                        ));
                    }
                    Err(e) => line.push_str(&format!("  error: {e}")),
                }
            }
            println!("{line}");
        }
    }
}

/// The 4-bit formats on CUDA cores (`SplitK`) against tensor cores (`Mma`), at the issue's shapes.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn mma_table() {
    let gpu = Gpu::open(0).unwrap();
    let cfg = TimingConfig { budget_ms: 300.0, ..Default::default() };
    println!("MT format     shape              SplitK(us GB/s)   Mma(us GB/s)");
    for (m, n, k) in [(1, 4096, 4096), (1, 14336, 4096), (1, 4096, 14336), (1, 128256, 4096), (16, 14336, 4096)] {
        for f in [Format::INT4_G128, Format::MXFP4, Format::NVFP4] {
            let mut line = format!("MT {f:<9} {m:>2}x{n:>6}x{k:<6}");
            for variant in [Variant::SplitK, Variant::Mma] {
                let opts = WeightOnlyOptions { variant: Some(variant), ..WeightOnlyOptions::default() };
                let r = gpu.measure_weight_only_with(f, m, n, k, &cfg, &opts).unwrap();
                assert!(r.rel_error <= 1e-3, "{f} {variant:?}: {}", r.rel_error);
                line.push_str(&format!("  {:8.2} {:6.0}", r.stats.median_us, r.bandwidth_gb_s));
            }
            println!("{line}");
        }
    }
}

/// Not a pass/fail test: the tuning table the default plans are chosen from. For each format and shape,
/// every launch configuration (variant x unroll x warps x software pipelining) is checked against the
/// reference and timed; the line per configuration and the best one per format are printed (`TT` lines).
/// Shapes from `ROOFLINE_TUNE_SHAPES` ("MxNxK,...") when set; `ROOFLINE_TUNE_FORMATS` ("INT4_G128,NF4")
/// and `ROOFLINE_TUNE_ONLY` (label parts separated by '|', such as "Mma U=2 W=4|+GRP") narrow the table;
/// `ROOFLINE_TUNE_ROWS_PER_CTA` and `ROOFLINE_TUNE_SPLIT_K` run every row on CTAs of that many weight rows
/// and in that many K splits; `ROOFLINE_TUNE_PRODUCER=1` every bulk-ring row with a producer warp;
/// `ROOFLINE_TUNE_X=bf16` every row with BF16 activations.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn tune_table() {
    let gpu = Gpu::open(0).unwrap();
    let cfg = TimingConfig { warmup: 5, min_runs: 20, max_runs: 200, budget_ms: 40.0, ..Default::default() };
    let shapes: Vec<(usize, usize, usize)> = match std::env::var("ROOFLINE_TUNE_SHAPES") {
        Ok(s) => s
            .split(',')
            .map(|t| {
                let v: Vec<usize> = t.split('x').map(|d| d.trim().parse().expect("shape MxNxK")).collect();
                (v[0], v[1], v[2])
            })
            .collect(),
        Err(_) => vec![(1, 14336, 4096), (1, 4096, 4096), (16, 14336, 4096)],
    };
    let only_formats: Option<Vec<String>> =
        std::env::var("ROOFLINE_TUNE_FORMATS").ok().map(|s| s.split(',').map(|f| f.trim().to_uppercase()).collect());
    let only_label = std::env::var("ROOFLINE_TUNE_ONLY").ok();
    let env_u32 = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let (rows_per_cta, split_k) = (env_u32("ROOFLINE_TUNE_ROWS_PER_CTA"), env_u32("ROOFLINE_TUNE_SPLIT_K"));
    let producer = env_u32("ROOFLINE_TUNE_PRODUCER") == Some(1);
    let label_of = |variant: &Variant, t: &Tuning| {
        format!(
            "{variant:?}{}{}{}{}{} U={} W={} PF={} P={} SX={} B={}{}",
            if t.grouped == Some(true) { "+GRP" } else { "" },
            if t.ring == Some(true) { " RING" } else { "" },
            if t.bulk == Some(true) && t.balance == Some(false) {
                " XSM+XB noBAL"
            } else if t.bulk == Some(true) && t.cluster == Some(false) {
                " XSM+XB noCL"
            } else if t.bulk == Some(true) {
                " XSM+XB"
            } else if t.x_smem == Some(true) {
                " XSM"
            } else if t.atomic_reduce == Some(true) {
                " ARED"
            } else if t.tile_reduce == Some(true) {
                " TRED"
            } else {
                ""
            },
            t.rows.map(|r| format!(" R={r}")).unwrap_or_default()
                + &t.stages.map(|n| format!(" NST={n}")).unwrap_or_default(),
            if t.pdl == Some(false) { " noPDL" } else { "" },
            t.unroll.unwrap_or(0),
            t.warps.unwrap_or(0),
            u8::from(t.pipeline.unwrap_or(false)),
            u8::from(t.persistent.unwrap_or(false)),
            u8::from(t.stage.unwrap_or(false)),
            t.min_blocks.unwrap_or(1),
            t.split_k.map(|s| format!(" S={s}")).unwrap_or_default()
                + &t.rows_per_cta.map(|r| format!(" RPC={r}")).unwrap_or_default()
                + if t.producer == Some(true) { " XR" } else { "" }
        )
    };
    for (m, n, k) in shapes {
        for wf in wo_formats() {
            let f = wf.format();
            if only_formats.as_ref().is_some_and(|l| !l.contains(&f.name().to_uppercase())) {
                continue;
            }
            let mut configs = Vec::new();
            // ROOFLINE_TUNE_SET=xreg: the x-in-registers kernel (rows per step x chunks per lane x pipelining)
            // and programmatic dependent launch on and off, against the default split-K plan.
            if std::env::var("ROOFLINE_TUNE_SET").is_ok_and(|v| v == "xreg") {
                for pdl in [true, false] {
                    configs.push((Variant::SplitK, Tuning { pdl: Some(pdl), ..Tuning::default() }));
                    configs.push((Variant::XReg, Tuning { pdl: Some(pdl), ..Tuning::default() }));
                }
                // The ring GEMV forced (`XReg RING`: at M = 2-16 the tensor-core ring past `ring::mma_auto`'s steps).
                configs.push((Variant::XReg, Tuning { ring: Some(true), ..Tuning::default() }));
                if roofline_gpu::weight_only::mma::supports(wf, XDtype::F16) {
                    // The K-walking tensor-core kernel (the default at M >= 8 until XMma replaced it) for comparison.
                    configs.push((Variant::Mma, Tuning::default()));
                    // 1 k-tile per warp for 16-bit weights (four 16-byte words per lane and tile).
                    // x in shared memory, row tiles streamed along K (`XSM`): tiles in flight x warps x splits.
                    for tiles in [2u32, 4, 8] {
                        for warps in [4u32, 8, 16] {
                            for split_k in [None, Some(1), Some(4), Some(8)] {
                                let t = Tuning {
                                    x_smem: Some(true),
                                    unroll: Some(tiles),
                                    warps: Some(warps),
                                    split_k,
                                    ..Tuning::default()
                                };
                                configs.push((Variant::XMma, t));
                            }
                        }
                    }
                    // The same with the weights through bulk-copy rings (`XSM+XB`): tiles a slot x slots x warps, the
                    // splits in clusters or through the workspace (`noCL`), the warps sharing the tiles or owning row
                    // tiles (`noBAL`). (1 tile and 6 slots: the producer warp's units of 16 KB of 8-bit codes and its
                    // deeper rings, ROOFLINE_TUNE_PRODUCER.)
                    for tiles in [1u32, 2, 4, 8] {
                        for stages in [2u32, 3, 4, 6] {
                            for warps in [8u32, 16] {
                                for (split_k, cluster, balance) in [
                                    (None, None, None),
                                    (None, Some(false), None),
                                    (Some(1), None, None),
                                    (None, None, Some(false)),
                                    (Some(1), None, Some(false)),
                                ] {
                                    let t = Tuning {
                                        x_smem: Some(true),
                                        bulk: Some(true),
                                        cluster,
                                        balance,
                                        unroll: Some(tiles),
                                        stages: Some(stages),
                                        warps: Some(warps),
                                        split_k,
                                        ..Tuning::default()
                                    };
                                    configs.push((Variant::XMma, t));
                                }
                            }
                        }
                    }
                    for tiles in [1u32, 2, 4, 8] {
                        for split_k in [None, Some(1), Some(2)] {
                            configs.push((Variant::XMma, Tuning { unroll: Some(tiles), split_k, ..Tuning::default() }));
                        }
                        // Reduced after every row tile: any row tiles per CTA, one wave (`TRED` in the label);
                        // also in 2 K splits (CTAs of up to 16 warps, half the workspace atomics).
                        for split_k in [None, Some(2)] {
                            let t =
                                Tuning { unroll: Some(tiles), tile_reduce: Some(true), split_k, ..Tuning::default() };
                            configs.push((Variant::XMma, t));
                            // The same sums added with shared-memory atomics, one barrier per CTA (`ARED`).
                            configs.push((Variant::XMma, Tuning { atomic_reduce: Some(true), ..t }));
                        }
                    }
                }
                for stages in [2u32, 3, 4] {
                    if roofline_gpu::weight_only::LaunchPlan::xreg_fits(wf, m, 1) {
                        configs.push((Variant::XReg, Tuning { stages: Some(stages), ..Tuning::default() }));
                    }
                }
                for rows in [4u32, 8] {
                    for unroll in [1u32, 2] {
                        for pipeline in [false, true] {
                            let t = Tuning {
                                rows: Some(rows),
                                unroll: Some(unroll),
                                pipeline: Some(pipeline),
                                ..Tuning::default()
                            };
                            if roofline_gpu::weight_only::LaunchPlan::xreg_fits(wf, m, unroll) {
                                configs.push((Variant::XReg, t));
                                if unroll == 1 && !pipeline {
                                    for b in [3u32, 4] {
                                        configs.push((Variant::XReg, Tuning { min_blocks: Some(b), ..t }));
                                    }
                                }
                            }
                        }
                    }
                }
            }
            let stages: &[bool] = if wf.block_scaled() && m <= 4 { &[false, true] } else { &[false] };
            let full = configs.is_empty();
            for pipeline in [false, true].into_iter().filter(|_| full) {
                for warps in [4u32, 8] {
                    for &stage in stages {
                        for (variant, unroll) in
                            [(Variant::SplitK, 1), (Variant::SplitK, 2), (Variant::SplitK, 4), (Variant::Rows4, 1)]
                        {
                            for persistent in [false, true] {
                                if persistent && stage {
                                    continue;
                                }
                                configs.push((
                                    variant,
                                    Tuning {
                                        unroll: Some(unroll),
                                        warps: Some(warps),
                                        pipeline: Some(pipeline),
                                        persistent: Some(persistent),
                                        stage: Some(stage),
                                        ..Tuning::default()
                                    },
                                ));
                            }
                        }
                    }
                    // Lanes on consecutive chunks (whole scale groups), U a multiple of the chunks per scale.
                    if !pipeline {
                        for &stage in stages {
                            for unroll in [2, 4, 8] {
                                configs.push((
                                    Variant::SplitK,
                                    Tuning {
                                        unroll: Some(unroll),
                                        warps: Some(warps),
                                        pipeline: Some(false),
                                        stage: Some(stage),
                                        grouped: Some(true),
                                        ..Tuning::default()
                                    },
                                ));
                            }
                        }
                    }
                    if roofline_gpu::weight_only::mma::supports(wf, XDtype::F16) {
                        let auto = gpu_plan_splits(&gpu, wf, m, n, k, warps);
                        for unroll in [2, 4] {
                            for split_k in [None, Some(2 * auto)] {
                                configs.push((
                                    Variant::Mma,
                                    Tuning {
                                        unroll: Some(unroll),
                                        warps: Some(warps),
                                        pipeline: Some(pipeline),
                                        split_k,
                                        ..Tuning::default()
                                    },
                                ));
                            }
                        }
                    }
                }
            }
            if let Some(only) = &only_label {
                configs.retain(|(v, t)| only.split('|').any(|o| label_of(v, t).contains(o)));
            }
            // ROOFLINE_TUNE_ROWS_PER_CTA / ROOFLINE_TUNE_SPLIT_K: every remaining configuration on CTAs of that
            // many rows (`RPC=` in the label) / in that many K splits (`S=`), e.g. fewer CTAs than SMs or
            // clustered splits for the wrong-result probes.
            // ROOFLINE_TUNE_PRODUCER=1: every remaining configuration with the bulk ring's producer warp (`XR` in the
            // label; the engine keeps the per-warp rings where it does not run).
            for (_, t) in &mut configs {
                t.rows_per_cta = rows_per_cta.or(t.rows_per_cta);
                t.split_k = split_k.or(t.split_k);
                if producer {
                    t.producer = Some(true);
                }
            }
            // ROOFLINE_TUNE_TOLERANCE: accept any error (profiling experiments that compute wrong results).
            let tolerance = std::env::var("ROOFLINE_TUNE_TOLERANCE").ok().and_then(|t| t.parse().ok()).unwrap_or(1e-3);
            // ROOFLINE_TUNE_X=bf16: BF16 activations (default FP16).
            let x = match std::env::var("ROOFLINE_TUNE_X").as_deref() {
                Ok("bf16") => XDtype::Bf16,
                _ => XDtype::F16,
            };
            let opts = WeightOnlyOptions { tolerance, x, ..WeightOnlyOptions::default() };
            let results = gpu
                .measure_weight_only_configs(f, m, n, k, &cfg, &opts, &configs)
                .unwrap_or_else(|e| panic!("{f} {m}x{n}x{k}: {e}"));
            let mut best: Option<(f64, String)> = None;
            for ((variant, t), r) in configs.iter().zip(results) {
                let label = label_of(variant, t);
                match r {
                    Ok(r) => {
                        assert!(r.rel_error <= tolerance, "{f} {label}: {}", r.rel_error);
                        let spill = r.spill_bytes.unwrap_or(0);
                        println!(
                            "TT {f:<9} {m:>2}x{n:>6}x{k:<6} {label:<28} splits {:>3} {:8.2} us {:6.0} GB/s regs {:>3}{}",
                            r.plan.splits,
                            r.stats.median_us,
                            r.bandwidth_gb_s,
                            r.registers.unwrap_or(0),
                            if spill > 0 { format!(" SPILL {spill}") } else { String::new() }
                        );
                        if spill == 0 && best.as_ref().is_none_or(|(us, _)| r.stats.median_us < *us) {
                            best = Some((r.stats.median_us, format!("{label} {:.0} GB/s", r.bandwidth_gb_s)));
                        }
                    }
                    Err(e) => println!("TT {f:<9} {m:>2}x{n:>6}x{k:<6} {label:<28} error: {e}"),
                }
            }
            if let Some((us, label)) = best {
                println!("TT-BEST {f:<9} {m:>2}x{n:>6}x{k:<6} {us:8.2} us  {label}");
            }
        }
    }
}

/// The split-K count the automatic plan picks for the tensor-core kernel.
fn gpu_plan_splits(gpu: &Gpu, wf: WoFormat, m: usize, n: usize, k: usize, warps: u32) -> u32 {
    roofline_gpu::weight_only::LaunchPlan::new(
        Variant::Mma,
        wf,
        m,
        n,
        k,
        gpu.sm_count,
        Tuning { warps: Some(warps), ..Tuning::default() },
    )
    .splits
}
