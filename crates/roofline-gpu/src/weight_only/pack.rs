//! Host-side packing: a roofline-quant [`QuantizedTensor`] (or plain f32 weights for FP16) into the byte
//! layout the weight-only kernels read, and the exact values the GPU multiplies (for the CPU reference).
//!
//! # GPU layout (all little-endian, `W` is `N x K`, row `n` = output channel, blocks run along K)
//!
//! * `codes`: row-major, `K * bits / 8` bytes per row, elements packed LSB first exactly as roofline-quant
//!   packs them (FP16/BF16: 2-byte words; FP8/INT8: one byte; 4-bit formats: element `2i` in the low
//!   nibble of byte `i`). No reordering is needed for coalescing: the kernel's lane `l` reads 16-byte
//!   chunk `l` of a row, so a warp reads 512 contiguous bytes, and K is required to be a multiple of the
//!   elements in a 16-byte chunk so every row starts 16-byte aligned.
//! * `scales` by format: FP8 E4M3 and INT8: one FP32 per row (`N x 4` bytes); INT4 g128: FP16 per group,
//!   row-major `N x K/128`; NF4: FP16 absmax per block of 64, `N x K/64`; MXFP4: E8M0 byte per 32,
//!   `N x K/32`; NVFP4: E4M3 byte per 16, `N x K/16`; FP16/BF16: none.
//! * `zeros` (INT4 g128 only): 4-bit zero points, two per byte (group `2i` in the low nibble), each row
//!   padded to whole bytes (`ceil(K/128 / 2)` bytes per row).
//! * `global_scale`: NVFP4's FP32 per-tensor scale (a kernel argument), 1 otherwise.
//!
//! The CUDA-core kernels (split-K, x in registers, the ring GEMV) read MXFP4 and NVFP4 codes with the bits
//! of each 32-bit word of 8 codes rearranged ([`device_codes`], [`e2m1_dev_word`]) so that each code's sign
//! and magnitude land on f16 bits 15 and 11-9 with a few shifts and masks (`e2m1_dev_pairs` in
//! `kernels/wo_prims.cuh`, 9 instructions a word); the tensor-core kernels repack from the order above.
//!
//! INT4 and NF4 scales are stored as FP16 (as the catalog's storage count assumes) while roofline-quant
//! keeps them in f32; [`reference_tensor`] rounds them the same way, so the CPU reference dequantizes
//! exactly the values the GPU uses.

use half::f16;
use rayon::prelude::*;
use roofline_core::Format;
use roofline_quant::codec::{FloatKind, MxElement, NF4_CODE};
use roofline_quant::minifloat::{E2M1, E4M3};
use roofline_quant::{quantize, Codec, QuantizedTensor};

use crate::GpuError;

/// A weight format the weight-only kernels support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WoFormat {
    /// Plain FP16 weights.
    Fp16,
    /// Plain BF16 weights.
    Bf16,
    /// FP8 E4M3 with one FP32 scale per output channel.
    Fp8E4M3,
    /// INT8 symmetric with one FP32 scale per output channel.
    Int8,
    /// INT4 asymmetric, groups of 128 along K, FP16 scale and 4-bit zero point per group.
    Int4G128,
    /// NF4 (bitsandbytes code book), FP16 absmax per block of 64.
    Nf4,
    /// OCP MXFP4: E2M1 elements, E8M0 scale per 32.
    Mxfp4,
    /// NVIDIA NVFP4: E2M1 elements, E4M3 scale per 16, FP32 global scale.
    Nvfp4,
}

impl std::str::FromStr for WoFormat {
    type Err = String;

    /// A weight-only format by its catalog name in any case (`INT4_G128`, `nvfp4`, ...); the error lists the names.
    fn from_str(name: &str) -> Result<WoFormat, String> {
        WoFormat::ALL.into_iter().find(|f| f.format().name().eq_ignore_ascii_case(name)).ok_or_else(|| {
            let names: Vec<&str> = WoFormat::ALL.iter().map(|f| f.format().name()).collect();
            format!("{name}: not a weight-only format (one of {})", names.join(", "))
        })
    }
}

impl WoFormat {
    /// Every supported format.
    pub const ALL: [WoFormat; 8] = [
        WoFormat::Fp16,
        WoFormat::Bf16,
        WoFormat::Fp8E4M3,
        WoFormat::Int8,
        WoFormat::Int4G128,
        WoFormat::Nf4,
        WoFormat::Mxfp4,
        WoFormat::Nvfp4,
    ];

    /// The weight-only kernel format for a catalog format (FP8_E4M3 and INT8 run with per-channel scales).
    pub fn from_format(f: Format) -> Result<WoFormat, GpuError> {
        Ok(match f {
            Format::FP16 => WoFormat::Fp16,
            Format::BF16 => WoFormat::Bf16,
            Format::FP8_E4M3 => WoFormat::Fp8E4M3,
            Format::INT8 => WoFormat::Int8,
            Format::INT4_G128 => WoFormat::Int4G128,
            Format::NF4 => WoFormat::Nf4,
            Format::MXFP4 => WoFormat::Mxfp4,
            Format::NVFP4 => WoFormat::Nvfp4,
            other => {
                return Err(GpuError::Unsupported(format!(
                    "no weight-only kernel for {other}; supported: FP16, BF16, FP8_E4M3, INT8, INT4_G128, NF4, MXFP4, NVFP4"
                )))
            }
        })
    }

