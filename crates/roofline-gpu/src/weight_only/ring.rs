//! The ring-streaming GEMV of a batch-1 decode step (`kernels/wo_ring.cu`): y = W rmsnorm(x) or y (+)= W x
//! (x itself or SwiGLU of the gate_up row, [`Input`]), 4-, 8- or 16-bit weights, FP16 or BF16 activations
//! ([`takes`]), sm_90+; also for 2 or 3 rows of x ([`MAX_M`], session 50), each weight decoded once for all of
//! them (the engine's default at M = 2 on fast memory: [`auto_rows`]). A producer
//! warp per CTA streams the CTA's rows with bulk copies into a ring in shared memory from its first
//! instruction, before `griddepcontrol.wait` (a CTA resident beside the previous kernel of the step has its
//! first slots, or all its rows, by the time x is ready); the consumer warps multiply them in f16x2 as in the
//! fused FFN (INT4 g128; MXFP4 / NVFP4 in the E2M1 device layout; NF4 through a shared-memory table of its 256
//! code pairs, a copy per bank, 64 KB of the dynamic shared memory after the ring, [`NF4_WIDE_TABLE_BYTES`]; FP8
//! E4M3 and INT8 decoded to exact f16 pairs, their per-row FP32 scales applied to the row sums, since session 37;
//! FP16 in f16x2 with no decode, session 44; BF16 widened to FP32 and multiplied in FP32, session 45).
//! The x-in-registers engine runs it at M = 1 where each CTA takes many row steps and its ring stays deep, and
//! for a long K in one row group with its row steps in K parts ([`auto`], [`long_k`]; `Tuning::ring` forces it
//! either way). H100, us, x-in-registers vs ring (bench/RESULTS.md, sessions 14 and 15): INT4 1x14336x4096
//! 14.9 vs 13.3, 1x128256x4096 96.9 vs 94.1 (2.90 TB/s); MXFP4 1x14336x4096 16.7 vs 15.1, 1x28672x4096 29.0 vs
//! 24.9, 1x128256x4096 109 vs 110-125 (2-3 ring slots); NVFP4 1x14336x4096 18.8 vs 17.3, 1x28672x4096 33.1 vs
//! 28.0; NF4 (session 23, pair table) 1x14336x4096 16.1 vs 14.9 (session 24, wide table: 13.9-14.0, 13.5 in
//! two row groups); with few row steps per CTA the ring's start costs more than it saves (INT4 1x4096x4096 5.40
//! vs 7.16, 1x6144x4096 6.75 vs 9.00; 1x4096x14336 16.4 vs 16.9 in whole steps, see [`long_k`]).
//!
//! Layout: codes row-major (as packed), scale and zero-point tables transposed (`pack::xreg_tables`). A CTA
//! stages its rows' tables in shared memory first, or where they would leave no ring or (in K parts) under two
//! row steps streams them beside each slot ([`RingGemv::streamed_scales`]) from step-major tables
//! (`pack::ring_step_tables`, one bulk copy a slot, `ScaleTables`): Llama-3-70B's LM head 1x128256x8192 INT4
//! 299 -> 184 us on the H100, NVFP4 272 -> 198 (sessions 33-34).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::ffn::{stream_options, STREAM_SOURCE};
use super::nvrtc::{compile_cubin_cached, load_checked, XDtype, WEIGHT_ONLY_XREG_SOURCE};
use super::pack::{self, xreg_tables, PackedWeights, WoFormat};
use super::{launch_cluster_ex, max_active_clusters, nvrtc_available, LaunchPlan, Tuning, Variant};
use crate::{Gpu, GpuError};

/// The kernel (appended to the x-in-registers source and the streaming helpers).
pub const RING_SOURCE: &str = include_str!("../kernels/wo_ring.cu");

/// Most dynamic shared memory one CTA may take (the ring, the CTA's scale tables and sums).
pub const SMEM_BUDGET: usize = 200 * 1024;

/// CTAs of the ring GEMV per SM: `ROOFLINE_RING_CTAS_PER_SM` (1 or 2) for tuning experiments, else 1. With 2 the
/// grid is two waves' worth of CTAs that share each SM (twice the producers and streams in flight a SM), each
/// with half the shared-memory budget and registers for two (`RW_MINB`).
fn ctas_per_sm() -> usize {
    std::env::var("ROOFLINE_RING_CTAS_PER_SM")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|c| (1..=2).contains(c))
        .unwrap_or(1)
}

/// Dynamic shared memory a ring CTA asks for, its layout needing `used` bytes on the device of `ctx`: with one CTA
/// a SM ([`ctas_per_sm`]) at least enough that no second CTA fits beside it (more than half the SM's shared
/// memory with the reservation of each), else `used`. `ROOFLINE_RING_ALONE=0` asks for `used` only (A/B runs).
///
/// A ring with few slots (a CTA of few row steps) needs little shared memory, and where its threads and
/// registers leave room for two CTAs a SM, the block scheduler puts two on some SMs while others sit idle (PDL lets
/// the next launch's CTAs in early too). H200, session 43 (bench/RESULTS.md), us, a second CTA fitting
/// (`ROOFLINE_RING_ALONE=0`) / alone: MXFP4 1x4096x4096 6.24 / 4.63, 1x6144x4096 7.91 / 5.58, 1x2048x5120 5.61 /
/// 4.26; NVFP4 1x4096x4096 6.38 / 4.73; NF4 1x2048x4096 4.54 / 3.78; INT4 1x8192x3072 8.03 / 5.99 (INT4's 80
/// registers leave no room for a second CTA of 3 row groups at K = 4096: 4.61 / 4.63); unchanged where the ring's
/// slots fill the SM (1x14336x4096, every format, within 0.3%); Llama-3.1-8B MXFP4 at batch 1 641.0 / 671.8
/// tokens/s (qkv in the step 7.67 / 5.45, o_proj 6.13 / 4.79), INT4 665.0 / 664.7. The H100 is unmeasured.
fn alone_smem(ctx: &CudaContext, used: usize) -> Result<usize, GpuError> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    if ctas_per_sm() != 1 || std::env::var("ROOFLINE_RING_ALONE").is_ok_and(|v| v == "0") {
        return Ok(used);
    }
    let per_sm = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?;
    let reserved = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)?;
    Ok(used.max(alone_bytes(per_sm.max(0) as usize, reserved.max(0) as usize)))
}

/// Fewest bytes of dynamic shared memory a CTA asks for so that two of them (each with `reserved` bytes more)
/// do not fit in `per_sm` bytes: a 128-byte multiple.
fn alone_bytes(per_sm: usize, reserved: usize) -> usize {
    (per_sm / 2).saturating_sub(reserved).next_multiple_of(128) + 128
}

