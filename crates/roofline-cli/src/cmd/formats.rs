//! `roofline formats`: the number-format catalog.

use anyhow::Result;
use clap::Args as ClapArgs;
use roofline_core::Format;

use crate::output::{print_json, table};

/// Flags of `roofline formats`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Print the catalog as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `roofline formats`.
pub fn run(args: Args) -> Result<()> {
    if args.json {
        let specs: Vec<_> = Format::ALL
            .iter()
            .map(|f| serde_json::json!({ "spec": f.spec(), "effective_bits": f.effective_bits(), "compute_class": f.compute_class() }))
            .collect();
        return print_json(&specs);
    }
    let mut t = table(&[
        "Format",
        "Bits",
        "E/M",
        "Max",
        "Block",
        "Block scale",
        "Tensor scale",
        "Eff. bits",
        "MMA",
        "Description",
    ]);
    for f in Format::ALL {
        let s = f.spec();
        let em = match (s.exponent_bits, s.mantissa_bits) {
            (Some(e), Some(m)) => format!("E{e}M{m}"),
            _ => "-".into(),
        };
        let block = s.block.map_or("-".into(), |b| b.size.to_string());
        let scale = s.block.map_or("-".into(), |b| {
            if b.zero_bits > 0 {
                format!("{:?} + {}-bit zero", b.scale, b.zero_bits)
            } else {
                format!("{:?}", b.scale)
            }
        });
        t.add_row(vec![
            f.name().to_string(),
            if s.storage_bits != s.value_bits {
                format!("{} ({} used)", s.storage_bits, s.value_bits)
            } else {
                s.storage_bits.to_string()
            },
            em,
            format!("{}", s.max_finite),
            block,
            scale,
            s.tensor_scale.map_or("-".into(), |t| format!("{t:?}")),
            format!("{}", f.effective_bits()),
            f.compute_class().map_or("weight-only".into(), |c| c.to_string()),
            s.description.to_string(),
        ]);
    }
    println!("{t}");
    println!("Eff. bits = storage bits per element of a long row, block scales and zero points included.");
    Ok(())
}
