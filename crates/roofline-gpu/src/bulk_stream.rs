//! The bulk-copy read stream: a diagnostic of how fast the ring GEMV's machinery reads memory when it has
//! nothing to decode.
//!
//! The read-stream roof ([`crate::stream`]) is plain 16-byte loads in a grid-stride loop. The ring GEMV
//! instead gives each CTA (one a SM) a contiguous share of the rows and streams it with bulk copies
//! (`cp.async.bulk`) into a ring of shared-memory slots, a few in flight. `kernels/bulk_stream.cu` does that
//! and no more: a producer warp copies `unit` bytes a slot, consumer warps fold each slot's words by XOR and
//! release it. Timed beside the read stream at the same bytes (grid-stride and per-CTA shares,
//! [`ReadStreamConfig::blocked`](crate::stream::ReadStreamConfig)), it tells which of the bulk copies, their
//! count in flight or the partition loses bandwidth (`bulk_stream_sweep` below, `bench/exp-session39.sh`).

use std::ffi::c_void;

use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DevicePtrMut};

use crate::stream::ReadSets;
use crate::timing::{TimingConfig, TimingStats};
use crate::weight_only::launch_ex;
use crate::weight_only::nvrtc::{compile_cubin, extra_options, load_checked};
use crate::{Gpu, GpuError};

/// The kernel's source: the shared primitives (mbarriers, bulk copies, PDL), then the kernel.
fn source() -> String {
    format!("{}\n{}", include_str!("kernels/wo_prims.cuh"), include_str!("kernels/bulk_stream.cu"))
}

/// Most dynamic shared memory a CTA of the ring may take (the H100's and H200's 227 KB).
pub const MAX_RING_BYTES: u32 = 227 * 1024;

/// One build and grid of the bulk-copy read stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkStreamConfig {
    /// Bytes of one bulk copy (a ring slot), a multiple of 16.
    pub unit: u32,
    /// Ring slots.
    pub slots: u32,
    /// Units in flight: the producer issues unit u once unit u - `ahead` has landed; 0 or `slots` and more:
    /// as many as the ring has free slots.
    pub ahead: u32,
    /// Consumer warps (the producer is one more).
    pub consumers: u32,
    /// CTAs; 0: one per SM.
    pub ctas: u32,
    /// Programmatic dependent launch.
    pub pdl: bool,
}

impl BulkStreamConfig {
    /// `16 KB x 9 slots, 2 in flight, 12 consumers, 128 CTAs`.
    pub fn label(&self) -> String {
        let ahead =
            if self.ahead == 0 || self.ahead >= self.slots { "all".to_string() } else { self.ahead.to_string() };
        let ctas = if self.ctas == 0 { "one a SM".to_string() } else { format!("{} CTAs", self.ctas) };
        format!(
            "{} B x {} slots, {ahead} in flight, {} consumers, {ctas}{}",
            self.unit,
            self.slots,
            self.consumers,
            if self.pdl { ", PDL" } else { "" }
        )
    }

    /// Why this build cannot run, if it cannot.
    fn invalid(&self) -> Option<String> {
        if self.unit == 0 || self.unit % 16 != 0 {
            return Some(format!("a unit of {} bytes is not a positive multiple of 16", self.unit));
        }
        if self.slots == 0 || u64::from(self.slots) * u64::from(self.unit) > u64::from(MAX_RING_BYTES) {
            return Some(format!("{} slots of {} bytes do not fit {MAX_RING_BYTES} bytes", self.slots, self.unit));
        }
        if !(1..=31).contains(&self.consumers) {
            return Some(format!("{} consumer warps (1 to 31)", self.consumers));
        }
        None
    }
}

/// NVRTC options of one build for compute capability `arch`.
fn options(arch: u32, c: BulkStreamConfig) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture=sm_{arch}"),
        "--std=c++17".into(),
        "--ptxas-options=-v".into(),
        format!("-DUNIT={}", c.unit),
        format!("-DSLOTS={}", c.slots),
        format!("-DAHEAD={}", c.ahead),
        format!("-DCONSUMERS={}", c.consumers),
        format!("-DPDL={}", u32::from(c.pdl)),
    ];
    opts.extend(extra_options());
    opts
}

