//! The catalog of number formats: how many bits each element takes, how blocks share scales, and the exact
//! storage bytes of a tensor.
//!
//! Conventions (see `docs/THEORY.md`):
//! * a tensor is `rows x cols`, row-major; blocks and groups run along a row, which is the reduction
//!   dimension K of a GEMM operand (a weight row is one output channel);
//! * each row starts on a byte boundary (sub-byte elements are packed within a row);
//! * a partial block at the end of a row still carries a whole scale;
//! * per-tensor scales (FP8's FP32 scale, NVFP4's FP32 global scale) are counted once per tensor.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// A number format: how the elements of a tensor are stored.
///
/// Canonical names are upper case (`FP8_E4M3`); [`Format::from_str`] also accepts common aliases
/// case-insensitively (`fp8`, `e4m3`, `bf16`, `fp4`, `w4`, ...).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(non_camel_case_types)]
pub enum Format {
    /// IEEE 754 binary64.
    FP64,
    /// IEEE 754 binary32.
    FP32,
    /// NVIDIA TensorFloat-32: 1 sign, 8 exponent, 10 mantissa bits, stored in a 32-bit word.
    TF32,
    /// bfloat16: 1 sign, 8 exponent, 7 mantissa bits.
    BF16,
    /// IEEE 754 binary16.
    FP16,
    /// OCP FP8 E4M3 (max 448, no infinities), one FP32 scale per tensor.
    FP8_E4M3,
    /// OCP FP8 E5M2 (max 57344), one FP32 scale per tensor.
    FP8_E5M2,
    /// 8-bit signed integer, one FP32 scale per tensor.
    INT8,
    /// 4-bit signed integer, one FP32 scale per tensor (the seed's uniform INT4).
    INT4,
    /// 4-bit integer, groups of 128 along K with an FP16 scale and a 4-bit zero point (AWQ/GPTQ style).
    INT4_G128,
    /// 2-bit signed integer, one FP32 scale per tensor.
    INT2,
    /// NVIDIA NVFP4: E2M1 elements, an E4M3 scale per 16 elements and an FP32 scale per tensor.
    NVFP4,
    /// OCP MXFP4: E2M1 elements, an E8M0 scale per 32 elements.
    MXFP4,
    /// OCP MXFP6 with E3M2 elements, an E8M0 scale per 32 elements.
    MXFP6_E3M2,
    /// OCP MXFP6 with E2M3 elements, an E8M0 scale per 32 elements.
    MXFP6_E2M3,
    /// OCP MXFP8 with E4M3 elements, an E8M0 scale per 32 elements.
    MXFP8_E4M3,
    /// OCP MXFP8 with E5M2 elements, an E8M0 scale per 32 elements.
    MXFP8_E5M2,
    /// OCP MXINT8: 8-bit integers (two's complement, implicit scale 2^-6), an E8M0 scale per 32 elements.
    MXINT8,
    /// bitsandbytes NormalFloat4: 16-value codebook, an FP16 absmax per 64 elements.
    NF4,
}

/// How element values are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElementKind {
    /// Floating point with sign, exponent and mantissa.
    Float,
    /// Two's complement (or offset) integer.
    Int,
    /// An index into a fixed codebook of values.
    Codebook,
}

/// The storage format of a scale (or zero point).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(non_camel_case_types)]
pub enum ScaleFormat {
    /// IEEE binary32.
    FP32,
    /// IEEE binary16.
    FP16,
    /// FP8 E4M3 (NVFP4 block scales).
    E4M3,
    /// 8-bit power of two, exponent only (OCP MX shared scale).
    E8M0,
}

impl ScaleFormat {
    /// Bits one scale takes.
    pub const fn bits(self) -> u64 {
        match self {
            ScaleFormat::FP32 => 32,
            ScaleFormat::FP16 => 16,
            ScaleFormat::E4M3 | ScaleFormat::E8M0 => 8,
        }
    }
}

/// Scales shared by a block of consecutive elements along a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockScale {
    /// Elements per block.
    pub size: u64,
    /// Format of the block's scale.
    pub scale: ScaleFormat,
    /// Bits of the block's zero point (0 for symmetric formats).
    pub zero_bits: u64,
}

