//! The step check's CPU side: f64 references of the step's linears on a sample of their rows, and the
//! error measures model-bench reports (plain relative error, and the error of what a block adds to the
//! FP16 residual stream).

use crate::weight_only::pack::PackedWeights;

/// The rows of an `n`-row matrix the step check keeps: about 512, evenly spread, the first and the last
/// included (an LM head's 128256 rows cost the check 4 MB instead of the whole matrix on the host, and
/// its f64 reference a few ms).
pub(super) fn sample_rows(n: usize) -> Vec<usize> {
    let step = n.div_ceil(512).max(1);
    let mut rows: Vec<usize> = (0..n).step_by(step).collect();
    if n > 0 && rows.last() != Some(&(n - 1)) {
        rows.push(n - 1);
    }
    rows
}

/// A sample of a linear's quantized weights kept on the host for the step check.
#[derive(Debug, Clone)]
pub(super) struct Sampled {
    /// Output channels of the whole matrix (a batch row of its output).
    pub n: usize,
    /// Input values (columns).
    pub k: usize,
    /// The sampled rows ([`sample_rows`]).
    pub rows: Vec<usize>,
    /// Those rows' packed weights, their values dequantized as the GPU multiplies them.
    values: Vec<f32>,
}

impl Sampled {
    /// The sample of `p`'s rows.
    pub fn of(p: &PackedWeights) -> Sampled {
        let rows = sample_rows(p.n);
        Sampled { n: p.n, k: p.k, values: p.select_rows(&rows).dequantize(), rows }
    }

    /// The sampled outputs for the input row `x` in f64: each row's dot product with x, times x's inverse
    /// RMS with `norm_eps` (the RMSNorm fused into the GEMV, its weight folded into the columns).
    pub fn reference(&self, x: &[f32], norm_eps: Option<f64>) -> Vec<f64> {
        debug_assert_eq!(x.len(), self.k);
        let k = self.k;
        let inv = norm_eps.map_or(1.0, |eps| {
            1.0 / (x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / k.max(1) as f64 + eps).sqrt()
        });
        self.values
            .chunks_exact(k.max(1))
            .map(|w| inv * w.iter().zip(x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>())
            .collect()
    }

    /// `y`'s values (one batch row of the full output) at the sampled rows.
    pub fn pick(&self, y: &[f32]) -> Vec<f32> {
        self.rows.iter().map(|&r| y[r]).collect()
    }
}

/// Relative L2 error of `got` against `want`: |got - want| / |want| (infinite where not finite).
pub(super) fn rel_error(got: &[f32], want: &[f64]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        err += (f64::from(*g) - w).powi(2);
        norm += w * w;
    }
    let e = (err / norm.max(1e-300)).sqrt();
    if e.is_finite() {
        e
    } else {
        f64::INFINITY
    }
}

/// The relative error of what a block added to the residual stream (`x_in` -> `x_out`, FP16 values) against
/// the reference `want` (x_in + the block, f64), beyond the FP16 rounding of the stream itself: an exact
/// block still lands on x_out's nearest f16, an error of RMS ulp / sqrt(12) per value, which relative to a
/// small update can pass any fixed bound (Llama-3.1-8B's random layers: 5.4e-3 of what the FFN adds, for
/// every format, FP16 too; a trained model's late layers add far less than their stream holds). That
/// expected rounding is taken out in quadrature: sqrt(max(0, |x_out - want|^2 - sum ulp^2 / 12)) / |want -
/// x_in|.
pub(super) fn residual_delta_error(x_in: &[f32], x_out: &[f32], want: &[f64]) -> f64 {
    let (mut err, mut delta, mut rounding) = (0.0f64, 0.0f64, 0.0f64);
    for ((g, w), x) in x_out.iter().zip(want).zip(x_in) {
        err += (f64::from(*g) - w).powi(2);
        delta += (w - f64::from(*x)).powi(2);
        rounding += f16_ulp(*w).powi(2) / 12.0;
    }
    ((err - rounding).max(0.0) / delta.max(1e-300)).sqrt()
}

