//! NVML telemetry for `roofline`: GPU status snapshots, a `watch` loop, and a background power tracker.
//!
//! NVML (`libnvidia-ml`) is loaded at run time through the `nvml-wrapper` crate, so this crate builds and runs on
//! machines with no NVIDIA driver: [`Telemetry::init`] then returns [`TelemetryError::NvmlUnavailable`] and the
//! caller exits non-zero.
//!
//! - [`mod@status`]: [`GpuStatus`] snapshots ([`status()`], [`status_all()`], [`Telemetry::status`]) and table printers.
//! - [`mod@watch`]: a refreshing table or JSON-lines stream, stopped by a flag or after a count.
//! - [`power`]: [`PowerTracker`] (a sampling thread between `start` and `stop`) and the pure arithmetic over
//!   [`Sample`]s ([`summarize`], [`energy_trapezoid_j`], [`clocks_dropped`]) that turns samples into a
//!   [`PowerSummary`].
//! - [`cli`]: clap `Args` for `gpu status` and `gpu watch` and the `run_*` functions behind them.

pub mod cli;
pub mod power;
pub mod status;
pub mod throttle;
pub mod watch;

use std::sync::Arc;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

pub use power::{
    clocks_dropped, energy_trapezoid_j, summarize, PowerSource, PowerSummary, PowerTracker, PowerTrackerConfig, Sample,
};
pub use status::{format_status_table, format_watch_table, status, status_all, GpuStatus};
pub use throttle::{throttle_reason_names, CLOCK_LIMITING_REASONS};
pub use watch::{watch, WatchOptions};

/// Errors of the telemetry layer.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// NVML could not be loaded or initialised (no driver, no library, no permission).
    #[error("NVML not available ({0})")]
    NvmlUnavailable(String),
    /// NVML loaded but reports no GPU.
    #[error("NVML found no NVIDIA GPU on this machine")]
    NoDevices,
    /// A GPU index outside `0..count` was asked for.
    #[error("GPU index {index} does not exist: this machine has {count} GPU(s), valid indices are 0..{count}")]
    NoSuchDevice {
        /// The index asked for.
        index: u32,
        /// How many GPUs NVML sees.
        count: u32,
    },
    /// An NVML call that is required (not optional telemetry) failed.
    #[error("NVML call {call} failed: {source}")]
    Nvml {
        /// Which NVML query failed.
        call: &'static str,
        /// The underlying NVML error.
        #[source]
        source: NvmlError,
    },
    /// A bad option value (names the option, the value and what is allowed).
    #[error("invalid {name} = {value}: {allowed}")]
    InvalidOption {
        /// The option's name.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// `PowerTracker::start` was called while it was already running.
    #[error("power tracker is already running; call stop() first")]
    TrackerAlreadyRunning,
    /// `PowerTracker::stop` was called while it was not running.
    #[error("power tracker is not running; call start() first")]
    TrackerNotRunning,
    /// The sampling thread panicked.
    #[error("power sampling thread panicked")]
    TrackerThreadPanicked,
    /// Writing output failed.
    #[error("writing output failed: {0}")]
    Io(#[from] std::io::Error),
    /// JSON serialisation failed.
    #[error("JSON serialisation failed: {0}")]
    Json(#[from] serde_json::Error),
}

/// A handle on an initialised NVML library, cheap to clone and shareable across threads.
#[derive(Clone)]
pub struct Telemetry {
    nvml: Arc<Nvml>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Loads `libnvidia-ml` and initialises NVML.
    ///
    /// Returns [`TelemetryError::NvmlUnavailable`] (never panics) when the library or driver is missing.
    pub fn init() -> Result<Self, TelemetryError> {
        let nvml = Nvml::init().map_err(|e| TelemetryError::NvmlUnavailable(e.to_string()))?;
        Ok(Self { nvml: Arc::new(nvml) })
    }

    /// Number of GPUs NVML sees.
    pub fn device_count(&self) -> Result<u32, TelemetryError> {
        self.nvml.device_count().map_err(|source| TelemetryError::Nvml { call: "nvmlDeviceGetCount", source })
    }

    /// Checks that `index` names an existing GPU.
    pub fn check_index(&self, index: u32) -> Result<(), TelemetryError> {
        let count = self.device_count()?;
        if count == 0 {
            return Err(TelemetryError::NoDevices);
        }
        if index >= count {
            return Err(TelemetryError::NoSuchDevice { index, count });
        }
        Ok(())
    }

    pub(crate) fn nvml(&self) -> &Arc<Nvml> {
        &self.nvml
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_without_driver_is_an_error_not_a_panic() {
        // On the development machine (no NVIDIA driver) this must be the clear error; on a GPU machine it succeeds.
        match Telemetry::init() {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with("NVML not available ("), "unexpected message: {msg}");
                assert!(msg.ends_with(')'), "unexpected message: {msg}");
            }
            Ok(t) => {
                assert!(t.device_count().is_ok());
            }
        }
    }

    #[test]
    fn error_messages_name_the_problem() {
        let e = TelemetryError::NoSuchDevice { index: 3, count: 1 };
        assert_eq!(e.to_string(), "GPU index 3 does not exist: this machine has 1 GPU(s), valid indices are 0..1");
        let e = TelemetryError::NvmlUnavailable("libnvidia-ml.so: cannot open".into());
        assert_eq!(e.to_string(), "NVML not available (libnvidia-ml.so: cannot open)");
    }
}