/// A loaded build with its grid.
struct BulkKernel {
    function: CudaFunction,
    config: BulkStreamConfig,
    ctas: u32,
}

impl Gpu {
    fn bulk_kernel(&self, config: BulkStreamConfig) -> Result<BulkKernel, GpuError> {
        let (major, minor) = self.compute_capability;
        if major < 9 {
            return Err(GpuError::Unsupported("bulk copies (cp.async.bulk) need sm_90 or newer".into()));
        }
        if let Some(why) = config.invalid() {
            return Err(GpuError::Unsupported(format!("bulk read stream: {why}")));
        }
        let arch = (major * 10 + minor) as u32;
        let (cubin, log) = compile_cubin(&source(), "bulk_stream.cu", &options(arch, config))?;
        let smem = config.slots * config.unit;
        let (function, _) = load_checked(&self.ctx, cubin, &log, "bulk_stream", "the bulk read stream", smem)?;
        let ctas = if config.ctas == 0 { self.sm_count } else { config.ctas };
        Ok(BulkKernel { function, config, ctas })
    }

    fn launch_bulk(&self, k: &BulkKernel, src: &CudaSlice<u32>, out: &mut CudaSlice<u32>) -> Result<(), GpuError> {
        let stream = &self.stream;
        let mut units = (src.len() as u64 * 4) / u64::from(k.config.unit);
        let (mut src_p, _g0) = src.device_ptr(stream);
        let (mut out_p, _g1) = out.device_ptr_mut(stream);
        let mut params: [*mut c_void; 3] = [(&raw mut src_p).cast(), (&raw mut units).cast(), (&raw mut out_p).cast()];
        // SAFETY: the parameters match `bulk_stream(const u8*, unsigned long long, unsigned*)` in order and type,
        // each pointing at a local that lives until the launch returns; `src` holds `units` whole units (its bytes
        // are a multiple of the unit, made so by the caller) and `out` one word per CTA of the grid. The CTA's
        // dynamic shared memory is its ring (`slots x unit`, allowed by `load_checked`). The guards `_g*` keep the
        // buffers' stream ordering until the launch is queued; with PDL, `griddepcontrol.wait` precedes the
        // kernel's one store.
        unsafe {
            launch_ex(
                stream,
                &k.function,
                (k.ctas, 1, 1),
                ((k.config.consumers + 1) * 32, 1, 1),
                k.config.slots * k.config.unit,
                k.config.pdl,
                &mut params,
            )
        }
    }

    /// Read bandwidth, GB/s (bytes over the median time per launch), of the bulk-copy stream `config` over
    /// `bytes` rounded down to whole units (at least one). Buffers rotate past twice the L2, and each buffer's
    /// result is checked against the host's XOR before timing.
    pub fn bulk_read_bandwidth(
        &self,
        bytes: usize,
        config: BulkStreamConfig,
        cfg: &TimingConfig,
    ) -> Result<(f64, TimingStats), GpuError> {
        let kernel = self.bulk_kernel(config)?;
        let unit = config.unit as usize;
        let sets = self.read_sets((bytes / unit).max(1) * unit)?;
        self.bulk_bandwidth_of(&kernel, &sets, cfg)
    }

