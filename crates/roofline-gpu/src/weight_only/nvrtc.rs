//! Run-time compilation of the weight-only kernels with NVRTC: straight to CUBIN for the device's
//! architecture (`--gpu-architecture=sm_XY`, so no PTX JIT at load time), ptxas statistics kept, and every
//! compiled image cached for the life of the process (one compile per kernel variant and architecture).

use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};

use super::pack::WoFormat;
use crate::GpuError;

/// The kernel source (all formats; `-D` options pick one): the shared definitions, then the kernel.
pub const WEIGHT_ONLY_SOURCE: &str = concat!(
    include_str!("../kernels/wo_prims.cuh"),
    include_str!("../kernels/wo_splitk.cuh"),
    include_str!("../kernels/wo_common.cuh"),
    include_str!("../kernels/weight_only_gemv.cu")
);

/// The x-in-registers kernel for M <= 4 (see `kernels/weight_only_xreg.cu`); a key with `xreg` selects it.
pub const WEIGHT_ONLY_XREG_SOURCE: &str = concat!(
    include_str!("../kernels/wo_prims.cuh"),
    include_str!("../kernels/wo_splitk.cuh"),
    include_str!("../kernels/wo_common.cuh"),
    include_str!("../kernels/weight_only_xreg.cu")
);

/// The tensor-core source for 4-bit weights (see `kernels/weight_only_mma.cu`); a key with
/// `rows_per_warp == MMA_ROWS` selects it.
pub const WEIGHT_ONLY_MMA_SOURCE: &str = concat!(
    include_str!("../kernels/wo_prims.cuh"),
    include_str!("../kernels/wo_splitk.cuh"),
    include_str!("../kernels/weight_only_mma.cu")
);

/// Rows of W one warp of the tensor-core kernel owns (one m16n8k16 A tile).
pub const MMA_ROWS: u32 = 16;

/// Element type of x and y.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XDtype {
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
}

impl XDtype {
    /// Both.
    pub const ALL: [XDtype; 2] = [XDtype::F16, XDtype::Bf16];

    /// Canonical name.
    pub fn name(self) -> &'static str {
        match self {
            XDtype::F16 => "FP16",
            XDtype::Bf16 => "BF16",
        }
    }
}

/// Everything that selects one compiled kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelKey {
    /// Weight format.
    pub format: WoFormat,
    /// x / y element type.
    pub x: XDtype,
    /// Rows of x the kernel is compiled for (1..=16).
    pub m: u32,
    /// Weight rows per warp.
    pub rows_per_warp: u32,
    /// 16-byte chunks per lane in flight per row.
    pub unroll: u32,
    /// Warps per CTA.
    pub warps: u32,
    /// Software-pipelined loads.
    pub pipeline: bool,
    /// `__launch_bounds__` minimum CTAs per SM (register budget).
    pub min_blocks: u32,
    /// x and block scales staged in shared memory (`SX`).
    pub stage: bool,
    /// Lanes take consecutive chunks (`GRP`).
    pub grouped: bool,
    /// The x-in-registers kernel (`wo_xreg`: `rows_per_warp` is its rows per step `U`, `unroll` its chunks
    /// per lane per row `C`, `warps` its K slices per CTA).
    pub xreg: bool,
    /// Programmatic dependent launch (`PDL`, sm_90+): launched with the programmatic-serialization
    /// attribute, the kernel starts its weight loads while the previous kernel in the stream finishes.
    pub pdl: bool,
    /// `XReg`: steps of weights and scales per warp in flight through shared memory (`cp.async`, `NST`);
    /// 0 = loaded into registers.
    pub stages: u32,
    /// Compiled with the fused RMSNorm / residual add (`FUSE`; see `weight_only::Fusion`); without, the
    /// `flags` argument is ignored and the kernel is what it was before fusion existed.
    pub fuse: bool,
    /// `FUSE` builds only: SwiGLU on load compiled in (`SILU`, the x-in-registers kernel).
    pub silu: bool,
    /// `XMma`: the warps' partial sums reduced after every row tile (`TRED`).
    pub tile_reduce: bool,
    /// `XMma`: partial sums added with shared-memory atomics (`TRED=2`, over `tile_reduce`).
    pub atomic_reduce: bool,
    /// `XMma`: x in shared memory, row tiles streamed along K (`XS=2`, entry `wo_mma_xk`).
    pub x_smem: bool,
    /// `XReg` at M = 1: f16x2 products (`XH`, [`super::Tuning::xh`]).
    pub xh: bool,
    /// `XMma` with x in shared memory: weights through per-warp shared-memory rings of `stages` slots filled
    /// by bulk copies (`XB`, entry `wo_mma_xb`, sm_90+; [`super::Tuning::bulk`]).
    pub bulk: bool,
    /// With `bulk`, in K splits: the splits of a row block are one cluster, reduced through distributed
    /// shared memory (`CL`; [`super::Tuning::cluster`]).
    pub cluster: bool,
    /// With `bulk`, in one K split: CTA pairs share x's copies (`XMC`, built for sm_90a there;
    /// [`super::Tuning::multicast`]).
    pub multicast: bool,
    /// NF4 with `bulk`: copies of the shared-memory code-pair table (`NF4_TAB`; 0: decoded in registers;
    /// [`super::Tuning::nf4_table`]).
    pub nf4_table: u32,
    /// With `bulk` and BF16 x: x converted in shared memory to f16 scaled by a power of two a row, the MMAs on
    /// FP16 x's decodes (`XF16`; [`super::Tuning::xf16`]).
    pub xf16: bool,
    /// With `bulk`, in one K split: a producer warp streams the CTA's tiles into one ring shared by the warps
    /// (`XR`, entry `wo_mma_xr`; [`super::Tuning::producer`]).
    pub producer: bool,
    /// Compute capability as major * 10 + minor (90 = sm_90).
    pub arch: u32,
}

