//! The ring GEMV's tests: its plans and builds without a GPU, its results and placement on one.

use super::super::nvrtc::{early_dependent_loads, parse_ptxas};
use super::*;

/// On the GPU, small rings (3 slots of MXFP4 at K = 5120, 512 threads; INT4 at K = 3072 in 3 row groups, 320
/// threads) are alone on their SM, as the big ones are (session 43: two a SM cost up to 40%).
#[test]
#[ignore = "needs an NVIDIA GPU (sm_90+)"]
fn small_rings_are_alone_on_their_sm() {
    let gpu = crate::Gpu::open(0).expect("a GPU");
    if gpu.compute_capability.0 < 9 {
        eprintln!("SKIPPED: the ring GEMV needs sm_90");
        return;
    }
    for (f, n, k) in [(WoFormat::Mxfp4, 2048, 5120), (WoFormat::Int4G128, 8192, 3072), (WoFormat::Nvfp4, 14336, 4096)] {
        let ring =
            RingGemv::new(&gpu, (f, XDtype::F16), (1, n, k), Epilogue::Store, Input::X).expect("the ring builds");
        assert_eq!(ring.resident_per_sm().expect("occupancy"), 1, "{f:?} {n}x{k}: {} slots", ring.slots);
    }
}

/// A ring CTA asks for enough shared memory that no second one fits an SM: the H100's / H200's 228 KB a SM
/// with 1 KB reserved a CTA, the A100's 164 KB.
#[test]
fn alone_bytes_leave_no_room_for_a_second_cta() {
    for (per_sm, reserved) in [(233_472, 1024), (167_936, 1024), (102_400, 0)] {
        let b = alone_bytes(per_sm, reserved);
        assert!(2 * (b + reserved) > per_sm, "{per_sm}: {b}");
        assert!(b + reserved <= per_sm, "{per_sm}: {b}");
        assert!(b % 128 == 0 && 2 * (b - 256 + reserved) <= per_sm, "{per_sm}: {b} is more than it needs");
    }
    assert_eq!(alone_bytes(233_472, 1024), 115_840);
}

/// The E2M1 factor of normalized x (wo_stream.cuh `e2m1_norm_up`, the ring's fused norm and the fused
/// FFN's phase A), `2^(14 - (33 - clz(FD - 1)) / 2)`: x after the norm is
/// at most sqrt(FD) in magnitude, so times the factor it must stay within f16 (at most 2^14, exact), and
/// the factor must not exceed the decode's 2^14 (the output takes the rest, `E2M1_UP / up`).
#[test]
fn e2m1_norm_factor_keeps_x_in_f16_for_every_k() {
    for fd in (1024..=MAX_K as u32).step_by(1024) {
        let e = 14 - (33 - (fd - 1).leading_zeros() as i32) / 2;
        assert!((0..=14).contains(&e), "K = {fd}: 2^{e}");
        let largest = f64::from(fd).sqrt() * 2f64.powi(e);
        assert!(largest <= 16384.0, "K = {fd}: |x| up to {largest} in f16");
        assert!(largest > 4096.0, "K = {fd}: a factor of 2^{e} wastes range ({largest})");
    }
}

#[test]
fn swiglu_reference_multiplies_silu_of_the_gate_by_the_up() {
    // [gate | up]: silu(0) = 0, silu(1) = 1 / (1 + e^-1), silu(-2) = -2 / (1 + e^2).
    let got = swiglu(&[0.0, 1.0, -2.0, 5.0, 3.0, 0.5]);
    let silu = |g: f64| g / (1.0 + (-g).exp());
    let want = [0.0, silu(1.0) * 3.0, silu(-2.0) * 0.5];
    assert_eq!(got.len(), 3);
    for (g, w) in got.iter().zip(want) {
        assert!((f64::from(*g) - w).abs() <= 1e-7 * w.abs().max(1.0), "{got:?} vs {want:?}");
    }
}

/// The NVFP4 tensor-core row step (wo_ring.cu `RW_MMA`, FMT 7) multiplies each decoded E2M1 value (times 2^-14, as
/// `e2m1_dev_pairs` gives it) by its block's E4M3 scale in f16 (`mul.rn.f16x2`) and sums the blocks in the same
/// chains: that product must be exact in f16 for every code and every finite scale.
#[test]
fn nvfp4_block_scale_times_decoded_value_is_exact_in_f16() {
    use half::f16;
    use roofline_quant::minifloat::{E2M1, E4M3};
    let mut checked = 0;
    for code in 0..16 {
        let v = f64::from(E2M1.decode(code)) * 2f64.powi(-14);
        let p = f16::from_f64(v);
        assert_eq!(p.to_f64(), v, "E2M1 code {code}");
        for b in 0..=255u32 {
            let s = E4M3.decode(b);
            if !s.is_finite() || s.abs() > 448.0 {
                continue;
            }
            let sh = f16::from_f32(s);
            assert_eq!(sh.to_f32(), s, "E4M3 byte {b:#x}");
            // f16 x f16 is exact in f32; rounding that to f16 is what mul.rn.f16x2 gives.
            let prod = f16::from_f32(p.to_f32() * sh.to_f32());
            assert_eq!(prod.to_f64(), v * f64::from(s), "E2M1 code {code} x E4M3 byte {b:#x}");
            checked += 1;
        }
    }
    assert!(checked >= 16 * 252, "{checked} products checked");
}

/// The MXFP4 tensor-core row step (wo_ring.cu `RW_MX_SHIFT`, `RW_MX_BIAS`) multiplies each decoded E2M1 value
/// (times 2^-14) by the f16 whose exponent field is e - 104 clamped to 0..=30: exactly 2^(e - 127 + 8) in
/// [`MXFP4_MMA_WINDOW`], where every product is exact in f16 (the epilogue's 2^6 takes the factors back); below
/// it the smallest code's product is not. [`mxfp4_mma_window`] refuses weights with a nonzero block outside.
#[test]
fn mxfp4_scale_window_products_are_exact_in_f16() {
    use half::f16;
    use roofline_quant::minifloat::E2M1;
    let field = |e: u8| (i32::from(e) - (127 - 15 - 8)).clamp(0, 30) as u16;
    for e in 0..=255u8 {
        let s = f16::from_bits(field(e) << 10);
        assert!(s.is_finite(), "E8M0 {e}");
        if !MXFP4_MMA_WINDOW.contains(&e) {
            continue;
        }
        assert_eq!(s.to_f64(), 2f64.powi(i32::from(e) - 127 + 8), "E8M0 {e}");
        for code in 1..8u32 {
            let v = f64::from(E2M1.decode(code));
            let p = f16::from_f64(v * 2f64.powi(-14));
            // f16 x f16 is exact in f32; rounding that to f16 is what mul.rn.f16x2 gives.
            let prod = f16::from_f32(p.to_f32() * s.to_f32());
            assert_eq!(prod.to_f64() * 64.0, v * 2f64.powi(i32::from(e) - 127), "E2M1 {code} x E8M0 {e}");
        }
    }
    // Just below the window the smallest magnitude (0.5) falls under f16's smallest subnormal.
    let below = f16::from_f32(f16::from_f64(0.5 * 2f64.powi(-14)).to_f32() * f16::from_bits(field(109) << 10).to_f32());
    assert_ne!(below.to_f64() * 64.0, 0.5 * 2f64.powi(109 - 127));
    // Packed weights: blocks of the usual size pass; one nonzero block scaled 2^-20 is refused, a zero one not.
    let (n, k) = (16, 256);
    let w: Vec<f32> = crate::random_f32(n * k, 7).iter().map(|v| v / 16.0).collect();
    let p = pack::quantize_pack(WoFormat::Mxfp4, &w, n, k).unwrap();
    assert!(mxfp4_mma_window(&p).is_ok());
    let mut tiny = w.clone();
    tiny[3 * k + 64..3 * k + 96].iter_mut().for_each(|v| *v *= 1e-5);
    let e = mxfp4_mma_window(&pack::quantize_pack(WoFormat::Mxfp4, &tiny, n, k).unwrap()).unwrap_err();
    assert!(e.contains("row 3 block 2"), "{e}");
    let mut zero = w;
    zero[5 * k..5 * k + 32].iter_mut().for_each(|v| *v = 0.0);
    assert!(mxfp4_mma_window(&pack::quantize_pack(WoFormat::Mxfp4, &zero, n, k).unwrap()).is_ok());
}

/// The tensor-core row step's sums buffers (session 56): 4 row steps each where a CTA takes 8 to 42 row steps, 2
/// elsewhere (a CTA of 4 steps keeps two buffers to alternate), and the build and its shared-memory layout agree.
#[test]
fn sums_buffers_take_four_row_steps_where_a_cta_takes_8_to_42() {
    if std::env::var_os("ROOFLINE_RING_MMA_CHUNK").is_some() {
        return;
    }
    for (per, chunk) in [(1, 2), (4, 2), (7, 2), (8, 4), (14, 4), (28, 4), (42, 4), (43, 2), (56, 2)] {
        assert_eq!(mma_chunk(per), chunk, "{per} row steps a CTA");
    }
    let (i4, ep) = (WoFormat::Int4G128, (Epilogue::Store, Input::X));
    let (narrow, wide) =
        (mma_layout(i4, (16, 4096), 4, false, 1).unwrap(), mma_layout(i4, (16, 4096), 14, false, 1).unwrap());
    assert!(options(90, (i4, XDtype::F16), (16, 4096), 14, wide, (1, 1, 2, true, false), ep)
        .contains(&"-DRW_MMA_CH=4".into()));
    assert!(options(90, (i4, XDtype::F16), (16, 4096), 4, narrow, (1, 1, 2, true, false), ep)
        .contains(&"-DRW_MMA_CH=2".into()));
    // Both buffers of 4 steps at 16 rows and K = 4096: 64 KB beside the 14 steps' staged scales and the slots.
    let tables = table_bytes_per_row(i4, 4096) * 14 * STEP_ROWS + 2 * 16 * 16 * 4 * STEP_ROWS * 4 + 16;
    assert_eq!(wide.smem, wide.slots * (slot_bytes(i4, 4096, 1) + STEP_ROWS * mma_pad()) + tables);
}

