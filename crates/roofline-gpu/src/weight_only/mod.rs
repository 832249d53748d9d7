//! Weight-only low-bit GEMV / skinny GEMM, `y[M,N] = x[M,K] · W[N,K]^T` with M = 1..16, W stored in FP16,
//! BF16, FP8 E4M3 (per-channel), INT8 (per-channel), INT4 g128, NF4, MXFP4 or NVFP4, x and y in FP16 or
//! BF16, FP32 accumulation. Kernels: `kernels/weight_only_gemv.cu` (split-K), `kernels/weight_only_xreg.cu`
//! (x in registers, the default for 4-bit weights at M <= 2) and `kernels/weight_only_mma.cu` (tensor cores,
//! 4-bit at M >= 8), sharing `kernels/wo_common.cuh`; compiled by NVRTC at run time for the device
//! ([`nvrtc`]); weights packed on the host from roofline-quant's codecs ([`pack`](mod@pack)).
//!
//! Every CUDA-core launch uses programmatic dependent launch on sm_90+ ([`Tuning::pdl`]): the kernel's first
//! weight loads are issued before `griddepcontrol.wait`, so they overlap the previous kernel's tail (1-2.5 us
//! per call on the H100, bench/RESULTS.md session 4).
//!
//! # Kernel design (memory-bound decode on Hopper)
//!
//! * A warp owns `R` weight rows; lane `l` reads 16-byte chunks `l, l+32, ...` of each row, so every warp
//!   load instruction reads 512 contiguous bytes (coalesced) and each lane has `U x R` independent 16-byte
//!   loads in flight (`ld.global.nc.L1::no_allocate`, weights do not pollute L1).
//! * Scales are read once per chunk by the lanes that need them, in the same unrolled batch as the codes;
//!   block-scaled formats accumulate an unscaled partial per scale segment and apply the scale once.
//! * x is read with 16-byte `__ldg` (read-only path, L1/L2 resident: at most 16 x 14336 x 2 B, shared by
//!   every CTA on an SM), converted once per 8 elements and reused across the warp's `R` rows; staging
//!   it in shared memory would need K tiling at M = 16 (458 KB) and a barrier per tile.
//! * Decode: FP16 `cvt.f32.f16`; BF16 shifts; FP8 `cvt.rn.f16x2.e4m3x2` (sm_89+); INT8 `prmt` magic
//!   (2^23 + b); INT4 `lop3` into f16x2 magic 1024 + q, exact `sub/fma.f16x2` to q - zero; NF4 and E2M1
//!   via a 16-entry FP32 table in shared memory (byte offsets built with one shift + mask).
//! * Warp butterfly reduction; `SplitK` splits K over `gridDim.y` CTAs when the row tiles alone do not fill
//!   the SMs, adds partials atomically into an FP32 workspace, and the last CTA of a tile (per-tile counter)
//!   writes y and re-zeroes the workspace: one launch per call.
//!
//! # Known limits
//!
//! * The multiply-adds run on the FP32 CUDA cores (about 3 instructions per 4-bit weight at M = 1, well
//!   under the ~5.6 an H100 can issue per weight at 3 TB/s). At M = 16 a 4-bit weight needs 16 FMAs, more
//!   than the CUDA cores can issue at the memory roof, so M >= 8 will be compute-bound for 4-bit formats;
//!   a tensor-core (`mma.sync` m16n8k16, FP32 accumulate) variant with the weights pre-shuffled into the
//!   A-fragment layout is the next step if the issue's M = 16 criterion fails.
//! * x stays in L1/L2 rather than shared memory; at M = 16 and large K it may miss L1 (measure).

#[cfg(test)]
mod emulate;
pub mod ffn;
pub mod mma;
pub mod nvrtc;
pub mod pack;
pub mod ring;
mod spec;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::ffi::c_void;

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nvrtc::Ptx;
use half::{bf16, f16};
use roofline_core::{Format, Measurement};

pub use nvrtc::{compile, nvrtc_available, precompile, CompiledKernel, KernelKey, XDtype};
pub use pack::{pack, quantize_and_pack, quantize_pack, reference_tensor, PackedWeights, WoFormat};
pub use spec::{GemvOverride, GEMV_KEYS};

use crate::{random_f32, timing, Gpu, GpuError, TimingConfig, TimingStats};

/// How the work is spread over the GPU (try both on the device; see [`LaunchPlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Two rows per warp, and K split over extra CTAs when the row tiles would not fill every SM.
    SplitK,
    /// One row per warp, no split: many small warps, no atomics.
    RowPerWarp,
    /// Four rows per warp (x converted once per four rows), K split like `SplitK`.
    Rows4,
    /// Tensor cores (mma.sync m16n8k16, FP32 accumulate): 16 rows per warp; every weight format but BF16,
    /// with FP16 x only (weights repacked into fragment order on upload, see `mma.rs`).
    Mma,
    /// x in registers (`kernels/weight_only_xreg.cu`): a warp owns one K slice for all the rows of its CTA,
    /// block scales transposed so a step's rows share one load. For M with `M x C x EPC <= 64` (4-bit: M <=
    /// 2; 8-bit: M <= 4; 16-bit: M <= 8); larger M falls back to `SplitK`.
    XReg,
    /// Tensor cores with x stationary (`wo_mma_xs` in `kernels/weight_only_mma.cu`): a warp keeps x's B
    /// fragments for its K slice (`unroll` 64-K tiles) in registers and walks row tiles; weights in the
    /// `Mma` fragment layout. Every weight format but BF16, with FP16 x (others fall back to `SplitK`).
    XMma,
}

/// Most weight rows for which 8-bit weights at M = 1 take the x-in-registers kernel with cp.async stages
/// by default ([`LaunchPlan::xreg_stages_default`]); split-K above (measured faster at 28672 and 128256 rows).
pub const XREG_STAGED_MAX_N: usize = 16384;

/// Most rows of x (tokens) the weight-only kernels take: every kernel, workspace and server check is built
/// for M = 1..=`MAX_M`, the decode regime.
pub const MAX_M: usize = 16;

impl Variant {
    /// The fastest variant measured on the H100 for `m` rows of x (bench/RESULTS.md): tensor cores with x
    /// stationary for every weight format they take (all but BF16) with FP16 activations from M = 3 (4- and
    /// 8-bit weights from M = 2), x in registers for 4-bit weights at M = 1, split-K on CUDA cores otherwise.
    pub fn best(format: WoFormat, x: XDtype, m: usize) -> Variant {
        // M = 2 (session 19, `r11-nvfp4-m1.txt`, `r12-m2.txt`, us, x-stationary tensor cores vs x in
        // registers): INT4 14336x4096 15.5 vs 17.4, 4096x14336 16.9 vs 44.6, 128256x4096 113 vs 124; MXFP4
        // 17.1 vs 20.5, 19.3 vs 45.5, 124 vs 143; NVFP4 17.9 vs 20.3, 20.2 vs 47.3, 135 vs 145, 4096x4096
        // 7.47 vs 7.49; NF4 19.6 vs 19.2 and 145 vs 138 but 21.7 vs 44.3 (down_proj's shape: a net gain).
        // 8-bit M = 2 (session 27, `r3-m2.txt`, us, x-stationary tensor cores vs split-K, FP8 / INT8):
        // 1024x4096 4.02 / 4.21 vs 6.70 / 6.17, 4096x4096 8.11 / 8.52 vs 10.6 / 9.60, 14336x4096 22.6 / 23.0
        // vs 26.6 / 25.7, 4096x14336 23.5 / 23.8 vs 28.7 / 26.4, 128256x4096 177 / 178 vs 179 / 186.
        let tensor_from = if format.bits() <= 8 { 2 } else { 3 };
        if m >= tensor_from && mma::supports(format, x) {
            // Tensor cores with x stationary from M = 3 (H100 tuning tables, x14336x4096, us, XMma vs split-K):
            // INT4 M = 3 15.8 vs 33.9, M = 8 21.1 vs 31.6 (session 8); session 9: NF4 M = 3 19.3 vs 51.5,
            // M = 16 41.6 vs 152; FP8 / INT8 M = 3 22.7 vs 27.6 / 30.5, M = 16 44.0 vs 112; FP16 M = 3 42.3
            // vs 44.6, M = 16 54.5 vs 104.8. Above M = 8 (16-bit: from M = 8) it reduces after every row tile
            // (`Tuning::tile_reduce`; session 10: M = 16 INT4 30.9, FP16 44.4 us), 8-bit weights through
            // shared-memory atomics (`Tuning::atomic_reduce`: FP8 32.3, INT8 33.0 us). Session 11: above M = 8
            // INT4, MXFP4 and NF4 (and 8-bit weights and NVFP4 from K = 8192) stage x in shared memory and
            // stream row tiles along K instead (`Tuning::x_smem`, `LaunchPlan::x_smem_default`).
            Variant::XMma
        } else if format.bits() == 4 && m == 1 {
            // x in registers: 4-bit M = 1 is 20-45% faster than split-K on the H100 (INT4 1x14336x4096 14.8 vs
            // 18.7 us, 1x128256x4096 107 vs 140 us); 8- and 16-bit weights gain nothing there (bench/RESULTS.md).
            Variant::XReg
        } else {
            Variant::SplitK
        }
    }

    /// [`Variant::best`] for an `m x n x k` call: 8-bit weights at M = 1 take the x-in-registers kernel
    /// where its two-chunk plan covers all of K in one CTA ([`LaunchPlan::xreg_unroll`]; K = 14336,
    /// down_proj's shape), or where it streams its weights through cp.async stages
    /// ([`LaunchPlan::xreg_stages_default`]: N up to [`XREG_STAGED_MAX_N`]), split-K on CUDA cores elsewhere
    /// (H100, session 24, us, 1x4096x14336 x-in-registers vs split-K: FP8 22.4 vs 24.9, INT8 23.3 vs 26.5;
    /// 1x14336x4096 in two chunks 23.1 / 25.5 vs 22.7 / 23.2).
    pub fn best_for(format: WoFormat, x: XDtype, m: usize, n: usize, k: usize) -> Variant {
        if x == XDtype::F16 && LaunchPlan::xreg_stages_default(format, m, n, k) > 0 {
            Variant::XReg
        } else {
            Variant::best_in_step(format, x, m, k)
        }
    }

    /// [`Variant::best_for`] for a linear of a decode step (a CUDA graph of kernels chained by programmatic
    /// dependent launch), where the staged x-in-registers plan loses: its CTAs (over 100 KB of shared memory
    /// with 8-bit weights at K = 4096) cannot be resident beside the previous kernel's, so their weights
    /// start streaming only once it has left, while split-K's small CTAs have theirs in flight before
    /// `griddepcontrol.wait`. H100, session 29, Llama-3.1-8B FP8 batch 1 (bench/RESULTS.md): the graph step
    /// 3097 us on split-K against 3300-3304 staged, although each op timed alone was faster staged (qkv 12.1
    /// vs 11.8-11.9 us, o_proj 10.2 vs 9.45-9.57).
    pub fn best_in_step(format: WoFormat, x: XDtype, m: usize, k: usize) -> Variant {
        // Two chunks only where they make the plan one CTA over K (8-bit, M = 1; see xreg_unroll).
        if LaunchPlan::xreg_unroll(format, m, k) == 2 {
            Variant::XReg
        } else {
            Variant::best(format, x, m)
        }
    }
}

/// Overrides of the automatic launch plan (for tuning tables; `None` keeps the plan's choice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Split-K count.
    pub split_k: Option<u32>,
    /// 16-byte chunks (CUDA cores) or 64-K tiles (tensor cores) per lane in flight (1..=8).
    pub unroll: Option<u32>,
    /// Warps per CTA (4 or 8).
    pub warps: Option<u32>,
    /// Software pipelining (the next set of loads issued before the current set is decoded).
    pub pipeline: Option<bool>,
    /// CUDA cores without split-K: a grid of only the CTAs that fit on the GPU at once, each warp walking
    /// several row groups (no tail wave, and the next group's loads overlap the current group's end).
    pub persistent: Option<bool>,
    /// CTAs per SM the register allocation must allow (`__launch_bounds__` minimum blocks, 1..=16).
    pub min_blocks: Option<u32>,
    /// CUDA cores, M <= 4: x (as f32) and the block scales staged in shared memory once per CTA (`SX`).
    pub stage: Option<bool>,
    /// CUDA cores: each lane takes U consecutive chunks (whole scale groups, one scale load per group)
    /// instead of chunks 32 apart (`GRP`; U is raised to a multiple of the format's chunks per scale).
    pub grouped: Option<bool>,
    /// `XReg`: weight rows a warp takes per step (2, 4 or 8).
    pub rows: Option<u32>,
    /// `XReg` / `XMma`: weight rows per CTA (a multiple of 8, at most 512; `XMma` rounds up to whole 16-row
    /// tiles; default: about one wave of resident CTAs).
    pub rows_per_cta: Option<u32>,
    /// Programmatic dependent launch on sm_90+ (CUDA-core kernels; default on).
    pub pdl: Option<bool>,
    /// `XReg`: steps of weights per warp in flight through shared memory with `cp.async` (2..=6; needs 8
    /// rows per step), instead of loads into registers.
    pub stages: Option<u32>,
    /// `XMma`: the warps' partial sums reduced after every row tile through two row tiles of shared memory,
    /// so a CTA may take any number of row tiles (one wave at M = 16), instead of once at the end with every
    /// row tile's sums held (`TRED`; the shared memory then caps the row tiles per CTA).
    pub tile_reduce: Option<bool>,
    /// `XMma`: every warp adds its row tile's sums into one `[M][rows]` table in shared memory with atomics,
    /// reduced once at the end (one barrier per CTA instead of one per row tile; `TRED=2`). Takes precedence
    /// over `tile_reduce`.
    pub atomic_reduce: Option<bool>,
    /// `XMma`: x's columns of the CTA's K split staged in shared memory once and read with `ldmatrix`, each
    /// warp streaming whole row tiles along K with `unroll` weight tiles in flight and its sums in registers
    /// (`wo_mma_xk`, `XS=2`): no reduction across warps, no barrier per row tile. Takes precedence over the
    /// reductions above.
    pub x_smem: Option<bool>,
    /// `XReg` engine, INT4 g128, MXFP4 or NVFP4, M = 1, FP16 x, K a multiple of 1024, sm_90+: the ring kernel
    /// ([`ring`]: a producer warp streams the CTA's rows with bulk copies into a shared-memory ring)
    /// instead of the x-in-registers one (not with a norm beside an add or SwiGLU on load). Default: where
    /// each CTA takes at least [`ring::AUTO_MIN_STEPS`] row steps with a deep enough ring, or a long K
    /// ([`ring::auto`]: large N; [`ring::long_k`]: K >= 8192, e.g. down_proj).
    pub ring: Option<bool>,
    /// `XReg`, M = 1, 4-bit weights: x packed once in f16x2 pairs, each word of codes decoded to exact f16
    /// and multiplied in f16x2 (`XH`, the ring GEMV's arithmetic) instead of FP32 multiply-adds of decoded
    /// floats. Default: [`LaunchPlan::xh_default`]. Ignored by the other variants, batch sizes and with BF16
    /// x.
    pub xh: Option<bool>,
    /// `XMma` with x in shared memory ([`Tuning::x_smem`]), sm_90+: each warp's weight tiles and their
    /// scales streamed through its own ring of `stages` slots (2..=6) of `unroll` 64-K tiles in shared
    /// memory by bulk copies (`wo_mma_xb`, `XB`) instead of a ring of registers ([`LaunchPlan::xb_default_slots`]);
    /// one CTA of [`XB_WARPS`] warps per SM. Default: [`LaunchPlan::bulk_default`].
    pub bulk: Option<bool>,
    /// `XMma` with bulk rings ([`Tuning::bulk`]) in 2..=8 K splits: the splits of a row block launched as one
    /// thread-block cluster, their partial sums added through distributed shared memory (`CL`) instead of
    /// workspace atomics and a last-CTA pass. Default on where the cluster's parking table fits the shared
    /// memory and the clusters fit the GPU in one wave. Needs [`Tuning::balance`] (the table).
    pub cluster: Option<bool>,
    /// `XMma` with bulk rings ([`Tuning::bulk`]): a parking table in shared memory after the rings
    /// ([`LaunchPlan::park_bytes`]), through which the CTA's warps share its tiles evenly (each a stretch of
    /// whole slots, which may end inside a row tile, its sums added into the table) where owning whole row
    /// tiles would leave an eighth of them idle (`xb_balanced` in the kernel: 14 row tiles for 16 warps), and
    /// the K splits are summed in clusters ([`Tuning::cluster`]). Default on where the table fits; off, each
    /// warp owns whole row tiles and no clusters.
    pub balance: Option<bool>,
    /// `XMma` with bulk rings ([`Tuning::bulk`]) in one K split, sm_90+: the CTAs launched as pairs (clusters
    /// of two along N), each copying half of x's rows into both CTAs' shared memory at once (bulk-copy
    /// multicast), so x leaves L2 once per pair. Opt-in (only where the pairs all fit the GPU at once):
    /// correct, but slower on the H100 (session 21, M = 16, us, pairs vs not: INT4 14336x4096 17.8 vs 17.4,
    /// NF4 24.0 vs 22.6, 1024x4096 6.79 vs 6.16; the pair's start-up barrier and each CTA's copies of the
    /// other's rows outweigh the halved L2 reads).
    pub multicast: Option<bool>,
    /// NF4 on `XMma` with bulk rings ([`Tuning::bulk`]): copies (8, 16 or 32) of a shared-memory table of
    /// code pairs the decode looks its codes up in (`NF4_TAB`), 0 for the byte-permute decode in registers.
    /// Default: 32 copies, with slots of 2 tiles or 16 copies where the shared memory is short (the plan's
    /// `with_nf4_table`).
    pub nf4_table: Option<u32>,
}

impl Tuning {
    /// Checks the ranges the kernels and workspaces are built for.
    pub fn check(&self) -> Result<(), GpuError> {
        if let Some(u) = self.unroll {
            if !(1..=8).contains(&u) {
                return Err(GpuError::Unsupported(format!("unroll must be 1..=8, got {u}")));
            }
        }
        if let Some(w) = self.warps {
            if ![4, 8, 16].contains(&w) {
                return Err(GpuError::Unsupported(format!("warps per CTA must be 4, 8 or 16, got {w}")));
            }
        }
        if let Some(b) = self.min_blocks {
            if !(1..=16).contains(&b) {
                return Err(GpuError::Unsupported(format!("min_blocks must be 1..=16, got {b}")));
            }
        }
        if let Some(r) = self.rows {
            if ![2, 4, 8].contains(&r) {
                return Err(GpuError::Unsupported(format!("rows per step must be 2, 4 or 8, got {r}")));
            }
        }
        if let Some(r) = self.rows_per_cta {
            if r == 0 || r % 8 != 0 || r > XREG_MAX_RPC {
                return Err(GpuError::Unsupported(format!(
                    "rows per CTA must be a multiple of 8 in 8..={XREG_MAX_RPC}, got {r}"
                )));
            }
        }
        if let Some(st) = self.stages {
            if st != 0 && !(2..=6).contains(&st) {
                return Err(GpuError::Unsupported(format!("staged steps must be 0 or 2..=6, got {st}")));
            }
            if st != 0 && self.rows.is_some_and(|r| r != 8) {
                return Err(GpuError::Unsupported("staged loads take 8 rows per step".into()));
            }
        }
        if self.split_k == Some(0) {
            return Err(GpuError::Unsupported("split-K count must be at least 1".into()));
        }
        if let Some(c) = self.nf4_table {
            if ![0, 8, 16, 32, 64].contains(&c) {
                return Err(GpuError::Unsupported(format!("NF4 table copies must be 0, 8, 16, 32 or 64, got {c}")));
            }
        }
        Ok(())
    }
}

/// Most weight rows one `XReg` CTA takes (its partial sums: warps x M x rows floats of shared memory).
pub const XREG_MAX_RPC: u32 = 512;

/// Dynamic shared memory an `XMma` CTA may use for its warps' partial sums: the default 48 KB limit covers
/// static shared memory too (the fused norm's few floats), so 1 KB is left for it.
const XMMA_SMEM_BYTES: u32 = 47 * 1024;

/// Most dynamic shared memory an `XMma` CTA with x in shared memory ([`Tuning::x_smem`]) stages x in: two
/// such CTAs fit an SM (228 KB on Hopper), and the kernel opts in to this much whatever the call's K.
pub const XK_SMEM_BYTES: u32 = 96 * 1024;

/// Most dynamic shared memory a bulk-ring `XMma` CTA ([`Tuning::bulk`]) takes, x and rings together: one
/// CTA per SM, within Hopper's 227 KB per block less its static shared memory (mbarriers, norm factors).
pub const XB_SMEM_BYTES: u32 = 224 * 1024;

/// Most K splits one cluster of the clustered reduction takes ([`Tuning::cluster`]: 8, the portable cluster
/// size).
pub const MAX_CLUSTER_SPLITS: u32 = 8;

/// Warps of a bulk-ring `XMma` CTA ([`Tuning::bulk`]) unless tuned.
pub const XB_WARPS: u32 = 16;

