//! Quantize / dequantize with packed codes. A matrix is `rows x cols`, row-major; a row is an output channel
//! and blocks (groups) run along it. Arithmetic is f32 in the order of `shared/golden/README.md`, so results
//! match the NumPy references bit for bit (or within one f32 rounding).

use std::sync::OnceLock;

use rayon::prelude::*;
use roofline_core::Format;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::minifloat::{MiniFloat, BF16, E2M1, E2M3, E3M2, E4M3, E5M2};

/// Errors of the codecs.
#[derive(Debug, Error, PartialEq)]
pub enum QuantError {
    /// The buffer does not hold `rows x cols` values.
    #[error("matrix has {len} values but rows x cols = {rows} x {cols}")]
    Shape {
        /// Values given.
        len: usize,
        /// Rows claimed.
        rows: usize,
        /// Columns claimed.
        cols: usize,
    },
    /// A format with no codec (plain FP32/FP64/TF32/FP16 storage).
    #[error("{0} is not a quantized format (no codec); quantized formats: {1}")]
    NotQuantized(Format, String),
    /// A codec name that is neither a catalog format nor a known variant.
    #[error("unknown codec '{0}'; known: {1}")]
    UnknownCodec(String, String),
    /// NaN or infinity in the input.
    #[error("input has a non-finite value at row {row}, column {col}")]
    NonFinite {
        /// Row.
        row: usize,
        /// Column.
        col: usize,
    },
}

/// Element encoding of an OCP MX format.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum MxElement {
    /// FP4 E2M1.
    E2M1,
    /// FP6 E3M2.
    E3M2,
    /// FP6 E2M3.
    E2M3,
    /// FP8 E4M3.
    E4M3,
    /// FP8 E5M2.
    E5M2,
    /// INT8 with an implicit scale of 2^-6.
    Int8,
}

impl MxElement {
    fn minifloat(self) -> Option<MiniFloat> {
        match self {
            MxElement::E2M1 => Some(E2M1),
            MxElement::E3M2 => Some(E3M2),
            MxElement::E2M3 => Some(E2M3),
            MxElement::E4M3 => Some(E4M3),
            MxElement::E5M2 => Some(E5M2),
            MxElement::Int8 => None,
        }
    }

    /// Exponent of the element's largest power of two (`emax_elem` of the OCP MX spec).
    fn emax(self) -> i32 {
        match self {
            MxElement::E2M1 | MxElement::E2M3 => 2,
            MxElement::E3M2 => 4,
            MxElement::E4M3 => 8,
            MxElement::E5M2 => 15,
            MxElement::Int8 => 0,
        }
    }

    fn bits(self) -> u32 {
        match self {
            MxElement::E2M1 => 4,
            MxElement::E3M2 | MxElement::E2M3 => 6,
            _ => 8,
        }
    }
}

/// A quantization rule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Codec {
    /// FP8 with one scale per tensor: `s = amax / max`, `q = fp8(clamp(x / s))`.
    Fp8PerTensor(FloatKind),
    /// FP8 with one scale per row.
    Fp8PerChannel(FloatKind),
    /// Symmetric INT8 per row: `s = amax / 127`, `q = clamp(round(x / s), ±127)`.
    Int8PerChannel,
    /// Asymmetric unsigned integers of `bits` per group of `group` along a row (INT4 g128, INT2 g64).
    IntGroupAsym {
        /// Bits per element (2 or 4).
        bits: u32,
        /// Group size.
        group: usize,
    },
    /// NF4: codebook of 16 normal quantiles, absmax scale per block.
    Nf4 {
        /// Block size (64).
        block: usize,
    },
    /// NF4 with double quantization of the absmax (bitsandbytes `compress_statistics=True`): the absmax values
    /// are stored as 8-bit codes with an FP32 scale per 256 and the mean as offset; see [`DoubleQuant`].
    Nf4Dq {
        /// Block size (64).
        block: usize,
    },
    /// OCP MX: blocks of 32 with a shared power-of-two (E8M0) scale.
    Mx(MxElement),
    /// NVFP4: E2M1 elements, E4M3 scale per 16, FP32 scale per tensor.
    Nvfp4,
    /// A plain cast to BF16 (round to nearest even).
    Bf16,
}

/// FP8 flavour.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum FloatKind {
    /// E4M3.
    E4M3,
    /// E5M2.
    E5M2,
}

impl FloatKind {
    fn mf(self) -> MiniFloat {
        match self {
            FloatKind::E4M3 => E4M3,
            FloatKind::E5M2 => E5M2,
        }
    }
}

/// bitsandbytes' NF4 code values (`create_normal_map`), ascending.
pub const NF4_CODE: [f32; 16] = [
    -1.0,
    -0.696_192_8,
    -0.525_073_05,
    -0.394_917_5,
    -0.284_441_38,
    -0.184_773_43,
    -0.091_050_036,
    0.0,
    0.079_580_3,
    0.160_930_2,
    0.246_112_3,
    0.337_915_24,
    0.440_709_83,
    0.562_617,
    0.722_956_84,
    1.0,
];

impl Codec {
    /// The default codec of a catalog format (per the golden README's rules).
    pub fn for_format(f: Format) -> Result<Codec, QuantError> {
        Self::of(f).ok_or_else(|| QuantError::NotQuantized(f, quantized_names()))
    }

    fn of(f: Format) -> Option<Codec> {
        Some(match f {
            Format::FP8_E4M3 => Codec::Fp8PerTensor(FloatKind::E4M3),
            Format::FP8_E5M2 => Codec::Fp8PerTensor(FloatKind::E5M2),
            Format::INT8 => Codec::Int8PerChannel,
            Format::INT4 | Format::INT4_G128 => Codec::IntGroupAsym { bits: 4, group: 128 },
            Format::INT2 => Codec::IntGroupAsym { bits: 2, group: 64 },
            Format::NF4 => Codec::Nf4 { block: 64 },
            Format::MXFP4 => Codec::Mx(MxElement::E2M1),
            Format::MXFP6_E3M2 => Codec::Mx(MxElement::E3M2),
            Format::MXFP6_E2M3 => Codec::Mx(MxElement::E2M3),
            Format::MXFP8_E4M3 => Codec::Mx(MxElement::E4M3),
            Format::MXFP8_E5M2 => Codec::Mx(MxElement::E5M2),
            Format::MXINT8 => Codec::Mx(MxElement::Int8),
            Format::NVFP4 => Codec::Nvfp4,
            Format::BF16 => Codec::Bf16,
            _ => return None,
        })
    }

    /// Bits of one packed code.
    pub fn bits(self) -> u32 {
        match self {
            Codec::Fp8PerTensor(_) | Codec::Fp8PerChannel(_) | Codec::Int8PerChannel => 8,
            Codec::IntGroupAsym { bits, .. } => bits,
            Codec::Nf4 { .. } | Codec::Nf4Dq { .. } | Codec::Nvfp4 => 4,
            Codec::Mx(e) => e.bits(),
            Codec::Bf16 => 16,
        }
    }

