//! The ring GEMV's plan: which calls it takes, its grid, row groups, K parts, ring slots and units in flight, whether
//! its row steps run on the tensor cores and in K splits, and the defaults that take it for a call (each rule with the
//! measurements it rests on).

use cudarc::driver::CudaContext;

use super::super::nvrtc::XDtype;
use super::super::pack::{self, PackedWeights, WoFormat};
use super::super::{LaunchPlan, Tuning, Variant};
use crate::GpuError;

// For the docs' links only.
#[cfg(doc)]
use super::RingGemv;

/// Most dynamic shared memory one CTA may take (the ring, the CTA's scale tables and sums).
pub const SMEM_BUDGET: usize = 200 * 1024;

/// CTAs of the ring GEMV per SM: `ROOFLINE_RING_CTAS_PER_SM` (1 or 2) for tuning experiments, else 1. With 2 the
/// grid is two waves' worth of CTAs that share each SM (twice the producers and streams in flight a SM), each
/// with half the shared-memory budget and registers for two (`RW_MINB`).
pub(super) fn ctas_per_sm() -> usize {
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
pub(super) fn alone_smem(ctx: &CudaContext, used: usize) -> Result<usize, GpuError> {
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
pub(super) fn alone_bytes(per_sm: usize, reserved: usize) -> usize {
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
pub(super) fn slice_values(format: WoFormat) -> usize {
    let lane_bytes = if format.bits() == 16 { 32 } else { 16 };
    32 * lane_bytes * 8 / format.bits()
}

/// K slices (consumer warps of one row group) of rows of `k` `format` values.
pub(super) fn slices(format: WoFormat, k: usize) -> usize {
    (k / slice_values(format)).max(1)
}

/// Threads of a ring CTA for rows of `k` `format` values in `groups` row groups: the consumer warps (K slices x row
/// groups) and the producer warp.
/// On the tensor cores (`mma`, [`mma_plan`]) one row group of K / 256 warps, and the epilogue warp (`RW_EPI`) that
/// adds up their row sums and stores y (where K is a multiple of 1024, K / 256 warps are a multiple of 4 and the 2
/// warps more stay within the same 128 threads of the register allocation as one would, [`register_room`]).
pub(super) fn cta_threads(format: WoFormat, k: usize, groups: usize, mma: bool) -> usize {
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
pub(super) fn row_bytes(format: WoFormat, k: usize) -> usize {
    k * format.bits() / 8
}

/// Rows per row step (one bulk copy).
pub(super) const STEP_ROWS: usize = 8;

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
pub(super) fn mma_chunk(per: usize) -> usize {
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

/// Whether NF4's CUDA-core row steps (the ring GEMV's at 1 to 3 rows of x) add their f16 sums on the tensor cores
/// (`NF4_TC` in wo_stream.cuh, `row_step_nf4tc`: one mma.sync a row pair widens the four f16x2 accumulators, adds them
/// over each 64-value block's lane pair and gathers the 8 rows two to a lane, as INT4's `row_step_subn` does over its
/// quads): by default NF4 at 2 or more rows of x off the tensor-core ring (`mma`) at K up to 4096, the LM head's case;
/// `ROOFLINE_RING_NF4TC=1` at any rows and K up to [`NF4_TC_MAX_K`], `=0` never (A/B runs).
/// H200, session 65 (h200-2026-12-01-session65 r1, us, hsum4 and the butterfly / tensor-core sums, twice each): at
/// one row they lose, 1x14336x4096 9.87 / 10.2, 1x4096x14336 11.2 / 11.9, 1x28672x4096 17.3 / 18.0, 1x128256x4096
/// 67.7 / 70.3, 1x4096x4096 4.82 / 5.22; at two rows 2x4096x14336 15.1 / 15.4, but 2x128256x4096 83.9 / 80.0.
pub(crate) fn nf4_tensor_sums(format: WoFormat, mma: bool, m: usize, k: usize) -> bool {
    if format != WoFormat::Nf4 || mma || k > NF4_TC_MAX_K {
        return false;
    }
    match std::env::var("ROOFLINE_RING_NF4TC").ok().as_deref() {
        Some("0") => false,
        Some("1") => true,
        _ => m >= 2 && k <= NF4_TC_DEFAULT_MAX_K,
    }
}

/// Longest K at which NF4's CUDA-core row step sums on the tensor cores (`nf4_tensor_sums`): under NVRTC 13.0 its
/// build at K = 28672 (7 K parts, one row group: Llama-3-70B's down_proj) spilled 8-20 bytes (session 65); 16384 and
/// 14336 spill nothing.
pub const NF4_TC_MAX_K: usize = 16384;

/// Longest K at which [`nf4_tensor_sums`] holds by default (two rows of x at K = 14336 were 2% slower).
const NF4_TC_DEFAULT_MAX_K: usize = 4096;

/// Bytes of padding after each row of a tensor-core ring slot (`RW_MMA_PAD` in wo_ring.cu: the slot's rows off one
/// another's shared-memory banks, copied row by row): [`MMA_PAD`], or `ROOFLINE_RING_MMA_PAD` (0 to 128, a multiple
/// of 16) for experiments.
pub(super) fn mma_pad() -> usize {
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
pub(super) fn mma_layout(
    format: WoFormat,
    (m, k): (usize, usize),
    per: usize,
    streamed: bool,
    splits: usize,
) -> Option<Layout> {
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
pub(super) fn mma_plan(format: WoFormat, m: usize, k: usize) -> bool {
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
pub(super) fn split_blocks(wave: u32, splits: usize) -> u32 {
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
pub(super) fn mma_split_k(format: WoFormat, m: usize, k: usize) -> bool {
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
pub(super) fn mma_xf16(format: WoFormat, x: XDtype) -> bool {
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
pub(super) fn row_groups(format: WoFormat, n: usize, k: usize, sm_count: u32) -> usize {
    let default = if long_k(n, k, sm_count) || format.bits() == 16 {
        1
    } else if format == WoFormat::Nf4 || format.bits() == 8 {
        2
    } else {
        3
    };
    groups_override().unwrap_or(default).min(31 / slices(format, k)).max(1)
}

/// `ROOFLINE_RING_GROUPS` (1 to 4; experiments): the row groups [`row_groups`] and [`one_row_groups`] take instead of
/// their own (unset, empty or out of range: none).
pub(super) fn groups_override() -> Option<usize> {
    std::env::var("ROOFLINE_RING_GROUPS").ok().and_then(|v| v.parse().ok()).filter(|g| (1..=4).contains(g))
}

/// Row groups of the CUDA-core ring at one row of x of `format`, rows of `k` values, a CTA taking `per` row steps in
/// `parts` K parts, given [`row_groups`]' `groups`: NF4 in 4 where a CTA takes [`NF4_WIDE_GROUPS_STEPS`] and the layout
/// stages or streams its scales as that of `groups` does (the tables the weights are uploaded with serve every row
/// count: [`streams_scales`]). H200, `measure`, us, NF4 in 2 / 3 / 4 groups, session 64 r7: 1x14336x4096 (14 steps)
/// 10.2 / 9.99 / 9.95 and 10.2 / 9.97 / 9.95, 1x28672x4096 (28) 18.0 / 17.8 / 17.5 and 17.9 / 17.8 / 17.5; the LM head
/// 1x128256x4096 (122) 69.5 / 69.2 / 69.3 and 69.1 / 69.1 / 69.4, so not there; session 43 found 3 groups slower at
/// small N and in the 8B decode step (o_proj, 4 steps). As the default (r9), 2 / 4 groups: 1x14336x4096 10.2 / 9.96,
/// 10.3 / 9.94; 1x28672x4096 17.8 / 17.5 (twice); 1x20480x4096 (20 steps) 13.4 / 13.1, 13.5 / 13.1. More rows of x keep
/// `groups` (NF4's 2-row build needs 112 registers a thread, more than 544 threads leave). Fast memory only
/// ([`FAST_MEMORY_GB_S`]): on the H100 NF4 ran best in 2 (session 24: 1x14336x4096 13.5, 3 groups 13.9-14.0, 4 groups
/// 13.7). MXFP4 and NVFP4 in 4 groups instead of 3 tied or lost (1x14336x4096 9.71 / 9.70, 10.1 / 10.1; 1x28672x4096
/// 16.8 / 16.9, 17.5 / 17.6). `ROOFLINE_RING_GROUPS` overrides.
pub(super) fn one_row_groups(
    format: WoFormat,
    k: usize,
    (per, parts): (usize, usize),
    groups: usize,
    fast: bool,
) -> usize {
    let wide = format == WoFormat::Nf4
        && fast
        && groups == 2
        && parts == 1
        && NF4_WIDE_GROUPS_STEPS.contains(&per)
        && groups_override().is_none()
        && 4 * slices(format, k) <= 31;
    let streamed = |g| layout((format, 1), k, per, g, parts, fast).map(|l| l.streamed_scales);
    if wide && streamed(4).is_some() && streamed(4) == streamed(groups) {
        4
    } else {
        groups
    }
}

/// Row steps a CTA where NF4 at one row of x takes 4 row groups (`one_row_groups`; measured at 14, 20 and 28).
pub const NF4_WIDE_GROUPS_STEPS: std::ops::RangeInclusive<usize> = 14..=32;

/// K parts a row step streams in (`RW_KH`: a ring slot holds 8 rows of `k / parts` values, filled by 8 bulk
/// copies, and serves the warps of one row group whose K slices fall in it) for `n` rows of `k` values on
/// `sm_count` SMs: `ROOFLINE_RING_KH` (a divisor of its K slices, [`slices`]) for tuning experiments, else for a
/// long K ([`long_k`]) [`long_k_parts_for`], else 1.
pub(super) fn k_parts(format: WoFormat, n: usize, k: usize, sm_count: u32) -> usize {
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
pub(super) fn fp16_parts(k: usize) -> usize {
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
pub(super) fn fills_the_gpu(ctas: u32, sm_count: u32) -> bool {
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
pub(super) fn nf4_xreg_in_f16x2(n: usize, k: usize, sm_count: u32) -> bool {
    LaunchPlan::new(Variant::XReg, WoFormat::Nf4, 1, n, k, sm_count, Tuning::default()).xh
}

/// Bytes of the block scales per row of `k` values (`pack::xreg_tables`' entries; none for formats the ring
/// does not take).
pub(super) fn scale_bytes_per_row(format: WoFormat, k: usize) -> usize {
    pack::xreg_geometry(format, k).map_or(0, |(bytes, cols)| bytes * cols)
}

/// Bytes of INT4's 4-bit zero points per row of `k` values (none for the other formats).
pub(super) fn zero_bytes_per_row(format: WoFormat, k: usize) -> usize {
    if format == WoFormat::Int4G128 {
        k / 256
    } else {
        0
    }
}

/// Bytes of the scale tables per row of `k` values: the scales, and INT4's 4-bit zero points (none for FP8 and
/// INT8, whose row scales the kernel reads once a row).
pub(super) fn table_bytes_per_row(format: WoFormat, k: usize) -> usize {
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

/// `ROOFLINE_RING_SPLIT` (experiments; the CUDA-core ring, K whole): the row steps each CTA takes, comma-separated in
/// block order, for the calls of as many row steps in all (`steps`, N / 8; other calls keep [`grid`]'s even split),
/// e.g. the shares `ring_trace --repeat R --balance` suggests (`trace::balanced_shares`): the CTAs that stream slower
/// given fewer. The kernel takes them as a table of prefix sums (`RW_SPLIT_TABLE`, `split_defines`). `Ok(None)`
/// where unset or for another call's steps; an error where it is not a list of whole numbers from 1.
pub fn split_override(steps: usize) -> Result<Option<Vec<usize>>, String> {
    let Ok(v) = std::env::var("ROOFLINE_RING_SPLIT") else { return Ok(None) };
    let shares = parse_split(&v)?;
    Ok((shares.iter().sum::<usize>() == steps).then_some(shares))
}

/// The row steps a CTA of `v` (`ROOFLINE_RING_SPLIT`'s form: whole numbers from 1, comma-separated).
pub(super) fn parse_split(v: &str) -> Result<Vec<usize>, String> {
    v.split(',')
        .map(|s| match s.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("ROOFLINE_RING_SPLIT: {s:?} is not a count of row steps (a whole number from 1)")),
        })
        .collect()
}

/// The kernel's defines for the CTAs' `shares` of the row steps (`RW_SPLIT_TABLE`: the prefix sums, one more entry
/// than CTAs).
pub(super) fn split_defines(shares: &[usize]) -> String {
    let mut at = 0;
    let mut table = vec!["0".to_string()];
    for s in shares {
        at += s;
        table.push(at.to_string());
    }
    format!("-DRW_SPLIT_TABLE={}", table.join(","))
}

/// NF4's table of code pairs in the ring GEMV's dynamic shared memory (`nf4_pair_fill<true>`): rows of 256
/// bytes, the upper half of each unused, so that a lookup's byte offset is one byte permute (lane x 4 and
/// the byte of codes) and the table's base folds into the load.
pub const NF4_WIDE_TABLE_BYTES: usize = 256 * 256;

/// Dynamic shared memory an NF4 CTA of the ring GEMV may take in all (of the H100's 227 KB): its wide table
/// beside a ring as deep as [`SMEM_BUDGET`] leaves the other formats.
pub(super) const NF4_SMEM_BUDGET: usize = 224 * 1024;

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
pub(super) fn ring_slots(fit: usize, units: usize, classes: usize, any: bool) -> usize {
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
pub(super) fn any_slot_count(groups: usize) -> bool {
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
pub(super) fn units_in_flight(
    format: WoFormat,
    units: usize,
    slots: usize,
    copy: usize,
    peak_gb_s: f64,
    cheap: bool,
) -> usize {
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
pub(super) fn three_in_flight(format: WoFormat, m: usize, mma: bool) -> bool {
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
pub(super) fn copy_bytes(format: WoFormat, k: usize, parts: usize) -> usize {
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
pub(super) fn peak_gb_s(clock_khz: i32, bus_bits: i32) -> f64 {
    if clock_khz <= 0 || bus_bits <= 0 {
        return 0.0;
    }
    2.0 * f64::from(clock_khz) * 1e3 * f64::from(bus_bits) / 8.0 / 1e9
}

/// [`layout_with`] (`streamed`: the scales beside each slot) with NF4's wide pair table wherever a ring fits
/// beside it (else its narrow one): the wide one takes one byte permute a lookup. H100, session 32:
/// Llama-3-70B's down_proj 1x8192x28672 has no ring beside the wide table and its staged scales; on the
/// narrow one's 4 slots 48.7-49.5 us against the x-in-registers kernel's 71.6-72.2.
pub(super) fn layout_for(
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
pub(super) fn layout_with(
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
pub(super) fn least_slots(format: WoFormat, classes: usize, any: bool) -> usize {
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
pub(super) fn slot_scale_bytes(format: WoFormat, k: usize, parts: usize) -> usize {
    table_bytes_per_row(format, k) * STEP_ROWS / parts
}

/// Bytes of one ring slot: a row step of `k` `format` values, or one of its `parts` K parts.
pub(super) fn slot_bytes(format: WoFormat, k: usize, parts: usize) -> usize {
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
pub(super) struct Plan {
    /// CTAs, one wave ([`grid`]).
    pub(super) ctas: u32,
    /// Most row steps a CTA takes.
    pub(super) per: usize,
    /// Row groups ([`row_groups`]).
    pub(super) groups: usize,
    /// K parts a row step streams in ([`k_parts`]).
    pub(super) parts: usize,
    /// The ring, the tables and the dynamic shared memory of a CTA ([`layout`]).
    pub(super) layout: Layout,
    /// Whether the tensor cores take the row steps ([`mma_plan`]).
    pub(super) mma: bool,
    /// K splits, each its own CTA of a row block ([`mma_splits`]; 1 but on the tensor cores past K = 4096): `ctas` is
    /// the row blocks times the splits.
    pub(super) splits: usize,
}

impl Plan {
    /// Values of K one CTA takes (the kernel's FD): K over the splits.
    pub(super) fn fd(&self, k: usize) -> usize {
        k / self.splits
    }

    /// Threads a CTA of `format` weights, rows of `k` values ([`cta_threads`] for its share of K).
    pub(super) fn threads(&self, format: WoFormat, k: usize) -> u32 {
        cta_threads(format, self.fd(k), self.groups, self.mma) as u32
    }
}

/// Whether the producer warp initializes the barriers and issues its first copies before the other warps issue the
/// scale tables' (`RW_EARLY` in wo_ring.cu): INT4 g128 and NF4 at one row of x of their own (not SwiGLU on load), on
/// the CUDA-core row steps: y = W x where a CTA streams more units than its ring holds (its stream outlasts the first
/// fill), y += W x at any shape. Session 62's trace found the first copies going out 0.5-0.7 us after a CTA's start
/// (2.05 us at the LM head). H200, `measure`, us, default / early, sessions 62 and 64 (bench/RESULTS.md): INT4
/// 1x14336x4096 8.91 / 8.84, 8.91 / 8.84, 8.91 / 8.81; 1x4096x14336 9.64 / 9.55, 9.64 / 9.57, 9.64 / 9.53; 1x28672x4096
/// 15.8 / 15.8 (twice); NF4 1x28672x4096 18.1 / 17.9, 18.2 / 17.9, 18.1 / 17.9; 1x14336x4096 10.3 / 10.2, 10.3 / 10.3;
/// 1x4096x14336 11.2 / 11.2, 11.3 / 11.1. Where a CTA's units fit its ring it loses (INT4 1x4096x4096, 4 units in 6
/// slots: 4.37 / 4.48, 4.38 / 4.48, 4.39 / 4.48), and MXFP4 and NVFP4 lost at 1x14336x4096 (9.72 / 9.89, 10.08 /
/// 10.45): off there. With the residual add (o_proj in the decode step, where the previous kernel's tail hides the
/// prologue) at any units: model-bench Llama-3.1-8B batch 1 (8 layers, CUDA graph), none early / plain GEMVs early /
/// every CUDA-core build early, session 64: INT4 671.2 / 671.6 / 673.3 tok/s and 670.9 / 671.6 / 674.0 (o_proj
/// 1x4096x4096 4.54 / 4.52 / 4.37 us, 4.53 / 4.52 / 4.41), NF4 600.0 / 597.3 / 602.2 and 598.0 / 599.6 / 603.9 (o_proj
/// 4.77 / 4.75 / 4.66, 4.74 / 4.73 / 4.70). `ROOFLINE_RING_EARLY=0` (experiments, A/B) turns it off everywhere, `=1` on
/// for every CUDA-core build at one row of x without K splits (what the kernel's `RW_EARLY_ON` takes).
pub(super) fn early_copies(format: WoFormat, m: usize, plan: &Plan, (epilogue, input): (Epilogue, Input)) -> bool {
    let takes = m == 1 && !plan.mma && plan.splits == 1;
    match std::env::var("ROOFLINE_RING_EARLY").ok().as_deref() {
        Some("0") => false,
        Some("1") => takes,
        _ => {
            takes
                && matches!(format, WoFormat::Int4G128 | WoFormat::Nf4)
                && input == Input::X
                && match epilogue {
                    Epilogue::Store => plan.per * plan.parts > plan.layout.slots,
                    Epilogue::Add => true,
                    Epilogue::Norm => false,
                }
        }
    }
}

/// Registers a thread of the ring GEMV takes for `m` rows of x of `format` weights, at most (ptxas for sm_90, CUDA
/// 12.9 and 13.0, session 50: INT4 80 / 105 / 126 at M = 1 / 2 / 3, NF4 96 / 102 / 127, FP8 48 / 64 / 78 (64 spilled
/// with a residual add at 2x4096x14336 on CUDA 13.0), BF16 64 / 86 / 108); a build with less room spills
/// ([`register_room`]).
pub(super) fn rows_registers(format: WoFormat, m: usize) -> usize {
    let (one, more) = match format.bits() {
        4 => (96, 16),
        8 => (48, 24),
        _ => (64, 24),
    };
    one + more * (m.max(1) - 1)
}

/// Registers a thread may take in a CTA of `threads` threads alone on an SM (65536 a SM, allocated for warps in
/// groups of 4, in steps of 8; at most 255).
pub(super) fn register_room(threads: usize) -> usize {
    (65536 / threads.next_multiple_of(128).max(128) / 8 * 8).min(255)
}

/// The ring GEMV's grid, row groups, K parts and ring for a `batch x n x k` call of `format` on `sm_count`
/// SMs, or why it cannot run it; the ring laid out as on memory below [`FAST_MEMORY_GB_S`] ([`plan_on`] for a
/// given device; whether it can run at all does not depend on it).
pub(super) fn plan(format: WoFormat, batch: usize, n: usize, k: usize, sm_count: u32) -> Result<Plan, String> {
    plan_on(format, batch, n, k, sm_count, 0.0)
}

/// [`plan`] on a device of `peak_gb_s` memory bandwidth ([`peak_memory_gb_s`]; its ring's layout per
/// [`layout`]).
pub(super) fn plan_on(
    format: WoFormat,
    batch: usize,
    n: usize,
    k: usize,
    sm_count: u32,
    peak_gb_s: f64,
) -> Result<Plan, String> {
    plan_with(format, (batch, n, k), (sm_count, peak_gb_s), true, None)
}

/// [`plan_on`], on the tensor cores only where `mma_ok` and [`mma_plan`] take the call; in K splits at most `clusters`
/// row blocks where given (the clusters of that many CTAs the device holds at once: `RingGemv::build` asks the driver).
pub(super) fn plan_with(
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
    // The CTAs' shares where `ROOFLINE_RING_SPLIT` gives them (the CUDA-core ring only).
    let (ctas, per) = match split_override(n / STEP_ROWS)?.filter(|_| !mma) {
        Some(shares) if shares.len() > wave as usize => {
            return Err(format!(
                "ROOFLINE_RING_SPLIT: {} CTAs, more than the {wave} the ring holds at once",
                shares.len()
            ))
        }
        Some(shares) => (shares.len() as u32, shares.iter().copied().max().unwrap_or(per)),
        None => (ctas, per),
    };
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
    let fast = peak_gb_s >= FAST_MEMORY_GB_S;
    let (groups, parts) =
        if mma { (1, 1) } else { (row_groups(format, n, k, sm_count), k_parts(format, n, k, sm_count)) };
    let groups = if batch == 1 && !mma { one_row_groups(format, k, (per, parts), groups, fast) } else { groups };
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
