//! The mixture-of-experts FFN of the decode step (Mixtral, Qwen-MoE): an FP16 router GEMV with the
//! post-attention RMSNorm inside, a top-k kernel that writes each token's experts and weights on the device,
//! the routed experts' gate_up and down GEMVs (each expert's tokens gathered into its own rows when B > 1),
//! the shared experts (if any) as a dense SwiGLU FFN, and a combine kernel adding the weighted expert outputs
//! (and the shared experts') into the residual stream.
//!
//! Which experts a layer runs is data-dependent, and a CUDA graph fixes its launches: the checked step
//! (op by op) reads each layer's routing back from the device and fixes that layer's expert launches to it;
//! the timed launches and the graph replay those experts. Every routed expert has the same shape and
//! format, so the time does not depend on which experts they are, only on how many tokens each takes (for
//! B > 1; at B = 1 each of the top-k experts takes the one token). The router and top-k kernels still run in
//! every step, and the combine weights are the ones they write.
//!
//! Correctness: for the last built layer, the router logits against f64 on the CPU from the downloaded
//! residual stream, the top-k experts and weights against the CPU's pick from the device's logits, one routed
//! expert's gate_up row against its quantized weights on the CPU, and the combine against the downloaded
//! expert outputs.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use half::f16;

use super::{Acts, BenchConfig, Enqueue, Ffn, FusedOp, KArgs, Layer, NORM_EPS};
use crate::bench_weights::{expert_matrices, fold_columns, router_matrix, MoeLayout};
use crate::weight_only::{
    quantize_and_pack, quantize_pack, DeviceWeights, Fusion, PackedWeights, WeightOnlyGemv, WoFormat,
};
use crate::{random_f32, Gpu, GpuError};
use roofline_quant::checkpoint::SourceModel;

/// Most routed experts the top-k kernel takes (`MAX_EXPERTS` in decode_ops.cu).
pub const MAX_EXPERTS: usize = 256;

/// Most experts per token (one warp lane keeps each pick).
const MAX_TOP_K: usize = 32;

/// Shapes of a mixture-of-experts FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MoeShape {
    /// Routed experts.
    pub experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Intermediate size of one routed expert.
    pub expert_intermediate: usize,
    /// Intermediate size of the shared (always active) experts together, run as one SwiGLU FFN; 0: none.
    pub shared_intermediate: usize,
}

impl MoeShape {
    /// Checks what the kernels support.
    pub(super) fn validate(&self, cfg: &BenchConfig) -> Result<(), GpuError> {
        let bad = |m: String| Err(GpuError::Unsupported(m));
        if !cfg.fuse {
            return bad("MoE layers run on the fused step only (drop --no-fuse)".into());
        }
        if cfg.checkpoint.is_some() && self.shared_intermediate > 0 {
            return bad(
                "a checkpoint's shared experts (Qwen2-MoE, with their sigmoid gate) are not read yet; random weights of its shapes are"
                    .into(),
            );
        }
        if !(1..=MAX_EXPERTS).contains(&self.experts) {
            return bad(format!("{} experts: the top-k kernel takes 1..={MAX_EXPERTS}", self.experts));
        }
        if self.top_k == 0 || self.top_k > self.experts.min(MAX_TOP_K) {
            return bad(format!(
                "top-{} of {} experts: must be 1..={}",
                self.top_k,
                self.experts,
                self.experts.min(MAX_TOP_K)
            ));
        }
        if self.expert_intermediate == 0 {
            return bad("expert intermediate size must be > 0".into());
        }
        Ok(())
    }
}

/// The routing check of a MoE step (see the module docs).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MoeCheck {
    /// The last layer's router logits against f64 on the CPU: relative error (L2).
    pub router_rel_error: f64,
    /// One routed expert's gate_up output row against its quantized weights on the CPU: relative error (L2).
    pub expert_rel_error: f64,
    /// The last layer's combine against the downloaded expert outputs: largest error relative to the value.
    pub combine_rel_error: f64,
    /// The experts each built layer ran in the checked step (what the timed launches and the graph replay).
    pub experts_per_layer: Vec<Vec<usize>>,
}

/// One expert's weights (gate and up stacked, down).
pub(super) struct Expert {
    gate_up: DeviceWeights,
    down: DeviceWeights,
}

/// Host copies the routing check reads.
struct MoeHost {
    /// Router weights as the GPU holds them (FP16 values, the norm folded), experts x hidden.
    router: Vec<f32>,
    /// Where the experts' weights came from (to rebuild one for the check).
    experts: ExpertSource,
}

enum ExpertSource {
    /// Seeded random weights (`expert_matrix`) with this post-attention norm folded into gate_up.
    Random { g_post: Vec<f32> },
    /// Layer `layer` of the checkpoint in `dir`.
    Checkpoint { dir: std::path::PathBuf, layer: usize, layout: MoeLayout, g_post: Vec<f32> },
}