    /// Elements per scale along a row (`cols` for per-row scales, 0 for per-tensor or none).
    fn block(self, cols: usize) -> usize {
        match self {
            Codec::Fp8PerTensor(_) | Codec::Bf16 => 0,
            Codec::Fp8PerChannel(_) | Codec::Int8PerChannel => cols.max(1),
            Codec::IntGroupAsym { group, .. } => group,
            Codec::Nf4 { block } | Codec::Nf4Dq { block } => block,
            Codec::Mx(_) => 32,
            Codec::Nvfp4 => 16,
        }
    }
}

/// Canonical names of the formats that have a codec.
pub fn quantized_names() -> String {
    Format::ALL.iter().filter(|f| Codec::of(**f).is_some()).map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

/// Codec names beyond the catalog defaults that [`Codec::parse`] accepts (group sizes, per-channel FP8, NF4
/// with double quantization).
pub const EXTRA_CODECS: [&str; 9] = [
    "INT4_G32",
    "INT4_G64",
    "INT2_G32",
    "INT2_G128",
    "FP8_E4M3_CHANNEL",
    "FP8_E5M2_CHANNEL",
    "NF4_DQ",
    "INT8_CHANNEL",
    "FP8_E4M3_TENSOR",
];

impl Codec {
    /// Parses a codec name: a catalog format name or alias (its default codec), or one of [`EXTRA_CODECS`]
    /// (`INT4_G32`, `INT4_G64`, `INT4_G128`, `INT2_G32|64|128`, `FP8_E4M3_CHANNEL`, `FP8_E5M2_CHANNEL`,
    /// `FP8_E4M3_TENSOR`, `NF4_DQ`), case-insensitive.
    pub fn parse(name: &str) -> Result<Codec, QuantError> {
        let key = name.trim().to_ascii_uppercase().replace('-', "_");
        let group = |rest: &str| rest.strip_prefix("_G").and_then(|g| g.parse::<usize>().ok());
        if let Some(g) = key.strip_prefix("INT4").and_then(group).filter(|g| matches!(g, 32 | 64 | 128)) {
            return Ok(Codec::IntGroupAsym { bits: 4, group: g });
        }
        if let Some(g) = key.strip_prefix("INT2").and_then(group).filter(|g| matches!(g, 32 | 64 | 128)) {
            return Ok(Codec::IntGroupAsym { bits: 2, group: g });
        }
        match key.as_str() {
            "FP8_E4M3_CHANNEL" | "FP8_CHANNEL" => return Ok(Codec::Fp8PerChannel(FloatKind::E4M3)),
            "FP8_E5M2_CHANNEL" => return Ok(Codec::Fp8PerChannel(FloatKind::E5M2)),
            "FP8_E4M3_TENSOR" | "FP8_TENSOR" => return Ok(Codec::Fp8PerTensor(FloatKind::E4M3)),
            "FP8_E5M2_TENSOR" => return Ok(Codec::Fp8PerTensor(FloatKind::E5M2)),
            "NF4_DQ" | "NF4_DOUBLE" => return Ok(Codec::Nf4Dq { block: 64 }),
            "INT8_CHANNEL" => return Ok(Codec::Int8PerChannel),
            _ => {}
        }
        let f: Format = name.parse().map_err(|_| QuantError::UnknownCodec(name.to_string(), codec_names()))?;
        Codec::for_format(f)
    }

    /// Canonical name of this codec (parsable by [`Codec::parse`]).
    pub fn name(self) -> String {
        match self {
            Codec::Fp8PerTensor(FloatKind::E4M3) => "FP8_E4M3_TENSOR".into(),
            Codec::Fp8PerTensor(FloatKind::E5M2) => "FP8_E5M2_TENSOR".into(),
            Codec::Fp8PerChannel(FloatKind::E4M3) => "FP8_E4M3_CHANNEL".into(),
            Codec::Fp8PerChannel(FloatKind::E5M2) => "FP8_E5M2_CHANNEL".into(),
            Codec::Int8PerChannel => "INT8".into(),
            Codec::IntGroupAsym { bits, group } => format!("INT{bits}_G{group}"),
            Codec::Nf4 { .. } => "NF4".into(),
            Codec::Nf4Dq { .. } => "NF4_DQ".into(),
            Codec::Mx(MxElement::E2M1) => "MXFP4".into(),
            Codec::Mx(MxElement::E3M2) => "MXFP6_E3M2".into(),
            Codec::Mx(MxElement::E2M3) => "MXFP6_E2M3".into(),
            Codec::Mx(MxElement::E4M3) => "MXFP8_E4M3".into(),
            Codec::Mx(MxElement::E5M2) => "MXFP8_E5M2".into(),
            Codec::Mx(MxElement::Int8) => "MXINT8".into(),
            Codec::Nvfp4 => "NVFP4".into(),
            Codec::Bf16 => "BF16".into(),
        }
    }

    /// Exact storage bytes of a `rows x cols` matrix: packed codes plus scales (FP16 for INT/NF4 groups, FP32
    /// per channel and per tensor, 1 byte for E8M0/E4M3), zero points and, for NF4_DQ, the 8-bit absmax codes.
    pub fn storage_bytes(self, rows: usize, cols: usize) -> u64 {
        let (r, c) = (rows as u64, cols as u64);
        let codes = r * (c * u64::from(self.bits())).div_ceil(8);
        let blocks = |b: usize| r * c.div_ceil(b as u64);
        codes
            + match self {
                Codec::Fp8PerTensor(_) => 4,
                Codec::Fp8PerChannel(_) | Codec::Int8PerChannel => 4 * r,
                Codec::IntGroupAsym { bits, group } => {
                    r * (c.div_ceil(group as u64) * (16 + u64::from(bits))).div_ceil(8)
                }
                Codec::Nf4 { block } => 2 * blocks(block),
                Codec::Nf4Dq { block } => blocks(block) + 4 * blocks(block).div_ceil(DOUBLE_QUANT_BLOCK as u64) + 4,
                Codec::Mx(_) => blocks(32),
                Codec::Nvfp4 => blocks(16) + 4,
                Codec::Bf16 => 0,
            }
    }
}

/// Every name [`Codec::parse`] knows: the catalog formats with a codec and [`EXTRA_CODECS`].
pub fn codec_names() -> String {
    format!("{}, {}", quantized_names(), EXTRA_CODECS.join(", "))
}

/// A quantized matrix: packed codes (each row starts on a byte), one scale (and zero point) per block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantizedTensor {
    /// The rule used.
    pub codec: Codec,
    /// Rows (output channels).
    pub rows: usize,
    /// Columns (reduction dimension).
    pub cols: usize,
    /// Packed codes, LSB first within each byte, `row_bytes` per row.
    pub codes: Vec<u8>,
    /// Bytes per packed row.
    pub row_bytes: usize,
    /// Scales, row-major by block (their values; E8M0/E4M3 scales are exact in f32).
    pub scales: Vec<f32>,
    /// Zero points of asymmetric codecs, one per block.
    pub zeros: Vec<u8>,
    /// Per-tensor scale (FP8 per-tensor, NVFP4's global scale), 1 otherwise.
    pub tensor_scale: f32,
    /// The stored form of the absmax values of NF4 with double quantization (`scales` then holds their decoded
    /// values, which is what dequantization uses).
    #[serde(default)]
    pub double_quant: Option<DoubleQuant>,
}

