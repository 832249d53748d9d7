//! # roofline-gpu
//!
//! Measures ops on an NVIDIA GPU: CUDA is loaded at run time through cudarc (the crate builds and its
//! tests pass on machines with no CUDA), GEMMs run through cuBLAS, and every timing uses CUDA events with
//! warm-up, many runs (median/min/max) and input sets rotated so they exceed the L2 cache.
//!
//! Architecture invariant: all `unsafe` of the project lives here, each block with a `// SAFETY:` note.
//! No GPU is an ordinary state: [`Gpu::open`] returns [`GpuError::NoGpu`] with the reason.

pub mod bench_weights;
pub mod bulk_stream;
mod gate;
mod gemm;
pub mod lt;
pub mod model_bench;
pub mod power;
mod provenance;
pub mod sm_map;
pub mod stream;
pub mod timing;
pub mod weight_only;

use rayon::prelude::*;
use std::sync::Arc;

use cudarc::driver::{sys::CUdevice_attribute, CudaContext, CudaSlice, CudaStream};
use roofline_core::{ComputeClass, Format, HardwareProfile};
use thiserror::Error;

pub use gemm::{gemm_scheme, KernelKind, GEMM_FORMATS};
pub use power::{MeterReading, PowerMeter};
pub use provenance::kernel_sources_hash;
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
    /// A cuBLASLt call failed (which call, and its status).
    #[error("cuBLASLt error in {0}")]
    Cublas(String),
    /// Power sampling failed.
    #[error("power meter: {0}")]
    Meter(String),
    /// The requested precision has no GEMM path here.
    #[error("{0}")]
    Unsupported(String),
    /// A kernel's build keeps values in local memory (register spills), which this crate does not run: the
    /// NVRTC in use compiled it past its register budget. Where the build was the default's choice, the engine
    /// runs the call on another kernel instead; where it was asked for, this is the answer.
    #[error("{what} spills registers ({bytes} bytes of local memory per thread):\n{log}")]
    Spills {
        /// The kernel, in words.
        what: String,
        /// Bytes of local memory per thread (spill stores, or the driver's local size where the log has no count).
        bytes: u32,
        /// The compiler's log (ptxas statistics).
        log: String,
    },
    /// A result did not match the CPU reference.
    #[error("wrong result: {0}")]
    Incorrect(String),
    /// Model weights could not be read or do not fit the model (missing tensor, wrong shape, bad file).
    #[error("weights: {0}")]
    Weights(String),
}