    fn bulk_bandwidth_of(
        &self,
        kernel: &BulkKernel,
        sets: &ReadSets,
        cfg: &TimingConfig,
    ) -> Result<(f64, TimingStats), GpuError> {
        let what = format!("bulk read stream ({})", kernel.config.label());
        self.checked_fold_bandwidth(sets, kernel.ctas, &what, cfg, |src, out| self.launch_bulk(kernel, src, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::ReadStreamConfig;

    fn config(unit: u32, slots: u32, ahead: u32) -> BulkStreamConfig {
        BulkStreamConfig { unit, slots, ahead, consumers: 12, ctas: 0, pdl: true }
    }

    #[test]
    fn labels_and_limits() {
        assert_eq!(config(16384, 9, 2).label(), "16384 B x 9 slots, 2 in flight, 12 consumers, one a SM, PDL");
        assert!(config(16384, 9, 0).label().contains("all in flight"));
        assert!(config(16384, 9, 9).label().contains("all in flight"));
        assert_eq!(config(16384, 9, 2).invalid(), None);
        assert!(config(16384, 15, 2).invalid().unwrap().contains("do not fit"));
        assert!(config(1000, 9, 2).invalid().unwrap().contains("multiple of 16"));
        assert!(BulkStreamConfig { consumers: 0, ..config(4096, 4, 0) }.invalid().is_some());
    }

    #[test]
    fn builds_compile_without_spills() {
        if let Err(e) = crate::weight_only::nvrtc_available() {
            eprintln!("SKIPPED builds_compile_without_spills: {e}");
            return;
        }
        for c in [config(16384, 9, 2), config(4096, 36, 0), BulkStreamConfig { pdl: false, ..config(32768, 4, 1) }] {
            let (cubin, log) = compile_cubin(&source(), "bulk_stream.cu", &options(90, c)).unwrap();
            assert!(!cubin.is_empty());
            let (_, spills, _) = crate::weight_only::nvrtc::parse_ptxas(&log);
            assert_eq!(spills.unwrap_or(0), 0, "{}: {log}", c.label());
        }
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU (sm_90+)"]
    fn bulk_stream_is_checked() {
        let gpu = Gpu::open(0).unwrap();
        let cfg = TimingConfig { min_runs: 10, budget_ms: 200.0, ..Default::default() };
        // Unit counts that do not divide among the CTAs, fewer units than CTAs, and every in-flight mode.
        for c in [config(16384, 9, 2), config(4096, 36, 0), config(8192, 12, 1), config(32768, 4, 3)] {
            for units in [1usize, 131, 1000, 1793] {
                let (bw, _) = gpu.bulk_read_bandwidth(units * c.unit as usize, c, &cfg).unwrap();
                assert!(bw > 0.0, "{}", c.label());
            }
        }
    }

    fn env_list(key: &str, default: &str) -> Vec<u32> {
        std::env::var(key).unwrap_or_else(|_| default.into()).split(',').filter_map(|s| s.trim().parse().ok()).collect()
    }

    /// Probe (`bench/exp-session39.sh bulk`): at BULK_BYTES (default 29,360,128, INT4 1x14336x4096's codes),
    /// the read stream (grid-stride and per-CTA shares), then the bulk stream for each of BULK_UNITS x
    /// BULK_AHEAD x BULK_CTAS (0: one a SM) in a ring of BULK_RING bytes (default 147,456: the INT4 ring's 9
    /// slots of 16 KB), BULK_CONSUMERS warps (default 12); `BULK` lines, each config twice.
    #[test]
    #[ignore = "needs an NVIDIA GPU (sm_90+)"]
    fn bulk_stream_sweep() {
        let gpu = Gpu::open(0).unwrap();
        let bytes = env_list("BULK_BYTES", "29360128")[0] as usize;
        let ring = env_list("BULK_RING", "147456")[0];
        let consumers = env_list("BULK_CONSUMERS", "12")[0];
        let cfg = TimingConfig { budget_ms: 600.0, ..Default::default() };
        for rep in 0..2 {
            for (threads, unroll, blocked) in [(512, 4, false), (512, 4, true), (416, 4, true), (512, 8, true)] {
                let c = ReadStreamConfig { blocked, ..ReadStreamConfig::new(threads, unroll, true) };
                let (bw, st) = gpu.read_bandwidth(bytes, c, &cfg).unwrap();
                println!("BULK {rep} read {}: {:.2} us, {bw:.0} GB/s", c.label(), st.median_us);
            }
            for unit in env_list("BULK_UNITS", "4096,8192,16384,32768") {
                for ahead in env_list("BULK_AHEAD", "0,1,2,3,4,6") {
                    for ctas in env_list("BULK_CTAS", "128,0") {
                        let slots = (ring / unit).clamp(1, 64);
                        let c = BulkStreamConfig { unit, slots, ahead, consumers, ctas, pdl: true };
                        match gpu.bulk_read_bandwidth(bytes, c, &cfg) {
                            Ok((bw, st)) => {
                                println!("BULK {rep} bulk {}: {:.2} us, {bw:.0} GB/s", c.label(), st.median_us)
                            }
                            Err(e) => println!("BULK {rep} bulk {}: {e}", c.label()),
                        }
                    }
                }
            }
        }
    }
}
