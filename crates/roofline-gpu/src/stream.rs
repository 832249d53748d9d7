//! The read-stream calibration: how fast this GPU reads device memory with nothing else to do.
//!
//! A device-to-device copy (`Gpu::copy_bandwidth`) reads and writes, and turns the bus between the two; a
//! decode GEMV only reads. Its roof is the read stream's: `kernels/read_stream.cu` loads every 16-byte vector
//! of a buffer once (the host checks the XOR of all its words), launched back to back the way the GEMVs are
//! (programmatic dependent launch on sm_90+). `roofline calibrate` times it from 8 MiB to 1 GiB and fits
//! time = intercept + bytes / bandwidth ([`linear_fit`]); the slope is the profile's `read_bandwidth_gb_s`,
//! the intercept less the launch overhead its `read_latency_us`.

use std::ffi::c_void;

use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DevicePtrMut};

use crate::timing::{self, TimingConfig, TimingStats};
use crate::weight_only::launch_ex;
use crate::weight_only::nvrtc::{compile_cubin, extra_options, load_checked};
use crate::{random_f32, Gpu, GpuError};

/// The kernel source.
const READ_STREAM_SOURCE: &str = include_str!("kernels/read_stream.cu");

/// One build of the read-stream kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadStreamConfig {
    /// Threads per CTA.
    pub threads: u32,
    /// 16-byte loads in flight per thread.
    pub unroll: u32,
    /// Programmatic dependent launch (sm_90+).
    pub pdl: bool,
    /// Each CTA reads only its contiguous share of the buffer, as the ring GEMV's CTAs take their rows
    /// (a diagnostic, [`crate::bulk_stream`]); `false`: the grid-stride interleave `calibrate` fits.
    pub blocked: bool,
}

impl ReadStreamConfig {
    /// The builds `calibrate` tries (the fastest at 256 MiB is fitted): CTA sizes and loads in flight that
    /// span 32 to 128 KB of reads in flight per SM at full occupancy.
    pub const CANDIDATES: [(u32, u32); 6] = [(256, 4), (256, 8), (512, 4), (512, 8), (1024, 4), (1024, 8)];

    /// A grid-stride build (`calibrate`'s kind).
    pub fn new(threads: u32, unroll: u32, pdl: bool) -> Self {
        ReadStreamConfig { threads, unroll, pdl, blocked: false }
    }

    /// `512 threads x 4 loads, PDL`.
    pub fn label(&self) -> String {
        format!(
            "{} threads x {} loads{}{}",
            self.threads,
            self.unroll,
            if self.pdl { ", PDL" } else { "" },
            if self.blocked { ", per-CTA shares" } else { "" }
        )
    }
}

/// The fitted read stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadStreamFit {
    /// The kernel build that was fitted.
    pub config: ReadStreamConfig,
    /// Bytes read per second, GB/s: the fit's slope.
    pub bandwidth_gb_s: f64,
    /// Time of a launch that reads nothing: the fit's intercept, microseconds (launch overhead included).
    pub intercept_us: f64,
    /// (bytes read, median microseconds per launch) of each size.
    pub points: Vec<(f64, f64)>,
}

/// Least-squares line through `(x, y)` points: `(slope, intercept)`, or `None` for fewer than two distinct x.
pub fn linear_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    Some((slope, my - slope * mx))
}

/// XOR of every 32-bit word: what the kernel's CTAs' words fold to.
fn xor_words(words: &[u32]) -> u32 {
    words.iter().fold(0, |a, w| a ^ w)
}

/// The buffers one size is read from: each a random fill, rotated so that they exceed twice the L2.
pub(crate) struct ReadSets {
    srcs: Vec<CudaSlice<u32>>,
    /// The XOR of each buffer's words, as the host computed it.
    expected: Vec<u32>,
    /// Bytes of each buffer.
    bytes: usize,
}

/// A loaded build with its grid.
struct ReadKernel {
    function: CudaFunction,
    config: ReadStreamConfig,
    /// CTAs per launch: every SM full.
    ctas: u32,
}

/// NVRTC options of one build for compute capability `arch` (`90` = sm_90).
fn options(arch: u32, config: ReadStreamConfig) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture=sm_{arch}"),
        "--std=c++17".into(),
        "--ptxas-options=-v".into(),
        format!("-DTHREADS={}", config.threads),
        format!("-DUNROLL={}", config.unroll),
        format!("-DPDL={}", u32::from(config.pdl)),
        format!("-DBLOCKED={}", u32::from(config.blocked)),
    ];
    opts.extend(extra_options());
    opts
}

