//! `gpu watch`: GPU status streamed as a refreshing table or as JSON lines.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::status::{format_watch_table, GpuStatus};
use crate::{Telemetry, TelemetryError};

/// ANSI: clear the screen and move the cursor home.
const CLEAR: &str = "\x1b[2J\x1b[H";

/// Settings of the watch loop.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchOptions {
    /// Time between refreshes (at least 1 ms).
    pub interval: Duration,
    /// Stop after this many refreshes (`None`: until the stop flag is set).
    pub count: Option<u64>,
    /// JSON lines (one object per GPU per refresh) instead of a refreshing table.
    pub json: bool,
    /// Only this GPU (`None`: all GPUs).
    pub index: Option<u32>,
}

/// One JSON line of `gpu watch --json`.
#[derive(Debug, Serialize)]
struct WatchLine<'a> {
    /// Seconds since the watch started.
    t_s: f64,
    #[serde(flatten)]
    status: &'a GpuStatus,
}

/// Streams status to `out` every `interval` until `stop` is set (e.g. by a Ctrl-C handler) or `count` refreshes
/// have been written. Returns the number of refreshes written.
pub fn watch(
    telemetry: &Telemetry,
    options: &WatchOptions,
    stop: &AtomicBool,
    out: &mut dyn Write,
) -> Result<u64, TelemetryError> {
    if options.interval < Duration::from_millis(1) {
        return Err(TelemetryError::InvalidOption {
            name: "interval-ms",
            value: options.interval.as_millis().to_string(),
            allowed: "at least 1",
        });
    }
    if let Some(index) = options.index {
        telemetry.check_index(index)?;
    }
    let t0 = Instant::now();
    let mut done = 0u64;
    while !stop.load(Ordering::Acquire) && options.count.is_none_or(|c| done < c) {
        let statuses = match options.index {
            Some(i) => vec![telemetry.status(i)?],
            None => telemetry.status_all()?,
        };
        let t_s = t0.elapsed().as_secs_f64();
        if options.json {
            for status in &statuses {
                serde_json::to_writer(&mut *out, &WatchLine { t_s, status })?;
                out.write_all(b"\n")?;
            }
        } else {
            write!(
                out,
                "{CLEAR}roofline gpu watch  t = {t_s:.1} s  (every {} ms, Ctrl-C to stop)\n\n",
                options.interval.as_millis()
            )?;
            out.write_all(format_watch_table(&statuses).as_bytes())?;
        }
        out.flush()?;
        done += 1;
        if options.count.is_some_and(|c| done >= c) {
            break;
        }
        let deadline = t0 + options.interval * u32::try_from(done).unwrap_or(u32::MAX);
        while !stop.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
        }
    }
    Ok(done)
}
