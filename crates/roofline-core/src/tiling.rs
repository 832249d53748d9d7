//! Tiling model of a GEMM kernel: tile shape, shared memory and pipeline stages, occupancy, waves and wave
//! quantization, global traffic with L2 reuse under a swizzled tile order, and the resulting time. It turns
//! the plain roofline into a kernel-shaped estimate: `efficiency = roofline time / tiled time` (<= 1).
//!
//! Formulas and assumptions are in `docs/RECOMMEND.md` ("Tiling model"). Every hardware input comes from the
//! [`HardwareProfile`] (`sm_count`, `l2_mb`, `smem_per_sm_kb`, `regs_per_sm`, `max_threads_per_sm`,
//! `max_ctas_per_sm`, `boost_clock_mhz`); missing ones other than `sm_count` take documented defaults that
//! the report lists.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::format::Format;
use crate::hardware::HardwareProfile;
use crate::op::Gemm;
use crate::predict::{predict, Prediction};
use crate::scheme::Scheme;

/// A CTA tile: `bm x bn` outputs, `bk` along the reduction per pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileShape {
    /// Rows of the output tile (along M).
    pub bm: u64,
    /// Columns of the output tile (along N).
    pub bn: u64,
    /// K-slice per pipeline stage.
    pub bk: u64,
}

impl TileShape {
    /// `128x128x64`.
    pub fn label(&self) -> String {
        format!("{}x{}x{}", self.bm, self.bn, self.bk)
    }
}

impl std::str::FromStr for TileShape {
    type Err = CoreError;
    /// `BMxBN` (K-tile 64) or `BMxBNxBK`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || CoreError::invalid("tile", s, "BMxBN or BMxBNxBK with positive integers, e.g. 128x128x64");
        let parts: Vec<u64> = s
            .trim()
            .to_ascii_lowercase()
            .split('x')
            .map(|p| p.trim().parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let t = match parts[..] {
            [bm, bn] => TileShape { bm, bn, bk: 64 },
            [bm, bn, bk] => TileShape { bm, bn, bk },
            _ => return Err(bad()),
        };
        if t.bm == 0 || t.bn == 0 || t.bk == 0 || t.bm > 1024 || t.bn > 1024 || t.bk > 1024 {
            return Err(bad());
        }
        Ok(t)
    }
}

/// Output tiles of the candidate set (cuBLAS/CUTLASS-like), before K-tiles.
pub const CANDIDATE_MN: [(u64, u64); 6] = [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128)];
/// K-tiles of the candidate set.
pub const CANDIDATE_K: [u64; 3] = [32, 64, 128];
/// Pipeline stages tried (the most that fit one CTA in shared memory is used).
pub const MAX_STAGES: u64 = 4;
/// Fewest pipeline stages (double buffering).
pub const MIN_STAGES: u64 = 2;
/// Shared memory the runtime reserves per CTA, bytes.
pub const SMEM_RESERVED_PER_CTA: u64 = 1024;
/// Registers per thread besides the FP32 accumulators (addresses, fragments, loop state).
pub const REGS_OVERHEAD_PER_THREAD: u64 = 40;
/// Most registers a thread may use.
pub const MAX_REGS_PER_THREAD: u64 = 255;
/// One SM can draw at most this multiple of its fair share (`bandwidth / sm_count`) of DRAM bandwidth.
pub const SM_BANDWIDTH_SHARE: f64 = 2.0;
/// DRAM latency assumed for Little's law (bytes in flight needed to cover it), nanoseconds.
pub const DRAM_LATENCY_NS: f64 = 600.0;
/// Shared-memory bandwidth per SM, bytes per clock.
pub const SMEM_BYTES_PER_CLOCK: f64 = 128.0;
/// Fraction of L2 usable for operand reuse (the rest holds outputs and other traffic).
pub const L2_USABLE_FRACTION: f64 = 0.75;

/// Defaults for profile fields the model needs but a profile may lack.
const DEFAULT_SMEM_PER_SM_KB: f64 = 100.0;
const DEFAULT_REGS_PER_SM: u32 = 65536;
const DEFAULT_MAX_THREADS_PER_SM: u32 = 2048;
const DEFAULT_MAX_CTAS_PER_SM: u32 = 32;

/// What limits CTAs per SM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OccupancyLimit {
    /// Shared memory per SM.
    SharedMemory,
    /// Registers per SM.
    Registers,
    /// Resident threads per SM.
    Threads,
    /// Resident CTAs per SM.
    Ctas,
}

