//! # roofline-gpu
//!
//! Measures ops on an NVIDIA GPU: CUDA is loaded at run time through cudarc (the crate builds and its
//! tests pass on machines with no CUDA), GEMMs run through cuBLAS, and every timing uses CUDA events with
//! warm-up, many runs (median/min/max) and input sets rotated so they exceed the L2 cache.
//!
//! Architecture invariant: all `unsafe` of the project lives here, each block with a `// SAFETY:` note.
//! No GPU is an ordinary state: [`Gpu::open`] returns [`GpuError::NoGpu`] with the reason.

mod timing;
pub mod weight_only;

use std::sync::Arc;

use cudarc::cublas::{sys::cublasOperation_t, CudaBlas, Gemm as _, GemmConfig};
use cudarc::driver::{sys::CUdevice_attribute, CudaContext, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};
use roofline_core::{Format, Gemm, HardwareProfile, Measurement, Scheme};
use thiserror::Error;

pub use timing::{TimingConfig, TimingStats};

/// Errors of the GPU engine.
#[derive(Debug, Error)]
pub enum GpuError {
    /// No driver, no device, or CUDA failed to initialize.
    #[error("no NVIDIA GPU/driver found ({0})")]
    NoGpu(String),
    /// A CUDA driver call failed.
    #[error("CUDA error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// A cuBLAS call failed.
    #[error("cuBLAS error: {0}")]
    Cublas(#[from] cudarc::cublas::result::CublasError),
    /// The requested precision has no GEMM path here.
    #[error("{0}")]
    Unsupported(String),
    /// A result did not match the CPU reference.
    #[error("wrong result: {0}")]
    Incorrect(String),
}

/// An opened GPU with a stream and a cuBLAS handle.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    /// Device name.
    pub name: String,
    /// Multiprocessors.
    pub sm_count: u32,
    /// L2 cache, bytes.
    pub l2_bytes: u64,
    /// Shared memory per SM, bytes.
    pub smem_per_sm: u64,
    /// Device memory, bytes.
    pub total_mem: u64,
    /// Compute capability.
    pub compute_capability: (i32, i32),
    /// Max SM clock, MHz.
    pub clock_mhz: f64,
}

/// Whether a CUDA driver library can be loaded on this machine (checked before cudarc, which panics).
pub fn probe_driver() -> Result<(), GpuError> {
    // SAFETY: loading libcuda runs its initializers only; we drop the handle at once and call nothing.
    let lib = unsafe { libloading::Library::new("libcuda.so.1") };
    lib.map(drop).map_err(|e| GpuError::NoGpu(format!("cannot load libcuda.so.1: {e}")))
}

fn attr(ctx: &CudaContext, a: CUdevice_attribute) -> Result<i32, GpuError> {
    Ok(ctx.attribute(a)?)
}

