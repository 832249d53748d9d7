//! `GET /healthz`.

use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Liveness answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always `ok` when the server answers.
    pub status: String,
    /// Server version.
    pub version: String,
}

/// Liveness probe.
#[utoipa::path(get, path = "/healthz", tag = "meta", responses((status = 200, description = "The server is up", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() })
}