impl MoeHost {
    /// Expert `e`'s gate_up as the GPU holds it (quantized values, the norm folded).
    fn gate_up_values(&self, cfg: &BenchConfig, m: &MoeShape, e: usize) -> Result<Vec<f32>, GpuError> {
        match &self.experts {
            ExpertSource::Random { g_post } => Ok(expert_matrix(cfg, m, Some(e), Which::GateUp, g_post)?.1),
            ExpertSource::Checkpoint { dir, layer, layout, g_post } => {
                let src = SourceModel::open(dir).map_err(|err| GpuError::Weights(err.to_string()))?;
                let (gu, _) = expert_matrices(&src, cfg, *layout, *layer, e, g_post)?;
                Ok(quantize_and_pack(cfg.weights, &gu, 2 * m.expert_intermediate, cfg.hidden)?.1)
            }
        }
    }
}

/// One layer's MoE weights and, once the checked step has run, its fixed expert launches.
pub(super) struct MoeLayer {
    router: DeviceWeights,
    experts: Vec<Expert>,
    shared: Option<Expert>,
    route: Option<Route>,
    host: Arc<MoeHost>,
}

impl MoeLayer {
    /// Whether a routed expert's down GEMV does not compute SwiGLU on load (a SiLU-and-mul kernel runs).
    fn needs_silu_kernel(&self) -> bool {
        self.route.as_ref().is_some_and(|r| r.runs.iter().any(|run| !run.silu_in_down))
    }
}

/// A layer's expert launches, fixed to the routing of the checked step.
struct Route {
    runs: Vec<ExpertRun>,
    /// Copies each run's token rows out of x (B > 1); `None`: every run reads x itself.
    gather: Option<Gather>,
    /// Device address of the expert output row of each (token, pick), B x top_k.
    rows: CudaSlice<u64>,
}

/// One routed expert's launches: its tokens' rows through gate_up and down.
struct ExpertRun {
    expert: usize,
    /// Batch rows routed to this expert, ascending.
    tokens: Vec<usize>,
    /// The tokens' x rows (B > 1); `None`: x itself (B = 1).
    x: Option<CudaSlice<u16>>,
    gu: CudaSlice<u16>,
    /// SiLU-and-mul output (when down does not compute it on load).
    act: CudaSlice<u16>,
    out: CudaSlice<u16>,
    silu_in_down: bool,
}

struct Gather {
    dst: CudaSlice<u64>,
    src: CudaSlice<i32>,
    rows: u32,
}

/// The routing buffers of the step.
pub(super) struct MoeActs {
    logits: CudaSlice<u16>,
    ids: CudaSlice<i32>,
    wts: CudaSlice<f32>,
    /// Shared experts: gate_up output, SiLU-and-mul output, down output (single elements when none).
    sgu: CudaSlice<u16>,
    sact: CudaSlice<u16>,
    sout: CudaSlice<u16>,
}

impl MoeActs {
    pub(super) fn new(s: &Arc<CudaStream>, cfg: &BenchConfig, m: &MoeShape) -> Result<Self, GpuError> {
        let (b, si) = (cfg.batch, m.shared_intermediate);
        Ok(Self {
            logits: s.alloc_zeros::<u16>(b * m.experts)?,
            ids: s.alloc_zeros::<i32>(b * m.top_k)?,
            wts: s.alloc_zeros::<f32>(b * m.top_k)?,
            sgu: s.alloc_zeros::<u16>((b * 2 * si).max(1))?,
            sact: s.alloc_zeros::<u16>((b * si).max(1))?,
            sout: s.alloc_zeros::<u16>(if si > 0 { b * cfg.hidden } else { 1 })?,
        })
    }
}

/// The MoE layer's launches, in step order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MoeOp {
    Router,
    TopK,
    GateUp,
    Silu,
    Down,
    SharedGateUp,
    SharedSilu,
    SharedDown,
    Combine,
}

/// The MoE layers' weights being built, handed out layer by layer.
pub(super) struct MoeBuild {
    layers: std::vec::IntoIter<MoeLayer>,
}

impl MoeBuild {
    pub(super) fn take_layer(&mut self) -> Result<MoeLayer, GpuError> {
        self.layers.next().ok_or_else(|| GpuError::Unsupported("more layers than MoE weights built".into()))
    }
}

/// Which expert matrix.
#[derive(Clone, Copy)]
enum Which {
    GateUp,
    Down,
}

/// Random weights of routed expert `e` (`None`: the shared experts), scaled like a trained layer's init, with
/// the post-attention norm folded into gate_up; the f32 values and their quantized packing.
fn expert_matrix(
    cfg: &BenchConfig,
    m: &MoeShape,
    e: Option<usize>,
    which: Which,
    g_post: &[f32],
) -> Result<(PackedWeights, Vec<f32>), GpuError> {
    let d = cfg.hidden;
    let inter = if e.is_some() { m.expert_intermediate } else { m.shared_intermediate };
    let seed = 3000 + 2 * e.map_or(MAX_EXPERTS, |e| e) as u64 + matches!(which, Which::Down) as u64;
    let (n, k) = match which {
        Which::GateUp => (2 * inter, d),
        Which::Down => (d, inter),
    };
    let scale = 1.0 / (k as f32).sqrt();
    let mut w: Vec<f32> = random_f32(n * k, seed).into_iter().map(|v| v * scale).collect();
    if let Which::GateUp = which {
        fold_columns(&mut w, g_post);
    }
    quantize_and_pack(cfg.weights, &w, n, k)
}

