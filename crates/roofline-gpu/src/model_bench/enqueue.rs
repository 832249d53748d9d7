//! What one decode step launches: the weight-only engines of its linears ([`Engines`], [`Lin`]), and
//! [`Enqueue`], which enqueues a step's layers (fused or not, with any one op left out for the ablation
//! graphs, [`StepOp`]) and the decode kernels' launches ([`KArgs`]).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr};
use half::f16;

use super::check::{rel_error, residual_delta_error};
use super::{
    Acts, BenchConfig, DenseCheck, Ffn, KvFormat, Layer, Ops, QkvAttention, Samples, CLUSTER_SMEM, CLUSTER_THREADS,
    HEAD_DIM, KV_FP8_SCALE,
};
use crate::weight_only::ffn::{self, FfnWeights, FusedFfn};
use crate::weight_only::pack::PackedWeights;
use crate::weight_only::{launch_cluster_ex, launch_ex, DeviceWeights, Fusion, WeightOnlyGemv};
use crate::GpuError;

/// The step's weight-only engines: `main` for the batch's best variant (or the forced one; the MoE experts
/// run on it), and per dense linear, in [`Lin::ALL`] order, the engine of the variant best for its shape
/// (`main` where that is the same). A linear's weights are staged and uploaded by its engine.
#[derive(Clone, Copy)]
pub(super) struct Engines<'a> {
    pub(super) main: &'a WeightOnlyGemv,
    pub(super) lin: [&'a WeightOnlyGemv; 5],
}

impl<'a> Engines<'a> {
    /// The engine of linear `l`.
    pub(super) fn of(&self, l: Lin) -> &'a WeightOnlyGemv {
        self.lin[l as usize]
    }
}

/// A launch of a dense fused step's layer that an ablation graph leaves out ([`OpTime::in_step_us`](super::OpTime::in_step_us)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StepOp {
    /// The qkv GEMV.
    Qkv,
    /// The attention kernel.
    Attention,
    /// The qkv projection inside the attention (`--qkv fused`): one launch.
    QkvAttention,
    /// The o_proj GEMV.
    O,
    /// The gate_up GEMV.
    GateUp,
    /// SiLU-and-mul (where down_proj does not take it on load).
    Silu,
    /// The down GEMV.
    Down,
    /// The fused FFN kernel.
    Ffn,
}

/// The step's dense linears, declared in [`Lin::ALL`] order (their discriminants index [`Engines::lin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lin {
    Qkv,
    O,
    GateUp,
    Down,
    LmHead,
}

impl Lin {
    /// In the order of [`BenchConfig::linears`].
    pub(super) const ALL: [Lin; 5] = [Lin::Qkv, Lin::O, Lin::GateUp, Lin::Down, Lin::LmHead];

    /// What this linear's launch fuses in the fused step: the norms read the residual stream x (their
    /// weights are folded into W); o_proj and down_proj add into it; down_proj reads the gate_up row itself
    /// (SwiGLU on load) where its plan takes it. The unfused step fuses nothing.
    pub(super) fn fusion(self, fuse: bool, silu_in_down: bool) -> Fusion {
        let norm = Fusion { norm_eps: Some(NORM_EPS), ..Fusion::default() };
        let add = Fusion { add_into_y: true, ..Fusion::default() };
        match (fuse, self) {
            (false, _) => Fusion::default(),
            (true, Lin::Qkv | Lin::GateUp | Lin::LmHead) => norm,
            (true, Lin::O) => add,
            (true, Lin::Down) if silu_in_down => Fusion { silu_x: true, ..add },
            (true, Lin::Down) => add,
        }
    }
}

pub(super) struct Enqueue<'a> {
    pub(super) cfg: &'a BenchConfig,
    pub(super) ops: &'a Ops,
    /// The step's weight-only engines.
    pub(super) engines: Engines<'a>,
    /// The FP16 engine of the MoE router (MoE models only).
    pub(super) router: Option<&'a WeightOnlyGemv>,
    /// The fused FFN kernel, when the step runs its dense FFNs through it.
    pub(super) ffn: Option<&'a FusedFfn>,
    pub(super) s: &'a Arc<CudaStream>,
    pub(super) splits: u32,
    pub(super) chunk: i32,
    /// CTAs per cluster of the cluster attention; 0: the split kernels.
    pub(super) cluster: u32,
    /// The qkv projection inside the attention's launch, when the step runs it so.
    pub(super) qkv_attn: Option<&'a QkvAttention>,
    /// Fused step whose down_proj kernel computes SwiGLU as it loads x (no silu_mul kernel).
    pub(super) silu_in_down: bool,
    /// Decode kernels compiled and launched with programmatic dependent launch (sm_90+).
    pub(super) pdl: bool,
}