/// BF16 x on the tensor-core row step (session 55): NF4, MXFP4 and NVFP4 convert it to f16 (`RW_MMA_XF16`), INT4
/// multiplies it as bf16 unless `ROOFLINE_RING_MMA_XF16=1`; FP16 x is never converted, and only tensor-core
/// builds are told.
#[test]
fn bf16_x_is_converted_to_f16_for_the_formats_decoded_to_f16() {
    let (bf16, f16) = (XDtype::Bf16, XDtype::F16);
    for f in [WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4] {
        assert!(mma_xf16(f, bf16) && !mma_xf16(f, f16), "{f:?}");
    }
    if std::env::var_os("ROOFLINE_RING_MMA_XF16").is_none() {
        assert!(!mma_xf16(WoFormat::Int4G128, bf16));
    }
    let ep = (Epilogue::Store, Input::X);
    let build = |f, m, mma| {
        let l = mma_layout(f, (m, 4096), 14, false, 1).unwrap();
        options(90, (f, bf16), (m, 4096), 14, l, (1, 1, 2, mma, false), ep)
    };
    assert!(build(WoFormat::Nf4, 16, true).contains(&"-DRW_MMA_XF16=1".to_string()));
    assert!(!build(WoFormat::Nf4, 1, false).iter().any(|o| o.starts_with("-DRW_MMA_XF16")));
}

/// INT4's CUDA-core row steps take the subnormal decode (session 60); its tensor-core row step and the other
/// formats do not.
#[test]
fn int4_cuda_core_row_steps_take_the_subnormal_decode() {
    if std::env::var_os("ROOFLINE_RING_SUBN").is_some() {
        return;
    }
    let ep = (Epilogue::Store, Input::X);
    let subn = |f, m, mma| {
        let l = mma_layout(f, (m, 4096), 14, false, 1).unwrap();
        options(90, (f, XDtype::F16), (m, 4096), 14, l, (1, 1, 2, mma, false), ep).contains(&"-DRW_SUBN=1".to_string())
    };
    assert!(subn(WoFormat::Int4G128, 1, false) && subn(WoFormat::Int4G128, 2, false));
    assert!(!subn(WoFormat::Int4G128, 16, true));
    assert!(!subn(WoFormat::Nf4, 1, false) && !subn(WoFormat::Mxfp4, 1, false));
}

/// INT4's subnormal row step adds its f16 sums on the tensor cores (session 61, wo_stream.cuh `row_step_subn`): one
/// `mma.sync` a row pair and 2 words, 8 a row step at one row of x, 16 at two; NF4's too since session 65
/// (`row_step_nf4tc`: one a row pair, 8 a row step at two rows where the CUDA cores take them at K up to 4096; none at
/// one row, where it lost); MXFP4's and NVFP4's CUDA-core row steps use none (NVFP4's version was slower, session 61
/// r3). Skipped without NVRTC or cuobjdump.
#[test]
fn int4_and_nf4_row_steps_sum_on_the_tensor_cores() {
    if let Err(e) = nvrtc_available() {
        eprintln!("SKIPPED int4_and_nf4_row_steps_sum_on_the_tensor_cores: {e}");
        return;
    }
    if ["ROOFLINE_RING_SUBN", "ROOFLINE_RING_NF4TC", "ROOFLINE_NVRTC_EXTRA"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        return;
    }
    let hmma_n = |f, m, n| {
        let b = compile_ring(90, 132, 4800.0, (f, XDtype::F16), (m, n, 4096), (Epilogue::Store, Input::X))
            .unwrap_or_else(|e| panic!("{f:?} {m}: {e}"));
        assert!(!b.plan.mma, "{f:?} at {m} rows: the CUDA-core ring");
        super::super::nvrtc::disassemble(&b.cubin)
            .unwrap_or_else(|e| panic!("{f:?} {m}: {e}"))
            .map(|sass| sass.lines().filter(|l| l.contains("HMMA.16816.F32")).count())
    };
    let hmma = |f, m| hmma_n(f, m, 14336);
    let Some(one) = hmma(WoFormat::Int4G128, 1) else {
        eprintln!("SKIPPED int4_and_nf4_row_steps_sum_on_the_tensor_cores: no cuobjdump");
        return;
    };
    // ptxas may split the loop, so at least a row step's worth.
    assert!(one >= 8, "INT4 at 1 row: {one} HMMA");
    assert!(hmma(WoFormat::Int4G128, 2).is_some_and(|n| n >= 16));
    // NF4's by default only at two rows and more on the CUDA cores (K up to 4096: the LM head's case).
    assert_eq!(hmma(WoFormat::Nf4, 1), Some(0));
    // NF4 at two rows takes the tensor-core ring up to 28 row steps a CTA; 57344 rows are 55.
    assert!(hmma_n(WoFormat::Nf4, 2, 57344).is_some_and(|n| n >= 8));
    assert_eq!(hmma(WoFormat::Nvfp4, 1), Some(0));
    assert_eq!(hmma(WoFormat::Mxfp4, 1), Some(0));
}

/// The ring's experiment switches still build, without spills (session 62): `EXP_RING_TRACE` (the timeline the
/// `ring_trace` example prints, from the CTAs' clocks: the globaltimer and %clock reads are in the SASS where
/// cuobjdump runs) and `RW_EARLY` (the producer's copies before the scale tables'), for the 4-bit formats' CUDA-core
/// ring at one row of x. Skipped without NVRTC.
#[test]
fn ring_probe_builds_compile() {
    if let Err(e) = nvrtc_available() {
        eprintln!("SKIPPED ring_probe_builds_compile: {e}");
        return;
    }
    if std::env::var_os("ROOFLINE_NVRTC_EXTRA").is_some() {
        return;
    }
    for f in [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4] {
        for defines in [["-DEXP_RING_TRACE=1"], ["-DRW_EARLY=1"]] {
            let store = (Epilogue::Store, Input::X);
            let b = compile_ring_with(90, (132, 4800.0), (f, XDtype::F16), (1, 14336, 4096), store, None, &defines)
                .unwrap_or_else(|e| panic!("{f:?} {defines:?}: {e}"));
            assert!(!b.plan.mma, "{f:?}: the CUDA-core ring");
            let (_, spill, _) = parse_ptxas(&b.log);
            assert_eq!(spill, Some(0), "{f:?} {defines:?} spills: {}", b.log);
            if defines[0].contains("TRACE") {
                if let Ok(Some(sass)) = super::super::nvrtc::disassemble(&b.cubin) {
                    assert!(sass.contains("GLOBALTIMER") && sass.contains("CLOCK"), "{f:?}: no timer reads");
                }
            }
        }
    }
    // Session 63: the CTAs' shares from a table (`RW_SPLIT_TABLE`, `ROOFLINE_RING_SPLIT`), read from constant memory.
    let table = split_defines(&[14; 128]);
    let store = (Epilogue::Store, Input::X);
    let b = compile_ring_with(
        90,
        (132, 4800.0),
        (WoFormat::Int4G128, XDtype::F16),
        (1, 14336, 4096),
        store,
        None,
        &[table.as_str()],
    )
    .unwrap_or_else(|e| panic!("INT4 with a split table: {e}"));
    assert_eq!(parse_ptxas(&b.log).1, Some(0), "INT4 with a split table spills: {}", b.log);
    if let Ok(Some(sass)) = super::super::nvrtc::disassemble(&b.cubin) {
        assert!(sass.contains("c[0x3]"), "INT4 with a split table: no constant-bank read of the table");
    }
}

/// `ROOFLINE_RING_SPLIT`'s shares (session 63): whole numbers from 1, comma-separated, into the kernel's table of prefix
/// sums.
#[test]
fn split_shares_parse_into_the_kernels_table() {
    assert_eq!(parse_split("14, 13,15").unwrap(), vec![14, 13, 15]);
    for bad in ["", "14,,13", "14,0", "14,x", "-1"] {
        assert!(parse_split(bad).unwrap_err().contains("ROOFLINE_RING_SPLIT"), "{bad:?}");
    }
    assert_eq!(split_defines(&[14, 13, 15]), "-DRW_SPLIT_TABLE=0,14,27,42");
}

