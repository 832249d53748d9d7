//! Where the ring GEMV's time goes, from inside the kernel: builds the ring GEMV at one row of x with
//! `-DEXP_RING_TRACE=1` (wo_ring.cu: y then holds a timeline instead of the product), runs it on rotating
//! weight sets (more bytes than L2 holds, as `measure` does), and prints, from the last launch's timeline, when
//! each CTA packed x, when its producer issued each unit's copies, when each unit's `full` barrier passed and when
//! its decode was done, and when the CTA ended: per unit the median over CTAs, then the tail (the end less the last
//! unit's landing) and the spread of the CTAs' ends.
//!
//! `cargo run --release -p roofline-gpu --example ring_trace -- FORMAT N K [LAUNCHES]` on a GPU machine, e.g.
//! `ring_trace INT4_G128 14336 4096` (FORMAT a weight-only catalog name; LAUNCHES back-to-back launches before the
//! traced one, default 40). Each CTA's timeline takes (N / 2) / CTAs 32-bit words of y: at least 12 are needed
//! (one unit), and units past (words - 9) / 3 are not traced. Times are the SM's clock counts in us at the clock the
//! CTAs ran at (their cycles over their globaltimer ns, the median CTA's), and the ends in the globaltimer's ns. The engine's own plan and environment apply
//! (`ROOFLINE_RING_AHEAD`, `ROOFLINE_RING_GROUPS`, `ROOFLINE_NVRTC_EXTRA` with more defines, ...).

use roofline_gpu::weight_only::nvrtc::XDtype;
use roofline_gpu::weight_only::ring::{grid, Epilogue, Input, RingGemv};
use roofline_gpu::weight_only::{quantize_pack, to_bits, WoFormat};
use roofline_gpu::{random_f32, Gpu};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

