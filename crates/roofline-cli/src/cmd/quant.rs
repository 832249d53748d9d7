//! `roofline quant compare|bench`: codec error and speed.

use std::time::Instant;

use anyhow::Result;
use clap::{Args, Subcommand};
use roofline_core::Format;
use roofline_quant::metrics::gaussian_matrix;
use roofline_quant::{compare, quantize, Codec};

use super::parse_size;
use crate::output::{print_json, table};

/// Subcommands of `roofline quant`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// SQNR, relative error, max error and storage of every quantized format on one matrix.
    Compare(CompareArgs),
    /// Quantize throughput per format (GB/s of FP32 input, all cores).
    Bench(BenchArgs),
}

/// Flags of `roofline quant compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Rows (output channels) of the random Gaussian matrix.
    #[arg(long, default_value = "256", value_parser = parse_size)]
    pub rows: u64,
    /// Columns (reduction dimension; blocks run along it).
    #[arg(long, default_value = "4096", value_parser = parse_size)]
    pub cols: u64,
    /// Seed of the matrix.
    #[arg(long, default_value = "1")]
    pub seed: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `roofline quant bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Rows of the matrix.
    #[arg(long, default_value = "4096", value_parser = parse_size)]
    pub rows: u64,
    /// Columns of the matrix.
    #[arg(long, default_value = "4096", value_parser = parse_size)]
    pub cols: u64,
    /// Timed repetitions per format (median reported).
    #[arg(long, default_value = "5", value_parser = parse_size)]
    pub reps: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `roofline quant ...`.
pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Compare(a) => run_compare(a),
        Command::Bench(a) => run_bench(a),
    }
}

fn dims(rows: u64, cols: u64) -> Result<(usize, usize)> {
    let r = usize::try_from(rows)?;
    let c = usize::try_from(cols)?;
    if r.checked_mul(c).is_none_or(|n| n > 1 << 30) {
        anyhow::bail!("--rows x --cols = {rows} x {cols} is too large: at most 2^30 elements");
    }
    Ok((r, c))
}

fn run_compare(a: CompareArgs) -> Result<()> {
    let (r, c) = dims(a.rows, a.cols)?;
    let x = gaussian_matrix(r, c, a.seed);
    let rows = compare(&x, r, c)?;
    if a.json {
        return print_json(&rows);
    }
    println!("{r} x {c} standard-normal matrix (seed {}), quantize -> dequantize", a.seed);
    let mut t = table(&["Format", "Bits/elem", "Storage bytes", "SQNR dB", "Rel. Frobenius", "Max abs err"]);
    for row in rows {
        t.add_row(vec![
            row.format.to_string(),
            format!("{:.3}", row.bits_per_element),
            row.storage_bytes.to_string(),
            format!("{:.2}", row.metrics.sqnr_db),
            format!("{:.3e}", row.metrics.rel_frobenius),
            format!("{:.3e}", row.metrics.max_abs),
        ]);
    }
    println!("{t}");
    Ok(())
}

fn run_bench(a: BenchArgs) -> Result<()> {
    let (r, c) = dims(a.rows, a.cols)?;
    let x = gaussian_matrix(r, c, 3);
    let gb = (r * c * 4) as f64 / 1e9;
    let mut rows = Vec::new();
    for f in Format::ALL {
        let Ok(codec) = Codec::for_format(f) else { continue };
        quantize(codec, &x, r, c)?; // warm-up
        let mut times: Vec<f64> = (0..a.reps)
            .map(|_| {
                let start = Instant::now();
                let q = quantize(codec, &x, r, c);
                let t = start.elapsed().as_secs_f64();
                std::hint::black_box(q).map(|_| t)
            })
            .collect::<Result<_, _>>()?;
        times.sort_by(f64::total_cmp);
        rows.push((f, times[times.len() / 2], gb / times[times.len() / 2]));
    }
    if a.json {
        let v: Vec<_> =
            rows.iter().map(|(f, s, gbs)| serde_json::json!({"format": f, "median_s": s, "input_gb_s": gbs})).collect();
        return print_json(&serde_json::json!({"rows": r, "cols": c, "threads": rayon_threads(), "results": v}));
    }
    println!("quantize {r} x {c} FP32 ({gb:.3} GB) on {} threads, median of {}", rayon_threads(), a.reps);
    let mut t = table(&["Format", "Median ms", "GB/s of FP32 input"]);
    for (f, s, gbs) in rows {
        t.add_row(vec![f.to_string(), format!("{:.2}", s * 1e3), format!("{gbs:.3}")]);
    }
    println!("{t}");
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