/// 9 to 16 rows of x on the tensor cores (session 51): INT4 g128 with FP16 x (BF16 x since session 53; NVFP4 with
/// FP16 x too, MXFP4 and NF4 since session 54; the three with BF16 x converted to f16 since session 55) and any
/// epilogue but SwiGLU on load, K up to 4096; the default on fast memory up to 128 row steps a CTA
/// (`Variant::best_in_step_on` leaves it to model-bench, which knows which linear is down_proj).
#[test]
fn four_bit_takes_the_tensor_core_ring_from_2_rows_at_small_n() {
    use super::super::Variant;
    let (i4, f16, bf16) = (WoFormat::Int4G128, XDtype::F16, XDtype::Bf16);
    let store = (Epilogue::Store, Input::X);
    if std::env::var_os("ROOFLINE_RING_MMA").is_none() {
        assert!(!mma_plan(i4, 1, 4096));
    }
    // From 2 rows (session 57): at 2 where a CTA takes up to 7 row steps (NF4 28), from 3 always.
    assert!(mma_plan(i4, 2, 4096) && mma_plan(i4, 3, 4096) && mma_plan(i4, 8, 4096));
    assert!(
        plan_on(i4, 2, 6144, 4096, 132, 4900.0).unwrap().mma && !plan_on(i4, 2, 14336, 4096, 132, 4900.0).unwrap().mma
    );
    assert!(plan_on(WoFormat::Nf4, 2, 28672, 4096, 132, 4900.0).unwrap().mma);
    assert!(!plan_on(WoFormat::Nf4, 2, 57344, 4096, 132, 4900.0).unwrap().mma);
    assert!(plan_on(i4, 3, 28672, 4096, 132, 4900.0).unwrap().mma);
    assert!(mma_plan(i4, 9, 4096) && mma_plan(i4, 16, 1024) && !mma_plan(i4, 17, 4096));
    assert!(!mma_plan(WoFormat::Fp8E4M3, 16, 4096));
    // Past K = 4096 in 2 K splits (session 59), not in 4 (but with ROOFLINE_RING_MMA_SPLIT=1), nor INT4 at 8-15 rows
    // in splits of 4096 (their builds spill).
    assert_eq!(
        [4096, 5120, 8192, 14336, 16384, 11008, 28672].map(mma_splits),
        [Some(1), Some(2), Some(2), Some(4), Some(4), None, None]
    );
    assert!(mma_plan(i4, 16, 5120) && mma_plan(i4, 16, 8192) && mma_plan(i4, 9, 5120) && mma_plan(i4, 7, 8192));
    assert!(!mma_plan(i4, 2, 8192) && !mma_plan(WoFormat::Nf4, 2, 14336));
    assert!(!mma_plan(i4, 16, 14336) && !mma_plan(i4, 8, 8192) && !mma_plan(i4, 15, 8192));
    assert!(mma_plan(WoFormat::Nf4, 16, 14336) && !mma_plan(WoFormat::Nvfp4, 16, 14336));
    assert!(!mma_plan(WoFormat::Nf4, 12, 16384) && mma_plan(WoFormat::Nf4, 12, 8192));
    assert!(mma_plan(WoFormat::Nvfp4, 12, 8192) && mma_plan(WoFormat::Nf4, 9, 8192));
    // A row block of 2 K splits a cluster: 66 of them on 132 SMs, each CTA half of K.
    let p = plan_on(i4, 16, 28672, 8192, 132, 4900.0).unwrap();
    assert!(p.mma && (p.splits, p.ctas, p.per, p.fd(8192)) == (2, 132, 55, 4096), "{p:?}");
    assert_eq!((split_blocks(132, 2), split_blocks(132, 4)), (66, 33));
    // The clusters the device holds at once bound the row blocks (`RingGemv::build`).
    let p = plan_with(i4, (16, 28672, 8192), (132, 4900.0), true, Some(60)).unwrap();
    assert!((p.splits, p.ctas, p.per) == (2, 120, 60), "{p:?}");
    // The default's K splits (session 59 r3, r4): from 9 rows up to 56 steps a CTA, INT4 at 16 rows with FP16 x.
    let nv = WoFormat::Nvfp4;
    let split = |(f, x), (m, n, k)| mma_auto((f, x), (m, n, k), 132, 4900.0);
    assert!(split((WoFormat::Nf4, f16), (12, 8192, 8192)) && split((nv, bf16), (16, 8192, 8192)));
    assert!(
        split((i4, f16), (16, 28672, 8192)) && split((i4, f16), (16, 5120, 5120)) && split((nv, f16), (9, 8192, 8192))
    );
    assert!(
        !split((i4, f16), (16, 57344, 8192))
            && !split((i4, f16), (4, 8192, 8192))
            && !split((nv, f16), (8, 8192, 8192))
    );
    assert!(
        !split((i4, bf16), (16, 8192, 8192))
            && !split((i4, f16), (9, 13824, 5120))
            && !split((nv, f16), (16, 4096, 14336))
    );
    assert!(split((WoFormat::Nf4, f16), (16, 4096, 14336)) && split((WoFormat::Nf4, bf16), (9, 4096, 14336)));
    // NF4 (session 54) with FP16 x, its wide pair table after the ring and the tables; with BF16 x converted to
    // f16 (session 55).
    let nf = WoFormat::Nf4;
    assert!(mma_takes((nf, f16), 16, 4096, store) && mma_takes((nf, bf16), 16, 4096, store));
    let l = plan_on(nf, 16, 14336, 4096, 132, 4900.0).unwrap().layout;
    assert!(l.nf4_wide_at.is_some_and(|at| at % 128 == 0 && at + NF4_WIDE_TABLE_BYTES == l.smem));
    assert!(l.smem <= NF4_SMEM_BUDGET && l.slots >= 2);
    // MXFP4 (session 54) with FP16 x, as NVFP4, and BF16 x (session 55).
    let mx = WoFormat::Mxfp4;
    assert!(mma_plan(mx, 12, 4096) && mma_takes((mx, f16), 12, 4096, store) && mma_takes((mx, bf16), 12, 4096, store));
    assert!(mma_auto((mx, f16), (16, 14336, 4096), 132, 4900.0));
    // NVFP4 (session 53) with FP16 x, and BF16 x (session 55).
    let nv = WoFormat::Nvfp4;
    assert!(mma_plan(nv, 16, 4096) && mma_takes((nv, f16), 16, 4096, store) && mma_takes((nv, bf16), 16, 4096, store));
    assert!(plan_on(nv, 16, 14336, 4096, 132, 4900.0).unwrap().mma);
    // Where its M = 1 build streams the scales (since session 54), the tensor-core row step reads them streamed.
    let p = plan_on(nv, 16, 28672, 4096, 132, 4900.0).unwrap();
    assert!(streams_scales(nv, 28672, 4096, 132, 4900.0) && p.mma && p.layout.streamed_scales);
    assert!(!plan_on(nv, 16, 14336, 4096, 132, 4900.0).unwrap().layout.streamed_scales);
    assert!(
        mma_auto((nv, f16), (16, 14336, 4096), 132, 4900.0) && mma_auto((nv, bf16), (16, 14336, 4096), 132, 4900.0)
    );
    let h200 = (132, 90, 4900.0);
    assert_eq!(Variant::best_on(nv, f16, 12, 14336, 4096, h200), Variant::XReg);
    assert_eq!(Variant::best_on(nv, bf16, 12, 14336, 4096, h200), Variant::XReg);
    assert_eq!(Variant::best_on(nv, f16, 16, 28672, 4096, h200), Variant::XReg);
    assert!(mma_takes((i4, f16), 16, 4096, store) && mma_takes((i4, bf16), 16, 4096, store));
    assert!(mma_takes((i4, f16), 16, 4096, (Epilogue::Add, Input::X)));
    assert!(mma_takes((i4, f16), 16, 4096, (Epilogue::Norm, Input::X)));
    assert!(!mma_takes((i4, f16), 16, 4096, (Epilogue::Add, Input::SwiGlu)));
    // One row group of 16 warps, the producer and the epilogue warp; the row sums in two buffers of 4 steps (14
    // steps a CTA, `mma_chunk`), which leave 7 slots (9 with buffers of 2).
    let p = plan_on(i4, 16, 14336, 4096, 132, 4900.0).unwrap();
    assert!(p.mma && (p.groups, p.parts, p.per) == (1, 1, 14) && cta_threads(i4, 4096, 1, true) == 576);
    if std::env::var_os("ROOFLINE_RING_MMA_CHUNK").is_none() {
        assert_eq!(p.layout.slots, 7);
    }
    // The default: fast memory, either x, up to 128 steps a CTA (28672 rows: 28 on 132 SMs; the LM head's 122 since
    // session 58).
    let auto = |m, n, k, peak| mma_auto((i4, f16), (m, n, k), 132, peak);
    assert!(auto(16, 4096, 4096, 4900.0) && auto(9, 2048, 4096, 4900.0) && auto(12, 14336, 4096, 4900.0));
    assert!(auto(16, 28672, 4096, 4900.0) && auto(16, 57344, 4096, 4900.0) && auto(16, 128256, 4096, 4900.0));
    // From 9 rows up to 128 steps (session 58: the LM head's 122), not past them.
    assert!(auto(9, 128256, 4096, 4900.0) && !auto(16, 8 * 132 * 129, 4096, 4900.0));
    assert!(!auto(16, 4096, 4096, 3352.0) && auto(8, 4096, 4096, 4900.0) && auto(3, 14336, 4096, 4900.0));
    // At 2-8 rows up to 24 steps a CTA of K = 4096 (INT4, MXFP4, NVFP4; session 58), NF4 up to 128.
    assert!(!auto(8, 28672, 4096, 4900.0) && mma_auto((WoFormat::Nf4, f16), (8, 28672, 4096), 132, 4900.0));
    assert!(auto(8, 8 * 132 * 24, 4096, 4900.0) && !auto(8, 8 * 132 * 25, 4096, 4900.0));
    assert!(auto(4, 8 * 132 * 16, 4096, 4900.0) && auto(8, 21120, 4096, 4900.0));
    // MXFP4 and NVFP4 with BF16 x up to 128 at K = 4096 (session 58 r4, r5); INT4 with BF16 x, and K = 2048, keep
    // theirs.
    for f in [WoFormat::Mxfp4, WoFormat::Nvfp4] {
        assert!(
            mma_auto((f, bf16), (8, 59136, 4096), 132, 4900.0) && !mma_auto((f, f16), (8, 28672, 4096), 132, 4900.0)
        );
        assert!(!mma_auto((f, bf16), (8, 8 * 132 * 11, 2048), 132, 4900.0));
    }
    assert!(
        !mma_auto((i4, bf16), (8, 28672, 4096), 132, 4900.0) && mma_auto((i4, bf16), (8, 25344, 4096), 132, 4900.0)
    );
    assert!(auto(2, 6144, 4096, 4900.0) && !auto(2, 14336, 4096, 4900.0));
    // Fewer steps at a shorter K (session 58 r9): 10 at K = 2048, 15 at 3072.
    assert!(auto(8, 8 * 132 * 10, 2048, 4900.0) && !auto(8, 8 * 132 * 11, 2048, 4900.0));
    assert!(auto(8, 8 * 132 * 15, 3072, 4900.0) && !auto(8, 8 * 132 * 16, 3072, 4900.0));
    assert!(mma_auto((i4, bf16), (16, 4096, 4096), 132, 4900.0));
    assert!(mma_auto((i4, bf16), (16, 128256, 4096), 132, 4900.0));
    assert!(auto_rows((i4, f16), (16, 4096, 4096), 132, 4900.0));
    assert_eq!(Variant::best_on(i4, f16, 16, 4096, 4096, h200), Variant::XReg);
    assert_ne!(Variant::best_in_step_on(i4, f16, 16, 4096, 4096, h200), Variant::XReg);
    assert_eq!(Variant::best_on(i4, f16, 16, 14336, 4096, h200), Variant::XReg);
    assert_eq!(Variant::best_on(i4, f16, 16, 28672, 4096, h200), Variant::XReg);
    assert_eq!(Variant::best_on(i4, f16, 16, 128256, 4096, h200), Variant::XReg);
    assert_ne!(Variant::best_on(i4, f16, 8, 128256, 4096, h200), Variant::XReg);
    // Refused with a message past what it takes.
    let fp8 = plan_on(WoFormat::Fp8E4M3, 16, 4096, 4096, 132, 4900.0).unwrap_err();
    assert!(fp8.contains("1 to 3 rows of x") && fp8.contains("4-bit weights up to 16"), "{fp8}");
}