/// Most bytes of the ring: `ROOFLINE_RING_KB` (16 to 200) for tuning experiments, else all of
/// [`SMEM_BUDGET`] that the tables leave.
fn ring_limit() -> usize {
    std::env::var("ROOFLINE_RING_KB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|k| (16..=200).contains(k))
        .map_or(SMEM_BUDGET, |k| k * 1024)
}

/// Most values of K of 4-bit weights: 31 slices of 1024, one row group of 31 warps and the producer warp in 1024
/// threads ([`max_k`]: 8-bit weights half of it).
pub const MAX_K: usize = 31 * 1024;

/// Whether the ring takes `format`: the 4-bit formats (block scales in tables), FP8 E4M3 / INT8 (per-row
/// FP32 scales applied to the row sums), FP16 and BF16 (no scales), each with FP16 or BF16 x. BF16 weights
/// multiply x in FP32 (wo_stream.cuh's row_step); the others in f16x2, with x first scaled by a power of two
/// into [-1, 1) (wo_ring.cu), where BF16's 8 significant bits are exact in f16 from 2^-16 of max|x| up (below
/// it a value is rounded by at most 2^-24 max|x|): BF16 x takes the FP16 x products (session 48; before, BF16 x
/// with 4-, 8- and FP16 weights took the x-in-registers kernel's FP32 path).
pub fn takes(format: WoFormat) -> bool {
    matches!(
        format,
        WoFormat::Int4G128
            | WoFormat::Nf4
            | WoFormat::Mxfp4
            | WoFormat::Nvfp4
            | WoFormat::Fp8E4M3
            | WoFormat::Int8
            | WoFormat::Fp16
            | WoFormat::Bf16
    )
}

/// Values of K one consumer warp takes (a K slice: 32 lanes x one chunk of 16 bytes, of 32 for FP16 and BF16): 1024 of
/// 4-bit weights, 512 of 8- and 16-bit ones (`KSL`, `LCB` in wo_stream.cuh).
fn slice_values(format: WoFormat) -> usize {
    let lane_bytes = if format.bits() == 16 { 32 } else { 16 };
    32 * lane_bytes * 8 / format.bits()
}

/// K slices (consumer warps of one row group) of rows of `k` `format` values.
fn slices(format: WoFormat, k: usize) -> usize {
    (k / slice_values(format)).max(1)
}

/// Threads of a ring CTA for rows of `k` `format` values in `groups` row groups: the consumer warps (K slices x row
/// groups) and the producer warp.
/// On the tensor cores (`mma`, [`mma_plan`]) one row group of K / 256 warps, and the epilogue warp (`RW_EPI`) that
/// adds up their row sums and stores y (where K is a multiple of 1024, K / 256 warps are a multiple of 4 and the 2
/// warps more stay within the same 128 threads of the register allocation as one would, [`register_room`]).
fn cta_threads(format: WoFormat, k: usize, groups: usize, mma: bool) -> usize {
    if mma {
        k / MMA_SLICE * 32 + 64
    } else {
        slices(format, k) * groups * 32 + 32
    }
}

/// Most values of K the ring takes for `format`: 31 K slices, a multiple of 1024 (for FP16 and BF16 [`MAX_K_FP16`]).
pub fn max_k(format: WoFormat) -> usize {
    31 * slice_values(format) / 1024 * 1024
}

/// Most values of K of FP16 (and BF16) weights the ring takes: 30 K slices of 512. Past K = 12288 a row step (8 rows,
/// over 192 KB) is more than the ring holds: fewer slots than K parts (`least_slots`).
pub const MAX_K_FP16: usize = 15360;

/// Bytes of one row of `k` `format` codes.
fn row_bytes(format: WoFormat, k: usize) -> usize {
    k * format.bits() / 8
}

/// Rows per row step (one bulk copy).
const STEP_ROWS: usize = 8;

/// Most rows of x one call of the ring GEMV multiplies (`RW_MAX_M` in wo_ring.cu): each weight it decodes goes
/// into as many products ([`auto_rows`] for where the engine takes it past one row).
/// (At M = 4 every 4-bit build spills: 128 registers a thread for 416 threads.)
pub const MAX_M: usize = 3;

/// Most rows of x the ring GEMV multiplies on the tensor cores (`RW_MMA` in wo_ring.cu, `mma_plan`): x the
/// A operand of mma.sync.m16n8k16, 16 rows.
pub const MMA_MAX_M: usize = 16;

/// Fewest rows of x the ring plans on the tensor cores: two where a CTA takes few row steps (`mma_m2_max_steps`),
/// three and more always (`plan_on`). Until session 57 it was 9: at 8 rows and fewer every lane's x rows g + 8 are
/// past M, and ptxas, knowing so, kept one copy of row g's A fragments and spilled (96 registers, 4-92 bytes); a bound
/// it cannot fold keeps the copies as at 9-15 rows (wo_ring.cu `m8`), and the builds spill nothing.
pub const MMA_MIN_M: usize = 2;

/// Fewest rows of x at which the ring is planned on the tensor cores whatever the row steps a CTA.
const MMA_ALWAYS_M: usize = 3;

/// Most row steps a CTA of two rows of x on the tensor cores (fewer than [`AUTO_ROWS_MIN_STEPS`], from which the
/// default runs two rows on the CUDA-core ring; NF4 28, its tensor-core ring faster there too). H200, session 57
/// (h200-2026-11-30-session57 r3, r6), us, the default before (the bulk ring below 8 steps, else the CUDA-core ring;
/// NF4 the CUDA-core ring) / the tensor-core ring: 2x4096x4096 (4 steps) INT4 5.94 / 5.47, NF4 6.29 / 5.52, MXFP4 6.13
/// / 5.55, NVFP4 6.21 / 5.68; 2x6144x4096 (6) 7.34 / 6.88, 7.66 / 6.94, 7.70 / 7.02, 7.87 / 7.17; 2x14336x4096 (14) 12.2
/// / 12.3, 13.2 / 12.3, 11.9 / 12.7, 12.4 / 13.0; NF4 2x28672x4096 (28) 24.0 / 22.1 (BF16 x 23.9 / 22.3). BF16 x (r6):
/// 2x4096x4096 INT4 6.18 / 5.68, MXFP4 6.94 / 6.25, NVFP4 7.08 / 6.21; 2x6144x4096 7.80 / 7.18, 8.98 / 7.68, 9.13 /
/// 7.76. `ROOFLINE_RING_MMA_M2_STEPS` overrides it for every format, for experiments (0: two rows on the CUDA-core
/// ring at any row steps a CTA, [`auto_rows`]; session 61 r6 measured INT4 there against the tensor-core ring).
fn mma_m2_max_steps(format: WoFormat) -> usize {
    if let Some(steps) = std::env::var("ROOFLINE_RING_MMA_M2_STEPS").ok().and_then(|v| v.parse().ok()) {
        return steps;
    }
    if format == WoFormat::Nf4 {
        28
    } else {
        AUTO_ROWS_MIN_STEPS - 1
    }
}

/// Values of K one warp of the tensor-core row step takes (its A fragments in registers: 16 k16 blocks).
const MMA_SLICE: usize = 256;

/// Row steps whose row sums the tensor-core row step keeps in each of its two buffers (`RW_MMA_CH`) where a CTA takes
/// fewer than [`MMA_CHUNK_WIDE_FROM`] or more than [`MMA_CHUNK_WIDE_TO`] row steps: every warp's for every row of x,
/// 32 KB for both at M = 16, K = 4096 (all of a CTA's 14 steps would take 112 KB from the ring).
/// Session 53 (h200-2026-11-30-session53 r7, us, 2 / 4): 16x14336x4096 14.6 / 14.5, 9x 14.0 / 13.6, 16x28672x4096
/// 24.95 / 24.15, but 12x10240x4096 (10 steps a CTA, 7 slots instead of 9) 11.3 / 11.8.
const MMA_CHUNK: usize = 2;

/// [`MMA_CHUNK_WIDE`] row steps a buffer where a CTA takes from this many row steps ...
const MMA_CHUNK_WIDE_FROM: usize = 8;
/// ... up to this many (the most measured; at 56 NF4's ring would keep 2 slots with buffers of 4 steps, 4 with 2).
const MMA_CHUNK_WIDE_TO: usize = 42;

/// Row steps a sums buffer where a CTA takes [`MMA_CHUNK_WIDE_FROM`] to [`MMA_CHUNK_WIDE_TO`] of them: fewer chunk
/// barriers a CTA. Session 56 (h200-2026-11-30-session56 r2, us, FP16 x, 2 / 4 / 3 steps a buffer; the sums' 32 KB
/// more at 4 take ring slots): INT4 16x14336x4096 (14 steps a CTA) 14.0 / 14.05 / 14.35, 9x14336x4096 13.55 / 13.3 /
/// 13.9, 16x28672x4096 (28) 24.9 / 24.6 / 25.5, 12x10240x4096 (10) 10.85 / 10.7 / 11.3; NF4 16.15 / 15.75 / 16.5,
/// 14.05 / 13.7 / 13.75, 28.25 / 26.5 / 28.45, 11.6 / 11.35 / 12.3; MXFP4 with BF16 x 15.6 / 15.6 / 15.75, 15.65 /
/// 15.2 / 14.65, 26.4 / 26.65 / 26.7, 12.85 / 11.9 / 12.55. At 4 steps a CTA (16x4096x4096; one buffer would hold
/// all of them, so the epilogue warp could add nothing before the last) 4 lost: INT4 6.51 / 6.61, NF4 6.9 / 8.1
/// (MXFP4 with BF16 x 8.15 / 7.97). Session 56 r4 (2 / 4): 42 steps a CTA (16x43008x4096) INT4 35.5 / 34.15, NF4
/// 38.9 / 37.85, MXFP4 with BF16 x 37.9 / 36.65; 5-7 steps mixed, mostly 2 ahead: 16x5120x4096 INT4 7.44 / 7.73, NF4
/// 7.9 / 9.3; 16x6144x4096 INT4 7.98 / 8.33, NF4 9.85 / 9.78, MXFP4 with BF16 x 9.4 / 9.67; 12x6144x4096 7.97 / 7.9,
/// 8.0 / 8.37, 9.17 / 9.1; 16x7168x4096 8.8 / 8.93, 10.8 / 10.6, 10.35 / 10.3.
const MMA_CHUNK_WIDE: usize = 4;

/// Row steps a sums buffer for a CTA of `per` row steps: [`MMA_CHUNK_WIDE`] from [`MMA_CHUNK_WIDE_FROM`] to
/// [`MMA_CHUNK_WIDE_TO`] steps, else [`MMA_CHUNK`]; or `ROOFLINE_RING_MMA_CHUNK` (1 to 8 row steps) for experiments.
fn mma_chunk(per: usize) -> usize {
    std::env::var("ROOFLINE_RING_MMA_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|c| (1..=8).contains(c))
        .unwrap_or(if (MMA_CHUNK_WIDE_FROM..=MMA_CHUNK_WIDE_TO).contains(&per) { MMA_CHUNK_WIDE } else { MMA_CHUNK })
}

/// Whether `format`'s CUDA-core row steps (the ring GEMV's at 1 to 3 rows of x, the fused FFN's phase A, attn_qkv's
/// ring) take its codes as f16 subnormals (`RW_SUBN` in wo_stream.cuh, `dot8subn`: 8 instructions a word of 8 codes
/// instead of 13, the zero point off each chunk's sum in FP32; session 60, H200: 1x14336x4096 9.72 -> 9.30 us,
/// 1x4096x14336 10.5 -> 9.88, 1x128256x4096 67.0 -> 65.0; since session 61 the f16 sums are added on the tensor cores,
/// `row_step_subn`: 1x14336x4096 9.30 -> 8.90, 2x14336x4096 12.1 -> 10.9): INT4, unless `ROOFLINE_RING_SUBN=0` (the
/// q - z decode, `dot8hz`, for A/B runs).
pub(crate) fn int4_subnormal(format: WoFormat) -> bool {
    format == WoFormat::Int4G128 && !std::env::var("ROOFLINE_RING_SUBN").is_ok_and(|v| v == "0")
}

/// Bytes of padding after each row of a tensor-core ring slot (`RW_MMA_PAD` in wo_ring.cu: the slot's rows off one
/// another's shared-memory banks, copied row by row): [`MMA_PAD`], or `ROOFLINE_RING_MMA_PAD` (0 to 128, a multiple
/// of 16) for experiments.
fn mma_pad() -> usize {
    std::env::var("ROOFLINE_RING_MMA_PAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|p: &usize| *p <= 128 && p % 16 == 0)
        .unwrap_or(MMA_PAD)
}

/// [`mma_pad`]'s default: 32 bytes, a warp's code loads in 2 wavefronts instead of 8. Session 54 (h200-2026-11-30-
/// session54 r4, us, no padding / 32 bytes, the tensor-core ring forced): INT4 16x14336x4096 14.55 / 14.0, 9x 13.9 /
/// 13.55, 16x4096x4096 6.77 / 6.37, 16x28672x4096 24.75 / 24.85; NF4 16x14336x4096 18.5 / 16.2, 9x 16.45 / 14.4,
/// 16x4096x4096 7.8 / 6.95, 16x28672x4096 32.95 / 28.4; NVFP4 16x14336x4096 15.3 / 14.9, 9x 14.6 / 14.5,
/// 16x4096x4096 7.4 / 6.97.
const MMA_PAD: usize = 32;

/// The ring for the tensor-core row step ([`mma_plan`]) of `m` rows of x against `k` values a CTA: the scale tables of
/// the CTA's `per` row steps staged (or, `streamed`, each slot's beside it), two buffers of the row sums of
/// [`mma_chunk`] steps per warp (in `splits` K splits then the sums of all the CTA's rows), as many slots of whole row
/// steps (rows padded by [`mma_pad`]) as fit beside them (up to `per`, at least 2 where it has 2), and NF4's wide pair
/// table. `None`: fewer fit.
fn mma_layout(format: WoFormat, (m, k): (usize, usize), per: usize, streamed: bool, splits: usize) -> Option<Layout> {
    // The sums, and 16 bytes to align them (the epilogue warp reads them in 16-byte loads); in K splits then the CTA's
    // sums of all its rows, which the cluster adds at the end.
    let split_sums = if splits > 1 { m * per * STEP_ROWS * 4 } else { 0 };
    let sums = 2 * m * (k / MMA_SLICE) * mma_chunk(per) * STEP_ROWS * 4 + 16 + split_sums;
    // The scales staged for the CTA's rows, or streamed beside each slot.
    let staged = if streamed { 0 } else { table_bytes_per_row(format, k) * per * STEP_ROWS };
    let tables = staged + sums;
    let slot =
        slot_bytes(format, k, 1) + STEP_ROWS * mma_pad() + if streamed { slot_scale_bytes(format, k, 1) } else { 0 };
    // NF4 decodes through its wide pair table, after the ring and the tables.
    let nf4 = format == WoFormat::Nf4;
    let budget = if nf4 { NF4_SMEM_BUDGET - NF4_WIDE_TABLE_BYTES - 128 } else { SMEM_BUDGET };
    let slots = (ring_limit().min(budget.checked_sub(tables)?) / slot).min(per);
    let used = slots * slot + tables;
    let nf4_wide_at = nf4.then(|| nf4_table_offset(used));
    (slots >= 2.min(per)).then_some(Layout {
        slots,
        smem: nf4_wide_at.map_or(used, |at| at + NF4_WIDE_TABLE_BYTES),
        streamed_scales: streamed,
        nf4_wide_at,
    })
}

/// Most values of K the tensor-core row step takes: 16 warps of 96 registers (x's A fragments take 64); at K = 5120
/// its 21 warps leave 80 and the build spills (ptxas, sm_90, CUDA 12.9).
const MMA_MAX_K: usize = 4096;

/// Whether the ring GEMV plans `m` rows of x against `k`-value rows of `format` on the tensor cores (`RW_MMA`): INT4
/// g128 (since session 53 also NVFP4, its E4M3 block scales multiplied into the decoded f16 pairs, exactly; since
/// session 54 MXFP4, its E8M0 scales so, exactly in [`MXFP4_MMA_WINDOW`], [`mxfp4_mma_window`], and NF4, its codes
/// through the wide pair table, each 64-value block's sums times its scales) from
/// [`MMA_MIN_M`] to [`MMA_MAX_M`] rows (also from one row with `ROOFLINE_RING_MMA=1`, for experiments), K a multiple
/// of 1024 up to [`MMA_MAX_K`]. Each weight is decoded once for every row, as on the CUDA cores, but the products are
/// mma.sync's; the stream is the ring's. Whether it runs also takes the x type and no SwiGLU on load
/// ([`mma_takes`]).
fn mma_plan(format: WoFormat, m: usize, k: usize) -> bool {
    let forced = mma_forced();
    !mma_off()
        && format.bits() == 4
        && k % MMA_SLICE == 0
        && (k <= MMA_MAX_K || mma_split_k(format, m, k))
        && (m >= MMA_MIN_M || forced && m >= 1)
        && m <= MMA_MAX_M
}

/// K splits the tensor-core row step takes `k` in (`RW_SPLITS` in wo_ring.cu: each split's CTA streams the rows' codes
/// of its share of K, FD = k / splits values, against x's A fragments of that share): 1 up to `MMA_MAX_K`, past it the
/// fewer of 2 or 4 splits of whole `MMA_SLICE`s of at most `MMA_MAX_K` values (Llama-3's down_proj K = 14336: 4
/// of 3584; 8192: 2 of 4096), `None` where neither divides K so (K = 11008: 43 slices, a prime; 28672: 112 slices,
/// whose 2 or 4 splits would be longer than 4096).
pub fn mma_splits(k: usize) -> Option<usize> {
    if k == 0 {
        return None;
    }
    [1, 2, 4].into_iter().find(|s| k % s == 0 && (k / s) % MMA_SLICE == 0 && k / s <= MMA_MAX_K)
}

/// Row blocks (clusters of `splits` CTAs, [`mma_splits`]) of a wave of `wave` CTAs: `wave / splits`. A cluster's CTAs
/// share a GPC, so a device may hold fewer clusters at once; `RingGemv::build` asks the driver and plans no more
/// (session 59: 32 clusters of 4 on the H200 ran in two waves, 16x4096x14336 INT4 30.2 us against the bulk ring's 17.9).
fn split_blocks(wave: u32, splits: usize) -> u32 {
    (wave / splits.max(1) as u32).max(1)
}

/// Whether the ring plans `m` rows of x against `k`-value rows of `format` past [`MMA_MAX_K`] on the tensor cores in K
/// splits ([`mma_splits`]; where the default takes them: [`split_auto`]): in 2 (K up to 8192), but not INT4 at 8-15 rows
/// in splits of 4096 (those builds spill 12-20 bytes at 96 registers, NVRTC 12.9 and 13.0; 2-7 and 16 rows spill
/// nothing, nor the other formats). H200, session 59 (h200-2026-11-30-session59 r3), `measure`, us, the bulk ring (the
/// default before) / the tensor-core ring in 2 splits: INT4 16x8192x8192 18.95 / 18.55, 16x28672x8192 63.1 / 49.9;
/// NVFP4 20.0 / 18.95, 63.4 / 52.0. In 4 splits only NF4 (r6, the grid bounded by the clusters of 4 the device holds
/// at once, 29 on the H200: 16x4096x14336 20.4 / 18.3, 9x 19.4 / 16.9; INT4 17.85 / 17.9, 16.9 / 16.9; NVFP4 18.4 /
/// 19.1, 17.6 / 17.9; MXFP4 18.2 / 18.7, 17.1 / 17.8). Before that bound (r3; K =
/// 14336, 16384) it lost: 16x4096x14336 INT4 17.9 / 30.2, NVFP4 18.5 / 32.1 (clusters of 4 CTAs a row block: a GPC of
/// the H200 holds fewer of them than the grid's 32, so part of the grid waited for a second wave). The other formats
/// take 4 splits only with `ROOFLINE_RING_MMA_SPLIT=1` (experiments: any splits); `ROOFLINE_RING_MMA_SPLIT=0`: none.
/// NF4 in 4 splits of 4096 (K = 16384) stays off: at 9-15 rows its builds spill 4-8 bytes (FP16 x under NVRTC 12.9,
/// BF16 x with the norm under 13.0).
fn mma_split_k(format: WoFormat, m: usize, k: usize) -> bool {
    // (From 3 rows: at 2 the CUDA-core ring's two-row build keeps K whole.)
    let Some(splits) = mma_splits(k).filter(|_| k > MMA_MAX_K && m >= MMA_ALWAYS_M) else { return false };
    match std::env::var("ROOFLINE_RING_MMA_SPLIT").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => {
            (splits == 2 || format == WoFormat::Nf4 && k / splits < MMA_MAX_K)
                && !(format == WoFormat::Int4G128 && (8..=15).contains(&m) && k / splits == MMA_MAX_K)
        }
    }
}

/// Most row steps a CTA takes where the ring runs [`MMA_MIN_M`] and more rows of x on the tensor cores by default
/// ([`mma_auto`]). H200, session 51 (bench/results/h200-2026-11-29-session51 r11, r12), us, the bulk ring (the default
/// before) / the ring on the tensor cores: 16x1024x4096 (1 step a CTA) 6.04 / 4.35, 12x4096x2048 (4) 6.00 / 4.82,
/// 16x4096x3072 (4) 8.36 / 5.59, 9x6144x4096 (6) 9.68 / 8.20, 16x8192x4096 (8) 12.7 / 10.3; M = 9 / 12 / 16 at
/// 10240x4096 (10) 12.4 / 11.6, 13.2 / 11.9, 13.8 / 13.0 and 14336x4096 (14) 15.2 / 15.0, 16.1 / 15.2, 16.7 / 15.8.
/// Session 52's epilogue warp (`RW_EPI`, h200-2026-11-29-session52 r5, r6) took the consumers' chunk barrier away:
/// 28672x4096 (28) at M = 9 / 12 / 16 26.0 / 26.2, 27.0 / 25.9, 27.4 / 26.2 (session 51's kernel: 27.3 at M = 16),
/// 16x57344x4096 (56) 50.6 / 50.1, but the LM head's 128256 rows (122) 99-101 / 104 at M = 16 and 95.7 / 101 at M = 9.
/// In Llama-3.1-8B's decode step gate_up (28 steps) took 30.8 -> 26.5 us at batch 16 and 27.9 -> 26.1 at batch 9.
/// Hence 56 until session 58, whose LM heads (h200-2026-11-30-session58 r5, r6; 122 steps) ran on the tensor-core ring
/// since sessions 53-54's changes: INT4 9x128256x4096 96.3 / 91.65, 12x 98.55 / 92.95, 16x 100 / 94.0; MXFP4 and NVFP4
/// 16x 102 / 94.9, 106 / 99.6; with BF16 x INT4 106 / 101, MXFP4 129.5 / 95.6, NVFP4 132 / 100. So up to 128 since then
/// (NF4's plan stays off the tensor cores there: its staged scales leave no room; 57-121 steps are unmeasured).
pub const MMA_AUTO_MAX_STEPS: usize = 128;

/// [`MMA_AUTO_MAX_STEPS`], or `ROOFLINE_RING_MMA_MAX_STEPS` for experiments.
fn mma_auto_max_steps() -> usize {
    std::env::var("ROOFLINE_RING_MMA_MAX_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(MMA_AUTO_MAX_STEPS)
}

/// Whether the engine takes `m` rows of `x` against `n x k` `format` weights to the ring on the tensor cores by default
/// on `sm_count` SMs of `peak_gb_s` memory: `mma_plan` on fast memory ([`FAST_MEMORY_GB_S`], measured on the H200
/// only), up to [`MMA_AUTO_MAX_STEPS`] row steps a CTA, FP16 or BF16 x alike ([`mma_takes`]): `Variant::best_on` for
/// GEMVs alone, and model-bench for its qkv, o_proj and gate_up (not down_proj's SwiGLU on load: [`mma_takes`]). BF16 x
/// (session 53, h200-2026-11-30-session53 r2, us, the bulk ring / the tensor-core ring, FP16 x's beside): 16x1024x4096
/// 6.17 / 4.58 (4.54), 16x4096x4096 9.22 / 7.07 (6.90), 16x14336x4096 17.1 / 15.8 (15.2), 12x 16.7 / 16.1 (15.0), 9x
/// 15.9 / 15.9 (14.7), 16x28672x4096 28.2 / 27.4 (26.1), 16x57344x4096 52.5 / 52.6 (50.0); the LM head's 122 steps 105
/// / 108 (103). NVFP4 with FP16 x (session 53 r8, the bulk ring / the tensor-core ring): 16x4096x4096 9.50 / 7.42,
/// 12x10240x4096 13.9 / 11.8, 9x14336x4096 16.45 / 14.7, 16x14336x4096 17.7 / 15.4; since session 54 (r7, rows padded)
/// also where its M = 1 build streams the scales, read beside each slot: 16x28672x4096 28.85 / 26.1, 12x 28.5 / 24.95,
/// 9x 27.45 / 24.8, 16x57344x4096 53.6 / 48.05. MXFP4 (session 54 r1, before the padding): 16x14336x4096 17.0 / 14.8,
/// 9x 15.6 / 14.2, 16x4096x4096 9.12 / 7.37, 16x28672x4096 27.95 / 25.7, 12x10240x4096 13.5 / 11.5. NF4 (r2, before the
/// padding; r4 with it): 16x14336x4096 19.2 / 18.5 (16.2), 9x 18.0 / 16.5 (14.4), 16x4096x4096 10.0 / 7.8 (6.95),
/// 16x28672x4096 34.4 / 32.9 (28.4), 12x10240x4096 16.7 / 14.2; NF4's scales are staged only (`plan_on`). NF4,
/// MXFP4 and NVFP4 with BF16 x converted to f16 (`mma_xf16`; session 55, h200-2026-11-30-session55 r1 / r5, the bulk
/// ring / the tensor-core ring): NF4 16x14336x4096 21.0 / 17.4, 9x 19.1 / 15.45, 16x4096x4096 13.1 / 8.05,
/// 16x1024x4096 9.59 / 5.86; MXFP4 19.9 / 15.7, 18.8 / 15.7, 10.0 / 8.18, 6.54 / 5.44; NVFP4 20.7 / 16.35, 19.6 / 15.7,
/// 10.3 / 8.29, 6.67 / 5.45 (r2: 16x28672x4096 35.9 / 29.7, 34.0 / 26.4, 35.1 / 26.85).
pub fn mma_auto(
    (format, x): (WoFormat, XDtype),
    (m, n, k): (usize, usize, usize),
    sm_count: u32,
    peak_gb_s: f64,
) -> bool {
    peak_gb_s >= FAST_MEMORY_GB_S
        && (MMA_MIN_M..=MMA_MAX_M).contains(&m)
        && plan_on(format, m, n, k, sm_count, peak_gb_s).is_ok_and(|p| {
            p.mma && p.per <= mma_auto_steps((format, x), m, k) && (p.splits == 1 || split_auto((format, x), m, p.per))
        })
}

/// Most row steps a CTA where the default ([`mma_auto`]) takes K splits ([`mma_splits`]): each CTA keeps the sums of
/// all its rows (`csum`, 4 bytes a row and row of x), which take ring slots as the steps grow (session 59 r4:
/// INT4 16x57344x8192, 109 steps, 103 us on the bulk ring against 112; 16x28672x8192, 55 steps, 63.1 / 49.9).
pub const MMA_SPLIT_MAX_STEPS: usize = 56;

/// Whether the default takes `m` rows of `x` against `format` weights in K splits ([`mma_split_k`]) for a CTA of `per`
/// row steps: from 9 rows (INT4 at 16, with FP16 x) up to [`MMA_SPLIT_MAX_STEPS`]. H200, session 59
/// (h200-2026-11-30-session59 r3, r4), `measure`, us, the bulk ring / 2 K splits: NF4 16x8192x8192 23.8 / 20.2,
/// 12x 24.35 / 18.2; NVFP4 12x 19.4 / 18.7, 16x10240x8192 23.1 / 23.1, 16x5120x5120 12.0 / 11.6, BF16 x 16x8192x8192
/// 23.55 / 19.9; MXFP4 16x8192x8192 19.15 / 18.7; INT4 16x8192x8192 18.95 / 18.55, 16x10240x8192 22.0 / 21.25,
/// 16x5120x5120 11.4 / 11.2, but 4x8192x8192 15.2 / 15.85, 9x13824x5120 18.9 / 21.7 and with BF16 x 16x8192x8192
/// 19.6 / 19.85.
fn split_auto((format, x): (WoFormat, XDtype), m: usize, per: usize) -> bool {
    let int4 = format == WoFormat::Int4G128;
    m >= 9 && per <= MMA_SPLIT_MAX_STEPS && !(int4 && (m < 16 || x == XDtype::Bf16))
}

/// Whether the ring plans `m x n x k` of `format` weights on the tensor cores (`RW_MMA`) on `sm_count` SMs of `peak_gb_s`
/// memory: from [`MMA_MIN_M`] rows of 4-bit weights at K up to 4096 (`plan_on`), whatever the default takes.
pub fn plans_mma(format: WoFormat, (m, n, k): (usize, usize, usize), sm_count: u32, peak_gb_s: f64) -> bool {
    plan_on(format, m, n, k, sm_count, peak_gb_s).is_ok_and(|p| p.mma)
}

/// `ROOFLINE_RING_MMA=1` (experiments): the ring plans every row count its tensor-core row step takes there.
fn mma_forced() -> bool {
    std::env::var("ROOFLINE_RING_MMA").is_ok_and(|v| v == "1")
}

/// `ROOFLINE_RING_MMA=0` (experiments): the ring plans no row count on the tensor cores, so 1 to [`MAX_M`] rows run
/// its CUDA-core row step (the default never plans 3 rows there; with `--gemv variant=xreg,ring=true` they run it), and
/// the default ([`mma_auto`]) takes the tensor-core ring nowhere. Session 61 asked whether INT4's 3-row CUDA-core build
/// with its tensor-core sums beats the tensor-core ring (3x14336x4096 12.4 us); session 63 built it (`kernel_build
/// INT4_G128 FP16 3 14336 4096 --ring`): it spills at 128 registers (28 bytes under NVRTC 12.9, 36 under 13.0), so it
/// stays off; NF4, MXFP4 and NVFP4 build clean there (122-127 registers).
fn mma_off() -> bool {
    std::env::var("ROOFLINE_RING_MMA").is_ok_and(|v| v == "0")
}

/// Most row steps a CTA where [`mma_auto`] takes `m` rows of `format` weights, rows of `k` values, to the tensor-core
/// ring: [`MMA_AUTO_MAX_STEPS`] from 9 rows, for NF4, and for MXFP4 and NVFP4 with BF16 x at K = 4096 (their bulk ring's
/// BF16 decodes are the slowest: session 58 r4, 8x28672x4096 MXFP4 28.4 / 23.95 us, NVFP4 30.85 / 24.3; 8x44352x4096
/// 40.2 / 34.7, 43.2 / 34.7; 8x59136x4096 52.65 / 43.35, 57.3 / 44.85; r5, 8x128256x4096 111 / 87.95, 119.5 / 91.3;
/// INT4 with BF16 x 23.8 / 23.95, 33.45 / 35.15, 43.75 / 46.1, 88.35 / 94.05 keeps the 24 below, and so does FP16 x: r5,
/// 8x128256x4096 INT4 83.0 / 86.15, MXFP4 84.25 / 88.6, NVFP4 89.65 / 92.1); for INT4, MXFP4 and NVFP4 at 2-8 rows
/// otherwise [`MMA_AUTO_LOW_M_MAX_STEPS`] at K = 4096 and, at a shorter K, [`MMA_AUTO_SHORT_K_MAX_STEPS`] in proportion
/// (its K / 256 warps a unit: 10 at K = 2048, 15 at 3072, at least 1) (`ROOFLINE_RING_MMA_MAX_STEPS` overrides both for
/// experiments).
fn mma_auto_steps((format, x): (WoFormat, XDtype), m: usize, k: usize) -> usize {
    let bf16_scaled = x == XDtype::Bf16 && matches!(format, WoFormat::Mxfp4 | WoFormat::Nvfp4) && k >= MMA_MAX_K;
    if m >= 9 || format == WoFormat::Nf4 || bf16_scaled {
        mma_auto_max_steps()
    } else {
        let steps =
            if k >= MMA_MAX_K { MMA_AUTO_LOW_M_MAX_STEPS } else { (MMA_AUTO_SHORT_K_MAX_STEPS * k / MMA_MAX_K).max(1) };
        std::env::var("ROOFLINE_RING_MMA_MAX_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(steps)
    }
}

/// Most row steps a CTA where [`mma_auto`] takes 2-8 rows of INT4, MXFP4 or NVFP4 weights to the tensor-core ring (NF4
/// and 9-16 rows: [`MMA_AUTO_MAX_STEPS`]). H200, session 57 (h200-2026-11-30-session57 r2, r3), FP16 x, us, the default
/// before (the bulk ring, `Variant::best_for`) / the tensor-core ring (its 2-8-row builds spill nothing since then),
/// INT4, NF4, MXFP4, NVFP4:
/// - 4x1024x4096 (1 step a CTA) 3.94 / 3.43, 4.78 / 3.55, 3.89 / 3.30, 3.69 / 3.38; 8x 4.78 / 3.86, 5.02 / 3.80, 4.83 /
///   3.60, 4.98 / 3.73;
/// - 3x4096x4096 (4) 6.05 / 5.52, 7.54 / 5.54, 6.27 / 5.56, 6.33 / 5.73; 4x 6.32 / 5.59, 7.57 / 5.64, 6.54 / 5.65,
///   6.61 / 5.83; 8x 7.18 / 5.89, 7.61 / 5.84, 7.35 / 5.93, 7.69 / 6.12;
/// - 4x6144x4096 (6) 7.85 / 7.01, 8.96 / 7.02, 8.07 / 7.11, 8.23 / 7.33; 8x 8.40 / 7.26, 9.08 / 7.29, 8.64 / 7.36, 8.96 /
///   7.59;
/// - 4x10240x4096 (10) 10.3 / 9.68, 11.8 / 9.75, 10.5 / 9.94, 11.1 / 10.2; 8x 10.8 / 10.1, 12.0 / 10.3, 11.1 / 10.5,
///   11.7 / 10.9;
/// - 3x14336x4096 (14) 12.5 / 12.4, 14.6 / 12.3, 12.9 / 12.8, 13.6 / 13.1; 4x 12.7 / 12.4, 14.7 / 12.5, 13.1 / 12.9,
///   13.8 / 13.2; 8x 13.3 / 12.9, 14.8 / 13.1, 13.5 / 13.4, 14.3 / 13.7;
/// - 4x28672x4096 (28) 21.4 / 22.2, 25.3 / 22.3, 22.0 / 23.0, 23.2 / 23.4; 8x 22.1 / 22.8, 25.3 / 21.8, 22.9 / 23.9,
///   24.5 / 24.0.
///
/// At a shorter K a unit has fewer warps (K / 256) and the bulk ring catches up sooner (r7, r8, r9; 8 rows): 8x8448x2048
/// (8 steps) 7.19 / 6.56, MXFP4 7.35 / 6.72, NVFP4 7.65 / 6.76; 8x14784x2048 (14) 9.52 / 10.1, 9.71 / 10.4, 10.2 / 10.5;
/// 8x16384x2048 (16) 9.74 / 11.0, 9.92 / 11.4, 10.5 / 11.5; 8x8448x3072 (8) 8.79 / 7.74, 8.96 / 7.99, 9.38 / 7.89;
/// 8x14784x3072 (14) 11.9 / 11.7, 12.3 / 12.3, 12.9 / 12.3; 8x16384x3072 (16) 12.5 / 12.8, 12.6 / 13.6, 13.4 / 13.6;
/// 8x20480x4096 (20) 17.6 / 17.1, 18.2 / 18.1, 19.0 / 18.4 (`mma_auto_steps` scales
/// [`MMA_AUTO_SHORT_K_MAX_STEPS`] with K).
///
/// BF16 x (r3, r6): 4x4096x4096 6.57 / 5.77, 8.95 / 6.40, 7.40 / 6.35, 7.43 / 6.34; 8x 7.43 / 6.35, 9.84 / 6.71, 8.16 /
/// 7.00, 8.63 / 7.12; 3x14336x4096 13.6 / 13.0, 15.9 / 13.3, 16.1 / 13.4, 17.0 / 13.7; 4x 13.7 / 13.1, 16.1 / 13.1, 16.1
/// / 13.4, 17.2 / 13.8; 8x 14.1 / 13.5, 17.3 / 13.7, 16.4 / 14.1, 17.5 / 14.6.
///
/// Session 58 (h200-2026-11-30-session58 r2) measured 16-27 steps of K = 4096 (INT4, MXFP4, NVFP4; medians of two passes
/// agreeing within 0.1 us): 4x16896x4096 (16) 14.75 / 14.0, 14.9 / 14.4, 15.85 / 14.9; 8x 15.4 / 14.3, 15.7 / 14.9, 16.65
/// / 15.25; 8x21120x4096 (20) 17.7 / 17.35, 18.15 / 18.2, 19.1 / 18.45; 4x25344x4096 (24) 20.05 / 20.05, 20.55 / 20.65,
/// 21.5 / 21.2; 8x 21.1 / 20.5, 21.65 / 21.2, 22.4 / 21.6; 8x28512x4096 (27) 22.3 / 22.5, 23.15 / 23.5, 24.3 / 23.85. So
/// up to 24 steps (14 until then); from 27 the bulk ring is ahead for INT4 and MXFP4 (at 28 too, above).
pub const MMA_AUTO_LOW_M_MAX_STEPS: usize = 24;

/// [`MMA_AUTO_LOW_M_MAX_STEPS`]'s counterpart at K below 4096, scaled with K by `mma_auto_steps`: 20, so 10 row steps
/// a CTA at K = 2048 and 15 at 3072. Session 57 (r7-r9, above) found the bulk ring ahead at 14-16 steps of K = 2048 and
/// 16 of 3072 and set 14 (7 and 10 steps); session 58 (h200-2026-11-30-session58 r9, 8 rows, the bulk ring / the
/// tensor-core ring, us) measured between: 8x10560x2048 (10 steps) INT4 8.27 / 7.78, NVFP4 8.90 / 8.03; 8x12672x2048
/// (12) INT4 8.48 / 8.88; 8x12672x3072 (12) INT4 11.0 / 10.2, NVFP4 11.9 / 10.7. At 14 steps of K = 3072 the two tie
/// (above), so 15 sits at the crossing.
pub const MMA_AUTO_SHORT_K_MAX_STEPS: usize = 20;

/// Whether the ring GEMV takes `m x k` on the tensor cores (`mma_plan`) for `x` activations with `epilogue` and
/// `input`: INT4 with FP16 x (f16 products) or BF16 x (bf16 products, the codes decoded to exact bf16 pairs), NF4,
/// MXFP4 and NVFP4 with FP16 x or BF16 x (converted to f16, `mma_xf16`); any epilogue (the norm's factor applied to
/// the row sums), not SwiGLU on load.
pub fn mma_takes((format, _x): (WoFormat, XDtype), m: usize, k: usize, (_, input): (Epilogue, Input)) -> bool {
    // Every x type since session 55 (BF16 x converted to f16 where the decoded pairs are f16, `mma_xf16`).
    mma_plan(format, m, k) && input == Input::X
}

/// Whether the tensor-core row step converts BF16 `x` to f16 once (`RW_MMA_XF16` in wo_ring.cu: each warp's rows times
/// the power of two that puts their largest |x| in its K slice into [2^14, 2^15), taken back from that warp's sums):
/// NF4, MXFP4 and NVFP4 with BF16
/// x always (their decoded pairs are f16: NF4's table, E2M1 times the block scale), INT4 where
/// `ROOFLINE_RING_MMA_XF16=1` asks for it (otherwise its codes are decoded to exact bf16 pairs and the products are
/// bf16).
fn mma_xf16(format: WoFormat, x: XDtype) -> bool {
    x == XDtype::Bf16
        && (format != WoFormat::Int4G128 || std::env::var("ROOFLINE_RING_MMA_XF16").is_ok_and(|v| v == "1"))
}

/// E8M0 codes of the MXFP4 block scales whose products the tensor-core row step makes exactly in f16: 2^-17
/// (110) to 2^7 (134). It multiplies each decoded E2M1 pair (the values times 2^-14) by the f16 2^(e - 127 + 8)
/// (`RW_MX_SHIFT` in wo_ring.cu), whose exponent field it clamps to 0..=30: at e = 134 the largest product is 12,
/// at e = 110 the smallest (0.5 x 2^-14 x 2^-9) is f16's smallest subnormal, 2^-24.
pub const MXFP4_MMA_WINDOW: std::ops::RangeInclusive<u8> = 110..=134;

/// Whether the tensor-core row step multiplies MXFP4 weights `p` exactly: every 32-value block with a nonzero
/// code has its scale in [`MXFP4_MMA_WINDOW`] (blocks of zeros give zeros whatever their scale); `Err` names the
/// first block outside it. Other formats: `Ok`. Weights of the usual size lie far inside it (block maxima 2^-15 to
/// 2^9).
pub fn mxfp4_mma_window(p: &PackedWeights) -> Result<(), String> {
    if p.format != WoFormat::Mxfp4 {
        return Ok(());
    }
    let blocks = p.k / 32;
    let outside = (0..p.n * blocks).find(|&i| {
        let (r, b) = (i / blocks, i % blocks);
        // A block's 32 codes are 16 bytes of its row; E2M1 magnitude bits 0-2 of each nibble (0x8: minus zero).
        let nonzero = p.codes[r * p.k / 2 + 16 * b..][..16].iter().any(|c| c & 0x77 != 0);
        nonzero && !MXFP4_MMA_WINDOW.contains(&p.scales[i])
    });
    match outside {
        None => Ok(()),
        Some(i) => Err(format!(
            "MXFP4 row {} block {} has the scale 2^{} with nonzero codes; the tensor-core row step multiplies scales \
             2^-17 to 2^7 exactly",
            i / blocks,
            i % blocks,
            i32::from(p.scales[i]) - 127
        )),
    }
}

/// Row groups (of K / 1024 warps each) for `n` rows of `k` values of `format` on `sm_count` SMs:
/// `ROOFLINE_RING_GROUPS` (1 to 4) for tuning experiments, else 1 for a long K ([`long_k`]), else 3 (NF4:
/// 2); at most what keeps the CTA (one producer warp more) within 1024 threads. With one CTA per SM a
/// consumer warp's row step is a chain of dependent waits, shuffles and (for the E2M1 decode) more
/// instructions than INT4's, so more warps hide more of it (H100, K = 4096, us, 2 vs 3
/// groups, bench/RESULTS.md session 15: NVFP4 1x14336x4096 18.1 vs 17.3, 1x28672x4096 29.7 vs 28.0; MXFP4
/// 15.4 vs 15.1, 25.3 vs 24.9; INT4 13.6 vs 13.3, 23.2 vs 23.1, LM head 95.3 vs 95.8). NF4's lookups in its
/// wide pair table run best with fewer warps, the ring one slot deeper (session 24: 1x14336x4096 13.5 vs
/// 13.9-14.0, 1x28672x4096 23.2 vs 23.7; 4 groups 13.7, 23.4).
fn row_groups(format: WoFormat, n: usize, k: usize, sm_count: u32) -> usize {
    let default = if long_k(n, k, sm_count) || format.bits() == 16 {
        1
    } else if format == WoFormat::Nf4 || format.bits() == 8 {
        2
    } else {
        3
    };
    let want = std::env::var("ROOFLINE_RING_GROUPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|g| (1..=4).contains(g))
        .unwrap_or(default);
    want.min(31 / slices(format, k)).max(1)
}

/// K parts a row step streams in (`RW_KH`: a ring slot holds 8 rows of `k / parts` values, filled by 8 bulk
/// copies, and serves the warps of one row group whose K slices fall in it) for `n` rows of `k` values on
/// `sm_count` SMs: `ROOFLINE_RING_KH` (a divisor of its K slices, [`slices`]) for tuning experiments, else for a
/// long K ([`long_k`]) [`long_k_parts_for`], else 1.
fn k_parts(format: WoFormat, n: usize, k: usize, sm_count: u32) -> usize {
    let slices = slices(format, k);
    let default = if format.bits() == 16 {
        fp16_parts(k)
    } else if long_k(n, k, sm_count) {
        long_k_parts_for(format, k).unwrap_or(1)
    } else {
        1
    };
    std::env::var("ROOFLINE_RING_KH")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|p| *p >= 1 && slices % p == 0)
        .unwrap_or(default)
}

/// FP16's (and BF16's) K parts ([`k_parts`]) for rows of `k` values: the fewest dividing its 512-value K slices that make a row's
/// bulk copy at most 4 KB, so a slot (8 rows) holds at most 32 KB, as an 8-bit row step at K = 4096 does (K = 1024
/// and 2048: 1; 3072, 4096: 2; 5120: 5; 6144: 3; 7168: 7; 8192: 4; 14336: 7). FP16 runs in one row group
/// ([`row_groups`]): its row steps cost a consumer warp a load and a multiply-add per two weights.
fn fp16_parts(k: usize) -> usize {
    let (slices, row) = (slices(WoFormat::Fp16, k), row_bytes(WoFormat::Fp16, k));
    (1..=slices).find(|p| slices % p == 0 && row / p <= 4096).unwrap_or(slices)
}

/// Fewest values of K for the long-K plan ([`long_k`]).
pub const LONG_K: usize = 8192;

/// Most values of K in one K part of the long-K plan (a row's bulk copy of 3.5 KB).
pub const LONG_K_PART_MAX: usize = 7168;

/// Fewest values of K in one K part of the long-K plan (a row's bulk copy of 2 KB; 1 KB copies were slower).
pub const LONG_K_PART_MIN: usize = 4096;

/// The long-K plan's K parts for rows of `k` values: the most (at least 2) dividing its 1024-value slices
/// that make parts of [`LONG_K_PART_MIN`] to [`LONG_K_PART_MAX`] values (K = 8192-11264 and 14336: 2; 12288:
/// 3; 16384: 4; 20480: 5; 24576: 6; Llama-3-70B's down_proj, 28672: 7 of 4096). `None`: no such split.
/// H100, session 35, 1x8192x28672 in 4 parts of 7168 (6 slots) vs 7 of 4096 (8-11 slots), us: INT4 45.8-46.2
/// vs 44.3-44.4, MXFP4 46.5-46.6 vs 44.8-45.0, NVFP4 49.9-50.6 vs 47.6-48.3, NF4 50.0-50.5 vs 48.2-49.1
/// (Llama-3.1-70B NVFP4 at batch 1: 68.4 -> 69.1 tok/s); parts of 2048 were slower everywhere (1x8192x28672
/// in 14: INT4 63.6; 1x4096x14336 in 7: 15.7 vs 14.5; 1x8192x8192 in 4: 17.8 vs 14.1). 12288, 20480 and
/// 24576 follow the same rule unmeasured.
pub fn long_k_parts(k: usize) -> Option<usize> {
    let slices = k / 1024;
    (2..=slices).rev().find(|p| slices % p == 0 && (LONG_K_PART_MIN..=LONG_K_PART_MAX).contains(&(k / p)))
}

/// [`long_k_parts`] for `format`: for 8-bit weights (rows of `k` bytes) the fewest parts (at least 2, dividing
/// their 512-value K slices) whose rows' copies are 2 to 3.5 KB, as the 4-bit parts of [`LONG_K_PART_MIN`] to
/// [`LONG_K_PART_MAX`] values are (K = 8192: 4 of 2 KB, 12288: 4 of 3 KB, 14336: 4 of 3.5 KB). H200, session 37,
/// us, 1x4096x14336 in 2 / 4 / 7 parts (copies of 7 / 3.5 / 2 KB; 3 / 7 / 12 slots): FP8 16.4-16.6 /
/// 15.7-15.8 / 16.0-16.1, INT8 17.5 / 16.0 / 16.2-16.3.
pub fn long_k_parts_for(format: WoFormat, k: usize) -> Option<usize> {
    if format.bits() == 4 {
        return long_k_parts(k);
    }
    let (slices, row) = (slices(format, k), row_bytes(format, k));
    (2..=slices).find(|p| slices % p == 0 && (LONG_K_PART_MIN / 2..=LONG_K_PART_MAX / 2).contains(&(row / p)))
}

/// Fewest row steps per CTA for the long-K plan ([`long_k`]).
pub const LONG_K_MIN_STEPS: usize = 4;

/// Whether `n x k` on `sm_count` SMs takes the long-K plan: K of at least [`LONG_K`] values that split into K parts of
/// 4096-7168 values ([`long_k_parts`]), each CTA taking at least [`LONG_K_MIN_STEPS`] row steps; the ring in one row
/// group, each row step streamed in those K parts, and the engine's default at M = 1 ([`auto`]). A row step of such a K
/// is 32-57 KB, so a ring of whole steps in two or three row groups holds 2-4 of them and half a CTA's bytes wait for a
/// slot's decode; one group doubles the slots and half steps refill sooner (8 bulk copies of 2-3.5 KB a slot; 7 parts,
/// copies of 1 KB, were slower). H100, session 32, us, x-in-registers default / ring in its default groups / one group
/// / one group in 2 K parts (bench/RESULTS.md): INT4 1x4096x14336 14.5-14.8 / 16.7 / 14.3-14.5 / 14.1-14.2, NF4
/// 15.0-15.1 / 16.0-16.2 / 14.1-14.2 / 14.0-14.1, MXFP4 13.9-14.1 / 15.9 / 14.1-14.4 / 13.9-14.0, NVFP4 14.8-15.0 /
/// 16.6-16.7 / 15.2-15.4 / 14.8-15.0; INT4 1x8192x8192 18.1-18.5 / 16.8 / 14.7 / 13.7, 1x4096x8192 19.7-19.9 / 9.74 /
/// 9.40 / 8.52, 1x10240x8192 22.3 vs 17.4 (x-in-registers vs one group in 2 parts), 1x28672x8192 55.4-56.0 vs 41.9-42.2
/// (the other formats alike; NVFP4's scale tables leave no ring at 1x57344x8192); Llama-3-70B's down_proj 1x8192x28672
/// in 4 parts: INT4 62.7 vs 47.0-47.2, MXFP4 54.3-54.4 vs 47.6. With fewer steps a CTA the x-in-registers kernel is as
/// fast or faster (1x2048x14336, 2 steps: INT4 8.79 vs 8.78, MXFP4 8.51 vs 8.90; 1x1024x14336: INT4 5.64 vs 6.97).
pub fn long_k(n: usize, k: usize, sm_count: u32) -> bool {
    let (_, per) = grid(n, sm_count);
    k >= LONG_K && k % 1024 == 0 && long_k_parts(k).is_some() && per >= LONG_K_MIN_STEPS
}

/// What the kernel computes besides W x.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// y = W rmsnorm(x) (eps given to [`RingGemv::run`]; the norm's weight folded into W).
    Norm,
    /// y = W x.
    Store,
    /// y += W x (the residual add).
    Add,
}

/// What the kernel multiplies W by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Input {
    /// x itself (K values).
    X,
    /// silu(gate) * up, computed as x is loaded from the gate_up row `[gate | up]` (2K values; SwiGLU on
    /// load, down_proj's input). Not with [`Epilogue::Norm`].
    SwiGlu,
}

/// Fewest row steps per CTA for which the engine picks the ring kernel by default (14 at 1x14336x4096 on
/// 132 SMs, 6 at 1x6144x4096).
pub const AUTO_MIN_STEPS: usize = 8;

/// Fewest ring slots beside the scale tables for the default (MXFP4's LM head, 976 rows per CTA with 128
/// scale columns each, leaves 2: 123 us against the x-in-registers kernel's 109; INT4's leaves 6: 94 vs 97).
pub const AUTO_MIN_SLOTS: usize = 6;

/// Fewest ring slots per consumer class (row groups x K parts) for the default on fast memory
/// ([`FAST_MEMORY_GB_S`]), where fewer than [`AUTO_MIN_SLOTS`] may do: on the H200 the ring beat the
/// x-in-registers kernel even at one slot a class where that kernel is slow (NF4 1x49152x6144, 2 slots in 2
/// row groups: 55.1-55.2 us against 69.8-70.9; with its scales streamed, 4 slots, 42.0-42.3; session 41).
pub const AUTO_MIN_SLOTS_FAST: usize = 2;

/// Whether the engine runs an M = 1 call of a 4-bit `format` at K = `k` on the ring on fast memory
/// ([`FAST_MEMORY_GB_S`]) however few row steps (`per`) its `ctas` CTAs take, where the x-in-registers kernel
/// (a row step per CTA of K / 1024 warps) falls far below it. H200, session 42, gated samples, us,
/// x-in-registers / ring:
/// - K = 6144-8192, every 4-bit format, any grid: 1x1024x8192 INT4 8.79 / 4.34, MXFP4 8.53 / 4.34, NVFP4 7.53 /
///   4.35; 1x2048x8192 MXFP4 12.6 / 5.50, NVFP4 9.57 / 5.58; 1x512x8192 (64 CTAs) MXFP4 4.79 / 3.57, NVFP4
///   4.26 / 3.60; 1x1536x7168 (96 CTAs) INT4 9.89 / 4.49, MXFP4 7.63 / 4.51, NVFP4 7.06 / 4.47; 1x1024x6144
///   MXFP4 4.73 / 3.85, NVFP4 4.99 / 3.84; 1x2048x6144 MXFP4 5.78 / 4.59. (Past K = 8192 the long-K rules hold.)
/// - K = 5120 from [`AUTO_MIN_STEPS_K5120`] row steps a CTA: 1x5120x5120 MXFP4 9.56 / 6.06, NVFP4 10.3 / 6.33;
///   1x6144x5120 MXFP4 9.90 / 6.72. Below it the x-in-registers kernel wins: 1x3072x5120 MXFP4 5.48 / 6.36,
///   NVFP4 5.64 / 6.45; 1x1024x5120 MXFP4 3.76 / 4.43.
/// - INT4, whose x-in-registers kernel is the slowest of the 4-bit formats, from K = 5120 with any grid
///   (1x768x5120 3.74 / 3.31, 1x2048x5120 5.03 / 4.26, 1x5120x5120 10.7 / 6.07) and at K = 4096 where the grid
///   fills the GPU ([`fills_the_gpu`]: 1x1024x4096 3.39 / 2.99, 1x4096x4096 4.97 / 4.58, 1x6144x4096 6.56 /
///   5.55; with 64 CTAs 2.51 / 2.64 at 1x512x4096).
///
/// Elsewhere below K = 6144 the x-in-registers kernel wins at small N: MXFP4 1x3072x4096 4.59 / 5.38, NVFP4 4.61
/// / 5.36; 1x4096x3072 MXFP4 4.11 / 5.67; INT4 1x3072x3072 3.87 / 4.79, 1x2048x2048 2.86 / 3.53.
///
/// Session 43: those losses at K = 4096-5120 were a ring CTA small enough that a second fitted its SM
/// ([`alone_smem`]). Alone on its SM the ring wins there for every 4-bit format wherever its grid fills the GPU
/// (x-in-registers / ring, us): MXFP4 1x2048x4096 4.05 / 3.59, 1x4096x4096 4.83 / 4.63, 1x6144x4096 6.16 / 5.58,
/// 1x2048x5120 4.68 / 4.26, 1x3072x5120 5.49 / 4.79; NVFP4 1x2048x4096 4.24 / 3.61, 1x4096x4096 5.28 / 4.73,
/// 1x6144x4096 7.02 / 5.68, 1x2048x5120 4.88 / 4.35, 1x3072x5120 5.64 / 4.98; NF4 1x2048x4096 5.54 / 3.78. With
/// 64 CTAs the x-in-registers kernel still wins (MXFP4 1x512x5120 2.79 / 3.34 in 4 row groups).
fn ring_at_any_steps_fast(format: WoFormat, k: usize, per: usize, ctas: u32, sm_count: u32) -> bool {
    let any_grid = (6144..=8192).contains(&k) || (k == 5120 && per >= AUTO_MIN_STEPS_K5120);
    let full_grid = (4096..=5120).contains(&k) && fills_the_gpu(ctas, sm_count);
    match format {
        WoFormat::Int4G128 => any_grid || k == 5120 || full_grid,
        _ => any_grid || full_grid,
    }
}

/// Fewest row steps a CTA from which the ring takes M = 1 GEMVs of K = 5120 on fast memory
/// (`ring_at_any_steps_fast`; 5 at 1x5120x5120; 3 at 1x3072x5120 lost).
pub const AUTO_MIN_STEPS_K5120: usize = 5;

/// Whether a ring grid of `ctas` CTAs keeps at least 7 in 8 of `sm_count` SMs busy (128 of 132 on the H200 does;
/// 64 does not: INT4 1x512x4096, [`ring_at_any_steps_fast`]).
fn fills_the_gpu(ctas: u32, sm_count: u32) -> bool {
    8 * ctas >= 7 * sm_count
}

/// Fewest row steps per CTA for which the engine picks the ring kernel for FP8 and INT8 weights by default
/// ([`auto`]; 4 at Llama-3.1-8B's o_proj, 1x4096x4096).
pub const AUTO_MIN_STEPS_8BIT: usize = 4;

/// Whether the engine runs an `n x k` M = 1 call of `format` on the ring kernel by default. FP16 and BF16: wherever
/// the ring takes them (K up to [`MAX_K_FP16`], any N): H200, session 44, us, split-K / ring: 1x14336x4096 31.0 / 27.5,
/// 1x4096x4096 11.4 / 8.87, 1x1024x4096 5.93 / 3.85, 1x512x4096 4.71 / 2.99, 1x28672x4096 57.6 / 53.2,
/// 1x128256x4096 234 / 234, 1x7168x7168 27.0 / 24.2, 1x8192x8192 33.0 / 31.4, 1x4096x1024 4.23 / 3.98; session 45, past
/// K = 8192 (fewer slots than K parts from K = 14336, `least_slots`), split-K / the x-in-registers kernel / ring:
/// 1x4096x14336 32.9 / 30.6 / 28.0, 1x2048x14336 20.0 / 21.3 / 14.8, 1x1024x14336 13.5 / 13.7 / 8.35, 1x4096x10240
/// 24.7 / 27.7 / 20.2, 1x4096x12288 28.5 / 26.6 / 24.7, 1x4096x15360 34.7 / 33.5 / 29.6, and ties at large N
/// (1x8192x14336 54.4 / 56.2 / 54.4, 1x8192x12288 47.2 / 49.0 / 47.3); BF16 weights within 1% of FP16 on the ring
/// (FP16 or BF16 x: 1x14336x4096 27.5, 1x4096x4096 8.88-8.89, split-K 30.6 and 11.3-11.4). FP8 and INT8: where
/// each CTA takes at least [`AUTO_MIN_STEPS_8BIT`] row steps (the engine asks only where its x-in-registers
/// kernel would run them: N up to 16384 at K up to 8192, or K of 9-16 K slices of 1024; split-K elsewhere).
/// H200, session 37, us, x-in-registers / ring: FP8 1x14336x4096 17.3-17.4 / 14.8-15.1, INT8 17.3-17.4 /
/// 15.2-15.4; FP8 1x4096x4096 7.53-7.57 / 5.91, INT8 7.59-7.62 / 6.23-6.24; FP8 1x4096x14336 17.4 / 15.7-15.8
/// (4 K parts), INT8 18.0 / 16.0. 4-bit formats: each CTA taking
/// at least [`AUTO_MIN_STEPS`] row steps with at least [`AUTO_MIN_SLOTS`] of them in its ring. NF4 too since
/// its codes go through the pair table (`NF4_PAIRS`; H100, session 23, us, ring vs x-in-registers:
/// 1x14336x4096 14.9 vs 16.1, 1x28672x4096 24.3 vs 28.7; with the byte-permute decode the ring was the slower,
/// 17.6 and 29.3; session 24's wide table: 13.9-14.0 and 23.7), and with fewer row steps wherever the ring
/// holds all of them and the x-in-registers kernel would decode NF4 in FP32 (its f16x2 path takes one CTA
/// over K or a large N, [`LaunchPlan::xh_default`]): since x is read after `griddepcontrol.wait` (session
/// 28) that path lost to the ring (H100, session 29, us, ring vs x-in-registers: 1x4096x4096 5.93 vs
/// 6.79-6.88, 1x6144x4096 7.83-7.84 vs 8.83-9.19, 1x1024x4096 4.21 vs 4.11-4.50; its f16x2 path still won at
/// 1x4096x14336, 16.3-16.4 vs 14.9-15.1). The ring is laid out as on memory below [`FAST_MEMORY_GB_S`] (the
/// H100); [`auto_on`] lays it out for the device.
pub fn auto(format: WoFormat, n: usize, k: usize, sm_count: u32) -> bool {
    auto_at(format, n, k, sm_count, 0.0)
}

/// [`auto`] with the ring planned for a device of `peak_gb_s` memory bandwidth ([`plan_on`]).
fn auto_at(format: WoFormat, n: usize, k: usize, sm_count: u32, peak_gb_s: f64) -> bool {
    let Ok(Plan { ctas, per, groups, parts, layout: Layout { slots, .. }, .. }) =
        plan_on(format, 1, n, k, sm_count, peak_gb_s)
    else {
        return false;
    };
    match format.bits() {
        16 => return true,
        8 => return per >= AUTO_MIN_STEPS_8BIT,
        _ => {}
    }
    if peak_gb_s >= FAST_MEMORY_GB_S && ring_at_any_steps_fast(format, k, per, ctas, sm_count) {
        return true;
    }
    // On fast memory two slots a consumer class suffice (`AUTO_MIN_SLOTS_FAST`).
    let min_slots = if peak_gb_s >= FAST_MEMORY_GB_S {
        AUTO_MIN_SLOTS.min(AUTO_MIN_SLOTS_FAST * groups * parts)
    } else {
        AUTO_MIN_SLOTS
    };
    let streams = per >= AUTO_MIN_STEPS && slots >= min_slots;
    streams || long_k(n, k, sm_count) || (format == WoFormat::Nf4 && slots >= per && !nf4_xreg_in_f16x2(n, k, sm_count))
}

/// The ring GEMV's default inside a decode step (a CUDA graph of kernels chained by programmatic dependent
/// launch) where it differs from [`auto`]'s: `Some(false)` for FP8 and INT8, whose ring CTAs (about 200 KB of
/// shared memory) cannot be resident beside the kernels before and after them, so neither overlaps the other's
/// tail (as `Variant::best_in_step` found for their staged x-in-registers kernel). H200, session 37, Llama-3.1-8B
/// at batch 1, down_proj on the x-in-registers kernel / the ring: down_proj alone 19.1-19.2 / 16.0-16.1 us, but the
/// graph step 2607-2614 / 2652-2656 us (FP8), 2740-2741 / 2754-2763 (INT8), the neighbours slower in the step
/// (qkv 9.4 -> 12.0-12.2 us). `Some(true)` for the 4-bit formats on fast memory ([`FAST_MEMORY_GB_S`], on a device
/// of `peak_gb_s`): every GEMV of the step the ring can run, qkv and o_proj too (4-6 row steps a CTA, which
/// [`auto`] leaves to the x-in-registers kernel standalone, where the two measure alike within their run-to-run
/// spread). H200, session 41, Llama-3.1-8B INT4 at batch 1, default / ring: step 1688-1692 / 1510-1516 us (592 /
/// 661 tok/s), qkv 7.28-7.35 / 5.82-6.07 us in the step, o_proj 6.59-7.18 / 5.74-6.12, the fused FFN beside them
/// 30.5-30.6 / 27.9-28.1. `Some(true)` for FP16 on fast memory too, unlike the 8-bit formats (H200, session 44,
/// Llama-3.1-8B FP16 at batch 1 on the x-in-registers engine, `plan::Variant::best_in_step_on`: split-K / the ring
/// 4331 / 3821 us, qkv in the step 16.0 / 12.9 us, o_proj 13.0 / 8.01). `None` elsewhere: [`auto`].
pub fn in_step(format: WoFormat, peak_gb_s: f64) -> Option<bool> {
    match format.bits() {
        8 => Some(false),
        16 if peak_gb_s >= FAST_MEMORY_GB_S => Some(true),
        4 if peak_gb_s >= FAST_MEMORY_GB_S => Some(true),
        _ => None,
    }
}

/// [`auto`] on a device of `peak_gb_s` memory bandwidth (`ring::peak_memory_gb_s`): FP8, INT8 and FP16 only on fast
/// memory ([`FAST_MEMORY_GB_S`], where they were measured: the H200); the H100 keeps its measured 8- and 16-bit
/// kernels until a run there says otherwise (`--gemv ring=true` asks for the ring anywhere on sm_90+). The
/// ring's slots are counted as the device's build lays them out (`ring::wants_streamed_scales`: on fast memory
/// NF4's and MXFP4's LM heads stream their scales and so take the ring).
pub fn auto_on(format: WoFormat, n: usize, k: usize, sm_count: u32, peak_gb_s: f64) -> bool {
    auto_at(format, n, k, sm_count, peak_gb_s) && (format.bits() == 4 || peak_gb_s >= FAST_MEMORY_GB_S)
}

/// Most rows of x for which the engine takes the ring GEMV by default on fast memory ([`auto_rows`]).
pub const AUTO_MAX_M_FAST: usize = 2;

/// Fewest row steps a CTA from which INT4, MXFP4 and NVFP4 take the ring for two rows of x ([`auto_rows`]; in
/// whole row steps: in K parts any count).
pub const AUTO_ROWS_MIN_STEPS: usize = 8;

/// Whether the engine runs an `m x n x k` call of `format` weights and `x` activations on the ring kernel by
/// default on a device of `peak_gb_s` memory bandwidth: at M = 1 [`auto_on`]; from M = 2 on the tensor cores where
/// [`mma_auto`] takes it (since session 57 from 2 rows: at 2 where a CTA takes few row steps, `mma_m2_max_steps`), and
/// otherwise at M = 2 ([`AUTO_MAX_M_FAST`]) on the CUDA cores only
/// on fast memory ([`FAST_MEMORY_GB_S`], the H200, where it was measured), where [`auto_on`] takes the shape at
/// M = 1 and the build for two rows has registers and a ring (`plan_on`), and then:
/// - NF4 everywhere (its tensor-core decode is the slowest);
/// - INT4, MXFP4 and NVFP4 where a CTA takes at least [`AUTO_ROWS_MIN_STEPS`] row steps or streams them in K
///   parts, and the ring keeps two slots a consumer class (the row sums of the second row of x take room from
///   it: INT4's LM head at K = 4096 drops from 6 slots to 3);
/// - FP8 and INT8 with BF16 x (their BF16 tensor-core decode is slow; with FP16 x the two kernels are within a few
///   percent, either way).
///
/// The ring decodes each weight once for both rows. H200, session 50, us, the ring / the tensor cores (`measure`):
/// 2x14336x4096 INT4 12.2 / 12.5, MXFP4 12.0 / 13.0, NVFP4 12.6 / 13.8, NF4 13.2 / 14.6, FP8 16.2 / 17.0, INT8 16.8
/// / 17.4; 2x4096x14336 INT4 14.0 / 14.4, MXFP4 13.7 / 14.9, NVFP4 15.2 / 15.6, NF4 15.2 / 16.6, FP8 17.7 / 17.6,
/// INT8 18.6 / 18.2; 2x28672x4096 INT4 21.0 / 21.2, MXFP4 20.8 / 21.9, NVFP4 21.2 / 23.3, NF4 24.1 / 25.1, FP8
/// 30.9 / 30.5, INT8 31.8 / 30.9; 2x128256x4096 NVFP4 80.2 / 89.1, NF4 85.6 / 96.8, FP8 123 / 124, INT8 124 / 126
/// (INT4 with 3 slots 97.3 / 82.4); 2x4096x4096 (4 steps a CTA) INT4 6.17 / 5.95, MXFP4 6.11 / 6.11, NVFP4 6.34 /
/// 6.22, NF4 6.27 / 7.42, FP8 7.39 / 7.10; 2x1024x4096 INT4 3.90 / 3.40, NF4 3.99 / 4.17. BF16 x: 2x14336x4096
/// INT4 12.4 / 13.4, FP8 16.2 / 19.0; 2x4096x14336 INT4 14.1 / 15.2, FP8 17.7 / 20.7. Three rows (the ring forced)
/// lost everywhere measured (3x14336x4096 INT4 15.4 / 12.5, NF4 15.9 / 14.7, FP8 18.7 / 17.2).
pub fn auto_rows(
    (format, x): (WoFormat, XDtype),
    (m, n, k): (usize, usize, usize),
    sm_count: u32,
    peak_gb_s: f64,
) -> bool {
    if m == 1 {
        return auto_on(format, n, k, sm_count, peak_gb_s);
    }
    // From 3 rows the tensor-core ring or none; at 2 it where it is planned (few row steps a CTA, session 57), else
    // the CUDA-core ring by the rules below.
    let tensor = mma_auto((format, x), (m, n, k), sm_count, peak_gb_s);
    if m >= MMA_ALWAYS_M || tensor {
        return tensor;
    }
    if m > AUTO_MAX_M_FAST || peak_gb_s < FAST_MEMORY_GB_S || !auto_on(format, n, k, sm_count, peak_gb_s) {
        return false;
    }
    let Ok(Plan { per, groups, parts, layout, .. }) = plan_on(format, m, n, k, sm_count, peak_gb_s) else {
        return false;
    };
    match format {
        WoFormat::Nf4 => true,
        // (Past the tensor-core ring's steps: from AUTO_ROWS_MIN_STEPS by default.)
        WoFormat::Int4G128 | WoFormat::Mxfp4 | WoFormat::Nvfp4 => {
            (per > mma_m2_max_steps(format) || parts >= 2) && layout.slots >= 2 * groups * parts
        }
        WoFormat::Fp8E4M3 | WoFormat::Int8 => x == XDtype::Bf16,
        _ => false,
    }
}

/// Whether the x-in-registers kernel's default M = 1 plan decodes NF4 in f16x2 at `n x k`.
fn nf4_xreg_in_f16x2(n: usize, k: usize, sm_count: u32) -> bool {
    LaunchPlan::new(Variant::XReg, WoFormat::Nf4, 1, n, k, sm_count, Tuning::default()).xh
}

/// Bytes of the block scales per row of `k` values (`pack::xreg_tables`' entries; none for formats the ring
/// does not take).
fn scale_bytes_per_row(format: WoFormat, k: usize) -> usize {
    pack::xreg_geometry(format, k).map_or(0, |(bytes, cols)| bytes * cols)
}

/// Bytes of INT4's 4-bit zero points per row of `k` values (none for the other formats).
fn zero_bytes_per_row(format: WoFormat, k: usize) -> usize {
    if format == WoFormat::Int4G128 {
        k / 256
    } else {
        0
    }
}

/// Bytes of the scale tables per row of `k` values: the scales, and INT4's 4-bit zero points (none for FP8 and
/// INT8, whose row scales the kernel reads once a row).
fn table_bytes_per_row(format: WoFormat, k: usize) -> usize {
    scale_bytes_per_row(format, k) + zero_bytes_per_row(format, k)
}

/// Dynamic shared memory of the tables of `rows` rows of `k` values: their scales and zero points, and the
/// per-K-slice row sums.
pub(crate) fn tables_bytes(format: WoFormat, k: usize, rows: usize) -> usize {
    table_bytes_per_row(format, k) * rows + sums_bytes(format, k, rows)
}

/// Dynamic shared memory of the per-K-slice row sums of `rows` rows of `k` values (an f32 per row and K slice,
/// [`slices`]) for one row of x.
fn sums_bytes(format: WoFormat, k: usize, rows: usize) -> usize {
    slices(format, k) * rows * 4
}

/// CTAs and the most row steps any of them takes for `n` rows on `sm_count` SMs: one wave, the fewest CTAs
/// that keep the largest share as small as one wave allows.
pub fn grid(n: usize, sm_count: u32) -> (u32, usize) {
    let steps = n / STEP_ROWS;
    let per = steps.div_ceil(sm_count.max(1) as usize).max(1);
    (steps.div_ceil(per) as u32, per)
}

/// NF4's table of code pairs in the ring GEMV's dynamic shared memory (`nf4_pair_fill<true>`): rows of 256
/// bytes, the upper half of each unused, so that a lookup's byte offset is one byte permute (lane x 4 and
/// the byte of codes) and the table's base folds into the load.
pub const NF4_WIDE_TABLE_BYTES: usize = 256 * 256;

/// Dynamic shared memory an NF4 CTA of the ring GEMV may take in all (of the H100's 227 KB): its wide table
/// beside a ring as deep as [`SMEM_BUDGET`] leaves the other formats.
const NF4_SMEM_BUDGET: usize = 224 * 1024;

/// Bytes of NF4's narrow pair table (`nf4_pair_fill<false>`, static shared memory): the ring GEMV's fallback
/// where the wide one leaves no ring (the x-in-registers kernel's table; lookups cost more).
const NF4_NARROW_TABLE_BYTES: usize = 256 * 128;

/// How a CTA of the ring GEMV lays out its dynamic shared memory ([`layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Ring slots (of one K part of a row step each).
    pub slots: usize,
    /// Dynamic shared memory of the CTA, bytes.
    pub smem: usize,
    /// Whether the scales stream with the weights, beside each ring slot (`RW_SSTREAM`,
    /// [`wants_streamed_scales`]), instead of tables staged in shared memory.
    pub streamed_scales: bool,
    /// NF4: where its wide pair table starts ([`nf4_table_offset`]); `None`: the narrow one (or not NF4).
    pub nf4_wide_at: Option<usize>,
}

/// The CTA's layout for at most `per` row steps of `k` values streamed in `parts` K parts, `groups` row
/// groups: the scale tables staged in shared memory ([`layout_for`]) unless that leaves fewer slots
/// than [`wants_streamed_scales`] asks and streaming the scales with the weights makes room for more.
/// `ROOFLINE_RING_STREAM_SCALES` (0 or 1) forces either for tuning experiments. `None`: no ring fits either way.
/// On a device with `fast` memory ([`FAST_MEMORY_GB_S`] or more) the scales stream more often.
pub(crate) fn layout(
    (format, m): (WoFormat, usize),
    k: usize,
    per: usize,
    groups: usize,
    parts: usize,
    fast: bool,
) -> Option<Layout> {
    let staged = layout_for((format, m), k, per, groups, parts, false);
    if table_bytes_per_row(format, k) == 0 {
        return staged; // FP8 / INT8: no tables to stream
    }
    let streamed = layout_for((format, m), k, per, groups, parts, true);
    match std::env::var("ROOFLINE_RING_STREAM_SCALES").ok().as_deref() {
        Some("0") => staged,
        Some("1") => streamed,
        _ if wants_streamed_scales(format, (staged, streamed), (groups, parts), fast) => streamed,
        _ => staged,
    }
}

/// Whether the default streams the scales with the weights (`staged` / `streamed`: the layouts with the tables
/// staged and streamed, if any; streamed only where that leaves more slots): where staged tables leave no ring
/// at all, and in row steps streamed in K parts (`parts` >= 2, the
/// long-K plan, [`long_k`]) where they leave the ring less than two row steps. Streamed, each slot's scales are
/// one run of the step-major tables (`pack::ring_step_tables`), one bulk copy on the slot's barrier, and cost
/// their bytes: H100, session 34, us, staged / streamed (bench/RESULTS.md): at as many slots or more a tie
/// (MXFP4 1x57344x8192, 4 / 10 slots, 84.5 / 85.4; INT4, 6 / 10, 83.4 / 83.6), where staged leave one row step
/// or none a gain (NF4 1x57344x8192, 2 / 8 slots, 109 / 86.9; NVFP4, none / 10, x-in-registers 96.9 / 90.1;
/// NVFP4 1x128256x4096 in whole steps, none / 9, x-in-registers 106-107 / 102). In whole steps with a few
/// staged slots the x-in-registers kernel wins over both ([`auto`]: MXFP4 1x128256x4096 93.3 / staged 99.7 (3
/// slots) / streamed 97.2 (9); NF4 93.5 / 116 (2) / 97.4 (8)). Session 33's streamed scales, 16-byte pieces
/// of the transposed tables a DRAM page apart, were slower than staged at as many slots (INT4 1x57344x8192
/// 88.2 vs 83.7).
///
/// On `fast` memory ([`FAST_MEMORY_GB_S`]: the H200) the scales also stream where staged tables leave fewer
/// than 3 slots per consumer class (`groups x parts`; INT4, two copies a slot: fewer than 2) and streamed ones
/// at least 2 a class; the ring then takes over from the
/// x-in-registers kernel wherever that leaves it two slots a class ([`auto_on`], [`AUTO_MIN_SLOTS_FAST`]).
/// H200, session 41, us, the x-in-registers default / the ring staged / streamed (bench/RESULTS.md): INT4
/// 1x152064x5120 148-150 / 120 (3 slots, 3 classes) / 98.5-98.7 (6), 1x151936x4096 114 / 97.3-101 (3) / 81.4-81.5
/// (9), 1x57344x6144 69.3-69.6 / 53.9-54.1 (3) / 47.9-48.3 (6); NF4 1x49152x6144 69.8-70.9 / 55.1-55.2 (2, 2
/// classes) / 42.0-42.3 (4); NVFP4 1x32000x5120 31.6 / 30.2-30.4 (3) / 25.9-26.1 (6), 1x27648x6144 29.3-29.4 /
/// 30.3 / 27.3; MXFP4 1x57344x6144 53.3-53.6 / 53.7-54.3 / 48.2-48.6. With one slot more a class (2 K parts, 5 -> 6
/// slots), staged / streamed: MXFP4 1x14336x14336 30.2-30.5 / 30.5-31.1, NVFP4 1x8192x14336 18.7-19.0 / 18.4-18.6.
/// H200, session 40, us, default /
/// streamed (bench/RESULTS.md): MXFP4 1x128256x4096 x-in-registers 72.4 / ring 68.5-69.1 (3 -> 9 slots), NF4
/// 81.5-81.7 / 74.2-75.1 (2 -> 8), NVFP4 1x28672x4096 18.5 / 18.0-18.2 (6 -> 9), 1x28672x8192 37.3-37.6 /
/// 36.1-36.4 (2 K parts, 5 -> 10), MXFP4 1x57344x8192 70.4-70.5 / 68.4-69.0 (4 -> 10); at 3 or more a class a tie
/// (MXFP4 1x28672x8192, 8 -> 11: 35.0-35.4 / 35.3-35.5). INT4's scales and zero points take two copies a slot:
/// streamed it lost even with more slots (1x28672x8192, 9 -> 11: 37.2-37.4 / 38.6-38.7; 1x57344x8192, 7 -> 11:
/// 73.9-74.0 / 76.4-77.3; its LM head, 6 -> 9, 69.3-69.7 / 69.0, a tie).
fn wants_streamed_scales(
    format: WoFormat,
    (staged, streamed): (Option<Layout>, Option<Layout>),
    (groups, parts): (usize, usize),
    fast: bool,
) -> bool {
    let classes = groups * parts;
    // Below this many staged slots a consumer class, fast memory streams: 3 for the formats of one scale copy a
    // slot, 2 for INT4 (two copies: scales and zero points).
    let crowded = if format == WoFormat::Int4G128 { 2 } else { 3 } * classes;
    match (staged, streamed) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(s), Some(t)) if t.slots <= s.slots => false,
        (Some(s), Some(t)) => {
            (parts >= 2 && s.slots < 2 * classes) || (fast && s.slots < crowded && t.slots >= 2 * classes)
        }
    }
}

