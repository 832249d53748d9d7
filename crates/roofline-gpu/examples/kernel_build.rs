//! Compiles the weight-only kernel the engine's default plan takes for one shape, through NVRTC, without a
//! GPU, and prints its plan key and ptxas's report (registers, spills). With `ROOFLINE_DUMP_CUBIN=DIR` the
//! CUBIN is written to DIR for `cuobjdump -sass` / `nvdisasm`: a kernel edit's instructions compared before
//! the device time is spent.
//!
//! `cargo run -p roofline-gpu --example kernel_build -- FORMAT X M N K [ARCH] [SMS] [--gemv SPEC] [--fused] [--ring]
//! [--add]`, e.g.
//! `ROOFLINE_DUMP_CUBIN=/tmp/cubin cargo run -p roofline-gpu --example kernel_build -- MXFP4 BF16 16 14336 4096`
//! (FORMAT a weight-only catalog name, X `FP16` or `BF16`, ARCH default 90, SMS default 132; `--gemv` a plan
//! override as `roofline measure --gemv` takes it, e.g. `warps=8,unroll=2`; `--fused`: the fused RMSNorm /
//! residual-add build; `--ring`: the ring GEMV at M = 1 to 16 (4-bit weights from 3 rows on the tensor cores, at 2
//! where a CTA takes few row steps; the others 1 to 3) with the fast-memory (H200)
//! defaults, planned for 4800 GB/s or `ROOFLINE_PEAK_GB_S`). NVRTC must load:
//! after `scripts/ci-deps.sh`, `LD_LIBRARY_PATH=$HOME/.cache/roofline/cuda-tools/lib`.

use roofline_gpu::weight_only::{
    compile, nvrtc_available, ring, GemvOverride, LaunchPlan, Variant, WoFormat, XDtype, MAX_M,
};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let fused = args.iter().any(|a| a == "--fused");
    let ring = args.iter().any(|a| a == "--ring");
    let add = args.iter().any(|a| a == "--add");
    args.retain(|a| a != "--fused" && a != "--ring" && a != "--add");
    let gemv: GemvOverride = match args.iter().position(|a| a == "--gemv") {
        Some(i) if i + 1 < args.len() => {
            let spec = args.remove(i + 1);
            args.remove(i);
            spec.parse().map_err(|e| format!("--gemv {spec}: {e}"))?
        }
        Some(_) => return Err("--gemv needs a plan override, e.g. warps=8,unroll=2".into()),
        None => GemvOverride::default(),
    };
    if args.len() < 5 {
        return Err("usage: kernel_build FORMAT X M N K [ARCH] [SMS] [--gemv SPEC] [--fused] [--ring] [--add]".into());
    }
    let format: WoFormat = args[0].parse()?;
    let x = XDtype::ALL
        .into_iter()
        .find(|x| x.name().eq_ignore_ascii_case(&args[1]))
        .ok_or_else(|| format!("{}: activations are FP16 or BF16", args[1]))?;
    let num = |i: usize, what: &str, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |s| s.parse().map_err(|e| format!("{what} {s}: {e}")))
    };
    let (m, n, k) = (num(2, "M", 0)?, num(3, "N", 0)?, num(4, "K", 0)?);
    if !(1..=MAX_M).contains(&m) || n == 0 || k == 0 || k % format.k_multiple() != 0 {
        return Err(format!(
            "{m}x{n}x{k}: M must be 1..={MAX_M}, N at least 1 and K a multiple of {} for {}",
            format.k_multiple(),
            format.format().name()
        ));
    }
    let arch = num(5, "ARCH", 90)? as u32;
    let sms = num(6, "SMS", 132)? as u32;
    nvrtc_available().map_err(|e| e.to_string())?;
    if ring {
        let epilogue = match (fused, add) {
            (true, _) => ring::Epilogue::Norm,
            (false, true) => ring::Epilogue::Add,
            (false, false) => ring::Epilogue::Store,
        };
        return ring_build(arch, sms, (format, x), (m, n, k), epilogue);
    }
    let variant = gemv.variant.unwrap_or_else(|| Variant::best(format, x, m));
    let plan = LaunchPlan::new_x(variant, format, x, m, n, k, sms, gemv.tuning);
    let plan = LaunchPlan { fuse: fused || plan.fuse, ..plan };
    let key = plan.key(format, x, m, arch);
    let c = compile(&key).map_err(|e| e.to_string())?;
    println!("{key:?}");
    println!(
        "entry {}: {} registers, {} spill bytes, {} bytes of CUBIN",
        key.entry(),
        c.registers.map_or("?".into(), |r| r.to_string()),
        c.spill_bytes.map_or("?".into(), |s| s.to_string()),
        c.cubin.len()
    );
    Ok(())
}

/// `--ring`: the ring GEMV the engine builds for `m x n x k` (M up to `ring::MAX_M`) on a fast-memory GPU (the
/// H200's defaults; with `--fused` the fused RMSNorm build, with `--add` the residual add's).
fn ring_build(
    arch: u32,
    sms: u32,
    fx: (WoFormat, XDtype),
    mnk: (usize, usize, usize),
    epilogue: ring::Epilogue,
) -> Result<(), String> {
    let peak = std::env::var("ROOFLINE_PEAK_GB_S").ok().and_then(|v| v.parse().ok()).unwrap_or(4800.0);
    let b = ring::compile_ring(arch, sms, peak, fx, mnk, (epilogue, ring::Input::X)).map_err(|e| e.to_string())?;
    let (m, n, k) = mnk;
    println!("ring GEMV {:?} {:?} {m}x{n}x{k}: {}", fx.0, fx.1, b.describe());
    let report: Vec<&str> = b.log.lines().filter(|l| l.contains("registers") || l.contains("spill")).collect();
    println!("{} bytes of CUBIN; ptxas: {}", b.cubin.len(), report.join(" / "));
    Ok(())
}