/// The spacing of FP16 values around `v` (2^-24 below the normal range; the largest finite spacing above it).
fn f16_ulp(v: f64) -> f64 {
    let a = v.abs();
    if !a.is_finite() || a >= 65504.0 {
        return 32.0;
    }
    if a < 2f64.powi(-14) {
        return 2f64.powi(-24);
    }
    2f64.powi(a.log2().floor() as i32 - 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random_f32;
    use crate::weight_only::pack::quantize_pack;
    use crate::weight_only::WoFormat;
    use half::f16;

    #[test]
    fn sampled_rows_spread_over_the_matrix() {
        assert_eq!(sample_rows(3), vec![0, 1, 2]);
        assert!(sample_rows(0).is_empty());
        let r = sample_rows(128256);
        assert!(r.len() <= 514 && r.len() >= 500, "{}", r.len());
        assert_eq!((r[0], *r.last().unwrap()), (0, 128255));
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        let r = sample_rows(1024);
        assert_eq!((r.len(), r[1], *r.last().unwrap()), (513, 2, 1023));
    }

    #[test]
    fn the_sampled_reference_is_the_full_gemv_at_those_rows() {
        let (n, k) = (1500, 256);
        let w = random_f32(n * k, 4);
        let x = random_f32(k, 5);
        for f in [WoFormat::Fp16, WoFormat::Int4G128, WoFormat::Nvfp4] {
            let p = quantize_pack(f, &w, n, k).unwrap();
            let s = Sampled::of(&p);
            let full = p.dequantize();
            let y: Vec<f64> = (0..n)
                .map(|r| full[r * k..(r + 1) * k].iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum())
                .collect();
            let want: Vec<f64> = s.rows.iter().map(|&r| y[r]).collect();
            assert_eq!(s.reference(&x, None), want, "{f:?}");
            // the fused norm scales every output by x's inverse RMS
            let ms = x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / k as f64;
            let normed = s.reference(&x, Some(1e-5));
            for (a, b) in normed.iter().zip(&want) {
                assert!((a - b / (ms + 1e-5).sqrt()).abs() <= 1e-12 * b.abs().max(1.0));
            }
            // the GPU's output rounded to f16 passes; a wrong one does not
            let y16: Vec<f32> = y.iter().map(|v| f16::from_f64(*v).to_f32()).collect();
            assert!(rel_error(&s.pick(&y16), &want) < 1e-3);
            let wrong: Vec<f32> = y16.iter().map(|v| v * 1.05).collect();
            assert!(rel_error(&s.pick(&wrong), &want) > 0.04);
        }
        assert_eq!(rel_error(&[f32::NAN], &[1.0]), f64::INFINITY);
    }

    #[test]
    fn residual_check_takes_out_the_streams_own_rounding() {
        assert_eq!((f16_ulp(1.0), f16_ulp(-1.5), f16_ulp(1024.0)), (2f64.powi(-10), 2f64.powi(-10), 1.0));
        assert_eq!((f16_ulp(1e-6), f16_ulp(1e9)), (2f64.powi(-24), 32.0));
        // A large stream (around 100, f16 spacing 1/16) and an exact update of about +-1: x_out is the
        // update rounded to the stream's grid, an error of about ulp / sqrt(12) = 0.018 per value, 3% of the
        // update, above the 1e-2 bound unless the rounding is taken out.
        let n = 4096;
        let x_in: Vec<f32> = (0..n).map(|i| f16::from_f32(100.0 + (i % 7) as f32).to_f32()).collect();
        let upd: Vec<f64> = (0..n).map(|i| (i * 37 % 101) as f64 / 50.0 - 1.0).collect();
        let want: Vec<f64> = x_in.iter().zip(&upd).map(|(x, u)| f64::from(*x) + u).collect();
        let exact: Vec<f32> = want.iter().map(|w| f16::from_f64(*w).to_f32()).collect();
        let (raw, delta) = want
            .iter()
            .zip(&exact)
            .zip(&upd)
            .fold((0.0, 0.0), |(e, d), ((w, g), u)| (e + (f64::from(*g) - w).powi(2), d + u * u));
        assert!((raw / delta).sqrt() > 0.02, "the raw error of an exact update: {}", (raw / delta).sqrt());
        assert!(residual_delta_error(&x_in, &exact, &want) < 1e-3);
        // The same update 2% off is still seen (about 0.02 beyond the rounding).
        let off2: Vec<f32> =
            x_in.iter().zip(&upd).map(|(x, u)| f16::from_f64(f64::from(*x) + 1.02 * u).to_f32()).collect();
        let e2 = residual_delta_error(&x_in, &off2, &want);
        assert!((0.012..0.03).contains(&e2), "{e2}");
        // A wrong update (2^14 too small, as session 23's bug) or a lost one stays an error.
        let lost: Vec<f32> = x_in.clone();
        assert!(residual_delta_error(&x_in, &lost, &want) > 0.5);
        // A small stream: the rounding is negligible and the error is the plain relative one.
        let x0 = vec![0.0f32; n];
        let want0: Vec<f64> = upd.clone();
        let off: Vec<f32> = upd.iter().map(|u| (u * 1.01) as f32).collect();
        let e = residual_delta_error(&x0, &off, &want0);
        assert!((e - 0.01).abs() < 1e-3, "{e}");
    }
}