/// RMSNorm epsilon (Llama).
pub(super) const NORM_EPS: f32 = 1e-5;

impl<'a> Enqueue<'a> {
    pub(super) fn layers(&self, layers: &mut [Layer], a: &mut Acts) -> Result<(), GpuError> {
        if self.cfg.fuse {
            return self.layers_without(layers, a, None);
        }
        for (l, layer) in layers.iter_mut().enumerate() {
            // The residual add of the previous layer's MLP output is fused into this norm.
            self.norm(a, l > 0, &layer.norm_in)?;
            self.linear(&mut layer.qkv, Lin::Qkv, a)?;
            self.rope(layer, a)?;
            self.attention(layer, a)?;
            self.linear(&mut layer.o, Lin::O, a)?;
            self.norm_from_o(a, &layer.norm_post)?;
            let (gate_up, down) = layer.dense()?;
            self.linear(gate_up, Lin::GateUp, a)?;
            self.silu(a)?;
            self.linear(down, Lin::Down, a)?;
        }
        Ok(())
    }

    /// The fused step's layers with `skip` left out of every layer (an ablation for [`OpTime::in_step_us`](super::OpTime::in_step_us);
    /// `None`: the step itself).
    pub(super) fn layers_without(
        &self,
        layers: &mut [Layer],
        a: &mut Acts,
        skip: Option<StepOp>,
    ) -> Result<(), GpuError> {
        for layer in layers.iter_mut() {
            match (self.qkv_attn, skip) {
                (_, Some(StepOp::QkvAttention)) => {}
                (None, Some(StepOp::Qkv)) => self.attention(layer, a)?,
                (None, Some(StepOp::Attention)) => self.linear(&mut layer.qkv, Lin::Qkv, a)?,
                _ => self.qkv_and_attention(layer, a)?,
            }
            if skip != Some(StepOp::O) {
                self.linear(&mut layer.o, Lin::O, a)?;
            }
            self.ffn_block_without(layer, a, skip)?;
        }
        Ok(())
    }

    /// The ops of a dense fused step's layer as `op_times` names them, each with what leaves it out.
    pub(super) fn step_ops(&self) -> Vec<(&'static str, StepOp)> {
        let mut ops = match self.qkv_attn {
            Some(_) => vec![("attention", StepOp::QkvAttention)],
            None => vec![("qkv_proj", StepOp::Qkv), ("attention", StepOp::Attention)],
        };
        ops.push(("o_proj", StepOp::O));
        if self.ffn.is_some() {
            ops.push(("gate_up_proj", StepOp::Ffn));
        } else {
            ops.push(("gate_up_proj", StepOp::GateUp));
            if !self.silu_in_down {
                ops.push(("silu_and_mul", StepOp::Silu));
            }
            ops.push(("down_proj", StepOp::Down));
        }
        ops
    }

    /// The fused step's FFN of one layer (after o_proj): x += FFN(rmsnorm(x)).
    pub(super) fn ffn_block(&self, layer: &mut Layer, a: &mut Acts) -> Result<(), GpuError> {
        self.ffn_block_without(layer, a, None)
    }

    /// [`Enqueue::ffn_block`] with `skip` left out where it is one of the FFN's launches.
    pub(super) fn ffn_block_without(
        &self,
        layer: &mut Layer,
        a: &mut Acts,
        skip: Option<StepOp>,
    ) -> Result<(), GpuError> {
        match &mut layer.ffn {
            Ffn::Dense { gate_up, down } => {
                if skip != Some(StepOp::GateUp) {
                    self.linear(gate_up, Lin::GateUp, a)?;
                }
                if !self.silu_in_down && skip != Some(StepOp::Silu) {
                    self.silu(a)?;
                }
                if skip == Some(StepOp::Down) {
                    return Ok(());
                }
                self.linear(down, Lin::Down, a)
            }
            Ffn::Moe(m) => self.moe_ffn(m, a),
            Ffn::Fused(_) if skip == Some(StepOp::Ffn) => Ok(()),
            Ffn::Fused(w) => self.fused_ffn(w, a),
        }
    }

