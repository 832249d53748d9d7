//! Power tracking: a background thread samples NVML between [`PowerTracker::start`] and [`PowerTracker::stop`];
//! pure functions ([`summarize`], [`energy_trapezoid_j`], [`clocks_dropped`]) turn the [`Sample`]s into a
//! [`PowerSummary`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Device;
use serde::{Deserialize, Serialize};

use crate::throttle::{throttle_reason_names, CLOCK_LIMITING_REASONS};
use crate::{Telemetry, TelemetryError};

/// `NVML_FI_DEV_POWER_INSTANT`: instantaneous board power in mW (newer drivers, Ampere and later).
const FIELD_POWER_INSTANT: u32 = 186;

/// One telemetry sample taken by the tracker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the tracker started.
    pub t_s: f64,
    /// Board power (W).
    pub power_w: f64,
    /// SM clock (MHz), if readable.
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock (MHz), if readable.
    pub mem_clock_mhz: Option<u32>,
    /// GPU temperature (°C), if readable.
    pub temperature_c: Option<u32>,
    /// NVML clock-throttle reason bitmask (0 when unreadable or none).
    pub throttle_reasons: u64,
    /// Total-energy counter (mJ since driver load), if the GPU has one.
    pub energy_mj: Option<u64>,
}

/// Where the sampled power came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerSource {
    /// `NVML_FI_DEV_POWER_INSTANT` field: instantaneous power.
    Instant,
    /// `nvmlDeviceGetPowerUsage`: on Ampere and later a 1 s moving average, so short runs are smeared.
    Average,
}

/// Tracker settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerTrackerConfig {
    /// Sampling period (default 10 ms; must be at least 1 ms).
    pub interval: Duration,
    /// Relative SM clock fall, below the highest clock seen so far in the run, that counts as a clock drop
    /// (default 0.05 = 5 %).
    pub clock_drop_threshold: f64,
}

impl Default for PowerTrackerConfig {
    fn default() -> Self {
        Self { interval: Duration::from_millis(10), clock_drop_threshold: 0.05 }
    }
}

/// What a tracked run drew and how the clocks behaved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerSummary {
    /// Number of samples.
    pub samples: usize,
    /// Time from the first to the last sample (s).
    pub duration_s: f64,
    /// Time-weighted mean power (W): sampled energy / duration; the plain mean for a single sample; `None` for none.
    pub mean_power_w: Option<f64>,
    /// Highest sampled power (W); `None` for no samples.
    pub peak_power_w: Option<f64>,
    /// Energy by trapezoidal integration of the samples over their (irregular) times (J).
    pub energy_j_sampled: f64,
    /// Energy from the GPU's total-energy counter between the first and last sample (J), when supported.
    pub energy_j_counter: Option<f64>,
    /// `energy_j_sampled / energy_j_counter` (1.0 = perfect agreement), when the counter gave a positive energy.
    pub agreement: Option<f64>,
    /// Lowest SM clock seen (MHz).
    pub sm_clock_min_mhz: Option<u32>,
    /// Highest SM clock seen (MHz).
    pub sm_clock_max_mhz: Option<u32>,
    /// Lowest memory clock seen (MHz).
    pub mem_clock_min_mhz: Option<u32>,
    /// Highest memory clock seen (MHz).
    pub mem_clock_max_mhz: Option<u32>,
    /// Lowest temperature seen (°C).
    pub temperature_min_c: Option<u32>,
    /// Highest temperature seen (°C).
    pub temperature_max_c: Option<u32>,
    /// Every throttle reason seen in any sample, decoded.
    pub throttle_reasons_seen: Vec<String>,
    /// True when the SM clock fell more than the threshold below the highest clock seen earlier in the run, or a
    /// power/thermal limiting reason ([`CLOCK_LIMITING_REASONS`]) appeared: such a measurement is not to be trusted
    /// silently.
    pub clocks_dropped: bool,
    /// Where the power numbers came from (`None` for summaries built from synthetic samples).
    pub power_source: Option<PowerSource>,
}

/// Energy (J) by the trapezoidal rule over samples at irregular times. Pairs whose time does not increase are
/// skipped. Zero or one sample gives 0.
pub fn energy_trapezoid_j(samples: &[Sample]) -> f64 {
    samples
        .windows(2)
        .map(|w| {
            let dt = w[1].t_s - w[0].t_s;
            if dt > 0.0 {
                0.5 * (w[0].power_w + w[1].power_w) * dt
            } else {
                0.0
            }
        })
        .sum()
}

