//! A CPU model of `kernels/weight_only_gemv.cu`, statement for statement (bit tricks, chunk and scale
//! indexing, lanes, split-K), so the kernel's arithmetic and layout reading are tested on machines with
//! no GPU against roofline-quant's reference. Test-only.

use half::f16;

use super::pack::{decode_e2m1_dev, device_codes, PackedWeights, WoFormat};
use super::LaunchPlan;

fn h2f(h: u32) -> f32 {
    f16::from_bits(h as u16).to_f32()
}

fn h2x2f(v: u32) -> (f32, f32) {
    (h2f(v & 0xffff), h2f(v >> 16))
}

/// `sub.f16x2`.
fn hsub2(a: u32, b: u32) -> u32 {
    let lo = f16::from_f64(f64::from(h2f(a & 0xffff)) - f64::from(h2f(b & 0xffff))).to_bits();
    let hi = f16::from_f64(f64::from(h2f(a >> 16)) - f64::from(h2f(b >> 16))).to_bits();
    u32::from(lo) | (u32::from(hi) << 16)
}

/// `fma.rn.f16x2` (products of halves are exact in f64, so one rounding).
fn hfma2(a: u32, b: u32, c: u32) -> u32 {
    let one = |s: u32| {
        let (x, y, z) = (h2f((a >> s) & 0xffff), h2f((b >> s) & 0xffff), h2f((c >> s) & 0xffff));
        u32::from(f16::from_f64(f64::from(x) * f64::from(y) + f64::from(z)).to_bits())
    };
    one(0) | (one(16) << 16)
}

/// `__byte_perm(x, y, s)`.
fn byte_perm(x: u32, y: u32, s: u32) -> u32 {
    let bytes = (u64::from(y) << 32) | u64::from(x);
    (0..4).fold(0u32, |r, i| {
        let sel = (s >> (4 * i)) & 7;
        r | ((((bytes >> (8 * sel)) & 0xff) as u32) << (8 * i))
    })
}