/// Everything the catalog knows about one format.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FormatSpec {
    /// The format.
    pub format: Format,
    /// Value encoding.
    pub kind: ElementKind,
    /// Bits one element occupies in storage (TF32: 32).
    pub storage_bits: u64,
    /// Bits that carry information (TF32: 19 = sign + 8 exponent + 10 mantissa).
    pub value_bits: u64,
    /// Exponent bits, for floating-point elements.
    pub exponent_bits: Option<u32>,
    /// Stored mantissa bits, for floating-point elements.
    pub mantissa_bits: Option<u32>,
    /// Largest finite element value before scaling (integers: the largest magnitude code).
    pub max_finite: f64,
    /// Block scale, if elements share scales in blocks along a row.
    pub block: Option<BlockScale>,
    /// Per-tensor scale (counted once per tensor), if any.
    pub tensor_scale: Option<ScaleFormat>,
    /// One-line description.
    pub description: &'static str,
}

#[allow(clippy::too_many_arguments)] // a const table builder: one argument per column
const fn float(
    format: Format,
    storage_bits: u64,
    e: u32,
    m: u32,
    max_finite: f64,
    block: Option<BlockScale>,
    tensor_scale: Option<ScaleFormat>,
    description: &'static str,
) -> FormatSpec {
    FormatSpec {
        format,
        kind: ElementKind::Float,
        storage_bits,
        value_bits: 1 + e as u64 + m as u64,
        exponent_bits: Some(e),
        mantissa_bits: Some(m),
        max_finite,
        block,
        tensor_scale,
        description,
    }
}

const fn int(
    format: Format,
    bits: u64,
    max_finite: f64,
    block: Option<BlockScale>,
    tensor_scale: Option<ScaleFormat>,
    description: &'static str,
) -> FormatSpec {
    FormatSpec {
        format,
        kind: ElementKind::Int,
        storage_bits: bits,
        value_bits: bits,
        exponent_bits: None,
        mantissa_bits: None,
        max_finite,
        block,
        tensor_scale,
        description,
    }
}

const fn mx(size: u64) -> Option<BlockScale> {
    Some(BlockScale { size, scale: ScaleFormat::E8M0, zero_bits: 0 })
}

/// The catalog, in [`Format::ALL`] order.
static SPECS: [FormatSpec; 19] = [
    float(Format::FP64, 64, 11, 52, f64::MAX, None, None, "IEEE binary64"),
    float(Format::FP32, 32, 8, 23, 3.402_823_466_385_288_6e38, None, None, "IEEE binary32"),
    float(
        Format::TF32,
        32,
        8,
        10,
        3.401_162_432e38,
        None,
        None,
        "TensorFloat-32: FP32 range, 10-bit mantissa, stored in 4 bytes",
    ),
    float(Format::BF16, 16, 8, 7, 3.389_531_389_251_535_5e38, None, None, "bfloat16"),
    float(Format::FP16, 16, 5, 10, 65504.0, None, None, "IEEE binary16"),
    float(Format::FP8_E4M3, 8, 4, 3, 448.0, None, Some(ScaleFormat::FP32), "OCP FP8 E4M3, per-tensor FP32 scale"),
    float(Format::FP8_E5M2, 8, 5, 2, 57344.0, None, Some(ScaleFormat::FP32), "OCP FP8 E5M2, per-tensor FP32 scale"),
    int(Format::INT8, 8, 127.0, None, Some(ScaleFormat::FP32), "INT8 symmetric, per-tensor FP32 scale"),
    int(Format::INT4, 4, 7.0, None, Some(ScaleFormat::FP32), "INT4 symmetric, per-tensor FP32 scale"),
    int(
        Format::INT4_G128,
        4,
        15.0,
        Some(BlockScale { size: 128, scale: ScaleFormat::FP16, zero_bits: 4 }),
        None,
        "INT4 asymmetric, groups of 128 with FP16 scale and 4-bit zero point",
    ),
    int(Format::INT2, 2, 1.0, None, Some(ScaleFormat::FP32), "INT2 symmetric, per-tensor FP32 scale"),
    float(
        Format::NVFP4,
        4,
        2,
        1,
        6.0,
        Some(BlockScale { size: 16, scale: ScaleFormat::E4M3, zero_bits: 0 }),
        Some(ScaleFormat::FP32),
        "NVIDIA NVFP4: E2M1, E4M3 scale per 16, FP32 scale per tensor",
    ),
    float(Format::MXFP4, 4, 2, 1, 6.0, mx(32), None, "OCP MXFP4: E2M1, E8M0 scale per 32"),
    float(Format::MXFP6_E3M2, 6, 3, 2, 28.0, mx(32), None, "OCP MXFP6 E3M2, E8M0 scale per 32"),
    float(Format::MXFP6_E2M3, 6, 2, 3, 7.5, mx(32), None, "OCP MXFP6 E2M3, E8M0 scale per 32"),
    float(Format::MXFP8_E4M3, 8, 4, 3, 448.0, mx(32), None, "OCP MXFP8 E4M3, E8M0 scale per 32"),
    float(Format::MXFP8_E5M2, 8, 5, 2, 57344.0, mx(32), None, "OCP MXFP8 E5M2, E8M0 scale per 32"),
    int(Format::MXINT8, 8, 1.984_375, mx(32), None, "OCP MXINT8: 8-bit integer with implicit 2^-6, E8M0 scale per 32"),
    FormatSpec {
        format: Format::NF4,
        kind: ElementKind::Codebook,
        storage_bits: 4,
        value_bits: 4,
        exponent_bits: None,
        mantissa_bits: None,
        max_finite: 1.0,
        block: Some(BlockScale { size: 64, scale: ScaleFormat::FP16, zero_bits: 0 }),
        tensor_scale: None,
        description: "bitsandbytes NormalFloat4: codebook of 16, FP16 absmax per 64",
    },
];