/// Which term sets the tiled time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TileBound {
    /// Tensor-core time over full waves.
    Compute,
    /// DRAM traffic (after L2 reuse) over the achievable bandwidth.
    Memory,
    /// Shared-memory operand reads.
    SharedMemory,
}

/// The model's estimate for one tile shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TilingChoice {
    /// The tile.
    pub tile: TileShape,
    /// Threads per CTA (128 below 128x128 outputs, 256 from there on).
    pub threads_per_cta: u64,
    /// Registers per thread (FP32 accumulators + overhead).
    pub regs_per_thread: u64,
    /// Pipeline stages.
    pub stages: u64,
    /// Shared memory per CTA, bytes (stages x (A slice + B slice)).
    pub smem_per_cta_bytes: u64,
    /// Resident CTAs per SM.
    pub ctas_per_sm: u64,
    /// What limits `ctas_per_sm`.
    pub occupancy_limit: OccupancyLimit,
    /// Tiles along M.
    pub tiles_m: u64,
    /// Tiles along N.
    pub tiles_n: u64,
    /// All tiles (`tiles_m x tiles_n x batch`).
    pub tiles: u64,
    /// CTAs resident at once (`sm_count x ctas_per_sm`).
    pub concurrent_ctas: u64,
    /// `tiles / concurrent_ctas`.
    pub waves: f64,
    /// `ceil(waves)`.
    pub full_waves: u64,
    /// Fraction of the last wave's slots that have work.
    pub last_wave_fill: f64,
    /// `waves / full_waves`.
    pub wave_efficiency: f64,
    /// Fraction of useful outputs in the padded tiles (`M N / (tiles_m bm tiles_n bn)`).
    pub tile_utilization: f64,
    /// Swizzle group of tiles running together: rows of tiles.
    pub group_m: u64,
    /// Swizzle group: columns of tiles.
    pub group_n: u64,
    /// Whether A and B fit the usable L2 together (every operand read from DRAM once).
    pub operands_fit_l2: bool,
    /// Times A is read from DRAM.
    pub a_reads: f64,
    /// Times B (weights) is read from DRAM.
    pub b_reads: f64,
    /// Bytes read by CTAs through L2 (every CTA reads its A and B panels).
    pub l2_requested_bytes: u64,
    /// Bytes through DRAM (reads after L2 reuse, plus the output written once).
    pub dram_bytes: u64,
    /// `1 - DRAM reads / L2 requests`.
    pub l2_hit_rate: f64,
    /// Fraction of peak DRAM bandwidth reachable (active SMs, bytes in flight).
    pub bandwidth_fraction: f64,
    /// Tensor-core time over full waves, microseconds.
    pub time_compute_us: f64,
    /// DRAM time, microseconds.
    pub time_memory_us: f64,
    /// Shared-memory operand time, microseconds (0 without `boost_clock_mhz`).
    pub time_smem_us: f64,
    /// Tiled time: the largest of the three, plus launch overhead, microseconds.
    pub time_us: f64,
    /// Which term sets the time.
    pub bound: TileBound,
    /// Plain roofline time, microseconds.
    pub roofline_time_us: f64,
    /// `roofline_time_us / time_us`.
    pub efficiency: f64,
}

/// A request for the tiling model: the input of `roofline tiling --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TilingRequest {
    /// Rows of activations/output.
    pub m: u64,
    /// Output features.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Independent products sharing the weights (default 1).
    #[serde(default = "one")]
    pub batch: u64,
    /// Operand formats (default uniform FP16).
    #[serde(default)]
    pub scheme: Option<Scheme>,
    /// Evaluate only this tile instead of the candidate set.
    #[serde(default)]
    pub tile: Option<TileShape>,
}

fn one() -> u64 {
    1
}

/// The answer to a [`TilingRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TilingReport {
    /// Hardware key.
    pub hardware: String,
    /// Hardware name.
    pub hardware_name: String,
    /// Shape.
    pub m: u64,
    /// Shape.
    pub n: u64,
    /// Shape.
    pub k: u64,
    /// Batch.
    pub batch: u64,
    /// Scheme label.
    pub scheme: String,
    /// The plain roofline prediction.
    pub roofline: Prediction,
    /// The best tile (lowest time; ties go to less padding, larger tiles, more stages, larger K-tiles).
    pub best: TilingChoice,
    /// Every feasible candidate, fastest first.
    pub candidates: Vec<TilingChoice>,
    /// Defaults used for fields the profile lacks.
    pub assumptions: Vec<String>,
}

/// The hardware inputs, defaults filled in.
struct Chip {
    sm_count: u64,
    smem_per_sm: u64,
    regs_per_sm: u64,
    max_threads: u64,
    max_ctas: u64,
    l2_bytes: f64,
    clock_hz: Option<f64>,
}