impl KernelKey {
    /// Whether this is the tensor-core kernel (`wo_mma`) rather than the CUDA-core one (`wo_gemv`).
    pub fn is_mma(&self) -> bool {
        self.rows_per_warp == MMA_ROWS
    }

    /// Whether the bulk kernel is built with x's copies shared by CTA pairs (`XMC`).
    fn xmc(&self) -> bool {
        self.multicast && self.bulk && self.x_smem && self.xreg && self.is_mma() && !self.cluster
    }

    /// Whether the build converts BF16 x to scaled f16 (`XF16`: the bulk kernel only).
    fn xf16_build(&self) -> bool {
        self.xf16 && self.x == XDtype::Bf16 && self.bulk_entry()
    }

    /// Whether the entry is a bulk-ring kernel (`wo_mma_xb`, or `wo_mma_xr` with a producer warp).
    fn bulk_entry(&self) -> bool {
        self.is_mma() && self.xreg && self.x_smem && self.bulk
    }

    /// The kernel's entry point.
    pub fn entry(&self) -> &'static str {
        if self.bulk_entry() && self.producer {
            "wo_mma_xr"
        } else if self.bulk_entry() {
            "wo_mma_xb"
        } else if self.is_mma() && self.xreg && self.x_smem {
            "wo_mma_xk"
        } else if self.is_mma() && self.xreg {
            "wo_mma_xs"
        } else if self.is_mma() {
            "wo_mma"
        } else if self.xreg {
            "wo_xreg"
        } else {
            "wo_gemv"
        }
    }

    /// NVRTC options for this key.
    pub fn options(&self) -> Vec<String> {
        let mut opts = self.common_options();
        // The tensor-core NF4 decode and the streaming kernels built on the x-in-registers source (ring GEMV,
        // fused FFN: `dot8nf4`) look the codebook up in f16 byte tables (`mma::nf4_f16_tables`).
        if self.format == WoFormat::Nf4 && (self.is_mma() || self.xreg) {
            // With BF16 x on the tensor cores: the codebook's BF16 hi parts as NF4_T*, its lo parts as NF4_L*.
            let tables = if self.is_mma() && self.x == XDtype::Bf16 && !self.xf16_build() {
                let (hi, lo) = super::mma::nf4_bf16_tables();
                opts.extend(lo.iter().enumerate().map(|(i, t)| format!("-DNF4_L{i}=0x{t:08x}u")));
                hi
            } else {
                super::mma::nf4_f16_tables()
            };
            opts.extend(tables.iter().enumerate().map(|(i, t)| format!("-DNF4_T{i}=0x{t:08x}u")));
            if self.nf4_table > 0 && self.bulk_entry() {
                opts.push(format!("-DNF4_TAB={}", self.nf4_table));
            }
        }
        opts
    }

    fn common_options(&self) -> Vec<String> {
        vec![
            // the bulk copies' multicast is an sm_90a feature on Hopper
            format!("--gpu-architecture=sm_{}{}", self.arch, if self.xmc() && self.arch == 90 { "a" } else { "" }),
            "--std=c++17".into(),
            "--ptxas-options=-v".into(),
            format!("-DFMT={}", self.format.kernel_id()),
            format!("-DXBF16={}", u32::from(self.x == XDtype::Bf16)),
            format!("-DXF16={}", u32::from(self.xf16_build())),
            format!("-DMT={}", self.m),
            format!("-DR={}", self.rows_per_warp),
            format!("-DU={}", self.unroll),
            format!("-DWARPS={}", self.warps),
            format!("-DPF={}", u32::from(self.pipeline)),
            format!("-DMINB={}", self.min_blocks),
            format!("-DSX={}", u32::from(self.stage)),
            format!("-DGRP={}", u32::from(self.grouped)),
            format!("-DC={}", self.unroll),
            format!("-DPDL={}", u32::from(self.pdl && self.arch >= 90)),
            format!("-DNST={}", self.stages),
            format!("-DXS={}", if self.xreg && self.is_mma() { 1 + u32::from(self.x_smem) } else { 0 }),
            format!("-DXH={}", u32::from(self.xh && self.xreg && !self.is_mma())),
            format!("-DXB={}", u32::from(self.bulk && self.x_smem && self.xreg && self.is_mma())),
            format!("-DCL={}", u32::from(self.cluster && self.bulk && self.x_smem && self.xreg && self.is_mma())),
            format!("-DXMC={}", u32::from(self.xmc())),
            format!("-DXR={}", u32::from(self.bulk_entry() && self.producer)),
            format!("-DKT={}", self.unroll),
            format!("-DFUSE={}", u32::from(self.fuse)),
            format!("-DSILU={}", u32::from(self.fuse && self.silu)),
            format!("-DTRED={}", if self.atomic_reduce { 2 } else { u32::from(self.tile_reduce) }),
            // Source lines in the CUBIN for profilers (no effect on the code).
            "--generate-line-info".into(),
        ]
    }
}

