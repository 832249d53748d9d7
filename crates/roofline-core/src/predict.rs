//! Roofline predictions: time = max(bytes / bandwidth, FLOPs / peak), plus the derived figures.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::format::Format;
use crate::hardware::{ComputeClass, HardwareProfile};
use crate::op::{Gemm, OpCost};
use crate::scheme::{ExecMode, Execution, Scheme};

/// Which roof limits an op.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Bytes over bandwidth is the larger time.
    Memory,
    /// FLOPs over peak is the larger time.
    Compute,
}

impl Bound {
    /// `memory` or `compute`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bound::Memory => "memory",
            Bound::Compute => "compute",
        }
    }
}

/// The roofline's answer for one op on one hardware profile.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Operations (a multiply-add counts 2).
    pub flops: u64,
    /// Minimum bytes through device memory.
    pub bytes: u64,
    /// FLOPs per byte.
    pub arithmetic_intensity: f64,
    /// Compute class whose peak applies.
    pub compute: ComputeClass,
    /// Native, weight-only, or dequantized (format not native on this hardware).
    pub mode: ExecMode,
    /// Peak of `compute`, TFLOP/s.
    pub peak_tflops: f64,
    /// Memory bandwidth this op streams at, GB/s: the copy bandwidth, or with a read-stream calibration
    /// the rate its mix of reads and writes gets (`HardwareProfile::stream_time_us`).
    pub bandwidth_gb_s: f64,
    /// Ridge point (critical arithmetic intensity) of `compute`, FLOP/byte.
    pub ridge_ai: f64,
    /// `bytes / bandwidth` plus the profile's memory start-up latency (measured profiles), microseconds.
    /// A GEMV's bytes are almost all reads: a read-calibrated profile prices them at the read rate.
    pub time_memory_us: f64,
    /// `flops / peak`, microseconds.
    pub time_compute_us: f64,
    /// Fixed launch overhead added (measured profiles only), microseconds.
    pub overhead_us: f64,
    /// Predicted time: `max(time_memory_us, time_compute_us) + overhead_us`.
    pub time_us: f64,
    /// The limiting roof.
    pub bound: Bound,
    /// `flops / time`, TFLOP/s (at most the peak).
    pub attainable_tflops: f64,
    /// Why the op is not native, when it is not.
    pub note: Option<String>,
}

/// Predicts an op of known cost running at `exec`'s rate on `hw`. Pure arithmetic: no allocation unless
/// `exec` carries a note.
#[inline]
pub fn predict_cost(cost: OpCost, exec: &Execution, hw: &HardwareProfile) -> Prediction {
    let peak = exec.peak_tflops;
    let flops = cost.flops as f64;
    let bytes = cost.bytes as f64;
    let (stream_us, latency_us) = hw.stream_time_us(cost.bytes, cost.written);
    // The rate this op's bytes stream at: bytes / (GB/s * 1e3) = microseconds.
    let bw = match hw.read_bandwidth_gb_s {
        Some(_) if stream_us > 0.0 => bytes / (stream_us * 1e3),
        _ => hw.memory_bandwidth_gb_s,
    };
    let time_memory_us = stream_us + latency_us;
    // FLOPs / (TFLOP/s * 1e6) = microseconds.
    let time_compute_us = flops / (peak * 1e6);
    let overhead_us = hw.launch_overhead_us.unwrap_or(0.0);
    let (time_us, bound, attainable_tflops) = roof(flops, time_memory_us, time_compute_us, overhead_us);
    Prediction {
        flops: cost.flops,
        bytes: cost.bytes,
        arithmetic_intensity: if bytes > 0.0 { flops / bytes } else { f64::INFINITY },
        compute: exec.compute,
        mode: exec.mode,
        peak_tflops: peak,
        bandwidth_gb_s: bw,
        ridge_ai: peak * 1e3 / bw,
        time_memory_us,
        time_compute_us,
        overhead_us,
        time_us,
        bound,
        attainable_tflops,
        note: exec.note.clone(),
    }
}

/// The roofline's verdict from the two times: (`max(memory, compute) + overhead`, the limiting roof,
/// attained TFLOP/s).
fn roof(flops: f64, time_memory_us: f64, time_compute_us: f64, overhead_us: f64) -> (f64, Bound, f64) {
    let (roof_us, bound) = if time_compute_us > time_memory_us {
        (time_compute_us, Bound::Compute)
    } else {
        (time_memory_us, Bound::Memory)
    };
    let time_us = roof_us + overhead_us;
    (time_us, bound, if time_us > 0.0 { flops / (time_us * 1e6) } else { 0.0 })
}

impl Prediction {
    /// The same op run inside another kernel (a fused engine): bytes over bandwidth and FLOPs over peak as
    /// before, without the fixed costs of a kernel of its own (memory start-up latency, launch overhead).
    pub fn without_fixed_costs(&self) -> Prediction {
        let time_memory_us =
            if self.bandwidth_gb_s > 0.0 { self.bytes as f64 / (self.bandwidth_gb_s * 1e3) } else { 0.0 };
        let (time_us, bound, attainable_tflops) = roof(self.flops as f64, time_memory_us, self.time_compute_us, 0.0);
        Prediction { time_memory_us, overhead_us: 0.0, time_us, bound, attainable_tflops, ..self.clone() }
    }
}