/// The median of `v` (0 for none).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        return Err("usage: ring_trace FORMAT N K [LAUNCHES]".into());
    }
    let format =
        WoFormat::ALL.into_iter().find(|f| f.format().name().eq_ignore_ascii_case(&args[0])).ok_or_else(|| {
            let names: Vec<&str> = WoFormat::ALL.iter().map(|f| f.format().name()).collect();
            format!("{}: not a weight-only format (one of {})", args[0], names.join(", "))
        })?;
    let num = |i: usize, what: &str, default: usize| -> Result<usize, String> {
        args.get(i).map_or(Ok(default), |s| s.parse().map_err(|e| format!("{what} {s}: {e}")))
    };
    let (n, k, launches) = (num(1, "N", 0)?, num(2, "K", 0)?, num(3, "LAUNCHES", 40)?);
    if n % 8 != 0 || k == 0 || k % format.k_multiple() != 0 {
        return Err(format!("{n}x{k}: N must be a multiple of 8 and K of {}", format.k_multiple()));
    }
    let extra = std::env::var("ROOFLINE_NVRTC_EXTRA").unwrap_or_default();
    std::env::set_var("ROOFLINE_NVRTC_EXTRA", format!("{extra} -DEXP_RING_TRACE=1"));

    let gpu = Gpu::open(0).map_err(|e| e.to_string())?;
    let pf = RingGemv::new(&gpu, (format, XDtype::F16), (1, n, k), Epilogue::Store, Input::X)
        .map_err(|e| format!("{format:?} 1x{n}x{k}: {e}"))?;
    let ctas = pf.ctas as usize;
    let words = (n / 2) / ctas;
    if words < 12 {
        return Err(format!("{n} rows over {ctas} CTAs leave {words} words of y a CTA for its timeline (12 needed)"));
    }
    let traced = (words - 9) / 3;
    println!(
        "{format:?} 1x{n}x{k} on {}: {ctas} CTAs, {} slots, {} K parts, {} registers; {words} words a CTA, units < \
         {traced} traced",
        gpu.name, pf.slots, pf.parts, pf.registers
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
    for i in 0..=launches {
        pf.run(&s, &dws[i % sets], &xd, &mut y, 1e-5, false).map_err(|e| e.to_string())?;
    }
    let raw = s.clone_dtoh(&y).map_err(|e| e.to_string())?;
    let word = |c: usize, i: usize| -> u32 {
        let at = 2 * (c * words + i);
        u32::from(raw[at]) | (u32::from(raw[at + 1]) << 16)
    };
    // The clock the CTAs ran at: their cycles from start to end over their globaltimer ns (the median CTA's).
    let mhz = median(
        (0..ctas)
            .filter(|&c| word(c, 3) != word(c, 0))
            .map(|c| {
                1e3 * f64::from(word(c, 2).wrapping_sub(word(c, 8))) / f64::from(word(c, 3).wrapping_sub(word(c, 0)))
            })
            .collect(),
    );
    let mhz = if mhz > 0.0 { mhz } else { gpu.clock_mhz };
    println!(
        "clock: {mhz:.0} MHz (the CTAs' cycles over their globaltimer ns; the device's most: {} MHz)",
        gpu.clock_mhz
    );
    // Word i of CTA c in us from the CTA's start (word 8: thread 0's clock then).
    let us = |c: usize, i: usize| f64::from(word(c, i).wrapping_sub(word(c, 8))) / mhz;

    // Each CTA's row steps (wo_ring's contiguous shares).
    let (_, per) = grid(n, gpu.sm_count);
    let steps = n / 8;
    let units_of = |c: usize| ((c + 1) * steps / ctas - c * steps / ctas) * pf.parts;
    let t0 = (0..ctas).map(|c| word(c, 0)).min().unwrap_or(0);
    let ends: Vec<f64> = (0..ctas).map(|c| f64::from(word(c, 3).wrapping_sub(t0)) / 1e3).collect();
    let starts: Vec<f64> = (0..ctas).map(|c| f64::from(word(c, 0).wrapping_sub(t0)) / 1e3).collect();
    println!(
        "globaltimer: CTAs start within {:.2} us, end {:.2} (first) / {:.2} (median) / {:.2} (last) us after the \
         first start; at most {per} row steps a CTA",
        starts.iter().copied().fold(0.0, f64::max),
        ends.iter().copied().fold(f64::MAX, f64::min),
        median(ends.clone()),
        ends.iter().copied().fold(0.0, f64::max)
    );
    let at = |i: usize| median((0..ctas).map(|c| us(c, i)).collect());
    println!(
        "median us after a CTA's start: barriers initialized {:.2}, scale copies issued {:.2}, the CTA's barrier \
         passed {:.2}, scales landed {:.2}, x packed {:.2}",
        at(4),
        at(5),
        at(6),
        at(7),
        at(1)
    );
    println!(
        "unit  CTAs  issued  landed  decoded  (landed - issued)  (decoded - landed)   [median us from a CTA's start]"
    );
    let most = (0..ctas).map(units_of).max().unwrap_or(0).min(traced);
    for u in 0..most {
        let cs: Vec<usize> = (0..ctas).filter(|&c| units_of(c) > u).collect();
        let at = |i: usize| median(cs.iter().map(|&c| us(c, 9 + 3 * u + i)).collect());
        let gap =
            |a: usize, b: usize| median(cs.iter().map(|&c| us(c, 9 + 3 * u + b) - us(c, 9 + 3 * u + a)).collect());
        println!(
            "{u:4} {:5} {:7.2} {:7.2} {:8.2} {:12.2} {:18.2}",
            cs.len(),
            at(0),
            at(1),
            at(2),
            gap(0, 1),
            gap(1, 2)
        );
    }
    // The tail of each CTA whose units were all traced: its end less its last unit's landing, and less the last decode.
    let full: Vec<usize> = (0..ctas).filter(|&c| units_of(c) <= traced && units_of(c) > 0).collect();
    let last = |c: usize, i: usize| us(c, 9 + 3 * (units_of(c) - 1) + i);
    let lands: Vec<f64> = full.iter().map(|&c| last(c, 1)).collect();
    let decodes: Vec<f64> = full.iter().map(|&c| last(c, 2)).collect();
    let done: Vec<f64> = full.iter().map(|&c| us(c, 2)).collect();
    println!(
        "last unit ({} CTAs): landed {:.2}, decoded {:.2}, CTA done {:.2} (median us); end - last landing: median \
         {:.2}, max {:.2}",
        full.len(),
        median(lands.clone()),
        median(decodes),
        median(done.clone()),
        median(done.iter().zip(&lands).map(|(d, l)| d - l).collect()),
        done.iter().zip(&lands).map(|(d, l)| d - l).fold(0.0, f64::max)
    );
    // The CTAs that end last, against the median one.
    let mut order: Vec<usize> = (0..ctas).collect();
    order.sort_by(|a, b| ends[*b].total_cmp(&ends[*a]));
    for &c in order.iter().take(4) {
        let u = units_of(c).min(traced).max(1) - 1;
        println!(
            "CTA {c:3} ends {:.2} us (globaltimer): started {:.2}, x {:.2}, unit {u} landed {:.2} decoded {:.2}, done \
             {:.2} (us from its start)",
            ends[c],
            starts[c],
            us(c, 1),
            us(c, 10 + 3 * u),
            us(c, 11 + 3 * u),
            us(c, 2)
        );
    }
    Ok(())
}