/// A compiled kernel image with the compiler's report.
#[derive(Debug, Clone)]
pub struct CompiledKernel {
    /// What was compiled.
    pub key: KernelKey,
    /// CUBIN for `sm_{arch}`.
    pub cubin: Vec<u8>,
    /// NVRTC's log (includes ptxas `-v` output).
    pub log: String,
    /// Registers per thread (from the ptxas log).
    pub registers: Option<u32>,
    /// Spill stores + spill loads, bytes (from the ptxas log).
    pub spill_bytes: Option<u32>,
    /// Stack frame, bytes (from the ptxas log).
    pub stack_bytes: Option<u32>,
}

/// Whether the NVRTC library can be loaded (cudarc would panic otherwise).
pub fn nvrtc_available() -> Result<(), GpuError> {
    // SAFETY: only tries to dlopen the candidate library names; nothing is called.
    if unsafe { nvrtc_sys::is_culib_present() } {
        Ok(())
    } else {
        Err(GpuError::Unsupported(
            "NVRTC (libnvrtc.so) cannot be loaded: install the CUDA NVRTC runtime or add its directory to LD_LIBRARY_PATH"
                .into(),
        ))
    }
}

fn number_before(log: &str, suffix: &str) -> Option<u32> {
    let i = log.find(suffix)?;
    log[..i].split_whitespace().last()?.parse().ok()
}