impl Gpu {
    fn read_kernel(&self, config: ReadStreamConfig) -> Result<ReadKernel, GpuError> {
        let (major, minor) = self.compute_capability;
        if config.pdl && major < 9 {
            return Err(GpuError::Unsupported("programmatic dependent launch needs sm_90 or newer".into()));
        }
        let arch = (major * 10 + minor) as u32;
        let (cubin, log) = compile_cubin(READ_STREAM_SOURCE, "read_stream.cu", &options(arch, config))?;
        let (function, _) = load_checked(&self.ctx, cubin, &log, "read_stream", "the read-stream kernel", 0)?;
        let resident = function.occupancy_max_active_blocks_per_multiprocessor(config.threads, 0, None)?.max(1);
        Ok(ReadKernel { function, config, ctas: resident * self.sm_count })
    }

    /// Launches `kernel` over `src` (a multiple of 16 bytes), one word per CTA into `out`.
    fn launch_read(&self, kernel: &ReadKernel, src: &CudaSlice<u32>, out: &mut CudaSlice<u32>) -> Result<(), GpuError> {
        let stream = &self.stream;
        let mut n16 = (src.len() / 4) as u64;
        let (mut src_p, _g0) = src.device_ptr(stream);
        let (mut out_p, _g1) = out.device_ptr_mut(stream);
        let mut params: [*mut c_void; 3] = [(&raw mut src_p).cast(), (&raw mut n16).cast(), (&raw mut out_p).cast()];
        // SAFETY: the parameters match `read_stream(const uint4*, unsigned long long, unsigned*)` in order and
        // type, each pointing at a local that lives until the launch returns; `src` holds `n16` 16-byte vectors
        // (its length is a multiple of 4 words, checked by the caller) and `out` one word per CTA of the grid.
        // The guards `_g*` keep the buffers' stream ordering until the launch is queued. PDL is requested only
        // for a build compiled with it, whose `griddepcontrol.wait` precedes its one store.
        unsafe {
            launch_ex(
                stream,
                &kernel.function,
                (kernel.ctas, 1, 1),
                (kernel.config.threads, 1, 1),
                0,
                kernel.config.pdl,
                &mut params,
            )
        }
    }

    /// Read bandwidth, GB/s (bytes read over the median time per launch), of the read-stream build `config`
    /// over `bytes` (rounded down to 16). Buffers smaller than the L2 rotate over enough copies to exceed
    /// twice its size, so DRAM is measured, not the cache. Each buffer's result is checked first.
    pub fn read_bandwidth(
        &self,
        bytes: usize,
        config: ReadStreamConfig,
        cfg: &TimingConfig,
    ) -> Result<(f64, TimingStats), GpuError> {
        let kernel = self.read_kernel(config)?;
        self.read_bandwidth_of(&kernel, &self.read_sets(bytes)?, cfg)
    }

    /// Random buffers of `bytes` (rounded down to 16, at least 16), as many as rotate past twice the L2.
    pub(crate) fn read_sets(&self, bytes: usize) -> Result<ReadSets, GpuError> {
        let words = (bytes / 16).max(1) * 4;
        let sets = self.rotation_sets(words * 4);
        let mut srcs = Vec::with_capacity(sets);
        let mut expected = Vec::with_capacity(sets);
        for s in 0..sets {
            let host: Vec<u32> = random_f32(words, 101 + s as u64).into_iter().map(f32::to_bits).collect();
            expected.push(xor_words(&host));
            srcs.push(self.stream.clone_htod(&host)?);
        }
        Ok(ReadSets { srcs, expected, bytes: words * 4 })
    }

    fn read_bandwidth_of(
        &self,
        kernel: &ReadKernel,
        sets: &ReadSets,
        cfg: &TimingConfig,
    ) -> Result<(f64, TimingStats), GpuError> {
        let what = format!("read-stream kernel ({})", kernel.config.label());
        self.checked_fold_bandwidth(sets, kernel.ctas, &what, cfg, |src, out| self.launch_read(kernel, src, out))
    }