impl Gpu {
    /// Opens GPU `ordinal`.
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        probe_driver()?;
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| GpuError::NoGpu("the CUDA driver could not be initialized".into()))?
            .map_err(|e| GpuError::NoGpu(e.to_string()))?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone())?;
        Ok(Gpu {
            name: ctx.name()?,
            sm_count: attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2_bytes: attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            smem_per_sm: attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?
                as u64,
            clock_mhz: f64::from(attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?) / 1e3,
            total_mem: ctx.total_mem()? as u64,
            compute_capability: ctx.compute_capability()?,
            ctx,
            stream,
            blas,
        })
    }

    /// Device-to-device copy bandwidth, GB/s, counting bytes read plus bytes written.
    pub fn copy_bandwidth(&self, bytes: usize, cfg: &TimingConfig) -> Result<(f64, TimingStats), GpuError> {
        let n = bytes / 4;
        let src = self.stream.clone_htod(&random_f32(n, 11))?;
        let mut dst: CudaSlice<f32> = self.stream.alloc_zeros(n)?;
        let stats = timing::time(&self.ctx, &self.stream, cfg, |_| {
            self.stream.memcpy_dtod(&src, &mut dst)?;
            Ok(())
        })?;
        let back = self.stream.clone_dtoh(&dst)?;
        let want = random_f32(n, 11);
        if back != want {
            return Err(GpuError::Incorrect("device-to-device copy changed the data".into()));
        }
        Ok((2.0 * (n * 4) as f64 / (stats.median_us * 1e3), stats))
    }

    /// Time of the smallest stream operation (a 4-byte memset): the fixed cost every launch pays.
    pub fn launch_overhead_us(&self, cfg: &TimingConfig) -> Result<f64, GpuError> {
        let mut buf: CudaSlice<f32> = self.stream.alloc_zeros(1)?;
        let stats = timing::time(&self.ctx, &self.stream, cfg, |_| {
            self.stream.memset_zeros(&mut buf)?;
            Ok(())
        })?;
        Ok(stats.median_us)
    }

    /// Measures `y[M,N] = x[M,K] · W[N,K]^T` through cuBLAS in `precision` (FP16, BF16 or FP32), FP32
    /// accumulate, after checking a slice of the output against a CPU f64 reference.
    pub fn measure_gemm(
        &self,
        m: usize,
        n: usize,
        k: usize,
        precision: Format,
        cfg: &TimingConfig,
    ) -> Result<Measurement, GpuError> {
        match precision {
            Format::FP16 => self.gemm_typed::<f16>(m, n, k, precision, cfg, f16::from_f32, f16::to_f32),
            Format::BF16 => self.gemm_typed::<bf16>(m, n, k, precision, cfg, bf16::from_f32, bf16::to_f32),
            Format::FP32 => self.gemm_typed::<f32>(m, n, k, precision, cfg, |x| x, |x| x),
            other => Err(GpuError::Unsupported(format!(
                "{other} GEMM is not implemented in the measurement engine yet (FP16, BF16, FP32 are; FP8/INT8 through cuBLASLt and the low-bit weight-only kernels are open work)"
            ))),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn gemm_typed<T>(
        &self,
        m: usize,
        n: usize,
        k: usize,
        precision: Format,
        cfg: &TimingConfig,
        from: fn(f32) -> T,
        to: fn(T) -> f32,
    ) -> Result<Measurement, GpuError>
    where
        T: DeviceRepr + ValidAsZeroBits + Copy + Default + Unpin,
        CudaBlas: cudarc::cublas::Gemm<T>,
    {
        let elem = std::mem::size_of::<T>();
        let set_bytes = (m * k + n * k + m * n) * elem;
        // Rotate input sets so their total is at least twice the L2 (capped at 8 GB of device memory).
        let sets =
            ((2 * self.l2_bytes as usize).div_ceil(set_bytes)).clamp(1, (8usize << 30) / set_bytes.max(1)).max(1);
        let mut xs = Vec::with_capacity(sets);
        let mut ws = Vec::with_capacity(sets);
        let mut hosts = Vec::new();
        for s in 0..sets {
            let hx: Vec<T> = random_f32(m * k, 100 + s as u64).into_iter().map(from).collect();
            let hw: Vec<T> = random_f32(n * k, 200 + s as u64).into_iter().map(from).collect();
            xs.push(self.stream.clone_htod(&hx)?);
            ws.push(self.stream.clone_htod(&hw)?);
            if s == 0 {
                hosts = vec![hx, hw];
            }
        }
        let mut ys: Vec<CudaSlice<T>> = (0..sets).map(|_| self.stream.alloc_zeros(m * n)).collect::<Result<_, _>>()?;
        // Row-major y = x W^T is column-major y^T[N,M] = W[N,K] (stored K x N col-major, transposed) · x^T.
        let gcfg = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_T,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: from(1.0),
            lda: k as i32,
            ldb: k as i32,
            beta: from(0.0),
            ldc: n as i32,
        };
        // Correctness first: poison the output, run once, compare a slice with an f64 reference.
        let poison: Vec<T> = vec![from(f32::NAN); m * n];
        self.stream.memcpy_htod(&poison, &mut ys[0])?;
        // SAFETY: the buffers hold m*k, n*k and m*n elements, matching the dimensions and leading
        // dimensions given to cuBLAS; all live on this stream.
        unsafe { self.blas.gemm(gcfg, &ws[0], &xs[0], &mut ys[0]) }?;
        let y: Vec<T> = self.stream.clone_dtoh(&ys[0])?;
        check_gemm(&hosts[0], &hosts[1], &y, m, n, k, to, precision)?;
        let stats = timing::time(&self.ctx, &self.stream, cfg, |i| {
            let s = i % sets;
            // SAFETY: as above, set `s` has the same shapes.
            unsafe { self.blas.gemm(gcfg, &ws[s], &xs[s], &mut ys[s]) }?;
            Ok(())
        })?;
        let gemm = Gemm::new(m as u64, n as u64, k as u64, Scheme::weight_only(precision, precision))
            .map_err(|e| GpuError::Unsupported(e.to_string()))?;
        let cost = gemm.cost().map_err(|e| GpuError::Unsupported(e.to_string()))?;
        Ok(Measurement {
            device: self.name.clone(),
            time_us: stats.median_us,
            time_us_min: stats.min_us,
            time_us_max: stats.max_us,
            runs: stats.runs,
            tflops: cost.flops as f64 / (stats.median_us * 1e6),
            bandwidth_gb_s: cost.bytes as f64 / (stats.median_us * 1e3),
            kernel: format!("cublas gemm_ex {precision} (FP32 accumulate), {sets} rotating input sets"),
            power: None,
        })
    }

    /// Measures this GPU's ceilings and writes them as a hardware profile.
    pub fn calibrate(&self, mut progress: impl FnMut(&str)) -> Result<HardwareProfile, GpuError> {
        let cfg = TimingConfig::default();
        progress("copy bandwidth (1 GiB device-to-device)");
        let (bw, _) = self.copy_bandwidth(1 << 30, &cfg)?;
        progress("launch overhead");
        let overhead = self.launch_overhead_us(&cfg)?;
        let mut peaks = Vec::new();
        for (f, class) in [
            (Format::FP16, roofline_core::ComputeClass::FP16),
            (Format::BF16, roofline_core::ComputeClass::BF16),
            (Format::FP32, roofline_core::ComputeClass::FP32),
        ] {
            progress(&format!("{f} GEMM 8192^3"));
            let meas = self.measure_gemm(8192, 8192, 8192, f, &TimingConfig { min_runs: 20, ..cfg })?;
            peaks.push((class, meas.tflops));
        }
        let mut p = HardwareProfile::custom(bw, &peaks).map_err(|e| GpuError::Unsupported(e.to_string()))?;
        let date = timing::today();
        p.key = format!("measured-{}", self.name.to_lowercase().replace(' ', "-"));
        p.name = self.name.clone();
        p.source = format!("measured on {} {date}", self.name);
        p.memory_gb = Some(self.total_mem as f64 / 1e9);
        p.sm_count = Some(self.sm_count);
        p.l2_mb = Some(self.l2_bytes as f64 / 1e6);
        p.smem_per_sm_kb = Some(self.smem_per_sm as f64 / 1024.0);
        p.boost_clock_mhz = Some(self.clock_mhz);
        p.launch_overhead_us = Some(overhead);
        p.notes = Some(format!(
            "roofline calibrate: copy bandwidth = bytes read + written / median time of a 1 GiB device-to-device copy; peaks = median TFLOP/s of 8192^3 cuBLAS GEMMs on random data; launch overhead = median of a 4-byte memset; compute capability {}.{}",
            self.compute_capability.0, self.compute_capability.1
        ));
        for f in [
            "memory_bandwidth_gb_s",
            "peak_tflops",
            "memory_gb",
            "sm_count",
            "l2_mb",
            "smem_per_sm_kb",
            "boost_clock_mhz",
            "launch_overhead_us",
        ] {
            p.sources.insert(f.into(), p.source.clone());
        }
        Ok(p)
    }
}