fn amax(xs: &[f32]) -> f32 {
    xs.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

/// Storage precision of the per-block (per-row) scales. Checkpoints store scales in the model's dtype, so the
/// scale is rounded to it *before* the elements are quantized with it, and the stored scale reproduces the
/// codec's output exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ScaleDtype {
    /// Keep f32 scales (the golden rules).
    #[default]
    F32,
    /// Round scales to IEEE binary16.
    F16,
    /// Round scales to bfloat16.
    BF16,
}

impl ScaleDtype {
    /// Rounds a scale to this precision (round to nearest even).
    pub fn round(self, s: f32) -> f32 {
        match self {
            ScaleDtype::F32 => s,
            ScaleDtype::F16 => half::f16::from_f32(s).to_f32(),
            ScaleDtype::BF16 => BF16.round(s),
        }
    }
}

/// Options of [`quantize_with`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QuantOptions {
    /// Use this per-tensor scale (FP8 per-tensor, NVFP4's global scale) instead of deriving it from the amax.
    pub tensor_scale: Option<f32>,
    /// Precision the per-block/per-row scales are rounded to (INT8, INT4/INT2, FP8 per-channel, NF4).
    pub scale_dtype: ScaleDtype,
}

#[allow(clippy::too_many_arguments)] // the row kernel takes its output slices directly
/// Quantizes one row into `codes` (one code per element), `scales` and `zeros` (one per block).
fn quantize_row(
    codec: Codec,
    row: &[f32],
    tensor_scale: f32,
    sd: ScaleDtype,
    enc: Option<&Encoder>,
    codes: &mut [u32],
    scales: &mut [f32],
    zeros: &mut [u8],
) {
    let block = codec.block(row.len());
    if block == 0 {
        let enc = enc.expect("per-tensor codecs have an element encoder");
        match codec {
            Codec::Fp8PerTensor(_) => codes.iter_mut().zip(row).for_each(|(c, &x)| *c = enc.code(x / tensor_scale)),
            _ => codes.iter_mut().zip(row).for_each(|(c, &x)| *c = bf16_code(x)),
        }
        return;
    }
    for (b, (chunk, out)) in row.chunks(block).zip(codes.chunks_mut(block)).enumerate() {
        match codec {
            Codec::Fp8PerChannel(_) => {
                let enc = enc.expect("FP8 has an encoder");
                let s = sd.round(nonzero(amax(chunk) / enc.mf.max));
                scales[b] = s;
                out.iter_mut().zip(chunk).for_each(|(c, &x)| *c = enc.code(x / s));
            }
            Codec::Int8PerChannel => {
                let s = sd.round(nonzero(amax(chunk) / 127.0));
                scales[b] = s;
                out.iter_mut().zip(chunk).for_each(|(c, &x)| {
                    let q = rne((x / s).clamp(-128.0, 128.0)).clamp(-127.0, 127.0) as i32;
                    *c = u32::from(q as i8 as u8);
                });
            }
            Codec::IntGroupAsym { bits, .. } => {
                let levels = ((1u32 << bits) - 1) as f32;
                let (mn, mx) = chunk.iter().fold((0.0f32, 0.0f32), |(a, b), &x| (a.min(x), b.max(x)));
                let s = sd.round((mx - mn) / levels);
                if s == 0.0 {
                    scales[b] = 0.0;
                    zeros[b] = 0;
                    out.iter_mut().for_each(|c| *c = 0);
                    continue;
                }
                let zero = rne((-mn / s).clamp(-LIM, LIM)).clamp(0.0, levels);
                scales[b] = s;
                zeros[b] = zero as u8;
                out.iter_mut()
                    .zip(chunk)
                    .for_each(|(c, &x)| *c = (rne((x / s).clamp(-LIM, LIM)) + zero).clamp(0.0, levels) as u32);
            }
            Codec::Nf4 { .. } | Codec::Nf4Dq { .. } => {
                let s = sd.round(amax(chunk));
                scales[b] = s;
                out.iter_mut().zip(chunk).for_each(|(c, &x)| *c = nf4_index(if s == 0.0 { 0.0 } else { x / s }));
            }
            Codec::Mx(e) => {
                let a = amax(chunk);
                let exp =
                    if a == 0.0 { -127 } else { (f64::from(a).log2().floor() as i32 - e.emax()).clamp(-127, 127) };
                let s = 2f32.powi(exp);
                scales[b] = s;
                match enc {
                    Some(enc) => out.iter_mut().zip(chunk).for_each(|(c, &x)| *c = enc.code(x / s)),
                    None => out.iter_mut().zip(chunk).for_each(|(c, &x)| {
                        let q = rne(((x / s) * 64.0).clamp(-128.0, 128.0)).clamp(-127.0, 127.0) as i32;
                        *c = u32::from(q as i8 as u8);
                    }),
                }
            }
            Codec::Nvfp4 => {
                let enc = enc.expect("NVFP4 has an encoder");
                let g = tensor_scale;
                let s = e4m3_table()[E4M3_ENC.code(amax(chunk) / 6.0 / g) as usize];
                scales[b] = s;
                let sg = s * g;
                if s == 0.0 {
                    out.iter_mut().for_each(|c| *c = 0);
                } else {
                    out.iter_mut().zip(chunk).for_each(|(c, &x)| *c = enc.code(x / sg));
                }
            }
            Codec::Fp8PerTensor(_) | Codec::Bf16 => unreachable!("per-tensor codecs have no blocks"),
        }
    }
}

/// BF16 code of a finite f32: round to nearest even on the bits, saturating at the largest finite BF16
/// (equal to `BF16.encode(BF16.round(x))`).
#[inline]
fn bf16_code(x: f32) -> u32 {
    let b = x.to_bits();
    let r = (b.wrapping_add(0x7fff + ((b >> 16) & 1))) >> 16;
    if r & 0x7f80 == 0x7f80 {
        (b >> 16 & 0x8000) | 0x7f7f // rounded past the largest finite value: saturate
    } else {
        r
    }
}

/// The E4M3 encoder (NVFP4 block scales).
const E4M3_ENC: Encoder = Encoder { mf: E4M3, max_code: 0x7e, min_exp: -6, sign_shift: 7 };

/// Values of the 256 E4M3 codes.
fn e4m3_table() -> &'static [f32; 256] {
    static T: OnceLock<[f32; 256]> = OnceLock::new();
    T.get_or_init(|| std::array::from_fn(|c| E4M3.decode(c as u32)))
}

/// Index of the nearest NF4 code value (the lowest index on a tie, like a full argmin scan). The nearest code
/// is one of the two around `v` (computed distances are monotone, and the codes are far apart compared with
/// an f32 ulp, so no farther code can tie).
#[inline]
fn nf4_index(v: f32) -> u32 {
    let j = NF4_CODE.iter().map(|&c| usize::from(c < v)).sum::<usize>(); // codes below v, branch-free
    let lo = j.saturating_sub(1);
    let hi = j.min(15);
    let pick_hi = (v - NF4_CODE[hi]).abs() < (v - NF4_CODE[lo]).abs();
    (if pick_hi { hi } else { lo }) as u32
}

