//! Dense GEMMs through cuBLASLt: FP32, TF32, FP16, BF16, FP8 (E4M3, and E5M2 weights against E4M3
//! activations; per-tensor scales through scale pointers; BF16 output) and INT8 (INT32 accumulate and
//! output). Inputs are random and never zero, rotated across sets that exceed twice the L2, the output is
//! poisoned and checked against an f64 CPU reference of the same (already rounded) inputs before timing.

use cudarc::driver::{CudaSlice, DevicePtr};
use half::{bf16, f16};
use roofline_core::{Format, Gemm, Measurement, Scheme};
use roofline_quant::minifloat::{E4M3, E5M2};

use crate::lt::{LtPlan, LtTypes};
use crate::power::{measure_power, PowerMeter};
use crate::weight_only::{GemvOverride, WeightOnlyOptions, WoFormat, XDtype};
use crate::{random_f32, timing, Gpu, GpuError, TimingConfig};

/// Which kernel family measures a scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelKind {
    /// A dense cuBLASLt GEMM ([`GEMM_FORMATS`], scheme [`gemm_scheme`]).
    CublasLt,
    /// roofline's own weight-only GEMV/skinny-GEMM kernels (M <= 16, FP16/BF16 activations).
    WeightOnly,
}

impl KernelKind {
    /// The default kernel for a scheme: cuBLASLt for its dense schemes, the weight-only kernels for mixed
    /// schemes with FP16/BF16 activations and a weight format they implement; `None` otherwise.
    pub fn for_scheme(s: &Scheme) -> Option<KernelKind> {
        if GEMM_FORMATS.contains(&s.weights) && *s == gemm_scheme(s.weights) {
            Some(KernelKind::CublasLt)
        } else if matches!(s.activations, Format::FP16 | Format::BF16) && WoFormat::from_format(s.weights).is_ok() {
            Some(KernelKind::WeightOnly)
        } else {
            None
        }
    }
}

/// The formats [`Gpu::measure_gemm`] runs through cuBLASLt.
pub const GEMM_FORMATS: [Format; 7] =
    [Format::FP32, Format::TF32, Format::FP16, Format::BF16, Format::FP8_E4M3, Format::FP8_E5M2, Format::INT8];

/// The scheme the cuBLASLt GEMM of `precision` computes, for predicting the same bytes it moves: FP8 writes
/// BF16, INT8 writes INT32 (counted as 4-byte FP32), FP32/TF32 write FP32, FP16/BF16 their own format.
pub fn gemm_scheme(precision: Format) -> Scheme {
    let output = match precision {
        Format::FP32 | Format::TF32 | Format::INT8 => Format::FP32,
        Format::FP8_E4M3 | Format::FP8_E5M2 | Format::BF16 => Format::BF16,
        _ => Format::FP16,
    };
    let activations = match precision {
        Format::FP8_E5M2 => Format::FP8_E4M3,
        p => p,
    };
    Scheme { weights: precision, activations, output }
}

/// Relative-error bound of the check against the f64 reference (inputs are exact in both; what remains is
/// accumulation order, TF32's 10-bit operand rounding inside the MMA, and the output's rounding).
fn tolerance(precision: Format) -> f64 {
    match precision {
        Format::FP32 => 1e-5,
        Format::TF32 => 2e-3,
        Format::INT8 => 0.0,
        _ => 1e-2,
    }
}

/// Host copy of one operand: the bytes uploaded and the exact values they encode.
struct Operand {
    bytes: Vec<u8>,
    values: Vec<f32>,
}

/// Encodes `src` (uniform in [-1, 1)) in `f`; INT8 maps it onto [-127, 127].
fn encode(f: Format, src: &[f32]) -> Operand {
    let mut bytes = Vec::with_capacity(src.len() * 4);
    let mut values = Vec::with_capacity(src.len());
    for &v in src {
        match f {
            Format::FP16 => {
                let h = f16::from_f32(v);
                bytes.extend_from_slice(&h.to_bits().to_le_bytes());
                values.push(h.to_f32());
            }
            Format::BF16 => {
                let h = bf16::from_f32(v);
                bytes.extend_from_slice(&h.to_bits().to_le_bytes());
                values.push(h.to_f32());
            }
            Format::FP8_E4M3 | Format::FP8_E5M2 => {
                let mf = if f == Format::FP8_E4M3 { E4M3 } else { E5M2 };
                let r = mf.round(v);
                bytes.push(mf.encode(r) as u8);
                values.push(r);
            }
            Format::INT8 => {
                let q = (v * 127.0).round().clamp(-127.0, 127.0) as i8;
                bytes.push(q as u8);
                values.push(f32::from(q));
            }
            _ => {
                bytes.extend_from_slice(&v.to_le_bytes());
                values.push(v);
            }
        }
    }
    Operand { bytes, values }
}

