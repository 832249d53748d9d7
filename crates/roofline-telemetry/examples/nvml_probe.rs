//! Prints GPU status and runs a PowerTracker for a while: `nvml_probe [seconds=2] [interval_ms=10] [index=0]`.
//! Load the GPU from another process during the run to see power rise.

use std::process::ExitCode;
use std::time::Duration;

use roofline_telemetry::{format_status_table, PowerTracker, PowerTrackerConfig, Telemetry, TelemetryError};

fn arg<T: std::str::FromStr>(n: usize, name: &str, default: T) -> Result<T, String> {
    match std::env::args().nth(n) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| format!("invalid {name}: {v}")),
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: f64 = arg(1, "seconds", 2.0)?;
    let interval_ms: u64 = arg(2, "interval_ms", 10)?;
    let index: u32 = arg(3, "index", 0)?;
    let telemetry = Telemetry::init()?;
    let statuses = telemetry.status_all()?;
    print!("{}", format_status_table(&statuses));
    println!("{}", serde_json::to_string(&statuses)?);

    let config = PowerTrackerConfig { interval: Duration::from_millis(interval_ms), ..Default::default() };
    let mut tracker = PowerTracker::new(&telemetry, index, config)?;
    tracker.start()?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (samples, source) = tracker.stop_samples()?;
    let mut summary = roofline_telemetry::summarize(&samples, PowerTrackerConfig::default().clock_drop_threshold);
    summary.power_source = Some(source);
    let gaps: Vec<f64> = samples.windows(2).map(|w| (w[1].t_s - w[0].t_s) * 1e3).collect();
    let max_gap = gaps.iter().copied().fold(0.0, f64::max);
    let mean_gap = if gaps.is_empty() { 0.0 } else { gaps.iter().sum::<f64>() / gaps.len() as f64 };
    println!("sample interval: mean {mean_gap:.2} ms, max {max_gap:.2} ms");
    println!("{}", serde_json::to_string_pretty(&summary)?);
    // Power trace, decimated to about 20 points.
    let step = (samples.len() / 20).max(1);
    for s in samples.iter().step_by(step) {
        println!(
            "t={:6.3}s P={:7.1}W sm={:?} temp={:?} throttle={:?}",
            s.t_s,
            s.power_w,
            s.sm_clock_mhz,
            s.temperature_c,
            roofline_telemetry::throttle_reason_names(s.throttle_reasons)
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            if e.downcast_ref::<TelemetryError>().is_some_and(|t| matches!(t, TelemetryError::NvmlUnavailable(_))) {
                eprintln!("(this probe needs an NVIDIA driver)");
            }
            ExitCode::FAILURE
        }
    }
}