/// Bound for values rounded with [`rne`] (callers clamp to it first; results beyond are clamped anyway).
const LIM: f32 = 1_048_576.0;
/// `1.5 * 2^52`: adding and subtracting it rounds an f64 below 2^51 to an integer, ties to even.
const RNE_F64: f64 = 6_755_399_441_055_744.0;

/// Round half to even of `|v| < 2^22` without a libm call (`roundevenf` is not inlined without SSE4.1): adding
/// and subtracting `1.5 * 2^23` leaves the integer part rounded by the FPU's default mode.
#[inline(always)]
fn rne(v: f32) -> f32 {
    const M: f32 = 12_582_912.0;
    (v + M) - M
}

/// A branch-light round-to-nearest-even encoder for one [`MiniFloat`] layout, equal bit for bit to
/// `mf.encode(mf.round(x.clamp(-mf.max, mf.max)))`.
#[derive(Debug, Clone, Copy)]
struct Encoder {
    mf: MiniFloat,
    max_code: u32,
    min_exp: i32,
    sign_shift: u32,
}

impl Encoder {
    fn new(mf: MiniFloat) -> Self {
        Encoder { mf, max_code: mf.encode(mf.max), min_exp: 1 - mf.bias(), sign_shift: mf.exp_bits + mf.man_bits }
    }

    /// Code of `x` (finite or infinite, not NaN) after saturation and RNE rounding.
    #[inline]
    fn code(&self, x: f32) -> u32 {
        let sign = (x.to_bits() >> 31) << self.sign_shift;
        let a = x.abs();
        if a >= self.mf.max {
            return sign | self.max_code;
        }
        if a == 0.0 {
            return sign;
        }
        let a = f64::from(a);
        let man = self.mf.man_bits as i32;
        let e = ((((a.to_bits() >> 52) & 0x7ff) as i32) - 1023).max(self.min_exp);
        // a / 2^(e - man) is exact; the mantissa may round up into the next binade, which the sum below carries.
        let v = a * f64::from_bits(((man - e + 1023) as u64) << 52); // < 2^(man + 1)
        let m = ((v + RNE_F64) - RNE_F64) as u32;
        sign | ((((e - self.min_exp) as u32) << man) + m).min(self.max_code)
    }
}

fn encoder(codec: Codec) -> Option<Encoder> {
    let mf = match codec {
        Codec::Fp8PerTensor(k) | Codec::Fp8PerChannel(k) => k.mf(),
        Codec::Mx(e) => e.minifloat()?,
        Codec::Nvfp4 => E2M1,
        Codec::Bf16 => BF16,
        _ => return None,
    };
    Some(Encoder::new(mf))
}

fn nonzero(s: f32) -> f32 {
    if s == 0.0 {
        1.0
    } else {
        s
    }
}

/// Value of every code of a codec of at most 8 bits (scale 1, zero 0), indexed by code.
fn decode_table(codec: Codec) -> Vec<f32> {
    let n = 1usize << codec.bits().min(8);
    (0..n as u32)
        .map(|code| match codec {
            Codec::Fp8PerTensor(k) | Codec::Fp8PerChannel(k) => k.mf().decode(code),
            Codec::Int8PerChannel => f32::from(code as u8 as i8),
            Codec::IntGroupAsym { .. } => code as f32,
            Codec::Nf4 { .. } | Codec::Nf4Dq { .. } => NF4_CODE[code as usize & 15],
            Codec::Mx(e) => match e.minifloat() {
                Some(mf) => mf.decode(code),
                None => f32::from(code as u8 as i8) / 64.0,
            },
            Codec::Nvfp4 => E2M1.decode(code),
            Codec::Bf16 => 0.0,
        })
        .collect()
}

fn decode(codec: Codec, table: &[f32], code: u32, scale: f32, zero: u8, tensor_scale: f32) -> f32 {
    match codec {
        Codec::Bf16 => f32::from_bits(code << 16),
        Codec::Fp8PerTensor(_) => table[code as usize] * tensor_scale,
        Codec::IntGroupAsym { .. } => (table[code as usize] - f32::from(zero)) * scale,
        Codec::Nvfp4 => table[code as usize] * (scale * tensor_scale),
        _ => table[code as usize] * scale,
    }
}

fn pack(codes: &[u32], bits: u32, out: &mut [u8]) {
    match bits {
        8 => {
            out.iter_mut().zip(codes).for_each(|(o, &c)| *o = c as u8);
            return;
        }
        4 => {
            for (o, pair) in out.iter_mut().zip(codes.chunks(2)) {
                *o = pair[0] as u8 & 0xf | pair.get(1).map_or(0, |&c| (c as u8 & 0xf) << 4);
            }
            return;
        }
        16 => {
            for (o, &c) in out.chunks_mut(2).zip(codes) {
                o.copy_from_slice(&(c as u16).to_le_bytes());
            }
            return;
        }
        _ => {}
    }
    // any other width: a 64-bit accumulator, LSB first (code i at bit i * bits)
    out.iter_mut().for_each(|o| *o = 0);
    let mask = (1u64 << bits) - 1;
    let (mut acc, mut nbits, mut o) = (0u64, 0u32, 0usize);
    for &c in codes {
        acc |= (u64::from(c) & mask) << nbits;
        nbits += bits;
        while nbits >= 8 {
            out[o] = acc as u8;
            o += 1;
            acc >>= 8;
            nbits -= 8;
        }
    }
    if nbits > 0 {
        out[o] = acc as u8;
    }
}

/// Unpacks `n` codes of `bits` bits (LSB first) into `out`.
fn unpack_into(bytes: &[u8], bits: u32, out: &mut [u32]) {
    match bits {
        8 => out.iter_mut().zip(bytes).for_each(|(o, &b)| *o = u32::from(b)),
        4 => out.iter_mut().enumerate().for_each(|(i, o)| *o = u32::from((bytes[i / 2] >> (4 * (i % 2))) & 0xf)),
        16 => out
            .iter_mut()
            .enumerate()
            .for_each(|(i, o)| *o = u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))),
        _ => {
            let mask = (1u64 << bits) - 1;
            let (mut acc, mut nbits, mut next) = (0u64, 0u32, bytes.iter());
            for o in out.iter_mut() {
                while nbits < bits {
                    acc |= u64::from(next.next().copied().unwrap_or(0)) << nbits;
                    nbits += 8;
                }
                *o = (acc & mask) as u32;
                acc >>= bits;
                nbits -= bits;
            }
        }
    }
}

#[cfg(test)]
fn unpack(bytes: &[u8], bits: u32, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    unpack_into(bytes, bits, &mut out);
    out
}