/// Row tiles a CTA of NF4's bulk ring takes in one K split from which, where the 32-copy pair table leaves
/// the default slots no room beside all of x (M > 8, K = 4096), two K splits summed in a cluster go first:
/// half of x's columns leave room for slots of 4 tiles beside the table, instead of slots of 2 in one split.
/// H100, session 30 (us, one split / two, M = 16 / 12 / 9, N x 4096, row tiles a CTA in one split):
/// 1024 (1) 6.73 / 6.8-6.9; 4096 (2) 10.2 / 10.7, 9.8 / 10.4, 9.1 / 10.0; 6144 (3) 13.0 / 12.9, 12.4 / 12.7,
/// 11.2 / 11.9; 8192 (4) 15.3 / 14.7, 14.1 / 14.5, 13.4 / 13.8; 11008 (6) 19.2 / 18.0, 18.3 / 18.0, 17.3 /
/// 16.8; 14336 (7) 21.6 / 20.7, 20.9 / 20.4, 19.5 / 19.1; 28672 (14) 36.9 / 34.6-35.3, 35.3 / 34.7, 34.0 /
/// 32.4-33.1 (`bench/results/h100-2026-11-27-session30/r5-nf4s2.txt`).
pub const NF4_TWO_SPLITS_ROWS: u32 = 6;

/// The launch geometry of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Weight rows per warp (`R`).
    pub rows_per_warp: u32,
    /// 16-byte chunks per lane per row in flight (`U`).
    pub unroll: u32,
    /// Warps per CTA.
    pub warps: u32,
    /// CTAs along N.
    pub blocks_n: u32,
    /// CTAs along K (1 = no split).
    pub splits: u32,
    /// 16-byte chunks of a row (tensor cores: 64-K tiles) each split covers.
    pub chunks_per_split: u32,
    /// Software-pipelined loads (`PF`).
    pub pipeline: bool,
    /// Grid limited to the resident CTAs (CUDA cores, no split-K; see [`Tuning::persistent`]).
    pub persistent: bool,
    /// `__launch_bounds__` minimum CTAs per SM (`MINB`).
    pub min_blocks: u32,
    /// x and block scales staged in shared memory (`SX`; see [`Tuning::stage`]).
    pub stage: bool,
    /// Dynamic shared memory per CTA, bytes.
    pub smem_bytes: u32,
    /// Lanes take consecutive chunks (`GRP`; see [`Tuning::grouped`]).
    pub grouped: bool,
    /// The x-in-registers kernel ([`Variant::XReg`]): `rows_per_warp` is its rows per step, `unroll` its
    /// chunks per lane per row, `warps` its K slices per CTA, `chunks_per_split` the chunks of a CTA.
    pub xreg: bool,
    /// `XReg`: weight rows per CTA; `XMma`: 16-row tiles per CTA (the kernels' last argument).
    pub rows_per_cta: u32,
    /// Programmatic dependent launch requested (applied on sm_90+).
    pub pdl: bool,
    /// `XReg`: steps in flight through shared memory (0 = register loads).
    pub stages: u32,
    /// Compiled with the fusions of [`Fusion`] (`FUSE`); without, the kernels ignore their `flags`.
    pub fuse: bool,
    /// Compiled with SwiGLU on load ([`Fusion::silu_x`], `SILU`; with `fuse`): its x-load branch costs the
    /// other fused launches ~0.7 us when compiled in (INT4 o_proj 7.5 -> 8.1 us), so only the launches that
    /// use it get it.
    pub silu: bool,
    /// `XMma`: partial sums reduced after every row tile (see [`Tuning::tile_reduce`]).
    pub tile_reduce: bool,
    /// `XMma`: partial sums added with shared-memory atomics (see [`Tuning::atomic_reduce`]).
    pub atomic_reduce: bool,
    /// `XMma`: x in shared memory, row tiles streamed along K (see [`Tuning::x_smem`]).
    pub x_smem: bool,
    /// `XReg` at M = 1: f16x2 products (see [`Tuning::xh`]).
    pub xh: bool,
    /// `XMma` with x in shared memory: weights through shared-memory rings filled by bulk copies, `stages`
    /// slots per warp (see [`Tuning::bulk`]).
    pub bulk: bool,
    /// `XMma` with bulk rings in K splits: the splits of a row block are one cluster, reduced through
    /// distributed shared memory (see [`Tuning::cluster`]).
    pub cluster: bool,
    /// `XMma` with bulk rings: a parking table after the rings ([`LaunchPlan::park_bytes`], counted in
    /// `smem_bytes`; the kernel finds it by its dynamic shared memory), for warps sharing the CTA's tiles
    /// and for the clusters. Always with `cluster`. See [`Tuning::balance`].
    pub park: bool,
    /// `XMma` with bulk rings in one K split: x's copies shared by CTA pairs (clusters of two along N;
    /// `blocks_n` even). See [`Tuning::multicast`].
    pub multicast: bool,
    /// NF4 with bulk rings: copies of the code-pair table at the start of the dynamic shared memory (counted
    /// in `smem_bytes`), 0 for none. See [`Tuning::nf4_table`].
    pub nf4_table: u32,
}

impl LaunchPlan {
    /// The compiled kernel this plan launches for `format` weights, `x` activations, `m` rows of x and
    /// compute capability `arch` (major * 10 + minor).
    pub fn key(&self, format: WoFormat, x: XDtype, m: usize, arch: u32) -> KernelKey {
        KernelKey {
            format,
            x,
            m: m as u32,
            rows_per_warp: self.rows_per_warp,
            unroll: self.unroll,
            warps: self.warps,
            pipeline: self.pipeline,
            min_blocks: self.min_blocks,
            stage: self.stage,
            grouped: self.grouped,
            xreg: self.xreg,
            pdl: self.pdl && arch >= 90,
            stages: self.stages,
            fuse: self.fuse,
            silu: self.fuse && self.silu,
            tile_reduce: self.tile_reduce,
            atomic_reduce: self.atomic_reduce,
            x_smem: self.x_smem,
            // FP16 x only: with BF16 x (and y) the output's rounding already takes most of the 1e-3 the
            // results are held to, and f16 partial sums took INT4 1x1000x4096 past it (1.1e-3).
            xh: self.xh && x == XDtype::F16,
            bulk: self.bulk && self.x_smem && arch >= 90,
            cluster: self.cluster && self.bulk && self.x_smem && arch >= 90,
            multicast: self.multicast && self.bulk && self.x_smem && arch >= 90,
            nf4_table: if format == WoFormat::Nf4 && self.bulk && self.x_smem && arch >= 90 {
                self.nf4_table
            } else {
                0
            },
            arch,
        }
    }

    /// Whether [`Variant::XReg`] takes `m` rows of x in `format` with `chunks` 16-byte chunks per lane.
    pub fn xreg_fits(format: WoFormat, m: usize, chunks: u32) -> bool {
        m as u32 * chunks * (128 / format.bits() as u32) <= 64
    }

    /// Default 16-byte chunks per lane and row step of the `XReg` kernel: 1, except 8-bit weights at M = 1
    /// whose K needs more than 16 warps of one chunk (split-K) and at most 16 of two: 2, one CTA over all of
    /// K ("wide"). H100, session 24, us, 1x4096x14336 (down_proj) 2 chunks vs 1 (4 K splits): FP8 22.4 vs
    /// 24.9, INT8 23.3 vs 26.5; at 1x14336x4096 (8 warps of one chunk) 2 chunks lose (FP8 23.1 vs 22.7, INT8
    /// 25.5 vs 23.2), as they do for 4-bit weights at K = 14336 (a 14-warp CTA of one chunk already).
    pub fn xreg_unroll(format: WoFormat, m: usize, k: usize) -> u32 {
        let kc = (k * format.bits() / 128).max(1);
        let slices = |chunks: usize| kc.div_ceil(32 * chunks);
        if m == 1 && format.bits() == 8 && slices(1) > 16 && (9..=16).contains(&slices(2)) {
            2
        } else {
            1
        }
    }

    /// Rows per `XReg` CTA so that `ctas` CTAs (all resident at once) cover `n` rows in `splits` K splits.
    pub fn xreg_rows_per_cta(n: usize, splits: u32, ctas: u32) -> u32 {
        ((n * splits as usize).div_ceil(ctas.max(1) as usize).div_ceil(8) * 8).clamp(8, XREG_MAX_RPC as usize) as u32
    }

    /// Default cp.async stages of the `XReg` kernel ([`Tuning::stages`]): 3 for 8-bit weights at M = 1 with
    /// one chunk per lane (not the two-chunk plan of K = 14336) and N up to [`XREG_STAGED_MAX_N`], else 0
    /// (weights loaded into registers). H100, session 29 (bench/RESULTS.md), us, FP8 / INT8 at M = 1,
    /// 3 stages vs split-K: 1x1024x4096 3.85 / 3.90 vs 5.24-5.54 / 5.29-5.30, 1x6144x4096 10.8 / 10.7 vs
    /// 11.9-12.1 / 12.3, 1x14336x4096 22.4 / 22.2 vs 22.6 / 23.1-23.9, 1x4096x4096 8.76 / 8.76 vs 8.61-8.63 /
    /// 9.28-9.30; but 1x28672x4096 43.8 / 43.9 vs 42.1-42.4 / 42.8-43.0 and 1x128256x4096 191 vs 171 (2 and
    /// 4 stages were slower than 3 at every shape).
    pub fn xreg_stages_default(format: WoFormat, m: usize, n: usize, k: usize) -> u32 {
        let staged = format.bits() == 8 && m == 1 && n <= XREG_STAGED_MAX_N && Self::xreg_unroll(format, m, k) == 1;
        if staged {
            3
        } else {
            0
        }
    }

    /// `XMma` row tiles per CTA for `units` (row tiles x K splits) over about `target` resident CTAs, at most
    /// `cap`: one wave when it fits; when the cap (the partial sums' shared memory) forces more CTAs, whole
    /// waves of equal CTAs instead of a full wave and a short tail (FP16 8x14336x4096: 11 tiles per CTA made
    /// 1.24 waves, so 3 CTAs on some SMs and 2 on others).
    pub fn balanced_tiles_per_cta(units: u32, target: u32, cap: u32) -> u32 {
        let (target, cap) = (target.max(1), cap.max(1));
        let waves = units.div_ceil(target * cap).max(1);
        units.div_ceil(target * waves).clamp(1, cap)
    }

    /// [`LaunchPlan::balanced_tiles_per_cta`] for a grid of `ceil(row_tiles / tiles) x splits` CTAs: the
    /// row tiles of each K split dealt over `target / splits` CTAs, so the rounding per split cannot spill a
    /// few CTAs into a second wave (INT4 16x4096x14336, 7 splits: 14 tiles each made 19 x 7 = 133 CTAs for 132
    /// SMs; session 11).
    pub fn split_tiles_per_cta(row_tiles: u32, splits: u32, target: u32, cap: u32) -> u32 {
        Self::balanced_tiles_per_cta(row_tiles, (target / splits.max(1)).max(1), cap)
    }

    /// `XReg` with `rpc` rows per CTA (grid and shared memory follow).
    pub fn with_rows_per_cta(self, n: usize, m: usize, rpc: u32) -> LaunchPlan {
        let stage = Self::xreg_stage_bytes(self.rows_per_warp, self.unroll);
        LaunchPlan {
            rows_per_cta: rpc,
            blocks_n: (n as u32).div_ceil(rpc),
            smem_bytes: self.warps * m as u32 * rpc * 4 + self.warps * self.stages * stage,
            ..self
        }
    }

    /// `XReg` on exactly `blocks` CTAs along N (fewer when N has fewer row groups): the kernel deals the
    /// N / R row groups out evenly, so `rows_per_cta` is the largest share (rounded up to 8, the shared-memory
    /// stride of the partial sums). Falls back to [`LaunchPlan::with_rows_per_cta`] with the most rows a CTA
    /// takes when `blocks` CTAs cannot cover N.
    pub fn with_balanced_grid(self, n: usize, m: usize, blocks: u32) -> LaunchPlan {
        let units = (n as u32).div_ceil(self.rows_per_warp.max(1));
        let blocks = blocks.clamp(1, units.max(1));
        let rpc = (units.div_ceil(blocks) * self.rows_per_warp).div_ceil(8) * 8;
        if rpc > XREG_MAX_RPC {
            return self.with_rows_per_cta(n, m, XREG_MAX_RPC);
        }
        LaunchPlan { blocks_n: blocks, ..self.with_rows_per_cta(n, m, rpc) }
    }

    /// Whether the plan's kernel can compute SwiGLU as it loads x ([`Fusion::silu_x`]): the x-in-registers
    /// CUDA-core kernel, which loads x once per warp.
    pub fn takes_silu(&self) -> bool {
        self.xreg && self.rows_per_warp != nvrtc::MMA_ROWS
    }

    /// Shared memory of one `XReg` stage per warp (weights, scales, zero points: `STAGE_BYTES` in the kernel).
    pub fn xreg_stage_bytes(rows: u32, chunks: u32) -> u32 {
        rows * chunks * 512 + chunks * 512 + chunks * 128
    }

    /// Whether `XReg` at M = 1 multiplies in f16x2 by default ([`Tuning::xh`]; `wide`: one CTA over 9-16 K
    /// slices). H100, session 17, us, FP32 path vs f16x2 (`compare --weight-only --gemv variant=xreg,...`,
    /// bench/RESULTS.md): MXFP4 at every shape (1x4096x4096 5.94 vs 5.29, 1x6144x4096 7.25 vs 6.33,
    /// 1x4096x14336 17.9 vs 14.9, 1x128256x4096 108 vs 95.5); INT4 at N <= 4096 or one CTA over K
    /// (1x4096x4096 5.29 vs 4.97, 1x4096x14336 16.3 vs 14.2; 1x6144x4096 6.67 vs 8.49); NVFP4 but at N = K =
    /// 4096 (5.82 vs 6.96; 1x4096x14336 18.5 vs 16.6, 1x128256x4096 114 vs 109). NVFP4's fused-norm qkv
    /// (1x6144x4096) is faster alone in FP32 (7.29 vs 8.23; 8.7-8.8 vs 9.7 us in the Llama-3.1-8B step's
    /// per-op table), but the CUDA-graph step was faster with f16x2 in three runs each, on six machines
    /// (2264, 2273, 2315 us against 2309, 2311, 2354: it overlaps its neighbours better), so f16x2 there.
    /// NF4 decodes in f16x2 through a shared-memory table of the 256 code pairs, one copy per bank (32 KB,
    /// filled per CTA): faster with one CTA over K or a large N (1x4096x14336 18.3 vs 16.2, 1x128256x4096
    /// 109 vs 98.6), slower elsewhere (1x4096x4096 5.74 vs 7.95, 1x6144x4096 7.17 vs 11.6, 1x14336x4096
    /// 16.2 vs 23.3, 1x28672x4096 28.5 vs 29.7). INT4 from K = 8192 too (wherever `XReg` runs it:
    /// Llama-3-70B's LM head 1x128256x8192, session 32, 430 vs 299-301, MXFP4 252-253 either way; since
    /// session 33 the ring GEMV takes that shape by default, 193).
    pub fn xh_default(format: WoFormat, n: usize, k: usize, wide: bool) -> bool {
        match format {
            WoFormat::Mxfp4 => true,
            WoFormat::Nvfp4 => wide || n > 4096,
            WoFormat::Nf4 => wide || n >= 65536,
            WoFormat::Int4G128 => wide || n <= 4096 || k >= 8192,
            _ => false,
        }
    }

    /// Whether `XMma` stages x in shared memory by default ([`Tuning::x_smem`]; `bulk`: the weights may go
    /// through bulk-copy rings, [`Tuning::bulk`] on or by default, sm_90+): above M = 8 for INT4, MXFP4 and
    /// NF4; for FP8, INT8 and NVFP4 with bulk rings, without them only from K = 8192 (H100 tuning table,
    /// session 11, M = 16, us, x in shared memory vs the tile-reduced / atomic default: INT4 14336x4096 27.0 vs 29.4,
    /// 4096x14336 24.4 vs 31.3, 6144x4096 14.2 vs 16.1, 28672x4096 48.3 vs 53.9; MXFP4 28.1 vs 32.3, 25.7 vs
    /// 33.6; NF4 30.7 vs 33.7, 28.8 vs 34.9; FP8 4096x14336 30.5 vs 31.9, INT8 30.5 vs 33.0, NVFP4 30.8 vs 34.1;
    /// at K = 4096 FP8, INT8 and NVFP4 are as fast or faster reduced: FP8 31.4 vs 32.1, NVFP4 32.7 vs 34.7);
    /// with them at every K (session 18, 16x14336x4096, us, bulk rings vs the reduced default: FP8 28.9 vs
    /// 31.0, INT8 29.3 vs 31.7, NVFP4 31.5 vs 32.8; but see [`LaunchPlan::bulk_default`] for 8-bit weights).
    /// FP16 never (44.1 reduced, 46.1 with bulk rings).
    ///
    /// From M = 2 to 8 with bulk rings only (session 27, `r1-msweep.txt`, `r2-mshape.txt`, us, x in shared
    /// memory vs x stationary): NF4 from M = 3, and at M = 2 from 4096 x 4096 weights (its x-stationary
    /// decode is byte permutes, the bulk ring's a table: 8x14336x4096 15.5 vs 24.7, 2x14336x4096 14.9 vs
    /// 19.7, 8x128256x4096 108 vs 170, 3x1024x4096 5.06 vs 5.55, but 2x1024x4096 4.98 vs 4.29); INT4, MXFP4
    /// and NVFP4 from M = 6, and at M = 2 to 4 from 2 x 4096 x 4096 weights (INT4 8x14336x4096 15.1 vs 18.7,
    /// 2x14336x4096 14.1 vs 14.8, 4x4096x14336 15.8 vs 16.7, 8x28672x4096 26.8 vs 34.5, 6x1024x4096 4.93 vs
    /// 6.6, but 4x4096x4096 7.37 vs 6.64, 2x6144x4096 8.23 vs 7.86); FP8 and INT8 from M = 6 (FP8
    /// 8x14336x4096 23.3 vs 26.5, 6x6144x4096 11.9 vs 13.6, 8x28672x4096 44.0 vs 50.0; at M = 3 and 4 mixed:
    /// 4x14336x4096 22.5 vs 23.7 but 4x4096x14336 25.3 vs 24.5, 3x128256x4096 184 vs 179).
    pub fn x_smem_default(format: WoFormat, m: usize, n: usize, k: usize, bulk: bool) -> bool {
        let big = |times: usize| n * k >= times * 4096 * 4096;
        if m <= 8 {
            return m >= 2
                && bulk
                && match format {
                    WoFormat::Nf4 => m >= 3 || big(1),
                    WoFormat::Int4G128 | WoFormat::Mxfp4 | WoFormat::Nvfp4 => m >= 6 || big(2),
                    WoFormat::Fp8E4M3 | WoFormat::Int8 => m >= 6,
                    WoFormat::Fp16 | WoFormat::Bf16 => false,
                };
        }
        match format {
            WoFormat::Int4G128 | WoFormat::Mxfp4 | WoFormat::Nf4 => true,
            WoFormat::Fp8E4M3 | WoFormat::Int8 | WoFormat::Nvfp4 => bulk || k >= 8192,
            WoFormat::Fp16 | WoFormat::Bf16 => false,
        }
    }

    /// Whether `XMma` with x in shared memory streams its weights through bulk-copy rings by default
    /// ([`Tuning::bulk`]; the engine turns it off below sm_90): for the 4-bit formats (H100, session 18, M =
    /// 16, us, bulk rings vs registers, `r5-compare.txt`: 16x14336x4096 INT4 21.3 vs 25.5, MXFP4 22.5 vs
    /// 27.3, NF4 25.9 vs 30.3, NVFP4 31.7 vs 32.7; 16x4096x14336 INT4 20.7 vs 23.1, MXFP4 21.7 vs 24.6; the
    /// Llama-3.1-8B batch-16 step INT4 3793 vs 3575 tok/s, MXFP4 3686 vs 3145, NF4 3384 vs 2850, NVFP4 3083
    /// vs 3004). 8-bit weights from 6144x4096 (session 19, `r7-8bit.txt`, `r8-gateup.txt`, M = 16, us,
    /// bulk rings with the K splits summed in clusters vs the default before: FP8 14336x4096 25.5 vs 31.2,
    /// 28672x4096 47.8 vs 56.1 in 2 splits, 4096x14336 27.7 vs 29.1, 6144x4096 16.5 vs 17.1, but 4096x4096
    /// 14.9 vs 13.5; INT8 alike; session 18's slower FP8 batch-16 step came from gate_up in 8 splits, see
    /// `LaunchPlan::x_smem_plan`). FP16 is slower (46.1 vs 44.1).
    pub fn bulk_default(format: WoFormat, n: usize, k: usize) -> bool {
        match format.bits() {
            4 => true,
            8 => n * k > 4096 * 4096,
            _ => false,
        }
    }

    /// Tiles a bulk-ring slot holds and slots a warp keeps unless tuned: 2 KB of codes a slot (4-bit four
    /// tiles, 8-bit two, 16-bit one), two slots for 4-bit weights and four for 8-bit (session 18 tuning
    /// table `r3-tune-xb.txt`, 16x14336x4096, 16 warps, us: INT4 21.5 at 4 tiles x 2 slots, 22.5 x 3, 23.3 x
    /// 4, 22.7 at 8 tiles x 2; MXFP4 22.8 at 4 x 2, 24.8 at 8 x 2; FP8 28.7 at 2 x 4, 29.2 at 2 x 3, 30.0 at
    /// 2 x 2, 29.2 at 4 x 2; 8 warps 34-46).
    pub fn xb_default_slots(format: WoFormat) -> (u32, u32) {
        let qv = mma::words_per_tile(format) as u32;
        (4 / qv, if qv == 1 { 2 } else { 4 })
    }

