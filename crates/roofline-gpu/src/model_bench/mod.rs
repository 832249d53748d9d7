//! One decode step of a Llama-family model (dense, or MoE: see `moe`) on the GPU with the project's kernels
//! (`roofline model-bench`): every linear through the weight-only kernels (FP16 weights too), RoPE + KV
//! append, flash-decoding attention over an FP16 or FP8 KV cache of the real context, fused residual-add +
//! RMSNorm, SiLU-and-mul, and the LM head, captured in a CUDA graph and replayed. Weights are random (uniform
//! in [-1, 1) / sqrt(K), never zero) of the model's real shapes, quantized on the host with roofline-quant;
//! one random tensor per linear type is uploaded once per layer, so every layer reads its own memory (or a
//! checkpoint's, see `bench_weights`).
//!
//! Correctness first: after one op-by-op step the attention output of the last layer is recomputed on the
//! CPU (f64) from the downloaded q, K and V and must agree within 1e-2; the logits must be finite.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream};
use cudarc::nvrtc::Ptx;
use half::f16;

use crate::bench_weights::{fold_columns, head_matrices, layer_matrices};
use crate::weight_only::ffn::{self, FfnWeights, FusedFfn};
use crate::weight_only::nvrtc::compile_cubin;
use crate::weight_only::pack::PackedWeights;
use crate::weight_only::precompile;
use crate::weight_only::ring;
use crate::weight_only::{
    max_active_clusters, quantize_pack, DeviceWeights, Fusion, GemvOverride, Tuning, Variant, WeightOnlyGemv, WoFormat,
    XDtype, MAX_M,
};
use crate::{random_f32, timing, Gpu, GpuError, TimingConfig};
pub use attn_qkv::{QkvAttention, QkvShape};
use check::{rel_error, Sampled};
use moe::{MoeActs, MoeLayer, MoeOp};
pub use moe::{MoeCheck, MoeShape};
use rayon::prelude::*;
use roofline_quant::checkpoint::SourceModel;
use roofline_quant::minifloat::E4M3;
use std::collections::HashMap;

mod attn_qkv;
mod check;
mod enqueue;
use enqueue::{Engines, Enqueue, KArgs, Lin, NORM_EPS};
mod moe;

/// The decode-ops source (see the kernel file's header).
pub const DECODE_OPS_SOURCE: &str = concat!(
    include_str!("../kernels/wo_prims.cuh"),
    include_str!("../kernels/attn_cluster.cuh"),
    include_str!("../kernels/decode_ops.cu")
);

/// Head size the attention kernels are written for.
pub const HEAD_DIM: usize = 128;

/// What to build: model shapes, batch, context and the weight format.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    /// Hidden size.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// FFN intermediate size.
    pub intermediate: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// Layers of the model.
    pub layers: usize,
    /// Layers actually built (the step time is scaled to `layers`).
    pub layers_built: usize,
    /// Tokens decoded together (1..=16).
    pub batch: usize,
    /// Context already in the KV cache.
    pub seq: usize,
    /// Weight format of every linear layer.
    pub weights: WoFormat,
    /// RoPE base.
    pub rope_theta: f32,
    /// Fused step (what serving engines run): each RMSNorm folded into the next linear (its weight into W,
    /// the row norm computed in the GEMV, see `weight_only::Fusion`), each residual add into the linear
    /// before it, RoPE and the KV append into one attention launch that also merges its splits. Off: one
    /// kernel per op (add_rmsnorm, rope_append, attn_split, attn_combine).
    pub fuse: bool,
    /// Which kernel runs the fused step's attention (ignored unfused).
    pub attention: AttnKernel,
    /// KV cache format.
    pub kv: KvFormat,
    /// A Hugging Face checkpoint directory (config.json + safetensors) whose weights the step runs, the first
    /// `layers_built` layers; `None`: random weights of the same shapes (see `bench_weights`).
    pub checkpoint: Option<std::path::PathBuf>,
    /// Mixture-of-experts FFN in every layer (`intermediate` is then unused); `None`: a dense SwiGLU FFN.
    pub moe: Option<MoeShape>,
    /// The step's weight-only GEMVs with another variant or launch plan (every linear but the MoE router;
    /// default: [`Variant::best`] and the automatic plan), to time a tuning-table configuration in place.
    pub gemv: GemvOverride,
    /// How the fused step runs a dense FFN: one fused kernel (norm, gate_up, SiLU-and-mul, down and the
    /// residual add) where it supports the shape, or two GEMVs.
    pub ffn: FfnKernel,
    /// How the fused step runs the qkv projection: its own GEMV (the default), or inside the cluster
    /// attention's launch (`attn_qkv`, opt-in: slower on the H100).
    pub qkv: QkvKernel,
}

/// The kernel of the fused step's qkv projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QkvKernel {
    /// Its own weight-only GEMV before the attention. The default: on the H100 the fused kernel is slower
    /// (Llama-3.1-8B INT4, S = 1024: step 2228 vs 2085 us; bench/RESULTS.md, session 15).
    #[default]
    Gemv,
    /// The projection inside the cluster attention (`attn_qkv`: sm_90+, INT4 g128 / MXFP4 / NVFP4 on the
    /// x-in-registers engine, batch 1); an error where it does not apply.
    Fused,
}

/// The kernels of a dense FFN in the fused step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FfnKernel {
    /// `Fused` where [`ffn::unsupported`] allows it and it is the faster on the H100 (INT4 g128, MXFP4 or
    /// NVFP4, batch 1, a dense FFN of a supported size), else `Gemv`. The default: per Llama-3.1-8B layer the
    /// fused kernel takes 35.0 us against 26.9 + 17.2 for INT4's two GEMVs, MXFP4 39 vs 25.1 + 19.9, NVFP4
    /// 42.9 vs 28.6 + 22.1; NF4's (45.0 us, step 2496 vs 2450) stays opt-in (bench/RESULTS.md, session 16;
    /// session 23, both faster through NF4's pair table: 39.1 vs 25.2 + 18.9 us, step 2285 vs 2271).
    #[default]
    Auto,
    /// One launch for the whole FFN (`weight_only::ffn`); an error where it does not apply.
    Fused,
    /// gate_up and down as two weight-only GEMVs (SwiGLU inside down where its plan takes it).
    Gemv,
}

/// Element format of the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvFormat {
    /// FP16 values.
    #[default]
    F16,
    /// FP8 E4M3 codes with one scale for all of K and one for all of V (as vLLM's `fp8` KV cache); read by
    /// the cluster attention kernel only (fused step, sm_90+).
    Fp8E4M3,
}

/// The FP8 cache's K and V scale: E4M3's largest code (448) stands for 8, above the new keys and values a
/// decode step appends (the step's q/k/v rows stay within a few units; a larger value would saturate), and the
/// random cached values in [-1, 1) use codes up to 56, all normal numbers.
const KV_FP8_SCALE: f32 = 8.0 / 448.0;

/// The fused step's attention kernel (RoPE, KV append, flash-decoding and the merge of its splits in one
/// launch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttnKernel {
    /// `Cluster` on sm_90 and later, `Splits` before.
    #[default]
    Auto,
    /// `attn_cluster`: a thread-block cluster of up to 16 CTAs per (b, KV head), the splits merged through
    /// distributed shared memory (sm_90+).
    Cluster,
    /// `attn_rope`: a CTA per (b, KV head, 16 positions), the last CTA of a group merging the partials
    /// from global memory (any GPU).
    Splits,
}

impl BenchConfig {
    /// Checks what the kernels support.
    pub fn validate(&self) -> Result<(), GpuError> {
        let bad = |m: String| Err(GpuError::Unsupported(m));
        if self.hidden > 16 * 1024 {
            return bad(format!("hidden {} > 16384 (the RMSNorm kernel keeps a row in registers)", self.hidden));
        }
        if self.hidden != self.heads * HEAD_DIM {
            return bad(format!("hidden {} != heads {} x head_dim {HEAD_DIM}", self.hidden, self.heads));
        }
        if self.kv_heads == 0 || self.heads % self.kv_heads != 0 {
            return bad(format!("heads {} must be a multiple of kv_heads {}", self.heads, self.kv_heads));
        }
        if self.heads / self.kv_heads > MAX_GQA {
            return bad(format!(
                "{} q heads per KV head > {MAX_GQA} (the fused attention keeps a group's q heads in registers)",
                self.heads / self.kv_heads
            ));
        }
        if !(1..=MAX_M).contains(&self.batch) {
            return bad(format!("batch must be 1..={MAX_M} (the weight-only kernels' M), got {}", self.batch));
        }
        if self.layers_built == 0 || self.layers_built > self.layers {
            return bad(format!("--layers must be 1..={}, got {}", self.layers, self.layers_built));
        }
        if self.kv == KvFormat::Fp8E4M3 && (!self.fuse || self.attention == AttnKernel::Splits) {
            return bad("an FP8 KV cache is read by the cluster attention kernel only (the fused step, sm_90+)".into());
        }
        if self.seq == 0 {
            return bad("--seq must be at least 1".into());
        }
        if let Some(m) = &self.moe {
            m.validate(self)?;
        } else if self.intermediate == 0 {
            return bad("a dense FFN needs intermediate > 0".into());
        }
        if self.qkv == QkvKernel::Fused {
            if let Some(why) = self.fused_qkv_unsupported() {
                return bad(format!("--qkv fused: {why}"));
            }
        }
        if self.ffn == FfnKernel::Fused {
            if let Some(why) = self.fused_ffn_unsupported() {
                return bad(format!("--ffn fused: {why}"));
            }
        }
        if self.seq + 1 > 16 * 1024 {
            return bad(format!(
                "--seq {} > 16383 (model-bench builds contexts up to 16K positions: a random FP16 KV cache per layer)",
                self.seq
            ));
        }
        Ok(())
    }