/// An opened GPU with a stream of its own and a cuBLASLt handle.
///
/// Each `Gpu` enqueues on its own non-blocking stream, not on the context's legacy default stream: GPUs opened
/// in several threads of one process (tests, a server) share one CUDA context, and on one shared stream each
/// thread's timed samples queued behind, and between, the other threads' work and closed timing gates
/// (`gate.rs`). A stream a `Gpu` left the H200's timings as they were (session 46: INT4, FP16, FP8 and NVFP4
/// GEMVs within 1%, model-bench's Llama-3.1-8B steps within 0.1%). cudarc's cross-stream event tracking stays
/// off for the `Gpu`'s context handle, as it was with the default stream alone: this crate enqueues a `Gpu`'s
/// work on its stream, and the measurements that use a second stream (CUDA-graph captures, model-bench's step)
/// synchronize before they switch to it.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    lt: lt::LtHandle,
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
        // Creating the cuBLASLt handle (and a context) may synchronize the device: not during another thread's
        // capture.
        let _alone = timing::context_wide();
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| GpuError::NoGpu("the CUDA driver could not be initialized".into()))?
            .map_err(|e| GpuError::NoGpu(e.to_string()))?;
        // SAFETY: event tracking orders one buffer's uses across streams; every use of this context handle's
        // buffers is on `stream` below, except in `timing::time_graph` and model-bench, which synchronize
        // before they enqueue on a stream of their own and disable the tracking themselves (see `Gpu`'s docs).
        // With the tracking off before the first stream, `new_stream` does not synchronize the context.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let compute_capability = ctx.compute_capability()?;
        let lt = lt::LtHandle::new(stream.clone(), compute_capability.0)?;
        Ok(Gpu {
            name: ctx.name()?,
            sm_count: attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2_bytes: attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            smem_per_sm: attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?
                as u64,
            clock_mhz: f64::from(attr(&ctx, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?) / 1e3,
            total_mem: ctx.total_mem()? as u64,
            compute_capability,
            ctx,
            stream,
            lt,
        })
    }

    /// Device-to-device copy bandwidth, GB/s, counting bytes read plus bytes written. Copies smaller than
    /// the L2 rotate over enough buffer pairs to exceed twice its size, so DRAM is measured, not the cache.
    pub fn copy_bandwidth(&self, bytes: usize, cfg: &TimingConfig) -> Result<(f64, TimingStats), GpuError> {
        let n = (bytes / 4).max(1);
        let sets = self.rotation_sets(2 * n * 4);
        let mut srcs = Vec::with_capacity(sets);
        let mut dsts: Vec<CudaSlice<f32>> = Vec::with_capacity(sets);
        for s in 0..sets {
            srcs.push(self.stream.clone_htod(&random_f32(n, 11 + s as u64))?);
            dsts.push(self.stream.alloc_zeros(n)?);
        }
        let stats = timing::time(&self.ctx, &self.stream, cfg, |i| {
            let s = i % sets;
            self.stream.memcpy_dtod(&srcs[s], &mut dsts[s])?;
            Ok(())
        })?;
        let back = self.stream.clone_dtoh(&dsts[0])?;
        if back != random_f32(n, 11) {
            return Err(GpuError::Incorrect("device-to-device copy changed the data".into()));
        }
        Ok((2.0 * (n * 4) as f64 / (stats.median_us * 1e3), stats))
    }

    /// Input sets of `bytes_per_set` each to rotate through so that consecutive runs together exceed twice
    /// the L2 (DRAM is measured, not the cache): 1 to 64.
    pub(crate) fn rotation_sets(&self, bytes_per_set: usize) -> usize {
        (2 * self.l2_bytes as usize).div_ceil(bytes_per_set.max(1)).clamp(1, 64)
    }

    /// Memory start-up latency, microseconds: device copies of 8 MB to 1 GiB are timed, and the mean of
    /// `time - bytes / bandwidth - launch overhead` over them is the fixed time a memory-bound kernel spends
    /// before streaming at `bandwidth_gb_s` (clamped at 0). Returns it with the (bytes, time) points.
    pub fn memory_latency_us(
        &self,
        bandwidth_gb_s: f64,
        launch_overhead_us: f64,
        cfg: &TimingConfig,
    ) -> Result<(f64, Vec<(f64, f64)>), GpuError> {
        let mut points = Vec::new();
        for mb in [8usize, 16, 32, 64, 128, 256] {
            let (_, stats) = self.copy_bandwidth(mb << 20, cfg)?;
            points.push((2.0 * (mb << 20) as f64, stats.median_us));
        }
        Ok((memory_latency_fit(&points, bandwidth_gb_s, launch_overhead_us), points))
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

    /// Measures this GPU's ceilings and writes them as a hardware profile.
    pub fn calibrate(&self, mut progress: impl FnMut(&str)) -> Result<HardwareProfile, GpuError> {
        let cfg = TimingConfig::default();
        progress("copy bandwidth (1 GiB device-to-device)");
        let (bw, _) = self.copy_bandwidth(1 << 30, &cfg)?;
        progress("launch overhead");
        let overhead = self.launch_overhead_us(&cfg)?;
        progress("memory start-up latency (copies of 8 to 256 MiB)");
        let (latency, _) = self.memory_latency_us(bw, overhead, &cfg)?;
        progress("read-stream bandwidth (a read-only kernel, 8 MiB to 1 GiB)");
        let read = self.read_stream(&cfg, &mut progress)?;
        // Negative when overlapped launches hide part of the launch overhead (see `read_latency_us`).
        let read_latency = read.intercept_us.max(0.0) - overhead;
        progress(&format!(
            "read stream: {:.0} GB/s ({:.3}x the copy's {bw:.0}); {:.2} us a launch that reads nothing, {read_latency:+.2} us beside the launch overhead",
            read.bandwidth_gb_s,
            read.bandwidth_gb_s / bw,
            read.intercept_us
        ));
        let mut peaks = Vec::new();
        for (f, class) in [
            (Format::FP16, ComputeClass::FP16),
            (Format::BF16, ComputeClass::BF16),
            (Format::FP8_E4M3, ComputeClass::FP8),
            (Format::INT8, ComputeClass::INT8),
            (Format::TF32, ComputeClass::TF32),
            (Format::FP32, ComputeClass::FP32),
        ] {
            progress(&format!("{f} GEMM 8192^3"));
            match self.measure_gemm(8192, 8192, 8192, f, &TimingConfig { min_runs: 20, ..cfg }, None) {
                Ok(meas) => peaks.push((class, meas.tflops)),
                // A format this GPU lacks (FP8 before Ada) is left out of the profile, not guessed.
                // FP16 is the one ceiling every profile needs; other formats are skipped with the reason.
                Err(e) if f != Format::FP16 => progress(&format!("{f}: skipped ({e})")),
                Err(e) => return Err(e),
            }
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
        p.memory_latency_us = Some(latency);
        p.read_bandwidth_gb_s = Some(read.bandwidth_gb_s);
        p.read_latency_us = Some(read_latency);
        p.notes = Some(format!(
            "roofline calibrate: copy bandwidth = bytes read + written / median time of a 1 GiB device-to-device copy; peaks = median TFLOP/s of 8192^3 cuBLASLt GEMMs on random data (FP8 E4M3 with BF16 output, INT8 with INT32 output); launch overhead = time per launch of back-to-back 4-byte memsets; memory latency = mean of (time - bytes/bandwidth - launch overhead) over device copies of 8 to 256 MiB; read bandwidth and read latency = slope and intercept (less the launch overhead) of a line through the time per launch of a read-only kernel ({}) over 8 MiB to 1 GiB; every time the median of samples whose launches were all enqueued before the GPU ran them (gated); compute capability {}.{}",
            read.config.label(),
            self.compute_capability.0,
            self.compute_capability.1
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
            "memory_latency_us",
            "read_bandwidth_gb_s",
            "read_latency_us",
        ] {
            p.sources.insert(f.into(), p.source.clone());
        }
        Ok(p)
    }
}

/// The fixed start-up time in `(bytes, time_us)` points of a memory-bound op at `bandwidth_gb_s`, with the
/// per-launch overhead taken out: mean residual, never negative.
pub fn memory_latency_fit(points: &[(f64, f64)], bandwidth_gb_s: f64, launch_overhead_us: f64) -> f64 {
    if points.is_empty() {
        return 0.0;
    }
    let sum: f64 = points.iter().map(|(bytes, t)| t - bytes / (bandwidth_gb_s * 1e3) - launch_overhead_us).sum();
    (sum / points.len() as f64).max(0.0)
}

/// Uniform random values in [-1, 1) (never all zeros), deterministic per seed.
pub fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    // Blocks of the same xorshift64 sequence filled in parallel: each block's first state is the seed's
    // state advanced by a jump (the generator is linear over GF(2), so a jump of J steps is a 64 x 64 bit
    // matrix, `XorShiftJump`), and the values are exactly those of the one-thread loop.
    const BLOCK: usize = 1 << 18;
    let s0 = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let jump = XorShiftJump::steps(BLOCK as u64);
    let mut starts = Vec::with_capacity(n.div_ceil(BLOCK));
    let mut s = s0;
    for _ in 0..n.div_ceil(BLOCK) {
        starts.push(s);
        s = jump.apply(s);
    }
    let mut out = vec![0f32; n];
    out.par_chunks_mut(BLOCK).zip(starts).for_each(|(block, mut s)| {
        for v in block {
            s = xorshift_step(s);
            *v = ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
        }
    });
    out
}

fn xorshift_step(mut s: u64) -> u64 {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    s
}

/// `steps` applications of [`xorshift_step`] as a linear map over GF(2): column `i` is the image of bit `i`.
struct XorShiftJump([u64; 64]);

impl XorShiftJump {
    fn steps(mut steps: u64) -> XorShiftJump {
        let mut result = XorShiftJump(std::array::from_fn(|i| 1u64 << i)); // identity
        let mut power = XorShiftJump(std::array::from_fn(|i| xorshift_step(1u64 << i))); // one step
        while steps > 0 {
            if steps & 1 == 1 {
                result = power.after(&result);
            }
            power = power.after(&power);
            steps >>= 1;
        }
        result
    }

    fn apply(&self, s: u64) -> u64 {
        (0..64).filter(|i| s >> i & 1 == 1).fold(0, |acc, i| acc ^ self.0[i])
    }

    /// `self` applied after `first`.
    fn after(&self, first: &XorShiftJump) -> XorShiftJump {
        XorShiftJump(std::array::from_fn(|i| self.apply(first.0[i])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_f32_is_the_one_thread_sequence() {
        let sequential = |n: usize, seed: u64| -> Vec<f32> {
            let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            (0..n)
                .map(|_| {
                    s = xorshift_step(s);
                    ((s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                })
                .collect()
        };
        for (n, seed) in [(0, 1), (1, 2), (1000, 3), ((1 << 18) - 1, 4), (1 << 18, 5), (3 * (1 << 18) + 17, 6)] {
            assert_eq!(random_f32(n, seed), sequential(n, seed), "n = {n}");
        }
        let j = XorShiftJump::steps(5);
        assert_eq!(j.apply(0xDEAD_BEEF), (0..5).fold(0xDEAD_BEEF, |s, _| xorshift_step(s)));
    }

    #[test]
    fn no_gpu_is_an_error_not_a_panic() {
        // On a machine without libcuda (CI) this must be NoGpu; on a GPU machine it opens.
        match Gpu::open(0) {
            Ok(gpu) => assert!(gpu.sm_count > 0),
            Err(e) => assert!(e.to_string().starts_with("no NVIDIA GPU/driver found"), "{e}"),
        }
    }

    #[test]
    fn latency_is_the_mean_intercept() {
        // 2 us start-up + 1 us launch on top of 1000 GB/s (1 MB = 1 us).
        let pts = [(1e6, 4.0), (4e6, 7.0), (16e6, 19.0)];
        assert!((memory_latency_fit(&pts, 1000.0, 1.0) - 2.0).abs() < 1e-12);
        assert_eq!(memory_latency_fit(&pts, 1000.0, 10.0), 0.0);
        assert_eq!(memory_latency_fit(&[], 1000.0, 1.0), 0.0);
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
        let cfg = TimingConfig { min_runs: 10, ..Default::default() };
        for f in GEMM_FORMATS {
            for (m, n, k) in [(64, 320, 256), (1, 4096, 4096), (3, 1000, 4096), (512, 1024, 2048)] {
                let meas = gpu.measure_gemm(m, n, k, f, &cfg, None).unwrap_or_else(|e| panic!("{f} {m}x{n}x{k}: {e}"));
                assert!(meas.time_us > 0.0 && meas.tflops > 0.0 && meas.host_us.is_some_and(|h| h > 0.0), "{f}");
            }
        }
        let (bw, _) = gpu.copy_bandwidth(256 << 20, &TimingConfig::default()).unwrap();
        assert!(bw > 100.0);
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU"]
    fn gpus_timed_in_parallel_threads_keep_their_samples_gated() {
        // Three threads of one process, each with its GPU, time at once: PDL kernels (compiled as they go),
        // cuBLASLt GEMMs and copies, uploading between measurements. In session 46 such threads' gates timed
        // out 1-3 times in 1000 samples, each after 10 s, so these measurements never ended; now a gate gives
        // up within `gate::timeout_for` and its sample is timed again, a few times a measurement at most.
        let cfg = TimingConfig { warmup: 2, min_runs: 20, max_runs: 300, budget_ms: 20.0, ..Default::default() };
        type Op = fn(&Gpu, &TimingConfig, usize) -> Result<String, GpuError>;
        let ops: [Op; 3] = [
            |gpu, cfg, i| {
                let pdl = gpu.compute_capability.0 >= 9;
                let (threads, unroll) = stream::ReadStreamConfig::CANDIDATES[i % 3];
                let (_, st) =
                    gpu.read_bandwidth((3 << 20) + 16 * i, stream::ReadStreamConfig::new(threads, unroll, pdl), cfg)?;
                Ok(st.sample_words())
            },
            |gpu, cfg, i| Ok(gpu.measure_gemm(1 + i % 3, 4096, 4096, GEMM_FORMATS[i % 7], cfg, None)?.kernel),
            |gpu, cfg, i| Ok(gpu.copy_bandwidth((4 << 20) + 4096 * i, cfg)?.1.sample_words()),
        ];
        std::thread::scope(|s| {
            for op in ops {
                s.spawn(move || {
                    let gpu = Gpu::open(0).unwrap();
                    for i in 0..12 {
                        let words = op(&gpu, &cfg, i).unwrap();
                        println!("{words}");
                        assert!(words.contains(", gated"), "{words}");
                    }
                });
            }
        });
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU"]
    fn gated_samples_time_the_gpu_not_a_slow_host() {
        // Each launch of a tiny memset is enqueued 200 us after the last: ungated, the events time the host's
        // pace; gated, the memsets run back to back once all are enqueued.
        let gpu = Gpu::open(0).unwrap();
        let mut buf: CudaSlice<f32> = gpu.stream.alloc_zeros(1).unwrap();
        let cfg = TimingConfig { warmup: 2, min_runs: 20, max_runs: 20, ..Default::default() };
        let st = timing::time(&gpu.ctx, &gpu.stream, &cfg, |_| {
            std::thread::sleep(std::time::Duration::from_micros(200));
            gpu.stream.memset_zeros(&mut buf)?;
            Ok(())
        })
        .unwrap();
        assert!(st.gated && st.host_us >= 200.0, "{st:?}");
        assert!(
            st.median_us < 50.0,
            "a gated memset took {} us with the host at {} us a launch",
            st.median_us,
            st.host_us
        );
        assert!(st.sample_words().ends_with(&format!("per sample, gated (host {:.2} us a launch)", st.host_us)));
    }
}