    /// The catalog format.
    pub fn format(self) -> Format {
        match self {
            WoFormat::Fp16 => Format::FP16,
            WoFormat::Bf16 => Format::BF16,
            WoFormat::Fp8E4M3 => Format::FP8_E4M3,
            WoFormat::Int8 => Format::INT8,
            WoFormat::Int4G128 => Format::INT4_G128,
            WoFormat::Nf4 => Format::NF4,
            WoFormat::Mxfp4 => Format::MXFP4,
            WoFormat::Nvfp4 => Format::NVFP4,
        }
    }

    /// The roofline-quant codec that produces this layout (`None` for FP16, a plain cast).
    pub fn codec(self) -> Option<Codec> {
        match self {
            WoFormat::Fp16 => None,
            WoFormat::Bf16 => Some(Codec::Bf16),
            WoFormat::Fp8E4M3 => Some(Codec::Fp8PerChannel(FloatKind::E4M3)),
            WoFormat::Int8 => Some(Codec::Int8PerChannel),
            WoFormat::Int4G128 => Some(Codec::IntGroupAsym { bits: 4, group: 128 }),
            WoFormat::Nf4 => Some(Codec::Nf4 { block: 64 }),
            WoFormat::Mxfp4 => Some(Codec::Mx(MxElement::E2M1)),
            WoFormat::Nvfp4 => Some(Codec::Nvfp4),
        }
    }

    /// Which format a codec's tensor is in (`None` for codecs without a kernel).
    pub fn of_codec(c: Codec) -> Option<WoFormat> {
        WoFormat::ALL.into_iter().find(|f| f.codec() == Some(c))
    }

    /// Bits of one packed element.
    pub fn bits(self) -> usize {
        match self {
            WoFormat::Fp16 | WoFormat::Bf16 => 16,
            WoFormat::Fp8E4M3 | WoFormat::Int8 => 8,
            _ => 4,
        }
    }

    /// Whether the format has per-block scales read along K (INT4 g128, NF4, MXFP4, NVFP4).
    pub fn block_scaled(self) -> bool {
        matches!(self, WoFormat::Int4G128 | WoFormat::Nf4 | WoFormat::Mxfp4 | WoFormat::Nvfp4)
    }

    /// Whether the codes are E2M1 (MXFP4, NVFP4), which the kernels read in the E2M1 device layout
    /// ([`device_codes`]; the tensor cores' repack too).
    pub fn e2m1(self) -> bool {
        matches!(self, WoFormat::Mxfp4 | WoFormat::Nvfp4)
    }

    /// 16-byte chunks of a row that share one scale entry of the kernel (`CPG` in the kernel source).
    pub fn chunks_per_scale(self) -> u32 {
        match self {
            WoFormat::Int4G128 => 4,
            WoFormat::Nf4 => 2,
            _ => 1,
        }
    }

    /// Bytes of the kernel's per-chunk scale record (`Meta` in the kernel source).
    pub fn meta_bytes(self) -> u32 {
        match self {
            WoFormat::Int4G128 => 8,
            _ => 4,
        }
    }

    /// K must be a multiple of this: the scale block and the elements of one 16-byte chunk.
    pub fn k_multiple(self) -> usize {
        match self {
            WoFormat::Fp16 | WoFormat::Bf16 => 8,
            WoFormat::Fp8E4M3 | WoFormat::Int8 => 16,
            WoFormat::Int4G128 => 128,
            WoFormat::Nf4 => 64,
            WoFormat::Mxfp4 | WoFormat::Nvfp4 => 32,
        }
    }

    /// The `FMT` number of the kernel source.
    pub(crate) fn kernel_id(self) -> u32 {
        WoFormat::ALL.iter().position(|f| *f == self).unwrap_or(0) as u32
    }

    /// Lowest compute capability (major * 10 + minor) the kernel compiles for (FP8 needs sm_89's cvt).
    pub fn min_arch(self) -> u32 {
        match self {
            WoFormat::Fp8E4M3 => 89,
            _ => 80,
        }
    }

    /// Checks that `K` suits this format.
    pub fn check_k(self, k: usize) -> Result<(), GpuError> {
        let mult = self.k_multiple();
        if k == 0 || k % mult != 0 {
            return Err(GpuError::Unsupported(format!(
                "{}: K = {k} must be a positive multiple of {mult} (its scale block and the elements of a 16-byte load)",
                self.format()
            )));
        }
        Ok(())
    }
}

/// Weights in the GPU layout of the weight-only kernels (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct PackedWeights {
    /// Format.
    pub format: WoFormat,
    /// Output channels (rows).
    pub n: usize,
    /// Reduction length (columns).
    pub k: usize,
    /// Packed codes, `n * k * bits / 8` bytes.
    pub codes: Vec<u8>,
    /// Scales in their stored encoding (see the module docs).
    pub scales: Vec<u8>,
    /// INT4 zero points, two per byte.
    pub zeros: Vec<u8>,
    /// NVFP4 per-tensor scale, 1 otherwise.
    pub global_scale: f32,
}

