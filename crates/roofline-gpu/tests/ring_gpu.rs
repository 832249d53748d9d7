//! GPU test of the ring-streaming GEMV (`weight_only::ring`): y against the f64 CPU reference of the same
//! quantized weights (INT4 g128, NF4, MXFP4, NVFP4; FP8 E4M3 and INT8 where K is at most their 15360, FP16 up to
//! its 15360, also with weights near f16's largest; BF16 likewise), each with FP16 and with BF16 activations (the
//! error read past the output type's own rounding, as the engine's check does; `ROOFLINE_TEST_X=fp16|bf16` and
//! `ROOFLINE_TEST_FORMATS=INT4_G128,...` run a part) for each epilogue (RMSNorm in front, plain
//! store, residual add), with one row of x and with two and three (each weight decoded once for all; `ROOFLINE_TEST_M=2,3`
//! runs those alone), and INT4, NF4, MXFP4 and NVFP4 (either x type; BF16 x also far past f16's range) with 2 to 16
//! on the tensor cores (from 3 rows always at K up to 4096, at 2 where a CTA takes few row steps; past it in K splits, a
//! cluster's CTAs each taking a share of K, where the default takes them), and SwiGLU on load, at Llama-3.1-8B's qkv
//! and o_proj shapes and at shapes whose CTAs take unequal shares (one to several row steps, K of one and
//! several 1024-value slices), with an x of large values (the kernel's power-of-two scaling of x keeps the
//! f16x2 sums in range), and twice in a row (same bits). Shapes whose staged scale tables leave the ring few
//! slots stream their scales with the weights (of these cases NVFP4 at K = 28672; in models also the LM
//! heads at K = 8192, too large for this test: `roofline measure` checks them); run it again with
//! `ROOFLINE_RING_STREAM_SCALES=1` (every shape so) and with `ROOFLINE_RING_ANY_SLOTS=1` (ring slots of any
//! count everywhere: a `full` barrier per slot and consumer class where a slot serves several). Also MXFP4 weights
//! with a block scale outside the tensor-core row step's exact window (refused by its build, run by the engine's
//! CUDA-core kernels instead), and CUDA-graph captures of the ring GEMV beside context-wide work in another thread. Run on a GPU machine: `cargo test -p
//! roofline-gpu --release --test ring_gpu -- --ignored --nocapture`.

use half::f16;
use roofline_gpu::weight_only::nvrtc::{compile_cubin, XDtype};
use roofline_gpu::weight_only::ring::{max_k, reference, swiglu, unsupported, Epilogue, Input, RingGemv};
use roofline_gpu::weight_only::{env_list_names, excess_sq, from_bits, quantize_pack, to_bits, WoFormat};
use roofline_gpu::{random_f32, timing, Gpu, TimingConfig};

/// Whether the test runs `f`: every format, or those named in `ROOFLINE_TEST_FORMATS` (comma-separated catalog
/// names, e.g. `INT4_G128,NVFP4`).
fn runs_format(f: WoFormat) -> bool {
    env_list_names("ROOFLINE_TEST_FORMATS", f.format().name())
}

