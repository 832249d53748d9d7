//! NVML tests: they need an NVIDIA GPU and driver, so they are ignored by default
//! (run with `cargo test -p roofline-telemetry -- --ignored` on a GPU machine).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use roofline_telemetry::cli::{run_status, run_watch, StatusArgs, WatchArgs};
use roofline_telemetry::{PowerTracker, PowerTrackerConfig, Telemetry, TelemetryError};

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn status_reads_plausible_values() {
    let telemetry = Telemetry::init().expect("NVML");
    let all = telemetry.status_all().expect("status_all");
    assert!(!all.is_empty());
    let s = &all[0];
    assert!(!s.name.is_empty());
    assert!(s.driver_version.as_deref().is_some_and(|v| !v.is_empty()));
    let power = s.power_w.expect("power");
    let limit = s.power_limit_w.expect("power limit");
    assert!(power > 5.0 && power <= limit * 1.2, "power {power} W, limit {limit} W");
    let total = s.memory_total_bytes.expect("memory total");
    assert!(total > 1_000_000_000);
    assert!(s.memory_used_bytes.expect("memory used") <= total);
    assert!(s.sm_clock_max_mhz.expect("sm max") >= s.sm_clock_mhz.expect("sm"));
    assert!((10..=110).contains(&s.temperature_c.expect("temperature")));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn bad_index_is_an_error() {
    let telemetry = Telemetry::init().expect("NVML");
    let count = telemetry.device_count().expect("count");
    let err = telemetry.status(count).expect_err("index past the end");
    assert!(matches!(err, TelemetryError::NoSuchDevice { .. }), "{err}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn tracker_samples_at_the_requested_rate_and_energy_counter_agrees() {
    let telemetry = Telemetry::init().expect("NVML");
    let mut tracker = PowerTracker::new(&telemetry, 0, PowerTrackerConfig::default()).expect("tracker");
    assert!(matches!(tracker.stop(), Err(TelemetryError::TrackerNotRunning)));
    tracker.start().expect("start");
    assert!(matches!(tracker.start(), Err(TelemetryError::TrackerAlreadyRunning)));
    std::thread::sleep(Duration::from_millis(1500));
    let summary = tracker.stop().expect("stop");
    assert!((1.45..1.7).contains(&summary.duration_s), "duration {}", summary.duration_s);
    // 10 ms period over 1.5 s: about 150 samples; allow for slow NVML calls.
    assert!(summary.samples >= 75, "only {} samples", summary.samples);
    let mean = summary.mean_power_w.expect("mean");
    assert!(mean > 5.0 && summary.peak_power_w.expect("peak") >= mean);
    assert!(summary.energy_j_sampled > 0.0);
    if let Some(agreement) = summary.agreement {
        assert!((0.8..1.25).contains(&agreement), "sampled/counter = {agreement}: {summary:?}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cli_status_and_watch_print() {
    let mut out = Vec::new();
    run_status(&StatusArgs { json: true, index: Some(0) }, &mut out).expect("status");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(v[0]["index"], 0);
    let mut out = Vec::new();
    let stop = AtomicBool::new(false);
    let n = run_watch(&WatchArgs { interval_ms: 20, count: Some(3), json: true, index: Some(0) }, &stop, &mut out)
        .expect("watch");
    assert_eq!(n, 3);
    let text = String::from_utf8(out).expect("utf8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        assert!(v["t_s"].as_f64().is_some() && v["name"].as_str().is_some());
    }
}