/// Parses registers, spill bytes and stack bytes out of a ptxas `-v` log.
pub fn parse_ptxas(log: &str) -> (Option<u32>, Option<u32>, Option<u32>) {
    let regs = log.find("Used ").and_then(|i| number_before(&log[i..], " registers"));
    let stores = number_before(log, " bytes spill stores");
    let loads = number_before(log, " bytes spill loads");
    let spills = match (stores, loads) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    (regs, spills, number_before(log, " bytes stack frame"))
}

fn to_string(v: Vec<c_char>) -> String {
    let bytes: Vec<u8> = v.into_iter().map(|c| c as u8).take_while(|&c| c != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles (or fetches from the process cache) the kernel for `key`. One image per key: where two threads
/// compile the same key at once (the lock is not held while NVRTC runs), the first to finish is cached and
/// both get it.
pub fn compile(key: &KernelKey) -> Result<Arc<CompiledKernel>, GpuError> {
    static CACHE: OnceLock<Mutex<HashMap<KernelKey, Arc<CompiledKernel>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(k) = cache.lock().map_err(|_| poisoned())?.get(key) {
        return Ok(k.clone());
    }
    let compiled = Arc::new(compile_uncached(key)?);
    Ok(cache.lock().map_err(|_| poisoned())?.entry(*key).or_insert(compiled).clone())
}

/// Compiles every key into the process cache, in parallel (NVRTC is thread-safe); errors are left for
/// [`compile`] to return, with their context, when a key is used.
pub fn precompile(keys: &[KernelKey]) {
    par_map(keys, |key| {
        let _ = compile(key);
    });
}

/// `f` of every item, in order, computed on up to `available_parallelism` threads (at most 16) that each take the
/// next item as they finish one: compiles of very unequal cost (a tensor-core build takes twice a CUDA-core one)
/// keep every core busy to the end.
pub fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, 16).min(items.len());
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break out };
                        out.push((i, f(item)));
                    }
                })
            })
            .collect();
        // A worker's panic is the caller's (a test's assertion inside `f`).
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Loads the CUBIN of one kernel built by [`compile_cubin`] (with its ptxas `log`) into `ctx` and returns its
/// entry `entry` with its registers per thread, allowing `smem` bytes of dynamic shared memory. Refused
/// ([`GpuError::Spills`]) when it spills: the spill bytes come from the log, or, where the log says nothing of them (NVRTC does not
/// always return the ptxas statistics), from the local memory per thread the driver reports; registers come
/// from the driver. `what` names the kernel in errors.
pub(crate) fn load_checked(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    cubin: Vec<u8>,
    log: &str,
    entry: &str,
    what: &str,
    smem: u32,
) -> Result<(cudarc::driver::CudaFunction, u32), GpuError> {
    use cudarc::driver::sys::CUfunction_attribute as A;
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin))?;
    let function = module.load_function(entry)?;
    let spills = match parse_ptxas(log).1 {
        Some(s) => s,
        None => u32::try_from(function.local_size_bytes()?).unwrap_or(u32::MAX),
    };
    if spills > 0 {
        return Err(GpuError::Spills { what: what.to_string(), bytes: spills, log: log.to_string() });
    }
    function.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)?;
    let registers = u32::try_from(function.num_regs()?).unwrap_or(0);
    Ok((function, registers))
}