    /// Why this step cannot run its FFN as one fused kernel (`None`: it can).
    pub fn fused_ffn_unsupported(&self) -> Option<String> {
        if !self.fuse {
            return Some("the unfused step runs one kernel per op".into());
        }
        if self.moe.is_some() {
            return Some("MoE layers run their experts as GEMVs".into());
        }
        ffn::unsupported(self.weights, XDtype::F16, self.batch, self.hidden, self.intermediate)
    }

    /// Whether the step runs its FFN as one fused kernel on a GPU of compute capability `major`.x: `Auto`
    /// only where the kernel runs (sm_90+: bulk copies); `Fused` always where the shape allows (an older GPU
    /// then refuses it with the reason).
    pub fn fused_ffn(&self, major: i32) -> bool {
        match self.ffn {
            FfnKernel::Gemv => false,
            FfnKernel::Auto => major >= 9 && self.weights != WoFormat::Nf4 && self.fused_ffn_unsupported().is_none(),
            FfnKernel::Fused => self.fused_ffn_unsupported().is_none(),
        }
    }

    /// The fused qkv + attention kernel's shape.
    pub fn qkv_shape(&self) -> QkvShape {
        QkvShape {
            format: self.weights,
            batch: self.batch,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            kv8: self.kv == KvFormat::Fp8E4M3,
        }
    }

    /// Why this step cannot run its qkv projection inside the attention (`None`: it can, given the GPU).
    pub fn fused_qkv_unsupported(&self) -> Option<String> {
        if !self.fuse {
            return Some("the unfused step runs one kernel per op".into());
        }
        if self.attention == AttnKernel::Splits {
            return Some("the qkv projection fuses into the cluster attention only".into());
        }
        if self.gemv.variant.is_some_and(|v| v != Variant::XReg) {
            return Some("the fused kernel reads weights staged for the x-in-registers engine".into());
        }
        attn_qkv::unsupported(&self.qkv_shape())
    }

    /// Fused q, k, v rows.
    pub fn qkv_rows(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * HEAD_DIM
    }

    /// The linear layers of one layer as (name, rows N, columns K), then the LM head.
    pub fn linears(&self) -> [(&'static str, usize, usize); 5] {
        let (d, f) = (self.hidden, self.intermediate);
        [
            ("qkv_proj", self.qkv_rows(), d),
            ("o_proj", d, self.heads * HEAD_DIM),
            ("gate_up_proj", 2 * f, d),
            ("down_proj", d, f),
            ("lm_head", self.vocab, d),
        ]
    }
}

/// One op's measured time.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpTime {
    /// Name, as `roofline model` names it.
    pub name: String,
    /// linear, attention, norm or elementwise.
    pub kind: String,
    /// Times it runs per step (all layers).
    pub count: u64,
    /// Median time of one instance (CUDA events, back-to-back launches rotating over the layers), us.
    pub time_us: f64,
    /// What one instance adds to the CUDA-graph step, us: the step's graph minus the same graph without
    /// this op in any layer, over the layers (an ablation). Unlike `time_us` it counts how the op overlaps
    /// its real neighbours through programmatic dependent launch (a kernel whose CTAs cannot be resident
    /// beside its predecessor's starts its loads late). The ops of a dense fused step's layers only.
    pub in_step_us: Option<f64>,
}

/// An op of `roofline model`'s list that the measured step runs inside another kernel.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FusedOp {
    /// The op, as `roofline model` names it.
    pub name: String,
    /// The measured op that does its work.
    pub into: String,
    /// Only the rows of `name` right after this linear (a MoE step fuses the attention's residual add into
    /// o_proj, not the FFN's); `None`: every row of `name`.
    pub after: Option<String>,
}

/// A measured decode step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepResult {
    /// Device name.
    pub device: String,
    /// One step of the whole model from CUDA-graph replays (layers scaled from `layers_built`), us.
    pub step_us: f64,
    /// The same step as the sum of the per-op times (stream launches, no graph), us.
    pub ops_sum_us: f64,
    /// Graph replays timed.
    pub replays: u32,
    /// Layers built.
    pub layers_built: usize,
    /// Per-op times.
    pub ops: Vec<OpTime>,
    /// Ops that run inside another (no kernel of their own).
    pub fused: Vec<FusedOp>,
    /// Relative error of the last layer's attention against the CPU reference.
    pub attention_rel_error: f64,
    /// Where the qkv projection runs inside the attention: the relative error of its qkv rows against the
    /// x-in-registers GEMV's on the same x and weights (`None`: the projection is that GEMV).
    pub qkv_rel_error: Option<f64>,
    /// Dense models with the fused step: the relative error of what the last layer's FFN
    /// (fused kernel or GEMVs) added to the residual stream, against the f64 CPU reference of its quantized
    /// weights (batch row 0), beyond the FP16 rounding of the stream itself (see `residual_delta_error`).
    pub ffn_rel_error: Option<f64>,
    /// The step's other linears against f64 CPU references of their quantized weights on a sample of their
    /// rows (batch row 0).
    pub linear_rel_errors: LinearErrors,
    /// The attention kernel and its geometry, e.g. "attn_cluster, 8 clusters of 16 CTAs".
    pub attention_kernel: String,
    /// Where the weights came from: "random", or "checkpoint `<dir>`".
    pub weights: String,
    /// MoE models: the routing check and how the step's experts were routed.
    pub moe: Option<MoeCheck>,
}

/// Relative errors of the step's linears against f64 CPU references of their quantized weights, on about
/// 512 of their rows (evenly spread) and batch row 0, each on the input the GEMV got in the checked step.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LinearErrors {
    /// Dense models with the fused step: the last layer's qkv projection (the RMSNorm fused in).
    pub qkv: Option<f64>,
    /// Dense models with the fused step: the last layer's o_proj, what it adds to the residual stream (its
    /// fused launch run once more on a zeroed stream, so its sum is rounded to FP16 once).
    pub o_proj: Option<f64>,
    /// The LM head (the final RMSNorm fused in with the fused step, after it without).
    pub lm_head: f64,
}

impl StepResult {
    /// Tokens per second: batch / step time.
    pub fn tokens_per_s(&self, batch: usize) -> f64 {
        batch as f64 / (self.step_us * 1e-6)
    }
}

struct Ops {
    add_rmsnorm: CudaFunction,
    rope_append: CudaFunction,
    attn_split: CudaFunction,
    attn_combine: CudaFunction,
    attn_rope: CudaFunction,
    /// Compiled on sm_90+ only.
    attn_cluster: Option<CudaFunction>,
    silu_mul: CudaFunction,
    topk_route: CudaFunction,
    moe_gather: CudaFunction,
    moe_combine: CudaFunction,
}

/// A layer's FFN weights.
// One per layer, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Ffn {
    /// SwiGLU: gate and up stacked, then down.
    Dense { gate_up: DeviceWeights, down: DeviceWeights },
    /// Router, experts and their routing (see `moe`).
    Moe(MoeLayer),
    /// SwiGLU as one fused kernel (`weight_only::ffn`).
    Fused(FfnWeights),
}

struct Layer {
    qkv: DeviceWeights,
    o: DeviceWeights,
    ffn: Ffn,
    norm_in: CudaSlice<u16>,
    norm_post: CudaSlice<u16>,
    /// K and V caches as raw bytes in `BenchConfig::kv`'s format.
    kc: CudaSlice<u8>,
    vc: CudaSlice<u8>,
}

struct Acts {
    x: CudaSlice<u16>,
    h: CudaSlice<u16>,
    qkv: CudaSlice<u16>,
    attn: CudaSlice<u16>,
    o: CudaSlice<u16>,
    gu: CudaSlice<u16>,
    act: CudaSlice<u16>,
    down: CudaSlice<u16>,
    logits: CudaSlice<u16>,
    part: CudaSlice<f32>,
    /// Per (b, q head) arrival counters of the fused attention (zero between launches).
    counters: CudaSlice<u32>,
    /// MoE routing and shared-expert buffers (MoE models only).
    moe: Option<MoeActs>,
}

/// Most q heads per KV head the fused attention takes (its registers hold one group's q vectors).
pub const MAX_GQA: usize = 8;

/// Most positions per attention CTA (`MAX_CHUNK` in decode_ops.cu: 4 per warp, held in registers).
const MAX_CHUNK: usize = 16;

/// Splits of the attention over the sequence: chunks of at most 16 positions (4 per warp, their loads in
/// flight together). Unfused (a CTA per (b, q head) and chunk): at least about 4 CTAs per SM. Fused (a CTA
/// per (b, KV head) and chunk, whose last CTA merges every split of its group serially): as few splits as
/// the chunk limit allows, but at least one CTA per SM.
fn attn_splits(cfg: &BenchConfig, sm_count: u32) -> (u32, i32) {
    let len = cfg.seq + 1;
    let (per_split, ctas) =
        if cfg.fuse { (cfg.batch * cfg.kv_heads, sm_count) } else { (cfg.batch * cfg.heads, 4 * sm_count) };
    let want = (ctas as usize).div_ceil(per_split).max(len.div_ceil(MAX_CHUNK));
    let chunk = len.div_ceil(want).clamp(1, MAX_CHUNK);
    (len.div_ceil(chunk) as u32, chunk as i32)
}

