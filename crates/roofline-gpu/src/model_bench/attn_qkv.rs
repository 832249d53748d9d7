//! The fused step's qkv projection inside the cluster attention (`kernels/attn_qkv.cu`): one launch computes
//! qkv = W_qkv rmsnorm(x) and the attention of the new token, batch 1, 4-bit weights on the ring GEMV's
//! layout (INT4 g128, MXFP4, NVFP4), sm_90+.
//!
//! A KV head's attention needs only its GQA q rows, its k row and its v row of qkv, so a thread-block
//! cluster per KV head computes those ((GQA + 2) x 128 rows of W_qkv) with the ring GEMV's streaming and
//! then attends as `attn_cluster` does: the grid-wide dependency between the two kernels (a kernel boundary)
//! becomes a cluster barrier, and the attention's cache rows are requested before the weights stream.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute_enum as A;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use crate::weight_only::ffn::{stream_options, STREAM_SOURCE};
use crate::weight_only::nvrtc::{compile_cubin, extra_options, load_checked, WEIGHT_ONLY_XREG_SOURCE};
use crate::weight_only::ring::{self, RING_SOURCE};
use crate::weight_only::{launch_cluster_ex, max_active_clusters, nvrtc_available, DeviceWeights, WoFormat, XDtype};
use crate::GpuError;

use super::HEAD_DIM;

/// The kernel (appended to the ring GEMV's sources and the cluster attention's device functions).
pub const ATTN_QKV_SOURCE: &str = include_str!("../kernels/attn_qkv.cu");
/// The cluster attention's device functions (`attn_cluster` and `attn_qkv` both call them).
pub const ATTN_CLUSTER_SOURCE: &str = include_str!("../kernels/attn_cluster.cuh");

/// Warps of the attention (`CW`): the ring's consumer warps, K / 1024 per row group.
const ATTN_WARPS: usize = 8;
/// Rows per row step of the ring.
const STEP_ROWS: usize = 8;
/// Most CTAs per cluster.
const MAX_CLUSTER: u32 = 16;

/// Cluster sizes and the CTAs per SM the kernel's registers are capped for, tried in this order (the first
/// whose clusters are all resident with the deepest ring wins). An H100 holds 7 clusters of 16 CTAs at one
/// CTA per SM (its GPCs), fewer than Llama-3.1-8B's 8 KV heads; 12 CTAs leave each a deep ring.
const CANDIDATES: [(u32, u32); 7] = [(16, 1), (12, 1), (16, 2), (8, 1), (8, 2), (4, 1), (2, 1)];

/// Shape of one fused launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkvShape {
    /// Weight format of W_qkv.
    pub format: WoFormat,
    /// Tokens decoded together (must be 1).
    pub batch: usize,
    /// Hidden size (K of W_qkv).
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// FP8 E4M3 KV cache (else FP16).
    pub kv8: bool,
}