fn chip(hw: &HardwareProfile) -> Result<(Chip, Vec<String>), CoreError> {
    let sm_count = hw.sm_count.ok_or_else(|| {
        CoreError::invalid(
            "sm_count",
            format!("missing in profile '{}'", hw.key),
            "the tiling model needs sm_count (and ideally l2_mb, smem_per_sm_kb, regs_per_sm, max_threads_per_sm, \
             max_ctas_per_sm) in the hardware profile",
        )
    })?;
    let mut notes = Vec::new();
    let smem_kb = hw.smem_per_sm_kb.unwrap_or_else(|| {
        notes.push(format!("smem_per_sm_kb not in profile: assumed {DEFAULT_SMEM_PER_SM_KB}"));
        DEFAULT_SMEM_PER_SM_KB
    });
    let regs = hw.regs_per_sm.unwrap_or_else(|| {
        notes.push(format!("regs_per_sm not in profile: assumed {DEFAULT_REGS_PER_SM}"));
        DEFAULT_REGS_PER_SM
    });
    let threads = hw.max_threads_per_sm.unwrap_or_else(|| {
        notes.push(format!("max_threads_per_sm not in profile: assumed {DEFAULT_MAX_THREADS_PER_SM}"));
        DEFAULT_MAX_THREADS_PER_SM
    });
    let ctas = hw.max_ctas_per_sm.unwrap_or_else(|| {
        notes.push(format!("max_ctas_per_sm not in profile: assumed {DEFAULT_MAX_CTAS_PER_SM}"));
        DEFAULT_MAX_CTAS_PER_SM
    });
    let l2_mb = hw.l2_mb.unwrap_or_else(|| {
        notes.push("l2_mb not in profile: no reuse across waves assumed".into());
        0.0
    });
    if hw.boost_clock_mhz.is_none() {
        notes.push("boost_clock_mhz not in profile: shared-memory bandwidth term skipped".into());
    }
    Ok((
        Chip {
            sm_count: u64::from(sm_count),
            smem_per_sm: (smem_kb * 1024.0) as u64,
            regs_per_sm: u64::from(regs),
            max_threads: u64::from(threads),
            max_ctas: u64::from(ctas),
            l2_bytes: l2_mb * 1e6,
            clock_hz: hw.boost_clock_mhz.map(|c| c * 1e6),
        },
        notes,
    ))
}

/// Waves of `tiles` over `slots` concurrent CTAs: `(waves, full_waves, last_wave_fill, wave_efficiency)`.
/// 1024 tiles on 132 slots: 7.76 waves, 8 full waves, last wave 100/132 = 76% full, efficiency 0.97.
pub fn waves(tiles: u64, slots: u64) -> (f64, u64, f64, f64) {
    let slots = slots.max(1);
    let w = tiles as f64 / slots as f64;
    let full = tiles.div_ceil(slots);
    let rem = tiles - (full.saturating_sub(1)) * slots;
    let last_fill = if full == 0 { 0.0 } else { rem as f64 / slots as f64 };
    let eff = if full == 0 { 1.0 } else { w / full as f64 };
    (w, full, last_fill, eff)
}

fn bytes_per_element(f: Format) -> f64 {
    f.effective_bits() / 8.0
}

/// Evaluates one tile shape for `gemm` on `hw`. `None` when the tile cannot be resident (too much shared
/// memory or registers for one CTA).
pub fn evaluate_tile(gemm: &Gemm, hw: &HardwareProfile, tile: TileShape) -> Result<Option<TilingChoice>, CoreError> {
    let (chip, _) = chip(hw)?;
    let roof = predict(gemm, hw)?;
    Ok(evaluate(gemm, hw, &chip, &roof, tile))
}