    /// Dynamic shared memory of the bulk rings ([`Tuning::bulk`]): `warps` rings of `slots` slots, a slot
    /// holding up to `tiles` 64-K tiles of codes and their scale columns (INT4: `tiles / 2 + 1` columns of 64
    /// bytes, since a slot may start at an odd tile; NVFP4 64 bytes a tile, NF4 and MXFP4 32), rounded up to
    /// 128 bytes (`XB_SLOT` in the kernel).
    pub fn xb_ring_bytes(format: WoFormat, warps: u32, slots: u32, tiles: u32) -> u32 {
        let qv = mma::words_per_tile(format) as u32;
        let meta = match format {
            WoFormat::Int4G128 => (tiles / 2 + 1) * 64,
            WoFormat::Nvfp4 => tiles * 64,
            WoFormat::Nf4 | WoFormat::Mxfp4 => tiles * 32,
            _ => 0,
        };
        warps * slots * (tiles * qv * 512 + meta).div_ceil(128) * 128
    }

    /// `XMma` with x in shared memory ([`Tuning::x_smem`]): CTAs of 16 warps (two per SM; with
    /// [`Tuning::bulk`] one CTA of [`XB_WARPS`] per SM), `unroll` 64-K tiles in flight per warp (INT4, MXFP4,
    /// NF4 8; FP8, INT8, NVFP4 4; FP16 2; with bulk rings `stages` slots of 2 KB), one wave of CTAs. Where
    /// the bulk kernel's warps can share the CTA's tiles through the parking table ([`LaunchPlan::xb_shares`]),
    /// one or two K splits, whichever gives a warp the smaller share (a second split counted as two tiles).
    /// Otherwise a warp takes every `warps`-th row tile of its CTA over the CTA's K split, so its time is (row
    /// tiles per CTA / warps, rounded up) x (tiles per split + 2): the split count minimizes that over one
    /// wave, the fewest splits on a tie. Never fewer splits than x's columns need to fit the shared memory
    /// left ([`XK_SMEM_BYTES`], or what the rings leave of [`XB_SMEM_BYTES`]) nor splits under 8 tiles
    /// (session 11, M = 16, us: INT4 6144x4096 14.2 in 4 splits vs 23.3 in 2; FP8 4096x14336 30.5 in 8 vs 35.5
    /// in 5 and 40.6 in 9, where 3 of 16 warps took two row tiles).
    #[allow(clippy::too_many_arguments)]
    fn x_smem_plan(
        format: WoFormat,
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        tuning: Tuning,
        pdl: bool,
        min_blocks: u32,
    ) -> LaunchPlan {
        let bulk = tuning.bulk == Some(true); // resolved by `new`
        let (xb_tiles, xb_slots) = Self::xb_default_slots(format);
        let kt = (k / 64).max(1) as u32;
        let rows_x = (m as u32).div_ceil(8) * 8;
        let warps = tuning.warps.unwrap_or(if bulk { XB_WARPS } else { 16 });
        let slots = if bulk { tuning.stages.unwrap_or(xb_slots).max(2) } else { 0 };
        let tiles = tuning.unroll.unwrap_or(match format {
            _ if bulk => xb_tiles,
            WoFormat::Int4G128 | WoFormat::Mxfp4 | WoFormat::Nf4 => 8,
            WoFormat::Fp16 | WoFormat::Bf16 => 2,
            _ => 4,
        });
        // As many tiles a slot, then slots, as asked for while two slots a warp leave x room for 8 tiles of K.
        let x_least = rows_x * (8 * 64 + 8) * 2;
        let fits = |s: u32, t: u32| Self::xb_ring_bytes(format, warps, s, t) + x_least <= XB_SMEM_BYTES;
        let tiles = if bulk { (1..=tiles.max(1)).rev().find(|&t| fits(2, t)).unwrap_or(1) } else { tiles };
        let slots = (2..=slots.max(2)).rev().find(|&s| fits(s, tiles)).unwrap_or(2) * u32::from(bulk);
        let ring = if bulk { Self::xb_ring_bytes(format, warps, slots, tiles) } else { 0 };
        let x_budget = if bulk { XB_SMEM_BYTES.saturating_sub(ring) } else { XK_SMEM_BYTES };
        let most = ((x_budget / (rows_x * 2)).saturating_sub(8) / 64).max(1);
        let fewest = kt.div_ceil(most);
        let row_tiles = (n as u32).div_ceil(16);
        let target = if bulk { sm_count } else { sm_count * (16 / warps).max(1) };
        // row tiles per CTA when `s` splits share the wave
        let per_cta = |s: u32| row_tiles.div_ceil((target / s).max(1));
        // A warp's row tiles x (tiles per split + 2): a row tile's end (its sums stored or added into the
        // workspace, the ring crossing to the next row tile) costs about two tiles (session 19, M = 16, INT4
        // 28672x4096: 8 splits, 7 row tiles a warp of 8 tiles, 47.5 us; one split, one row tile of 64 tiles,
        // 32.8 us; counting tiles alone chose the 8 splits). Also where the warps share the CTA's tiles
        // (`park`): counting their shares instead chose more splits, each slower (session 20, INT4, us, M =
        // 16: 28672x4096 30.9 in 2 vs 28.3 in 1, 4096x14336 21.8 in 8 vs 19.2, 4096x4096 13.7 vs 11.8).
        let critical = |s: u32| per_cta(s).div_ceil(warps) * (kt.div_ceil(s) + 2);
        // the kernel rounds x's bytes up to 128 before the rings
        let x_bytes = |per_split: u32| rows_x * (per_split * 64 + 8) * 2;
        let x_ring =
            |per_split: u32| if bulk { x_bytes(per_split).div_ceil(128) * 128 + ring } else { x_bytes(per_split) };
        let table = |per_split: u32, rows: u32| Self::table_bytes(m, rows) + x_ring(per_split) <= XB_SMEM_BYTES;
        // Where the warps can share the CTA's tiles (the parking table fits, `xb_shares`), one or two splits:
        // the share of a warp (with each row tile's end as two tiles) plus two tiles a second split (its
        // cluster's barrier and sum). More splits only added their reduction (session 21, M = 16, us, 1 / 2
        // split(s) against session 19's rule: INT4 14336x4096 17.4 / 18.4 vs 18.6 in 2, 4096x4096 9.90 / 9.86
        // vs 11.7 in 8, 6144x4096 11.4 / 11.8 vs 13.3 in 5, 1024x4096 6.15 / 6.73 vs 8.15 in 8; MXFP4 and
        // NVFP4 alike; 3 to 8 splits went through the workspace: the H100 held all the clusters of two CTAs
        // only). Otherwise (x needs more splits, or no table) session 19's rule.
        let shared = |s: u32| {
            let (rows, per_split) = (per_cta(s), kt.div_ceil(s));
            (bulk && tuning.balance != Some(false) && table(per_split, rows) && Self::xb_shares(rows, warps))
                .then(|| ((rows * (per_split + 2)).div_ceil(warps) + 2 * (s - 1), s))
        };
        let auto = (fewest..=2.min(kt))
            .filter_map(shared)
            .min()
            .map(|(_, s)| s)
            .unwrap_or_else(|| (fewest..=(kt / 8).max(fewest)).min_by_key(|&s| (critical(s), s)).unwrap_or(fewest));
        let want = tuning.split_k.unwrap_or(auto).clamp(fewest, kt);
        let per_split = kt.div_ceil(want);
        let splits = kt.div_ceil(per_split);
        let rtpc = tuning.rows_per_cta.map_or_else(|| per_cta(splits), |r| r.div_ceil(16).max(1));
        let plan = LaunchPlan {
            chunks_per_split: per_split,
            smem_bytes: x_ring(per_split),
            x_smem: true,
            xh: false,
            bulk,
            stages: slots,
            ..Self::xmma_plan(tiles, warps, splits, row_tiles, rtpc, min_blocks, pdl)
        };
        // the parking table after the rings where it fits, and through it the clustered reduction of 2..=8
        // splits
        let park = plan.park_bytes(m);
        let plan = if bulk && tuning.balance.unwrap_or(true) && plan.smem_bytes + park <= XB_SMEM_BYTES {
            let cluster = tuning.cluster.unwrap_or(true) && (2..=MAX_CLUSTER_SPLITS).contains(&splits);
            LaunchPlan { park: true, cluster, smem_bytes: plan.smem_bytes + park, ..plan }
        } else {
            plan
        };
        // in one split, CTA pairs sharing x's copies where asked (an odd count of CTAs gets one without row
        // tiles)
        if bulk && splits == 1 && plan.blocks_n >= 2 && tuning.multicast == Some(true) {
            LaunchPlan { multicast: true, blocks_n: plan.blocks_n.next_multiple_of(2), ..plan }
        } else {
            plan
        }
    }

    /// `plan` (an `x_smem_plan`) with NF4's code-pair table in front where the bulk kernel takes one
    /// ([`Tuning::nf4_table`]; `relayout` plans again with other tuning): asked for, the most copies up to the
    /// count asked for that fit; by default 64 copies, else 32 (both conflict-free; with 64 a lookup's offset
    /// is one byte permute: H100, session 30, NF4 16x14336x4096 in two splits 20.8 -> 20.1-20.4 us,
    /// 16x11008x4096 18.0-18.1 -> 17.5-17.8, 8x4096x4096 8.28 -> 8.07-8.15, none slower), where the default
    /// slots leave no room for them in two K splits summed in a cluster (x's columns halved) if one split
    /// gives a CTA at least [`NF4_TWO_SPLITS_ROWS`] row tiles, else with slots of 2 tiles, else 16 copies,
    /// else none. H100, session 26, NF4 at M = 16, us, byte permutes / 16 copies / 8 copies / slots of 2 tiles
    /// and 32 copies: 14336x4096 22.8 / 21.5-21.7 / 25.1 / 21.8, 28672x4096 39.3-39.8 / (16 do not fit) / 43.0
    /// / 37.5, 4096x4096 11.3 / 10.7 / 11.7 / 10.3; 4096x14336 (32 copies beside the default slots) 25.2-25.5
    /// -> 22.0. The two splits: see [`NF4_TWO_SPLITS_ROWS`].
    fn with_nf4_table(
        format: WoFormat,
        plan: LaunchPlan,
        tuning: Tuning,
        relayout: impl Fn(Tuning) -> LaunchPlan,
    ) -> LaunchPlan {
        if format != WoFormat::Nf4 || !plan.bulk {
            return plan;
        }
        let with = |p: LaunchPlan, copies: u32| {
            let smem_bytes = p.smem_bytes + Self::nf4_table_bytes(copies);
            (smem_bytes <= XB_SMEM_BYTES).then_some(LaunchPlan { nf4_table: copies, smem_bytes, ..p })
        };
        // the conflict-free tables: 64 copies where they fit (a lookup's offset in one byte permute), else 32
        let free = |p: LaunchPlan| with(p, 64).or_else(|| with(p, 32));
        match tuning.nf4_table {
            Some(want) => [64, 32, 16, 8].into_iter().filter(|&c| c <= want).find_map(|c| with(plan, c)),
            None => free(plan)
                .or_else(|| {
                    (tuning.split_k.is_none() && plan.splits == 1 && plan.rows_per_cta >= NF4_TWO_SPLITS_ROWS)
                        .then(|| relayout(Tuning { split_k: Some(2), ..tuning }))
                        .filter(|p| p.splits == 2 && p.cluster)
                        .and_then(free)
                })
                .or_else(|| {
                    tuning.unroll.is_none().then(|| relayout(Tuning { unroll: Some(2), ..tuning })).and_then(free)
                })
                .or_else(|| with(plan, 16)),
        }
        .unwrap_or(plan)
    }

    /// Bytes of NF4's code-pair table with `copies` copies (`XB_TAB_BYTES` in the kernel): 256 f16x2 pairs each.
    pub fn nf4_table_bytes(copies: u32) -> u32 {
        256 * 4 * copies
    }

    /// The thread-block cluster this plan launches with (`(1, 1)`: none): its K splits along y with
    /// [`LaunchPlan::cluster`], CTA pairs along N with [`LaunchPlan::multicast`].
    pub fn cluster_dims(&self) -> (u32, u32) {
        if self.cluster {
            (1, self.splits)
        } else if self.multicast {
            (2, 1)
        } else {
            (1, 1)
        }
    }

    /// Whether the bulk kernel's warps share a CTA's `rows` row tiles (`xb_balanced` in the kernel, given the
    /// parking table): where owning whole row tiles would leave an eighth of the warps idle.
    pub fn xb_shares(rows: u32, warps: u32) -> bool {
        8 * rows <= 7 * rows.div_ceil(warps) * warps
    }

    /// Shared memory of this plan's parking table for `m` rows of x ([`LaunchPlan::park`], counted in
    /// `smem_bytes` when it has one): `[M][rows_per_cta x 16 + 4]` floats (`xb_park` in the kernel).
    pub fn park_bytes(&self, m: usize) -> u32 {
        Self::table_bytes(m, self.rows_per_cta)
    }

    /// A parking table's bytes for `m` rows of x and `rows` row tiles a CTA.
    fn table_bytes(m: usize, rows: u32) -> u32 {
        m as u32 * (rows * 16 + 4) * 4
    }

    /// This plan with the K splits reduced through the workspace instead of clusters (the parking table
    /// stays: the warps still share the CTA's tiles).
    pub fn without_cluster(self) -> LaunchPlan {
        LaunchPlan { cluster: false, ..self }
    }

    /// The fields both `XMma` kernels share: `rows_per_cta` row tiles per CTA (the kernels' last argument)
    /// in `splits` K splits, `unroll` tiles per warp; reductions off, no shared memory yet.
    fn xmma_plan(
        unroll: u32,
        warps: u32,
        splits: u32,
        row_tiles: u32,
        rows_per_cta: u32,
        min_blocks: u32,
        pdl: bool,
    ) -> LaunchPlan {
        LaunchPlan {
            rows_per_warp: nvrtc::MMA_ROWS,
            unroll,
            warps,
            blocks_n: row_tiles.div_ceil(rows_per_cta),
            splits,
            chunks_per_split: warps * unroll,
            pipeline: true,
            persistent: false,
            min_blocks,
            stage: false,
            smem_bytes: 0,
            grouped: false,
            xreg: true,
            rows_per_cta,
            pdl,
            stages: 0,
            fuse: false,
            silu: false,
            tile_reduce: false,
            atomic_reduce: false,
            x_smem: false,
            xh: false,
            bulk: false,
            cluster: false,
            park: false,
            multicast: false,
            nf4_table: 0,
        }
    }

