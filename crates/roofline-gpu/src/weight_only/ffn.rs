//! The fused SwiGLU FFN of a batch-1 decode step (`kernels/ffn_fused.cu`): RMSNorm, gate_up, SiLU-and-mul,
//! down and the residual add in one launch, 4-bit weights ([`FORMATS`]), FP16 activations. The intermediate dimension
//! is split over the CTAs (each computes its gate and up rows, then multiplies the resulting h into the
//! matching columns of W_down for every output row), so the two GEMVs share one ramp and one drain. The CTAs
//! add their partial outputs into an FP32 accumulator with float atomics, and the last one to finish folds
//! it into the residual stream: no CTA waits for another.
//!
//! Layouts: gate_up as the x-in-registers kernel reads it (codes row-major, `pack::xreg_tables`); W_down's
//! codes piece-major (`[F/16][D][8 bytes]`, see [`down_pieces`]) with its scale tables transposed
//! (`pack::xreg_tables`). MXFP4 / NVFP4 codes in the E2M1 device layout (`pack::device_codes`): phase A's
//! normalized x and each 16-value piece of h are scaled by powers of two so that the decode's 2^-14 costs
//! nothing.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::nvrtc::{compile_cubin, load_checked, KernelKey, WEIGHT_ONLY_XREG_SOURCE};
use super::pack::{device_codes, xreg_tables, PackedWeights, WoFormat};
use super::{launch_ex, nvrtc_available, upload_table, XDtype};
use crate::{Gpu, GpuError};

/// The fused FFN kernel (appended to the x-in-registers source, whose INT4 loads and decode it reuses, and
/// to [`STREAM_SOURCE`]).
pub const FFN_SOURCE: &str = include_str!("../kernels/ffn_fused.cu");

/// What the kernels streaming INT4 rows through shared memory share (bulk copies, mbarriers, the f16x2 row
/// step): the fused FFN and the ring GEMV (`weight_only::ring`).
pub const STREAM_SOURCE: &str = include_str!("../kernels/wo_stream.cuh");

/// Bytes of the kernel's shared-memory ring of weight stages (`RING_BYTES` in the kernel), at most: the
/// stages used are a multiple of the row groups and fit beside the rest (see [`Layout`]).
const RING_BYTES: usize = 176 * 1024;

/// Dynamic shared memory a CTA may take: Hopper's (and B200's) 227 KB per block less the kernel's static
/// arrays (the ring's barriers) and some slack. A GPU with less refuses the launch in `FusedFfn::new`'s
/// occupancy check (and `--ffn auto` falls back to the GEMVs).
const SMEM_BUDGET: usize = 220 * 1024;

/// The ring's bytes: [`RING_BYTES`], or `ROOFLINE_FFN_RING_KB` (64 to 200) for tuning experiments.
fn ring_bytes() -> usize {
    std::env::var("ROOFLINE_FFN_RING_KB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|k| (64..=200).contains(k))
        .map_or(RING_BYTES, |k| k * 1024)
}

/// Most consumer warps per CTA (`FFN_MAXW`); `ROOFLINE_FFN_WARPS` overrides it for tuning experiments.
fn max_consumer_warps() -> usize {
    std::env::var("ROOFLINE_FFN_WARPS").ok().and_then(|v| v.parse().ok()).filter(|w| (1..=31).contains(w)).unwrap_or(16)
}

/// Static shared memory of NF4's table of code pairs in the fused FFN (and the x-in-registers kernel):
/// `nf4_pair_fill<false>` in wo_common.cuh, 256 f16x2 pairs, a copy per bank, rows of 128 bytes.
pub const NF4_PAIR_TABLE_BYTES: usize = 256 * 128;

/// The kernel's geometry for hidden size `d` and at most `fs` intermediate values per CTA (mirrors its
/// macros and its shared-memory carve-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// Consumer warps: K slices of 1024 times row groups, at most [`max_consumer_warps`].
    warps: u32,
    /// Threads per CTA (one producer warp more).
    threads: u32,
    /// Bytes per ring stage (8 rows of W_gate_up).
    stage: usize,
    /// Stages in the ring: at most 16, a multiple of the row groups (each ring slot belongs to one group),
    /// as many of [`ring_bytes`] as fit in [`SMEM_BUDGET`] beside the rest.
    stages: usize,
    /// Dynamic shared memory per CTA.
    smem: usize,
    /// NF4 through the pair table (`NF4_PAIRS`, 32 KB of static shared memory): where the ring keeps at
    /// least as many stages beside it as the row groups need, else the byte-permute decode.
    nf4_pairs: bool,
}

