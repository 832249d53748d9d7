//! Command-line front for `roofline gpu status` and `roofline gpu watch`: clap `Args` and the `run_*` functions.
//!
//! The binary embeds [`GpuArgs`] as a subcommand, sets a stop flag from its Ctrl-C handler, and maps an `Err` to a
//! non-zero exit (without NVML the error reads "NVML not available (reason)").

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::status::format_status_table;
use crate::watch::{watch, WatchOptions};
use crate::{Telemetry, TelemetryError};

/// `roofline gpu ...`: GPU telemetry through NVML.
#[derive(Debug, Clone, Args)]
pub struct GpuArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: GpuCommand,
}

/// The `gpu` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum GpuCommand {
    /// Print a snapshot of each GPU: clocks, power, temperature, memory, utilization, PCIe/NVLink, throttling.
    Status(StatusArgs),
    /// Stream GPU status as a refreshing table (or JSON lines) until Ctrl-C.
    Watch(WatchArgs),
}

/// Options of `gpu status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Print JSON (an array of GPU objects) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only this GPU (NVML index); default: all GPUs.
    #[arg(long)]
    pub index: Option<u32>,
}

/// Options of `gpu watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Milliseconds between refreshes.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub interval_ms: u64,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
    /// Print one JSON object per GPU per refresh (JSON lines) instead of a refreshing table.
    #[arg(long)]
    pub json: bool,
    /// Only this GPU (NVML index); default: all GPUs.
    #[arg(long)]
    pub index: Option<u32>,
}

/// Runs a `gpu` subcommand, writing to `out`; `stop` ends `watch` when set.
pub fn run_gpu(args: &GpuArgs, stop: &AtomicBool, out: &mut dyn Write) -> Result<(), TelemetryError> {
    match &args.command {
        GpuCommand::Status(a) => run_status(a, out),
        GpuCommand::Watch(a) => run_watch(a, stop, out).map(|_| ()),
    }
}

/// `gpu status`: a table (or JSON array) of every GPU, or of `--index N`.
pub fn run_status(args: &StatusArgs, out: &mut dyn Write) -> Result<(), TelemetryError> {
    let telemetry = Telemetry::init()?;
    let statuses = match args.index {
        Some(i) => vec![telemetry.status(i)?],
        None => telemetry.status_all()?,
    };
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &statuses)?;
        out.write_all(b"\n")?;
    } else {
        out.write_all(format_status_table(&statuses).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// `gpu watch`: streams until `stop` is set or `--count` refreshes; returns the number of refreshes.
pub fn run_watch(args: &WatchArgs, stop: &AtomicBool, out: &mut dyn Write) -> Result<u64, TelemetryError> {
    let telemetry = Telemetry::init()?;
    let options = watch_options(args);
    watch(&telemetry, &options, stop, out)
}

/// The library options that `gpu watch` arguments stand for.
pub fn watch_options(args: &WatchArgs) -> WatchOptions {
    WatchOptions {
        interval: Duration::from_millis(args.interval_ms),
        count: args.count,
        json: args.json,
        index: args.index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        top: Top,
    }

    #[derive(Debug, Subcommand)]
    enum Top {
        Gpu(GpuArgs),
    }

    fn parse(args: &[&str]) -> Result<GpuArgs, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("roofline").chain(args.iter().copied()))?;
        let Top::Gpu(g) = cli.top;
        Ok(g)
    }

    #[test]
    fn parses_status() {
        let g = parse(&["gpu", "status", "--json", "--index", "2"]).expect("parse");
        match g.command {
            GpuCommand::Status(s) => {
                assert!(s.json);
                assert_eq!(s.index, Some(2));
            }
            other => panic!("expected status, got {other:?}"),
        }
    }

    #[test]
    fn parses_watch_with_defaults() {
        let g = parse(&["gpu", "watch"]).expect("parse");
        let GpuCommand::Watch(w) = g.command else { panic!("expected watch") };
        assert_eq!(w.interval_ms, 100);
        assert_eq!(w.count, None);
        assert!(!w.json);
        let o = watch_options(&w);
        assert_eq!(o.interval, Duration::from_millis(100));
    }

    #[test]
    fn parses_watch_options() {
        let g = parse(&["gpu", "watch", "--interval-ms", "250", "--count", "4", "--json"]).expect("parse");
        let GpuCommand::Watch(w) = g.command else { panic!("expected watch") };
        assert_eq!((w.interval_ms, w.count, w.json), (250, Some(4), true));
    }

    #[test]
    fn rejects_zero_interval() {
        let err = parse(&["gpu", "watch", "--interval-ms", "0"]).expect_err("0 must be rejected");
        assert!(err.to_string().contains("interval-ms"), "{err}");
    }

    #[test]
    fn without_nvml_status_and_watch_fail_with_a_clear_error() {
        if Telemetry::init().is_ok() {
            return; // a GPU machine: covered by the ignored NVML tests
        }
        let mut out = Vec::new();
        let err = run_status(&StatusArgs { json: false, index: None }, &mut out).expect_err("no NVML here");
        assert!(err.to_string().starts_with("NVML not available ("), "{err}");
        assert!(out.is_empty());
        let stop = AtomicBool::new(false);
        let args = WatchArgs { interval_ms: 10, count: Some(1), json: true, index: None };
        let err = run_watch(&args, &stop, &mut out).expect_err("no NVML here");
        assert!(matches!(err, TelemetryError::NvmlUnavailable(_)));
    }
}