/// Threads per CTA of `attn_cluster` (`CW` warps in decode_ops.cu).
const CLUSTER_THREADS: u32 = 256;

/// Dynamic shared memory of `attn_cluster`: two stages of 8 warps x 8 positions x (K, V) x 256 bytes
/// (`KV_STAGE_BYTES` in decode_ops.cu).
const CLUSTER_SMEM: u32 = 2 * 8 * 8 * 2 * 256;

/// CTAs per cluster of `attn_cluster`: the largest power of two up to 16 that keeps about one CTA per SM for
/// the batch's (b, KV head) groups (at least 2) and lets every cluster be resident at once (the occupancy
/// API: a cluster must fit in one GPC, and an H100's GPCs do not all have 16 free SMs; a second wave of
/// clusters doubles the time; `ROOFLINE_ATTN_CLUSTER` caps it for tuning experiments). Sets the function's
/// shared-memory and non-portable-cluster attributes. Returns the size and how many such clusters can be
/// resident.
fn cluster_ctas(
    cfg: &BenchConfig,
    sm_count: u32,
    s: &Arc<CudaStream>,
    f: &CudaFunction,
) -> Result<(u32, u32), GpuError> {
    use cudarc::driver::sys::CUfunction_attribute_enum as A;
    f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CLUSTER_SMEM as i32)?;
    let groups = (cfg.batch * cfg.kv_heads) as u32;
    let mut cl = 16u32;
    while cl > 2 && groups * cl > sm_count {
        cl /= 2;
    }
    // ROOFLINE_ATTN_CLUSTER (2, 4, 8 or 16): a smaller cluster for tuning experiments.
    if let Some(want) = std::env::var("ROOFLINE_ATTN_CLUSTER").ok().and_then(|v| v.parse::<u32>().ok()) {
        if want.is_power_of_two() && (2..=16).contains(&want) {
            cl = cl.min(want);
        }
    }
    if cl > 8 && f.set_attribute(A::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1).is_err() {
        cl = 8;
    }
    let mut fallback = None;
    while cl >= 2 {
        match max_active_clusters(s, f, (CLUSTER_THREADS, 1, 1), CLUSTER_SMEM, (cl, 1)) {
            Ok(n) if n >= groups => return Ok((cl, n)),
            Ok(n) if n > 0 => fallback = fallback.or(Some((cl, n))),
            _ => {}
        }
        cl /= 2;
    }
    fallback
        .ok_or_else(|| GpuError::Unsupported("no cluster of the attention kernel can be scheduled on this GPU".into()))
}

/// The weight-only calls of one dense step (`m x n x k` and fusion), for compiling their kernels ahead; MoE
/// experts and the router compile on first use.
fn step_calls(cfg: &BenchConfig, silu_in_down: bool, fused_ffn: bool) -> Vec<(Lin, Call)> {
    let dense = |l: &Lin| (cfg.moe.is_none() && !fused_ffn) || !matches!(l, Lin::GateUp | Lin::Down);
    Lin::ALL
        .into_iter()
        .zip(cfg.linears())
        .filter(|(l, _)| dense(l))
        .map(|(l, (_, n, k))| (l, (cfg.batch, n, k, l.fusion(cfg.fuse, silu_in_down))))
        .collect()
}

/// One weight-only call: `m x n x k` and its fusion.
type Call = (usize, usize, usize, Fusion);

/// `decode_ops.cu` compiled with `opts`, once per process (every scheme of a `--schemes` run shares it).
fn decode_ops_cubin(opts: &[String]) -> Result<Vec<u8>, GpuError> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<HashMap<Vec<String>, Vec<u8>>>> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let lock = || cache.lock().map_err(|_| GpuError::Unsupported("decode kernel cache lock poisoned".into()));
    if let Some(c) = lock()?.get(opts) {
        return Ok(c.clone());
    }
    let (cubin, _) = compile_cubin(DECODE_OPS_SOURCE, "decode_ops.cu", opts)?;
    lock()?.insert(opts.to_vec(), cubin.clone());
    Ok(cubin)
}

fn f16_bits(v: &[f32]) -> Vec<u16> {
    v.par_iter().map(|x| f16::from_f32(*x).to_bits()).collect()
}