impl Layout {
    /// For hidden size `d`, at most `fs` intermediate values per CTA, weights in `format`.
    fn new(format: WoFormat, d: usize, fs: usize) -> Result<Layout, GpuError> {
        let slices = d / 1024;
        let groups = (max_consumer_warps() / slices).max(1);
        let warps = (slices * groups) as u32;
        let stage = 4 * d;
        // W_down's staged scales (INT4: two groups of FD f16 + FD / 2 zero bytes; the others every group of
        // the CTA: FD E8M0 bytes (MXFP4), FD E4M3 pairs (NVFP4) or FD f16 (NF4) each), gate_up's of the CTA's
        // rows (INT4: FD / 128 columns x 2 fs rows x (2 + 1/2) bytes; MXFP4 / NVFP4: FD / 32 columns x 2 fs x
        // 1 / 2 bytes; NF4: FD / 64 columns x 2 fs x 2 bytes), phase A's sums, h and its sums per piece.
        let scale_groups = down_groups(format, fs / PIECE);
        let scales = match format {
            WoFormat::Mxfp4 => scale_groups * d + (d / 32) * 2 * fs,
            WoFormat::Nvfp4 => scale_groups * d * 2 + (d / 32) * 2 * fs * 2,
            WoFormat::Nf4 => scale_groups * d * 2 + (d / 64) * 2 * fs * 2,
            // INT4 g128 (`unsupported` refuses the rest).
            _ => 5 * d + (d / 128) * fs * 5,
        };
        let rest = scales + (slices * 2 * fs + fs + fs / PIECE) * 4;
        let stages_in =
            |budget: usize| (ring_bytes().min(budget.saturating_sub(rest)) / stage).min(16) / groups * groups;
        // NF4's pair table is static shared memory beside all of this, where it leaves a ring.
        let with_table = stages_in(SMEM_BUDGET - NF4_PAIR_TABLE_BYTES);
        let nf4_pairs = format == WoFormat::Nf4 && with_table > 0;
        let stages = if nf4_pairs { with_table } else { stages_in(SMEM_BUDGET) };
        if stages == 0 {
            return Err(GpuError::Unsupported(format!(
                "the fused FFN's shared memory ({rest} bytes of scales and sums at hidden {d}, {fs} values per \
                 CTA) leaves no room for {groups} ring stages of {stage} bytes"
            )));
        }
        Ok(Layout { warps, threads: warps * 32 + 32, stage, stages, smem: stages * stage + rest, nf4_pairs })
    }
}

/// Intermediate values per piece: one piece of a W_down row is 16 codes, 8 bytes.
const PIECE: usize = 16;

/// The most scale groups of W_down (MXFP4 / NVFP4: 32 intermediate values, two pieces; NF4: 64, four) a
/// CTA of at most `pieces` pieces touches (`MBG` in the kernel), its first piece anywhere in a group.
fn down_groups(format: WoFormat, pieces: usize) -> usize {
    let per_group = if format == WoFormat::Nf4 { 4 } else { 2 };
    (pieces + per_group - 2) / per_group + 1
}

/// The weight formats the fused FFN takes: INT4 g128 (f16 scale and 4-bit zero point per 128), NF4 (f16
/// absmax per 64), MXFP4 (E2M1 codes, an E8M0 scale per 32) and NVFP4 (E2M1 codes, an E4M3 scale per 16, an
/// FP32 tensor scale).
pub const FORMATS: [WoFormat; 4] = [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4];

