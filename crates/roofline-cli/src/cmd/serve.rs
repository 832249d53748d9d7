//! `roofline serve`: the REST API and web page (roofline-server) on a local address.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use roofline_server::ServerConfig;

/// Flags of `roofline serve`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "The page at http://127.0.0.1:8000/ has a GEMM analyzer, the interactive roofline chart, the \
recommendation, a model panel and the NVML panel. The API lives under /api (JSON in and out, the same types as \
the CLI's --json) and is described by /api/openapi.json; docs/API.md has curl examples. Ctrl-C stops the server \
after the open requests finish.\n\nExamples:\n  roofline serve                                   # http://127.0.0.1:8000/ (loopback only)\n  roofline serve --addr 127.0.0.1:9000\n  roofline serve --cors http://localhost:3000      # allow one origin (CORS is off by default)\n  roofline serve --profile measured.toml           # your `roofline calibrate` profile on the page and the API\n  curl -X POST 'http://127.0.0.1:8000/api/analyze?hardware_key=b10' \\\n       -H 'content-type: application/json' \\\n       -d '{\"M\":1,\"N\":4096,\"K\":4096,\"precision\":\"FP16\"}'")]
pub struct Args {
    /// Address to listen on. The default is loopback only; a non-loopback address (0.0.0.0:8000) exposes
    /// the API to the network and prints a warning.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub addr: SocketAddr,
    /// Allow cross-origin browser requests from ORIGIN (e.g. http://localhost:3000). Off by default; `*`
    /// is refused.
    #[arg(long, value_name = "ORIGIN")]
    pub cors: Option<String>,
    /// Largest request body, KiB (bigger bodies get a 413).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub body_limit_kib: u64,
    /// Time limit of one request, seconds (over it: a 503 JSON error).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub request_timeout_s: u64,
    /// GPU measurements allowed to wait while one runs (more get a 503).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub measure_queue: u64,
    /// A hardware profile to serve beside the presets (repeatable): a TOML file as `roofline calibrate`
    /// writes it, or `roofline hardware show KEY --toml` edited. Listed first on the page and by
    /// /api/hardware, chosen by its `key` wherever `hardware_key` is taken; its key must not be a preset's.
    #[arg(long = "profile", value_name = "FILE")]
    pub profiles: Vec<std::path::PathBuf>,
}

/// Runs `roofline serve` until Ctrl-C or SIGTERM.
pub fn run(args: Args) -> Result<()> {
    let config = ServerConfig {
        addr: args.addr,
        cors_origin: args.cors,
        body_limit_bytes: usize::try_from(args.body_limit_kib * 1024).context("--body-limit-kib is too large")?,
        request_timeout: Duration::from_secs(args.request_timeout_s),
        measure_queue: usize::try_from(args.measure_queue).context("--measure-queue is too large")?,
        // Read as `--hw FILE` reads a profile (a preset key given here is refused by the server as taken).
        profiles: args
            .profiles
            .iter()
            .map(|path| crate::hw_args::load(&path.display().to_string()))
            .collect::<Result<_>>()?,
    };
    roofline_server::serve_blocking(config)?;
    Ok(())
}