/// Ring slots of a CTA with room for `fit` slots, `units` units (K parts of row steps) to stream and `classes`
/// consumer classes (row groups x K parts): as many as fit up to all of its units (at least `classes`), with
/// `any` any such count (where a slot then serves several classes the kernel keeps a `full` barrier per slot
/// and class, `RW_MIXED`), else a multiple of `classes` (each slot serving one class).
fn ring_slots(fit: usize, units: usize, classes: usize, any: bool) -> usize {
    if any {
        fit.min(units.max(classes))
    } else {
        fit.min(units.div_ceil(classes) * classes) / classes * classes
    }
}

/// Whether ring slots of a CTA of `groups` row groups may be any count of at least the consumer classes
/// ([`ring_slots`]): `ROOFLINE_RING_ANY_SLOTS` (0 or 1) for experiments, else only in one row group (its K
/// parts the classes). H100, session 35, multiples -> any: Llama-3-70B's down_proj 1x8192x28672 in 4 K parts
/// 4 -> 6 slots, MXFP4 47.5 -> 46.3 us, INT4 47.2 -> 46.0 (NVFP4 and NF4 unchanged); INT4 1x57344x8192 6 -> 7,
/// 84.2 -> 83.0; NVFP4 1x28672x8192 4 -> 5, 47.3 -> 46.6. In 3 row groups the extra slots cost more than they
/// give: INT4 1x14336x4096 9 -> 11 slots, 13.0 -> 13.8; NVFP4 9 -> 10, 13.5 -> 13.8.
fn any_slot_count(groups: usize) -> bool {
    match std::env::var("ROOFLINE_RING_ANY_SLOTS").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => groups == 1,
    }
}