    /// The plan for `m x n x k` in `format` on a GPU with `sm_count` SMs; `tuning` overrides its choices.
    pub fn new(
        variant: Variant,
        format: WoFormat,
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        tuning: Tuning,
    ) -> LaunchPlan {
        let warps = tuning.warps.unwrap_or(4);
        // Software pipelining pays for 16-bit weights (+2-6% at M = 1: little decode work to hide the loads
        // behind) and costs the decode-heavy formats registers and occupancy (-5-25%), per the tuning table.
        let pipeline = tuning.pipeline.unwrap_or(format.bits() == 16 && variant != Variant::Mma);
        let min_blocks = tuning.min_blocks.unwrap_or(1);
        let split_k = tuning.split_k;
        let pdl = tuning.pdl.unwrap_or(true) && variant != Variant::Mma;
        let chunks = tuning.unroll.unwrap_or_else(|| Self::xreg_unroll(format, m, k));
        if variant == Variant::XReg && Self::xreg_fits(format, m, chunks) {
            let kc = (k * format.bits() / 128).max(1) as u32;
            let slices = kc.div_ceil(32 * chunks);
            let stages = tuning.stages.unwrap_or_else(|| Self::xreg_stages_default(format, m, n, k));
            // M = 1 with 9..16 K slices (4-bit K = 14336: 14): 4 rows per step and one CTA over all of K, no
            // split-K (INT4 1x4096x14336 16.5 us vs 18.9 with 8 rows split in two, bench/RESULTS.md session
            // 4 tuning table; 8 rows with 14 warps capped the registers at 128 and spilled).
            let wide =
                m == 1 && stages == 0 && tuning.rows.is_none() && split_k.is_none() && (9..=16).contains(&slices);
            // Otherwise at most 8 warps (K slices) per CTA.
            let want = split_k.unwrap_or_else(|| if wide { 1 } else { slices.div_ceil(8) }).clamp(1, slices);
            // At most 16 warps per CTA whatever split-K was asked for (512 threads).
            let warps = slices.div_ceil(want).min(16);
            let splits = slices.div_ceil(warps);
            // M = 2, 4-bit: registers capped for 3 CTAs per SM (INT4 2x14336x4096 17.6 vs 21.6 us uncapped).
            // M = 1, 4-bit, 8 rows per step, N <= 4096 or N >= 65536: capped for 4 (126 instead of 162
            // registers). Session 7, INT4, same build: 1x128256x4096 97.2 vs 105.9 us, 1x4096x4096 5.23 vs 5.62
            // (o_proj with its residual add 6.28 vs 7.41 in the Llama step), but 1x28672x4096 26.8 vs 25.1 and
            // the fused qkv (6144 rows) 9.0 vs 7.4; 1x14336x4096 14.7 either way. With the next step's loads
            // prefetched (PF) the cap spills.
            let capped = !wide
                && tuning.rows.is_none_or(|r| r == 8)
                && tuning.pipeline != Some(true)
                && (n <= 4096 || n >= 65536);
            let min_blocks = tuning.min_blocks.unwrap_or(match (m, format.bits()) {
                (2, 4) => 3,
                (1, 4) if capped => 4,
                _ => 1,
            });
            let rows = if stages > 0 { 8 } else { tuning.rows.unwrap_or(if m <= 2 && !wide { 8 } else { 4 }) };
            // A first guess of about 20 resident warps per SM; `WeightOnlyGemv` refits the rows per CTA to the
            // kernel's real occupancy (one wave: with 1.3-1.6 waves the 4-bit kernels lost ~20%).
            let target = sm_count * (20 / warps).max(1);
            let rpc = tuning.rows_per_cta.unwrap_or_else(|| Self::xreg_rows_per_cta(n, splits, target));
            let plan = LaunchPlan {
                rows_per_warp: rows,
                unroll: chunks,
                warps,
                blocks_n: 0,
                splits,
                chunks_per_split: warps * 32 * chunks,
                pipeline: tuning.pipeline.unwrap_or(false),
                persistent: false,
                min_blocks,
                stage: false,
                smem_bytes: 0,
                grouped: false,
                xreg: true,
                rows_per_cta: 0,
                pdl,
                stages,
                fuse: false,
                silu: false,
                tile_reduce: false,
                atomic_reduce: false,
                x_smem: false,
                xh: m == 1 && format.bits() == 4 && tuning.xh.unwrap_or_else(|| Self::xh_default(format, n, k, wide)),
                bulk: false,
                cluster: false,
                park: false,
                multicast: false,
                nf4_table: 0,
            };
            return plan.with_rows_per_cta(n, m, rpc);
        }
        let bulk = tuning.bulk.unwrap_or_else(|| Self::bulk_default(format, n, k));
        if variant == Variant::XMma && tuning.x_smem.unwrap_or_else(|| Self::x_smem_default(format, m, n, k, bulk)) {
            let tuning = Tuning { bulk: Some(bulk), ..tuning };
            let layout = |t: Tuning| Self::x_smem_plan(format, m, n, k, sm_count, t, pdl, min_blocks);
            return Self::with_nf4_table(format, layout(tuning), tuning, layout);
        }
        if variant == Variant::XMma {
            let kt = (k / 64).max(1) as u32;
            // 4 k-tiles per warp; 2 above M = 8, where x's B fragments (8 registers per tile and 8 rows of
            // x) would otherwise spill at 16 warps (session 8 tuning table, bench/RESULTS.md). 8-bit weights
            // take the same (session 9, FP8 x14336x4096: M = 3 22.7 us at 4 tiles vs 26.0 at 2, M = 16 44.0 at
            // 2 vs 49.8 at 1); 16-bit tiles are 4 times the registers of 4-bit ones: 2 tiles at every M (FP16
            // M = 3 42.3 vs 46.1 at 1, M = 16 54.5 vs 61.4; 4 spills).
            let tiles = tuning.unroll.unwrap_or(if m > 8 || mma::words_per_tile(format) >= 4 { 2 } else { 4 });
            let slices = kt.div_ceil(tiles);
            // The warps' sums reduced after every row tile (one wave of CTAs, `tile_reduce`) above M = 8, and
            // from M = 8 for 16-bit weights (session 10 tuning table, x14336x4096, us, TRED vs not: M = 16
            // FP16 44.4 vs 49.4, FP8 34.3 vs 38.1, INT4 30.9 vs 35.4, NF4 34.4 vs 40.4; M = 8 FP16 43.4 vs
            // 45.1, 4- and 8-bit weights gain nothing at M = 8). Then CTAs of 16 warps (INT4 M = 16 30.9 vs
            // 33.7 us in 8).
            // 8-bit weights above M = 8 add the sums with shared-memory atomics instead (session 10, FP8, us,
            // atomics vs per-tile reduction: 16x14336x4096 32.1 vs 34.1, 16x4096x14336 31.3 vs 35.0; FP16,
            // INT4 and NF4 are as fast or faster per tile: FP16 47.8 vs 44.7, NF4 36.3 vs 34.2).
            let atomic_reduce = tuning.atomic_reduce.unwrap_or(m > 8 && mma::words_per_tile(format) == 2);
            let tile_reduce =
                !atomic_reduce && tuning.tile_reduce.unwrap_or(m > 8 || (m == 8 && mma::words_per_tile(format) >= 4));
            let per_cta = if (tile_reduce || atomic_reduce) && m > 8 { 16 } else { 8 };
            // M <= 4: up to 16 K slices in one CTA without split-K (INT4 x14336x4096: M = 1 15.4 vs 16.6 us
            // split in two, M = 3 15.8 vs 17.8, M = 4 16.1 vs 18.1); otherwise CTAs of 8 warps (M = 8 21.2 vs
            // 25.3 unsplit; 1x4096x14336 16.4 vs 18.5 in 14 warps).
            let want = split_k
                .unwrap_or_else(|| if slices <= 16 && m <= 4 { 1 } else { slices.div_ceil(per_cta) })
                .clamp(1, slices);
            let warps = slices.div_ceil(want).min(16);
            let splits = slices.div_ceil(warps);
            let row_tiles = (n as u32).div_ceil(16);
            // About 16 resident warps per SM: one wave of CTAs; row tiles per CTA in 1..=32.
            let target = sm_count * (16 / warps).max(1);
            // The warps' partial sums ([warps][M][rtpc x 16 + 4] floats, `wo_mma_xs`) stay within the default
            // 48 KB of dynamic shared memory: at M = 16 and 16 warps that is 2 row tiles per CTA (asking for
            // more failed to launch).
            // Reduced after every row tile (`tile_reduce`), they take two row tiles' worth at any count.
            let max_rtpc = if tile_reduce {
                32
            } else if atomic_reduce {
                // one [M][rows + 4] table for the whole CTA
                ((XMMA_SMEM_BYTES / (m as u32 * 4)).saturating_sub(4) / 16).clamp(1, 32)
            } else {
                ((XMMA_SMEM_BYTES / (warps * m as u32 * 4)).saturating_sub(4) / 16).clamp(1, 32)
            };
            let rtpc = tuning.rows_per_cta.map_or_else(
                || Self::split_tiles_per_cta(row_tiles, splits, target, max_rtpc),
                |r| r.div_ceil(16).min(max_rtpc),
            );
            return LaunchPlan {
                smem_bytes: if atomic_reduce {
                    m as u32 * (rtpc * 16 + 4) * 4
                } else {
                    warps * m as u32 * (if tile_reduce { 2 * (16 + 4) } else { rtpc * 16 + 4 }) * 4
                },
                tile_reduce,
                atomic_reduce,
                ..Self::xmma_plan(tiles, warps, splits, row_tiles, rtpc, min_blocks, pdl)
            };
        }
        if variant == Variant::Mma {
            let qv = mma::words_per_tile(format) as u32;
            let unroll = tuning.unroll.unwrap_or((if m <= 8 { 4 } else { 2 } / qv).max(1));
            let kt = (k / 64).max(1) as u32;
            let blocks_n = (n as u32).div_ceil(16).div_ceil(warps).max(1);
            let want = match split_k {
                Some(s) => s,
                None if blocks_n >= 2 * sm_count => 1,
                None => (4 * sm_count).div_ceil(blocks_n),
            };
            let splits = want.clamp(1, (kt / unroll).max(1));
            let tiles_per_split = kt.div_ceil(splits);
            let splits = kt.div_ceil(tiles_per_split);
            return LaunchPlan {
                rows_per_warp: nvrtc::MMA_ROWS,
                unroll,
                warps,
                blocks_n,
                splits,
                chunks_per_split: tiles_per_split,
                pipeline,
                persistent: false,
                min_blocks,
                stage: false,
                smem_bytes: 0,
                grouped: false,
                xreg: false,
                rows_per_cta: 0,
                pdl: false,
                stages: 0,
                fuse: false,
                silu: false,
                tile_reduce: false,
                atomic_reduce: false,
                x_smem: false,
                xh: false,
                bulk: false,
                cluster: false,
                park: false,
                multicast: false,
                nf4_table: 0,
            };
        }
        let (rows_per_warp, unroll) = match variant {
            // U = 2 at M <= 8: on the H100 tuning table (tests/weight_only_gpu.rs `tune_table`, bench/RESULTS.md)
            // it beats U = 4 by 3-20% at M = 1 for every format (fewer registers, more resident warps).
            Variant::SplitK | Variant::XReg | Variant::XMma => (2, if m <= 8 { 2 } else { 1 }),
            Variant::RowPerWarp => (1, if m <= 8 { 4 } else { 2 }),
            Variant::Rows4 | Variant::Mma => {
                if m <= 4 {
                    (4, 2)
                } else {
                    (2, 1)
                }
            }
        };
        let grouped = tuning.grouped.unwrap_or(false);
        let cpg = format.chunks_per_scale();
        let unroll = tuning.unroll.unwrap_or(unroll);
        let unroll = if grouped { unroll.div_ceil(cpg) * cpg } else { unroll };
        let kc = (k * format.bits() / 128).max(1) as u32;
        let blocks_n = (n as u32).div_ceil(warps * rows_per_warp).max(1);
        let want = match (variant, split_k) {
            (_, Some(s)) => s,
            (Variant::RowPerWarp, None) => 1,
            (_, None) if blocks_n >= 2 * sm_count => 1,
            (_, None) => (4 * sm_count).div_ceil(blocks_n),
        };
        // Staging x and the scales in shared memory (`SX`): on the H100 it pays for NF4 only (+8-14% at M = 1;
        // INT4 within noise, MXFP4/NVFP4 slower: bench/RESULTS.md), so it is on by default for NF4 at M <= 4.
        // The K range of a CTA is then limited so that x fits in 40 KB.
        let stage = m <= 4 && format.block_scaled() && tuning.stage.unwrap_or(format == WoFormat::Nf4);
        let epc = (128 / format.bits()) as u32;
        let x_bytes_per_chunk = m as u32 * (epc + 4) * 4;
        let max_cps = if stage { ((40 * 1024 / x_bytes_per_chunk) / 32 * 32).max(32) } else { u32::MAX };
        let want = want.max(kc.div_ceil(max_cps));
        // Every split gets at least one full unrolled pass of the warp (32 * U chunks).
        let max_splits = (kc / (32 * unroll)).max(1);
        let splits = want.clamp(1, max_splits.max(kc.div_ceil(max_cps)));
        let chunks_per_split = kc.div_ceil(splits).div_ceil(32) * 32;
        let splits = kc.div_ceil(chunks_per_split);
        let smem_bytes = if stage {
            let metas = warps * rows_per_warp * chunks_per_split.div_ceil(cpg);
            chunks_per_split * x_bytes_per_chunk + metas * format.meta_bytes()
        } else {
            0
        };
        let persistent = tuning.persistent.unwrap_or(false) && splits == 1 && !stage;
        LaunchPlan {
            grouped,
            stage,
            smem_bytes,
            rows_per_warp,
            unroll,
            warps,
            blocks_n,
            splits,
            chunks_per_split,
            pipeline,
            persistent,
            min_blocks,
            xreg: false,
            rows_per_cta: 0,
            pdl,
            stages: 0,
            fuse: false,
            silu: false,
            tile_reduce: false,
            atomic_reduce: false,
            x_smem: false,
            xh: false,
            bulk: false,
            cluster: false,
            park: false,
            multicast: false,
            nf4_table: 0,
        }
    }
}

/// A loaded kernel with its compiler report and how many of its CTAs fit on one SM.
#[derive(Clone)]
struct Loaded {
    function: CudaFunction,
    compiled: Arc<CompiledKernel>,
    resident: u32,
}

/// Packed weights rearranged for one engine's kernels ([`WeightOnlyGemv::stage`]), ready to upload.
#[derive(Debug)]
pub struct StagedWeights<'a> {
    packed: &'a PackedWeights,
    variant: Variant,
    /// Codes in tensor-core fragment order (`mma_layout`) or in the CUDA-core kernels' E2M1 layout
    /// ([`pack::device_codes`]); `None`: the packed order.
    codes: Option<Vec<u8>>,
    mma_layout: bool,
    xscales: Vec<u8>,
    xzeros: Vec<u8>,
    /// The ring GEMV's step-major tables where its build for this shape streams the scales
    /// ([`ring::streams_scales`], `pack::ring_step_tables`).
    ring_tables: Option<(Vec<u8>, Vec<u8>)>,
}

/// Weights on the GPU, with the split-K workspace of their shape.
pub struct DeviceWeights {
    /// Format.
    pub format: WoFormat,
    /// Output channels.
    pub n: usize,
    /// Reduction length.
    pub k: usize,
    /// Bytes the kernel reads for the weights (codes + scales + zero points).
    pub bytes: usize,
    /// Codes in the tensor-core fragment layout (uploaded for [`Variant::Mma`]).
    pub mma_layout: bool,
    codes: CudaSlice<u8>,
    scales: CudaSlice<u8>,
    zeros: CudaSlice<u8>,
    /// Block scales and zero points transposed for the `XReg` kernel (see [`pack::xreg_tables`]).
    xscales: CudaSlice<u8>,
    xzeros: CudaSlice<u8>,
    global_scale: f32,
    /// Whether `xscales` / `xzeros` hold the x-in-registers tables (`pack::xreg_tables`).
    xreg_tables: bool,
    /// The ring GEMV's step-major scale and zero-point tables (`pack::ring_step_tables`), where its build for
    /// this shape streams the scales with the weights.
    ring_tables: Option<(CudaSlice<u8>, CudaSlice<u8>)>,
    workspace: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

/// What a ring kernel build does around W x: its epilogue and what W multiplies.
type RingOp = (ring::Epilogue, ring::Input);

/// The buffers of [`DeviceWeights`] the ring-streaming kernels read.
pub(crate) struct RingBuffers<'a> {
    /// Codes, row-major.
    pub codes: &'a CudaSlice<u8>,
    /// Block scales, transposed (`pack::xreg_tables`).
    pub scales: &'a CudaSlice<u8>,
    /// INT4 zero points, transposed.
    pub zeros: &'a CudaSlice<u8>,
    /// NVFP4's FP32 tensor scale (1 otherwise).
    pub global_scale: f32,
}

impl DeviceWeights {
    /// What the ring-streaming kernels read: the codes row-major, the x-in-registers scale and zero-point
    /// tables and NVFP4's tensor scale (1 otherwise); `None` where the weights were staged for another engine.
    pub(crate) fn ring_buffers(&self) -> Option<RingBuffers<'_>> {
        self.xreg_tables.then_some(RingBuffers {
            codes: &self.codes,
            scales: &self.xscales,
            zeros: &self.xzeros,
            global_scale: self.global_scale,
        })
    }
}

/// A weight-only GEMV engine for one format and activation type on one GPU; kernels are compiled on first
/// use (once per process and architecture) and loaded once per engine.
pub struct WeightOnlyGemv {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: u32,
    sm_count: u32,
    /// Most dynamic shared memory a CTA may opt in to on this GPU, bytes.
    smem_optin: u32,
    /// Weight format.
    pub format: WoFormat,
    /// x / y element type.
    pub x: XDtype,
    /// Work distribution.
    pub variant: Variant,
    /// Overrides of the automatic launch plan.
    pub tuning: Tuning,
    functions: Mutex<HashMap<KernelKey, Loaded>>,
    /// Ring-streaming kernels built so far, per shape and epilogue ([`Tuning::ring`]).
    rings: Mutex<HashMap<(usize, usize, RingOp), Arc<ring::RingGemv>>>,
    /// Clusters of a clustered-reduction kernel resident at once, per kernel, K splits and shared memory.
    clusters: Mutex<HashMap<(KernelKey, u32, u32), u32>>,
}

impl WeightOnlyGemv {
    /// An engine for `format` weights and `x` activations on `gpu` (variant [`Variant::SplitK`]).
    pub fn new(gpu: &Gpu, format: WoFormat, x: XDtype) -> Result<WeightOnlyGemv, GpuError> {
        let (major, minor) = gpu.compute_capability;
        let arch = (major * 10 + minor) as u32;
        if arch < format.min_arch() {
            return Err(GpuError::Unsupported(format!(
                "{} weight-only kernel needs compute capability {}.{} or newer; {} is {major}.{minor}",
                format.format(),
                format.min_arch() / 10,
                format.min_arch() % 10,
                gpu.name
            )));
        }
        nvrtc_available()?;
        let optin = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
        Ok(WeightOnlyGemv {
            smem_optin: gpu.ctx.attribute(optin)? as u32,
            ctx: gpu.ctx.clone(),
            stream: gpu.stream.clone(),
            arch,
            sm_count: gpu.sm_count,
            format,
            x,
            variant: Variant::SplitK,
            tuning: Tuning::default(),
            functions: Mutex::new(HashMap::new()),
            rings: Mutex::new(HashMap::new()),
            clusters: Mutex::new(HashMap::new()),
        })
    }

    /// The same engine with another work distribution (`Mma` where unsupported falls back to `SplitK`).
    pub fn with_variant(mut self, variant: Variant, split_k: Option<u32>) -> WeightOnlyGemv {
        let tensor = matches!(variant, Variant::Mma | Variant::XMma);
        self.variant = if tensor && !mma::supports(self.format, self.x) { Variant::SplitK } else { variant };
        self.tuning.split_k = split_k;
        self
    }

    /// The same engine with plan overrides (checked: see [`Tuning::check`]).
    pub fn with_tuning(mut self, tuning: Tuning) -> Result<WeightOnlyGemv, GpuError> {
        tuning.check()?;
        self.tuning = tuning;
        Ok(self)
    }

    /// The launch plan of an `m x n x k` call before the kernel is loaded (see [`WeightOnlyGemv::launch_plan`]).
    pub fn plan(&self, m: usize, n: usize, k: usize) -> LaunchPlan {
        let mut tuning = self.tuning;
        if self.arch < 90 {
            tuning.bulk = Some(false); // bulk copies and mbarrier waits are sm_90+
        }
        if self.arch < 80 && tuning.stages.is_none() {
            tuning.stages = Some(0); // cp.async is sm_80+: no default stages before it
        }
        LaunchPlan::new(self.variant, self.format, m, n, k, self.sm_count, tuning)
    }

    /// The plan of an `m x n x k` call with `fusion` (the fused build of [`WeightOnlyGemv::plan`]).
    fn fused_plan(&self, m: usize, n: usize, k: usize, fusion: Fusion) -> LaunchPlan {
        LaunchPlan { fuse: fusion != Fusion::default(), silu: fusion.silu_x, ..self.plan(m, n, k) }
    }

    /// The kernels `calls` (`m x n x k` with a fusion each) will launch, for compiling them ahead of time
    /// ([`nvrtc::precompile`], in parallel; the launches then find them in the process's cache).
    pub fn kernel_keys(&self, calls: &[(usize, usize, usize, Fusion)]) -> Vec<KernelKey> {
        calls.iter().map(|&(m, n, k, f)| self.key(m, &self.fused_plan(m, n, k, f))).collect()
    }

    /// Whether an `m x n x k` call can take [`Fusion::silu_x`] (see [`LaunchPlan::takes_silu`]).
    pub fn fuses_silu(&self, m: usize, n: usize, k: usize) -> bool {
        self.plan(m, n, k).takes_silu()
    }

    /// The plan a call launches: [`WeightOnlyGemv::plan`] with the `XReg` rows per CTA refitted to the
    /// loaded kernel's occupancy, so the grid is exactly one wave (unless fixed by [`Tuning::rows_per_cta`]).
    pub fn launch_plan(&self, m: usize, n: usize, k: usize) -> Result<LaunchPlan, GpuError> {
        Ok(self.fit(m, n, self.plan(m, n, k))?.0)
    }

    fn fit(&self, m: usize, n: usize, plan: LaunchPlan) -> Result<(LaunchPlan, Loaded), GpuError> {
        let plan = self.fit_cluster(m, plan)?;
        let loaded = self.function(m, &plan)?;
        if !plan.xreg || plan.rows_per_warp == nvrtc::MMA_ROWS || self.tuning.rows_per_cta.is_some() {
            return Ok((plan, loaded));
        }
        let ctas = loaded.resident * self.sm_count;
        let rpc = LaunchPlan::xreg_rows_per_cta(n, plan.splits, ctas);
        if rpc < 64 {
            // Few rows per CTA: rounding to 8 rows costs more than a partial second wave (INT4 1x4096x4096
            // 6.2 us fitted vs 5.7 us with the first guess's 512 CTAs).
            return Ok((plan, loaded));
        }
        // Exactly one wave, the rows dealt out evenly (INT4 1x28672x4096: 359 CTAs of 80 rows on 396 slots
        // left 37 SMs a CTA short).
        let fitted = plan.with_balanced_grid(n, m, (ctas / plan.splits).max(1));
        // More shared memory per CTA can lower the occupancy it was fitted to: keep the first plan then.
        let resident = loaded.function.occupancy_max_active_blocks_per_multiprocessor(
            fitted.warps * 32,
            fitted.smem_bytes as usize,
            None,
        )?;
        Ok((if resident >= loaded.resident { fitted } else { plan }, loaded))
    }

    /// `plan` without its clusters (the clustered reduction, [`Tuning::cluster`], or the CTA pairs,
    /// [`Tuning::multicast`]) where they would not all be resident at once (a second wave of clusters would
    /// double the call).
    fn fit_cluster(&self, m: usize, plan: LaunchPlan) -> Result<LaunchPlan, GpuError> {
        let dims = plan.cluster_dims();
        if dims == (1, 1) || self.arch < 90 {
            return Ok(plan);
        }
        let key = self.key(m, &plan);
        let id = (key, dims.0 * dims.1, plan.smem_bytes);
        let cached = self
            .clusters
            .lock()
            .map_err(|_| GpuError::Unsupported("cluster table lock poisoned".into()))?
            .get(&id)
            .copied();
        let resident = match cached {
            Some(r) => r,
            None => {
                let f = self.function(m, &plan)?.function;
                let r =
                    max_active_clusters(&self.stream, &f, (plan.warps * 32, 1, 1), plan.smem_bytes, dims).unwrap_or(0);
                self.clusters
                    .lock()
                    .map_err(|_| GpuError::Unsupported("cluster table lock poisoned".into()))?
                    .insert(id, r);
                r
            }
        };
        Ok(if resident * dims.0 >= plan.blocks_n {
            plan
        } else if plan.multicast {
            LaunchPlan { multicast: false, ..plan }
        } else {
            plan.without_cluster()
        })
    }

    /// The ring kernel's epilogue and input where [`Tuning::ring`] takes this call (`None`: the other kernels).
    fn ring_epilogue(&self, m: usize, n: usize, k: usize, fusion: Fusion) -> Option<RingOp> {
        let wanted = match self.tuning.ring {
            Some(r) => r,
            None => ring::auto(self.format, n, k, self.sm_count),
        };
        let takes = wanted
            && self.variant == Variant::XReg
            && ring::unsupported(self.format, 1, n, k, self.sm_count).is_none()
            && self.x == XDtype::F16
            && m == 1
            && self.arch >= 90
            && k % 1024 == 0
            && !(fusion.norm_eps.is_some() && (fusion.add_into_y || fusion.silu_x));
        let input = if fusion.silu_x { ring::Input::SwiGlu } else { ring::Input::X };
        let epilogue = match (fusion.norm_eps, fusion.add_into_y) {
            (Some(_), _) => ring::Epilogue::Norm,
            (None, true) => ring::Epilogue::Add,
            (None, false) => ring::Epilogue::Store,
        };
        takes.then_some((epilogue, input))
    }

    /// The ring kernel for `n x k` with `op`, built on first use.
    fn ring(&self, n: usize, k: usize, op: RingOp) -> Result<Arc<ring::RingGemv>, GpuError> {
        let mut rings =
            self.rings.lock().map_err(|_| GpuError::Unsupported("ring kernel table lock poisoned".into()))?;
        if let Some(r) = rings.get(&(n, k, op)) {
            return Ok(r.clone());
        }
        let r =
            Arc::new(ring::RingGemv::build(&self.ctx, &self.stream, self.arch, self.sm_count, self.format, n, k, op)?);
        rings.insert((n, k, op), r.clone());
        Ok(r)
    }

    fn key(&self, m: usize, plan: &LaunchPlan) -> KernelKey {
        plan.key(self.format, self.x, m, self.arch)
    }

    /// Compiles (if needed) and loads the kernel for `m` rows; returns the compiler report.
    pub fn prepare(&self, m: usize, n: usize, k: usize) -> Result<Arc<CompiledKernel>, GpuError> {
        Ok(self.function(m, &self.plan(m, n, k))?.compiled)
    }

