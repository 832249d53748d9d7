//! Decoding NVML clock-throttle ("clocks event") reason bitmasks into names.

use nvml_wrapper::bitmasks::device::ThrottleReasons;

/// Reasons that mean clocks are held down by power or temperature (a measurement taken under them is suspect).
pub const CLOCK_LIMITING_REASONS: u64 = ThrottleReasons::SW_POWER_CAP.bits()
    | ThrottleReasons::HW_SLOWDOWN.bits()
    | ThrottleReasons::SW_THERMAL_SLOWDOWN.bits()
    | ThrottleReasons::HW_THERMAL_SLOWDOWN.bits()
    | ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN.bits();

/// Each known reason bit with its snake_case name, in NVML's bit order.
const NAMES: [(ThrottleReasons, &str); 9] = [
    (ThrottleReasons::GPU_IDLE, "gpu_idle"),
    (ThrottleReasons::APPLICATIONS_CLOCKS_SETTING, "applications_clocks_setting"),
    (ThrottleReasons::SW_POWER_CAP, "sw_power_cap"),
    (ThrottleReasons::HW_SLOWDOWN, "hw_slowdown"),
    (ThrottleReasons::SYNC_BOOST, "sync_boost"),
    (ThrottleReasons::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
    (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
    (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
    (ThrottleReasons::DISPLAY_CLOCK_SETTING, "display_clock_setting"),
];

/// Names of the reasons set in an NVML throttle-reason bitmask; unknown bits come out as `unknown_0x...`.
/// An empty mask (NVML's "none") gives an empty list.
pub fn throttle_reason_names(bits: u64) -> Vec<String> {
    let mut names = Vec::new();
    let mut known = 0u64;
    for (flag, name) in NAMES {
        known |= flag.bits();
        if bits & flag.bits() != 0 {
            names.push(name.to_string());
        }
    }
    let unknown = bits & !known;
    if unknown != 0 {
        names.push(format!("unknown_{unknown:#x}"));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_known_bits() {
        assert!(throttle_reason_names(0).is_empty());
        assert_eq!(throttle_reason_names(0x1), vec!["gpu_idle"]);
        assert_eq!(throttle_reason_names(0x4 | 0x40), vec!["sw_power_cap", "hw_thermal_slowdown"]);
    }

    #[test]
    fn keeps_unknown_bits_visible() {
        assert_eq!(throttle_reason_names(0x2 | 0x1000), vec!["applications_clocks_setting", "unknown_0x1000"]);
    }

    #[test]
    fn limiting_mask_covers_power_and_thermal_only() {
        assert_eq!(CLOCK_LIMITING_REASONS, 0x4 | 0x8 | 0x20 | 0x40 | 0x80);
    }
}