/// Whether the test runs activations of type `x`: both, or those named in `ROOFLINE_TEST_X` (`fp16` / `bf16`).
fn runs_x(x: XDtype) -> bool {
    env_list_names("ROOFLINE_TEST_X", x.name())
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn ring_gemv_matches_the_reference() {
    let gpu = Gpu::open(0).unwrap();
    let (x, silu) = (Input::X, Input::SwiGlu);
    let cases = [
        (6144usize, 4096usize, Epilogue::Norm, x, 1.0f32),
        (4096, 4096, Epilogue::Add, x, 1.0),
        (4096, 4096, Epilogue::Store, x, 300.0),
        (2056, 2048, Epilogue::Add, x, 1.0),
        (3072, 2048, Epilogue::Store, x, 0.01),
        (1000, 1024, Epilogue::Norm, x, 50.0),
        (520, 8192, Epilogue::Store, x, 1.0),
        // K = 16384: one row group of 16 warps.
        (1024, 16384, Epilogue::Add, x, 1.0),
        // More row steps than ring slots: the ring wraps (in 2 K parts at a long K).
        (14336, 4096, Epilogue::Store, x, 1.0),
        (4096, 14336, Epilogue::Add, x, 1.0),
        (28672, 4096, Epilogue::Norm, x, 1.0),
        (8192, 8192, Epilogue::Store, x, 1.0),
        // SwiGLU on load (down_proj): the gate_up row of 2K values (with the add, W x of about y0's size, so
        // that y's f16 rounding stays far below the error bound on W x).
        (4096, 14336, Epilogue::Add, silu, 4.0),
        // Llama-3-70B's down_proj: K = 28672 in 7 K parts (NF4 with its narrow pair table; NVFP4's scales
        // streamed with the weights; INT4 and MXFP4 in 11 slots, no multiple of the 7 consumer classes).
        (8192, 28672, Epilogue::Add, silu, 4.0),
        (8192, 28672, Epilogue::Store, x, 1.0),
        // 224 rows a CTA of K = 8192 in 2 K parts, the ring wrapping.
        (28672, 8192, Epilogue::Add, x, 1.0),
        (1000, 1024, Epilogue::Store, silu, 8.0),
        (4096, 4096, Epilogue::Add, silu, 4.0),
        (1000, 1024, Epilogue::Store, silu, 0.5),
    ];
    // Two and three rows of x (session 50: each weight decoded once for all of them), each row its own x (its own
    // scaling into [-1, 1), norm and residual): Llama-3.1-8B's gate_up and down_proj (with SwiGLU), a fused norm,
    // unequal shares, the ring wrapping in K parts.
    let rows = [
        (14336usize, 4096usize, Epilogue::Store, x, 1.0f32, 2usize),
        (4096, 14336, Epilogue::Add, x, 1.0, 2),
        (6144, 4096, Epilogue::Norm, x, 1.0, 3),
        (4096, 14336, Epilogue::Add, silu, 4.0, 2),
        (2056, 2048, Epilogue::Add, x, 1.0, 3),
        (1000, 1024, Epilogue::Norm, x, 50.0, 2),
        (28672, 8192, Epilogue::Store, x, 1.0, 3),
        (4096, 4096, Epilogue::Store, x, 300.0, 2),
    ];
    // 9 to 16 rows of x on the tensor cores (2 to 8 since session 57; INT4 g128: FP16 x since session 51, BF16 x since 53, bf16 products; NVFP4
    // with FP16 x since 53 and MXFP4 since 54, their block scales in the decoded pairs, streamed where their M = 1 build
    // streams them; NF4 since 54, its pair table): x's A fragments of rows g and g + 8 (row g's again
    // past M), the ring wrapping, the row sums' chunks and their two buffers, unequal shares, one row step a CTA; each
    // row's fused norm (its factor on the row sums) and residual add.
    let mma_rows = [
        (14336usize, 4096usize, Epilogue::Store, x, 1.0f32, 16usize),
        (4096, 4096, Epilogue::Store, x, 300.0, 9),
        (2056, 2048, Epilogue::Add, x, 1.0, 13),
        (1000, 1024, Epilogue::Norm, x, 50.0, 10),
        (6144, 4096, Epilogue::Norm, x, 0.01, 12),
        (1024, 3072, Epilogue::Store, x, 1.0, 11),
        (4096, 4096, Epilogue::Add, x, 1.0, 16),
        // One row step a CTA at K = 4096 (its loop unrolled to one unit since session 56: NVRTC 13.0 spilled NF4's).
        (1024, 4096, Epilogue::Add, x, 1.0, 16),
        (6144, 4096, Epilogue::Norm, x, 1.0, 16),
        // Llama-3.1-8B's gate_up: NVFP4's scales streamed beside each slot on fast memory (session 54).
        (28672, 4096, Epilogue::Norm, x, 1.0, 12),
        // 2 to 8 rows (session 57; the `rows` cases above of 2 and 3 rows at K up to 4096 run here too where a CTA
        // takes few row steps): every lane's rows g + 8 past M.
        (4096, 4096, Epilogue::Add, x, 1.0, 8),
        (1000, 1024, Epilogue::Norm, x, 50.0, 5),
        (28672, 4096, Epilogue::Store, x, 1.0, 6),
        // K past 4096 in K splits, a CTA each of a row block's cluster, which adds their sums at the end (session 59):
        // Llama-3.1-8B's down_proj (4 splits of 3584), K = 8192 with the norm (2 of 4096; the sums of squares of x
        // added across the splits), K = 16384 (4 of 4096) at unequal shares, and 2-8 rows.
        (4096, 14336, Epilogue::Add, x, 1.0, 16),
        (1000, 8192, Epilogue::Norm, x, 50.0, 12),
        (2056, 16384, Epilogue::Store, x, 1.0, 9),
        (4096, 14336, Epilogue::Norm, x, 1.0, 4),
    ];
    // FP16 weights up to 3e4 (f16's largest is 65504; the weights below are uniform in [-ws, ws) / sqrt(K)) against a
    // small x: the products' f16x2 sums must stay in range.
    let fp16_large = [
        (1024usize, 1024usize, Epilogue::Store, x, 1e-3f32, 3e4f32 * 32.0),
        (2048, 4096, Epilogue::Add, x, 1e-4, 3e4 * 64.0),
    ];
    let formats = [
        WoFormat::Int4G128,
        WoFormat::Nf4,
        WoFormat::Mxfp4,
        WoFormat::Nvfp4,
        WoFormat::Fp8E4M3,
        WoFormat::Int8,
        WoFormat::Fp16,
        WoFormat::Bf16,
    ];
    let formats: Vec<WoFormat> = formats.into_iter().filter(|f| runs_format(*f)).collect();
    let xts: Vec<XDtype> = [XDtype::F16, XDtype::Bf16].into_iter().filter(|x| runs_x(*x)).collect();
    // Every format with each x type: BF16 weights multiply x in FP32; the others take BF16 x, as FP16 x, scaled into
    // [-1, 1) and packed as f16 (exact from 2^-16 of max|x|).
    let one_row = cases.map(|(n, k, ep, input, xs)| (n, k, ep, input, xs, 1));
    let runs = one_row.into_iter().chain(rows).flat_map(|(n, k, ep, input, xs, m)| {
        let xts = xts.clone();
        formats
            .clone()
            .into_iter()
            .filter(move |f| k <= max_k(*f))
            .flat_map(move |f| xts.clone().into_iter().map(move |xt| (f, xt, m, n, k, ep, input, xs, 1.0f32)))
    });
    // INT4 with either x type, NVFP4 (since session 53), MXFP4 and NF4 (since 54) with FP16 x, and (since 55) with
    // BF16 x, converted to f16 by a power of two a row.
    let mma_runs = [
        (WoFormat::Int4G128, XDtype::F16),
        (WoFormat::Int4G128, XDtype::Bf16),
        (WoFormat::Nf4, XDtype::F16),
        (WoFormat::Mxfp4, XDtype::F16),
        (WoFormat::Nvfp4, XDtype::F16),
        (WoFormat::Nf4, XDtype::Bf16),
        (WoFormat::Mxfp4, XDtype::Bf16),
        (WoFormat::Nvfp4, XDtype::Bf16),
    ];
    let mma_runs: Vec<(WoFormat, XDtype)> =
        mma_runs.into_iter().filter(|(f, xt)| runs_format(*f) && runs_x(*xt)).collect();
    // BF16 x far past f16's range (up to 8e9, 2^33): each row's power of two brings it into f16's.
    let mma_bf16_large = [(4096usize, 4096usize, Epilogue::Add, x, 1e9f32, 16usize)];
    let mma = mma_rows.into_iter().flat_map(|(n, k, ep, input, xs, m)| {
        mma_runs.clone().into_iter().map(move |(f, xt)| (f, xt, m, n, k, ep, input, xs, 1.0f32))
    });
    let bf16_runs: Vec<(WoFormat, XDtype)> = mma_runs.iter().copied().filter(|(_, xt)| *xt == XDtype::Bf16).collect();
    let mma = mma.chain(mma_bf16_large.into_iter().flat_map(move |(n, k, ep, input, xs, m)| {
        bf16_runs.clone().into_iter().map(move |(f, xt)| (f, xt, m, n, k, ep, input, xs, 1.0f32))
    }));
    let large = fp16_large.into_iter().filter(|_| runs_format(WoFormat::Fp16)).flat_map(|(n, k, ep, input, xs, ws)| {
        xts.clone().into_iter().map(move |xt| (WoFormat::Fp16, xt, 1, n, k, ep, input, xs, ws))
    });
    let sms = gpu.sm_count;
    // Cases of several rows of x the filters let through (`wanted`) and those built (`multi`; some are refused for
    // their registers, below).
    let (mut multi, mut wanted) = (0, 0);
    // `ROOFLINE_TEST_M=2,3`: only the cases of those rows of x (the whole test takes over 5 minutes on an H200).
    let only_m: Option<Vec<usize>> = std::env::var("ROOFLINE_TEST_M").ok().filter(|v| !v.is_empty()).map(|v| {
        v.split(',').map(|t| t.trim().parse().expect("ROOFLINE_TEST_M: rows of x, comma-separated")).collect()
    });
    // `ROOFLINE_TEST_K=14336,8192`: only the cases of those K.
    let only_k: Option<Vec<usize>> = std::env::var("ROOFLINE_TEST_K").ok().filter(|v| !v.is_empty()).map(|v| {
        v.split(',').map(|t| t.trim().parse().expect("ROOFLINE_TEST_K: values of K, comma-separated")).collect()
    });
    for (f, xt, m, n, k, ep, input, xs, ws) in runs.chain(mma).chain(large) {
        if only_m.as_ref().is_some_and(|l| !l.contains(&m)) || only_k.as_ref().is_some_and(|l| !l.contains(&k)) {
            continue;
        }
        wanted += usize::from(m > 1);
        // More rows of x than a build's registers hold (long K, many warps a CTA) are refused before NVRTC; so are K
        // splits the default does not take (4 of them, but with ROOFLINE_RING_MMA_SPLIT=1; INT4 at 8-15 rows of K =
        // 8192).
        let split_off = |w: &String| k > 4096 && m > 3 && w.contains("rows of x");
        if let Some(why) = unsupported(f, m, n, k, sms).filter(|w| m > 1 && w.contains("registers") || split_off(w)) {
            println!("ring GEMV {f:?} {m}x{n}x{k}: not built ({why})");
            continue;
        }
        multi += usize::from(m > 1);
        {
            let pf =
                RingGemv::new(&gpu, (f, xt), (m, n, k), ep, input).unwrap_or_else(|e| panic!("{f:?} {m}x{n}x{k}: {e}"));
            let w: Vec<f32> = random_f32(n * k, 500 + n as u64).iter().map(|v| ws * v / (k as f32).sqrt()).collect();
            let p = quantize_pack(f, &w, n, k).unwrap();
            // x and y in the activations' type.
            let (to, from) = (to_bits(xt), from_bits(xt));
            let round = |v: Vec<f32>| -> Vec<f32> { v.iter().map(|x| from(to(*x))).collect() };
            let xk = if input == Input::SwiGlu { 2 * k } else { k };
            // Row r of x at its own scale (1, 1/8, 8 times xs), so that each row's scaling into [-1, 1) is its own.
            let x: Vec<f32> = (0..m)
                .flat_map(|r| {
                    let s = xs * [1.0, 0.125, 8.0][r % 3];
                    round(random_f32(xk, 600 + (k + r) as u64).iter().map(|v| v * s).collect())
                })
                .collect();
            let y0 = round(random_f32(m * n, 700).iter().map(|v| 4.0 * v).collect());
            let want: Vec<f64> = (0..m)
                .flat_map(|r| {
                    let xr = &x[r * xk..(r + 1) * xk];
                    let xr = if input == Input::SwiGlu { swiglu(xr) } else { xr.to_vec() };
                    reference(&p, &xr, &y0[r * n..(r + 1) * n], ep, 1e-5)
                })
                .collect();
            let s = pf.stream().clone();
            let dw = pf.upload(&p).unwrap();
            let bits = |v: &[f32]| -> Vec<u16> { v.iter().map(|x| to(*x)).collect() };
            let xd = s.clone_htod(&bits(&x)).unwrap();
            let mut outs = Vec::new();
            for _ in 0..2 {
                let mut y = s.clone_htod(&bits(&y0)).unwrap();
                pf.run(&s, &dw, &xd, &mut y, 1e-5, false).unwrap();
                outs.push(s.clone_dtoh(&y).unwrap());
            }
            assert_eq!(outs[0], outs[1], "{m}x{n}x{k} {ep:?}: a second launch gave another result");
            let got: Vec<f64> = outs[0].iter().map(|b| f64::from(from(*b))).collect();
            assert!(got.iter().all(|v| v.is_finite()), "{m}x{n}x{k} {ep:?}: non-finite output");
            let l2 = |v: &mut dyn Iterator<Item = f64>| v.map(|e| e * e).sum::<f64>().sqrt();
            // Each row of y on its own (the rows' x differ in scale 64-fold).
            for r in 0..m {
                let rows = r * n..(r + 1) * n;
                let (got, want, y0) = (&got[rows.clone()], &want[rows.clone()], &y0[rows]);
                // The error past the output type's own rounding (BF16's alone is up to 2^-8 of each output), as the
                // engine's check (`weight_only::reference_error`) reads it.
                let excess: f64 =
                    got.iter().zip(want).map(|(g, w)| excess_sq(*g, *w, f64::from(from(to(*w as f32))))).sum();
                let err = excess.max(0.0).sqrt();
                let rel = err / l2(&mut want.iter().copied());
                // The product alone (the residual add's y0 can hide an error in W x).
                let add = ep == Epilogue::Add;
                let prod = l2(&mut want.iter().zip(y0).map(|(w, y)| w - if add { f64::from(*y) } else { 0.0 }));
                println!(
                    "ring GEMV {f:?} x {xt:?} {m}x{n}x{k} row {r} {ep:?} {input:?} (|x| ~ {xs}): {} CTAs, {} slots in \
                     {} K parts, scales {}{}, {:?} registers, rel. error {rel:.2e} (of W x {:.2e})",
                    pf.ctas,
                    pf.slots,
                    pf.parts,
                    if pf.streamed_scales { "streamed" } else { "staged" },
                    if pf.mma { ", tensor cores" } else { "" },
                    pf.registers,
                    err / prod
                );
                assert!(rel <= 1e-3, "{f:?} {m}x{n}x{k} row {r} {ep:?}: relative error {rel:.2e} > 1e-3");
                assert!(err / prod <= 2e-3, "{f:?} {m}x{n}x{k} row {r} {ep:?}: error {:.2e} of W x", err / prod);
            }
        }
    }
    // Every format took the rows' cases at the shapes that leave their registers room: at least 4 a format and x type,
    // or all that `ROOFLINE_TEST_M` lets through where that is fewer (e.g. 2 a format at 12 rows).
    if only_m.as_ref().is_none_or(|l| l.iter().any(|m| *m > 1)) && only_k.is_none() {
        let bar = (formats.len() * xts.len() * 4).min(wanted);
        assert!(multi >= bar, "{multi} builds for several rows of x, of {wanted} cases ({bar} wanted)");
    }
}

/// MXFP4 on the tensor cores multiplies block scales 2^-17 to 2^7 exactly (`ring::MXFP4_MMA_WINDOW`). Weights with a
/// block of nonzero codes scaled past 2^7 (one block of each of a few rows 10^5 times the rest): the tensor-core build
/// refuses them at upload, and the engine, told to take the ring at 16 rows of x, runs them on its CUDA-core kernels
/// instead, within the error bound (its scale clamped to 2^7, that block would come out too small in its rows). The same
/// engine takes weights inside the window on the tensor cores, as exactly.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn mxfp4_outside_the_scale_window_leaves_the_tensor_cores() {
    use roofline_gpu::weight_only::ring::{mxfp4_mma_window, reference, MXFP4_MMA_WINDOW};
    use roofline_gpu::weight_only::{Tuning, Variant, WeightOnlyGemv};
    let gpu = Gpu::open(0).unwrap();
    let (m, n, k) = (16usize, 2048usize, 4096usize);
    let w: Vec<f32> = random_f32(n * k, 11).iter().map(|v| v / (k as f32).sqrt()).collect();
    let mut big = w.clone();
    for r in [5usize, 700, 2047] {
        big[r * k + 1024..r * k + 1056].iter_mut().for_each(|v| *v *= 1e5);
    }
    let inside = quantize_pack(WoFormat::Mxfp4, &w, n, k).unwrap();
    let outside = quantize_pack(WoFormat::Mxfp4, &big, n, k).unwrap();
    assert!(mxfp4_mma_window(&inside).is_ok());
    let why = mxfp4_mma_window(&outside).unwrap_err();
    assert!(why.contains("row 5 block 32"), "{why}");
    assert!(outside.scales.iter().any(|e| e > MXFP4_MMA_WINDOW.end()));
    let ring = RingGemv::new(&gpu, (WoFormat::Mxfp4, XDtype::F16), (m, n, k), Epilogue::Store, Input::X).unwrap();
    assert!(ring.mma, "MXFP4 16x{n}x{k} should build on the tensor cores");
    let refused = ring.upload(&outside).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("2^-17 to 2^7"), "the tensor-core build took weights outside its window: {refused}");
    let gemv = WeightOnlyGemv::new(&gpu, WoFormat::Mxfp4, XDtype::F16)
        .unwrap()
        .with_variant(Variant::XReg, None)
        .with_tuning(Tuning { ring: Some(true), ..Tuning::default() })
        .unwrap();
    let x: Vec<f32> = random_f32(m * k, 12).iter().map(|v| f32::from(f16::from_f32(*v))).collect();
    let s = gemv.stream().clone();
    let xd = s.clone_htod(&x.iter().map(|v| f16::from_f32(*v).to_bits()).collect::<Vec<u16>>()).unwrap();
    for (what, p) in [("inside", &inside), ("outside", &outside)] {
        let mut dw = gemv.upload(p).unwrap();
        // The kernel line's words for it (`measure`): why the ring left these weights to the other kernels.
        let why = gemv.ring_refusal(&dw, m, roofline_gpu::weight_only::Fusion::default()).unwrap();
        match what {
            "inside" => assert_eq!(why, None),
            _ => assert!(why.as_deref().is_some_and(|w| w.contains("2^-17 to 2^7")), "{why:?}"),
        }
        let mut y = s.alloc_zeros::<u16>(m * n).unwrap();
        gemv.run(&mut dw, &xd, &mut y, m).unwrap();
        let got: Vec<f64> = s.clone_dtoh(&y).unwrap().iter().map(|b| f16::from_bits(*b).to_f64()).collect();
        for r in 0..m {
            let want = reference(p, &x[r * k..(r + 1) * k], &vec![0.0; n], Epilogue::Store, 1e-5);
            let got = &got[r * n..(r + 1) * n];
            let excess: f64 = got.iter().zip(&want).map(|(g, w)| excess_sq(*g, *w, f16::from_f64(*w).to_f64())).sum();
            let l2 = want.iter().map(|v| v * v).sum::<f64>().sqrt();
            let rel = excess.max(0.0).sqrt() / l2;
            assert!(rel <= 1e-3, "MXFP4 {what} the window, {m}x{n}x{k} row {r}: relative error {rel:.2e}");
        }
        println!("MXFP4 {what} the tensor-core window: {m}x{n}x{k} matches the reference");
    }
}