impl PackedWeights {
    /// Bytes the kernel reads for the weights: codes, scales and zero points (the global scale is a
    /// kernel argument).
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.scales.len() + self.zeros.len()
    }

    /// Rows `rows` of these weights, in that order, in the same layout (codes, scales and zero points are
    /// stored row after row, the same number of bytes a row): a sample of a large matrix kept for a CPU
    /// check. Panics on a row out of range.
    pub fn select_rows(&self, rows: &[usize]) -> PackedWeights {
        let pick = |bytes: &[u8]| -> Vec<u8> {
            let per = bytes.len() / self.n.max(1);
            rows.iter().flat_map(|&r| &bytes[r * per..(r + 1) * per]).copied().collect()
        };
        PackedWeights {
            format: self.format,
            n: rows.len(),
            k: self.k,
            codes: pick(&self.codes),
            scales: pick(&self.scales),
            zeros: pick(&self.zeros),
            global_scale: self.global_scale,
        }
    }

    /// The values the GPU multiplies, decoded from this layout (independently of roofline-quant's
    /// dequantize, so the tests can check the packing against it), `n x k` row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let (n, k) = (self.n, self.k);
        let mut out = vec![0f32; n * k];
        let row_bytes = k * self.format.bits() / 8;
        let f16_at = |b: &[u8], i: usize| f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
        for r in 0..n {
            let codes = &self.codes[r * row_bytes..(r + 1) * row_bytes];
            let nib = |c: usize| u32::from((codes[c / 2] >> (4 * (c % 2))) & 15);
            for c in 0..k {
                out[r * k + c] = match self.format {
                    WoFormat::Fp16 => f16_at(codes, c),
                    WoFormat::Bf16 => half::bf16::from_le_bytes([codes[2 * c], codes[2 * c + 1]]).to_f32(),
                    WoFormat::Fp8E4M3 | WoFormat::Int8 => {
                        let s = f32::from_le_bytes([
                            self.scales[4 * r],
                            self.scales[4 * r + 1],
                            self.scales[4 * r + 2],
                            self.scales[4 * r + 3],
                        ]);
                        let v = if self.format == WoFormat::Int8 {
                            f32::from(codes[c] as i8)
                        } else {
                            E4M3.decode(u32::from(codes[c]))
                        };
                        v * s
                    }
                    WoFormat::Int4G128 => {
                        let groups = k / 128;
                        let g = c / 128;
                        let s = f16_at(&self.scales, r * groups + g);
                        let zb = self.zeros[r * groups.div_ceil(2) + g / 2];
                        let z = (zb >> (4 * (g % 2))) & 15;
                        (nib(c) as f32 - f32::from(z)) * s
                    }
                    WoFormat::Nf4 => NF4_CODE[nib(c) as usize] * f16_at(&self.scales, r * (k / 64) + c / 64),
                    WoFormat::Mxfp4 => {
                        let e = self.scales[r * (k / 32) + c / 32];
                        E2M1.decode(nib(c)) * e8m0_value(e)
                    }
                    WoFormat::Nvfp4 => {
                        let s = E4M3.decode(u32::from(self.scales[r * (k / 16) + c / 16]));
                        E2M1.decode(nib(c)) * (s * self.global_scale)
                    }
                };
            }
        }
        out
    }
}

/// The value of an E8M0 scale byte: `2^(e - 127)` (byte 255, NaN in OCP MX, never comes out of the codec).
pub fn e8m0_value(e: u8) -> f32 {
    if e == 0 {
        f32::from_bits(0x0040_0000)
    } else {
        f32::from_bits(u32::from(e) << 23)
    }
}

fn e8m0_of(s: f32) -> Result<u8, GpuError> {
    let bits = s.to_bits();
    let e = if bits == 0x0040_0000 { Some(0) } else { Some((bits >> 23) as u8).filter(|_| bits & 0x807f_ffff == 0) };
    e.filter(|&e| e != 255 && e8m0_value(e) == s)
        .ok_or_else(|| GpuError::Unsupported(format!("MXFP4 scale {s} is not a power of two in E8M0 range")))
}

fn to_f16_scale(s: f32, what: &str) -> Result<f16, GpuError> {
    let h = f16::from_f32(s);
    if !h.is_finite() || (h.to_f32() == 0.0 && s != 0.0) {
        return Err(GpuError::Unsupported(format!(
            "{what} scale {s} is outside the FP16 range the kernel stores scales in (weights too large or too small)"
        )));
    }
    Ok(h)
}

/// The tensor the GPU effectively holds: `q` with its scales rounded as the GPU stores them (FP16 for
/// INT4 g128 and NF4; unchanged otherwise). Dequantizing it with roofline-quant gives the CPU reference.
pub fn reference_tensor(q: &QuantizedTensor) -> Result<QuantizedTensor, GpuError> {
    let mut r = q.clone();
    if matches!(WoFormat::of_codec(q.codec), Some(WoFormat::Int4G128 | WoFormat::Nf4)) {
        for s in &mut r.scales {
            *s = to_f16_scale(*s, "block")?.to_f32();
        }
    }
    Ok(r)
}