/// Device bytes of uploaded weights (the x-in-registers kernels keep a second copy of the scale tables).
fn device_bytes(p: &PackedWeights) -> usize {
    p.codes.len() + 2 * (p.scales.len() + p.zeros.len())
}

impl Gpu {
    /// Random MoE weights for every built layer: the router (FP16, the post-attention norm folded), each
    /// routed expert's own gate_up and down (quantized once, uploaded for every layer, so each layer reads
    /// its own memory), the shared experts. Fails early, with the layer count that fits, when they would not
    /// fit in the GPU's free memory.
    pub(super) fn random_moe(
        &self,
        cfg: &BenchConfig,
        m: &MoeShape,
        gemv: &WeightOnlyGemv,
        router_gemv: &WeightOnlyGemv,
        g_post: &[f32],
        progress: &mut impl FnMut(&str),
    ) -> Result<MoeBuild, GpuError> {
        let (d, nl) = (cfg.hidden, cfg.layers_built);
        let mut rw: Vec<f32> = random_f32(m.experts * d, 2000).into_iter().map(|v| v / (d as f32).sqrt()).collect();
        fold_columns(&mut rw, g_post);
        let (router_packed, router_vals) = quantize_and_pack(WoFormat::Fp16, &rw, m.experts, d)?;
        let host = Arc::new(MoeHost { router: router_vals, experts: ExpertSource::Random { g_post: g_post.to_vec() } });
        let mut experts: Vec<Vec<Expert>> = (0..nl).map(|_| Vec::with_capacity(m.experts)).collect();
        let mut shared: Vec<Option<Expert>> = (0..nl).map(|_| None).collect();
        let routed = (0..m.experts).map(Some);
        let all = routed.chain((m.shared_intermediate > 0).then_some(None));
        for (i, e) in all.enumerate() {
            let what = match e {
                Some(e) => format!("expert {}/{}", e + 1, m.experts),
                None => "shared experts".into(),
            };
            progress(&format!("{what}: quantizing to {} and uploading to {nl} layers", cfg.weights.format()));
            let (gu, _) = expert_matrix(cfg, m, e, Which::GateUp, g_post)?;
            let (dn, _) = expert_matrix(cfg, m, e, Which::Down, g_post)?;
            if i == 0 {
                let expert = device_bytes(&gu) + device_bytes(&dn);
                let shared = expert * m.shared_intermediate / m.expert_intermediate;
                self.check_free_memory(cfg, m.experts * expert + shared + device_bytes(&router_packed))?;
            }
            // rearranged for the kernels once, uploaded to every layer
            let (gu, dn) = (gemv.stage(&gu)?, gemv.stage(&dn)?);
            for l in 0..nl {
                let ex = Expert { gate_up: gemv.upload_staged(&gu)?, down: gemv.upload_staged(&dn)? };
                match e {
                    Some(_) => experts[l].push(ex),
                    None => shared[l] = Some(ex),
                }
            }
        }
        let router = router_gemv.stage(&router_packed)?;
        let layers = experts
            .into_iter()
            .zip(shared)
            .map(|(experts, shared)| {
                Ok(MoeLayer {
                    router: router_gemv.upload_staged(&router)?,
                    experts,
                    shared,
                    route: None,
                    host: host.clone(),
                })
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        Ok(MoeBuild { layers: layers.into_iter() })
    }

    /// Layer `l`'s MoE weights from a checkpoint (`bench_weights`): the router and each routed expert read,
    /// quantized and uploaded one expert at a time; `norm_post` is the layer's post-attention norm (folded
    /// into the router and every gate_up). Checks the free memory at the first layer's first expert.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn checkpoint_moe_layer(
        &self,
        cfg: &BenchConfig,
        src: &SourceModel,
        dir: &std::path::Path,
        l: usize,
        norm_post: &[f32],
        gemv: &WeightOnlyGemv,
        router_gemv: &WeightOnlyGemv,
        progress: &mut impl FnMut(&str),
    ) -> Result<MoeLayer, GpuError> {
        let m = cfg.moe.ok_or_else(|| GpuError::Weights("not a MoE model".into()))?;
        let d = cfg.hidden;
        let layout = MoeLayout::detect(src, l)?;
        let rw = router_matrix(src, cfg, layout, l, norm_post)?;
        let (router_packed, router_vals) = quantize_and_pack(WoFormat::Fp16, &rw, m.experts, d)?;
        let mut experts = Vec::with_capacity(m.experts);
        for e in 0..m.experts {
            progress(&format!("layer {}/{}: expert {}/{}", l + 1, cfg.layers_built, e + 1, m.experts));
            let (gu, dn) = expert_matrices(src, cfg, layout, l, e, norm_post)?;
            let what = |w: &str| format!("layer {l} expert {e} {w}");
            let gu = quantize_pack(cfg.weights, &gu, 2 * m.expert_intermediate, d)
                .map_err(|err| GpuError::Weights(format!("{}: {err}", what("gate_up"))))?;
            let dn = quantize_pack(cfg.weights, &dn, d, m.expert_intermediate)
                .map_err(|err| GpuError::Weights(format!("{}: {err}", what("down"))))?;
            if l == 0 && e == 0 {
                let per_layer = m.experts * (device_bytes(&gu) + device_bytes(&dn)) + device_bytes(&router_packed);
                self.check_free_memory(cfg, per_layer)?;
            }
            experts.push(Expert { gate_up: gemv.upload(&gu)?, down: gemv.upload(&dn)? });
        }
        let experts_src =
            ExpertSource::Checkpoint { dir: dir.to_path_buf(), layer: l, layout, g_post: norm_post.to_vec() };
        Ok(MoeLayer {
            router: router_gemv.upload(&router_packed)?,
            experts,
            shared: None,
            route: None,
            host: Arc::new(MoeHost { router: router_vals, experts: experts_src }),
        })
    }

    /// An error naming the layer count that fits when `per_layer` bytes of FFN weights for every built layer
    /// (plus about 1.5 GB for the attention weights, KV caches and LM head) exceed the free device memory.
    fn check_free_memory(&self, cfg: &BenchConfig, per_layer: usize) -> Result<(), GpuError> {
        let (free, _) = self.ctx.mem_get_info()?;
        let reserve = 1_500_000_000usize;
        let need = per_layer * cfg.layers_built + reserve;
        if need > free {
            let fits = free.saturating_sub(reserve) / per_layer.max(1);
            return Err(GpuError::Unsupported(format!(
                "the MoE weights of {} layers need {:.1} GB, {:.1} GB of device memory are free: pass --layers {} or fewer (the step time is scaled to all {} layers)",
                cfg.layers_built,
                need as f64 / 1e9,
                free as f64 / 1e9,
                fits.max(1),
                cfg.layers
            )));
        }
        Ok(())
    }
}

impl Enqueue<'_> {
    fn moe_shape(&self) -> Result<MoeShape, GpuError> {
        self.cfg.moe.ok_or_else(|| GpuError::Unsupported("not a MoE model".into()))
    }