    /// Bandwidth (bytes of a buffer over the median time per launch, GB/s) of a kernel that folds a buffer by
    /// XOR into one word per CTA (`ctas` of them): `launch` runs it on a buffer into the words. Each buffer of
    /// `sets` is checked first (the words must fold to the host's XOR; `what` names the kernel in the error),
    /// then the launches rotate over them. The read stream's and the bulk-copy stream's.
    pub(crate) fn checked_fold_bandwidth(
        &self,
        sets: &ReadSets,
        ctas: u32,
        what: &str,
        cfg: &TimingConfig,
        launch: impl Fn(&CudaSlice<u32>, &mut CudaSlice<u32>) -> Result<(), GpuError>,
    ) -> Result<(f64, TimingStats), GpuError> {
        let mut out: CudaSlice<u32> = self.stream.alloc_zeros(ctas as usize)?;
        for (src, want) in sets.srcs.iter().zip(&sets.expected) {
            launch(src, &mut out)?;
            let got = xor_words(&self.stream.clone_dtoh(&out)?);
            if got != *want {
                return Err(GpuError::Incorrect(format!(
                    "{what} folded {} bytes to {got:#010x}, the host to {want:#010x}",
                    sets.bytes
                )));
            }
        }
        let n = sets.srcs.len();
        let stats = timing::time(&self.ctx, &self.stream, cfg, |i| launch(&sets.srcs[i % n], &mut out))?;
        Ok((sets.bytes as f64 / (stats.median_us * 1e3), stats))
    }

    /// The read-stream roof: the fastest of [`ReadStreamConfig::CANDIDATES`] at 256 MiB, then its time per
    /// launch from 8 MiB to 1 GiB fitted by a line. PDL on sm_90+, as the GEMV kernels launch. `progress` gets
    /// a line per measurement.
    pub fn read_stream(&self, cfg: &TimingConfig, mut progress: impl FnMut(&str)) -> Result<ReadStreamFit, GpuError> {
        let pdl = self.compute_capability.0 >= 9;
        let mut best: Option<(f64, ReadKernel)> = None;
        let sets = self.read_sets(256 << 20)?; // every build reads the same buffers
        for (threads, unroll) in ReadStreamConfig::CANDIDATES {
            let kernel = self.read_kernel(ReadStreamConfig::new(threads, unroll, pdl))?;
            let (bw, _) = self.read_bandwidth_of(&kernel, &sets, cfg)?;
            progress(&format!("read stream {}: {bw:.0} GB/s at 256 MiB", kernel.config.label()));
            if best.as_ref().is_none_or(|(b, _)| bw > *b) {
                best = Some((bw, kernel));
            }
        }
        drop(sets); // 256 MiB freed before the fit allocates its own
        let (_, kernel) = best.ok_or_else(|| GpuError::Unsupported("no read-stream build".into()))?;
        self.read_stream_fit(&kernel, cfg, &mut progress)
    }

    /// Fits the read stream of one build (see [`Gpu::read_stream`]).
    pub fn read_stream_fit_of(
        &self,
        config: ReadStreamConfig,
        cfg: &TimingConfig,
        mut progress: impl FnMut(&str),
    ) -> Result<ReadStreamFit, GpuError> {
        let kernel = self.read_kernel(config)?;
        self.read_stream_fit(&kernel, cfg, &mut progress)
    }