    /// The checked step of a dense model with the fused step: [`Enqueue::layers`], the last layer's qkv
    /// projection, o_proj and FFN (fused kernel or GEMVs) checked against f64 CPU references of their
    /// quantized weights (`weights`: gate_up with the norm folded in, down; `samples`: rows of qkv and o_proj)
    /// on the inputs they got, batch row 0: the qkv rows' relative error, and the relative errors of what
    /// o_proj and the FFN added to the residual stream. `None` without the FFN's weights or with the unfused
    /// step.
    pub(super) fn check_dense_layers(
        &self,
        layers: &mut [Layer],
        a: &mut Acts,
        weights: Option<&(PackedWeights, PackedWeights)>,
        samples: &Samples,
    ) -> Result<Option<DenseCheck>, GpuError> {
        let (Some((gate_up, down)), true, Some((last, before))) = (weights, self.cfg.fuse, layers.split_last_mut())
        else {
            self.layers(layers, a)?;
            return Ok(None);
        };
        self.layers(before, a)?;
        let d = self.cfg.hidden;
        let eps = Some(f64::from(NORM_EPS));
        // qkv: an extra launch of the GEMV (the norm fused in) on the stream the layer gets; the attention
        // below computes it again, inside it or with the same GEMV.
        self.linear(&mut last.qkv, Lin::Qkv, a)?;
        self.s.synchronize()?;
        let x_in = self.row0(&a.x, d)?;
        let (q, o) = (&samples.qkv, &samples.o);
        let qkv = rel_error(&q.pick(&self.row0(&a.qkv, q.n)?), &q.reference(&x_in, eps));
        self.qkv_and_attention(last, a)?;
        self.s.synchronize()?;
        // o_proj: what it adds to the stream (residual add fused in), launched once more on a zeroed stream
        // so that its sum is read back rounded once. Read off the stream itself, the stream's FP16 rounding
        // left on ~512 sampled rows was as large as the check's bound (INT8 Llama-3.1-8B: 1.4e-2, session 29).
        let attn = self.row0(&a.attn, o.k)?;
        let x_pre = self.s.clone_dtod(&a.x)?;
        self.s.memset_zeros(&mut a.x)?;
        self.linear(&mut last.o, Lin::O, a)?;
        self.s.synchronize()?;
        let o_proj = rel_error(&o.pick(&self.row0(&a.x, d)?), &o.reference(&attn, None));
        self.s.memcpy_dtod(&x_pre, &mut a.x)?;
        self.linear(&mut last.o, Lin::O, a)?;
        self.s.synchronize()?;
        let x_mid = self.row0(&a.x, d)?;
        self.ffn_block(last, a)?;
        self.s.synchronize()?;
        let x_out = self.row0(&a.x, d)?;
        let want = ffn::reference(&x_mid, gate_up, down, f64::from(NORM_EPS));
        Ok(Some(DenseCheck { ffn: residual_delta_error(&x_mid, &x_out, &want), qkv, o_proj }))
    }

    /// Batch row 0 of a `batch x n` FP16 buffer, as f32 (the caller synchronized the stream).
    pub(super) fn row0(&self, v: &CudaSlice<u16>, n: usize) -> Result<Vec<f32>, GpuError> {
        Ok(self.s.clone_dtoh(v)?[..n].iter().map(|b| f16::from_bits(*b).to_f32()).collect())
    }

    pub(super) fn final_ops(&self, w: &CudaSlice<u16>, lm: &mut DeviceWeights, a: &mut Acts) -> Result<(), GpuError> {
        if !self.cfg.fuse {
            self.norm(a, true, w)?;
        }
        self.linear(lm, Lin::LmHead, a)
    }

    /// x += down (when `add`), h = rmsnorm(x) * w.
    pub(super) fn norm(&self, a: &mut Acts, add: bool, w: &CudaSlice<u16>) -> Result<(), GpuError> {
        self.rmsnorm(a, add, false, w)
    }

    /// x += o, h = rmsnorm(x) * w.
    pub(super) fn norm_from_o(&self, a: &mut Acts, w: &CudaSlice<u16>) -> Result<(), GpuError> {
        self.rmsnorm(a, true, true, w)
    }