/// Decodes output element `i` of a `d`-typed buffer.
fn decode_out(p: Format, bytes: &[u8], i: usize) -> f64 {
    match p {
        Format::FP32 | Format::TF32 => {
            f64::from(f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]))
        }
        Format::INT8 => {
            f64::from(i32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]))
        }
        Format::FP16 => f64::from(f16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])).to_f32()),
        _ => f64::from(bf16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])).to_f32()),
    }
}

impl Gpu {
    /// Measures `gemm` with the kernel that runs its scheme (see [`KernelKind::for_scheme`]), or with
    /// `kind` when given. Other schemes are [`GpuError::Unsupported`], with the reason.
    pub fn measure(
        &self,
        gemm: &Gemm,
        kind: Option<KernelKind>,
        cfg: &TimingConfig,
        meter: Option<&mut dyn PowerMeter>,
    ) -> Result<Measurement, GpuError> {
        self.measure_with(gemm, kind, cfg, meter, &GemvOverride::default())
    }

    /// [`Gpu::measure`] with the weight-only kernel's variant and launch plan overridden by `gemv` (the
    /// tuning tables' configurations, `--gemv` on the command line); dense GEMMs ignore it.
    pub fn measure_with(
        &self,
        gemm: &Gemm,
        kind: Option<KernelKind>,
        cfg: &TimingConfig,
        meter: Option<&mut dyn PowerMeter>,
        gemv: &GemvOverride,
    ) -> Result<Measurement, GpuError> {
        if gemm.batch != 1 {
            return Err(GpuError::Unsupported(format!("batched GEMMs (batch {}) are not measured", gemm.batch)));
        }
        let size = |v: u64| usize::try_from(v).map_err(|_| GpuError::Unsupported(format!("{v} is too large")));
        let (m, n, k) = (size(gemm.m)?, size(gemm.n)?, size(gemm.k)?);
        let s = gemm.scheme;
        match kind.or_else(|| KernelKind::for_scheme(&s)) {
            Some(KernelKind::CublasLt) if GEMM_FORMATS.contains(&s.weights) && s == gemm_scheme(s.weights) => {
                self.measure_gemm(m, n, k, s.weights, cfg, meter)
            }
            Some(KernelKind::WeightOnly) if matches!(s.activations, Format::FP16 | Format::BF16) => {
                let x = if s.activations == Format::BF16 { XDtype::Bf16 } else { XDtype::F16 };
                gemv.tuning.check()?;
                let opts =
                    WeightOnlyOptions { x, variant: gemv.variant, tuning: gemv.tuning, ..WeightOnlyOptions::default() };
                let wo = self.measure_weight_only_with(s.weights, m, n, k, cfg, &opts)?;
                let cost = gemm.cost().map_err(|e| GpuError::Unsupported(e.to_string()))?;
                // The GEMM's counted FLOPs and bytes (the prediction's), not the kernel's own.
                Ok(Measurement {
                    tflops: cost.flops as f64 / (wo.stats.median_us * 1e6),
                    bandwidth_gb_s: cost.bytes as f64 / (wo.stats.median_us * 1e3),
                    kernel: format!(
                        // (the kernel's words already say its rotating weight sets and launches per sample)
                        "{} (rel. error {:.1e} vs f64 reference{}{})",
                        wo.kernel,
                        wo.rel_error,
                        wo.graph.map_or(String::new(), |g| format!(
                            "; CUDA-graph replay {:.2} us a launch ({} launches a graph)",
                            g.median_us, g.inner
                        )),
                        if meter.is_some() { "; power not sampled for weight-only kernels" } else { "" }
                    ) + &if *gemv == GemvOverride::default() { String::new() } else { format!("; --gemv {gemv}") },
                    ..wo.to_measurement(&self.name)
                })
            }
            _ => Err(GpuError::Unsupported(format!(
                "no kernel for {} (dense cuBLASLt schemes: {}; weight-only kernels: W in FP16, BF16, FP8_E4M3, INT8, INT4_G128, NF4, MXFP4, NVFP4 with FP16/BF16 activations, M <= 16)",
                s.label(),
                GEMM_FORMATS.map(|f| gemm_scheme(f).label()).join(", ")
            ))),
        }
    }

