//! Errors of the evaluation crate.

use thiserror::Error;

/// Everything that can go wrong while loading a model, running it or quantizing it.
#[derive(Debug, Error)]
pub enum EvalError {
    /// The model file could not be opened or read.
    #[error("cannot read model file '{path}': {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a GGUF file of a supported architecture, or lacks a field.
    #[error("model '{path}': {msg}")]
    Model {
        /// The file.
        path: String,
        /// What is wrong (names the field and what was expected).
        msg: String,
    },
    /// The tokenizer could not be built or failed on the text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A bad argument (names the field, the value and what is allowed).
    #[error("invalid {field} = {value}: expected {allowed}")]
    Invalid {
        /// The argument.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// A codec refused the weights (non-finite values, unknown codec name).
    #[error(transparent)]
    Quant(#[from] roofline_quant::QuantError),
    /// The tensor library failed (a shape bug, out of memory).
    #[error("tensor computation failed: {0}")]
    Tensor(#[from] candle_core::Error),
}

impl EvalError {
    /// An [`EvalError::Invalid`] from displayable parts.
    pub fn invalid(field: &'static str, value: impl std::fmt::Display, allowed: impl Into<String>) -> Self {
        EvalError::Invalid { field, value: value.to_string(), allowed: allowed.into() }
    }
}
