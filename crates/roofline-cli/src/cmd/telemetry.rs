//! `roofline gpu status|watch` (NVML), and the NVML power meter that `--power` hands to the GPU engine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use roofline_gpu::{GpuError, MeterReading, PowerMeter};
use roofline_telemetry::cli::{run_status, run_watch, StatusArgs, WatchArgs};
use roofline_telemetry::{PowerTracker, PowerTrackerConfig, Telemetry};

/// Runs `roofline gpu status`.
pub fn status(args: StatusArgs) -> Result<()> {
    run_status(&args, &mut std::io::stdout().lock())?;
    Ok(())
}

/// Runs `roofline gpu watch` until Ctrl-C (or `--count` refreshes).
pub fn watch(args: WatchArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the Ctrl-C handler")?;
    run_watch(&args, &stop, &mut std::io::stdout().lock())?;
    Ok(())
}

/// `--power` flags shared by measure and sweep.
#[derive(Debug, Clone, Args)]
pub struct PowerArgs {
    /// Sample board power with NVML while the op is held back to back (adds mean/peak power, energy per
    /// run, TFLOP/s per W, GB/s per W and a clock-drop flag to every measurement).
    #[arg(long)]
    pub power: bool,
    /// NVML sampling period with --power, milliseconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub power_interval_ms: u64,
    /// How long each op is held under the power meter, milliseconds of GPU time.
    #[arg(long, default_value_t = 1500.0)]
    pub power_ms: f64,
}

impl PowerArgs {
    /// An NVML meter for GPU `index` when `--power` was given.
    pub fn meter(&self, index: usize) -> Result<Option<NvmlMeter>> {
        if !self.power {
            return Ok(None);
        }
        if !(self.power_ms.is_finite() && self.power_ms >= 100.0) {
            anyhow::bail!("--power-ms must be at least 100 (got {})", self.power_ms);
        }
        let telemetry = Telemetry::init().context("--power needs NVML")?;
        let index = u32::try_from(index).context("--device index too large")?;
        let tracker = PowerTracker::new(
            &telemetry,
            index,
            PowerTrackerConfig { interval: Duration::from_millis(self.power_interval_ms), ..Default::default() },
        )?;
        Ok(Some(NvmlMeter { tracker, last: None }))
    }
}

/// The NVML power tracker as the GPU engine's [`PowerMeter`].
#[derive(Debug)]
pub struct NvmlMeter {
    tracker: PowerTracker,
    /// The full summary of the last run (sampled and counter energy, clocks, throttle reasons).
    pub last: Option<roofline_telemetry::PowerSummary>,
}

impl PowerMeter for NvmlMeter {
    fn start(&mut self) -> Result<(), GpuError> {
        self.tracker.start().map_err(|e| GpuError::Meter(e.to_string()))
    }

    fn stop(&mut self) -> Result<MeterReading, GpuError> {
        let s = self.tracker.stop().map_err(|e| GpuError::Meter(e.to_string()))?;
        let reading = MeterReading {
            mean_power_w: s.mean_power_w.unwrap_or(f64::NAN),
            peak_power_w: s.peak_power_w.unwrap_or(f64::NAN),
            // Prefer the driver's energy counter; integrated samples where the GPU has none.
            energy_j: s.energy_j_counter.unwrap_or(s.energy_j_sampled),
            clocks_dropped: s.clocks_dropped,
        };
        self.last = Some(s);
        Ok(reading)
    }
}
