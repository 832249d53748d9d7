//! # roofline-eval
//!
//! What a number format costs in accuracy on a real model: a Llama-family decoder loaded from GGUF, run on
//! the CPU with candle, its linear weights fake-quantized with roofline-quant's codecs (quantize, then
//! dequantize back to f32, so the forward pass sees exactly what a kernel would), optionally with AWQ scales
//! searched on calibration activations, and perplexity on a text before and after.

pub mod awq;
pub mod error;
pub mod eval;
pub mod gguf;
pub mod model;
pub mod ppl;
pub mod quant;

pub use error::EvalError;
