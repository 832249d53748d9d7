//! One module per subcommand: each parses nothing itself (clap does), calls the library, prints.

pub mod bench;
pub mod formats;
pub mod gpu;
pub mod hardware;
pub mod model;
pub mod plot;
pub mod predict;
pub mod quant;
pub mod recommend;
pub mod tiling;

/// Parses a size flag (`--m`, `--n`, ...): an integer >= 1.
pub fn parse_size(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i128>() {
        Ok(v) if v >= 1 && v <= u64::MAX as i128 => Ok(v as u64),
        Ok(v) => Err(format!("{v} is out of range: must be an integer >= 1")),
        Err(_) => Err(format!("'{s}' is not an integer: must be an integer >= 1")),
    }
}

/// Parses a format name (canonical or alias), listing the known ones on error.
pub fn parse_format(s: &str) -> Result<roofline_core::Format, String> {
    s.parse().map_err(|e: roofline_core::CoreError| e.to_string())
}
