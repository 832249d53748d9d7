//! Where the ring GEMV's time goes, from inside the kernel: builds the ring GEMV at one row of x with
//! `-DEXP_RING_TRACE=1` (wo_ring.cu: y then holds a timeline instead of the product), runs it on rotating
//! weight sets (more bytes than L2 holds, as `measure` does), and prints, from the last launch's timeline
//! (`roofline_gpu::weight_only::trace`), when each CTA packed x, when its producer issued each unit's copies, when
//! each unit's `full` barrier passed and when its decode was done, and when the CTA ended: per unit the median over
//! CTAs, then the tail (the end less the last unit's landing) and the CTAs that end last, with their SMs.
//!
//! `cargo run --release -p roofline-gpu --example ring_trace -- FORMAT N K [LAUNCHES] [--repeat R [--balance]]
//! [--json PATH]` on a GPU machine, e.g. `ring_trace INT4_G128 14336 4096`:
//!
//! - FORMAT: a weight-only catalog name; LAUNCHES: back-to-back launches before the traced one (default 40).
//! - `--repeat R`: traces R launches, each the last of 3 back-to-back, and prints how the CTAs' lateness repeats over
//!   them: by block index, by SM, by the CTA's start and by its unit count (`trace::Spread`).
//! - `--balance` (with `--repeat`): also the CTAs' shares of the row steps that would end them together, each CTA's in
//!   proportion to its streaming rate, at most one step more than the largest share now (`trace::balanced_shares`), as a
//!   `ROOFLINE_RING_SPLIT=` line. That variable (`ring::split_override`) runs the CUDA-core ring with those shares,
//!   here and in `measure`; set to an even split over every SM it also starts from a grid of all of them.
//! - `--gpcs` (with `--repeat`): maps the SMs to their GPCs first (`sm_map::map_gpcs`: thread-block clusters never
//!   leave a GPC) and prints the CTAs' mean lateness by GPC.
//! - `--json PATH`: writes every CTA's timeline there (with `--repeat`, every launch's CTAs, the last one's with
//!   their units).
//!
//! Each CTA's timeline takes (N / 2) / CTAs 32-bit words of y: at least 13 are needed (one unit), and units past
//! (words - 10) / 3 are not traced. Times are the SM's clock counts in us at the clock the CTAs ran at (their cycles
//! over their globaltimer ns, the median CTA's); starts and ends are the globaltimer's. The engine's own plan and
//! environment apply (`ROOFLINE_RING_AHEAD`, `ROOFLINE_RING_GROUPS`, `ROOFLINE_RING_SPLIT`, `ROOFLINE_NVRTC_EXTRA`
//! with more defines, e.g. `-DEXP_FFN_LOADONLY=1` for the loads alone, ...).

use roofline_gpu::sm_map::map_gpcs;
use roofline_gpu::weight_only::nvrtc::XDtype;
use roofline_gpu::weight_only::ring::{split_override, Epilogue, Input, RingGemv};
use roofline_gpu::weight_only::trace::{balanced_shares, traced_units, Spread, Timeline};
use roofline_gpu::weight_only::{quantize_pack, to_bits, WoFormat};
use roofline_gpu::{random_f32, Gpu};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

/// Takes `--NAME VALUE` out of `args` (None where absent).
fn take_opt(args: &mut Vec<String>, name: &str) -> Result<Option<String>, String> {
    match args.iter().position(|a| a == name) {
        Some(i) if i + 1 < args.len() => {
            let value = args.remove(i + 1);
            args.remove(i);
            Ok(Some(value))
        }
        Some(_) => Err(format!("{name} needs a value")),
        None => Ok(None),
    }
}

