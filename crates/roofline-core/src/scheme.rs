//! Schemes: the formats of one op's operands, and the compute rate the op runs at on given hardware.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::format::Format;
use crate::hardware::{ComputeClass, HardwareProfile};

/// Formats of a GEMM's operands: `y[M,N] = x[M,K] · W[N,K]^T`, accumulated in FP32 (INT32 for integers).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scheme {
    /// Format of the weights `W` (the `N x K` operand, shared across the batch).
    pub weights: Format,
    /// Format of the activations `x` (the `M x K` operand).
    pub activations: Format,
    /// Format of the output `y`.
    pub output: Format,
}

/// How the hardware executes a scheme.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecMode {
    /// Both operands go to tensor cores in their own (common) format.
    Native,
    /// Weights are dequantized to the activation format in registers; the MMA runs at the activation rate.
    WeightOnly,
    /// The hardware has no unit for this format: operands are dequantized to a wider format first.
    Dequantized,
}

/// The compute rate a scheme runs at on some hardware, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// Tensor-core (or ALU) class whose peak applies.
    pub compute: ComputeClass,
    /// That class's peak on the hardware, TFLOP/s.
    pub peak_tflops: f64,
    /// Native, weight-only or dequantized.
    pub mode: ExecMode,
    /// Why the mode is not native, when it is not.
    pub note: Option<String>,
}

impl Scheme {
    /// The seed tables' uniform scheme for precision `f`: activations and weights in `f`, output FP16
    /// (FP32 for FP32/TF32 and FP64 for FP64, whose GEMMs write wide outputs).
    pub fn uniform(f: Format) -> Self {
        let output = match f {
            Format::FP64 => Format::FP64,
            Format::FP32 | Format::TF32 => Format::FP32,
            _ => Format::FP16,
        };
        Scheme { weights: f, activations: f, output }
    }

    /// Weight-only quantization: weights in `w`, activations and output in `a` (W4A16 = `weight_only(INT4_G128, FP16)`).
    pub fn weight_only(w: Format, a: Format) -> Self {
        Scheme { weights: w, activations: a, output: a }
    }

    /// Whether weights and activations share one format.
    pub fn is_uniform(&self) -> bool {
        self.weights == self.activations
    }

    /// A short label: `FP16` for uniform schemes, `W:INT4_G128 A:FP16` otherwise (output added when it
    /// differs from the default).
    pub fn label(&self) -> String {
        let (mut s, default_out) = if self.is_uniform() {
            (self.weights.to_string(), Scheme::uniform(self.activations).output)
        } else {
            (format!("W:{} A:{}", self.weights, self.activations), self.activations)
        };
        if self.output != default_out {
            s.push_str(&format!(" O:{}", self.output));
        }
        s
    }

    /// The compute class this scheme runs at on `hw`: native when the hardware multiplies the format,
    /// weight-only at the wider operand's rate, or dequantized to a wider format (with a note saying so).
    pub fn execution(&self, hw: &HardwareProfile) -> Result<Execution, CoreError> {
        let (w, a) = (self.weights, self.activations);
        // The wider operand sets the rate: the narrower one is converted up to it.
        let wider = if a.effective_bits() >= w.effective_bits() { a } else { w };
        let mode = if w == a || w.compute_class() == a.compute_class() {
            ExecMode::Native
        } else if matches!(wider.compute_class(), Some(c) if c == ComputeClass::FP16 || c == ComputeClass::BF16 || c == ComputeClass::FP32 || c == ComputeClass::TF32)
        {
            ExecMode::WeightOnly
        } else {
            ExecMode::Native
        };
        match wider.compute_class() {
            Some(class) => match hw.peak(class) {
                Some(peak) => Ok(Execution { compute: class, peak_tflops: peak, mode, note: None }),
                None => self.dequantized(hw, class, hw.unsupported_reason(class)),
            },
            None => self.dequantized(
                hw,
                ComputeClass::FP16,
                format!("{wider} has no tensor-core MMA on any hardware (weight-only format)"),
            ),
        }
    }

    fn dequantized(&self, hw: &HardwareProfile, wanted: ComputeClass, reason: String) -> Result<Execution, CoreError> {
        let candidates = [wanted.fallback(), ComputeClass::FP16, ComputeClass::BF16, ComputeClass::FP32];
        for class in candidates {
            if let Some(peak) = hw.peak(class) {
                return Ok(Execution {
                    compute: class,
                    peak_tflops: peak,
                    mode: ExecMode::Dequantized,
                    note: Some(format!("{reason}; modelled as dequantized to {class} before the MMA")),
                });
            }
        }
        Err(CoreError::Unsupported(format!(
            "{} cannot run on {}: {reason}, and it has no FP16/BF16/FP32 rate to dequantize to",
            self.label(),
            hw.name
        )))
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> HardwareProfile {
        HardwareProfile::preset("seed-gb10").unwrap()
    }

    #[test]
    fn uniform_native() {
        let e = Scheme::uniform(Format::FP8_E4M3).execution(&seed()).unwrap();
        assert_eq!((e.compute, e.peak_tflops, e.mode), (ComputeClass::FP8, 400.0, ExecMode::Native));
        let e = Scheme::uniform(Format::NVFP4).execution(&seed()).unwrap();
        assert_eq!((e.compute, e.peak_tflops), (ComputeClass::FP4, 800.0));
    }

    #[test]
    fn weight_only_runs_at_activation_rate() {
        let e = Scheme::weight_only(Format::INT4, Format::FP16).execution(&seed()).unwrap();
        assert_eq!((e.compute, e.mode), (ComputeClass::FP16, ExecMode::WeightOnly));
        let e = Scheme::weight_only(Format::NF4, Format::BF16).execution(&seed()).unwrap();
        assert_eq!((e.compute, e.mode), (ComputeClass::BF16, ExecMode::WeightOnly));
    }

    #[test]
    fn mixed_low_bit_runs_at_wider_rate() {
        let s = Scheme { weights: Format::INT4, activations: Format::INT8, output: Format::FP16 };
        let e = s.execution(&seed()).unwrap();
        assert_eq!((e.compute, e.mode), (ComputeClass::INT8, ExecMode::Native));
    }

    #[test]
    fn missing_unit_is_reported_not_hidden() {
        let hw = HardwareProfile::custom(1000.0, &[(ComputeClass::FP16, 100.0)]).unwrap();
        let e = Scheme::uniform(Format::FP8_E4M3).execution(&hw).unwrap();
        assert_eq!((e.compute, e.mode), (ComputeClass::FP16, ExecMode::Dequantized));
        assert!(e.note.unwrap().contains("FP8"));
        let hw = HardwareProfile::custom(1000.0, &[(ComputeClass::INT8, 100.0)]).unwrap();
        let err = Scheme::uniform(Format::FP8_E4M3).execution(&hw).unwrap_err().to_string();
        assert!(err.contains("cannot run"), "{err}");
    }

    #[test]
    fn labels() {
        assert_eq!(Scheme::uniform(Format::FP16).label(), "FP16");
        assert_eq!(Scheme::weight_only(Format::INT4_G128, Format::FP16).label(), "W:INT4_G128 A:FP16");
        let s = Scheme { weights: Format::FP8_E4M3, activations: Format::FP8_E4M3, output: Format::BF16 };
        assert_eq!(s.label(), "FP8_E4M3 O:BF16");
    }
}