impl Gpu {
    /// Builds and measures one decode step (see the module docs). `progress` gets a line per stage.
    pub fn model_bench(&self, cfg: &BenchConfig, mut progress: impl FnMut(&str)) -> Result<StepResult, GpuError> {
        cfg.validate()?;
        let (major, minor) = self.compute_capability;
        let pdl = major >= 9;
        let mut opts = vec![
            format!("--gpu-architecture=sm_{major}{minor}"),
            "--std=c++17".into(),
            format!("-DHD={HEAD_DIM}"),
            format!("-DPDL={}", u32::from(pdl)),
            format!("-DGQA={}", cfg.heads / cfg.kv_heads),
            format!("-DKV8={}", u32::from(cfg.kv == KvFormat::Fp8E4M3)),
            // Source lines in the CUBIN for profilers (no effect on the code).
            "--generate-line-info".into(),
        ];
        opts.extend(crate::weight_only::nvrtc::extra_options());
        // The ring GEMV where the step's default takes it (`ring::in_step`; `--gemv ring=` overrides).
        let peak = ring::peak_memory_gb_s(&self.ctx);
        let device = (self.sm_count, (major * 10 + minor) as u32, peak);
        // A linear whose shape has another best variant in the step (`Variant::best_in_step_on`: 8-bit down_proj
        // at batch 1; FP16 at batch 1 on fast memory, the x-in-registers engine) runs on an engine of that variant
        // where no variant was forced; one engine per variant.
        // From 2 rows of x the 4-bit formats' qkv, o_proj, gate_up and LM head take the ring on the tensor cores where
        // it would alone (`ring::mma_auto`: 2-16 rows, up to 7-24 or 128 row steps a CTA by format, rows and K; it fuses their
        // norm and residual add, not down_proj's SwiGLU on load), unless `--gemv ring=false`.
        let mma = |name: &str, n, k| {
            name != "down_proj"
                && major >= 9
                && cfg.gemv.tuning.ring != Some(false)
                && ring::mma_auto((cfg.weights, XDtype::F16), (cfg.batch, n, k), self.sm_count, peak)
        };
        let tuning = Tuning { ring: cfg.gemv.tuning.ring.or(ring::in_step(cfg.weights, peak)), ..cfg.gemv.tuning };
        // `ring::in_step`'s choice is a default's: a ring build that spills falls back (only `--gemv ring=true` makes
        // the spill the error).
        let engine = |v: Variant| -> Result<WeightOnlyGemv, GpuError> {
            let e = WeightOnlyGemv::new(self, cfg.weights, XDtype::F16)?.with_variant(v, None).with_tuning(tuning)?;
            Ok(if cfg.gemv.tuning.ring.is_none() { e.with_ring_fallback() } else { e })
        };
        // Where the tensor-core ring's build for a linear (with the linear's fusion) spills registers under this
        // NVRTC, its x-in-registers engine would run the linear on the x-in-registers kernel, about 10x slower at 16
        // rows (session 56 r1: 141 us against 14.7 at NVFP4 16x14336x4096): the linear takes the bulk ring (tensor
        // cores) instead, as `measure` does. The probe builds the ring once per process (a later launch loads the
        // same cubin); the linears the step launches otherwise (an MoE's experts, the fused FFN's) are not probed.
        let launched = |l: Lin| (cfg.moe.is_none() && !cfg.fused_ffn(major)) || !matches!(l, Lin::GateUp | Lin::Down);
        // (An engine compiles nothing until asked.)
        let probe = engine(Variant::XReg)?;
        let mut variants = [Variant::XReg; 5];
        for ((slot, l), (name, n, k)) in variants.iter_mut().zip(Lin::ALL).zip(cfg.linears()) {
            *slot = match cfg.gemv.variant {
                Some(v) => v,
                None if mma(name, n, k) && launched(l) => {
                    if probe.ring_spills_fused(cfg.batch, n, k, l.fusion(cfg.fuse, false))? {
                        progress(&format!(
                            "{name} ({}x{n}x{k}): the tensor-core ring GEMV's build spills registers under this \
                             NVRTC; the bulk ring runs it",
                            cfg.batch
                        ));
                        Variant::XMma
                    } else {
                        Variant::XReg
                    }
                }
                None if mma(name, n, k) => Variant::XReg,
                None => Variant::best_in_step_on(cfg.weights, XDtype::F16, cfg.batch, n, k, device),
            };
        }
        drop(probe);
        // The main engine: FP16's where its linears take the x-in-registers engine, else `Variant::best`.
        let main_variant =
            cfg.gemv.variant.unwrap_or(if cfg.weights == WoFormat::Fp16 && variants.contains(&Variant::XReg) {
                Variant::XReg
            } else {
                Variant::best(cfg.weights, XDtype::F16, cfg.batch)
            });
        let gemv = engine(main_variant)?;
        let mut others: Vec<Variant> = Vec::new();
        for &v in &variants {
            if v != main_variant && !others.contains(&v) {
                others.push(v);
            }
        }
        let other_engines = others.iter().map(|&v| engine(v)).collect::<Result<Vec<_>, _>>()?;
        let lin: [&WeightOnlyGemv; 5] = variants.map(|v| match others.iter().position(|&o| o == v) {
            Some(i) => &other_engines[i],
            None => &gemv,
        });
        let engines = Engines { main: &gemv, lin };
        // The MoE router stays in FP16 (the activation format), as serving engines keep it.
        let router = match cfg.moe {
            Some(_) => Some(
                WeightOnlyGemv::new(self, WoFormat::Fp16, XDtype::F16)?
                    .with_variant(Variant::best(WoFormat::Fp16, XDtype::F16, cfg.batch), None),
            ),
            None => None,
        };
        let (b, d, f) = (cfg.batch, cfg.hidden, cfg.intermediate);
        // `auto` falls back to the two GEMVs where the fused kernel refuses this GPU (its CTA must fit an SM).
        let fused_ffn = match (cfg.fused_ffn(major), cfg.ffn) {
            (false, _) => None,
            (true, FfnKernel::Auto) => FusedFfn::new(self, cfg.weights, d, f)
                .map_err(|e| progress(&format!("FFN: two GEMVs (the fused kernel: {e})")))
                .ok(),
            (true, _) => Some(FusedFfn::new(self, cfg.weights, d, f)?),
        };
        let silu_in_down =
            cfg.fuse && cfg.moe.is_none() && fused_ffn.is_none() && engines.of(Lin::Down).fuses_silu(b, d, f);
        // NVRTC compiles the step's kernels on other threads while this one quantizes and uploads the weights
        // (checked first, so a missing NVRTC fails before minutes of quantization).
        crate::weight_only::nvrtc_available()?;
        progress("compiling decode kernels (NVRTC, in the background)");
        let keys: Vec<_> = step_calls(cfg, silu_in_down, fused_ffn.is_some())
            .into_iter()
            .flat_map(|(l, call)| engines.of(l).kernel_keys(&[call]))
            .collect();
        let (cubin, built) = std::thread::scope(|scope| {
            let compiler = scope.spawn(|| {
                precompile(&keys);
                decode_ops_cubin(&opts)
            });
            let built = match &cfg.checkpoint {
                None => self.random_weights(cfg, engines, router.as_ref(), fused_ffn.as_ref(), &mut progress),
                Some(dir) => {
                    self.checkpoint_weights(cfg, dir, engines, router.as_ref(), fused_ffn.as_ref(), &mut progress)
                }
            };
            let cubin =
                compiler.join().unwrap_or_else(|_| Err(GpuError::Unsupported("the NVRTC thread panicked".into())));
            (cubin, built)
        });
        let Built { mut layers, mut lm_head, final_norm: norm_w, x0, dense_ffn, samples } = built?;
        let module = self.ctx.load_module(Ptx::from_binary(cubin?))?;
        let ops = Ops {
            add_rmsnorm: module.load_function("add_rmsnorm")?,
            rope_append: module.load_function("rope_append")?,
            attn_split: module.load_function("attn_split")?,
            attn_combine: module.load_function("attn_combine")?,
            attn_rope: module.load_function("attn_rope")?,
            attn_cluster: if major >= 9 { Some(module.load_function("attn_cluster")?) } else { None },
            silu_mul: module.load_function("silu_mul")?,
            topk_route: module.load_function("topk_route")?,
            moe_gather: module.load_function("moe_gather")?,
            moe_combine: module.load_function("moe_combine")?,
        };
        let (splits, chunk) = attn_splits(cfg, self.sm_count);
        let zeros = |n: usize| self.stream.alloc_zeros::<u16>(n);
        let mut acts = Acts {
            x: self.stream.clone_htod(&f16_bits(&x0))?,
            h: zeros(b * d)?,
            qkv: zeros(b * cfg.qkv_rows())?,
            attn: zeros(b * cfg.heads * HEAD_DIM)?,
            o: zeros(b * d)?,
            gu: zeros((b * 2 * f).max(1))?,
            act: zeros((b * f).max(1))?,
            down: zeros(b * d)?,
            logits: zeros(b * cfg.vocab)?,
            part: self.stream.alloc_zeros::<f32>(b * cfg.heads * splits as usize * (HEAD_DIM + 2))?,
            counters: self.stream.alloc_zeros::<u32>(b * cfg.heads)?,
            moe: cfg.moe.map(|m| MoeActs::new(&self.stream, cfg, &m)).transpose()?,
        };
        self.stream.synchronize()?;
        // SAFETY: from here every launch goes to `s` (one stream) and the host reads device memory only after
        // synchronizing it, so cudarc's cross-stream event tracking (which would record events inside the
        // graph capture) is not needed.
        unsafe { self.ctx.disable_event_tracking() };
        let s = self.ctx.new_stream()?;
        let (cluster, resident) = match (cfg.fuse, cfg.attention, &ops.attn_cluster) {
            (false, _, _) | (true, AttnKernel::Splits, _) => (0, 0),
            (true, AttnKernel::Auto | AttnKernel::Cluster, Some(f)) => cluster_ctas(cfg, self.sm_count, &s, f)?,
            (true, AttnKernel::Cluster, None) => {
                return Err(GpuError::Unsupported(format!(
                    "the cluster attention kernel needs sm_90 or later (this GPU is sm_{major}{minor})"
                )))
            }
            (true, AttnKernel::Auto, None) => (0, 0),
        };
        if cfg.kv == KvFormat::Fp8E4M3 && cluster == 0 {
            return Err(GpuError::Unsupported(format!(
                "an FP8 KV cache is read by the cluster attention kernel only (fused step, sm_90+; this GPU is sm_{major}{minor})"
            )));
        }
        let arch = (major * 10 + minor) as u32;
        let qkv_attn = match (cfg.qkv, cfg.fused_qkv_unsupported(), cluster > 0) {
            (QkvKernel::Gemv, _, _) => None,
            (QkvKernel::Fused, Some(why), _) => return Err(GpuError::Unsupported(format!("--qkv fused: {why}"))),
            (QkvKernel::Fused, None, false) => {
                return Err(GpuError::Unsupported("--qkv fused: the step runs no cluster attention (sm_90+)".into()))
            }
            (QkvKernel::Fused, None, true) => {
                Some(QkvAttention::build(&self.ctx, &s, arch, self.sm_count, cfg.qkv_shape())?)
            }
        };
        let attention_kernel = if !cfg.fuse {
            format!("attn_split + attn_combine, {splits} splits of {chunk} positions")
        } else if let Some(q) = &qkv_attn {
            format!(
                "attn_qkv (qkv projection + attention), {} clusters of {} CTAs ({} resident at once), {} KV",
                b * cfg.kv_heads,
                q.cluster,
                q.resident,
                if cfg.kv == KvFormat::Fp8E4M3 { "FP8 E4M3" } else { "FP16" }
            )
        } else if cluster > 0 {
            format!(
                "attn_cluster, {} clusters of {cluster} CTAs ({resident} resident at once), {} KV",
                b * cfg.kv_heads,
                if cfg.kv == KvFormat::Fp8E4M3 { "FP8 E4M3" } else { "FP16" }
            )
        } else {
            format!("attn_rope, {splits} splits of {chunk} positions")
        };
        progress(&format!("attention: {attention_kernel}"));
        if let Some(q) = &qkv_attn {
            progress(&format!(
                "qkv projection inside the attention: {} row steps and {} ring slots per CTA, {} registers (capped for {} CTAs per SM)",
                q.steps, q.slots, q.registers, q.min_blocks
            ));
        }
        if let Some(ffn) = &fused_ffn {
            progress(&format!(
                "FFN: one fused kernel (norm, gate_up, SiLU-and-mul, down, residual add), {} CTAs, {} registers",
                ffn.ctas, ffn.registers
            ));
        }
        let en = Enqueue {
            cfg,
            ops: &ops,
            engines,
            router: router.as_ref(),
            ffn: fused_ffn.as_ref(),
            qkv_attn: qkv_attn.as_ref(),
            s: &s,
            splits,
            chunk,
            cluster,
            silu_in_down,
            pdl,
        };

        // Correctness: one op-by-op step (which also fixes each MoE layer's experts to its routing), then the
        // last layer's attention (and routing) against the CPU.
        progress("checking one step against the CPU reference");
        let norm_final = &norm_w;
        let (moe_check, dense_check) = if cfg.moe.is_some() {
            (en.check_layers(&mut layers, &mut acts)?, None)
        } else {
            (None, en.check_dense_layers(&mut layers, &mut acts, dense_ffn.as_ref(), &samples)?)
        };
        drop(dense_ffn);
        if let Some(c) = &dense_check {
            for (what, e) in [("FFN", c.ffn), ("o_proj", c.o_proj)] {
                if e.is_nan() || e > 1e-2 {
                    return Err(GpuError::Incorrect(format!(
                        "the last layer's {what}: relative error {e:.2e} > 1e-2 of what it adds to the residual stream"
                    )));
                }
            }
            if c.qkv.is_nan() || c.qkv > 1e-2 {
                return Err(GpuError::Incorrect(format!(
                    "the last layer's qkv projection: relative error {:.2e} > 1e-2 against the CPU",
                    c.qkv
                )));
            }
        }
        en.final_ops(norm_final, &mut lm_head, &mut acts)?;
        s.synchronize()?;
        // The LM head on the stream it read: the final norm fused in (x), or after the norm kernel (h).
        let lm_in = en.row0(if cfg.fuse { &acts.x } else { &acts.h }, cfg.hidden)?;
        let lm_want = samples.lm_head.reference(&lm_in, cfg.fuse.then_some(f64::from(NORM_EPS)));
        let lm_head_rel_error = rel_error(&samples.lm_head.pick(&en.row0(&acts.logits, cfg.vocab)?), &lm_want);
        if lm_head_rel_error > 1e-2 {
            return Err(GpuError::Incorrect(format!(
                "the LM head: relative error {lm_head_rel_error:.2e} > 1e-2 against the CPU"
            )));
        }
        let attention_rel_error =
            check_attention(cfg, &s, layers.last().ok_or_else(|| GpuError::Unsupported("no layers".into()))?, &acts)?;
        if attention_rel_error > 1e-2 {
            return Err(GpuError::Incorrect(format!(
                "decode attention: relative error {attention_rel_error:.2e} > 1e-2"
            )));
        }
        // The fused projection's rows against the GEMV's on the last layer (after the attention check: this
        // appends the new key and value again).
        let qkv_rel_error = match qkv_attn {
            Some(_) => {
                let last = layers.last_mut().ok_or_else(|| GpuError::Unsupported("no layers".into()))?;
                let e = en.check_fused_qkv(last, &mut acts)?;
                if e.is_nan() || e > 1e-2 {
                    return Err(GpuError::Incorrect(format!(
                        "qkv projection inside the attention: relative error {e:.2e} > 1e-2 against the GEMV"
                    )));
                }
                Some(e)
            }
            None => None,
        };
        let logits = s.clone_dtoh(&acts.logits)?;
        if logits.iter().any(|v| !f16::from_bits(*v).to_f32().is_finite()) {
            return Err(GpuError::Incorrect("non-finite logits after one step".into()));
        }

        // Per-op times: each op launched back to back, rotating over the layers (no L2 reuse across runs).
        progress("timing each op");
        let tcfg = TimingConfig { min_runs: 30, budget_ms: 300.0, ..TimingConfig::default() };
        let nl = cfg.layers_built;
        let per_layer = cfg.layers as u64;
        let mut op_times = Vec::new();
        let mut time_op = |name: &str, kind: &str, count: u64, op: &mut dyn FnMut(usize) -> Result<(), GpuError>| {
            let st = timing::time(&self.ctx, &s, &tcfg, op)?;
            op_times.push(OpTime {
                name: name.into(),
                kind: kind.into(),
                count,
                time_us: st.median_us,
                in_step_us: None,
            });
            Ok::<(), GpuError>(())
        };
        {
            let layers_ptr = &mut layers;
            let a = &mut acts;
            let fuse = cfg.fuse;
            if !fuse {
                time_op("input_layernorm", "norm", per_layer, &mut |i| en.norm(a, true, &layers_ptr[i % nl].norm_in))?;
            }
            if en.qkv_attn.is_some() {
                // One launch: timed as the attention, qkv_proj marked as inside it.
                time_op("attention", "attention", per_layer, &mut |i| {
                    en.qkv_and_attention(&mut layers_ptr[i % nl], a)
                })?;
            } else {
                time_op("qkv_proj", "linear", per_layer, &mut |i| en.linear(&mut layers_ptr[i % nl].qkv, Lin::Qkv, a))?;
                if !fuse {
                    time_op("rotary_emb", "elementwise", per_layer, &mut |i| en.rope(&mut layers_ptr[i % nl], a))?;
                }
                time_op("attention", "attention", per_layer, &mut |i| en.attention(&mut layers_ptr[i % nl], a))?;
            }
            time_op("o_proj", "linear", per_layer, &mut |i| en.linear(&mut layers_ptr[i % nl].o, Lin::O, a))?;
            if !fuse {
                time_op("post_attention_layernorm", "norm", per_layer, &mut |i| {
                    en.norm(a, true, &layers_ptr[i % nl].norm_post)
                })?;
            }
            if let Some(m) = &cfg.moe {
                // Each MoE op of layer i, as the step runs it (the experts routed in the checked step).
                let moe_op = |layers: &mut Vec<Layer>, i: usize, a: &mut Acts, op: MoeOp| match &mut layers[i % nl].ffn
                {
                    Ffn::Moe(ml) => en.moe_op(ml, a, op),
                    Ffn::Dense { .. } | Ffn::Fused(_) => {
                        Err(GpuError::Unsupported("a dense layer in a MoE model".into()))
                    }
                };
                let mut ops_list = vec![
                    ("router_gate", "linear", MoeOp::Router),
                    ("topk_routing", "elementwise", MoeOp::TopK),
                    ("experts_gate_up", "linear", MoeOp::GateUp),
                ];
                if en.experts_need_silu(layers_ptr) {
                    ops_list.push(("silu_and_mul", "elementwise", MoeOp::Silu));
                }
                ops_list.push(("experts_down", "linear", MoeOp::Down));
                if m.shared_intermediate > 0 {
                    ops_list.push(("shared_experts_gate_up", "linear", MoeOp::SharedGateUp));
                    if !en.shared_silu_in_down() {
                        ops_list.push(("shared_silu_and_mul", "elementwise", MoeOp::SharedSilu));
                    }
                    ops_list.push(("shared_experts_down", "linear", MoeOp::SharedDown));
                }
                ops_list.push(("residual_add", "elementwise", MoeOp::Combine));
                for (name, kind, op) in ops_list {
                    time_op(name, kind, per_layer, &mut |i| moe_op(layers_ptr, i, a, op))?;
                }
            } else if let Some(ffn) = en.ffn {
                // The whole FFN in one kernel: timed as gate_up_proj, the ops inside it marked fused.
                time_op("gate_up_proj", "linear", per_layer, &mut |i| match &mut layers_ptr[i % nl].ffn {
                    Ffn::Fused(w) => ffn.run(en.s, w, &mut a.x, NORM_EPS, en.pdl),
                    _ => Err(GpuError::Unsupported("a layer without the fused FFN's weights".into())),
                })?;
            } else {
                time_op("gate_up_proj", "linear", per_layer, &mut |i| {
                    let (gate_up, _) = layers_ptr[i % nl].dense()?;
                    en.linear(gate_up, Lin::GateUp, a)
                })?;
                if !en.silu_in_down {
                    time_op("silu_and_mul", "elementwise", per_layer, &mut |_| en.silu(a))?;
                }
                time_op("down_proj", "linear", per_layer, &mut |i| {
                    let (_, down) = layers_ptr[i % nl].dense()?;
                    en.linear(down, Lin::Down, a)
                })?;
            }
            if !fuse {
                time_op("final_norm", "norm", 1, &mut |_| en.norm(a, true, norm_final))?;
            }
            time_op("lm_head", "linear", 1, &mut |_| en.linear(&mut lm_head, Lin::LmHead, a))?;
        }
        let ops_sum_us: f64 = op_times.iter().map(|o| o.time_us * o.count as f64).sum();

        // The step as a CUDA graph: the built layers, scaled, plus the final norm and LM head.
        progress("capturing the step in a CUDA graph");
        let gcfg = TimingConfig {
            warmup: 3,
            min_runs: 20,
            max_runs: 200,
            budget_ms: 2000.0,
            max_inner: 1,
            power_ms: 0.0,
            graph: false,
        };
        let st = timing::time_captured(&self.ctx, &s, &gcfg, || en.layers(&mut layers, &mut acts))?;
        // Each layer op's share of that graph: the graph again without it (dense fused steps).
        if cfg.fuse && cfg.moe.is_none() {
            progress("timing the step's graph without each op in turn");
            for (name, skip) in en.step_ops() {
                let without = timing::time_captured(&self.ctx, &s, &gcfg, || {
                    en.layers_without(&mut layers, &mut acts, Some(skip))
                })?;
                if let Some(o) = op_times.iter_mut().find(|o| o.name == name) {
                    o.in_step_us = Some((st.median_us - without.median_us) / nl as f64);
                }
            }
        }
        let fin: f64 = op_times.iter().filter(|o| o.count == 1).map(|o| o.time_us).sum();
        let step_us = st.median_us * cfg.layers as f64 / nl as f64 + fin;
        Ok(StepResult {
            device: self.name.clone(),
            step_us,
            ops_sum_us,
            replays: st.runs,
            layers_built: nl,
            ops: op_times,
            fused: with_qkv_in_attention(
                match cfg.moe {
                    Some(_) => en.moe_fused_ops(&layers),
                    None => fused_ops(cfg.fuse, silu_in_down, fused_ffn.is_some()),
                },
                qkv_attn.is_some(),
            ),
            attention_rel_error,
            qkv_rel_error,
            ffn_rel_error: dense_check.as_ref().map(|c| c.ffn),
            linear_rel_errors: LinearErrors {
                qkv: dense_check.as_ref().map(|c| c.qkv),
                o_proj: dense_check.as_ref().map(|c| c.o_proj),
                lm_head: lm_head_rel_error,
            },
            attention_kernel,
            weights: match &cfg.checkpoint {
                Some(dir) => format!("checkpoint {}", dir.display()),
                None => "random".into(),
            },
            moe: moe_check,
        })
    }
}

