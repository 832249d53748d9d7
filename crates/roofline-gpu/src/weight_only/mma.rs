//! Host side of the tensor-core kernel (`kernels/weight_only_mma.cu`): which formats it runs and the
//! repacking of FP16, 8-bit and 4-bit codes into m16n8k16 A-fragment order.
//!
//! W (`N x K`, rows padded to a multiple of 16) is cut into tiles of 16 rows x 64 K, ordered
//! `[row tile][k tile]`. A tile is `bits / 4` x 512 bytes: lane `l` (`g = l / 4`, `t = l % 4`) holds
//! [`words_per_tile`] 16-byte words, the eight elements of its A fragment for each k-step `s` (16 K):
//! `a0, a1 = W[g][16s+2t..+2]`, `a2, a3 = W[g+8][16s+2t..+2]`, `a4, a5 = W[g][16s+2t+8..+2]`,
//! `a6, a7 = W[g+8][16s+2t+8..+2]`. 4-bit: one 32-bit word per k-step, INT4 with `a0..a7` in nibbles 0, 4,
//! 1, 5, 2, 6, 3, 7 (so `(word >> 4i) & 0x000F000F` gives the f16x2 pair of register `i`), FP4 and NF4 in
//! nibbles 0..7; 8-bit: two words per k-step, `a0..a7` in bytes; 16-bit: four words per k-step, the A
//! registers themselves. The lane's 32-bit word `j` is component `j % 4` of its 16-byte word `j / 4`, which
//! sits at `(j / 4) x 512 + 16 l` in the tile, so a warp load reads 512 contiguous bytes. Scales and zero
//! points keep the layout of [`super::pack()`] (the x-stationary kernel reads [`xs_meta`]).
//!
//! NF4 codes become f16 through byte tables ([`nf4_f16_tables`], passed to NVRTC as `-D` constants): two
//! `prmt` lookups per byte half (codes 0-7 and 8-15) and a select on the code's top bit; [`decode_nf4`] is the
//! same sequence on the CPU, tested against the codebook. With BF16 x the same lookups take two table sets,
//! the codebook's BF16 hi and lo parts ([`nf4_bf16_tables`]), one MMA each.

use super::pack::{e2m1_dev_unword, e2m1_dev_word, PackedWeights, WoFormat};
use super::XDtype;
use crate::GpuError;
use rayon::prelude::*;

/// Whether the tensor-core kernel runs `format` weights with `x` activations: the MMA's A and B share a type,
/// so FP16 x with every format (decoded to f16: exactly, NF4 to its codebook's f16, BF16 weights exactly within
/// FP16's range, [`check_f16_range`]), and BF16 x (`XBF16`: BF16 operands) with the formats whose decoded
/// values BF16 holds exactly: BF16 as stored, FP8 E4M3, INT8, INT4 (codes minus zero points) and MXFP4 / NVFP4
/// (E2M1 values, NVFP4's times their E4M3 scales); NF4 too, its codebook split into two BF16 parts and two MMAs
/// ([`nf4_bf16_tables`]). Not FP16 weights (11 significant bits): those take split-K with BF16 x.
pub fn supports(format: WoFormat, x: XDtype) -> bool {
    match x {
        XDtype::F16 => true,
        XDtype::Bf16 => format != WoFormat::Fp16,
    }
}

/// BF16 weights for the tensor cores with FP16 x are converted to f16 as they are decoded: an error where one
/// is past FP16's range (|w| >= 65520 rounds to infinity), saying what runs them instead.
pub fn check_f16_range(p: &PackedWeights) -> Result<(), GpuError> {
    if p.format != WoFormat::Bf16 {
        return Ok(());
    }
    // On the bits, in parallel (a model's weights are gigabytes): |w| >= 65536, the first BF16 value past
    // FP16's largest (65504; BF16 has none from 65281 to 65535), is an exponent field of 143 or more; infinities
    // and NaNs (exponent 255) convert to themselves.
    let past = |b: &[u8]| (0x4780..0x7f80).contains(&(u16::from_le_bytes([b[0], b[1]]) & 0x7fff));
    if p.codes.par_chunks(1 << 16).any(|c| c.chunks_exact(2).any(past)) {
        let largest = p
            .codes
            .chunks_exact(2)
            .filter(|b| past(b))
            .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32().abs())
            .fold(0.0f32, f32::max);
        return Err(GpuError::Unsupported(format!(
            "BF16 weights up to {largest:e} in magnitude: the tensor-core kernel with FP16 activations converts \
             them to FP16, whose range ends at 65504; use BF16 activations, or the CUDA-core kernel \
             (--gemv variant=splitk)"
        )));
    }
    Ok(())
}

/// The NF4 codebook as f16 bytes for the kernel's `prmt` lookups: `[lo 0-3, lo 4-7, lo 8-11, lo 12-15, hi
/// 0-3, hi 4-7, hi 8-11, hi 12-15]`, byte `j` of word `i` holding the low (or high) byte of code `4i + j`'s f16.
pub fn nf4_f16_tables() -> [u32; 8] {
    let bits: Vec<u16> = roofline_quant::codec::NF4_CODE.iter().map(|&c| half::f16::from_f32(c).to_bits()).collect();
    byte_tables(&bits)
}

