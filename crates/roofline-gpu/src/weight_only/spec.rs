//! A textual override of the weight-only GEMV's kernel choice and launch plan (`roofline model-bench
//! --gemv variant=xreg,stages=4`): the variant and [`Tuning`] fields as `key=value` pairs, so a decode step
//! can be timed with a configuration the tuning tables found, without rebuilding.

use std::fmt;
use std::str::FromStr;

use super::{Tuning, Variant};

/// A variant and plan overrides for every GEMV of a run; the default keeps [`Variant::best`] and the
/// automatic plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GemvOverride {
    /// The work distribution instead of [`Variant::best`].
    pub variant: Option<Variant>,
    /// Launch-plan overrides (checked by [`Tuning::check`] when parsed).
    pub tuning: Tuning,
}

/// The keys [`GemvOverride::from_str`] takes, with what each sets (for error messages and `--help`).
pub const GEMV_KEYS: &[(&str, &str)] = &[
    ("variant", "splitk | rowperwarp | rows4 | mma | xreg | xmma"),
    ("split_k", "K splits over CTAs (1..)"),
    ("unroll", "16-byte chunks (CUDA cores) or 64-K tiles (tensor cores) per lane in flight, 1..=8"),
    ("warps", "warps per CTA, 4, 8 or 16"),
    ("pipeline", "software pipelining, true | false"),
    ("persistent", "resident-CTA grid (CUDA cores), true | false"),
    ("min_blocks", "CTAs per SM the registers must allow, 1..=16"),
    ("stage", "x and scales staged in shared memory (M <= 4), true | false"),
    ("grouped", "lanes on consecutive chunks, true | false"),
    ("rows", "XReg rows per warp and step, 2 | 4 | 8"),
    ("rows_per_cta", "XReg / XMma weight rows per CTA (multiple of 8, <= 512)"),
    ("pdl", "programmatic dependent launch, true | false"),
    ("stages", "XReg steps in flight through shared memory (cp.async), 2..=6"),
    ("tile_reduce", "XMma: reduce after every row tile, true | false"),
    ("atomic_reduce", "XMma: sums added with shared-memory atomics, reduced once per CTA, true | false"),
    ("x_smem", "XMma: x in shared memory, each warp streams whole row tiles along K, true | false"),
    ("ring", "XReg INT4, NF4, MXFP4, NVFP4, FP8, INT8, FP16 or BF16 (K up to 15360) at M = 1 to 3 (FP16 or BF16 x; K a multiple of 1024, sm_90+), and the four 4-bit formats at M = 2 to 16 on the tensor cores (FP16 or BF16 x; K up to 4096, no SwiGLU on load; from 3 rows always, at 2 where a CTA takes few row steps): rows streamed into a shared-memory ring by bulk copies, each weight decoded once for every row of x (the default at M = 1 for most shapes, at M = 2 for 4- and 8-bit weights on fast memory, and for the 4-bit formats at M = 2-16 on fast memory up to 7-24 or 128 row steps a CTA by format, x, rows and K), true | false"),
    ("xh", "XReg 4-bit at M = 1: x in f16x2 pairs, codes decoded to f16 and multiplied in f16x2, true | false"),
    ("bulk", "XMma with x in shared memory (sm_90+): each warp's weight tiles streamed through a shared-memory ring of `stages` slots by bulk copies, true | false"),
    ("cluster", "XMma with bulk rings in 2-8 K splits: a row block's splits as one thread-block cluster, summed through distributed shared memory, true | false"),
    ("balance", "XMma with bulk rings: the CTA's tiles shared evenly by its warps, sums parked in a shared-memory table (false: whole row tiles per warp, no clusters), true | false"),
    ("multicast", "XMma with bulk rings in one K split (sm_90+): the CTAs as pairs (clusters of two along N), each copying half of x's rows into both (opt-in: slower on the H100), true | false"),
    ("nf4_table", "NF4 on XMma with bulk rings: copies of the shared-memory table of code pairs its decode looks codes up in (BF16 x: pairs of the codebook's BF16 hi and lo parts, half the copies in the same bytes), 0 (byte permutes in registers) | 8 | 16 | 32 | 64 (64: one byte permute a lookup; default: 64, else 32, fewer where the shared memory is short)"),
    ("producer", "XMma with bulk rings, 4- and 8-bit weights, one K split (sm_90+): a producer warp streams the CTA's tiles in 16 KB units into one ring the warps share (`unroll` tiles a warp of each unit, `stages` slots), x staged in M rows, true | false (default: false)"),
    ("xf16", "XMma with bulk rings and BF16 x (FP8, INT8, INT4, NF4, MXFP4, NVFP4 weights): x rewritten in shared memory as f16, each row scaled by a power of two into [-1, 1) (exact for BF16 from 2^-16 of its largest value), the MMAs on FP16 x's decodes, the sums scaled back, true | false (default: true for NF4 and FP8 unfused, else false)"),
];