    fn function(&self, m: usize, plan: &LaunchPlan) -> Result<Loaded, GpuError> {
        if plan.smem_bytes > self.smem_optin {
            return Err(GpuError::Unsupported(format!(
                "this launch plan needs {} bytes of shared memory per CTA, above the {} this GPU allows; ask for \
                 fewer `stages`, `unroll` or `rows_per_cta` (--gemv; the plan has {} warps, {} stages, unroll {}, {} \
                 rows per CTA)",
                plan.smem_bytes, self.smem_optin, plan.warps, plan.stages, plan.unroll, plan.rows_per_cta
            )));
        }
        let key = self.key(m, plan);
        let mut fns = self.functions.lock().map_err(|_| GpuError::Unsupported("kernel table lock poisoned".into()))?;
        if let Some(f) = fns.get(&key) {
            return Ok(f.clone());
        }
        let compiled = compile(&key)?;
        let module = self.ctx.load_module(Ptx::from_binary(compiled.cubin.clone()))?;
        let function = module.load_function(key.entry())?;
        if plan.x_smem {
            // The staged x grows with K per split: opt in to the most any call of this kernel stages (with
            // bulk rings, x and rings together).
            let most = if key.bulk { XB_SMEM_BYTES } else { XK_SMEM_BYTES }.min(self.smem_optin);
            function.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                most as i32,
            )?;
        } else if plan.smem_bytes > 48 * 1024 {
            // Above 48 KB of dynamic shared memory a kernel must opt in (staged XReg: 2 CTAs of 76 KB per SM).
            let stage = LaunchPlan::xreg_stage_bytes(key.rows_per_warp, key.unroll);
            let most = (key.warps * key.m * XREG_MAX_RPC * 4 + key.warps * key.stages * stage)
                .max(plan.smem_bytes)
                .min(self.smem_optin);
            function.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                most as i32,
            )?;
        }
        let resident = function
            .occupancy_max_active_blocks_per_multiprocessor(plan.warps * 32, plan.smem_bytes as usize, None)?
            .max(1);
        let loaded = Loaded { function, compiled, resident };
        fns.insert(key, loaded.clone());
        Ok(loaded)
    }

    /// CTAs along N actually launched: all of them, or with [`LaunchPlan::persistent`] only as many as
    /// fit on the GPU at once (the kernel's warps then walk several row groups each).
    pub fn grid_n(&self, m: usize, plan: &LaunchPlan) -> Result<u32, GpuError> {
        if !plan.persistent || plan.splits > 1 {
            return Ok(plan.blocks_n);
        }
        Ok(self.grid_for(plan, self.function(m, plan)?.resident))
    }

    fn grid_for(&self, plan: &LaunchPlan, resident: u32) -> u32 {
        if plan.persistent && plan.splits == 1 {
            plan.blocks_n.min(resident * self.sm_count)
        } else {
            plan.blocks_n
        }
    }

    /// Uploads packed weights and allocates their split-K workspace (zeroed).
    pub fn upload(&self, p: &PackedWeights) -> Result<DeviceWeights, GpuError> {
        self.upload_staged(&self.stage(p)?)
    }

    /// `p` in the host layout this engine's kernels read (tensor-core fragment order, transposed or paired
    /// scale tables), to upload any number of times with [`WeightOnlyGemv::upload_staged`]: a model's layers
    /// of one shape are rearranged once instead of once per layer.
    pub fn stage<'a>(&self, p: &'a PackedWeights) -> Result<StagedWeights<'a>, GpuError> {
        if p.format != self.format {
            return Err(GpuError::Unsupported(format!(
                "weights are {} but this engine runs {}",
                p.format.format(),
                self.format.format()
            )));
        }
        p.format.check_k(p.k)?;
        let mma_layout = matches!(self.variant, Variant::Mma | Variant::XMma);
        let codes = if mma_layout { Some(mma::repack(p)?) } else { pack::device_codes(p) };
        // The x-in-registers kernel reads transposed scale tables; an XReg engine falls back to the split-K
        // kernel for larger M, so it keeps both (the scales are ~3% of the weight bytes).
        // XMma reads the scales of rows g and g + 8 side by side (`mma::xs_meta`).
        let (xscales, xzeros) = match self.variant {
            Variant::XReg => pack::xreg_tables(p),
            Variant::XMma => (mma::xs_meta(p), Vec::new()),
            _ => (Vec::new(), Vec::new()),
        };
        // Where the ring GEMV takes this shape with its scales streamed beside each slot, it reads them
        // step-major (one bulk copy a slot): a third copy of the scales, for those shapes only.
        let ring_tables = (self.variant == Variant::XReg && ring::streams_scales(p.format, p.n, p.k, self.sm_count))
            .then(|| pack::ring_step_tables(p.format, p.n, p.k, &xscales, &xzeros))
            .flatten();
        Ok(StagedWeights { packed: p, variant: self.variant, codes, mma_layout, xscales, xzeros, ring_tables })
    }

    /// Uploads weights staged by this engine ([`WeightOnlyGemv::stage`]).
    pub fn upload_staged(&self, st: &StagedWeights) -> Result<DeviceWeights, GpuError> {
        let p = st.packed;
        if p.format != self.format || st.variant != self.variant {
            return Err(GpuError::Unsupported(format!(
                "weights were staged for {} on {:?}, this engine runs {} on {:?}",
                p.format.format(),
                st.variant,
                self.format.format(),
                self.variant
            )));
        }
        let up = |v: &[u8]| upload_table(&self.stream, v);
        Ok(DeviceWeights {
            format: p.format,
            n: p.n,
            k: p.k,
            bytes: p.bytes(),
            mma_layout: st.mma_layout,
            codes: up(st.codes.as_deref().unwrap_or(&p.codes))?,
            scales: up(&p.scales)?,
            zeros: up(&p.zeros)?,
            xscales: up(&st.xscales)?,
            xzeros: up(&st.xzeros)?,
            global_scale: p.global_scale,
            xreg_tables: st.variant == Variant::XReg && !st.mma_layout,
            ring_tables: match &st.ring_tables {
                Some((s, z)) => Some((up(s)?, up(z)?)),
                None => None,
            },
            workspace: self.stream.alloc_zeros::<f32>(MAX_M * p.n)?,
            counters: self.stream.alloc_zeros::<u32>(p.n.div_ceil(4) + 1)?,
        })
    }

    /// Quantizes `n x k` f32 weights with the format's codec (FP16: a cast), packs and uploads them.
    pub fn upload_f32(&self, w: &[f32], n: usize, k: usize) -> Result<DeviceWeights, GpuError> {
        self.upload(&quantize_and_pack(self.format, w, n, k)?.0)
    }

    /// Packs and uploads a roofline-quant tensor.
    pub fn upload_quantized(&self, q: &roofline_quant::QuantizedTensor) -> Result<DeviceWeights, GpuError> {
        self.upload(&pack(q)?)
    }

    /// The engine's stream (what [`WeightOnlyGemv::run`] launches on).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Copies x/y element bits (FP16 or BF16, as `self.x`) to a new device buffer.
    pub fn htod(&self, v: &[u16]) -> Result<CudaSlice<u16>, GpuError> {
        Ok(self.stream.clone_htod(v)?)
    }

    /// Copies a device buffer back (waits for the stream).
    pub fn dtoh(&self, v: &CudaSlice<u16>) -> Result<Vec<u16>, GpuError> {
        Ok(self.stream.clone_dtoh(v)?)
    }

    /// `y[m, N] = x[m, K] · W^T` on the engine's stream; x and y hold FP16 or BF16 bits (`self.x`).
    pub fn run(
        &self,
        w: &mut DeviceWeights,
        x: &CudaSlice<u16>,
        y: &mut CudaSlice<u16>,
        m: usize,
    ) -> Result<(), GpuError> {
        self.run_on(&self.stream, w, x, y, m)
    }

    /// [`WeightOnlyGemv::run`] on another stream of the same context (a stream being captured into a CUDA
    /// graph, say). Calls on one `DeviceWeights` must not overlap: its split-K workspace is shared.
    pub fn run_on(
        &self,
        stream: &Arc<CudaStream>,
        w: &mut DeviceWeights,
        x: &CudaSlice<u16>,
        y: &mut CudaSlice<u16>,
        m: usize,
    ) -> Result<(), GpuError> {
        self.run_fused(stream, w, x, y, m, Fusion::default())
    }

    /// [`WeightOnlyGemv::run_on`] with the fusions of [`Fusion`]: an RMSNorm of x, a residual add into y,
    /// SwiGLU as x is loaded.
    pub fn run_fused(
        &self,
        stream: &Arc<CudaStream>,
        w: &mut DeviceWeights,
        x: &CudaSlice<u16>,
        y: &mut CudaSlice<u16>,
        m: usize,
        fusion: Fusion,
    ) -> Result<(), GpuError> {
        let (n, k) = (w.n, w.k);
        if let Some(eps) = fusion.norm_eps {
            if !(eps.is_finite() && eps > 0.0) {
                return Err(GpuError::Unsupported(format!("the fused RMSNorm needs eps > 0, got {eps}")));
            }
        }
        if !(1..=MAX_M).contains(&m) {
            return Err(GpuError::Unsupported(format!("weight-only kernels take M = 1..{MAX_M} rows of x, not {m}")));
        }
        // With SwiGLU on load, x is the gate_up row: 2K values per row.
        let xk = if fusion.silu_x { 2 * k } else { k };
        if x.len() < m * xk || y.len() < m * n {
            return Err(GpuError::Unsupported(format!(
                "x holds {} values (needs M x {} = {}), y holds {} (needs M x N = {})",
                x.len(),
                if fusion.silu_x { "2K" } else { "K" },
                m * xk,
                y.len(),
                m * n
            )));
        }
        if n > i32::MAX as usize || k > i32::MAX as usize {
            return Err(GpuError::Unsupported(format!("N = {n} and K = {k} must fit in 32 bits")));
        }
        if let Some(ep) = self.ring_epilogue(m, n, k, fusion) {
            let ring = self.ring(n, k, ep)?;
            let tables = if ring.streamed_scales {
                let (scales, zeros) = w.ring_tables.as_ref().ok_or_else(|| {
                    GpuError::Unsupported(format!(
                        "the {n}x{k} ring GEMV streams its scales from step-major tables, which these weights were \
                         uploaded without (upload them with this engine)"
                    ))
                })?;
                ring::ScaleTables { scales, zeros, step_major: true }
            } else {
                ring::ScaleTables { scales: &w.xscales, zeros: &w.xzeros, step_major: false }
            };
            return ring.launch(
                stream,
                &w.codes,
                tables,
                w.global_scale,
                x,
                y,
                fusion.norm_eps.unwrap_or(0.0),
                // Programmatic dependent launch as the plan's CUDA-core kernels take it.
                self.plan(m, n, k).pdl && self.arch >= 90,
            );
        }
        let plan = self.fused_plan(m, n, k, fusion);
        if fusion.silu_x && (!plan.takes_silu() || fusion.norm_eps.is_some()) {
            return Err(GpuError::Unsupported(format!(
                "SwiGLU on load needs the x-in-registers kernel without a fused norm (this launch: {:?}, {m}x{n}x{k})",
                self.variant
            )));
        }
        let (plan, loaded) = self.fit(m, n, plan)?;
        if w.mma_layout != matches!(self.variant, Variant::Mma | Variant::XMma) {
            return Err(GpuError::Unsupported(format!(
                "weights were uploaded for the {} kernel, this engine runs {:?}",
                if w.mma_layout { "tensor-core" } else { "CUDA-core" },
                self.variant
            )));
        }
        let (f, grid_n) = (loaded.function, self.grid_for(&plan, loaded.resident));
        // The last argument: chunks per split (split-K kernel) or rows per CTA (x-in-registers kernel).
        let last = if plan.xreg { plan.rows_per_cta } else { plan.chunks_per_split };
        let (mut n_i, mut k_i, mut last_i) = (n as i32, k as i32, last as i32);
        // The x-in-registers kernels read their own scale tables (see `upload`).
        let (scales, zeros) = if plan.xreg { (&w.xscales, &w.xzeros) } else { (&w.scales, &w.zeros) };
        let mut gscale = w.global_scale;
        let (mut codes_p, _g0) = w.codes.device_ptr(stream);
        let (mut scales_p, _g1) = scales.device_ptr(stream);
        let (mut zeros_p, _g2) = zeros.device_ptr(stream);
        let (mut x_p, _g3) = x.device_ptr(stream);
        let (mut y_p, _g4) = y.device_ptr_mut(stream);
        let (mut ws_p, _g5) = w.workspace.device_ptr_mut(stream);
        let (mut cnt_p, _g6) = w.counters.device_ptr_mut(stream);
        let mut flags = fusion.flags();
        let mut eps = fusion.norm_eps.unwrap_or(0.0);
        let mut params: [*mut c_void; 13] = [
            (&raw mut codes_p).cast(),
            (&raw mut scales_p).cast(),
            (&raw mut zeros_p).cast(),
            (&raw mut gscale).cast(),
            (&raw mut x_p).cast(),
            (&raw mut y_p).cast(),
            (&raw mut ws_p).cast(),
            (&raw mut cnt_p).cast(),
            (&raw mut n_i).cast(),
            (&raw mut k_i).cast(),
            (&raw mut last_i).cast(),
            (&raw mut flags).cast(),
            (&raw mut eps).cast(),
        ];
        let pdl = plan.pdl && self.arch >= 90;
        let grid = (grid_n, plan.splits, 1);
        // With the clustered reduction the K splits of a row block are one cluster (the grid's y); with x
        // multicast CTA pairs along N.
        let cluster = if self.arch >= 90 { plan.cluster_dims() } else { (1, 1) };
        // SAFETY: the parameters match `wo_gemv` / `wo_xreg` / `wo_mma` / `wo_mma_xs` (same signature:
        // ..., int n_rows, int k, int last, int flags, float eps) in order and type,
        // each pointing at a local that lives until the launch returns; codes hold N*K*bits/8 bytes (checked
        // by `pack`), scales/zeros hold the tables the format and kernel read (or 16 dummy bytes), x and y
        // hold at least M*K and M*N elements (checked above), the workspace holds MAX_M*N floats (M <= MAX_M) and
        // the counters one per CTA along N (blocks_n <= ceil(N / 4)), all zero between calls. The guards
        // `_g*` keep the buffers' stream ordering until the launch is queued. PDL is requested only for
        // kernels compiled with it (their `griddepcontrol.wait` precedes every access to x, y and workspace);
        // a clustered plan's grid is a whole number of clusters (all its splits).
        unsafe {
            launch_cluster_ex(stream, &f, grid, (plan.warps * 32, 1, 1), plan.smem_bytes, pdl, cluster, &mut params)
        }
    }
}

/// What a weight-only launch fuses around `y = x W^T` (all off by default).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fusion {
    /// RMSNorm of x with this epsilon: y = rsqrt(mean(x\[m\]^2) + eps) x W^T, the norm's weight folded into W
    /// by the caller (W diag(g), as QuaRot and SpinQuant fold it); every CTA computes the row norms itself.
    pub norm_eps: Option<f32>,
    /// Residual add: y += x W^T (y is read, then overwritten).
    pub add_into_y: bool,
    /// SwiGLU on load: x is a gate_up row [M, 2K] (gate, then up) and the kernel multiplies
    /// silu(gate) * up as it loads x. Only the x-in-registers kernel ([`Variant::XReg`] plans) takes it,
    /// and not together with `norm_eps`; see [`WeightOnlyGemv::fuses_silu`].
    pub silu_x: bool,
}

impl Fusion {
    /// The kernels' `flags` argument (`FUSE_NORM` = 1, `FUSE_ADD` = 2, `FUSE_SILU` = 4 in `wo_splitk.cuh`).
    fn flags(self) -> i32 {
        i32::from(self.norm_eps.is_some()) | (i32::from(self.add_into_y) << 1) | (i32::from(self.silu_x) << 2)
    }
}

/// A weight table on the device; an empty one (no scales, no zero points) becomes 16 zero bytes, so every
/// kernel argument is a valid pointer.
pub(crate) fn upload_table(stream: &Arc<CudaStream>, v: &[u8]) -> Result<CudaSlice<u8>, cudarc::driver::DriverError> {
    if v.is_empty() {
        stream.alloc_zeros::<u8>(16)
    } else {
        stream.clone_htod(v)
    }
}

/// Launches `f` on `stream` with `cuLaunchKernelEx`, with the programmatic-stream-serialization attribute
/// when `pdl` (the kernel may then start while the previous kernel in the stream finishes).
///
/// # Safety
/// `params` must point at one live value per kernel parameter, of the kernel's parameter types, and every
/// buffer the kernel touches must be valid for the launch's lifetime on `stream`.
pub(crate) unsafe fn launch_ex(
    stream: &CudaStream,
    f: &CudaFunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    pdl: bool,
    params: &mut [*mut c_void],
) -> Result<(), GpuError> {
    // SAFETY: forwarded; no cluster.
    unsafe { launch_cluster_ex(stream, f, grid, block, smem, pdl, (1, 1), params) }
}

/// [`launch_ex`] with thread-block clusters of `cluster.0 x cluster.1` CTAs (sm_90+; (1, 1) = no cluster
/// attribute). The grid must be a multiple of the cluster in both dimensions.
///
/// # Safety
/// As [`launch_ex`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch_cluster_ex(
    stream: &CudaStream,
    f: &CudaFunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    pdl: bool,
    cluster: (u32, u32),
    params: &mut [*mut c_void],
) -> Result<(), GpuError> {
    stream.context().bind_to_thread()?;
    let (mut attrs, n) = launch_attrs(pdl, cluster);
    let config = sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: stream.cu_stream(),
        attrs: if n > 0 { attrs.as_mut_ptr() } else { std::ptr::null_mut() },
        numAttrs: n as u32,
    };
    // SAFETY: `config` and `attrs` live through the call; `f` is a loaded function of this context; the
    // caller guarantees `params`.
    unsafe { sys::cuLaunchKernelEx(&config, f.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }.result()?;
    Ok(())
}

/// The launch attributes of [`launch_cluster_ex`] and how many of them are set.
fn launch_attrs(pdl: bool, cluster: (u32, u32)) -> ([sys::CUlaunchAttribute; 2], usize) {
    // SAFETY: an all-zero CUlaunchAttribute is a valid value (id 0 = ignore, zeroed union).
    let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let mut n = 0;
    if pdl {
        attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[n].value.programmaticStreamSerializationAllowed = 1;
        n += 1;
    }
    if cluster.0 * cluster.1 > 1 {
        attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim =
            sys::CUlaunchAttributeValue_union__bindgen_ty_1 { x: cluster.0, y: cluster.1, z: 1 };
        n += 1;
    }
    (attrs, n)
}

