//! Hardware profiles: memory bandwidth, peak dense throughput per compute class, and the chip facts the
//! tiling model needs. Presets come from `data/hardware/*.toml` (embedded at build time), users add TOML
//! files with the same schema, and a custom ASIC can be described inline.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::format::Format;

/// The kind of arithmetic unit rate a GEMM runs at. Peaks are dense (no structured sparsity).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ComputeClass {
    /// FP64 (tensor core where the chip has one).
    FP64,
    /// FP32 on CUDA cores (no tensor cores).
    FP32,
    /// TF32 tensor cores.
    TF32,
    /// FP16 tensor cores (FP32 accumulate).
    FP16,
    /// BF16 tensor cores (FP32 accumulate).
    BF16,
    /// FP8 tensor cores (E4M3/E5M2, MXFP8).
    FP8,
    /// FP6 tensor cores (MXFP6).
    FP6,
    /// FP4 tensor cores (NVFP4, MXFP4).
    FP4,
    /// INT8 tensor cores (TOPS).
    INT8,
    /// INT4 tensor cores (TOPS).
    INT4,
}

impl ComputeClass {
    /// Every class, in table order.
    pub const ALL: [ComputeClass; 10] = [
        ComputeClass::FP64,
        ComputeClass::FP32,
        ComputeClass::TF32,
        ComputeClass::FP16,
        ComputeClass::BF16,
        ComputeClass::FP8,
        ComputeClass::FP6,
        ComputeClass::FP4,
        ComputeClass::INT8,
        ComputeClass::INT4,
    ];

    /// Canonical name.
    pub const fn name(self) -> &'static str {
        match self {
            ComputeClass::FP64 => "FP64",
            ComputeClass::FP32 => "FP32",
            ComputeClass::TF32 => "TF32",
            ComputeClass::FP16 => "FP16",
            ComputeClass::BF16 => "BF16",
            ComputeClass::FP8 => "FP8",
            ComputeClass::FP6 => "FP6",
            ComputeClass::FP4 => "FP4",
            ComputeClass::INT8 => "INT8",
            ComputeClass::INT4 => "INT4",
        }
    }

    /// The format a value of this class is dequantized to when the hardware lacks this class.
    pub const fn fallback(self) -> ComputeClass {
        match self {
            ComputeClass::FP64 => ComputeClass::FP32,
            ComputeClass::TF32 | ComputeClass::FP32 => ComputeClass::FP32,
            ComputeClass::BF16 => ComputeClass::FP32,
            _ => ComputeClass::FP16,
        }
    }
}

impl fmt::Display for ComputeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ComputeClass {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(c) = ComputeClass::ALL.iter().find(|c| c.name().eq_ignore_ascii_case(s.trim())) {
            return Ok(*c);
        }
        // Accept a format name too (`FP8_E4M3` -> FP8, `NVFP4` -> FP4).
        s.parse::<Format>().ok().and_then(Format::compute_class).ok_or_else(|| {
            CoreError::invalid(
                "compute format",
                s,
                format!("one of {}", ComputeClass::ALL.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")),
            )
        })
    }
}

impl Format {
    /// The tensor-core rate a GEMM whose operands are both in this format runs at, or `None` for formats no
    /// hardware multiplies natively (INT2, NF4, group-wise INT4): those are weight-only formats.
    pub const fn compute_class(self) -> Option<ComputeClass> {
        match self {
            Format::FP64 => Some(ComputeClass::FP64),
            Format::FP32 => Some(ComputeClass::FP32),
            Format::TF32 => Some(ComputeClass::TF32),
            Format::BF16 => Some(ComputeClass::BF16),
            Format::FP16 => Some(ComputeClass::FP16),
            Format::FP8_E4M3 | Format::FP8_E5M2 | Format::MXFP8_E4M3 | Format::MXFP8_E5M2 => Some(ComputeClass::FP8),
            Format::MXFP6_E3M2 | Format::MXFP6_E2M3 => Some(ComputeClass::FP6),
            Format::NVFP4 | Format::MXFP4 => Some(ComputeClass::FP4),
            Format::INT8 | Format::MXINT8 => Some(ComputeClass::INT8),
            Format::INT4 => Some(ComputeClass::INT4),
            Format::INT4_G128 | Format::INT2 | Format::NF4 => None,
        }
    }
}