/// The NF4 codebook for BF16 x (the MMAs' BF16 operands) as two sets of byte tables in [`nf4_f16_tables`]'
/// layout, `(hi, lo)`: each code c as the BF16 pair hi = bf16(c), lo = bf16(c - hi), whose sum holds c to 16
/// significant bits (BF16 alone keeps 8, 2e-3 of a weight: too coarse for the 1e-3 the results are held to).
/// The kernel runs one MMA on the hi parts and one on the lo parts (`NF4_T*` and `NF4_L*`).
pub fn nf4_bf16_tables() -> ([u32; 8], [u32; 8]) {
    let (hi, lo): (Vec<u16>, Vec<u16>) = roofline_quant::codec::NF4_CODE
        .iter()
        .map(|&c| {
            let h = half::bf16::from_f32(c);
            (h.to_bits(), half::bf16::from_f32(c - h.to_f32()).to_bits())
        })
        .unzip();
    (byte_tables(&hi), byte_tables(&lo))
}

/// Sixteen 16-bit values as the decode's byte tables: words 0-3 their low bytes, 4-7 their high bytes (value
/// 4i + j in byte j of word i).
fn byte_tables(bits: &[u16]) -> [u32; 8] {
    let word = |i: usize, hi: bool| {
        (0..4).fold(0u32, |w, j| {
            let b = if hi { bits[4 * i + j] >> 8 } else { bits[4 * i + j] & 0xff };
            w | (u32::from(b) << (8 * j))
        })
    };
    [
        word(0, false),
        word(1, false),
        word(2, false),
        word(3, false),
        word(0, true),
        word(1, true),
        word(2, true),
        word(3, true),
    ]
}

/// PTX `prmt.b32 d, a, b, c` (default mode): byte `i` of the result is byte `c[4i..4i+3] & 7` of the 8 bytes
/// `{b, a}`, or, when bit 3 of that selector nibble is set, that byte's top bit replicated over 8 bits.
fn prmt(a: u32, b: u32, c: u32) -> u32 {
    let bytes = (u64::from(b) << 32) | u64::from(a);
    (0..4).fold(0u32, |r, i| {
        let sel = (c >> (4 * i)) & 15;
        let byte = ((bytes >> (8 * (sel & 7))) & 0xff) as u32;
        let out = if sel & 8 == 0 {
            byte
        } else if byte & 0x80 != 0 {
            0xff
        } else {
            0
        };
        r | (out << (8 * i))
    })
}

/// `lop3.b32` with table 0xD8: `(a & !c) | (b & c)`, a byte select by mask `c`.
fn select(a: u32, b: u32, c: u32) -> u32 {
    (a & !c) | (b & c)
}

/// The kernel's NF4 decode (`decode` in `weight_only_mma.cu`, FMT 5) of one word of 8 codes (element `j` in
/// nibble `j`) into four f16x2 registers (elements 0-1, 2-3, 4-5, 6-7), instruction for instruction.
pub fn decode_nf4(v: u32, t: &[u32; 8]) -> [u32; 4] {
    let sel = v & 0x7777_7777;
    let v4 = v << 4;
    let mlo = prmt(v, v4, 0x9D8C); // 0xff bytes where the code's top bit (codes 8-15) is set, nibbles 0-3
    let mhi = prmt(v, v4, 0xBFAE); // nibbles 4-7
    let half = |sel: u32, m: u32| {
        let lo = select(prmt(t[0], t[1], sel), prmt(t[2], t[3], sel), m);
        let hi = select(prmt(t[4], t[5], sel), prmt(t[6], t[7], sel), m);
        [prmt(lo, hi, 0x5140), prmt(lo, hi, 0x7362)]
    };
    let (a, b) = (half(sel, mlo), half(sel >> 16, mhi));
    [a[0], a[1], b[0], b[1]]
}

/// Largest E8M0 scale byte the tensor-core kernel takes for MXFP4 (2^113; see [`repack`]).
pub const MXFP4_MMA_MAX_SCALE: u8 = 240;

/// Rows and K positions of the eight fragment elements of lane `(g, t)` at k-step `s`, in `a0..a7` order.
fn fragment(g: usize, t: usize, s: usize) -> [(usize, usize); 8] {
    let (k0, k8) = (16 * s + 2 * t, 16 * s + 2 * t + 8);
    [(g, k0), (g, k0 + 1), (g + 8, k0), (g + 8, k0 + 1), (g, k8), (g, k8 + 1), (g + 8, k8), (g + 8, k8 + 1)]
}

/// Nibble of the word that holds fragment element `j`.
fn nibble_of(format: WoFormat, j: usize) -> usize {
    match format {
        WoFormat::Int4G128 => [0, 4, 1, 5, 2, 6, 3, 7][j],
        _ => j,
    }
}

/// uint4 words a lane holds per 16 x 64 tile: the A fragments of four k-steps at the format's width.
pub fn words_per_tile(format: WoFormat) -> usize {
    format.bits() / 4
}