impl QkvShape {
    /// q heads per KV head.
    fn gqa(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// Row steps of one KV head's block of W_qkv.
    fn block_steps(&self) -> usize {
        (self.gqa() + 2) * HEAD_DIM / STEP_ROWS
    }

    /// Bytes of the attention's two K / V stages at the start of the dynamic shared memory.
    fn kv_bytes(&self) -> usize {
        2 * ATTN_WARPS * 8 * 2 * 32 * if self.kv8 { 4 } else { 8 }
    }

    /// Row groups of the ring (K / 1024 warps each) that make the attention's 8 warps.
    fn groups(&self) -> usize {
        ATTN_WARPS / (self.hidden / 1024).max(1)
    }

    /// Dynamic shared memory for `steps` row steps per CTA with `slots` ring slots.
    fn smem(&self, steps: usize, slots: usize) -> usize {
        self.kv_bytes()
            + slots * STEP_ROWS * self.hidden / 2
            + ring::tables_bytes(self.format, self.hidden, steps * STEP_ROWS)
    }
}

/// Why the fused kernel cannot run `s` (`None`: it can, given a GPU whose clusters fit).
pub fn unsupported(s: &QkvShape) -> Option<String> {
    if !matches!(s.format, WoFormat::Int4G128 | WoFormat::Mxfp4 | WoFormat::Nvfp4) {
        return Some(format!(
            "the fused qkv + attention kernel takes INT4 g128, MXFP4 or NVFP4 weights, not {}",
            s.format.format()
        ));
    }
    if s.batch != 1 {
        return Some(format!("the fused qkv + attention kernel decodes one token, not a batch of {}", s.batch));
    }
    if !matches!(s.hidden, 1024 | 2048 | 4096 | 8192) {
        return Some(format!("the fused qkv + attention kernel needs a hidden size of 1024, 2048, 4096 or 8192 (its 8 attention warps are K / 1024 x row groups), not {}", s.hidden));
    }
    if s.kv_heads == 0 || s.heads % s.kv_heads != 0 || s.gqa() > 8 {
        return Some(format!(
            "the fused qkv + attention kernel needs at most 8 q heads per KV head, not {} / {}",
            s.heads, s.kv_heads
        ));
    }
    None
}

/// The fused qkv projection + cluster attention for one model shape on one GPU.
pub struct QkvAttention {
    ctx: Arc<CudaContext>,
    function: CudaFunction,
    /// The shape it was built for.
    pub shape: QkvShape,
    /// CTAs per cluster (one cluster per KV head).
    pub cluster: u32,
    /// Row steps (8 rows of W_qkv) per CTA.
    pub steps: usize,
    /// Ring slots per CTA.
    pub slots: usize,
    /// Clusters the GPU can hold at once (at least the KV heads).
    pub resident: u32,
    /// Registers per thread (from the driver; a build that spills is refused).
    pub registers: u32,
    /// CTAs per SM the registers were capped for (`__launch_bounds__`).
    pub min_blocks: u32,
    threads: u32,
    smem: u32,
}

impl QkvAttention {
    /// Compiles the kernel for `shape` (sm_90+) and picks its cluster size and ring depth: the first of
    /// [`CANDIDATES`] (cluster sizes that divide the KV head's row steps, at most one CTA per SM over all KV
    /// heads; a build that spills is skipped) with the deepest ring with which every KV head's cluster is
    /// resident at once.
    pub(crate) fn build(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        arch: u32,
        sm_count: u32,
        shape: QkvShape,
    ) -> Result<QkvAttention, GpuError> {
        if let Some(why) = unsupported(&shape) {
            return Err(GpuError::Unsupported(why));
        }
        if arch < 90 {
            return Err(GpuError::Unsupported(format!(
                "the fused qkv + attention kernel runs on thread-block clusters with bulk copies (sm_90+), this is sm_{arch}"
            )));
        }
        nvrtc_available()?;
        let groups = shape.groups();
        let heads = shape.kv_heads as u32;
        // (CTAs per cluster, CTAs per SM the registers are capped for), in order of preference; the cluster
        // size can be forced with ROOFLINE_AQ_CLUSTER for tuning experiments.
        let forced: Option<u32> = std::env::var("ROOFLINE_AQ_CLUSTER").ok().and_then(|v| v.parse().ok());
        let clusters: Vec<(u32, u32)> = CANDIDATES
            .into_iter()
            .filter(|&(c, _)| forced.is_none_or(|f| f == c))
            .filter(|&(c, _)| c <= MAX_CLUSTER && shape.block_steps() % c as usize == 0 && heads * c <= sm_count.max(2))
            .collect();
        // The attention's warps are the ring's consumers; no producer warp (RW_PRODUCER=0).
        let threads = (ATTN_WARPS * 32) as u32;
        let compile = |cl: u32, minb: u32, slots: usize| -> Result<(CudaFunction, u32, usize), GpuError> {
            let steps = shape.block_steps() / cl as usize;
            let smem = shape.smem(steps, slots);
            let (cubin, log) =
                compile_cubin(&source(), "attn_qkv.cu", &options(arch, &shape, steps, slots, groups, minb))?;
            let (f, regs) = load_checked(ctx, cubin, &log, "attn_qkv", "the fused qkv + attention kernel", smem as u32)
                .map_err(|e| {
                    GpuError::Unsupported(format!(
                        "{e} (clusters of {cl}, {slots} ring slots, {smem} bytes of shared memory)"
                    ))
                })?;
            if cl > 8 {
                f.set_attribute(A::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
                    .map_err(|e| GpuError::Unsupported(format!("clusters of {cl} CTAs (non-portable size): {e}")))?;
            }
            Ok((f, regs, smem))
        };
        let mut last = String::from("no cluster size divides the KV head's rows");
        for &(cl, minb) in &clusters {
            let steps = shape.block_steps() / cl as usize;
            let deepest = steps.div_ceil(groups) * groups;
            let (probe, probe_regs, _) = match compile(cl, minb, deepest) {
                Ok(v) => v,
                Err(e) => {
                    last = format!("clusters of {cl}: {e}");
                    continue;
                }
            };
            // Deepest ring first; each CTA needs at least one slot per row group.
            for slots in (1..=deepest / groups).rev().map(|s| s * groups) {
                let smem = shape.smem(steps, slots);
                if smem > 227 * 1024 {
                    continue;
                }
                if let Err(e) = probe.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32) {
                    last = format!("{smem} bytes of dynamic shared memory: {e}");
                    continue;
                }
                match max_active_clusters(stream, &probe, (threads, 1, 1), smem as u32, (cl, 1)) {
                    Ok(n) if n >= heads => {
                        let (function, registers, smem) =
                            if slots == deepest { (probe, probe_regs, smem) } else { compile(cl, minb, slots)? };
                        let resident = max_active_clusters(stream, &function, (threads, 1, 1), smem as u32, (cl, 1))?;
                        if resident < heads {
                            return Err(GpuError::Unsupported(format!(
                                "the fused qkv + attention kernel: {resident} clusters of {cl} fit at once, {heads} needed"
                            )));
                        }
                        return Ok(QkvAttention {
                            ctx: ctx.clone(),
                            function,
                            shape,
                            cluster: cl,
                            steps,
                            slots,
                            resident,
                            registers,
                            min_blocks: minb,
                            threads,
                            smem: smem as u32,
                        });
                    }
                    Ok(n) => {
                        last = format!("{n} clusters of {cl} CTAs with a {slots}-slot ring fit at once, {heads} needed")
                    }
                    Err(e) => last = format!("clusters of {cl}: {e}"),
                }
            }
        }
        Err(GpuError::Unsupported(format!("the fused qkv + attention kernel cannot be resident: {last}")))
    }