fn evaluate(gemm: &Gemm, hw: &HardwareProfile, c: &Chip, roof: &Prediction, t: TileShape) -> Option<TilingChoice> {
    let s = gemm.scheme;
    let ba = bytes_per_element(s.activations);
    let bb = bytes_per_element(s.weights);
    let bc = bytes_per_element(s.output);
    let (m, n, k, batch) = (gemm.m as f64, gemm.n as f64, gemm.k as f64, gemm.batch);

    // Resources of one CTA.
    let threads = if t.bm * t.bn >= 128 * 128 { 256 } else { 128 };
    let regs = (t.bm * t.bn).div_ceil(threads) + REGS_OVERHEAD_PER_THREAD;
    if regs > MAX_REGS_PER_THREAD {
        return None;
    }
    let regs = regs.div_ceil(8) * 8;
    let stage_bytes = ((t.bm * t.bk) as f64 * ba + (t.bn * t.bk) as f64 * bb).ceil() as u64;
    let stages =
        (MIN_STAGES..=MAX_STAGES).rev().find(|st| st * stage_bytes + SMEM_RESERVED_PER_CTA <= c.smem_per_sm)?;
    let smem = stages * stage_bytes;
    let limits = [
        (c.smem_per_sm / (smem + SMEM_RESERVED_PER_CTA), OccupancyLimit::SharedMemory),
        (c.regs_per_sm / (regs * threads), OccupancyLimit::Registers),
        (c.max_threads / threads, OccupancyLimit::Threads),
        (c.max_ctas, OccupancyLimit::Ctas),
    ];
    let (ctas_per_sm, occupancy_limit) = limits.into_iter().min_by_key(|(v, _)| *v)?;
    if ctas_per_sm == 0 {
        return None;
    }

    // Tiles and waves.
    let tiles_m = gemm.m.div_ceil(t.bm);
    let tiles_n = gemm.n.div_ceil(t.bn);
    let tiles = tiles_m * tiles_n * batch;
    let slots = c.sm_count * ctas_per_sm;
    let (w, full_waves, last_wave_fill, wave_efficiency) = waves(tiles, slots);
    let tile_utilization = (m * n) / ((tiles_m * t.bm) as f64 * (tiles_n * t.bn) as f64);

    // Compute: each wave runs ctas_per_sm tiles per SM at the SM's share of the peak.
    let peak_per_sm = roof.peak_tflops * 1e12 / c.sm_count as f64;
    let tile_flops = 2.0 * (t.bm * t.bn) as f64 * k;
    let time_compute_us = full_waves as f64 * ctas_per_sm as f64 * tile_flops / peak_per_sm * 1e6;

    // Global traffic. A swizzled order runs a group of about `slots` tiles together, as square as the grid
    // allows: each A row-panel is read once per group column span, each B column-panel once per group row span.
    let group_n = ((slots as f64).sqrt().ceil() as u64).clamp(1, tiles_n);
    let group_m = slots.div_ceil(group_n).clamp(1, tiles_m);
    let a_bytes = m * k * ba;
    let b_bytes = n * k * bb;
    let b_copies = if gemm.weights_shared { 1.0 } else { batch as f64 };
    let operands_fit_l2 = (a_bytes * batch as f64 + b_bytes * b_copies) <= c.l2_bytes * L2_USABLE_FRACTION;
    let (a_reads, b_reads) = if operands_fit_l2 {
        (1.0, 1.0)
    } else {
        ((tiles_n as f64 / group_n as f64).max(1.0), (tiles_m as f64 / group_m as f64).max(1.0))
    };
    let a_total = a_bytes * batch as f64;
    let b_total = b_bytes * b_copies;
    // Weights shared across the batch but not held in L2 are re-read per batch entry.
    let b_batch = if gemm.weights_shared && !operands_fit_l2 { batch as f64 } else { 1.0 };
    let dram_reads = a_total * a_reads + b_total * b_reads * b_batch;
    let requested = a_total * tiles_n as f64 + b_bytes * tiles_m as f64 * batch as f64;
    let out = m * n * bc * batch as f64;
    let dram_bytes = dram_reads + out;
    let l2_hit_rate = if requested > 0.0 { (1.0 - dram_reads / requested).clamp(0.0, 1.0) } else { 0.0 };

    // DRAM time at full bandwidth, priced as the roofline prices an op's bytes (`stream_time_us`: with a
    // read-stream calibration the operand reads at the read rate, C's writes at what a copy leaves them), and the
    // rate that makes: the bandwidth the fractions below scale.
    let (stream_us, _) = hw.stream_time_us(dram_bytes as u64, out as u64);
    let bw = if stream_us > 0.0 { dram_bytes / stream_us * 1e6 } else { hw.memory_bandwidth_gb_s * 1e9 };
    // Achievable bandwidth: enough SMs busy, and enough bytes in flight per SM (Little's law).
    let active_ctas = tiles.min(slots);
    let active_sms = active_ctas.min(c.sm_count) as f64; // the scheduler spreads CTAs over SMs first
    let sm_share = (active_sms * SM_BANDWIDTH_SHARE / c.sm_count as f64).min(1.0);
    let per_sm_ctas = (active_ctas as f64 / active_sms.max(1.0)).max(1.0);
    let in_flight = per_sm_ctas * (stages - 1) as f64 * stage_bytes as f64;
    let needed = bw / c.sm_count as f64 * DRAM_LATENCY_NS * 1e-9;
    let latency_share = (in_flight / needed).min(1.0);
    let bandwidth_fraction = sm_share.min(latency_share);
    let time_memory_us = dram_bytes / (bw * bandwidth_fraction) * 1e6;

    // Shared-memory operand reads: every K-step reads the A and B slices once per CTA.
    let time_smem_us = c.clock_hz.map_or(0.0, |clk| {
        let per_tile = k * ((t.bm as f64) * ba + (t.bn as f64) * bb);
        full_waves as f64 * ctas_per_sm as f64 * per_tile / (SMEM_BYTES_PER_CLOCK * clk) * 1e6
    });

    let (roof_us, bound) = [
        (time_compute_us, TileBound::Compute),
        (time_memory_us, TileBound::Memory),
        (time_smem_us, TileBound::SharedMemory),
    ]
    .into_iter()
    .max_by(|a, b| a.0.total_cmp(&b.0))
    .unwrap_or((time_compute_us, TileBound::Compute));
    let time_us = roof_us + roof.overhead_us;
    Some(TilingChoice {
        tile: t,
        threads_per_cta: threads,
        regs_per_thread: regs,
        stages,
        smem_per_cta_bytes: smem,
        ctas_per_sm,
        occupancy_limit,
        tiles_m,
        tiles_n,
        tiles,
        concurrent_ctas: slots,
        waves: w,
        full_waves,
        last_wave_fill,
        wave_efficiency,
        tile_utilization,
        group_m,
        group_n,
        operands_fit_l2,
        a_reads,
        b_reads: b_reads * b_batch,
        l2_requested_bytes: requested as u64,
        dram_bytes: dram_bytes as u64,
        l2_hit_rate,
        bandwidth_fraction,
        time_compute_us,
        time_memory_us,
        time_smem_us,
        time_us,
        bound,
        roofline_time_us: roof.time_us,
        efficiency: roof.time_us / time_us,
    })
}