/// Splits `v` into consecutive slices of `per_row * rows_per_task` items, `tasks` of them (empty slices when
/// `per_row` is 0).
fn split_tasks<T>(mut v: &mut [T], per_row: usize, rows: usize, rows_per_task: usize) -> Vec<&mut [T]> {
    let mut out = Vec::with_capacity(rows.div_ceil(rows_per_task));
    let mut left = rows;
    while left > 0 {
        let take = rows_per_task.min(left);
        let (head, tail) = std::mem::take(&mut v).split_at_mut(per_row * take);
        out.push(head);
        v = tail;
        left -= take;
    }
    out
}

/// Quantizes a `rows x cols` row-major matrix.
pub fn quantize(codec: Codec, data: &[f32], rows: usize, cols: usize) -> Result<QuantizedTensor, QuantError> {
    quantize_with(codec, data, rows, cols, &QuantOptions::default())
}

/// Quantizes a `rows x cols` row-major matrix with explicit options (a given per-tensor scale, scales rounded to
/// the checkpoint's dtype). Rows are processed in parallel chunks; no allocation per element or per row.
pub fn quantize_with(
    codec: Codec,
    data: &[f32],
    rows: usize,
    cols: usize,
    opts: &QuantOptions,
) -> Result<QuantizedTensor, QuantError> {
    if rows.checked_mul(cols) != Some(data.len()) {
        return Err(QuantError::Shape { len: data.len(), rows, cols });
    }
    // one pass: the tensor's amax and whether every value is finite
    let (tensor_amax, finite) = data
        .par_chunks(1 << 16)
        .map(|c| c.iter().fold((0.0f32, true), |(m, ok), &x| (m.max(x.abs()), ok & x.is_finite())))
        .reduce(|| (0.0, true), |a, b| (a.0.max(b.0), a.1 & b.1));
    if !finite {
        let i = data.iter().position(|x| !x.is_finite()).unwrap_or(0);
        return Err(QuantError::NonFinite { row: i / cols.max(1), col: i % cols.max(1) });
    }
    let tensor_scale = match (codec, opts.tensor_scale) {
        (Codec::Fp8PerTensor(_) | Codec::Nvfp4, Some(s)) if s.is_finite() && s > 0.0 => s,
        (Codec::Fp8PerTensor(k), _) => nonzero(tensor_amax / k.mf().max),
        (Codec::Nvfp4, _) => nonzero(tensor_amax / (6.0 * 448.0)),
        _ => 1.0,
    };
    let bits = codec.bits();
    let row_bytes = (cols * bits as usize).div_ceil(8);
    let block = codec.block(cols);
    let bpr = if block == 0 { 0 } else { cols.div_ceil(block) };
    let asym = matches!(codec, Codec::IntGroupAsym { .. });
    let mut codes = vec![0u8; rows * row_bytes];
    let mut scales = vec![0f32; rows * bpr];
    let mut zeros = vec![0u8; if asym { rows * bpr } else { 0 }];
    let rows_per_task = (16384 / cols.max(1)).clamp(1, 64);
    let enc = encoder(codec);
    let tasks: Vec<_> = split_tasks(&mut codes, row_bytes, rows, rows_per_task)
        .into_iter()
        .zip(split_tasks(&mut scales, bpr, rows, rows_per_task))
        .zip(split_tasks(&mut zeros, if asym { bpr } else { 0 }, rows, rows_per_task))
        .enumerate()
        .collect();
    let sd = opts.scale_dtype;
    tasks.into_par_iter().for_each_init(
        || vec![0u32; cols],
        |buf, (t, ((c, s), z))| {
            for i in 0..c.len() / row_bytes.max(1) {
                let r = t * rows_per_task + i;
                let (s_row, z_row) =
                    (&mut s[i * bpr..(i + 1) * bpr], if asym { &mut z[i * bpr..(i + 1) * bpr] } else { &mut [][..] });
                quantize_row(codec, &data[r * cols..(r + 1) * cols], tensor_scale, sd, enc.as_ref(), buf, s_row, z_row);
                pack(buf, bits, &mut c[i * row_bytes..(i + 1) * row_bytes]);
            }
        },
    );
    let mut q =
        QuantizedTensor { codec, rows, cols, codes, row_bytes, scales, zeros, tensor_scale, double_quant: None };
    if let Codec::Nf4Dq { .. } = codec {
        let dq = double_quantize(&q.scales);
        q.scales = dq.dequantize();
        q.double_quant = Some(dq);
    }
    Ok(q)
}

/// Dequantizes back to f32, row-major.
pub fn dequantize(q: &QuantizedTensor) -> Vec<f32> {
    let block = q.codec.block(q.cols);
    let blocks_per_row = if block == 0 { 0 } else { q.cols.div_ceil(block) };
    let table = decode_table(q.codec);
    let bits = q.codec.bits();
    let mut out = vec![0f32; q.rows * q.cols];
    out.par_chunks_mut(q.cols.max(1)).enumerate().for_each_init(
        || vec![0u32; q.cols],
        |codes, (r, row)| {
            unpack_into(&q.codes[r * q.row_bytes..(r + 1) * q.row_bytes], bits, codes);
            if block == 0 {
                for (v, &code) in row.iter_mut().zip(codes.iter()) {
                    *v = decode(q.codec, &table, code, 1.0, 0, q.tensor_scale);
                }
                return;
            }
            for (cb, (vs, cs)) in row.chunks_mut(block).zip(codes.chunks(block)).enumerate() {
                let b = r * blocks_per_row + cb;
                let (scale, zero) = (q.scales[b], q.zeros.get(b).copied().unwrap_or(0));
                for (v, &code) in vs.iter_mut().zip(cs) {
                    *v = decode(q.codec, &table, code, scale, zero, q.tensor_scale);
                }
            }
        },
    );
    out
}

/// Block size of the second-level quantization of NF4 absmax values (bitsandbytes `quantize_4bit`,
/// `compress_statistics=True` calls `quantize_blockwise(absmax, blocksize=256)`).
pub const DOUBLE_QUANT_BLOCK: usize = 256;

/// bitsandbytes' signed 8-bit "dynamic" code (`create_dynamic_map(signed=True, max_exponent_bits=7,
/// total_bits=8)` in bitsandbytes/functional.py), ascending, computed in f32.
pub fn dynamic_map() -> &'static [f32; 256] {
    static MAP: OnceLock<[f32; 256]> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut data: Vec<f32> = Vec::with_capacity(256);
        let max_exponent_bits = 7i32;
        for i in 0..max_exponent_bits {
            let items = (1usize << i) + 1; // 2^(i + non_sign_bits - max_exponent_bits) + 1, non_sign_bits = 7
            let step = 0.9f32 / (items - 1) as f32;
            let bounds: Vec<f32> = (0..items).map(|k| 0.1 + step * k as f32).collect();
            let p = 10f32.powi(-(max_exponent_bits - 1) + i);
            for w in bounds.windows(2) {
                let mean = (w[0] + w[1]) / 2.0;
                data.push(p * mean);
                data.push(-(p * mean));
            }
        }
        data.push(0.0);
        data.push(1.0);
        data.sort_by(f32::total_cmp);
        let mut out = [0f32; 256];
        out.copy_from_slice(&data);
        out
    })
}

