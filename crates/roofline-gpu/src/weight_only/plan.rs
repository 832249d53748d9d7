//! How a weight-only GEMV spreads its work over the GPU: the kernel variant ([`Variant`]), the launch
//! settings a caller may tune ([`Tuning`]) and the resolved launch plan ([`LaunchPlan`]: warps, rows, stages,
//! splits, shared memory) with the measured rules behind each default.

use super::{mma, nvrtc, KernelKey, WoFormat, XDtype};
use crate::GpuError;

/// How the work is spread over the GPU (try both on the device; see [`LaunchPlan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Two rows per warp, and K split over extra CTAs when the row tiles would not fill every SM.
    SplitK,
    /// One row per warp, no split: many small warps, no atomics.
    RowPerWarp,
    /// Four rows per warp (x converted once per four rows), K split like `SplitK`.
    Rows4,
    /// Tensor cores (mma.sync m16n8k16, FP32 accumulate): 16 rows per warp; every weight format with FP16 x,
    /// every one but FP16 weights with BF16 x ([`mma::supports`]; weights repacked into fragment order on
    /// upload, see `mma.rs`).
    Mma,
    /// x in registers (`kernels/weight_only_xreg.cu`): a warp owns one K slice for all the rows of its CTA,
    /// block scales transposed so a step's rows share one load. For M with `M x C x EPC <= 64` (4-bit: M <=
    /// 2; 8-bit: M <= 4; 16-bit: M <= 8); larger M falls back to `SplitK`.
    XReg,
    /// Tensor cores with x stationary (`wo_mma_xs` in `kernels/weight_only_mma.cu`): a warp keeps x's B
    /// fragments for its K slice (`unroll` 64-K tiles) in registers and walks row tiles; weights in the
    /// `Mma` fragment layout. The formats and activations of `Mma` (others fall back to `SplitK`).
    XMma,
}

/// Most weight rows for which 8-bit weights at M = 1 take the x-in-registers kernel with cp.async stages
/// by default ([`LaunchPlan::xreg_stages_default`]); split-K above (measured faster at 28672 and 128256 rows).
pub const XREG_STAGED_MAX_N: usize = 16384;

/// Most values of K at which FP16 weights at M = 1 with FP16 x take the x-in-registers engine on fast memory
/// where the ring does not take them (K above [`ring::MAX_K_FP16`](super::ring::MAX_K_FP16), or no multiple of 1024;
/// [`Variant::best_on`]). H200, session 44, 1x4096x14336: the x-in-registers kernel 30.9 us against split-K's 32.9
/// (the ring, session 45: 28.0). Its x-in-registers kernel loses to split-K at other N (session 45, us, BF16 weights,
/// split-K / x-in-registers: 1x2048x14336 19.8 / 21.3, 1x8192x12288 47.9 / 49.7; 1x4096x16384 37.4 / 34.8).
pub const FP16_XREG_MAX_K: usize = 16384;

/// Most rows of x (tokens) the weight-only kernels take: every kernel, workspace and server check is built
/// for M = 1..=`MAX_M`, the decode regime.
pub const MAX_M: usize = 16;