    fn read_stream_fit(
        &self,
        kernel: &ReadKernel,
        cfg: &TimingConfig,
        progress: &mut impl FnMut(&str),
    ) -> Result<ReadStreamFit, GpuError> {
        let mut points = Vec::new();
        for mib in [8usize, 16, 32, 64, 128, 256, 512, 1024] {
            let (bw, stats) = self.read_bandwidth_of(kernel, &self.read_sets(mib << 20)?, cfg)?;
            progress(&format!(
                "read stream {}: {mib} MiB in {:.2} us ({bw:.0} GB/s)",
                kernel.config.label(),
                stats.median_us
            ));
            points.push(((mib << 20) as f64, stats.median_us));
        }
        let (slope, intercept_us) = linear_fit(&points)
            .filter(|(slope, _)| *slope > 0.0)
            .ok_or_else(|| GpuError::Incorrect("read-stream times do not grow with bytes".into()))?;
        Ok(ReadStreamFit { config: kernel.config, bandwidth_gb_s: 1.0 / (slope * 1e3), intercept_us, points })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_through_exact_points_is_found() {
        // 2 us + 1 us per MB (1000 GB/s).
        let pts: Vec<(f64, f64)> = [1e6, 4e6, 16e6, 64e6].iter().map(|b| (*b, 2.0 + b / 1e6)).collect();
        let (slope, intercept) = linear_fit(&pts).unwrap();
        assert!((1.0 / (slope * 1e3) - 1000.0).abs() < 1e-6, "{slope}");
        assert!((intercept - 2.0).abs() < 1e-9, "{intercept}");
        assert_eq!(linear_fit(&pts[..1]), None);
        assert_eq!(linear_fit(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }

    #[test]
    fn every_build_compiles_without_spills() {
        if let Err(e) = crate::weight_only::nvrtc_available() {
            eprintln!("SKIPPED every_build_compiles_without_spills: {e}");
            return;
        }
        for (arch, pdl) in [(90, true), (90, false), (80, false)] {
            for ((threads, unroll), blocked) in
                ReadStreamConfig::CANDIDATES.into_iter().zip([false, true].into_iter().cycle())
            {
                let config = ReadStreamConfig { blocked, ..ReadStreamConfig::new(threads, unroll, pdl) };
                let (cubin, log) = compile_cubin(READ_STREAM_SOURCE, "read_stream.cu", &options(arch, config)).unwrap();
                assert!(!cubin.is_empty());
                let (_, spills, _) = crate::weight_only::nvrtc::parse_ptxas(&log);
                assert_eq!(spills.unwrap_or(0), 0, "sm_{arch} {}: {log}", config.label());
            }
        }
    }

    #[test]
    fn xor_folds_every_word() {
        assert_eq!(xor_words(&[]), 0);
        assert_eq!(xor_words(&[0b1100, 0b1010, 0b0001]), 0b0111);
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU"]
    fn read_stream_is_checked_and_faster_than_nothing() {
        let gpu = Gpu::open(0).unwrap();
        let cfg = TimingConfig { min_runs: 10, ..Default::default() };
        let pdl = gpu.compute_capability.0 >= 9;
        for (threads, unroll) in ReadStreamConfig::CANDIDATES {
            // Sizes that are not a whole number of grid strides exercise the remainder loop.
            for bytes in [16, 4096 + 16, 3 << 20, 64 << 20] {
                let (bw, _) = gpu.read_bandwidth(bytes, ReadStreamConfig::new(threads, unroll, pdl), &cfg).unwrap();
                assert!(bw > 0.0);
            }
        }
    }

    /// Probe (`bench/exp-session38.sh sizes`): the fastest build's time per launch at each byte count of
    /// READ_SIZES (comma-separated bytes; default the weight bytes of issue 11's INT4 / FP8 / FP16 GEMVs at
    /// 1x4096x4096 and 1x14336x4096), twice each; `AT` lines. The roof a GEMV of those bytes stands under.
    #[test]
    #[ignore = "needs an NVIDIA GPU"]
    fn read_stream_at_sizes() {
        let gpu = Gpu::open(0).unwrap();
        let pdl = gpu.compute_capability.0 >= 9;
        let sizes: Vec<usize> = std::env::var("READ_SIZES")
            .ok()
            .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![8_912_896, 16_777_216, 33_554_432, 31_195_136, 58_720_256, 117_440_512]);
        let cfg = TimingConfig::default();
        for rep in 0..2 {
            for &bytes in &sizes {
                let (bw, stats) = gpu.read_bandwidth(bytes, ReadStreamConfig::new(512, 4, pdl), &cfg).unwrap();
                println!("AT {rep} {bytes} bytes: {:.2} us, {bw:.0} GB/s", stats.median_us);
            }
        }
    }

    /// Probe (`bench/exp-session38.sh nopdl`): one build's fit with and without programmatic dependent launch,
    /// twice each, alternately; `AB` lines. CAL_THREADS / CAL_UNROLL pick the build (default 512 x 8).
    #[test]
    #[ignore = "needs an NVIDIA GPU (sm_90+)"]
    fn read_stream_pdl_ab() {
        let gpu = Gpu::open(0).unwrap();
        let env = |k: &str, d: u32| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
        let (threads, unroll) = (env("CAL_THREADS", 512), env("CAL_UNROLL", 8));
        for _ in 0..2 {
            for pdl in [true, false] {
                let cfg = TimingConfig::default();
                let fit = gpu.read_stream_fit_of(ReadStreamConfig::new(threads, unroll, pdl), &cfg, |_| {}).unwrap();
                let pts: Vec<String> = fit.points.iter().map(|(b, t)| format!("{}M={t:.2}", *b as u64 >> 20)).collect();
                println!(
                    "AB {}: {:.0} GB/s, intercept {:.2} us; {}",
                    fit.config.label(),
                    fit.bandwidth_gb_s,
                    fit.intercept_us,
                    pts.join(" ")
                );
            }
        }
    }
}