fn parse_variant(v: &str) -> Result<Variant, String> {
    Ok(match v.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
        "splitk" => Variant::SplitK,
        "rowperwarp" => Variant::RowPerWarp,
        "rows4" => Variant::Rows4,
        "mma" => Variant::Mma,
        "xreg" => Variant::XReg,
        "xmma" => Variant::XMma,
        _ => return Err(format!("unknown variant {v:?} (splitk, rowperwarp, rows4, mma, xreg, xmma)")),
    })
}

fn parse_u32(key: &str, v: &str) -> Result<u32, String> {
    v.parse().map_err(|_| format!("{key}={v}: expected a whole number"))
}

fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err(format!("{key}={v}: expected true or false")),
    }
}

impl FromStr for GemvOverride {
    type Err = String;

    /// `key=value` pairs separated by commas (see [`GEMV_KEYS`]); an empty string is the default.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut o = GemvOverride::default();
        let t = &mut o.tuning;
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, v) = pair.split_once('=').ok_or_else(|| format!("{pair:?}: expected key=value"))?;
            let (key, v) = (key.trim(), v.trim());
            match key {
                "variant" => o.variant = Some(parse_variant(v)?),
                "split_k" => t.split_k = Some(parse_u32(key, v)?),
                "producer" => t.producer = Some(parse_bool(key, v)?),
                "unroll" => t.unroll = Some(parse_u32(key, v)?),
                "warps" => t.warps = Some(parse_u32(key, v)?),
                "pipeline" => t.pipeline = Some(parse_bool(key, v)?),
                "persistent" => t.persistent = Some(parse_bool(key, v)?),
                "min_blocks" => t.min_blocks = Some(parse_u32(key, v)?),
                "stage" => t.stage = Some(parse_bool(key, v)?),
                "grouped" => t.grouped = Some(parse_bool(key, v)?),
                "rows" => t.rows = Some(parse_u32(key, v)?),
                "rows_per_cta" => t.rows_per_cta = Some(parse_u32(key, v)?),
                "pdl" => t.pdl = Some(parse_bool(key, v)?),
                "stages" => t.stages = Some(parse_u32(key, v)?),
                "tile_reduce" => t.tile_reduce = Some(parse_bool(key, v)?),
                "atomic_reduce" => t.atomic_reduce = Some(parse_bool(key, v)?),
                "x_smem" => t.x_smem = Some(parse_bool(key, v)?),
                "ring" => t.ring = Some(parse_bool(key, v)?),
                "xh" => t.xh = Some(parse_bool(key, v)?),
                "bulk" => t.bulk = Some(parse_bool(key, v)?),
                "cluster" => t.cluster = Some(parse_bool(key, v)?),
                "balance" => t.balance = Some(parse_bool(key, v)?),
                "multicast" => t.multicast = Some(parse_bool(key, v)?),
                "nf4_table" => t.nf4_table = Some(parse_u32(key, v)?),
                "xf16" => t.xf16 = Some(parse_bool(key, v)?),
                _ => {
                    let keys: Vec<&str> = GEMV_KEYS.iter().map(|(k, _)| *k).collect();
                    return Err(format!("unknown key {key:?} (keys: {})", keys.join(", ")));
                }
            }
        }
        o.tuning.check().map_err(|e| e.to_string())?;
        Ok(o)
    }
}