    /// One launch: qkv = W rmsnorm(x) (eps; the norm's weight folded into `w`), then the attention of
    /// position `len - 1` over the caches (`smax` positions per KV head; the new k and v appended) into
    /// `out`. `w`: W_qkv staged for the x-in-registers engine (its codes and transposed tables).
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &self,
        stream: &Arc<CudaStream>,
        w: &DeviceWeights,
        x: &CudaSlice<u16>,
        qkv: &mut CudaSlice<u16>,
        kc: &CudaSlice<u8>,
        vc: &CudaSlice<u8>,
        out: &mut CudaSlice<u16>,
        len: usize,
        smax: usize,
        theta: f32,
        kv_scales: (f32, f32),
        eps: f32,
        pdl: bool,
    ) -> Result<(), GpuError> {
        let sh = &self.shape;
        let rows = (sh.heads + 2 * sh.kv_heads) * HEAD_DIM;
        let rb = w.ring_buffers().ok_or_else(|| {
            GpuError::Unsupported(
                "the fused qkv + attention kernel reads weights staged for the x-in-registers engine".into(),
            )
        })?;
        let (codes, scales, zeros, gscale) = (rb.codes, rb.scales, rb.zeros, rb.global_scale);
        if w.format != sh.format || w.n != rows || w.k != sh.hidden {
            return Err(GpuError::Unsupported(format!(
                "the fused qkv + attention kernel was built for {} {rows}x{}, got {} {}x{}",
                sh.format.format(),
                sh.hidden,
                w.format.format(),
                w.n,
                w.k
            )));
        }
        let elem = if sh.kv8 { 1 } else { 2 };
        let cache = sh.kv_heads * smax * HEAD_DIM * elem;
        if len == 0
            || len > smax
            || x.len() < sh.hidden
            || qkv.len() < rows
            || out.len() < sh.heads * HEAD_DIM
            || kc.len() < cache
            || vc.len() < cache
        {
            return Err(GpuError::Unsupported(format!(
                "the fused qkv + attention kernel got len {len} of {smax}, x {} values, qkv {}, out {}, caches {} / {} bytes",
                x.len(),
                qkv.len(),
                out.len(),
                kc.len(),
                vc.len()
            )));
        }
        if !(eps.is_finite() && eps > 0.0 && gscale.is_finite()) {
            return Err(GpuError::Unsupported(format!(
                "the fused qkv + attention kernel got eps {eps}, tensor scale {gscale}"
            )));
        }
        if stream.context().cu_ctx() != self.ctx.cu_ctx() {
            return Err(GpuError::Unsupported(
                "the fused qkv + attention kernel runs on a stream of its own context".into(),
            ));
        }
        let (mut wp, _g0) = codes.device_ptr(stream);
        let (mut sp, _g1) = scales.device_ptr(stream);
        let (mut zp, _g2) = zeros.device_ptr(stream);
        let (mut xp, _g3) = x.device_ptr(stream);
        let (mut qp, _g4) = qkv.device_ptr_mut(stream);
        let (mut kp, _g5) = kc.device_ptr(stream);
        let (mut vp, _g6) = vc.device_ptr(stream);
        let (mut op, _g7) = out.device_ptr_mut(stream);
        let (mut len, mut hq, mut hkv, mut smax) = (len as i32, sh.heads as i32, sh.kv_heads as i32, smax as i32);
        let mut scale = 1.0f32 / (HEAD_DIM as f32).sqrt();
        let (mut theta, mut ks, mut vs, mut eps, mut gs) = (theta, kv_scales.0, kv_scales.1, eps, gscale);
        let mut params: [*mut c_void; 18] = [
            (&raw mut wp).cast(),
            (&raw mut sp).cast(),
            (&raw mut zp).cast(),
            (&raw mut xp).cast(),
            (&raw mut qp).cast(),
            (&raw mut kp).cast(),
            (&raw mut vp).cast(),
            (&raw mut op).cast(),
            (&raw mut len).cast(),
            (&raw mut hq).cast(),
            (&raw mut hkv).cast(),
            (&raw mut smax).cast(),
            (&raw mut scale).cast(),
            (&raw mut theta).cast(),
            (&raw mut ks).cast(),
            (&raw mut vs).cast(),
            (&raw mut eps).cast(),
            (&raw mut gs).cast(),
        ];
        // SAFETY: the parameters match attn_qkv(const uint4* w, const u8* w_s, const u8* w_z, const u16* x,
        // u16* qkv, kv_t* kc, kv_t* vc, u16* out, int len, int hq, int hkv, int smax, float scale, float theta,
        // float k_scale, float v_scale, float eps, float gscale) in order and type, each pointing at a local
        // that lives through the launch. The weights are W_qkv's (rows x hidden, the x-in-registers tables,
        // checked above), x holds hidden values, qkv the rows, out heads x 128, the caches kv_heads x smax x
        // 128 elements of the KV8 type the kernel was built for, len <= smax; the grid is one cluster of
        // `cluster` CTAs per KV head (batch 1), each taking the AQ_STEPS = `steps` it was compiled with, and
        // the dynamic shared memory is `smem` (its attribute set in `build`, the cluster size checked resident
        // there). PDL: before its griddepcontrol.wait the kernel reads only the weights, their tables and the
        // cache rows below the new position, which no kernel of the step writes.
        unsafe {
            launch_cluster_ex(
                stream,
                &self.function,
                (self.cluster, sh.kv_heads as u32, 1),
                (self.threads, 1, 1),
                self.smem,
                pdl,
                (self.cluster, 1),
                &mut params,
            )
        }
    }
}

