//! `roofline quant compare|roundtrip|bench`: codec error (on a Gaussian matrix or an `.npy` weight) and speed.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use roofline_quant::metrics::{compare_codecs, gaussian_matrix};
use roofline_quant::npy::{read_matrix, write_matrix, Matrix};
use roofline_quant::{compare, dequantize, quantize, Codec, ErrorMetrics};

use super::parse_size;
use crate::output::{print_json, table};

/// Subcommands of `roofline quant`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// SQNR, relative error, max error and storage of every quantized format on one matrix (a random
    /// Gaussian one, or a 2-D .npy weight with --in).
    Compare(CompareArgs),
    /// Quantize a 2-D .npy weight (float32/float16/bfloat16) with one format, write the dequantized matrix as
    /// float32 .npy, and print the error and storage.
    Roundtrip(RoundtripArgs),
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
    /// A 2-D .npy weight (rows = output channels) to compare on instead of the Gaussian matrix.
    #[arg(long = "in", value_name = "FILE.npy", conflicts_with_all = ["rows", "cols", "seed"])]
    pub input: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Flags of `roofline quant roundtrip`.
#[derive(Debug, Args)]
#[command(
    after_help = "Formats: every quantized catalog format (NVFP4, MXFP4, INT4_G128, FP8_E4M3, NF4, ...) and the variants INT4_G32, INT4_G64, INT2_G32, INT2_G128, FP8_E4M3_CHANNEL, FP8_E5M2_CHANNEL, NF4_DQ.\n\nExample:\n  roofline quant roundtrip --format nvfp4 --in w.npy --out w_nvfp4.npy --json"
)]
pub struct RoundtripArgs {
    /// Format or codec variant.
    #[arg(long)]
    pub format: String,
    /// Input .npy (2-D float32, float16 or bfloat16).
    #[arg(long = "in", value_name = "FILE.npy")]
    pub input: PathBuf,
    /// Output .npy: the dequantized matrix, float32.
    #[arg(long, value_name = "FILE.npy")]
    pub out: PathBuf,
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
        Command::Roundtrip(a) => run_roundtrip(a),
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

fn load(path: &std::path::Path) -> Result<Matrix> {
    let m = read_matrix(path)?;
    if m.rows.checked_mul(m.cols).is_none_or(|n| n > 1 << 30 || n == 0) {
        anyhow::bail!("{}: {} x {} is empty or too large: at most 2^30 elements", path.display(), m.rows, m.cols);
    }
    Ok(m)
}

fn run_compare(a: CompareArgs) -> Result<()> {
    let (x, r, c, what) = match &a.input {
        Some(path) => {
            let m = load(path)?;
            let what = format!("{} ({} x {} {:?})", path.display(), m.rows, m.cols, m.dtype);
            (m.data, m.rows, m.cols, what)
        }
        None => {
            let (r, c) = dims(a.rows, a.cols)?;
            (gaussian_matrix(r, c, a.seed), r, c, format!("{r} x {c} standard-normal matrix (seed {})", a.seed))
        }
    };
    let rows = compare(&x, r, c)?;
    if a.json {
        return print_json(&rows);
    }
    println!("{what}, quantize -> dequantize");
    let mut t = table(&["Format", "Bits/elem", "Storage bytes", "SQNR dB", "Rel. Frobenius", "Max abs err"]);
    for row in rows {
        t.add_row(vec![
            row.name.clone(),
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

fn run_roundtrip(a: RoundtripArgs) -> Result<()> {
    let codec = Codec::parse(&a.format)?;
    let m = load(&a.input)?;
    let q = quantize(codec, &m.data, m.rows, m.cols).with_context(|| format!("quantizing {}", a.input.display()))?;
    let y = dequantize(&q);
    write_matrix(&a.out, &y, m.rows, m.cols)?;
    let metrics = ErrorMetrics::of(&m.data, &y);
    let storage_bytes = codec.storage_bytes(m.rows, m.cols);
    let bits = storage_bytes as f64 * 8.0 / (m.rows * m.cols) as f64;
    if a.json {
        return print_json(&serde_json::json!({
            "format": codec.name(), "codec": codec, "input": a.input, "output": a.out,
            "input_dtype": format!("{:?}", m.dtype), "rows": m.rows, "cols": m.cols,
            "metrics": metrics, "storage_bytes": storage_bytes, "bits_per_element": bits,
        }));
    }
    println!(
        "{} ({} x {} {:?}) -> {} -> {} (float32)",
        a.input.display(),
        m.rows,
        m.cols,
        m.dtype,
        codec.name(),
        a.out.display()
    );
    let mut t = table(&["Format", "SQNR dB", "Rel. Frobenius", "Max abs err", "Storage bytes", "Bits/elem"]);
    t.add_row(vec![
        codec.name(),
        format!("{:.2}", metrics.sqnr_db),
        format!("{:.3e}", metrics.rel_frobenius),
        format!("{:.3e}", metrics.max_abs),
        storage_bytes.to_string(),
        format!("{bits:.3}"),
    ]);
    println!("{t}");
    Ok(())
}

fn run_bench(a: BenchArgs) -> Result<()> {
    let (r, c) = dims(a.rows, a.cols)?;
    let x = gaussian_matrix(r, c, 3);
    let gb = (r * c * 4) as f64 / 1e9;
    let mut rows = Vec::new();
    for (f, _, codec) in compare_codecs() {
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
