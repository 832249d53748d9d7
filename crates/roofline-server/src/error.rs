//! Errors: [`ApiError`] (what a client sees, always JSON) and [`ServerError`] (what `serve` returns).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use roofline_core::CoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// The JSON body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, in words a user can act on.
    pub error: String,
    /// The request field at fault (`m`, `schemes[1]`, `hardware.peak_tflops.FP16`), when one is.
    pub field: Option<String>,
    /// The HTTP status code, repeated for clients that only see the body.
    pub status: u16,
}

/// An error answered to a client: a status code and an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Field at fault, if any.
    pub field: Option<String>,
    /// Message.
    pub message: String,
}

impl ApiError {
    /// A 422 naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::UNPROCESSABLE_ENTITY, field: Some(field.into()), message: message.into() }
    }

    /// An error with any status and no field.
    pub fn status(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, field: None, message: message.into() }
    }

    /// A core error seen while handling field `field` (used when the core error does not name one itself).
    pub fn core(err: CoreError, default_field: &str) -> Self {
        let field = match &err {
            CoreError::InvalidValue { field, .. } => field.clone(),
            CoreError::UnknownHardware { .. } => "hardware_key".to_string(),
            _ => default_field.to_string(),
        };
        ApiError::invalid(field, err.to_string())
    }

    /// Prefixes the field with `prefix.` (a nested object).
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = Some(match self.field {
            Some(f) => format!("{prefix}.{f}"),
            None => prefix.to_string(),
        });
        self
    }

    /// The body sent to the client.
    pub fn body(&self) -> ErrorBody {
        ErrorBody { error: self.message.clone(), field: self.field.clone(), status: self.status.as_u16() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// Errors of [`crate::serve`].
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The CORS origin is not a valid header value.
    #[error("invalid CORS origin '{0}': expected an origin such as http://localhost:3000")]
    InvalidCors(String),
    /// A served hardware profile is invalid or its key is taken.
    #[error("hardware profile: {0}")]
    Profile(String),
    /// The server stopped on an I/O error.
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}