/// The kernel's source: the ring GEMV's (without its kernel), the cluster attention's functions, `attn_qkv`.
fn source() -> String {
    format!("{WEIGHT_ONLY_XREG_SOURCE}\n{STREAM_SOURCE}\n{RING_SOURCE}\n{ATTN_CLUSTER_SOURCE}\n{ATTN_QKV_SOURCE}")
}

fn options(arch: u32, s: &QkvShape, steps: usize, slots: usize, groups: usize, minb: u32) -> Vec<String> {
    let mut opts = stream_options(arch, s.format, XDtype::F16, s.hidden);
    opts.push(format!("-DAQ_MINB={minb}"));
    opts.push("-DRING_NO_KERNEL=1".into());
    opts.push("-DRW_PRODUCER=0".into());
    opts.push(format!("-DRW_STEPS={slots}"));
    opts.push(format!("-DRW_ROWS={}", steps * STEP_ROWS));
    opts.push(format!("-DRW_GROUPS={groups}"));
    opts.push("-DNORM=1".into());
    opts.push("-DADD=0".into());
    if ring::int4_subnormal(s.format) {
        // The ring's row steps take INT4's codes as f16 subnormals, as the ring GEMV's do.
        opts.push("-DRW_SUBN=1".into());
    }
    opts.push(format!("-DAQ_STEPS={steps}"));
    opts.push(format!("-DHD={HEAD_DIM}"));
    opts.push(format!("-DGQA={}", s.gqa()));
    opts.push(format!("-DKV8={}", u32::from(s.kv8)));
    opts.extend(extra_options());
    opts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama8b() -> QkvShape {
        QkvShape { format: WoFormat::Int4G128, batch: 1, hidden: 4096, heads: 32, kv_heads: 8, kv8: false }
    }

    #[test]
    fn llama_8b_layout() {
        let s = llama8b();
        assert!(unsupported(&s).is_none());
        // 768 rows per KV head: 96 row steps, 6 per CTA of a 16-CTA cluster; 2 row groups of 4 warps.
        assert_eq!(s.block_steps(), 96);
        assert_eq!(s.groups(), 2);
        // K / V stages 64 KB, 6 slots of 16 KB, tables of 48 rows (scales 3 KB, zeros 768 B, sums 768 B).
        assert_eq!(s.smem(6, 6), 65536 + 6 * 16384 + 48 * 64 + 48 * 16 + 4 * 48 * 4);
        assert!(s.smem(6, 6) <= 227 * 1024);
        assert!(unsupported(&QkvShape { batch: 2, ..s }).unwrap().contains("batch"));
        assert!(unsupported(&QkvShape { format: WoFormat::Nf4, ..s }).unwrap().contains("NF4"));
        assert!(unsupported(&QkvShape { hidden: 5120, ..s }).unwrap().contains("5120"));
        assert!(unsupported(&QkvShape { heads: 96, ..s }).unwrap().contains("8 q heads"));
    }

    #[test]
    fn kernel_compiles_without_spills() {
        if nvrtc_available().is_err() {
            eprintln!("skipped: NVRTC not available");
            return;
        }
        // The first candidates: clusters of 16 at one and at two CTAs per SM (registers capped at 128).
        for (format, kv8, minb) in [
            (WoFormat::Int4G128, false, 1),
            (WoFormat::Int4G128, false, 2),
            (WoFormat::Int4G128, true, 2),
            (WoFormat::Nvfp4, false, 2),
        ] {
            let s = QkvShape { format, kv8, ..llama8b() };
            let (cubin, log) = compile_cubin(&source(), "attn_qkv.cu", &options(90, &s, 6, 6, 2, minb)).unwrap();
            assert!(!cubin.is_empty());
            let (regs, spills, _) = crate::weight_only::nvrtc::parse_ptxas(&log);
            assert!(spills.unwrap_or(0) == 0, "{format:?} kv8 {kv8} min blocks {minb}: {log}");
            let early = crate::weight_only::nvrtc::early_dependent_loads(&cubin).unwrap();
            assert!(early.as_ref().is_none_or(|l| l.is_empty()), "{format:?} kv8 {kv8} min blocks {minb}: {early:?}");
            eprintln!("{format:?} kv8 {kv8} min blocks {minb}: {regs:?} registers");
        }
    }
}
