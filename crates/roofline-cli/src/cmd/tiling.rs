//! `roofline tiling`: tile shape, occupancy, waves and L2 reuse of a GEMM, next to the plain roofline.

use anyhow::Result;
use clap::Args as ClapArgs;
use roofline_core::tiling::{render_tiling, tiling_report, TileShape, TilingRequest};
use roofline_core::{Format, Scheme};

use super::{parse_format, parse_size};
use crate::hw_args::HwArgs;
use crate::output::print_json;

/// Flags of `roofline tiling`.
#[derive(Debug, ClapArgs)]
#[command(
    after_help = "Examples:\n  roofline tiling --hw h100                          # 4096^3 FP16: best tile, waves, L2 reuse\n  roofline tiling --hw h100 --tile 128x128x64        # one tile only (1024 tiles, 7.76 waves on 132 SMs)\n  roofline tiling --hw a100 --m 1 --precision int8 --json"
)]
pub struct Args {
    /// Rows of the activations (tokens).
    #[arg(long, default_value = "4096", value_parser = parse_size, allow_hyphen_values = true)]
    pub m: u64,
    /// Output features.
    #[arg(long, default_value = "4096", value_parser = parse_size, allow_hyphen_values = true)]
    pub n: u64,
    /// Reduction dimension.
    #[arg(long, default_value = "4096", value_parser = parse_size, allow_hyphen_values = true)]
    pub k: u64,
    /// Independent products sharing the weights.
    #[arg(long, default_value = "1", value_parser = parse_size, allow_hyphen_values = true)]
    pub batch: u64,
    /// Uniform precision of the operands (default FP16).
    #[arg(long, short = 'p', value_parser = parse_format, conflicts_with = "weights")]
    pub precision: Option<Format>,
    /// Weight format of a weight-only scheme (with --activations, default FP16).
    #[arg(long, value_parser = parse_format)]
    pub weights: Option<Format>,
    /// Activation format of a weight-only scheme.
    #[arg(long, value_parser = parse_format, requires = "weights")]
    pub activations: Option<Format>,
    /// Evaluate only this tile, BMxBN or BMxBNxBK (e.g. 128x128x64), instead of the candidate set.
    #[arg(long)]
    pub tile: Option<TileShape>,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `roofline tiling`.
pub fn run(args: Args) -> Result<()> {
    let hw = args.hw.resolve()?;
    let scheme = match (args.precision, args.weights) {
        (Some(p), _) => Some(Scheme::uniform(p)),
        (None, Some(w)) => Some(Scheme::weight_only(w, args.activations.unwrap_or(Format::FP16))),
        (None, None) => None,
    };
    let req = TilingRequest { m: args.m, n: args.n, k: args.k, batch: args.batch, scheme, tile: args.tile };
    let report = tiling_report(&req, &hw)?;
    if args.json {
        print_json(&report)
    } else {
        print!("{}", render_tiling(&report));
        Ok(())
    }
}
