//! GPU test of the fused batch-1 FFN kernel (`weight_only::ffn`) in every format it takes (INT4 g128, NF4, MXFP4, NVFP4): the residual stream after one launch
//! against the f64 CPU reference of the same quantized weights, for shapes that exercise its geometry (K
//! slices of 1024 shared by 1 to 5 row groups, CTAs of one to fourteen pieces, a CTA's pieces spanning one
//! to three INT4 groups of W_down, 96 to 130 CTAs), and twice in a row (the arrival count and the accumulator
//! re-arm themselves, and the result is the same up to the last FP16 bit: the partial outputs are summed by
//! float atomics). Run on a GPU machine: `cargo test -p roofline-gpu --release --test ffn_gpu -- --ignored
//! --nocapture`.

use half::f16;
use roofline_gpu::weight_only::ffn::{reference, FusedFfn, FORMATS};
use roofline_gpu::weight_only::quantize_pack;
use roofline_gpu::{random_f32, Gpu};

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn fused_ffn_matches_the_reference() {
    let gpu = Gpu::open(0).unwrap();
    let shapes = [(4096usize, 14336usize), (3072, 8320), (1024, 28672), (2048, 1536), (5120, 13824)];
    for (format, (d, f)) in FORMATS.iter().flat_map(|&fm| shapes.iter().map(move |&s| (fm, s))) {
        let ffn = FusedFfn::new(&gpu, format, d, f).unwrap_or_else(|e| panic!("{format:?} {format:?} {d}x{f}: {e}"));
        // Weights as a trained layer's init (uniform / sqrt(K)), the residual stream around 1.
        let wg: Vec<f32> = random_f32(2 * f * d, 100 + d as u64).iter().map(|v| v / (d as f32).sqrt()).collect();
        let wd: Vec<f32> = random_f32(d * f, 200 + f as u64).iter().map(|v| v / (f as f32).sqrt()).collect();
        let gate_up = quantize_pack(format, &wg, 2 * f, d).unwrap();
        let down = quantize_pack(format, &wd, d, f).unwrap();
        let x0: Vec<f32> = random_f32(d, 300).iter().map(|v| f16::from_f32(*v).to_f32()).collect();
        let want = reference(&x0, &gate_up, &down, 1e-5);
        let mut w = ffn.upload(&ffn.stage(&gate_up, &down).unwrap()).unwrap();
        let s = ffn.stream();
        let bits: Vec<u16> = x0.iter().map(|v| f16::from_f32(*v).to_bits()).collect();
        let mut outs = Vec::new();
        for _ in 0..2 {
            let mut x = s.clone_htod(&bits).unwrap();
            ffn.run(s, &mut w, &mut x, 1e-5, false).unwrap();
            outs.push(s.clone_dtoh(&x).unwrap());
        }
        // The CTAs' partial outputs are summed by float atomics in arrival order: a second launch may round
        // an output to the neighbouring FP16 value. Near zero, where FP16's steps are far finer than the FP32
        // sum's rounding (the partials' size), it may land further off, but never by more than 2^-16 of the
        // output's RMS (session 58: INT4 1024x28672 gave 2 steps on the H200).
        let value = |b: u16| f64::from(f16::from_bits(b).to_f32());
        let got: Vec<f64> = outs[0].iter().map(|b| value(*b)).collect();
        let rms = (got.iter().map(|v| v * v).sum::<f64>() / d as f64).sqrt();
        let far: Vec<_> = outs[0]
            .iter()
            .zip(&outs[1])
            .filter(|(a, b)| ulps_apart(**a, **b) > 1 && (value(**a) - value(**b)).abs() > rms / 65536.0)
            .map(|(a, b)| (value(*a), value(*b)))
            .collect();
        assert!(far.is_empty(), "{format:?} {d}x{f}: a second launch gave results further apart: {far:?}");
        assert!(got.iter().all(|v| v.is_finite()), "{format:?} {d}x{f}: non-finite output");
        // Relative error of the output and of the FFN's contribution (output minus the residual).
        let l2 = |v: &mut dyn Iterator<Item = f64>| v.map(|e| e * e).sum::<f64>().sqrt();
        let err = l2(&mut got.iter().zip(&want).map(|(g, w)| g - w));
        let rel = err / l2(&mut want.iter().copied());
        let delta = l2(&mut want.iter().zip(&x0).map(|(w, x)| w - f64::from(*x)));
        println!(
            "fused FFN {format:?} {d}x{f}: {} CTAs, {:?} registers, rel. error {rel:.2e} (of the FFN's output {:.2e})",
            ffn.ctas,
            ffn.registers,
            err / delta
        );
        assert!(rel <= 1e-3, "{format:?} {d}x{f}: relative error {rel:.2e} > 1e-3");
        assert!(err / delta <= 1e-2, "{format:?} {d}x{f}: error {:.2e} of the FFN's own output", err / delta);
    }
}

/// How many FP16 values lie between two FP16 bit patterns (0: equal; +0 and -0 are one apart).
fn ulps_apart(a: u16, b: u16) -> u32 {
    // Sign-magnitude to a monotonic integer line.
    let line = |h: u16| -> i32 {
        if h & 0x8000 != 0 {
            -i32::from(h & 0x7fff)
        } else {
            i32::from(h) + 1
        }
    };
    line(a).abs_diff(line(b))
}