/// Aliases accepted by [`Format::from_str`], after lower-casing and removing `-`, `_`, `.` and spaces.
static ALIASES: &[(&str, Format)] = &[
    ("fp64", Format::FP64),
    ("f64", Format::FP64),
    ("float64", Format::FP64),
    ("double", Format::FP64),
    ("fp32", Format::FP32),
    ("f32", Format::FP32),
    ("float32", Format::FP32),
    ("float", Format::FP32),
    ("tf32", Format::TF32),
    ("bf16", Format::BF16),
    ("bfloat16", Format::BF16),
    ("fp16", Format::FP16),
    ("f16", Format::FP16),
    ("float16", Format::FP16),
    ("half", Format::FP16),
    ("fp8", Format::FP8_E4M3),
    ("fp8e4m3", Format::FP8_E4M3),
    ("e4m3", Format::FP8_E4M3),
    ("float8e4m3fn", Format::FP8_E4M3),
    ("float8e4m3", Format::FP8_E4M3),
    ("w8fp8", Format::FP8_E4M3),
    ("fp8e5m2", Format::FP8_E5M2),
    ("e5m2", Format::FP8_E5M2),
    ("float8e5m2", Format::FP8_E5M2),
    ("int8", Format::INT8),
    ("i8", Format::INT8),
    ("w8", Format::INT8),
    ("int4", Format::INT4),
    ("i4", Format::INT4),
    ("w4", Format::INT4),
    ("int4g128", Format::INT4_G128),
    ("w4g128", Format::INT4_G128),
    ("int4g128asym", Format::INT4_G128),
    ("awq", Format::INT4_G128),
    ("gptq", Format::INT4_G128),
    ("int2", Format::INT2),
    ("i2", Format::INT2),
    ("w2", Format::INT2),
    ("nvfp4", Format::NVFP4),
    ("fp4", Format::NVFP4),
    ("mxfp4", Format::MXFP4),
    ("mxfp6", Format::MXFP6_E3M2),
    ("mxfp6e3m2", Format::MXFP6_E3M2),
    ("mxfp6e2m3", Format::MXFP6_E2M3),
    ("mxfp8", Format::MXFP8_E4M3),
    ("mxfp8e4m3", Format::MXFP8_E4M3),
    ("mxfp8e5m2", Format::MXFP8_E5M2),
    ("mxint8", Format::MXINT8),
    ("nf4", Format::NF4),
    ("normalfloat4", Format::NF4),
];

impl Format {
    /// Every format of the catalog, widest first.
    pub const ALL: [Format; 19] = [
        Format::FP64,
        Format::FP32,
        Format::TF32,
        Format::BF16,
        Format::FP16,
        Format::FP8_E4M3,
        Format::FP8_E5M2,
        Format::INT8,
        Format::INT4,
        Format::INT4_G128,
        Format::INT2,
        Format::NVFP4,
        Format::MXFP4,
        Format::MXFP6_E3M2,
        Format::MXFP6_E2M3,
        Format::MXFP8_E4M3,
        Format::MXFP8_E5M2,
        Format::MXINT8,
        Format::NF4,
    ];

