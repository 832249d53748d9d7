//! Error metrics and the side-by-side comparison of every format on one matrix.

use roofline_core::Format;
use serde::{Deserialize, Serialize};

use crate::codec::{dequantize, quantize, Codec, QuantError};

/// How far a dequantized matrix is from the original.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorMetrics {
    /// Signal-to-quantization-noise ratio, dB: `10 log10(Σx² / Σ(x-y)²)`.
    pub sqnr_db: f64,
    /// `‖x - y‖ / ‖x‖` (Frobenius).
    pub rel_frobenius: f64,
    /// `max |x - y|`.
    pub max_abs: f64,
}

impl ErrorMetrics {
    /// Metrics of `y` against the reference `x`.
    pub fn of(x: &[f32], y: &[f32]) -> Self {
        let (mut sig, mut noise, mut max_abs) = (0.0f64, 0.0f64, 0.0f64);
        for (&a, &b) in x.iter().zip(y) {
            let (a, b) = (f64::from(a), f64::from(b));
            sig += a * a;
            noise += (a - b) * (a - b);
            max_abs = max_abs.max((a - b).abs());
        }
        ErrorMetrics {
            sqnr_db: if noise == 0.0 { f64::INFINITY } else { 10.0 * (sig / noise).log10() },
            rel_frobenius: if sig == 0.0 { 0.0 } else { (noise / sig).sqrt() },
            max_abs,
        }
    }
}

/// One format's row of `quant compare`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRow {
    /// Row label: the format name, or a codec variant (`INT4_G32`, `FP8_E4M3_CHANNEL`, `NF4_DQ`).
    pub name: String,
    /// Catalog format (for a variant, the format it varies).
    pub format: Format,
    /// Codec used.
    pub codec: Codec,
    /// Error.
    pub metrics: ErrorMetrics,
    /// Exact storage bytes of the matrix in this format (catalog count).
    pub storage_bytes: u64,
    /// Storage bits per element.
    pub bits_per_element: f64,
}

/// Codec variants `quant compare` shows after the catalog formats: (name, the format they vary).
pub const COMPARE_VARIANTS: [(&str, Format); 7] = [
    ("INT4_G32", Format::INT4_G128),
    ("INT4_G64", Format::INT4_G128),
    ("INT2_G32", Format::INT2),
    ("INT2_G128", Format::INT2),
    ("FP8_E4M3_CHANNEL", Format::FP8_E4M3),
    ("FP8_E5M2_CHANNEL", Format::FP8_E5M2),
    ("NF4_DQ", Format::NF4),
];

/// The codecs of `quant compare` and `quant bench`: (label, format, codec), catalog formats first.
pub fn compare_codecs() -> Vec<(String, Format, Codec)> {
    let catalog = Format::ALL.iter().filter_map(|f| Codec::for_format(*f).ok().map(|c| (f.name().to_string(), *f, c)));
    let variants = COMPARE_VARIANTS.iter().filter_map(|(n, f)| Codec::parse(n).ok().map(|c| ((*n).to_string(), *f, c)));
    catalog.chain(variants).collect()
}

/// Quantizes the matrix with every format that has a codec, and the codec variants, and measures the error.
/// Storage: the catalog count for catalog formats, [`Codec::storage_bytes`] for variants.
pub fn compare(data: &[f32], rows: usize, cols: usize) -> Result<Vec<CompareRow>, QuantError> {
    compare_codecs()
        .into_iter()
        .map(|(name, format, codec)| {
            let q = quantize(codec, data, rows, cols)?;
            let y = dequantize(&q);
            let storage_bytes = if Codec::for_format(format).ok() == Some(codec) {
                format.storage_bytes(rows as u64, cols as u64).unwrap_or(u64::MAX)
            } else {
                codec.storage_bytes(rows, cols)
            };
            Ok(CompareRow {
                name,
                format,
                codec,
                metrics: ErrorMetrics::of(data, &y),
                storage_bytes,
                bits_per_element: storage_bytes as f64 * 8.0 / (rows * cols).max(1) as f64,
            })
        })
        .collect()
}

/// A deterministic standard-normal matrix (xorshift64* + Box–Muller), for comparisons and benchmarks.
pub fn gaussian_matrix(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        ((state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..rows * cols)
        .map(|_| {
            let (u1, u2) = (next(), next());
            ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_orders_formats_by_bits() {
        let x = gaussian_matrix(16, 256, 1);
        let rows = compare(&x, 16, 256).unwrap();
        let get = |f: Format| rows.iter().find(|r| r.format == f).unwrap();
        let named = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        assert!(named("INT4_G32").metrics.sqnr_db > named("INT4_G64").metrics.sqnr_db);
        assert!(named("INT4_G64").metrics.sqnr_db > get(Format::INT4_G128).metrics.sqnr_db);
        assert!(named("INT2_G32").metrics.sqnr_db > get(Format::INT2).metrics.sqnr_db);
        assert!(named("NF4_DQ").storage_bytes < get(Format::NF4).storage_bytes);
        assert_eq!(named("FP8_E4M3_CHANNEL").storage_bytes, 16 * 256 + 16 * 4);
        assert!(get(Format::INT8).metrics.sqnr_db > get(Format::FP8_E4M3).metrics.sqnr_db - 10.0);
        // E2M3 keeps E4M3's 3 mantissa bits; inside a scaled block the lost exponent range costs little.
        assert!((get(Format::MXFP8_E4M3).metrics.sqnr_db - get(Format::MXFP6_E2M3).metrics.sqnr_db).abs() < 3.0);
        assert!(get(Format::MXFP6_E2M3).metrics.sqnr_db > get(Format::MXFP6_E3M2).metrics.sqnr_db);
        assert!(get(Format::MXFP6_E2M3).metrics.sqnr_db > get(Format::MXFP4).metrics.sqnr_db);
        assert!(get(Format::NVFP4).metrics.sqnr_db > get(Format::MXFP4).metrics.sqnr_db, "NVFP4's finer scales win");
        assert_eq!(get(Format::NVFP4).storage_bytes, 16 * 256 * 9 / 16 + 4);
        let mean: f64 = x.iter().map(|v| f64::from(*v)).sum::<f64>() / x.len() as f64;
        assert!(mean.abs() < 0.1);
    }
}