/// Predicts a GEMM on `hw`.
pub fn predict(gemm: &Gemm, hw: &HardwareProfile) -> Result<Prediction, CoreError> {
    let exec = gemm.scheme.execution(hw)?;
    Ok(predict_cost(gemm.cost()?, &exec, hw))
}

/// A request to predict one GEMM shape under several schemes: the input of `roofline predict --json` and
/// of `POST /api/analyze`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictRequest {
    /// Rows of activations/output (tokens); 1 = GEMV.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Independent products sharing one weight matrix (default 1).
    #[serde(default = "one")]
    pub batch: u64,
    /// Schemes to predict; empty = every format the hardware computes natively, uniform.
    #[serde(default)]
    pub schemes: Vec<Scheme>,
}

fn one() -> u64 {
    1
}

/// One row of a prediction report.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictRow {
    /// The scheme's label (`FP8_E4M3`, `W:INT4_G128 A:FP16`).
    pub label: String,
    /// The scheme itself.
    pub scheme: Scheme,
    /// The prediction.
    pub prediction: Prediction,
    /// Time of uniform FP16 (or the fastest-supported 16-bit baseline) over this row's time.
    pub speedup_vs_fp16: Option<f64>,
    /// Whether this row has the lowest predicted time.
    pub best: bool,
}

/// The answer to a [`PredictRequest`].
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictReport {
    /// Hardware key.
    pub hardware: String,
    /// Hardware name.
    pub hardware_name: String,
    /// Where the hardware numbers come from.
    pub hardware_source: String,
    /// Shape predicted.
    pub m: u64,
    /// Shape predicted.
    pub n: u64,
    /// Shape predicted.
    pub k: u64,
    /// Batch.
    pub batch: u64,
    /// One row per scheme, in request order.
    pub rows: Vec<PredictRow>,
}

