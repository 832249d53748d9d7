//! `--hw`, `--bandwidth-gb-s` and `--peak`: choosing a hardware profile on the command line.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Args;
use roofline_core::{ComputeClass, HardwareProfile};

/// The default hardware when `--hw` is not given.
pub const DEFAULT_HW: &str = "h100";

/// Hardware selection shared by every command that predicts.
#[derive(Debug, Clone, Args)]
pub struct HwArgs {
    /// Hardware: a preset key (`roofline hardware list`: gb10, h100, b200, a100, ...) or a TOML profile
    /// file (same schema as `roofline hardware show KEY --toml`, or one written by `roofline calibrate`).
    /// Default: h100 (every number sourced; GB10's datasheet publishes only its FP4 rate).
    #[arg(long, value_name = "KEY|FILE", env = "ROOFLINE_HW")]
    pub hw: Option<String>,

    /// Memory bandwidth in GB/s. Without --hw this describes a custom accelerator (give its --peak
    /// values too); with --hw it overrides the profile's bandwidth, and drops a measured profile's
    /// read-stream bandwidth (every byte then moves at the given rate).
    #[arg(long, value_name = "GB/S")]
    pub bandwidth_gb_s: Option<f64>,

    /// Peak dense throughput as CLASS=TFLOPS (repeatable): FP16=50, INT8=100, FP8=400, FP4=800. Classes:
    /// FP64, FP32, TF32, FP16, BF16, FP8, FP6, FP4, INT8, INT4. Overrides or adds to the profile's peaks.
    #[arg(long = "peak", value_name = "CLASS=TFLOPS", value_parser = parse_peak)]
    pub peaks: Vec<(ComputeClass, f64)>,
}

fn parse_peak(s: &str) -> Result<(ComputeClass, f64), String> {
    let (class, value) = s.split_once('=').ok_or_else(|| format!("'{s}' is not CLASS=TFLOPS (e.g. FP16=200)"))?;
    let class: ComputeClass = class.parse().map_err(|e| format!("{e}"))?;
    let value: f64 = value.trim().parse().map_err(|_| format!("peak '{value}' is not a number (TFLOP/s)"))?;
    if !(value.is_finite() && value > 0.0) {
        return Err(format!("peak {class}={value}: must be a finite number > 0 (TFLOP/s)"));
    }
    Ok((class, value))
}

impl HwArgs {
    /// Resolves the flags to one validated profile.
    pub fn resolve(&self) -> Result<HardwareProfile> {
        let mut profile = match (&self.hw, self.bandwidth_gb_s) {
            (None, Some(bw)) => {
                if self.peaks.is_empty() {
                    bail!("--bandwidth-gb-s without --hw describes a custom accelerator: give its peaks too, e.g. --peak FP16=50 --peak INT8=100");
                }
                return HardwareProfile::custom(bw, &self.peaks).map_err(Into::into);
            }
            (Some(key), _) => load(key)?,
            (None, None) => load(DEFAULT_HW)?,
        };
        if let Some(bw) = self.bandwidth_gb_s {
            profile.memory_bandwidth_gb_s = bw;
            // A read stream measured beside another copy bandwidth would price reads against the wrong one.
            profile.read_bandwidth_gb_s = None;
            profile.read_latency_us = None;
            profile.source = format!("{} (bandwidth overridden on the command line)", profile.source);
        }
        for (class, peak) in &self.peaks {
            profile.peak_tflops.set(*class, Some(*peak));
        }
        profile.validate()?;
        Ok(profile)
    }
}

/// Loads a preset by key or a profile from a TOML file.
pub fn load(key: &str) -> Result<HardwareProfile> {
    let path = Path::new(key);
    let looks_like_file = key.ends_with(".toml") || key.contains('/') || key.contains('\\');
    if looks_like_file || (path.is_file() && HardwareProfile::preset(key).is_err()) {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading hardware profile {key}"))?;
        return HardwareProfile::from_toml(&text, key).map_err(Into::into);
    }
    HardwareProfile::preset(key).map_err(Into::into)
}
