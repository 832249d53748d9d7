//! One-shot GPU status snapshots ([`GpuStatus`]) and their table forms.

use std::fmt::Write as _;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Device;
use serde::{Deserialize, Serialize};

use crate::throttle::throttle_reason_names;
use crate::{Telemetry, TelemetryError};

/// Highest NVLink link index NVML knows (`NVML_NVLINK_MAX_LINKS`).
const NVLINK_MAX_LINKS: u32 = 18;

/// A snapshot of one GPU. Fields NVML does not support on this GPU (or that failed to read) are `None`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// NVML device index.
    pub index: u32,
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Device UUID.
    pub uuid: Option<String>,
    /// Driver version, e.g. "580.159.04".
    pub driver_version: Option<String>,
    /// Highest CUDA version the driver supports, e.g. "13.0".
    pub cuda_driver_version: Option<String>,
    /// NVML library version.
    pub nvml_version: Option<String>,
    /// Current SM clock (MHz).
    pub sm_clock_mhz: Option<u32>,
    /// Maximum SM clock (MHz).
    pub sm_clock_max_mhz: Option<u32>,
    /// Current memory clock (MHz).
    pub mem_clock_mhz: Option<u32>,
    /// Maximum memory clock (MHz).
    pub mem_clock_max_mhz: Option<u32>,
    /// Power draw (W), as `nvmlDeviceGetPowerUsage` reports it.
    pub power_w: Option<f64>,
    /// Enforced power limit (W).
    pub power_limit_w: Option<f64>,
    /// GPU temperature (°C).
    pub temperature_c: Option<u32>,
    /// Device memory in use (bytes).
    pub memory_used_bytes: Option<u64>,
    /// Device memory installed (bytes).
    pub memory_total_bytes: Option<u64>,
    /// Percent of the last sample period with a kernel running.
    pub utilization_gpu_pct: Option<u32>,
    /// Percent of the last sample period with device memory being read or written.
    pub utilization_memory_pct: Option<u32>,
    /// Current PCIe link generation.
    pub pcie_gen: Option<u32>,
    /// Maximum PCIe link generation.
    pub pcie_gen_max: Option<u32>,
    /// Current PCIe link width (lanes).
    pub pcie_width: Option<u32>,
    /// Maximum PCIe link width (lanes).
    pub pcie_width_max: Option<u32>,
    /// NVLink links that are up; `None` when the GPU has no NVLink.
    pub nvlink_active_links: Option<u32>,
    /// NVLink links present (up or down); `None` when the GPU has no NVLink.
    pub nvlink_links: Option<u32>,
    /// Whether the total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`) works on this GPU.
    pub energy_counter_supported: bool,
    /// Current clock-throttle reasons, decoded (empty = none).
    pub throttle_reasons: Vec<String>,
}

/// Initialises NVML and returns the status of GPU `index`.
pub fn status(index: u32) -> Result<GpuStatus, TelemetryError> {
    Telemetry::init()?.status(index)
}

/// Initialises NVML and returns the status of every GPU (an error if there is none).
pub fn status_all() -> Result<Vec<GpuStatus>, TelemetryError> {
    Telemetry::init()?.status_all()
}

impl Telemetry {
    /// Status of GPU `index`.
    pub fn status(&self, index: u32) -> Result<GpuStatus, TelemetryError> {
        self.check_index(index)?;
        let nvml = self.nvml();
        let device = nvml
            .device_by_index(index)
            .map_err(|source| TelemetryError::Nvml { call: "nvmlDeviceGetHandleByIndex", source })?;
        let name = device.name().map_err(|source| TelemetryError::Nvml { call: "nvmlDeviceGetName", source })?;
        let cuda = nvml.sys_cuda_driver_version().ok().map(|v| {
            format!("{}.{}", nvml_wrapper::cuda_driver_version_major(v), nvml_wrapper::cuda_driver_version_minor(v))
        });
        let memory = device.memory_info().ok();
        let utilization = device.utilization_rates().ok();
        let (nvlink_active_links, nvlink_links) = nvlink_counts(&device);
        Ok(GpuStatus {
            index,
            name,
            uuid: device.uuid().ok(),
            driver_version: nvml.sys_driver_version().ok(),
            cuda_driver_version: cuda,
            nvml_version: nvml.sys_nvml_version().ok(),
            sm_clock_mhz: device.clock_info(Clock::SM).ok(),
            sm_clock_max_mhz: device.max_clock_info(Clock::SM).ok(),
            mem_clock_mhz: device.clock_info(Clock::Memory).ok(),
            mem_clock_max_mhz: device.max_clock_info(Clock::Memory).ok(),
            power_w: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            power_limit_w: device.enforced_power_limit().ok().map(|mw| f64::from(mw) / 1000.0),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            utilization_gpu_pct: utilization.as_ref().map(|u| u.gpu),
            utilization_memory_pct: utilization.as_ref().map(|u| u.memory),
            pcie_gen: device.current_pcie_link_gen().ok(),
            pcie_gen_max: device.max_pcie_link_gen().ok(),
            pcie_width: device.current_pcie_link_width().ok(),
            pcie_width_max: device.max_pcie_link_width().ok(),
            nvlink_active_links,
            nvlink_links,
            energy_counter_supported: device.total_energy_consumption().is_ok(),
            throttle_reasons: device
                .current_throttle_reasons()
                .map(|r| throttle_reason_names(r.bits()))
                .unwrap_or_default(),
        })
    }

