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
//!   A-fragment layout is the next step if the M = 16 criterion fails.
//! * x stays in L1/L2 rather than shared memory; at M = 16 and large K it may miss L1 (measure).

#[cfg(test)]
mod emulate;
pub mod ffn;
pub mod mma;
pub mod nvrtc;
pub mod pack;
mod plan;
pub mod ring;
mod spec;
pub mod trace;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::ffi::c_void;

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::nvrtc::Ptx;
use half::{bf16, f16};
use roofline_core::{Format, Measurement};

pub use nvrtc::{compile, nvrtc_available, precompile, CompiledKernel, KernelKey, XDtype};
pub use pack::{pack, quantize_and_pack, quantize_pack, reference_tensor, PackedWeights, WoFormat};
pub use plan::{
    LaunchPlan, Tuning, Variant, MAX_CLUSTER_SPLITS, MAX_M, NF4_TWO_SPLITS_ROWS, XB_SMEM_BYTES, XB_WARPS,
    XK_SMEM_BYTES, XREG_MAX_RPC, XREG_STAGED_MAX_N, XR_ALONE_SMEM_BYTES,
};
pub use spec::{GemvOverride, GEMV_KEYS};

use crate::{random_f32, timing, Gpu, GpuError, TimingConfig, TimingStats};

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
    /// Whether the ring GEMV's tensor-core row step multiplies these weights exactly (`ring::mxfp4_mma_window`:
    /// MXFP4's scales; every other format).
    mma_exact: bool,
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
    /// The ring kernel's `gscale` (`ring::kernel_scale`: the tensor scale, or FP16's range guard).
    ring_scale: f32,
    /// Whether `xscales` / `xzeros` hold the x-in-registers tables (`pack::xreg_tables`).
    xreg_tables: bool,
    /// The ring GEMV's step-major scale and zero-point tables (`pack::ring_step_tables`), where its build for
    /// this shape streams the scales with the weights.
    ring_tables: Option<(CudaSlice<u8>, CudaSlice<u8>)>,
    /// Whether the ring GEMV's tensor-core row step multiplies these weights exactly ([`ring::mxfp4_mma_window`]);
    /// where it does not, the call takes the CUDA-core kernels.
    mma_exact: bool,
    workspace: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

/// What a ring kernel build does around W x: its epilogue and what W multiplies.
type RingOp = (ring::Epilogue, ring::Input);

/// A call's rows of x, output rows and input values (M, N, K).
type Mnk = (usize, usize, usize);
/// A ring build of [`WeightOnlyGemv::ring`]: `None` where it spilled registers.
type BuiltRing = Option<Arc<ring::RingGemv>>;

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
    /// Peak memory bandwidth, GB/s ([`ring::peak_memory_gb_s`]; 0 where the driver does not say).
    peak_gb_s: f64,
    /// Weight format.
    pub format: WoFormat,
    /// x / y element type.
    pub x: XDtype,
    /// Work distribution.
    pub variant: Variant,
    /// Overrides of the automatic launch plan.
    pub tuning: Tuning,
    /// Whether a ring build that spills registers falls back to the other kernels even where [`Tuning::ring`] is
    /// `Some(true)` ([`WeightOnlyGemv::with_ring_fallback`]: a default's choice, not the user's).
    ring_fallback: bool,
    functions: Mutex<HashMap<KernelKey, Loaded>>,
    /// Ring-streaming kernels built so far, per M x N x K and epilogue ([`Tuning::ring`]); `None` where the
    /// build spilled (the default then runs the call on the other kernels, without compiling it again).
    rings: Mutex<HashMap<(Mnk, RingOp), BuiltRing>>,
    /// Clusters of a clustered-reduction kernel resident at once, per kernel, K splits and shared memory.
    clusters: Mutex<HashMap<(KernelKey, u32, u32), u32>>,
    /// Per-shape answers a launch needs every time and that hold for the engine's life: see [`LaunchCache`].
    cache: LaunchCache,
}

