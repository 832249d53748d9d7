//! One module per capability; each exposes its handlers and request types.

pub mod analyze;
pub mod formats;
pub mod hardware;
pub mod health;
pub mod measure;
pub mod model;
pub mod nvml;
pub mod plot;
pub mod recommend;
pub mod sweep;
pub mod tiling;