    /// Whether the shared experts' down GEMV computes SwiGLU on load.
    pub(super) fn shared_silu_in_down(&self) -> bool {
        self.cfg.moe.is_some_and(|m| {
            m.shared_intermediate > 0
                && self.engines.main.fuses_silu(self.cfg.batch, self.cfg.hidden, m.shared_intermediate)
        })
    }

    /// Whether any routed expert launch of `layers` needs a SiLU-and-mul kernel (its down GEMV does not
    /// compute it on load).
    pub(super) fn experts_need_silu(&self, layers: &[Layer]) -> bool {
        layers.iter().any(|l| match &l.ffn {
            Ffn::Moe(m) => m.needs_silu_kernel(),
            Ffn::Dense { .. } | Ffn::Fused(_) => false,
        })
    }

    /// The MoE FFN's launches after the router and top-k, in step order.
    fn after_routing(&self, m: &MoeLayer) -> Vec<MoeOp> {
        let needs_silu = m.needs_silu_kernel();
        let shared = m.shared.is_some();
        [
            (MoeOp::GateUp, true),
            (MoeOp::Silu, needs_silu),
            (MoeOp::Down, true),
            (MoeOp::SharedGateUp, shared),
            (MoeOp::SharedSilu, shared && !self.shared_silu_in_down()),
            (MoeOp::SharedDown, shared),
            (MoeOp::Combine, true),
        ]
        .into_iter()
        .filter_map(|(op, on)| on.then_some(op))
        .collect()
    }

    /// The whole MoE FFN of one layer (its routing fixed by the checked step).
    pub(super) fn moe_ffn(&self, m: &mut MoeLayer, a: &mut Acts) -> Result<(), GpuError> {
        self.moe_op(m, a, MoeOp::Router)?;
        self.moe_op(m, a, MoeOp::TopK)?;
        for op in self.after_routing(m) {
            self.moe_op(m, a, op)?;
        }
        Ok(())
    }