fn run() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let json = take_opt(&mut args, "--json")?;
    let repeat = match take_opt(&mut args, "--repeat")? {
        Some(r) => r.parse::<usize>().map_err(|e| format!("--repeat {r}: {e}")).and_then(|r| {
            if r == 0 {
                Err("--repeat 0: at least 1 launch is traced".to_string())
            } else {
                Ok(r)
            }
        })?,
        None => 1,
    };
    let mut flag = |name: &str| match args.iter().position(|a| a == name) {
        Some(i) => {
            args.remove(i);
            true
        }
        None => false,
    };
    let (balance, gpcs) = (flag("--balance"), flag("--gpcs"));
    if (balance || gpcs) && repeat < 2 {
        return Err("--balance and --gpcs need --repeat 2 or more".into());
    }
    if args.len() < 3 {
        return Err("usage: ring_trace FORMAT N K [LAUNCHES] [--repeat R [--balance]] [--json PATH]".into());
    }
    let format: WoFormat = args[0].parse()?;
    let num = |i: usize, what: &str, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |s| s.parse().map_err(|e| format!("{what} {s}: {e}")))
    };
    let (n, k, launches) = (num(1, "N", 0)?, num(2, "K", 0)?, num(3, "LAUNCHES", 40)?);
    if n == 0 || n % 8 != 0 || k == 0 || k % format.k_multiple() != 0 {
        return Err(format!("{n}x{k}: N must be a multiple of 8 and K of {}", format.k_multiple()));
    }
    let extra = std::env::var("ROOFLINE_NVRTC_EXTRA").unwrap_or_default();
    std::env::set_var("ROOFLINE_NVRTC_EXTRA", format!("{extra} -DEXP_RING_TRACE=1"));

    let gpu = Gpu::open(0).map_err(|e| e.to_string())?;
    let pf = RingGemv::new(&gpu, (format, XDtype::F16), (1, n, k), Epilogue::Store, Input::X)
        .map_err(|e| format!("{format:?} 1x{n}x{k}: {e}"))?;
    let ctas = pf.ctas as usize;
    let words = (n / 2) / ctas;
    if traced_units(words) == 0 {
        return Err(format!("1x{n}x{k} over {ctas} CTAs leaves {words} words of y a CTA for its timeline: 13 needed"));
    }
    println!(
        "{format:?} 1x{n}x{k} on {}: {ctas} CTAs, {} slots, {} K parts, {} registers; {words} words a CTA, {} units \
         traced",
        gpu.name,
        pf.slots,
        pf.parts,
        pf.registers,
        traced_units(words)
    );
    // Weight sets enough to stream more bytes than L2 holds between two uses of one.
    let bytes = n * k * format.bits() / 8;
    let sets = (2 * gpu.l2_bytes as usize).div_ceil(bytes.max(1)).clamp(1, 16);
    let s = pf.stream().clone();
    let mut dws = Vec::new();
    for i in 0..sets {
        let w: Vec<f32> = random_f32(n * k, 900 + i as u64).iter().map(|v| v / (k as f32).sqrt()).collect();
        let p = quantize_pack(format, &w, n, k).map_err(|e| e.to_string())?;
        dws.push(pf.upload(&p).map_err(|e| e.to_string())?);
    }
    let to = to_bits(XDtype::F16);
    let x: Vec<u16> = random_f32(k, 7).iter().map(|v| to(*v)).collect();
    let xd = s.clone_htod(&x).map_err(|e| e.to_string())?;
    let mut y = s.alloc_zeros::<u16>(n).map_err(|e| e.to_string())?;
    // Each CTA's units: its contiguous share of the row steps (wo_ring: even, or ROOFLINE_RING_SPLIT's), in K parts.
    let steps = n / 8;
    let shares: Vec<usize> = match split_override(steps)? {
        Some(s) if s.len() == ctas => s,
        _ => (0..ctas).map(|c| (c + 1) * steps / ctas - c * steps / ctas).collect(),
    };
    let units_of = |c: usize| shares[c] * pf.parts;
    let mut launch = 0;
    let mut timelines = Vec::with_capacity(repeat);
    for r in 0..repeat {
        let before = if r == 0 { launches } else { 2 };
        for _ in 0..=before {
            pf.run(&s, &dws[launch % sets], &xd, &mut y, 1e-5, false).map_err(|e| e.to_string())?;
            launch += 1;
        }
        let raw = s.clone_dtoh(&y).map_err(|e| e.to_string())?;
        timelines.push(Timeline::parse(&raw, ctas, units_of, gpu.clock_mhz)?);
    }
    let last = timelines.last().ok_or("no launch traced")?;
    print!("{}", last.summary(4));
    let spread = if repeat > 1 { Some(Spread::of(&timelines)?) } else { None };
    if let Some(sp) = &spread {
        print!("{}", sp.summary(8));
    }
    // (A map that fails leaves the rest: said, not fatal.)
    let map = if gpcs { map_gpcs(&gpu).map_err(|e| eprintln!("warning: no GPC map: {e}")).ok() } else { None };
    if let (Some(sp), Some(map)) = (&spread, &map) {
        println!(
            "{} GPCs (clusters of {:?} CTAs; SMs no CTA ran on: {:?}); mean lateness by GPC:",
            map.gpcs.len(),
            map.cluster_sizes,
            map.unseen
        );
        for (i, (sms, ctas, late)) in sp.by_groups(&map.gpcs).into_iter().enumerate() {
            println!("  GPC {i:2}: {sms:2} SMs, {ctas:5} CTAs over the launches, {late:+.3} us  {:?}", map.gpcs[i]);
        }
    }
    if balance {
        let cap = shares.iter().copied().max().unwrap_or(1) + 1;
        let b = balanced_shares(&timelines, steps, cap)?;
        let list: Vec<String> = b.iter().map(usize::to_string).collect();
        println!("balanced shares (at most {cap} steps a CTA):");
        println!("ROOFLINE_RING_SPLIT={}", list.join(","));
    }
    if let Some(path) = json {
        let text = match &spread {
            Some(sp) => {
                // Every launch's CTAs without their units (the LM head's would take tens of MB), the last one's whole.
                let bare: Vec<Timeline> = timelines
                    .iter()
                    .map(|t| {
                        let mut t = t.clone();
                        t.ctas.iter_mut().for_each(|c| c.units.clear());
                        t
                    })
                    .collect();
                serde_json::to_string_pretty(
                    &serde_json::json!({ "launches": bare, "last": last, "spread": sp, "gpcs": map }),
                )
            }
            None => serde_json::to_string_pretty(last),
        }
        .map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{path}: {e}"))?;
        println!("timeline written to {path}");
    }
    Ok(())
}