/// Candidate order: time, then (on ties) fewer padded outputs, larger tiles, more stages, larger K-tiles.
fn rank_order(a: &TilingChoice, b: &TilingChoice) -> std::cmp::Ordering {
    a.time_us
        .total_cmp(&b.time_us)
        .then(b.tile_utilization.total_cmp(&a.tile_utilization))
        .then((b.tile.bm * b.tile.bn).cmp(&(a.tile.bm * a.tile.bn)))
        .then(b.stages.cmp(&a.stages))
        .then(b.tile.bk.cmp(&a.tile.bk))
}

/// Runs the tiling model: every candidate tile (or the requested one), fastest first.
pub fn tiling_report(req: &TilingRequest, hw: &HardwareProfile) -> Result<TilingReport, CoreError> {
    let scheme = req.scheme.unwrap_or(Scheme::uniform(Format::FP16));
    let gemm = Gemm::batched(req.batch, req.m, req.n, req.k, true, scheme)?;
    tiling_for(&gemm, hw, req.tile)
}

/// Runs the tiling model on a GEMM (batched, shared weights or not): every candidate tile, or only `tile`.
pub fn tiling_for(gemm: &Gemm, hw: &HardwareProfile, tile: Option<TileShape>) -> Result<TilingReport, CoreError> {
    let gemm = *gemm;
    let scheme = gemm.scheme;
    let (chip, assumptions) = chip(hw)?;
    let roof = predict(&gemm, hw)?;
    let tiles: Vec<TileShape> = match tile {
        Some(t) => vec![t],
        None => CANDIDATE_MN
            .iter()
            .flat_map(|&(bm, bn)| CANDIDATE_K.iter().map(move |&bk| TileShape { bm, bn, bk }))
            .collect(),
    };
    let mut candidates: Vec<TilingChoice> =
        tiles.into_iter().filter_map(|t| evaluate(&gemm, hw, &chip, &roof, t)).collect();
    candidates.sort_by(rank_order);
    let best = candidates.first().cloned().ok_or_else(|| {
        CoreError::invalid(
            "tile",
            tile.map_or("candidate set".to_string(), |t| t.label()),
            format!("a tile whose {MIN_STAGES}-stage shared memory and registers fit one SM of {}", hw.name),
        )
    })?;
    Ok(TilingReport {
        hardware: hw.key.clone(),
        hardware_name: hw.name.clone(),
        m: gemm.m,
        n: gemm.n,
        k: gemm.k,
        batch: gemm.batch,
        scheme: scheme.label(),
        roofline: roof,
        best,
        candidates,
        assumptions,
    })
}