    /// One launch (or one group of launches: every routed expert's gate_up, say) of a MoE layer.
    pub(super) fn moe_op(&self, m: &mut MoeLayer, a: &mut Acts, op: MoeOp) -> Result<(), GpuError> {
        let shape = self.moe_shape()?;
        let (b, d) = (self.cfg.batch, self.cfg.hidden);
        let norm = Fusion { norm_eps: Some(NORM_EPS), ..Fusion::default() };
        let silu_x = Fusion { silu_x: true, ..Fusion::default() };
        let Acts { x, moe, .. } = a;
        let ma = moe.as_mut().ok_or_else(|| GpuError::Unsupported("no MoE buffers".into()))?;
        let MoeLayer { router, experts, shared, route, .. } = m;
        let unrouted = || GpuError::Unsupported("a MoE layer ran its experts before the checked step routed it".into());
        let no_shared = || GpuError::Unsupported("no shared experts".into());
        // The gather and combine kernels: one 16-byte word (8 values) of a row per thread, 128 per CTA.
        let words = (d / 8).div_ceil(128) as u32;
        match op {
            MoeOp::Router => {
                let r = self.router.ok_or_else(|| GpuError::Unsupported("no router engine".into()))?;
                r.run_fused(self.s, router, x, &mut ma.logits, b, norm)
            }
            MoeOp::TopK => {
                let mut k = KArgs::default();
                k.ptr(self.dptr(&ma.logits)).ptr(self.dptr(&ma.ids)).ptr(self.dptr(&ma.wts));
                k.i32(shape.experts as i32).i32(shape.top_k as i32);
                // SAFETY: matches topk_route(const u16* logits, int* ids, float* wts, int e, int k); logits hold
                // B x e values, ids and wts B x k; e <= MAX_EXPERTS and k <= min(e, 32) (validated).
                unsafe { self.launch(&self.ops.topk_route, (b as u32, 1, 1), (32, 1, 1), k) }
            }
            MoeOp::GateUp => {
                let route = route.as_mut().ok_or_else(unrouted)?;
                if let Some(g) = &route.gather {
                    let mut k = KArgs::default();
                    k.ptr(self.dptr(x)).ptr(self.dptr(&g.dst)).ptr(self.dptr(&g.src)).i32(d as i32);
                    // SAFETY: matches moe_gather(const u16* x, u16* const* dst, const int* src, int d); dst holds
                    // `rows` addresses of d-value rows in the runs' x buffers, src `rows` batch rows < B of x
                    // (B x d values); d is a multiple of 8 (heads x 128) and the rows 16-byte aligned.
                    unsafe { self.launch(&self.ops.moe_gather, (g.rows, words, 1), (128, 1, 1), k) }?;
                }
                for run in &mut route.runs {
                    let xin = run.x.as_ref().unwrap_or(x);
                    self.engines.main.run_fused(
                        self.s,
                        &mut experts[run.expert].gate_up,
                        xin,
                        &mut run.gu,
                        run.tokens.len(),
                        norm,
                    )?;
                }
                Ok(())
            }
            MoeOp::Silu => {
                let route = route.as_ref().ok_or_else(unrouted)?;
                for run in route.runs.iter().filter(|r| !r.silu_in_down) {
                    self.silu_rows(&run.gu, &run.act, run.tokens.len(), shape.expert_intermediate)?;
                }
                Ok(())
            }
            MoeOp::Down => {
                let route = route.as_mut().ok_or_else(unrouted)?;
                for run in &mut route.runs {
                    let w = &mut experts[run.expert].down;
                    let rows = run.tokens.len();
                    if run.silu_in_down {
                        self.engines.main.run_fused(self.s, w, &run.gu, &mut run.out, rows, silu_x)?;
                    } else {
                        self.engines.main.run_fused(self.s, w, &run.act, &mut run.out, rows, Fusion::default())?;
                    }
                }
                Ok(())
            }
            MoeOp::SharedGateUp => {
                let sh = shared.as_mut().ok_or_else(no_shared)?;
                self.engines.main.run_fused(self.s, &mut sh.gate_up, x, &mut ma.sgu, b, norm)
            }
            MoeOp::SharedSilu => self.silu_rows(&ma.sgu, &ma.sact, b, shape.shared_intermediate),
            MoeOp::SharedDown => {
                let sh = shared.as_mut().ok_or_else(no_shared)?;
                if self.shared_silu_in_down() {
                    self.engines.main.run_fused(self.s, &mut sh.down, &ma.sgu, &mut ma.sout, b, silu_x)
                } else {
                    self.engines.main.run_fused(self.s, &mut sh.down, &ma.sact, &mut ma.sout, b, Fusion::default())
                }
            }
            MoeOp::Combine => {
                let route = route.as_ref().ok_or_else(unrouted)?;
                let shared_p = if shared.is_some() { self.dptr(&ma.sout) } else { 0 };
                let mut k = KArgs::default();
                k.ptr(self.dptr(x)).ptr(self.dptr(&ma.wts)).ptr(self.dptr(&route.rows)).ptr(shared_p);
                k.i32(shape.top_k as i32).i32(d as i32);
                // SAFETY: matches moe_combine(u16* x, const float* wts, const u16* const* rows, const u16* shared,
                // int k, int d); x holds B x d values, wts B x k, rows B x k addresses of d-value rows in the
                // runs' output buffers (alive with the route), shared B x d values or null.
                unsafe { self.launch(&self.ops.moe_combine, (b as u32, words, 1), (128, 1, 1), k) }
            }
        }
    }