/// Whether the clocks dropped during the run: the SM clock fell more than `threshold` (a fraction) below the
/// highest SM clock seen *earlier* in the run (a ramp up from idle is not a drop), or any sample carries a
/// power or thermal limiting reason.
pub fn clocks_dropped(samples: &[Sample], threshold: f64) -> bool {
    let mut running_max: Option<u32> = None;
    for s in samples {
        if s.throttle_reasons & CLOCK_LIMITING_REASONS != 0 {
            return true;
        }
        if let Some(clock) = s.sm_clock_mhz {
            if let Some(max) = running_max {
                if f64::from(clock) < f64::from(max) * (1.0 - threshold) {
                    return true;
                }
            }
            running_max = Some(running_max.map_or(clock, |m| m.max(clock)));
        }
    }
    false
}

fn min_max(values: impl Iterator<Item = Option<u32>>) -> (Option<u32>, Option<u32>) {
    values.flatten().fold((None, None), |(lo, hi), v| {
        (Some(lo.map_or(v, |l: u32| l.min(v))), Some(hi.map_or(v, |h: u32| h.max(v))))
    })
}

/// Summarises samples (pure: no NVML). `clock_drop_threshold` as in [`PowerTrackerConfig`].
pub fn summarize(samples: &[Sample], clock_drop_threshold: f64) -> PowerSummary {
    let duration_s = match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => (b.t_s - a.t_s).max(0.0),
        _ => 0.0,
    };
    let energy_j_sampled = energy_trapezoid_j(samples);
    let mean_power_w = if samples.is_empty() {
        None
    } else if duration_s > 0.0 {
        Some(energy_j_sampled / duration_s)
    } else {
        Some(samples.iter().map(|s| s.power_w).sum::<f64>() / samples.len() as f64)
    };
    let peak_power_w =
        samples.iter().map(|s| s.power_w).fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.max(p))));
    let energy_j_counter = match (samples.first().and_then(|s| s.energy_mj), samples.last().and_then(|s| s.energy_mj)) {
        (Some(a), Some(b)) if b >= a && samples.len() >= 2 => Some((b - a) as f64 / 1000.0),
        _ => None,
    };
    let agreement = energy_j_counter.filter(|c| *c > 0.0).map(|c| energy_j_sampled / c);
    let (sm_clock_min_mhz, sm_clock_max_mhz) = min_max(samples.iter().map(|s| s.sm_clock_mhz));
    let (mem_clock_min_mhz, mem_clock_max_mhz) = min_max(samples.iter().map(|s| s.mem_clock_mhz));
    let (temperature_min_c, temperature_max_c) = min_max(samples.iter().map(|s| s.temperature_c));
    let seen = samples.iter().fold(0u64, |acc, s| acc | s.throttle_reasons);
    PowerSummary {
        samples: samples.len(),
        duration_s,
        mean_power_w,
        peak_power_w,
        energy_j_sampled,
        energy_j_counter,
        agreement,
        sm_clock_min_mhz,
        sm_clock_max_mhz,
        mem_clock_min_mhz,
        mem_clock_max_mhz,
        temperature_min_c,
        temperature_max_c,
        throttle_reasons_seen: throttle_reason_names(seen),
        clocks_dropped: clocks_dropped(samples, clock_drop_threshold),
        power_source: None,
    }
}

struct Running {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<(Vec<Sample>, PowerSource), TelemetryError>>,
}

/// Samples one GPU's power, clocks, temperature and throttle reasons on a background thread.
///
/// ```no_run
/// # fn main() -> Result<(), roofline_telemetry::TelemetryError> {
/// let telemetry = roofline_telemetry::Telemetry::init()?;
/// let mut tracker = roofline_telemetry::PowerTracker::new(&telemetry, 0, Default::default())?;
/// tracker.start()?;
/// // ... timed GPU work ...
/// let summary = tracker.stop()?;
/// println!("{:?} W mean, {} J", summary.mean_power_w, summary.energy_j_sampled);
/// # Ok(()) }
/// ```
pub struct PowerTracker {
    telemetry: Telemetry,
    index: u32,
    config: PowerTrackerConfig,
    running: Option<Running>,
}

