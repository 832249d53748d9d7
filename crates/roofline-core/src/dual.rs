//! Measurements and the [`DualPoint`] that joins a prediction with its measurement.
//!
//! The types live here, not in the GPU crate, so reports, plots and the server can read measured results
//! (from a sweep's JSON/CSV) on a machine with no GPU.

use serde::{Deserialize, Serialize};

use crate::op::Gemm;
use crate::predict::Prediction;

/// Power and clocks sampled while an op was timed (NVML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerStats {
    /// Mean board power over the timed region, W.
    pub mean_power_w: f64,
    /// Highest sampled power, W.
    pub peak_power_w: f64,
    /// Energy of one run of the op, J.
    pub energy_per_run_j: f64,
    /// TFLOP/s per watt at the mean power.
    pub tflops_per_w: f64,
    /// GB/s per watt at the mean power.
    pub gb_s_per_w: f64,
    /// Whether SM clocks dropped or a throttle reason appeared during the run (the point is suspect).
    pub clocks_dropped: bool,
}

/// One op timed on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Device name as the driver reports it.
    pub device: String,
    /// Median time of one run, microseconds.
    pub time_us: f64,
    /// Fastest run, microseconds.
    pub time_us_min: f64,
    /// Slowest run, microseconds.
    pub time_us_max: f64,
    /// Timed runs.
    pub runs: u32,
    /// Achieved TFLOP/s at the median.
    pub tflops: f64,
    /// Achieved GB/s at the median (the op's counted bytes over the median time).
    pub bandwidth_gb_s: f64,
    /// Which implementation ran (`cublaslt`, `roofline-gemv-int4`, ...).
    pub kernel: String,
    /// Power and energy, when sampled.
    #[serde(default)]
    pub power: Option<PowerStats>,
    /// Median time per launch with the launches replayed from a CUDA graph (weight-only GEMVs measured
    /// with `--graph`), microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_us: Option<f64>,
    /// Median host time to enqueue one launch, microseconds (roofline's own timings). Samples are gated, so it
    /// is not in `time_us`; at or above `time_us`, a stream launched from the host one op at a time would wait
    /// on the host, not the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_us: Option<f64>,
}

/// A prediction and (optionally) the measurement of the same op, with the relative error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DualPoint {
    /// Row label (the scheme's label, or a kernel name).
    pub label: String,
    /// The op.
    pub gemm: Gemm,
    /// Theory.
    pub prediction: Prediction,
    /// Practice, if measured.
    pub measurement: Option<Measurement>,
}

impl DualPoint {
    /// `(measured - predicted) / measured`, if measured.
    pub fn error(&self) -> Option<f64> {
        self.measurement.as_ref().map(|m| (m.time_us - self.prediction.time_us) / m.time_us)
    }

    /// Measured throughput as a fraction of the roof at this arithmetic intensity (the attainable TFLOP/s).
    pub fn fraction_of_roof(&self) -> Option<f64> {
        self.measurement.as_ref().map(|m| self.prediction.time_us / m.time_us)
    }
}