    /// The expert launches of `m` for the routing `ids` (B x top_k expert ids read back from the device):
    /// one run per distinct expert with the batch rows that picked it, its buffers, the gather table (B > 1)
    /// and the combine's row addresses.
    fn build_route(&self, m: &MoeLayer, ids: &[i32]) -> Result<Route, GpuError> {
        let shape = self.moe_shape()?;
        let (b, k, d, ei) = (self.cfg.batch, shape.top_k, self.cfg.hidden, shape.expert_intermediate);
        let plan = RoutePlan::new(ids, b, k, m.experts.len())?;
        let alloc = |n: usize| self.s.alloc_zeros::<u16>(n.max(1));
        let mut runs = Vec::with_capacity(plan.runs.len());
        for (expert, tokens) in plan.runs {
            let rows = tokens.len();
            let silu_in_down = self.engines.main.fuses_silu(rows, d, ei);
            runs.push(ExpertRun {
                expert,
                x: if b > 1 { Some(alloc(rows * d)?) } else { None },
                gu: alloc(rows * 2 * ei)?,
                act: alloc(if silu_in_down { 1 } else { rows * ei })?,
                out: alloc(rows * d)?,
                silu_in_down,
                tokens,
            });
        }
        let row_bytes = (2 * d) as u64;
        let addrs: Vec<u64> =
            plan.slots.iter().map(|&(run, row)| self.dptr(&runs[run].out) + row as u64 * row_bytes).collect();
        let gather = if b > 1 {
            let mut dst = Vec::new();
            let mut src = Vec::new();
            for run in &runs {
                if let Some(xb) = &run.x {
                    for (i, &t) in run.tokens.iter().enumerate() {
                        dst.push(self.dptr(xb) + i as u64 * row_bytes);
                        src.push(t as i32);
                    }
                }
            }
            Some(Gather { rows: dst.len() as u32, dst: self.s.clone_htod(&dst)?, src: self.s.clone_htod(&src)? })
        } else {
            None
        };
        Ok(Route { runs, gather, rows: self.s.clone_htod(&addrs)? })
    }

    /// The checked step: [`Enqueue::layers`], except that each MoE layer's routing is read back after its
    /// top-k kernel and its expert launches fixed to it; the last layer's routing is checked (see the module
    /// docs). `None` for a dense model.
    pub(super) fn check_layers(&self, layers: &mut [Layer], a: &mut Acts) -> Result<Option<MoeCheck>, GpuError> {
        if self.cfg.moe.is_none() {
            self.layers(layers, a)?;
            return Ok(None);
        }
        let last = layers.len().saturating_sub(1);
        let mut experts_per_layer = Vec::with_capacity(layers.len());
        let mut check = None;
        for (l, layer) in layers.iter_mut().enumerate() {
            self.qkv_and_attention(layer, a)?;
            self.linear(&mut layer.o, super::Lin::O, a)?;
            let Ffn::Moe(m) = &mut layer.ffn else {
                return Err(GpuError::Unsupported("a dense layer in a MoE model".into()));
            };
            self.moe_op(m, a, MoeOp::Router)?;
            self.moe_op(m, a, MoeOp::TopK)?;
            self.s.synchronize()?;
            let ma = a.moe.as_ref().ok_or_else(|| GpuError::Unsupported("no MoE buffers".into()))?;
            let ids = self.s.clone_dtoh(&ma.ids)?;
            let pre = if l == last {
                Some(Routed {
                    x: self.s.clone_dtoh(&a.x)?,
                    logits: self.s.clone_dtoh(&ma.logits)?,
                    ids: ids.clone(),
                    wts: self.s.clone_dtoh(&ma.wts)?,
                })
            } else {
                None
            };
            m.route = Some(self.build_route(m, &ids)?);
            experts_per_layer
                .push(m.route.as_ref().map_or(Vec::new(), |r| r.runs.iter().map(|run| run.expert).collect()));
            for op in self.after_routing(m) {
                self.moe_op(m, a, op)?;
            }
            if let Some(pre) = pre {
                self.s.synchronize()?;
                check = Some(self.check_moe(m, a, &pre)?);
            }
        }
        Ok(check.map(|c| MoeCheck { experts_per_layer, ..c }))
    }