impl std::fmt::Debug for PowerTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PowerTracker")
            .field("index", &self.index)
            .field("config", &self.config)
            .field("running", &self.running.is_some())
            .finish()
    }
}

impl PowerTracker {
    /// A tracker for GPU `index`; checks the index and the settings.
    pub fn new(telemetry: &Telemetry, index: u32, config: PowerTrackerConfig) -> Result<Self, TelemetryError> {
        if config.interval < Duration::from_millis(1) {
            return Err(TelemetryError::InvalidOption {
                name: "interval",
                value: format!("{:?}", config.interval),
                allowed: "at least 1 ms",
            });
        }
        if !(config.clock_drop_threshold > 0.0 && config.clock_drop_threshold < 1.0) {
            return Err(TelemetryError::InvalidOption {
                name: "clock_drop_threshold",
                value: config.clock_drop_threshold.to_string(),
                allowed: "a fraction strictly between 0 and 1",
            });
        }
        telemetry.check_index(index)?;
        Ok(Self { telemetry: telemetry.clone(), index, config, running: None })
    }

    /// Starts sampling on a background thread (the first sample is taken at once).
    pub fn start(&mut self) -> Result<(), TelemetryError> {
        if self.running.is_some() {
            return Err(TelemetryError::TrackerAlreadyRunning);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let nvml = Arc::clone(self.telemetry.nvml());
        let index = self.index;
        let interval = self.config.interval;
        let handle = std::thread::Builder::new().name(format!("roofline-power-{index}")).spawn(
            move || -> Result<(Vec<Sample>, PowerSource), TelemetryError> {
                let device = nvml
                    .device_by_index(index)
                    .map_err(|source| TelemetryError::Nvml { call: "nvmlDeviceGetHandleByIndex", source })?;
                let source =
                    if read_instant_power_w(&device).is_some() { PowerSource::Instant } else { PowerSource::Average };
                let t0 = Instant::now();
                let mut samples = Vec::with_capacity(1024);
                let mut tick: u32 = 0;
                loop {
                    let stopping = thread_stop.load(Ordering::Acquire);
                    samples.push(read_sample(&device, source, t0)?);
                    if stopping {
                        break;
                    }
                    tick = tick.saturating_add(1);
                    let deadline = t0 + interval * tick;
                    // Sleep in slices so that stop() is answered within about a millisecond.
                    loop {
                        if thread_stop.load(Ordering::Acquire) {
                            break;
                        }
                        let now = Instant::now();
                        if now >= deadline {
                            break;
                        }
                        std::thread::sleep((deadline - now).min(Duration::from_millis(1)));
                    }
                }
                Ok((samples, source))
            },
        )?;
        self.running = Some(Running { stop, handle });
        Ok(())
    }

    /// Stops sampling (a last sample is taken at the stop) and summarises the run.
    pub fn stop(&mut self) -> Result<PowerSummary, TelemetryError> {
        let (samples, source) = self.stop_samples()?;
        let mut summary = summarize(&samples, self.config.clock_drop_threshold);
        summary.power_source = Some(source);
        Ok(summary)
    }

    /// Like [`stop`](Self::stop) but returns the raw samples (for plots or custom analysis) and the power source.
    pub fn stop_samples(&mut self) -> Result<(Vec<Sample>, PowerSource), TelemetryError> {
        let running = self.running.take().ok_or(TelemetryError::TrackerNotRunning)?;
        running.stop.store(true, Ordering::Release);
        running.handle.join().map_err(|_| TelemetryError::TrackerThreadPanicked)?
    }

    /// Whether the tracker is sampling.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }
}

impl Drop for PowerTracker {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop.store(true, Ordering::Release);
            let _ = running.handle.join();
        }
    }
}

fn sample_value_f64(v: &SampleValue) -> f64 {
    match *v {
        SampleValue::F64(x) => x,
        SampleValue::U32(x) => f64::from(x),
        SampleValue::U64(x) => x as f64,
        SampleValue::I64(x) => x as f64,
    }
}

/// Instantaneous power (W) from the field-values API, if this driver and GPU provide it.
fn read_instant_power_w(device: &Device<'_>) -> Option<f64> {
    let values = device.field_values_for(&[FieldId(FIELD_POWER_INSTANT)]).ok()?;
    let first: &FieldValueSample = values.first()?.as_ref().ok()?;
    let mw = sample_value_f64(first.value.as_ref().ok()?);
    (mw > 0.0).then_some(mw / 1000.0)
}