impl Variant {
    /// The fastest variant measured for `m` rows of x (bench/RESULTS.md; the H100, 16-bit M = 2 on the H200):
    /// tensor cores with x stationary from M = 2 wherever they take the formats ([`mma::supports`]: FP16 x with
    /// every weight format, BF16 x with all but FP16 weights), x in registers for 4-bit weights at M = 1,
    /// split-K on CUDA cores otherwise.
    pub fn best(format: WoFormat, x: XDtype, m: usize) -> Variant {
        // M = 2 (session 19, `r11-nvfp4-m1.txt`, `r12-m2.txt`, us, x-stationary tensor cores vs x in
        // registers): INT4 14336x4096 15.5 vs 17.4, 4096x14336 16.9 vs 44.6, 128256x4096 113 vs 124; MXFP4
        // 17.1 vs 20.5, 19.3 vs 45.5, 124 vs 143; NVFP4 17.9 vs 20.3, 20.2 vs 47.3, 135 vs 145, 4096x4096
        // 7.47 vs 7.49; NF4 19.6 vs 19.2 and 145 vs 138 but 21.7 vs 44.3 (down_proj's shape: a net gain).
        // 8-bit M = 2 (session 27, `r3-m2.txt`, us, x-stationary tensor cores vs split-K, FP8 / INT8):
        // 1024x4096 4.02 / 4.21 vs 6.70 / 6.17, 4096x4096 8.11 / 8.52 vs 10.6 / 9.60, 14336x4096 22.6 / 23.0
        // vs 26.6 / 25.7, 4096x14336 23.5 / 23.8 vs 28.7 / 26.4, 128256x4096 177 / 178 vs 179 / 186.
        // 16-bit M = 2 (H200, session 46, `r5/m2.txt`, us, x-stationary tensor cores vs split-K, FP16):
        // 14336x4096 29.9 vs 35.3, 4096x4096 10.7 vs 13.8, 4096x14336 30.0 vs 37.1, 1024x4096 5.34 vs 6.96,
        // 128256x4096 241 vs 247 (FP16 had taken split-K up to M = 2, from the H100's M = 3 measurements).
        if m >= 2 && mma::supports(format, x) {
            // Tensor cores with x stationary (H100 tuning tables at M = 3 and up, x14336x4096, us, XMma vs split-K):
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

    /// [`Variant::best_for`] on a GPU of `sm_count` SMs, compute capability `arch` (e.g. 90) and `peak_gb_s`
    /// of memory bandwidth: also the x-in-registers engine, which then runs the ring GEMV
    /// ([`ring::auto_on`](super::ring::auto_on)), for FP8 and INT8 at M = 1 with FP16 x wherever the ring takes
    /// them by default on sm_90+, where [`Variant::best_for`] would take split-K (N above
    /// [`XREG_STAGED_MAX_N`]). H200, session 37, us, split-K / ring: FP8 1x28672x4096 32.4-32.5 / 28.9-29.0,
    /// INT8 33.0-33.3 / 29.4; FP8 1x128256x4096 126 / 122, INT8 136 / 122. And from M = 2 wherever the ring takes
    /// that many rows of x by default ([`ring::auto_rows`](super::ring::auto_rows): 4-bit weights at M = 2 on fast
    /// memory where a CTA takes enough rows, 8-bit with BF16 x), where [`Variant::best_for`] takes the tensor cores.
    pub fn best_on(
        format: WoFormat,
        x: XDtype,
        m: usize,
        n: usize,
        k: usize,
        (sm_count, arch, peak_gb_s): (u32, u32, f64),
    ) -> Variant {
        // At M = 1 the 4-bit formats take the x-in-registers engine anyway (`best_for`); from M = 2 wherever the ring
        // takes more rows of x (`ring::auto_rows`: 4-bit weights at M = 2 on fast memory, 8-bit with BF16 x; the 4-bit
        // formats at M = 2-16 and small N on the tensor cores, `ring::mma_auto`).
        let ring = super::ring::takes(format)
            && (m >= 2 || format.bits() >= 8)
            && arch >= 90
            && super::ring::auto_rows((format, x), (m, n, k), sm_count, peak_gb_s);
        let fp16_long_k = format == WoFormat::Fp16
            && m == 1
            && x == XDtype::F16
            && arch >= 90
            && peak_gb_s >= super::ring::FAST_MEMORY_GB_S
            && (super::ring::MAX_K_FP16 + 1..=FP16_XREG_MAX_K).contains(&k);
        if ring || fp16_long_k {
            Variant::XReg
        } else {
            Variant::best_for(format, x, m, n, k)
        }
    }

    /// [`Variant::best_in_step`] on a GPU of `sm_count` SMs, compute capability `arch` and `peak_gb_s` of memory
    /// bandwidth: FP16 weights at M = 1 take what [`Variant::best_on`] takes for them alone, the x-in-registers
    /// engine on fast memory (the ring up to K = 8192, the x-in-registers kernel beyond), which the step gains
    /// from as the GEMVs alone do. H200, session 44, Llama-3.1-8B FP16 at batch 1, split-K / the x-in-registers
    /// engine with the ring: step 4331 / 3821 us (230.9 / 261.7 tok/s); in the step, us: qkv 16.0 / 12.9, o_proj
    /// 13.0 / 8.01, gate_up 49.1 / 55.1 (alone 58.7 / 53.4), down_proj 34.5 / 32.8 (x-in-registers). From M = 2
    /// every format takes what [`Variant::best_on`] takes alone where that is the ring for two or three rows of x
    /// ([`ring::auto_rows`](super::ring::auto_rows), session 50), not the ring on the tensor cores from M = 9, which
    /// lacks down_proj's SwiGLU on load ([`ring::mma_takes`](super::ring::mma_takes)): model-bench takes it for the
    /// other linears itself. Otherwise [`Variant::best_in_step`].
    pub fn best_in_step_on(
        format: WoFormat,
        x: XDtype,
        m: usize,
        n: usize,
        k: usize,
        device: (u32, u32, f64),
    ) -> Variant {
        // Rows of x on the CUDA-core ring; the tensor-core ring's are model-bench's to give (it knows which linear is
        // down_proj, whose SwiGLU on load that ring does not take: `ring::mma_auto`).
        let rows =
            (2..=super::ring::MAX_M).contains(&m) && !super::ring::plans_mma(format, (m, n, k), device.0, device.2);
        if (format.bits() == 16 || rows) && Variant::best_on(format, x, m, n, k, device) == Variant::XReg {
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
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
    /// `XReg` engine, INT4 g128, NF4, MXFP4, NVFP4, FP8 E4M3, INT8, FP16 or BF16 (K up to 15360), M = 1, FP16 or
    /// BF16 x, K a multiple of 1024, sm_90+: the ring kernel
    /// ([`ring`](super::ring): a producer warp streams the CTA's rows with bulk copies into a shared-memory ring)
    /// instead of the x-in-registers one (not with a norm beside an add or SwiGLU on load). Default: where
    /// each CTA takes at least [`ring::AUTO_MIN_STEPS`](super::ring::AUTO_MIN_STEPS) row steps with a deep enough ring, or a long K
    /// ([`ring::auto`](super::ring::auto): large N; [`ring::long_k`](super::ring::long_k): K >= 8192, e.g. down_proj).
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
    /// `XMma` with bulk rings and BF16 x, FP8 / INT8 / INT4 / NF4 / MXFP4 / NVFP4 weights: x converted in shared
    /// memory to f16, each row scaled by a power of two into [-1, 1) (exact for BF16 from 2^-16 of the row's
    /// largest value), so the MMAs take FP16 x's decodes, and the sums scaled back (`XF16`). Default: NF4 and
    /// FP8 E4M3 on the bulk ring, not fused (the fused builds were not run with it). H200, session 48, BF16 x,
    /// us, BF16 decodes / xf16 (FP16 x): NF4 16x14336x4096 23.8 / 20.9 (19.2), 16x4096x14336 25.2 / 21.8 (20.5),
    /// 8x14336x4096 19.7 / 17.2; FP8 24.0 / 21.8 (20.1), 26.0 / 23.3, 20.1 / 19.3. The others gain less or lose
    /// (the conversion waits for all of x before the first MMA): INT4 17.0 / 19.8 and 14.0 / 15.3 at M = 8; MXFP4
    /// 19.7 / 20.2 and 21.3 / 20.1; NVFP4 20.3 / 20.6 and 21.6 / 20.2; INT8 22.7 / 22.3 and 18.7 / 19.5 at M = 8.
    pub xf16: Option<bool>,
    /// `XMma` with bulk rings in one K split, 4- and 8-bit weights (sm_90+): a producer warp streams the CTA's
    /// tiles (contiguous in memory) in units of 16 KB into one ring shared by the warps, each warp taking
    /// `unroll` tiles of every unit, their sums added at each row tile's end (`XR`, entry `wo_mma_xr`; the M = 1
    /// ring GEMV's streaming) instead of a ring of `stages` slots of 2 KB per warp. x is staged in M rows.
    /// Taken where x and the ring fit (K / 64 a multiple of 16; `LaunchPlan::producer_plan`); asking for it
    /// asks for bulk rings and x in shared memory unless those are set. Default: off.
    pub producer: Option<bool>,
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

/// Fewest bytes of dynamic shared memory a producer-warp bulk-ring CTA ([`Tuning::producer`]) asks for: more
/// than half of Hopper's 228 KB a SM (less the 1 KB each CTA reserves), so that no second CTA shares its SM
/// (the ring GEMV's `ring::alone_smem`: a second CTA beside it, let in early by PDL, halves both streams).
pub const XR_ALONE_SMEM_BYTES: u32 = 114 * 1024;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// Compiled with the fusions of [`Fusion`](super::Fusion) (`FUSE`); without, the kernels ignore their `flags`.
    pub fuse: bool,
    /// Compiled with SwiGLU on load ([`Fusion::silu_x`](super::Fusion::silu_x), `SILU`; with `fuse`): its x-load branch costs the
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
    /// BF16 x converted to scaled f16 in shared memory for FP16 x's decodes ([`Tuning::xf16`]; set by
    /// [`LaunchPlan::new_x`]).
    pub xf16: bool,
    /// `XMma` with bulk rings: one ring of `stages` units fed by a producer warp ([`Tuning::producer`]); the
    /// CTA has `warps` + 1 warps ([`LaunchPlan::threads`]).
    pub producer: bool,
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
            // FP16 x only: with BF16 x (and y) f16 partial sums took INT4 1x1000x4096 past the 1e-3 the results
            // are held to (1.1e-3, against the BF16-rounded reference of sessions 46-47; session 48's check reads
            // the error past the output's rounding, where the ring's f16x2 sums with BF16 x read 5e-4; not re-run).
            xh: self.xh && x == XDtype::F16,
            bulk: self.bulk && self.x_smem && arch >= 90,
            cluster: self.cluster && self.bulk && self.x_smem && arch >= 90,
            multicast: self.multicast && self.bulk && self.x_smem && arch >= 90,
            // BF16 x: entries of hi and lo pairs (8 bytes), half the copies in the same bytes; with two n8 blocks
            // of x (M > 8) fused builds and 16 copies spill at 128 registers (8-24 bytes, session 48): there the
            // byte permutes (the table's bytes stay reserved, unread)
            xf16: self.xf16_key(format, x, arch),
            producer: self.producer && self.bulk && self.x_smem && arch >= 90,
            nf4_table: if format == WoFormat::Nf4 && self.bulk && self.x_smem && arch >= 90 {
                if x == XDtype::Bf16 && !self.xf16_key(format, x, arch) {
                    let copies = self.nf4_table / 2;
                    if m > 8 && (self.fuse || copies < 32) {
                        0
                    } else {
                        copies
                    }
                } else {
                    self.nf4_table
                }
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

    /// Whether the plan's kernel can compute SwiGLU as it loads x ([`Fusion::silu_x`](super::Fusion::silu_x)): the x-in-registers
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

    /// Whether the engine turns bulk rings on ([`Tuning::bulk`]) where [`LaunchPlan::bulk_default`] leaves them off,
    /// on a device of `peak_gb_s` memory bandwidth: 8-bit weights from M = 8 on fast memory
    /// ([`ring::FAST_MEMORY_GB_S`](super::ring::FAST_MEMORY_GB_S), the H200), where the per-warp bulk rings beat x
    /// stationary at every size (H200, session 49, `r9-bulk8.txt`, us, x stationary -> bulk rings, FP8 / INT8:
    /// 16x4096x4096 12.5 -> 10.6 / 12.9 -> 11.0, 16x2048x4096 9.23 -> 7.74 / 9.46 -> 7.88, 16x1024x4096 7.40 ->
    /// 6.61, 16x4096x3072 11.5 -> 9.11, 16x4096x2048 7.58 -> 7.53, 12x4096x4096 12.2 -> 10.5, 9x4096x4096 11.1 ->
    /// 10.1, 8x4096x4096 9.14 -> 8.91 / 9.52 -> 9.34; but 6x4096x4096 8.83 -> 8.85 and 4x4096x4096 7.48 -> 8.56).
    /// Above 4096 x 4096 weights `bulk_default` already takes them; on the H100 (session 19) 16x4096x4096 ran
    /// 13.5 x stationary against 14.9, so slower memory keeps `bulk_default`. FP16 x only: BF16 x was not measured.
    pub fn bulk_on_fast_memory(format: WoFormat, x: XDtype, m: usize, peak_gb_s: f64) -> bool {
        format.bits() == 8 && x == XDtype::F16 && m >= 8 && peak_gb_s >= super::ring::FAST_MEMORY_GB_S
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
        if bulk && tuning.producer == Some(true) {
            if let Some(p) = Self::producer_plan(format, m, n, k, sm_count, tuning, pdl) {
                return p;
            }
        }
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

    /// The bulk ring with a producer warp ([`Tuning::producer`], `wo_mma_xr`) for `m x n x k`, or `None` where it
    /// does not run the call: 4- or 8-bit weights, one K split, units of `warps` x `unroll` tiles (default 16 x 2
    /// for 4-bit codes, 16 x 1 for 8-bit: 16 KB) that divide a row tile (K / 64 tiles; else one tile a warp),
    /// `stages` slots (default 4, fewer down to 2 where x, the ring and the partial sums would not fit
    /// [`XB_SMEM_BYTES`]). The dynamic shared memory: NF4's code-pair table (as many copies as leave 3 slots),
    /// x in M rows, the ring, then ceil((slots + 1) / units a row tile) buffers of a row tile's partial sums
    /// (the kernel's `xr_buffers`).
    fn producer_plan(
        format: WoFormat,
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        tuning: Tuning,
        pdl: bool,
    ) -> Option<LaunchPlan> {
        let bits = format.bits();
        if !(bits == 4 || bits == 8) || tuning.split_k.is_some_and(|s| s != 1) {
            return None;
        }
        let kt = (k / 64) as u32;
        let warps = tuning.warps.unwrap_or(XB_WARPS);
        let wanted = tuning.unroll.unwrap_or(if bits == 4 { 2 } else { 1 });
        let unroll = [wanted, 1].into_iter().find(|&u| kt > 0 && kt % (warps * u) == 0)?;
        let ut = warps * unroll;
        let qv = mma::words_per_tile(format) as u32;
        let scale_per_tile = match format {
            WoFormat::Nvfp4 => 64,
            WoFormat::Int4G128 | WoFormat::Nf4 | WoFormat::Mxfp4 => 32,
            _ => 0,
        };
        let slot = (ut * qv * 512 + ut * scale_per_tile).div_ceil(128) * 128;
        let x = (m as u32 * (kt * 64 + 8) * 2).div_ceil(128) * 128;
        let upr = kt / ut;
        let nb = (m as u32).div_ceil(8);
        let smem = |s: u32| x + s * slot + (s + upr) / upr * warps * nb * 128 * 4;
        let most = tuning.stages.unwrap_or(4).max(2);
        let slots_with = |table: u32| (2..=most).rev().find(|&s| smem(s) + table <= XB_SMEM_BYTES);
        // NF4's code-pair table in front (`NF4_TAB`): the most copies (of those asked for) that leave 3 slots,
        // else the most that leave 2, else none (byte permutes).
        let copies: &[u32] = match (format, tuning.nf4_table) {
            (WoFormat::Nf4, None) => &[64, 32, 16],
            (WoFormat::Nf4, Some(c)) if c > 0 => &[64, 32, 16, 8],
            _ => &[],
        };
        let want = tuning.nf4_table.unwrap_or(64);
        let fit = |least: u32| {
            copies
                .iter()
                .filter(|&&c| c <= want)
                .find_map(|&c| slots_with(Self::nf4_table_bytes(c)).filter(|&s| s >= least.min(most)).map(|s| (c, s)))
        };
        let (nf4_table, slots) = fit(3).or_else(|| fit(2)).or_else(|| slots_with(0).map(|s| (0, s)))?;
        let row_tiles = (n as u32).div_ceil(16);
        let rtpc = tuning.rows_per_cta.map_or_else(|| row_tiles.div_ceil(sm_count.max(1)), |r| r.div_ceil(16).max(1));
        Some(LaunchPlan {
            chunks_per_split: kt,
            smem_bytes: (smem(slots) + Self::nf4_table_bytes(nf4_table)).max(XR_ALONE_SMEM_BYTES),
            nf4_table,
            x_smem: true,
            bulk: true,
            producer: true,
            stages: slots,
            ..Self::xmma_plan(unroll, warps, 1, row_tiles, rtpc, 1, pdl)
        })
    }

    /// Threads of one CTA: its warps, and the producer warp of [`Tuning::producer`].
    pub fn threads(&self) -> u32 {
        (self.warps + u32::from(self.producer)) * 32
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
        if format != WoFormat::Nf4 || !plan.bulk || plan.producer {
            return plan; // (the producer's plan sizes its table itself)
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
            xf16: false,
            producer: false,
        }
    }

    /// Whether the key of this plan converts BF16 x to scaled f16 ([`Tuning::xf16`]): the bulk ring on sm_90+ with
    /// BF16 x and weights the MMAs decode with FP16 x (FP8, INT8, the 4-bit formats).
    fn xf16_key(&self, format: WoFormat, x: XDtype, arch: u32) -> bool {
        self.xf16 && x == XDtype::Bf16 && self.bulk && self.x_smem && arch >= 90 && format.bits() <= 8
    }

    /// [`LaunchPlan::new`] for `x` activations: NF4 with BF16 x through the bulk rings' table of code pairs (hi
    /// and lo parts, two passes of MMAs, `LaunchPlan::key`) takes 2 tiles a lane in flight at M <= 8 (one n8
    /// block of x), where the default 4 spill 20 bytes at 128 registers (3: none; session 48, H200, us, 4 / 2 / 3
    /// tiles: 2x14336x4096 18.6 / 19.1 / 19.5, 8x14336x4096 19.0 / 19.7 / 19.8; the byte permutes before: 27.9,
    /// 28.1). An explicit `tuning.unroll` wins.
    #[allow(clippy::too_many_arguments)]
    pub fn new_x(
        variant: Variant,
        format: WoFormat,
        x: XDtype,
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        tuning: Tuning,
    ) -> LaunchPlan {
        let plan = LaunchPlan::new(variant, format, m, n, k, sm_count, tuning);
        let xf16 = x == XDtype::Bf16
            && plan.bulk
            && format.bits() <= 8
            && tuning.xf16.unwrap_or(matches!(format, WoFormat::Nf4 | WoFormat::Fp8E4M3));
        let nf4_bf16_table = format == WoFormat::Nf4 && x == XDtype::Bf16 && !xf16 && plan.bulk && plan.nf4_table > 0;
        let plan = if nf4_bf16_table && m <= 8 && tuning.unroll.is_none() && plan.unroll > 2 {
            LaunchPlan::new(variant, format, m, n, k, sm_count, Tuning { unroll: Some(2), ..tuning })
        } else {
            plan
        };
        LaunchPlan { xf16, ..plan }
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
                xf16: false,
                producer: false,
            };
            return plan.with_rows_per_cta(n, m, rpc);
        }
        // (a producer warp feeds a bulk ring with x in shared memory: asking for it asks for both)
        let producer = tuning.producer == Some(true);
        let bulk = tuning.bulk.unwrap_or_else(|| producer || Self::bulk_default(format, n, k));
        let x_smem = tuning.x_smem.unwrap_or_else(|| (producer && bulk) || Self::x_smem_default(format, m, n, k, bulk));
        if variant == Variant::XMma && x_smem {
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
                xf16: false,
                producer: false,
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
            xf16: false,
            producer: false,
        }
    }
}