#[allow(clippy::too_many_arguments)]
fn check_gemm<T: Copy>(
    x: &[T],
    w: &[T],
    y: &[T],
    m: usize,
    n: usize,
    k: usize,
    to: fn(T) -> f32,
    precision: Format,
) -> Result<(), GpuError> {
    let tol = match precision {
        Format::FP32 => 1e-5,
        _ => 1e-2,
    };
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    let rows = m.min(8);
    let cols = n.min(256);
    for i in 0..rows {
        for j in 0..cols {
            let mut acc = 0.0f64;
            for l in 0..k {
                acc += f64::from(to(x[i * k + l])) * f64::from(to(w[j * k + l]));
            }
            let got = f64::from(to(y[i * n + j]));
            if !got.is_finite() {
                return Err(GpuError::Incorrect(format!("y[{i},{j}] = {got} (unwritten or overflow)")));
            }
            err += (got - acc).powi(2);
            norm += acc * acc;
        }
    }
    let rel = (err / norm.max(1e-30)).sqrt();
    if rel > tol {
        return Err(GpuError::Incorrect(format!("{precision} GEMM {m}x{n}x{k}: relative error {rel:.2e} > {tol:.0e}")));
    }
    Ok(())
}

/// Uniform random values in [-1, 1) (never all zeros), deterministic per seed.
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_gpu_is_an_error_not_a_panic() {
        // On a machine without libcuda (CI) this must be NoGpu; on a GPU machine it opens.
        match Gpu::open(0) {
            Ok(gpu) => assert!(gpu.sm_count > 0),
            Err(e) => assert!(e.to_string().starts_with("no NVIDIA GPU/driver found"), "{e}"),
        }
    }

    #[test]
    fn random_data_is_not_zero() {
        let v = random_f32(1000, 1);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
        assert!(v.iter().filter(|x| **x == 0.0).count() < 2);
        assert_ne!(random_f32(10, 1), random_f32(10, 2));
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU"]
    fn gemm_is_correct_and_timed() {
        let gpu = Gpu::open(0).unwrap();
        for f in [Format::FP16, Format::BF16, Format::FP32] {
            let m = gpu.measure_gemm(64, 320, 256, f, &TimingConfig { min_runs: 10, ..Default::default() }).unwrap();
            assert!(m.time_us > 0.0 && m.tflops > 0.0, "{f}");
        }
        let (bw, _) = gpu.copy_bandwidth(256 << 20, &TimingConfig::default()).unwrap();
        assert!(bw > 100.0);
    }
}