fn read_sample(device: &Device<'_>, source: PowerSource, t0: Instant) -> Result<Sample, TelemetryError> {
    let power_w = match source {
        PowerSource::Instant => read_instant_power_w(device),
        PowerSource::Average => None,
    };
    let power_w = match power_w {
        Some(p) => p,
        None => {
            f64::from(
                device
                    .power_usage()
                    .map_err(|source| TelemetryError::Nvml { call: "nvmlDeviceGetPowerUsage", source })?,
            ) / 1000.0
        }
    };
    let t_s = t0.elapsed().as_secs_f64();
    Ok(Sample {
        t_s,
        power_w,
        sm_clock_mhz: device.clock_info(Clock::SM).ok(),
        mem_clock_mhz: device.clock_info(Clock::Memory).ok(),
        temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
        throttle_reasons: device.current_throttle_reasons().map(|r| r.bits()).unwrap_or(0),
        energy_mj: device.total_energy_consumption().ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_s: f64, power_w: f64) -> Sample {
        Sample {
            t_s,
            power_w,
            sm_clock_mhz: Some(1980),
            mem_clock_mhz: Some(2619),
            temperature_c: Some(40),
            throttle_reasons: 0,
            energy_mj: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn trapezoid_over_irregular_intervals() {
        // 0..0.01 s: (100+200)/2*0.01 = 1.5 J; 0.01..0.05: (200+200)/2*0.04 = 8 J; 0.05..0.08: (200+50)/2*0.03 = 3.75 J
        let samples = vec![s(0.0, 100.0), s(0.01, 200.0), s(0.05, 200.0), s(0.08, 50.0)];
        assert!(close(energy_trapezoid_j(&samples), 13.25));
        let sum = summarize(&samples, 0.05);
        assert_eq!(sum.samples, 4);
        assert!(close(sum.duration_s, 0.08));
        assert!(close(sum.energy_j_sampled, 13.25));
        // Time-weighted mean, not the plain mean of the samples (137.5).
        assert!(close(sum.mean_power_w.expect("mean"), 13.25 / 0.08));
        assert_eq!(sum.peak_power_w, Some(200.0));
    }

    #[test]
    fn trapezoid_skips_non_increasing_times() {
        let samples = vec![s(0.0, 100.0), s(1.0, 100.0), s(1.0, 900.0), s(2.0, 100.0)];
        // (100+100)/2*1 + skipped + (900+100)/2*1
        assert!(close(energy_trapezoid_j(&samples), 600.0));
    }

    #[test]
    fn constant_power_gives_power_times_time() {
        let samples: Vec<Sample> = (0..=100).map(|i| s(f64::from(i) * 0.013, 350.0)).collect();
        let sum = summarize(&samples, 0.05);
        assert!(close(sum.energy_j_sampled, 350.0 * 1.3));
        assert!(close(sum.mean_power_w.expect("mean"), 350.0));
    }

    #[test]
    fn single_sample() {
        let sum = summarize(&[s(0.5, 250.0)], 0.05);
        assert_eq!(sum.samples, 1);
        assert_eq!(sum.duration_s, 0.0);
        assert_eq!(sum.energy_j_sampled, 0.0);
        assert_eq!(sum.mean_power_w, Some(250.0));
        assert_eq!(sum.peak_power_w, Some(250.0));
        assert_eq!(sum.energy_j_counter, None);
        assert_eq!(sum.agreement, None);
        assert_eq!(sum.sm_clock_min_mhz, Some(1980));
        assert!(!sum.clocks_dropped);
    }

    #[test]
    fn zero_samples() {
        let sum = summarize(&[], 0.05);
        assert_eq!(sum.samples, 0);
        assert_eq!(sum.duration_s, 0.0);
        assert_eq!(sum.energy_j_sampled, 0.0);
        assert_eq!(sum.mean_power_w, None);
        assert_eq!(sum.peak_power_w, None);
        assert_eq!(sum.sm_clock_min_mhz, None);
        assert_eq!(sum.temperature_max_c, None);
        assert!(sum.throttle_reasons_seen.is_empty());
        assert!(!sum.clocks_dropped);
    }

    #[test]
    fn counter_energy_and_agreement() {
        let mut samples = vec![s(0.0, 300.0), s(0.5, 300.0), s(1.0, 300.0)];
        samples[0].energy_mj = Some(1_000_000);
        samples[1].energy_mj = Some(1_150_000);
        samples[2].energy_mj = Some(1_312_500);
        let sum = summarize(&samples, 0.05);
        assert!(close(sum.energy_j_sampled, 300.0));
        assert!(close(sum.energy_j_counter.expect("counter"), 312.5));
        assert!(close(sum.agreement.expect("agreement"), 300.0 / 312.5));
    }

    #[test]
    fn counter_going_backwards_is_ignored() {
        let mut samples = vec![s(0.0, 300.0), s(1.0, 300.0)];
        samples[0].energy_mj = Some(5_000);
        samples[1].energy_mj = Some(4_000);
        let sum = summarize(&samples, 0.05);
        assert_eq!(sum.energy_j_counter, None);
        assert_eq!(sum.agreement, None);
    }

    fn with_clock(t: f64, mhz: u32) -> Sample {
        Sample { sm_clock_mhz: Some(mhz), ..s(t, 400.0) }
    }

    #[test]
    fn clock_fall_below_running_max_is_a_drop() {
        let samples =
            vec![with_clock(0.0, 1980), with_clock(0.01, 1980), with_clock(0.02, 1755), with_clock(0.03, 1980)];
        assert!(clocks_dropped(&samples, 0.05));
        let sum = summarize(&samples, 0.05);
        assert!(sum.clocks_dropped);
        assert_eq!(sum.sm_clock_min_mhz, Some(1755));
        assert_eq!(sum.sm_clock_max_mhz, Some(1980));
        // 1755 is 11.4 % below 1980: not a drop under a 15 % threshold.
        assert!(!clocks_dropped(&samples, 0.15));
    }

    #[test]
    fn ramp_up_from_idle_is_not_a_drop() {
        let samples =
            vec![with_clock(0.0, 345), with_clock(0.01, 1200), with_clock(0.02, 1980), with_clock(0.03, 1965)];
        assert!(!clocks_dropped(&samples, 0.05));
    }

    #[test]
    fn limiting_throttle_reason_is_a_drop_even_at_steady_clock() {
        let mut samples = vec![with_clock(0.0, 1980), with_clock(0.01, 1980)];
        samples[1].throttle_reasons = 0x20; // sw_thermal_slowdown
        assert!(clocks_dropped(&samples, 0.05));
        let sum = summarize(&samples, 0.05);
        assert_eq!(sum.throttle_reasons_seen, vec!["sw_thermal_slowdown"]);
    }

    #[test]
    fn idle_or_app_clock_reasons_are_not_drops() {
        let mut samples = vec![with_clock(0.0, 1980), with_clock(0.01, 1980)];
        samples[0].throttle_reasons = 0x1; // gpu_idle
        samples[1].throttle_reasons = 0x2; // applications_clocks_setting
        assert!(!clocks_dropped(&samples, 0.05));
        assert_eq!(summarize(&samples, 0.05).throttle_reasons_seen, vec!["gpu_idle", "applications_clocks_setting"]);
    }

    #[test]
    fn min_max_of_mem_clock_and_temperature_skip_missing() {
        let mut samples = vec![s(0.0, 100.0), s(1.0, 100.0), s(2.0, 100.0)];
        samples[0].temperature_c = Some(35);
        samples[1].temperature_c = None;
        samples[2].temperature_c = Some(61);
        samples[1].mem_clock_mhz = Some(1593);
        let sum = summarize(&samples, 0.05);
        assert_eq!((sum.temperature_min_c, sum.temperature_max_c), (Some(35), Some(61)));
        assert_eq!((sum.mem_clock_min_mhz, sum.mem_clock_max_mhz), (Some(1593), Some(2619)));
    }

    #[test]
    fn summary_serialises_with_unit_names() {
        let json = serde_json::to_value(summarize(&[s(0.0, 1.0), s(1.0, 3.0)], 0.05)).expect("json");
        assert_eq!(json["energy_j_sampled"], 2.0);
        assert_eq!(json["mean_power_w"], 2.0);
        assert_eq!(json["clocks_dropped"], false);
    }
}