/// Why the fused FFN cannot run a step's FFN, or `None` when it can: weights in one of [`FORMATS`], FP16 x, one token,
/// a hidden size that is a multiple of 1024 (at most 6144: registers) and an intermediate size that is a multiple of
/// 128 (one INT4 group of W_down).
pub fn unsupported(format: WoFormat, x: XDtype, batch: usize, hidden: usize, intermediate: usize) -> Option<String> {
    if !FORMATS.contains(&format) {
        return Some(format!(
            "the fused FFN kernel takes INT4 g128, NF4, MXFP4 or NVFP4 weights, not {}",
            format.format()
        ));
    }
    if x != XDtype::F16 {
        return Some("the fused FFN kernel takes FP16 activations".into());
    }
    if batch != 1 {
        return Some(format!("the fused FFN kernel decodes one token at a time, not a batch of {batch}"));
    }
    if hidden == 0 || hidden % 1024 != 0 || hidden > 6144 {
        return Some(format!(
            "the fused FFN kernel needs a hidden size that is a multiple of 1024 up to 6144 (registers), not {hidden}"
        ));
    }
    if intermediate == 0 || intermediate % 128 != 0 {
        return Some(format!(
            "the fused FFN kernel needs an intermediate size that is a multiple of 128, not {intermediate}"
        ));
    }
    None
}

/// CTAs of the fused FFN for `pieces` pieces of 16 intermediate values on `sm_count` SMs: the fewest that
/// keep the most pieces any CTA takes as low as one wave allows (Llama-3.1-8B on 132 SMs: 896 pieces, 7 per
/// CTA, 128 CTAs), and the pieces of the largest CTA share.
pub fn grid(pieces: usize, sm_count: u32) -> (u32, usize) {
    let per = pieces.div_ceil(sm_count.max(1) as usize).max(1);
    (pieces.div_ceil(per) as u32, per)
}

/// W_down's codes (`d` rows of `f` INT4 codes, row-major, two per byte, low nibble first) rearranged
/// piece-major: `[f / 16][d][8 bytes]`, so the 8 bytes of piece `p` of row `r` sit at `(p * d + r) * 8`.
pub fn down_pieces(codes: &[u8], d: usize, f: usize) -> Vec<u8> {
    let (row_bytes, pb) = (f / 2, PIECE / 2);
    let mut out = vec![0u8; codes.len()];
    for (p, dst) in out.chunks_mut(d * pb).enumerate() {
        for (r, piece) in dst.chunks_mut(pb).enumerate() {
            let src = r * row_bytes + p * pb;
            piece.copy_from_slice(&codes[src..src + pb]);
        }
    }
    out
}

/// The FFN's weights in the fused kernel's host layout, ready to upload (once per shape; any number of
/// layers).
#[derive(Debug, Clone)]
pub struct StagedFfn {
    gu_codes: Vec<u8>,
    gu_scales: Vec<u8>,
    gu_zeros: Vec<u8>,
    dn_codes: Vec<u8>,
    dn_scales: Vec<u8>,
    dn_zeros: Vec<u8>,
    /// NVFP4's FP32 tensor scales of gate_up and down (1 for the other formats).
    global_scales: [f32; 2],
    /// Bytes the kernel reads for the weights (both matrices' codes, scales and zero points).
    pub bytes: usize,
}

/// One layer's FFN weights on the GPU, with the kernel's accumulator and arrival count.
pub struct FfnWeights {
    gu_codes: CudaSlice<u8>,
    gu_scales: CudaSlice<u8>,
    gu_zeros: CudaSlice<u8>,
    dn_codes: CudaSlice<u8>,
    dn_scales: CudaSlice<u8>,
    dn_zeros: CudaSlice<u8>,
    acc: CudaSlice<f32>,
    bar: CudaSlice<u64>,
    /// NVFP4's FP32 tensor scales of gate_up and down (1 for the other formats).
    global_scales: [f32; 2],
    /// Bytes the kernel reads for the weights.
    pub bytes: usize,
}

