//! Shared request pieces: scheme specs, hardware lookup, range checks.

use roofline_core::{Format, HardwareProfile, Scheme};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::error::ApiError;

/// Hardware used when a request names none.
pub const DEFAULT_HARDWARE: &str = "h100";

/// Largest GEMM dimension accepted (M, N, K, batch).
pub const MAX_DIM: u64 = 1 << 24;

/// A scheme as a client may write it: a format name (`"FP8_E4M3"`, uniform), a label
/// (`"W:INT4_G128 A:FP16"`), or the operand formats.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum SchemeSpec {
    /// `FP16`, `fp8`, `NVFP4` (uniform) or `W:INT4_G128 A:FP16` (weight-only).
    Name(String),
    /// The operand formats.
    Operands {
        /// Weight format.
        weights: String,
        /// Activation format.
        activations: String,
        /// Output format (default: the activation format's default output).
        #[serde(default)]
        output: Option<String>,
    },
}

fn format(field: &str, s: &str) -> Result<Format, ApiError> {
    s.parse::<Format>().map_err(|e| ApiError::invalid(field, e.to_string()))
}

impl SchemeSpec {
    /// The scheme, or a 422 naming `field`.
    pub fn resolve(&self, field: &str) -> Result<Scheme, ApiError> {
        match self {
            SchemeSpec::Name(s) => parse_scheme(field, s),
            SchemeSpec::Operands { weights, activations, output } => {
                let w = format(&format!("{field}.weights"), weights)?;
                let a = format(&format!("{field}.activations"), activations)?;
                let mut scheme = if w == a { Scheme::uniform(w) } else { Scheme::weight_only(w, a) };
                if let Some(o) = output {
                    scheme.output = format(&format!("{field}.output"), o)?;
                }
                Ok(scheme)
            }
        }
    }
}

/// Parses `FP16` or `W:INT4_G128 A:FP16 [O:FP16]`.
pub fn parse_scheme(field: &str, s: &str) -> Result<Scheme, ApiError> {
    let s = s.trim();
    if !s.contains(':') {
        return format(field, s).map(Scheme::uniform);
    }
    let (mut w, mut a, mut o) = (None, None, None);
    for part in s.split_whitespace() {
        let (tag, name) = part.split_once(':').ok_or_else(|| {
            ApiError::invalid(field, format!("'{part}' in scheme '{s}': expected W:FORMAT, A:FORMAT or O:FORMAT"))
        })?;
        let f = format(field, name)?;
        match tag.to_ascii_uppercase().as_str() {
            "W" => w = Some(f),
            "A" => a = Some(f),
            "O" => o = Some(f),
            other => {
                return Err(ApiError::invalid(field, format!("unknown operand '{other}' in scheme '{s}' (W, A or O)")))
            }
        }
    }
    let (Some(w), Some(a)) = (w, a) else {
        return Err(ApiError::invalid(field, format!("scheme '{s}' needs both W:FORMAT and A:FORMAT")));
    };
    let mut scheme = if w == a { Scheme::uniform(w) } else { Scheme::weight_only(w, a) };
    if let Some(o) = o {
        scheme.output = o;
    }
    Ok(scheme)
}

/// The schemes of a request: `precision` (one format), `schemes` (a list), or both (precision first);
/// empty = every native format of the hardware.
pub fn schemes(precision: Option<&str>, list: &[SchemeSpec]) -> Result<Vec<Scheme>, ApiError> {
    let mut out = Vec::with_capacity(list.len() + 1);
    if let Some(p) = precision {
        out.push(parse_scheme("precision", p)?);
    }
    for (i, s) in list.iter().enumerate() {
        let scheme = s.resolve(&format!("schemes[{i}]"))?;
        if !out.contains(&scheme) {
            out.push(scheme);
        }
    }
    if out.len() > 64 {
        return Err(ApiError::invalid("schemes", format!("{} schemes given; at most 64", out.len())));
    }
    Ok(out)
}

/// The profile named `key` (or [`DEFAULT_HARDWARE`]): one of the served `profiles` (`roofline serve --profile`)
/// or a preset; a 422 naming `hardware_key` if unknown.
pub fn hardware(profiles: &[HardwareProfile], key: Option<&str>) -> Result<HardwareProfile, ApiError> {
    let key = key.map(str::trim).filter(|k| !k.is_empty()).unwrap_or(DEFAULT_HARDWARE);
    if let Some(p) = served(profiles, key) {
        return Ok(p.clone());
    }
    HardwareProfile::preset(key).map_err(|e| {
        let mut msg = e.to_string();
        if !profiles.is_empty() {
            let keys: Vec<&str> = profiles.iter().map(|p| p.key.as_str()).collect();
            msg.push_str(&format!("; served profiles: {}", keys.join(", ")));
        }
        ApiError::invalid("hardware_key", msg)
    })
}

/// The served profile whose key or alias is `key` (case-insensitive).
pub fn served<'a>(profiles: &'a [HardwareProfile], key: &str) -> Option<&'a HardwareProfile> {
    profiles.iter().find(|p| p.answers_to(key))
}

/// Checks `1 <= v <= max`, naming `field`.
pub fn in_range(field: &str, v: u64, max: u64) -> Result<u64, ApiError> {
    if v == 0 || v > max {
        Err(ApiError::invalid(field, format!("{field} = {v}: expected an integer from 1 to {max}")))
    } else {
        Ok(v)
    }
}

/// Checks a GEMM shape.
pub fn shape(m: u64, n: u64, k: u64, batch: u64) -> Result<(), ApiError> {
    in_range("m", m, MAX_DIM)?;
    in_range("n", n, MAX_DIM)?;
    in_range("k", k, MAX_DIM)?;
    in_range("batch", batch, MAX_DIM)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_schemes() {
        assert_eq!(parse_scheme("p", "fp8").unwrap(), Scheme::uniform(Format::FP8_E4M3));
        assert_eq!(
            parse_scheme("p", "W:INT4_G128 A:FP16").unwrap(),
            Scheme::weight_only(Format::INT4_G128, Format::FP16)
        );
        assert_eq!(parse_scheme("p", "W:INT4 X:FP16").unwrap_err().field.as_deref(), Some("p"));
        assert_eq!(parse_scheme("p", "W:INT4").unwrap_err().field.as_deref(), Some("p"));
        let e = schemes(None, &[SchemeSpec::Name("FP16".into()), SchemeSpec::Name("FP7".into())]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("schemes[1]"));
        let spec = SchemeSpec::Operands { weights: "nvfp4".into(), activations: "bogus".into(), output: None };
        assert_eq!(spec.resolve("schemes[0]").unwrap_err().field.as_deref(), Some("schemes[0].activations"));
    }

    #[test]
    fn hardware_keys_of_the_seeds() {
        for key in ["b10", "gb10", "b200", "h100", "a100"] {
            assert!(hardware(&[], Some(key)).is_ok(), "{key}");
        }
        assert_eq!(hardware(&[], Some("tpu9")).unwrap_err().field.as_deref(), Some("hardware_key"));
        assert_eq!(hardware(&[], None).unwrap().key, HardwareProfile::preset(DEFAULT_HARDWARE).unwrap().key);
    }
}