impl fmt::Display for GemvOverride {
    /// The same `key=value` form [`GemvOverride::from_str`] reads ("default" when nothing is overridden).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tuning;
        let mut parts: Vec<String> = Vec::new();
        if let Some(v) = self.variant {
            parts.push(format!("variant={}", format!("{v:?}").to_ascii_lowercase()));
        }
        let mut num = |k: &str, v: Option<u32>| {
            if let Some(v) = v {
                parts.push(format!("{k}={v}"));
            }
        };
        num("split_k", t.split_k);
        num("unroll", t.unroll);
        num("warps", t.warps);
        num("min_blocks", t.min_blocks);
        num("rows", t.rows);
        num("rows_per_cta", t.rows_per_cta);
        num("stages", t.stages);
        num("nf4_table", t.nf4_table);
        for (k, v) in [
            ("pipeline", t.pipeline),
            ("persistent", t.persistent),
            ("stage", t.stage),
            ("grouped", t.grouped),
            ("pdl", t.pdl),
            ("tile_reduce", t.tile_reduce),
            ("atomic_reduce", t.atomic_reduce),
            ("x_smem", t.x_smem),
            ("ring", t.ring),
            ("xh", t.xh),
            ("bulk", t.bulk),
            ("cluster", t.cluster),
            ("balance", t.balance),
            ("multicast", t.multicast),
            ("xf16", t.xf16),
            ("producer", t.producer),
        ] {
            if let Some(v) = v {
                parts.push(format!("{k}={v}"));
            }
        }
        if parts.is_empty() {
            f.write_str("default")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key_and_prints_it_back() {
        let s = "variant=xreg,split_k=2,unroll=2,warps=8,min_blocks=2,rows=8,rows_per_cta=64,stages=4,\
                 pipeline=true,persistent=false,stage=false,grouped=false,pdl=true,tile_reduce=true,atomic_reduce=false,x_smem=true,ring=false,xh=true,bulk=false,cluster=true,balance=false,multicast=true,nf4_table=8,xf16=true,producer=true";
        let o: GemvOverride = s.parse().unwrap();
        assert_eq!(o.variant, Some(Variant::XReg));
        let t = o.tuning;
        assert_eq!((t.split_k, t.unroll, t.warps, t.min_blocks), (Some(2), Some(2), Some(8), Some(2)));
        assert_eq!((t.rows, t.rows_per_cta, t.stages), (Some(8), Some(64), Some(4)));
        assert_eq!((t.pipeline, t.persistent, t.pdl, t.tile_reduce), (Some(true), Some(false), Some(true), Some(true)));
        assert_eq!((t.atomic_reduce, t.x_smem, t.ring, t.xh), (Some(false), Some(true), Some(false), Some(true)));
        assert_eq!((t.bulk, t.cluster, t.balance, t.multicast), (Some(false), Some(true), Some(false), Some(true)));
        assert_eq!((t.nf4_table, t.xf16, t.producer), (Some(8), Some(true), Some(true)));
        assert!("nf4_table=12".parse::<GemvOverride>().is_err());
        assert_eq!(o.to_string().parse::<GemvOverride>().unwrap(), o);
        assert_eq!(" variant = XMma , ".parse::<GemvOverride>().unwrap().variant, Some(Variant::XMma));
        assert_eq!("".parse::<GemvOverride>().unwrap(), GemvOverride::default());
        assert_eq!(GemvOverride::default().to_string(), "default");
        assert_eq!(GEMV_KEYS.len(), 25);
        // the table --help prints is the parser's: every key listed is one it reads
        for (key, _) in GEMV_KEYS {
            let e = format!("{key}=?").parse::<GemvOverride>().unwrap_err();
            assert!(!e.contains("unknown key"), "{key}: {e}");
        }
    }

    #[test]
    fn bad_specs_are_errors_that_say_why() {
        for (bad, why) in [
            ("stages", "key=value"),
            ("colour=red", "unknown key"),
            ("variant=gpu", "unknown variant"),
            ("unroll=two", "whole number"),
            ("pdl=maybe", "true or false"),
            ("unroll=9", "unroll must be 1..=8"),
            ("warps=5", "4, 8 or 16"),
            ("rows=3", "2, 4 or 8"),
            ("split_k=0", "at least 1"),
        ] {
            let e = bad.parse::<GemvOverride>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