fn e4m3_to_f(b: u32) -> f32 {
    let (e, m) = ((b >> 3) & 15, b & 7);
    let mag = if e == 0 { m as f32 * 0.001_953_125 } else { f32::from_bits(((e + 120) << 23) | (m << 20)) };
    if b & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

const NF4: [f32; 16] = roofline_quant::codec::NF4_CODE;
/// `E2M1_UP` (wo_common.cuh): what the FP32 decode's partial sums of E2M1 codes are multiplied by.
fn e2m1_up(f: WoFormat) -> f32 {
    if f.e2m1() {
        16384.0
    } else {
        1.0
    }
}

#[derive(Clone, Copy, Default)]
struct Meta {
    scale: f32,
    zero: u32,
    s2: u32,
}

fn f16_at(b: &[u8], i: usize) -> u32 {
    u32::from(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
}

fn load_meta(p: &PackedWeights, n: usize, c: usize) -> Meta {
    let k = p.k;
    let mut m = Meta::default();
    match p.format {
        WoFormat::Int4G128 => {
            let groups = k / 128;
            let g = c >> 2;
            m.scale = h2f(f16_at(&p.scales, n * groups + g));
            let zb = u32::from(p.zeros[n * groups.div_ceil(2) + (g >> 1)]);
            let z = (zb >> ((g & 1) * 4)) & 15;
            let zh = 0x6400 | z;
            m.zero = zh | (zh << 16);
        }
        WoFormat::Nf4 => m.scale = h2f(f16_at(&p.scales, n * (k / 64) + (c >> 1))),
        WoFormat::Mxfp4 => {
            let e = u32::from(p.scales[n * (k / 32) + c]);
            m.scale = if e == 0 { f32::from_bits(0x0040_0000) } else { f32::from_bits(e << 23) };
        }
        WoFormat::Nvfp4 => m.s2 = f16_at(&p.scales, n * (k / 32) + c),
        _ => {}
    }
    m
}

fn decode8(f: WoFormat, q: [u32; 4], j: usize, meta: Meta) -> [f32; 8] {
    let mut w = [0f32; 8];
    match f {
        WoFormat::Fp16 => {
            for i in 0..4 {
                (w[2 * i], w[2 * i + 1]) = h2x2f(q[i]);
            }
        }
        WoFormat::Bf16 => {
            for i in 0..4 {
                w[2 * i] = f32::from_bits(q[i] << 16);
                w[2 * i + 1] = f32::from_bits(q[i] & 0xffff_0000);
            }
        }
        WoFormat::Fp8E4M3 => {
            // cvt.rn.f16x2.e4m3x2 is exact (every E4M3 value is an f16); byte 0 -> lower half.
            for i in 0..2 {
                let v = q[2 * j + i];
                for b in 0..4 {
                    w[4 * i + b] = e4m3_to_f((v >> (8 * b)) & 0xff);
                }
            }
        }
        WoFormat::Int8 => {
            for i in 0..2 {
                let v = q[2 * j + i] ^ 0x8080_8080;
                for b in 0..4u32 {
                    let t = byte_perm(v, 0x4B00_0000, 0x7650 + b);
                    w[4 * i + b as usize] = f32::from_bits(t) - 8_388_736.0;
                }
            }
        }
        WoFormat::Int4G128 => {
            let v = q[j];
            let lop = |a: u32, mask: u32| (a & mask) | 0x6400_6400;
            let mut lo0 = lop(v, 0x000f_000f);
            let mut hi0 = lop(v, 0x00f0_00f0);
            let mut lo1 = lop(v >> 8, 0x000f_000f);
            let mut hi1 = lop(v >> 8, 0x00f0_00f0);
            let zlo = meta.zero;
            let zhi = ((zlo & 0x000f_000f) << 4) | 0x5400_5400;
            let sixteenth = 0x2c00_2c00;
            lo0 = hsub2(lo0, zlo);
            lo1 = hsub2(lo1, zlo);
            hi0 = hfma2(hi0, sixteenth, zhi ^ 0x8000_8000);
            hi1 = hfma2(hi1, sixteenth, zhi ^ 0x8000_8000);
            (w[0], w[4]) = h2x2f(lo0);
            (w[1], w[5]) = h2x2f(hi0);
            (w[2], w[6]) = h2x2f(lo1);
            (w[3], w[7]) = h2x2f(hi1);
        }
        WoFormat::Nf4 => {
            let v = q[j];
            w[0] = NF4[((v << 2) & 0x3c) as usize / 4];
            for (i, wi) in w.iter_mut().enumerate().skip(1) {
                *wi = NF4[((v >> (4 * i - 2)) & 0x3c) as usize / 4];
            }
        }
        WoFormat::Mxfp4 | WoFormat::Nvfp4 => {
            // The CUDA-core layout (`device_codes`): the values times 2^-14 (the sums are scaled back by E2M1_UP).
            for (i, p) in decode_e2m1_dev(q[j]).into_iter().enumerate() {
                (w[2 * i], w[2 * i + 1]) = h2x2f(p);
            }
        }
    }
    w
}

fn seg_scale(f: WoFormat, m: Meta, seg: usize) -> f32 {
    match f {
        WoFormat::Int4G128 | WoFormat::Nf4 | WoFormat::Mxfp4 => m.scale,
        WoFormat::Nvfp4 => e4m3_to_f((m.s2 >> (8 * seg)) & 0xff),
        _ => 1.0,
    }
}

/// Runs the kernel's algorithm for `plan` on the CPU: x is `m x k` (already rounded to the activation
/// type), returns y in f32 (before the output rounding).
pub fn run(p: &PackedWeights, x: &[f32], m: usize, plan: &LaunchPlan) -> Vec<f32> {
    run_grid(p, x, m, plan, plan.blocks_n as usize)
}

/// [`run`] with `grid_n` CTAs along N: each warp walks row groups `gw, gw + warps_total, ...` as the
/// kernel does when the grid is smaller than the row groups (persistent launch).
pub fn run_grid(p: &PackedWeights, x: &[f32], m: usize, plan: &LaunchPlan, grid_n: usize) -> Vec<f32> {
    let (n_rows, k, f) = (p.n, p.k, p.format);
    let epc = 128 / f.bits();
    let subs = epc / 8;
    let segs = if f == WoFormat::Nvfp4 { 2 } else { 1 };
    let block_scaled = matches!(f, WoFormat::Int4G128 | WoFormat::Nf4 | WoFormat::Mxfp4 | WoFormat::Nvfp4);
    let kc = k / epc;
    let row_bytes = k * f.bits() / 8;
    let dev = device_codes(p);
    let codes = dev.as_deref().unwrap_or(&p.codes);
    let chunk = |n: usize, c: usize| -> [u32; 4] {
        let b = &codes[n * row_bytes + 16 * c..n * row_bytes + 16 * c + 16];
        std::array::from_fn(|i| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]))
    };
    let (r_per, u_n, warps) = (plan.rows_per_warp as usize, plan.unroll as usize, plan.warps as usize);
    let mut ws = vec![0f32; m * n_rows];
    for by in 0..plan.splits as usize {
        let warps_total = grid_n * warps;
        let groups = n_rows.div_ceil(r_per);
        for gw in 0..warps_total {
            for group in (gw..groups).step_by(warps_total.max(1)) {
                let row0 = group * r_per;
                let c_begin = by * plan.chunks_per_split as usize;
                let c_end = kc.min(c_begin + plan.chunks_per_split as usize);
                let rows: Vec<usize> = (0..r_per).map(|r| (row0 + r).min(n_rows - 1)).collect();
                // per-lane accumulators, then the butterfly sum (order differs from the GPU's tree only)
                let mut total = vec![0f32; r_per * m];
                for lane in 0..32 {
                    let mut acc = vec![0f32; r_per * m];
                    // GRP: a lane's U chunks are consecutive; otherwise 32 apart.
                    let (stride, lmul) = if plan.grouped { (1, u_n) } else { (32, 1) };
                    let mut c = c_begin + lane * lmul;
                    while c < c_end {
                        for u in 0..u_n {
                            let cc = c + stride * u;
                            if cc >= c_end {
                                continue;
                            }
                            let mut part = vec![0f32; r_per * m];
                            for j in 0..subs {
                                let wf: Vec<[f32; 8]> =
                                    rows.iter().map(|&n| decode8(f, chunk(n, cc), j, load_meta(p, n, cc))).collect();
                                for mi in 0..m {
                                    let xs = &x[mi * k + cc * epc + 8 * j..][..8];
                                    for r in 0..r_per {
                                        let dst = if block_scaled { &mut part } else { &mut acc };
                                        for e in 0..8 {
                                            dst[r * m + mi] = wf[r][e].mul_add(xs[e], dst[r * m + mi]);
                                        }
                                    }
                                }
                                if block_scaled && (j + 1) % (subs / segs) == 0 {
                                    let seg = j / (subs / segs);
                                    for r in 0..r_per {
                                        let s = seg_scale(f, load_meta(p, rows[r], cc), seg);
                                        for mi in 0..m {
                                            acc[r * m + mi] =
                                                (part[r * m + mi] * e2m1_up(f)).mul_add(s, acc[r * m + mi]);
                                            part[r * m + mi] = 0.0;
                                        }
                                    }
                                }
                            }
                        }
                        c += 32 * u_n;
                    }
                    for (t, a) in total.iter_mut().zip(&acc) {
                        *t += a;
                    }
                }
                for r in 0..r_per {
                    let n = row0 + r;
                    let s = match f {
                        WoFormat::Fp8E4M3 | WoFormat::Int8 => {
                            f32::from_le_bytes(p.scales[4 * rows[r]..4 * rows[r] + 4].try_into().unwrap_or([0; 4]))
                        }
                        WoFormat::Nvfp4 => p.global_scale,
                        _ => 1.0,
                    };
                    if n < n_rows {
                        for mi in 0..m {
                            ws[mi * n_rows + n] += total[r * m + mi] * s;
                        }
                    }
                }
            }
        }
    }
    ws
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random_f32;
    use crate::weight_only::Tuning;
    use crate::weight_only::{quantize_and_pack, Variant};

    #[test]
    fn bit_tricks_decode_every_code() {
        // E4M3: every byte but NaN
        for b in 0..256u32 {
            if b & 0x7f == 0x7f {
                continue;
            }
            let want = roofline_quant::minifloat::E4M3.decode(b);
            assert_eq!(e4m3_to_f(b).to_bits(), want.to_bits(), "E4M3 {b:#x}");
        }
        // INT8 prmt magic: every byte of every lane position
        for b in 0..256u32 {
            let q = [b | (b << 8) | (b << 16) | (b << 24); 4];
            let w = decode8(WoFormat::Int8, q, 0, Meta::default());
            assert!(w.iter().all(|v| *v == f32::from(b as u8 as i8)), "INT8 {b}: {w:?}");
        }
        // INT4 f16x2 magic: every code against every zero point, nibble positions distinct
        for z in 0..16u32 {
            let zh = 0x6400 | z;
            let meta = Meta { zero: zh | (zh << 16), ..Meta::default() };
            for base in 0..16u32 {
                let codes: Vec<u32> = (0..8).map(|i| (base + 3 * i) % 16).collect();
                let v = codes.iter().enumerate().fold(0u32, |v, (i, c)| v | (c << (4 * i)));
                let w = decode8(WoFormat::Int4G128, [v, 0, 0, 0], 0, meta);
                for i in 0..8 {
                    assert_eq!(w[i], codes[i] as f32 - z as f32, "INT4 z={z} codes={codes:?}");
                }
            }
        }
    }

    #[test]
    fn kernel_model_matches_the_reference_for_every_format_and_plan() {
        for f in WoFormat::ALL {
            for (m, n, k) in [(1, 9, 4 * 128), (3, 37, 2 * 128 * 4), (16, 5, 1024), (2, 7, 8192)] {
                let k = k.max(f.k_multiple());
                let (p, wq) = quantize_and_pack(f, &random_f32(n * k, 21), n, k).unwrap();
                let x: Vec<f32> = random_f32(m * k, 4).into_iter().map(|v| f16::from_f32(v).to_f32()).collect();
                for (variant, split, grouped) in [
                    (Variant::SplitK, None, false),
                    (Variant::SplitK, Some(2), false),
                    (Variant::RowPerWarp, None, false),
                    (Variant::SplitK, None, true),
                    (Variant::SplitK, Some(2), true),
                ] {
                    let t = Tuning { split_k: split, grouped: Some(grouped), ..Tuning::default() };
                    let plan = LaunchPlan::new(variant, f, m, n, k, 132, t);
                    if split.is_some() && k >= 8192 {
                        assert!(plan.splits > 1, "{f:?}: the split path must be exercised ({plan:?})");
                    }
                    let y = run(&p, &x, m, &plan);
                    if plan.splits == 1 {
                        // A persistent grid (fewer CTAs than row groups) computes exactly the same sums.
                        assert_eq!(run_grid(&p, &x, m, &plan, 1), y, "{f:?} {variant:?} {m}x{n}x{k}: grid of 1");
                    }
                    let (mut err, mut norm) = (0f64, 0f64);
                    for i in 0..m {
                        for j in 0..n {
                            let want: f64 = (0..k).map(|l| f64::from(x[i * k + l]) * f64::from(wq[j * k + l])).sum();
                            err += (f64::from(y[i * n + j]) - want).powi(2);
                            norm += want * want;
                        }
                    }
                    let rel = (err / norm).sqrt();
                    assert!(rel < 1e-5, "{f:?} {variant:?} {split:?} {m}x{n}x{k}: {rel:e} ({plan:?})");
                }
            }
        }
    }
}
