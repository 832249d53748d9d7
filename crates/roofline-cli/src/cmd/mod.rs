//! One module per subcommand: each parses nothing itself (clap does), calls the library, prints.

pub mod bench;
pub mod eval;
pub mod formats;
pub mod gpu;
pub mod hardware;
pub mod model;
pub mod model_bench;
pub mod plot;
pub mod predict;
pub mod quant;
pub mod quantize;
pub mod recommend;
pub mod serve;
pub mod sweep;
pub mod telemetry;
pub mod tiling;

/// Parses a size flag (`--m`, `--n`, ...): an integer >= 1.
pub fn parse_size(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i128>() {
        Ok(v) if v >= 1 && v <= u64::MAX as i128 => Ok(v as u64),
        Ok(v) => Err(format!("{v} is out of range: must be an integer >= 1")),
        Err(_) => Err(format!("'{s}' is not an integer: must be an integer >= 1")),
    }
}

/// The long help of a `--gemv` flag: what it does (`intro`), how to write it, an example, and every key from
/// the parser's own table (`GEMV_KEYS`), so the list cannot miss one.
pub fn gemv_help(intro: &str, example: &str) -> String {
    let keys: Vec<String> =
        roofline_gpu::weight_only::GEMV_KEYS.iter().map(|(k, what)| format!("  {k}: {what}")).collect();
    format!(
        "{intro}: `key=value` pairs separated by commas, as the tuning tables print them. Example: {example}. \
         Keys:\n{}",
        keys.join("\n")
    )
}

/// Parses a format name (canonical or alias), listing the known ones on error.
pub fn parse_format(s: &str) -> Result<roofline_core::Format, String> {
    s.parse().map_err(|e: roofline_core::CoreError| e.to_string())
}

/// `--m --n --k`: one GEMM shape (`y[M,N] = x[M,K] · W[N,K]^T`), default the 1x4096x4096 decode GEMV.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ShapeArgs {
    /// Rows of the activations (tokens in flight): 1 = GEMV (decode), large = GEMM (prefill).
    #[arg(long, default_value = "1", value_parser = parse_size, allow_hyphen_values = true)]
    pub m: u64,
    /// Output features (rows of the weight matrix).
    #[arg(long, default_value = "4096", value_parser = parse_size, allow_hyphen_values = true)]
    pub n: u64,
    /// Reduction dimension (input features); block scales run along it.
    #[arg(long, default_value = "4096", value_parser = parse_size, allow_hyphen_values = true)]
    pub k: u64,
}