/// Runs a [`PredictRequest`] on `hw`: one row per scheme, speedups against the uniform FP16 baseline (BF16
/// when the hardware has no FP16 rate), the fastest row marked best.
pub fn predict_report(req: &PredictRequest, hw: &HardwareProfile) -> Result<PredictReport, CoreError> {
    let schemes: Vec<Scheme> = if req.schemes.is_empty() {
        hw.native_formats().into_iter().map(Scheme::uniform).collect()
    } else {
        req.schemes.clone()
    };
    let baseline = [Format::FP16, Format::BF16]
        .into_iter()
        .find(|f| f.compute_class().and_then(|c| hw.peak(c)).is_some())
        .map(|f| Gemm::batched(req.batch, req.m, req.n, req.k, true, Scheme::uniform(f)).and_then(|g| predict(&g, hw)))
        .transpose()?
        .map(|p| p.time_us);
    let mut rows = schemes
        .into_iter()
        .map(|scheme| {
            let gemm = Gemm::batched(req.batch, req.m, req.n, req.k, true, scheme)?;
            let prediction = predict(&gemm, hw)?;
            Ok(PredictRow {
                label: scheme.label(),
                scheme,
                speedup_vs_fp16: baseline.map(|b| b / prediction.time_us),
                prediction,
                best: false,
            })
        })
        .collect::<Result<Vec<_>, CoreError>>()?;
    if let Some(best) = rows.iter_mut().min_by(|a, b| a.prediction.time_us.total_cmp(&b.prediction.time_us)) {
        best.best = true;
    }
    Ok(PredictReport {
        hardware: hw.key.clone(),
        hardware_name: hw.name.clone(),
        hardware_source: hw.source.clone(),
        m: req.m,
        n: req.n,
        k: req.k,
        batch: req.batch,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds' placeholder GB10: 1000 GB/s, FP16 200, FP8/INT8 400, INT4/NVFP4 800 TFLOP/s.
    fn seed() -> HardwareProfile {
        HardwareProfile::preset("seed-gb10").unwrap()
    }

    fn p(m: u64, n: u64, k: u64, s: Scheme) -> Prediction {
        predict(&Gemm::new(m, n, k, s).unwrap(), &seed()).unwrap()
    }

    fn close(actual: f64, expected: f64, rel: f64) -> bool {
        ((actual - expected) / expected).abs() <= rel
    }

    #[test]
    fn seed_gemv_table() {
        let cases = [
            (Format::FP16, 33.6, 1.00),
            (Format::FP8_E4M3, 16.8, 2.00),
            (Format::INT8, 16.8, 2.00),
            (Format::INT4, 8.4, 4.00),
            // exact NVFP4 bytes: 4.5 bits per element + one FP32 tensor scale per tensor (the seed's 0.566
            // B/element rounding gives 9.5 us, AI 3.5)
            (Format::NVFP4, 9.45, 3.55),
        ];
        for (f, t, ai) in cases {
            let pr = p(1, 4096, 4096, Scheme::uniform(f));
            assert!(close(pr.time_us, t, 0.01), "{f}: {} us vs {t}", pr.time_us);
            assert!(close(pr.arithmetic_intensity, ai, 0.01), "{f}: AI {} vs {ai}", pr.arithmetic_intensity);
            assert_eq!(pr.bound, Bound::Memory, "{f}");
        }
        // the seed's own figure for NVFP4 is "about 9.5 us": within 1%
        assert!(close(p(1, 4096, 4096, Scheme::uniform(Format::NVFP4)).time_us, 9.5, 0.01));
    }

    #[test]
    fn seed_gemm_table() {
        for (f, t) in [
            (Format::FP16, 343.6),
            (Format::FP8_E4M3, 171.8),
            (Format::INT8, 171.8),
            (Format::NVFP4, 85.9),
            (Format::INT4, 85.9),
        ] {
            let pr = p(2048, 4096, 4096, Scheme::uniform(f));
            assert!(close(pr.time_us, t, 0.01), "{f}: {} us vs {t}", pr.time_us);
            assert_eq!(pr.bound, Bound::Compute, "{f}");
        }
    }

    #[test]
    fn weight_only_speeds_memory_bound_not_compute_bound() {
        let w4a16 = Scheme::weight_only(Format::INT4, Format::FP16);
        let gemv = p(1, 4096, 4096, w4a16);
        assert_eq!(gemv.bound, Bound::Memory);
        assert!(close(gemv.time_us, 8.4, 0.01), "{}", gemv.time_us);
        let gemm = p(2048, 4096, 4096, w4a16);
        assert_eq!(gemm.bound, Bound::Compute);
        assert!(close(gemm.time_us, 343.6, 0.01), "{}", gemm.time_us);
        assert_eq!(gemm.mode, ExecMode::WeightOnly);
    }

    #[test]
    fn derived_figures_are_consistent() {
        let pr = p(512, 4096, 4096, Scheme::uniform(Format::FP16));
        assert!(close(pr.ridge_ai, 200.0, 1e-12));
        assert!(close(pr.time_us, pr.time_memory_us.max(pr.time_compute_us), 1e-12));
        assert!(pr.attainable_tflops <= pr.peak_tflops * (1.0 + 1e-12));
        let expected = (pr.arithmetic_intensity * pr.bandwidth_gb_s / 1e3).min(pr.peak_tflops);
        assert!(close(pr.attainable_tflops, expected, 1e-9));
    }

    #[test]
    fn a_read_calibrated_profile_prices_a_gemv_at_the_read_rate() {
        let mut hw = seed();
        hw.memory_latency_us = Some(1.5);
        hw.launch_overhead_us = Some(1.0);
        let gemv = Gemm::new(1, 4096, 4096, Scheme::uniform(Format::FP16)).unwrap();
        let copy = predict(&gemv, &hw).unwrap();
        hw.read_bandwidth_gb_s = Some(hw.memory_bandwidth_gb_s * 1.25);
        hw.read_latency_us = Some(0.5);
        let read = predict(&gemv, &hw).unwrap();
        let (bytes, y) = (gemv.bytes().unwrap() as f64, 4096.0 * 2.0);
        let per_copy = 1.0 / (hw.memory_bandwidth_gb_s * 1e3);
        let per_read = per_copy / 1.25;
        let stream = (bytes - y) * per_read + y * (2.0 * per_copy - per_read);
        let latency = ((bytes - y) * 0.5 + y * 1.5) / bytes;
        assert!(close(read.time_memory_us, stream + latency, 1e-12), "{} vs {}", read.time_memory_us, stream + latency);
        assert!(close(read.time_us, read.time_memory_us + 1.0, 1e-12));
        assert!(read.time_us < copy.time_us);
        // The bandwidth reported is the rate this op's bytes stream at, and fused ops keep it.
        assert!(close(read.bandwidth_gb_s, bytes / (stream * 1e3), 1e-12));
        assert!(close(read.without_fixed_costs().time_us, stream, 1e-12));
    }

    #[test]
    fn report_marks_best_and_speedup() {
        let req = PredictRequest { m: 1, n: 4096, k: 4096, batch: 1, schemes: vec![] };
        let report = predict_report(&req, &seed()).unwrap();
        assert_eq!(report.rows.iter().filter(|r| r.best).count(), 1);
        let best = report.rows.iter().find(|r| r.best).unwrap();
        assert!(best.label == "INT4" || best.label == "NVFP4", "{}", best.label);
        let fp16 = report.rows.iter().find(|r| r.label == "FP16").unwrap();
        assert!(close(fp16.speedup_vs_fp16.unwrap(), 1.0, 1e-12));
        let int4 = report.rows.iter().find(|r| r.label == "INT4").unwrap();
        assert!(close(int4.speedup_vs_fp16.unwrap(), 4.0, 0.01));
    }
}
