//! `roofline hardware list|show`.

use anyhow::Result;
use clap::{Args, Subcommand};
use roofline_core::{ComputeClass, HardwareProfile};

use crate::hw_args::load;
use crate::output::{opt, print_json, table};

/// Subcommands of `roofline hardware`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every preset: bandwidth, memory, main dense peaks, source.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One profile (preset key or TOML file) with every number and its source.
    Show(ShowArgs),
}

/// Flags of `roofline hardware show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Preset key (or alias) or a TOML profile file.
    pub key: String,
    /// Print JSON.
    #[arg(long, conflicts_with = "toml")]
    pub json: bool,
    /// Print the profile as TOML (a starting point for your own `--hw file.toml`).
    #[arg(long)]
    pub toml: bool,
}

/// Runs `roofline hardware ...`.
pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::List { json } => list(json),
        Command::Show(args) => show(args),
    }
}

fn list(json: bool) -> Result<()> {
    let presets = HardwareProfile::presets()?;
    if json {
        return print_json(&presets);
    }
    let mut t = table(&["Key", "Name", "BW GB/s", "Mem GB", "FP16", "FP8", "FP4", "INT8", "SMs", "Source"]);
    for p in presets {
        t.add_row(vec![
            p.key.clone(),
            p.name.clone(),
            opt(Some(p.memory_bandwidth_gb_s)),
            opt(p.memory_gb),
            opt(p.peak(ComputeClass::FP16)),
            opt(p.peak(ComputeClass::FP8)),
            opt(p.peak(ComputeClass::FP4)),
            opt(p.peak(ComputeClass::INT8)),
            p.sm_count.map_or("-".into(), |s| s.to_string()),
            p.source.clone(),
        ]);
    }
    println!("{t}");
    println!("Peaks are dense TFLOP/s (TOPS for INT8); '-' = not supported natively. `roofline hardware show KEY` for sources.");
    Ok(())
}

fn show(args: ShowArgs) -> Result<()> {
    let p = load(&args.key)?;
    if args.json {
        return print_json(&p);
    }
    if args.toml {
        print!("{}", p.to_toml());
        return Ok(());
    }
    println!("{} [{}]  source: {}", p.name, p.key, p.source);
    if !p.aliases.is_empty() {
        println!("aliases: {}", p.aliases.join(", "));
    }
    let mut t = table(&["Field", "Value", "Source"]);
    let src = |f: &str| p.source_of(f).unwrap_or("-").to_string();
    let mut row = |field: &str, value: String| {
        t.add_row(vec![field.to_string(), value, src(field)]);
    };
    row("memory_bandwidth_gb_s", opt(Some(p.memory_bandwidth_gb_s)));
    let fields = [
        ("memory_gb", p.memory_gb),
        ("l2_mb", p.l2_mb),
        ("smem_per_sm_kb", p.smem_per_sm_kb),
        ("boost_clock_mhz", p.boost_clock_mhz),
        ("tdp_w", p.tdp_w),
        ("interconnect_gb_s", p.interconnect_gb_s),
        ("launch_overhead_us", p.launch_overhead_us),
        ("memory_latency_us", p.memory_latency_us),
        ("read_bandwidth_gb_s", p.read_bandwidth_gb_s),
        ("read_latency_us", p.read_latency_us),
        ("sm_count", p.sm_count.map(f64::from)),
        ("regs_per_sm", p.regs_per_sm.map(f64::from)),
        ("max_threads_per_sm", p.max_threads_per_sm.map(f64::from)),
        ("max_ctas_per_sm", p.max_ctas_per_sm.map(f64::from)),
    ];
    for (f, v) in fields {
        if let Some(v) = v {
            row(f, opt(Some(v)));
        }
    }
    for class in ComputeClass::ALL {
        let field = format!("peak_tflops.{class}");
        match p.peak(class) {
            Some(v) => {
                let ridge = p.ridge_ai(class).unwrap_or(f64::NAN);
                row(&field, format!("{} (ridge {} FLOP/B)", opt(Some(v)), opt(Some(ridge))));
            }
            None => {
                if let Some(reason) = p.unsupported.get(class.name()) {
                    row(&field, format!("unsupported: {reason}"));
                }
            }
        }
    }
    println!("{t}");
    if let Some(i) = &p.interconnect {
        println!("interconnect: {i}");
    }
    if let Some(n) = &p.notes {
        println!("notes: {n}");
    }
    Ok(())
}