    /// Checks the last layer's routing, one expert and the combine (see the module docs).
    fn check_moe(&self, m: &MoeLayer, a: &Acts, pre: &Routed) -> Result<MoeCheck, GpuError> {
        let shape = self.moe_shape()?;
        let (b, k, d, e_n) = (self.cfg.batch, shape.top_k, self.cfg.hidden, shape.experts);
        let h = |v: u16| f64::from(f16::from_bits(v).to_f32());
        let x: Vec<f64> = pre.x.iter().map(|&v| h(v)).collect();
        let inv_rms: Vec<f64> = (0..b)
            .map(|t| {
                let row = &x[t * d..(t + 1) * d];
                1.0 / (row.iter().map(|v| v * v).sum::<f64>() / d as f64 + f64::from(NORM_EPS)).sqrt()
            })
            .collect();
        // rsqrt(mean(x_t^2) + eps) W x_t for the rows of `w` (the GEMVs with the norm inside) against the
        // device's FP16 outputs `got`: relative error (sum of squares, returned as (error, norm)).
        let normed_rows = |t: usize, w: &[f32], got: &[u16]| -> (f64, f64) {
            let xt = &x[t * d..(t + 1) * d];
            w.chunks_exact(d).zip(got).fold((0.0, 0.0), |(err, norm), (row, &g)| {
                let want = inv_rms[t] * xt.iter().zip(row).map(|(a, b)| a * f64::from(*b)).sum::<f64>();
                (err + (h(g) - want).powi(2), norm + want * want)
            })
        };
        let rel = |(err, norm): (f64, f64)| (err / norm.max(1e-300)).sqrt();
        // Router logits of every token.
        let router_rel_error = rel((0..b)
            .map(|t| normed_rows(t, &m.host.router, &pre.logits[t * e_n..(t + 1) * e_n]))
            .fold((0.0, 0.0), |s, v| (s.0 + v.0, s.1 + v.1)));
        // Top-k of the device's logits (ties: the lower id) and the renormalized softmax weights.
        for t in 0..b {
            let mut order: Vec<usize> = (0..e_n).collect();
            let lg = |e: usize| h(pre.logits[t * e_n + e]);
            order.sort_by(|&p, &q| lg(q).total_cmp(&lg(p)).then(p.cmp(&q)));
            let pick = &order[..k];
            let got: Vec<usize> = pre.ids[t * k..(t + 1) * k].iter().map(|&i| i as usize).collect();
            if got != pick {
                return Err(GpuError::Incorrect(format!("top-{k} routing of token {t}: device {got:?}, CPU {pick:?}")));
            }
            let ex: Vec<f64> = pick.iter().map(|&e| (lg(e) - lg(pick[0])).exp()).collect();
            let sum: f64 = ex.iter().sum();
            for (j, p) in ex.iter().enumerate() {
                let w = f64::from(pre.wts[t * k + j]);
                if (w - p / sum).abs() > 1e-5 {
                    return Err(GpuError::Incorrect(format!(
                        "routing weight {j} of token {t}: device {w}, CPU {}",
                        p / sum
                    )));
                }
            }
        }
        let route = m.route.as_ref().ok_or_else(|| GpuError::Unsupported("unrouted layer".into()))?;
        // One expert's gate_up row: the first run's first token, against its quantized weights.
        let run = route.runs.first().ok_or_else(|| GpuError::Incorrect("no expert ran".into()))?;
        let vals = m.host.gate_up_values(self.cfg, &shape, run.expert)?;
        let gu = self.s.clone_dtoh(&run.gu)?;
        // Row 0 of the run's outputs is its first token's.
        let expert_rel_error = rel(normed_rows(run.tokens[0], &vals, &gu[..2 * shape.expert_intermediate]));
        // The combine: x_after = x + shared + sum_j w_j out_j.
        let after = self.s.clone_dtoh(&a.x)?;
        let outs: Vec<Vec<u16>> = route.runs.iter().map(|r| self.s.clone_dtoh(&r.out)).collect::<Result<_, _>>()?;
        let shared = match (&m.shared, &a.moe) {
            (Some(_), Some(ma)) => Some(self.s.clone_dtoh(&ma.sout)?),
            _ => None,
        };
        let plan = RoutePlan::new(&pre.ids, b, k, e_n)?;
        let mut combine_rel_error = 0.0f64;
        for t in 0..b {
            for i in 0..d {
                let mut acc = 0.0f64;
                for j in 0..k {
                    let (ri, row) = plan.slots[t * k + j];
                    acc += f64::from(pre.wts[t * k + j]) * h(outs[ri][row * d + i]);
                }
                if let Some(s) = &shared {
                    acc += h(s[t * d + i]);
                }
                let want = x[t * d + i] + acc;
                let e = (h(after[t * d + i]) - want).abs() / want.abs().max(1.0 / 16384.0);
                combine_rel_error = combine_rel_error.max(e);
            }
        }
        for (what, e, limit) in [
            ("router logits", router_rel_error, 1e-2),
            ("routed expert gate_up", expert_rel_error, 1e-2),
            ("expert combine", combine_rel_error, 2e-3),
        ] {
            if e.is_nan() || e > limit {
                return Err(GpuError::Incorrect(format!("MoE {what}: relative error {e:.2e} > {limit:.0e}")));
            }
        }
        Ok(MoeCheck { router_rel_error, expert_rel_error, combine_rel_error, experts_per_layer: Vec::new() })
    }

    /// Which of `roofline model`'s ops the MoE step runs inside another kernel.
    pub(super) fn moe_fused_ops(&self, layers: &[Layer]) -> Vec<FusedOp> {
        let shared = self.cfg.moe.is_some_and(|m| m.shared_intermediate > 0);
        let norm_hosts = if shared {
            "router_gate, experts_gate_up, shared_experts_gate_up"
        } else {
            "router_gate, experts_gate_up"
        };
        let mut v = vec![
            ("input_layernorm", "qkv_proj", None),
            ("rotary_emb", "attention", None),
            ("residual_add", "o_proj", Some("o_proj")),
            ("post_attention_layernorm", norm_hosts, None),
            ("final_norm", "lm_head", None),
        ];
        if !self.experts_need_silu(layers) {
            v.push(("silu_and_mul", "experts_down", None));
        }
        if shared && self.shared_silu_in_down() {
            v.push(("shared_silu_and_mul", "shared_experts_down", None));
        }
        v.into_iter()
            .map(|(n, i, after)| FusedOp { name: n.into(), into: i.into(), after: after.map(String::from) })
            .collect()
    }
}