    /// Measures `y[M,N] = x[M,K] · W[N,K]^T` through cuBLASLt in `precision` (see [`GEMM_FORMATS`]) after
    /// checking the output against a CPU f64 reference; with `meter`, also holds the GEMM for
    /// `cfg.power_ms` while the meter samples power.
    pub fn measure_gemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        precision: Format,
        cfg: &TimingConfig,
        meter: Option<&mut dyn PowerMeter>,
    ) -> Result<Measurement, GpuError> {
        let types = LtTypes::of(precision).ok_or_else(|| {
            GpuError::Unsupported(format!(
                "{precision} has no dense cuBLASLt GEMM (measured: {}); low-bit weight-only formats run through the weight-only kernels",
                GEMM_FORMATS.map(|f| f.to_string()).join(", ")
            ))
        })?;
        if m == 0 || n == 0 || k == 0 {
            return Err(GpuError::Unsupported("every GEMM dimension must be at least 1".into()));
        }
        if types.in_bytes == 1 && k % 16 != 0 {
            return Err(GpuError::Unsupported(format!(
                "{precision} GEMMs on tensor cores need K to be a multiple of 16 (got {k})"
            )));
        }
        let out_bytes = m * n * types.out_bytes;
        let set_bytes = (m * k + n * k) * types.in_bytes + out_bytes;
        // Rotate input sets so their total is at least twice the L2 (capped at 8 GB of device memory).
        let sets = (2 * self.l2_bytes as usize).div_ceil(set_bytes).clamp(1, ((8usize << 30) / set_bytes).max(1));
        let act = match precision {
            Format::FP8_E5M2 => Format::FP8_E4M3,
            p => p,
        };
        let mut ws = Vec::with_capacity(sets);
        let mut xs = Vec::with_capacity(sets);
        let mut host = None;
        for s in 0..sets {
            let w = encode(precision, &random_f32(n * k, 200 + s as u64));
            let x = encode(act, &random_f32(m * k, 100 + s as u64));
            ws.push(self.stream.clone_htod(&w.bytes)?);
            xs.push(self.stream.clone_htod(&x.bytes)?);
            if s == 0 {
                host = Some((w, x));
            }
        }
        let mut ys: Vec<CudaSlice<u8>> =
            (0..sets).map(|_| self.stream.alloc_zeros(out_bytes)).collect::<Result<_, _>>()?;
        // FP8: per-tensor scales (not 1, so a missing scale would show in the check).
        let (scale_w, scale_x) = (0.5f32, 0.25f32);
        let fp8 = matches!(precision, Format::FP8_E4M3 | Format::FP8_E5M2);
        // Two allocations (each 256-byte aligned): cuBLASLt refused a B scale 4 bytes after the A scale.
        let scale_w_buf = self.stream.clone_htod(&[scale_w])?;
        let scale_x_buf = self.stream.clone_htod(&[scale_x])?;
        let scales = if fp8 {
            Some((scale_w_buf.device_ptr(&self.stream).0, scale_x_buf.device_ptr(&self.stream).0))
        } else {
            None
        };
        let plan = LtPlan::new(&self.lt, types, (m, n, k), 1.0, scales)?;
        let ptr = |s: &CudaSlice<u8>| s.device_ptr(&self.stream).0;
        let wp: Vec<_> = ws.iter().map(ptr).collect();
        let xp: Vec<_> = xs.iter().map(ptr).collect();
        let yp: Vec<_> = ys.iter().map(ptr).collect();
        // Correctness first: poison, run once, compare with the f64 reference.
        self.stream.memcpy_htod(&vec![0xFFu8; out_bytes], &mut ys[0])?;
        // SAFETY: set 0's buffers hold N·K and M·K inputs and M·N outputs of the planned types and live
        // until after the synchronizing copy below.
        unsafe { plan.launch(&self.lt, wp[0], xp[0], yp[0]) }?;
        let y = self.stream.clone_dtoh(&ys[0])?;
        let (w, x) = host.as_ref().ok_or_else(|| GpuError::Incorrect("no input set".into()))?;
        let scale = if fp8 { f64::from(scale_w) * f64::from(scale_x) } else { 1.0 };
        check(&x.values, &w.values, |i| decode_out(precision, &y, i), (m, n, k), scale, precision)?;
        let mut op = |i: usize| {
            let s = i % sets;
            // SAFETY: as above; every set has the same shapes and outlives the timing loop.
            unsafe { plan.launch(&self.lt, wp[s], xp[s], yp[s]) }
        };
        let stats = timing::time(&self.ctx, &self.stream, cfg, &mut op)?;
        let gemm = Gemm::new(m as u64, n as u64, k as u64, gemm_scheme(precision))
            .map_err(|e| GpuError::Unsupported(e.to_string()))?;
        let cost = gemm.cost().map_err(|e| GpuError::Unsupported(e.to_string()))?;
        let power = match meter {
            Some(meter) => Some(measure_power(
                &self.ctx,
                &self.stream,
                cfg.power_ms,
                meter,
                cost.flops as f64,
                cost.bytes as f64,
                &mut op,
            )?),
            None => None,
        };
        Ok(Measurement {
            device: self.name.clone(),
            time_us: stats.median_us,
            time_us_min: stats.min_us,
            time_us_max: stats.max_us,
            runs: stats.runs,
            tflops: cost.flops as f64 / (stats.median_us * 1e6),
            bandwidth_gb_s: cost.bytes as f64 / (stats.median_us * 1e3),
            kernel: format!(
                "cuBLASLt {} (heuristic algorithm, {} rotating input sets, {})",
                gemm_scheme(precision).label(),
                sets,
                stats.sample_words()
            ),
            power,
            // CUDA-graph replay is timed for the weight-only GEMVs only.
            graph_us: None,
            host_us: stats.host(),
        })
    }
}