    pub(super) fn rmsnorm(&self, a: &mut Acts, add: bool, from_o: bool, w: &CudaSlice<u16>) -> Result<(), GpuError> {
        let d = self.cfg.hidden as i32;
        let eps = NORM_EPS;
        let delta = match (add, from_o) {
            (false, _) => 0,
            (true, true) => self.dptr(&a.o),
            (true, false) => self.dptr(&a.down),
        };
        let mut k = KArgs::default();
        k.ptr(self.dptr(&a.x)).ptr(delta).ptr(self.dptr(w)).ptr(self.dptr(&a.h)).i32(d).f32(eps);
        // SAFETY: matches add_rmsnorm(u16* x, const u16* delta, const u16* w, u16* out, int d, float eps); x, delta
        // and out hold batch x hidden values, w hidden values; delta may be null (a 0 pointer).
        unsafe { self.launch(&self.ops.add_rmsnorm, (self.cfg.batch as u32, 1, 1), (1024, 1, 1), k) }
    }

    pub(super) fn linear(&self, w: &mut DeviceWeights, which: Lin, a: &mut Acts) -> Result<(), GpuError> {
        let m = self.cfg.batch;
        if self.cfg.fuse {
            let (x, y) = match which {
                Lin::Qkv => (&a.x, &mut a.qkv),
                Lin::O => (&a.attn, &mut a.x),
                Lin::GateUp => (&a.x, &mut a.gu),
                Lin::Down if self.silu_in_down => (&a.gu, &mut a.x),
                Lin::Down => (&a.act, &mut a.x),
                Lin::LmHead => (&a.x, &mut a.logits),
            };
            return self.engine(which).run_fused(self.s, w, x, y, m, which.fusion(true, self.silu_in_down));
        }
        let (x, y) = match which {
            Lin::Qkv => (&a.h, &mut a.qkv),
            Lin::O => (&a.attn, &mut a.o),
            Lin::GateUp => (&a.h, &mut a.gu),
            Lin::Down => (&a.act, &mut a.down),
            Lin::LmHead => (&a.h, &mut a.logits),
        };
        self.engine(which).run_on(self.s, w, x, y, m)
    }