#[test]
fn llama_8b_qkv_and_o_fit_an_h100() {
    // o_proj 4096 x 4096: 512 steps, 4 per CTA, 128 CTAs; qkv 6144 x 4096: 768 steps, 6 per CTA.
    assert_eq!(grid(4096, 132), (128, 4));
    assert_eq!(grid(6144, 132), (128, 6));
    // o_proj: all 4 steps in the ring; 1 x 14336 x 4096: 14 steps, 10 slots fit beside the tables.
    let staged = |slots, smem| Some(Layout { slots, smem, streamed_scales: false, nf4_wide_at: None });
    assert_eq!(
        layout((WoFormat::Int4G128, 1), 4096, 4, 2, 1, false),
        staged(4, 4 * 16384 + 32 * 32 * 5 / 2 + 4 * 32 * 4)
    );
    let Layout { slots, smem, streamed_scales, .. } = layout((WoFormat::Int4G128, 1), 4096, 14, 2, 1, false).unwrap();
    assert_eq!(slots, 10);
    assert!(smem <= SMEM_BUDGET && slots % 2 == 0 && !streamed_scales);
    // NF4's ring and tables beside its 64 KB pair table within the H100's 227 KB per CTA; the table after
    // them, aligned, within the CTA's dynamic shared memory.
    let Layout { slots, smem, nf4_wide_at, .. } = layout((WoFormat::Nf4, 1), 4096, 14, 2, 1, false).unwrap();
    assert_eq!(slots, 8);
    assert!(smem <= 227 * 1024 - 1024);
    let off = nf4_wide_at.unwrap();
    assert!(off % 128 == 0 && off >= slots * 16384 + tables_bytes(WoFormat::Nf4, 4096, 112));
    assert!(off + NF4_WIDE_TABLE_BYTES <= smem);
    assert_eq!(layout((WoFormat::Nf4, 1), 4096, 14, 3, 1, false).map(|l| l.slots), Some(9));
    assert!(unsupported(WoFormat::Int4G128, 1, 4096, 4096, 132).is_none());
    assert!(unsupported(WoFormat::Int4G128, 1, 14336, 4096, 132).is_none());
    // The LM head's 976 rows per CTA: their tables (78 KB) still leave a ring.
    assert!(unsupported(WoFormat::Int4G128, 1, 128256, 4096, 132).is_none());
    // Row sums too large for any ring (7944 rows a CTA); other formats, batches or shapes.
    assert!(unsupported(WoFormat::Int4G128, 1, 1 << 20, 8192, 132).unwrap().contains("no room"));
    assert!(unsupported(WoFormat::Bf16, 1, 4096, 4096, 132).is_none());
    assert!(unsupported(WoFormat::Int4G128, 2, 4096, 4096, 132).is_none());
    assert!(unsupported(WoFormat::Int4G128, MAX_M, 14336, 4096, 132).is_none());
    assert!(unsupported(WoFormat::Int4G128, MAX_M + 1, 4096, 14336, 132).unwrap().contains("rows of x"));
    assert!(unsupported(WoFormat::Int4G128, 0, 4096, 4096, 132).unwrap().contains("rows of x"));
    // Two rows of x need more registers than a CTA of 29 warps leaves (Llama-3-70B's down_proj: 64 a thread)
    // or of 25 (K = 8192 in 3 row groups); FP8's fit at 4096 x 4096, not its three at 4096 x 14336.
    for (n, k) in [(8192, 28672), (1024, 12288)] {
        assert!(unsupported(WoFormat::Int4G128, 2, n, k, 132).unwrap().contains("registers"), "{n}x{k}");
    }
    assert!(unsupported(WoFormat::Fp8E4M3, 2, 4096, 4096, 132).is_none());
    assert!(unsupported(WoFormat::Fp8E4M3, 3, 4096, 14336, 132).unwrap().contains("registers"));
    assert_eq!((register_room(416), register_room(928), register_room(288), register_room(32)), (128, 64, 168, 255));
    // MXFP4's LM head at K = 4096: staged tables (below fast memory) leave two rows of x no ring; on fast memory
    // its scales stream (the M = 1 build's choice) and they do.
    assert!(unsupported(WoFormat::Mxfp4, 2, 128256, 4096, 132).unwrap().contains("no room"));
    assert!(unsupported_on(WoFormat::Mxfp4, (2, 128256, 4096), 132, 4917.0).is_none());
    assert!(unsupported(WoFormat::Int4G128, 1, 4096, 4000, 132).unwrap().contains("1024"));
    assert!(unsupported(WoFormat::Int4G128, 1, 4092, 4096, 132).unwrap().contains("multiple of 8"));
    // The engine's default: large N only.
    let i4 = WoFormat::Int4G128;
    assert!(auto(i4, 14336, 4096, 132) && auto(i4, 128256, 4096, 132) && auto(i4, 28672, 4096, 132));
    assert!(!auto(i4, 4096, 4096, 132) && !auto(i4, 6144, 4096, 132));
    // Long K (one row group, 2 K parts): down_proj's 4 steps a CTA and Llama-3-70B's K = 8192; not with
    // fewer steps a CTA, an odd count of K slices or K under 8192.
    assert!(long_k(4096, 14336, 132) && long_k(8192, 8192, 132) && long_k(28672, 8192, 132));
    assert!(!long_k(2048, 14336, 132) && !long_k(4096, 9216, 132) && !long_k(14336, 4096, 132));
    // The most parts of 4096-7168 values: 2 at K = 8192, 10240 and 14336, 3 at 12288, 4 at 16384, 7 at
    // Llama-3-70B's down_proj (28672: 7 x 4096, not 4 x 7168); none where the slices split only into parts
    // under 4096 or over 7168 (9216: 3 x 3072; 11264: 11 x 1024; 22528: 2 x 11264 or 11 x 2048).
    let ks = [8192, 10240, 14336, 12288, 16384, 24576, 28672, 9216, 11264, 22528];
    let parts: Vec<_> = ks.map(long_k_parts).to_vec();
    assert_eq!(parts, [Some(2), Some(2), Some(2), Some(3), Some(4), Some(6), Some(7), None, None, None]);
    assert!(long_k(8192, 28672, 132) && auto(i4, 8192, 28672, 132) && k_parts(i4, 8192, 28672, 132) == 7);
    assert!(unsupported(i4, 1, 8192, 32768, 132).unwrap().contains("31744"));
    // NF4's wide pair table where a ring fits beside it with the staged scales; at K = 28672 (64 rows of
    // 896 bytes of scales a CTA) only the narrow one leaves room: in its 7 K parts 8 slots of a seventh of
    // a step. Streamed with the weights (1024 bytes a slot) the scales leave as many beside the wide table:
    // staged, nothing to gain. In 4 K parts streaming gains a slot (5 to 4; any count in one row group).
    let nf4 = WoFormat::Nf4;
    let wide = |k, per, parts| layout_for((nf4, 1), k, per, 1, parts, false).and_then(|l| l.nf4_wide_at).is_some();
    assert!(wide(14336, 4, 2) && wide(8192, 55, 2) && !wide(28672, 8, 7) && !wide(28672, 8, 4));
    let narrow = layout_for((nf4, 1), 28672, 8, 1, 7, false).unwrap();
    assert!(!narrow.streamed_scales && narrow.slots == 8 && narrow.nf4_wide_at.is_none());
    let l = layout_for((nf4, 1), 28672, 8, 1, 7, true).unwrap();
    assert!(l.streamed_scales && l.slots == 8 && l.nf4_wide_at.is_some());
    assert!(layout((nf4, 1), 28672, 8, 1, 7, false) == Some(narrow) && auto(nf4, 8192, 28672, 132));
    let four = layout((nf4, 1), 28672, 8, 1, 4, false).unwrap();
    assert!(four.streamed_scales && four.slots == 5 && layout_for((nf4, 1), 28672, 8, 1, 4, false).unwrap().slots == 4);
    assert_eq!(slot_scale_bytes(nf4, 28672, 7), 28672 / 64 * 8 * 2 / 7);
    assert!(!options(
        90,
        (nf4, XDtype::F16),
        (1, 28672),
        8,
        narrow,
        (7, 1, 0, false, false),
        (Epilogue::Add, Input::SwiGlu)
    )
    .iter()
    .any(|o| o.starts_with("-DNF4_WIDE") || o.starts_with("-DRW_NF4_OFF") || o == "-DRW_SSTREAM=1"));
    assert!(options(90, (nf4, XDtype::F16), (1, 28672), 8, l, (7, 1, 0, false, false), (Epilogue::Add, Input::SwiGlu))
        .contains(&"-DRW_SSTREAM=1".into()));
    // NVFP4's 1792 bytes of scales a row there leave no ring staged; streamed 10 slots.
    assert!(layout_for((WoFormat::Nvfp4, 1), 28672, 8, 1, 7, false).is_none());
    assert_eq!(
        layout((WoFormat::Nvfp4, 1), 28672, 8, 1, 7, false).map(|l| (l.slots, l.streamed_scales)),
        Some((10, true))
    );
    assert!(unsupported(WoFormat::Nvfp4, 1, 8192, 28672, 132).is_none() && auto(WoFormat::Nvfp4, 8192, 28672, 132));
    assert!(auto(i4, 4096, 14336, 132) && auto(i4, 4096, 8192, 132) && !auto(i4, 2048, 14336, 132));
    assert_eq!((row_groups(i4, 4096, 14336, 132), k_parts(i4, 4096, 14336, 132)), (1, 2));
    assert_eq!((row_groups(i4, 2048, 14336, 132), k_parts(i4, 2048, 14336, 132)), (2, 1));
    // 4 steps of 57 KB a CTA: 6 slots of half a step (172 KB) beside the tables, in whole steps 2.
    assert_eq!(layout((i4, 1), 14336, 4, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
    assert_eq!(layout((i4, 1), 14336, 4, 2, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((2, false)));
    // NVFP4's scale tables of 440 rows a CTA leave no ring at 57344 x 8192: the scales streamed.
    let nv = WoFormat::Nvfp4;
    assert!(layout_for((nv, 1), 8192, 55, 1, 2, false).is_none() && auto(nv, 57344, 8192, 132));
    assert_eq!(layout((nv, 1), 8192, 55, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((10, true)));
    assert!(unsupported(WoFormat::Mxfp4, 1, 14336, 4096, 132).is_none());
    let mx = WoFormat::Mxfp4;
    assert!(auto(mx, 14336, 4096, 132) && auto(mx, 28672, 4096, 132));
    assert!(auto(WoFormat::Nvfp4, 14336, 4096, 132) && auto(WoFormat::Nf4, 14336, 4096, 132));
    assert!(!layout((mx, 1), 4096, 14, 3, 1, false).unwrap().streamed_scales);
    // The LM heads at K = 4096 (whole row steps): MXFP4's staged tables leave 3 slots (NF4's beside its
    // narrow pair table 2) and stay staged, streamed they would leave 9 (slower than the x-in-registers
    // kernel either way on the H100); not the default there. NVFP4's leave no ring: streamed, 9 slots, the default.
    assert_eq!(layout_for((mx, 1), 4096, 122, 3, 1, true).map(|l| l.slots), Some(9));
    assert_eq!(layout((mx, 1), 4096, 122, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((3, false)));
    assert_eq!(layout((i4, 1), 4096, 122, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
    assert_eq!(layout((nf4, 1), 4096, 122, 2, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((2, false)));
    assert!(!auto(mx, 128256, 4096, 132) && auto(WoFormat::Nf4, 28672, 4096, 132) && !auto(nf4, 128256, 4096, 132));
    assert!(layout_for((nv, 1), 4096, 122, 3, 1, false).is_none());
    assert_eq!(layout((nv, 1), 4096, 122, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((9, true)));
    assert!(auto(nv, 128256, 4096, 132) && streams_scales(nv, 128256, 4096, 132, 0.0));
    assert!(!streams_scales(mx, 128256, 4096, 132, 0.0) && !streams_scales(i4, 14336, 4096, 132, 0.0));
    // Long K in K parts: MXFP4's 4 staged slots at 57344 x 8192 (two row steps) stay; NF4's wide table
    // leaves 2 (one step): streamed, 8. At K = 8192 the LM heads' tables leave no ring: streamed.
    assert_eq!(layout((mx, 1), 8192, 55, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((4, false)));
    assert_eq!(layout_for((nf4, 1), 8192, 55, 1, 2, false).map(|l| l.slots), Some(2));
    assert_eq!(layout((nf4, 1), 8192, 55, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((8, true)));
    for f in [i4, mx, nv, nf4] {
        assert!(
            layout((f, 1), 8192, 122, 1, 2, false).is_some_and(|l| l.streamed_scales) && auto(f, 128256, 8192, 132)
        );
    }
    // On fast memory (the H200) NF4, MXFP4 and NVFP4 also stream where staged tables leave fewer than 3 slots a
    // consumer class: the LM heads at K = 4096 (MXFP4 9 slots, NF4 8), which then take the ring; NVFP4 at 28672
    // x 4096 (6 -> 9) and, in 2 K parts, 28672 x 8192 (5 -> 10); MXFP4 at 57344 x 8192 (4 -> 10). INT4 (two
    // copies a slot) stays staged at 2 or more a class, and 3 or more a class stay staged (MXFP4 28672 x 8192, 8
    // slots).
    let (h200, h100) = (4917.0, 3352.0);
    assert_eq!(layout((mx, 1), 4096, 122, 3, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((9, true)));
    assert_eq!(layout((nf4, 1), 4096, 122, 2, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((8, true)));
    assert_eq!(layout((i4, 1), 4096, 122, 3, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
    assert_eq!(layout((nv, 1), 4096, 28, 3, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((9, true)));
    assert_eq!(layout((nv, 1), 4096, 28, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
    assert_eq!(layout((nv, 1), 8192, 28, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((10, true)));
    assert_eq!(layout((mx, 1), 8192, 55, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((10, true)));
    assert_eq!(layout((mx, 1), 8192, 28, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((8, false)));
    assert_eq!(layout((i4, 1), 8192, 55, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((7, false)));
    for f in [mx, nf4] {
        assert!(auto_on(f, 128256, 4096, 132, h200) && streams_scales(f, 128256, 4096, 132, h200));
        assert!(!auto_on(f, 128256, 4096, 132, h100) && !streams_scales(f, 128256, 4096, 132, h100));
    }
    assert!(!streams_scales(i4, 128256, 4096, 132, h200) && !streams_scales(mx, 14336, 4096, 132, h200));
    // Session 41: where staged tables leave one slot a class (INT4 too: under 2 a class) streamed ones with two
    // or more a class win, and the ring, at two slots a class, beats the x-in-registers kernel: INT4's LM heads
    // at K = 4096 past 128256 rows and at K = 5120, K = 6144 shapes of every format.
    for (f, n, k) in [(i4, 152064, 5120), (i4, 151936, 4096), (i4, 57344, 6144), (nv, 32000, 5120), (mx, 57344, 6144)] {
        assert!(auto_on(f, n, k, 132, h200) && streams_scales(f, n, k, 132, h200), "{f:?} {n}x{k}");
        assert!(!auto_on(f, n, k, 132, h100) && !streams_scales(f, n, k, 132, h100), "{f:?} {n}x{k}");
    }
    assert!(auto_on(nf4, 49152, 6144, 132, h200) && !auto_on(nf4, 49152, 6144, 132, h100));
    assert!(auto_on(nv, 8192, 14336, 132, h200) && streams_scales(nv, 8192, 14336, 132, h200));
    // Session 42: on fast memory the ring at K = 6144-8192 with any grid, at K = 5120 from 5 row steps a CTA
    // (INT4: any), and INT4 at K = 4096 where its grid fills the GPU; the x-in-registers kernel below that,
    // and on the H100.
    for (f, n, k) in [(i4, 5120, 5120), (mx, 5120, 5120), (nv, 5120, 5120), (i4, 6144, 5120), (mx, 2048, 8192)]
        .into_iter()
        .chain([(nv, 2048, 8192), (i4, 1024, 8192), (i4, 1024, 4096), (i4, 4096, 4096), (i4, 6144, 4096)])
        .chain([(mx, 512, 8192), (nv, 1536, 7168), (i4, 1536, 7168), (mx, 1024, 6144), (i4, 768, 5120)])
        .chain([(mx, 6144, 5120), (i4, 2048, 5120)])
    {
        assert!(auto_on(f, n, k, 132, h200) && !auto_on(f, n, k, 132, h100), "{f:?} {n}x{k}");
    }
    // Session 43: with the ring alone on its SM, every 4-bit format at K = 4096-5120 where the grid fills the GPU.
    for (f, n, k) in [(mx, 3072, 4096), (nv, 3072, 4096), (mx, 1024, 4096), (nv, 4096, 4096), (mx, 2048, 4096)]
        .into_iter()
        .chain([(nv, 6144, 4096), (mx, 3072, 5120), (nv, 2048, 5120), (mx, 1024, 5120)])
    {
        assert!(auto_on(f, n, k, 132, h200) && !auto_on(f, n, k, 132, h100), "{f:?} {n}x{k}");
    }
    for (f, n, k) in [(i4, 512, 4096), (mx, 4096, 3072), (i4, 3072, 3072), (i4, 2048, 2048), (nv, 768, 5120)]
        .into_iter()
        .chain([(mx, 512, 5120), (mx, 512, 4096)])
    {
        assert!(!auto_on(f, n, k, 132, h200), "{f:?} {n}x{k}");
    }
    assert!(fills_the_gpu(128, 132) && !fills_the_gpu(64, 132) && fills_the_gpu(116, 132) && !fills_the_gpu(115, 132));
    // Inside the decode step: every 4-bit GEMV the ring runs on fast memory, FP8 / INT8 never, the H100 as `auto`.
    for f in [i4, mx, nv, nf4] {
        assert_eq!((in_step(f, h200), in_step(f, h100)), (Some(true), None), "{f:?}");
    }
    assert_eq!((in_step(WoFormat::Fp8E4M3, h200), in_step(WoFormat::Int8, h100)), (Some(false), Some(false)));
    assert_eq!((in_step(WoFormat::Bf16, h200), in_step(WoFormat::Bf16, h100)), (Some(true), None));
    // NF4 at small N too, where the x-in-registers kernel would decode in FP32 (not where it takes its
    // f16x2 path: one CTA over K = 14336).
    let nf4 = WoFormat::Nf4;
    assert!(auto(nf4, 4096, 4096, 132) && auto(nf4, 6144, 4096, 132) && auto(nf4, 1024, 4096, 132));
    assert!(!auto(nf4, 2048, 14336, 132) && nf4_xreg_in_f16x2(2048, 14336, 132));
    assert!(!nf4_xreg_in_f16x2(4096, 4096, 132));
    // A CTA stays within 1024 threads: K = 16384 takes one row group of 16 warps.
    assert_eq!(
        (row_groups(i4, 14336, 4096, 132), row_groups(i4, 2048, 14336, 132), row_groups(i4, 1024, 16384, 132)),
        (3, 2, 1)
    );
    assert_eq!((row_groups(WoFormat::Nf4, 14336, 4096, 132), row_groups(WoFormat::Nf4, 1024, 16384, 132)), (2, 1));
    for (n, sms) in [(4096usize, 132u32), (6144, 132), (1000, 7), (8, 132), (2056, 100)] {
        let (ctas, per) = grid(n, sms);
        let steps = n / 8;
        assert!(ctas <= sms && ctas as usize * per >= steps && (ctas as usize - 1) * per < steps);
    }
}

#[test]
fn ring_slots_fill_the_room_up_to_the_units() {
    // Llama-3-70B's down_proj in 4 K parts, 1 group: room for 5 or 6 slots of 32 units; multiples of 4: 4.
    assert_eq!((ring_slots(5, 32, 4, true), ring_slots(6, 32, 4, true)), (5, 6));
    assert_eq!((ring_slots(5, 32, 4, false), ring_slots(7, 32, 4, false)), (4, 4));
    // No more than the units, at least the classes (a CTA of fewer steps than groups).
    assert_eq!((ring_slots(12, 7, 2, true), ring_slots(12, 7, 2, false)), (7, 8));
    assert_eq!((ring_slots(12, 1, 3, true), ring_slots(12, 1, 3, false)), (3, 3));
    // Too little room: under the classes, which `layout_with` refuses.
    assert_eq!((ring_slots(3, 32, 4, true), ring_slots(3, 32, 4, false)), (3, 0));
    // By default any count in one row group only (unless ROOFLINE_RING_ANY_SLOTS says otherwise).
    if std::env::var_os("ROOFLINE_RING_ANY_SLOTS").is_none() {
        assert!(any_slot_count(1) && !any_slot_count(2) && !any_slot_count(3));
    }
}

/// Two units in flight on fast memory for copies of 3.5 KB and more where a CTA's units fill its ring at most
/// four times; else the ring's depth.
#[test]
fn fp16_kernel_scale_guards_f16_range_only_for_large_weights() {
    use crate::weight_only::quantize_pack;
    let (n, k) = (16, 1024);
    let w = |top: f32| -> Vec<f32> { (0..n * k).map(|i| top * ((i % 97) as f32 / 96.0 * 2.0 - 1.0)).collect() };
    // Weights of the usual size: no scaling (4 x 0.5 x 32 is far below 32768).
    assert_eq!(kernel_scale(&quantize_pack(WoFormat::Fp16, &w(0.5), n, k).unwrap()), 1.0);
    // Up to 3e4: 4 x 3e4 x 32 / 2^t <= 32768 first at t = 7.
    assert_eq!(kernel_scale(&quantize_pack(WoFormat::Fp16, &w(3e4), n, k).unwrap()), 128.0);
    // Exactly at the bound (256 x 32 / 8192 = 1): none.
    assert_eq!(kernel_scale(&quantize_pack(WoFormat::Fp16, &w(256.0), n, k).unwrap()), 1.0);
    // Other formats: their tensor scale (NVFP4's), else 1.
    let nv = quantize_pack(WoFormat::Nvfp4, &w(3e4), n, k).unwrap();
    assert_eq!(kernel_scale(&nv), nv.global_scale);
    assert_eq!(kernel_scale(&quantize_pack(WoFormat::Int4G128, &w(3e4), n, k).unwrap()), 1.0);
}

#[test]
fn fp16_rows_stream_in_k_parts_of_at_most_4_kb_in_one_row_group() {
    let f = WoFormat::Fp16;
    assert!(takes(f));
    // A lane's chunk is 32 bytes: 512 values a K slice, as 8-bit weights; K up to 15360 (30 slices).
    assert_eq!((slice_values(f), slices(f, 4096), slices(f, 8192), max_k(f)), (512, 8, 16, 15360));
    // K parts: the fewest whose rows' copies are at most 4 KB.
    let parts: Vec<_> = [1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 14336].map(fp16_parts).to_vec();
    assert_eq!(parts, [1, 1, 2, 2, 5, 3, 7, 4, 7]);
    // 1x14336x4096: 14 steps a CTA of 64 KB each, in 2 K parts of 32 KB (8 copies of 4 KB); one row group of
    // 8 warps (two classes), 6 slots beside the row sums.
    let p = plan(f, 1, 14336, 4096, 132).unwrap();
    assert_eq!((p.ctas, p.per, p.groups, p.parts, p.layout.slots), (128, 14, 1, 2, 6));
    assert_eq!(p.layout.smem, 6 * 32768 + 8 * 112 * 4);
    assert_eq!((copy_bytes(f, 4096, 2), slot_bytes(f, 4096, 2)), (4096, 32768));
    // K = 8192: 4 parts, 6 slots (a row step and a half). Down_proj's K = 14336: a row step of 224 KB, in 7 parts
    // of 32 KB, 6 slots, fewer than the 7 consumer classes (`least_slots`: 2 for 16-bit weights); K = 15360 in
    // 10 parts of 24 KB, 8 slots; K = 16384 (32 slices) is not the ring's.
    let p = plan(f, 1, 8192, 8192, 132).unwrap();
    assert_eq!((p.groups, p.parts, p.layout.slots), (1, 4, 6));
    let p = plan(f, 1, 4096, 14336, 132).unwrap();
    assert_eq!((p.ctas, p.per, p.groups, p.parts, p.layout.slots), (128, 4, 1, 7, 6));
    let p = plan(f, 1, 4096, 15360, 132).unwrap();
    assert_eq!((p.groups, p.parts, p.layout.slots), (1, 10, 8));
    assert!(unsupported(f, 1, 4096, 16384, 132).unwrap().contains("15360"));
    assert_eq!((least_slots(f, 7, true), least_slots(WoFormat::Int4G128, 7, true), least_slots(f, 1, true)), (2, 7, 1));
    // The default: on fast memory only (as FP8 and INT8), where the ring takes K.
    let (h200, h100) = (4900.0, 3352.0);
    assert!(auto_on(f, 14336, 4096, 132, h200) && auto_on(f, 4096, 4096, 132, h200));
    assert!(auto_on(f, 4096, 14336, 132, h200) && auto_on(f, 14336, 8192 + 1024, 132, h200));
    assert!(!auto_on(f, 14336, 4096, 132, h100) && !auto_on(f, 4096, 14336, 132, h100));
    assert_eq!((in_step(f, h200), in_step(f, h100)), (Some(true), None));
    // Any grid on fast memory (1x1024x4096: one row step a CTA); 2 in flight at any stream length there.
    assert!(auto_on(f, 1024, 4096, 132, h200) && auto_on(f, 128256, 4096, 132, h200));
    assert_eq!((units_in_flight(f, 244, 6, 4096, h200, false), units_in_flight(f, 28, 6, 4096, h100, false)), (2, 0));
    assert_eq!(units_in_flight(f, 49, 12, 2048, h200, false), 0);
}

#[test]
fn bf16_rows_stream_as_fp16_rows_against_either_x() {
    let (b, h) = (WoFormat::Bf16, WoFormat::Fp16);
    assert!(takes(b) && takes(h));
    assert_eq!((slice_values(b), max_k(b), fp16_parts(4096)), (512, MAX_K_FP16, 2));
    let (h200, h100) = (4900.0, 3352.0);
    for (n, k) in [(14336, 4096), (4096, 4096), (128256, 4096), (1024, 8192), (8192, 8192), (4096, 14336)] {
        let (pb, ph) = (plan_on(b, 1, n, k, 132, h200).unwrap(), plan_on(h, 1, n, k, 132, h200).unwrap());
        assert_eq!(
            (pb.ctas, pb.per, pb.groups, pb.parts, pb.layout.slots, pb.layout.smem),
            (ph.ctas, ph.per, ph.groups, ph.parts, ph.layout.slots, ph.layout.smem),
            "{n}x{k}"
        );
        assert!(auto_on(b, n, k, 132, h200) && !auto_on(b, n, k, 132, h100), "{n}x{k}");
    }
    assert!(unsupported(b, 1, 4096, 16384, 132).unwrap().contains("15360"));
    assert_eq!(units_in_flight(b, 28, 6, 4096, h200, false), units_in_flight(h, 28, 6, 4096, h200, false));
    // No range guard: the products are FP32 (weights near f16's largest would need one for FP16).
    use crate::weight_only::quantize_pack;
    let (n, k) = (16, 4096);
    let w: Vec<f32> = (0..n * k).map(|i| 3e4 * ((i % 7) as f32 - 3.0) / 3.0).collect();
    assert_eq!(kernel_scale(&quantize_pack(b, &w, n, k).unwrap()), 1.0);
    assert!(kernel_scale(&quantize_pack(h, &w, n, k).unwrap()) > 1.0);
}

#[test]
fn eight_bit_rows_take_twice_the_bytes_and_half_the_k() {
    let (fp8, i8, i4) = (WoFormat::Fp8E4M3, WoFormat::Int8, WoFormat::Int4G128);
    assert!(takes(fp8) && takes(i8) && WoFormat::ALL.into_iter().all(takes));
    // A warp's K slice: 32 lanes x 16 bytes, 1024 4-bit values or 512 8-bit ones; at most 31 slices.
    assert_eq!((slice_values(i4), slice_values(fp8), slices(fp8, 4096), slices(i4, 4096)), (1024, 512, 8, 4));
    assert_eq!((max_k(i4), max_k(fp8), max_k(i8)), (MAX_K, 15360, 15360));
    assert!(unsupported(fp8, 1, 4096, 16384, 132).unwrap().contains("15360"));
    assert!(unsupported(i8, 1, 4096, 15360, 132).is_none());
    // 1x14336x4096: 14 steps of 32 KB a CTA in 2 row groups of 8 warps, 6 slots beside the row sums (8
    // slices x 112 rows), whole steps; on the H200's memory 2 in flight.
    let p = plan(fp8, 1, 14336, 4096, 132).unwrap();
    assert_eq!((p.ctas, p.per, p.groups, p.parts, p.layout.slots), (128, 14, 2, 1, 6));
    assert_eq!(p.layout.smem, 6 * 32768 + 8 * 112 * 4);
    assert!(!p.layout.streamed_scales && p.layout.nf4_wide_at.is_none());
    assert_eq!((copy_bytes(fp8, 4096, 1), copy_bytes(i4, 4096, 1)), (32768, 16384));
    assert_eq!(units_in_flight(fp8, 14, 6, copy_bytes(fp8, 4096, 1), 4900.0, false), 2);
    // down_proj 1x4096x14336: the long-K plan, one row group of 28 warps, rows of 14 KB in 4 parts of 3.5 KB
    // (7 slots; 2 in flight).
    let p = plan(i8, 1, 4096, 14336, 132).unwrap();
    assert_eq!((p.groups, p.parts, p.layout.slots), (1, 4, 7));
    assert_eq!((copy_bytes(i8, 14336, 4), slot_bytes(i8, 14336, 4)), (3584, 28672));
    assert_eq!(units_in_flight(i8, 16, 7, 3584, 4900.0, false), 2);
    // The 8-bit parts: copies of 2-3.5 KB, the fewest (4-bit: parts of 4096-7168 values, the most).
    let parts: Vec<_> = [8192, 12288, 14336, 4096, 9216].map(|k| long_k_parts_for(fp8, k)).to_vec();
    assert_eq!(parts, [Some(4), Some(4), Some(4), Some(2), Some(3)]);
    assert_eq!((long_k_parts_for(i4, 14336), long_k_parts_for(i4, 28672)), (Some(2), Some(7)));
    // The engine's default from 4 row steps a CTA: o_proj, the MLP's rows, down_proj; not 1024 rows.
    assert!(auto(fp8, 14336, 4096, 132) && auto(i8, 4096, 4096, 132) && auto(fp8, 4096, 14336, 132));
    assert!(!auto(fp8, 1024, 4096, 132) && !auto(i8, 4096, 16384, 132));
    // On fast memory only (measured on the H200, 4.9 TB/s; not on the H100, 3.35); the 4-bit rule anywhere.
    assert!(auto_on(fp8, 14336, 4096, 132, 4917.0) && !auto_on(fp8, 14336, 4096, 132, 3352.0));
    assert!(!auto_on(i8, 4096, 4096, 132, 0.0) && auto_on(i4, 14336, 4096, 132, 3352.0));
}

/// NF4's tensor-core sums (`nf4_tensor_sums`, session 65) by default only at two rows and more on the CUDA-core ring at
/// K up to 4096 (the LM head at batch 2; they lost at one row), never on the tensor-core ring, past K = 16384 (NVRTC
/// 13.0 spilled) or for another format. Skipped where `ROOFLINE_RING_NF4TC` is set.
#[test]
fn nf4_tensor_sums_only_at_two_rows_and_short_k() {
    if std::env::var_os("ROOFLINE_RING_NF4TC").is_some() {
        return;
    }
    assert!(!nf4_tensor_sums(WoFormat::Nf4, false, 1, 4096));
    assert!(nf4_tensor_sums(WoFormat::Nf4, false, 2, 4096));
    assert!(nf4_tensor_sums(WoFormat::Nf4, false, 3, 2048));
    assert!(!nf4_tensor_sums(WoFormat::Nf4, false, 2, 14336));
    assert!(!nf4_tensor_sums(WoFormat::Nf4, true, 2, 4096));
    assert!(!nf4_tensor_sums(WoFormat::Int4G128, false, 2, 4096));
    assert!(!nf4_tensor_sums(WoFormat::Nf4, false, 2, NF4_TC_MAX_K + 1024));
}

#[test]
fn units_in_flight_limited_on_fast_memory_for_short_streams_of_large_copies() {
    if std::env::var_os("ROOFLINE_RING_AHEAD").is_some() {
        return;
    }
    let i4 = WoFormat::Int4G128;
    assert_eq!((copy_bytes(i4, 4096, 1), copy_bytes(i4, 14336, 2), copy_bytes(i4, 8192, 2)), (16384, 3584, 2048));
    // H200 (4.9 TB/s peak): 1x14336x4096 (14 units, 9 slots), 1x28672x4096 (28, 9), 1x4096x14336 (8, 6).
    assert_eq!(units_in_flight(i4, 14, 9, 16384, 4915.0, false), 2);
    assert_eq!(units_in_flight(i4, 28, 9, 16384, 4915.0, false), 2);
    assert_eq!(units_in_flight(i4, 36, 9, 16384, 4915.0, false), 2);
    assert_eq!(units_in_flight(i4, 8, 6, 3584, 4915.0, false), 2);
    // Not the LM head (122 units in 9 slots), nor 2 KB copies (1x8192x8192, 1x28672x8192).
    assert_eq!(units_in_flight(i4, 37, 9, 16384, 4915.0, false), 0);
    assert_eq!(units_in_flight(i4, 122, 9, 16384, 4915.0, false), 0);
    assert_eq!(units_in_flight(i4, 16, 12, 2048, 4915.0, false), 0);
    assert_eq!(units_in_flight(i4, 56, 12, 2048, 4915.0, false), 0);
    // The H100 SXM's HBM3 (2619 MHz, 5120 bits) and the H200's HBM3e (3201 MHz, 6144 bits), as the driver gives them.
    assert!((peak_gb_s(2_619_000, 5120) - 3352.3).abs() < 0.1);
    assert!((peak_gb_s(3_201_000, 6144) - 4916.7).abs() < 0.1);
    assert!(peak_gb_s(2_619_000, 5120) < FAST_MEMORY_GB_S && peak_gb_s(3_201_000, 6144) >= FAST_MEMORY_GB_S);
    assert_eq!((peak_gb_s(0, 6144), peak_gb_s(3_201_000, 0)), (0.0, 0.0));
    // H100 (3.35 TB/s) and a driver that does not say: unchanged.
    assert_eq!(units_in_flight(i4, 14, 9, 16384, 3352.0, false), 0);
    assert_eq!(units_in_flight(i4, 14, 9, 16384, 0.0, false), 0);
    // INT4's subnormal decode (session 60): three from more units than slots to 7 fills of 16 KB copies.
    let three = |units, slots, copy, peak| units_in_flight(i4, units, slots, copy, peak, true);
    assert_eq!((three(14, 9, 16384, 4915.0), three(28, 9, 16384, 4915.0), three(56, 9, 16384, 4915.0)), (3, 3, 3));
    assert_eq!((three(4, 6, 16384, 4915.0), three(8, 6, 3584, 4915.0), three(122, 9, 16384, 4915.0)), (2, 2, 0));
    assert_eq!(three(28, 9, 16384, 3352.0), 0);
    // Which decodes count as cheap (session 61: MXFP4 and NVFP4 too), at one row of x on the CUDA cores only.
    if std::env::var_os("ROOFLINE_RING_SUBN").is_none() {
        assert!([WoFormat::Int4G128, WoFormat::Mxfp4, WoFormat::Nvfp4].iter().all(|f| three_in_flight(*f, 1, false)));
        assert!(!three_in_flight(WoFormat::Nf4, 1, false) && !three_in_flight(WoFormat::Fp8E4M3, 1, false));
        assert!(!three_in_flight(i4, 2, false) && !three_in_flight(i4, 1, true));
    }
}

/// One build of the spill test: a CUDA-core ring build (its description and NVRTC options), or a tensor-core
/// one as the engine plans it (format and x, rows x row steps x K, epilogue).
enum Build {
    Cuda(String, Vec<String>),
    Mma((WoFormat, XDtype), (usize, usize, usize), Epilogue),
}

/// The kernel compiles for sm_90 without spills in every epilogue (skipped without NVRTC).
#[test]
fn rows_kernel_compiles_without_spills() {
    if let Err(e) = nvrtc_available() {
        eprintln!("SKIPPED rows_kernel_compiles_without_spills: {e}");
        return;
    }
    // Every build first, then all of them compiled on every core (`par_map`): about 1100 builds.
    let mut jobs = Vec::new();
    for (k, per) in [
        (4096usize, 4usize),
        (4096, 14),
        (2048, 3),
        (8192, 1),
        (14336, 4),
        (4096, 122),
        (8192, 122),
        (16384, 2),
        (28672, 8),
        // Session 41's fast-memory defaults: LM heads at K = 5120, gate_up at K = 6144, and a MoE expert
        // (DeepSeek-V3's gate_up, 4096 x 7168) that the decode step now runs on the ring.
        (5120, 144),
        (6144, 55),
        (7168, 4),
        // Session 42's fast-memory defaults at small N: 1x5120x5120, 1x2048x8192, 1x1024x6144 and 1x1536x7168.
        (5120, 5),
        (8192, 2),
        (6144, 1),
        (7168, 2),
        // Session 43's: every 4-bit format at K = 4096-5120 where the grid fills the GPU (1x1024x4096, 1x2048x5120).
        (4096, 1),
        (5120, 2),
    ] {
        for f in WoFormat::ALL.into_iter().filter(|f| takes(*f) && k <= max_k(*f)) {
            // 8- and 16-bit weights at the shapes of Llama-3.1-8B's linears (their K up to 14336; FP16's up to
            // 8192) and the LM head.
            if f.bits() >= 8 && !matches!((k, per), (4096, 4) | (4096, 14) | (8192, 1) | (14336, 4) | (4096, 122)) {
                continue;
            }
            // The engine's groups and K parts for a grid of 132 CTAs of `per` steps.
            let (g, kp) = (row_groups(f, per * 8 * 132, k, 132), k_parts(f, per * 8 * 132, k, 132));
            // The default's layout.
            let lay = layout((f, 1), k, per, g, kp, false).unwrap_or_else(|| panic!("{f:?} {k} {per}: no ring"));
            // down_proj's 4 steps of K = 14336 also in 2 and 7 K parts, in one row group and in two; every
            // shape with its scales streamed and (where they fit) staged.
            let mut builds = vec![(lay, kp, g, 1)];
            // One row of x in more row groups where fast memory takes them (`one_row_groups`: NF4 at 14-32 steps).
            let g1 = one_row_groups(f, k, (per, kp), g, true);
            if g1 != g {
                builds.extend(layout((f, 1), k, per, g1, kp, true).map(|l| (l, kp, g1, 1)));
            }
            // The engine's default for two rows of x on fast memory (`auto_rows`), each shape's own layout, where
            // the registers leave room for them (`plan_on` refuses the others).
            let threads = cta_threads(f, k, g, false);
            for m in (2..=AUTO_MAX_M_FAST).filter(|m| f.bits() <= 8 && rows_registers(f, *m) <= register_room(threads))
            {
                let one = layout((f, 1), k, per, g, kp, true);
                let more = one.and_then(|l| layout_for((f, m), k, per, g, kp, l.streamed_scales));
                builds.extend(more.map(|l| (l, kp, g, m)));
            }
            // (FP8 / INT8 have no tables to stream.)
            let other = layout_for((f, 1), k, per, g, kp, !lay.streamed_scales).filter(|_| f.bits() == 4);
            builds.extend(other.filter(|o| o.slots >= lay.slots.min(2 * g * kp)).map(|o| (o, kp, g, 1)));
            if k == 14336 {
                for (parts, groups) in [(1, 1), (2, 2), (7, 1), (7, 2), (4, 1)] {
                    if slices(f, k) * groups > 31 || slices(f, k) % parts != 0 {
                        continue; // more than 1024 threads; parts of no whole K slices
                    }
                    builds.extend(layout((f, 1), k, per, groups, parts, false).map(|l| (l, parts, groups, 1)));
                }
            }
            // A slot count that is no multiple of the consumer classes (`RW_MIXED`, a barrier per class;
            // by default only in one row group, any layout with ROOFLINE_RING_ANY_SLOTS=1).
            if lay.slots % (g * kp) == 0 && lay.slots < per * kp {
                builds.push((Layout { slots: lay.slots + 1, ..lay }, kp, g, 1));
            }
            let ops = [
                (Epilogue::Norm, Input::X),
                (Epilogue::Store, Input::X),
                (Epilogue::Add, Input::X),
                (Epilogue::Add, Input::SwiGlu),
            ];
            for ((lay, parts, g, m), ep) in builds.into_iter().flat_map(|b| ops.map(|e| (b, e))) {
                // Units in flight as an H200 (4.9 TB/s) takes them: limited at the short shapes, not the long.
                let cheap = three_in_flight(f, m, false);
                let ahead = units_in_flight(f, per * parts, lay.slots, copy_bytes(f, k, parts), 4900.0, cheap);
                // BF16 weights with BF16 x (FP16 x differs only in its loads and stores), and 8-bit weights at
                // M = 2 (the ring's default there is for BF16 x).
                let x = if f == WoFormat::Bf16 || (m > 1 && f.bits() == 8) { XDtype::Bf16 } else { XDtype::F16 };
                let what = format!(
                    "ring GEMV {f:?} {m} rows of x, k {k}, {per} steps, {parts} K parts, {g} groups, {lay:?}, {ep:?}"
                );
                // Early first copies where the engine would take them (`early_copies`).
                let plan = Plan { ctas: 132, per, groups: g, parts, layout: lay, mma: false, splits: 1 };
                let early = early_copies(f, m, &plan, ep);
                jobs.push(Build::Cuda(
                    what,
                    options(90, (f, x), (m, k), per, lay, (parts, g, ahead, false, early), ep),
                ));
            }
        }
    }
    // 9 to 16 rows of x on the tensor cores (session 51; 2 to 8 since session 57), at every K it takes, 1 to 8 row steps a CTA and 14 (its
    // default, `mma_auto`), with each epilogue it takes.
    // INT4 with FP16 x everywhere; INT4 with BF16 x, NF4, MXFP4 and NVFP4 at the default's 14 steps with the
    // norm, 4 with the add, one step alone, and 28 and 56 steps (below).
    // (16, 4096, 1): a CTA of one row step at K = 4096 (N up to 8 rows a SM), whose two-units-a-pass build spilled
    // 4 bytes (INT4, NVRTC 12.9; session 55).
    let mma_shapes = [
        (9usize, 4096usize, 4usize),
        (12, 4096, 8),
        (16, 4096, 14),
        (16, 1024, 1),
        (16, 4096, 1),
        (13, 2048, 2),
        (16, 3072, 6),
        // 2 to 8 rows (session 57: every lane's rows g + 8 past M, the builds spilled until wo_ring.cu's `m8`).
        (2, 4096, 6),
        (3, 4096, 14),
        (8, 4096, 1),
        (5, 2048, 4),
        // 24 row steps a CTA, the most the default takes at 2-8 rows since session 58.
        (4, 4096, 24),
        // The most at a shorter K since session 59 (`MMA_AUTO_SHORT_K_MAX_STEPS`): 10 at K = 2048, 15 at 3072.
        (8, 2048, 10),
        (8, 3072, 15),
        // K past 4096 in 2 K splits, a cluster of two CTAs a row block (session 59; a CTA takes twice the steps
        // named, its grid of 66 row blocks): K = 8192 at 16 and 2-7 rows (INT4 at 8-15 rows stays off: its builds
        // spill), 5120, 6144 and 7168 (splits of 2560, 3072 and 3584).
        (16, 8192, 14),
        (16, 8192, 28),
        (7, 8192, 4),
        (12, 5120, 14),
        (9, 6144, 8),
        (16, 7168, 28),
    ];
    let int4 = mma_shapes.into_iter().flat_map(|s| {
        [Epilogue::Store, Epilogue::Add, Epilogue::Norm].map(|e| ((WoFormat::Int4G128, XDtype::F16), s, e))
    });
    let others = [
        (WoFormat::Int4G128, XDtype::Bf16),
        (WoFormat::Nf4, XDtype::F16),
        (WoFormat::Mxfp4, XDtype::F16),
        (WoFormat::Nvfp4, XDtype::F16),
        // BF16 x converted to f16 (`mma_xf16`).
        (WoFormat::Nf4, XDtype::Bf16),
        (WoFormat::Mxfp4, XDtype::Bf16),
        (WoFormat::Nvfp4, XDtype::Bf16),
    ]
    .into_iter()
    .flat_map(|fx| {
        [
            ((16, 4096, 14), Epilogue::Norm),
            ((9, 4096, 4), Epilogue::Add),
            ((16, 1024, 1), Epilogue::Store),
            ((16, 4096, 1), Epilogue::Add),
            // 28 and 56 steps a CTA: NVFP4's and MXFP4's scales streamed beside each slot (their M = 1 builds').
            ((12, 4096, 28), Epilogue::Norm),
            ((9, 4096, 56), Epilogue::Store),
            // 2 to 8 rows (session 57).
            ((8, 4096, 14), Epilogue::Norm),
            ((2, 4096, 4), Epilogue::Add),
            ((4, 4096, 1), Epilogue::Store),
            ((8, 4096, 24), Epilogue::Add),
            // 56 at 8 rows: MXFP4's and NVFP4's default with BF16 x (session 58).
            ((8, 4096, 56), Epilogue::Norm),
            // The LM head at 16 rows (122 steps), the default from 9 rows since session 58 (not NF4's: its plan
            // leaves the tensor cores there, its staged scales leave no room).
            ((16, 4096, 122), Epilogue::Norm),
            // 2 K splits (session 59): 12 rows of K = 8192 (Llama-3-70B's gate_up at batch 12: 56 steps a CTA) and
            // 9 of 5120.
            ((12, 8192, 28), Epilogue::Norm),
            ((9, 5120, 14), Epilogue::Add),
        ]
        .map(|(s, e)| (fx, s, e))
        .into_iter()
        .filter(|((f, _), (_, _, per), _)| *f != WoFormat::Nf4 || *per <= 56)
        // (INT4 at 8-15 rows of K = 8192 stays off the tensor cores, `mma_split_k`.)
        .filter(|((f, _), (m, k, _), _)| !(*f == WoFormat::Int4G128 && (8..=15).contains(m) && *k == 8192))
    });
    // NF4 in 4 K splits (session 59: its default at K = 14336 from 9 rows; 4 row steps named, 16 a CTA; not at K =
    // 16384, whose splits of 4096 spill at 9-15 rows).
    let nf4_splits = [
        ((WoFormat::Nf4, XDtype::F16), (16, 14336, 4), Epilogue::Add),
        ((WoFormat::Nf4, XDtype::Bf16), (9, 14336, 4), Epilogue::Norm),
        ((WoFormat::Nf4, XDtype::F16), (12, 14336, 2), Epilogue::Store),
    ];
    jobs.extend(int4.chain(others).chain(nf4_splits).map(|(fx, shape, ep)| Build::Mma(fx, shape, ep)));
    // Each build's compile error, spills or loads before the dependency wait, if any.
    let found: Vec<String> = super::super::nvrtc::par_map(&jobs, |job| {
        let (what, cubin, log) = match job {
            Build::Cuda(what, opts) => match super::super::nvrtc::compile_cubin(&source(), "wo_ring.cu", opts) {
                Ok((cubin, log)) => (what.clone(), cubin, log),
                Err(e) => return Some(format!("{what}: {e}")),
            },
            &Build::Mma((f, x), (m, k, per), ep) => {
                let n = per * STEP_ROWS * 132;
                let what = format!("ring GEMV on the tensor cores {f:?} {x:?} {m}x{n}x{k} {ep:?}");
                match compile_ring(90, 132, 4900.0, (f, x), (m, n, k), (ep, Input::X)) {
                    Ok(b) => (format!("{what} ({})", b.describe()), b.cubin, b.log),
                    Err(e) => return Some(format!("{what}: {e}")),
                }
            }
        };
        let (regs, spills, _) = parse_ptxas(&log);
        eprintln!("{what}: {regs:?} registers");
        if spills != Some(0) {
            return Some(format!("{what}: spills {spills:?}"));
        }
        match early_dependent_loads(&cubin) {
            Err(e) => Some(format!("{what}: {e}")),
            Ok(Some(early)) if !early.is_empty() => Some(format!("{what}: loads before the wait {early:?}")),
            Ok(_) => None,
        }
    })
    .into_iter()
    .flatten()
    .collect();
    assert!(found.is_empty(), "builds that fail, spill or load before the wait:\n{}", found.join("\n"));
}

#[test]
fn first_copies_go_early_where_int4_and_nf4_stream_past_their_ring() {
    let h200 = |f: WoFormat, (m, n, k): (usize, usize, usize)| plan_on(f, m, n, k, 132, 4800.0).unwrap();
    let plain = (Epilogue::Store, Input::X);
    // INT4 at 1x14336x4096: 14 row steps a CTA in 6 slots; at 1x4096x14336, 4 row steps of 2 K parts.
    for (f, shape) in [
        (WoFormat::Int4G128, (1, 14336, 4096)),
        (WoFormat::Int4G128, (1, 4096, 14336)),
        (WoFormat::Nf4, (1, 28672, 4096)),
    ] {
        let p = h200(f, shape);
        assert!(
            early_copies(f, 1, &p, plain),
            "{f:?} {shape:?}: {} x {} units, {} slots",
            p.per,
            p.parts,
            p.layout.slots
        );
    }
    // A CTA's 4 units fit its ring at 1x4096x4096 (measured slower early).
    let small = h200(WoFormat::Int4G128, (1, 4096, 4096));
    assert!(small.per * small.parts <= small.layout.slots && !early_copies(WoFormat::Int4G128, 1, &small, plain));
    // MXFP4 and NVFP4 (measured slower), more rows of x, the fused norm and SwiGLU on load: as before.
    for f in [WoFormat::Mxfp4, WoFormat::Nvfp4] {
        assert!(!early_copies(f, 1, &h200(f, (1, 14336, 4096)), plain), "{f:?}");
    }
    let int4 = h200(WoFormat::Int4G128, (1, 14336, 4096));
    assert!(!early_copies(WoFormat::Int4G128, 2, &int4, plain));
    assert!(!early_copies(WoFormat::Int4G128, 1, &int4, (Epilogue::Norm, Input::X)));
    assert!(!early_copies(WoFormat::Int4G128, 1, &int4, (Epilogue::Store, Input::SwiGlu)));
    assert!(!early_copies(WoFormat::Nf4, 1, &int4, (Epilogue::Add, Input::SwiGlu)));
    // The residual add (o_proj in the decode step, measured faster early) at any units, 1x4096x4096 too.
    assert!(early_copies(WoFormat::Int4G128, 1, &small, (Epilogue::Add, Input::X)));
    assert!(!early_copies(WoFormat::Mxfp4, 1, &small, (Epilogue::Add, Input::X)));
}

#[test]
fn nf4_takes_four_row_groups_at_one_row_where_a_cta_takes_14_to_32_steps_on_fast_memory() {
    if groups_override().is_some() {
        return;
    }
    let h200 = |f: WoFormat, (m, n, k): (usize, usize, usize)| plan_on(f, m, n, k, 132, 4800.0).unwrap();
    let nf4 = WoFormat::Nf4;
    // 14 and 28 steps a CTA: 4 groups (544 threads), the scales staged as in 2 groups.
    for n in [14336, 28672] {
        let p = h200(nf4, (1, n, 4096));
        assert_eq!(p.groups, 4, "1x{n}x4096: {p:?}");
        assert_eq!(p.layout.streamed_scales, streams_scales(nf4, n, 4096, 132, 4800.0));
        assert_eq!(p.threads(nf4, 4096), 544);
    }
    // Small N (4 steps), the LM head (122), two rows of x, slow memory (the H100) and the other formats: as before.
    assert_eq!(h200(nf4, (1, 4096, 4096)).groups, 2);
    assert_eq!(h200(nf4, (1, 128256, 4096)).groups, 2);
    assert!(h200(nf4, (2, 14336, 4096)).groups <= 2, "two rows: their own plan");
    assert_eq!(plan_on(nf4, 1, 14336, 4096, 132, 3350.0).unwrap().groups, 2);
    assert_eq!(h200(WoFormat::Mxfp4, (1, 14336, 4096)).groups, 3);
    assert_eq!(one_row_groups(nf4, 4096, (14, 2), 2, true), 2, "K parts");
}