/// How many clusters of `cluster.0 x cluster.1` (>= 2) CTAs of `f` with this block and dynamic shared memory can
/// be resident on the GPU at once (0: the cluster cannot be scheduled; an error: the size is not allowed).
pub(crate) fn max_active_clusters(
    stream: &CudaStream,
    f: &CudaFunction,
    block: (u32, u32, u32),
    smem: u32,
    cluster: (u32, u32),
) -> Result<u32, GpuError> {
    if cluster.0 * cluster.1 < 2 {
        return Err(GpuError::Unsupported(format!("a cluster of {cluster:?} CTAs is no cluster")));
    }
    stream.context().bind_to_thread()?;
    let (mut attrs, _) = launch_attrs(false, cluster);
    let config = sys::CUlaunchConfig {
        gridDimX: cluster.0,
        gridDimY: cluster.1,
        gridDimZ: 1,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: stream.cu_stream(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: 1,
    };
    let mut clusters: std::ffi::c_int = 0;
    // SAFETY: `config` and `attrs` live through the call; `f` is a loaded function of this context.
    unsafe { sys::cuOccupancyMaxActiveClusters(&mut clusters, f.cu_function(), &config) }.result()?;
    Ok(u32::try_from(clusters).unwrap_or(0))
}

/// Output of [`Gpu::measure_weight_only`].
#[derive(Debug, Clone)]
pub struct WeightOnlyMeasurement {
    /// Weight format.
    pub format: Format,
    /// x / y type.
    pub x: XDtype,
    /// Shape.
    pub m: usize,
    /// Output channels.
    pub n: usize,
    /// Reduction length.
    pub k: usize,
    /// Timing of one call (CUDA events, rotating weight sets).
    pub stats: TimingStats,
    /// Bytes one call moves: packed weights + scales + zero points + x + y.
    pub bytes: u64,
    /// `bytes / median time`, GB/s.
    pub bandwidth_gb_s: f64,
    /// Relative error (Frobenius) against the f64 CPU reference of the same quantized weights.
    pub rel_error: f64,
    /// Launch geometry used.
    pub plan: LaunchPlan,
    /// Registers per thread and spill bytes reported by ptxas.
    pub registers: Option<u32>,
    /// Spill bytes reported by ptxas (should be 0).
    pub spill_bytes: Option<u32>,
    /// Rotating weight sets used to defeat the L2.
    pub sets: usize,
    /// Description of the kernel.
    pub kernel: String,
    /// Per launch, the launches replayed from a CUDA graph (`timing::time_graph`; with
    /// `TimingConfig::graph`).
    pub graph: Option<TimingStats>,
}

impl WeightOnlyMeasurement {
    /// As the project's [`Measurement`] (FLOPs `2 M N K`, bytes as moved by this kernel, no power samples).
    pub fn to_measurement(&self, device: &str) -> Measurement {
        let flops = 2.0 * (self.m * self.n * self.k) as f64;
        Measurement {
            device: device.to_string(),
            time_us: self.stats.median_us,
            time_us_min: self.stats.min_us,
            time_us_max: self.stats.max_us,
            runs: self.stats.runs,
            tflops: flops / (self.stats.median_us * 1e6),
            bandwidth_gb_s: self.bandwidth_gb_s,
            kernel: self.kernel.clone(),
            power: None,
            graph_us: self.graph.map(|g| g.median_us),
        }
    }
}

/// Options of [`Gpu::measure_weight_only_with`].
#[derive(Debug, Clone, Copy)]
pub struct WeightOnlyOptions {
    /// x / y type.
    pub x: XDtype,
    /// Work distribution (`None`: [`Variant::best`] for the shape).
    pub variant: Option<Variant>,
    /// Overrides of the automatic launch plan (split-K, unroll, warps, pipelining).
    pub tuning: Tuning,
    /// Largest relative error accepted against the CPU reference.
    pub tolerance: f64,
}

impl Default for WeightOnlyOptions {
    fn default() -> Self {
        WeightOnlyOptions { x: XDtype::F16, variant: None, tuning: Tuning::default(), tolerance: 1e-3 }
    }
}

fn to_bits(x: XDtype) -> fn(f32) -> u16 {
    match x {
        XDtype::F16 => |v| f16::from_f32(v).to_bits(),
        XDtype::Bf16 => |v| bf16::from_f32(v).to_bits(),
    }
}

fn from_bits(x: XDtype) -> fn(u16) -> f32 {
    match x {
        XDtype::F16 => |b| f16::from_bits(b).to_f32(),
        XDtype::Bf16 => |b| bf16::from_bits(b).to_f32(),
    }
}

/// Relative error (Frobenius) of `y` (output bits) against the f64 reference `x · W^T` over the rows of W
/// in `rows`; the reference is rounded to the output type first, so only the kernel's error counts.
#[allow(clippy::too_many_arguments)]
pub fn reference_error(
    x: &[f32],
    w: &[f32],
    y: &[u16],
    m: usize,
    n: usize,
    k: usize,
    rows: &[usize],
    xt: XDtype,
) -> Result<f64, GpuError> {
    let (to, from) = (to_bits(xt), from_bits(xt));
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for i in 0..m {
        for &j in rows {
            let acc: f64 = (0..k).map(|l| f64::from(x[i * k + l]) * f64::from(w[j * k + l])).sum();
            let got = f64::from(from(y[i * n + j]));
            if !got.is_finite() {
                return Err(GpuError::Incorrect(format!("y[{i},{j}] = {got} (unwritten or overflow)")));
            }
            let want = f64::from(from(to(acc as f32)));
            err += (got - want).powi(2);
            norm += acc * acc;
        }
    }
    Ok((err / norm.max(1e-300)).sqrt())
}

/// Rows of W the correctness check covers: all when small, else a spread that includes both ends.
fn check_rows(m: usize, n: usize, k: usize) -> Vec<usize> {
    let budget = 64usize << 20; // multiply-adds
    let want = (budget / (m * k).max(1)).clamp(64, n.max(1));
    if want >= n {
        return (0..n).collect();
    }
    let step = n as f64 / want as f64;
    let mut rows: Vec<usize> = (0..want).map(|i| (i as f64 * step) as usize).collect();
    rows.extend(n.saturating_sub(40)..n);
    rows.sort_unstable();
    rows.dedup();
    rows
}

impl Gpu {
    /// Measures the weight-only kernel for `format` at `m x n x k` with FP16 activations (see
    /// [`Gpu::measure_weight_only_with`]).
    pub fn measure_weight_only(
        &self,
        format: Format,
        m: usize,
        n: usize,
        k: usize,
        cfg: &TimingConfig,
    ) -> Result<WeightOnlyMeasurement, GpuError> {
        self.measure_weight_only_with(format, m, n, k, cfg, &WeightOnlyOptions::default())
    }

    /// Random weights (uniform in [-1, 1), never all zero) quantized on the host with roofline-quant, copies
    /// uploaded until they exceed twice the L2, the output poisoned, one run checked against the f64 CPU
    /// reference of the same quantized weights (error if above `opts.tolerance`), then timed with the
    /// shared harness rotating over the copies.
    pub fn measure_weight_only_with(
        &self,
        format: Format,
        m: usize,
        n: usize,
        k: usize,
        cfg: &TimingConfig,
        opts: &WeightOnlyOptions,
    ) -> Result<WeightOnlyMeasurement, GpuError> {
        let wf = WoFormat::from_format(format)?;
        let variant = opts.variant.unwrap_or_else(|| Variant::best_for(wf, opts.x, m, n, k));
        let mut out = self.measure_weight_only_configs(format, m, n, k, cfg, opts, &[(variant, opts.tuning)])?;
        out.pop().unwrap_or_else(|| Err(GpuError::Unsupported("no configuration measured".into())))
    }

    /// Measures one shape under several launch configurations (a tuning table): the weights are quantized
    /// once, every kernel is compiled up front (in parallel), and each configuration is checked against the
    /// reference and timed as in [`Gpu::measure_weight_only_with`] (whose `variant` and `tuning` fields are
    /// ignored here). One result per configuration, in order; a configuration that fails does not stop
    /// the others.
    #[allow(clippy::too_many_arguments)]
    pub fn measure_weight_only_configs(
        &self,
        format: Format,
        m: usize,
        n: usize,
        k: usize,
        cfg: &TimingConfig,
        opts: &WeightOnlyOptions,
        configs: &[(Variant, Tuning)],
    ) -> Result<Vec<Result<WeightOnlyMeasurement, GpuError>>, GpuError> {
        let wf = WoFormat::from_format(format)?;
        wf.check_k(k)?;
        if !(1..=MAX_M).contains(&m) || n == 0 {
            return Err(GpuError::Unsupported(format!(
                "weight-only shapes need M in 1..={MAX_M} and N > 0, got M={m}, N={n}"
            )));
        }
        let mut engines = Vec::with_capacity(configs.len());
        for &(variant, tuning) in configs {
            engines.push(WeightOnlyGemv::new(self, wf, opts.x)?.with_variant(variant, None).with_tuning(tuning)?);
        }
        // Compile every distinct kernel first, in parallel (NVRTC is thread-safe; the cache dedups).
        let keys: Vec<KernelKey> = engines
            .iter()
            .flat_map(|e| e.kernel_keys(&[(m, n, k, Fusion::default())]))
            .collect::<std::collections::HashSet<_>>()
            .into_iter()
            .collect();
        precompile(&keys);
        let w = random_f32(n * k, 0x5eed ^ (n * 31 + k) as u64);
        let (packed, wq) = quantize_and_pack(wf, &w, n, k)?;
        drop(w);
        let to = to_bits(opts.x);
        let from = from_bits(opts.x);
        let xb: Vec<u16> = random_f32(m * k, 77).into_iter().map(to).collect();
        let xf: Vec<f32> = xb.iter().map(|b| from(*b)).collect();
        let rows = check_rows(m, n, k);
        let data = Reference { packed: &packed, wq: &wq, xb: &xb, xf: &xf, rows: &rows };
        Ok(engines.iter().map(|gemv| self.measure_engine(gemv, format, m, cfg, opts, &data)).collect())
    }

    fn measure_engine(
        &self,
        gemv: &WeightOnlyGemv,
        format: Format,
        m: usize,
        cfg: &TimingConfig,
        opts: &WeightOnlyOptions,
        data: &Reference<'_>,
    ) -> Result<WeightOnlyMeasurement, GpuError> {
        let packed = data.packed;
        let (n, k) = (packed.n, packed.k);
        let to = to_bits(opts.x);
        let set_bytes = packed.bytes() + 2 * m * (n + k) + 4 * 16 * n;
        let free_cap = (self.total_mem as usize / 2).min(16usize << 30);
        // Copies until they exceed twice the L2 (at most 256 of them, and at most half the device memory).
        let sets =
            (2 * self.l2_bytes as usize).div_ceil(set_bytes).clamp(1, (free_cap / set_bytes.max(1)).clamp(1, 256));
        let mut ws = Vec::with_capacity(sets);
        let mut xs = Vec::with_capacity(sets);
        let mut ys = Vec::with_capacity(sets);
        for _ in 0..sets {
            ws.push(gemv.upload(packed)?);
            xs.push(self.stream.clone_htod(data.xb)?);
            ys.push(self.stream.alloc_zeros::<u16>(m * n)?);
        }
        let compiled = gemv.prepare(m, n, k)?;
        // Correctness first: poison y (NaN), run once, compare with the reference.
        let poison = vec![to(f32::NAN); m * n];
        self.stream.memcpy_htod(&poison, &mut ys[0])?;
        gemv.run(&mut ws[0], &xs[0], &mut ys[0], m)?;
        let y: Vec<u16> = self.stream.clone_dtoh(&ys[0])?;
        let rel_error = reference_error(data.xf, data.wq, &y, m, n, k, data.rows, opts.x)?;
        if rel_error.is_nan() || rel_error > opts.tolerance {
            return Err(GpuError::Incorrect(format!(
                "{format} weight-only {m}x{n}x{k} ({} x): relative error {rel_error:.2e} > {:.0e}",
                opts.x.name(),
                opts.tolerance
            )));
        }
        // A second run must give the same result (the split-K workspace is left zeroed).
        gemv.run(&mut ws[0], &xs[0], &mut ys[0], m)?;
        let y2: Vec<u16> = self.stream.clone_dtoh(&ys[0])?;
        let again = reference_error(data.xf, data.wq, &y2, m, n, k, data.rows, opts.x)?;
        if again > opts.tolerance {
            return Err(GpuError::Incorrect(format!(
                "{format} weight-only {m}x{n}x{k}: second run relative error {again:.2e} (workspace not reset?)"
            )));
        }
        let stats = timing::time(&self.ctx, &self.stream, cfg, |i| {
            let s = i % sets;
            gemv.run(&mut ws[s], &xs[s], &mut ys[s], m)
        })?;
        // The same launches replayed from a CUDA graph: every rotating set, at least GRAPH_LAUNCHES launches.
        let graph = if cfg.graph {
            let per_graph = timing::GRAPH_LAUNCHES.div_ceil(sets) * sets;
            Some(timing::time_graph(&self.ctx, cfg, per_graph, |s, i| {
                let i = i % sets;
                gemv.run_on(s, &mut ws[i], &xs[i], &mut ys[i], m)
            })?)
        } else {
            None
        };
        let bytes = (packed.bytes() + 2 * m * k + 2 * m * n) as u64;
        let plan = gemv.launch_plan(m, n, k)?;
        let grid_n = gemv.grid_n(m, &plan)?;
        // The ring kernel where the engine ran it (its registers, not the x-in-registers build's).
        let ring = match gemv.ring_epilogue(m, n, k, Fusion::default()) {
            Some(ep) => Some(gemv.ring(n, k, ep)?),
            None => None,
        };
        let kernel = match &ring {
            Some(r) => format!(
                "roofline wo_ring (rows streamed by bulk copies into a shared-memory ring) {format} W, {} x/y, FP32 accumulate, {} CTAs of {} threads, {} ring slots of 8 rows{}, {sets} rotating weight sets, {} launches per sample",
                opts.x.name(),
                r.ctas,
                r.threads,
                r.slots,
                if r.parts > 1 { format!(" x {} values (K in {} parts)", k / r.parts, r.parts) } else { String::new() }
                    + if r.streamed_scales { ", scales streamed beside them" } else { "" },
                stats.inner
            ),
            None => describe(gemv, format, opts.x, &plan, grid_n, sets, stats.inner),
        };
        let kernel = with_sources(kernel);
        Ok(WeightOnlyMeasurement {
            format,
            x: opts.x,
            m,
            n,
            k,
            stats,
            bytes,
            bandwidth_gb_s: bytes as f64 / (stats.median_us * 1e3),
            rel_error,
            plan,
            registers: ring.as_ref().map_or(compiled.registers, |r| Some(r.registers)),
            spill_bytes: if ring.is_some() { Some(0) } else { compiled.spill_bytes },
            sets,
            kernel,
            graph,
        })
    }
}

/// A measured kernel's words with the CUDA sources it was built from ([`crate::kernel_sources_hash`]) and
/// any developer options of `ROOFLINE_NVRTC_EXTRA` (which change what runs).
fn with_sources(kernel: String) -> String {
    let extra = nvrtc::extra_options();
    if extra.is_empty() {
        format!("{kernel}, CUDA sources {}", crate::kernel_sources_hash())
    } else {
        format!("{kernel}, CUDA sources {} with {}", crate::kernel_sources_hash(), extra.join(" "))
    }
}

/// The measured kernel in words (the x-in-registers, split-K and tensor-core builds).
#[allow(clippy::too_many_arguments)]
fn describe(
    gemv: &WeightOnlyGemv,
    format: roofline_core::Format,
    x: XDtype,
    plan: &LaunchPlan,
    grid_n: u32,
    sets: usize,
    inner: u32,
) -> String {
    format!(
            "roofline {} {format} W, {} x/y, FP32 accumulate, {:?} (R={}, U={}, {} warps, grid {}x{}{}), {sets} rotating weight sets, {} launches per sample",
            match gemv.variant {
                Variant::Mma => "wo_mma (tensor cores)".to_string(),
                Variant::XMma if plan.x_smem && plan.bulk => format!(
                    "wo_mma_xb (tensor cores, x in shared memory, bulk-copy rings of {} slots{}{}{})",
                    plan.stages,
                    match (plan.park, plan.cluster) {
                        (_, true) => ", a parking table, K splits summed in clusters",
                        (true, false) => ", a parking table",
                        _ => "",
                    },
                    if plan.multicast { ", x multicast to CTA pairs" } else { "" },
                    match plan.nf4_table {
                        0 => String::new(),
                        c => format!(", NF4's code-pair table in {c} copies"),
                    }
                ),
                Variant::XMma if plan.x_smem => "wo_mma_xk (tensor cores, x in shared memory)".to_string(),
                Variant::XMma => "wo_mma_xs (tensor cores, x stationary)".to_string(),
                _ if plan.xreg => "wo_xreg (x in registers)".to_string(),
                _ => "wo_gemv".to_string(),
            },
            x.name(),
            gemv.variant,
            plan.rows_per_warp,
            plan.unroll,
            plan.warps,
            grid_n,
            plan.splits,
            match (plan.pipeline, grid_n < plan.blocks_n) {
                (true, true) => ", pipelined, persistent",
                (true, false) => ", pipelined",
                (false, true) => ", persistent",
                (false, false) => "",
            },
            inner
        )
}
/// Quantized weights, x and the rows checked, shared by the configurations of one shape.
struct Reference<'a> {
    packed: &'a PackedWeights,
    wq: &'a [f32],
    xb: &'a [u16],
    xf: &'a [f32],
    rows: &'a [usize],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xreg_8bit_takes_two_chunks_where_that_avoids_split_k() {
        use WoFormat::*;
        for f in [Fp8E4M3, Int8] {
            assert_eq!(LaunchPlan::xreg_unroll(f, 1, 14336), 2);
            let p = LaunchPlan::new(Variant::XReg, f, 1, 4096, 14336, 132, Tuning::default());
            assert_eq!((p.unroll, p.splits, p.warps), (2, 1, 14), "{p:?}");
            // K = 4096 fits 8 warps of one chunk; M = 2 keeps one chunk; an explicit unroll wins.
            assert_eq!((LaunchPlan::xreg_unroll(f, 1, 4096), LaunchPlan::xreg_unroll(f, 2, 14336)), (1, 1));
            let t = Tuning { unroll: Some(1), ..Tuning::default() };
            assert_eq!(LaunchPlan::new(Variant::XReg, f, 1, 4096, 14336, 132, t).unroll, 1);
        }
        // The engine's choice follows: x in registers for 8-bit down_proj at M = 1 (one wide CTA, no
        // stages) and up to 16384 rows at K = 4096 (three cp.async stages), split-K above, tensor cores from
        // M = 2.
        let cases = [
            (1, 4096, 14336, Variant::XReg, 0),
            (1, 1024, 4096, Variant::XReg, 3),
            (1, 6144, 4096, Variant::XReg, 3),
            (1, 14336, 4096, Variant::XReg, 3),
            (1, 28672, 4096, Variant::SplitK, 0),
            (1, 128256, 4096, Variant::SplitK, 0),
            (2, 4096, 14336, Variant::XMma, 0),
            (2, 6144, 4096, Variant::XMma, 0),
        ];
        for (m, n, k, v, stages) in cases {
            for f in [Fp8E4M3, Int8] {
                assert_eq!(Variant::best_for(f, XDtype::F16, m, n, k), v, "{f:?} {m}x{n}x{k}");
                let p = LaunchPlan::new(v, f, m, n, k, 132, Tuning::default());
                assert_eq!(p.stages, stages, "{f:?} {m}x{n}x{k}: {p:?}");
            }
        }
        // Inside a decode step the staged plan loses (its CTAs start their weights cold): split-K there,
        // x in registers only for the wide down_proj plan.
        for f in [Fp8E4M3, Int8] {
            assert_eq!(Variant::best_in_step(f, XDtype::F16, 1, 4096), Variant::SplitK);
            assert_eq!(Variant::best_in_step(f, XDtype::F16, 1, 14336), Variant::XReg);
            assert_eq!(Variant::best_in_step(f, XDtype::F16, 2, 14336), Variant::XMma);
        }
        // Measured with FP16 activations only: BF16 keeps split-K; an explicit stage count wins.
        assert_eq!(Variant::best_for(Fp8E4M3, XDtype::Bf16, 1, 6144, 4096), Variant::SplitK);
        let t = Tuning { stages: Some(0), ..Tuning::default() };
        assert_eq!(LaunchPlan::new(Variant::XReg, Int8, 1, 6144, 4096, 132, t).stages, 0);
        for (n, k) in [(4096, 4096), (14336, 4096), (4096, 14336)] {
            let v = Variant::best_for(Int4G128, XDtype::F16, 1, n, k);
            assert_eq!(v, Variant::best(Int4G128, XDtype::F16, 1));
            assert_eq!(LaunchPlan::new(v, Int4G128, 1, n, k, 132, Tuning::default()).stages, 0);
        }
        // 4-bit K = 14336 is one 14-warp CTA at one chunk already; 16-bit never takes two.
        assert_eq!((LaunchPlan::xreg_unroll(Int4G128, 1, 14336), LaunchPlan::xreg_unroll(Fp16, 1, 14336)), (1, 1));
    }

    #[test]
    fn x_in_shared_memory_from_m2_where_it_measured_faster() {
        use WoFormat::*;
        // (format, M, N, K, x in shared memory by default): session 27's sweep (`x_smem_default`).
        let cases = [
            (Nf4, 2, 14336, 4096, true),
            (Nf4, 2, 4096, 4096, true),
            (Nf4, 2, 1024, 4096, false),
            (Nf4, 3, 1024, 4096, true),
            (Int4G128, 2, 14336, 4096, true),
            (Int4G128, 4, 4096, 14336, true),
            (Int4G128, 4, 6144, 4096, false),
            (Int4G128, 4, 4096, 4096, false),
            (Mxfp4, 6, 1024, 4096, true),
            (Nvfp4, 8, 128256, 4096, true),
            (Fp8E4M3, 2, 14336, 4096, false),
            (Fp8E4M3, 4, 4096, 14336, false),
            (Int8, 6, 6144, 4096, true),
            (Fp8E4M3, 8, 4096, 4096, false), // 8-bit weights take no bulk rings at 4096 x 4096
            (Fp16, 8, 14336, 4096, false),
            (Int4G128, 1, 14336, 4096, false),
            (Fp8E4M3, 16, 4096, 4096, false),
            (Int4G128, 16, 4096, 4096, true),
        ];
        for (f, m, n, k, want) in cases {
            let p = LaunchPlan::new(Variant::best(f, XDtype::F16, m), f, m, n, k, 132, Tuning::default());
            assert_eq!(p.x_smem, want, "{f:?} {m}x{n}x{k}: {p:?}");
            // x in shared memory at M <= 8 always streams the weights through bulk rings (measured so).
            if m <= 8 && p.x_smem {
                assert!(p.bulk, "{f:?} {m}x{n}x{k}: {p:?}");
            }
        }
        // Without bulk rings (below sm_90) M <= 8 keeps x stationary.
        let t = Tuning { bulk: Some(false), ..Tuning::default() };
        assert!(!LaunchPlan::new(Variant::XMma, Nf4, 8, 14336, 4096, 132, t).x_smem);
    }

    #[test]
    fn xreg_plans_cover_k_and_rows() {
        for f in WoFormat::ALL {
            for (m, n, k) in
                [(1, 4096, 4096), (1, 1000, 4096), (2, 14336, 4096), (1, 4096, 14336), (1, 128256, 4096), (3, 8, 128)]
            {
                let p = LaunchPlan::new(Variant::XReg, f, m, n, k, 132, Tuning::default());
                if !LaunchPlan::xreg_fits(f, m, 1) {
                    assert!(!p.xreg, "{f:?} M={m} falls back to split-K");
                    continue;
                }
                assert!(p.xreg);
                let kc = (k * f.bits() / 128) as u32;
                // every K slice of 32 chunks belongs to one warp of one split, no split empty
                assert!(p.splits * p.chunks_per_split >= kc && (p.splits - 1) * p.chunks_per_split < kc, "{p:?}");
                assert!((1..=16).contains(&p.warps), "{p:?}");
                // rows: multiples of 8 (aligned transposed scale loads), every row covered, counters suffice
                assert!(p.rows_per_cta % 8 == 0 && p.rows_per_cta <= XREG_MAX_RPC);
                assert!(p.blocks_n * p.rows_per_cta >= n as u32);
                assert!(p.blocks_n as usize <= n.div_ceil(4) + 1);
                // partial sums, and the cp.async stages where the plan has them (8-bit M = 1 up to 16384
                // rows: within the 227 KB a CTA may opt in to on sm_90)
                let stages = p.warps * p.stages * LaunchPlan::xreg_stage_bytes(p.rows_per_warp, p.unroll);
                assert_eq!(p.smem_bytes, p.warps * m as u32 * p.rows_per_cta * 4 + stages);
                assert_eq!(p.stages, LaunchPlan::xreg_stages_default(f, m, n, k), "{f:?} {m}x{n}x{k}");
                assert!(p.smem_bytes <= if p.stages == 0 { 48 * 1024 } else { 227 * 1024 }, "{p:?}");
                // refitted to any occupancy: still every row, one wave
                for ctas in [132, 396, 1000] {
                    let q = p.with_rows_per_cta(n, m, LaunchPlan::xreg_rows_per_cta(n, p.splits, ctas));
                    assert!(q.blocks_n * q.rows_per_cta >= n as u32 && q.rows_per_cta % 8 == 0);
                    let most = ctas.div_ceil(q.splits).max(n.div_ceil(XREG_MAX_RPC as usize) as u32) + 1;
                    assert!(q.blocks_n <= most, "{q:?} for {ctas} CTAs");
                    // The balanced grid: the kernel's shares (wo_xreg's row0 / nrow) tile the rows in order,
                    // none larger than the shared-memory stride, at most `ctas` CTAs in all.
                    let b = p.with_balanced_grid(n, m, (ctas / p.splits).max(1));
                    assert!(b.rows_per_cta % 8 == 0 && b.rows_per_cta <= XREG_MAX_RPC, "{b:?}");
                    assert!(b.blocks_n * b.splits <= ctas.max(b.splits) || b.rows_per_cta == XREG_MAX_RPC, "{b:?}");
                    let r = b.rows_per_warp as usize;
                    let units = n.div_ceil(r);
                    let (g, mut next) = (b.blocks_n as usize, 0usize);
                    let (mut small, mut large) = (usize::MAX, 0usize);
                    for cta in 0..g {
                        let (per, extra) = (units / g, units % g);
                        let row0 = (cta * per + cta.min(extra)) * r;
                        let nrow = ((per + usize::from(cta < extra)) * r).min(n.saturating_sub(row0));
                        assert_eq!(row0, next, "{b:?}");
                        assert!(nrow <= b.rows_per_cta as usize, "{b:?}");
                        next = row0 + nrow;
                        small = small.min(nrow);
                        large = large.max(nrow);
                    }
                    assert_eq!(next, n, "{b:?}");
                    // Even: shares differ by one row group, except the last one's remainder of N.
                    assert!(large - small <= 2 * r || g == 1, "{b:?}: {small}..{large}");
                }
            }
        }
        // M x C x EPC <= 64 values of x per lane
        assert!(LaunchPlan::xreg_fits(WoFormat::Int4G128, 2, 1) && !LaunchPlan::xreg_fits(WoFormat::Int4G128, 3, 1));
        assert!(LaunchPlan::xreg_fits(WoFormat::Fp16, 8, 1) && !LaunchPlan::xreg_fits(WoFormat::Fp16, 8, 2));
        let t = Tuning { rows_per_cta: Some(12), ..Tuning::default() };
        assert!(t.check().is_err());
        assert!(Tuning { rows: Some(3), ..Tuning::default() }.check().is_err());
    }

    #[test]
    fn plans_fill_the_gpu_and_cover_k() {
        for variant in [Variant::SplitK, Variant::Rows4, Variant::RowPerWarp, Variant::Mma] {
            for f in WoFormat::ALL {
                for (m, n, k) in [(1, 4096, 4096), (1, 1000, 4096), (16, 14336, 4096), (1, 4096, 14336), (3, 8, 128)] {
                    let p = LaunchPlan::new(variant, f, m, n, k, 132, Tuning::default());
                    // CUDA cores: 16-byte chunks per row; tensor cores: 64-K tiles.
                    let kc = if variant == Variant::Mma { (k / 64) as u32 } else { (k * f.bits() / 128) as u32 };
                    // the splits cover every chunk exactly once, none empty
                    assert!(p.splits * p.chunks_per_split >= kc, "{p:?}");
                    assert!((p.splits - 1) * p.chunks_per_split < kc, "{p:?}");
                    if variant != Variant::Mma {
                        assert_eq!(p.chunks_per_split % 32, 0);
                    }
                    assert!(p.blocks_n * p.warps * p.rows_per_warp >= n as u32);
                    // the counters buffer (ceil(N/4) + 1) is large enough
                    assert!(p.blocks_n as usize <= n.div_ceil(4) + 1);
                    if variant == Variant::RowPerWarp && !p.stage {
                        assert_eq!(p.splits, 1);
                    }
                    // staged x and scales fit in the default 48 KB of dynamic shared memory
                    assert_eq!(p.stage, f == WoFormat::Nf4 && m <= 4 && variant != Variant::Mma, "{f:?} {p:?}");
                    assert!(p.smem_bytes <= 48 * 1024, "{p:?}");
                    assert_eq!(p.smem_bytes > 0, p.stage);
                }
            }
        }
        // a forced split-K never asks for more than 16 warps per CTA
        for variant in [Variant::XReg, Variant::XMma] {
            let t = Tuning { split_k: Some(1), ..Tuning::default() };
            let p = LaunchPlan::new(variant, WoFormat::Fp16, 1, 4096, 14336, 132, t);
            assert!(p.warps <= 16, "{variant:?} {p:?}");
            let p = LaunchPlan::new(variant, WoFormat::Int4G128, 1, 4096, 14336, 132, t);
            assert!(p.warps <= 16 && p.splits * p.chunks_per_split >= 14336 / 64, "{variant:?} {p:?}");
        }
        // XMma's partial sums fit in 47 KB of shared memory at every M and split, leaving the rest of the
        // default 48 KB to static shared memory (M = 16 once asked for 512 KB, and exactly 48 KB failed too)
        for m in [1, 4, 8, 16] {
            for split_k in [None, Some(1), Some(2)] {
                for unroll in [2, 4, 8] {
                    let t = Tuning { split_k, unroll: Some(unroll), x_smem: Some(false), ..Tuning::default() };
                    for (n, k) in [(14336, 4096), (4096, 14336), (4096, 4096), (128256, 4096)] {
                        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, m, n, k, 132, t);
                        assert!(p.smem_bytes <= 47 * 1024, "M={m} {n}x{k} {t:?}: {p:?}");
                        assert!(p.blocks_n * p.rows_per_cta * 16 >= n as u32, "{p:?}");
                    }
                }
            }
        }
        // XMma with x in shared memory: the staged columns of a split fit the opted-in shared memory (with bulk
        // rings, beside them), the splits cover K with none empty (the kernel derives the split from gridDim.y
        // the same way), every row tile has a CTA, and the counters buffer holds one per CTA along N
        for f in WoFormat::ALL {
            for m in [1, 3, 8, 9, 16] {
                for split_k in [None, Some(1), Some(2), Some(7)] {
                    for bulk in [false, true] {
                        for (unroll, stages) in [(None, None), (Some(8), Some(6))] {
                            let t = Tuning {
                                x_smem: Some(true),
                                split_k,
                                bulk: Some(bulk),
                                unroll,
                                stages,
                                ..Tuning::default()
                            };
                            for (n, k) in [(14336, 4096), (4096, 14336), (13, 384), (128256, 4096), (1000, 8192)] {
                                let p = LaunchPlan::new(Variant::XMma, f, m, n, k, 132, t);
                                let kt = (k / 64) as u32;
                                assert!(p.x_smem && p.xreg && p.rows_per_warp == nvrtc::MMA_ROWS, "{p:?}");
                                assert_eq!(p.bulk, bulk);
                                let rows_x = m.div_ceil(8) as u32 * 8;
                                let x_bytes = rows_x * (p.chunks_per_split * 64 + 8) * 2;
                                if bulk {
                                    let ring = LaunchPlan::xb_ring_bytes(f, p.warps, p.stages, p.unroll);
                                    assert!((2..=6).contains(&p.stages), "{p:?}");
                                    // the parking table after the rings wherever it fits, and through it
                                    // the clustered reduction of 2..=8 splits; the plan without clusters
                                    // keeps the table (the workspace adds the splits)
                                    let unparked = x_bytes.div_ceil(128) * 128 + ring;
                                    let fits = unparked + p.park_bytes(m) <= XB_SMEM_BYTES;
                                    assert_eq!(p.park, fits, "{f:?} M={m} {n}x{k}: {p:?}");
                                    let park = if p.park { p.park_bytes(m) } else { 0 };
                                    // NF4's code-pair table in front where it fits: 64 copies, else 32, else
                                    // 16, else none (never 8 unless asked for)
                                    let table = LaunchPlan::nf4_table_bytes(p.nf4_table);
                                    assert_eq!(p.smem_bytes, table + unparked + park, "{p:?}");
                                    assert!(f == WoFormat::Nf4 || p.nf4_table == 0, "{p:?}");
                                    assert!([0, 16, 32, 64].contains(&p.nf4_table), "{p:?}");
                                    let more = LaunchPlan::nf4_table_bytes(p.nf4_table.max(8) * 2);
                                    assert!(
                                        p.nf4_table == 64
                                            || f != WoFormat::Nf4
                                            || unparked + park + more > XB_SMEM_BYTES,
                                        "{p:?}"
                                    );
                                    assert!(p.smem_bytes <= XB_SMEM_BYTES, "{f:?} M={m} {n}x{k}: {p:?}");
                                    assert!(!p.cluster || p.park, "{p:?}");
                                    assert!(!p.cluster || (2..=MAX_CLUSTER_SPLITS).contains(&p.splits), "{p:?}");
                                    let flat = p.without_cluster();
                                    assert!(!flat.cluster && flat.smem_bytes == p.smem_bytes && flat.park == p.park);
                                    if (2..=MAX_CLUSTER_SPLITS).contains(&p.splits) && fits {
                                        assert!(p.cluster, "{f:?} M={m} {n}x{k}: {p:?}");
                                    }
                                } else {
                                    assert!(p.smem_bytes <= XK_SMEM_BYTES, "{f:?} M={m} {n}x{k}: {p:?}");
                                    assert_eq!(p.smem_bytes, x_bytes);
                                    let words = mma::words_per_tile(f) as u32;
                                    assert!(
                                        p.unroll * words <= 8 || unroll.is_some(),
                                        "at most 32 registers in flight"
                                    );
                                }
                                assert_eq!(p.chunks_per_split, kt.div_ceil(p.splits), "{p:?}");
                                assert!((p.splits - 1) * p.chunks_per_split < kt, "{p:?}");
                                assert!(p.blocks_n * p.rows_per_cta * 16 >= n as u32, "{p:?}");
                                assert!(p.blocks_n as usize <= n.div_ceil(4) + 1);
                            }
                        }
                    }
                }
            }
        }
        // Registers: M = 16 at K = 4096: 2 splits of 32 tiles (66 KB), 14 row tiles per CTA (one each for 14
        // of the 16 warps); at K = 14336 8 splits (5 of 47 tiles would fit, 9 would give 3 warps two row tiles)
        let t = Tuning { x_smem: Some(true), bulk: Some(false), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, t);
        assert_eq!((p.splits, p.chunks_per_split, p.warps, p.unroll, p.rows_per_cta), (2, 32, 16, 8, 14));
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Fp8E4M3, 16, 4096, 14336, 132, t);
        assert_eq!((p.splits, p.unroll, p.rows_per_cta), (8, 4, 16));
        // 6144 rows: 5 splits of 13 tiles, 15 row tiles per CTA (2 splits would leave 10 of 16 warps idle)
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 6144, 4096, 132, t);
        assert_eq!((p.splits, p.rows_per_cta), (5, 15));
        // Bulk rings (the default for 4-bit weights): 16 warps, one CTA per SM, 2 slots of 4 tiles
        // (INT4: 2 KB of codes and 3 scale columns, 2304 bytes) a warp; one split of 64 tiles, 7 row tiles a CTA
        // shared by its warps through the parking table (16 x (7 x 16 + 4) floats), against 14 row tiles in 2
        // splits (a tile more a warp, and the cluster's sum)
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, Tuning::default());
        assert!(p.x_smem && p.bulk && !p.cluster && p.park, "{p:?}");
        assert_eq!((p.splits, p.chunks_per_split, p.warps, p.unroll, p.stages, p.rows_per_cta), (1, 64, 16, 4, 2, 7));
        let park = 16 * (7 * 16 + 4) * 4;
        assert_eq!(p.smem_bytes, (16 * (64 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 2304 + park);
        assert!(LaunchPlan::xb_shares(7, 16) && LaunchPlan::xb_shares(14, 16) && !LaunchPlan::xb_shares(15, 16));
        assert!(!p.multicast && p.blocks_n == 128 && p.cluster_dims() == (1, 1), "{p:?}");
        // asked for, in one split the CTAs go in pairs sharing x's copies: 128 CTAs, 64 clusters of two along
        // N; an odd count gets a partner without row tiles (1000 rows: 63 row tiles, one a CTA, 64 CTAs)
        let t = Tuning { multicast: Some(true), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, t);
        assert!(p.multicast && p.blocks_n == 128 && p.cluster_dims() == (2, 1), "{p:?}");
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 1000, 4096, 132, t);
        assert!(p.multicast && p.splits == 1 && p.rows_per_cta == 1 && p.blocks_n == 64, "{p:?}");
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 1000, 4096, 132, Tuning::default());
        assert!(!p.multicast && p.blocks_n == 63, "{p:?}");
        // NF4's code-pair table in front: in one split 32 copies need slots of 2 tiles at 16x14336x4096 (beside
        // the default rings the rest takes 208,384 bytes of 224 KB); 16 copies fit the default rings when asked
        // for 16. By default (7 row tiles a CTA in one split) two clustered splits: room for the default slots
        // and 64 copies.
        let nf4 = |t: Tuning| LaunchPlan::new(Variant::XMma, WoFormat::Nf4, 16, 14336, 4096, 132, t);
        let p = nf4(Tuning::default());
        assert_eq!((p.nf4_table, p.unroll, p.stages, p.splits), (64, 4, 2, 2), "{p:?}");
        assert!(p.cluster && p.cluster_dims() == (1, 2) && p.rows_per_cta == 14, "{p:?}");
        let two = (16 * (32 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 2176 + 16 * (14 * 16 + 4) * 4;
        assert_eq!(p.smem_bytes, two + 64 * 1024);
        let p = nf4(Tuning { split_k: Some(1), ..Tuning::default() });
        assert_eq!((p.nf4_table, p.unroll, p.stages, p.splits), (32, 2, 2, 1), "{p:?}");
        let rest = (16 * (64 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 1152 + park;
        assert_eq!(p.smem_bytes, rest + 32 * 1024);
        let p = nf4(Tuning { nf4_table: Some(16), ..Tuning::default() });
        assert_eq!((p.nf4_table, p.unroll), (16, 4), "{p:?}");
        let rest = (16 * (64 * 64 + 8) * 2u32).div_ceil(128) * 128 + 16 * 2 * 2176 + park;
        assert_eq!(p.smem_bytes, rest + 16 * 1024);
        let p = nf4(Tuning { nf4_table: Some(32), ..Tuning::default() });
        assert_eq!((p.nf4_table, p.unroll), (16, 4), "asked for 32, the most that fit: {p:?}");
        let one = Tuning { split_k: Some(1), ..Tuning::default() };
        let p = nf4(Tuning { unroll: Some(4), ..one });
        assert_eq!((p.nf4_table, p.unroll), (16, 4), "slots asked for stay: {p:?}");
        let p = nf4(Tuning { unroll: Some(4), ..Tuning::default() });
        assert_eq!((p.nf4_table, p.unroll, p.splits), (64, 4, 2), "the splits were not asked for: {p:?}");
        let p = nf4(Tuning { nf4_table: Some(0), ..Tuning::default() });
        assert_eq!((p.nf4_table, p.unroll), (0, 4), "{p:?}");
        let p = nf4(Tuning::default());
        assert_eq!(p.key(WoFormat::Nf4, XDtype::F16, 16, 90).nf4_table, 64);
        assert_eq!(p.key(WoFormat::Nf4, XDtype::F16, 16, 80).nf4_table, 0, "bulk rings are sm_90+");
        // two splits from NF4_TWO_SPLITS_ROWS row tiles a CTA (11008 rows: 6), M > 8 only (x of 8 rows leaves
        // room for the default slots in one split); 64 copies wherever they fit (not beside all of x of 16 rows)
        for (m, n, splits, unroll, copies) in
            [(16, 8192, 1, 2, 32), (16, 11008, 2, 4, 64), (9, 28672, 2, 4, 64), (8, 14336, 1, 4, 64)]
        {
            let p = LaunchPlan::new(Variant::XMma, WoFormat::Nf4, m, n, 4096, 132, Tuning::default());
            assert_eq!(
                (p.nf4_table, p.splits, p.unroll, p.cluster),
                (copies, splits, unroll, splits == 2),
                "{m}x{n}: {p:?}"
            );
        }
        // K = 14336 (8 splits): 64 copies beside the default slots
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Nf4, 16, 4096, 14336, 132, Tuning::default());
        assert_eq!((p.nf4_table, p.unroll), (64, 4), "{p:?}");
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, Tuning::default());
        assert_eq!(p.nf4_table, 0);
        for (n, k) in [(4096, 4096), (28672, 4096), (4096, 14336), (1000, 4096)] {
            for m in 9..=16 {
                let p = LaunchPlan::new(Variant::XMma, WoFormat::Nf4, m, n, k, 132, Tuning::default());
                assert!(p.smem_bytes <= XB_SMEM_BYTES, "{m}x{n}x{k}: {p:?}");
            }
        }
        // the small shapes in one split too (session 19's rule took 8 and 5), long K as session 19 (x's columns
        // need 3 splits at K = 14336, where the table does not fit: 8 splits of whole row tiles)
        for (n, k, splits) in [(4096, 4096, 1), (6144, 4096, 1), (1024, 4096, 1), (28672, 4096, 1), (4096, 14336, 8)] {
            let p = LaunchPlan::new(Variant::XMma, WoFormat::Mxfp4, 16, n, k, 132, Tuning::default());
            assert_eq!(p.splits, splits, "{n}x{k}: {p:?}");
        }
        // 8-bit codes leave x room for half of K: 2 splits summed through a cluster (its parking table)
        let t = Tuning { bulk: Some(true), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Fp8E4M3, 16, 14336, 4096, 132, t);
        assert_eq!((p.x_smem, p.bulk, p.unroll, p.stages), (true, true, 2, 4));
        assert!(p.splits == 2 && p.cluster && p.park && !p.multicast && p.cluster_dims() == (1, 2), "{p:?}");
        // the default: x in shared memory above M = 8 for the 4-bit formats (through bulk rings), and for 8-bit
        // weights above 4096 x 4096 (through bulk rings), at every size when asked for bulk rings, without
        // them from K = 8192; NVFP4 without them from K = 8192; at M <= 8 only with bulk rings (see
        // `x_in_shared_memory_from_m2_where_it_measured_faster`)
        for (f, m, k, bulk, want, want_bulk) in [
            (WoFormat::Int4G128, 16, 4096, None, true, true),
            (WoFormat::Nf4, 9, 4096, None, true, true),
            (WoFormat::Nvfp4, 16, 4096, None, true, true),
            (WoFormat::Int4G128, 8, 4096, None, true, true),
            (WoFormat::Int4G128, 4, 4096, None, false, false),
            (WoFormat::Int4G128, 8, 4096, Some(false), false, false),
            (WoFormat::Fp8E4M3, 16, 4096, None, false, false),
            (WoFormat::Fp8E4M3, 16, 4096, Some(true), true, true),
            (WoFormat::Fp8E4M3, 16, 14336, None, true, true),
            (WoFormat::Int8, 16, 14336, Some(false), true, false),
            (WoFormat::Nvfp4, 16, 4096, Some(false), false, false),
            (WoFormat::Nvfp4, 12, 14336, Some(false), true, false),
            (WoFormat::Fp16, 16, 14336, None, false, false),
        ] {
            let p = LaunchPlan::new(Variant::XMma, f, m, 4096, k, 132, Tuning { bulk, ..Tuning::default() });
            assert_eq!((p.x_smem, p.bulk), (want, want_bulk), "{f:?} M={m} K={k}");
        }
        let p = LaunchPlan::new(
            Variant::XMma,
            WoFormat::Int4G128,
            8,
            14336,
            4096,
            132,
            Tuning { x_smem: Some(true), bulk: Some(false), ..Tuning::default() },
        );
        // M = 8: all of K = 4096 would fit one split (7 row tiles per CTA); two splits halve the warps' time
        assert_eq!((p.splits, p.smem_bytes), (2, 8 * (32 * 64 + 8) * 2));
        let t = Tuning { x_smem: Some(true), split_k: Some(1), ..Tuning::default() };
        assert_eq!(LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 8, 14336, 4096, 132, t).splits, 1);
        // XMma's grid (both kernels): at most one wave of CTAs over all the K splits when the caps allow it
        for m in [3, 8, 16] {
            for (n, k) in [(14336, 4096), (4096, 14336), (6144, 4096), (28672, 4096), (128256, 4096)] {
                for x_smem in [None, Some(true)] {
                    let t = Tuning { x_smem, ..Tuning::default() };
                    let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, m, n, k, 132, t);
                    let target = 132 * (16 / p.warps).max(1);
                    let row_tiles = (n as u32).div_ceil(16);
                    if row_tiles.div_ceil((target / p.splits).max(1)) <= p.rows_per_cta {
                        assert!(p.blocks_n * p.splits <= target, "M={m} {n}x{k} {x_smem:?}: {p:?}");
                    }
                }
            }
        }
        assert_eq!(LaunchPlan::split_tiles_per_cta(256, 7, 132, 32), 15);
        assert!(256u32.div_ceil(LaunchPlan::split_tiles_per_cta(256, 7, 132, 32)) * 7 <= 132);
        // XMma's grid: one wave when the shared-memory cap allows it, otherwise whole waves of equal CTAs
        assert_eq!(LaunchPlan::balanced_tiles_per_cta(1792, 264, 11), 7);
        // FP16 8x14336x4096 (896 row tiles x 4 splits, cap 11): 11 made 328 CTAs (1.24 waves); 7 makes 512
        assert_eq!(LaunchPlan::balanced_tiles_per_cta(3584, 264, 11), 7);
        for units in [1, 100, 1792, 3584, 9000, 128256 / 16 * 4] {
            for cap in [1, 5, 11, 32] {
                let r = LaunchPlan::balanced_tiles_per_cta(units, 264, cap);
                assert!((1..=cap).contains(&r));
                let ctas = units.div_ceil(r);
                // never more waves than the cap forces
                assert!(ctas.div_ceil(264) <= units.div_ceil(264 * cap).max(1), "{units} {cap}: {r}");
            }
        }
        let t = Tuning { tile_reduce: Some(false), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Fp16, 8, 14336, 4096, 132, t);
        assert_eq!((p.unroll, p.splits, p.rows_per_cta), (2, 4, 7), "{p:?}");
        // Reduced after every row tile: one wave at M = 16 (896 row tiles x 4 splits over 264 CTAs), two row
        // tiles of partial sums in shared memory
        let t = Tuning { tile_reduce: Some(true), split_k: Some(4), x_smem: Some(false), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 14336, 4096, 132, t);
        assert_eq!((p.splits, p.rows_per_cta, p.blocks_n * p.splits), (4, 14, 256), "{p:?}");
        assert_eq!(p.smem_bytes, 8 * 16 * 2 * 20 * 4);
        assert!(p.key(WoFormat::Int4G128, XDtype::F16, 16, 90).options().contains(&"-DTRED=1".to_string()));
        // The defaults (session 10 tuning table): reduced after every row tile above M = 8 in CTAs of 16 warps
        // (x14336x4096: 2 K splits, 128 CTAs of 14 row tiles), from M = 8 for 16-bit weights; not at M <= 8
        // for 4- and 8-bit weights. Session 11: INT4 and NF4 (and MXFP4) stage x in shared memory instead
        // (session 18: with bulk rings, by default, 8-bit weights too; here without them).
        for f in [WoFormat::Fp16, WoFormat::Fp8E4M3, WoFormat::Int4G128, WoFormat::Nf4] {
            let regs = Tuning { bulk: Some(false), ..Tuning::default() };
            let p = LaunchPlan::new(Variant::XMma, f, 16, 14336, 4096, 132, regs);
            let four = f.bits() == 4;
            assert_eq!(p.x_smem, four, "{f:?} {p:?}");
            // 8-bit weights: the sums added with shared-memory atomics instead
            let eight = f == WoFormat::Fp8E4M3;
            assert_eq!((p.tile_reduce, p.atomic_reduce), (!eight && !four, eight), "{f:?} {p:?}");
            if four {
                assert_eq!((p.unroll, p.warps, p.splits), (8, 16, 2), "{f:?} {p:?}");
                assert!(p.blocks_n * p.splits <= 132, "{f:?} {p:?}");
            } else {
                let g = (p.unroll, p.warps, p.splits, p.rows_per_cta, p.blocks_n);
                assert_eq!(g, (2, 16, 2, 14, 64), "{f:?} {p:?}");
            }
            // (x stationary: since session 27 the default at this shape stages x in shared memory from M = 2
            // to 8 for most formats, `x_in_shared_memory_from_m2_where_it_measured_faster`)
            let stationary = Tuning { x_smem: Some(false), ..Tuning::default() };
            let p = LaunchPlan::new(Variant::XMma, f, 8, 14336, 4096, 132, stationary);
            assert_eq!(p.tile_reduce, f == WoFormat::Fp16, "{f:?} {p:?}");
            assert_eq!(p.warps, 8, "{f:?} {p:?}");
            let p = LaunchPlan::new(Variant::XMma, f, 3, 14336, 4096, 132, stationary);
            assert!(!p.tile_reduce, "{f:?} {p:?}");
        }
        // Added with shared-memory atomics: one [M][rows + 4] table per CTA, within the 47 KB at every M
        for m in [1usize, 3, 8, 16] {
            for (n, k) in [(14336, 4096), (4096, 14336), (128256, 4096)] {
                let t = Tuning { atomic_reduce: Some(true), x_smem: Some(false), ..Tuning::default() };
                let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, m, n, k, 132, t);
                assert!(p.atomic_reduce && !p.tile_reduce, "{p:?}");
                assert_eq!(p.smem_bytes, m as u32 * (p.rows_per_cta * 16 + 4) * 4, "{p:?}");
                assert!(p.smem_bytes <= 47 * 1024 && p.blocks_n * p.rows_per_cta * 16 >= n as u32, "{p:?}");
                let opts = p.key(WoFormat::Int4G128, XDtype::F16, m, 90).options();
                assert!(opts.contains(&"-DTRED=2".to_string()));
            }
        }
        // K = 14336 at M = 16: 7 K splits of 16 warps reducing per row tile (the tuning table's 2-split
        // configuration); with x in shared memory (INT4's default) 8 splits of 28 tiles
        let t = Tuning { x_smem: Some(false), ..Tuning::default() };
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 4096, 14336, 132, t);
        assert_eq!((p.warps, p.splits), (16, 7), "{p:?}");
        let p = LaunchPlan::new(Variant::XMma, WoFormat::Int4G128, 16, 4096, 14336, 132, Tuning::default());
        assert_eq!((p.warps, p.splits, p.chunks_per_split, p.x_smem), (16, 8, 28, true), "{p:?}");
        // small N on a big GPU splits K; large N does not
        let small = LaunchPlan::new(Variant::SplitK, WoFormat::Fp16, 1, 1000, 4096, 132, Tuning::default());
        assert!(small.splits > 1 && small.blocks_n * small.splits >= 132, "{small:?}");
        let big = LaunchPlan::new(Variant::SplitK, WoFormat::Int4G128, 1, 14336, 4096, 132, Tuning::default());
        assert_eq!(big.splits, 1);
        assert_eq!(
            LaunchPlan::new(
                Variant::SplitK,
                WoFormat::Fp16,
                1,
                1000,
                4096,
                132,
                Tuning { split_k: Some(2), ..Tuning::default() }
            )
            .splits,
            2
        );
    }

    #[test]
    fn reference_error_catches_wrong_outputs() {
        let (m, n, k) = (2, 3, 8);
        let x = random_f32(m * k, 1);
        let w = random_f32(n * k, 2);
        let exact: Vec<u16> = (0..m * n)
            .map(|o| {
                let (i, j) = (o / n, o % n);
                f16::from_f32((0..k).map(|l| x[i * k + l] * w[j * k + l]).sum()).to_bits()
            })
            .collect();
        let rows: Vec<usize> = (0..n).collect();
        assert!(reference_error(&x, &w, &exact, m, n, k, &rows, XDtype::F16).unwrap() < 1e-3);
        let mut bad = exact.clone();
        bad[4] = f16::from_f32(f16::from_bits(bad[4]).to_f32() * 1.5 + 0.1).to_bits();
        assert!(reference_error(&x, &w, &bad, m, n, k, &rows, XDtype::F16).unwrap() > 1e-3);
        bad[4] = f16::NAN.to_bits();
        assert!(reference_error(&x, &w, &bad, m, n, k, &rows, XDtype::F16).is_err());
    }

    #[test]
    fn measurement_conversion_keeps_time_and_counts_flops() {
        let w = WeightOnlyMeasurement {
            format: Format::NVFP4,
            x: XDtype::F16,
            m: 2,
            n: 1000,
            k: 4096,
            stats: TimingStats { median_us: 10.0, min_us: 9.0, max_us: 12.0, runs: 50, inner: 8 },
            bytes: 2_000_000,
            bandwidth_gb_s: 200.0,
            rel_error: 1e-4,
            plan: LaunchPlan::new(Variant::SplitK, WoFormat::Nvfp4, 2, 1000, 4096, 132, Tuning::default()),
            registers: Some(80),
            spill_bytes: Some(0),
            sets: 4,
            kernel: "k".into(),
            graph: Some(TimingStats { median_us: 8.5, min_us: 8.0, max_us: 9.0, runs: 20, inner: 64 }),
        };
        let m = w.to_measurement("H100");
        assert_eq!((m.time_us, m.time_us_min, m.time_us_max, m.runs), (10.0, 9.0, 12.0, 50));
        assert_eq!(m.graph_us, Some(8.5));
        assert!((m.tflops - 2.0 * 2.0 * 1000.0 * 4096.0 / 10e6).abs() < 1e-12);
        assert_eq!(m.bandwidth_gb_s, 200.0);
        assert_eq!(m.device, "H100");
    }

    #[test]
    fn check_rows_cover_the_ends() {
        let r = check_rows(16, 128_256, 4096);
        assert!(r.contains(&0) && r.contains(&128_255) && r.len() < 2000);
        assert_eq!(check_rows(1, 100, 128), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn xreg_multiplies_in_f16x2_where_the_h100_measured_it_faster() {
        let plan = |f, m, n, k, t| LaunchPlan::new(Variant::XReg, f, m, n, k, 132, t);
        let d = Tuning::default();
        for (f, n, k, want) in [
            (WoFormat::Mxfp4, 4096, 4096, true),
            (WoFormat::Mxfp4, 128_256, 4096, true),
            (WoFormat::Nvfp4, 4096, 4096, false),
            (WoFormat::Nvfp4, 6144, 4096, true),
            (WoFormat::Nvfp4, 128_256, 4096, true),
            (WoFormat::Nvfp4, 4096, 14336, true),
            (WoFormat::Int4G128, 4096, 4096, true),
            (WoFormat::Int4G128, 6144, 4096, false),
            (WoFormat::Int4G128, 4096, 14336, true),
            // Llama-3-70B's LM head where `XReg` runs it (the ring takes it by default since session 33)
            (WoFormat::Int4G128, 128_256, 8192, true),
            (WoFormat::Int4G128, 128_256, 4096, false),
            (WoFormat::Nf4, 4096, 14336, true),
            (WoFormat::Nf4, 14336, 4096, false),
            (WoFormat::Nf4, 128_256, 4096, true),
            (WoFormat::Int8, 4096, 4096, false),
        ] {
            let p = plan(f, 1, n, k, d);
            assert_eq!(p.xh, want, "{f:?} 1x{n}x{k}");
            // FP16 x only; the key compiles it in (-DXH=1)
            assert_eq!(p.key(f, XDtype::F16, 1, 90).xh, want);
            assert!(!p.key(f, XDtype::Bf16, 1, 90).xh);
            assert!(p.key(f, XDtype::F16, 1, 90).options().contains(&format!("-DXH={}", u8::from(want))));
        }
        // M = 2 never; a tuning asks for it or against it
        assert!(!plan(WoFormat::Mxfp4, 2, 4096, 4096, d).xh);
        assert!(plan(WoFormat::Nf4, 1, 4096, 4096, Tuning { xh: Some(true), ..d }).xh);
        assert!(!plan(WoFormat::Nf4, 1, 4096, 14336, Tuning { xh: Some(false), ..d }).xh);
        assert!(!plan(WoFormat::Mxfp4, 1, 4096, 4096, Tuning { xh: Some(false), ..d }).xh);
    }

    /// Compiles every kernel variant through NVRTC for sm_90 (and sm_80 where the format allows) and checks
    /// that ptxas reports no spills. Skips with a message when libnvrtc cannot be loaded; the `#[ignore]`d
    /// twin below requires it.
    #[test]
    fn kernels_compile_without_spills() {
        if let Err(e) = nvrtc_available() {
            eprintln!("SKIPPED kernels_compile_without_spills: {e}");
            return;
        }
        compile_all(false);
    }

    /// Every format x activation type x variant x M in {1, 2, 3, 4, 8, 16} (about 200 kernels, minutes).
    #[test]
    #[ignore = "needs libnvrtc (runs on the GPU machine); compiles the full matrix"]
    fn kernels_compile_without_spills_nvrtc_required() {
        nvrtc_available().expect("libnvrtc must be loadable for this test");
        compile_all(true);
    }

    /// `full`: every M and activation type; otherwise M in {1, 3, 16} with FP16 x and M = 1 with BF16 x.
    fn compile_all(full: bool) {
        // Every key first (the default plan, and the other pipelining choice at M = 1 and 16), then all of
        // them compiled in parallel: NVRTC is thread-safe and the full matrix is hundreds of kernels.
        let mut keys = Vec::new();
        for f in WoFormat::ALL {
            for x in XDtype::ALL {
                for variant in
                    [Variant::SplitK, Variant::Rows4, Variant::RowPerWarp, Variant::Mma, Variant::XReg, Variant::XMma]
                {
                    for m in [1usize, 2, 3, 4, 8, 9, 16] {
                        if !full && !(m == 1 || (x == XDtype::F16 && (m == 3 || m == 16))) {
                            continue;
                        }
                        if matches!(variant, Variant::Mma | Variant::XMma) && !mma::supports(f, x) {
                            continue;
                        }
                        let default = LaunchPlan::new(variant, f, m, 4096, 4096, 132, Tuning::default());
                        // The fused RMSNorm / residual-add build of the default plan too.
                        let mut plans = vec![default, LaunchPlan { fuse: true, ..default }];
                        if default.xreg && default.rows_per_warp != nvrtc::MMA_ROWS {
                            plans.push(LaunchPlan { fuse: true, silu: true, ..default });
                        }
                        if m == 1 || m == 16 {
                            let other = Tuning { pipeline: Some(!default.pipeline), ..Tuning::default() };
                            plans.push(LaunchPlan::new(variant, f, m, 4096, 4096, 132, other));
                        }
                        // The other product arithmetic of the x-in-registers kernel at M = 1 (4-bit weights),
                        // plain and fused, at K = 4096 and 14336 (one CTA over K).
                        if m == 1 && variant == Variant::XReg && f.bits() == 4 {
                            for k in [4096, 14336] {
                                let d = LaunchPlan::new(variant, f, m, 4096, k, 132, Tuning::default());
                                let t = Tuning { xh: Some(!d.xh), ..Tuning::default() };
                                let p = LaunchPlan::new(variant, f, m, 4096, k, 132, t);
                                plans.extend([
                                    p,
                                    LaunchPlan { fuse: true, ..p },
                                    LaunchPlan { fuse: true, silu: true, ..p },
                                ]);
                                if k != 4096 {
                                    plans.push(d);
                                }
                            }
                        }
                        // XMma reducing after every row tile, plain and fused.
                        if variant == Variant::XMma {
                            let t = Tuning { tile_reduce: Some(true), ..Tuning::default() };
                            let p = LaunchPlan::new(variant, f, m, 4096, 4096, 132, t);
                            plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            // and in CTAs of 16 warps (2 K splits of 14336 at M = 16: the tuning table's case)
                            let t = Tuning { split_k: Some(2), ..t };
                            plans.push(LaunchPlan::new(variant, f, m, 4096, 14336, 132, t));
                            // the sums added with shared-memory atomics, plain and fused
                            let t = Tuning { atomic_reduce: Some(true), ..Tuning::default() };
                            let p = LaunchPlan::new(variant, f, m, 4096, 4096, 132, t);
                            plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            // x in shared memory, row tiles streamed along K, plain and fused
                            let t = Tuning { x_smem: Some(true), ..Tuning::default() };
                            let p = LaunchPlan::new(variant, f, m, 4096, 4096, 132, t);
                            plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            // and the weights through bulk-copy rings, plain and fused, in one K split (also
                            // with CTA pairs sharing x's copies) and in two summed through a cluster
                            let t = Tuning { x_smem: Some(true), bulk: Some(true), ..Tuning::default() };
                            for split_k in [Some(1), Some(2)] {
                                let p = LaunchPlan::new(variant, f, m, 4096, 4096, 132, Tuning { split_k, ..t });
                                assert_eq!(p.cluster, p.splits > 1, "{f:?} M={m}: {p:?}");
                                plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            }
                            let t = Tuning { split_k: Some(1), multicast: Some(true), ..t };
                            let p = LaunchPlan::new(variant, f, m, 4096, 4096, 132, t);
                            // (16-bit weights leave x room for half of K only: two splits, no pairs)
                            assert_eq!(p.multicast, p.splits == 1, "{f:?} M={m}: {p:?}");
                            if p.multicast {
                                plans.extend([p, LaunchPlan { fuse: true, ..p }]);
                            }
                        }
                        if variant == Variant::XReg && default.xreg {
                            let staged = Tuning { stages: Some(3), ..Tuning::default() };
                            plans.push(LaunchPlan::new(variant, f, m, 4096, 4096, 132, staged));
                        }
                        for p in plans {
                            for arch in [90u32, 80] {
                                if arch < f.min_arch() || (arch == 80 && (m != 1 || variant != Variant::SplitK)) {
                                    continue;
                                }
                                let key = p.key(f, x, m, arch);
                                keys.push((key, variant));
                            }
                        }
                    }
                }
            }
        }
        precompile(&keys.iter().map(|(key, _)| *key).collect::<Vec<_>>());
        let mut report = Vec::new();
        let mut failures = Vec::new();
        for (key, variant) in &keys {
            let c = compile(key).unwrap_or_else(|e| panic!("{key:?}: {e}"));
            assert!(!c.cubin.is_empty());
            if c.spill_bytes != Some(0) {
                failures.push(format!("{key:?} spills:\n{}", c.log));
            }
            report.push(format!(
                "sm_{} {:<9} x={} {variant:?} M={:<2} R={} U={} W={} PF={} SX={} XR={}{}{}{}{}{}: {} registers, {} spill bytes, {} stack bytes",
                key.arch,
                key.format.format().name(),
                key.x.name(),
                key.m,
                key.rows_per_warp,
                key.unroll,
                key.warps,
                u8::from(key.pipeline),
                u8::from(key.stage),
                u8::from(key.xreg),
                if key.tile_reduce { " TRED" } else { "" },
                if key.xh { " XH" } else { "" },
                if key.multicast { " XB+XMC" } else if key.bulk { " XB" } else { "" },
                if key.silu { " FUSE+SILU" } else if key.fuse { " FUSE" } else { "" },
                if key.nf4_table > 0 { format!(" NF4_TAB={}", key.nf4_table) } else { String::new() },
                c.registers.unwrap_or(0),
                c.spill_bytes.unwrap_or(0),
                c.stack_bytes.unwrap_or(0)
            ));
        }
        println!("{}", report.join("\n"));
        assert!(failures.is_empty(), "{} kernels spill:\n{}", failures.len(), failures.join("\n"));
        // In the machine code of every kernel built with programmatic dependent launch, no coherent load (what
        // an earlier kernel writes) ahead of griddepcontrol.wait (ARCHITECTURE.md, roofline-gpu; session 28).
        let mut seen = std::collections::HashSet::new();
        let pdl: Vec<KernelKey> =
            keys.iter().map(|(key, _)| *key).filter(|key| key.pdl && key.arch >= 90 && seen.insert(*key)).collect();
        // cuobjdump takes ~0.4 s a kernel: every core disassembles a share.
        let sass_of = |key: &KernelKey| {
            let c = compile(key).unwrap_or_else(|e| panic!("{key:?}: {e}"));
            nvrtc::disassemble(&c.cubin).unwrap_or_else(|e| panic!("{key:?}: {e}"))
        };
        let checked = match pdl.first().map(sass_of) {
            Some(None) | None => {
                eprintln!("SKIPPED the load-order check: no cuobjdump (scripts/fetch-cuda-tools.sh installs one)");
                0
            }
            Some(Some(_)) => {
                let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
                let found: Vec<String> = std::thread::scope(|scope| {
                    let handles: Vec<_> = pdl
                        .chunks(pdl.len().div_ceil(threads).max(1))
                        .map(|chunk| {
                            scope.spawn(move || {
                                let mut found = Vec::new();
                                for key in chunk {
                                    let sass = sass_of(key).unwrap_or_else(|| panic!("{key:?}: cuobjdump went away"));
                                    let loads = nvrtc::loads_before_wait(&sass);
                                    assert!(!loads.is_empty(), "{key:?}: a PDL build without griddepcontrol.wait");
                                    found.extend(
                                        loads.iter().filter(|l| l.coherent > 0).map(|l| format!("{key:?}: {l:?}")),
                                    );
                                }
                                found
                            })
                        })
                        .collect();
                    handles.into_iter().flat_map(|h| h.join().expect("a disassembling thread")).collect()
                });
                failures.extend(found);
                pdl.len()
            }
        };
        assert!(
            failures.is_empty(),
            "{} kernels load before griddepcontrol.wait what an earlier kernel writes:\n{}",
            failures.len(),
            failures.join("\n")
        );
        println!("load order checked in the SASS of {checked} PDL kernels");
        // the cache returns the same image
        let key = KernelKey {
            format: WoFormat::Int4G128,
            x: XDtype::F16,
            m: 1,
            rows_per_warp: 2,
            unroll: 4,
            warps: 4,
            pipeline: false,
            min_blocks: 1,
            stage: false,
            grouped: false,
            xreg: false,
            pdl: true,
            stages: 0,
            fuse: false,
            silu: false,
            tile_reduce: false,
            atomic_reduce: false,
            x_smem: false,
            xh: false,
            bulk: false,
            cluster: false,
            multicast: false,
            nf4_table: 0,
            arch: 90,
        };
        assert!(Arc::ptr_eq(&compile(&key).unwrap(), &compile(&key).unwrap()));
        assert!(compile(&KernelKey { m: 17, ..key }).is_err());
        assert!(compile(&KernelKey { format: WoFormat::Fp8E4M3, arch: 80, ..key }).is_err());
    }
}