/// The host side of a routing: which experts run, with which tokens, and where each (token, pick) output row
/// lands.
#[derive(Debug, Clone, PartialEq)]
struct RoutePlan {
    /// (expert, the batch rows that picked it, ascending), in expert order.
    runs: Vec<(usize, Vec<usize>)>,
    /// For each (token, pick) in `ids` order: (index into `runs`, row within that run).
    slots: Vec<(usize, usize)>,
}

impl RoutePlan {
    /// From `ids` (B x k expert ids as the top-k kernel wrote them); an error when an id is outside
    /// `0..experts` or a token picked one expert twice (the kernel picks distinct ones).
    fn new(ids: &[i32], b: usize, k: usize, experts: usize) -> Result<Self, GpuError> {
        let bad = |why: &str| {
            GpuError::Incorrect(format!("top-{k} routing of {b} tokens over {experts} experts {why}: {ids:?}"))
        };
        if ids.len() != b * k || ids.iter().any(|&i| i < 0 || i as usize >= experts) {
            return Err(bad("wrote ids outside the expert range"));
        }
        for t in 0..b {
            let picks = &ids[t * k..(t + 1) * k];
            if picks.iter().enumerate().any(|(j, p)| picks[..j].contains(p)) {
                return Err(bad(&format!("picked an expert twice for token {t}")));
            }
        }
        let mut chosen: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
        chosen.sort_unstable();
        chosen.dedup();
        let runs: Vec<(usize, Vec<usize>)> = chosen
            .into_iter()
            .map(|e| (e, (0..b).filter(|t| ids[t * k..(t + 1) * k].contains(&(e as i32))).collect()))
            .collect();
        let mut slots = Vec::with_capacity(b * k);
        for t in 0..b {
            for &id in &ids[t * k..(t + 1) * k] {
                let run = runs.iter().position(|(e, _)| *e == id as usize).ok_or_else(|| bad("lost an expert"))?;
                let row = runs[run].1.iter().position(|&x| x == t).ok_or_else(|| bad("lost a token"))?;
                slots.push((run, row));
            }
        }
        Ok(Self { runs, slots })
    }
}

/// What the checked step read back after the last layer's top-k kernel.
struct Routed {
    x: Vec<u16>,
    logits: Vec<u16>,
    ids: Vec<i32>,
    wts: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_groups_tokens_per_expert_and_finds_every_output_row() {
        // 3 tokens, top-2 of 6: token 0 -> 4, 1; token 1 -> 1, 5; token 2 -> 4, 0.
        let p = RoutePlan::new(&[4, 1, 1, 5, 4, 0], 3, 2, 6).unwrap();
        assert_eq!(p.runs, vec![(0, vec![2]), (1, vec![0, 1]), (4, vec![0, 2]), (5, vec![1])]);
        // (run, row): token 0's expert 4 is run 2 row 0, its expert 1 run 1 row 0; token 2's expert 4 is row 1.
        assert_eq!(p.slots, vec![(2, 0), (1, 0), (1, 1), (3, 0), (2, 1), (0, 0)]);
        // Every (run, row) is used exactly once: the runs hold B x k rows in all.
        let mut seen = p.slots.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 6);
        assert_eq!(p.runs.iter().map(|(_, t)| t.len()).sum::<usize>(), 6);
        // B = 1: one run per pick, one row each.
        let one = RoutePlan::new(&[7, 2], 1, 2, 8).unwrap();
        assert_eq!((one.runs, one.slots), (vec![(2, vec![0]), (7, vec![0])], vec![(1, 0), (0, 0)]));
        for bad in [&[6, 1][..], &[-1, 1], &[3, 3], &[1]] {
            assert!(RoutePlan::new(bad, 1, 2, 6).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn expert_matrices_are_distinct_and_reproducible() {
        let cfg = BenchConfig {
            hidden: 256,
            heads: 2,
            kv_heads: 1,
            intermediate: 0,
            vocab: 64,
            layers: 1,
            layers_built: 1,
            batch: 1,
            seq: 1,
            weights: WoFormat::Int4G128,
            rope_theta: 1e4,
            fuse: true,
            attention: super::super::AttnKernel::Auto,
            kv: super::super::KvFormat::F16,
            checkpoint: None,
            moe: Some(MoeShape { experts: 4, top_k: 2, expert_intermediate: 128, shared_intermediate: 128 }),
            gemv: Default::default(),
            ffn: Default::default(),
            qkv: Default::default(),
        };
        let m = cfg.moe.unwrap();
        let g = vec![1.0f32; 256];
        let a = expert_matrix(&cfg, &m, Some(0), Which::GateUp, &g).unwrap().1;
        let again = expert_matrix(&cfg, &m, Some(0), Which::GateUp, &g).unwrap().1;
        let other = expert_matrix(&cfg, &m, Some(1), Which::GateUp, &g).unwrap().1;
        let shared = expert_matrix(&cfg, &m, None, Which::GateUp, &g).unwrap().1;
        let down = expert_matrix(&cfg, &m, Some(0), Which::Down, &g).unwrap().1;
        assert_eq!(a, again);
        assert_eq!((a.len(), down.len()), (256 * 256, 256 * 128));
        assert!(a != other && a != shared);
        assert!(a.iter().all(|v| v.is_finite()) && a.iter().any(|v| *v != 0.0));
    }
}