/// Compares rows 0..8 and columns 0..256 of the output with an f64 reference; INT8 must match exactly.
fn check(
    x: &[f32],
    w: &[f32],
    got: impl Fn(usize) -> f64,
    (m, n, k): (usize, usize, usize),
    scale: f64,
    precision: Format,
) -> Result<(), GpuError> {
    let tol = tolerance(precision);
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for i in 0..m.min(8) {
        for j in 0..n.min(256) {
            let acc: f64 = (0..k).map(|l| f64::from(x[i * k + l]) * f64::from(w[j * k + l])).sum::<f64>() * scale;
            let g = got(i * n + j);
            if !g.is_finite() {
                return Err(GpuError::Incorrect(format!("y[{i},{j}] = {g} (unwritten or overflow)")));
            }
            err += (g - acc).powi(2);
            norm += acc * acc;
        }
    }
    let rel = (err / norm.max(1e-30)).sqrt();
    if rel > tol {
        return Err(GpuError::Incorrect(format!("{precision} GEMM {m}x{n}x{k}: relative error {rel:.2e} > {tol:.0e}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_encode_exact_values() {
        let src = [0.3f32, -0.77, 0.001, 0.999];
        let e4 = encode(Format::FP8_E4M3, &src);
        assert_eq!(e4.bytes.len(), 4);
        for (b, v) in e4.bytes.iter().zip(&e4.values) {
            assert_eq!(E4M3.decode(u32::from(*b)), *v);
        }
        let i8s = encode(Format::INT8, &src);
        assert_eq!(i8s.values, vec![38.0, -98.0, 0.0, 127.0]);
        assert_eq!(i8s.bytes[1] as i8, -98);
        let h = encode(Format::FP16, &src);
        assert_eq!(h.bytes.len(), 8);
        assert_eq!(decode_out(Format::FP16, &h.bytes, 1), f64::from(f16::from_f32(-0.77).to_f32()));
    }

    #[test]
    fn schemes_count_what_the_kernels_write() {
        assert_eq!(gemm_scheme(Format::FP8_E4M3).output, Format::BF16);
        assert_eq!(gemm_scheme(Format::INT8).output.effective_bits(), 32.0);
        assert_eq!(gemm_scheme(Format::FP16), Scheme::uniform(Format::FP16));
        assert_eq!(gemm_scheme(Format::FP8_E5M2).activations, Format::FP8_E4M3);
    }

    #[test]
    fn schemes_pick_their_kernel() {
        let k = |s| KernelKind::for_scheme(&s);
        assert_eq!(k(gemm_scheme(Format::FP8_E4M3)), Some(KernelKind::CublasLt));
        assert_eq!(k(Scheme::uniform(Format::FP16)), Some(KernelKind::CublasLt));
        assert_eq!(k(Scheme::weight_only(Format::INT4_G128, Format::FP16)), Some(KernelKind::WeightOnly));
        assert_eq!(k(Scheme::weight_only(Format::FP8_E4M3, Format::BF16)), Some(KernelKind::WeightOnly));
        assert_eq!(k(Scheme::weight_only(Format::MXFP6_E3M2, Format::FP16)), None);
        assert_eq!(k(Scheme::uniform(Format::NVFP4)), None);
    }

    #[test]
    fn the_check_catches_a_wrong_result() {
        let x = vec![1.0f32; 2 * 4];
        let w = vec![0.5f32; 3 * 4];
        assert!(check(&x, &w, |_| 2.0, (2, 3, 4), 1.0, Format::FP32).is_ok());
        assert!(check(&x, &w, |_| 2.1, (2, 3, 4), 1.0, Format::FP32).is_err());
        assert!(check(&x, &w, |_| f64::NAN, (2, 3, 4), 1.0, Format::FP16).is_err());
        assert!(check(&x, &w, |_| 1.0, (2, 3, 4), 2.0, Format::INT8).is_err());
    }
}
