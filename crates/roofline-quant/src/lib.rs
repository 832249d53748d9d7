//! # roofline-quant
//!
//! Codecs for the quantized formats of the catalog: quantize an f32 matrix (rows = output channels, blocks
//! along a row) to packed codes and scales, dequantize back, and measure the error. Rounding follows
//! `shared/golden/README.md` (round-to-nearest-even everywhere), and the tests match the golden files.

pub mod checkpoint;
pub mod codec;
pub mod metrics;
pub mod minifloat;
pub mod npy;

pub use codec::{dequantize, quantize, quantize_with, Codec, QuantError, QuantOptions, QuantizedTensor, ScaleDtype};
pub use metrics::{compare, ErrorMetrics};