/// The fused FFN for one model shape on one GPU (compiled for it by NVRTC).
pub struct FusedFfn {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    function: CudaFunction,
    /// Weight format (one of [`FORMATS`]).
    pub format: WoFormat,
    /// Hidden size.
    pub hidden: usize,
    /// Intermediate size.
    pub intermediate: usize,
    /// CTAs per launch (at most one per SM).
    pub ctas: u32,
    threads: u32,
    smem_bytes: u32,
    /// Registers per thread (from the driver; a build that spills is refused).
    pub registers: u32,
}

impl FusedFfn {
    /// Compiles the kernel for `hidden x intermediate` weights in `format` on `gpu` and checks that its CTA
    /// fits an SM.
    pub fn new(gpu: &Gpu, format: WoFormat, hidden: usize, intermediate: usize) -> Result<FusedFfn, GpuError> {
        if let Some(why) = unsupported(format, XDtype::F16, 1, hidden, intermediate) {
            return Err(GpuError::Unsupported(why));
        }
        let (major, minor) = gpu.compute_capability;
        let arch = (major * 10 + minor) as u32;
        if arch < 90 {
            return Err(GpuError::Unsupported(format!(
                "the fused FFN kernel streams its weights with Hopper bulk copies (sm_90+), this is sm_{arch}"
            )));
        }
        nvrtc_available()?;
        let (ctas, per) = grid(intermediate / PIECE, gpu.sm_count);
        let layout = Layout::new(format, hidden, per * PIECE)?;
        let (cubin, log) = compile_cubin(
            &ffn_source(),
            "ffn_fused.cu",
            &ffn_options(arch, format, hidden, intermediate, per, &layout),
        )?;
        let (threads, smem_bytes) = (layout.threads, layout.smem as u32);
        let (function, registers) = load_checked(&gpu.ctx, cubin, &log, "wo_ffn", "the fused FFN kernel", smem_bytes)?;
        let resident = function.occupancy_max_active_blocks_per_multiprocessor(threads, smem_bytes as usize, None)?;
        if resident == 0 {
            return Err(GpuError::Unsupported(format!(
                "the fused FFN's CTA ({threads} threads, {smem_bytes} bytes of shared memory) does not fit an SM"
            )));
        }
        Ok(FusedFfn {
            ctx: gpu.ctx.clone(),
            stream: gpu.stream.clone(),
            function,
            format,
            hidden,
            intermediate,
            ctas,
            threads,
            smem_bytes,
            registers,
        })
    }

    /// Rearranges packed gate_up (`2F x D`, gate rows then up rows, the post-attention norm folded in) and
    /// down (`D x F`) for the kernel.
    pub fn stage(&self, gate_up: &PackedWeights, down: &PackedWeights) -> Result<StagedFfn, GpuError> {
        let (d, f) = (self.hidden, self.intermediate);
        for (name, p, n, k) in [("gate_up", gate_up, 2 * f, d), ("down", down, d, f)] {
            if p.format != self.format || p.n != n || p.k != k {
                return Err(GpuError::Unsupported(format!(
                    "fused FFN {name}: expected {} {n}x{k}, got {} {}x{}",
                    self.format.format(),
                    p.format.format(),
                    p.n,
                    p.k
                )));
            }
        }
        let (gu_scales, gu_zeros) = xreg_tables(gate_up);
        let (dn_scales, dn_zeros) = xreg_tables(down);
        // MXFP4 / NVFP4 codes in the E2M1 device layout (a permutation within each 32-bit word, so it
        // commutes with W_down's pieces of two words).
        let dn_codes = device_codes(down);
        Ok(StagedFfn {
            gu_codes: device_codes(gate_up).unwrap_or_else(|| gate_up.codes.clone()),
            gu_scales,
            gu_zeros,
            dn_codes: down_pieces(dn_codes.as_deref().unwrap_or(&down.codes), d, f),
            dn_scales,
            dn_zeros,
            global_scales: [gate_up.global_scale, down.global_scale],
            bytes: gate_up.bytes() + down.bytes(),
        })
    }