/// Peak dense throughput per compute class, TFLOP/s (TOPS for integers). A class absent here is not
/// supported natively by the hardware.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PeakTable([Option<f64>; 10]);

impl PeakTable {
    /// The peak of `class`, if the hardware supports it natively.
    #[inline]
    pub fn get(&self, class: ComputeClass) -> Option<f64> {
        self.0[class as usize]
    }

    /// Sets (or, with `None`, removes) the peak of `class`.
    pub fn set(&mut self, class: ComputeClass, tflops: Option<f64>) {
        self.0[class as usize] = tflops;
    }

    /// The supported classes and their peaks, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (ComputeClass, f64)> + '_ {
        ComputeClass::ALL.iter().filter_map(|c| self.get(*c).map(|p| (*c, p)))
    }
}

impl Serialize for PeakTable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let map: BTreeMap<&str, f64> = self.iter().map(|(c, p)| (c.name(), p)).collect();
        map.serialize(s)
    }
}

impl<'de> Deserialize<'de> for PeakTable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, f64>::deserialize(d)?;
        let mut table = PeakTable::default();
        for (k, v) in map {
            let class = k.parse::<ComputeClass>().map_err(serde::de::Error::custom)?;
            table.set(class, Some(v));
        }
        Ok(table)
    }
}

/// A GPU or accelerator as the roofline sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareProfile {
    /// Short key used on the command line (`h100-sxm`).
    pub key: String,
    /// Marketing name.
    pub name: String,
    /// Other keys that select this profile (`h100`).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Where the numbers come from: `datasheet`, `seed placeholder`, `user`, or `measured on <gpu> <date>`.
    pub source: String,
    /// Architecture (`hopper`, `blackwell`, ...), if known.
    #[serde(default)]
    pub architecture: Option<String>,
    /// Peak DRAM bandwidth, GB/s (1 GB = 1e9 B).
    pub memory_bandwidth_gb_s: f64,
    /// DRAM capacity, GB.
    #[serde(default)]
    pub memory_gb: Option<f64>,
    /// Peak dense throughput per compute class, TFLOP/s.
    pub peak_tflops: PeakTable,
    /// Streaming multiprocessors (or compute units).
    #[serde(default)]
    pub sm_count: Option<u32>,
    /// Last-level (L2) cache, MB.
    #[serde(default)]
    pub l2_mb: Option<f64>,
    /// Shared memory (configurable L1/shared) per SM, KB.
    #[serde(default)]
    pub smem_per_sm_kb: Option<f64>,
    /// 32-bit registers per SM.
    #[serde(default)]
    pub regs_per_sm: Option<u32>,
    /// Maximum resident threads per SM.
    #[serde(default)]
    pub max_threads_per_sm: Option<u32>,
    /// Maximum resident thread blocks per SM.
    #[serde(default)]
    pub max_ctas_per_sm: Option<u32>,
    /// Boost clock, MHz.
    #[serde(default)]
    pub boost_clock_mhz: Option<f64>,
    /// Board power (TDP), W.
    #[serde(default)]
    pub tdp_w: Option<f64>,
    /// GPU-to-GPU interconnect bandwidth per GPU (both directions summed, as vendors quote it), GB/s.
    #[serde(default)]
    pub interconnect_gb_s: Option<f64>,
    /// Name of the interconnect (`NVLink 4`, `PCIe 5.0 x16`).
    #[serde(default)]
    pub interconnect: Option<String>,
    /// Fixed cost of one kernel launch, microseconds (measured profiles): the gap between back-to-back
    /// launches, added to every op's time.
    #[serde(default)]
    pub launch_overhead_us: Option<f64>,
    /// Fixed start-up time of a memory-bound kernel before it streams at full bandwidth (DRAM latency, ramp
    /// and tail), microseconds (measured profiles: the intercept of copy time against bytes moved, launch
    /// overhead taken out). Added to the memory term.
    #[serde(default)]
    pub memory_latency_us: Option<f64>,
    /// Read-stream bandwidth, GB/s (measured profiles): bytes read over time of a kernel that only reads,
    /// the slope of its time against bytes. A GPU reads faster than it copies (a copy turns the bus between
    /// reads and writes), and a decode GEMV is almost all reads. With it, an op's read bytes move at this
    /// rate and its written bytes at the rate that makes a copy take its measured time
    /// ([`HardwareProfile::stream_time_us`]); without it, every byte moves at `memory_bandwidth_gb_s`.
    #[serde(default)]
    pub read_bandwidth_gb_s: Option<f64>,
    /// Fixed start-up time of the read stream beyond the launch overhead, microseconds (measured profiles:
    /// the intercept of the read-only kernel's time against bytes, less `launch_overhead_us`). Stands for
    /// `memory_latency_us` in proportion to an op's read bytes. It may be negative, down to minus the launch
    /// overhead: launched back to back with programmatic dependent launch, as the GEMVs are, a kernel starts
    /// streaming while the one before it finishes and pays less than a whole launch.
    #[serde(default)]
    pub read_latency_us: Option<f64>,
    /// Compute classes the hardware explicitly lacks, with the reason (`FP4 = "no FP4 tensor cores"`).
    #[serde(default)]
    pub unsupported: BTreeMap<String, String>,
    /// The source of each number: key = field name (`memory_bandwidth_gb_s`, `peak_tflops.FP16`, or
    /// `peak_tflops` for all peaks), value = the document it comes from.
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    /// Free-form notes (sparsity, clocks assumed, ...).
    #[serde(default)]
    pub notes: Option<String>,
}

