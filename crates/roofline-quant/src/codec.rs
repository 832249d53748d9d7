//! Quantize / dequantize with packed codes. A matrix is `rows x cols`, row-major; a row is an output channel
//! and blocks (groups) run along it. Arithmetic is f32 in the order of `shared/golden/README.md`, so results
//! match the NumPy references bit for bit (or within one f32 rounding).

use rayon::prelude::*;
use roofline_core::Format;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::minifloat::{round_half_even, MiniFloat, BF16, E2M1, E2M3, E3M2, E4M3, E5M2};

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
            Codec::Nf4 { .. } | Codec::Nvfp4 => 4,
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
            Codec::Nf4 { block } => block,
            Codec::Mx(_) => 32,
            Codec::Nvfp4 => 16,
        }
    }
}

/// Canonical names of the formats that have a codec.
pub fn quantized_names() -> String {
    Format::ALL.iter().filter(|f| Codec::of(**f).is_some()).map(|f| f.name()).collect::<Vec<_>>().join(", ")
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
}

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
                    chunk.iter().map(|&x| (round_half_even(f64::from(x / s)) as f32 + zero).clamp(0.0, levels) as u32),
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
                let exp =
                    if a == 0.0 { -127 } else { (f64::from(a).log2().floor() as i32 - e.emax()).clamp(-127, 127) };
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
                let s = E4M3.round(amax(chunk) / 6.0 / g);
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
            Codec::Fp8PerTensor(_) | Codec::Bf16 => unreachable!("per-tensor codecs have no blocks"),
        }
    }
    out
}

fn nonzero(s: f32) -> f32 {
    if s == 0.0 {
        1.0
    } else {
        s
    }
}

fn decode(codec: Codec, code: u32, scale: f32, zero: u8, tensor_scale: f32) -> f32 {
    match codec {
        Codec::Fp8PerTensor(k) => k.mf().decode(code) * tensor_scale,
        Codec::Fp8PerChannel(k) => k.mf().decode(code) * scale,
        Codec::Int8PerChannel => f32::from(code as u8 as i8) * scale,
        Codec::IntGroupAsym { .. } => (code as f32 - f32::from(zero)) * scale,
        Codec::Nf4 { .. } => NF4_CODE[code as usize] * scale,
        Codec::Mx(e) => match e.minifloat() {
            Some(mf) => mf.decode(code) * scale,
            None => f32::from(code as u8 as i8) / 64.0 * scale,
        },
        Codec::Nvfp4 => E2M1.decode(code) * (scale * tensor_scale),
        Codec::Bf16 => BF16.decode(code),
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
    let mut bit = 0usize;
    for &c in codes {
        for b in 0..bits {
            if (c >> b) & 1 == 1 {
                out[bit / 8] |= 1 << (bit % 8);
            }
            bit += 1;
        }
    }
}

fn unpack(bytes: &[u8], bits: u32, n: usize) -> Vec<u32> {
    match bits {
        8 => return bytes[..n].iter().map(|&b| u32::from(b)).collect(),
        4 => return (0..n).map(|i| u32::from((bytes[i / 2] >> (4 * (i % 2))) & 0xf)).collect(),
        16 => return (0..n).map(|i| u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))).collect(),
        _ => {}
    }
    (0..n)
        .map(|i| {
            (0..bits).fold(0u32, |c, b| {
                let bit = i * bits as usize + b as usize;
                c | (u32::from((bytes[bit / 8] >> (bit % 8)) & 1) << b)
            })
        })
        .collect()
}

/// Quantizes a `rows x cols` row-major matrix.
pub fn quantize(codec: Codec, data: &[f32], rows: usize, cols: usize) -> Result<QuantizedTensor, QuantError> {
    if rows.checked_mul(cols) != Some(data.len()) {
        return Err(QuantError::Shape { len: data.len(), rows, cols });
    }
    if let Some(i) = data.iter().position(|x| !x.is_finite()) {
        return Err(QuantError::NonFinite { row: i / cols.max(1), col: i % cols.max(1) });
    }
    let a = amax(data);
    let tensor_scale = match codec {
        Codec::Fp8PerTensor(k) => nonzero(a / k.mf().max),
        Codec::Nvfp4 => nonzero(a / (6.0 * 448.0)),
        _ => 1.0,
    };
    let bits = codec.bits();
    let row_bytes = (cols * bits as usize).div_ceil(8);
    let outs: Vec<(Vec<u8>, RowOut)> = data
        .par_chunks(cols.max(1))
        .map(|row| {
            let r = quantize_row(codec, row, tensor_scale);
            let mut packed = vec![0u8; row_bytes];
            pack(&r.codes, bits, &mut packed);
            (packed, r)
        })
        .collect();
    let mut q = QuantizedTensor {
        codec,
        rows,
        cols,
        codes: Vec::with_capacity(rows * row_bytes),
        row_bytes,
        scales: Vec::new(),
        zeros: Vec::new(),
        tensor_scale,
    };
    for (packed, r) in outs {
        q.codes.extend(packed);
        q.scales.extend(r.scales);
        q.zeros.extend(r.zeros);
    }
    Ok(q)
}

/// Dequantizes back to f32, row-major.
pub fn dequantize(q: &QuantizedTensor) -> Vec<f32> {
    let block = q.codec.block(q.cols);
    let blocks_per_row = if block == 0 { 0 } else { q.cols.div_ceil(block) };
    let mut out = vec![0f32; q.rows * q.cols];
    out.par_chunks_mut(q.cols.max(1)).enumerate().for_each(|(r, row)| {
        let codes = unpack(&q.codes[r * q.row_bytes..(r + 1) * q.row_bytes], q.codec.bits(), q.cols);
        for (c, (v, code)) in row.iter_mut().zip(codes).enumerate() {
            let (scale, zero) = match c.checked_div(block) {
                None => (1.0, 0),
                Some(cb) => {
                    let b = r * blocks_per_row + cb;
                    (q.scales[b], q.zeros.get(b).copied().unwrap_or(0))
                }
            };
            *v = decode(q.codec, code, scale, zero, q.tensor_scale);
        }
    });
    out
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
}