/// Fewest GB/s of memory bandwidth (the device's peak, from its memory clock and bus width) at which the ring
/// limits its units in flight (`ring::units_in_flight`): measured on the H200 (4.9 TB/s peak), not on the H100
/// (3.35), whose defaults stay as they were measured until an H100 run says otherwise.
pub const FAST_MEMORY_GB_S: f64 = 4000.0;

/// Fewest bytes of one bulk copy (a whole row step's, or in K parts a row's part) for which the ring limits
/// its units in flight (`ring::units_in_flight`): with copies of 2 KB (K parts of 4096 values) the stream needs
/// more of them in flight than two units hold.
pub const AHEAD_MIN_COPY: usize = 3584;

/// Units (K parts of row steps) the ring's producer keeps in flight (`RW_AHEAD`: it issues unit u once unit
/// u - n has landed; 0: as many as the ring has slots free) for a CTA of `units` units of `format` in `slots`
/// slots, each filled by copies of `copy` bytes, on a device of `peak_gb_s` memory bandwidth:
/// `ROOFLINE_RING_AHEAD` for experiments, else 2 where the memory is fast ([`FAST_MEMORY_GB_S`]), the copies are
/// at least [`AHEAD_MIN_COPY`] bytes and the CTA's units fill its ring at most four times (FP16, with no decode
/// to hide: any count of units); else 0. Bulk copies issued together land together: a full ring issued at once
/// has its first slot land about with its last, and the decode of every slot waits for that; two in flight land
/// in order and the decode runs under the rest of the stream. A long stream (many units) of decoded codes or
/// small copies need more bytes in flight than two units hold.
/// H200, session 36, us, all in flight / 2: 1x14336x4096 (14 units in 9 slots, 16 KB copies) INT4 11.4-11.5 /
/// 9.74-9.88, MXFP4 11.0 / 9.80-9.99, NVFP4 11.5 / 10.0-10.2, NF4 11.5 / 10.4; 1x4096x14336 (8 in 6, 3.5 KB)
/// INT4 12.3 / 10.9, MXFP4 11.9-12.0 / 10.6-10.7, NVFP4 13.0-13.1 / 11.0-11.1, NF4 12.5 / 11.2-11.3;
/// 1x28672x4096 (28 in 9, 16 KB) INT4 17.9 / 17.1-17.2, NVFP4 18.4-18.6 / 18.0-18.2. But 1x8192x8192 (16, 2
/// KB) INT4 11.4-11.5 / 12.7-12.8, 1x28672x8192 (56, 2 KB) 35.6-35.7 / 40.1-40.2, 1x8192x28672 (56, 2 KB)
/// 38.2-38.8 / 41.9-42.1, 1x128256x4096 (122 in 9, 16 KB) 67.1-67.7 / 70.9-71.4 (3 in flight: 66.8-68.0);
/// one in flight is slower everywhere. FP16, session 44 (K in 2 parts of 4 KB copies): 1x14336x4096 (28 in 6)
/// 27.4 / 27.0, 1x28672x4096 53.2 / 52.5, 1x128256x4096 235 / 234; 1x6144x4096 13.1 / 12.5, 1x4096x8192 17.2 /
/// 16.4; but with K = 7168's 2 KB copies 1x7168x7168 24.2 / 29.0-29.3.
/// A decode cheap enough (`cheap`, [`three_in_flight`]: INT4 on the CUDA-core row steps with the subnormal decode and
/// one row of x, [`int4_subnormal`]; since session 61 MXFP4 and NVFP4 there too) lets a third unit in flight pay where
/// a CTA streams more units than its ring has slots, up to [`AHEAD3_MAX_FILLS`] times as many, in whole row steps of
/// K >= 4096 ([`AHEAD3_MIN_COPY`]; session 60, H200, INT4, us, 2 / 3: 1x20480x4096 12.1 / 11.8, 1x24576x4096 14.6 /
/// 14.1, 1x28672x4096 16.5 / 16.0, 1x36864x4096 20.3 / 19.5, 1x57344x4096 (all in flight before) 29.6 / 29.2,
/// 1x14336x4096 9.27 / 9.23; but 1x4096x14336's 3.5 KB copies 9.87 / 10.55 and the LM head, 122 units in 9 slots,
/// 64.8 (all) / 65.3).
fn units_in_flight(format: WoFormat, units: usize, slots: usize, copy: usize, peak_gb_s: f64, cheap: bool) -> usize {
    let short = format.bits() == 16 || units <= 4 * slots;
    let fast = peak_gb_s >= FAST_MEMORY_GB_S;
    let three = cheap && fast && copy >= AHEAD3_MIN_COPY && units > slots && units <= AHEAD3_MAX_FILLS * slots;
    std::env::var("ROOFLINE_RING_AHEAD").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(if three {
        3
    } else if fast && copy >= AHEAD_MIN_COPY && short {
        2
    } else {
        0
    })
}

/// Whether `format`'s CUDA-core row step at `m` rows of x (`mma`: the tensor-core one) decodes a unit cheaply enough for
/// a third unit in flight (`units_in_flight`): at one row of x, INT4's subnormal decode ([`int4_subnormal`], session
/// 60), and MXFP4's and NVFP4's E2M1 decode (session 61, H200, us, 2 / 3 in flight, tune_table: 1x28672x4096 MXFP4
/// 17.04 / 16.54, NVFP4 17.53 / 17.22; 1x14336x4096 9.63 / 9.63, 9.92 / 9.96; NF4 10.27 / 10.43, 17.81 / 17.70 keeps 2).
fn three_in_flight(format: WoFormat, m: usize, mma: bool) -> bool {
    !mma && m == 1 && (int4_subnormal(format) || matches!(format, WoFormat::Mxfp4 | WoFormat::Nvfp4))
}

/// Fewest bytes of a bulk copy for which a cheap decode (`three_in_flight`) keeps three units in flight
/// (`units_in_flight`): a whole row step of K = 4096.
pub const AHEAD3_MIN_COPY: usize = 16384;

/// Most times a CTA's units fill its ring for which a cheap decode (`three_in_flight`) keeps three units in flight
/// (`units_in_flight`; measured ahead at 6.2, behind at 13.6).
pub const AHEAD3_MAX_FILLS: usize = 7;

/// Bytes of one of the ring's bulk copies for rows of `k` `format` values in `parts` K parts: a whole row step (8
/// rows) in one part, else one row's part.
fn copy_bytes(format: WoFormat, k: usize, parts: usize) -> usize {
    if parts == 1 {
        STEP_ROWS * row_bytes(format, k)
    } else {
        row_bytes(format, k) / parts
    }
}

/// Peak memory bandwidth of the device of `ctx`, GB/s ([`peak_gb_s`] of its memory clock and bus width); 0
/// where the driver does not say.
pub(crate) fn peak_memory_gb_s(ctx: &CudaContext) -> f64 {
    use cudarc::driver::sys::CUdevice_attribute as A;
    match (
        ctx.attribute(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
        ctx.attribute(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
    ) {
        (Ok(khz), Ok(bits)) => peak_gb_s(khz, bits),
        _ => 0.0,
    }
}

/// Peak bandwidth, GB/s, of double-data-rate memory at `clock_khz` on a bus of `bus_bits` (0 for a value the
/// driver does not give).
fn peak_gb_s(clock_khz: i32, bus_bits: i32) -> f64 {
    if clock_khz <= 0 || bus_bits <= 0 {
        return 0.0;
    }
    2.0 * f64::from(clock_khz) * 1e3 * f64::from(bus_bits) / 8.0 / 1e9
}

/// [`layout_with`] (`streamed`: the scales beside each slot) with NF4's wide pair table wherever a ring fits
/// beside it (else its narrow one): the wide one takes one byte permute a lookup. H100, session 32:
/// Llama-3-70B's down_proj 1x8192x28672 has no ring beside the wide table and its staged scales; on the
/// narrow one's 4 slots 48.7-49.5 us against the x-in-registers kernel's 71.6-72.2.
fn layout_for(
    (format, m): (WoFormat, usize),
    k: usize,
    per: usize,
    groups: usize,
    parts: usize,
    streamed: bool,
) -> Option<Layout> {
    if format == WoFormat::Nf4 {
        if let Some(l) = layout_with((format, m), k, per, groups, parts, true, streamed) {
            return Some(l);
        }
    }
    layout_with((format, m), k, per, groups, parts, false, streamed)
}

/// The ring's slots and the CTA's dynamic shared memory for at most `per` row steps of `k` values streamed
/// in `parts` K parts, `m` rows of x: the per-K-slice row sums of each and (unless `streamed`: the scales beside each slot) the scale
/// tables of the CTA's rows, as many slots of one K part each as fit beside them ([`ring_slots`]: up to the
/// CTA's `per x parts`), and for NF4 with `wide` its wide pair table after them
/// ([`nf4_table_offset`]; else the narrow one in static shared memory). `None`: not even `groups x parts`
/// slots fit.
fn layout_with(
    (format, m): (WoFormat, usize),
    k: usize,
    per: usize,
    groups: usize,
    parts: usize,
    wide: bool,
    streamed: bool,
) -> Option<Layout> {
    let tables = cta_tables((format, m), k, per, streamed);
    // NF4: room for the wide table and up to 128 bytes of alignment before it, or for the narrow static one.
    let budget = match (format, wide) {
        (WoFormat::Nf4, true) => NF4_SMEM_BUDGET - NF4_WIDE_TABLE_BYTES - 128,
        (WoFormat::Nf4, false) => NF4_SMEM_BUDGET - NF4_NARROW_TABLE_BYTES,
        _ => SMEM_BUDGET,
    } / ctas_per_sm();
    let ring = ring_limit().min(budget.checked_sub(tables)?);
    let unit = groups * parts;
    // A slot's weights and, where they stream with them, its scales.
    let slot = slot_bytes(format, k, parts) + if streamed { slot_scale_bytes(format, k, parts) } else { 0 };
    let any = any_slot_count(groups);
    let slots = ring_slots(ring / slot, per * parts, unit, any);
    let used = slots * slot + tables;
    let nf4_wide_at = (format == WoFormat::Nf4 && wide).then(|| nf4_table_offset(used));
    let smem = nf4_wide_at.map_or(used, |at| at + NF4_WIDE_TABLE_BYTES);
    (slots >= least_slots(format, unit, any)).then_some(Layout { slots, smem, streamed_scales: streamed, nf4_wide_at })
}

/// Fewest ring slots for `classes` consumer classes (row groups x K parts), with `any` slot count allowed
/// ([`any_slot_count`]): one per class, so each class has a unit landing while the others decode; for 16-bit
/// weights with any count only 2 (at most `classes`), since a row step past K = 12288 (8 rows of over 24 KB) is more
/// than the ring holds in any K parts: their units still stream in order, two in flight
/// ([`units_in_flight`]), each slot serving the classes in turn (`RW_MIXED`), and consumers that decode no
/// more than a multiply-add per two weights wait for their turn.
fn least_slots(format: WoFormat, classes: usize, any: bool) -> usize {
    if format.bits() == 16 && any {
        classes.min(2)
    } else {
        classes
    }
}

/// Bytes of a CTA's tables in shared memory for at most `per` row steps of `k` values and `m` rows of x: the
/// per-K-slice row sums of each row of x and, unless the scales stream with the weights (`streamed`), the scale
/// tables ([`tables_bytes`]).
fn cta_tables((format, m): (WoFormat, usize), k: usize, per: usize, streamed: bool) -> usize {
    let rows = per * STEP_ROWS;
    let scales = if streamed { 0 } else { table_bytes_per_row(format, k) * rows };
    scales + m * sums_bytes(format, k, rows)
}

/// Bytes of the scales beside a ring slot where they stream with the weights (`RW_SCB`): the slot's 8 rows'
/// scales and zero points of one of `parts` K parts.
fn slot_scale_bytes(format: WoFormat, k: usize, parts: usize) -> usize {
    table_bytes_per_row(format, k) * STEP_ROWS / parts
}

/// Bytes of one ring slot: a row step of `k` `format` values, or one of its `parts` K parts.
fn slot_bytes(format: WoFormat, k: usize, parts: usize) -> usize {
    STEP_ROWS * row_bytes(format, k) / parts
}

/// Where NF4's wide pair table starts in the dynamic shared memory after `used` bytes of the ring and the
/// tables: 128-byte aligned (`RW_NF4_OFF` in wo_ring.cu).
fn nf4_table_offset(used: usize) -> usize {
    used.next_multiple_of(128)
}

/// Whether the ring GEMV's builds for `n x k` `format` weights on `sm_count` SMs of `peak_gb_s` memory bandwidth
/// (`ring::peak_memory_gb_s`) stream the scales with the weights, and so read the step-major tables
/// (`pack::ring_step_tables`) instead of the transposed ones: the M = 1 build's choice, which the builds for
/// more rows of x keep (`plan_on`).
pub fn streams_scales(format: WoFormat, n: usize, k: usize, sm_count: u32, peak_gb_s: f64) -> bool {
    // The CUDA-core build's, also where `ROOFLINE_RING_MMA=1` plans one row on the tensor cores (whose plan asks this).
    plan_with(format, (1, n, k), (sm_count, peak_gb_s), false, None).is_ok_and(|p| p.layout.streamed_scales)
}

/// The ring kernel's `gscale` for packed weights `p`: NVFP4's tensor scale (1 for the other quantized formats and
/// BF16, whose FP32 products need no guard);
/// for FP16 the power of two 2^t by which the kernel scales x down and its sums back up, the smallest with 4
/// max|w| sqrt(K) 2^-t <= 32768: a lane's f16x2 sums of four products of x (at most sqrt(K) normalized, below 1
/// otherwise) stay within half of f16's range whatever the weights. t = 0 for weights of the usual size (max|w|
/// up to 128 at K = 4096), so their products keep f16's precision (scaled down by 2^-10 unconditionally, FP16's
/// small products went subnormal: 2e-3 relative error at 6144x4096 with the norm).
pub fn kernel_scale(p: &PackedWeights) -> f32 {
    if p.format != WoFormat::Fp16 {
        return p.global_scale;
    }
    let max = p
        .codes
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32().abs())
        .filter(|v| v.is_finite())
        .fold(0.0f32, f32::max);
    let t = (f64::from(max) * (p.k as f64).sqrt() / 8192.0).log2().ceil().max(0.0);
    2f32.powi(t as i32)
}

/// A matrix's scale and zero-point tables in the layout a ring build reads ([`RingGemv::launch`]).
#[derive(Clone, Copy)]
pub(crate) struct ScaleTables<'a> {
    /// Block scales.
    pub scales: &'a CudaSlice<u8>,
    /// INT4's zero points (16 unread bytes otherwise).
    pub zeros: &'a CudaSlice<u8>,
    /// Step-major (`pack::ring_step_tables`: builds that stream the scales), else transposed
    /// (`pack::xreg_tables`: builds that stage them).
    pub step_major: bool,
}

/// Why the ring GEMV cannot run `batch` rows of x against `n x k` weights of `format` on `sm_count` SMs (`None`: it
/// can), planned as on memory below [`FAST_MEMORY_GB_S`] ([`unsupported_on`] for a given device).
pub fn unsupported(format: WoFormat, batch: usize, n: usize, k: usize, sm_count: u32) -> Option<String> {
    plan(format, batch, n, k, sm_count).err()
}

/// [`unsupported`] on a device of `peak_gb_s` memory bandwidth: more rows of x than one keep the M = 1 build's
/// staged or streamed scales (`plan_on`), which on fast memory may leave them a ring where the other would not.
pub fn unsupported_on(
    format: WoFormat,
    (batch, n, k): (usize, usize, usize),
    sm_count: u32,
    peak_gb_s: f64,
) -> Option<String> {
    plan_on(format, batch, n, k, sm_count, peak_gb_s).err()
}