/// Where fragment element `e` (`a0..a7`) of k-step `s` sits in a lane's words of a tile: (word index in the
/// lane's sequence, bit shift). Word `j` is component `j % 4` of the lane's uint4 `j / 4`.
fn slot(format: WoFormat, s: usize, e: usize) -> (usize, usize) {
    match format.bits() {
        4 => (s, 4 * nibble_of(format, e)),
        8 => (2 * s + e / 4, 8 * (e % 4)),
        _ => (4 * s + e / 2, 16 * (e % 2)),
    }
}

/// Byte offset of word `j` of `lane` inside a tile of `qv` uint4 words per lane.
fn word_offset(lane: usize, j: usize) -> usize {
    ((j / 4) * 32 + lane) * 16 + 4 * (j % 4)
}

/// The codes of `p` (row-major; 4-bit LSB first, 8-bit bytes, 16-bit little-endian) in tile order; rows past
/// N are zero codes.
pub fn repack(p: &PackedWeights) -> Result<Vec<u8>, GpuError> {
    if p.k % 64 != 0 || p.k == 0 {
        return Err(GpuError::Unsupported(format!(
            "the tensor-core kernel needs K to be a multiple of 64, got {}",
            p.k
        )));
    }
    let (n, k, bits) = (p.n, p.k, p.format.bits());
    let row_bytes = k * bits / 8;
    let code = |r: usize, c: usize| -> u32 {
        if r >= n {
            return 0;
        }
        let at = r * row_bytes + c * bits / 8;
        match bits {
            4 => u32::from(if c % 2 == 0 { p.codes[at] & 15 } else { p.codes[at] >> 4 }),
            8 => u32::from(p.codes[at]),
            _ => u32::from(u16::from_le_bytes([p.codes[at], p.codes[at + 1]])),
        }
    };
    // MXFP4's and NVFP4's words go in the CUDA-core kernels' E2M1 layout (`e2m1_dev_pairs`, 9 instructions
    // against the codec order's 13), whose 2^-14 the kernel takes back in MXFP4's E8M0 scale as 2^(e + 14 - 127)
    // (a scale byte above 240, blocks of magnitude 2^115 and more, would overflow FP32 there) and in NVFP4's
    // f16 scales and tensor scale (`NV_UP`).
    let dev = p.format.e2m1();
    if p.format == WoFormat::Mxfp4 {
        if let Some(&e) = p.scales.iter().max().filter(|&&e| e > MXFP4_MMA_MAX_SCALE) {
            return Err(GpuError::Unsupported(format!(
                "MXFP4 block scale 2^{} is beyond the tensor-core kernel's range (at most 2^{})",
                i32::from(e) - 127,
                i32::from(MXFP4_MMA_MAX_SCALE) - 127
            )));
        }
    }
    let (row_tiles, k_tiles, qv) = (n.div_ceil(16), k / 64, words_per_tile(p.format));
    let mut out = vec![0u8; row_tiles * k_tiles * qv * 512];
    // Row tiles in parallel (each is one contiguous run of the output).
    out.par_chunks_mut(k_tiles * qv * 512).enumerate().for_each(|(rt, tiles)| {
        for (kt, tile) in tiles.chunks_mut(qv * 512).enumerate() {
            for lane in 0..32 {
                let (g, t) = (lane / 4, lane % 4);
                let mut words = [0u32; 16];
                for s in 0..4 {
                    for (e, (r, c)) in fragment(g, t, s).into_iter().enumerate() {
                        let (j, shift) = slot(p.format, s, e);
                        words[j] |= code(rt * 16 + r, kt * 64 + c) << shift;
                    }
                }
                for (j, &w) in words[..4 * qv].iter().enumerate() {
                    let w = if dev { e2m1_dev_word(w) } else { w };
                    tile[word_offset(lane, j)..][..4].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
    });
    Ok(out)
}

/// Bytes of one [`xs_meta`] entry (rows g and g + 8 of a row tile for one scale column).
pub fn xs_meta_entry(format: WoFormat) -> usize {
    match format {
        WoFormat::Mxfp4 | WoFormat::Nf4 => 4,
        _ => 8,
    }
}

/// Block scales for the x-stationary tensor-core kernel (`wo_mma_xs`): lane `(g, t)` needs the scales of
/// rows `g` and `g + 8` of its row tile, so they are stored side by side and one load per scale column
/// serves both. Entry `((rt * cols + col) * 8 + g)` (row-tile major: a warp walking K reads one contiguous run
/// per row tile, and the 16 warps of an x-stationary CTA, one scale column each, read one run together; the
/// column-major order this replaced put every 64-byte entry a warp walking K read on its own DRAM page, and the
/// K-streaming kernel's loads of weights and scales alone ran at 1.4 TB/s, session 11): INT4 g128 (col = group of 128): FP16 scales of
/// rows g, g + 8, then their zero points z as the f16 halves the decode subtracts, `0x6400 | z` (1024 + z)
/// for row g and `0xd400 | z << 4` (-(64 + z)) for row g + 8 (`Meta::zp` in weight_only_mma.cu: one byte
/// permute per tile instead of a dozen instructions rebuilding them from the zero nibbles); MXFP4 (col = 64-K tile): the tile's two E8M0 bytes of row g, then of
/// row g + 8; NVFP4 (col = 64-K tile): the tile's four E4M3 bytes of row g, then of row g + 8; NF4 (col =
/// 64-K block): the FP16 absmax of row g, then of row g + 8. Rows past N have zero scales (INT4: and zero
/// points 0). FP8 E4M3 and INT8: their
/// per-row FP32 scales as packed (the kernel scales each output row at the end); FP16 / BF16: none.
pub fn xs_meta(p: &PackedWeights) -> Vec<u8> {
    let (n, k) = (p.n, p.k);
    let row_tiles = n.div_ceil(16);
    let (cols, es) = match p.format {
        WoFormat::Int4G128 => (k / 128, 8),
        WoFormat::Mxfp4 | WoFormat::Nvfp4 | WoFormat::Nf4 => (k / 64, xs_meta_entry(p.format)),
        WoFormat::Fp8E4M3 | WoFormat::Int8 => return p.scales.clone(),
        WoFormat::Fp16 | WoFormat::Bf16 => return Vec::new(),
    };
    let mut out = vec![0u8; cols * row_tiles * 8 * es];
    for col in 0..cols {
        for rt in 0..row_tiles {
            for g in 0..8 {
                let e = ((rt * cols + col) * 8 + g) * es;
                for (i, r) in [rt * 16 + g, rt * 16 + g + 8].into_iter().enumerate() {
                    if r >= n {
                        if p.format == WoFormat::Int4G128 {
                            out[e + 4 + 2 * i..e + 6 + 2 * i].copy_from_slice(&int4_zero_half(0, i).to_le_bytes());
                        }
                        continue;
                    }
                    match p.format {
                        WoFormat::Int4G128 => {
                            let src = 2 * (r * cols + col);
                            out[e + 2 * i..e + 2 * i + 2].copy_from_slice(&p.scales[src..src + 2]);
                            let z = (p.zeros[r * cols.div_ceil(2) + col / 2] >> (4 * (col % 2))) & 15;
                            out[e + 4 + 2 * i..e + 6 + 2 * i].copy_from_slice(&int4_zero_half(z, i).to_le_bytes());
                        }
                        WoFormat::Mxfp4 => {
                            let src = r * (k / 32) + 2 * col;
                            out[e + 2 * i..e + 2 * i + 2].copy_from_slice(&p.scales[src..src + 2]);
                        }
                        WoFormat::Nf4 => {
                            let src = 2 * (r * (k / 64) + col);
                            out[e + 2 * i..e + 2 * i + 2].copy_from_slice(&p.scales[src..src + 2]);
                        }
                        _ => {
                            let src = r * (k / 16) + 4 * col;
                            out[e + 4 * i..e + 4 * i + 4].copy_from_slice(&p.scales[src..src + 4]);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The f16 bits the INT4 tensor-core decode subtracts for zero point `z`: `1024 + z` for row g (`i` = 0),
/// `-(64 + z)` for row g + 8 (`i` = 1; its codes sit 4 bits up, as 1024 + 16 q, and are scaled by 1/16 first).
fn int4_zero_half(z: u8, i: usize) -> u16 {
    let z = u16::from(z & 15);
    if i == 0 {
        0x6400 | z
    } else {
        0xd400 | (z << 4)
    }
}

/// Inverse of [`repack`] (the row-major codes of `n` rows), used by the tests to prove the layout.
pub fn unpack(format: WoFormat, tiles: &[u8], n: usize, k: usize) -> Vec<u8> {
    let (bits, qv, k_tiles) = (format.bits(), words_per_tile(format), k / 64);
    let row_bytes = k * bits / 8;
    let mut codes = vec![0u8; n * row_bytes];
    let mask = (1u64 << bits) as u32 - 1;
    for (ti, tile) in tiles.chunks_exact(qv * 512).enumerate() {
        let (rt, kt) = (ti / k_tiles, ti % k_tiles);
        for lane in 0..32 {
            let (g, t) = (lane / 4, lane % 4);
            for s in 0..4 {
                for (e, (r, c)) in fragment(g, t, s).into_iter().enumerate() {
                    let (row, col) = (rt * 16 + r, kt * 64 + c);
                    if row >= n {
                        continue;
                    }
                    let (j, shift) = slot(format, s, e);
                    let w = &tile[word_offset(lane, j)..][..4];
                    let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    let w = if format.e2m1() { e2m1_dev_unword(w) } else { w };
                    let v = (w >> shift) & mask;
                    let at = row * row_bytes + col * bits / 8;
                    match bits {
                        4 => codes[at] |= if col % 2 == 0 { v as u8 } else { (v as u8) << 4 },
                        8 => codes[at] = v as u8,
                        _ => codes[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes()),
                    }
                }
            }
        }
    }
    codes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random_f32;
    use crate::weight_only::quantize_and_pack;

    #[test]
    fn repack_is_a_permutation_of_the_codes() {
        let formats = [WoFormat::Fp16, WoFormat::Fp8E4M3, WoFormat::Int8, WoFormat::Int4G128, WoFormat::Nf4];
        for format in formats.into_iter().chain([WoFormat::Mxfp4, WoFormat::Nvfp4]) {
            for (n, k) in [(16usize, 128usize), (40, 256), (1000, 384)] {
                let k = if format == WoFormat::Int4G128 { k.div_ceil(128) * 128 } else { k };
                let (p, _) = quantize_and_pack(format, &random_f32(n * k, 9), n, k).unwrap();
                let tiles = repack(&p).unwrap();
                assert_eq!(tiles.len(), n.div_ceil(16) * 16 * k * format.bits() / 8, "{format:?} {n}x{k}");
                assert_eq!(unpack(format, &tiles, n, k), p.codes, "{format:?} {n}x{k}");
            }
        }
        // MXFP4 scales the kernel cannot take back its decode's 2^-14 from are refused, not overflowed.
        let (mut p, _) = quantize_and_pack(WoFormat::Mxfp4, &random_f32(16 * 64, 3), 16, 64).unwrap();
        p.scales[5] = MXFP4_MMA_MAX_SCALE;
        assert!(repack(&p).is_ok());
        p.scales[5] = MXFP4_MMA_MAX_SCALE + 1;
        let e = repack(&p).unwrap_err().to_string();
        assert!(e.contains("2^114") && e.contains("at most 2^113"), "{e}");
    }

    #[test]
    fn xs_meta_holds_rows_g_and_g8_side_by_side() {
        for format in [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4] {
            let (n, k) = (37usize, 384usize);
            let (p, _) = quantize_and_pack(format, &random_f32(n * k, 4), n, k).unwrap();
            let meta = xs_meta(&p);
            let es = xs_meta_entry(format);
            let row_tiles = n.div_ceil(16);
            let cols = if format == WoFormat::Int4G128 { k / 128 } else { k / 64 };
            assert_eq!(meta.len(), row_tiles * cols * 8 * es);
            for kt in 0..k / 64 {
                let col = if format == WoFormat::Int4G128 { kt / 2 } else { kt };
                for rt in 0..row_tiles {
                    for g in 0..8 {
                        let e = &meta[((rt * cols + col) * 8 + g) * es..][..es];
                        for (i, r) in [rt * 16 + g, rt * 16 + g + 8].into_iter().enumerate() {
                            let width = if format == WoFormat::Nvfp4 { 4 } else { 2 };
                            let want: Vec<u8> = if r >= n {
                                vec![0; width]
                            } else {
                                match format {
                                    WoFormat::Int4G128 => {
                                        let s = &p.scales[2 * (r * 3 + col)..][..2];
                                        let z = (p.zeros[r * 2 + col / 2] >> (4 * (col % 2))) & 15;
                                        let zh = u16::from_le_bytes([e[4 + 2 * i], e[5 + 2 * i]]);
                                        let want = if i == 0 { 1024.0 + f32::from(z) } else { -64.0 - f32::from(z) };
                                        assert_eq!(half::f16::from_bits(zh).to_f32(), want, "zero r{r} c{col}");
                                        s.to_vec()
                                    }
                                    WoFormat::Mxfp4 => p.scales[r * (k / 32) + 2 * kt..][..2].to_vec(),
                                    WoFormat::Nf4 => p.scales[2 * (r * (k / 64) + kt)..][..2].to_vec(),
                                    _ => p.scales[r * (k / 16) + 4 * kt..][..4].to_vec(),
                                }
                            };
                            let w = want.len();
                            assert_eq!(&e[w * i..w * (i + 1)], &want[..], "{format:?} rt{rt} g{g} row {r}");
                        }
                    }
                }
            }
        }
    }

    /// A bf16x2 register's two halves as f64.
    fn bf2(r: u32) -> [f64; 2] {
        [r & 0xffff, r >> 16].map(|b| half::bf16::from_bits(b as u16).to_f64())
    }

    /// `fma.rn.bf16x2 d, a, b, c` on the CPU: each half's a b + c exact in f64 (BF16 products have 16
    /// significant bits; every sum here is exact too), rounded once to BF16.
    fn bf2_fma(a: u32, b: u32, c: u32) -> u32 {
        let (a, b, c) = (bf2(a), bf2(b), bf2(c));
        let h = |i: usize| u32::from(half::bf16::from_f64(a[i].mul_add(b[i], c[i])).to_bits());
        h(0) | (h(1) << 16)
    }

    /// `h2_to_bf2` in kernels/weight_only_mma.cu: an f16x2 pair moved to BF16 (times 2^-112) and back up by
    /// 2^112 in one bf16x2 FMA.
    fn h2_to_bf2(h: u32) -> u32 {
        bf2_fma(((h >> 3) & 0x0fff_0fff) | (h & 0x8000_8000), 0x7780_7780, 0x8000_8000)
    }

    /// The BF16 decodes the tensor cores take with BF16 x (kernels/weight_only_mma.cu, `XBF16`), on the CPU
    /// bit for bit: every INT4 code and zero point, INT8 byte, E4M3 value and E2M1 value (MXFP4, times 2^-14)
    /// comes out exactly, and NVFP4's E2M1 values times its E4M3 scales (times 2^119 in BF16) exactly w s 2^-7.
    #[test]
    fn bf16_decodes_are_exact() {
        use half::f16;
        let pair = |lo: u32, hi: u32| lo | (hi << 16);
        // INT4: `zero_pair` from the f16 halves Meta::zp holds, then `decode`'s 128 magic and one FMA a pair
        for z in 0..16u8 {
            let zp = u32::from(int4_zero_half(z, 0)) | (u32::from(int4_zero_half(z, 1)) << 16);
            let zg = (prmt(zp, 0, 0x1010) & 0x000f_000f) | 0xc300_c300;
            let zg8 = ((prmt(zp, 0, 0x3232) >> 1) & 0x0078_0078) | 0xc180_c180;
            assert_eq!(bf2(zg), [-(128.0 + f64::from(z)); 2]);
            assert_eq!(bf2(zg8), [-(16.0 + f64::from(z)); 2]);
            for q in 0..16u32 {
                let want = f64::from(q) - f64::from(z);
                let v = (0..8).fold(0u32, |w, j| w | (((q + j) & 15) << (4 * j))); // code q at nibble 0
                let a0 = bf2_fma((v & 0x000f_000f) | 0x4300_4300, 0x3f80_3f80, zg);
                let a1 = bf2_fma(((v >> 1) & 0x0078_0078) | 0x4300_4300, 0x3e00_3e00, zg8);
                let a2 = bf2_fma(((v >> 8) & 0x000f_000f) | 0x4300_4300, 0x3f80_3f80, zg);
                let a3 = bf2_fma(((v >> 9) & 0x0078_0078) | 0x4300_4300, 0x3e00_3e00, zg8);
                let code = |n: u32| f64::from((v >> (4 * n)) & 15) - f64::from(z);
                assert_eq!(bf2(a0), [want, code(4)]);
                assert_eq!(bf2(a1), [code(1), code(5)]);
                assert_eq!(bf2(a2), [code(2), code(6)]);
                assert_eq!(bf2(a3), [code(3), code(7)]);
            }
        }
        // INT8: (0x4300 | b & 0x7f) - (0x4300 | b & 0x80) as one FMA, times -1
        for b in 0..=255u32 {
            let x = pair(b, 255 - b);
            let a = bf2_fma((x & 0x0080_0080) | 0x4300_4300, 0xbf80_bf80, (x & 0x007f_007f) | 0x4300_4300);
            assert_eq!(bf2(a), [f64::from(b as u8 as i8), f64::from((255 - b) as u8 as i8)], "byte {b}");
        }
        // FP8 E4M3 (every code but the NaNs) through its exact f16, then `h2_to_bf2`
        let e4m3 = |c: u32| roofline_quant::minifloat::E4M3.decode(c);
        for c in (0..=255u32).filter(|c| c & 0x7f != 0x7f) {
            let h = u32::from(f16::from_f32(e4m3(c)).to_bits());
            assert_eq!(bf2(h2_to_bf2(pair(h, h))), [f64::from(e4m3(c)); 2], "E4M3 {c:#x}");
        }
        for v in 0..=255u32 {
            // every E2M1 code in each position: `e2m1_dev_pairs` (values times 2^-14), then MXFP4's `h2_to_bf2`
            // and NVFP4's shift and select (values times 2^-126) times each E4M3 scale made BF16 times 2^119
            let word = v | (v << 8) | (v << 16) | (v << 24);
            let codes = super::super::pack::e2m1_dev_unword(word);
            let e2m1 = |n: u32| f64::from(roofline_quant::minifloat::E2M1.decode((codes >> (4 * n)) & 15));
            for (r, p) in super::super::pack::decode_e2m1_dev(word).into_iter().enumerate() {
                let want = [e2m1(2 * r as u32), e2m1(2 * r as u32 + 1)];
                assert_eq!(bf2(h2_to_bf2(p)), want.map(|w| w * 2f64.powi(-14)), "MXFP4 word {word:08x}");
                let w126 = ((p >> 3) & 0x0fff_0fff) | (p & 0xf000_f000);
                assert_eq!(bf2(w126), want.map(|w| w * 2f64.powi(-126)), "NVFP4 word {word:08x}");
                for sc in (0..0x7fu32).step_by(if r == 0 { 1 } else { 13 }) {
                    let sh = u32::from(f16::from_f32(e4m3(sc)).to_bits());
                    let s = bf2_fma(
                        bf2_fma((pair(sh, sh) >> 3) & 0x0fff_0fff, 0x7f00_7f00, 0x8000_8000),
                        0x7380_7380,
                        0x8000_8000,
                    );
                    assert_eq!(bf2(s), [f64::from(e4m3(sc)) * 2f64.powi(119); 2], "scale {sc:#x}");
                    let got = bf2(bf2_fma(w126, s, 0x8000_8000));
                    assert_eq!(got, want.map(|w| w * f64::from(e4m3(sc)) / 128.0), "word {word:08x} scale {sc:#x}");
                }
            }
        }
    }

    /// The tensor-core INT4 decode (`decode` and `zero_pair` in kernels/weight_only_mma.cu) on the CPU: rows
    /// g take (1024 + q) - (1024 + z), rows g + 8 are masked in place as 1024 + 16 q and brought down with one
    /// f16 FMA, x 1/16 + (-(64 + z)); every code and zero point must come out exactly q - z.
    #[test]
    fn int4_decode_constants_are_exact() {
        use half::f16;
        let h = |bits: u16| f16::from_bits(bits).to_f32();
        assert_eq!(h(0x2c00), 1.0 / 16.0);
        for z in 0..16u16 {
            let (zg, zg8) = (int4_zero_half(z as u8, 0), int4_zero_half(z as u8, 1));
            assert_eq!(h(zg), 1024.0 + f32::from(z));
            assert_eq!(h(zg8), -(64.0 + f32::from(z)));
            for q in 0..16u16 {
                let want = f32::from(q) - f32::from(z);
                // row g: lop3(v, 0x000f000f, 0x64006400) then sub.f16x2 with 1024 + z
                assert_eq!(f16::from_f32(h(0x6400 | q) - h(zg)).to_f32(), want);
                // row g + 8: lop3(v, 0x00f000f0, 0x64006400) then fma.rn.f16x2 with 1/16 and -(64 + z) (one
                // rounding, like f32 mul_add rounded once to f16 here: every value is a small integer)
                let hi = h(0x6400 | (q << 4));
                assert_eq!(hi, 1024.0 + 16.0 * f32::from(q));
                assert_eq!(f16::from_f32(hi.mul_add(h(0x2c00), h(zg8))).to_f32(), want);
            }
        }
    }

    #[test]
    fn nf4_bf16_parts_hold_the_codebook_to_16_bits_in_every_position() {
        let (th, tl) = nf4_bf16_tables();
        let bf = |b: u32| half::bf16::from_bits(b as u16).to_f32();
        for c in 0..16u32 {
            for pos in 0..8 {
                let v = (0..8u32).fold(0u32, |w, j| w | ((if j == pos { c } else { (c + 5 * j + 2) & 15 }) << (4 * j)));
                let (h, l) = (decode_nf4(v, &th), decode_nf4(v, &tl));
                for j in 0..8u32 {
                    let (r, sh) = ((j / 2) as usize, 16 * (j % 2));
                    let got = bf((h[r] >> sh) & 0xffff) + bf((l[r] >> sh) & 0xffff);
                    let want = roofline_quant::codec::NF4_CODE[((v >> (4 * j)) & 15) as usize];
                    assert!(
                        (got - want).abs() <= want.abs() * 2f32.powi(-16),
                        "word {v:08x} element {j}: {got} vs {want}"
                    );
                    // the hi part alone is BF16's rounding of the code
                    assert_eq!(bf((h[r] >> sh) & 0xffff), half::bf16::from_f32(want).to_f32());
                }
            }
        }
    }

    #[test]
    fn nf4_decode_gives_the_codebook_in_every_position() {
        let t = nf4_f16_tables();
        let want = |c: u32| u32::from(half::f16::from_f32(roofline_quant::codec::NF4_CODE[c as usize]).to_bits());
        // Every code in every nibble, the other nibbles holding other codes.
        for c in 0..16u32 {
            for pos in 0..8 {
                let v = (0..8u32).fold(0u32, |w, j| w | ((if j == pos { c } else { (c + 3 * j + 1) & 15 }) << (4 * j)));
                let a = decode_nf4(v, &t);
                for j in 0..8u32 {
                    let got = (a[(j / 2) as usize] >> (16 * (j % 2))) & 0xffff;
                    assert_eq!(got, want((v >> (4 * j)) & 15), "word {v:08x} element {j}");
                }
            }
        }
        // The f16 codebook is within f16 rounding of NF4's f32 values.
        for (i, &c) in roofline_quant::codec::NF4_CODE.iter().enumerate() {
            let h = half::f16::from_bits(want(i as u32) as u16).to_f32();
            assert!((h - c).abs() <= c.abs() * 4.9e-4, "code {i}: {c} -> {h}");
        }
    }

    #[test]
    fn fragment_covers_the_tile_once() {
        let mut seen = [[false; 16]; 16];
        for lane in 0..32 {
            for (r, c) in fragment(lane / 4, lane % 4, 0) {
                assert!(!seen[r][c], "({r}, {c}) twice");
                seen[r][c] = true;
            }
        }
        assert!(seen.iter().flatten().all(|&b| b));
    }

    #[test]
    fn tensor_cores_take_fp16_x_with_every_format_and_bf16_x_where_bf16_holds_the_values() {
        for f in WoFormat::ALL {
            assert!(supports(f, XDtype::F16), "{f:?}");
            assert_eq!(supports(f, XDtype::Bf16), f != WoFormat::Fp16, "{f:?}");
        }
        // BF16 weights past FP16's range are refused for FP16 x; the largest BF16 within it (65280) passes.
        let bf16_of = |vals: &[f32]| {
            let (mut p, _) = quantize_and_pack(WoFormat::Bf16, &random_f32(16 * 64, 3), 16, 64).unwrap();
            for (i, v) in vals.iter().enumerate() {
                p.codes[2 * i..2 * i + 2].copy_from_slice(&half::bf16::from_f32(*v).to_bits().to_le_bytes());
            }
            p
        };
        assert!(check_f16_range(&bf16_of(&[65280.0, -1e-30, f32::NEG_INFINITY])).is_ok());
        assert!(check_f16_range(&bf16_of(&[65536.0])).is_err());
        let e = check_f16_range(&bf16_of(&[-1.0e5])).unwrap_err().to_string();
        assert!(e.contains("65504") && e.contains("BF16 activations"), "{e}");
        // BF16 weights repack as FP16's do: 16-bit codes in fragment order.
        let (p, _) = quantize_and_pack(WoFormat::Bf16, &random_f32(20 * 128, 1), 20, 128).unwrap();
        assert_eq!(unpack(WoFormat::Bf16, &repack(&p).unwrap(), 20, 128), p.codes);
        // K must be a multiple of the 64-K tile.
        let (p, _) = quantize_and_pack(WoFormat::Fp16, &random_f32(16 * 72, 1), 16, 72).unwrap();
        assert!(repack(&p).is_err());
    }

    /// The kernels' read of one lane's k-step, transcribed from `weight_only_mma.cu`: uint4 `v` of tile
    /// (rt, kt) at `((rt * kt_total + kt) * QV + v) * 32 + lane` (uint4 units; `xs_load`, `load_set`), then
    /// `decode_step`'s words: 16-bit `qw[s]`'s four words, 8-bit `word(qw[s >> 1], 2 (s & 1))` and the next,
    /// 4-bit `word(qw[0], s)`.
    fn kernel_step_words(tiles: &[u8], qv: usize, tile: usize, lane: usize, s: usize) -> Vec<u32> {
        let uint4 = |v: usize| {
            let at = ((tile * qv + v) * 32 + lane) * 16;
            let w: Vec<u32> =
                tiles[at..at + 16].chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            w
        };
        match qv {
            4 => uint4(s),
            2 => uint4(s >> 1)[2 * (s & 1)..2 * (s & 1) + 2].to_vec(),
            _ => vec![uint4(0)[s]],
        }
    }

    #[test]
    fn the_kernels_read_each_fragment_element_where_repack_put_it() {
        let (n, k) = (40usize, 256usize);
        for format in [WoFormat::Fp16, WoFormat::Fp8E4M3, WoFormat::Int8, WoFormat::Int4G128, WoFormat::Nf4] {
            let (p, _) = quantize_and_pack(format, &random_f32(n * k, 11), n, k).unwrap();
            let tiles = repack(&p).unwrap();
            let (qv, kt_total, bits) = (words_per_tile(format), k / 64, format.bits());
            let el = |r: usize, c: usize| -> u32 {
                if r >= n {
                    return 0;
                }
                let at = (r * k + c) * bits / 8;
                match bits {
                    16 => u32::from(u16::from_le_bytes([p.codes[at], p.codes[at + 1]])),
                    8 => u32::from(p.codes[at]),
                    _ => u32::from((p.codes[at] >> (4 * (c % 2))) & 15),
                }
            };
            for rt in 0..n.div_ceil(16) {
                for kt in 0..kt_total {
                    for lane in 0..32 {
                        for s in 0..4 {
                            let words = kernel_step_words(&tiles, qv, rt * kt_total + kt, lane, s);
                            let f = fragment(lane / 4, lane % 4, s).map(|(r, c)| el(rt * 16 + r, kt * 64 + c));
                            let got: Vec<u32> = match bits {
                                // A register i = elements (2i, 2i + 1), low half first.
                                16 => (0..8).map(|e| (words[e / 2] >> (16 * (e % 2))) & 0xffff).collect(),
                                // Bytes of w0 then w1 (decode_step: cvt / prmt take them in that order).
                                8 => (0..8).map(|e| (words[e / 4] >> (8 * (e % 4))) & 0xff).collect(),
                                // INT4: (word >> 4i) & 0x000F000F gives elements (2i, 2i + 1); FP4 / NF4 nibble e.
                                _ if format == WoFormat::Int4G128 => {
                                    (0..8).map(|e| (words[0] >> (4 * (e / 2) + 16 * (e % 2))) & 15).collect()
                                }
                                _ => (0..8).map(|e| (words[0] >> (4 * e)) & 15).collect(),
                            };
                            assert_eq!(got, f.to_vec(), "{format:?} tile ({rt}, {kt}) lane {lane} k-step {s}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn int8_magic_gives_the_exact_integers() {
        // The kernel's INT8 decode: f16 0x64 over each byte of q + 128 is 1024 + q + 128; minus 1152 is q.
        for q in -128i32..=127 {
            let u = ((q as i8 as u8) ^ 0x80) as u16;
            let v = half::f16::from_bits(0x6400 | u).to_f64() - 1152.0;
            assert_eq!(v, f64::from(q));
        }
    }
}