/// Packs a roofline-quant tensor (`rows` = N output channels, `cols` = K) into the GPU layout.
pub fn pack(q: &QuantizedTensor) -> Result<PackedWeights, GpuError> {
    let format = WoFormat::of_codec(q.codec).ok_or_else(|| {
        GpuError::Unsupported(format!(
            "no weight-only kernel for codec {:?}; supported: BF16, FP8 E4M3 per channel, INT8 per channel, INT4 g128, NF4, MXFP4, NVFP4 (FP16 via pack_f32)",
            q.codec
        ))
    })?;
    let (n, k) = (q.rows, q.cols);
    format.check_k(k)?;
    let row_bytes = k * format.bits() / 8;
    if q.row_bytes != row_bytes || q.codes.len() != n * row_bytes {
        return Err(GpuError::Unsupported(format!(
            "quantized tensor has {} bytes per row ({} in all), expected {row_bytes} for {n} x {k}",
            q.row_bytes,
            q.codes.len()
        )));
    }
    let blocks = |b: usize| n * (k / b);
    let want_scales = match format {
        WoFormat::Bf16 => 0,
        WoFormat::Fp8E4M3 | WoFormat::Int8 => n,
        WoFormat::Int4G128 => blocks(128),
        WoFormat::Nf4 => blocks(64),
        WoFormat::Mxfp4 => blocks(32),
        WoFormat::Nvfp4 => blocks(16),
        WoFormat::Fp16 => 0,
    };
    if q.scales.len() != want_scales {
        return Err(GpuError::Unsupported(format!(
            "quantized tensor has {} scales, expected {want_scales}",
            q.scales.len()
        )));
    }
    let mut scales = Vec::new();
    let mut zeros = Vec::new();
    match format {
        WoFormat::Fp16 | WoFormat::Bf16 => {}
        WoFormat::Fp8E4M3 | WoFormat::Int8 => scales.extend(q.scales.iter().flat_map(|s| s.to_le_bytes())),
        WoFormat::Int4G128 | WoFormat::Nf4 => {
            for s in &q.scales {
                scales.extend(to_f16_scale(*s, "block")?.to_le_bytes());
            }
            if format == WoFormat::Int4G128 {
                let groups = k / 128;
                if q.zeros.len() != n * groups {
                    return Err(GpuError::Unsupported(format!(
                        "INT4 tensor has {} zero points, expected {}",
                        q.zeros.len(),
                        n * groups
                    )));
                }
                for row in q.zeros.chunks(groups) {
                    for pair in row.chunks(2) {
                        zeros.push(pair[0] & 15 | pair.get(1).map_or(0, |z| (z & 15) << 4));
                    }
                }
            }
        }
        WoFormat::Mxfp4 => {
            for s in &q.scales {
                scales.push(e8m0_of(*s)?);
            }
        }
        WoFormat::Nvfp4 => {
            for s in &q.scales {
                let code = E4M3.encode(*s);
                if E4M3.decode(code) != *s {
                    return Err(GpuError::Unsupported(format!("NVFP4 block scale {s} is not an E4M3 value")));
                }
                scales.push(code as u8);
            }
        }
    }
    Ok(PackedWeights {
        format,
        n,
        k,
        codes: q.codes.clone(),
        scales,
        zeros,
        global_scale: if format == WoFormat::Nvfp4 { q.tensor_scale } else { 1.0 },
    })
}

/// Where the bits of E2M1 code `i` of a word (codes in nibble order: magnitude bits 0-2, sign bit 3) go in
/// the CUDA-core kernels' layout: `[magnitude bit 0, bit 1, bit 2, sign]`. Every byte holds one code at bits
/// 1-3 and 7 (where an f16's high byte keeps exponent bits 0-1, mantissa bit 9 and the sign) and one at
/// bits 4-6 and 0 (the same after `>> 3` / `<< 7`): see [`decode_e2m1_dev`].
const E2M1_DEV_BITS: [[u32; 4]; 8] = [
    [9, 10, 11, 15],
    [25, 26, 27, 31],
    [1, 2, 3, 7],
    [17, 18, 19, 23],
    [12, 13, 14, 8],
    [28, 29, 30, 24],
    [4, 5, 6, 0],
    [20, 21, 22, 16],
];

/// One word of 8 E2M1 codes (code `i` in nibble `i`) in the CUDA-core kernels' layout (`E2M1_DEV_BITS`).
pub fn e2m1_dev_word(v: u32) -> u32 {
    E2M1_DEV_BITS
        .iter()
        .enumerate()
        .fold(0, |w, (i, bits)| bits.iter().enumerate().fold(w, |w, (b, &to)| w | (((v >> (4 * i + b)) & 1) << to)))
}

/// The inverse of [`e2m1_dev_word`]: the 8 codes in nibble order.
pub fn e2m1_dev_unword(w: u32) -> u32 {
    E2M1_DEV_BITS
        .iter()
        .enumerate()
        .fold(0, |v, (i, bits)| bits.iter().enumerate().fold(v, |v, (b, &from)| v | (((w >> from) & 1) << (4 * i + b))))
}

/// The CUDA-core kernels' E2M1 decode (`e2m1_dev_pairs` in `kernels/wo_prims.cuh`), statement for
/// statement: a word of [`e2m1_dev_word`] into four f16x2 registers (codes 0-1, 2-3, 4-5, 6-7), each code
/// as the f16 with its sign at bit 15 and its three magnitude bits at 11-9, which is its E2M1 value times
/// 2^-14 exactly (magnitude 1 = 0.5 lands on the subnormal 2^-15); the kernels multiply x by 2^14 instead.
pub fn decode_e2m1_dev(v: u32) -> [u32; 4] {
    const PAIR: u32 = 0x8E00_8E00; // bits 15 and 11-9 of both halves
    const MAG: u32 = 0x0E0E_0E0E; // bits 1-3 of every byte
    let b = lop3(v >> 3, v << 7, MAG, 0xE4); // every byte's second code moved to the first's bits
    [v & PAIR, (v << 8) & PAIR, b & PAIR, (b << 8) & PAIR]
}