/// The preset TOML documents, embedded at build time from `data/hardware/*.toml` (see build.rs).
static PRESET_DOCS: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/hardware_presets.rs"));

static PRESETS: OnceLock<Result<Vec<HardwareProfile>, CoreError>> = OnceLock::new();

impl HardwareProfile {
    /// Parses a profile from a TOML document; `origin` names it in errors (a path or preset key).
    pub fn from_toml(doc: &str, origin: &str) -> Result<Self, CoreError> {
        let profile: HardwareProfile = toml::from_str(doc)
            .map_err(|e| CoreError::Profile { origin: origin.to_string(), message: e.message().to_string() })?;
        profile.validate().map_err(|e| CoreError::Profile { origin: origin.to_string(), message: e.to_string() })?;
        Ok(profile)
    }

    /// Serializes the profile as TOML (the schema [`HardwareProfile::from_toml`] reads).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# could not serialize profile: {e}\n"))
    }

    /// A custom accelerator described by its bandwidth and peaks only (`--bandwidth-gb-s 500 --peak FP16=50`).
    pub fn custom(bandwidth_gb_s: f64, peaks: &[(ComputeClass, f64)]) -> Result<Self, CoreError> {
        let mut table = PeakTable::default();
        for (c, p) in peaks {
            table.set(*c, Some(*p));
        }
        let profile = HardwareProfile {
            key: "custom".into(),
            name: "custom accelerator".into(),
            aliases: vec![],
            source: "user (command line)".into(),
            architecture: None,
            memory_bandwidth_gb_s: bandwidth_gb_s,
            memory_gb: None,
            peak_tflops: table,
            sm_count: None,
            l2_mb: None,
            smem_per_sm_kb: None,
            regs_per_sm: None,
            max_threads_per_sm: None,
            max_ctas_per_sm: None,
            boost_clock_mhz: None,
            tdp_w: None,
            interconnect_gb_s: None,
            interconnect: None,
            launch_overhead_us: None,
            memory_latency_us: None,
            read_bandwidth_gb_s: None,
            read_latency_us: None,
            unsupported: BTreeMap::new(),
            sources: BTreeMap::new(),
            notes: None,
        };
        profile.validate()?;
        Ok(profile)
    }

    /// Checks that every number is finite and positive and that at least one peak is given.
    pub fn validate(&self) -> Result<(), CoreError> {
        fn positive(field: &str, v: f64) -> Result<(), CoreError> {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(CoreError::invalid(field, v, "a finite number > 0"))
            }
        }
        positive("memory_bandwidth_gb_s", self.memory_bandwidth_gb_s)?;
        let optional = [
            ("memory_gb", self.memory_gb),
            ("l2_mb", self.l2_mb),
            ("smem_per_sm_kb", self.smem_per_sm_kb),
            ("boost_clock_mhz", self.boost_clock_mhz),
            ("tdp_w", self.tdp_w),
            ("interconnect_gb_s", self.interconnect_gb_s),
            ("read_bandwidth_gb_s", self.read_bandwidth_gb_s),
        ];
        for (field, v) in optional {
            if let Some(v) = v {
                positive(field, v)?;
            }
        }
        for (field, v) in
            [("launch_overhead_us", self.launch_overhead_us), ("memory_latency_us", self.memory_latency_us)]
        {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(CoreError::invalid(field, v, "a finite number >= 0"));
                }
            }
        }
        if let Some(v) = self.read_latency_us {
            // Overlapped launches may hide part of the launch overhead, never more than all of it.
            let floor = -self.launch_overhead_us.unwrap_or(0.0);
            if !(v.is_finite() && v >= floor) {
                return Err(CoreError::invalid(
                    "read_latency_us",
                    v,
                    format!("a finite number >= -launch_overhead_us ({floor})"),
                ));
            }
        }
        let ints = [
            ("sm_count", self.sm_count),
            ("regs_per_sm", self.regs_per_sm),
            ("max_threads_per_sm", self.max_threads_per_sm),
            ("max_ctas_per_sm", self.max_ctas_per_sm),
        ];
        for (field, v) in ints {
            if v == Some(0) {
                return Err(CoreError::invalid(field, 0, "an integer > 0"));
            }
        }
        let mut any = false;
        for (class, p) in self.peak_tflops.iter() {
            positive(&format!("peak_tflops.{class}"), p)?;
            any = true;
        }
        if !any {
            return Err(CoreError::invalid("peak_tflops", "{}", "at least one compute format, e.g. FP16 = 200"));
        }
        if self.key.trim().is_empty() {
            return Err(CoreError::invalid("key", "\"\"", "a non-empty key"));
        }
        Ok(())
    }

    /// Every embedded preset, parsed once.
    pub fn presets() -> Result<&'static [HardwareProfile], CoreError> {
        PRESETS
            .get_or_init(|| PRESET_DOCS.iter().map(|(file, doc)| HardwareProfile::from_toml(doc, file)).collect())
            .as_deref()
            .map_err(Clone::clone)
    }

    /// The preset whose key or alias is `key` (case-insensitive).
    pub fn preset(key: &str) -> Result<HardwareProfile, CoreError> {
        let presets = Self::presets()?;
        presets.iter().find(|p| p.answers_to(key)).cloned().ok_or_else(|| CoreError::UnknownHardware {
            key: key.to_string(),
            known: presets.iter().map(|p| p.key.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// The key and every alias that select this profile.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.key.as_str()).chain(self.aliases.iter().map(String::as_str))
    }

    /// Whether `key` (surrounding spaces ignored, any case) is this profile's key or one of its aliases.
    pub fn answers_to(&self, key: &str) -> bool {
        let key = key.trim();
        self.keys().any(|k| k.eq_ignore_ascii_case(key))
    }

    /// Peak of `class` in TFLOP/s, if native.
    #[inline]
    pub fn peak(&self, class: ComputeClass) -> Option<f64> {
        self.peak_tflops.get(class)
    }

    /// Why `class` is not native here (the profile's own reason when it gives one).
    pub fn unsupported_reason(&self, class: ComputeClass) -> String {
        self.unsupported
            .get(class.name())
            .cloned()
            .unwrap_or_else(|| format!("{} has no native {} throughput in its profile", self.name, class))
    }

    /// Time to move an op's `bytes` through device memory, `written` of them stored and the rest loaded, as
    /// (streaming time, fixed start-up time), microseconds.
    ///
    /// Without a read-stream calibration every byte moves at the copy bandwidth and the start-up is
    /// `memory_latency_us`. With one (`read_bandwidth_gb_s`), a read byte costs `1 / read` and a written
    /// byte `2 / copy - 1 / read`: the pair a copy moves costs `2 / copy`, as measured, and an op that only
    /// reads streams at the read rate. The start-up mixes `read_latency_us` and `memory_latency_us` by the
    /// same read / write share.
    pub fn stream_time_us(&self, bytes: u64, written: u64) -> (f64, f64) {
        let bytes_f = bytes as f64;
        let written = written.min(bytes) as f64;
        let read = bytes_f - written;
        let copy_latency = self.memory_latency_us.unwrap_or(0.0);
        // GB/s * 1e3 = bytes per microsecond.
        match self.read_bandwidth_gb_s {
            Some(read_bw) if bytes > 0 => {
                let per_read = 1.0 / (read_bw * 1e3);
                let per_write = (2.0 / (self.memory_bandwidth_gb_s * 1e3) - per_read).max(0.0);
                let read_latency = self.read_latency_us.unwrap_or(copy_latency);
                let latency = (read * read_latency + written * copy_latency) / bytes_f;
                (read * per_read + written * per_write, latency)
            }
            _ => (bytes_f / (self.memory_bandwidth_gb_s * 1e3), copy_latency),
        }
    }

    /// The ridge point (critical arithmetic intensity, FLOP/byte) of `class`.
    pub fn ridge_ai(&self, class: ComputeClass) -> Option<f64> {
        self.peak(class).map(|p| p * 1e12 / (self.memory_bandwidth_gb_s * 1e9))
    }

    /// The formats this hardware computes natively (its compute class has a peak).
    pub fn native_formats(&self) -> Vec<Format> {
        Format::ALL.into_iter().filter(|f| f.compute_class().and_then(|c| self.peak(c)).is_some()).collect()
    }

    /// The source of a field (`peak_tflops.FP16` falls back to `peak_tflops`).
    pub fn source_of(&self, field: &str) -> Option<&str> {
        self.sources
            .get(field)
            .or_else(|| field.split_once('.').and_then(|(head, _)| self.sources.get(head)))
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_loads_and_cites_every_number() {
        let presets = HardwareProfile::presets().expect("presets parse");
        assert!(!presets.is_empty());
        for p in presets {
            let mut fields = vec!["memory_bandwidth_gb_s".to_string()];
            for (f, v) in [
                ("memory_gb", p.memory_gb.is_some()),
                ("sm_count", p.sm_count.is_some()),
                ("l2_mb", p.l2_mb.is_some()),
                ("smem_per_sm_kb", p.smem_per_sm_kb.is_some()),
                ("boost_clock_mhz", p.boost_clock_mhz.is_some()),
                ("tdp_w", p.tdp_w.is_some()),
                ("interconnect_gb_s", p.interconnect_gb_s.is_some()),
            ] {
                if v {
                    fields.push(f.to_string());
                }
            }
            fields.extend(p.peak_tflops.iter().map(|(c, _)| format!("peak_tflops.{c}")));
            for f in fields {
                assert!(p.source_of(&f).is_some(), "preset {} has no source for {f}", p.key);
            }
        }
    }

    #[test]
    fn preset_keys_are_unique() {
        let presets = HardwareProfile::presets().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for p in presets {
            for k in p.keys() {
                assert!(seen.insert(k.to_ascii_lowercase()), "duplicate hardware key {k}");
            }
            assert!(p.answers_to(&format!(" {} ", p.key.to_ascii_uppercase())));
        }
    }

    #[test]
    fn unknown_preset_lists_known() {
        let err = HardwareProfile::preset("tpu-v9").unwrap_err().to_string();
        assert!(err.contains("tpu-v9") && err.contains("known presets"), "{err}");
    }

    #[test]
    fn reads_stream_at_the_read_rate_and_copies_take_their_measured_time() {
        let mut hw = HardwareProfile::custom(1000.0, &[(ComputeClass::FP16, 200.0)]).unwrap();
        hw.memory_latency_us = Some(2.0);
        // No read calibration: 1000 GB/s = 1e6 bytes per microsecond either way.
        assert_eq!(hw.stream_time_us(4_000_000, 1_000_000), (4.0, 2.0));
        hw.read_bandwidth_gb_s = Some(1250.0);
        hw.read_latency_us = Some(1.0);
        // Only reads: 1250 GB/s and the read stream's start-up.
        let (t, lat) = hw.stream_time_us(5_000_000, 0);
        assert!((t - 4.0).abs() < 1e-12 && (lat - 1.0).abs() < 1e-12, "{t} {lat}");
        // A copy (half read, half written) takes what the copy bandwidth says, start-up mixed half and half.
        let (t, lat) = hw.stream_time_us(4_000_000, 2_000_000);
        assert!((t - 4.0).abs() < 1e-12 && (lat - 1.5).abs() < 1e-12, "{t} {lat}");
        // Written bytes beyond the total are clamped; nothing moved costs nothing.
        assert_eq!(hw.stream_time_us(0, 0), (0.0, 2.0));
        let (all_written, _) = hw.stream_time_us(1_000_000, 5_000_000);
        assert!((all_written - (2.0 - 0.8)).abs() < 1e-12, "{all_written}");
        // A read stream that hides part of the launch overhead: its start-up is negative, never below
        // minus the overhead.
        hw.launch_overhead_us = Some(1.0);
        hw.read_latency_us = Some(-0.5);
        assert!(hw.validate().is_ok());
        let (_, lat) = hw.stream_time_us(5_000_000, 0);
        assert!((lat + 0.5).abs() < 1e-12, "{lat}");
        hw.read_latency_us = Some(-1.5);
        assert!(hw.validate().unwrap_err().to_string().contains("read_latency_us"));
        hw.read_latency_us = Some(1.0);
        hw.read_bandwidth_gb_s = Some(-1.0);
        assert!(hw.validate().is_err());
    }

    #[test]
    fn custom_profile_and_ridge() {
        let hw = HardwareProfile::custom(1000.0, &[(ComputeClass::FP16, 200.0)]).unwrap();
        assert_eq!(hw.ridge_ai(ComputeClass::FP16), Some(200.0));
        assert_eq!(hw.peak(ComputeClass::FP8), None);
        assert!(HardwareProfile::custom(0.0, &[(ComputeClass::FP16, 1.0)]).is_err());
        assert!(HardwareProfile::custom(1.0, &[]).is_err());
    }

    #[test]
    fn toml_errors_name_the_field() {
        let doc = "key='x'\nname='x'\nsource='user'\n[peak_tflops]\nFP16=1.0\n";
        let err = HardwareProfile::from_toml(doc, "x.toml").unwrap_err().to_string();
        assert!(err.contains("memory_bandwidth_gb_s"), "{err}");
        let doc = "key='x'\nname='x'\nsource='user'\nmemory_bandwidth_gb_s=-5\n[peak_tflops]\nFP16=1.0\n";
        let err = HardwareProfile::from_toml(doc, "x.toml").unwrap_err().to_string();
        assert!(err.contains("memory_bandwidth_gb_s") && err.contains("-5"), "{err}");
        let doc = "key='x'\nname='x'\nsource='user'\nmemory_bandwidth_gb_s=5\n[peak_tflops]\nFP7=1.0\n";
        let err = HardwareProfile::from_toml(doc, "x.toml").unwrap_err().to_string();
        assert!(err.contains("FP7"), "{err}");
    }

    #[test]
    fn toml_round_trip() {
        for p in HardwareProfile::presets().unwrap() {
            let back = HardwareProfile::from_toml(&p.to_toml(), "round-trip").unwrap();
            assert_eq!(&back, p);
        }
    }
}