/// The absmax values of an NF4 tensor, double-quantized the bitsandbytes way: the mean is subtracted, then
/// each block of 256 is scaled by its own absmax (FP32) and rounded to the nearest value of the 8-bit dynamic map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DoubleQuant {
    /// One 8-bit index into [`dynamic_map`] per first-level absmax.
    pub codes: Vec<u8>,
    /// FP32 absmax of each block of 256 centred absmax values.
    pub block_scales: Vec<f32>,
    /// Mean of the first-level absmax values (added back after decoding).
    pub offset: f32,
}

impl DoubleQuant {
    /// The first-level absmax values this decodes to: `code[q] * block_scale + offset`.
    pub fn dequantize(&self) -> Vec<f32> {
        let map = dynamic_map();
        self.codes
            .iter()
            .enumerate()
            .map(|(i, &c)| map[c as usize] * self.block_scales[i / DOUBLE_QUANT_BLOCK] + self.offset)
            .collect()
    }
}

/// Double-quantizes NF4 absmax values (see [`DoubleQuant`]).
pub fn double_quantize(absmax: &[f32]) -> DoubleQuant {
    let map = dynamic_map();
    let offset = if absmax.is_empty() {
        0.0
    } else {
        (absmax.iter().map(|&a| f64::from(a)).sum::<f64>() / absmax.len() as f64) as f32
    };
    let mut codes = Vec::with_capacity(absmax.len());
    let mut block_scales = Vec::with_capacity(absmax.len().div_ceil(DOUBLE_QUANT_BLOCK));
    for chunk in absmax.chunks(DOUBLE_QUANT_BLOCK) {
        let s = chunk.iter().fold(0.0f32, |m, &a| m.max((a - offset).abs()));
        block_scales.push(s);
        for &a in chunk {
            let v = if s == 0.0 { 0.0 } else { (a - offset) / s };
            let j = map.partition_point(|&c| c < v);
            let (lo, hi) = (j.saturating_sub(1), j.min(255));
            let best = if (v - map[hi]).abs() < (v - map[lo]).abs() { hi } else { lo };
            codes.push(best as u8);
        }
    }
    DoubleQuant { codes, block_scales, offset }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaussian(n: usize, seed: u64) -> Vec<f32> {
        crate::metrics::gaussian_matrix(n, 1, seed)
    }

    #[test]
    fn pack_unpack_round_trip() {
        for bits in [2, 4, 6, 8, 16] {
            let codes: Vec<u32> = (0..37).map(|i| (i * 7 + 3) % (1 << bits)).collect();
            let mut buf = vec![0u8; (37 * bits as usize).div_ceil(8)];
            pack(&codes, bits, &mut buf);
            assert_eq!(unpack(&buf, bits, 37), codes, "{bits} bits");
        }
    }

    #[test]
    fn every_format_round_trips_odd_shapes() {
        let (rows, cols) = (3, 77); // partial blocks for every block size
        let x = gaussian(rows * cols, 7);
        for f in Format::ALL {
            let Ok(codec) = Codec::for_format(f) else { continue };
            let q = quantize(codec, &x, rows, cols).unwrap();
            assert_eq!(q.codes.len(), rows * (cols * codec.bits() as usize).div_ceil(8), "{f}");
            let y = dequantize(&q);
            let m = crate::ErrorMetrics::of(&x, &y);
            let floor = match codec.bits() {
                2 => 3.0,
                4 => 12.0,
                6 => 20.0,
                _ => 25.0,
            };
            assert!(m.sqnr_db > floor, "{f}: SQNR {} dB", m.sqnr_db);
            // quantizing the dequantized matrix again changes nothing (idempotent grid)
            let again = dequantize(&quantize(codec, &y, rows, cols).unwrap());
            let drift = crate::ErrorMetrics::of(&y, &again);
            assert!(drift.sqnr_db > 60.0 || f == Format::NVFP4 || f == Format::NF4, "{f}: {}", drift.sqnr_db);
        }
    }

    #[test]
    fn zeros_and_errors() {
        let q = quantize(Codec::Nvfp4, &[0.0; 32], 2, 16).unwrap();
        assert!(dequantize(&q).iter().all(|v| *v == 0.0));
        let q = quantize(Codec::Mx(MxElement::E2M1), &[0.0; 32], 1, 32).unwrap();
        assert!(dequantize(&q).iter().all(|v| *v == 0.0));
        assert!(matches!(quantize(Codec::Int8PerChannel, &[1.0; 5], 2, 3), Err(QuantError::Shape { .. })));
        assert!(matches!(
            quantize(Codec::Int8PerChannel, &[1.0, f32::NAN], 1, 2),
            Err(QuantError::NonFinite { row: 0, col: 1 })
        ));
        assert!(Codec::for_format(Format::FP32).unwrap_err().to_string().contains("NVFP4"));
    }

    #[test]
    fn fast_encoder_equals_reference_rounding() {
        let mut xs = gaussian(20000, 11);
        xs.extend([0.0, -0.0, 1e-30, -1e-40, 447.9, 448.0, 464.0, 480.0, 1e9, -1e9, 0.25, 0.75, 2.5, 3.5, 5.0]);
        for mf in [E4M3, E5M2, E3M2, E2M3, E2M1, BF16] {
            let enc = Encoder::new(mf);
            for scale in [1.0f32, 1e-3, 37.0, 1e-38] {
                for &x in &xs {
                    let v = x * scale;
                    let want = mf.encode(mf.round(v.clamp(-mf.max, mf.max)));
                    assert_eq!(enc.code(v), want, "{mf:?} x={v:e}");
                }
            }
        }
    }

    #[test]
    fn const_e4m3_encoder_and_bf16_bits() {
        let e = Encoder::new(E4M3);
        assert_eq!((e.max_code, e.min_exp, e.sign_shift), (E4M3_ENC.max_code, E4M3_ENC.min_exp, E4M3_ENC.sign_shift));
        let mut xs = gaussian(20000, 17);
        xs.extend([0.0, -0.0, 1e-40, -3e-39, 3.38e38, 3.3895e38, -3.4e38, f32::MAX, f32::MIN, 1.0 + 1.0 / 256.0]);
        for &x in &xs {
            for v in [x, x * 1e30, x * 1e-30] {
                assert_eq!(bf16_code(v), BF16.encode(BF16.round(v.clamp(-BF16.max, BF16.max))), "{v:e}");
            }
        }
    }

    #[test]
    fn rne_equals_round_ties_even() {
        let mut vs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.25).collect();
        vs.extend([0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.5, -127.5, 1e-30, -1e-30, 1048575.5, -LIM, LIM, 0.49999997]);
        vs.extend(gaussian(5000, 3).iter().map(|x| x * 100.0));
        for v in vs {
            assert_eq!(rne(v).to_bits() & 0x7fff_ffff, v.round_ties_even().to_bits() & 0x7fff_ffff, "{v}");
        }
        for v in [0.5f64, 1.5, 2.5, 255.5, 256.0, 3.4999999] {
            assert_eq!((v + RNE_F64) - RNE_F64, v.round_ties_even(), "{v}");
        }
    }

    #[test]
    fn nf4_index_equals_full_scan() {
        let scan = |v: f32| {
            let mut best = 0;
            for (i, c) in NF4_CODE.iter().enumerate() {
                if (v - c).abs() < (v - NF4_CODE[best]).abs() {
                    best = i;
                }
            }
            best as u32
        };
        let mut vs: Vec<f32> = (0..=20000).map(|i| -1.0 + i as f32 * 1e-4).collect();
        for w in NF4_CODE.windows(2) {
            vs.push((w[0] + w[1]) / 2.0);
        }
        for v in vs {
            assert_eq!(nf4_index(v), scan(v), "v={v}");
        }
    }

    #[test]
    fn nf4_double_quant_follows_bitsandbytes() {
        let map = dynamic_map();
        assert_eq!(map.len(), 256);
        assert!(map.windows(2).all(|w| w[0] <= w[1]));
        assert!((map[0] + 0.992_968_75).abs() < 1e-6 && map[255] == 1.0, "{} {}", map[0], map[255]);
        assert!(map.contains(&0.0));
        let (rows, cols) = (64, 512); // 512 absmax values = 2 blocks of 256
        let x = gaussian(rows * cols, 5);
        let plain = quantize(Codec::Nf4 { block: 64 }, &x, rows, cols).unwrap();
        let dq = quantize(Codec::Nf4Dq { block: 64 }, &x, rows, cols).unwrap();
        assert_eq!(plain.codes, dq.codes, "elements are quantized with the exact absmax");
        let d = dq.double_quant.as_ref().unwrap();
        assert_eq!((d.codes.len(), d.block_scales.len()), (512, 2));
        let mean = plain.scales.iter().map(|&a| f64::from(a)).sum::<f64>() / 512.0;
        assert!((f64::from(d.offset) - mean).abs() < 1e-6);
        // the decoded absmax is close to the exact one (8-bit dynamic code: about 1% of the block range)
        for (a, b) in plain.scales.iter().zip(&dq.scales) {
            assert!((a - b).abs() <= 0.02 * d.block_scales[0].max(d.block_scales[1]), "{a} vs {b}");
        }
        let (ep, ed) = (
            crate::ErrorMetrics::of(&x, &dequantize(&plain)).sqnr_db,
            crate::ErrorMetrics::of(&x, &dequantize(&dq)).sqnr_db,
        );
        assert!(ed > ep - 0.5 && ed < ep + 0.1, "NF4 {ep} dB, NF4_DQ {ed} dB");
        assert!(
            Codec::Nf4Dq { block: 64 }.storage_bytes(rows, cols) < Codec::Nf4 { block: 64 }.storage_bytes(rows, cols)
        );
    }

    #[test]
    fn parse_names_and_group_sizes() {
        for g in [32, 64, 128] {
            assert_eq!(Codec::parse(&format!("int4_g{g}")).unwrap(), Codec::IntGroupAsym { bits: 4, group: g });
            let c = Codec::parse(&format!("INT2_G{g}")).unwrap();
            assert_eq!(Codec::parse(&c.name()).unwrap(), c);
        }
        assert_eq!(Codec::parse("FP8_E4M3_CHANNEL").unwrap(), Codec::Fp8PerChannel(FloatKind::E4M3));
        assert_eq!(Codec::parse("fp8").unwrap(), Codec::Fp8PerTensor(FloatKind::E4M3));
        assert_eq!(Codec::parse("NF4_DQ").unwrap(), Codec::Nf4Dq { block: 64 });
        assert_eq!(Codec::parse("INT2").unwrap(), Codec::IntGroupAsym { bits: 2, group: 64 });
        let e = Codec::parse("INT4_G48").unwrap_err().to_string();
        assert!(e.contains("INT4_G32") && e.contains("NVFP4"), "{e}");
        for name in EXTRA_CODECS {
            let c = Codec::parse(name).unwrap();
            assert_eq!(Codec::parse(&c.name()).unwrap(), c, "{name}");
        }
    }

    #[test]
    fn group_sizes_and_per_channel_fp8_work() {
        let (rows, cols) = (8, 256);
        let x = gaussian(rows * cols, 9);
        let sq = |c: Codec| crate::ErrorMetrics::of(&x, &dequantize(&quantize(c, &x, rows, cols).unwrap())).sqnr_db;
        let (g32, g64, g128) = (
            sq(Codec::IntGroupAsym { bits: 4, group: 32 }),
            sq(Codec::IntGroupAsym { bits: 4, group: 64 }),
            sq(Codec::IntGroupAsym { bits: 4, group: 128 }),
        );
        assert!(g32 > g64 && g64 > g128, "{g32} {g64} {g128}");
        let q = quantize(Codec::IntGroupAsym { bits: 4, group: 32 }, &x, rows, cols).unwrap();
        assert_eq!((q.scales.len(), q.zeros.len()), (rows * 8, rows * 8));
        // per-channel FP8: one scale per row, each row's amax maps to 448
        let mut y = x.clone();
        y[..cols].iter_mut().for_each(|v| *v *= 1e5); // row 0 dominates: per-tensor pushes the rest to subnormals
        let q = quantize(Codec::Fp8PerChannel(FloatKind::E4M3), &y, rows, cols).unwrap();
        assert_eq!(q.scales.len(), rows);
        let back = dequantize(&q);
        let row1 = crate::ErrorMetrics::of(&y[cols..2 * cols], &back[cols..2 * cols]).sqnr_db;
        let t = dequantize(&quantize(Codec::Fp8PerTensor(FloatKind::E4M3), &y, rows, cols).unwrap());
        let row1_tensor = crate::ErrorMetrics::of(&y[cols..2 * cols], &t[cols..2 * cols]).sqnr_db;
        assert!(row1 > row1_tensor + 3.0, "per-channel {row1} dB vs per-tensor {row1_tensor} dB");
        // INT2: 4 levels
        let q = quantize(Codec::IntGroupAsym { bits: 2, group: 64 }, &x, rows, cols).unwrap();
        assert_eq!(q.row_bytes, cols / 4);
        assert!(unpack(&q.codes, 2, rows * cols).iter().all(|&c| c < 4));
    }

    #[test]
    fn scale_dtype_and_given_tensor_scale_are_used() {
        let (rows, cols) = (4, 128);
        let x = gaussian(rows * cols, 13);
        let opts = QuantOptions { scale_dtype: ScaleDtype::BF16, ..Default::default() };
        let q = quantize_with(Codec::IntGroupAsym { bits: 4, group: 64 }, &x, rows, cols, &opts).unwrap();
        assert!(q.scales.iter().all(|&s| BF16.round(s) == s));
        let opts = QuantOptions { scale_dtype: ScaleDtype::F16, ..Default::default() };
        let q = quantize_with(Codec::Int8PerChannel, &x, rows, cols, &opts).unwrap();
        assert!(q.scales.iter().all(|&s| half::f16::from_f32(s).to_f32() == s));
        let opts = QuantOptions { tensor_scale: Some(0.001), ..Default::default() };
        let q = quantize_with(Codec::Nvfp4, &x, rows, cols, &opts).unwrap();
        assert_eq!(q.tensor_scale, 0.001);
    }

    /// The pre-optimization row quantizer (commit cf3571a), kept as the reference the fast path must equal.
    mod reference {
        use super::super::*;
        use crate::minifloat::round_half_even;

        fn amax(xs: &[f32]) -> f32 {
            xs.iter().fold(0.0f32, |m, x| m.max(x.abs()))
        }

        struct RowOut {
            codes: Vec<u32>,
            scales: Vec<f32>,
            zeros: Vec<u8>,
        }

        fn quantize_row(codec: Codec, row: &[f32], tensor_scale: f32) -> RowOut {
            let block = codec.block(row.len());
            let mut out = RowOut { codes: Vec::with_capacity(row.len()), scales: Vec::new(), zeros: Vec::new() };
            if block == 0 {
                for &x in row {
                    out.codes.push(match codec {
                        Codec::Fp8PerTensor(k) => {
                            let mf = k.mf();
                            mf.encode(mf.round((x / tensor_scale).clamp(-mf.max, mf.max)))
                        }
                        _ => BF16.encode(BF16.round(x)),
                    });
                }
                return out;
            }
            for chunk in row.chunks(block) {
                match codec {
                    Codec::Fp8PerChannel(k) => {
                        let mf = k.mf();
                        let s = nonzero(amax(chunk) / mf.max);
                        out.scales.push(s);
                        out.codes.extend(chunk.iter().map(|&x| mf.encode(mf.round((x / s).clamp(-mf.max, mf.max)))));
                    }
                    Codec::Int8PerChannel => {
                        let s = nonzero(amax(chunk) / 127.0);
                        out.scales.push(s);
                        out.codes.extend(chunk.iter().map(|&x| {
                            let q = round_half_even(f64::from(x / s)).clamp(-127.0, 127.0) as i32;
                            (q as i8 as u8) as u32
                        }));
                    }
                    Codec::IntGroupAsym { bits, .. } => {
                        let levels = ((1u32 << bits) - 1) as f32;
                        let mn = chunk.iter().fold(0.0f32, |m, &x| m.min(x));
                        let mx = chunk.iter().fold(0.0f32, |m, &x| m.max(x));
                        let s = (mx - mn) / levels;
                        if s == 0.0 {
                            out.scales.push(0.0);
                            out.zeros.push(0);
                            out.codes.extend(chunk.iter().map(|_| 0));
                            continue;
                        }
                        let zero = round_half_even(f64::from(-mn / s)).clamp(0.0, f64::from(levels)) as f32;
                        out.scales.push(s);
                        out.zeros.push(zero as u8);
                        out.codes.extend(
                            chunk
                                .iter()
                                .map(|&x| (round_half_even(f64::from(x / s)) as f32 + zero).clamp(0.0, levels) as u32),
                        );
                    }
                    Codec::Nf4 { .. } => {
                        let s = amax(chunk);
                        out.scales.push(s);
                        out.codes.extend(chunk.iter().map(|&x| {
                            let v = if s == 0.0 { 0.0 } else { x / s };
                            let mut best = 0;
                            for (i, c) in NF4_CODE.iter().enumerate() {
                                if (v - c).abs() < (v - NF4_CODE[best]).abs() {
                                    best = i;
                                }
                            }
                            best as u32
                        }));
                    }
                    Codec::Mx(e) => {
                        let a = amax(chunk);
                        let exp = if a == 0.0 {
                            -127
                        } else {
                            (f64::from(a).log2().floor() as i32 - e.emax()).clamp(-127, 127)
                        };
                        let s = 2f32.powi(exp);
                        out.scales.push(s);
                        out.codes.extend(chunk.iter().map(|&x| match e.minifloat() {
                            Some(mf) => mf.encode(mf.round((x / s).clamp(-mf.max, mf.max))),
                            None => {
                                let q = round_half_even(f64::from(x / s) * 64.0).clamp(-127.0, 127.0) as i32;
                                (q as i8 as u8) as u32
                            }
                        }));
                    }
                    Codec::Nvfp4 => {
                        let g = tensor_scale;
                        let s = e4m3_table()[E4M3_ENC.code(amax(chunk) / 6.0 / g) as usize];
                        out.scales.push(s);
                        let sg = s * g;
                        out.codes.extend(chunk.iter().map(|&x| {
                            if s == 0.0 {
                                0
                            } else {
                                E2M1.encode(E2M1.round((x / sg).clamp(-6.0, 6.0)))
                            }
                        }));
                    }
                    Codec::Fp8PerTensor(_) | Codec::Bf16 | Codec::Nf4Dq { .. } => {
                        unreachable!("per-tensor codecs have no blocks")
                    }
                }
            }
            out
        }

        /// Codes, scales and zeros of the whole matrix by the reference rule.
        pub fn quantize_ref(codec: Codec, data: &[f32], cols: usize, ts: f32) -> (Vec<u32>, Vec<f32>, Vec<u8>) {
            let (mut c, mut s, mut z) = (Vec::new(), Vec::new(), Vec::new());
            for row in data.chunks(cols) {
                let r = quantize_row(codec, row, ts);
                c.extend(r.codes);
                s.extend(r.scales);
                z.extend(r.zeros);
            }
            (c, s, z)
        }
    }

    #[test]
    fn fast_path_is_bit_identical_to_the_reference() {
        let (rows, cols) = (7, 333); // partial blocks everywhere
        let mut x = gaussian(rows * cols, 21);
        x[5] = 0.0;
        x[40] = -0.0;
        x[100] *= 1e4; // outliers
        x[cols..cols + 64].iter_mut().for_each(|v| *v = 0.0); // an all-zero block
        x[2 * cols + 7] = 1e-40; // a subnormal
        let codecs: Vec<Codec> = Format::ALL
            .iter()
            .filter_map(|f| Codec::for_format(*f).ok())
            .chain(EXTRA_CODECS.iter().filter_map(|n| Codec::parse(n).ok()))
            .filter(|c| !matches!(c, Codec::Nf4Dq { .. }))
            .collect();
        for scale in [1.0f32, 3e-3, 250.0] {
            let xs: Vec<f32> = x.iter().map(|v| v * scale).collect();
            for &codec in &codecs {
                let q = quantize(codec, &xs, rows, cols).unwrap();
                let (codes, scales, zeros) = reference::quantize_ref(codec, &xs, cols, q.tensor_scale);
                let mut got = vec![0u32; cols];
                for r in 0..rows {
                    unpack_into(&q.codes[r * q.row_bytes..(r + 1) * q.row_bytes], codec.bits(), &mut got);
                    assert_eq!(got, codes[r * cols..(r + 1) * cols], "{codec:?} x{scale} row {r}");
                }
                assert_eq!(
                    q.scales.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    scales.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{codec:?}"
                );
                assert_eq!(q.zeros, zeros, "{codec:?}");
            }
        }
    }
}