/// How the ring GEMV runs an `n x k` call ([`plan`]).
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// CTAs, one wave ([`grid`]).
    ctas: u32,
    /// Most row steps a CTA takes.
    per: usize,
    /// Row groups ([`row_groups`]).
    groups: usize,
    /// K parts a row step streams in ([`k_parts`]).
    parts: usize,
    /// The ring, the tables and the dynamic shared memory of a CTA ([`layout`]).
    layout: Layout,
    /// Whether the tensor cores take the row steps ([`mma_plan`]).
    mma: bool,
    /// K splits, each its own CTA of a row block ([`mma_splits`]; 1 but on the tensor cores past K = 4096): `ctas` is
    /// the row blocks times the splits.
    splits: usize,
}

impl Plan {
    /// Values of K one CTA takes (the kernel's FD): K over the splits.
    fn fd(&self, k: usize) -> usize {
        k / self.splits
    }

    /// Threads a CTA of `format` weights, rows of `k` values ([`cta_threads`] for its share of K).
    fn threads(&self, format: WoFormat, k: usize) -> u32 {
        cta_threads(format, self.fd(k), self.groups, self.mma) as u32
    }
}

/// Registers a thread of the ring GEMV takes for `m` rows of x of `format` weights, at most (ptxas for sm_90, CUDA
/// 12.9 and 13.0, session 50: INT4 80 / 105 / 126 at M = 1 / 2 / 3, NF4 96 / 102 / 127, FP8 48 / 64 / 78 (64 spilled
/// with a residual add at 2x4096x14336 on CUDA 13.0), BF16 64 / 86 / 108); a build with less room spills
/// ([`register_room`]).
fn rows_registers(format: WoFormat, m: usize) -> usize {
    let (one, more) = match format.bits() {
        4 => (96, 16),
        8 => (48, 24),
        _ => (64, 24),
    };
    one + more * (m.max(1) - 1)
}

/// Registers a thread may take in a CTA of `threads` threads alone on an SM (65536 a SM, allocated for warps in
/// groups of 4, in steps of 8; at most 255).
fn register_room(threads: usize) -> usize {
    (65536 / threads.next_multiple_of(128).max(128) / 8 * 8).min(255)
}

/// The ring GEMV's grid, row groups, K parts and ring for a `batch x n x k` call of `format` on `sm_count`
/// SMs, or why it cannot run it; the ring laid out as on memory below [`FAST_MEMORY_GB_S`] ([`plan_on`] for a
/// given device; whether it can run at all does not depend on it).
fn plan(format: WoFormat, batch: usize, n: usize, k: usize, sm_count: u32) -> Result<Plan, String> {
    plan_on(format, batch, n, k, sm_count, 0.0)
}

/// [`plan`] on a device of `peak_gb_s` memory bandwidth ([`peak_memory_gb_s`]; its ring's layout per
/// [`layout`]).
fn plan_on(format: WoFormat, batch: usize, n: usize, k: usize, sm_count: u32, peak_gb_s: f64) -> Result<Plan, String> {
    plan_with(format, (batch, n, k), (sm_count, peak_gb_s), true, None)
}

/// [`plan_on`], on the tensor cores only where `mma_ok` and [`mma_plan`] take the call; in K splits at most `clusters`
/// row blocks where given (the clusters of that many CTAs the device holds at once: `RingGemv::build` asks the driver).
fn plan_with(
    format: WoFormat,
    (batch, n, k): (usize, usize, usize),
    (sm_count, peak_gb_s): (u32, f64),
    mma_ok: bool,
    clusters: Option<u32>,
) -> Result<Plan, String> {
    if !takes(format) {
        return Err(format!(
            "the ring GEMV takes INT4 g128, NF4, MXFP4, NVFP4, FP8 E4M3, INT8, FP16 or BF16 weights, not {}",
            format.format()
        ));
    }
    let mma_k = mma_ok && mma_plan(format, batch, k);
    // K splits (past K = 4096 on the tensor cores): each row block's rows taken by as many CTAs, the grid's row blocks
    // as many times fewer.
    let wave = sm_count * ctas_per_sm() as u32;
    let split_grid = |s: usize| {
        let most = if s > 1 { clusters.unwrap_or(u32::MAX) } else { u32::MAX };
        let (blocks, per) = grid(n, split_blocks(wave, s).min(most));
        (blocks * s as u32, per)
    };
    let splits = if mma_k { mma_splits(k).unwrap_or(1) } else { 1 };
    let (ctas, per) = split_grid(splits);
    let mma = mma_k && (batch >= MMA_ALWAYS_M || per <= mma_m2_max_steps(format) || mma_forced());
    // Off the tensor cores K stays whole.
    let (splits, (ctas, per)) = if mma { (splits, (ctas, per)) } else { (1, split_grid(1)) };
    // The values of K a CTA takes.
    let fd = k / splits;
    // Builds for more rows of x keep the M = 1 build's tables (`streams_scales`), which INT4 always stages and NF4,
    // MXFP4 and NVFP4 stream at some shapes (NVFP4 at 28672 rows and more of 4096 on fast memory, the others at the LM
    // heads'); the tensor-core row step reads MXFP4's and NVFP4's either way (since session 54), NF4's staged only
    // (streamed, its builds spilled at K = 4096, 96 registers a thread).
    let mma_streamed = mma && format != WoFormat::Int4G128 && streams_scales(format, n, k, sm_count, peak_gb_s);
    if mma_streamed && format == WoFormat::Nf4 {
        return Err(format!(
            "{batch}x{n}x{k} NF4: the ring's M = 1 build streams the scales here, and the tensor-core row step stages \
             NF4's"
        ));
    }
    if !(1..=MAX_M).contains(&batch) && !mma {
        return Err(format!(
            "the ring GEMV multiplies 1 to {MAX_M} rows of x (4-bit weights up to {MMA_MAX_M} on the tensor cores, K \
             up to {MMA_MAX_K}), not {batch}"
        ));
    }
    let max = max_k(format);
    if k == 0 || k % 1024 != 0 || k > max {
        return Err(format!("the ring GEMV needs K a multiple of 1024 up to {max} for {}, not {k}", format.format()));
    }
    if n == 0 || n % STEP_ROWS != 0 {
        return Err(format!("the ring GEMV needs N a multiple of {STEP_ROWS}, not {n}"));
    }
    let (groups, parts) =
        if mma { (1, 1) } else { (row_groups(format, n, k, sm_count), k_parts(format, n, k, sm_count)) };
    let threads = cta_threads(format, fd, groups, mma);
    if batch > 1 && !mma && rows_registers(format, batch) > register_room(threads) {
        return Err(format!(
            "{batch} rows of x of {} weights need about {} registers a thread, and the ring's {threads} threads a CTA \
             for {n}x{k} leave {}",
            format.format(),
            rows_registers(format, batch),
            register_room(threads)
        ));
    }
    // More rows of x keep the M = 1 build's choice of staged or streamed scales (`streams_scales`: the tables the
    // weights are uploaded with), their larger row sums taking room from the ring.
    let fast = peak_gb_s >= FAST_MEMORY_GB_S;
    let one = layout((format, 1), k, per, groups, parts, fast);
    let layout = match batch {
        // The tensor-core row step reads staged scale tables.
        _ if mma => mma_layout(format, (batch, fd), per, mma_streamed, splits),
        1 => one,
        _ => one.and_then(|l| layout_for((format, batch), k, per, groups, parts, l.streamed_scales)),
    };
    let layout = layout.ok_or_else(|| {
        format!(
            "{n}x{k} on {sm_count} SMs: the tables of {} rows per CTA (with the row sums of {batch} rows of x) leave \
             no room for a ring in {} KB",
            per * STEP_ROWS,
            SMEM_BUDGET / 1024
        )
    })?;
    Ok(Plan { ctas, per, groups, parts, layout, mma, splits })
}

/// A ring GEMV compiled for one shape: its plan, its units in flight and NVRTC's CUBIN and log.
pub struct RingBuild {
    plan: Plan,
    rows: usize,
    ahead: usize,
    /// The CUBIN (for `cuobjdump -sass`, or a driver to load).
    pub cubin: Vec<u8>,
    /// ptxas's log (registers, spills).
    pub log: String,
}

impl RingBuild {
    /// CTAs, ring slots, K parts, row groups and units in flight, in words.
    pub fn describe(&self) -> String {
        let p = &self.plan;
        format!(
            "{} CTAs{} of {} row steps, {} row groups, {} K parts, {} slots, {} units in flight (0: all), scales {}, \
             {} rows of x{}",
            p.ctas,
            if p.splits > 1 {
                format!(" ({} row blocks of {} K splits)", p.ctas / p.splits as u32, p.splits)
            } else {
                String::new()
            },
            p.per,
            p.groups,
            p.parts,
            p.layout.slots,
            self.ahead,
            if p.layout.streamed_scales { "streamed" } else { "staged" },
            self.rows,
            if p.mma { ", on the tensor cores" } else { "" }
        )
    }
}

/// Compiles the ring GEMV that [`RingGemv::new`] would build for `m x n x k` on a GPU of `arch` (e.g. 90) with
/// `sm_count` SMs and `peak_gb_s` of memory bandwidth (`peak_memory_gb_s`; [`FAST_MEMORY_GB_S`] and up take
/// the fast-memory defaults), without a GPU: what `examples/kernel_build.rs --ring` dumps for `cuobjdump`.
pub fn compile_ring(
    arch: u32,
    sm_count: u32,
    peak_gb_s: f64,
    (format, x): (WoFormat, XDtype),
    (m, n, k): (usize, usize, usize),
    (epilogue, input): (Epilogue, Input),
) -> Result<RingBuild, GpuError> {
    compile_ring_with(arch, (sm_count, peak_gb_s), (format, x), (m, n, k), (epilogue, input), None, &[])
}

/// [`compile_ring`] with K splits in at most `clusters` row blocks where given ([`plan_with`]), and NVRTC options
/// `defines` after the others (experiment switches such as `-DEXP_RING_TRACE=1`).
fn compile_ring_with(
    arch: u32,
    (sm_count, peak_gb_s): (u32, f64),
    (format, x): (WoFormat, XDtype),
    (m, n, k): (usize, usize, usize),
    (epilogue, input): (Epilogue, Input),
    clusters: Option<u32>,
    defines: &[&str],
) -> Result<RingBuild, GpuError> {
    let plan = plan_with(format, (m, n, k), (sm_count, peak_gb_s), true, clusters).map_err(GpuError::Unsupported)?;
    if plan.mma && !mma_takes((format, x), m, k, (epilogue, input)) {
        return Err(GpuError::Unsupported(format!(
            "the ring GEMV takes {m} rows of {} weights on the tensor cores with FP16 or BF16 x, without SwiGLU on \
             load, not {} x with {epilogue:?} of {input:?}",
            format.format(),
            x.name()
        )));
    }
    if epilogue == Epilogue::Norm && input == Input::SwiGlu {
        return Err(GpuError::Unsupported("the ring GEMV takes SwiGLU on load without a fused norm".into()));
    }
    if arch < 90 {
        return Err(GpuError::Unsupported(format!(
            "the ring GEMV copies its weights with Hopper bulk copies (sm_90+), this is sm_{arch}"
        )));
    }
    nvrtc_available()?;
    let Plan { per, groups, parts, layout, mma, splits, .. } = plan;
    // A CTA's share of K (all of it but in K splits).
    let fd = plan.fd(k);
    // One row of x: at two, 3 in flight lost (2x14336x4096 12.05 -> 12.8 us, 2x28672x4096 20.35 -> 20.8).
    let cheap = three_in_flight(format, m, mma);
    let ahead = units_in_flight(format, per * parts, layout.slots, copy_bytes(format, fd, parts), peak_gb_s, cheap);
    let mut opts = options(arch, (format, x), (m, fd), per, layout, (parts, groups, ahead, mma), (epilogue, input));
    opts.push(format!("-DRW_SPLITS={splits}"));
    opts.extend(defines.iter().map(|d| d.to_string()));
    let (cubin, log) = compile_cubin_cached(&source(), "wo_ring.cu", &opts)?;
    Ok(RingBuild { plan, rows: m, ahead, cubin, log })
}

/// One matrix on the GPU in the kernel's layout.
pub struct RingWeights {
    codes: CudaSlice<u8>,
    scales: CudaSlice<u8>,
    zeros: CudaSlice<u8>,
    /// The kernel's `gscale` ([`kernel_scale`]: NVFP4's FP32 tensor scale, FP16's range guard, 1 otherwise).
    global_scale: f32,
    /// Bytes the kernel reads for the weights.
    pub bytes: usize,
}

/// The ring GEMV for one `m x n x k` shape and epilogue on one GPU (compiled for it by NVRTC).
pub struct RingGemv {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    function: CudaFunction,
    /// Weight format (INT4 g128, NF4, MXFP4, NVFP4, FP8 E4M3, INT8, FP16 or BF16).
    pub format: WoFormat,
    /// Activations' (x and y) type, FP16 or BF16.
    pub x: XDtype,
    /// Rows of x (and of y) a call multiplies, 1 to [`MAX_M`].
    pub m: usize,
    /// Output rows.
    pub n: usize,
    /// Input values.
    pub k: usize,
    /// What the kernel does besides W x.
    pub epilogue: Epilogue,
    /// What W multiplies: x, or SwiGLU of the gate_up row.
    pub input: Input,
    /// CTAs per launch.
    pub ctas: u32,
    /// Threads per CTA (the consumer warps and the producer warp).
    pub threads: u32,
    /// Ring slots per CTA (8 rows each, of one K part).
    pub slots: usize,
    /// K parts a row step streams in (a slot holds one).
    pub parts: usize,
    /// Units the producer keeps in flight (`ring::units_in_flight`; 0: as many as the ring has slots free).
    pub ahead: usize,
    /// Whether the scales stream with the weights beside each ring slot (else staged in shared memory).
    pub streamed_scales: bool,
    /// Whether the tensor cores take the row steps ([`mma_takes`]).
    pub mma: bool,
    /// K splits, each a CTA of a row block's cluster ([`mma_splits`]; 1 unless past K = 4096 on the tensor cores).
    pub splits: usize,
    smem_bytes: u32,
    /// Registers per thread (from the driver; a build that spills is refused).
    pub registers: u32,
}

impl RingGemv {
    /// Compiles the kernel for `m` rows of `x` activations against `n x k` `format` weights on `gpu` (refused where
    /// [`unsupported`] says so, before sm_90, or for SwiGLU on load with a fused norm).
    pub fn new(
        gpu: &Gpu,
        (format, x): (WoFormat, XDtype),
        (m, n, k): (usize, usize, usize),
        epilogue: Epilogue,
        input: Input,
    ) -> Result<RingGemv, GpuError> {
        let (major, minor) = gpu.compute_capability;
        let arch = (major * 10 + minor) as u32;
        RingGemv::build(&gpu.ctx, &gpu.stream, arch, gpu.sm_count, (format, x), (m, n, k), (epilogue, input))
    }

    /// [`RingGemv::new`] from the parts of a [`Gpu`] (compute capability as `arch`, e.g. 90).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        arch: u32,
        sm_count: u32,
        (format, x): (WoFormat, XDtype),
        (m, n, k): (usize, usize, usize),
        (epilogue, input): (Epilogue, Input),
    ) -> Result<RingGemv, GpuError> {
        let peak = peak_memory_gb_s(ctx);
        let compile = |clusters| {
            compile_ring_with(arch, (sm_count, peak), (format, x), (m, n, k), (epilogue, input), clusters, &[])
        };
        let load = |b: RingBuild| -> Result<_, GpuError> {
            let smem = alone_smem(ctx, b.plan.layout.smem)? as u32;
            let (function, registers) = load_checked(ctx, b.cubin, &b.log, "wo_ring", "the ring GEMV", smem)?;
            Ok((b.plan, b.ahead, smem, function, registers))
        };
        let (mut plan, mut ahead, mut smem, mut function, mut registers) = load(compile(None)?)?;
        if plan.splits > 1 {
            // K splits: no more row blocks than the device holds clusters of them at once (their CTAs share a GPC), else
            // part of the grid would wait for a second wave.
            let block = (plan.threads(format, k), 1, 1);
            let most = max_active_clusters(stream, &function, block, smem, (plan.splits as u32, 1))?;
            if most < plan.ctas / plan.splits as u32 {
                (plan, ahead, smem, function, registers) = load(compile(Some(most.max(1)))?)?;
            }
        }
        let threads = plan.threads(format, k);
        let Plan { ctas, parts, layout, mma, splits, .. } = plan;
        if ctas_per_sm() > 1 {
            // Two CTAs of up to half the budget each: the largest shared-memory carveout, so both fit an SM.
            use cudarc::driver::sys::CUfunction_attribute as A;
            function.set_attribute(A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100)?;
        }
        Ok(RingGemv {
            ctx: ctx.clone(),
            stream: stream.clone(),
            function,
            format,
            x,
            m,
            n,
            k,
            epilogue,
            input,
            ctas,
            threads,
            slots: layout.slots,
            parts,
            ahead,
            streamed_scales: layout.streamed_scales,
            mma,
            splits,
            smem_bytes: smem,
            registers,
        })
    }

    /// CTAs of this kernel that fit on one SM at once (the driver's occupancy for its threads and shared
    /// memory): 1 unless `ROOFLINE_RING_CTAS_PER_SM` or `ROOFLINE_RING_ALONE=0` say otherwise (`alone_smem`).
    pub fn resident_per_sm(&self) -> Result<u32, GpuError> {
        Ok(self.function.occupancy_max_active_blocks_per_multiprocessor(
            self.threads,
            self.smem_bytes as usize,
            None,
        )?)
    }

    /// The GPU's default stream (what [`RingGemv::upload`] copies on; any stream of its context runs it).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Uploads packed `n x k` weights of the build's format (for [`Epilogue::Norm`], with the norm's weight folded
    /// in).
    pub fn upload(&self, p: &PackedWeights) -> Result<RingWeights, GpuError> {
        let stream = &self.stream;
        if p.format != self.format || p.n != self.n || p.k != self.k {
            return Err(GpuError::Unsupported(format!(
                "ring GEMV: expected {} {}x{}, got {} {}x{}",
                self.format.format(),
                self.n,
                self.k,
                p.format.format(),
                p.n,
                p.k
            )));
        }
        // MXFP4 on the tensor cores: its block scales in the window where their products are exact in f16.
        if self.mma {
            mxfp4_mma_window(p).map_err(GpuError::Unsupported)?;
        }
        // The codes in the kernel's layout where it is not the packed one (MXFP4, NVFP4).
        let codes = pack::device_codes(p);
        let (mut scales, mut zeros) = xreg_tables(p);
        if self.streamed_scales {
            (scales, zeros) = pack::ring_step_tables(p.format, p.n, p.k, &scales, &zeros).ok_or_else(|| {
                GpuError::Unsupported(format!("no step-major scale tables for {} {}x{}", p.format.format(), p.n, p.k))
            })?;
        }
        Ok(RingWeights {
            codes: stream.clone_htod(codes.as_deref().unwrap_or(&p.codes))?,
            scales: stream.clone_htod(&scales)?,
            zeros: stream.clone_htod(&zeros)?,
            global_scale: kernel_scale(p),
            bytes: p.bytes(),
        })
    }

    /// y = W rmsnorm(x) / W x / y + W x (the epilogue; x SwiGLU of the gate_up row with [`Input::SwiGlu`]) on
    /// `stream`; `x` holds m rows of k values (of the gate_up row: 2k), `y` m rows of n; `eps` is the
    /// norm's (ignored otherwise); `pdl`: launched with programmatic dependent launch.
    pub fn run(
        &self,
        stream: &Arc<CudaStream>,
        w: &RingWeights,
        x: &CudaSlice<u16>,
        y: &mut CudaSlice<u16>,
        eps: f32,
        pdl: bool,
    ) -> Result<(), GpuError> {
        let tables = ScaleTables { scales: &w.scales, zeros: &w.zeros, step_major: self.streamed_scales };
        self.launch(stream, &w.codes, tables, w.global_scale, x, y, eps, pdl)
    }

    /// [`RingGemv::run`] on weights in any buffers of the kernel's layout: codes row-major (n x k / 2
    /// bytes), scales and zero points in the build's layout ([`ScaleTables`]: step-major where it streams
    /// them, [`RingGemv::streamed_scales`], else transposed as the x-in-registers engine's tables), NVFP4's
    /// tensor scale `gscale` (1 otherwise).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &self,
        stream: &Arc<CudaStream>,
        codes: &CudaSlice<u8>,
        tables: ScaleTables<'_>,
        gscale: f32,
        x: &CudaSlice<u16>,
        y: &mut CudaSlice<u16>,
        eps: f32,
        pdl: bool,
    ) -> Result<(), GpuError> {
        if !gscale.is_finite() {
            return Err(GpuError::Unsupported(format!("the ring GEMV's tensor scale is {gscale}")));
        }
        if self.epilogue == Epilogue::Norm && !(eps.is_finite() && eps > 0.0) {
            return Err(GpuError::Unsupported(format!("the ring GEMV's RMSNorm needs eps > 0, got {eps}")));
        }
        if tables.step_major != self.streamed_scales {
            return Err(GpuError::Unsupported(format!(
                "the {}x{} ring GEMV {} its scales and reads the {} tables; these are {}",
                self.n,
                self.k,
                if self.streamed_scales { "streams" } else { "stages" },
                if self.streamed_scales { "step-major" } else { "transposed" },
                if tables.step_major { "step-major" } else { "transposed" },
            )));
        }
        let ScaleTables { scales, zeros, .. } = tables;
        let (m, n, k) = (self.m, self.n, self.k);
        // FP8 / INT8: an FP32 scale per row.
        let scale_bytes = if self.format.bits() == 8 { 4 * n } else { scale_bytes_per_row(self.format, k) * n };
        let zero_bytes = zero_bytes_per_row(self.format, k) * n;
        let xk = if self.input == Input::SwiGlu { 2 * k } else { k };
        if x.len() < m * xk
            || y.len() < m * n
            || codes.len() < n * row_bytes(self.format, k)
            || scales.len() < scale_bytes
            || zeros.len() < zero_bytes
        {
            return Err(GpuError::Unsupported(format!(
                "the {m}x{n}x{k} ring GEMV got x of {} values, y of {}, {} code bytes, {} scale bytes and {} \
                 zero-point bytes",
                x.len(),
                y.len(),
                codes.len(),
                scales.len(),
                zeros.len()
            )));
        }
        if stream.context().cu_ctx() != self.ctx.cu_ctx() {
            return Err(GpuError::Unsupported("the ring GEMV runs on a stream of its own context".into()));
        }
        let (mut wp, _g0) = codes.device_ptr(stream);
        let (mut sp, _g1) = scales.device_ptr(stream);
        let (mut zp, _g2) = zeros.device_ptr(stream);
        let (mut xp, _g3) = x.device_ptr(stream);
        let (mut yp, _g4) = y.device_ptr_mut(stream);
        let mut n = self.n as i32;
        let mut e = eps;
        let mut g = gscale;
        let mut params: [*mut c_void; 8] = [
            (&raw mut wp).cast(),
            (&raw mut sp).cast(),
            (&raw mut zp).cast(),
            (&raw mut xp).cast(),
            (&raw mut yp).cast(),
            (&raw mut n).cast(),
            (&raw mut e).cast(),
            (&raw mut g).cast(),
        ];
        // SAFETY: the parameters match wo_ring(const uint4* w, const u8* w_s, const u8* w_z, const u16* x, u16*
        // y, int n, float eps, float gscale) in order and type, each pointing at a local that lives through the launch; the
        // codes hold n rows of k 4-, 8- or 16-bit codes and the scale and zero-point tables all of their rows' entries (checked
        // above), in the layout the build reads (step-major where RW_SSTREAM, checked above), x holds RW_M = m rows
        // of k values (2k with SwiGLU on load, the SILU_X build's reads) and y m rows of n; the grid
        // is `grid(n)`'s, whose largest share of rows is the RW_ROWS the kernel was compiled with, and the
        // dynamic shared memory is `layout`'s for it (attribute set in `new`). PDL: before its
        // `griddepcontrol.wait` the kernel reads only its weights and their tables, which no kernel writes. K splits:
        // clusters of `splits` CTAs along x (the kernel's RW_SPLITS; `ctas` a multiple of it, `plan_with`).
        unsafe {
            launch_cluster_ex(
                stream,
                &self.function,
                (self.ctas, 1, 1),
                (self.threads, 1, 1),
                self.smem_bytes,
                pdl,
                (self.splits as u32, 1),
                &mut params,
            )
        }
    }
}

/// The kernel's source: the x-in-registers kernel's, the streaming helpers, then `wo_ring`.
fn source() -> String {
    format!("{WEIGHT_ONLY_XREG_SOURCE}\n{STREAM_SOURCE}\n{RING_SOURCE}")
}

fn options(
    arch: u32,
    (format, x): (WoFormat, XDtype),
    (m, k): (usize, usize),
    per: usize,
    layout: Layout,
    (parts, groups, ahead, mma): (usize, usize, usize, bool),
    (epilogue, input): (Epilogue, Input),
) -> Vec<String> {
    let mut opts = stream_options(arch, format, x, k);
    opts.push(format!("-DRW_M={m}"));
    opts.push(format!("-DRW_STEPS={}", layout.slots));
    opts.push(format!("-DRW_KH={parts}"));
    opts.push(format!("-DRW_AHEAD={ahead}"));
    opts.push(format!("-DRW_ROWS={}", per * STEP_ROWS));
    opts.push(format!("-DRW_GROUPS={groups}"));
    opts.push(format!("-DRW_MMA={}", u32::from(mma)));
    if mma {
        opts.push(format!("-DRW_MMA_CH={}", mma_chunk(per)));
        opts.push(format!("-DRW_MMA_PAD={}", mma_pad()));
        opts.push(format!("-DRW_MMA_XF16={}", u32::from(mma_xf16(format, x))));
    }
    opts.push(format!("-DRW_MINB={}", ctas_per_sm()));
    opts.push(format!("-DNORM={}", u32::from(epilogue == Epilogue::Norm)));
    opts.push(format!("-DADD={}", u32::from(epilogue == Epilogue::Add)));
    opts.push(format!("-DSILU_X={}", u32::from(input == Input::SwiGlu)));
    opts.push(format!("-DRW_SSTREAM={}", u32::from(layout.streamed_scales)));
    if !mma && int4_subnormal(format) {
        opts.push("-DRW_SUBN=1".into());
    }
    if format == WoFormat::Nf4 {
        opts.push("-DNF4_PAIRS=1".into());
        if let Some(at) = layout.nf4_wide_at {
            opts.push("-DNF4_WIDE=1".into());
            opts.push(format!("-DRW_NF4_OFF={at}"));
        }
    }
    opts.extend(super::nvrtc::extra_options());
    opts
}

