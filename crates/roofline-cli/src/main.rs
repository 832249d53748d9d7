//! `roofline`: how fast each number format *should* run on a GPU (roofline theory), how fast it *does*
//! run, and which to use. This binary only parses flags, calls the library crates and prints.

mod cmd;
mod hw_args;
mod output;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Roofline predictions, GPU measurements and quantization advice for transformer inference.
///
/// Start with `roofline predict` (the 4096x4096 decode GEMV on the default hardware, every format), then
/// `roofline hardware list` to pick a GPU (`--hw h100`), `roofline formats` for the number formats.
#[derive(Debug, Parser)]
#[command(name = "roofline", version, about, long_about, max_term_width = 110)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Predict one GEMM/GEMV shape under each number format (roofline: max of memory and compute time).
    Predict(cmd::predict::Args),
    /// Whole-model analysis from a config.json or preset: every op, totals, memory, KV crossover, TP.
    Model(cmd::model::Args),
    /// Recommend a scheme (format + quantization method) for a GEMM shape, with the reason.
    Recommend(cmd::recommend::Args),
    /// Tiling model of a GEMM: tile, occupancy, waves, wave quantization, L2 reuse, tiled time.
    Tiling(cmd::tiling::Args),
    /// Quantization codecs: error of every format on a matrix, and quantize throughput.
    #[command(subcommand)]
    Quant(cmd::quant::Command),
    /// Quantize a Hugging Face safetensors model into a compressed-tensors checkpoint (vLLM), per-layer error.
    Quantize(cmd::quantize::Args),
    /// Accuracy on a real model (CPU): perplexity per weight format, AWQ per layer.
    #[command(subcommand)]
    Eval(cmd::eval::Command),
    /// Measure a GEMM on this GPU (cuBLAS, CUDA events) next to its prediction, with the error.
    Measure(cmd::gpu::MeasureArgs),
    /// A grid of shapes x precisions: predictions, and with --measure the GPU's times and the errors (CSV/JSON).
    Sweep(cmd::sweep::SweepArgs),
    /// Seed-style table for one shape: precision, predicted, measured, error, bottleneck (needs a GPU).
    Compare(cmd::sweep::CompareArgs),
    /// One decode step of a model measured on the GPU (CUDA graph), next to `roofline model`'s prediction.
    ModelBench(cmd::model_bench::ModelBenchArgs),
    /// Measure this GPU's ceilings (copy bandwidth, GEMM peaks, launch overhead) into a profile TOML.
    Calibrate(cmd::gpu::CalibrateArgs),
    /// This GPU as the driver reports it.
    #[command(subcommand)]
    Gpu(GpuCommand),
    /// Draw a roofline chart (SVG or PNG): formats of a shape, a sweep's points, or every op of a model.
    Plot(cmd::plot::PlotArgs),
    /// Write a markdown report (limits, kernel placement, bottlenecks, chart) from a sweep's CSV/JSON.
    Report(cmd::plot::ReportArgs),
    /// List hardware presets or show one profile with the source of every number.
    #[command(subcommand)]
    Hardware(cmd::hardware::Command),
    /// List the number-format catalog: bits, block scales, effective bits per element.
    Formats(cmd::formats::Args),
    /// Serve the REST API and the web page on http://127.0.0.1:8000 (loopback by default).
    Serve(cmd::serve::Args),
    /// Benchmarks of roofline itself (how fast predictions are computed).
    #[command(subcommand)]
    Bench(cmd::bench::Command),
}

/// `roofline gpu ...`.
#[derive(Debug, Subcommand)]
enum GpuCommand {
    /// Name, compute capability, SMs, L2, memory, clock (from the CUDA driver).
    Info(cmd::gpu::InfoArgs),
    /// Which SMs share a GPC, measured with thread-block clusters (sm_90+): the grouping CUDA does not report.
    Gpcs(cmd::gpu::InfoArgs),
    /// NVML snapshot: clocks, power, temperature, memory, utilization, PCIe/NVLink, throttle reasons.
    Status(roofline_telemetry::cli::StatusArgs),
    /// Stream NVML status as a refreshing table (or JSON lines with --json) until Ctrl-C.
    Watch(roofline_telemetry::cli::WatchArgs),
}

fn main() -> ExitCode {
    // `--version` names the CUDA sources compiled into this binary (what a GPU run of it executes).
    let version: &'static str = Box::leak(
        format!("{} (CUDA kernel sources {})", env!("CARGO_PKG_VERSION"), roofline_gpu::kernel_sources_hash())
            .into_boxed_str(),
    );
    let matches = Cli::command().version(version).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Predict(args) => cmd::predict::run(args),
        Command::Model(args) => cmd::model::run(args),
        Command::Recommend(args) => cmd::recommend::run(args),
        Command::Tiling(args) => cmd::tiling::run(args),
        Command::Quant(c) => cmd::quant::run(c),
        Command::Quantize(args) => cmd::quantize::run(args),
        Command::Eval(c) => cmd::eval::run(c),
        Command::Measure(args) => cmd::gpu::measure(args),
        Command::Sweep(args) => cmd::sweep::sweep(args),
        Command::Compare(args) => cmd::sweep::compare(args),
        Command::ModelBench(args) => cmd::model_bench::run(args),
        Command::Calibrate(args) => cmd::gpu::calibrate(args),
        Command::Gpu(GpuCommand::Info(args)) => cmd::gpu::info(args),
        Command::Gpu(GpuCommand::Gpcs(args)) => cmd::gpu::gpcs(args),
        Command::Gpu(GpuCommand::Status(args)) => cmd::telemetry::status(args),
        Command::Gpu(GpuCommand::Watch(args)) => cmd::telemetry::watch(args),
        Command::Plot(args) => cmd::plot::plot(args),
        Command::Report(args) => cmd::plot::report(args),
        Command::Hardware(c) => cmd::hardware::run(c),
        Command::Formats(args) => cmd::formats::run(args),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Serve(args) => cmd::serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