/// CUDA-graph captures while another thread of the process does context-wide work: loads modules and
/// launches their kernels for the first time (a lazy load), times its own graphs (`timing::time_graph`
/// synchronizes the context first), or opens and drops the GPU (what each test of a test binary does; the
/// cuBLASLt handle's destruction synchronizes the device). Session 35 saw the last two crash the process when
/// they ran unguarded (and session 34 one capture of model-bench's GPU tests invalidated): captures and these
/// calls now exclude each other (`timing`'s context-wide lock). Every capture must end in a timed graph (one
/// invalidated from outside is captured again, `timing::capture_retries` counts them) and every call of the
/// other thread must succeed.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn captures_survive_context_work_in_other_threads() {
    use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let gpu = Gpu::open(0).unwrap();
    let (n, k, f) = (4096usize, 4096usize, WoFormat::Int4G128);
    let pf = RingGemv::new(&gpu, (f, XDtype::F16), (1, n, k), Epilogue::Store, Input::X).unwrap();
    let w: Vec<f32> = random_f32(n * k, 1).iter().map(|v| v / 64.0).collect();
    let dw = pf.upload(&quantize_pack(f, &w, n, k).unwrap()).unwrap();
    let s = pf.stream().clone();
    let xb: Vec<u16> = random_f32(k, 2).iter().map(|v| f16::from_f32(*v).to_bits()).collect();
    let xd = s.clone_htod(&xb).unwrap();
    let mut y = s.alloc_zeros::<u16>(n).unwrap();
    let ctx = s.context().clone();
    let src = "extern \"C\" __global__ void bump(float* p) { p[threadIdx.x] += 1.0f; }";
    let (major, minor) = gpu.compute_capability;
    let (cubin, _) = compile_cubin(src, "bump.cu", &[format!("--gpu-architecture=sm_{major}{minor}")]).unwrap();
    let cfg =
        TimingConfig { warmup: 1, min_runs: 3, max_runs: 3, budget_ms: 5.0, max_inner: 1, power_ms: 0.0, graph: false };
    // One step of each kind of context-wide work, on the other thread.
    type Res = Result<(), Box<dyn std::error::Error + Send + Sync>>;
    let load = |ctx: &Arc<CudaContext>| -> Res {
        let ls = ctx.new_stream()?;
        let mut buf = ls.alloc_zeros::<f32>(32)?;
        let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin.clone()))?;
        let bump = module.load_function("bump")?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `bump` takes one pointer to 32 floats; `buf` holds 32.
        unsafe { ls.launch_builder(&bump).arg(&mut buf).launch(cfg) }?;
        Ok(ls.synchronize()?)
    };
    let graphs = |ctx: &Arc<CudaContext>| -> Res {
        let mut buf = ctx.default_stream().alloc_zeros::<f32>(1 << 20)?;
        ctx.default_stream().synchronize()?;
        timing::time_graph(ctx, &cfg, 4, |st, _| Ok(st.memset_zeros(&mut buf)?))?;
        Ok(())
    };
    let open = |_: &Arc<CudaContext>| -> Res {
        drop(Gpu::open(0)?);
        Ok(())
    };
    type Work<'a> = &'a (dyn Fn(&Arc<CudaContext>) -> Res + Sync);
    let kinds: [(&str, Work); 3] = [("module loads", &load), ("graph timings", &graphs), ("GPU opens", &open)];
    // ROOFLINE_CAPTURE_KINDS: the kinds to run (their first words, comma-separated), else all.
    let only = std::env::var("ROOFLINE_CAPTURE_KINDS").ok();
    let mut failed = Vec::new();
    for (what, work) in kinds {
        if only.as_deref().is_some_and(|o| !o.split(',').any(|k| what.starts_with(k))) {
            continue;
        }
        let before = timing::capture_retries();
        let stop = AtomicBool::new(false);
        let captures = 100;
        let (done, errors) = std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                let (mut done, mut errors) = (0u32, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    match work(&ctx) {
                        Ok(()) => done += 1,
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (done, errors)
            });
            for i in 0..captures {
                if i % 10 == 0 {
                    eprintln!("{what}: capture {i}");
                }
                timing::time_graph(&ctx, &cfg, 4, |st, _| pf.run(st, &dw, &xd, &mut y, 1e-5, false))
                    .unwrap_or_else(|e| panic!("capture {i} beside {what}: {e}"));
            }
            stop.store(true, Ordering::Relaxed);
            other.join().unwrap()
        });
        let retries = timing::capture_retries() - before;
        println!(
            "{captures} captures beside {done} {what} in another thread: {retries} captured again; {} of the other \
             thread's calls failed{}",
            errors.len(),
            errors.first().map(|e| format!(" (first: {e})")).unwrap_or_default()
        );
        assert!(done + errors.len() as u32 > 0, "{what}: the other thread did nothing while the captures ran");
        if !errors.is_empty() {
            failed.push(format!("{what}: {} calls failed, first {}", errors.len(), errors[0]));
        }
    }
    assert!(failed.is_empty(), "context-wide work beside captures failed: {failed:?}");
}