    /// The GPU's default stream (what [`FusedFfn::upload`] copies on; any stream of its context runs it).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Uploads staged weights with their accumulator and arrival count (zeroed).
    pub fn upload(&self, st: &StagedFfn) -> Result<FfnWeights, GpuError> {
        let stream = &self.stream;
        Ok(FfnWeights {
            gu_codes: stream.clone_htod(&st.gu_codes)?,
            gu_scales: stream.clone_htod(&st.gu_scales)?,
            // Only INT4 has zero points: the others pass a dummy the kernel never reads.
            gu_zeros: upload_table(stream, &st.gu_zeros)?,
            dn_codes: stream.clone_htod(&st.dn_codes)?,
            dn_scales: stream.clone_htod(&st.dn_scales)?,
            dn_zeros: upload_table(stream, &st.dn_zeros)?,
            acc: stream.alloc_zeros::<f32>(self.hidden)?,
            bar: stream.alloc_zeros::<u64>(1)?,
            global_scales: st.global_scales,
            bytes: st.bytes,
        })
    }

    /// x += down(silu(gate) * up) with gate and up of rmsnorm(x) (eps `eps`), in place on the residual
    /// stream `x` (hidden FP16 values), on `stream`; `pdl`: launched with programmatic dependent launch
    /// (sm_90+). Launches on one `FfnWeights` must not overlap (its accumulator and count are shared).
    pub fn run(
        &self,
        stream: &Arc<CudaStream>,
        w: &mut FfnWeights,
        x: &mut CudaSlice<u16>,
        eps: f32,
        pdl: bool,
    ) -> Result<(), GpuError> {
        if !(eps.is_finite() && eps > 0.0) {
            return Err(GpuError::Unsupported(format!("the fused FFN's RMSNorm needs eps > 0, got {eps}")));
        }
        if x.len() < self.hidden {
            return Err(GpuError::Unsupported(format!("x holds {} values, the FFN needs {}", x.len(), self.hidden)));
        }
        if stream.context().cu_ctx() != self.ctx.cu_ctx() {
            return Err(GpuError::Unsupported("the fused FFN runs on a stream of the context it was built in".into()));
        }
        let (mut gu, _g0) = w.gu_codes.device_ptr(stream);
        let (mut gs, _g1) = w.gu_scales.device_ptr(stream);
        let (mut gz, _g2) = w.gu_zeros.device_ptr(stream);
        let (mut dn, _g3) = w.dn_codes.device_ptr(stream);
        let (mut ds, _g4) = w.dn_scales.device_ptr(stream);
        let (mut dz, _g5) = w.dn_zeros.device_ptr(stream);
        let (mut xp, _g6) = x.device_ptr_mut(stream);
        let (mut pp, _g7) = w.acc.device_ptr_mut(stream);
        let (mut bp, _g8) = w.bar.device_ptr_mut(stream);
        let mut e = eps;
        let [mut gs_gu, mut gs_dn] = w.global_scales;
        let mut params: [*mut c_void; 12] = [
            (&raw mut gu).cast(),
            (&raw mut gs).cast(),
            (&raw mut gz).cast(),
            (&raw mut dn).cast(),
            (&raw mut ds).cast(),
            (&raw mut dz).cast(),
            (&raw mut xp).cast(),
            (&raw mut pp).cast(),
            (&raw mut bp).cast(),
            (&raw mut e).cast(),
            (&raw mut gs_gu).cast(),
            (&raw mut gs_dn).cast(),
        ];
        // SAFETY: the parameters match wo_ffn(const uint4* gu, const u8* gu_s, const u8* gu_z, const uint4*
        // dn, const u8* dn_s, const u8* dn_z, u16* x, float* acc, unsigned long long* bar, float eps, float
        // gs_gu, float gs_dn) in order and type, each pointing at a local that lives through the launch; the
        // buffers were staged for this kernel's format and FD x FF (checked in `stage`; MXFP4 / NVFP4 pass 16
        // dummy bytes of zero points the kernel never reads), x holds FD values (checked above), acc FD floats (zero:
        // each launch's last CTA zeroes it again) and bar one 64-bit count that only this kernel (always
        // `ctas` CTAs) adds to, a multiple of `ctas` between launches (the last CTA is the one that finds it
        // one short of the next multiple). PDL: before its `griddepcontrol.wait` the kernel reads only its weights and their scale tables,
        // which no kernel writes.
        unsafe {
            launch_ex(
                stream,
                &self.function,
                (self.ctas, 1, 1),
                (self.threads, 1, 1),
                self.smem_bytes,
                pdl,
                &mut params,
            )
        }
    }
}

