//! Output helpers: `--json` / `--csv` flags, tables, number formatting.

use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};

/// `--json` and `--csv`, shared by commands that print records.
#[derive(Debug, Clone, Copy, Args)]
pub struct OutputArgs {
    /// Print JSON (the same document the REST API returns) instead of a table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV rows instead of a table.
    #[arg(long)]
    pub csv: bool,
}

/// A table with the project's style.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Disabled).set_header(header);
    t
}

/// Prints `value` as pretty JSON.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `1234567` -> `1.23 M` (SI, 3 significant digits).
pub fn si(v: f64) -> String {
    let (scaled, unit) = match v.abs() {
        x if x >= 1e15 => (v / 1e15, "P"),
        x if x >= 1e12 => (v / 1e12, "T"),
        x if x >= 1e9 => (v / 1e9, "G"),
        x if x >= 1e6 => (v / 1e6, "M"),
        x if x >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    format!("{} {unit}", sig3(scaled)).trim_end().to_string()
}

/// Three significant digits, no exponent for ordinary magnitudes.
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = v.abs().log10().floor() as i32;
    let decimals = (2 - digits).clamp(0, 6) as usize;
    format!("{v:.decimals$}")
}

/// An optional number, or `-`.
pub fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), sig3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_and_sig3() {
        assert_eq!(si(33_554_432.0), "33.6 M");
        assert_eq!(si(999.0), "999");
        assert_eq!(sig3(0.0123456), "0.0123");
        assert_eq!(sig3(343.597), "344");
        assert_eq!(sig3(8.39), "8.39");
    }
}