    /// The engine that runs `which` (see [`Engines`]).
    pub(super) fn engine(&self, which: Lin) -> &'a WeightOnlyGemv {
        self.engines.of(which)
    }

    pub(super) fn rope(&self, layer: &mut Layer, a: &mut Acts) -> Result<(), GpuError> {
        let c = self.cfg;
        let (pos, hq, hkv, smax) = (c.seq as i32, c.heads as i32, c.kv_heads as i32, (c.seq + 1) as i32);
        let mut k = KArgs::default();
        k.ptr(self.dptr(&a.qkv)).ptr(self.dptr(&layer.kc)).ptr(self.dptr(&layer.vc));
        k.i32(pos).i32(hq).i32(hkv).i32(smax).f32(c.rope_theta);
        let grid = (c.batch as u32, (c.heads + c.kv_heads) as u32, 1);
        // SAFETY: matches rope_append(u16* qkv, u16* kc, u16* vc, int pos, int hq, int hkv, int smax, float theta);
        // qkv holds batch x (hq + 2 hkv) x HD values, the caches batch x hkv x smax x HD, pos < smax.
        unsafe { self.launch(&self.ops.rope_append, grid, ((HEAD_DIM / 2) as u32, 1, 1), k) }
    }

    pub(super) fn attention(&self, layer: &mut Layer, a: &mut Acts) -> Result<(), GpuError> {
        let c = self.cfg;
        let (len, hq, hkv, smax) = ((c.seq + 1) as i32, c.heads as i32, c.kv_heads as i32, (c.seq + 1) as i32);
        let scale = 1.0f32 / (HEAD_DIM as f32).sqrt();
        let bh = (c.batch * c.heads) as u32;
        if let (true, Some(f)) = (self.cluster > 0, &self.ops.attn_cluster) {
            let mut k = KArgs::default();
            k.ptr(self.dptr(&a.qkv)).ptr(self.dptr(&layer.kc)).ptr(self.dptr(&layer.vc)).ptr(self.dptr(&a.attn));
            k.i32(len).i32(hq).i32(hkv).i32(smax).f32(scale).f32(c.rope_theta);
            let kv_scale = if c.kv == KvFormat::Fp8E4M3 { KV_FP8_SCALE } else { 1.0 };
            k.f32(kv_scale).f32(kv_scale);
            let mut params: Vec<*mut c_void> = k.0.iter_mut().map(|v| (v as *mut u64).cast()).collect();
            let grid = (self.cluster, (c.batch * c.kv_heads) as u32, 1);
            // SAFETY: matches attn_cluster(const u16* qkv, kv_t* kc, kv_t* vc, u16* out, int len, int hq, int hkv,
            // int smax, float scale, float theta, float k_scale, float v_scale), compiled with GQA = hq / hkv,
            // KV8 = 1 exactly for an FP8 cache (kv_t = its element) and PDL = 1 exactly when `self.pdl`; qkv
            // holds batch x (hq + 2 hkv) x HD values, the caches batch x hkv x smax x HD elements, out
            // bh x HD values, len <= smax; the grid is one cluster of `cluster` <= 16 CTAs per (b, KV head),
            // a size `cluster_ctas` checked (and allowed above 8) for this function, whose dynamic shared memory
            // limit it raised to CLUSTER_SMEM.
            return unsafe {
                launch_cluster_ex(
                    self.s,
                    f,
                    grid,
                    (CLUSTER_THREADS, 1, 1),
                    CLUSTER_SMEM,
                    self.pdl,
                    (self.cluster, 1),
                    &mut params,
                )
            };
        }
        if c.fuse {
            let mut k = KArgs::default();
            k.ptr(self.dptr(&a.qkv)).ptr(self.dptr(&layer.kc)).ptr(self.dptr(&layer.vc)).ptr(self.dptr(&a.part));
            k.ptr(self.dptr(&a.counters)).ptr(self.dptr(&a.attn));
            k.i32(len).i32(hq).i32(hkv).i32(smax).i32(self.chunk).f32(scale).f32(c.rope_theta);
            // SAFETY: matches attn_rope(const u16* qkv, u16* kc, u16* vc, float* part, u32* counters, u16* out,
            // int len, int hq, int hkv, int smax, int chunk, float scale, float theta), compiled with GQA =
            // hq / hkv; qkv holds batch x (hq + 2 hkv) x HD values, the caches batch x hkv x smax x HD, part
            // bh x splits x (HD + 2) floats, counters at least batch x hkv zeros (the last CTA of each group
            // re-arms its own), out bh x HD values; len <= smax, splits x chunk >= len, chunk <= MAX_CHUNK,
            // splits <= 1024.
            let groups = (c.batch * c.kv_heads) as u32;
            return unsafe { self.launch(&self.ops.attn_rope, (groups, self.splits, 1), (HEAD_DIM as u32, 1, 1), k) };
        }
        let mut k = KArgs::default();
        k.ptr(self.dptr(&a.qkv)).ptr(self.dptr(&layer.kc)).ptr(self.dptr(&layer.vc)).ptr(self.dptr(&a.part));
        k.i32(len).i32(hq).i32(hkv).i32(smax).i32(self.chunk).f32(scale);
        // SAFETY: matches attn_split(const u16* qkv, const u16* kc, const u16* vc, float* part, int len, int hq,
        // int hkv, int smax, int chunk, float scale); part holds bh x splits x (HD + 2) floats, len <= smax,
        // splits x chunk >= len.
        unsafe { self.launch(&self.ops.attn_split, (bh, self.splits, 1), (128, 1, 1), k) }?;
        let mut k = KArgs::default();
        k.ptr(self.dptr(&a.part)).ptr(self.dptr(&a.attn)).i32(self.splits as i32);
        let groups = (c.batch * c.kv_heads) as u32;
        // SAFETY: matches attn_combine(const float* part, u16* out, int splits), compiled with GQA = hq / hkv;
        // part holds bh x splits x (HD + 2) floats (attn_split's), out bh x HD values; one CTA per group.
        unsafe { self.launch(&self.ops.attn_combine, (groups, 1, 1), (128, 1, 1), k) }
    }

    /// The fused step's qkv projection and attention: one `attn_qkv` launch, or the GEMV then the attention.
    pub(super) fn qkv_and_attention(&self, layer: &mut Layer, a: &mut Acts) -> Result<(), GpuError> {
        let Some(q) = self.qkv_attn else {
            self.linear(&mut layer.qkv, Lin::Qkv, a)?;
            return self.attention(layer, a);
        };
        let c = self.cfg;
        let kv_scale = if c.kv == KvFormat::Fp8E4M3 { KV_FP8_SCALE } else { 1.0 };
        let len = c.seq + 1;
        q.launch(
            self.s,
            &layer.qkv,
            &a.x,
            &mut a.qkv,
            &layer.kc,
            &layer.vc,
            &mut a.attn,
            len,
            len,
            c.rope_theta,
            (kv_scale, kv_scale),
            NORM_EPS,
            self.pdl,
        )
    }

    /// Relative error of the fused kernel's qkv rows against the qkv GEMV's, both on the current x and
    /// `layer`'s weights (the fused launch also re-appends the new key and value and rewrites the attention
    /// output).
    pub(super) fn check_fused_qkv(&self, layer: &mut Layer, a: &mut Acts) -> Result<f64, GpuError> {
        self.qkv_and_attention(layer, a)?;
        let fused = self.s.clone_dtoh(&a.qkv)?;
        self.linear(&mut layer.qkv, Lin::Qkv, a)?;
        let gemv = self.s.clone_dtoh(&a.qkv)?;
        let h = |b: &u16| f16::from_bits(*b).to_f32();
        let gemv: Vec<f64> = gemv.iter().map(|b| f64::from(h(b))).collect();
        Ok(rel_error(&fused.iter().map(h).collect::<Vec<_>>(), &gemv))
    }

    /// x += down(silu(gate) * up) of rmsnorm(x), one launch.
    pub(super) fn fused_ffn(&self, w: &mut FfnWeights, a: &mut Acts) -> Result<(), GpuError> {
        let ffn = self.ffn.ok_or_else(|| GpuError::Unsupported("fused FFN weights without its kernel".into()))?;
        ffn.run(self.s, w, &mut a.x, NORM_EPS, self.pdl)
    }

    pub(super) fn silu(&self, a: &mut Acts) -> Result<(), GpuError> {
        self.silu_rows(&a.gu, &a.act, self.cfg.batch, self.cfg.intermediate)
    }

    /// out = silu(gate) * up for `rows` gate_up rows [rows, 2f] (`out` holds rows x f values).
    pub(super) fn silu_rows(
        &self,
        gu: &CudaSlice<u16>,
        out: &CudaSlice<u16>,
        rows: usize,
        f: usize,
    ) -> Result<(), GpuError> {
        if gu.len() < rows * 2 * f || out.len() < rows * f {
            return Err(GpuError::Unsupported(format!("silu_mul: buffers too small for {rows} rows of {f}")));
        }
        let mut k = KArgs::default();
        k.ptr(self.dptr(gu)).ptr(self.dptr(out)).i32(f as i32);
        let grid = (rows as u32, (f as u32).div_ceil(256), 1);
        // SAFETY: matches silu_mul(const u16* gu, u16* out, int f); gu holds rows x 2f values, out rows x f
        // (checked above).
        unsafe { self.launch(&self.ops.silu_mul, grid, (256, 1, 1), k) }
    }
}

