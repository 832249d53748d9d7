//! Host side of the tensor-core kernel (`kernels/weight_only_mma.cu`): which formats it runs and the
//! repacking of 4-bit codes into m16n8k16 A-fragment order.
//!
//! W (`N x K`, rows padded to a multiple of 16) is cut into tiles of 16 rows x 64 K, ordered
//! `[row tile][k tile]`. A tile is 512 bytes: 32 lanes x 16 bytes; lane `l` (`g = l / 4`, `t = l % 4`) holds
//! one 32-bit word per k-step `s` (16 K) with the eight elements of its A fragment:
//! `a0, a1 = W[g][16s+2t..+2]`, `a2, a3 = W[g+8][16s+2t..+2]`, `a4, a5 = W[g][16s+2t+8..+2]`,
//! `a6, a7 = W[g+8][16s+2t+8..+2]`. INT4 puts `a0..a7` in nibbles 0, 4, 1, 5, 2, 6, 3, 7 of the word (so
//! `(word >> 4i) & 0x000F000F` gives the f16x2 pair of register `i`), FP4 in nibbles 0..7. Scales and zero
//! points keep the layout of [`super::pack`].

use super::pack::{PackedWeights, WoFormat};
use super::XDtype;
use crate::GpuError;

/// Whether the tensor-core kernel runs `format` weights with `x` activations.
pub fn supports(format: WoFormat, x: XDtype) -> bool {
    x == XDtype::F16 && matches!(format, WoFormat::Int4G128 | WoFormat::Mxfp4 | WoFormat::Nvfp4)
}

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

/// The codes of `p` (row-major, 4-bit LSB first) in tile order; rows past N are zero codes.
pub fn repack(p: &PackedWeights) -> Result<Vec<u8>, GpuError> {
    if p.format.bits() != 4 {
        return Err(GpuError::Unsupported(format!(
            "the tensor-core kernel takes 4-bit weights, not {}",
            p.format.format()
        )));
    }
    if p.k % 64 != 0 || p.k == 0 {
        return Err(GpuError::Unsupported(format!(
            "the tensor-core kernel needs K to be a multiple of 64, got {}",
            p.k
        )));
    }
    let (n, k) = (p.n, p.k);
    let row_bytes = k / 2;
    let code = |r: usize, c: usize| -> u32 {
        if r >= n {
            return 0;
        }
        let b = p.codes[r * row_bytes + c / 2];
        u32::from(if c % 2 == 0 { b & 15 } else { b >> 4 })
    };
    let (row_tiles, k_tiles) = (n.div_ceil(16), k / 64);
    let mut out = Vec::with_capacity(row_tiles * k_tiles * 512);
    for rt in 0..row_tiles {
        for kt in 0..k_tiles {
            for lane in 0..32 {
                let (g, t) = (lane / 4, lane % 4);
                for s in 0..4 {
                    let mut word = 0u32;
                    for (j, (r, c)) in fragment(g, t, s).into_iter().enumerate() {
                        word |= code(rt * 16 + r, kt * 64 + c) << (4 * nibble_of(p.format, j));
                    }
                    out.extend_from_slice(&word.to_le_bytes());
                }
            }
        }
    }
    Ok(out)
}

/// Inverse of [`repack`] (the row-major codes of `n` rows), used by the tests to prove the layout.
pub fn unpack(format: WoFormat, tiles: &[u8], n: usize, k: usize) -> Vec<u8> {
    let row_bytes = k / 2;
    let mut codes = vec![0u8; n * row_bytes];
    let k_tiles = k / 64;
    for (i, w) in tiles.chunks_exact(4).enumerate() {
        let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let s = i % 4;
        let lane = (i / 4) % 32;
        let tile = i / 128;
        let (rt, kt) = (tile / k_tiles, tile % k_tiles);
        let (g, t) = (lane / 4, lane % 4);
        for (j, (r, c)) in fragment(g, t, s).into_iter().enumerate() {
            let (row, col) = (rt * 16 + r, kt * 64 + c);
            if row < n {
                let v = ((word >> (4 * nibble_of(format, j))) & 15) as u8;
                codes[row * row_bytes + col / 2] |= if col % 2 == 0 { v } else { v << 4 };
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
        for format in [WoFormat::Int4G128, WoFormat::Mxfp4, WoFormat::Nvfp4] {
            for (n, k) in [(16usize, 128usize), (40, 256), (1000, 384)] {
                let k = if format == WoFormat::Int4G128 { k.div_ceil(128) * 128 } else { k };
                let (p, _) = quantize_and_pack(format, &random_f32(n * k, 9), n, k).unwrap();
                let tiles = repack(&p).unwrap();
                assert_eq!(tiles.len(), n.div_ceil(16) * 16 * k / 2, "{format:?} {n}x{k}");
                assert_eq!(unpack(format, &tiles, n, k), p.codes, "{format:?} {n}x{k}");
            }
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
    fn only_4_bit_fp16_runs_on_tensor_cores() {
        assert!(supports(WoFormat::Int4G128, XDtype::F16));
        assert!(supports(WoFormat::Nvfp4, XDtype::F16));
        assert!(!supports(WoFormat::Nvfp4, XDtype::Bf16));
        assert!(!supports(WoFormat::Nf4, XDtype::F16));
        assert!(!supports(WoFormat::Fp16, XDtype::F16));
        let (p, _) = quantize_and_pack(WoFormat::Fp8E4M3, &random_f32(16 * 64, 1), 16, 64).unwrap();
        assert!(repack(&p).is_err());
    }
}
