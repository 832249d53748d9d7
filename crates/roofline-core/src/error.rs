//! Error type of roofline-core.

use thiserror::Error;

/// Everything that can go wrong in roofline-core. Every variant names the offending field or value and
/// what is allowed, so the message can be shown to a user as is.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// A format name that is not in the catalog.
    #[error("unknown format '{name}'; known formats: {known}")]
    UnknownFormat {
        /// The name as given.
        name: String,
        /// Comma-separated canonical names.
        known: String,
    },
    /// A hardware key that is not a preset.
    #[error("unknown hardware '{key}'; known presets: {known}")]
    UnknownHardware {
        /// The key as given.
        key: String,
        /// Comma-separated preset keys.
        known: String,
    },
    /// A numeric field outside its allowed range.
    #[error("invalid {field} = {value}: {allowed}")]
    InvalidValue {
        /// Field name (e.g. `m`, `memory_bandwidth_gb_s`).
        field: String,
        /// The offending value, printed.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// A count (FLOPs or bytes) that does not fit in 64 bits.
    #[error("{what} overflows 64-bit arithmetic for this shape; use smaller sizes")]
    Overflow {
        /// What was being counted.
        what: &'static str,
    },
    /// A hardware profile document that could not be parsed.
    #[error("hardware profile {origin}: {message}")]
    Profile {
        /// Where the profile came from (file path or preset key).
        origin: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A scheme the hardware cannot run at all.
    #[error("{0}")]
    Unsupported(String),
}

impl CoreError {
    /// Convenience constructor for [`CoreError::InvalidValue`].
    pub fn invalid(field: impl Into<String>, value: impl ToString, allowed: impl Into<String>) -> Self {
        CoreError::InvalidValue { field: field.into(), value: value.to_string(), allowed: allowed.into() }
    }
}