/// The kernel's source: the x-in-registers kernel's (its INT4 loads and decode), the streaming helpers, then
/// the fused FFN.
fn ffn_source() -> String {
    format!("{WEIGHT_ONLY_XREG_SOURCE}\n{STREAM_SOURCE}\n{FFN_SOURCE}")
}

/// NVRTC options of the kernels built on the `format` (the ring GEMV's weight formats, [`super::ring::takes`]), M = 1,
/// 8-row, one-chunk fused x-in-registers source (its defines select `Meta`'s and the row step's shape) with rows of
/// `k` values (`FD`) and x and y in `x` (`XBF16`), without the x-in-registers kernel itself (`XREG_NO_KERNEL`).
pub(crate) fn stream_options(arch: u32, format: WoFormat, x: XDtype, k: usize) -> Vec<String> {
    let key = KernelKey {
        format,
        x,
        m: 1,
        rows_per_warp: 8,
        unroll: 1,
        warps: 4,
        pipeline: false,
        min_blocks: 1,
        stage: false,
        grouped: false,
        xreg: true,
        pdl: arch >= 90,
        stages: 0,
        fuse: true,
        silu: false,
        tile_reduce: false,
        atomic_reduce: false,
        x_smem: false,
        xh: false,
        bulk: false,
        cluster: false,
        multicast: false,
        nf4_table: 0,
        xf16: false,
        producer: false,
        arch,
    };
    // (NF4's f16 byte tables for `dot8nf4` come with the x-in-registers key's options.)
    let mut opts = key.options();
    opts.push(format!("-DFD={k}"));
    // The x-in-registers source's helpers without its kernel (`wo_xreg`), which these builds never launch.
    opts.push("-DXREG_NO_KERNEL=1".into());
    opts
}

/// NVRTC options: [`stream_options`] plus the model's sizes, the ring and (but INT4) the most W_down scale
/// groups of a CTA of at most `per` pieces.
fn ffn_options(
    arch: u32,
    format: WoFormat,
    hidden: usize,
    intermediate: usize,
    per: usize,
    layout: &Layout,
) -> Vec<String> {
    let mut opts = stream_options(arch, format, XDtype::F16, hidden);
    if layout.nf4_pairs {
        // Both phases look NF4's codes up in the pair table (wo_stream.cuh NF4_PAIRS).
        opts.push("-DNF4_PAIRS=1".into());
    }
    opts.push(format!("-DFF={intermediate}"));
    if super::ring::int4_subnormal(format) {
        // Phase A's row steps take INT4's codes as f16 subnormals, as the ring GEMV's do.
        opts.push("-DRW_SUBN=1".into());
    }
    if format != WoFormat::Int4G128 {
        opts.push(format!("-DMBG={}", down_groups(format, per)));
    }
    opts.push(format!("-DFFN_MAXW={}", max_consumer_warps()));
    opts.push(format!("-DRING_BYTES={}", layout.stages * layout.stage));
    opts.extend(super::nvrtc::extra_options());
    opts
}