/// The roofline prediction corrected by the best tile: `time_us` is the tiled time, `attainable_tflops`
/// follows, and the note names the tile and its efficiency. The plain roofline is `predict`'s answer
/// (also in `TilingChoice::roofline_time_us`).
pub fn predict_tiled(gemm: &Gemm, hw: &HardwareProfile) -> Result<(Prediction, TilingChoice), CoreError> {
    let report = tiling_for(gemm, hw, None)?;
    let choice = report.best;
    let roof = report.roofline;
    let mut p = roof;
    p.time_us = choice.time_us;
    p.attainable_tflops = if p.time_us > 0.0 { p.flops as f64 / (p.time_us * 1e6) } else { 0.0 };
    let note =
        format!("tiled: {} tile, {:.2} waves, efficiency {:.2}", choice.tile.label(), choice.waves, choice.efficiency);
    p.note = Some(match p.note.take() {
        Some(n) => format!("{n}; {note}"),
        None => note,
    });
    Ok((p, choice))
}

/// Renders a tiling report: the plain roofline, the best tile, and the candidate table.
pub fn render_tiling(r: &TilingReport) -> String {
    let mut s = String::new();
    let b = &r.best;
    let _ = writeln!(
        s,
        "{} ({}), {} x {} x {} batch {}, {}",
        r.hardware_name, r.hardware, r.m, r.n, r.k, r.batch, r.scheme
    );
    let _ = writeln!(
        s,
        "roofline: {:.2} us ({}-bound, AI {:.1}, ridge {:.0})",
        r.roofline.time_us,
        r.roofline.bound.as_str(),
        r.roofline.arithmetic_intensity,
        r.roofline.ridge_ai
    );
    let _ = writeln!(
        s,
        "tiled:    {:.2} us with {} ({} stages, {} KB smem, {} CTA/SM limited by {:?}), {} tiles, {:.2} waves, last \
         wave {:.0}% full, L2 hit {:.0}%, efficiency {:.2}",
        b.time_us,
        b.tile.label(),
        b.stages,
        b.smem_per_cta_bytes / 1024,
        b.ctas_per_sm,
        b.occupancy_limit,
        b.tiles,
        b.waves,
        b.last_wave_fill * 100.0,
        b.l2_hit_rate * 100.0,
        b.efficiency
    );
    let _ = writeln!(
        s,
        "{:<12} {:>6} {:>7} {:>6} {:>7} {:>6} {:>6} {:>7} {:>7} {:>7} {:>9} {:>10}  bound",
        "tile",
        "stages",
        "smem_KB",
        "CTA/SM",
        "tiles",
        "waves",
        "last%",
        "A_reads",
        "B_reads",
        "L2_hit%",
        "time_us",
        "efficiency"
    );
    for c in &r.candidates {
        let _ = writeln!(
            s,
            "{:<12} {:>6} {:>7} {:>6} {:>7} {:>6.2} {:>6.0} {:>7.2} {:>7.2} {:>7.1} {:>9.2} {:>10.3}  {:?}",
            c.tile.label(),
            c.stages,
            c.smem_per_cta_bytes / 1024,
            c.ctas_per_sm,
            c.tiles,
            c.waves,
            c.last_wave_fill * 100.0,
            c.a_reads,
            c.b_reads,
            c.l2_hit_rate * 100.0,
            c.time_us,
            c.efficiency,
            c.bound
        );
    }
    for a in &r.assumptions {
        let _ = writeln!(s, "assumed: {a}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::ComputeClass;

    /// A hand-built Hopper-like chip: 132 SMs, 50 MB L2, 228 KB shared memory per SM.
    fn hopper_like() -> HardwareProfile {
        let mut hw = HardwareProfile::custom(
            3350.0,
            &[(ComputeClass::FP16, 989.0), (ComputeClass::BF16, 989.0), (ComputeClass::FP8, 1979.0)],
        )
        .unwrap();
        hw.sm_count = Some(132);
        hw.l2_mb = Some(50.0);
        hw.smem_per_sm_kb = Some(228.0);
        hw.regs_per_sm = Some(65536);
        hw.max_threads_per_sm = Some(2048);
        hw.max_ctas_per_sm = Some(32);
        hw.boost_clock_mhz = Some(1830.0);
        hw
    }

    fn fp16(m: u64, n: u64, k: u64) -> Gemm {
        Gemm::new(m, n, k, Scheme::uniform(Format::FP16)).unwrap()
    }

    #[test]
    fn wave_arithmetic_hand_checked() {
        let (w, full, last, eff) = waves(1024, 132);
        assert!((w - 7.7576).abs() < 1e-4, "{w}");
        assert_eq!(full, 8);
        assert!((last - 100.0 / 132.0).abs() < 1e-12 && (last - 0.76).abs() < 0.005, "{last}");
        assert!((eff - 1024.0 / 1056.0).abs() < 1e-12);
        assert_eq!(waves(264, 132), (2.0, 2, 1.0, 1.0));
    }

    #[test]
    fn one_cta_per_sm_4096_cubed_128x128() {
        // 128 KB of shared memory: a 3-stage 128x128x64 FP16 tile (96 KB) fits once per SM.
        let mut hw = hopper_like();
        hw.smem_per_sm_kb = Some(128.0);
        let t = TileShape { bm: 128, bn: 128, bk: 64 };
        let c = evaluate_tile(&fp16(4096, 4096, 4096), &hw, t).unwrap().unwrap();
        assert_eq!(c.stages, 3);
        assert_eq!(c.smem_per_cta_bytes, 3 * (128 * 64 * 2 + 128 * 64 * 2));
        assert_eq!((c.ctas_per_sm, c.occupancy_limit), (1, OccupancyLimit::SharedMemory));
        assert_eq!((c.tiles_m, c.tiles_n, c.tiles), (32, 32, 1024));
        assert!((c.waves - 7.76).abs() < 0.005, "{}", c.waves);
        assert!((c.last_wave_fill - 0.76).abs() < 0.005);
        // compute time: 8 waves of one 128x128x4096 tile per SM at 1/132 of the peak
        let expected = 8.0 * 2.0 * 128.0 * 128.0 * 4096.0 / (989e12 / 132.0) * 1e6;
        assert!((c.time_compute_us - expected).abs() < 1e-9 * expected);
        assert_eq!(c.bound, TileBound::Compute);
        assert!((c.efficiency - 1024.0 / 1056.0).abs() < 1e-9, "{}", c.efficiency);
    }

    #[test]
    fn occupancy_limits() {
        let hw = hopper_like();
        let g = fp16(4096, 4096, 4096);
        // 228 KB: two 97 KB CTAs; registers 2 x 256 x 104 = 53 K of 64 K
        let c = evaluate_tile(&g, &hw, TileShape { bm: 128, bn: 128, bk: 64 }).unwrap().unwrap();
        assert_eq!((c.stages, c.ctas_per_sm, c.regs_per_thread), (4, 1, 104));
        let c = evaluate_tile(&g, &hw, TileShape { bm: 128, bn: 128, bk: 32 }).unwrap().unwrap();
        assert_eq!((c.stages, c.ctas_per_sm, c.occupancy_limit), (4, 2, OccupancyLimit::Registers));
        let c = evaluate_tile(&g, &hw, TileShape { bm: 64, bn: 64, bk: 32 }).unwrap().unwrap();
        // registers allow 65536 / (72 x 128) = 7, shared memory 233472 / (4 x 8192 + 1024) = 6
        assert_eq!(c.regs_per_thread, 72);
        assert_eq!((c.ctas_per_sm, c.occupancy_limit), (6, OccupancyLimit::SharedMemory));
        // rejected: 256 accumulators per thread exceed 255 registers; two 192 KB stages exceed 228 KB
        assert!(evaluate_tile(&g, &hw, TileShape { bm: 256, bn: 256, bk: 64 }).unwrap().is_none());
        assert!(evaluate_tile(&g, &hw, TileShape { bm: 256, bn: 128, bk: 256 }).unwrap().is_none());
    }

    #[test]
    fn l2_reuse() {
        let hw = hopper_like();
        let t = TileShape { bm: 128, bn: 128, bk: 64 };
        // 1024^3 FP16: A + B = 4 MB fit the 37.5 MB usable L2: each read once
        let c = evaluate_tile(&fp16(1024, 1024, 1024), &hw, t).unwrap().unwrap();
        assert!(c.operands_fit_l2);
        assert_eq!(c.dram_bytes, 3 * 1024 * 1024 * 2);
        let requested = (1024 * 1024 * 2 * 8 * 2) as f64;
        assert!((c.l2_hit_rate - (1.0 - 4.0 * 1024.0 * 1024.0 / requested)).abs() < 1e-12);
        // 8192^3 FP16: A + B = 256 MB do not fit; re-reads follow the swizzle group (132 slots: 12 x 11)
        let c = evaluate_tile(&fp16(8192, 8192, 8192), &hw, t).unwrap().unwrap();
        assert!(!c.operands_fit_l2);
        assert_eq!((c.group_n, c.group_m), (12, 11));
        assert!((c.a_reads - 64.0 / 12.0).abs() < 1e-12 && (c.b_reads - 64.0 / 11.0).abs() < 1e-12);
        assert!(c.l2_hit_rate > 0.8 && c.l2_hit_rate < 1.0, "{}", c.l2_hit_rate);
    }

    #[test]
    fn best_tile_and_predict_tiled() {
        let hw = hopper_like();
        let g = fp16(4096, 4096, 4096);
        let (p, choice) = predict_tiled(&g, &hw).unwrap();
        let plain = predict(&g, &hw).unwrap();
        assert!(p.time_us >= plain.time_us);
        assert!(choice.efficiency > 0.8 && choice.efficiency <= 1.0, "{}", choice.efficiency);
        // ties at equal time go to the larger tile: 128x256 (or 256x128), 512 tiles, 3.88 waves
        assert_eq!((choice.tile.bm * choice.tile.bn, choice.tiles), (128 * 256, 512));
        assert!(p.note.as_deref().unwrap_or("").contains(&choice.tile.label()));
        let report =
            tiling_report(&TilingRequest { m: 4096, n: 4096, k: 4096, batch: 1, scheme: None, tile: None }, &hw)
                .unwrap();
        assert_eq!(report.best.time_us, choice.time_us);
        assert!(report.candidates.windows(2).all(|w| w[0].time_us <= w[1].time_us));
        assert_eq!(report.candidates.len(), 18);
        assert!(render_tiling(&report).contains("roofline:"));
        // decode GEMV: the best tile spreads the weights over enough SMs to pull full bandwidth
        let (_, gemv) = predict_tiled(&fp16(1, 4096, 4096), &hw).unwrap();
        assert_eq!((gemv.tile.bm, gemv.tile.bn), (64, 64));
        assert!(gemv.bandwidth_fraction > 0.9, "{}", gemv.bandwidth_fraction);
        assert_eq!(gemv.bound, TileBound::Memory);
    }

    #[test]
    fn a_read_calibrated_profile_streams_the_operands_at_the_read_rate() {
        // A decode GEMV is all reads: on a profile whose read stream runs 1.25x its copy, the tiled memory
        // time is the roofline's stream time over the same bandwidth fraction, 1.25x shorter for the reads.
        let copy_only = hopper_like();
        let mut read = hopper_like();
        read.read_bandwidth_gb_s = Some(3350.0 * 1.25);
        let g = fp16(1, 4096, 4096);
        let t = Some(TileShape { bm: 64, bn: 64, bk: 64 });
        let a = tiling_for(&g, &copy_only, t).unwrap().best;
        let b = tiling_for(&g, &read, t).unwrap().best;
        assert_eq!(a.dram_bytes, b.dram_bytes);
        let (stream_us, _) = read.stream_time_us(b.dram_bytes, 4096 * 2);
        assert!((b.time_memory_us - stream_us / b.bandwidth_fraction).abs() < 1e-9, "{b:?}");
        let ratio = a.time_memory_us / b.time_memory_us;
        // 4096 x 2 of the ~33.6 MB are C's writes, priced above the copy rate: just under 1.25
        assert!(ratio > 1.24 && ratio < 1.25, "{ratio}");
    }

    #[test]
    fn batched_without_shared_weights_reads_each_b() {
        // 8 attention-like products, each with its own 128x1024 right operand: B traffic scales with the batch
        let hw = hopper_like();
        let s = Scheme::uniform(Format::FP16);
        let own = Gemm::batched(8, 128, 128, 1024, false, s).unwrap();
        let report = tiling_for(&own, &hw, Some(TileShape { bm: 128, bn: 128, bk: 64 })).unwrap();
        let c = &report.best;
        assert_eq!(c.tiles, 8);
        assert!(c.operands_fit_l2);
        assert_eq!(c.dram_bytes, own.bytes().unwrap());
        assert!(report.assumptions.is_empty(), "{:?}", report.assumptions);
    }

    #[test]
    fn needs_sm_count_and_parses_tiles() {
        let seed = HardwareProfile::preset("seed-gb10").unwrap();
        let err = predict_tiled(&fp16(16, 16, 16), &seed).unwrap_err().to_string();
        assert!(err.contains("sm_count"), "{err}");
        assert_eq!("128x256".parse::<TileShape>().unwrap(), TileShape { bm: 128, bn: 256, bk: 64 });
        assert_eq!("64X64x32".parse::<TileShape>().unwrap(), TileShape { bm: 64, bn: 64, bk: 32 });
        assert!("128".parse::<TileShape>().is_err());
        assert!("0x64".parse::<TileShape>().is_err());
    }
}
