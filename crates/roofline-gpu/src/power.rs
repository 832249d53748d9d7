//! Power during a measurement: a [`PowerMeter`] (NVML sampling, supplied by the caller so this crate needs
//! no NVML) runs while the op is held back to back for a fixed GPU time; energy per run and efficiency follow.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use roofline_core::PowerStats;

use crate::{timing, GpuError};

/// What a meter saw over one sustained run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeterReading {
    /// Mean board power, W.
    pub mean_power_w: f64,
    /// Highest sample, W.
    pub peak_power_w: f64,
    /// Energy over the run, J (the driver's counter when it has one, else integrated samples).
    pub energy_j: f64,
    /// Whether SM clocks fell or a throttle reason appeared.
    pub clocks_dropped: bool,
}

/// Something that samples the GPU's power between `start` and `stop` (the CLI wraps roofline-telemetry's
/// NVML power tracker in one).
pub trait PowerMeter {
    /// Starts sampling.
    fn start(&mut self) -> Result<(), GpuError>;
    /// Stops sampling and summarizes.
    fn stop(&mut self) -> Result<MeterReading, GpuError>;
}

/// Holds `op` for `duration_ms` of GPU time under `meter` and turns the reading into per-run figures for
/// an op of `flops` and `bytes`.
pub(crate) fn measure_power(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    duration_ms: f64,
    meter: &mut dyn PowerMeter,
    flops: f64,
    bytes: f64,
    op: impl FnMut(usize) -> Result<(), GpuError>,
) -> Result<PowerStats, GpuError> {
    stream.synchronize()?;
    meter.start()?;
    let run = timing::sustain(ctx, stream, duration_ms, op);
    let reading = meter.stop()?;
    let (runs, gpu_ms) = run?;
    Ok(power_stats(reading, runs, gpu_ms, flops, bytes))
}

/// Per-run power figures from a reading over `runs` runs taking `gpu_ms` in all.
pub fn power_stats(r: MeterReading, runs: u64, gpu_ms: f64, flops: f64, bytes: f64) -> PowerStats {
    let per_run_s = gpu_ms / 1e3 / runs.max(1) as f64;
    let tflops = flops / per_run_s / 1e12;
    let gb_s = bytes / per_run_s / 1e9;
    let w = r.mean_power_w.max(f64::MIN_POSITIVE);
    PowerStats {
        mean_power_w: r.mean_power_w,
        peak_power_w: r.peak_power_w,
        energy_per_run_j: r.energy_j / runs.max(1) as f64,
        tflops_per_w: tflops / w,
        gb_s_per_w: gb_s / w,
        clocks_dropped: r.clocks_dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_run_figures() {
        let r = MeterReading { mean_power_w: 500.0, peak_power_w: 650.0, energy_j: 750.0, clocks_dropped: true };
        // 1000 runs in 1.5 s: 1.5 ms each; 1e12 FLOP per run -> 666.7 TFLOP/s -> 1.333 TFLOP/s/W.
        let p = power_stats(r, 1000, 1500.0, 1e12, 3e9);
        assert!((p.energy_per_run_j - 0.75).abs() < 1e-12);
        assert!((p.tflops_per_w - 1e12 / 1.5e-3 / 1e12 / 500.0).abs() < 1e-9);
        assert!((p.gb_s_per_w - 3e9 / 1.5e-3 / 1e9 / 500.0).abs() < 1e-9);
        assert!(p.clocks_dropped);
        assert_eq!(p.peak_power_w, 650.0);
    }
}
