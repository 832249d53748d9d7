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
use super::{launch_cluster_ex, max_active_clusters, nvrtc_available};
use crate::{Gpu, GpuError};

/// The kernel (appended to the x-in-registers source and the streaming helpers).
pub const RING_SOURCE: &str = include_str!("../../kernels/wo_ring.cu");

mod plan;
#[cfg(test)]
mod tests;

pub use plan::*;

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

/// A ring GEMV compiled for one shape: its plan, its units in flight and NVRTC's CUBIN and log.
pub struct RingBuild {
    plan: Plan,
    rows: usize,
    ahead: usize,
    /// Whether the producer's first copies go out before the scale tables' ([`early_copies`]).
    early: bool,
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
             {} rows of x{}{}",
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
            if p.mma { ", on the tensor cores" } else { "" },
            if self.early { ", first copies before the scale tables'" } else { "" }
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
    let early = early_copies(format, m, &plan, (epilogue, input));
    let mut opts =
        options(arch, (format, x), (m, fd), per, layout, (parts, groups, ahead, mma, early), (epilogue, input));
    opts.push(format!("-DRW_SPLITS={splits}"));
    if let Some(shares) = split_override(n / STEP_ROWS).map_err(GpuError::Unsupported)?.filter(|_| !mma) {
        opts.push(split_defines(&shares));
    }
    opts.extend(defines.iter().map(|d| d.to_string()));
    let (cubin, log) = compile_cubin_cached(&source(), "wo_ring.cu", &opts)?;
    Ok(RingBuild { plan, rows: m, ahead, early, cubin, log })
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
    /// Whether the producer warp's first copies go out before the other warps issue the scale tables'
    /// (`ring::early_copies`).
    pub early_copies: bool,
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
            early_copies: early_copies(format, m, &plan, (epilogue, input)),
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
    (parts, groups, ahead, mma, early): (usize, usize, usize, bool, bool),
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
    if early {
        opts.push("-DRW_EARLY=1".into());
    }
    if nf4_tensor_sums(format, mma, m, k) {
        opts.push("-DNF4_TC=1".into());
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