/// Kernel parameters for `cuLaunchKernelEx`: each value in its own 8-byte slot (device pointers as
/// addresses, `int` and `float` in the low 4 bytes, little-endian as the driver reads them).
#[derive(Default)]
pub(super) struct KArgs(Vec<u64>);

impl KArgs {
    pub(super) fn ptr(&mut self, p: u64) -> &mut Self {
        self.0.push(p);
        self
    }
    pub(super) fn i32(&mut self, v: i32) -> &mut Self {
        self.0.push(u64::from(v as u32));
        self
    }
    pub(super) fn f32(&mut self, v: f32) -> &mut Self {
        self.0.push(u64::from(v.to_bits()));
        self
    }
}

impl Enqueue<'_> {
    /// The device address of a buffer (event tracking is off: one stream, see `run`).
    pub(super) fn dptr<T>(&self, v: &CudaSlice<T>) -> u64 {
        v.device_ptr(self.s).0
    }

    /// Launches a decode kernel on the step's stream, with programmatic dependent launch on sm_90+.
    ///
    /// # Safety
    /// `args` must match `f`'s parameters in order and type, and the buffers must be valid for the launch.
    pub(super) unsafe fn launch(
        &self,
        f: &CudaFunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        mut args: KArgs,
    ) -> Result<(), GpuError> {
        let mut params: Vec<*mut c_void> = args.0.iter_mut().map(|v| (v as *mut u64).cast()).collect();
        // SAFETY: the caller guarantees the parameters; each points at a live 8-byte slot of `args`, whose
        // low bytes hold the value in the parameter's type; the decode kernels were compiled with PDL = 1
        // exactly when `self.pdl`.
        unsafe { launch_ex(self.s, f, grid, block, 0, self.pdl, &mut params) }
    }
}