/// The fused FFN on the CPU in f64 from the packed weights' values (what the GPU multiplies): x + W_down
/// (silu(g) * u), (g, u) = rsqrt(mean(x^2) + eps) W_gate_up x. Returns every output.
pub fn reference(x: &[f32], gate_up: &PackedWeights, down: &PackedWeights, eps: f64) -> Vec<f64> {
    let (d, f) = (down.n, down.k);
    let wg = gate_up.dequantize();
    let inv = 1.0 / (x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / d as f64 + eps).sqrt();
    let dot = |row: &[f32]| -> f64 { row.iter().zip(x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>() };
    let h: Vec<f64> = (0..f)
        .map(|i| {
            let g = inv * dot(&wg[i * d..(i + 1) * d]);
            let u = inv * dot(&wg[(f + i) * d..(f + i + 1) * d]);
            g / (1.0 + (-g).exp()) * u
        })
        .collect();
    let wd = down.dequantize();
    (0..d)
        .map(|r| f64::from(x[r]) + wd[r * f..(r + 1) * f].iter().zip(&h).map(|(a, b)| f64::from(*a) * b).sum::<f64>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::nvrtc::{early_dependent_loads, parse_ptxas};
    use super::*;

    #[test]
    fn grid_keeps_the_largest_share_and_uses_the_fewest_ctas() {
        // Llama-3.1-8B on an H100: 896 pieces, 7 per CTA.
        assert_eq!(grid(896, 132), (128, 7));
        // Llama-3.2-1B: 512 pieces, 4 per CTA.
        assert_eq!(grid(512, 132), (128, 4));
        assert_eq!(grid(96, 132), (96, 1));
        assert_eq!(grid(1792, 132), (128, 14));
        for (pieces, sms) in [(520usize, 132u32), (1184, 132), (7, 4), (1, 1)] {
            let (ctas, per) = grid(pieces, sms);
            assert!(ctas <= sms && ctas as usize * per >= pieces && (ctas as usize - 1) * per < pieces);
        }
    }

    #[test]
    fn every_ring_slot_belongs_to_one_row_group_and_the_cta_fits() {
        // Llama-3.1-8B on 132 SMs (7 pieces of 16 per CTA): 4 K slices x 4 row groups, 16 KB stages; 11 would
        // fit in the ring's 176 KB, 8 are used.
        let l = Layout::new(WoFormat::Int4G128, 4096, 112).unwrap();
        assert_eq!((l.warps, l.threads, l.stage, l.stages), (16, 544, 16384, 8));
        assert_eq!(l.smem, 8 * 16384 + 5 * 4096 + 32 * 112 * 5 + (4 * 2 * 112 + 112 + 7) * 4);
        // NF4 keeps the same 8 stages beside its 32 KB pair table.
        let l = Layout::new(WoFormat::Nf4, 4096, 112).unwrap();
        assert!(l.nf4_pairs && l.stages == 8);
        for (format, d) in FORMATS.iter().flat_map(|&f| (1024..=6144).step_by(1024).map(move |d| (f, d))) {
            for fs in [16, 112, 224, 448] {
                let Ok(l) = Layout::new(format, d, fs) else {
                    // Only wide CTAs of the widest models run out of shared memory (sooner with the larger
                    // scale tables of the per-32 and per-16 formats; Llama-3.1-8B's 112 values always fit).
                    let least = match format {
                        WoFormat::Int4G128 => 6144 * 224,
                        WoFormat::Nvfp4 => 2048 * 448,
                        _ => 4096 * 448,
                    };
                    assert!(d * fs >= least, "{format:?} hidden {d}, {fs} values per CTA refused");
                    continue;
                };
                let groups = l.warps as usize / (d / 1024);
                assert_eq!(l.threads, l.warps * 32 + 32);
                assert!(
                    l.stages >= groups && l.stages % groups == 0,
                    "hidden {d}: {} stages, {groups} groups",
                    l.stages
                );
                assert!(l.stages * l.stage <= RING_BYTES && l.stages <= 16, "hidden {d}");
                // NF4 takes its pair table wherever a ring of `groups` stages fits beside it.
                let rest = l.smem - l.stages * l.stage;
                let fits = rest + groups * l.stage + NF4_PAIR_TABLE_BYTES <= SMEM_BUDGET;
                assert_eq!(l.nf4_pairs, format == WoFormat::Nf4 && fits, "{format:?} hidden {d}, {fs}");
                let table = if l.nf4_pairs { NF4_PAIR_TABLE_BYTES } else { 0 };
                assert!(l.smem + table <= SMEM_BUDGET, "hidden {d}, {fs}: {} bytes", l.smem);
            }
        }
    }

    #[test]
    fn down_pieces_put_each_rows_piece_in_place() {
        let (d, f) = (3usize, 256usize);
        let codes: Vec<u8> = (0..d * f / 2).map(|i| (i * 7 % 251) as u8).collect();
        let out = down_pieces(&codes, d, f);
        for r in 0..d {
            for p in 0..f / PIECE {
                for b in 0..8 {
                    assert_eq!(out[(p * d + r) * 8 + b], codes[r * f / 2 + p * 8 + b]);
                }
            }
        }
    }

    #[test]
    fn unsupported_shapes_and_formats_say_why() {
        assert!(unsupported(WoFormat::Int4G128, XDtype::F16, 1, 4096, 14336).is_none());
        assert!(unsupported(WoFormat::Mxfp4, XDtype::F16, 1, 4096, 14336).is_none());
        assert!(unsupported(WoFormat::Fp16, XDtype::F16, 1, 4096, 14336).unwrap().contains("INT4"));
        assert!(unsupported(WoFormat::Nvfp4, XDtype::F16, 1, 4096, 14336).is_none());
        assert!(unsupported(WoFormat::Nf4, XDtype::F16, 1, 4096, 14336).is_none());
        assert!(unsupported(WoFormat::Int8, XDtype::F16, 1, 4096, 14336).unwrap().contains("NVFP4"));
        assert!(unsupported(WoFormat::Int4G128, XDtype::Bf16, 1, 4096, 14336).unwrap().contains("FP16"));
        assert!(unsupported(WoFormat::Int4G128, XDtype::F16, 2, 4096, 14336).unwrap().contains("batch of 2"));
        assert!(unsupported(WoFormat::Int4G128, XDtype::F16, 1, 4000, 14336).unwrap().contains("1024"));
        assert!(unsupported(WoFormat::Int4G128, XDtype::F16, 1, 4096, 14300).unwrap().contains("128"));
    }

    /// The kernel compiles for sm_90 without spills for the shapes the GPU tests run (skipped without NVRTC).
    #[test]
    fn ffn_kernel_compiles_without_spills() {
        if let Err(e) = nvrtc_available() {
            eprintln!("SKIPPED ffn_kernel_compiles_without_spills: {e}");
            return;
        }
        for (d, f) in [(4096usize, 14336usize), (3072, 8320), (1024, 28672), (2048, 1536), (5120, 13824), (6144, 16384)]
        {
            let per = grid(f / PIECE, 132).1;
            for format in FORMATS {
                let layout = Layout::new(format, d, per * PIECE).unwrap();
                let opts = ffn_options(90, format, d, f, per, &layout);
                let (cubin, log) = compile_cubin(&ffn_source(), "ffn_fused.cu", &opts)
                    .unwrap_or_else(|e| panic!("{format:?} {d}x{f}: {e}"));
                let (regs, spills, _) = parse_ptxas(&log);
                eprintln!("fused FFN {format:?} {d}x{f}: {regs:?} registers, {spills:?} spill bytes");
                assert_eq!(spills, Some(0), "{format:?} {d}x{f} spills:\n{log}");
                let early = early_dependent_loads(&cubin).unwrap_or_else(|e| panic!("{format:?} {d}x{f}: {e}"));
                assert!(early.as_ref().is_none_or(|l| l.is_empty()), "{format:?} {d}x{f}: {early:?}");
            }
        }
    }
}