/// PTX `lop3.b32 d, a, b, c, lut`: bit i of d is bit `(a_i << 2) | (b_i << 1) | c_i` of `lut` (the table
/// is written as the function of a = 0xF0, b = 0xCC, c = 0xAA).
pub fn lop3(a: u32, b: u32, c: u32, lut: u8) -> u32 {
    (0..32).fold(0, |d, i| {
        let idx = (((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1);
        d | ((u32::from(lut) >> idx) & 1) << i
    })
}

/// The codes of `p` as the CUDA-core kernels read them: MXFP4 and NVFP4 words in [`e2m1_dev_word`]'s
/// layout, every other format as packed (`None`).
pub fn device_codes(p: &PackedWeights) -> Option<Vec<u8>> {
    p.format.e2m1().then(|| {
        p.codes
            .par_chunks(4)
            .flat_map_iter(|c| e2m1_dev_word(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
            .collect()
    })
}

/// The block-scale tables of rows of `k` `format` values as [`xreg_tables`] transposes them: (bytes per row
/// and column, columns). `None`: no block scales (FP16/BF16, FP8/INT8 per-row scales).
pub(crate) fn xreg_geometry(format: WoFormat, k: usize) -> Option<(usize, usize)> {
    match format {
        WoFormat::Int4G128 => Some((2, k / 128)),
        WoFormat::Nf4 => Some((2, k / 64)),
        WoFormat::Mxfp4 => Some((1, k / 32)),
        WoFormat::Nvfp4 => Some((2, k / 32)),
        _ => None,
    }
}

/// Scale tables of the x-in-registers kernel (`kernels/weight_only_xreg.cu`): the block scales (and INT4
/// zero points) transposed to `[scale column][row]` with rows padded to a multiple of 8, so the rows a warp
/// takes in one step share one vector load. Returns `(scales, zeros)`; formats without block scales keep
/// their tables (FP8/INT8 per-row scales, nothing for FP16/BF16). Same bytes as [`PackedWeights`] when
/// `N` is a multiple of 8 (padding rows are zeros otherwise).
///
/// Columns and entries: INT4 g128 one FP16 scale per 128 (column `c / 4` of 32-element chunk `c`) and a
/// 4-bit zero point in `[K/128][n_pad / 2]` bytes (even row in the low nibble); NF4 FP16 absmax per 64; MXFP4
/// one E8M0 byte per 32; NVFP4 the two E4M3 bytes of a 32-element chunk, `[K/32][n_pad][2]`.
pub fn xreg_tables(p: &PackedWeights) -> (Vec<u8>, Vec<u8>) {
    let (n, k) = (p.n, p.k);
    let n_pad = n.div_ceil(8) * 8;
    let Some((isz, cols)) = xreg_geometry(p.format, k) else {
        return (p.scales.clone(), p.zeros.clone());
    };
    let mut scales = vec![0u8; cols * n_pad * isz];
    for r in 0..n {
        for c in 0..cols {
            let (src, dst) = ((r * cols + c) * isz, (c * n_pad + r) * isz);
            scales[dst..dst + isz].copy_from_slice(&p.scales[src..src + isz]);
        }
    }
    let mut zeros = Vec::new();
    if p.format == WoFormat::Int4G128 {
        zeros = vec![0u8; cols * n_pad / 2];
        let row_bytes = cols.div_ceil(2);
        for r in 0..n {
            for g in 0..cols {
                let z = (p.zeros[r * row_bytes + g / 2] >> (4 * (g % 2))) & 15;
                zeros[g * n_pad / 2 + r / 2] |= z << (4 * (r % 2));
            }
        }
    }
    (scales, zeros)
}

/// Scale tables of the ring GEMV where it streams them with the weights (`kernels/wo_ring.cu` `RW_SSTREAM`):
/// the transposed tables of `n x k` `format` weights (`xscales`, `xzeros`: [`xreg_tables`]' output) regrouped
/// step-major, `[row step][scale column]`, each entry the 8 rows of one step (`RS_SB` bytes: 8 FP16 scales, or
/// 8 E8M0 bytes, or 8 pairs of E4M3 bytes; INT4's zero points in their own table of 4-byte entries, 8 nibbles,
/// even row low). A ring slot's scales (one K part's columns of one row step) are then one contiguous run, a
/// single bulk copy, whatever the K parts. Same bytes as the transposed tables; `None` for formats the ring
/// does not take, N not a multiple of 8, or tables of another size.
pub fn ring_step_tables(
    format: WoFormat,
    n: usize,
    k: usize,
    xscales: &[u8],
    xzeros: &[u8],
) -> Option<(Vec<u8>, Vec<u8>)> {
    let (isz, cols) = xreg_geometry(format, k)?;
    let zb = if format == WoFormat::Int4G128 { 4 } else { 0 };
    if n % 8 != 0 || xscales.len() != cols * n * isz || xzeros.len() != cols * n * zb / 8 {
        return None;
    }
    // One output entry of `eb` bytes per (step, column), from column c's run of the step's 8 rows.
    let regroup = |src: &[u8], eb: usize| -> Vec<u8> {
        let mut out = vec![0u8; src.len()];
        out.par_chunks_mut(cols * eb).enumerate().for_each(|(s, step)| {
            for (c, e) in step.chunks_exact_mut(eb).enumerate() {
                e.copy_from_slice(&src[(c * n / 8 + s) * eb..][..eb]);
            }
        });
        out
    };
    Some((regroup(xscales, 8 * isz), if zb > 0 { regroup(xzeros, zb) } else { Vec::new() }))
}

/// Quantizes `n x k` f32 weights (row-major, row = output channel) with the format's codec and packs them;
/// FP16 is a plain round-to-nearest cast. Returns the packed weights and the f32 values the GPU uses.
pub fn quantize_and_pack(
    format: WoFormat,
    w: &[f32],
    n: usize,
    k: usize,
) -> Result<(PackedWeights, Vec<f32>), GpuError> {
    let (packed, q) = quantize_pack_inner(format, w, n, k)?;
    let vals = match q {
        None => packed.codes.par_chunks(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Some(q) => roofline_quant::dequantize(&reference_tensor(&q)?),
    };
    Ok((packed, vals))
}

/// [`quantize_and_pack`] without the dequantized values (for callers that only upload, such as the decode
/// benchmark's random weights: the values cost as much as the quantization).
pub fn quantize_pack(format: WoFormat, w: &[f32], n: usize, k: usize) -> Result<PackedWeights, GpuError> {
    Ok(quantize_pack_inner(format, w, n, k)?.0)
}

fn quantize_pack_inner(
    format: WoFormat,
    w: &[f32],
    n: usize,
    k: usize,
) -> Result<(PackedWeights, Option<QuantizedTensor>), GpuError> {
    format.check_k(k)?;
    if n == 0 || w.len() != n * k {
        return Err(GpuError::Unsupported(format!(
            "weights have {} values, expected N x K = {n} x {k} (N > 0)",
            w.len()
        )));
    }
    match format.codec() {
        None => {
            // FP16: a cast, in parallel blocks; the first value that overflows is reported.
            const BLOCK: usize = 1 << 16;
            let mut codes = vec![0u8; 2 * w.len()];
            codes
                .par_chunks_mut(2 * BLOCK)
                .zip(w.par_chunks(BLOCK))
                .enumerate()
                .try_for_each(|(b, (out, src))| {
                    for (i, &v) in src.iter().enumerate() {
                        let h = f16::from_f32(v);
                        if !h.is_finite() {
                            return Err(b * BLOCK + i);
                        }
                        out[2 * i..2 * i + 2].copy_from_slice(&h.to_le_bytes());
                    }
                    Ok(())
                })
                .map_err(|_| {
                    let i = w.iter().position(|v| !f16::from_f32(*v).is_finite()).unwrap_or(0);
                    GpuError::Unsupported(format!("weight {} (row {}, column {}) overflows FP16", w[i], i / k, i % k))
                })?;
            let packed =
                PackedWeights { format, n, k, codes, scales: Vec::new(), zeros: Vec::new(), global_scale: 1.0 };
            Ok((packed, None))
        }
        Some(codec) => {
            let q = quantize(codec, w, n, k).map_err(|e| GpuError::Unsupported(e.to_string()))?;
            Ok((pack(&q)?, Some(q)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random_f32;

    #[test]
    fn weight_only_formats_parse_by_catalog_name() {
        for f in WoFormat::ALL {
            assert_eq!(f.format().name().parse::<WoFormat>(), Ok(f));
            assert_eq!(f.format().name().to_lowercase().parse::<WoFormat>(), Ok(f));
        }
        let e = "INT3".parse::<WoFormat>().unwrap_err();
        assert!(e.starts_with("INT3: not a weight-only format (one of FP16, BF16,") && e.contains("NVFP4"), "{e}");
    }

    #[test]
    fn lop3_tables_are_the_functions_the_kernels_mean() {
        let words = random_f32(3 * 64, 8);
        for t in words.chunks(3) {
            let (a, b, c) = (t[0].to_bits(), t[1].to_bits().rotate_left(7), t[2].to_bits() ^ 0x5A5A_A5A5);
            assert_eq!(lop3(a, b, c, 0xEA), (a & b) | c, "lop3_and_or");
            assert_eq!(lop3(a, b, c, 0xE4), (a & c) | (b & !c), "select by c");
            assert_eq!(lop3(a, b, c, 0xD8), (a & !c) | (b & c), "select by c, the other way (nf4_pairs)");
        }
    }

    #[test]
    fn e2m1_device_layout_is_a_bijection_whose_decode_gives_each_value_times_two_to_the_minus_14() {
        // Every bit of the word is used once.
        let mut seen = 0u32;
        for b in E2M1_DEV_BITS.iter().flatten() {
            assert_eq!(seen & (1 << b), 0, "bit {b} twice");
            seen |= 1 << b;
        }
        assert_eq!(seen, u32::MAX);
        // Each code in each of the 8 slots, the others random: the slot's half decodes to value x 2^-14.
        let noise = random_f32(256, 5);
        for slot in 0..8 {
            for code in 0..16u32 {
                for (t, r) in noise.iter().enumerate().take(32) {
                    let other = (r.to_bits() ^ (t as u32).wrapping_mul(0x9E37_79B9)) & !(15 << (4 * slot));
                    let v = other | (code << (4 * slot));
                    let w = e2m1_dev_word(v);
                    assert_eq!(e2m1_dev_unword(w), v);
                    let h = decode_e2m1_dev(w)[slot / 2] >> (16 * (slot % 2)) & 0xffff;
                    let got = f64::from(f16::from_bits(h as u16).to_f32()) * 16384.0;
                    let want = f64::from(E2M1.decode(code));
                    assert_eq!(got.to_bits(), want.to_bits(), "slot {slot} code {code}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn device_codes_rearrange_only_the_e2m1_formats() {
        for f in WoFormat::ALL {
            let (n, k) = (3, f.k_multiple().max(64));
            let w = random_f32(n * k, 23);
            let (p, _) = quantize_and_pack(f, &w, n, k).unwrap();
            match device_codes(&p) {
                None => assert!(!f.e2m1(), "{f:?}"),
                Some(d) => {
                    assert_eq!(d.len(), p.codes.len());
                    let back: Vec<u8> = d
                        .chunks(4)
                        .flat_map(|c| e2m1_dev_unword(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
                        .collect();
                    assert_eq!(back, p.codes, "{f:?}");
                    assert_ne!(d, p.codes, "{f:?}: nothing moved");
                }
            }
        }
    }

    #[test]
    fn packed_layout_decodes_to_the_roofline_quant_reference() {
        // The host decoder of the GPU layout must reproduce roofline-quant's dequantize of the same tensor
        // (scales rounded as stored) bit for bit, for every format, on shapes with several blocks per row.
        for f in WoFormat::ALL {
            let (n, k) = (5, 2 * 128 + f.k_multiple() * 2);
            let k = k - k % f.k_multiple();
            let w: Vec<f32> = random_f32(n * k, 17).iter().map(|v| v * 3.0).collect();
            let (p, vals) = quantize_and_pack(f, &w, n, k).unwrap();
            assert_eq!(p.codes.len(), n * k * f.bits() / 8, "{f:?}");
            let dec = p.dequantize();
            assert_eq!(dec.len(), vals.len());
            for (i, (a, b)) in dec.iter().zip(&vals).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{f:?} element {i}: layout {a} vs reference {b}");
            }
            // quantized weights are close to the originals and not all zero
            let err: f64 = w.iter().zip(&vals).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt();
            let norm: f64 = w.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            assert!(err / norm < 0.2, "{f:?}: quantization error {}", err / norm);
            assert!(vals.iter().filter(|v| **v != 0.0).count() > n * k / 2, "{f:?}");
        }
    }

    #[test]
    fn xreg_tables_hold_every_scale_at_its_transposed_place() {
        // Read back through the kernel's indexing (column of chunk c, row n, n_pad), the transposed tables give
        // the row-major tables' entries; odd N exercises the padding, and N % 8 == 0 keeps the byte count.
        for f in [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4, WoFormat::Int8] {
            for n in [5usize, 16] {
                let k = 3 * 128;
                let (p, _) = quantize_and_pack(f, &random_f32(n * k, 9), n, k).unwrap();
                let (ts, tz) = xreg_tables(&p);
                let n_pad = n.div_ceil(8) * 8;
                let chunks = k / 32;
                for r in 0..n {
                    for c in 0..chunks {
                        match f {
                            WoFormat::Int4G128 => {
                                let g = c / 4;
                                assert_eq!(ts[2 * (g * n_pad + r)..][..2], p.scales[2 * (r * 3 + g)..][..2]);
                                let z = (tz[g * n_pad / 2 + r / 2] >> (4 * (r % 2))) & 15;
                                let zr = (p.zeros[r * 2 + g / 2] >> (4 * (g % 2))) & 15;
                                assert_eq!(z, zr, "row {r} group {g}");
                            }
                            WoFormat::Nf4 => {
                                let g = c / 2;
                                assert_eq!(ts[2 * (g * n_pad + r)..][..2], p.scales[2 * (r * 6 + g)..][..2]);
                            }
                            WoFormat::Mxfp4 => assert_eq!(ts[c * n_pad + r], p.scales[r * chunks + c]),
                            WoFormat::Nvfp4 => {
                                assert_eq!(ts[2 * (c * n_pad + r)..][..2], p.scales[r * 2 * chunks + 2 * c..][..2])
                            }
                            _ => assert_eq!((&ts, &tz), (&p.scales, &p.zeros)),
                        }
                    }
                }
                if n % 8 == 0 {
                    // no more bytes than the row-major tables (INT4 rows no longer pad odd group counts)
                    assert!(ts.len() + tz.len() <= p.scales.len() + p.zeros.len(), "{f:?}");
                    assert_eq!(ts.len(), p.scales.len(), "{f:?}");
                }
            }
        }
    }

    #[test]
    fn ring_step_tables_hold_each_steps_scales_together() {
        // Entry (step s, column c) of the step-major tables is the 8 rows' entry of the transposed ones, so a
        // slot's columns c0.. of step s are one run; same bytes; other formats and N % 8 != 0 have none.
        for f in [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4] {
            let (n, k) = (24usize, 1024usize);
            let (p, _) = quantize_and_pack(f, &random_f32(n * k, 11), n, k).unwrap();
            let (ts, tz) = xreg_tables(&p);
            let (ss, sz) = ring_step_tables(f, n, k, &ts, &tz).unwrap();
            assert_eq!((ss.len(), sz.len()), (ts.len(), tz.len()), "{f:?}");
            let (isz, cols) = xreg_geometry(f, k).unwrap();
            for s in 0..n / 8 {
                for c in 0..cols {
                    for r in 0..8 {
                        let got = &ss[(s * cols + c) * 8 * isz + r * isz..][..isz];
                        assert_eq!(got, &ts[(c * n + 8 * s + r) * isz..][..isz], "{f:?} step {s} column {c} row {r}");
                        if f == WoFormat::Int4G128 {
                            let z = (sz[(s * cols + c) * 4 + r / 2] >> (4 * (r % 2))) & 15;
                            assert_eq!(z, (tz[c * n / 2 + (8 * s + r) / 2] >> (4 * (r % 2))) & 15);
                        }
                    }
                }
            }
        }
        let none = |f, n: usize, k: usize| {
            let (p, _) = quantize_and_pack(f, &random_f32(n * k, 3), n, k).unwrap();
            let (ts, tz) = xreg_tables(&p);
            ring_step_tables(f, n, k, &ts, &tz).is_none()
        };
        assert!(none(WoFormat::Int4G128, 12, 256) && none(WoFormat::Int8, 16, 256) && none(WoFormat::Fp16, 16, 256));
        // Tables of another shape.
        let (p, _) = quantize_and_pack(WoFormat::Nf4, &random_f32(16 * 256, 3), 16, 256).unwrap();
        let (ts, tz) = xreg_tables(&p);
        assert!(ring_step_tables(WoFormat::Nf4, 16, 512, &ts, &tz).is_none());
    }

    #[test]
    fn byte_counts_match_the_catalog_storage() {
        // The GPU layout moves exactly the catalog's storage bytes for the block formats.
        let (n, k) = (7, 512);
        for f in [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Bf16] {
            let (p, _) = quantize_and_pack(f, &random_f32(n * k, 3), n, k).unwrap();
            let catalog = f.format().storage_bytes(n as u64, k as u64).unwrap();
            assert_eq!(p.bytes() as u64, catalog, "{f:?}");
        }
        // NVFP4: the FP32 global scale is a kernel argument, not read from memory.
        let (p, _) = quantize_and_pack(WoFormat::Nvfp4, &random_f32(n * k, 3), n, k).unwrap();
        assert_eq!(p.bytes() as u64 + 4, Format::NVFP4.storage_bytes(n as u64, k as u64).unwrap());
        // FP8/INT8 per channel: one FP32 scale per row.
        let (p, _) = quantize_and_pack(WoFormat::Int8, &random_f32(n * k, 3), n, k).unwrap();
        assert_eq!(p.bytes(), n * k + 4 * n);
    }

    #[test]
    fn int4_zero_points_pack_two_per_byte_with_odd_group_counts() {
        let (n, k) = (3, 3 * 128);
        let (p, _) = quantize_and_pack(WoFormat::Int4G128, &random_f32(n * k, 5), n, k).unwrap();
        assert_eq!(p.zeros.len(), n * 2);
        assert_eq!(p.scales.len(), n * 3 * 2);
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(quantize_and_pack(WoFormat::Int4G128, &[0.5; 64 * 2], 2, 64).unwrap_err().to_string().contains("128"));
        assert!(quantize_and_pack(WoFormat::Nvfp4, &[0.5; 16], 1, 16).unwrap_err().to_string().contains("32"));
        assert!(quantize_and_pack(WoFormat::Fp16, &[0.5; 10], 2, 8).is_err());
        assert!(WoFormat::from_format(Format::FP32).is_err());
        let q = quantize(Codec::Fp8PerTensor(FloatKind::E4M3), &[0.5; 32], 2, 16).unwrap();
        assert!(pack(&q).unwrap_err().to_string().contains("no weight-only kernel"));
        for f in WoFormat::ALL {
            assert_eq!(WoFormat::from_format(f.format()).unwrap(), f);
        }
        // FP16 overflow: the first offending weight, by row and column, past the parallel blocks' first one
        let mut w = vec![0.25f32; 3 * 65536];
        w[70000] = 1e6;
        w[150000] = -1e6;
        let e = quantize_pack(WoFormat::Fp16, &w, 3, 65536).unwrap_err().to_string();
        assert!(e.contains("1000000") && e.contains("row 1, column 4464"), "{e}");
    }

    #[test]
    fn selected_rows_decode_as_those_rows() {
        let (n, k) = (37, 256);
        let w = random_f32(n * k, 12);
        let rows = [36, 0, 5, 5, 20];
        for f in WoFormat::ALL {
            let p = quantize_pack(f, &w, n, k).unwrap();
            // every stored array is row after row, the same bytes a row
            for bytes in [&p.codes, &p.scales, &p.zeros] {
                assert_eq!(bytes.len() % n, 0, "{f:?}");
            }
            let all = p.dequantize();
            let s = p.select_rows(&rows);
            assert_eq!((s.n, s.k, s.format, s.global_scale), (rows.len(), k, f, p.global_scale));
            let got = s.dequantize();
            for (i, &r) in rows.iter().enumerate() {
                assert_eq!(&got[i * k..(i + 1) * k], &all[r * k..(r + 1) * k], "{f:?} row {r}");
            }
            assert_eq!(p.select_rows(&(0..n).collect::<Vec<_>>()), p, "{f:?}");
        }
    }

    #[test]
    fn packing_without_the_values_packs_the_same() {
        let (n, k) = (300, 256);
        let w = random_f32(n * k, 11);
        for f in WoFormat::ALL {
            let (p, vals) = quantize_and_pack(f, &w, n, k).unwrap();
            let q = quantize_pack(f, &w, n, k).unwrap();
            assert_eq!(
                (&q.codes, &q.scales, &q.zeros, q.global_scale),
                (&p.codes, &p.scales, &p.zeros, p.global_scale)
            );
            // the values are the packed weights decoded: close to w at the format's precision
            let err: f64 = w.iter().zip(&vals).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt();
            let norm: f64 = w.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
            assert!(err / norm < 0.2, "{f:?}: {}", err / norm);
            if f == WoFormat::Fp16 {
                assert!(w.iter().zip(&vals).all(|(a, b)| f16::from_f32(*a).to_f32() == *b));
            }
        }
    }
}