    /// Status of every GPU; [`TelemetryError::NoDevices`] if there is none.
    pub fn status_all(&self) -> Result<Vec<GpuStatus>, TelemetryError> {
        let count = self.device_count()?;
        if count == 0 {
            return Err(TelemetryError::NoDevices);
        }
        (0..count).map(|i| self.status(i)).collect()
    }
}

/// (links up, links present) over NVLink indices; (None, None) when no link answers.
fn nvlink_counts(device: &Device<'_>) -> (Option<u32>, Option<u32>) {
    let mut present = 0u32;
    let mut active = 0u32;
    for link in 0..NVLINK_MAX_LINKS {
        if let Ok(up) = device.link_wrapper_for(link).is_active() {
            present += 1;
            if up {
                active += 1;
            }
        }
    }
    if present == 0 {
        (None, None)
    } else {
        (Some(active), Some(present))
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| x.to_string())
}

fn pair<T: std::fmt::Display>(cur: Option<T>, max: Option<T>, unit: &str) -> String {
    match (cur, max) {
        (None, None) => "n/a".to_string(),
        (c, m) => format!("{} / {} {unit}", opt(c), opt(m)),
    }
}

fn gib(bytes: Option<u64>) -> Option<String> {
    // Reported in GiB because that is how memory sizes are quoted for GPUs; the JSON keeps exact bytes.
    bytes.map(|b| format!("{:.1}", b as f64 / (1u64 << 30) as f64))
}

fn watts(w: Option<f64>) -> Option<String> {
    w.map(|w| format!("{w:.1}"))
}