/// The GEMV on the CPU in f64 from the packed weights' values: W rmsnorm(x) (eps), W x, or y0 + W x; `x`
/// of K values (for [`Input::SwiGlu`], silu(gate) * up of the gate_up row in f64 first: [`swiglu`]).
pub fn reference(p: &PackedWeights, x: &[f32], y0: &[f32], epilogue: Epilogue, eps: f64) -> Vec<f64> {
    let (n, k) = (p.n, p.k);
    let w = p.dequantize();
    let inv = match epilogue {
        Epilogue::Norm => 1.0 / (x.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / k as f64 + eps).sqrt(),
        _ => 1.0,
    };
    (0..n)
        .map(|r| {
            let dot: f64 = w[r * k..(r + 1) * k].iter().zip(x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let base = if epilogue == Epilogue::Add { f64::from(y0[r]) } else { 0.0 };
            base + inv * dot
        })
        .collect()
}

/// silu(gate) * up of a gate_up row `[gate | up]` (2K values), in f64 rounded to f32: the reference's x for
/// [`Input::SwiGlu`].
pub fn swiglu(gate_up: &[f32]) -> Vec<f32> {
    let k = gate_up.len() / 2;
    gate_up[..k]
        .iter()
        .zip(&gate_up[k..2 * k])
        .map(|(g, u)| {
            let g = f64::from(*g);
            (g / (1.0 + (-g).exp()) * f64::from(*u)) as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::nvrtc::{early_dependent_loads, parse_ptxas};
    use super::*;

    /// On the GPU, small rings (3 slots of MXFP4 at K = 5120, 512 threads; INT4 at K = 3072 in 3 row groups, 320
    /// threads) are alone on their SM, as the big ones are (session 43: two a SM cost up to 40%).
    #[test]
    #[ignore = "needs an NVIDIA GPU (sm_90+)"]
    fn small_rings_are_alone_on_their_sm() {
        let gpu = crate::Gpu::open(0).expect("a GPU");
        if gpu.compute_capability.0 < 9 {
            eprintln!("SKIPPED: the ring GEMV needs sm_90");
            return;
        }
        for (f, n, k) in
            [(WoFormat::Mxfp4, 2048, 5120), (WoFormat::Int4G128, 8192, 3072), (WoFormat::Nvfp4, 14336, 4096)]
        {
            let ring =
                RingGemv::new(&gpu, (f, XDtype::F16), (1, n, k), Epilogue::Store, Input::X).expect("the ring builds");
            assert_eq!(ring.resident_per_sm().expect("occupancy"), 1, "{f:?} {n}x{k}: {} slots", ring.slots);
        }
    }

    /// A ring CTA asks for enough shared memory that no second one fits an SM: the H100's / H200's 228 KB a SM
    /// with 1 KB reserved a CTA, the A100's 164 KB.
    #[test]
    fn alone_bytes_leave_no_room_for_a_second_cta() {
        for (per_sm, reserved) in [(233_472, 1024), (167_936, 1024), (102_400, 0)] {
            let b = alone_bytes(per_sm, reserved);
            assert!(2 * (b + reserved) > per_sm, "{per_sm}: {b}");
            assert!(b + reserved <= per_sm, "{per_sm}: {b}");
            assert!(b % 128 == 0 && 2 * (b - 256 + reserved) <= per_sm, "{per_sm}: {b} is more than it needs");
        }
        assert_eq!(alone_bytes(233_472, 1024), 115_840);
    }

    /// The E2M1 factor of normalized x (wo_stream.cuh `e2m1_norm_up`, the ring's fused norm and the fused
    /// FFN's phase A), `2^(14 - (33 - clz(FD - 1)) / 2)`: x after the norm is
    /// at most sqrt(FD) in magnitude, so times the factor it must stay within f16 (at most 2^14, exact), and
    /// the factor must not exceed the decode's 2^14 (the output takes the rest, `E2M1_UP / up`).
    #[test]
    fn e2m1_norm_factor_keeps_x_in_f16_for_every_k() {
        for fd in (1024..=MAX_K as u32).step_by(1024) {
            let e = 14 - (33 - (fd - 1).leading_zeros() as i32) / 2;
            assert!((0..=14).contains(&e), "K = {fd}: 2^{e}");
            let largest = f64::from(fd).sqrt() * 2f64.powi(e);
            assert!(largest <= 16384.0, "K = {fd}: |x| up to {largest} in f16");
            assert!(largest > 4096.0, "K = {fd}: a factor of 2^{e} wastes range ({largest})");
        }
    }

    #[test]
    fn swiglu_reference_multiplies_silu_of_the_gate_by_the_up() {
        // [gate | up]: silu(0) = 0, silu(1) = 1 / (1 + e^-1), silu(-2) = -2 / (1 + e^2).
        let got = swiglu(&[0.0, 1.0, -2.0, 5.0, 3.0, 0.5]);
        let silu = |g: f64| g / (1.0 + (-g).exp());
        let want = [0.0, silu(1.0) * 3.0, silu(-2.0) * 0.5];
        assert_eq!(got.len(), 3);
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() <= 1e-7 * w.abs().max(1.0), "{got:?} vs {want:?}");
        }
    }

    /// The NVFP4 tensor-core row step (wo_ring.cu `RW_MMA`, FMT 7) multiplies each decoded E2M1 value (times 2^-14, as
    /// `e2m1_dev_pairs` gives it) by its block's E4M3 scale in f16 (`mul.rn.f16x2`) and sums the blocks in the same
    /// chains: that product must be exact in f16 for every code and every finite scale.
    #[test]
    fn nvfp4_block_scale_times_decoded_value_is_exact_in_f16() {
        use half::f16;
        use roofline_quant::minifloat::{E2M1, E4M3};
        let mut checked = 0;
        for code in 0..16 {
            let v = f64::from(E2M1.decode(code)) * 2f64.powi(-14);
            let p = f16::from_f64(v);
            assert_eq!(p.to_f64(), v, "E2M1 code {code}");
            for b in 0..=255u32 {
                let s = E4M3.decode(b);
                if !s.is_finite() || s.abs() > 448.0 {
                    continue;
                }
                let sh = f16::from_f32(s);
                assert_eq!(sh.to_f32(), s, "E4M3 byte {b:#x}");
                // f16 x f16 is exact in f32; rounding that to f16 is what mul.rn.f16x2 gives.
                let prod = f16::from_f32(p.to_f32() * sh.to_f32());
                assert_eq!(prod.to_f64(), v * f64::from(s), "E2M1 code {code} x E4M3 byte {b:#x}");
                checked += 1;
            }
        }
        assert!(checked >= 16 * 252, "{checked} products checked");
    }

    /// The MXFP4 tensor-core row step (wo_ring.cu `RW_MX_SHIFT`, `RW_MX_BIAS`) multiplies each decoded E2M1 value
    /// (times 2^-14) by the f16 whose exponent field is e - 104 clamped to 0..=30: exactly 2^(e - 127 + 8) in
    /// [`MXFP4_MMA_WINDOW`], where every product is exact in f16 (the epilogue's 2^6 takes the factors back); below
    /// it the smallest code's product is not. [`mxfp4_mma_window`] refuses weights with a nonzero block outside.
    #[test]
    fn mxfp4_scale_window_products_are_exact_in_f16() {
        use half::f16;
        use roofline_quant::minifloat::E2M1;
        let field = |e: u8| (i32::from(e) - (127 - 15 - 8)).clamp(0, 30) as u16;
        for e in 0..=255u8 {
            let s = f16::from_bits(field(e) << 10);
            assert!(s.is_finite(), "E8M0 {e}");
            if !MXFP4_MMA_WINDOW.contains(&e) {
                continue;
            }
            assert_eq!(s.to_f64(), 2f64.powi(i32::from(e) - 127 + 8), "E8M0 {e}");
            for code in 1..8u32 {
                let v = f64::from(E2M1.decode(code));
                let p = f16::from_f64(v * 2f64.powi(-14));
                // f16 x f16 is exact in f32; rounding that to f16 is what mul.rn.f16x2 gives.
                let prod = f16::from_f32(p.to_f32() * s.to_f32());
                assert_eq!(prod.to_f64() * 64.0, v * 2f64.powi(i32::from(e) - 127), "E2M1 {code} x E8M0 {e}");
            }
        }
        // Just below the window the smallest magnitude (0.5) falls under f16's smallest subnormal.
        let below =
            f16::from_f32(f16::from_f64(0.5 * 2f64.powi(-14)).to_f32() * f16::from_bits(field(109) << 10).to_f32());
        assert_ne!(below.to_f64() * 64.0, 0.5 * 2f64.powi(109 - 127));
        // Packed weights: blocks of the usual size pass; one nonzero block scaled 2^-20 is refused, a zero one not.
        let (n, k) = (16, 256);
        let w: Vec<f32> = crate::random_f32(n * k, 7).iter().map(|v| v / 16.0).collect();
        let p = pack::quantize_pack(WoFormat::Mxfp4, &w, n, k).unwrap();
        assert!(mxfp4_mma_window(&p).is_ok());
        let mut tiny = w.clone();
        tiny[3 * k + 64..3 * k + 96].iter_mut().for_each(|v| *v *= 1e-5);
        let e = mxfp4_mma_window(&pack::quantize_pack(WoFormat::Mxfp4, &tiny, n, k).unwrap()).unwrap_err();
        assert!(e.contains("row 3 block 2"), "{e}");
        let mut zero = w;
        zero[5 * k..5 * k + 32].iter_mut().for_each(|v| *v = 0.0);
        assert!(mxfp4_mma_window(&pack::quantize_pack(WoFormat::Mxfp4, &zero, n, k).unwrap()).is_ok());
    }

    /// The tensor-core row step's sums buffers (session 56): 4 row steps each where a CTA takes 8 to 42 row steps, 2
    /// elsewhere (a CTA of 4 steps keeps two buffers to alternate), and the build and its shared-memory layout agree.
    #[test]
    fn sums_buffers_take_four_row_steps_where_a_cta_takes_8_to_42() {
        if std::env::var_os("ROOFLINE_RING_MMA_CHUNK").is_some() {
            return;
        }
        for (per, chunk) in [(1, 2), (4, 2), (7, 2), (8, 4), (14, 4), (28, 4), (42, 4), (43, 2), (56, 2)] {
            assert_eq!(mma_chunk(per), chunk, "{per} row steps a CTA");
        }
        let (i4, ep) = (WoFormat::Int4G128, (Epilogue::Store, Input::X));
        let (narrow, wide) =
            (mma_layout(i4, (16, 4096), 4, false, 1).unwrap(), mma_layout(i4, (16, 4096), 14, false, 1).unwrap());
        assert!(
            options(90, (i4, XDtype::F16), (16, 4096), 14, wide, (1, 1, 2, true), ep).contains(&"-DRW_MMA_CH=4".into())
        );
        assert!(options(90, (i4, XDtype::F16), (16, 4096), 4, narrow, (1, 1, 2, true), ep)
            .contains(&"-DRW_MMA_CH=2".into()));
        // Both buffers of 4 steps at 16 rows and K = 4096: 64 KB beside the 14 steps' staged scales and the slots.
        let tables = table_bytes_per_row(i4, 4096) * 14 * STEP_ROWS + 2 * 16 * 16 * 4 * STEP_ROWS * 4 + 16;
        assert_eq!(wide.smem, wide.slots * (slot_bytes(i4, 4096, 1) + STEP_ROWS * mma_pad()) + tables);
    }

    /// BF16 x on the tensor-core row step (session 55): NF4, MXFP4 and NVFP4 convert it to f16 (`RW_MMA_XF16`), INT4
    /// multiplies it as bf16 unless `ROOFLINE_RING_MMA_XF16=1`; FP16 x is never converted, and only tensor-core
    /// builds are told.
    #[test]
    fn bf16_x_is_converted_to_f16_for_the_formats_decoded_to_f16() {
        let (bf16, f16) = (XDtype::Bf16, XDtype::F16);
        for f in [WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4] {
            assert!(mma_xf16(f, bf16) && !mma_xf16(f, f16), "{f:?}");
        }
        if std::env::var_os("ROOFLINE_RING_MMA_XF16").is_none() {
            assert!(!mma_xf16(WoFormat::Int4G128, bf16));
        }
        let ep = (Epilogue::Store, Input::X);
        let build = |f, m, mma| {
            let l = mma_layout(f, (m, 4096), 14, false, 1).unwrap();
            options(90, (f, bf16), (m, 4096), 14, l, (1, 1, 2, mma), ep)
        };
        assert!(build(WoFormat::Nf4, 16, true).contains(&"-DRW_MMA_XF16=1".to_string()));
        assert!(!build(WoFormat::Nf4, 1, false).iter().any(|o| o.starts_with("-DRW_MMA_XF16")));
    }

    /// INT4's CUDA-core row steps take the subnormal decode (session 60); its tensor-core row step and the other
    /// formats do not.
    #[test]
    fn int4_cuda_core_row_steps_take_the_subnormal_decode() {
        if std::env::var_os("ROOFLINE_RING_SUBN").is_some() {
            return;
        }
        let ep = (Epilogue::Store, Input::X);
        let subn = |f, m, mma| {
            let l = mma_layout(f, (m, 4096), 14, false, 1).unwrap();
            options(90, (f, XDtype::F16), (m, 4096), 14, l, (1, 1, 2, mma), ep).contains(&"-DRW_SUBN=1".to_string())
        };
        assert!(subn(WoFormat::Int4G128, 1, false) && subn(WoFormat::Int4G128, 2, false));
        assert!(!subn(WoFormat::Int4G128, 16, true));
        assert!(!subn(WoFormat::Nf4, 1, false) && !subn(WoFormat::Mxfp4, 1, false));
    }

    /// INT4's subnormal row step adds its f16 sums on the tensor cores (session 61, wo_stream.cuh `row_step_subn`): one
    /// `mma.sync` a row pair and 2 words, 8 a row step at one row of x, 16 at two; the other formats' CUDA-core row steps
    /// use none (NVFP4's version was slower, session 61 r3). Skipped without NVRTC or cuobjdump.
    #[test]
    fn int4_subnormal_row_step_sums_on_the_tensor_cores() {
        if let Err(e) = nvrtc_available() {
            eprintln!("SKIPPED int4_subnormal_row_step_sums_on_the_tensor_cores: {e}");
            return;
        }
        if std::env::var_os("ROOFLINE_RING_SUBN").is_some() || std::env::var_os("ROOFLINE_NVRTC_EXTRA").is_some() {
            return;
        }
        let hmma = |f, m| {
            let b = compile_ring(90, 132, 4800.0, (f, XDtype::F16), (m, 14336, 4096), (Epilogue::Store, Input::X))
                .unwrap_or_else(|e| panic!("{f:?} {m}: {e}"));
            assert!(!b.plan.mma, "{f:?} at {m} rows: the CUDA-core ring");
            super::super::nvrtc::disassemble(&b.cubin)
                .unwrap_or_else(|e| panic!("{f:?} {m}: {e}"))
                .map(|sass| sass.lines().filter(|l| l.contains("HMMA.16816.F32")).count())
        };
        let Some(one) = hmma(WoFormat::Int4G128, 1) else {
            eprintln!("SKIPPED int4_subnormal_row_step_sums_on_the_tensor_cores: no cuobjdump");
            return;
        };
        // ptxas may split the loop, so at least a row step's worth.
        assert!(one >= 8, "INT4 at 1 row: {one} HMMA");
        assert!(hmma(WoFormat::Int4G128, 2).is_some_and(|n| n >= 16));
        assert_eq!(hmma(WoFormat::Nvfp4, 1), Some(0));
    }

    /// The ring's experiment switches still build, without spills (session 62): `EXP_RING_TRACE` (the timeline the
    /// `ring_trace` example prints, from the CTAs' clocks: the globaltimer and %clock reads are in the SASS where
    /// cuobjdump runs) and `RW_EARLY` (the producer's copies before the scale tables'), for the 4-bit formats' CUDA-core
    /// ring at one row of x. Skipped without NVRTC.
    #[test]
    fn ring_probe_builds_compile() {
        if let Err(e) = nvrtc_available() {
            eprintln!("SKIPPED ring_probe_builds_compile: {e}");
            return;
        }
        if std::env::var_os("ROOFLINE_NVRTC_EXTRA").is_some() {
            return;
        }
        for f in [WoFormat::Int4G128, WoFormat::Nf4, WoFormat::Mxfp4, WoFormat::Nvfp4] {
            for defines in [["-DEXP_RING_TRACE=1"], ["-DRW_EARLY=1"]] {
                let store = (Epilogue::Store, Input::X);
                let b = compile_ring_with(90, (132, 4800.0), (f, XDtype::F16), (1, 14336, 4096), store, None, &defines)
                    .unwrap_or_else(|e| panic!("{f:?} {defines:?}: {e}"));
                assert!(!b.plan.mma, "{f:?}: the CUDA-core ring");
                let (_, spill, _) = parse_ptxas(&b.log);
                assert_eq!(spill, Some(0), "{f:?} {defines:?} spills: {}", b.log);
                if defines[0].contains("TRACE") {
                    if let Ok(Some(sass)) = super::super::nvrtc::disassemble(&b.cubin) {
                        assert!(sass.contains("GLOBALTIMER") && sass.contains("CLOCK"), "{f:?}: no timer reads");
                    }
                }
            }
        }
    }

    /// 9 to 16 rows of x on the tensor cores (session 51): INT4 g128 with FP16 x (BF16 x since session 53; NVFP4 with
    /// FP16 x too, MXFP4 and NF4 since session 54; the three with BF16 x converted to f16 since session 55) and any
    /// epilogue but SwiGLU on load, K up to 4096; the default on fast memory up to 128 row steps a CTA
    /// (`Variant::best_in_step_on` leaves it to model-bench, which knows which linear is down_proj).
    #[test]
    fn four_bit_takes_the_tensor_core_ring_from_2_rows_at_small_n() {
        use super::super::Variant;
        let (i4, f16, bf16) = (WoFormat::Int4G128, XDtype::F16, XDtype::Bf16);
        let store = (Epilogue::Store, Input::X);
        if std::env::var_os("ROOFLINE_RING_MMA").is_none() {
            assert!(!mma_plan(i4, 1, 4096));
        }
        // From 2 rows (session 57): at 2 where a CTA takes up to 7 row steps (NF4 28), from 3 always.
        assert!(mma_plan(i4, 2, 4096) && mma_plan(i4, 3, 4096) && mma_plan(i4, 8, 4096));
        assert!(
            plan_on(i4, 2, 6144, 4096, 132, 4900.0).unwrap().mma
                && !plan_on(i4, 2, 14336, 4096, 132, 4900.0).unwrap().mma
        );
        assert!(plan_on(WoFormat::Nf4, 2, 28672, 4096, 132, 4900.0).unwrap().mma);
        assert!(!plan_on(WoFormat::Nf4, 2, 57344, 4096, 132, 4900.0).unwrap().mma);
        assert!(plan_on(i4, 3, 28672, 4096, 132, 4900.0).unwrap().mma);
        assert!(mma_plan(i4, 9, 4096) && mma_plan(i4, 16, 1024) && !mma_plan(i4, 17, 4096));
        assert!(!mma_plan(WoFormat::Fp8E4M3, 16, 4096));
        // Past K = 4096 in 2 K splits (session 59), not in 4 (but with ROOFLINE_RING_MMA_SPLIT=1), nor INT4 at 8-15 rows
        // in splits of 4096 (their builds spill).
        assert_eq!(
            [4096, 5120, 8192, 14336, 16384, 11008, 28672].map(mma_splits),
            [Some(1), Some(2), Some(2), Some(4), Some(4), None, None]
        );
        assert!(mma_plan(i4, 16, 5120) && mma_plan(i4, 16, 8192) && mma_plan(i4, 9, 5120) && mma_plan(i4, 7, 8192));
        assert!(!mma_plan(i4, 2, 8192) && !mma_plan(WoFormat::Nf4, 2, 14336));
        assert!(!mma_plan(i4, 16, 14336) && !mma_plan(i4, 8, 8192) && !mma_plan(i4, 15, 8192));
        assert!(mma_plan(WoFormat::Nf4, 16, 14336) && !mma_plan(WoFormat::Nvfp4, 16, 14336));
        assert!(!mma_plan(WoFormat::Nf4, 12, 16384) && mma_plan(WoFormat::Nf4, 12, 8192));
        assert!(mma_plan(WoFormat::Nvfp4, 12, 8192) && mma_plan(WoFormat::Nf4, 9, 8192));
        // A row block of 2 K splits a cluster: 66 of them on 132 SMs, each CTA half of K.
        let p = plan_on(i4, 16, 28672, 8192, 132, 4900.0).unwrap();
        assert!(p.mma && (p.splits, p.ctas, p.per, p.fd(8192)) == (2, 132, 55, 4096), "{p:?}");
        assert_eq!((split_blocks(132, 2), split_blocks(132, 4)), (66, 33));
        // The clusters the device holds at once bound the row blocks (`RingGemv::build`).
        let p = plan_with(i4, (16, 28672, 8192), (132, 4900.0), true, Some(60)).unwrap();
        assert!((p.splits, p.ctas, p.per) == (2, 120, 60), "{p:?}");
        // The default's K splits (session 59 r3, r4): from 9 rows up to 56 steps a CTA, INT4 at 16 rows with FP16 x.
        let nv = WoFormat::Nvfp4;
        let split = |(f, x), (m, n, k)| mma_auto((f, x), (m, n, k), 132, 4900.0);
        assert!(split((WoFormat::Nf4, f16), (12, 8192, 8192)) && split((nv, bf16), (16, 8192, 8192)));
        assert!(
            split((i4, f16), (16, 28672, 8192))
                && split((i4, f16), (16, 5120, 5120))
                && split((nv, f16), (9, 8192, 8192))
        );
        assert!(
            !split((i4, f16), (16, 57344, 8192))
                && !split((i4, f16), (4, 8192, 8192))
                && !split((nv, f16), (8, 8192, 8192))
        );
        assert!(
            !split((i4, bf16), (16, 8192, 8192))
                && !split((i4, f16), (9, 13824, 5120))
                && !split((nv, f16), (16, 4096, 14336))
        );
        assert!(split((WoFormat::Nf4, f16), (16, 4096, 14336)) && split((WoFormat::Nf4, bf16), (9, 4096, 14336)));
        // NF4 (session 54) with FP16 x, its wide pair table after the ring and the tables; with BF16 x converted to
        // f16 (session 55).
        let nf = WoFormat::Nf4;
        assert!(mma_takes((nf, f16), 16, 4096, store) && mma_takes((nf, bf16), 16, 4096, store));
        let l = plan_on(nf, 16, 14336, 4096, 132, 4900.0).unwrap().layout;
        assert!(l.nf4_wide_at.is_some_and(|at| at % 128 == 0 && at + NF4_WIDE_TABLE_BYTES == l.smem));
        assert!(l.smem <= NF4_SMEM_BUDGET && l.slots >= 2);
        // MXFP4 (session 54) with FP16 x, as NVFP4, and BF16 x (session 55).
        let mx = WoFormat::Mxfp4;
        assert!(
            mma_plan(mx, 12, 4096) && mma_takes((mx, f16), 12, 4096, store) && mma_takes((mx, bf16), 12, 4096, store)
        );
        assert!(mma_auto((mx, f16), (16, 14336, 4096), 132, 4900.0));
        // NVFP4 (session 53) with FP16 x, and BF16 x (session 55).
        let nv = WoFormat::Nvfp4;
        assert!(
            mma_plan(nv, 16, 4096) && mma_takes((nv, f16), 16, 4096, store) && mma_takes((nv, bf16), 16, 4096, store)
        );
        assert!(plan_on(nv, 16, 14336, 4096, 132, 4900.0).unwrap().mma);
        // Where its M = 1 build streams the scales (since session 54), the tensor-core row step reads them streamed.
        let p = plan_on(nv, 16, 28672, 4096, 132, 4900.0).unwrap();
        assert!(streams_scales(nv, 28672, 4096, 132, 4900.0) && p.mma && p.layout.streamed_scales);
        assert!(!plan_on(nv, 16, 14336, 4096, 132, 4900.0).unwrap().layout.streamed_scales);
        assert!(
            mma_auto((nv, f16), (16, 14336, 4096), 132, 4900.0) && mma_auto((nv, bf16), (16, 14336, 4096), 132, 4900.0)
        );
        let h200 = (132, 90, 4900.0);
        assert_eq!(Variant::best_on(nv, f16, 12, 14336, 4096, h200), Variant::XReg);
        assert_eq!(Variant::best_on(nv, bf16, 12, 14336, 4096, h200), Variant::XReg);
        assert_eq!(Variant::best_on(nv, f16, 16, 28672, 4096, h200), Variant::XReg);
        assert!(mma_takes((i4, f16), 16, 4096, store) && mma_takes((i4, bf16), 16, 4096, store));
        assert!(mma_takes((i4, f16), 16, 4096, (Epilogue::Add, Input::X)));
        assert!(mma_takes((i4, f16), 16, 4096, (Epilogue::Norm, Input::X)));
        assert!(!mma_takes((i4, f16), 16, 4096, (Epilogue::Add, Input::SwiGlu)));
        // One row group of 16 warps, the producer and the epilogue warp; the row sums in two buffers of 4 steps (14
        // steps a CTA, `mma_chunk`), which leave 7 slots (9 with buffers of 2).
        let p = plan_on(i4, 16, 14336, 4096, 132, 4900.0).unwrap();
        assert!(p.mma && (p.groups, p.parts, p.per) == (1, 1, 14) && cta_threads(i4, 4096, 1, true) == 576);
        if std::env::var_os("ROOFLINE_RING_MMA_CHUNK").is_none() {
            assert_eq!(p.layout.slots, 7);
        }
        // The default: fast memory, either x, up to 128 steps a CTA (28672 rows: 28 on 132 SMs; the LM head's 122 since
        // session 58).
        let auto = |m, n, k, peak| mma_auto((i4, f16), (m, n, k), 132, peak);
        assert!(auto(16, 4096, 4096, 4900.0) && auto(9, 2048, 4096, 4900.0) && auto(12, 14336, 4096, 4900.0));
        assert!(auto(16, 28672, 4096, 4900.0) && auto(16, 57344, 4096, 4900.0) && auto(16, 128256, 4096, 4900.0));
        // From 9 rows up to 128 steps (session 58: the LM head's 122), not past them.
        assert!(auto(9, 128256, 4096, 4900.0) && !auto(16, 8 * 132 * 129, 4096, 4900.0));
        assert!(!auto(16, 4096, 4096, 3352.0) && auto(8, 4096, 4096, 4900.0) && auto(3, 14336, 4096, 4900.0));
        // At 2-8 rows up to 24 steps a CTA of K = 4096 (INT4, MXFP4, NVFP4; session 58), NF4 up to 128.
        assert!(!auto(8, 28672, 4096, 4900.0) && mma_auto((WoFormat::Nf4, f16), (8, 28672, 4096), 132, 4900.0));
        assert!(auto(8, 8 * 132 * 24, 4096, 4900.0) && !auto(8, 8 * 132 * 25, 4096, 4900.0));
        assert!(auto(4, 8 * 132 * 16, 4096, 4900.0) && auto(8, 21120, 4096, 4900.0));
        // MXFP4 and NVFP4 with BF16 x up to 128 at K = 4096 (session 58 r4, r5); INT4 with BF16 x, and K = 2048, keep
        // theirs.
        for f in [WoFormat::Mxfp4, WoFormat::Nvfp4] {
            assert!(
                mma_auto((f, bf16), (8, 59136, 4096), 132, 4900.0)
                    && !mma_auto((f, f16), (8, 28672, 4096), 132, 4900.0)
            );
            assert!(!mma_auto((f, bf16), (8, 8 * 132 * 11, 2048), 132, 4900.0));
        }
        assert!(
            !mma_auto((i4, bf16), (8, 28672, 4096), 132, 4900.0) && mma_auto((i4, bf16), (8, 25344, 4096), 132, 4900.0)
        );
        assert!(auto(2, 6144, 4096, 4900.0) && !auto(2, 14336, 4096, 4900.0));
        // Fewer steps at a shorter K (session 58 r9): 10 at K = 2048, 15 at 3072.
        assert!(auto(8, 8 * 132 * 10, 2048, 4900.0) && !auto(8, 8 * 132 * 11, 2048, 4900.0));
        assert!(auto(8, 8 * 132 * 15, 3072, 4900.0) && !auto(8, 8 * 132 * 16, 3072, 4900.0));
        assert!(mma_auto((i4, bf16), (16, 4096, 4096), 132, 4900.0));
        assert!(mma_auto((i4, bf16), (16, 128256, 4096), 132, 4900.0));
        assert!(auto_rows((i4, f16), (16, 4096, 4096), 132, 4900.0));
        assert_eq!(Variant::best_on(i4, f16, 16, 4096, 4096, h200), Variant::XReg);
        assert_ne!(Variant::best_in_step_on(i4, f16, 16, 4096, 4096, h200), Variant::XReg);
        assert_eq!(Variant::best_on(i4, f16, 16, 14336, 4096, h200), Variant::XReg);
        assert_eq!(Variant::best_on(i4, f16, 16, 28672, 4096, h200), Variant::XReg);
        assert_eq!(Variant::best_on(i4, f16, 16, 128256, 4096, h200), Variant::XReg);
        assert_ne!(Variant::best_on(i4, f16, 8, 128256, 4096, h200), Variant::XReg);
        // Refused with a message past what it takes.
        let fp8 = plan_on(WoFormat::Fp8E4M3, 16, 4096, 4096, 132, 4900.0).unwrap_err();
        assert!(fp8.contains("1 to 3 rows of x") && fp8.contains("4-bit weights up to 16"), "{fp8}");
    }

    #[test]
    fn llama_8b_qkv_and_o_fit_an_h100() {
        // o_proj 4096 x 4096: 512 steps, 4 per CTA, 128 CTAs; qkv 6144 x 4096: 768 steps, 6 per CTA.
        assert_eq!(grid(4096, 132), (128, 4));
        assert_eq!(grid(6144, 132), (128, 6));
        // o_proj: all 4 steps in the ring; 1 x 14336 x 4096: 14 steps, 10 slots fit beside the tables.
        let staged = |slots, smem| Some(Layout { slots, smem, streamed_scales: false, nf4_wide_at: None });
        assert_eq!(
            layout((WoFormat::Int4G128, 1), 4096, 4, 2, 1, false),
            staged(4, 4 * 16384 + 32 * 32 * 5 / 2 + 4 * 32 * 4)
        );
        let Layout { slots, smem, streamed_scales, .. } =
            layout((WoFormat::Int4G128, 1), 4096, 14, 2, 1, false).unwrap();
        assert_eq!(slots, 10);
        assert!(smem <= SMEM_BUDGET && slots % 2 == 0 && !streamed_scales);
        // NF4's ring and tables beside its 64 KB pair table within the H100's 227 KB per CTA; the table after
        // them, aligned, within the CTA's dynamic shared memory.
        let Layout { slots, smem, nf4_wide_at, .. } = layout((WoFormat::Nf4, 1), 4096, 14, 2, 1, false).unwrap();
        assert_eq!(slots, 8);
        assert!(smem <= 227 * 1024 - 1024);
        let off = nf4_wide_at.unwrap();
        assert!(off % 128 == 0 && off >= slots * 16384 + tables_bytes(WoFormat::Nf4, 4096, 112));
        assert!(off + NF4_WIDE_TABLE_BYTES <= smem);
        assert_eq!(layout((WoFormat::Nf4, 1), 4096, 14, 3, 1, false).map(|l| l.slots), Some(9));
        assert!(unsupported(WoFormat::Int4G128, 1, 4096, 4096, 132).is_none());
        assert!(unsupported(WoFormat::Int4G128, 1, 14336, 4096, 132).is_none());
        // The LM head's 976 rows per CTA: their tables (78 KB) still leave a ring.
        assert!(unsupported(WoFormat::Int4G128, 1, 128256, 4096, 132).is_none());
        // Row sums too large for any ring (7944 rows a CTA); other formats, batches or shapes.
        assert!(unsupported(WoFormat::Int4G128, 1, 1 << 20, 8192, 132).unwrap().contains("no room"));
        assert!(unsupported(WoFormat::Bf16, 1, 4096, 4096, 132).is_none());
        assert!(unsupported(WoFormat::Int4G128, 2, 4096, 4096, 132).is_none());
        assert!(unsupported(WoFormat::Int4G128, MAX_M, 14336, 4096, 132).is_none());
        assert!(unsupported(WoFormat::Int4G128, MAX_M + 1, 4096, 14336, 132).unwrap().contains("rows of x"));
        assert!(unsupported(WoFormat::Int4G128, 0, 4096, 4096, 132).unwrap().contains("rows of x"));
        // Two rows of x need more registers than a CTA of 29 warps leaves (Llama-3-70B's down_proj: 64 a thread)
        // or of 25 (K = 8192 in 3 row groups); FP8's fit at 4096 x 4096, not its three at 4096 x 14336.
        for (n, k) in [(8192, 28672), (1024, 12288)] {
            assert!(unsupported(WoFormat::Int4G128, 2, n, k, 132).unwrap().contains("registers"), "{n}x{k}");
        }
        assert!(unsupported(WoFormat::Fp8E4M3, 2, 4096, 4096, 132).is_none());
        assert!(unsupported(WoFormat::Fp8E4M3, 3, 4096, 14336, 132).unwrap().contains("registers"));
        assert_eq!(
            (register_room(416), register_room(928), register_room(288), register_room(32)),
            (128, 64, 168, 255)
        );
        // MXFP4's LM head at K = 4096: staged tables (below fast memory) leave two rows of x no ring; on fast memory
        // its scales stream (the M = 1 build's choice) and they do.
        assert!(unsupported(WoFormat::Mxfp4, 2, 128256, 4096, 132).unwrap().contains("no room"));
        assert!(unsupported_on(WoFormat::Mxfp4, (2, 128256, 4096), 132, 4917.0).is_none());
        assert!(unsupported(WoFormat::Int4G128, 1, 4096, 4000, 132).unwrap().contains("1024"));
        assert!(unsupported(WoFormat::Int4G128, 1, 4092, 4096, 132).unwrap().contains("multiple of 8"));
        // The engine's default: large N only.
        let i4 = WoFormat::Int4G128;
        assert!(auto(i4, 14336, 4096, 132) && auto(i4, 128256, 4096, 132) && auto(i4, 28672, 4096, 132));
        assert!(!auto(i4, 4096, 4096, 132) && !auto(i4, 6144, 4096, 132));
        // Long K (one row group, 2 K parts): down_proj's 4 steps a CTA and Llama-3-70B's K = 8192; not with
        // fewer steps a CTA, an odd count of K slices or K under 8192.
        assert!(long_k(4096, 14336, 132) && long_k(8192, 8192, 132) && long_k(28672, 8192, 132));
        assert!(!long_k(2048, 14336, 132) && !long_k(4096, 9216, 132) && !long_k(14336, 4096, 132));
        // The most parts of 4096-7168 values: 2 at K = 8192, 10240 and 14336, 3 at 12288, 4 at 16384, 7 at
        // Llama-3-70B's down_proj (28672: 7 x 4096, not 4 x 7168); none where the slices split only into parts
        // under 4096 or over 7168 (9216: 3 x 3072; 11264: 11 x 1024; 22528: 2 x 11264 or 11 x 2048).
        let ks = [8192, 10240, 14336, 12288, 16384, 24576, 28672, 9216, 11264, 22528];
        let parts: Vec<_> = ks.map(long_k_parts).to_vec();
        assert_eq!(parts, [Some(2), Some(2), Some(2), Some(3), Some(4), Some(6), Some(7), None, None, None]);
        assert!(long_k(8192, 28672, 132) && auto(i4, 8192, 28672, 132) && k_parts(i4, 8192, 28672, 132) == 7);
        assert!(unsupported(i4, 1, 8192, 32768, 132).unwrap().contains("31744"));
        // NF4's wide pair table where a ring fits beside it with the staged scales; at K = 28672 (64 rows of
        // 896 bytes of scales a CTA) only the narrow one leaves room: in its 7 K parts 8 slots of a seventh of
        // a step. Streamed with the weights (1024 bytes a slot) the scales leave as many beside the wide table:
        // staged, nothing to gain. In 4 K parts streaming gains a slot (5 to 4; any count in one row group).
        let nf4 = WoFormat::Nf4;
        let wide = |k, per, parts| layout_for((nf4, 1), k, per, 1, parts, false).and_then(|l| l.nf4_wide_at).is_some();
        assert!(wide(14336, 4, 2) && wide(8192, 55, 2) && !wide(28672, 8, 7) && !wide(28672, 8, 4));
        let narrow = layout_for((nf4, 1), 28672, 8, 1, 7, false).unwrap();
        assert!(!narrow.streamed_scales && narrow.slots == 8 && narrow.nf4_wide_at.is_none());
        let l = layout_for((nf4, 1), 28672, 8, 1, 7, true).unwrap();
        assert!(l.streamed_scales && l.slots == 8 && l.nf4_wide_at.is_some());
        assert!(layout((nf4, 1), 28672, 8, 1, 7, false) == Some(narrow) && auto(nf4, 8192, 28672, 132));
        let four = layout((nf4, 1), 28672, 8, 1, 4, false).unwrap();
        assert!(
            four.streamed_scales && four.slots == 5 && layout_for((nf4, 1), 28672, 8, 1, 4, false).unwrap().slots == 4
        );
        assert_eq!(slot_scale_bytes(nf4, 28672, 7), 28672 / 64 * 8 * 2 / 7);
        assert!(!options(
            90,
            (nf4, XDtype::F16),
            (1, 28672),
            8,
            narrow,
            (7, 1, 0, false),
            (Epilogue::Add, Input::SwiGlu)
        )
        .iter()
        .any(|o| o.starts_with("-DNF4_WIDE") || o.starts_with("-DRW_NF4_OFF") || o == "-DRW_SSTREAM=1"));
        assert!(options(90, (nf4, XDtype::F16), (1, 28672), 8, l, (7, 1, 0, false), (Epilogue::Add, Input::SwiGlu))
            .contains(&"-DRW_SSTREAM=1".into()));
        // NVFP4's 1792 bytes of scales a row there leave no ring staged; streamed 10 slots.
        assert!(layout_for((WoFormat::Nvfp4, 1), 28672, 8, 1, 7, false).is_none());
        assert_eq!(
            layout((WoFormat::Nvfp4, 1), 28672, 8, 1, 7, false).map(|l| (l.slots, l.streamed_scales)),
            Some((10, true))
        );
        assert!(unsupported(WoFormat::Nvfp4, 1, 8192, 28672, 132).is_none() && auto(WoFormat::Nvfp4, 8192, 28672, 132));
        assert!(auto(i4, 4096, 14336, 132) && auto(i4, 4096, 8192, 132) && !auto(i4, 2048, 14336, 132));
        assert_eq!((row_groups(i4, 4096, 14336, 132), k_parts(i4, 4096, 14336, 132)), (1, 2));
        assert_eq!((row_groups(i4, 2048, 14336, 132), k_parts(i4, 2048, 14336, 132)), (2, 1));
        // 4 steps of 57 KB a CTA: 6 slots of half a step (172 KB) beside the tables, in whole steps 2.
        assert_eq!(layout((i4, 1), 14336, 4, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
        assert_eq!(layout((i4, 1), 14336, 4, 2, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((2, false)));
        // NVFP4's scale tables of 440 rows a CTA leave no ring at 57344 x 8192: the scales streamed.
        let nv = WoFormat::Nvfp4;
        assert!(layout_for((nv, 1), 8192, 55, 1, 2, false).is_none() && auto(nv, 57344, 8192, 132));
        assert_eq!(layout((nv, 1), 8192, 55, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((10, true)));
        assert!(unsupported(WoFormat::Mxfp4, 1, 14336, 4096, 132).is_none());
        let mx = WoFormat::Mxfp4;
        assert!(auto(mx, 14336, 4096, 132) && auto(mx, 28672, 4096, 132));
        assert!(auto(WoFormat::Nvfp4, 14336, 4096, 132) && auto(WoFormat::Nf4, 14336, 4096, 132));
        assert!(!layout((mx, 1), 4096, 14, 3, 1, false).unwrap().streamed_scales);
        // The LM heads at K = 4096 (whole row steps): MXFP4's staged tables leave 3 slots (NF4's beside its
        // narrow pair table 2) and stay staged, streamed they would leave 9 (slower than the x-in-registers
        // kernel either way on the H100); not the default there. NVFP4's leave no ring: streamed, 9 slots, the default.
        assert_eq!(layout_for((mx, 1), 4096, 122, 3, 1, true).map(|l| l.slots), Some(9));
        assert_eq!(layout((mx, 1), 4096, 122, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((3, false)));
        assert_eq!(layout((i4, 1), 4096, 122, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
        assert_eq!(layout((nf4, 1), 4096, 122, 2, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((2, false)));
        assert!(!auto(mx, 128256, 4096, 132) && auto(WoFormat::Nf4, 28672, 4096, 132) && !auto(nf4, 128256, 4096, 132));
        assert!(layout_for((nv, 1), 4096, 122, 3, 1, false).is_none());
        assert_eq!(layout((nv, 1), 4096, 122, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((9, true)));
        assert!(auto(nv, 128256, 4096, 132) && streams_scales(nv, 128256, 4096, 132, 0.0));
        assert!(!streams_scales(mx, 128256, 4096, 132, 0.0) && !streams_scales(i4, 14336, 4096, 132, 0.0));
        // Long K in K parts: MXFP4's 4 staged slots at 57344 x 8192 (two row steps) stay; NF4's wide table
        // leaves 2 (one step): streamed, 8. At K = 8192 the LM heads' tables leave no ring: streamed.
        assert_eq!(layout((mx, 1), 8192, 55, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((4, false)));
        assert_eq!(layout_for((nf4, 1), 8192, 55, 1, 2, false).map(|l| l.slots), Some(2));
        assert_eq!(layout((nf4, 1), 8192, 55, 1, 2, false).map(|l| (l.slots, l.streamed_scales)), Some((8, true)));
        for f in [i4, mx, nv, nf4] {
            assert!(
                layout((f, 1), 8192, 122, 1, 2, false).is_some_and(|l| l.streamed_scales) && auto(f, 128256, 8192, 132)
            );
        }
        // On fast memory (the H200) NF4, MXFP4 and NVFP4 also stream where staged tables leave fewer than 3 slots a
        // consumer class: the LM heads at K = 4096 (MXFP4 9 slots, NF4 8), which then take the ring; NVFP4 at 28672
        // x 4096 (6 -> 9) and, in 2 K parts, 28672 x 8192 (5 -> 10); MXFP4 at 57344 x 8192 (4 -> 10). INT4 (two
        // copies a slot) stays staged at 2 or more a class, and 3 or more a class stay staged (MXFP4 28672 x 8192, 8
        // slots).
        let (h200, h100) = (4917.0, 3352.0);
        assert_eq!(layout((mx, 1), 4096, 122, 3, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((9, true)));
        assert_eq!(layout((nf4, 1), 4096, 122, 2, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((8, true)));
        assert_eq!(layout((i4, 1), 4096, 122, 3, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
        assert_eq!(layout((nv, 1), 4096, 28, 3, 1, true).map(|l| (l.slots, l.streamed_scales)), Some((9, true)));
        assert_eq!(layout((nv, 1), 4096, 28, 3, 1, false).map(|l| (l.slots, l.streamed_scales)), Some((6, false)));
        assert_eq!(layout((nv, 1), 8192, 28, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((10, true)));
        assert_eq!(layout((mx, 1), 8192, 55, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((10, true)));
        assert_eq!(layout((mx, 1), 8192, 28, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((8, false)));
        assert_eq!(layout((i4, 1), 8192, 55, 1, 2, true).map(|l| (l.slots, l.streamed_scales)), Some((7, false)));
        for f in [mx, nf4] {
            assert!(auto_on(f, 128256, 4096, 132, h200) && streams_scales(f, 128256, 4096, 132, h200));
            assert!(!auto_on(f, 128256, 4096, 132, h100) && !streams_scales(f, 128256, 4096, 132, h100));
        }
        assert!(!streams_scales(i4, 128256, 4096, 132, h200) && !streams_scales(mx, 14336, 4096, 132, h200));
        // Session 41: where staged tables leave one slot a class (INT4 too: under 2 a class) streamed ones with two
        // or more a class win, and the ring, at two slots a class, beats the x-in-registers kernel: INT4's LM heads
        // at K = 4096 past 128256 rows and at K = 5120, K = 6144 shapes of every format.
        for (f, n, k) in
            [(i4, 152064, 5120), (i4, 151936, 4096), (i4, 57344, 6144), (nv, 32000, 5120), (mx, 57344, 6144)]
        {
            assert!(auto_on(f, n, k, 132, h200) && streams_scales(f, n, k, 132, h200), "{f:?} {n}x{k}");
            assert!(!auto_on(f, n, k, 132, h100) && !streams_scales(f, n, k, 132, h100), "{f:?} {n}x{k}");
        }
        assert!(auto_on(nf4, 49152, 6144, 132, h200) && !auto_on(nf4, 49152, 6144, 132, h100));
        assert!(auto_on(nv, 8192, 14336, 132, h200) && streams_scales(nv, 8192, 14336, 132, h200));
        // Session 42: on fast memory the ring at K = 6144-8192 with any grid, at K = 5120 from 5 row steps a CTA
        // (INT4: any), and INT4 at K = 4096 where its grid fills the GPU; the x-in-registers kernel below that,
        // and on the H100.
        for (f, n, k) in [(i4, 5120, 5120), (mx, 5120, 5120), (nv, 5120, 5120), (i4, 6144, 5120), (mx, 2048, 8192)]
            .into_iter()
            .chain([(nv, 2048, 8192), (i4, 1024, 8192), (i4, 1024, 4096), (i4, 4096, 4096), (i4, 6144, 4096)])
            .chain([(mx, 512, 8192), (nv, 1536, 7168), (i4, 1536, 7168), (mx, 1024, 6144), (i4, 768, 5120)])
            .chain([(mx, 6144, 5120), (i4, 2048, 5120)])
        {
            assert!(auto_on(f, n, k, 132, h200) && !auto_on(f, n, k, 132, h100), "{f:?} {n}x{k}");
        }
        // Session 43: with the ring alone on its SM, every 4-bit format at K = 4096-5120 where the grid fills the GPU.
        for (f, n, k) in [(mx, 3072, 4096), (nv, 3072, 4096), (mx, 1024, 4096), (nv, 4096, 4096), (mx, 2048, 4096)]
            .into_iter()
            .chain([(nv, 6144, 4096), (mx, 3072, 5120), (nv, 2048, 5120), (mx, 1024, 5120)])
        {
            assert!(auto_on(f, n, k, 132, h200) && !auto_on(f, n, k, 132, h100), "{f:?} {n}x{k}");
        }
        for (f, n, k) in [(i4, 512, 4096), (mx, 4096, 3072), (i4, 3072, 3072), (i4, 2048, 2048), (nv, 768, 5120)]
            .into_iter()
            .chain([(mx, 512, 5120), (mx, 512, 4096)])
        {
            assert!(!auto_on(f, n, k, 132, h200), "{f:?} {n}x{k}");
        }
        assert!(
            fills_the_gpu(128, 132) && !fills_the_gpu(64, 132) && fills_the_gpu(116, 132) && !fills_the_gpu(115, 132)
        );
        // Inside the decode step: every 4-bit GEMV the ring runs on fast memory, FP8 / INT8 never, the H100 as `auto`.
        for f in [i4, mx, nv, nf4] {
            assert_eq!((in_step(f, h200), in_step(f, h100)), (Some(true), None), "{f:?}");
        }
        assert_eq!((in_step(WoFormat::Fp8E4M3, h200), in_step(WoFormat::Int8, h100)), (Some(false), Some(false)));
        assert_eq!((in_step(WoFormat::Bf16, h200), in_step(WoFormat::Bf16, h100)), (Some(true), None));
        // NF4 at small N too, where the x-in-registers kernel would decode in FP32 (not where it takes its
        // f16x2 path: one CTA over K = 14336).
        let nf4 = WoFormat::Nf4;
        assert!(auto(nf4, 4096, 4096, 132) && auto(nf4, 6144, 4096, 132) && auto(nf4, 1024, 4096, 132));
        assert!(!auto(nf4, 2048, 14336, 132) && nf4_xreg_in_f16x2(2048, 14336, 132));
        assert!(!nf4_xreg_in_f16x2(4096, 4096, 132));
        // A CTA stays within 1024 threads: K = 16384 takes one row group of 16 warps.
        assert_eq!(
            (row_groups(i4, 14336, 4096, 132), row_groups(i4, 2048, 14336, 132), row_groups(i4, 1024, 16384, 132)),
            (3, 2, 1)
        );
        assert_eq!((row_groups(WoFormat::Nf4, 14336, 4096, 132), row_groups(WoFormat::Nf4, 1024, 16384, 132)), (2, 1));
        for (n, sms) in [(4096usize, 132u32), (6144, 132), (1000, 7), (8, 132), (2056, 100)] {
            let (ctas, per) = grid(n, sms);
            let steps = n / 8;
            assert!(ctas <= sms && ctas as usize * per >= steps && (ctas as usize - 1) * per < steps);
        }
    }

    #[test]
    fn ring_slots_fill_the_room_up_to_the_units() {
        // Llama-3-70B's down_proj in 4 K parts, 1 group: room for 5 or 6 slots of 32 units; multiples of 4: 4.
        assert_eq!((ring_slots(5, 32, 4, true), ring_slots(6, 32, 4, true)), (5, 6));
        assert_eq!((ring_slots(5, 32, 4, false), ring_slots(7, 32, 4, false)), (4, 4));
        // No more than the units, at least the classes (a CTA of fewer steps than groups).
        assert_eq!((ring_slots(12, 7, 2, true), ring_slots(12, 7, 2, false)), (7, 8));
        assert_eq!((ring_slots(12, 1, 3, true), ring_slots(12, 1, 3, false)), (3, 3));
        // Too little room: under the classes, which `layout_with` refuses.
        assert_eq!((ring_slots(3, 32, 4, true), ring_slots(3, 32, 4, false)), (3, 0));
        // By default any count in one row group only (unless ROOFLINE_RING_ANY_SLOTS says otherwise).
        if std::env::var_os("ROOFLINE_RING_ANY_SLOTS").is_none() {
            assert!(any_slot_count(1) && !any_slot_count(2) && !any_slot_count(3));
        }
    }

    /// Two units in flight on fast memory for copies of 3.5 KB and more where a CTA's units fill its ring at most
    /// four times; else the ring's depth.
    #[test]
    fn fp16_kernel_scale_guards_f16_range_only_for_large_weights() {
        use crate::weight_only::quantize_pack;
        let (n, k) = (16, 1024);
        let w = |top: f32| -> Vec<f32> { (0..n * k).map(|i| top * ((i % 97) as f32 / 96.0 * 2.0 - 1.0)).collect() };
        // Weights of the usual size: no scaling (4 x 0.5 x 32 is far below 32768).
        assert_eq!(kernel_scale(&quantize_pack(WoFormat::Fp16, &w(0.5), n, k).unwrap()), 1.0);
        // Up to 3e4: 4 x 3e4 x 32 / 2^t <= 32768 first at t = 7.
        assert_eq!(kernel_scale(&quantize_pack(WoFormat::Fp16, &w(3e4), n, k).unwrap()), 128.0);
        // Exactly at the bound (256 x 32 / 8192 = 1): none.
        assert_eq!(kernel_scale(&quantize_pack(WoFormat::Fp16, &w(256.0), n, k).unwrap()), 1.0);
        // Other formats: their tensor scale (NVFP4's), else 1.
        let nv = quantize_pack(WoFormat::Nvfp4, &w(3e4), n, k).unwrap();
        assert_eq!(kernel_scale(&nv), nv.global_scale);
        assert_eq!(kernel_scale(&quantize_pack(WoFormat::Int4G128, &w(3e4), n, k).unwrap()), 1.0);
    }

    #[test]
    fn fp16_rows_stream_in_k_parts_of_at_most_4_kb_in_one_row_group() {
        let f = WoFormat::Fp16;
        assert!(takes(f));
        // A lane's chunk is 32 bytes: 512 values a K slice, as 8-bit weights; K up to 15360 (30 slices).
        assert_eq!((slice_values(f), slices(f, 4096), slices(f, 8192), max_k(f)), (512, 8, 16, 15360));
        // K parts: the fewest whose rows' copies are at most 4 KB.
        let parts: Vec<_> = [1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 14336].map(fp16_parts).to_vec();
        assert_eq!(parts, [1, 1, 2, 2, 5, 3, 7, 4, 7]);
        // 1x14336x4096: 14 steps a CTA of 64 KB each, in 2 K parts of 32 KB (8 copies of 4 KB); one row group of
        // 8 warps (two classes), 6 slots beside the row sums.
        let p = plan(f, 1, 14336, 4096, 132).unwrap();
        assert_eq!((p.ctas, p.per, p.groups, p.parts, p.layout.slots), (128, 14, 1, 2, 6));
        assert_eq!(p.layout.smem, 6 * 32768 + 8 * 112 * 4);
        assert_eq!((copy_bytes(f, 4096, 2), slot_bytes(f, 4096, 2)), (4096, 32768));
        // K = 8192: 4 parts, 6 slots (a row step and a half). Down_proj's K = 14336: a row step of 224 KB, in 7 parts
        // of 32 KB, 6 slots, fewer than the 7 consumer classes (`least_slots`: 2 for 16-bit weights); K = 15360 in
        // 10 parts of 24 KB, 8 slots; K = 16384 (32 slices) is not the ring's.
        let p = plan(f, 1, 8192, 8192, 132).unwrap();
        assert_eq!((p.groups, p.parts, p.layout.slots), (1, 4, 6));
        let p = plan(f, 1, 4096, 14336, 132).unwrap();
        assert_eq!((p.ctas, p.per, p.groups, p.parts, p.layout.slots), (128, 4, 1, 7, 6));
        let p = plan(f, 1, 4096, 15360, 132).unwrap();
        assert_eq!((p.groups, p.parts, p.layout.slots), (1, 10, 8));
        assert!(unsupported(f, 1, 4096, 16384, 132).unwrap().contains("15360"));
        assert_eq!(
            (least_slots(f, 7, true), least_slots(WoFormat::Int4G128, 7, true), least_slots(f, 1, true)),
            (2, 7, 1)
        );
        // The default: on fast memory only (as FP8 and INT8), where the ring takes K.
        let (h200, h100) = (4900.0, 3352.0);
        assert!(auto_on(f, 14336, 4096, 132, h200) && auto_on(f, 4096, 4096, 132, h200));
        assert!(auto_on(f, 4096, 14336, 132, h200) && auto_on(f, 14336, 8192 + 1024, 132, h200));
        assert!(!auto_on(f, 14336, 4096, 132, h100) && !auto_on(f, 4096, 14336, 132, h100));
        assert_eq!((in_step(f, h200), in_step(f, h100)), (Some(true), None));
        // Any grid on fast memory (1x1024x4096: one row step a CTA); 2 in flight at any stream length there.
        assert!(auto_on(f, 1024, 4096, 132, h200) && auto_on(f, 128256, 4096, 132, h200));
        assert_eq!(
            (units_in_flight(f, 244, 6, 4096, h200, false), units_in_flight(f, 28, 6, 4096, h100, false)),
            (2, 0)
        );
        assert_eq!(units_in_flight(f, 49, 12, 2048, h200, false), 0);
    }

    #[test]
    fn bf16_rows_stream_as_fp16_rows_against_either_x() {
        let (b, h) = (WoFormat::Bf16, WoFormat::Fp16);
        assert!(takes(b) && takes(h));
        assert_eq!((slice_values(b), max_k(b), fp16_parts(4096)), (512, MAX_K_FP16, 2));
        let (h200, h100) = (4900.0, 3352.0);
        for (n, k) in [(14336, 4096), (4096, 4096), (128256, 4096), (1024, 8192), (8192, 8192), (4096, 14336)] {
            let (pb, ph) = (plan_on(b, 1, n, k, 132, h200).unwrap(), plan_on(h, 1, n, k, 132, h200).unwrap());
            assert_eq!(
                (pb.ctas, pb.per, pb.groups, pb.parts, pb.layout.slots, pb.layout.smem),
                (ph.ctas, ph.per, ph.groups, ph.parts, ph.layout.slots, ph.layout.smem),
                "{n}x{k}"
            );
            assert!(auto_on(b, n, k, 132, h200) && !auto_on(b, n, k, 132, h100), "{n}x{k}");
        }
        assert!(unsupported(b, 1, 4096, 16384, 132).unwrap().contains("15360"));
        assert_eq!(units_in_flight(b, 28, 6, 4096, h200, false), units_in_flight(h, 28, 6, 4096, h200, false));
        // No range guard: the products are FP32 (weights near f16's largest would need one for FP16).
        use crate::weight_only::quantize_pack;
        let (n, k) = (16, 4096);
        let w: Vec<f32> = (0..n * k).map(|i| 3e4 * ((i % 7) as f32 - 3.0) / 3.0).collect();
        assert_eq!(kernel_scale(&quantize_pack(b, &w, n, k).unwrap()), 1.0);
        assert!(kernel_scale(&quantize_pack(h, &w, n, k).unwrap()) > 1.0);
    }

    #[test]
    fn eight_bit_rows_take_twice_the_bytes_and_half_the_k() {
        let (fp8, i8, i4) = (WoFormat::Fp8E4M3, WoFormat::Int8, WoFormat::Int4G128);
        assert!(takes(fp8) && takes(i8) && WoFormat::ALL.into_iter().all(takes));
        // A warp's K slice: 32 lanes x 16 bytes, 1024 4-bit values or 512 8-bit ones; at most 31 slices.
        assert_eq!((slice_values(i4), slice_values(fp8), slices(fp8, 4096), slices(i4, 4096)), (1024, 512, 8, 4));
        assert_eq!((max_k(i4), max_k(fp8), max_k(i8)), (MAX_K, 15360, 15360));
        assert!(unsupported(fp8, 1, 4096, 16384, 132).unwrap().contains("15360"));
        assert!(unsupported(i8, 1, 4096, 15360, 132).is_none());
        // 1x14336x4096: 14 steps of 32 KB a CTA in 2 row groups of 8 warps, 6 slots beside the row sums (8
        // slices x 112 rows), whole steps; on the H200's memory 2 in flight.
        let p = plan(fp8, 1, 14336, 4096, 132).unwrap();
        assert_eq!((p.ctas, p.per, p.groups, p.parts, p.layout.slots), (128, 14, 2, 1, 6));
        assert_eq!(p.layout.smem, 6 * 32768 + 8 * 112 * 4);
        assert!(!p.layout.streamed_scales && p.layout.nf4_wide_at.is_none());
        assert_eq!((copy_bytes(fp8, 4096, 1), copy_bytes(i4, 4096, 1)), (32768, 16384));
        assert_eq!(units_in_flight(fp8, 14, 6, copy_bytes(fp8, 4096, 1), 4900.0, false), 2);
        // down_proj 1x4096x14336: the long-K plan, one row group of 28 warps, rows of 14 KB in 4 parts of 3.5 KB
        // (7 slots; 2 in flight).
        let p = plan(i8, 1, 4096, 14336, 132).unwrap();
        assert_eq!((p.groups, p.parts, p.layout.slots), (1, 4, 7));
        assert_eq!((copy_bytes(i8, 14336, 4), slot_bytes(i8, 14336, 4)), (3584, 28672));
        assert_eq!(units_in_flight(i8, 16, 7, 3584, 4900.0, false), 2);
        // The 8-bit parts: copies of 2-3.5 KB, the fewest (4-bit: parts of 4096-7168 values, the most).
        let parts: Vec<_> = [8192, 12288, 14336, 4096, 9216].map(|k| long_k_parts_for(fp8, k)).to_vec();
        assert_eq!(parts, [Some(4), Some(4), Some(4), Some(2), Some(3)]);
        assert_eq!((long_k_parts_for(i4, 14336), long_k_parts_for(i4, 28672)), (Some(2), Some(7)));
        // The engine's default from 4 row steps a CTA: o_proj, the MLP's rows, down_proj; not 1024 rows.
        assert!(auto(fp8, 14336, 4096, 132) && auto(i8, 4096, 4096, 132) && auto(fp8, 4096, 14336, 132));
        assert!(!auto(fp8, 1024, 4096, 132) && !auto(i8, 4096, 16384, 132));
        // On fast memory only (measured on the H200, 4.9 TB/s; not on the H100, 3.35); the 4-bit rule anywhere.
        assert!(auto_on(fp8, 14336, 4096, 132, 4917.0) && !auto_on(fp8, 14336, 4096, 132, 3352.0));
        assert!(!auto_on(i8, 4096, 4096, 132, 0.0) && auto_on(i4, 14336, 4096, 132, 3352.0));
    }

    #[test]
    fn units_in_flight_limited_on_fast_memory_for_short_streams_of_large_copies() {
        if std::env::var_os("ROOFLINE_RING_AHEAD").is_some() {
            return;
        }
        let i4 = WoFormat::Int4G128;
        assert_eq!((copy_bytes(i4, 4096, 1), copy_bytes(i4, 14336, 2), copy_bytes(i4, 8192, 2)), (16384, 3584, 2048));
        // H200 (4.9 TB/s peak): 1x14336x4096 (14 units, 9 slots), 1x28672x4096 (28, 9), 1x4096x14336 (8, 6).
        assert_eq!(units_in_flight(i4, 14, 9, 16384, 4915.0, false), 2);
        assert_eq!(units_in_flight(i4, 28, 9, 16384, 4915.0, false), 2);
        assert_eq!(units_in_flight(i4, 36, 9, 16384, 4915.0, false), 2);
        assert_eq!(units_in_flight(i4, 8, 6, 3584, 4915.0, false), 2);
        // Not the LM head (122 units in 9 slots), nor 2 KB copies (1x8192x8192, 1x28672x8192).
        assert_eq!(units_in_flight(i4, 37, 9, 16384, 4915.0, false), 0);
        assert_eq!(units_in_flight(i4, 122, 9, 16384, 4915.0, false), 0);
        assert_eq!(units_in_flight(i4, 16, 12, 2048, 4915.0, false), 0);
        assert_eq!(units_in_flight(i4, 56, 12, 2048, 4915.0, false), 0);
        // The H100 SXM's HBM3 (2619 MHz, 5120 bits) and the H200's HBM3e (3201 MHz, 6144 bits), as the driver gives them.
        assert!((peak_gb_s(2_619_000, 5120) - 3352.3).abs() < 0.1);
        assert!((peak_gb_s(3_201_000, 6144) - 4916.7).abs() < 0.1);
        assert!(peak_gb_s(2_619_000, 5120) < FAST_MEMORY_GB_S && peak_gb_s(3_201_000, 6144) >= FAST_MEMORY_GB_S);
        assert_eq!((peak_gb_s(0, 6144), peak_gb_s(3_201_000, 0)), (0.0, 0.0));
        // H100 (3.35 TB/s) and a driver that does not say: unchanged.
        assert_eq!(units_in_flight(i4, 14, 9, 16384, 3352.0, false), 0);
        assert_eq!(units_in_flight(i4, 14, 9, 16384, 0.0, false), 0);
        // INT4's subnormal decode (session 60): three from more units than slots to 7 fills of 16 KB copies.
        let three = |units, slots, copy, peak| units_in_flight(i4, units, slots, copy, peak, true);
        assert_eq!((three(14, 9, 16384, 4915.0), three(28, 9, 16384, 4915.0), three(56, 9, 16384, 4915.0)), (3, 3, 3));
        assert_eq!((three(4, 6, 16384, 4915.0), three(8, 6, 3584, 4915.0), three(122, 9, 16384, 4915.0)), (2, 2, 0));
        assert_eq!(three(28, 9, 16384, 3352.0), 0);
        // Which decodes count as cheap (session 61: MXFP4 and NVFP4 too), at one row of x on the CUDA cores only.
        if std::env::var_os("ROOFLINE_RING_SUBN").is_none() {
            assert!([WoFormat::Int4G128, WoFormat::Mxfp4, WoFormat::Nvfp4]
                .iter()
                .all(|f| three_in_flight(*f, 1, false)));
            assert!(!three_in_flight(WoFormat::Nf4, 1, false) && !three_in_flight(WoFormat::Fp8E4M3, 1, false));
            assert!(!three_in_flight(i4, 2, false) && !three_in_flight(i4, 1, true));
        }
    }

    /// One build of the spill test: a CUDA-core ring build (its description and NVRTC options), or a tensor-core
    /// one as the engine plans it (format and x, rows x row steps x K, epilogue).
    enum Build {
        Cuda(String, Vec<String>),
        Mma((WoFormat, XDtype), (usize, usize, usize), Epilogue),
    }

    /// The kernel compiles for sm_90 without spills in every epilogue (skipped without NVRTC).
    #[test]
    fn rows_kernel_compiles_without_spills() {
        if let Err(e) = nvrtc_available() {
            eprintln!("SKIPPED rows_kernel_compiles_without_spills: {e}");
            return;
        }
        // Every build first, then all of them compiled on every core (`par_map`): about 1100 builds.
        let mut jobs = Vec::new();
        for (k, per) in [
            (4096usize, 4usize),
            (4096, 14),
            (2048, 3),
            (8192, 1),
            (14336, 4),
            (4096, 122),
            (8192, 122),
            (16384, 2),
            (28672, 8),
            // Session 41's fast-memory defaults: LM heads at K = 5120, gate_up at K = 6144, and a MoE expert
            // (DeepSeek-V3's gate_up, 4096 x 7168) that the decode step now runs on the ring.
            (5120, 144),
            (6144, 55),
            (7168, 4),
            // Session 42's fast-memory defaults at small N: 1x5120x5120, 1x2048x8192, 1x1024x6144 and 1x1536x7168.
            (5120, 5),
            (8192, 2),
            (6144, 1),
            (7168, 2),
            // Session 43's: every 4-bit format at K = 4096-5120 where the grid fills the GPU (1x1024x4096, 1x2048x5120).
            (4096, 1),
            (5120, 2),
        ] {
            for f in WoFormat::ALL.into_iter().filter(|f| takes(*f) && k <= max_k(*f)) {
                // 8- and 16-bit weights at the shapes of Llama-3.1-8B's linears (their K up to 14336; FP16's up to
                // 8192) and the LM head.
                if f.bits() >= 8 && !matches!((k, per), (4096, 4) | (4096, 14) | (8192, 1) | (14336, 4) | (4096, 122)) {
                    continue;
                }
                // The engine's groups and K parts for a grid of 132 CTAs of `per` steps.
                let (g, kp) = (row_groups(f, per * 8 * 132, k, 132), k_parts(f, per * 8 * 132, k, 132));
                // The default's layout.
                let lay = layout((f, 1), k, per, g, kp, false).unwrap_or_else(|| panic!("{f:?} {k} {per}: no ring"));
                // down_proj's 4 steps of K = 14336 also in 2 and 7 K parts, in one row group and in two; every
                // shape with its scales streamed and (where they fit) staged.
                let mut builds = vec![(lay, kp, g, 1)];
                // The engine's default for two rows of x on fast memory (`auto_rows`), each shape's own layout, where
                // the registers leave room for them (`plan_on` refuses the others).
                let threads = cta_threads(f, k, g, false);
                for m in
                    (2..=AUTO_MAX_M_FAST).filter(|m| f.bits() <= 8 && rows_registers(f, *m) <= register_room(threads))
                {
                    let one = layout((f, 1), k, per, g, kp, true);
                    let more = one.and_then(|l| layout_for((f, m), k, per, g, kp, l.streamed_scales));
                    builds.extend(more.map(|l| (l, kp, g, m)));
                }
                // (FP8 / INT8 have no tables to stream.)
                let other = layout_for((f, 1), k, per, g, kp, !lay.streamed_scales).filter(|_| f.bits() == 4);
                builds.extend(other.filter(|o| o.slots >= lay.slots.min(2 * g * kp)).map(|o| (o, kp, g, 1)));
                if k == 14336 {
                    for (parts, groups) in [(1, 1), (2, 2), (7, 1), (7, 2), (4, 1)] {
                        if slices(f, k) * groups > 31 || slices(f, k) % parts != 0 {
                            continue; // more than 1024 threads; parts of no whole K slices
                        }
                        builds.extend(layout((f, 1), k, per, groups, parts, false).map(|l| (l, parts, groups, 1)));
                    }
                }
                // A slot count that is no multiple of the consumer classes (`RW_MIXED`, a barrier per class;
                // by default only in one row group, any layout with ROOFLINE_RING_ANY_SLOTS=1).
                if lay.slots % (g * kp) == 0 && lay.slots < per * kp {
                    builds.push((Layout { slots: lay.slots + 1, ..lay }, kp, g, 1));
                }
                let ops = [
                    (Epilogue::Norm, Input::X),
                    (Epilogue::Store, Input::X),
                    (Epilogue::Add, Input::X),
                    (Epilogue::Add, Input::SwiGlu),
                ];
                for ((lay, parts, g, m), ep) in builds.into_iter().flat_map(|b| ops.map(|e| (b, e))) {
                    // Units in flight as an H200 (4.9 TB/s) takes them: limited at the short shapes, not the long.
                    let cheap = three_in_flight(f, m, false);
                    let ahead = units_in_flight(f, per * parts, lay.slots, copy_bytes(f, k, parts), 4900.0, cheap);
                    // BF16 weights with BF16 x (FP16 x differs only in its loads and stores), and 8-bit weights at
                    // M = 2 (the ring's default there is for BF16 x).
                    let x = if f == WoFormat::Bf16 || (m > 1 && f.bits() == 8) { XDtype::Bf16 } else { XDtype::F16 };
                    let what = format!(
                        "ring GEMV {f:?} {m} rows of x, k {k}, {per} steps, {parts} K parts, {g} groups, {lay:?}, {ep:?}"
                    );
                    jobs.push(Build::Cuda(what, options(90, (f, x), (m, k), per, lay, (parts, g, ahead, false), ep)));
                }
            }
        }
        // 9 to 16 rows of x on the tensor cores (session 51; 2 to 8 since session 57), at every K it takes, 1 to 8 row steps a CTA and 14 (its
        // default, `mma_auto`), with each epilogue it takes.
        // INT4 with FP16 x everywhere; INT4 with BF16 x, NF4, MXFP4 and NVFP4 at the default's 14 steps with the
        // norm, 4 with the add, one step alone, and 28 and 56 steps (below).
        // (16, 4096, 1): a CTA of one row step at K = 4096 (N up to 8 rows a SM), whose two-units-a-pass build spilled
        // 4 bytes (INT4, NVRTC 12.9; session 55).
        let mma_shapes = [
            (9usize, 4096usize, 4usize),
            (12, 4096, 8),
            (16, 4096, 14),
            (16, 1024, 1),
            (16, 4096, 1),
            (13, 2048, 2),
            (16, 3072, 6),
            // 2 to 8 rows (session 57: every lane's rows g + 8 past M, the builds spilled until wo_ring.cu's `m8`).
            (2, 4096, 6),
            (3, 4096, 14),
            (8, 4096, 1),
            (5, 2048, 4),
            // 24 row steps a CTA, the most the default takes at 2-8 rows since session 58.
            (4, 4096, 24),
            // The most at a shorter K since session 59 (`MMA_AUTO_SHORT_K_MAX_STEPS`): 10 at K = 2048, 15 at 3072.
            (8, 2048, 10),
            (8, 3072, 15),
            // K past 4096 in 2 K splits, a cluster of two CTAs a row block (session 59; a CTA takes twice the steps
            // named, its grid of 66 row blocks): K = 8192 at 16 and 2-7 rows (INT4 at 8-15 rows stays off: its builds
            // spill), 5120, 6144 and 7168 (splits of 2560, 3072 and 3584).
            (16, 8192, 14),
            (16, 8192, 28),
            (7, 8192, 4),
            (12, 5120, 14),
            (9, 6144, 8),
            (16, 7168, 28),
        ];
        let int4 = mma_shapes.into_iter().flat_map(|s| {
            [Epilogue::Store, Epilogue::Add, Epilogue::Norm].map(|e| ((WoFormat::Int4G128, XDtype::F16), s, e))
        });
        let others = [
            (WoFormat::Int4G128, XDtype::Bf16),
            (WoFormat::Nf4, XDtype::F16),
            (WoFormat::Mxfp4, XDtype::F16),
            (WoFormat::Nvfp4, XDtype::F16),
            // BF16 x converted to f16 (`mma_xf16`).
            (WoFormat::Nf4, XDtype::Bf16),
            (WoFormat::Mxfp4, XDtype::Bf16),
            (WoFormat::Nvfp4, XDtype::Bf16),
        ]
        .into_iter()
        .flat_map(|fx| {
            [
                ((16, 4096, 14), Epilogue::Norm),
                ((9, 4096, 4), Epilogue::Add),
                ((16, 1024, 1), Epilogue::Store),
                ((16, 4096, 1), Epilogue::Add),
                // 28 and 56 steps a CTA: NVFP4's and MXFP4's scales streamed beside each slot (their M = 1 builds').
                ((12, 4096, 28), Epilogue::Norm),
                ((9, 4096, 56), Epilogue::Store),
                // 2 to 8 rows (session 57).
                ((8, 4096, 14), Epilogue::Norm),
                ((2, 4096, 4), Epilogue::Add),
                ((4, 4096, 1), Epilogue::Store),
                ((8, 4096, 24), Epilogue::Add),
                // 56 at 8 rows: MXFP4's and NVFP4's default with BF16 x (session 58).
                ((8, 4096, 56), Epilogue::Norm),
                // The LM head at 16 rows (122 steps), the default from 9 rows since session 58 (not NF4's: its plan
                // leaves the tensor cores there, its staged scales leave no room).
                ((16, 4096, 122), Epilogue::Norm),
                // 2 K splits (session 59): 12 rows of K = 8192 (Llama-3-70B's gate_up at batch 12: 56 steps a CTA) and
                // 9 of 5120.
                ((12, 8192, 28), Epilogue::Norm),
                ((9, 5120, 14), Epilogue::Add),
            ]
            .map(|(s, e)| (fx, s, e))
            .into_iter()
            .filter(|((f, _), (_, _, per), _)| *f != WoFormat::Nf4 || *per <= 56)
            // (INT4 at 8-15 rows of K = 8192 stays off the tensor cores, `mma_split_k`.)
            .filter(|((f, _), (m, k, _), _)| !(*f == WoFormat::Int4G128 && (8..=15).contains(m) && *k == 8192))
        });
        // NF4 in 4 K splits (session 59: its default at K = 14336 from 9 rows; 4 row steps named, 16 a CTA; not at K =
        // 16384, whose splits of 4096 spill at 9-15 rows).
        let nf4_splits = [
            ((WoFormat::Nf4, XDtype::F16), (16, 14336, 4), Epilogue::Add),
            ((WoFormat::Nf4, XDtype::Bf16), (9, 14336, 4), Epilogue::Norm),
            ((WoFormat::Nf4, XDtype::F16), (12, 14336, 2), Epilogue::Store),
        ];
        jobs.extend(int4.chain(others).chain(nf4_splits).map(|(fx, shape, ep)| Build::Mma(fx, shape, ep)));
        // Each build's compile error, spills or loads before the dependency wait, if any.
        let found: Vec<String> = super::super::nvrtc::par_map(&jobs, |job| {
            let (what, cubin, log) = match job {
                Build::Cuda(what, opts) => match super::super::nvrtc::compile_cubin(&source(), "wo_ring.cu", opts) {
                    Ok((cubin, log)) => (what.clone(), cubin, log),
                    Err(e) => return Some(format!("{what}: {e}")),
                },
                &Build::Mma((f, x), (m, k, per), ep) => {
                    let n = per * STEP_ROWS * 132;
                    let what = format!("ring GEMV on the tensor cores {f:?} {x:?} {m}x{n}x{k} {ep:?}");
                    match compile_ring(90, 132, 4900.0, (f, x), (m, n, k), (ep, Input::X)) {
                        Ok(b) => (format!("{what} ({})", b.describe()), b.cubin, b.log),
                        Err(e) => return Some(format!("{what}: {e}")),
                    }
                }
            };
            let (regs, spills, _) = parse_ptxas(&log);
            eprintln!("{what}: {regs:?} registers");
            if spills != Some(0) {
                return Some(format!("{what}: spills {spills:?}"));
            }
            match early_dependent_loads(&cubin) {
                Err(e) => Some(format!("{what}: {e}")),
                Ok(Some(early)) if !early.is_empty() => Some(format!("{what}: loads before the wait {early:?}")),
                Ok(_) => None,
            }
        })
        .into_iter()
        .flatten()
        .collect();
        assert!(found.is_empty(), "builds that fail, spill or load before the wait:\n{}", found.join("\n"));
    }
}