/// Compiles CUDA `source` (named `file` in messages) with NVRTC `options` straight to CUBIN; returns the
/// image and the compiler log (ptxas statistics with `--ptxas-options=-v`).
pub fn compile_cubin(source: &str, file: &str, options: &[String]) -> Result<(Vec<u8>, String), GpuError> {
    nvrtc_available()?;
    let src = CString::new(source).map_err(|e| GpuError::Unsupported(e.to_string()))?;
    let name = CString::new(file).map_err(|e| GpuError::Unsupported(e.to_string()))?;
    let nv = |e: nvrtc::NvrtcError| GpuError::Unsupported(format!("NVRTC: {e}"));
    let prog = nvrtc::create_program(&src, Some(&name)).map_err(nv)?;
    // SAFETY: `prog` was just created and is destroyed exactly once below; `src` and `name` outlive it.
    let compiled = unsafe { nvrtc::compile_program(prog, options) };
    // SAFETY: as above, `prog` is live.
    let log = unsafe { nvrtc::get_program_log(prog) }.map(to_string).unwrap_or_default();
    let cubin = compiled.map_err(nv).and_then(|()| {
        let mut size = 0usize;
        // SAFETY: `prog` compiled successfully; `size` is a valid out pointer.
        unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) }.result().map_err(nv)?;
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds exactly the `size` bytes NVRTC reported for the CUBIN.
        unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()) }.result().map_err(nv)?;
        Ok(buf)
    });
    // SAFETY: `prog` is live and not used after this.
    let _ = unsafe { nvrtc::destroy_program(prog) };
    let cubin = cubin.map_err(|e| GpuError::Unsupported(format!("{e} in {file}:\n{log}")))?;
    if cubin.is_empty() {
        return Err(GpuError::Unsupported(format!("NVRTC produced no CUBIN for {file} (log: {log})")));
    }
    // (an empty value is unset, as the other ROOFLINE_* switches take it: not the working directory)
    if let Some(dir) = std::env::var_os("ROOFLINE_DUMP_CUBIN").filter(|d| !d.is_empty()) {
        dump_cubin(std::path::Path::new(&dir), file, options, &cubin, &log)?;
    }
    Ok((cubin, log))
}

/// A cubin and its compiler log, as [`compile_cubin`] returns them.
type Cubin = (Vec<u8>, String);
/// [`compile_cubin_cached`]'s key: the source's hash, its file name, the options.
type CubinKey = (u64, String, Vec<String>);

/// [`compile_cubin`] through a process-wide cache keyed by the source, its name and the options: a kernel built by
/// several engines (the ring GEMV of one shape, say) is compiled once. Failures are not cached.
pub(crate) fn compile_cubin_cached(source: &str, file: &str, options: &[String]) -> Result<Cubin, GpuError> {
    use std::hash::{Hash, Hasher};
    static CACHE: OnceLock<Mutex<HashMap<CubinKey, Cubin>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut h);
    let key = (h.finish(), file.to_string(), options.to_vec());
    if let Some(hit) = cache.lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(hit.clone());
    }
    let built = compile_cubin(source, file, options)?;
    cache.lock().map_err(|_| poisoned())?.insert(key, built.clone());
    Ok(built)
}

/// Developer hook: with `ROOFLINE_DUMP_CUBIN=DIR` (not empty), every CUBIN this process compiles is written to
/// `DIR/<file>-<hash of the options>.cubin`, its options and ptxas report beside it (`.txt`), for
/// `cuobjdump -sass` / `nvdisasm` without a GPU run (the kernels compile wherever libnvrtc loads).
fn dump_cubin(dir: &std::path::Path, file: &str, options: &[String], cubin: &[u8], log: &str) -> Result<(), GpuError> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    options.hash(&mut h);
    let stem = dir.join(format!("{}-{:016x}", file.trim_end_matches(".cu"), h.finish()));
    let write = |ext: &str, bytes: &[u8]| {
        let path = stem.with_extension(ext);
        std::fs::write(&path, bytes)
            .map_err(|e| GpuError::Unsupported(format!("ROOFLINE_DUMP_CUBIN: cannot write {}: {e}", path.display())))
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| GpuError::Unsupported(format!("ROOFLINE_DUMP_CUBIN: cannot create {}: {e}", dir.display())))?;
    write("cubin", cubin)?;
    write("txt", format!("{file}\n{}\n\n{log}", options.join(" ")).as_bytes())
}

fn poisoned() -> GpuError {
    GpuError::Unsupported("the kernel cache lock was poisoned by a panic in another thread".into())
}

/// Developer hook for profiling experiments (e.g. "-DEXP_NOMETA=1", "-DFFN_EARLY=0"): the extra NVRTC options
/// in `ROOFLINE_NVRTC_EXTRA`, whitespace separated, for every kernel this process compiles (the weight-only
/// kernels, the fused FFN and the decode kernels).
pub(crate) fn extra_options() -> Vec<String> {
    std::env::var("ROOFLINE_NVRTC_EXTRA").map(|e| e.split_whitespace().map(String::from).collect()).unwrap_or_default()
}