/// A detailed table: one row per field, one column per GPU.
pub fn format_status_table(statuses: &[GpuStatus]) -> String {
    let rows: Vec<(&str, Vec<String>)> = vec![
        ("GPU", statuses.iter().map(|s| format!("{}: {}", s.index, s.name)).collect()),
        ("driver", statuses.iter().map(|s| opt(s.driver_version.clone())).collect()),
        ("CUDA (driver)", statuses.iter().map(|s| opt(s.cuda_driver_version.clone())).collect()),
        ("SM clock", statuses.iter().map(|s| pair(s.sm_clock_mhz, s.sm_clock_max_mhz, "MHz")).collect()),
        ("memory clock", statuses.iter().map(|s| pair(s.mem_clock_mhz, s.mem_clock_max_mhz, "MHz")).collect()),
        ("power", statuses.iter().map(|s| pair(watts(s.power_w), watts(s.power_limit_w), "W")).collect()),
        ("temperature", statuses.iter().map(|s| format!("{} C", opt(s.temperature_c))).collect()),
        (
            "memory used",
            statuses.iter().map(|s| pair(gib(s.memory_used_bytes), gib(s.memory_total_bytes), "GiB")).collect(),
        ),
        (
            "utilization",
            statuses
                .iter()
                .map(|s| format!("gpu {}% mem {}%", opt(s.utilization_gpu_pct), opt(s.utilization_memory_pct)))
                .collect(),
        ),
        (
            "PCIe",
            statuses
                .iter()
                .map(|s| {
                    format!(
                        "gen {} x{} (max gen {} x{})",
                        opt(s.pcie_gen),
                        opt(s.pcie_width),
                        opt(s.pcie_gen_max),
                        opt(s.pcie_width_max)
                    )
                })
                .collect(),
        ),
        (
            "NVLink",
            statuses
                .iter()
                .map(|s| match (s.nvlink_active_links, s.nvlink_links) {
                    (Some(a), Some(p)) => format!("{a} of {p} links up"),
                    _ => "none".to_string(),
                })
                .collect(),
        ),
        (
            "energy counter",
            statuses.iter().map(|s| if s.energy_counter_supported { "yes" } else { "no" }.to_string()).collect(),
        ),
        (
            "throttle reasons",
            statuses
                .iter()
                .map(|s| if s.throttle_reasons.is_empty() { "none".to_string() } else { s.throttle_reasons.join(", ") })
                .collect(),
        ),
    ];
    let key_w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let col_w: Vec<usize> =
        (0..statuses.len()).map(|c| rows.iter().map(|(_, v)| v[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (key, vals) in &rows {
        let _ = write!(out, "{key:<key_w$}");
        for (v, w) in vals.iter().zip(&col_w) {
            let _ = write!(out, "  {v:<w$}");
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// A compact table: one row per GPU (for `gpu watch`).
pub fn format_watch_table(statuses: &[GpuStatus]) -> String {
    let header = ["GPU", "power W", "limit W", "SM MHz", "mem MHz", "temp C", "util %", "mem GiB", "throttle"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for s in statuses {
        rows.push(vec![
            s.index.to_string(),
            opt(watts(s.power_w)),
            opt(watts(s.power_limit_w)),
            opt(s.sm_clock_mhz),
            opt(s.mem_clock_mhz),
            opt(s.temperature_c),
            opt(s.utilization_gpu_pct),
            format!("{}/{}", opt(gib(s.memory_used_bytes)), opt(gib(s.memory_total_bytes))),
            if s.throttle_reasons.is_empty() { "none".to_string() } else { s.throttle_reasons.join(",") },
        ]);
    }
    let widths: Vec<usize> =
        (0..header.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row.iter().zip(&widths).map(|(v, w)| format!("{v:>w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A plausible H100 snapshot for formatting tests (values are inputs, not measurements).
    pub(crate) fn sample_status(index: u32) -> GpuStatus {
        GpuStatus {
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: Some("GPU-0000".into()),
            driver_version: Some("580.159.04".into()),
            cuda_driver_version: Some("13.0".into()),
            nvml_version: Some("13.580.159.04".into()),
            sm_clock_mhz: Some(1980),
            sm_clock_max_mhz: Some(1980),
            mem_clock_mhz: Some(2619),
            mem_clock_max_mhz: Some(2619),
            power_w: Some(123.456),
            power_limit_w: Some(700.0),
            temperature_c: Some(41),
            memory_used_bytes: Some(1 << 30),
            memory_total_bytes: Some(80 << 30),
            utilization_gpu_pct: Some(97),
            utilization_memory_pct: Some(55),
            pcie_gen: Some(5),
            pcie_gen_max: Some(5),
            pcie_width: Some(16),
            pcie_width_max: Some(16),
            nvlink_active_links: None,
            nvlink_links: None,
            energy_counter_supported: true,
            throttle_reasons: vec!["sw_power_cap".into()],
        }
    }

    #[test]
    fn status_table_shows_each_field() {
        let t = format_status_table(&[sample_status(0)]);
        assert!(t.contains("GPU               0: NVIDIA H100 80GB HBM3"), "{t}");
        assert!(t.contains("SM clock          1980 / 1980 MHz"), "{t}");
        assert!(t.contains("power             123.5 / 700.0 W"), "{t}");
        assert!(t.contains("memory used       1.0 / 80.0 GiB"), "{t}");
        assert!(t.contains("PCIe              gen 5 x16 (max gen 5 x16)"), "{t}");
        assert!(t.contains("NVLink            none"), "{t}");
        assert!(t.contains("throttle reasons  sw_power_cap"), "{t}");
        assert_eq!(t.lines().count(), 13);
    }

    #[test]
    fn status_table_marks_missing_values() {
        let mut s = sample_status(1);
        s.power_w = None;
        s.power_limit_w = None;
        s.temperature_c = None;
        s.nvlink_active_links = Some(17);
        s.nvlink_links = Some(18);
        let t = format_status_table(&[s]);
        assert!(t.contains("power             n/a\n"), "{t}");
        assert!(t.contains("temperature       n/a C"), "{t}");
        assert!(t.contains("NVLink            17 of 18 links up"), "{t}");
    }

    #[test]
    fn watch_table_has_a_row_per_gpu() {
        let t = format_watch_table(&[sample_status(0), sample_status(1)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("GPU  power W"), "{t}");
        assert!(lines[2].starts_with("  1    123.5    700.0    1980"), "{t}");
        assert!(lines[2].ends_with("sw_power_cap"), "{t}");
    }

    #[test]
    fn status_json_round_trips() {
        let s = sample_status(0);
        let json = serde_json::to_string(&s).expect("serialise");
        assert!(json.contains("\"power_limit_w\":700.0"));
        let back: GpuStatus = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, s);
    }
}