    /// The catalog entry of this format.
    pub fn spec(self) -> &'static FormatSpec {
        // ALL and SPECS are in the same order; the test `specs_match_all` holds that.
        &SPECS[self as usize]
    }

    /// Canonical upper-case name (`FP8_E4M3`).
    pub const fn name(self) -> &'static str {
        match self {
            Format::FP64 => "FP64",
            Format::FP32 => "FP32",
            Format::TF32 => "TF32",
            Format::BF16 => "BF16",
            Format::FP16 => "FP16",
            Format::FP8_E4M3 => "FP8_E4M3",
            Format::FP8_E5M2 => "FP8_E5M2",
            Format::INT8 => "INT8",
            Format::INT4 => "INT4",
            Format::INT4_G128 => "INT4_G128",
            Format::INT2 => "INT2",
            Format::NVFP4 => "NVFP4",
            Format::MXFP4 => "MXFP4",
            Format::MXFP6_E3M2 => "MXFP6_E3M2",
            Format::MXFP6_E2M3 => "MXFP6_E2M3",
            Format::MXFP8_E4M3 => "MXFP8_E4M3",
            Format::MXFP8_E5M2 => "MXFP8_E5M2",
            Format::MXINT8 => "MXINT8",
            Format::NF4 => "NF4",
        }
    }

    /// Comma-separated canonical names, for error messages.
    pub fn known_names() -> String {
        Format::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
    }

    /// Exact bytes to store a `rows x cols` tensor (blocks along `cols`), or an overflow error.
    ///
    /// Elements are packed within each row, each row starting on a byte boundary; block scales (and zero
    /// points) are packed per row, a partial block counting as whole; a per-tensor scale counts once.
    pub fn storage_bytes(self, rows: u64, cols: u64) -> Result<u64, CoreError> {
        const OVERFLOW: CoreError = CoreError::Overflow { what: "storage bytes" };
        let spec = self.spec();
        let row_bits = cols.checked_mul(spec.storage_bits).ok_or(OVERFLOW)?;
        let mut per_row = row_bits.div_ceil(8);
        if let Some(block) = spec.block {
            let blocks = cols.div_ceil(block.size);
            per_row = per_row
                .checked_add((blocks * block.scale.bits()).div_ceil(8))
                .and_then(|b| b.checked_add((blocks * block.zero_bits).div_ceil(8)))
                .ok_or(OVERFLOW)?;
        }
        let tensor = spec.tensor_scale.map_or(0, |s| s.bits() / 8);
        rows.checked_mul(per_row).and_then(|b| b.checked_add(tensor)).ok_or(OVERFLOW)
    }

    /// Storage bits per element of a long row, block scales and zero points included (per-tensor scales,
    /// which vanish for a long row, excluded). MXFP4: 4.25, NVFP4: 4.5, NF4: 4.25, TF32: 32.
    pub fn effective_bits(self) -> f64 {
        let spec = self.spec();
        let block = spec.block.map_or(0.0, |b| (b.scale.bits() + b.zero_bits) as f64 / b.size as f64);
        spec.storage_bits as f64 + block
    }

    /// Whether this format quantizes (needs scales or a codebook) rather than being a plain float type.
    pub fn is_quantized(self) -> bool {
        let spec = self.spec();
        spec.block.is_some() || spec.tensor_scale.is_some() || spec.kind == ElementKind::Codebook
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = CoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key: String =
            s.chars().filter(|c| !matches!(c, '-' | '_' | '.' | ' ')).flat_map(char::to_lowercase).collect();
        if let Some(f) = Format::ALL.iter().find(|f| f.name().replace('_', "").eq_ignore_ascii_case(&key)) {
            return Ok(*f);
        }
        ALIASES
            .iter()
            .find(|(alias, _)| *alias == key)
            .map(|(_, f)| *f)
            .ok_or_else(|| CoreError::UnknownFormat { name: s.to_string(), known: Format::known_names() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_match_all() {
        for f in Format::ALL {
            assert_eq!(f.spec().format, f, "SPECS out of order at {f}");
        }
    }

    #[test]
    fn effective_bits_match_seed_figures() {
        assert_eq!(Format::MXFP4.effective_bits(), 4.25);
        assert_eq!(Format::NVFP4.effective_bits(), 4.5);
        assert_eq!(Format::MXFP8_E4M3.effective_bits(), 8.25);
        assert_eq!(Format::NF4.effective_bits(), 4.25);
        assert_eq!(Format::TF32.effective_bits(), 32.0);
        assert_eq!(Format::TF32.spec().value_bits, 19);
        assert_eq!(Format::INT4_G128.effective_bits(), 4.0 + 20.0 / 128.0);
        assert_eq!(Format::MXFP6_E2M3.effective_bits(), 6.25);
    }

    #[test]
    fn storage_bytes_exact() {
        // FP16 4096x4096
        assert_eq!(Format::FP16.storage_bytes(4096, 4096).unwrap(), 33_554_432);
        // NVFP4: 4.5 bits per element plus one FP32 tensor scale
        assert_eq!(Format::NVFP4.storage_bytes(4096, 4096).unwrap(), 4096 * 4096 * 9 / 16 + 4);
        // MXFP4 1x32: 16 bytes of elements, 1 byte of scale
        assert_eq!(Format::MXFP4.storage_bytes(1, 32).unwrap(), 17);
        // partial block: 33 elements = 2 blocks; 33 nibbles = 17 bytes (row starts on a byte)
        assert_eq!(Format::MXFP4.storage_bytes(1, 33).unwrap(), 17 + 2);
        assert_eq!(Format::MXFP4.storage_bytes(3, 33).unwrap(), 3 * 19);
        // NF4 odd shape: 3 rows x 65: 33 bytes + 2 blocks x 2 bytes
        assert_eq!(Format::NF4.storage_bytes(3, 65).unwrap(), 3 * (33 + 4));
        // INT4_G128: 5 x 130 -> 65 bytes + 2 FP16 scales + 2 zero nibbles (1 byte)
        assert_eq!(Format::INT4_G128.storage_bytes(5, 130).unwrap(), 5 * (65 + 4 + 1));
        // INT2 odd row: 3 elements -> 1 byte per row, plus the FP32 tensor scale
        assert_eq!(Format::INT2.storage_bytes(7, 3).unwrap(), 7 + 4);
        // MXFP6: 32 elements x 6 bits = 24 bytes + 1 scale
        assert_eq!(Format::MXFP6_E3M2.storage_bytes(2, 32).unwrap(), 2 * 25);
        // FP8: per-tensor scale counted once
        assert_eq!(Format::FP8_E4M3.storage_bytes(10, 10).unwrap(), 104);
        // TF32: 4 bytes per element
        assert_eq!(Format::TF32.storage_bytes(3, 3).unwrap(), 36);
    }

    #[test]
    fn storage_bytes_overflow_is_an_error() {
        assert!(matches!(Format::FP32.storage_bytes(u64::MAX, 2), Err(CoreError::Overflow { .. })));
        assert!(Format::FP64.storage_bytes(1, u64::MAX / 8).is_err());
    }

    #[test]
    fn parses_names_and_aliases() {
        let cases = [
            ("fp8", Format::FP8_E4M3),
            ("E4M3", Format::FP8_E4M3),
            ("e5m2", Format::FP8_E5M2),
            ("BF16", Format::BF16),
            ("fp4", Format::NVFP4),
            ("NvFp4", Format::NVFP4),
            ("mxfp4", Format::MXFP4),
            ("nf4", Format::NF4),
            ("int4", Format::INT4),
            ("w4", Format::INT4),
            ("fp8-e4m3", Format::FP8_E4M3),
            ("MXFP6_E2M3", Format::MXFP6_E2M3),
            ("int4_g128", Format::INT4_G128),
            ("float8_e4m3fn", Format::FP8_E4M3),
        ];
        for (s, f) in cases {
            assert_eq!(s.parse::<Format>().unwrap(), f, "{s}");
        }
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>().unwrap(), f);
            assert_eq!(f.name().to_lowercase().parse::<Format>().unwrap(), f);
        }
    }

    #[test]
    fn unknown_format_lists_known_names() {
        let err = "fp7".parse::<Format>().unwrap_err().to_string();
        assert!(err.contains("fp7") && err.contains("NVFP4") && err.contains("MXINT8"), "{err}");
    }

    #[test]
    fn serde_uses_canonical_names() {
        assert_eq!(serde_json::to_string(&Format::FP8_E4M3).unwrap(), "\"FP8_E4M3\"");
    }
}