/// The step's weights on the device.
struct Built {
    layers: Vec<Layer>,
    lm_head: DeviceWeights,
    /// The final RMSNorm's weight (read by the unfused step's norm kernel).
    final_norm: CudaSlice<u16>,
    /// The residual stream the first layer reads, batch x hidden.
    x0: Vec<f32>,
    /// A dense model's quantized gate_up (the norm folded in with the fused step) and down of its last
    /// layer (random weights: every layer's), for the step check (`None` for MoE models).
    dense_ffn: Option<(PackedWeights, PackedWeights)>,
    /// Samples of the last layer's qkv and o_proj and of the LM head, for the step check.
    samples: Samples,
}

/// What the checked step of a dense model measured (`Enqueue::check_dense_layers`): relative errors.
struct DenseCheck {
    /// What the last layer's FFN added to the residual stream.
    ffn: f64,
    /// The last layer's qkv rows.
    qkv: f64,
    /// What the last layer's o_proj adds to the residual stream (launched on a zeroed stream).
    o_proj: f64,
}

/// The step check's samples of the attention linears and the LM head (`check::Sampled`).
struct Samples {
    qkv: Sampled,
    o: Sampled,
    lm_head: Sampled,
}

impl Gpu {
    /// Random weights of the model's shapes: one tensor per linear type, quantized once and uploaded for
    /// every layer (each layer reads its own memory), RMSNorm weights around 1, a random residual stream.
    /// `engines`: the weight-only engine of the step's linears and that of down_proj (often the same).
    fn random_weights(
        &self,
        cfg: &BenchConfig,
        engines: Engines<'_>,
        router: Option<&WeightOnlyGemv>,
        fused_ffn: Option<&FusedFfn>,
        progress: &mut impl FnMut(&str),
    ) -> Result<Built, GpuError> {
        let d = cfg.hidden;
        // RMSNorm weights (one per norm type, shared by the layers): around 1, never zero.
        let gamma = |seed: u64| random_f32(d, seed).iter().map(|v| 1.0 + 0.1 * v).collect::<Vec<f32>>();
        let (g_in, g_post, g_final) = (gamma(10), gamma(20), gamma(7));
        let mut packed = Vec::new();
        for (i, (name, n, k)) in cfg.linears().into_iter().enumerate() {
            if cfg.moe.is_some() && matches!(name, "gate_up_proj" | "down_proj") {
                packed.push(None);
                continue;
            }
            progress(&format!("quantizing {name} {n}x{k} to {}", cfg.weights.format()));
            // Scaled like a trained layer's init (uniform / sqrt(K)) so activations keep their size through
            // the layers instead of overflowing FP16.
            let scale = 1.0 / (k as f32).sqrt();
            let mut w: Vec<f32> = random_f32(n * k, 1000 + i as u64).into_iter().map(|v| v * scale).collect();
            // Fused: the norm in front of this linear is folded into its columns before quantization.
            let folded = match (cfg.fuse, name) {
                (true, "qkv_proj") => Some(&g_in),
                (true, "gate_up_proj") => Some(&g_post),
                (true, "lm_head") => Some(&g_final),
                _ => None,
            };
            if let Some(g) = folded {
                fold_columns(&mut w, g);
            }
            let p = quantize_pack(cfg.weights, &w, n, k)?;
            packed.push(Some(p));
        }
        // Rearranged for the kernels once (tensor-core fragment order, scale tables), uploaded per layer.
        let staged = packed
            .iter()
            .zip(Lin::ALL)
            .map(|(p, l)| p.as_ref().map(|p| engines.of(l).stage(p)).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let ffn_staged = match (fused_ffn, &packed[2], &packed[3]) {
            (Some(ffn), Some(gu), Some(dn)) => Some((ffn, ffn.stage(gu, dn)?)),
            _ => None,
        };
        let packed_at = |i: usize| staged[i].as_ref().ok_or_else(|| GpuError::Unsupported("no dense FFN".into()));
        let mut moe = match (cfg.moe, router) {
            (Some(m), Some(r)) => Some(self.random_moe(cfg, &m, engines.main, r, &g_post, progress)?),
            _ => None,
        };
        let (norm_in, norm_post) =
            (self.stream.clone_htod(&f16_bits(&g_in))?, self.stream.clone_htod(&f16_bits(&g_post))?);
        let mut layers = Vec::with_capacity(cfg.layers_built);
        for l in 0..cfg.layers_built {
            progress(&format!("uploading layer {}/{}", l + 1, cfg.layers_built));
            let (kc, vc) = self.kv_caches(cfg, l)?;
            let ffn = match (moe.as_mut(), &ffn_staged) {
                (Some(m), _) => Ffn::Moe(m.take_layer()?),
                (None, Some((ffn, st))) => Ffn::Fused(ffn.upload(st)?),
                (None, None) => Ffn::Dense {
                    gate_up: engines.of(Lin::GateUp).upload_staged(packed_at(2)?)?,
                    down: engines.of(Lin::Down).upload_staged(packed_at(3)?)?,
                },
            };
            layers.push(Layer {
                qkv: engines.of(Lin::Qkv).upload_staged(packed_at(0)?)?,
                o: engines.of(Lin::O).upload_staged(packed_at(1)?)?,
                ffn,
                norm_in: norm_in.clone(),
                norm_post: norm_post.clone(),
                kc,
                vc,
            });
        }
        let lm_head = engines.of(Lin::LmHead).upload_staged(packed_at(4)?)?;
        let sample = |i: usize| {
            packed[i].as_ref().map(Sampled::of).ok_or_else(|| GpuError::Unsupported("no attention linears".into()))
        };
        let samples = Samples { qkv: sample(0)?, o: sample(1)?, lm_head: sample(4)? };
        let dense_ffn = match (packed.get_mut(2).and_then(Option::take), packed.get_mut(3).and_then(Option::take)) {
            (Some(gu), Some(dn)) => Some((gu, dn)),
            _ => None,
        };
        Ok(Built {
            layers,
            lm_head,
            final_norm: self.stream.clone_htod(&f16_bits(&g_final))?,
            x0: random_f32(cfg.batch * d, 3),
            dense_ffn,
            samples,
        })
    }

    /// A Hugging Face checkpoint's weights (`bench_weights`), quantized and uploaded layer by layer (one
    /// layer's f32 matrices in host memory at a time); the residual stream starts as the embedding of token
    /// 1 in every batch row.
    fn checkpoint_weights(
        &self,
        cfg: &BenchConfig,
        dir: &std::path::Path,
        engines: Engines<'_>,
        router: Option<&WeightOnlyGemv>,
        fused_ffn: Option<&FusedFfn>,
        progress: &mut impl FnMut(&str),
    ) -> Result<Built, GpuError> {
        let src = SourceModel::open(dir).map_err(|e| GpuError::Weights(e.to_string()))?;
        // Quantized and uploaded by the linear's engine; `keep` also samples the rows for the step check.
        let up_sampled = |l: Lin, name: &str, w: &[f32], n: usize, k: usize, keep: bool| {
            let p = quantize_pack(cfg.weights, w, n, k).map_err(|e| GpuError::Weights(format!("{name}: {e}")))?;
            Ok::<_, GpuError>((engines.of(l).upload(&p)?, keep.then(|| Sampled::of(&p))))
        };
        let [(_, qn, qk), (_, on, ok), (_, gn, gk), (_, dn, dk), (_, ln, lk)] = cfg.linears();
        let mut layers = Vec::with_capacity(cfg.layers_built);
        // The last dense layer's quantized FFN and samples of its qkv and o_proj, kept for the step check.
        let mut dense_ffn = None;
        let (mut qkv_sample, mut o_sample) = (None, None);
        for l in 0..cfg.layers_built {
            progress(&format!(
                "layer {}/{}: reading and quantizing to {}",
                l + 1,
                cfg.layers_built,
                cfg.weights.format()
            ));
            let m = layer_matrices(&src, cfg, l)?;
            let (kc, vc) = self.kv_caches(cfg, l)?;
            let last = l + 1 == cfg.layers_built;
            let (qkv, qs) = up_sampled(Lin::Qkv, &format!("layer {l} qkv"), &m.qkv, qn, qk, last)?;
            let (o, os) = up_sampled(Lin::O, &format!("layer {l} o_proj"), &m.o, on, ok, last)?;
            (qkv_sample, o_sample) = (qs.or(qkv_sample), os.or(o_sample));
            layers.push(Layer {
                qkv,
                o,
                ffn: match (router, fused_ffn) {
                    (Some(r), _) => {
                        // The norm as folded into the router and experts: the fused step's (MoE needs it).
                        Ffn::Moe(self.checkpoint_moe_layer(
                            cfg,
                            &src,
                            dir,
                            l,
                            &m.norm_post,
                            engines.main,
                            r,
                            progress,
                        )?)
                    }
                    (None, fused) => {
                        let pack = |name: &str, w: &[f32], n: usize, k: usize| {
                            quantize_pack(cfg.weights, w, n, k)
                                .map_err(|e| GpuError::Weights(format!("layer {l} {name}: {e}")))
                        };
                        let gate_up = pack("gate_up", &m.gate_up, gn, gk)?;
                        let down = pack("down_proj", &m.down, dn, dk)?;
                        let ffn = match fused {
                            Some(ffn) => Ffn::Fused(ffn.upload(&ffn.stage(&gate_up, &down)?)?),
                            None => Ffn::Dense {
                                gate_up: engines.of(Lin::GateUp).upload(&gate_up)?,
                                down: engines.of(Lin::Down).upload(&down)?,
                            },
                        };
                        if l + 1 == cfg.layers_built {
                            dense_ffn = Some((gate_up, down));
                        }
                        ffn
                    }
                },
                norm_in: self.stream.clone_htod(&f16_bits(&m.norm_in))?,
                norm_post: self.stream.clone_htod(&f16_bits(&m.norm_post))?,
                kc,
                vc,
            });
        }
        progress("reading and quantizing lm_head");
        let h = head_matrices(&src, cfg, 1)?;
        let (lm_head, lm_sample) = up_sampled(Lin::LmHead, "lm_head", &h.lm_head, ln, lk, true)?;
        let missing = || GpuError::Unsupported("a model of no layers".into());
        Ok(Built {
            layers,
            lm_head,
            final_norm: self.stream.clone_htod(&f16_bits(&h.final_norm))?,
            x0: h.embedding.repeat(cfg.batch),
            dense_ffn,
            samples: Samples {
                qkv: qkv_sample.ok_or_else(missing)?,
                o: o_sample.ok_or_else(missing)?,
                lm_head: lm_sample.ok_or_else(missing)?,
            },
        })
    }

    /// Layer `l`'s K and V caches: random values in [-1, 1) (the step decodes after a context it did not
    /// prefill), in the cache format.
    fn kv_caches(&self, cfg: &BenchConfig, l: usize) -> Result<(CudaSlice<u8>, CudaSlice<u8>), GpuError> {
        let kv_len = cfg.batch * cfg.kv_heads * (cfg.seq + 1) * HEAD_DIM;
        let bytes = |seed: u64| -> Vec<u8> {
            let v = random_f32(kv_len, seed);
            match cfg.kv {
                KvFormat::F16 => f16_bits(&v).iter().flat_map(|h| h.to_le_bytes()).collect(),
                KvFormat::Fp8E4M3 => v.iter().map(|x| E4M3.encode(E4M3.round(x / KV_FP8_SCALE)) as u8).collect(),
            }
        };
        Ok((self.stream.clone_htod(&bytes(30 + l as u64))?, self.stream.clone_htod(&bytes(40 + l as u64))?))
    }
}

impl Layer {
    /// The dense FFN's weights (gate_up, down); an error for a MoE layer.
    fn dense(&mut self) -> Result<(&mut DeviceWeights, &mut DeviceWeights), GpuError> {
        match &mut self.ffn {
            Ffn::Dense { gate_up, down } => Ok((gate_up, down)),
            Ffn::Moe(_) => Err(GpuError::Unsupported("the unfused step runs dense FFNs only".into())),
            Ffn::Fused(_) => Err(GpuError::Unsupported("this layer's FFN runs as one fused kernel".into())),
        }
    }
}

/// Which of `roofline model`'s ops the step runs inside another kernel.
fn fused_ops(fuse: bool, silu_in_down: bool, fused_ffn: bool) -> Vec<FusedOp> {
    if fuse && fused_ffn {
        let pairs = [
            ("input_layernorm", "qkv_proj"),
            ("rotary_emb", "attention"),
            ("residual_add", "o_proj, gate_up_proj"),
            ("post_attention_layernorm", "gate_up_proj"),
            ("silu_and_mul", "gate_up_proj"),
            ("down_proj", "gate_up_proj"),
            ("final_norm", "lm_head"),
        ];
        return pairs.iter().map(|(n, i)| FusedOp { name: (*n).into(), into: (*i).into(), after: None }).collect();
    }
    let pairs: &[(&str, &str)] = if fuse {
        &[
            ("input_layernorm", "qkv_proj"),
            ("rotary_emb", "attention"),
            ("residual_add", "o_proj, down_proj"),
            ("post_attention_layernorm", "gate_up_proj"),
            ("final_norm", "lm_head"),
        ]
    } else {
        &[("residual_add", "input_layernorm, post_attention_layernorm")]
    };
    let silu = silu_in_down.then_some(("silu_and_mul", "down_proj"));
    pairs.iter().copied().chain(silu).map(|(n, i)| FusedOp { name: n.into(), into: i.into(), after: None }).collect()
}

/// `fused` with the qkv projection inside the attention's launch (`qkv_in_attention`): the ops fused into
/// qkv_proj move to the attention, and qkv_proj joins them.
fn with_qkv_in_attention(fused: Vec<FusedOp>, qkv_in_attention: bool) -> Vec<FusedOp> {
    if !qkv_in_attention {
        return fused;
    }
    let mut out: Vec<FusedOp> = fused
        .into_iter()
        .map(|f| if f.into == "qkv_proj" { FusedOp { into: "attention".into(), ..f } } else { f })
        .collect();
    out.push(FusedOp { name: "qkv_proj".into(), into: "attention".into(), after: None });
    out
}

/// RoPE (rotate-half) of one raw head at `pos` on the CPU, rounded to FP16 as the kernels store it.
fn rope_cpu(head: &[f64], pos: usize, theta: f32) -> Vec<f64> {
    let half = HEAD_DIM / 2;
    (0..HEAD_DIM)
        .map(|e| {
            let i = e % half;
            let freq = (-2.0 * i as f64 / HEAD_DIM as f64 * f64::from(theta).log2()).exp2();
            let (sn, cs) = (pos as f64 * freq).sin_cos();
            let r = if e < half { head[e] * cs - head[e + half] * sn } else { head[e] * cs + head[e - half] * sn };
            f64::from(f16::from_f64(r).to_f32())
        })
        .collect()
}

/// Relative error of the last layer's step against f64 CPU references: the attention output (every batch
/// row and head) against softmax(q K^T / sqrt(d)) V over the downloaded cache, and the key and value the
/// step appended at the new position against RoPE of the raw qkv row; the larger of the two. In the fused
/// step q stays raw in qkv and is rotated here; otherwise rope_append rotated it in place.
fn check_attention(cfg: &BenchConfig, s: &Arc<CudaStream>, layer: &Layer, a: &Acts) -> Result<f64, GpuError> {
    let to = |v: &[u16]| v.iter().map(|b| f64::from(f16::from_bits(*b).to_f32())).collect::<Vec<f64>>();
    // The caches as the kernels read them: FP16 values, or FP8 codes times the scale.
    let cache = |v: &[u8]| -> Vec<f64> {
        match cfg.kv {
            KvFormat::F16 => v.chunks_exact(2).map(|b| f64::from(f16::from_le_bytes([b[0], b[1]]).to_f32())).collect(),
            KvFormat::Fp8E4M3 => v.iter().map(|c| f64::from(E4M3.decode(u32::from(*c)) * KV_FP8_SCALE)).collect(),
        }
    };
    // What the cache stores for a value (FP8: rounded to the nearest E4M3 code of value / scale).
    let stored = |x: f64| -> f64 {
        match cfg.kv {
            KvFormat::F16 => x,
            KvFormat::Fp8E4M3 => f64::from(E4M3.round(x as f32 / KV_FP8_SCALE) * KV_FP8_SCALE),
        }
    };
    let (qkv, kc, vc, out) = (
        to(&s.clone_dtoh(&a.qkv)?),
        cache(&s.clone_dtoh(&layer.kc)?),
        cache(&s.clone_dtoh(&layer.vc)?),
        to(&s.clone_dtoh(&a.attn)?),
    );
    let (hq, hkv, smax, len) = (cfg.heads, cfg.kv_heads, cfg.seq + 1, cfg.seq + 1);
    let pos = len - 1;
    let row = cfg.qkv_rows();
    // The appended key (rotated) and value of every KV head.
    let (mut kv_err, mut kv_norm) = (0.0f64, 0.0f64);
    for b in 0..cfg.batch {
        for kh in 0..hkv {
            let raw_k = &qkv[b * row + (hq + kh) * HEAD_DIM..][..HEAD_DIM];
            let raw_v = &qkv[b * row + (hq + hkv + kh) * HEAD_DIM..][..HEAD_DIM];
            let at = ((b * hkv + kh) * smax + pos) * HEAD_DIM;
            let want_k = rope_cpu(raw_k, pos, cfg.rope_theta);
            for i in 0..HEAD_DIM {
                let (wk, wv) = (stored(want_k[i]), stored(raw_v[i]));
                kv_err += (kc[at + i] - wk).powi(2) + (vc[at + i] - wv).powi(2);
                kv_norm += wk.powi(2) + wv.powi(2);
            }
        }
    }
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for b in 0..cfg.batch {
        for h in 0..hq {
            let kh = h / (hq / hkv);
            let q_in = &qkv[b * row + h * HEAD_DIM..][..HEAD_DIM];
            let q_rot;
            let q = if cfg.fuse {
                q_rot = rope_cpu(q_in, pos, cfg.rope_theta);
                &q_rot[..]
            } else {
                q_in
            };
            let base = (b * hkv + kh) * smax * HEAD_DIM;
            let scores: Vec<f64> = (0..len)
                .map(|p| {
                    q.iter().zip(&kc[base + p * HEAD_DIM..][..HEAD_DIM]).map(|(x, y)| x * y).sum::<f64>()
                        / (HEAD_DIM as f64).sqrt()
                })
                .collect();
            let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = w.iter().sum();
            for i in 0..HEAD_DIM {
                let want: f64 = (0..len).map(|p| w[p] * vc[base + p * HEAD_DIM + i]).sum::<f64>() / sum;
                let got = out[(b * hq + h) * HEAD_DIM + i];
                if !got.is_finite() {
                    return Ok(f64::INFINITY);
                }
                err += (got - want).powi(2);
                norm += want * want;
            }
        }
    }
    let kv = (kv_err / kv_norm.max(1e-300)).sqrt();
    let attn = (err / norm.max(1e-300)).sqrt();
    Ok(if kv.is_finite() { attn.max(kv) } else { f64::INFINITY })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_bench::moe::MoeShape;

    fn llama8b() -> BenchConfig {
        BenchConfig {
            hidden: 4096,
            heads: 32,
            kv_heads: 8,
            intermediate: 14336,
            vocab: 128_256,
            layers: 32,
            layers_built: 32,
            batch: 1,
            seq: 1024,
            weights: WoFormat::Fp16,
            rope_theta: 500_000.0,
            fuse: true,
            attention: AttnKernel::Auto,
            kv: KvFormat::F16,
            checkpoint: None,
            moe: None,
            gemv: GemvOverride::default(),
            ffn: FfnKernel::default(),
            qkv: QkvKernel::default(),
        }
    }

    #[test]
    fn moe_configs_are_checked() {
        let mixtral = MoeShape { experts: 8, top_k: 2, expert_intermediate: 14336, shared_intermediate: 0 };
        let ok = BenchConfig { moe: Some(mixtral), intermediate: 0, ..llama8b() };
        ok.validate().unwrap();
        for bad in [
            BenchConfig { fuse: false, ..ok.clone() },
            BenchConfig { moe: Some(MoeShape { top_k: 9, ..mixtral }), ..ok.clone() },
            BenchConfig { moe: Some(MoeShape { experts: 300, ..mixtral }), ..ok.clone() },
            BenchConfig { moe: Some(MoeShape { expert_intermediate: 0, ..mixtral }), ..ok.clone() },
            BenchConfig {
                checkpoint: Some("x".into()),
                moe: Some(MoeShape { shared_intermediate: 1408, ..mixtral }),
                ..ok.clone()
            },
            BenchConfig { intermediate: 0, ..llama8b() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // A Mixtral-layout checkpoint (no shared experts) is read.
        BenchConfig { checkpoint: Some("x".into()), ..ok }.validate().unwrap();
    }

    #[test]
    fn step_calls_are_the_launches_of_the_step() {
        let c = llama8b();
        let norm = Fusion { norm_eps: Some(NORM_EPS), ..Fusion::default() };
        let add = Fusion { add_into_y: true, ..Fusion::default() };
        let calls = step_calls(&c, true, false);
        assert_eq!(
            calls,
            vec![
                (Lin::Qkv, (1, 6144, 4096, norm)),
                (Lin::O, (1, 4096, 4096, add)),
                (Lin::GateUp, (1, 28672, 4096, norm)),
                (Lin::Down, (1, 4096, 14336, Fusion { silu_x: true, ..add })),
                (Lin::LmHead, (1, 128256, 4096, norm))
            ]
        );
        assert_eq!(step_calls(&c, false, false)[3].1 .3, add);
        // the fused FFN: no gate_up or down GEMV
        let fused: Vec<usize> = step_calls(&c, false, true).iter().map(|c| c.1 .1).collect();
        assert_eq!(fused, vec![6144, 4096, 128256]);
        // unfused: plain launches; MoE: no dense FFN
        let plain = step_calls(&BenchConfig { fuse: false, batch: 16, ..llama8b() }, false, false);
        assert!(plain.iter().all(|&(_, (m, _, _, f))| m == 16 && f == Fusion::default()));
        let mixtral = MoeShape { experts: 8, top_k: 2, expert_intermediate: 14336, shared_intermediate: 0 };
        let moe = step_calls(&BenchConfig { moe: Some(mixtral), ..llama8b() }, false, false);
        assert_eq!(moe.iter().map(|c| c.1 .1).collect::<Vec<_>>(), vec![6144, 4096, 128256]);
    }

    #[test]
    fn auto_fuses_the_ffn_where_it_is_faster() {
        let with = |weights| BenchConfig { weights, ..llama8b() };
        for w in [WoFormat::Int4G128, WoFormat::Mxfp4, WoFormat::Nvfp4] {
            assert!(with(w).fused_ffn(9), "{w:?}");
            assert!(!with(w).fused_ffn(8), "{w:?} on sm_80");
        }
        // NF4's fused kernel runs but is slower than its two GEMVs on the H100: opt-in.
        assert!(!with(WoFormat::Nf4).fused_ffn(9));
        assert!(BenchConfig { ffn: FfnKernel::Fused, ..with(WoFormat::Nf4) }.fused_ffn(9));
        assert!(!with(WoFormat::Fp16).fused_ffn(9) && !with(WoFormat::Int8).fused_ffn(9));
    }

    #[test]
    fn llama_shapes() {
        let c = llama8b();
        c.validate().unwrap();
        assert_eq!(c.qkv_rows(), 6144);
        assert_eq!(c.linears()[2], ("gate_up_proj", 28672, 4096));
        assert_eq!(c.linears()[3], ("down_proj", 4096, 14336));
        assert_eq!(c.linears()[4], ("lm_head", 128_256, 4096));
    }

    #[test]
    fn bad_configs_are_errors() {
        for bad in [
            BenchConfig { batch: 17, ..llama8b() },
            BenchConfig { layers_built: 33, ..llama8b() },
            BenchConfig { kv_heads: 5, ..llama8b() },
            BenchConfig { hidden: 4000, ..llama8b() },
            BenchConfig { seq: 0, ..llama8b() },
            BenchConfig { kv: KvFormat::Fp8E4M3, fuse: false, ..llama8b() },
            BenchConfig { kv: KvFormat::Fp8E4M3, attention: AttnKernel::Splits, ..llama8b() },
            BenchConfig { hidden: 8192, heads: 64, kv_heads: 4, ..llama8b() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // The FP8 cache on the fused step with the automatic or cluster kernel is fine before the GPU is known.
        for attention in [AttnKernel::Auto, AttnKernel::Cluster] {
            BenchConfig { kv: KvFormat::Fp8E4M3, attention, ..llama8b() }.validate().unwrap();
        }
    }

    #[test]
    fn fp8_kv_codes_are_the_hardware_layout() {
        // E4M3 (OCP "e4m3fn", what cvt.rn.satfinite.e4m3x2.f32 writes): 448 = 0x7e, 1 = 0x38, -1 = 0xb8,
        // saturating above 448 as the kernel's satfinite does.
        let code = |x: f32| E4M3.encode(E4M3.round(x / KV_FP8_SCALE));
        assert_eq!((code(448.0 * KV_FP8_SCALE), code(KV_FP8_SCALE), code(-KV_FP8_SCALE)), (0x7e, 0x38, 0xb8));
        assert_eq!(code(1000.0 * KV_FP8_SCALE), 0x7e);
        // The random cache's values in [-1, 1) keep E4M3's relative precision (3 mantissa bits).
        for x in [0.9f32, -0.3, 0.02] {
            assert!((E4M3.decode(code(x)) * KV_FP8_SCALE - x).abs() <= x.abs() / 16.0, "{x}");
        }
    }

    #[test]
    fn attention_splits_cover_the_context() {
        for (batch, seq, fuse) in [(1, 1024, true), (1, 1024, false), (16, 4096, true), (1, 1, true), (4, 100, false)] {
            let c = BenchConfig { batch, seq, fuse, ..llama8b() };
            let (splits, chunk) = attn_splits(&c, 132);
            let len = seq + 1;
            assert!(splits as usize * chunk as usize >= len);
            assert!((splits as usize - 1) * (chunk as usize) < len, "{batch} {seq}: {splits} x {chunk}");
        }
    }

    #[test]
    fn decode_ops_compile_without_spills() {
        if let Err(e) = crate::weight_only::nvrtc_available() {
            eprintln!("SKIPPED decode_ops_compile_without_spills: {e}");
            return;
        }
        // Every GQA group size the fused attention is compiled for (its registers grow with it), on Hopper
        // (with the cluster kernel) and Ampere (without).
        // FP8 KV cache (KV8) builds too, where the cluster kernel exists.
        for (arch, gqa, kv8) in
            [(90, 1, 0), (90, 3, 0), (90, 4, 0), (90, MAX_GQA, 0), (80, 4, 0), (90, 4, 1), (90, MAX_GQA, 1)]
        {
            let opts: Vec<String> = vec![
                format!("--gpu-architecture=sm_{arch}"),
                format!("-DKV8={kv8}"),
                "--std=c++17".into(),
                "--ptxas-options=-v".into(),
                format!("-DGQA={gqa}"),
            ];
            let (cubin, log) = compile_cubin(DECODE_OPS_SOURCE, "decode_ops.cu", &opts).unwrap();
            assert!(!cubin.is_empty());
            assert!(
                !log.contains("bytes spill stores")
                    || log.matches(" 0 bytes spill stores").count() == log.matches("bytes spill stores").count(),
                "GQA {gqa}: {log}"
            );
            let regs = |kernel: &str| {
                log.split(&format!("Compiling entry function '{kernel}'")).nth(1).and_then(|t| {
                    t.split("Used ")
                        .nth(1)
                        .and_then(|u| u.split_whitespace().next())
                        .and_then(|n| n.parse::<u32>().ok())
                })
            };
            println!(
                "sm_{arch} GQA {gqa} KV8 {kv8}: attn_rope {:?} attn_cluster {:?} registers",
                regs("attn_rope"),
                regs("attn_cluster")
            );
            assert_eq!(regs("attn_cluster").is_some(), arch >= 90, "{log}");
        }
    }
}