fn compile_uncached(key: &KernelKey) -> Result<CompiledKernel, GpuError> {
    nvrtc_available()?;
    if !(1..=super::MAX_M).contains(&(key.m as usize)) {
        return Err(GpuError::Unsupported(format!(
            "weight-only kernels take M = 1..{} rows of x, not {}",
            super::MAX_M,
            key.m
        )));
    }
    if key.arch < key.format.min_arch() {
        return Err(GpuError::Unsupported(format!(
            "{} weight-only kernel needs sm_{} or newer, this device is sm_{}",
            key.format.format(),
            key.format.min_arch(),
            key.arch
        )));
    }
    let (text, file) = if key.is_mma() {
        (WEIGHT_ONLY_MMA_SOURCE, "weight_only_mma.cu")
    } else if key.xreg {
        (WEIGHT_ONLY_XREG_SOURCE, "weight_only_xreg.cu")
    } else {
        (WEIGHT_ONLY_SOURCE, "weight_only_gemv.cu")
    };
    let mut options = key.options();
    options.extend(extra_options());
    let (cubin, log) = compile_cubin(text, file, &options).map_err(|e| match e {
        GpuError::Unsupported(m) => GpuError::Unsupported(format!("{m} (compiling {key:?})")),
        e => e,
    })?;
    let (registers, spill_bytes, stack_bytes) = parse_ptxas(&log);
    Ok(CompiledKernel { key: *key, cubin, log, registers, spill_bytes, stack_bytes })
}

/// Loads a function issues before `griddepcontrol.wait` (`ACQBULK` in SASS), from `cuobjdump -sass` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadsBeforeWait {
    /// The function (kernel entry).
    pub function: String,
    /// Read-only loads (`LDG ... .CONSTANT`): weights and their tables may come before the wait.
    pub read_only: usize,
    /// Coherent loads (`LDG` without `.CONSTANT`): what an earlier kernel writes must not.
    pub coherent: usize,
    /// Asynchronous copies to shared memory (`LDGSTS`, cp.async).
    pub async_copies: usize,
}

/// Per function of a `cuobjdump -sass` listing that waits on its programmatic dependency (has an
/// `ACQBULK`), the global loads it issues before the first wait; functions without one are left out.
pub fn loads_before_wait(sass: &str) -> Vec<LoadsBeforeWait> {
    let mut out = Vec::new();
    let mut current: Option<LoadsBeforeWait> = None;
    for line in sass.lines() {
        if let Some(name) = line.split("Function :").nth(1) {
            current =
                Some(LoadsBeforeWait { function: name.trim().into(), read_only: 0, coherent: 0, async_copies: 0 });
            continue;
        }
        let Some(f) = current.as_mut() else { continue };
        // The instruction: the text between the address comment and the encoding comment.
        let op = line.split("*/").nth(1).unwrap_or("").split("/*").next().unwrap_or("");
        let mnemonic = op.split_whitespace().find(|w| !w.starts_with('@')).unwrap_or("");
        if mnemonic.starts_with("ACQBULK") {
            out.extend(current.take());
        } else if mnemonic.starts_with("LDGSTS") {
            f.async_copies += 1;
        } else if mnemonic.starts_with("LDG.") {
            if mnemonic.contains(".CONSTANT") {
                f.read_only += 1;
            } else {
                f.coherent += 1;
            }
        }
    }
    out
}

/// The functions of `cubin` that issue a coherent load (what an earlier kernel writes) before
/// `griddepcontrol.wait`: empty where the rule of ARCHITECTURE.md (roofline-gpu) holds; `None` where no
/// cuobjdump runs ([`disassemble`]).
pub fn early_dependent_loads(cubin: &[u8]) -> Result<Option<Vec<LoadsBeforeWait>>, GpuError> {
    Ok(disassemble(cubin)?.map(|sass| loads_before_wait(&sass).into_iter().filter(|l| l.coherent > 0).collect()))
}