/// What a launch works out per shape that does not change between calls (the host's share of a launch of a
/// few microseconds, session 43: planning the ring's layout twice to decide on it took 1.4 us a call on the
/// development machine, and each x-in-registers launch asked the driver for the kernel's occupancy).
#[derive(Default)]
struct LaunchCache {
    /// Per (M, N, K): whether [`ring::auto_rows`] takes the ring on this GPU, whether the ring runs the shape
    /// at all (`ring::unsupported_on` says nothing), and whether it plans it on the tensor cores ([`ring::plans_mma`]).
    ring: Mutex<HashMap<Mnk, (bool, bool, bool)>>,
    /// Per (M, N, plan, the engine's tuning then): [`WeightOnlyGemv::fit`]'s plan and kernel.
    fitted: Mutex<HashMap<FitKey, (LaunchPlan, Loaded)>>,
}

/// [`LaunchCache::fitted`]'s key: M, N, the plan before fitting and the engine's tuning.
type FitKey = (usize, usize, LaunchPlan, Tuning);

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
            peak_gb_s: ring::peak_memory_gb_s(&gpu.ctx),
            ctx: gpu.ctx.clone(),
            stream: gpu.stream.clone(),
            arch,
            sm_count: gpu.sm_count,
            format,
            x,
            variant: Variant::SplitK,
            tuning: Tuning::default(),
            ring_fallback: false,
            functions: Mutex::new(HashMap::new()),
            rings: Mutex::new(HashMap::new()),
            clusters: Mutex::new(HashMap::new()),
            cache: LaunchCache::default(),
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

    /// The same engine, where its [`Tuning::ring`] is a default's choice (model-bench's `ring::in_step`) rather than
    /// the user's: a ring build that spills registers under this NVRTC then falls back to the other kernels, as
    /// with `ring` unset, instead of failing the call.
    pub fn with_ring_fallback(mut self) -> WeightOnlyGemv {
        self.ring_fallback = true;
        self
    }

    /// The launch plan of an `m x n x k` call before the kernel is loaded (see [`WeightOnlyGemv::launch_plan`]).
    pub fn plan(&self, m: usize, n: usize, k: usize) -> LaunchPlan {
        self.plan_tuned(m, n, k, self.tuning)
    }

    /// [`WeightOnlyGemv::plan`] with `tuning` in place of the engine's.
    fn plan_tuned(&self, m: usize, n: usize, k: usize, mut tuning: Tuning) -> LaunchPlan {
        if self.arch < 90 {
            tuning.bulk = Some(false); // bulk copies and mbarrier waits are sm_90+
        }
        if self.arch < 80 && tuning.stages.is_none() {
            tuning.stages = Some(0); // cp.async is sm_80+: no default stages before it
        }
        if tuning.bulk.is_none() && LaunchPlan::bulk_on_fast_memory(self.format, self.x, m, self.peak_gb_s) {
            tuning.bulk = Some(true);
        }
        LaunchPlan::new_x(self.variant, self.format, self.x, m, n, k, self.sm_count, tuning)
    }

    /// The plan of an `m x n x k` call with `fusion` (the fused build of [`WeightOnlyGemv::plan`]).
    fn fused_plan(&self, m: usize, n: usize, k: usize, fusion: Fusion) -> LaunchPlan {
        let plan = self.plan_tuned(m, n, k, fused_tuning(self.tuning, fusion));
        LaunchPlan { fuse: fusion != Fusion::default(), silu: fusion.silu_x, ..plan }
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
        let poisoned = || GpuError::Unsupported("launch cache lock poisoned".into());
        let id = (m, n, plan, self.tuning);
        if let Some(hit) = self.cache.fitted.lock().map_err(|_| poisoned())?.get(&id) {
            return Ok(hit.clone());
        }
        let fitted = self.fit_uncached(m, n, plan)?;
        self.cache.fitted.lock().map_err(|_| poisoned())?.insert(id, fitted.clone());
        Ok(fitted)
    }

    fn fit_uncached(&self, m: usize, n: usize, plan: LaunchPlan) -> Result<(LaunchPlan, Loaded), GpuError> {
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
            fitted.threads(),
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
                    max_active_clusters(&self.stream, &f, (plan.threads(), 1, 1), plan.smem_bytes, dims).unwrap_or(0);
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
        let input = if fusion.silu_x { ring::Input::SwiGlu } else { ring::Input::X };
        let epilogue = match (fusion.norm_eps, fusion.add_into_y) {
            (Some(_), _) => ring::Epilogue::Norm,
            (None, true) => ring::Epilogue::Add,
            (None, false) => ring::Epilogue::Store,
        };
        let (auto, supported, mma) = self.ring_shape(m, n, k);
        // Past MAX_M rows of x only on the tensor cores, and there the 4-bit formats with FP16 or BF16 x, no SwiGLU on
        // load (also at 2-3 rows where the ring plans them there).
        if (m > ring::MAX_M || mma) && !ring::mma_takes((self.format, self.x), m, k, (epilogue, input)) {
            return None;
        }
        let wanted = self.tuning.ring.unwrap_or(auto);
        let takes = wanted
            && self.variant == Variant::XReg
            && supported
            && ring::takes(self.format)
            && self.arch >= 90
            && k % 1024 == 0
            && !(fusion.norm_eps.is_some() && (fusion.add_into_y || fusion.silu_x));
        takes.then_some((epilogue, input))
    }

    /// The ring kernel that runs `m` rows of x against `w` with `fusion` where [`Tuning::ring`] takes the call
    /// ([`WeightOnlyGemv::ring_epilogue`]), built on first use; `None` where the other kernels run it: also where the
    /// ring's build is on the tensor cores and they would not multiply `w` exactly (MXFP4 scales outside
    /// [`ring::MXFP4_MMA_WINDOW`]); and where the ring's build spills registers under this NVRTC
    /// ([`GpuError::Spills`]) unless the user asked for it ([`Tuning::ring`] without
    /// [`WeightOnlyGemv::with_ring_fallback`]).
    fn ring_for(&self, w: &DeviceWeights, m: usize, fusion: Fusion) -> Result<Option<Arc<ring::RingGemv>>, GpuError> {
        let Some(ep) = self.ring_epilogue(m, w.n, w.k, fusion) else { return Ok(None) };
        let Some(ring) = self.ring(m, w.n, w.k, ep)? else { return Ok(None) };
        Ok((!ring.mma || w.mma_exact).then_some(ring))
    }

    /// Why the ring GEMV, which [`Tuning::ring`] takes for `m` rows of x against `w` with `fusion`, leaves the call to
    /// the other kernels (`WeightOnlyGemv::ring_for` is `None`), in words for a kernel line: its build spills
    /// registers under this NVRTC, or its tensor-core build would not multiply `w`'s MXFP4 scales exactly. `None` where
    /// the ring runs the call or does not take it.
    pub fn ring_refusal(&self, w: &DeviceWeights, m: usize, fusion: Fusion) -> Result<Option<String>, GpuError> {
        let Some(ep) = self.ring_epilogue(m, w.n, w.k, fusion) else { return Ok(None) };
        Ok(match self.ring(m, w.n, w.k, ep)? {
            None => Some("whose build spills registers under this NVRTC".into()),
            Some(r) if r.mma && !w.mma_exact => Some(format!(
                "whose tensor-core build multiplies MXFP4 block scales of 2^{} to 2^{} exactly, and these weights have \
                 scales outside",
                i32::from(*ring::MXFP4_MMA_WINDOW.start()) - 127,
                i32::from(*ring::MXFP4_MMA_WINDOW.end()) - 127
            )),
            Some(_) => None,
        })
    }

    /// Whether the default wants the ring GEMV for an `m x n x k` call (no fusion) and its build spills registers
    /// under this NVRTC, so that the engine runs the call on its other kernels (`WeightOnlyGemv::ring`: built
    /// here on first use, once per process, and kept for the calls). `false` where the ring runs it or was not
    /// wanted.
    pub fn ring_spills(&self, m: usize, n: usize, k: usize) -> Result<bool, GpuError> {
        self.ring_spills_fused(m, n, k, Fusion::default())
    }

    /// [`WeightOnlyGemv::ring_spills`] for a call with `fusion` (its ring build is another: the fused norm, the
    /// residual add and SwiGLU on load each compile their own), as model-bench's linears launch them.
    pub fn ring_spills_fused(&self, m: usize, n: usize, k: usize, fusion: Fusion) -> Result<bool, GpuError> {
        match self.ring_epilogue(m, n, k, fusion) {
            Some(op) => Ok(self.ring(m, n, k, op)?.is_none()),
            None => Ok(false),
        }
    }

    /// Whether [`ring::auto_rows`] takes the ring for `m x n x k` on this GPU, whether the ring runs it at
    /// all, and whether it plans it on the tensor cores (once per shape: all three plan the ring's layout).
    fn ring_shape(&self, m: usize, n: usize, k: usize) -> (bool, bool, bool) {
        let compute = || {
            (
                ring::auto_rows((self.format, self.x), (m, n, k), self.sm_count, self.peak_gb_s),
                ring::unsupported_on(self.format, (m, n, k), self.sm_count, self.peak_gb_s).is_none(),
                ring::plans_mma(self.format, (m, n, k), self.sm_count, self.peak_gb_s),
            )
        };
        // A poisoned lock only loses the cache.
        let Ok(mut cache) = self.cache.ring.lock() else { return compute() };
        *cache.entry((m, n, k)).or_insert_with(compute)
    }

    /// The ring kernel for `m x n x k` with `op`, built on first use; `None` where its build spills and
    /// [`Tuning::ring`] left the choice to the default or [`WeightOnlyGemv::with_ring_fallback`] says it was a
    /// default's (the NVRTC a user has may allocate registers otherwise than the one the spill tests ran: NVRTC 13.0
    /// spilled a build 12.9 did not, session 55). Asked for by the user with `ring = true`, the spill is the error.
    fn ring(&self, m: usize, n: usize, k: usize, op: RingOp) -> Result<Option<Arc<ring::RingGemv>>, GpuError> {
        let mut rings =
            self.rings.lock().map_err(|_| GpuError::Unsupported("ring kernel table lock poisoned".into()))?;
        if let Some(r) = rings.get(&((m, n, k), op)) {
            if r.is_some() || self.spill_falls_back() {
                return Ok(r.clone());
            }
        }
        let built = ring::RingGemv::build(
            &self.ctx,
            &self.stream,
            self.arch,
            self.sm_count,
            (self.format, self.x),
            (m, n, k),
            op,
        );
        let r = match built {
            Ok(r) => Some(Arc::new(r)),
            Err(GpuError::Spills { .. }) if self.spill_falls_back() => None,
            Err(e) => return Err(e),
        };
        rings.insert(((m, n, k), op), r.clone());
        Ok(r)
    }

    /// Whether a spilling ring build falls back rather than fails: unless the user asked for the ring.
    fn spill_falls_back(&self) -> bool {
        self.tuning.ring.is_none() || self.ring_fallback
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
            .occupancy_max_active_blocks_per_multiprocessor(plan.threads(), plan.smem_bytes as usize, None)?
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
        if mma_layout && self.x == XDtype::F16 {
            mma::check_f16_range(p)?;
        }
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
        let ring_tables = (self.variant == Variant::XReg
            && ring::streams_scales(p.format, p.n, p.k, self.sm_count, self.peak_gb_s))
        .then(|| pack::ring_step_tables(p.format, p.n, p.k, &xscales, &xzeros))
        .flatten();
        // Only the ring (an XReg engine's) multiplies on the tensor cores from the CUDA-core layout.
        let mma_exact = self.variant != Variant::XReg || ring::mxfp4_mma_window(p).is_ok();
        Ok(StagedWeights {
            packed: p,
            variant: self.variant,
            codes,
            mma_layout,
            xscales,
            xzeros,
            ring_tables,
            mma_exact,
        })
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
            ring_scale: if st.variant == Variant::XReg { ring::kernel_scale(p) } else { p.global_scale },
            xreg_tables: st.variant == Variant::XReg && !st.mma_layout,
            ring_tables: match &st.ring_tables {
                Some((s, z)) => Some((up(s)?, up(z)?)),
                None => None,
            },
            mma_exact: st.mma_exact,
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
        if let Some(ring) = self.ring_for(w, m, fusion)? {
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
                w.ring_scale,
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
            launch_cluster_ex(stream, &f, grid, (plan.threads(), 1, 1), plan.smem_bytes, pdl, cluster, &mut params)
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
            host_us: self.stats.host(),
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

/// An x / y element of type `x` from an f32 (rounded to nearest), as the kernels read and write it.
pub fn to_bits(x: XDtype) -> fn(f32) -> u16 {
    match x {
        XDtype::F16 => |v| f16::from_f32(v).to_bits(),
        XDtype::Bf16 => |v| bf16::from_f32(v).to_bits(),
    }
}

/// An x / y element of type `x` as an f32 (exact).
pub fn from_bits(x: XDtype) -> fn(u16) -> f32 {
    match x {
        XDtype::F16 => |b| f16::from_bits(b).to_f32(),
        XDtype::Bf16 => |b| bf16::from_bits(b).to_f32(),
    }
}

/// Whether the comma-separated list in the environment variable `var` names `name` (case-insensitive), or the
/// variable is unset or empty: the GPU tests' and the spill check's filters (`ROOFLINE_TEST_FORMATS` with catalog
/// names such as `INT4_G128,NVFP4`, `ROOFLINE_TEST_X` with `fp16` / `bf16`).
pub fn env_list_names(var: &str, name: &str) -> bool {
    std::env::var(var)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .is_none_or(|s| s.split(',').any(|n| n.trim().eq_ignore_ascii_case(name)))
}

/// The tuning of a build with `fusion`: `tuning`, but BF16 x as scaled f16 ([`Tuning::xf16`]) in fused builds only
/// where asked (its default was measured in unfused builds only, session 48).
pub fn fused_tuning(tuning: Tuning, fusion: Fusion) -> Tuning {
    if fusion != Fusion::default() && tuning.xf16.is_none() {
        Tuning { xf16: Some(false), ..tuning }
    } else {
        tuning
    }
}

/// One output's share of the kernel's error past the output type's rounding: `(got - exact)^2 - (rounded -
/// exact)^2`, `rounded` being `exact` rounded to the output type ([`reference_error`] sums them).
///
/// A kernel whose value before its output is rounded is `exact + e` returns `round(exact + e)`: over outputs
/// whose place within a rounding step is uniform, the mean of `(got - exact)^2` is `step^2 / 12 + e^2` and the
/// mean of `(rounded - exact)^2` is `step^2 / 12`, so the sum of these shares estimates `sum e^2` without bias,
/// whatever the output type's step. It is 0 for a correctly rounded result. Comparing with the rounded
/// reference instead (`(got - rounded)^2`) measures about `sqrt(e step)`, the flips of outputs near a
/// rounding boundary, and so holds BF16 outputs (a step of 2^-8 to 2^-7) to a bound on `e` about eight times
/// tighter than FP16 ones: a kernel error of 3e-4 of W x reads 1.0e-3 to 1.3e-3 with BF16 y and about 5e-4
/// with FP16 y (session 48, the ring's f16x2 products on the H200).
pub fn excess_sq(got: f64, exact: f64, rounded: f64) -> f64 {
    (got - exact).powi(2) - (rounded - exact).powi(2)
}

/// Relative error (Frobenius) of `y` (output bits) against the f64 reference `x · W^T` over the rows of W
/// in `rows`, past the output type's own rounding ([`excess_sq`]): `sqrt(max(0, sum excess_sq) / sum exact^2)`,
/// the kernel's error before its outputs are rounded, 0 for a correctly rounded result.
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
            let rounded = f64::from(from(to(acc as f32)));
            err += excess_sq(got, acc, rounded);
            norm += acc * acc;
        }
    }
    Ok((err.max(0.0) / norm.max(1e-300)).sqrt())
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
        let (major, minor) = self.compute_capability;
        let arch = (major * 10 + minor) as u32;
        let peak = ring::peak_memory_gb_s(&self.ctx);
        let variant =
            opts.variant.unwrap_or_else(|| Variant::best_on(wf, opts.x, m, n, k, (self.sm_count, arch, peak)));
        // From 2 rows the default's XReg engine runs a ring with more rows of x (from 3 always the tensor-core ring);
        // where that build spills under this NVRTC, the engine's own fallback would be the x-in-registers kernel (at 16
        // rows about 10x slower, session 56 r1), so the default takes the bulk ring, `Variant::best_for`'s there.
        let spilled = opts.variant.is_none()
            && opts.tuning.ring.is_none()
            && variant == Variant::XReg
            && m >= ring::MMA_MIN_M
            && WeightOnlyGemv::new(self, wf, opts.x)?
                .with_variant(variant, None)
                .with_tuning(opts.tuning)?
                .ring_spills(m, n, k)?;
        let variant = if spilled { Variant::XMma } else { variant };
        let mut out = self.measure_weight_only_configs(format, m, n, k, cfg, opts, &[(variant, opts.tuning)])?;
        let out = out.pop().unwrap_or_else(|| Err(GpuError::Unsupported("no configuration measured".into())));
        out.map(|mut r| {
            if spilled {
                r.kernel +=
                    " (the bulk ring in place of the tensor-core ring GEMV, whose build spills registers under \
                             this NVRTC)";
            }
            r
        })
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
        let ring = gemv.ring_for(&ws[0], m, Fusion::default())?;
        let kernel = match &ring {
            Some(r) => format!(
                "roofline wo_ring (rows streamed by bulk copies into a shared-memory ring{}) {format} W, {} x/y, FP32 accumulate, {} CTAs of {} threads, {} ring slots of 8 rows{}, {sets} rotating weight sets, {}",
                if r.m > 1 {
                    format!(
                        ", each weight decoded once for {} rows of x{}",
                        r.m,
                        if r.mma { " on the tensor cores" } else { "" }
                    )
                } else {
                    String::new()
                },
                opts.x.name(),
                r.ctas,
                r.threads,
                r.slots,
                if r.parts > 1 { format!(" x {} values (K in {} parts)", k / r.parts, r.parts) } else { String::new() }
                    + &if r.splits > 1 {
                        format!(" ({} values of K a CTA: clusters of {} K splits)", k / r.splits, r.splits)
                    } else {
                        String::new()
                    }
                    + if r.streamed_scales { ", scales streamed beside them" } else { "" }
                    + &if r.ahead > 0 { format!(", {} in flight", r.ahead) } else { String::new() }
                    + if r.early_copies { ", first copies before the scale tables'" } else { "" },
                stats.sample_words()
            ),
            None => match gemv.ring_refusal(&ws[0], m, Fusion::default())? {
                Some(why) => format!(
                    "{} (in place of the ring GEMV, {why})",
                    describe(gemv, format, opts.x, &plan, grid_n, sets, &stats)
                ),
                None => describe(gemv, format, opts.x, &plan, grid_n, sets, &stats),
            },
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
    stats: &TimingStats,
) -> String {
    format!(
            "roofline {} {format} W, {} x/y, FP32 accumulate, {:?} (R={}, U={}, {} warps, grid {}x{}{}), {sets} rotating weight sets, {}",
            match gemv.variant {
                Variant::Mma => "wo_mma (tensor cores)".to_string(),
                Variant::XMma if plan.x_smem && plan.bulk => format!(
                    "{} (tensor cores, x in shared memory, {}{}{}{}{})",
                    if plan.producer { "wo_mma_xr" } else { "wo_mma_xb" },
                    if plan.producer {
                        format!("a producer warp streaming {}-tile units into {} slots", plan.warps * plan.unroll, plan.stages)
                    } else {
                        format!("bulk-copy rings of {} slots", plan.stages)
                    },
                    match (plan.park, plan.cluster) {
                        (_, true) => ", a parking table, K splits summed in clusters",
                        (true, false) => ", a parking table",
                        _ => "",
                    },
                    if plan.multicast { ", x multicast to CTA pairs" } else { "" },
                    if plan.xf16 && x == XDtype::Bf16 { ", BF16 x rewritten as scaled f16" } else { "" },
                    match plan.nf4_table {
                        0 => String::new(),
                        c if x == XDtype::Bf16 && !plan.xf16 => {
                            format!(", NF4's table of BF16 hi and lo pairs in {} copies", c / 2)
                        }
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
            stats.sample_words()
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
mod tests;