/// `cuobjdump -sass` of `cubin` (`ROOFLINE_CUOBJDUMP`, else `cuobjdump` on PATH; it needs `nvdisasm` beside it
/// or on PATH): `None` where no cuobjdump runs (`scripts/fetch-cuda-tools.sh` installs one, no GPU needed).
pub fn disassemble(cubin: &[u8]) -> Result<Option<String>, GpuError> {
    let tool = std::env::var("ROOFLINE_CUOBJDUMP").unwrap_or_else(|_| "cuobjdump".into());
    let io = |e: std::io::Error| GpuError::Unsupported(format!("disassembling a CUBIN: {e}"));
    // A file of its own per call (calls run on several threads at once).
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("roofline-sass-{}-{n}.cubin", std::process::id()));
    std::fs::write(&path, cubin).map_err(io)?;
    let run = std::process::Command::new(&tool).arg("-sass").arg(&path).output();
    let _ = std::fs::remove_file(&path);
    match run {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(e)),
        Ok(o) if o.status.success() => Ok(Some(String::from_utf8_lossy(&o.stdout).into_owned())),
        Ok(o) => {
            Err(GpuError::Unsupported(format!("{tool} -sass failed: {}", String::from_utf8_lossy(&o.stderr).trim())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_before_the_wait_are_counted_per_function() {
        let sass = "\t\tFunction : wo_xreg
        /*0100*/                   PREEXIT ;                                   /* 0x000000000000782d */
        /*02d0*/              @!P1 LDG.E.128.CONSTANT R60, desc[UR6][R28.64] ; /* 0x000000061c3c9981 */
        /*07d0*/              @!P1 LDG.E.NA.128.CONSTANT R12, desc[UR6][R30.64] ; /* 0x000000061e0c9981 */
        /*07e0*/                   LDG.E.128 R16, desc[UR6][R32.64] ;        /* 0x0000000620109981 */
        /*07f0*/                   LDGSTS.E.64 [R27], desc[UR6][R32.64], !P4 ; /* 0x0000000020000000 */
        /*0800*/                   LDGDEPBAR ;                                 /* 0x0000000000000000 */
        /*1290*/                   ACQBULK ;                                   /* 0x000000000000782e */
        /*12a0*/                   LDG.E.128 R20, desc[UR6][R28.64] ;        /* 0x000000061c149981 */
\t\tFunction : no_pdl
        /*0010*/                   LDG.E.128 R20, desc[UR6][R28.64] ;        /* 0x000000061c149981 */
";
        let got = loads_before_wait(sass);
        assert_eq!(
            got,
            vec![LoadsBeforeWait { function: "wo_xreg".into(), read_only: 2, coherent: 1, async_copies: 1 }]
        );
    }

    #[test]
    fn ptxas_log_is_parsed() {
        let log = "ptxas info    : 0 bytes gmem\nptxas info    : Compiling entry function 'wo_gemv' for 'sm_90'\n\
                   ptxas info    : Function properties for wo_gemv\n    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
                   ptxas info    : Used 72 registers, used 1 barriers, 420 bytes cmem[0]\n";
        assert_eq!(parse_ptxas(log), (Some(72), Some(16), Some(8)));
        assert_eq!(parse_ptxas("nothing here"), (None, None, None));
    }

    #[test]
    fn options_select_the_variant() {
        let key = KernelKey {
            format: WoFormat::Nvfp4,
            x: XDtype::Bf16,
            m: 3,
            rows_per_warp: 2,
            unroll: 4,
            warps: 4,
            pipeline: true,
            min_blocks: 2,
            stage: true,
            grouped: true,
            xreg: false,
            pdl: true,
            stages: 0,
            fuse: true,
            silu: false,
            tile_reduce: false,
            atomic_reduce: false,
            x_smem: false,
            xh: false,
            bulk: false,
            cluster: false,
            multicast: false,
            nf4_table: 0,
            xf16: false,
            producer: false,
            arch: 90,
        };
        let o = key.options();
        for want in [
            "--gpu-architecture=sm_90",
            "-DFMT=7",
            "-DXBF16=1",
            "-DMT=3",
            "-DR=2",
            "-DU=4",
            "-DWARPS=4",
            "-DPF=1",
            "-DMINB=2",
            "-DSX=1",
            "-DGRP=1",
            "-DPDL=1",
            "-DFUSE=1",
        ] {
            assert!(o.iter().any(|x| x == want), "{want} missing from {o:?}");
        }
    }
}
